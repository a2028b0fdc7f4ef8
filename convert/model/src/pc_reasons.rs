//! The stall reason of every PC sample, named from the stall-reason tables the file carries, with every sample no
//! table can name counted, never guessed. `source`, `--pprof` and the stall-rate tracks all name samples here, so
//! they count the same samples and warn about the same ones.
//!
//! A sample is `(PC, reason index, count)`; the index means something only in the table of the context that took
//! it. The recorder writes its context's table in every collection (in the context's first one only before issue
//! 28, so a `--ring` dump that evicted that collection holds samples without their table). A collection's samples
//! are named by its own table, else by its context's (an older file's first collection), and a sample is left out
//! and counted when:
//! - its context has no table in the file: without the names, the `*_not_issued` twins (the same sample counted a
//!   second time) cannot be told apart, so counting them would count samples twice; a table of another context is
//!   not borrowed, since indices are per context;
//! - its index is not in the table;
//! - its index is named differently by two tables of its context (for a collection without one) or twice in one.
//!
//! - its reason is not among the file's first [`MAX_REASONS`] distinct reasons: CUPTI's tables hold a few dozen
//!   (40 entries on an H100, half of them twins), and each reason is a stall-rate track with a point at every run
//!   of every function stalled on it, so a forged table of thousands would cost runs x reasons.
//!
//! A collection whose named samples exceed CUPTI's own count of samples taken is a problem too (kept, reported).
//! Sums saturate: a forged count cannot wrap a total to a small one.

/// Distinct stall reasons one file may name; samples of any further reason are left out and counted.
pub const MAX_REASONS: usize = 64;

use cutr_format::{PcRecord, PcSamples};
use rustc_hash::{FxHashMap, FxHashSet};

use crate::counters::stall_reason_name;

/// Samples left out for one cause.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LeftOut {
    /// The samples of the left-out (PC, reason) entries (a `*_not_issued` twin included: it cannot be told apart).
    pub samples: u64,
    /// PC records with at least one left-out entry.
    pub pcs: u64,
    /// Collections with at least one left-out entry.
    pub collections: u64,
}

impl LeftOut {
    fn is_empty(&self) -> bool {
        self.samples == 0 && self.pcs == 0
    }
}

/// What naming the samples of one file found wrong; [`ReasonCheck::warnings`] says it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ReasonCheck {
    /// Samples of contexts with no stall-reason table in the file, when no context has one.
    pub no_table: LeftOut,
    /// Samples of contexts with no table while other contexts of the file have one.
    pub table_on_other_context: LeftOut,
    /// Samples whose reason index their table does not list.
    pub out_of_range: LeftOut,
    /// Samples whose reason index their context's tables (or one table, twice) name differently.
    pub ambiguous: LeftOut,
    /// Samples of reasons beyond the file's first [`MAX_REASONS`].
    pub too_many_reasons: LeftOut,
    /// Tables that contradict their context's first table or list an index twice with different names.
    pub conflicting_tables: u64,
    /// Collections whose named samples exceed CUPTI's count of samples taken in them; their named samples and
    /// CUPTI's count.
    pub over_total: u64,
    pub over_total_named: u64,
    pub over_total_cupti: u64,
}

impl ReasonCheck {
    /// One warning per problem found, with its counts.
    pub fn warnings(&self) -> Vec<String> {
        let mut out = Vec::new();
        let left = |l: &LeftOut, what: &str| {
            format!("{} PC samples ({} PCs in {} collections) {what}: left out", l.samples, l.pcs, l.collections)
        };
        if !self.no_table.is_empty() {
            out.push(left(
                &self.no_table,
                "have no stall-reason table (an older recorder wrote it in a context's first collection only, \
                 which a --ring dump can leave out; without it reasons have no names and their *_not_issued \
                 duplicates cannot be told apart)",
            ));
        }
        if !self.table_on_other_context.is_empty() {
            out.push(left(
                &self.table_on_other_context,
                "have no stall-reason table for their context, only other contexts do (reason indices are per \
                 context)",
            ));
        }
        if !self.out_of_range.is_empty() {
            out.push(left(&self.out_of_range, "name stall-reason indices their table does not list"));
        }
        if self.conflicting_tables > 0 {
            out.push(format!(
                "{} stall-reason tables contradict another table of their context or list an index twice; each \
                 collection's samples are named by its own table",
                self.conflicting_tables
            ));
        }
        if !self.ambiguous.is_empty() {
            out.push(left(&self.ambiguous, "name stall-reason indices their context's tables disagree on"));
        }
        if !self.too_many_reasons.is_empty() {
            out.push(left(
                &self.too_many_reasons,
                &format!("name stall reasons beyond the {MAX_REASONS} distinct ones a file may have"),
            ));
        }
        if self.over_total > 0 {
            out.push(format!(
                "{} PC sample collections hold more samples ({}) than CUPTI took in them ({}): their PC records \
                 are damaged",
                self.over_total, self.over_total_named, self.over_total_cupti
            ));
        }
        out
    }

    fn add(into: &mut LeftOut, samples: u64, first_in_pc: bool, first_in_collection: bool) {
        into.samples = into.samples.saturating_add(samples);
        into.pcs += u64::from(first_in_pc);
        into.collections += u64::from(first_in_collection);
    }
}

/// A stall-reason table as a collection carries it: `(index, full name)`.
type TableList = [(u32, String)];
/// A (context, device).
type ContextKey = (u32, u32);

/// One table as a lookup: index -> name, `None` for an index listed twice with different names.
struct Table<'c> {
    names: FxHashMap<u32, Option<&'c str>>,
    /// It lists an index twice with different names.
    self_conflicting: bool,
}

impl<'c> Table<'c> {
    fn of(list: &'c [(u32, String)]) -> Table<'c> {
        let mut names: FxHashMap<u32, Option<&'c str>> = FxHashMap::default();
        let mut self_conflicting = false;
        for (index, name) in list {
            let e = names.entry(*index).or_insert(Some(name.as_str()));
            if *e != Some(name.as_str()) {
                *e = None;
                self_conflicting = true;
            }
        }
        Table { names, self_conflicting }
    }

    /// The table for the samples of a collection without one: the context's, ambiguous where its tables disagree.
    fn merged(lists: &[&'c [(u32, String)]]) -> Table<'c> {
        let mut t = Table::of(lists[0]);
        for list in &lists[1..] {
            for (index, name) in list.iter() {
                let e = t.names.entry(*index).or_insert(Some(name.as_str()));
                if *e != Some(name.as_str()) {
                    *e = None;
                }
            }
        }
        t
    }
}

/// How a sample's reason index resolved.
enum Named<'c> {
    /// A reason to count, by its short name.
    Reason(&'c str),
    /// A `*_not_issued` twin (or another entry CUPTI lists that is no reason to count): not counted, not a problem.
    Twin,
    OutOfRange,
    Ambiguous,
}

fn resolve<'c>(table: &Table<'c>, index: u32) -> Named<'c> {
    match table.names.get(&index) {
        None => Named::OutOfRange,
        Some(None) => Named::Ambiguous,
        Some(Some(full)) => stall_reason_name(full).map_or(Named::Twin, Named::Reason),
    }
}

/// Names every sample of one file's `collections` (file order), calling `count(collection, pc, reason, samples)`
/// for each sample counted (`reason` short: `long_scoreboard`; `samples` > 0), and returns what was left out.
pub fn name_samples<'c>(
    collections: &'c [PcSamples],
    mut count: impl FnMut(&'c PcSamples, &'c PcRecord, &'c str, u64),
) -> ReasonCheck {
    let mut check = ReasonCheck::default();
    // Each context's distinct tables, in file order.
    let mut context_lists: FxHashMap<ContextKey, Vec<&'c TableList>> = FxHashMap::default();
    let mut seen: FxHashSet<(ContextKey, &'c TableList)> = FxHashSet::default();
    for c in collections.iter().filter(|c| !c.stall_reasons.is_empty()) {
        let key = (c.context, c.device);
        if seen.insert((key, &c.stall_reasons)) {
            let lists = context_lists.entry(key).or_default();
            if !lists.is_empty() {
                check.conflicting_tables += 1;
            }
            lists.push(&c.stall_reasons);
        }
    }
    let context_tables: FxHashMap<(u32, u32), Table<'c>> =
        context_lists.iter().map(|(key, lists)| (*key, Table::merged(lists))).collect();
    let any_table = !context_tables.is_empty();
    let mut reasons: FxHashSet<&'c str> = FxHashSet::default();
    let mut own_tables: FxHashMap<&'c [(u32, String)], Table<'c>> = FxHashMap::default();
    for lists in context_lists.values() {
        for list in lists {
            let t = Table::of(list);
            check.conflicting_tables += u64::from(t.self_conflicting);
            own_tables.insert(list, t);
        }
    }
    for c in collections {
        let table = if c.stall_reasons.is_empty() {
            context_tables.get(&(c.context, c.device))
        } else {
            own_tables.get(c.stall_reasons.as_slice())
        };
        let Some(table) = table else {
            let into = if any_table { &mut check.table_on_other_context } else { &mut check.no_table };
            let mut first_in_collection = true;
            for pc in c.pcs.iter().filter(|pc| pc.stalls.iter().any(|s| s.1 > 0)) {
                let samples = pc.stalls.iter().fold(0u64, |a, s| a.saturating_add(u64::from(s.1)));
                ReasonCheck::add(into, samples, true, std::mem::take(&mut first_in_collection));
            }
            continue;
        };
        let mut named = 0u64;
        let (mut out_first, mut ambiguous_first, mut beyond_first) = (true, true, true);
        for pc in &c.pcs {
            let (mut out_pc, mut ambiguous_pc, mut beyond_pc) = (true, true, true);
            for &(index, n) in pc.stalls.iter().filter(|s| s.1 > 0) {
                let n = u64::from(n);
                match resolve(table, index) {
                    Named::Reason(reason) if reasons.contains(reason) || reasons.len() < MAX_REASONS => {
                        reasons.insert(reason);
                        named = named.saturating_add(n);
                        count(c, pc, reason, n);
                    }
                    Named::Reason(_) => ReasonCheck::add(
                        &mut check.too_many_reasons,
                        n,
                        std::mem::take(&mut beyond_pc),
                        std::mem::take(&mut beyond_first),
                    ),
                    Named::Twin => {}
                    Named::OutOfRange => ReasonCheck::add(
                        &mut check.out_of_range,
                        n,
                        std::mem::take(&mut out_pc),
                        std::mem::take(&mut out_first),
                    ),
                    Named::Ambiguous => ReasonCheck::add(
                        &mut check.ambiguous,
                        n,
                        std::mem::take(&mut ambiguous_pc),
                        std::mem::take(&mut ambiguous_first),
                    ),
                }
            }
        }
        if named > c.total_samples {
            check.over_total += 1;
            check.over_total_named = check.over_total_named.saturating_add(named);
            check.over_total_cupti = check.over_total_cupti.saturating_add(c.total_samples);
        }
    }
    check
}

#[cfg(test)]
mod tests {
    use super::*;

    const P: &str = "smsp__pcsamp_warps_issue_stalled_";

    fn table(names: &[(u32, &str)]) -> Vec<(u32, String)> {
        names.iter().map(|&(i, n)| (i, format!("{P}{n}"))).collect()
    }

    fn pc(stalls: &[(u32, u32)]) -> PcRecord {
        PcRecord { function_name: "_Z1fv".into(), stalls: stalls.to_vec(), ..Default::default() }
    }

    fn collection(context: u32, total: u64, reasons: Vec<(u32, String)>, pcs: Vec<PcRecord>) -> PcSamples {
        PcSamples { context, total_samples: total, stall_reasons: reasons, pcs, ..Default::default() }
    }

    /// (reason, samples) counted, summed.
    fn named(collections: &[PcSamples]) -> (Vec<(String, u64)>, ReasonCheck) {
        let mut sums: std::collections::BTreeMap<String, u64> = Default::default();
        let check = name_samples(collections, |_, _, r, n| *sums.entry(r.to_string()).or_default() += n);
        (sums.into_iter().collect(), check)
    }

    fn sums(v: &[(&str, u64)]) -> Vec<(String, u64)> {
        v.iter().map(|&(r, n)| (r.to_string(), n)).collect()
    }

    /// A table in the first collection only (an older recorder) names the later ones; twins are not counted.
    #[test]
    fn a_contexts_first_table_names_its_later_collections_and_twins_are_left_out() {
        let t = table(&[(0, "long_scoreboard"), (1, "long_scoreboard_not_issued"), (2, "wait")]);
        let c = [
            collection(1, 10, t, vec![pc(&[(0, 6), (1, 6), (2, 4)])]),
            collection(1, 5, Vec::new(), vec![pc(&[(0, 5), (1, 5)])]),
        ];
        let (got, check) = named(&c);
        assert_eq!(got, sums(&[("long_scoreboard", 11), ("wait", 4)]));
        assert_eq!(check, ReasonCheck::default());
        assert_eq!(check.warnings(), Vec::<String>::new());
    }

    #[test]
    fn samples_no_table_names_are_left_out_and_counted_by_cause() {
        let t = table(&[(0, "long_scoreboard"), (1, "wait")]);
        // Context 2 has no table anywhere (another does); context 1's samples name index 7 (not listed).
        let c = [
            collection(1, 100, t, vec![pc(&[(0, 3), (7, 2)]), pc(&[(7, 1)])]),
            collection(2, 100, Vec::new(), vec![pc(&[(0, 9), (1, 9)]), pc(&[(0, 0)])]),
        ];
        let (got, check) = named(&c);
        assert_eq!(got, sums(&[("long_scoreboard", 3)]));
        assert_eq!(check.out_of_range, LeftOut { samples: 3, pcs: 2, collections: 1 });
        assert_eq!(check.table_on_other_context, LeftOut { samples: 18, pcs: 1, collections: 1 });
        assert_eq!(
            check.warnings(),
            [
                "18 PC samples (1 PCs in 1 collections) have no stall-reason table for their context, only other \
                 contexts do (reason indices are per context): left out",
                "3 PC samples (2 PCs in 1 collections) name stall-reason indices their table does not list: left out",
            ]
        );
        // With no table at all, the same samples are of the first cause.
        let bare = [collection(2, 100, Vec::new(), vec![pc(&[(0, 9), (1, 9)])])];
        let (got, check) = named(&bare);
        assert!(got.is_empty());
        assert_eq!(check.no_table, LeftOut { samples: 18, pcs: 1, collections: 1 });
    }

    /// Two tables of one context that disagree: each collection keeps its own; one without a table cannot be
    /// named where they disagree. An index listed twice with two names is ambiguous in its own table too.
    #[test]
    fn conflicting_tables_name_their_own_collections_only() {
        let a = table(&[(0, "long_scoreboard"), (1, "wait")]);
        let b = table(&[(0, "long_scoreboard"), (1, "selected")]);
        let twice = table(&[(0, "long_scoreboard"), (0, "wait")]);
        let c = [
            collection(1, 100, a.clone(), vec![pc(&[(1, 2)])]),
            collection(1, 100, a, vec![pc(&[(1, 1)])]),
            collection(1, 100, b, vec![pc(&[(1, 4)])]),
            collection(1, 100, Vec::new(), vec![pc(&[(0, 8), (1, 16)])]),
            collection(3, 100, twice, vec![pc(&[(0, 32)])]),
        ];
        let (got, check) = named(&c);
        assert_eq!(got, sums(&[("long_scoreboard", 8), ("selected", 4), ("wait", 3)]));
        assert_eq!(check.conflicting_tables, 2, "context 1's second table, and context 3's");
        assert_eq!(check.ambiguous, LeftOut { samples: 48, pcs: 2, collections: 2 });
    }

    /// A forged table of 100 reasons: the first 64 the samples name are counted, the rest left out.
    #[test]
    fn reasons_beyond_the_files_limit_are_left_out() {
        let names: Vec<String> = (0..100).map(|i| format!("r{i:03}")).collect();
        let t = table(&names.iter().enumerate().map(|(i, n)| (i as u32, n.as_str())).collect::<Vec<_>>());
        let stalls: Vec<(u32, u32)> = (0..100).map(|i| (i, 2)).collect();
        let c = [collection(1, 1000, t, vec![pc(&stalls), pc(&stalls[90..])])];
        let (got, check) = named(&c);
        assert_eq!(got.len(), MAX_REASONS);
        assert_eq!(got.iter().map(|g| g.1).sum::<u64>(), 2 * 64);
        assert_eq!(check.too_many_reasons, LeftOut { samples: 2 * 36 + 2 * 10, pcs: 2, collections: 1 });
        assert_eq!(
            check.warnings(),
            ["92 PC samples (2 PCs in 1 collections) name stall reasons beyond the 64 distinct ones a file may have: \
              left out"]
        );
    }

    /// More named samples than CUPTI took is reported; sums saturate.
    #[test]
    fn more_samples_than_cupti_took_is_reported_and_sums_saturate() {
        let t = table(&[(0, "long_scoreboard")]);
        let c = [
            collection(1, 10, t.clone(), vec![pc(&[(0, 11)])]),
            collection(1, 10, t, vec![pc(&[(0, 10)])]),
            collection(2, 0, Vec::new(), vec![pc(&[(0, u32::MAX)]); 3]),
        ];
        let (got, check) = named(&c);
        assert_eq!(got, sums(&[("long_scoreboard", 21)]));
        assert_eq!((check.over_total, check.over_total_named, check.over_total_cupti), (1, 11, 10));
        assert_eq!(check.table_on_other_context.samples, 3 * u64::from(u32::MAX));
        assert_eq!(
            check.warnings()[1],
            "1 PC sample collections hold more samples (11) than CUPTI took in them (10): their PC records are damaged"
        );
    }
}
