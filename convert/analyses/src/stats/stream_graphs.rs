//! The `graphs` section of `stats --stream`, equal to the loaded one ([`super::graphs`]), with state bounded by the
//! answer: the graphs themselves (nodes, executables, the calls and NVTX ranges that hold their creation) from a
//! pass of their own ([`graph_context_in`], as `export --parquet --stream` reads them; in a `--start/--end` window,
//! over the calls and ranges a load with that window keeps), then per node the GPU time and ops traced back to it,
//! per executable its replays' accumulator ([`Durations`]: medians exact up to its cap), and the replays still
//! open.
//!
//! A replayed op is traced back to its node at its launch, as a load does: the launching call's start (from the
//! stream's horizon, or remembered from an earlier op of the same replay), else the op's own start. The two differ
//! only where an executable update (`cudaGraphExecUpdate`) lies between them; the ops traced back at their own
//! start in a file with graph events are counted ([`StreamedGraphs::without_launch`]).
//!
//! When a replay is final: CUDA runs the launches of one executable one after the other (each launch is ordered
//! behind the executable's previous launches, and an executable is not launched from two threads at once), in the
//! order of their calls, so in their correlation ids' order, and a replay's ops all end before the next replay's
//! first op starts. The stream hands on chunks by their first record's time: no row of a later window starts
//! before [`Batch::next_start`]. So once some op of a later replay of the same executable, read already, starts
//! at or before `next_start`, every op of the earlier replays has been read (an unread one would start after
//! `next_start` yet before that op): they are settled into their executable's accumulator and dropped. The rest
//! are settled at the end. Open replays are a few per executable whatever the length of the recording, and the
//! rule does not depend on the correlation horizon. An op that comes for a replay already settled (a damaged file
//! whose chunks' times are out of order, or replays that overlap) is counted in its executable's ops and its
//! node's time, in no replay, and said ([`StreamedGraphs::warning`]).

use std::collections::BTreeMap;
use std::path::PathBuf;

use cutr_format::Reader;
use cutr_model::graphs::NONE;
use cutr_model::numbered::{family_label, split_number};
use cutr_model::rows::ApiCall;
use cutr_model::stream::{Batch, StreamOptions, graph_context_in};
use cutr_model::{Filter, LoadError, ProcId, Trace};
use rustc_hash::FxHashMap;

use super::families::NvtxNames;
use super::graphs::{ExecTally, GraphReport, GraphTally, add_to_node, range_sums, report};
use super::order_stats::Durations;
use super::{RangeStats, StatsOptions};

/// One replay not yet final: its GPU time and ops so far, its earliest op's start, and its launching call's start
/// once an op of it came with the call.
struct OpenReplay {
    ns: u64,
    ops: u64,
    first_start: u64,
    launch: Option<u64>,
}

/// An executable's replays: those still open by correlation id, the highest id settled, and the settled ones'
/// GPU times.
struct ExecReplays {
    open: BTreeMap<u32, OpenReplay>,
    settled_through: Option<u32>,
    replays: Durations,
    ops: u64,
}

/// A graph op of a batch: (file, executable, node id, correlation id, start, duration).
type Op = (ProcId, u32, u64, u32, u64, u64);

/// What the section leaves for the rest of the report.
#[derive(Default)]
pub(super) struct GraphsEnd {
    pub report: GraphReport,
    /// Executables whose replays' median is a sketch's estimate.
    pub estimated_rows: u64,
    /// Graph ops traced back at their own start ([`StreamedGraphs::without_launch`]).
    pub traced_at_own_start: u64,
    pub warning: Option<String>,
}

/// The section's state over a stream.
pub(super) struct StreamedGraphs {
    /// The graphs' pass: processes, names, graphs and the calls and ranges holding their creation (`None`: no file
    /// recorded graph events).
    context: Option<Trace>,
    cap: usize,
    ops: u64,
    traced: u64,
    recorded: u64,
    per_node: Vec<(u64, u64)>,
    /// Per file: ops of a graph not traced back, where the file recorded graph events.
    not_traced: Vec<u64>,
    execs: FxHashMap<(ProcId, u32), ExecReplays>,
    /// Ops that came after their replay was settled: in no replay.
    late_ops: u64,
    /// Ops of a graph in files with graph events whose launching call was not at hand: traced back at their start.
    without_launch: u64,
    /// The most replays an executable keeps open ([`StreamOptions::max_waiting`]): an edge kept back by chunk
    /// headers that claim early times would keep every replay open and scanned each window; past it the oldest
    /// are settled, counted in `settled_early`.
    max_open: usize,
    settled_early: u64,
}

impl StreamedGraphs {
    /// The graphs of `paths` read in a pass of their own (with `opts`' windows), joined as a load with `filter`
    /// joins them; replays' medians exact up to `cap` replays.
    pub(super) fn open(
        paths: &[PathBuf],
        readers: &[Reader],
        opts: &StreamOptions,
        filter: &Filter,
        cap: usize,
    ) -> Result<StreamedGraphs, LoadError> {
        let mut g = StreamedGraphs::new(graph_context_in(paths, readers, opts, filter)?, cap, readers.len());
        g.max_open = opts.max_waiting.max(1);
        Ok(g)
    }

    /// Over the graphs' pass `context`, for at most `files` processes.
    fn new(context: Option<Trace>, cap: usize, files: usize) -> StreamedGraphs {
        let nodes = context.as_ref().map_or(0, |g| g.graphs.nodes.len());
        StreamedGraphs {
            context,
            cap,
            ops: 0,
            traced: 0,
            recorded: 0,
            per_node: vec![(0, 0); nodes],
            not_traced: vec![0; files],
            execs: FxHashMap::default(),
            late_ops: 0,
            without_launch: 0,
            max_open: cutr_model::stream::DEFAULT_MAX_WAITING,
            settled_early: 0,
        }
    }

    /// A window's graph ops into their replays and nodes; then the replays it made final settled.
    pub(super) fn add(&mut self, b: &Batch) {
        let kernels =
            b.kernels.iter().map(|k| (k.proc, k.graph_id, k.graph_node_id, k.correlation, k.start, k.duration()));
        let copies =
            b.memcpys.iter().map(|m| (m.proc, m.graph_id, m.graph_node_id, m.correlation, m.start, m.duration()));
        let sets =
            b.memsets.iter().map(|m| (m.proc, m.graph_id, m.graph_node_id, m.correlation, m.start, m.duration()));
        // `gpu_calls` is per kernel, then copy, then memset: the order of the chain.
        let calls = b.gpu_calls.iter().map(Option::as_ref).chain(std::iter::repeat(None));
        for (op, call) in kernels.chain(copies).chain(sets).zip(calls) {
            if op.1 != 0 {
                self.op(op, call);
            }
        }
        self.settle(b.next_start);
    }

    fn op(&mut self, (proc, exec, node, correlation, start, ns): Op, call: Option<&ApiCall>) {
        self.ops += 1;
        let cap = self.cap;
        let e = self.execs.entry((proc, exec)).or_insert_with(|| ExecReplays {
            open: BTreeMap::new(),
            settled_through: None,
            replays: Durations::new(cap),
            ops: 0,
        });
        e.ops += 1;
        let launch = if e.settled_through.is_some_and(|s| correlation <= s) && !e.open.contains_key(&correlation) {
            self.late_ops += 1;
            call.map(|c| c.start)
        } else {
            let r = e.open.entry(correlation).or_insert(OpenReplay { ns: 0, ops: 0, first_start: start, launch: None });
            (r.ns, r.ops, r.first_start) = (r.ns.saturating_add(ns), r.ops + 1, r.first_start.min(start));
            if r.launch.is_none() {
                r.launch = call.map(|c| c.start);
            }
            r.launch
        };
        let Some(g) = &self.context else { return };
        if !g.graphs.recorded(proc) {
            return;
        }
        self.recorded += 1;
        self.without_launch += launch.is_none() as u64;
        let origin = g.graphs.origin_of(proc, node, launch.unwrap_or(start)).filter(|&n| n != NONE);
        match origin.filter(|&n| (n as usize) < self.per_node.len()) {
            Some(n) => {
                self.traced += 1;
                add_to_node(&mut self.per_node, n, ns);
            }
            None => {
                if let Some(c) = self.not_traced.get_mut(proc.index()) {
                    *c += 1;
                }
            }
        }
    }

    /// Settles each executable's replays that come before one of its later replays whose read op starts at or
    /// before `next_start` (all of them after the last window).
    fn settle(&mut self, next_start: Option<u64>) {
        let max_open = self.max_open;
        for e in self.execs.values_mut().filter(|e| !e.open.is_empty()) {
            if e.open.len() > max_open {
                // The oldest past the cap settle now (see `max_open`).
                let keep_from = *e.open.keys().nth(e.open.len() - max_open).expect("more than the cap are open");
                let later = e.open.split_off(&keep_from);
                self.settled_early += e.open.len() as u64;
                for (c, r) in std::mem::replace(&mut e.open, later) {
                    e.replays.add(r.ns);
                    e.settled_through = Some(e.settled_through.map_or(c, |s| s.max(c)));
                }
            }
            // The replays left open: after the last window none, else from the latest one known to have begun.
            let later = match next_start {
                None => BTreeMap::new(),
                Some(at) => {
                    let Some(&begun) = e.open.iter().rev().find(|(_, r)| r.first_start <= at).map(|(c, _)| c) else {
                        continue;
                    };
                    e.open.split_off(&begun)
                }
            };
            for (c, r) in std::mem::replace(&mut e.open, later) {
                e.replays.add(r.ns);
                e.settled_through = Some(e.settled_through.map_or(c, |s| s.max(c)));
            }
        }
    }

    /// The section once the stream ended: its report (`t`: the stream's trace, which gets the graph joins' counts),
    /// and the NVTX rows' graph replays added to `nvtx`.
    pub(super) fn finish(self, t: &mut Trace, nvtx: &mut [RangeStats], opts: &StatsOptions) -> GraphsEnd {
        self.add_join_counts(t);
        self.add_to_nvtx(nvtx, opts.nvtx_names);
        let (estimated_rows, traced_at_own_start, warning) =
            (self.estimated_rows(), self.without_launch, self.warning());
        let report = self.report(t, opts.top, &opts.symbol_dirs);
        GraphsEnd { report, estimated_rows, traced_at_own_start, warning }
    }

    /// Ops that came after their replay was settled, and replays settled early, said; `None` when none did.
    fn warning(&self) -> Option<String> {
        let early = (self.settled_early > 0)
            .then(|| super::stream_utilization::settled_early_warning("graphs", self.settled_early, self.max_open));
        let late = (self.late_ops > 0).then(|| {
            format!(
                "{} CUDA graph ops were read after their replay was summarized (chunks whose times are out of order, \
                 or replays of one executable that overlap): in the graphs section's ops and GPU time by node, in no \
                 replay's time (--no-stream counts them there)",
                self.late_ops
            )
        });
        match (early, late) {
            (Some(e), Some(l)) => Some(format!("{e}; {l}")),
            (e, l) => e.or(l),
        }
    }

    /// Adds the graph joins' counts of the graphs' pass, and the ops not traced back, to the stream's trace `t`
    /// (its warnings and join counts say them as a load's do).
    fn add_join_counts(&self, t: &mut Trace) {
        let from = |i: usize| self.context.as_ref().and_then(|g| g.processes.get(i)).map(|p| p.stats.clone());
        for (i, p) in t.processes.iter_mut().enumerate() {
            let mut s = from(i).unwrap_or_default();
            s.graph_ops_without_capture = self.not_traced.get(i).copied().unwrap_or(0);
            let d = &mut p.stats;
            d.graph_events_lost = d.graph_events_lost.saturating_add(s.graph_events_lost);
            d.graph_nodes_without_api += s.graph_nodes_without_api;
            d.graph_events_unjoined += s.graph_events_unjoined;
            d.graph_ops_without_capture += s.graph_ops_without_capture;
            let all = &mut t.stats;
            all.graph_events_lost = all.graph_events_lost.saturating_add(s.graph_events_lost);
            all.graph_nodes_without_api += s.graph_nodes_without_api;
            all.graph_events_unjoined += s.graph_events_unjoined;
            all.graph_ops_without_capture += s.graph_ops_without_capture;
        }
    }

    /// The NVTX section's second attribution: each closed range's graph ops by where their node was made, added to
    /// the rows of the ranges' names (a folded family's row for its members), as the loaded section adds them.
    fn add_to_nvtx(&self, rows: &mut [RangeStats], names: NvtxNames) {
        let Some(g) = &self.context else { return };
        let sums = range_sums(g, &self.per_node);
        let index: FxHashMap<(String, bool), usize> =
            rows.iter().enumerate().map(|(i, r)| ((r.time.name.clone(), r.folded_names > 0), i)).collect();
        for (r, &(ns, ops)) in g.ranges.iter().zip(&sums).filter(|(r, s)| r.closed() && s.1 > 0) {
            let name = g.names.get(r.name);
            let family = match names {
                NvtxNames::Fold => split_number(name).map(|(prefix, _)| family_label(prefix)),
                NvtxNames::Each => None,
            };
            // A member of a folded family is in its family's row, any other name in its own.
            let row = family.and_then(|f| index.get(&(f, true))).or_else(|| index.get(&(name.to_string(), false)));
            if let Some(&i) = row {
                rows[i].replayed_gpu_ns = rows[i].replayed_gpu_ns.saturating_add(ns);
                rows[i].replayed_gpu_ops += ops;
            }
        }
    }

    /// Executables whose replays' median will be a sketch's estimate.
    fn estimated_rows(&self) -> u64 {
        self.execs.values().filter(|e| e.replays.estimated()).count() as u64
    }

    /// The section (`t`: the stream's trace, for the processes when no file recorded graph events).
    fn report(self, t: &Trace, top: Option<usize>, symbol_dirs: &[PathBuf]) -> GraphReport {
        let execs = self
            .execs
            .into_iter()
            .map(|((proc, exec), e)| ExecTally { proc, exec, replays: e.replays, ops: e.ops })
            .collect();
        let tally =
            GraphTally { ops: self.ops, traced: self.traced, recorded: self.recorded, per_node: self.per_node, execs };
        report(self.context.as_ref().unwrap_or(t), tally, top, symbol_dirs)
    }
}

#[cfg(test)]
mod tests {
    use cutr_model::rows::Kernel;

    use super::*;
    use crate::stats::summarize;

    /// A kernel of replay `correlation` of executable 9, running from `start` for `ns`.
    fn op(correlation: u32, start: u64, ns: u64) -> Kernel {
        Kernel { graph_id: 9, graph_node_id: 1, correlation, start, end: start + ns, ..Default::default() }
    }

    fn batch(kernels: Vec<Kernel>, next_start: Option<u64>) -> Batch {
        Batch { kernels, next_start, ..Default::default() }
    }

    fn open_replays(g: &StreamedGraphs) -> usize {
        g.execs.values().map(|e| e.open.len()).sum()
    }

    /// An edge kept at 0 (chunk headers that claim early times) would keep every replay open: past the cap the
    /// oldest settle, are counted and said, and the replays' figures stay whole.
    #[test]
    fn past_the_cap_the_oldest_open_replays_settle_and_are_said() {
        let mut g = StreamedGraphs::new(None, 1000, 1);
        g.max_open = 2;
        for r in 1..=5u32 {
            g.add(&batch(vec![op(r, 1000 * r as u64, 10 * r as u64)], Some(0)));
        }
        assert_eq!((open_replays(&g), g.settled_early), (2, 3));
        g.add(&batch(Vec::new(), None));
        let e = g.execs.remove(&(ProcId(0), 9)).unwrap();
        let summary = e.replays.summary(String::new());
        assert_eq!((summary.count, summary.total_ns, open_replays(&g)), (5, 150, 0));
        let w = g.warning().unwrap();
        assert!(
            w.starts_with("graphs: 3 rows were settled before the stream passed their time, as more than 2"),
            "{w}"
        );
    }

    /// 100 replays of three ops each, a window per op: a replay is settled once the next one's first op is read and
    /// starts before the next window, so only the replay running at a window's edge stays open, and the summary is
    /// the exact one.
    #[test]
    fn replays_settle_behind_the_next_replay_and_sum_as_a_load_does() {
        let mut g = StreamedGraphs::new(None, 1000, 1);
        let (mut most_open, mut sums) = (0, Vec::new());
        let ops: Vec<Kernel> =
            (1..=100u32).flat_map(|r| (0..3u64).map(move |i| op(r, 1000 * r as u64 + 10 * i, r as u64 + i))).collect();
        for (i, k) in ops.iter().enumerate() {
            g.add(&batch(vec![*k], ops.get(i + 1).map(|n| n.start)));
            most_open = most_open.max(open_replays(&g));
        }
        assert_eq!((most_open, open_replays(&g)), (1, 0));
        for r in 1..=100u64 {
            sums.push(3 * r + 3);
        }
        let report = g.report(&Trace::default(), None, &[]);
        assert_eq!((report.ops, report.ops_without_graph_events, report.execs.len()), (300, 300, 1));
        let e = &report.execs[0];
        let mut want = summarize("graph 9".into(), &mut sums);
        want.percent = 100.0;
        assert_eq!((&e.per_replay, e.ops, e.template), (&want, 300, None));
    }

    /// A later replay whose op starts after the next window's start may still be preceded by unread ops of the
    /// earlier one: nothing is settled until a later replay is known to have begun.
    #[test]
    fn a_replay_stays_open_until_a_later_one_has_begun_before_the_next_window() {
        let mut g = StreamedGraphs::new(None, 1000, 1);
        // Replay 1's first op; replay 2's op starts at 500, after the next window's start (300).
        g.add(&batch(vec![op(1, 100, 5), op(2, 500, 7)], Some(300)));
        assert_eq!(open_replays(&g), 2);
        // Replay 1's second op, read late but before replay 2 began: still its replay's.
        g.add(&batch(vec![op(1, 300, 6)], Some(600)));
        assert_eq!(open_replays(&g), 1);
        g.add(&batch(Vec::new(), None));
        assert_eq!(g.late_ops, 0);
        let report = g.report(&Trace::default(), None, &[]);
        let p = &report.execs[0].per_replay;
        assert_eq!((p.count, p.total_ns, p.min_ns, p.max_ns), (2, 18, 7, 11));
    }

    /// Every launching call out of reach (as past a horizon, or read after its work): each op of a file with graph
    /// events is traced back at its own start, and counted. In `graph_workload` the executable update comes before
    /// the launches, so the nodes are the load's all the same.
    #[test]
    fn ops_without_their_launching_call_are_traced_back_at_their_own_start_and_counted() {
        let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/graph_workload.cutr");
        let paths = [path.clone()];
        let readers = [Reader::open(&path).unwrap()];
        let opts = StreamOptions { window_bytes: 1, ..Default::default() };
        let mut g = StreamedGraphs::open(&paths, &readers, &opts, &Filter::default(), 1000).unwrap();
        let (t, _) = cutr_model::stream::stream_readers(&paths, &readers, &opts, |_, _, mut b| {
            b.gpu_calls.clear();
            g.add(&b);
        })
        .unwrap();
        assert_eq!((g.without_launch, g.late_ops), (26, 0));
        let loaded = cutr_model::load(&paths, &Default::default()).unwrap();
        assert_eq!(g.report(&t, None, &[]), crate::stats::graphs::graphs(&loaded, None, &[]));
    }

    /// The NVTX rows' graph replays: a closed range's nodes' ops go to its name's row, or to its family's row when
    /// the family is folded; ranges enclosing it get them too, an unclosed one none.
    #[test]
    fn replays_go_to_the_nvtx_row_of_the_range_or_of_its_folded_family() {
        use cutr_model::rows::NvtxRange;
        use cutr_model::{GraphNode, NameId};
        let mut t = Trace::default();
        let range = |name: NameId, start, end, parent| NvtxRange {
            proc: ProcId(0),
            start,
            end,
            pid: 1,
            tid: 1,
            name,
            domain: NameId::EMPTY,
            id: 0,
            depth: 0,
            parent,
        };
        let (fwd, step) = (t.names.intern("forward"), t.names.intern("step 7"));
        t.ranges = vec![range(fwd, 0, 100, NONE), range(step, 10, 20, 0), range(step, 30, u64::MAX, 0)];
        let node = |range| GraphNode {
            proc: ProcId(0),
            graph: 1,
            node: 1,
            node_type: 0,
            created: 15,
            tid: 1,
            api: NONE,
            range,
            stack: 0..0,
        };
        t.graphs.nodes = vec![node(1), node(2)];
        let mut g = StreamedGraphs::new(Some(t), 1000, 1);
        g.per_node = vec![(50, 2), (7, 1)];
        let row = |name: &str, folded_names| RangeStats {
            time: crate::stats::Summary { name: name.into(), ..Default::default() },
            folded_names,
            ..Default::default()
        };
        let replayed = |rows: &[RangeStats]| -> Vec<(u64, u64)> {
            rows.iter().map(|r| (r.replayed_gpu_ns, r.replayed_gpu_ops)).collect()
        };
        // `forward` holds both nodes' ranges (the unclosed one's node too, through its parent); `step 7` is closed
        // once.
        let mut folded = [row("forward", 0), row("step <n>", 65), row("step 7", 0)];
        g.add_to_nvtx(&mut folded, NvtxNames::Fold);
        assert_eq!(replayed(&folded), [(57, 3), (50, 2), (0, 0)]);
        let mut each = [row("forward", 0), row("step 7", 0)];
        g.add_to_nvtx(&mut each, NvtxNames::Each);
        assert_eq!(replayed(&each), [(57, 3), (50, 2)]);
    }

    #[test]
    fn an_op_for_a_settled_replay_is_counted_in_no_replay_and_said() {
        let late = "1 CUDA graph ops were read after their replay was summarized (chunks whose times are out of \
                        order, or replays of one executable that overlap): in the graphs section's ops and GPU time \
                    by node, in no replay's time (--no-stream counts them there)";
        // Replay 1 is settled by replay 2's op at 200, before the next window (300); its op at 400 comes after.
        let mut g = StreamedGraphs::new(None, 1000, 1);
        g.add(&batch(vec![op(1, 100, 5), op(2, 200, 7)], Some(300)));
        assert_eq!(g.warning(), None);
        g.add(&batch(vec![op(1, 400, 6)], None));
        assert_eq!(g.warning().as_deref(), Some(late));
        let report = g.report(&Trace::default(), None, &[]);
        let (e, p) = (&report.execs[0], &report.execs[0].per_replay);
        assert_eq!((report.ops, e.ops, p.count, p.total_ns), (3, 3, 2, 12));
    }
}
