//! One run as a diff reads it, however it was read (loaded whole, or streamed): its rows' moments, its files, its
//! rank, and what the side figures need from it (counter averages per kernel, unified memory totals).

use std::collections::BTreeMap;

use cutr_model::Trace;
use cutr_model::rows::{UmEvent, UmKind};

use super::CounterChange;
use super::samples::{Run, run_of};
use crate::stats::CounterAverage;

/// (kernel, device, counter) -> (sum of average x covered time, covered time) over a run's kernels.
pub(crate) type CounterSums = BTreeMap<(String, u32, String), (f64, f64)>;

/// The unified memory figures, in report order.
pub(crate) const UM_FIGURES: [&str; 9] = [
    "HtoD bytes",
    "DtoH bytes",
    "DtoD bytes",
    "GPU page faults",
    "GPU fault groups",
    "CPU page faults",
    "thrashing",
    "throttling",
    "remote maps",
];

/// A run's unified memory: its events counted, and the figures (bytes saturate at 2^64-1, as `stats` does: a
/// damaged value cannot make them small).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct UmTotals {
    pub events: u64,
    pub figures: [u64; UM_FIGURES.len()],
}

impl UmTotals {
    pub fn add(&mut self, events: &[UmEvent]) {
        let f = &mut self.figures;
        for e in events {
            self.events += 1;
            let (i, v) = match e.kind {
                UmKind::BytesHtoD => (0, e.value),
                UmKind::BytesDtoH => (1, e.value),
                UmKind::BytesDtoD => (2, e.value),
                UmKind::GpuPageFault => {
                    f[4] = f[4].saturating_add(e.value);
                    (3, 1)
                }
                UmKind::CpuPageFault => (5, 1),
                UmKind::Thrashing => (6, 1),
                UmKind::Throttling => (7, 1),
                UmKind::RemoteMap => (8, 1),
            };
            f[i] = f[i].saturating_add(v);
        }
    }
}

/// One run of one side.
pub(crate) struct RunInput {
    pub run: Run,
    /// The recordings it was read from.
    pub files: Vec<String>,
    /// Its rank (`--by-rank`), from the first file's metadata.
    pub rank: Option<u32>,
    /// Whether it holds any kernel or copy (what `--by-rank` says of a file it leaves out).
    pub gpu_work: bool,
    /// Per (kernel, device, counter): the average times the covered time, and the covered time; `None` for a
    /// streamed run with more of them than a stream keeps (`stats::stream_counters::SUMS_KEPT`).
    pub counters: Option<CounterSums>,
    /// Counter rows past what a side compares.
    pub counters_left_out: usize,
    pub um: UmTotals,
}

impl RunInput {
    /// A run loaded whole.
    pub fn of_trace(t: &Trace, name: &dyn Fn(&str) -> String) -> RunInput {
        let (rows, counters_left_out) = crate::stats::counters::counters(t, None);
        let mut um = UmTotals::default();
        um.add(&t.um);
        RunInput {
            run: run_of(t, name),
            files: t.processes.iter().flat_map(cutr_model::runs::files_of).map(|f| f.display().to_string()).collect(),
            rank: t.processes.first().and_then(|p| p.rank()).map(|r| r.rank),
            gpu_work: !(t.kernels.is_empty() && t.memcpys.is_empty()),
            counters: Some(counter_sums(rows)),
            counters_left_out,
            um,
        }
    }
}

/// A run's counter rows over kernels as sums weighted by the time the samples cover.
pub(crate) fn counter_sums(rows: Vec<CounterAverage>) -> CounterSums {
    let mut counters = CounterSums::new();
    for a in rows.into_iter().filter(|a| a.over == "kernel") {
        let e = counters.entry((a.name, a.device, a.series)).or_default();
        e.0 += a.average * a.covered_ns as f64;
        e.1 += a.covered_ns as f64;
    }
    counters
}

/// Each side's counter averages per (kernel, device, counter), weighted by the time the samples cover in each run;
/// the pairs that moved by `threshold_pct` or more; and a warning when a side had more counter rows than `diff`
/// compares (`stats::counters::MAX_DIFF_ROWS`, a bound against hostile files). Runs without counter sums add
/// nothing.
pub(crate) fn counter_changes(
    base: &[&RunInput],
    new: &[&RunInput],
    threshold_pct: f64,
) -> (Vec<CounterChange>, Option<String>) {
    let left_out: usize = base.iter().chain(new).map(|r| r.counters_left_out).sum();
    let side = |rs: &[&RunInput]| -> BTreeMap<(String, u32, String), f64> {
        let mut sums: CounterSums = BTreeMap::new();
        for (k, (s, w)) in rs.iter().filter_map(|r| r.counters.as_ref()).flatten() {
            let e = sums.entry(k.clone()).or_default();
            e.0 += s;
            e.1 += w;
        }
        sums.into_iter().filter(|(_, (_, w))| *w > 0.0).map(|(k, (s, w))| (k, s / w)).collect()
    };
    let (b, n) = (side(base), side(new));
    let mut out: Vec<CounterChange> = b
        .iter()
        .filter_map(|(k, &base)| {
            let &new = n.get(k)?;
            let delta_pct = if base != 0.0 {
                100.0 * (new - base) / base.abs()
            } else if new != 0.0 {
                100.0
            } else {
                0.0
            };
            (delta_pct.abs() >= threshold_pct).then(|| CounterChange {
                kernel: k.0.clone(),
                device: k.1,
                series: k.2.clone(),
                base,
                new,
                delta_pct,
            })
        })
        .collect();
    out.sort_by(|x, y| y.delta_pct.abs().total_cmp(&x.delta_pct.abs()).then_with(|| x.kernel.cmp(&y.kernel)));
    let warning = (left_out > 0).then(|| {
        format!(
            "the counters of {left_out} (kernel, copy or NVTX range, GPU) pairs beyond the {} rows a side compares were not compared",
            crate::stats::counters::MAX_DIFF_ROWS
        )
    });
    (out, warning)
}
