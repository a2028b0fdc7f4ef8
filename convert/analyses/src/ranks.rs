//! `stats --by-rank`: the recordings of a distributed job side by side, one row per rank (kernels, kernel time,
//! NCCL kernel time, GPU busy time), and, with `--step PREFIX`, each NVTX step range (`iter 7`) per rank with the
//! slowest rank named: the straggler of that step. The same numbers `cupti-convert export`'s tables give
//! (`select rank, sum(duration_ns) from kernels group by rank`).

use std::collections::BTreeMap;

use cutr_model::{ProcId, Trace};
use serde::Serialize;

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
}

/// The report over `t`'s files; `step_prefix` picks the NVTX step ranges.
pub fn by_rank(t: &Trace, step_prefix: Option<&str>) -> RankReport {
    let job_ranks = t.job_ranks();
    let rank_of: Vec<u32> = job_ranks.iter().map(|r| r.0).collect();
    // Files without any GPU work (a launcher) are left out of the rank rows.
    let mut rows: BTreeMap<u32, RankRow> = BTreeMap::new();
    let mut intervals: BTreeMap<u32, Vec<(u64, u64)>> = BTreeMap::new();
    let row = |rows: &mut BTreeMap<u32, RankRow>, proc: ProcId| -> u32 {
        let r = rank_of[proc.index()];
        rows.entry(r).or_insert_with(|| RankRow {
            rank: r,
            rank_source: job_ranks[proc.index()].1.as_str(),
            file: t.label(proc),
            kernels: 0,
            kernel_ns: 0,
            nccl_ns: 0,
            gpu_busy_ns: 0,
        });
        r
    };
    for k in &t.kernels {
        let r = row(&mut rows, k.proc);
        let d = k.end.saturating_sub(k.start);
        let e = rows.get_mut(&r).expect("made above");
        e.kernels += 1;
        e.kernel_ns += d;
        if t.kernel_name(k).starts_with("nccl") {
            e.nccl_ns += d;
        }
        intervals.entry(r).or_default().push((k.start, k.end));
    }
    for m in &t.memcpys {
        intervals.entry(row(&mut rows, m.proc)).or_default().push((m.start, m.end));
    }
    for m in &t.memsets {
        intervals.entry(row(&mut rows, m.proc)).or_default().push((m.start, m.end));
    }
    for (r, mut iv) in intervals {
        iv.sort_unstable();
        let (mut busy, mut cur) = (0u64, None::<(u64, u64)>);
        for (s, e) in iv {
            match cur {
                Some((cs, ce)) if s <= ce => cur = Some((cs, ce.max(e))),
                Some((cs, ce)) => {
                    busy += ce - cs;
                    cur = Some((s, e));
                }
                None => cur = Some((s, e)),
            }
        }
        if let Some((cs, ce)) = cur {
            busy += ce - cs;
        }
        if let Some(row) = rows.get_mut(&r) {
            row.gpu_busy_ns = busy;
        }
    }
    let mut steps = Vec::new();
    let mut stragglers: BTreeMap<u32, u64> = BTreeMap::new();
    if let Some(prefix) = step_prefix {
        // Step name -> rank -> ns (instances of one name on a rank add up).
        let mut by_step: BTreeMap<String, BTreeMap<u32, u64>> = BTreeMap::new();
        for r in t.ranges.iter().filter(|r| is_step_range(t, r, prefix)) {
            *by_step.entry(t.names.get(r.name).to_string()).or_default().entry(rank_of[r.proc.index()]).or_default() +=
                r.end.saturating_sub(r.start);
        }
        for (step, per) in by_step {
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
        // Steps in their natural order: by the number in the name where there is one.
        steps.sort_by_key(|s| {
            (s.step.trim_start_matches(prefix).trim().parse::<u64>().unwrap_or(u64::MAX), s.step.clone())
        });
    }
    let mut stragglers: Vec<(u32, u64)> = stragglers.into_iter().collect();
    stragglers.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    RankReport { ranks: rows.into_values().collect(), step_prefix: step_prefix.map(str::to_string), steps, stragglers }
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
