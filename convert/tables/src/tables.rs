//! Every table: its columns, read from the model's rows and joins. Names and units are listed in docs/TABLES.md
//! (a test checks the two agree).

use cutr_model::rows::{ApiCall, Kernel, Memcpy, Memset, NvtxMark, NvtxRange, Sync};
use cutr_model::{CorrKey, NameId, ProcId, RankSource, Trace, describe};
use rustc_hash::FxHashMap as HashMap;

use crate::graph_tables::{NodeText, capture_columns, capture_of};
use crate::table::Column;

/// The tables, in the order they are written.
pub const TABLES: [&str; 13] = [
    "processes",
    "devices",
    "kernels",
    "memcpy",
    "memset",
    "api_calls",
    "syncs",
    "nvtx_ranges",
    "nvtx_marks",
    "counters",
    "um",
    "memory_usage",
    "graph_nodes",
];

/// What every row says about its recording: the file, the host, the pid and the rank.
pub(crate) struct Files {
    labels: Vec<String>,
    pub(crate) hosts: Vec<String>,
    pub(crate) pids: Vec<u32>,
    /// The rank of `stats --by-rank` ([`Trace::job_ranks`]): the recorded one, else numbered by file order.
    pub(crate) ranks: Vec<(u32, RankSource)>,
}

impl Files {
    pub(crate) fn new(t: &Trace) -> Files {
        Files {
            labels: (0..t.processes.len()).map(|i| t.label(ProcId(i as u16))).collect(),
            hosts: t.processes.iter().map(|p| p.meta.host.clone()).collect(),
            pids: t.processes.iter().map(|p| p.pid).collect(),
            ranks: t.job_ranks(),
        }
    }

    /// The four columns of the process of row `i` (`proc(i)`).
    pub(crate) fn columns<'t>(&'t self, proc: impl Fn(usize) -> ProcId + Copy + 't) -> Vec<Column<'t>> {
        vec![
            Column::Str("file", Box::new(move |i| Some(self.labels[proc(i).index()].as_str()))),
            Column::Str("host", Box::new(move |i| Some(self.hosts[proc(i).index()].as_str()))),
            Column::U32("pid", Box::new(move |i| self.pids[proc(i).index()])),
            Column::U64("rank", Box::new(move |i| u64::from(self.ranks[proc(i).index()].0))),
        ]
    }
}

/// Start, end and duration of row `i`.
pub(crate) fn times<'t>(span: impl Fn(usize) -> (u64, u64) + Copy + 't) -> Vec<Column<'t>> {
    vec![
        Column::U64("start_ns", Box::new(move |i| span(i).0)),
        Column::U64("end_ns", Box::new(move |i| span(i).1)),
        Column::U64("duration_ns", Box::new(move |i| span(i).1.saturating_sub(span(i).0))),
    ]
}

/// The columns every GPU operation starts with: its file, device, context, stream, correlation and times.
fn gpu_op<'t>(f: &'t Files, op: impl Fn(usize) -> (ProcId, [u32; 4], (u64, u64)) + Copy + 't) -> Vec<Column<'t>> {
    let mut c = f.columns(move |i| op(i).0);
    c.extend([
        Column::U32("device", Box::new(move |i| op(i).1[0])),
        Column::U32("context", Box::new(move |i| op(i).1[1])),
        Column::U32("stream", Box::new(move |i| op(i).1[2])),
        Column::U32("correlation", Box::new(move |i| op(i).1[3])),
    ]);
    c.extend(times(move |i| op(i).2));
    c
}

/// API names, once per (file, driver, cbid).
#[derive(Default)]
pub(crate) struct ApiNames(HashMap<(ProcId, bool, u32), String>);

impl ApiNames {
    pub(crate) fn new(t: &Trace) -> ApiNames {
        let mut m = ApiNames::default();
        m.add(t, &t.apis);
        m
    }

    /// Names the calls of `apis` not named yet (their files are `t`'s).
    pub(crate) fn add<'a>(&mut self, t: &Trace, apis: impl IntoIterator<Item = &'a ApiCall>) {
        for a in apis {
            self.0.entry((a.proc, a.driver, a.cbid)).or_insert_with(|| t.api_name(a));
        }
    }

    fn get(&self, proc: ProcId, driver: bool, cbid: u32) -> Option<&str> {
        self.0.get(&(proc, driver, cbid)).map(String::as_str)
    }
}

/// The kinds of GPU operation, each a table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Gpu {
    Kernel,
    Memcpy,
    Memset,
}

/// What the tables join to their rows: each GPU operation's launching call, the innermost NVTX range around it,
/// its external id and the graph node it was replayed from, and each API call's innermost range. A whole trace
/// answers from its joins; a stream's window from what the stream kept ([`crate::streamed`]).
pub(crate) trait Joins: std::marker::Sync {
    /// Row `i` of `kind`'s launching call.
    fn call(&self, kind: Gpu, i: usize) -> Option<&ApiCall>;
    /// The name of the innermost NVTX range around that call.
    fn call_range(&self, kind: Gpu, i: usize) -> Option<&str>;
    /// PyTorch's op id (0: none).
    fn op_id(&self, kind: Gpu, i: usize) -> u64;
    /// Index into the graph trace's `graphs.nodes` of the node it was replayed from (`NONE`: none).
    fn capture(&self, kind: Gpu, i: usize) -> u32;
    /// The name of the innermost NVTX range around API call `i`.
    fn api_range(&self, i: usize) -> Option<&str>;
}

/// The joins of a loaded trace.
pub(crate) struct WholeJoins<'t>(pub &'t Trace);

impl WholeJoins<'_> {
    fn key(&self, kind: Gpu, i: usize) -> CorrKey {
        match kind {
            Gpu::Kernel => self.0.kernels[i].corr(),
            Gpu::Memcpy => self.0.memcpys[i].corr(),
            Gpu::Memset => self.0.memsets[i].corr(),
        }
    }

    fn range_name(&self, api: usize) -> Option<&str> {
        let t = self.0;
        let r = *t.api_range.get(api)?;
        (r != u32::MAX).then(|| t.names.get(t.ranges[r as usize].name))
    }
}

impl Joins for WholeJoins<'_> {
    fn call(&self, kind: Gpu, i: usize) -> Option<&ApiCall> {
        self.0.launcher(self.key(kind, i))
    }

    fn call_range(&self, kind: Gpu, i: usize) -> Option<&str> {
        self.range_name(self.0.launcher_index(self.key(kind, i))? as usize)
    }

    fn op_id(&self, kind: Gpu, i: usize) -> u64 {
        self.0.external_ids(self.key(kind, i)).0
    }

    fn capture(&self, kind: Gpu, i: usize) -> u32 {
        let g = &self.0.graphs;
        let v = match kind {
            Gpu::Kernel => &g.kernel_capture,
            Gpu::Memcpy => &g.memcpy_capture,
            Gpu::Memset => &g.memset_capture,
        };
        capture_of(v, i)
    }

    fn api_range(&self, i: usize) -> Option<&str> {
        self.range_name(i)
    }
}

/// A kernel's name as the tables show it (demangled).
pub(crate) enum KernelNames<'t> {
    /// The trace's own demangled names.
    Trace(&'t Trace),
    /// Demangled by the caller, by mangled name id.
    Map(&'t HashMap<NameId, String>),
}

impl KernelNames<'_> {
    fn get(&self, k: &Kernel) -> &str {
        match self {
            KernelNames::Trace(t) => t.kernel_name(k),
            KernelNames::Map(m) => m.get(&k.name).map_or("", String::as_str),
        }
    }
}

/// What every table's columns read besides its rows: the files, names, joins, and the trace whose graphs the
/// capture columns and `graph_nodes` come from.
pub(crate) struct Ctx<'t> {
    pub t: &'t Trace,
    pub files: &'t Files,
    pub names: &'t ApiNames,
    pub joins: &'t dyn Joins,
    pub kernel_names: KernelNames<'t>,
    pub graphs: &'t Trace,
    pub nodes: &'t NodeText,
}

/// The joins of a GPU operation of `kind`: the launching call's start, thread and name, the innermost NVTX range
/// enclosing that call, the PyTorch op id, and the capture context of its graph node.
fn launch_columns<'t>(c: &'t Ctx<'t>, kind: Gpu) -> Vec<Column<'t>> {
    let (j, names) = (c.joins, c.names);
    let api = move |i: usize| j.call(kind, i);
    let mut out = vec![
        Column::OptU64("api_start_ns", Box::new(move |i| api(i).map(|a| a.start))),
        Column::OptU64("api_tid", Box::new(move |i| api(i).map(|a| u64::from(a.tid)))),
        Column::Str("api_name", Box::new(move |i| api(i).and_then(|a| names.get(a.proc, a.driver, a.cbid)))),
        Column::Str("nvtx_range", Box::new(move |i| j.call_range(kind, i))),
        Column::OptU64("external_id", Box::new(move |i| Some(j.op_id(kind, i)).filter(|&op| op != 0))),
    ];
    out.extend(capture_columns(c.graphs, c.nodes, move |i| j.capture(kind, i)));
    out
}

pub(crate) fn kernels<'t>(c: &'t Ctx<'t>, k: &'t [Kernel]) -> Vec<Column<'t>> {
    let (t, kn) = (c.t, &c.kernel_names);
    let mut cols = gpu_op(c.files, move |i| {
        let k = &k[i];
        (k.proc, [k.device, k.context, k.stream, k.correlation], (k.start, k.end))
    });
    cols.extend([
        Column::Str("name", Box::new(move |i| Some(kn.get(&k[i])))),
        Column::Str("mangled_name", Box::new(move |i| Some(t.names.get(k[i].name)))),
        Column::I64("grid_x", Box::new(move |i| i64::from(k[i].grid[0]))),
        Column::I64("grid_y", Box::new(move |i| i64::from(k[i].grid[1]))),
        Column::I64("grid_z", Box::new(move |i| i64::from(k[i].grid[2]))),
        Column::I64("block_x", Box::new(move |i| i64::from(k[i].block[0]))),
        Column::I64("block_y", Box::new(move |i| i64::from(k[i].block[1]))),
        Column::I64("block_z", Box::new(move |i| i64::from(k[i].block[2]))),
        Column::U32("registers_per_thread", Box::new(move |i| u32::from(k[i].registers))),
        Column::I64("static_shared_memory", Box::new(move |i| i64::from(k[i].static_smem))),
        Column::I64("dynamic_shared_memory", Box::new(move |i| i64::from(k[i].dynamic_smem))),
        Column::U32("graph_id", Box::new(move |i| k[i].graph_id)),
        Column::U64("graph_node_id", Box::new(move |i| k[i].graph_node_id)),
    ]);
    cols.extend(launch_columns(c, Gpu::Kernel));
    cols
}

pub(crate) fn memcpys<'t>(c: &'t Ctx<'t>, m: &'t [Memcpy]) -> Vec<Column<'t>> {
    let mut cols = gpu_op(c.files, move |i| {
        let m = &m[i];
        (m.proc, [m.device, m.context, m.stream, m.correlation], (m.start, m.end))
    });
    cols.extend([
        Column::U64("bytes", Box::new(move |i| m[i].bytes)),
        Column::Str("copy_kind", Box::new(move |i| Some(describe::memcpy_kind(m[i].copy_kind)))),
        Column::Str("src_kind", Box::new(move |i| Some(describe::memory_kind(u32::from(m[i].src_kind))))),
        Column::Str("dst_kind", Box::new(move |i| Some(describe::memory_kind(u32::from(m[i].dst_kind))))),
        Column::OptU64("src_device", Box::new(move |i| m[i].peer.map(|p| u64::from(p.0)))),
        Column::OptU64("dst_device", Box::new(move |i| m[i].peer.map(|p| u64::from(p.1)))),
        Column::U32("graph_id", Box::new(move |i| m[i].graph_id)),
        Column::U64("graph_node_id", Box::new(move |i| m[i].graph_node_id)),
    ]);
    cols.extend(launch_columns(c, Gpu::Memcpy));
    cols
}

pub(crate) fn memsets<'t>(c: &'t Ctx<'t>, m: &'t [Memset]) -> Vec<Column<'t>> {
    let mut cols = gpu_op(c.files, move |i| {
        let m = &m[i];
        (m.proc, [m.device, m.context, m.stream, m.correlation], (m.start, m.end))
    });
    cols.extend([
        Column::U64("bytes", Box::new(move |i| m[i].bytes)),
        Column::U32("value", Box::new(move |i| m[i].value)),
        Column::Str("memory_kind", Box::new(move |i| Some(describe::memory_kind(u32::from(m[i].memory_kind))))),
        Column::U32("graph_id", Box::new(move |i| m[i].graph_id)),
        Column::U64("graph_node_id", Box::new(move |i| m[i].graph_node_id)),
    ]);
    cols.extend(launch_columns(c, Gpu::Memset));
    cols
}

pub(crate) fn api_calls<'t>(ctx: &'t Ctx<'t>, a: &'t [ApiCall]) -> Vec<Column<'t>> {
    let (names, joins) = (ctx.names, ctx.joins);
    let mut c = ctx.files.columns(move |i| a[i].proc);
    c.extend([
        Column::U32("tid", Box::new(move |i| a[i].tid)),
        Column::U32("correlation", Box::new(move |i| a[i].correlation)),
    ]);
    c.extend(times(move |i| (a[i].start, a[i].end)));
    c.extend([
        Column::Str("name", Box::new(move |i| names.get(a[i].proc, a[i].driver, a[i].cbid))),
        Column::Str("api", Box::new(move |i| Some(if a[i].driver { "driver" } else { "runtime" }))),
        Column::U32("cbid", Box::new(move |i| a[i].cbid)),
        Column::U32("return_value", Box::new(move |i| a[i].return_value)),
        Column::Str("nvtx_range", Box::new(move |i| joins.api_range(i))),
    ]);
    c
}

pub(crate) fn syncs<'t>(f: &'t Files, s: &'t [Sync]) -> Vec<Column<'t>> {
    let mut c = f.columns(move |i| s[i].proc);
    c.extend(times(move |i| (s[i].start, s[i].end)));
    c.extend([
        Column::Str("sync_type", Box::new(move |i| Some(describe::sync_type(s[i].sync_type)))),
        Column::U32("context", Box::new(move |i| s[i].context)),
        Column::U32("stream", Box::new(move |i| s[i].stream)),
        Column::U32("event", Box::new(move |i| s[i].event)),
        Column::U32("correlation", Box::new(move |i| s[i].correlation)),
    ]);
    c
}

pub(crate) fn nvtx_ranges<'t>(t: &'t Trace, f: &'t Files, r: &'t [NvtxRange]) -> Vec<Column<'t>> {
    let mut c = f.columns(move |i| r[i].proc);
    c.extend([
        Column::U32("tid", Box::new(move |i| r[i].tid)),
        Column::U64("start_ns", Box::new(move |i| r[i].start)),
        Column::OptU64("end_ns", Box::new(move |i| r[i].closed().then_some(r[i].end))),
        Column::OptU64("duration_ns", Box::new(move |i| r[i].closed().then(|| r[i].end.saturating_sub(r[i].start)))),
        Column::Str("name", Box::new(move |i| Some(t.names.get(r[i].name)))),
        Column::Str("domain", Box::new(move |i| Some(t.names.get(r[i].domain)))),
        Column::U32("depth", Box::new(move |i| u32::from(r[i].depth))),
    ]);
    c
}

pub(crate) fn nvtx_marks<'t>(t: &'t Trace, f: &'t Files, m: &'t [NvtxMark]) -> Vec<Column<'t>> {
    let mut c = f.columns(move |i| m[i].proc);
    c.extend([
        Column::U32("tid", Box::new(move |i| m[i].tid)),
        Column::U64("ts_ns", Box::new(move |i| m[i].ts)),
        Column::Str("name", Box::new(move |i| Some(t.names.get(m[i].name)))),
        Column::Str("domain", Box::new(move |i| Some(t.names.get(m[i].domain)))),
    ]);
    c
}

/// The `counters` table's columns over the samples `s` (a loaded trace's, or a stream's batch's).
pub(crate) fn counters<'t>(t: &'t Trace, f: &'t Files, s: &'t [cutr_model::CounterSample]) -> Vec<Column<'t>> {
    let mut c = f.columns(move |i| s[i].proc);
    c.extend([
        Column::U32("device", Box::new(move |i| s[i].device)),
        Column::Str("counter", Box::new(move |i| Some(t.names.get(s[i].series)))),
        Column::U64("ts_ns", Box::new(move |i| s[i].ts)),
        Column::F64("value", Box::new(move |i| s[i].value)),
    ]);
    c
}

pub(crate) fn processes<'t>(t: &'t Trace, f: &'t Files) -> Vec<Column<'t>> {
    let p = &t.processes;
    let mut c = f.columns(move |i| ProcId(i as u16));
    c.extend([
        Column::Str("rank_source", Box::new(move |i| Some(f.ranks[i].1.as_str()))),
        Column::OptU64("world_size", Box::new(move |i| p[i].rank().map(|r| u64::from(r.world_size)))),
        Column::U64("start_unix_ns", Box::new(move |i| p[i].meta.start_unix_ns)),
        Column::Str("command", Box::new(move |i| p[i].meta.command_line.first().map(String::as_str))),
    ]);
    c
}

/// (file index, device index within it) of every device of every file.
pub(crate) fn device_rows(t: &Trace) -> Vec<(usize, usize)> {
    t.processes.iter().enumerate().flat_map(|(p, proc)| (0..proc.meta.devices.len()).map(move |d| (p, d))).collect()
}

pub(crate) fn devices<'t>(t: &'t Trace, f: &'t Files, rows: &'t [(usize, usize)]) -> Vec<Column<'t>> {
    let dev = move |i: usize| &t.processes[rows[i].0].meta.devices[rows[i].1];
    let mut c = f.columns(move |i| ProcId(rows[i].0 as u16));
    c.extend([
        Column::U32("device", Box::new(move |i| dev(i).id)),
        Column::Str("name", Box::new(move |i| Some(dev(i).name.as_str()))),
        Column::Str("pci_bus_id", Box::new(move |i| Some(dev(i).pci_bus_id.as_str()))),
        Column::I64("compute_major", Box::new(move |i| i64::from(dev(i).compute_major))),
        Column::I64("compute_minor", Box::new(move |i| i64::from(dev(i).compute_minor))),
        Column::I64("multiprocessors", Box::new(move |i| i64::from(dev(i).multiprocessors))),
        Column::U64("total_memory_bytes", Box::new(move |i| dev(i).total_memory_bytes)),
    ]);
    c
}
