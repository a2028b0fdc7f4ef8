//! `diff --by-rank`: two runs of a distributed job compared rank by rank, so that the answer is "kernel K regressed
//! on ranks 3 and 7", not one verdict over every rank's GPU time mixed together.
//!
//! Each side is the files of one job (or of several repeats of it). A file's rank comes from its metadata (torchrun's
//! `RANK`, Open MPI's, PMI's, Slurm's; `stats --by-rank` uses the same); where no file of a side names one, the
//! files are ranks 0, 1, ... in the order given. Files of one rank on one side are repeats (runs) of that rank.
//! Each rank is then judged by [`super::diff`] exactly as a single-process diff would be; the job's verdict is
//! the worst rank's.

use std::collections::BTreeMap;

use cutr_model::Trace;
use rayon::prelude::*;
use serde::Serialize;

use super::inputs::RunInput;
use super::{DiffOptions, Report, Row, Verdict};

/// One rank's comparison.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct RankDiff {
    pub rank: u32,
    pub report: Report,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ByRankReport {
    /// The worst rank's verdict (regression before improvement before inconclusive before neutral).
    pub verdict: Verdict,
    /// Ranks found on both sides, in rank order.
    pub ranks: Vec<RankDiff>,
    /// Ranks found on one side only (not compared).
    pub only_base: Vec<u32>,
    pub only_new: Vec<u32>,
    /// Ranks whose verdict is a regression.
    pub regressed_ranks: Vec<u32>,
    pub warnings: Vec<String>,
}

/// Compares `base` and `new` (one trace per file) rank by rank.
pub fn diff_by_rank(base: &[Trace], new: &[Trace], opts: &DiffOptions) -> ByRankReport {
    let (b, n) = super::inputs_of(base, new, opts);
    by_rank_inputs(&b, &n, opts)
}

/// [`diff_by_rank`] over runs however they were read.
pub(super) fn by_rank_inputs(base: &[RunInput], new: &[RunInput], opts: &DiffOptions) -> ByRankReport {
    let mut warnings = Vec::new();
    let b = ranks_of(base, &mut warnings);
    let n = ranks_of(new, &mut warnings);
    let pairs: Vec<(u32, &Vec<usize>, &Vec<usize>)> =
        b.iter().filter_map(|(r, bi)| n.get(r).map(|ni| (*r, bi, ni))).collect();
    let ranks: Vec<RankDiff> = pairs
        .par_iter()
        .map(|&(rank, bi, ni)| {
            let b: Vec<&RunInput> = bi.iter().map(|&i| &base[i]).collect();
            let n: Vec<&RunInput> = ni.iter().map(|&i| &new[i]).collect();
            RankDiff { rank, report: super::compare_inputs(&b, &n, opts) }
        })
        .collect();
    let only = |x: &BTreeMap<u32, Vec<usize>>, y: &BTreeMap<u32, Vec<usize>>| -> Vec<u32> {
        x.keys().filter(|r| !y.contains_key(r)).copied().collect()
    };
    let (only_base, only_new) = (only(&b, &n), only(&n, &b));
    if !only_base.is_empty() {
        warnings.push(format!("ranks only in the base, not compared: {}", list(&only_base)));
    }
    if !only_new.is_empty() {
        warnings.push(format!("ranks only in the new runs, not compared: {}", list(&only_new)));
    }
    for r in &ranks {
        warnings.extend(r.report.warnings.iter().map(|w| format!("rank {}: {w}", r.rank)));
    }
    let verdict = ranks.iter().map(|r| r.report.verdict).min_by_key(|v| severity(*v)).unwrap_or(Verdict::Neutral);
    let regressed_ranks = ranks.iter().filter(|r| r.report.verdict == Verdict::Regression).map(|r| r.rank).collect();
    ByRankReport { verdict, ranks, only_base, only_new, regressed_ranks, warnings }
}

/// How bad a verdict is for the job: a rank recorded from another program makes the comparison meaningless, and
/// a regression anywhere is the job's.
fn severity(v: Verdict) -> u8 {
    match v {
        Verdict::DifferentPrograms => 0,
        Verdict::Regression => 1,
        Verdict::Improvement => 2,
        Verdict::Inconclusive => 3,
        _ => 4,
    }
}

fn list(r: &[u32]) -> String {
    r.iter().map(u32::to_string).collect::<Vec<_>>().join(", ")
}

/// Rank -> indices of the side's traces. Files without a rank take their position when no file of the side has
/// one; otherwise they are left out with a warning (torchrun's launcher records no rank and no GPU work).
fn ranks_of(side: &[RunInput], warnings: &mut Vec<String>) -> BTreeMap<u32, Vec<usize>> {
    let any_ranked = side.iter().any(|r| r.rank.is_some());
    let mut out: BTreeMap<u32, Vec<usize>> = BTreeMap::new();
    for (i, t) in side.iter().enumerate() {
        match (t.rank, any_ranked) {
            (Some(r), _) => out.entry(r).or_default().push(i),
            (None, false) => out.entry(i as u32).or_default().push(i),
            (None, true) => {
                let file = t.files.first().cloned().unwrap_or_default();
                let gpu = if t.gpu_work { "GPU work" } else { "no GPU work" };
                warnings.push(format!(
                    "{file}: no rank in its metadata (RANK, OMPI_COMM_WORLD_RANK, PMI_RANK, SLURM_PROCID) beside \
                     files that have one: left out of --by-rank ({gpu})"
                ));
            }
        }
    }
    out
}

/// The total row of a rank's report: its GPU time base -> new.
pub fn total_row(r: &Report) -> Option<&Row> {
    r.rows.iter().find(|x| x.section == "total")
}
