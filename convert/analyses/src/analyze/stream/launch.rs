//! Launch health over a stream (the loaded path: [`crate::analyze::launch`]), in two folds. The first pass's
//! ([`LaunchFirstFold`]) finds what needs every launch: each class's distributions (their outlier thresholds
//! among them), the kernel names' counts (which are the commonest) and short kernels, each stream's queue span
//! (its series' windows) and the largest queued launch latency (how late a call's queue event can come). The
//! second ([`LaunchFold`]) counts the outliers and keeps the first few, the commonest names' distributions, and
//! walks the queues.
//!
//! Distributions are exact up to [`EXACT_DIST_VALUES`] values each and a sketch's estimates beyond
//! ([`Dist::estimated`]); everything else equals the load's.

mod ops;
mod queue;

use cutr_model::stream::{Batch, StreamOptions};
use cutr_model::{ApiCall, NameId, Trace};
use rustc_hash::FxHashMap;

use self::ops::{GraphCalls, Paired, Pairing, Seen};
use self::queue::Queues;
use super::FirstPass;
use crate::analyze::launch::collect::{Class, StreamKey, is_short, latency};
use crate::analyze::launch::dist::DistFold;
use crate::analyze::launch::{
    ClassHealth, Dist, Figure, LaunchHealth, NO_NAME, NameCount, NameHealth, Outliers, ShortKernels, TOP_NAMES,
    evidence_order, rank_names,
};
use crate::analyze::types::MAX_EVIDENCE;
use cutr_model::demangle::demangle;

pub use crate::analyze::launch::dist::EXACT_DIST_VALUES;

/// The three classes' places in the arrays here: the order [`LaunchHealth`] gives them in.
fn class_index(c: Class) -> usize {
    match c {
        Class::Kernel => 0,
        Class::AsyncCopy => 1,
        Class::Graph => 2,
    }
}

/// What the first pass finds for launch health: for [`LaunchFold::new`].
#[derive(Clone, Debug)]
pub struct LaunchFirst {
    /// Latency and CPU cost of kernels, async copies and graph launches.
    dists: [(Dist, Dist); 3],
    /// The [`TOP_NAMES`] commonest kernel names of class `kernels` (as [`LaunchHealth::by_name`] orders them), each
    /// with the mangled name ids that read as it.
    top_names: Vec<NameCount<Vec<NameId>>>,
    /// Distinct (demangled) kernel names of class `kernels`.
    names: u64,
    shorter_than_launch: ShortKernels,
    /// Per launch queue: its first and last event (call or op start).
    stream_spans: FxHashMap<StreamKey, (u64, u64)>,
    /// The largest latency of a kernel or async copy.
    queue_lag: u64,
}

/// The first pass's fold for launch health.
pub struct LaunchFirstFold {
    pairing: Pairing,
    graphs: GraphCalls,
    values: [(DistFold, DistFold); 3],
    names: FxHashMap<NameId, (u64, u64)>,
    stream_spans: FxHashMap<StreamKey, (u64, u64)>,
}

impl LaunchFirstFold {
    /// A fold for the first pass over a stream read with `opts` (its `max_waiting` bounds the graph launches
    /// waiting for their replay's first op).
    pub fn new(opts: &StreamOptions) -> LaunchFirstFold {
        LaunchFirstFold::with_cap(opts, EXACT_DIST_VALUES)
    }

    /// Keeps `cap` values exact per distribution.
    fn with_cap(opts: &StreamOptions, cap: usize) -> LaunchFirstFold {
        LaunchFirstFold {
            pairing: Pairing::default(),
            graphs: GraphCalls::new(opts.max_waiting),
            values: std::array::from_fn(|_| (DistFold::with_cap(cap), DistFold::with_cap(cap))),
            names: FxHashMap::default(),
            stream_spans: FxHashMap::default(),
        }
    }

    /// Folds one window's GPU ops.
    pub fn batch(&mut self, trace: &Trace, b: &Batch) {
        let Self { pairing, graphs, values, names, stream_spans } = self;
        pairing.each(trace, b, |p| {
            let Paired::Launch(s) = p else { return };
            if s.class == Class::Graph {
                graphs.add(&s);
                return;
            }
            let (lat, cost) = &mut values[class_index(s.class)];
            lat.add(Figure::Latency.value(&s.call, s.op_start));
            cost.add(Figure::CpuCost.value(&s.call, s.op_start));
            let span = stream_spans.entry(s.stream).or_insert((u64::MAX, 0));
            *span = (span.0.min(s.call.start).min(s.op_start), span.1.max(s.call.start).max(s.op_start));
            if s.class == Class::Kernel {
                let n = names.entry(s.name.unwrap_or(NO_NAME)).or_default();
                n.0 += 1;
                n.1 += is_short(&s.call, s.op_start, s.op_end) as u64;
            }
        });
        let graph_values = &mut values[class_index(Class::Graph)];
        graphs.settle(b.next_start, |call, first| {
            graph_values.0.add(Figure::Latency.value(call, first));
            graph_values.1.add(Figure::CpuCost.value(call, first));
        });
    }

    /// What the second pass needs, and a warning if graph launches were settled before their replay was surely all
    /// read.
    pub fn finish(mut self, trace: &Trace) -> (LaunchFirst, Vec<String>) {
        let graph_values = &mut self.values[class_index(Class::Graph)];
        self.graphs.settle(None, |call, first| {
            graph_values.0.add(Figure::Latency.value(call, first));
            graph_values.1.add(Figure::CpuCost.value(call, first));
        });
        let dists = self.values.map(|(lat, cost)| (lat.finish(), cost.finish()));
        // Named as a load names them: two mangled names that read the same are one name.
        let mut by_text: FxHashMap<String, NameCount<Vec<NameId>>> = FxHashMap::default();
        for (id, (launches, short)) in self.names {
            let name = if id == NO_NAME { String::new() } else { demangle(trace.names.get(id)) };
            let c = by_text.entry(name.clone()).or_insert(NameCount { key: Vec::new(), name, launches: 0, short: 0 });
            c.key.push(id);
            (c.launches, c.short) = (c.launches + launches, c.short + short);
        }
        let mut counts: Vec<NameCount<Vec<NameId>>> = by_text.into_values().collect();
        let shorter_than_launch = rank_names(&mut counts);
        let names = counts.len() as u64;
        counts.truncate(TOP_NAMES);
        let queue_lag = dists[0].0.max_ns.max(dists[1].0.max_ns);
        let stream_spans = self.stream_spans;
        let first = LaunchFirst { dists, top_names: counts, names, shorter_than_launch, stream_spans, queue_lag };
        (first, self.graphs.warning().into_iter().collect())
    }
}

/// The values of one figure beyond its threshold: counted, and the first [`MAX_EVIDENCE`] in evidence order kept.
struct OutlierFold {
    figure: Figure,
    threshold_ns: u64,
    count: u64,
    /// Sorted by [`evidence_order`].
    first: Vec<Evidence>,
}

/// An outlier kept for the evidence: its [`evidence_order`], call, op start and mangled kernel name.
type Evidence = ((u64, u64, u16, u32), ApiCall, u64, Option<NameId>);

impl OutlierFold {
    fn new(figure: Figure, d: &Dist) -> OutlierFold {
        OutlierFold { figure, threshold_ns: d.outlier_threshold_ns(), count: 0, first: Vec::new() }
    }

    fn add(&mut self, call: &ApiCall, op_start: u64, name: Option<NameId>) {
        if self.figure.value(call, op_start) <= self.threshold_ns {
            return;
        }
        self.count += 1;
        let key = evidence_order(call, op_start);
        if self.first.len() == MAX_EVIDENCE && self.first.last().is_some_and(|l| l.0 <= key) {
            return;
        }
        let at = self.first.partition_point(|e| e.0 <= key);
        self.first.insert(at, (key, *call, op_start, name));
        self.first.truncate(MAX_EVIDENCE);
    }

    fn finish(self, trace: &Trace) -> Outliers {
        let figure = self.figure;
        let first = self
            .first
            .iter()
            .map(|(_, call, op, name)| {
                let name = name.map(|n| demangle(trace.names.get(n)));
                figure.evidence(trace, call, *op, name.as_deref())
            })
            .collect();
        Outliers { threshold_ns: self.threshold_ns, count: self.count, first }
    }
}

/// The second pass's fold for launch health.
pub struct LaunchFold {
    pairing: Pairing,
    graphs: GraphCalls,
    dists: [(Dist, Dist); 3],
    outliers: [(OutlierFold, OutlierFold); 3],
    /// The commonest names (the first pass's order), where each of their mangled ids is among them, and their
    /// launches' latencies and costs.
    top: Vec<NameCount<Vec<NameId>>>,
    top_index: FxHashMap<NameId, usize>,
    top_values: Vec<(DistFold, DistFold)>,
    names: u64,
    shorter_than_launch: ShortKernels,
    queues: Queues,
    without_launcher: u64,
    sync_copies: u64,
    started_before_call: u64,
}

impl LaunchFold {
    /// `launch` is the first pass's [`LaunchFirstFold`]'s; `trace` is unused as the stream's trace has no rows.
    pub fn new(_trace: &Trace, _first: &FirstPass, launch: &LaunchFirst, opts: &StreamOptions) -> LaunchFold {
        LaunchFold::with_cap(launch, opts, EXACT_DIST_VALUES)
    }

    fn with_cap(launch: &LaunchFirst, opts: &StreamOptions, cap: usize) -> LaunchFold {
        let top = launch.top_names.clone();
        let top_index = top.iter().enumerate().flat_map(|(i, n)| n.key.iter().map(move |&id| (id, i))).collect();
        LaunchFold {
            pairing: Pairing::default(),
            graphs: GraphCalls::new(opts.max_waiting),
            dists: launch.dists,
            outliers: launch
                .dists
                .map(|(lat, cost)| (OutlierFold::new(Figure::Latency, &lat), OutlierFold::new(Figure::CpuCost, &cost))),
            top_values: top.iter().map(|_| (DistFold::with_cap(cap), DistFold::with_cap(cap))).collect(),
            top_index,
            top,
            names: launch.names,
            shorter_than_launch: launch.shorter_than_launch.clone(),
            queues: Queues::new(launch.stream_spans.clone(), launch.queue_lag, opts.max_waiting),
            without_launcher: 0,
            sync_copies: 0,
            started_before_call: 0,
        }
    }

    /// Folds one window's GPU ops, and walks the queue events and graph launches the window's edge made final.
    pub fn batch(&mut self, trace: &Trace, b: &Batch) {
        let mut launches: Vec<Seen> = Vec::new();
        self.pairing.each(trace, b, |p| match p {
            Paired::Launch(s) => launches.push(s),
            Paired::WithoutLauncher => self.without_launcher += 1,
            Paired::Sync => self.sync_copies += 1,
        });
        for s in &launches {
            self.started_before_call += (s.op_start < s.call.start) as u64;
            if s.class == Class::Graph {
                self.graphs.add(s);
                continue;
            }
            let (lat, cost) = &mut self.outliers[class_index(s.class)];
            lat.add(&s.call, s.op_start, s.name);
            cost.add(&s.call, s.op_start, s.name);
            self.queues.add(s);
            let top = s.name.filter(|_| s.class == Class::Kernel).and_then(|n| self.top_index.get(&n));
            if let Some((lat, cost)) = top.and_then(|&i| self.top_values.get_mut(i)) {
                lat.add(latency(&s.call, s.op_start));
                cost.add(Figure::CpuCost.value(&s.call, s.op_start));
            }
        }
        self.settle(b.next_start);
    }

    fn settle(&mut self, edge: Option<u64>) {
        let (lat, cost) = &mut self.outliers[class_index(Class::Graph)];
        // A graph launch is named by its call, not by the kernels it replayed.
        self.graphs.settle(edge, |call, first| {
            lat.add(call, first, None);
            cost.add(call, first, None);
        });
        self.queues.settle(edge);
    }

    /// The section; `first_record_ns` is the stream's span start ([`cutr_model::stream::StreamEnd::span`]).
    pub fn finish(mut self, trace: &Trace, first_record_ns: u64) -> (LaunchHealth, Vec<String>) {
        self.settle(None);
        let (queues, blocked_on_full_queue, queue_warning) = self.queues.finish();
        let by_name = self
            .top
            .into_iter()
            .zip(self.top_values)
            .map(|(n, (lat, cost))| NameHealth {
                name: n.name,
                latency: lat.finish(),
                cpu_cost: cost.finish(),
                shorter_than_launch: n.short,
            })
            .collect();
        let mut classes =
            self.outliers.into_iter().zip(self.dists).map(|((lat_out, cost_out), (latency, cpu_cost))| ClassHealth {
                latency,
                cpu_cost,
                latency_outliers: lat_out.finish(trace),
                cpu_cost_outliers: cost_out.finish(trace),
            });
        let mut next = || classes.next().unwrap_or_default();
        let health = LaunchHealth {
            first_record_ns,
            kernels: next(),
            async_copies: next(),
            graph_launches: next(),
            graph_ops: self.graphs.ops,
            by_name,
            names: self.names,
            shorter_than_launch: self.shorter_than_launch,
            queues,
            blocked_on_full_queue,
            without_launcher: self.without_launcher,
            sync_copies: self.sync_copies,
            started_before_call: self.started_before_call,
        };
        let warnings = self.graphs.warning().into_iter().chain(queue_warning).collect();
        (health, warnings)
    }
}

#[cfg(test)]
mod tests;
