//! The NVTX section of `stats --stream`: one accumulator per range name (its closed ranges' durations, the GPU time
//! and ops launched inside), numbered names folded by family as soon as a family has more than
//! [`FAMILY_ROWS_CAP`] names ([`super::families`]): the members' accumulators merge into the family's, and the
//! family's later ranges go straight to it. State grows with the rows of the answer, not with the steps.
//!
//! A name becomes its family's member when its first range closes, as in the whole-trace path, which counts closed
//! ranges' names. GPU work comes per closed range instance once final ([`Batch::range_work`]: launched inside it on
//! its thread, nested instances included), as the whole-trace path counts it: an instance never closed (the step
//! running when the recording stopped) adds nothing, and its work counts in the closed instances around it.

use std::collections::HashMap;

use cutr_model::numbered::{FAMILY_ROWS_CAP, family_label, split_number};
use cutr_model::stream::Batch;
use cutr_model::{Filter, NameId, Trace};
use rustc_hash::FxHashMap;

use super::RangeStats;
use super::families::NvtxNames;
use super::order_stats::Durations;

/// One row: its closed ranges' durations (none yet for a name seen only around GPU work), the GPU time and ops
/// launched inside, and how many names it holds when it is a family.
struct Row {
    name: String,
    durations: Option<Durations>,
    gpu_ns: u64,
    gpu_ops: u64,
    folded_names: u64,
}

/// A family of numbered names: its members while they are listed one by one, then its row.
enum Family {
    Listed(Vec<NameId>),
    Folded(usize),
}

/// Names whose row is found through their family's text, kept between two clears: the names of a window.
const ROUTE_CACHE: usize = 4096;

/// The NVTX rows of a stream.
pub(super) struct NvtxRows {
    cap: usize,
    mode: NvtxNames,
    /// Rows in order of first sight; a member's row is emptied (`None`) when its family folds.
    rows: Vec<Option<Row>>,
    /// The row of each name not folded into a family.
    by_name: FxHashMap<NameId, usize>,
    families: HashMap<String, Family>,
    /// Names of folded families seen lately, and their family's row.
    routed: FxHashMap<NameId, usize>,
    /// One bit per name: whether a range of it has closed (a family's members are counted once each: a bit a
    /// name of the trace, ~1 MiB for 9 million steps).
    closed: Vec<u64>,
}

impl NvtxRows {
    /// Rows keeping up to `cap` durations each for exact medians.
    pub(super) fn new(cap: usize, mode: NvtxNames) -> NvtxRows {
        NvtxRows {
            cap,
            mode,
            rows: Vec::new(),
            by_name: FxHashMap::default(),
            families: HashMap::new(),
            routed: FxHashMap::default(),
            closed: Vec::new(),
        }
    }

    /// Closed ranges' durations by name, and each closed range instance's GPU work (launched inside it on its
    /// thread, nested instances included, as a load counts it: [`Batch::range_work`]) added to its name's row
    /// once final. An instance never closed adds nothing, as in a load; `window` keeps the instances a
    /// `--start/--end` load keeps.
    pub(super) fn add(&mut self, t: &Trace, b: &Batch, window: &Filter) {
        for r in &b.ranges {
            let row = self.closed_row(t, r.name);
            let cap = self.cap;
            self.row_mut(row).durations.get_or_insert_with(|| Durations::new(cap)).add(r.end - r.start);
        }
        for w in b.range_work.iter().filter(|w| window.keeps(w.range.start, w.range.end)) {
            let row = self.gpu_row(t, w.range.name);
            let row = self.row_mut(row);
            row.gpu_ns = row.gpu_ns.saturating_add(w.gpu_ns);
            row.gpu_ops += w.gpu_ops;
        }
    }

    /// The report's rows: those with closed ranges, summarized (`estimated` counts the sketched medians).
    pub(super) fn finish(self, estimated: &mut u64) -> Vec<RangeStats> {
        self.rows
            .into_iter()
            .flatten()
            .filter_map(|row| {
                let d = row.durations?;
                *estimated += d.estimated() as u64;
                Some(RangeStats {
                    time: d.summary(row.name),
                    folded_names: row.folded_names,
                    gpu_ns: row.gpu_ns,
                    gpu_ops: row.gpu_ops,
                    ..Default::default()
                })
            })
            .collect()
    }

    fn row_mut(&mut self, row: usize) -> &mut Row {
        self.rows[row].as_mut().expect("a row in use is never emptied")
    }

    /// The family prefix of a name, when names are folded.
    fn prefix<'t>(&self, t: &'t Trace, name: NameId) -> Option<&'t str> {
        match self.mode {
            NvtxNames::Fold => split_number(t.names.get(name)).map(|(prefix, _)| prefix),
            NvtxNames::Each => None,
        }
    }

    /// The row of a folded family's member, or `None` for a name in no folded family.
    fn folded_row(&mut self, t: &Trace, name: NameId) -> Option<usize> {
        if let Some(&row) = self.routed.get(&name) {
            return Some(row);
        }
        let Family::Folded(row) = *self.families.get(self.prefix(t, name)?)? else { return None };
        if self.routed.len() >= ROUTE_CACHE {
            self.routed.clear();
        }
        self.routed.insert(name, row);
        Some(row)
    }

    /// A new row of one name.
    fn new_row(&mut self, t: &Trace, name: NameId) -> usize {
        self.rows.push(Some(Row {
            name: t.names.get(name).to_string(),
            durations: None,
            gpu_ns: 0,
            gpu_ops: 0,
            folded_names: 0,
        }));
        self.by_name.insert(name, self.rows.len() - 1);
        self.rows.len() - 1
    }

    /// The row GPU work launched inside a range of `name` adds to.
    fn gpu_row(&mut self, t: &Trace, name: NameId) -> usize {
        if let Some(&row) = self.by_name.get(&name) {
            return row;
        }
        match self.folded_row(t, name) {
            Some(row) => row,
            None => self.new_row(t, name),
        }
    }

    /// The row a closed range of `name` adds to: a name's first closed range makes it its family's member, which
    /// may fold the family.
    fn closed_row(&mut self, t: &Trace, name: NameId) -> usize {
        let own = self.by_name.get(&name).copied();
        if !self.first_close(name) {
            return own.or_else(|| self.folded_row(t, name)).expect("a closed name has its row or its family's");
        }
        let Some(prefix) = self.prefix(t, name) else {
            return own.unwrap_or_else(|| self.new_row(t, name));
        };
        match self.families.get_mut(prefix) {
            Some(Family::Folded(family)) => {
                let family = *family;
                // A name seen so far only around GPU work: its work joins the family's row.
                if let Some(row) = own {
                    self.fold_into(family, row);
                    self.by_name.remove(&name);
                }
                self.row_mut(family).folded_names += 1;
                family
            }
            Some(Family::Listed(members)) => {
                members.push(name);
                let members = members.len();
                let row = own.unwrap_or_else(|| self.new_row(t, name));
                if members > FAMILY_ROWS_CAP { self.fold_family(t, name) } else { row }
            }
            None => {
                self.families.insert(prefix.to_string(), Family::Listed(vec![name]));
                own.unwrap_or_else(|| self.new_row(t, name))
            }
        }
    }

    /// Marks `name` as closed; whether this is its first closed range.
    fn first_close(&mut self, name: NameId) -> bool {
        let (word, bit) = (name.index() / 64, 1u64 << (name.index() % 64));
        if self.closed.len() <= word {
            self.closed.resize(word + 1, 0);
        }
        let first = self.closed[word] & bit == 0;
        self.closed[word] |= bit;
        first
    }

    /// Folds the family of `member` (listed, just past the cap) into one row; returns it.
    fn fold_family(&mut self, t: &Trace, member: NameId) -> usize {
        let prefix = self.prefix(t, member).expect("a member has a family");
        let Some(Family::Listed(members)) = self.families.remove(prefix) else {
            unreachable!("only a listed family folds")
        };
        self.rows.push(Some(Row {
            name: family_label(prefix),
            durations: Some(Durations::new(self.cap)),
            gpu_ns: 0,
            gpu_ops: 0,
            folded_names: members.len() as u64,
        }));
        let family = self.rows.len() - 1;
        for m in members {
            let row = self.by_name.remove(&m).expect("a member has a row");
            self.fold_into(family, row);
        }
        self.families.insert(prefix.to_string(), Family::Folded(family));
        family
    }

    /// Merges `row`'s accumulators into `family`'s, and empties it.
    fn fold_into(&mut self, family: usize, row: usize) {
        let r = self.rows[row].take().expect("a member's row is folded once");
        let cap = self.cap;
        let f = self.row_mut(family);
        if let Some(d) = r.durations {
            f.durations.get_or_insert_with(|| Durations::new(cap)).merge(d);
        }
        f.gpu_ns = f.gpu_ns.saturating_add(r.gpu_ns);
        f.gpu_ops += r.gpu_ops;
    }
}
