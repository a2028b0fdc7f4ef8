//! `cupti-convert diff`: what got slower or faster between recordings, per kernel and per NVTX range, with a verdict
//! CI can trust.
//!
//! Each side is one or more recordings of the same program (runs). A row is a kernel name, an NVTX range name
//! (compared by the GPU time of the work launched inside it) or the total GPU time. Within a run, the instances of
//! a row are samples (a kernel launched 20 times is 20 measurements); across runs, the runs are. Each row's
//! change of mean instance duration gets a 99% interval from them (`judge`), and the row is
//! - **regression** / **improvement** when the change exceeds the threshold, the floors (per run, per instance)
//!   and its interval excludes no change;
//! - **inconclusive** when it exceeds them but the interval includes no change, or there is no evidence (one
//!   instance per side, one run each): never a regression, and the reason says what would settle it;
//! - **neutral** otherwise; **added** / **removed** when found on one side only.
//!
//! Rows that are not GPU work (the process's wall span) and rows below `--min-share` of the GPU time are
//! **reported**, not judged. A change of how many times a kernel ran is a finding of its own ([`CountChange`]).
//! The verdict is a regression when any judged row regressed (or, with `--fail-on`, a reported kind changed),
//! unless less than half of the base's kernel time is in kernels the new runs have too: then it is **different
//! programs**, whatever the rows say.

mod by_rank;
mod families;
mod inputs;
mod judge;
mod lines;
mod render;
mod samples;
mod stats;
mod stream;
mod um;

use std::collections::{BTreeMap, BTreeSet};

use cutr_model::Trace;
use cutr_model::timing::timed;
use rayon::prelude::*;
use serde::Serialize;

pub use by_rank::{ByRankReport, RankDiff, diff_by_rank};
pub use lines::{MovedLine, link_source_lines};
pub use render::{render_by_rank_markdown, render_by_rank_text, render_markdown, render_text};
pub use samples::Moments;
pub use stream::{DiffStream, StreamedSide, describe as describe_stream, diff_by_rank_streaming, diff_streaming};
pub use um::UmChange;

use inputs::RunInput;
use judge::{Side, evidence};
use samples::Run;

/// What a diff judges, and how strictly.
#[derive(Clone, Debug)]
pub struct DiffOptions {
    /// Changes within this many percent are neutral.
    pub threshold_pct: f64,
    /// Changes smaller than this (ns, per run) are neutral, whatever their percentage.
    pub min_delta_ns: u64,
    /// Changes smaller than this per instance and GPU operation (ns) are neutral: the run-to-run drift of short
    /// kernels that a single run per side cannot show (A/A recordings of tiny kernels move 8-11%).
    pub instance_floor_ns: f64,
    /// Rows with less than this share of the base's GPU time (percent) are reported, not judged.
    pub min_share_pct: f64,
    /// Match kernels with their template arguments and parameter lists removed.
    pub normalize_templates: bool,
    /// Rows reported but not judged by default that should fail the verdict.
    pub fail_on: Vec<FailOn>,
}

impl Default for DiffOptions {
    fn default() -> Self {
        DiffOptions {
            threshold_pct: 5.0,
            min_delta_ns: 10_000,
            instance_floor_ns: 250.0,
            min_share_pct: 1.0,
            normalize_templates: false,
            fail_on: Vec::new(),
        }
    }
}

/// What `--fail-on` can add to the verdict.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum FailOn {
    /// The process's wall span (start-up, shut-down, host work).
    Span,
    /// A kernel launched more or fewer times.
    Count,
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
    /// Shown, not judged: not GPU work, or too small a share of it.
    Reported,
    /// The overall verdict when less than half of the base's kernel time is in kernels the new runs also have:
    /// the recordings are probably of different programs, and no row's change says anything about either.
    #[serde(rename = "different_programs")]
    DifferentPrograms,
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
            Verdict::Reported => "reported",
            Verdict::DifferentPrograms => "different programs",
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Row {
    /// `kernel`, `nvtx`, `total` (GPU time) or `span` (first to last record).
    pub section: &'static str,
    pub name: String,
    /// Per run: total ns and instances.
    pub base_ns: Vec<u64>,
    pub new_ns: Vec<u64>,
    pub base_count: Vec<u64>,
    pub new_count: Vec<u64>,
    /// Mean over runs of the per-run totals.
    pub base_mean_ns: f64,
    pub new_mean_ns: f64,
    /// Change of the per-run total (ns) and of the mean instance duration (percent).
    pub delta_ns: f64,
    pub delta_pct: f64,
    /// 99% interval of the change of the mean instance duration, in percent of the base's.
    pub interval_pct: Option<(f64, f64)>,
    /// Share of the base's GPU time.
    pub share_pct: f64,
    pub verdict: Verdict,
    /// Why, in words.
    pub reason: String,
    /// A kernel that regressed or improved: the source lines whose share of its PC samples moved, when both
    /// sides have PC samples ([`link_source_lines`]).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub moved_lines: Vec<MovedLine>,
}

/// A kernel (or range) that ran a different number of times.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct CountChange {
    pub section: &'static str,
    pub name: String,
    /// Mean instances per run.
    pub base: f64,
    pub new: f64,
}

/// A counter's time-weighted average over a kernel's executions, base against new (`--counters` recordings).
/// Reported, not judged: a change in what a kernel does to the hardware explains a duration change, it is not one.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct CounterChange {
    pub kernel: String,
    pub device: u32,
    pub series: String,
    pub base: f64,
    pub new: f64,
    pub delta_pct: f64,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Report {
    pub verdict: Verdict,
    pub threshold_pct: f64,
    pub min_delta_ns: u64,
    pub base_files: Vec<String>,
    pub new_files: Vec<String>,
    pub rows: Vec<Row>,
    pub count_changes: Vec<CountChange>,
    /// Counter averages per kernel that moved by at least the threshold, largest change first.
    pub counter_changes: Vec<CounterChange>,
    /// Unified memory per run, base against new (reported, not judged); empty when neither side has UM events.
    pub um_changes: Vec<UmChange>,
    /// Rows per verdict (judged rows only; `reported` counts the others).
    pub counts: BTreeMap<&'static str, usize>,
    /// Share of the base's kernel time whose names the new runs have too.
    pub common_kernel_time_pct: f64,
    /// NVTX rows that are a family of numbered names folded into one (`ProfilerStep#<n>`): past
    /// `cutr_model::numbered::FAMILY_ROWS_CAP` distinct names over the runs, each member is an instance of the row.
    pub folded_families: Vec<String>,
    /// How the runs were streamed (`--stream`); `None` when they were loaded whole.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stream: Option<DiffStream>,
    pub warnings: Vec<String>,
}

/// Below this share of common kernel time the recordings are probably of different programs.
const DIFFERENT_PROGRAMS_PCT: f64 = 50.0;

/// Compares recordings: `base` and `new` hold one trace per run.
pub fn diff(base: &[Trace], new: &[Trace], opts: &DiffOptions) -> Report {
    let (b, n) = inputs_of(base, new, opts);
    let (b, n): (Vec<&RunInput>, Vec<&RunInput>) = (b.iter().collect(), n.iter().collect());
    compare_inputs(&b, &n, opts)
}

/// A kernel's row name: its demangled name, template arguments removed when asked.
fn row_name(demangled: &str, opts: &DiffOptions) -> String {
    if opts.normalize_templates { normalize_template_name(demangled) } else { demangled.to_string() }
}

/// Every loaded run's inputs at once: each has serial steps (its names' table), so runs side by side keep more
/// workers busy than one after another.
fn inputs_of(base: &[Trace], new: &[Trace], opts: &DiffOptions) -> (Vec<RunInput>, Vec<RunInput>) {
    let name = |n: &str| row_name(n, opts);
    timed("diff samples", || {
        rayon::join(
            || base.par_iter().map(|t| RunInput::of_trace(t, &name)).collect(),
            || new.par_iter().map(|t| RunInput::of_trace(t, &name)).collect(),
        )
    })
}

/// The report of runs however they were read (`--by-rank` picks each rank's runs).
fn compare_inputs(base: &[&RunInput], new: &[&RunInput], opts: &DiffOptions) -> Report {
    let runs = |rs: &[&RunInput]| -> Vec<Run> { rs.iter().map(|r| r.run.clone()).collect() };
    let (mut b, mut n) = (runs(base), runs(new));
    let folded = families::fold_across(&mut b, &mut n);
    let mut report = timed("diff rows", || compare(&b, &n, opts));
    report.folded_families = folded;
    let (changes, counter_warning) = timed("diff counters", || inputs::counter_changes(base, new, opts.threshold_pct));
    report.counter_changes = changes;
    report.warnings.extend(counter_warning);
    report.um_changes = um::um_changes(base, new);
    let files = |rs: &[&RunInput]| -> Vec<String> { rs.iter().flat_map(|r| r.files.iter().cloned()).collect() };
    report.base_files = files(base);
    report.new_files = files(new);
    report
}

/// The rows of every section, judged, the count changes and the overall verdict.
fn compare(b: &[Run], n: &[Run], opts: &DiffOptions) -> Report {
    let base_gpu = b.iter().map(|r| r.gpu.sum).sum::<f64>() / b.len().max(1) as f64;
    let mut rows = Vec::new();
    let mut count_changes = Vec::new();
    type Pick = fn(&Run) -> &samples::ByName;
    for (section, pick) in [("kernel", (|r: &Run| &r.kernels) as Pick), ("nvtx", |r: &Run| &r.ranges)] {
        let names: BTreeSet<&String> = b.iter().chain(n).flat_map(|r| pick(r).keys()).collect();
        for name in names {
            let bs = Side { runs: b.iter().map(|r| pick(r).get(name)).collect() };
            let ns = Side { runs: n.iter().map(|r| pick(r).get(name)).collect() };
            if let Some(c) = count_change(section, name, &bs, &ns) {
                count_changes.push(c);
            }
            rows.push(row(section, name, &bs, &ns, base_gpu, opts));
        }
    }
    rows.push(total_row(b, n, opts));
    rows.push(span_row(b, n, opts));
    // Biggest changes first, rows that need attention before the others.
    let rank = |v: Verdict| match v {
        Verdict::Regression | Verdict::Improvement => 0,
        Verdict::Inconclusive | Verdict::Added | Verdict::Removed => 1,
        Verdict::Reported => 2,
        Verdict::Neutral | Verdict::DifferentPrograms => 3,
    };
    rows.sort_by(|x, y| {
        rank(x.verdict)
            .cmp(&rank(y.verdict))
            .then(y.delta_ns.abs().partial_cmp(&x.delta_ns.abs()).unwrap_or(std::cmp::Ordering::Equal))
    });
    let mut counts = BTreeMap::new();
    for r in &rows {
        *counts.entry(r.verdict.as_str()).or_insert(0) += 1;
    }
    let has = |v: Verdict| rows.iter().any(|r| r.verdict == v);
    let mut verdict = if has(Verdict::Regression) {
        Verdict::Regression
    } else if has(Verdict::Improvement) {
        Verdict::Improvement
    } else if has(Verdict::Inconclusive) {
        Verdict::Inconclusive
    } else {
        Verdict::Neutral
    };
    if opts.fail_on.contains(&FailOn::Count) && !count_changes.is_empty() {
        verdict = Verdict::Regression;
    }
    let (common, warnings) = similarity(b, n);
    // A comparison of unrelated programs judges nothing: its "regression" would fail a build for a wrong input.
    if common < DIFFERENT_PROGRAMS_PCT {
        verdict = Verdict::DifferentPrograms;
    }
    Report {
        counter_changes: Vec::new(),
        um_changes: Vec::new(),
        verdict,
        threshold_pct: opts.threshold_pct,
        min_delta_ns: opts.min_delta_ns,
        base_files: Vec::new(),
        new_files: Vec::new(),
        rows,
        count_changes,
        counts,
        common_kernel_time_pct: common,
        folded_families: Vec::new(),
        stream: None,
        warnings,
    }
}

/// The per-run totals and counts of a side.
fn per_run(s: &Side) -> (Vec<u64>, Vec<u64>) {
    s.runs.iter().map(|m| m.map_or((0, 0), |m| (m.sum as u64, m.n))).unzip()
}

fn row(section: &'static str, name: &str, b: &Side, n: &Side, base_gpu: f64, opts: &DiffOptions) -> Row {
    let e = evidence(b, n);
    let (base_ns, base_count) = per_run(b);
    let (new_ns, new_count) = per_run(n);
    let (bt, nt) = (b.mean_total(), n.mean_total());
    let base_mean = if b.mean_count() > 0.0 { bt / b.mean_count() } else { 0.0 };
    let share = if base_gpu > 0.0 { 100.0 * bt / base_gpu } else { 0.0 };
    let pct = |x: f64| if base_mean > 0.0 { 100.0 * x / base_mean } else { f64::INFINITY };
    let (verdict, reason) = if share < opts.min_share_pct && bt > 0.0 && nt > 0.0 {
        (Verdict::Reported, format!("{share:.2}% of GPU time, below --min-share {}%: not judged", opts.min_share_pct))
    } else {
        judge::judge(b, n, &e, opts)
    };
    Row {
        section,
        name: name.to_string(),
        base_ns,
        new_ns,
        base_count,
        new_count,
        base_mean_ns: bt,
        new_mean_ns: nt,
        delta_ns: nt - bt,
        delta_pct: if bt > 0.0 {
            pct(e.delta)
        } else if nt > 0.0 {
            f64::INFINITY
        } else {
            0.0
        },
        interval_pct: e.interval.map(|(lo, hi)| (pct(lo), pct(hi))),
        share_pct: share,
        verdict,
        reason,
        moved_lines: Vec::new(),
    }
}

/// A row launched a different number of times per run: found when the mean counts differ by at least one and,
/// with several runs per side, the sides' counts do not overlap.
fn count_change(section: &'static str, name: &str, b: &Side, n: &Side) -> Option<CountChange> {
    let counts = |s: &Side| -> Vec<u64> { s.runs.iter().map(|m| m.map_or(0, |m| m.n)).collect() };
    let (bc, nc) = (counts(b), counts(n));
    let (bmin, bmax) = (*bc.iter().min()?, *bc.iter().max()?);
    let (nmin, nmax) = (*nc.iter().min()?, *nc.iter().max()?);
    let (bm, nm) = (b.mean_count(), n.mean_count());
    let separated = nmin > bmax || nmax < bmin;
    // Added and removed rows are findings of their own.
    (separated && (nm - bm).abs() >= 1.0 && bm > 0.0 && nm > 0.0).then(|| CountChange {
        section,
        name: name.to_string(),
        base: bm,
        new: nm,
    })
}

/// Total GPU time: with one run per side, its variance is the sum of the instances' (different kernels' durations
/// are independent); with several, the runs'.
fn total_row(b: &[Run], n: &[Run], opts: &DiffOptions) -> Row {
    let totals = |rs: &[Run]| -> Vec<f64> { rs.iter().map(|r| r.gpu.sum).collect() };
    let (bt, nt) = (totals(b), totals(n));
    let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len().max(1) as f64;
    let (bm, nm) = (mean(&bt), mean(&nt));
    let delta = nm - bm;
    let half = if b.len() >= 2 || n.len() >= 2 {
        let var = |v: &[f64]| {
            let m = mean(v);
            v.iter().map(|x| (x - m).powi(2)).sum::<f64>() / (v.len() as f64 - 1.0).max(1.0)
        };
        let se = (var(&bt) / bt.len() as f64 + var(&nt) / nt.len() as f64).sqrt();
        stats::t_995((b.len() + n.len() - 2) as f64) * se
    } else {
        // Thousands of instances: the normal quantile, not Student's with the runs' one degree of freedom.
        stats::Z_99 * (b[0].gpu_sum_variance + n[0].gpu_sum_variance).sqrt()
    };
    let pct = |x: f64| if bm > 0.0 { 100.0 * x / bm } else { 0.0 };
    let (verdict, reason) = if pct(delta).abs() <= opts.threshold_pct {
        (Verdict::Neutral, format!("{:+.1}% is within the {}% threshold", pct(delta), opts.threshold_pct))
    } else if delta.abs() < opts.min_delta_ns as f64 {
        (Verdict::Neutral, format!("below the {} ns floor per run", opts.min_delta_ns))
    } else if delta - half > 0.0 {
        (
            Verdict::Regression,
            format!("{:+.1}%, 99% interval {:+.1}%..{:+.1}%", pct(delta), pct(delta - half), pct(delta + half)),
        )
    } else if delta + half < 0.0 {
        (
            Verdict::Improvement,
            format!("{:+.1}%, 99% interval {:+.1}%..{:+.1}%", pct(delta), pct(delta - half), pct(delta + half)),
        )
    } else {
        (Verdict::Inconclusive, format!("{:+.1}% within the noise: more runs would settle it", pct(delta)))
    };
    let ns = |rs: &[Run]| -> Vec<u64> { rs.iter().map(|r| r.gpu.sum as u64).collect() };
    let count = |rs: &[Run]| -> Vec<u64> { rs.iter().map(|r| r.gpu.n).collect() };
    Row {
        section: "total",
        name: "GPU time (kernels, copies, memsets)".into(),
        base_ns: ns(b),
        new_ns: ns(n),
        base_count: count(b),
        new_count: count(n),
        base_mean_ns: bm,
        new_mean_ns: nm,
        delta_ns: delta,
        delta_pct: pct(delta),
        interval_pct: Some((pct(delta - half), pct(delta + half))),
        share_pct: 100.0,
        verdict,
        reason,
        moved_lines: Vec::new(),
    }
}

/// The process's wall span (start-up, host work, shut-down): reported, judged only with `--fail-on span`.
fn span_row(b: &[Run], n: &[Run], opts: &DiffOptions) -> Row {
    let spans = |rs: &[Run]| -> Vec<u64> { rs.iter().map(|r| r.span_ns).collect() };
    let (bs, ns) = (spans(b), spans(n));
    let mean = |v: &[u64]| v.iter().sum::<u64>() as f64 / v.len().max(1) as f64;
    let (bm, nm) = (mean(&bs), mean(&ns));
    let pct = if bm > 0.0 { 100.0 * (nm - bm) / bm } else { 0.0 };
    let (verdict, reason) = if !opts.fail_on.contains(&FailOn::Span) {
        (Verdict::Reported, "not GPU work (CUDA start-up, host work): not judged; --fail-on span judges it".to_string())
    } else if pct > opts.threshold_pct && nm - bm >= opts.min_delta_ns as f64 {
        (Verdict::Regression, format!("{pct:+.1}%, beyond the {}% threshold (--fail-on span)", opts.threshold_pct))
    } else if pct < -opts.threshold_pct && bm - nm >= opts.min_delta_ns as f64 {
        (Verdict::Improvement, format!("{pct:+.1}%, beyond the {}% threshold (--fail-on span)", opts.threshold_pct))
    } else {
        (Verdict::Neutral, format!("{pct:+.1}% is within the {}% threshold", opts.threshold_pct))
    };
    let ones = |v: &[u64]| vec![1; v.len()];
    Row {
        section: "span",
        name: "wall span (first to last record)".into(),
        base_count: ones(&bs),
        new_count: ones(&ns),
        base_ns: bs,
        new_ns: ns,
        base_mean_ns: bm,
        new_mean_ns: nm,
        delta_ns: nm - bm,
        delta_pct: pct,
        interval_pct: None,
        share_pct: 0.0,
        verdict,
        reason,
        moved_lines: Vec::new(),
    }
}

/// The share of the base's kernel time under names the new runs have too, and a warning when it is small.
fn similarity(b: &[Run], n: &[Run]) -> (f64, Vec<String>) {
    let new_names: BTreeSet<&String> = n.iter().flat_map(|r| r.kernels.keys()).collect();
    let (mut common, mut all) = (0.0, 0.0);
    for r in b {
        for (name, m) in &r.kernels {
            all += m.sum;
            if new_names.contains(name) {
                common += m.sum;
            }
        }
    }
    let pct = if all > 0.0 { 100.0 * common / all } else { 100.0 };
    let mut warnings = Vec::new();
    if pct < DIFFERENT_PROGRAMS_PCT {
        warnings.push(format!(
            "only {pct:.0}% of the base's kernel time is in kernels the new runs also have: these are probably \
             recordings of different programs"
        ));
    }
    (pct, warnings)
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
}
