//! NVTX range rows of a diff with numbered names folded ([`cutr_model::numbered`]): a day of training names
//! millions of steps one by one (`ProfilerStep#1234`), and a row per step would make the answer as large as the
//! recording. A family (the names that differ only in their trailing number) keeps a row per member up to
//! [`FAMILY_ROWS_CAP`] distinct names and is one row (`ProfilerStep#<n>`, every step an instance) past it. The
//! choice is made across every run of both sides, so that a family is one row or its members' rows on both.

use std::collections::{BTreeMap, BTreeSet};

use cutr_model::numbered::{FAMILY_ROWS_CAP, family_label, split_number};
use rustc_hash::FxHashMap;

use super::samples::{ByName, Run, Sums};

/// One run's NVTX range instances by name, each family's members kept apart until there are too many.
#[derive(Clone, Debug, Default)]
pub(crate) struct RangeRows {
    /// Names that are no family's member.
    plain: FxHashMap<String, Sums>,
    /// Families by prefix.
    families: BTreeMap<String, Family>,
}

#[derive(Clone, Debug)]
enum Family {
    /// At most [`FAMILY_ROWS_CAP`] distinct names.
    Members(BTreeMap<String, Sums>),
    /// Past that: every member's instances in one.
    Folded(Sums),
}

impl RangeRows {
    /// One instance of `name` with `ns` of GPU work in `ops` operations.
    pub fn add(&mut self, name: &str, ns: u64, ops: u64) {
        let mut one = Sums::default();
        one.add(ns, ops);
        self.add_sums(name, &one);
    }

    /// Instances of `name`, summed.
    pub fn add_sums(&mut self, name: &str, s: &Sums) {
        let Some((prefix, _)) = split_number(name) else {
            match self.plain.get_mut(name) {
                Some(row) => row.merge(s),
                None => {
                    self.plain.insert(name.to_string(), *s);
                }
            }
            return;
        };
        let family = self.families.entry(prefix.to_string()).or_insert_with(|| Family::Members(BTreeMap::new()));
        match family {
            Family::Folded(all) => all.merge(s),
            Family::Members(members) => {
                members.entry(name.to_string()).or_default().merge(s);
                if members.len() > FAMILY_ROWS_CAP {
                    let mut all = Sums::default();
                    members.values().for_each(|m| all.merge(m));
                    *family = Family::Folded(all);
                }
            }
        }
    }
}

/// Sets every run's [`Run::ranges`] from its range instances: a family folded in any run, or with more than
/// [`FAMILY_ROWS_CAP`] distinct names over all runs, is one row in every run. Returns the folded families' rows.
pub(crate) fn fold_across(b: &mut [Run], n: &mut [Run]) -> Vec<String> {
    let mut members: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
    let mut folded: BTreeSet<String> = BTreeSet::new();
    for r in b.iter().chain(n.iter()) {
        for (prefix, family) in &r.range_rows.families {
            match family {
                Family::Folded(_) => {
                    folded.insert(prefix.clone());
                }
                Family::Members(m) => members.entry(prefix).or_default().extend(m.keys().map(String::as_str)),
            }
        }
    }
    folded.extend(members.into_iter().filter(|(_, m)| m.len() > FAMILY_ROWS_CAP).map(|(p, _)| p.to_string()));
    for r in b.iter_mut().chain(n.iter_mut()) {
        let rows = std::mem::take(&mut r.range_rows);
        let mut sums: BTreeMap<String, Sums> = rows.plain.into_iter().collect();
        for (prefix, family) in rows.families {
            let fold = folded.contains(&prefix);
            let mut row = |name: String, s: &Sums| sums.entry(name).or_default().merge(s);
            match family {
                Family::Folded(all) => row(family_label(&prefix), &all),
                Family::Members(m) if fold => m.values().for_each(|s| row(family_label(&prefix), s)),
                Family::Members(m) => m.into_iter().for_each(|(name, s)| row(name, &s)),
            }
        }
        r.ranges = sums.into_iter().map(|(k, s)| (k, s.moments())).collect::<ByName>();
    }
    folded.iter().map(|p| family_label(p)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run_with(names: impl Iterator<Item = String>) -> Run {
        let mut rows = RangeRows::default();
        for (i, name) in names.enumerate() {
            rows.add(&name, 100 + i as u64, 2);
        }
        Run { range_rows: rows, ..Default::default() }
    }

    #[test]
    fn a_family_past_the_cap_on_either_side_is_one_row_on_both() {
        // Base: steps 0..40 and `forward`; new: steps 30..90 (90 distinct over both sides, past 64).
        let mut b = [run_with((0..40).map(|i| format!("step {i}")).chain(["forward".to_string()]))];
        let mut n = [run_with((30..90).map(|i| format!("step {i}")))];
        assert_eq!(fold_across(&mut b, &mut n), ["step <n>"]);
        assert_eq!(b[0].ranges.keys().collect::<Vec<_>>(), ["forward", "step <n>"]);
        let (bs, ns) = (b[0].ranges["step <n>"], n[0].ranges["step <n>"]);
        // 40 instances of 100..=139 ns, and 60 of 100..=159 ns; two ops each.
        assert_eq!((bs.n, bs.sum, bs.ops), (40, (100..140).sum::<u64>() as f64, 80));
        assert_eq!((ns.n, ns.sum, ns.ops), (60, (100..160).sum::<u64>() as f64, 120));
        // 64 distinct names over both sides stay apart.
        let mut b = [run_with((0..40).map(|i| format!("step {i}")))];
        let mut n = [run_with((40..64).map(|i| format!("step {i}")))];
        assert!(fold_across(&mut b, &mut n).is_empty());
        assert_eq!((b[0].ranges.len(), n[0].ranges.len()), (40, 24));
        // 65 in one run fold there as they come (the run's state stays bounded), and on the other side too.
        let mut b = [run_with((0..65).map(|i| format!("ProfilerStep#{i}")))];
        assert!(matches!(b[0].range_rows.families["ProfilerStep#"], Family::Folded(s) if s.n == 65));
        let mut n = [run_with((0..3).map(|i| format!("ProfilerStep#{i}")))];
        assert_eq!(fold_across(&mut b, &mut n), ["ProfilerStep#<n>"]);
        assert_eq!((b[0].ranges["ProfilerStep#<n>"].n, n[0].ranges["ProfilerStep#<n>"].n), (65, 3));
    }
}
