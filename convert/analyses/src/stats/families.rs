//! NVTX range names that carry a number (`ProfilerStep#1234`, `step 17`) folded into one row per family once a
//! family has more than [`FAMILY_ROWS_CAP`] names: a day of training has millions of steps, and a report with a
//! row for each grows with the recording instead of with the question. The rule is `cutr_model::numbered`'s, shared
//! with the other summaries; `--nvtx-names each` keeps every name its own row.

use std::collections::HashMap;

use cutr_model::numbered::{FAMILY_ROWS_CAP, family_label, split_number};
use serde::Serialize;

/// How `stats` names the rows of its NVTX section.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum NvtxNames {
    /// Families of more than [`FAMILY_ROWS_CAP`] numbered names are one row each (`step <n>`).
    #[default]
    Fold,
    /// Every name its own row, however many.
    Each,
}

/// The rows that distinct range names fall into.
pub(super) struct Folding {
    /// The row of each name, in the order the names were given.
    pub row_of: Vec<u32>,
    /// Each row's name, and how many range names it holds when it is a folded family (0 for a name of its own).
    pub rows: Vec<(String, u64)>,
}

/// The rows of `names` (distinct): each its own, except the members of a family with more than
/// [`FAMILY_ROWS_CAP`] names, which share their family's row (`prefix<n>`), unless `names` is [`NvtxNames::Each`].
pub(super) fn fold(names: &[&str], mode: NvtxNames) -> Folding {
    fn prefix(name: &str, mode: NvtxNames) -> Option<&str> {
        match mode {
            NvtxNames::Fold => split_number(name).map(|(prefix, _)| prefix),
            NvtxNames::Each => None,
        }
    }
    let family = |name| prefix(name, mode);
    let mut members: HashMap<&str, u64> = HashMap::new();
    for &name in names {
        if let Some(prefix) = family(name) {
            *members.entry(prefix).or_default() += 1;
        }
    }
    let mut family_rows: HashMap<&str, u32> = HashMap::new();
    let mut rows = Vec::new();
    let row_of = names
        .iter()
        .map(|&name| match family(name).filter(|prefix| members[prefix] > FAMILY_ROWS_CAP as u64) {
            Some(prefix) => *family_rows.entry(prefix).or_insert_with(|| {
                rows.push((family_label(prefix), members[prefix]));
                rows.len() as u32 - 1
            }),
            None => {
                rows.push((name.to_string(), 0));
                rows.len() as u32 - 1
            }
        })
        .collect();
    Folding { row_of, rows }
}

/// The line under the NVTX table that says which rows are families and how many names each holds.
pub(super) fn folded_note<'a>(rows: impl Iterator<Item = (&'a str, u64)>) -> Option<String> {
    let folded: Vec<String> = rows
        .filter(|&(_, n)| n > 0)
        .map(|(name, n)| format!("{name} holds {} names", crate::fmt::thousands(n)))
        .collect();
    (!folded.is_empty()).then(|| {
        format!(
            "  Numbered names folded (more than {FAMILY_ROWS_CAP} in a family; --nvtx-names each lists them): {}",
            folded.join(", ")
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_family_folds_past_the_cap_and_not_at_it() {
        let many: Vec<String> = (0..65).map(|i| format!("step {i}")).collect();
        let few: Vec<String> = (0..64).map(|i| format!("iter{i}")).collect();
        let mut names: Vec<&str> = vec!["forward"];
        names.extend(many.iter().map(String::as_str));
        names.extend(few.iter().map(String::as_str));
        names.push("backward");
        let f = fold(&names, NvtxNames::Fold);
        // forward, step <n>, iter0..iter63, backward.
        assert_eq!(f.rows.len(), 1 + 1 + 64 + 1);
        assert_eq!(
            (&f.rows[0], &f.rows[1], &f.rows[2], &f.rows[66]),
            (
                &("forward".to_string(), 0),
                &("step <n>".to_string(), 65),
                &("iter0".to_string(), 0),
                &("backward".to_string(), 0)
            )
        );
        assert_eq!((f.row_of[1], f.row_of[65], f.row_of[66], f.row_of[130]), (1, 1, 2, 66));
        let each = fold(&names, NvtxNames::Each);
        assert_eq!((each.rows.len(), each.row_of[65]), (131, 65));
        let note = folded_note(f.rows.iter().map(|(n, c)| (n.as_str(), *c))).unwrap();
        assert_eq!(
            note,
            "  Numbered names folded (more than 64 in a family; --nvtx-names each lists them): step <n> holds 65 names"
        );
        assert_eq!(folded_note(each.rows.iter().map(|(n, c)| (n.as_str(), *c))), None);
    }
}
