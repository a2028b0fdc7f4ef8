//! `cupti-convert diff`: what got slower or faster between recordings, per kernel and per NVTX range, with a
//! verdict that respects run-to-run noise.
//!
//! Each side is one or more recordings of the same program (runs). Per row (a kernel name, an NVTX range name
//! compared by the GPU time of the work launched inside it, total GPU time) the per-run totals give a mean and, with two runs or more, a measured noise: half the spread
//! of the runs relative to their mean. A change is
//! - **neutral** when it is within the threshold (default 5%) or smaller than an absolute floor (a few
//!   microseconds of change in a kernel that takes almost no time is not a regression);
//! - **regression** / **improvement** when it exceeds both the threshold and the noise floor (twice the
//!   measured noise, or 2% when a side has a single run), and, with several runs per side, the runs of the two
//!   sides do not overlap;
//! - **inconclusive** otherwise: beyond the threshold, but not clearly beyond the noise.
//!
//! Kernels found on one side only are **added** or **removed**. The overall verdict is a regression if any
//! kernel, range or the total GPU time regressed.

use std::collections::{BTreeMap, BTreeSet};

use rayon::prelude::*;
use rustc_hash::FxHashMap;
use serde::Serialize;

use cutr_model::timing::timed;
use cutr_model::{NameId, Trace};

mod render;
pub use render::{render_markdown, render_text};

#[derive(Clone, Debug)]
pub struct DiffOptions {
    /// Changes within this many percent are neutral.
    pub threshold_pct: f64,
    /// The noise floor used when a side has one run (no measured noise).
    pub default_noise_pct: f64,
    /// Changes smaller than this (ns, per run) are neutral, whatever their percentage.
    pub min_delta_ns: u64,
    /// Match kernels with their template arguments and parameter lists removed.
    pub normalize_templates: bool,
}

impl Default for DiffOptions {
    fn default() -> Self {
        DiffOptions { threshold_pct: 5.0, default_noise_pct: 2.0, min_delta_ns: 10_000, normalize_templates: false }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Verdict {
    Regression,
    Improvement,
    Inconclusive,
    Added,
    Removed,
    Neutral,
}

impl Verdict {
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Regression => "regression",
            Verdict::Improvement => "improvement",
            Verdict::Inconclusive => "inconclusive",
            Verdict::Added => "added",
            Verdict::Removed => "removed",
            Verdict::Neutral => "neutral",
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Row {
    /// `kernel`, `nvtx`, `total` (GPU time) or `span` (first to last record).
    pub section: &'static str,
    pub name: String,
    /// Per-run totals (ns) and counts.
    pub base_ns: Vec<u64>,
    pub new_ns: Vec<u64>,
    pub base_count: Vec<u64>,
    pub new_count: Vec<u64>,
    pub base_mean_ns: f64,
    pub new_mean_ns: f64,
    pub delta_ns: f64,
    pub delta_pct: f64,
    /// The noise floor this row was judged against (percent).
    pub noise_pct: f64,
    pub verdict: Verdict,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Report {
    pub verdict: Verdict,
    pub threshold_pct: f64,
    pub base_files: Vec<String>,
    pub new_files: Vec<String>,
    pub rows: Vec<Row>,
    pub counts: BTreeMap<&'static str, usize>,
}

/// `name<...>(...)` -> `name<>`: template arguments and parameters removed, so kernels match across builds that
/// change them.
pub fn normalize_template_name(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    let mut depth = 0usize;
    for c in name.chars() {
        match c {
            '<' => {
                if depth == 0 {
                    out.push('<');
                }
                depth += 1;
            }
            '>' if depth > 0 => {
                depth -= 1;
                if depth == 0 {
                    out.push('>');
                }
            }
            _ if depth == 0 => out.push(c),
            _ => {}
        }
    }
    // Drop the parameter list of a function signature.
    if let Some(i) = out.rfind('(')
        && out.ends_with(')')
    {
        out.truncate(i);
    }
    out.strip_prefix("void ").map(str::to_string).unwrap_or(out)
}

/// Per-name (total ns, count) of one run.
type RunTotals = BTreeMap<String, (u64, u64)>;

struct Run {
    kernels: RunTotals,
    ranges: RunTotals,
    gpu_ns: u64,
    span_ns: u64,
}

/// (total ns, count) per name id, summed over blocks of rows in parallel: a trace has millions of kernels and a
/// few hundred names, and making a name string per row cost ~0.3 s per 3M kernels.
fn totals_by_id<T: Sync>(
    rows: &[T],
    id_and_ns: impl Fn(&T) -> Option<(NameId, u64)> + Sync,
) -> FxHashMap<NameId, (u64, u64)> {
    rows.par_chunks(1 << 16)
        .map(|block| {
            let mut m: FxHashMap<NameId, (u64, u64)> = FxHashMap::default();
            for (id, ns) in block.iter().filter_map(&id_and_ns) {
                let e = m.entry(id).or_default();
                e.0 += ns;
                e.1 += 1;
            }
            m
        })
        .reduce(FxHashMap::default, |mut a, b| {
            for (id, (ns, n)) in b {
                let e = a.entry(id).or_default();
                e.0 += ns;
                e.1 += n;
            }
            a
        })
}

fn run_totals(t: &Trace, opts: &DiffOptions) -> Run {
    let mut kernels: RunTotals = BTreeMap::new();
    for (id, (ns, n)) in totals_by_id(&t.kernels, |k| Some((t.display_name_id(k.name), k.duration()))) {
        let mut name = t.names.get(id).to_string();
        if opts.normalize_templates {
            name = normalize_template_name(&name);
        }
        let e = kernels.entry(name).or_default();
        e.0 += ns;
        e.1 += n;
    }
    let gpu = t.kernels.par_iter().map(|k| k.duration()).sum::<u64>()
        + t.memcpys.par_iter().map(|m| m.duration()).sum::<u64>()
        + t.memsets.par_iter().map(|m| m.duration()).sum::<u64>();
    // NVTX ranges are compared by the GPU time of the work launched inside them: the host time a range spans
    // moves with CPU scheduling from run to run, the GPU work it launched does not.
    let gpu_in_range = t.gpu_work_by_range();
    let closed: Vec<Option<(NameId, u64)>> =
        t.ranges.par_iter().zip(&gpu_in_range).map(|(r, &(ns, _))| r.closed().then_some((r.name, ns))).collect();
    let mut ranges: RunTotals = BTreeMap::new();
    for (id, (ns, n)) in totals_by_id(&closed, |&c| c) {
        let e = ranges.entry(t.names.get(id).to_string()).or_default();
        e.0 += ns;
        e.1 += n;
    }
    let (a, b) = t.span();
    Run { kernels, ranges, gpu_ns: gpu, span_ns: b - a }
}

fn mean(v: &[u64]) -> f64 {
    if v.is_empty() { 0.0 } else { v.iter().sum::<u64>() as f64 / v.len() as f64 }
}

/// Half the spread of the runs relative to their mean, in percent (0 with fewer than two runs).
fn noise(v: &[u64]) -> Option<f64> {
    if v.len() < 2 {
        return None;
    }
    let m = mean(v);
    let (lo, hi) = (*v.iter().min().unwrap() as f64, *v.iter().max().unwrap() as f64);
    Some(if m > 0.0 { 50.0 * (hi - lo) / m } else { 0.0 })
}

fn judge(
    section: &'static str,
    name: String,
    base: (Vec<u64>, Vec<u64>),
    new: (Vec<u64>, Vec<u64>),
    opts: &DiffOptions,
) -> Row {
    let (bm, nm) = (mean(&base.0), mean(&new.0));
    let present_base = base.1.iter().any(|&c| c > 0);
    let present_new = new.1.iter().any(|&c| c > 0);
    let delta = nm - bm;
    let pct = if bm > 0.0 {
        100.0 * delta / bm
    } else if nm > 0.0 {
        f64::INFINITY
    } else {
        0.0
    };
    let noise_pct = match (noise(&base.0), noise(&new.0)) {
        (Some(a), Some(b)) => 2.0 * a.max(b),
        _ => opts.default_noise_pct,
    };
    let verdict = if !present_base && present_new {
        Verdict::Added
    } else if present_base && !present_new {
        Verdict::Removed
    } else if delta.abs() < opts.min_delta_ns as f64 || pct.abs() <= opts.threshold_pct {
        Verdict::Neutral
    } else {
        let separated = if base.0.len() >= 2 && new.0.len() >= 2 {
            let (bmin, bmax) = (*base.0.iter().min().unwrap(), *base.0.iter().max().unwrap());
            let (nmin, nmax) = (*new.0.iter().min().unwrap(), *new.0.iter().max().unwrap());
            if delta > 0.0 { nmin > bmax } else { nmax < bmin }
        } else {
            true
        };
        if pct.abs() > noise_pct && separated {
            if delta > 0.0 { Verdict::Regression } else { Verdict::Improvement }
        } else {
            Verdict::Inconclusive
        }
    };
    Row {
        section,
        name,
        base_ns: base.0,
        new_ns: new.0,
        base_count: base.1,
        new_count: new.1,
        base_mean_ns: bm,
        new_mean_ns: nm,
        delta_ns: delta,
        delta_pct: pct,
        noise_pct,
        verdict,
    }
}

fn per_run(runs: &[Run], pick: impl Fn(&Run) -> &RunTotals, name: &str) -> (Vec<u64>, Vec<u64>) {
    runs.iter().map(|r| pick(r).get(name).copied().unwrap_or((0, 0))).unzip()
}

/// Compares recordings: `base` and `new` hold one trace per run.
pub fn diff(base: &[Trace], new: &[Trace], opts: &DiffOptions) -> Report {
    // Every run's totals at once: each has serial steps (its names' table), so runs side by side keep more
    // workers busy than one after another.
    let (b, n): (Vec<Run>, Vec<Run>) = timed("diff totals", || {
        rayon::join(
            || base.par_iter().map(|t| run_totals(t, opts)).collect(),
            || new.par_iter().map(|t| run_totals(t, opts)).collect(),
        )
    });
    timed("diff rows", || compare(base, new, &b, &n, opts))
}

/// The rows of every section, judged, and the overall verdict.
fn compare(base: &[Trace], new: &[Trace], b: &[Run], n: &[Run], opts: &DiffOptions) -> Report {
    let mut rows = Vec::new();
    for (section, pick) in [("kernel", (|r: &Run| &r.kernels) as fn(&Run) -> &RunTotals), ("nvtx", |r: &Run| &r.ranges)]
    {
        let names: BTreeSet<String> = b.iter().chain(n).flat_map(|r| pick(r).keys().cloned()).collect();
        for name in names {
            let row = judge(section, name.clone(), per_run(b, pick, &name), per_run(n, pick, &name), opts);
            rows.push(row);
        }
    }
    let gpu = |rs: &[Run]| (rs.iter().map(|r| r.gpu_ns).collect::<Vec<_>>(), vec![1; rs.len()]);
    let span = |rs: &[Run]| (rs.iter().map(|r| r.span_ns).collect::<Vec<_>>(), vec![1; rs.len()]);
    rows.push(judge("total", "GPU time (kernels, copies, memsets)".into(), gpu(b), gpu(n), opts));
    rows.push(judge("span", "wall span (first to last record)".into(), span(b), span(n), opts));
    // Biggest changes first, verdicts that need attention before neutral ones.
    rows.sort_by(|x, y| {
        (x.verdict == Verdict::Neutral)
            .cmp(&(y.verdict == Verdict::Neutral))
            .then(y.delta_ns.abs().partial_cmp(&x.delta_ns.abs()).unwrap_or(std::cmp::Ordering::Equal))
    });
    // The wall span includes program start-up and shut-down: reported, not part of the verdict.
    let judged = rows.iter().filter(|r| r.section != "span");
    let has = |v: Verdict| rows.iter().filter(|r| r.section != "span").any(|r| r.verdict == v);
    let verdict = if has(Verdict::Regression) {
        Verdict::Regression
    } else if has(Verdict::Improvement) {
        Verdict::Improvement
    } else if has(Verdict::Inconclusive) {
        Verdict::Inconclusive
    } else {
        Verdict::Neutral
    };
    let mut counts = BTreeMap::new();
    for r in judged {
        *counts.entry(r.verdict.as_str()).or_insert(0) += 1;
    }
    Report {
        verdict,
        threshold_pct: opts.threshold_pct,
        base_files: base.iter().flat_map(|t| t.processes.iter().map(|p| p.path.display().to_string())).collect(),
        new_files: new.iter().flat_map(|t| t.processes.iter().map(|p| p.path.display().to_string())).collect(),
        rows,
        counts,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn template_normalization() {
        assert_eq!(normalize_template_name("void scale<float>(float*, float, int)"), "scale<>");
        assert_eq!(
            normalize_template_name(
                "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, at::detail::Array<char*, 1> >(int, at::native::FillFunctor<float>, at::detail::Array<char*, 1>)"
            ),
            "at::native::vectorized_elementwise_kernel<>"
        );
        assert_eq!(normalize_template_name("ampere_sgemm_128x64_nn"), "ampere_sgemm_128x64_nn");
    }

    #[test]
    fn verdict_rules() {
        let o = DiffOptions::default();
        let j = |b: Vec<u64>, n: Vec<u64>| {
            let c = vec![1; b.len()];
            let d = vec![1; n.len()];
            judge("kernel", "k".into(), (b, c), (n, d), &o).verdict
        };
        assert_eq!(j(vec![1_000_000], vec![1_200_000]), Verdict::Regression);
        assert_eq!(j(vec![1_000_000], vec![1_040_000]), Verdict::Neutral);
        assert_eq!(j(vec![1_000_000], vec![800_000]), Verdict::Improvement);
        assert_eq!(j(vec![10_000], vec![15_000]), Verdict::Neutral, "5 us of change is below the absolute floor");
        // Noisy runs: base spans 0.9..1.1 ms, new 1.05..1.25: overlapping, so inconclusive.
        assert_eq!(j(vec![900_000, 1_100_000], vec![1_050_000, 1_250_000]), Verdict::Inconclusive);
        assert_eq!(j(vec![1_000_000, 1_010_000], vec![1_300_000, 1_310_000]), Verdict::Regression);
    }
}
