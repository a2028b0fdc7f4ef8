//! `stats --by-rank`: the recordings of a distributed job side by side, one row per rank (kernels, kernel time,
//! NCCL kernel time, GPU busy time), and, with `--step PREFIX`, each NVTX step range (`iter 7`) per rank with the
//! slowest rank named: the straggler of that step. The same numbers `cupti-convert export`'s tables give
//! (`select rank, sum(duration_ns) from kernels group by rank`).

use std::collections::BTreeMap;
use std::path::PathBuf;

use cutr_format::Reader;
use cutr_model::rows::Kernel;
use cutr_model::stream::{StreamOptions, stream_readers};
use cutr_model::{LoadError, NameId, NvtxRange, ProcId, Trace};
use rustc_hash::FxHashMap;
use serde::Serialize;

use crate::stats::stream_utilization::Union;

/// One rank's totals (a file without a rank is numbered by file order: [`Trace::job_ranks`]).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct RankRow {
    pub rank: u32,
    /// Where the rank comes from: `environment`, `--rank` or `file order` (none recorded).
    pub rank_source: &'static str,
    pub file: String,
    pub kernels: u64,
    pub kernel_ns: u64,
    /// Kernels whose name starts with `nccl` (NCCL's collectives).
    pub nccl_ns: u64,
    /// Union of kernel, copy and memset intervals on all its GPUs.
    pub gpu_busy_ns: u64,
}

/// One step range: its duration on each rank, and the slowest.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct StepRow {
    pub step: String,
    /// (rank, ns), in rank order; a rank without the range is missing.
    pub per_rank: Vec<(u32, u64)>,
    pub slowest_rank: u32,
    /// (slowest - fastest) / fastest, %.
    pub spread_pct: f64,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct RankReport {
    pub ranks: Vec<RankRow>,
    pub step_prefix: Option<String>,
    pub steps: Vec<StepRow>,
    /// (rank, steps in which it was the slowest), most first.
    pub stragglers: Vec<(u32, u64)>,
    /// How the report was streamed (`None`: from a loaded trace).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stream: Option<RankStream>,
}

/// What a streamed report read: every figure is exact all the same.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct RankStream {
    pub chunks: u64,
    pub windows: u64,
}

/// The report over `t`'s files; `step_prefix` picks the NVTX step ranges.
pub fn by_rank(t: &Trace, step_prefix: Option<&str>) -> RankReport {
    let mut tally = RankTally::new(t, step_prefix);
    tally.kernels(t, &t.kernels);
    let copies = t.memcpys.iter().map(|m| (m.proc, m.start, m.end));
    tally.gpu_work(t, copies.chain(t.memsets.iter().map(|m| (m.proc, m.start, m.end))));
    tally.settle(None);
    tally.steps(t, &t.ranges);
    tally.report(step_prefix)
}

/// `stats --by-rank` streamed over the recordings' chunks ([`cutr_model::stream`]): the same report as [`by_rank`]
/// on the loaded trace, every figure exact, with state bounded by the answer: a row per rank, each rank's GPU work
/// intervals that reach past the window's edge, and a sum per step name and rank. Also returns the stream's trace
/// (its files' warnings) and what the stream read; rows that started inside time already settled (a forged chunk
/// header) are counted in [`StreamedRanks::late_rows`].
pub fn by_rank_streaming(
    paths: &[PathBuf],
    readers: &[Reader],
    step_prefix: Option<&str>,
    opts: &StreamOptions,
) -> Result<StreamedRanks, LoadError> {
    let mut tally: Option<RankTally> = None;
    let (trace, end) = stream_readers(paths, readers, opts, |t, _, b| {
        let tally = tally.get_or_insert_with(|| RankTally { cap: opts.max_waiting, ..RankTally::new(t, step_prefix) });
        tally.kernels(t, &b.kernels);
        let copies = b.memcpys.iter().map(|m| (m.proc, m.start, m.end));
        tally.gpu_work(t, copies.chain(b.memsets.iter().map(|m| (m.proc, m.start, m.end))));
        tally.settle(b.next_start);
        tally.steps(t, &b.ranges);
    })?;
    let tally = tally.unwrap_or_else(|| RankTally::new(&trace, step_prefix));
    let late_rows = tally.late_rows;
    let settled_early = tally.busy.values().map(|u| u.settled_early).sum();
    let mut report = tally.report(step_prefix);
    report.stream = Some(RankStream { chunks: end.chunks, windows: end.windows });
    Ok(StreamedRanks { report, trace, late_rows, settled_early })
}

/// What [`by_rank_streaming`] gives.
pub struct StreamedRanks {
    pub report: RankReport,
    /// The trace of processes and names (no rows): its files' warnings and join counts.
    pub trace: Trace,
    /// GPU work that started before the chunk it was read in claims: busy time may be understated by it.
    pub late_rows: u64,
    /// GPU work intervals settled before the stream passed them: more than
    /// [`StreamOptions::max_waiting`] were open (chunk headers that claim early times).
    pub settled_early: u64,
}

/// The report's sums, from a loaded trace or a stream's windows.
struct RankTally<'p> {
    rank_of: Vec<u32>,
    prefix: Option<&'p str>,
    rows: BTreeMap<u32, RankRow>,
    /// Each rank's GPU work intervals not yet added to its union (this window's), then the union.
    pending: BTreeMap<u32, Vec<(u64, u64)>>,
    busy: BTreeMap<u32, Union>,
    /// Whether a kernel name is NCCL's, by name id.
    nccl: FxHashMap<NameId, bool>,
    /// Step name -> rank -> ns (instances of one name on a rank add up).
    by_step: BTreeMap<String, BTreeMap<u32, u64>>,
    late_rows: u64,
    /// The most merged intervals a rank keeps open (a loaded trace: no limit).
    cap: usize,
}

impl<'p> RankTally<'p> {
    fn new(t: &Trace, prefix: Option<&'p str>) -> RankTally<'p> {
        RankTally {
            rank_of: t.job_ranks().iter().map(|r| r.0).collect(),
            prefix,
            rows: BTreeMap::new(),
            pending: BTreeMap::new(),
            busy: BTreeMap::new(),
            nccl: FxHashMap::default(),
            by_step: BTreeMap::new(),
            late_rows: 0,
            cap: usize::MAX,
        }
    }

    /// The rank of file `proc`, its row made on its first GPU work (files without any, a launcher, have none).
    fn row(&mut self, t: &Trace, proc: ProcId) -> u32 {
        let r = self.rank_of[proc.index()];
        self.rows.entry(r).or_insert_with(|| RankRow {
            rank: r,
            rank_source: t.job_ranks()[proc.index()].1.as_str(),
            file: t.label(proc),
            kernels: 0,
            kernel_ns: 0,
            nccl_ns: 0,
            gpu_busy_ns: 0,
        });
        r
    }

    fn kernels(&mut self, t: &Trace, kernels: &[Kernel]) {
        for k in kernels {
            let r = self.row(t, k.proc);
            let d = k.end.saturating_sub(k.start);
            // By the demangled name, as a load shows it (a stream's trace has the mangled names only).
            let nccl = *self
                .nccl
                .entry(k.name)
                .or_insert_with(|| cutr_model::demangle::demangle(t.names.get(k.name)).starts_with("nccl"));
            let e = self.rows.get_mut(&r).expect("made above");
            e.kernels += 1;
            e.kernel_ns += d;
            if nccl {
                e.nccl_ns += d;
            }
            self.pending.entry(r).or_default().push((k.start, k.end));
        }
    }

    /// Copies and memsets: (file, start, end).
    fn gpu_work(&mut self, t: &Trace, work: impl Iterator<Item = (ProcId, u64, u64)>) {
        for (proc, start, end) in work {
            let r = self.row(t, proc);
            self.pending.entry(r).or_default().push((start, end));
        }
    }

    /// This window's intervals into each rank's union; what ends before `next_start` (no later row starts before
    /// it; `None`: the end) is settled.
    fn settle(&mut self, next_start: Option<u64>) {
        for (r, intervals) in std::mem::take(&mut self.pending) {
            let edge = next_start.unwrap_or(u64::MAX);
            self.late_rows += self.busy.entry(r).or_default().add(intervals, edge, self.cap);
        }
    }

    fn steps(&mut self, t: &Trace, ranges: &[NvtxRange]) {
        let Some(prefix) = self.prefix else { return };
        for r in ranges.iter().filter(|r| is_step_range(t, r, prefix)) {
            let rank = self.rank_of[r.proc.index()];
            self.step(t.names.get(r.name), rank, r.end.saturating_sub(r.start));
        }
    }

    /// One instance of step `name` on `rank` (instances of one name on a rank add up).
    fn step(&mut self, name: &str, rank: u32, ns: u64) {
        let per_rank = match self.by_step.get_mut(name) {
            Some(per_rank) => per_rank,
            None => self.by_step.entry(name.to_string()).or_default(),
        };
        *per_rank.entry(rank).or_default() += ns;
    }

    fn report(mut self, step_prefix: Option<&str>) -> RankReport {
        for (r, union) in &self.busy {
            if let Some(row) = self.rows.get_mut(r) {
                row.gpu_busy_ns = union.busy_ns();
            }
        }
        let mut steps = Vec::new();
        let mut stragglers: BTreeMap<u32, u64> = BTreeMap::new();
        for (step, per) in std::mem::take(&mut self.by_step) {
            let per_rank: Vec<(u32, u64)> = per.into_iter().collect();
            let (slowest, max) =
                per_rank.iter().copied().max_by_key(|x| (x.1, std::cmp::Reverse(x.0))).unwrap_or((0, 0));
            let min = per_rank.iter().map(|x| x.1).min().unwrap_or(0);
            if per_rank.len() > 1 {
                *stragglers.entry(slowest).or_default() += 1;
            }
            let spread_pct = if min > 0 { 100.0 * (max - min) as f64 / min as f64 } else { 0.0 };
            steps.push(StepRow { step, per_rank, slowest_rank: slowest, spread_pct });
        }
        if let Some(prefix) = step_prefix {
            // Steps in their natural order: by the number in the name where there is one.
            steps.sort_by_key(|s| {
                (s.step.trim_start_matches(prefix).trim().parse::<u64>().unwrap_or(u64::MAX), s.step.clone())
            });
        }
        let mut stragglers: Vec<(u32, u64)> = stragglers.into_iter().collect();
        stragglers.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
        RankReport {
            ranks: self.rows.into_values().collect(),
            step_prefix: step_prefix.map(str::to_string),
            steps,
            stragglers,
            stream: None,
        }
    }
}

/// Whether `r` is a step of `--step PREFIX`: a closed NVTX range (of any thread) whose name starts with the
/// prefix. `analyze --step` finds its steps the same way.
pub fn is_step_range(t: &Trace, r: &cutr_model::NvtxRange, prefix: &str) -> bool {
    r.closed() && t.names.get(r.name).starts_with(prefix)
}

/// Text for people.
pub fn render_text(r: &RankReport) -> String {
    use std::fmt::Write as _;
    let ms = |ns: u64| format!("{:.3}", ns as f64 / 1e6);
    let mut o = String::from("Per rank (ms)\n");
    if let Some(st) = &r.stream {
        let _ = writeln!(
            o,
            "  (streamed over {} chunks in {} windows, --stream: every figure exact)",
            crate::fmt::thousands(st.chunks),
            crate::fmt::thousands(st.windows)
        );
    }
    let _ =
        writeln!(o, "  {:>5} {:>8} {:>12} {:>12} {:>12}  file", "rank", "kernels", "kernel time", "NCCL", "GPU busy");
    for x in &r.ranks {
        let _ = writeln!(
            o,
            "  {:>5} {:>8} {:>12} {:>12} {:>12}  {}",
            x.rank,
            x.kernels,
            ms(x.kernel_ns),
            ms(x.nccl_ns),
            ms(x.gpu_busy_ns),
            x.file
        );
    }
    let numbered: Vec<String> = r
        .ranks
        .iter()
        .filter(|x| x.rank_source == cutr_model::RankSource::FileOrder.as_str())
        .map(|x| x.rank.to_string())
        .collect();
    if !numbered.is_empty() {
        let _ = writeln!(o, "  (no rank recorded for rank {}: numbered by file order)", numbered.join(", "));
    }
    if let Some(p) = &r.step_prefix {
        let _ = writeln!(o, "\nSteps (NVTX ranges named '{p}...', ms per rank; * the slowest)");
        for s in &r.steps {
            let cells: Vec<String> = s
                .per_rank
                .iter()
                .map(|&(rank, ns)| format!("{rank}:{}{}", ms(ns), if rank == s.slowest_rank { "*" } else { "" }))
                .collect();
            let _ = writeln!(o, "  {:<16} spread {:>6.1}%  {}", s.step, s.spread_pct, cells.join("  "));
        }
        let named: Vec<String> = r.stragglers.iter().map(|(rank, n)| format!("rank {rank} in {n}")).collect();
        let _ = writeln!(
            o,
            "\nSlowest rank per step: {}",
            if named.is_empty() { "-".to_string() } else { named.join(", ") }
        );
    }
    o
}
