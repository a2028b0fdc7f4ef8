//! The per-kernel rules over a stream (the loaded path: [`super::super::findings::kernels`]). Which kernels are hot
//! is known only at the end (every name's time inside the windows ranks them), so each window's kernels are summed
//! per recorded name into the [`KernelTally`] the loaded path sums them into (time, count, devices, the first few
//! executions, each launch configuration's time): per name, never per execution, and in any order, so nothing
//! waits for the stream's edge. At the end the recorded names are merged by demangled name (a load names kernels
//! so) and ranked as a load ranks them.
//!
//! The PM averages are `stats --stream`'s counters section (`StreamedCounters`: each window's executions
//! integrated against the series the stream's trace holds from its open), read as a load reads `stats`' section;
//! it is summed only where the file has PM sampling series. The PC samples' notes are `source`'s, which it reads of
//! the files' PC sample chunks and cubins, not of the rows: `finish` reads them off the trace as a load's rules
//! do, once [`crate::source::annotate`] has put them there.

use std::collections::HashMap;
use std::collections::hash_map::Entry;

use cutr_model::stream::{Batch, StreamOptions};
use cutr_model::{NameId, ProcId, Trace};
use rustc_hash::FxHashMap;

use super::FirstPass;
use crate::analyze::findings::kernels::hot::{self, Windows};
use crate::analyze::findings::kernels::judge;
use crate::analyze::findings::kernels::pm::PmAverages;
use crate::analyze::findings::kernels::tally::KernelTally;
use crate::analyze::types::RuleResult;
use crate::stats::counters::MAX_ROWS;
use crate::stats::stream_counters::StreamedCounters;

/// The per-kernel rules (`low_occupancy`, `kernel_bound`, `kernel_stalls`) summed window by window.
pub struct KernelRulesFold<'f> {
    windows: Windows<'f>,
    /// Per recorded (mangled) name: its executions inside the windows.
    by_name: FxHashMap<NameId, KernelTally>,
    /// The PM averages' sums, where the file has PM sampling series.
    counters: Option<StreamedCounters>,
}

impl<'f> KernelRulesFold<'f> {
    /// A fold judging inside the first pass's steps (or, without steps, each process's GPU span); `trace` is the
    /// stream's (it holds the counter series from its open, with [`StreamOptions::counters`]).
    pub fn new(trace: &Trace, first: &'f FirstPass, opts: &StreamOptions) -> KernelRulesFold<'f> {
        let spans = first.gpu_spans.iter().enumerate().filter_map(|(i, span)| {
            let (start, end) = (*span)?;
            Some((ProcId(u16::try_from(i).ok()?), start, end))
        });
        KernelRulesFold {
            windows: Windows::of_step_windows(trace.processes.len(), &first.steps, first.step_windows.as_ref(), spans),
            by_name: FxHashMap::default(),
            counters: PmAverages::recorded(trace).then(|| StreamedCounters::new(opts.max_waiting)),
        }
    }

    /// A window's kernels summed by recorded name, and integrated against the PM series.
    pub fn batch(&mut self, trace: &Trace, b: &Batch) {
        let window = hot::tallies(&b.kernels, &self.windows, |k| k.name);
        self.by_name = hot::merge_tallies(std::mem::take(&mut self.by_name), window);
        if let Some(counters) = &mut self.counters {
            counters.add(trace, b);
        }
    }

    /// The rules' results, in [`crate::analyze::findings::kernels::rules`]' order, and what the PM averages could
    /// not sum (more (name, series) pairs than a stream keeps, or kernels earlier than their chunks claim).
    /// `trace`: the stream's, with [`crate::source::annotate`] run on it over each file as on a load (the stall
    /// rule reads its notes).
    pub fn finish(self, trace: &Trace) -> (Vec<RuleResult>, Vec<String>) {
        // A load's trace names a kernel by its demangled name's id: names that demangle alike are one.
        let mut by_display: HashMap<String, KernelTally> = HashMap::new();
        for (id, tally) in self.by_name {
            match by_display.entry(cutr_model::demangle::demangle(trace.names.get(id))) {
                Entry::Occupied(mut e) => e.get_mut().merge(tally),
                Entry::Vacant(e) => {
                    e.insert(tally);
                }
            }
        }
        let hot = hot::rank(by_display.into_iter().collect(), &self.windows);
        let mut warnings = Vec::new();
        let pm = match self.counters {
            Some(counters) => {
                warnings.extend(counters.warning());
                PmAverages::of_section(counters.section(trace, None, MAX_ROWS))
            }
            // No PM series: the averages say so.
            None => PmAverages::of(trace),
        };
        (judge(trace, &hot, &self.windows, &pm), warnings)
    }
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use cutr_model::stream::stream_readers_in;
    use cutr_model::{Filter, LoadOptions, Trace, load, open_inputs};

    use super::*;
    use crate::analyze::findings::kernels::rules;
    use crate::analyze::steps::find_steps;
    use crate::analyze::types::{Context, Outcome, Step, StepSource};

    fn fixture(name: &str) -> PathBuf {
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fixtures").join(name)
    }

    /// `source`'s notes on the trace, file by file, as `analyze` puts them there.
    fn annotate(t: &mut Trace, readers: &[cutr_format::Reader]) {
        for r in readers {
            assert_eq!(crate::source::annotate(t, &[r]), Vec::<String>::new());
        }
    }

    /// Each process's first GPU op's start and last one's end, as the first pass finds them.
    fn gpu_spans(t: &Trace) -> Vec<Option<(u64, u64)>> {
        let mut spans = vec![None; t.processes.len()];
        let ops = t.kernels.iter().map(|k| (k.proc, k.start, k.end));
        let ops = ops.chain(t.memcpys.iter().map(|m| (m.proc, m.start, m.end)));
        for (proc, start, end) in ops.chain(t.memsets.iter().map(|m| (m.proc, m.start, m.end))) {
            let s: &mut Option<(u64, u64)> = &mut spans[proc.index()];
            *s = Some(s.map_or((start, end), |(a, b)| (a.min(start), b.max(end))));
        }
        spans
    }

    /// The loaded path's rules over `steps` (the first pass's where `None`, with `prefix`), and the first pass.
    fn loaded(name: &str, prefix: Option<&str>, steps: Option<Vec<Step>>) -> (Vec<RuleResult>, FirstPass) {
        let path = fixture(name);
        let mut t = load(std::slice::from_ref(&path), &LoadOptions::default()).unwrap();
        let (readers, _) = open_inputs(std::slice::from_ref(&path), false).unwrap();
        annotate(&mut t, &readers);
        let (step_source, steps) = match steps {
            Some(steps) => (StepSource::NvtxPrefix("test".into()), steps),
            None => find_steps(&t, prefix),
        };
        let first = FirstPass::new(t.processes.len(), step_source, steps, gpu_spans(&t));
        let r = rules(&Context { trace: &t, steps: &first.steps, step_source: &first.step_source });
        (r, first)
    }

    /// The fold's results over the stream of `name` in windows of `window_bytes`, its warnings and the windows
    /// streamed.
    fn streamed(name: &str, first: &FirstPass, window_bytes: u64) -> (Vec<RuleResult>, Vec<String>, u64) {
        let paths = [fixture(name)];
        let (readers, _) = open_inputs(&paths, false).unwrap();
        let opts =
            StreamOptions { hold_unlaunched: true, counter_feed: true, window_bytes, ..StreamOptions::default() };
        let mut fold: Option<KernelRulesFold> = None;
        let (mut t, end) = stream_readers_in(&paths, &readers, &opts, &Filter::default(), |t, _, b| {
            fold.get_or_insert_with(|| KernelRulesFold::new(t, first, &opts)).batch(t, &b);
        })
        .unwrap();
        annotate(&mut t, &readers);
        let (results, warnings) = fold.unwrap_or_else(|| KernelRulesFold::new(&t, first, &opts)).finish(&t);
        (results, warnings, end.windows)
    }

    /// The streamed results equal the loaded ones at one chunk per window (3 to 11 windows on these fixtures) and
    /// at the default windows; returns them.
    fn same(name: &str, prefix: Option<&str>, steps: Option<Vec<Step>>) -> Vec<RuleResult> {
        let (want, first) = loaded(name, prefix, steps);
        for window_bytes in [1, StreamOptions::default().window_bytes] {
            let (got, warnings, windows) = streamed(name, &first, window_bytes);
            assert_eq!(got, want, "{name}, windows of {window_bytes} B");
            assert!(window_bytes > 1 || windows >= 3, "{name}: {windows} windows of one chunk");
            assert_eq!(warnings, Vec::<String>::new());
        }
        want
    }

    fn summaries(r: &[RuleResult], rule: &str) -> Vec<String> {
        let text = |o: &Outcome| match o {
            Outcome::Found(f) => format!("{} x{} {} ns", f.summary, f.count, f.time_ns),
            Outcome::Clean { checked } => format!("clean: {checked}"),
            Outcome::CannotJudge { why } => format!("cannot: {why}"),
        };
        r.iter().filter(|x| x.rule == rule).map(|x| text(&x.outcome)).collect()
    }

    const NO_COUNTERS: &str = "cannot: no PM counters in the file (record with `cupti-record --counters`)";
    const NO_PC_SAMPLES: &str = "cannot: no PC samples in the file (record with `cupti-record --pc-sampling`)";

    /// The counter workload (`tests/analyze_kernel_rules.rs`): the copy kernel memory-bound at 83.8% of DRAM peak,
    /// the FMA kernel compute-bound at 95.0% SM issue, both with achieved occupancy above 50%: PM averages summed
    /// window by window read as a load's.
    #[test]
    fn the_counter_workloads_bounds_stream_as_loaded() {
        let r = same("counter_workload.cutr", None, None);
        assert_eq!(
            summaries(&r, "kernel_bound"),
            [
                "fma_burn(float*, int): compute-bound (DRAM 0.0% of peak, SM 95.0% of peak; bound at 60%), 32.0% of \
                 the span time x721 900581920 ns",
                "stream_copy(float4 const*, float4*, unsigned long): memory-bound (DRAM 83.8% of peak, SM 3.4% of \
                 peak; bound at 60%), 31.9% of the span time x1181 896777328 ns"
            ]
        );
        assert_eq!(
            summaries(&r, "low_occupancy"),
            ["clean: occupancy at or above 50%: fma_burn(float*, int) 57.3% achieved (PM sampling); \
                 stream_copy(float4 const*, float4*, unsigned long) 88.5% achieved (PM sampling)"]
        );
        assert_eq!(summaries(&r, "kernel_stalls"), [NO_PC_SAMPLES]);
    }

    /// The PC-sample workload over one step of its three iterations: `chase` waits on memory at line 44 with one
    /// block per SM (6.2% occupancy from its launch: the device limits on the stream's trace), `fma_chain` on its
    /// FMAs at line 52; without steps, over the span.
    #[test]
    fn the_pointer_chases_stalls_and_launch_stream_as_loaded() {
        let (start, end) = (1_795_468_250_283_042_506, 1_795_468_250_289_863_467);
        let step = Step { proc: ProcId(0), rank: 0, index: 0, name: "iterations".into(), start, end };
        let r = same("source_workload_pcs.cutr", None, Some(vec![step]));
        assert_eq!(
            summaries(&r, "kernel_stalls"),
            [
                "chase(unsigned int const*, unsigned int, int, unsigned int*): top stall long_scoreboard (99.0% of \
                 its 454728 PC samples); hottest line source_workload.cu:44 (99.8% of its samples), on 53.0% of the \
                 steps time x3 3612470 ns",
                "fma_chain(float*, int): top stall wait (45.9% of its 406977 PC samples); hottest line \
                 source_workload.cu:52 (92.8% of its samples), on 46.8% of the steps time x3 3194316 ns"
            ]
        );
        assert_eq!(
            summaries(&r, "low_occupancy"),
            ["chase(unsigned int const*, unsigned int, int, unsigned int*): occupancy 6.2% estimated from the \
                 launch, below 50%, on 53.0% of the steps time; launch of 132 block(s) x 128 threads, 22 registers, \
                 0 B shared memory: theoretical 100.0%, 6.2% with its grid; limiter: grid size: 132 block(s) for 132 \
                 SMs (1.00 per SM, 16 would fit) x3 3612470 ns"]
        );
        assert_eq!(summaries(&r, "kernel_bound"), [NO_COUNTERS]);
        let r = same("source_workload_pcs.cutr", None, None);
        assert_eq!(summaries(&r, "kernel_stalls").len(), 2);
    }

    /// `cuda_workload.cutr`: `spin`, one thread on one of 132 SMs for 71.8% of the span (10 launches, 20,009,843
    /// ns, the first correlation 167), found low; neither counters nor PC samples. Steps with no kernel in them
    /// leave nothing hot.
    #[test]
    fn the_spin_kernels_occupancy_streams_as_loaded() {
        let r = same("cuda_workload.cutr", None, None);
        assert_eq!(
            summaries(&r, "low_occupancy"),
            ["spin(unsigned long long, unsigned long long*): occupancy 0.0% estimated from the launch, below 50%, \
                 on 71.8% of the span time; launch of 1 block(s) x 1 threads, 16 registers, 0 B shared memory: \
                 theoretical 1.6%, 0.0% with its grid; limiter: grid size: 1 block(s) for 132 SMs (0.01 per SM, 32 \
                 would fit) x10 20009843 ns"]
        );
        let Outcome::Found(f) = &r[0].outcome else { panic!("{:?}", r[0]) };
        assert_eq!(f.events.iter().map(|e| e.correlation).next(), Some(167));
        assert_eq!(f.events.len(), 5);
        assert_eq!(
            (summaries(&r, "kernel_bound"), summaries(&r, "kernel_stalls")),
            (vec![NO_COUNTERS.into()], vec![NO_PC_SAMPLES.into()])
        );
        // A step before any GPU work, and one of a process the trace lacks: nothing ran in them.
        let step = |proc, end| Step { proc: ProcId(proc), rank: 0, index: 0, name: "empty".into(), start: 0, end };
        let r = same("cuda_workload.cutr", None, Some(vec![step(0, 10), step(7, u64::MAX)]));
        assert_eq!(summaries(&r, "low_occupancy"), ["clean: no kernel takes 5% or more of the steps time"]);
    }

    /// PyTorch's loop over its 20 `step N` ranges: no kernel name takes 5% of the steps' time.
    #[test]
    fn the_pytorch_loop_streams_as_loaded() {
        let r = same("pytorch_loop.cutr", Some("step "), None);
        assert_eq!(
            r.iter().flat_map(|x| summaries(std::slice::from_ref(x), x.rule)).collect::<Vec<_>>(),
            ["clean: no kernel takes 5% or more of the steps time", NO_COUNTERS, NO_PC_SAMPLES]
        );
    }

    /// One PM metric recorded (no bound can be called, the lacking series named per kernel; occupancy from the
    /// launch), and two GPUs whose kernels are judged on GPU 0, named.
    #[test]
    fn partial_counters_and_two_gpus_stream_as_loaded() {
        let r = same("counter_100khz.cutr", None, None);
        assert_eq!(
            summaries(&r, "kernel_bound"),
            [
                "cannot: fma_burn(float*, int): GPU 0 has no PM average of dram__bytes_write.sum.per_second over it",
                "cannot: stream_copy(float4 const*, float4*, unsigned long): GPU 0 has no PM average of \
                 dram__bytes_write.sum.per_second over it"
            ]
        );
        let r = same("counter_two_gpus.cutr", None, None);
        assert_eq!(
            summaries(&r, "kernel_bound"),
            [
                "fma_burn(float*, int) on GPU 0: compute-bound (DRAM 0.0% of peak, SM 94.9% of peak; bound at 60%), \
                 26.8% of the span time x314 395122528 ns",
                "stream_copy(float4 const*, float4*, unsigned long) on GPU 0: memory-bound (DRAM 81.4% of peak, SM \
                 4.8% of peak; bound at 60%), 26.7% of the span time x722 394324305 ns"
            ]
        );
    }
}
