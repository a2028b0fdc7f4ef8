//! Every table: its columns, read from the model's rows and joins. Names and units are listed in docs/TABLES.md
//! (a test checks the two agree).

use std::path::Path;

use cutr_model::{CorrKey, ProcId, RankSource, Trace, describe};
use rustc_hash::FxHashMap as HashMap;

use crate::TablesSummary;
use crate::graph_tables::{self, NodeText, capture_columns, capture_of};
use crate::table::{Column, Rows, TablesError, write};
use crate::um_tables::{self, UsageRow};

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
    hosts: Vec<String>,
    pids: Vec<u32>,
    /// The rank of `stats --by-rank` ([`Trace::job_ranks`]): the recorded one, else numbered by file order.
    ranks: Vec<(u32, RankSource)>,
}

impl Files {
    fn new(t: &Trace) -> Files {
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
struct ApiNames(HashMap<(ProcId, bool, u32), String>);

impl ApiNames {
    fn new(t: &Trace) -> ApiNames {
        let mut m = HashMap::default();
        for a in &t.apis {
            m.entry((a.proc, a.driver, a.cbid)).or_insert_with(|| t.api_name(a));
        }
        ApiNames(m)
    }

    fn get(&self, proc: ProcId, driver: bool, cbid: u32) -> Option<&str> {
        self.0.get(&(proc, driver, cbid)).map(String::as_str)
    }
}

/// The joins of a GPU operation, by its correlation key: the launching call's start, thread and name, the
/// innermost NVTX range enclosing that call, and the PyTorch op id.
fn launch_columns<'t>(
    t: &'t Trace,
    names: &'t ApiNames,
    key: impl Fn(usize) -> CorrKey + Copy + 't,
) -> Vec<Column<'t>> {
    let api = move |i: usize| t.launcher(key(i));
    let range = move |i: usize| {
        let a = t.launcher_index(key(i))? as usize;
        let r = *t.api_range.get(a)?;
        (r != u32::MAX).then(|| t.names.get(t.ranges[r as usize].name))
    };
    vec![
        Column::OptU64("api_start_ns", Box::new(move |i| api(i).map(|a| a.start))),
        Column::OptU64("api_tid", Box::new(move |i| api(i).map(|a| u64::from(a.tid)))),
        Column::Str("api_name", Box::new(move |i| api(i).and_then(|a| names.get(a.proc, a.driver, a.cbid)))),
        Column::Str("nvtx_range", Box::new(range)),
        Column::OptU64("external_id", Box::new(move |i| Some(t.external_ids(key(i)).0).filter(|&op| op != 0))),
    ]
}

fn kernels<'t>(t: &'t Trace, f: &'t Files, names: &'t ApiNames, text: &'t NodeText) -> Vec<Column<'t>> {
    let k = &t.kernels;
    let mut c = gpu_op(f, move |i| {
        let k = &k[i];
        (k.proc, [k.device, k.context, k.stream, k.correlation], (k.start, k.end))
    });
    c.extend([
        Column::Str("name", Box::new(move |i| Some(t.kernel_name(&k[i])))),
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
    c.extend(launch_columns(t, names, move |i| k[i].corr()));
    c.extend(capture_columns(t, text, move |i| capture_of(&t.graphs.kernel_capture, i)));
    c
}

fn memcpys<'t>(t: &'t Trace, f: &'t Files, names: &'t ApiNames, text: &'t NodeText) -> Vec<Column<'t>> {
    let m = &t.memcpys;
    let mut c = gpu_op(f, move |i| {
        let m = &m[i];
        (m.proc, [m.device, m.context, m.stream, m.correlation], (m.start, m.end))
    });
    c.extend([
        Column::U64("bytes", Box::new(move |i| m[i].bytes)),
        Column::Str("copy_kind", Box::new(move |i| Some(describe::memcpy_kind(m[i].copy_kind)))),
        Column::Str("src_kind", Box::new(move |i| Some(describe::memory_kind(u32::from(m[i].src_kind))))),
        Column::Str("dst_kind", Box::new(move |i| Some(describe::memory_kind(u32::from(m[i].dst_kind))))),
        Column::OptU64("src_device", Box::new(move |i| m[i].peer.map(|p| u64::from(p.0)))),
        Column::OptU64("dst_device", Box::new(move |i| m[i].peer.map(|p| u64::from(p.1)))),
        Column::U32("graph_id", Box::new(move |i| m[i].graph_id)),
        Column::U64("graph_node_id", Box::new(move |i| m[i].graph_node_id)),
    ]);
    c.extend(launch_columns(t, names, move |i| m[i].corr()));
    c.extend(capture_columns(t, text, move |i| capture_of(&t.graphs.memcpy_capture, i)));
    c
}

fn memsets<'t>(t: &'t Trace, f: &'t Files, names: &'t ApiNames, text: &'t NodeText) -> Vec<Column<'t>> {
    let m = &t.memsets;
    let mut c = gpu_op(f, move |i| {
        let m = &m[i];
        (m.proc, [m.device, m.context, m.stream, m.correlation], (m.start, m.end))
    });
    c.extend([
        Column::U64("bytes", Box::new(move |i| m[i].bytes)),
        Column::U32("value", Box::new(move |i| m[i].value)),
        Column::Str("memory_kind", Box::new(move |i| Some(describe::memory_kind(u32::from(m[i].memory_kind))))),
        Column::U32("graph_id", Box::new(move |i| m[i].graph_id)),
        Column::U64("graph_node_id", Box::new(move |i| m[i].graph_node_id)),
    ]);
    c.extend(launch_columns(t, names, move |i| m[i].corr()));
    c.extend(capture_columns(t, text, move |i| capture_of(&t.graphs.memset_capture, i)));
    c
}

fn api_calls<'t>(t: &'t Trace, f: &'t Files, names: &'t ApiNames) -> Vec<Column<'t>> {
    let a = &t.apis;
    let mut c = f.columns(move |i| a[i].proc);
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
        Column::Str(
            "nvtx_range",
            Box::new(move |i| {
                let r = *t.api_range.get(i)?;
                (r != u32::MAX).then(|| t.names.get(t.ranges[r as usize].name))
            }),
        ),
    ]);
    c
}

fn syncs<'t>(t: &'t Trace, f: &'t Files) -> Vec<Column<'t>> {
    let s = &t.syncs;
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

fn nvtx_ranges<'t>(t: &'t Trace, f: &'t Files) -> Vec<Column<'t>> {
    let r = &t.ranges;
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

fn nvtx_marks<'t>(t: &'t Trace, f: &'t Files) -> Vec<Column<'t>> {
    let m = &t.marks;
    let mut c = f.columns(move |i| m[i].proc);
    c.extend([
        Column::U32("tid", Box::new(move |i| m[i].tid)),
        Column::U64("ts_ns", Box::new(move |i| m[i].ts)),
        Column::Str("name", Box::new(move |i| Some(t.names.get(m[i].name)))),
        Column::Str("domain", Box::new(move |i| Some(t.names.get(m[i].domain)))),
    ]);
    c
}

fn counters<'t>(t: &'t Trace, f: &'t Files) -> Vec<Column<'t>> {
    let s = &t.counters;
    let mut c = f.columns(move |i| s[i].proc);
    c.extend([
        Column::U32("device", Box::new(move |i| s[i].device)),
        Column::Str("counter", Box::new(move |i| Some(t.names.get(s[i].series)))),
        Column::U64("ts_ns", Box::new(move |i| s[i].ts)),
        Column::F64("value", Box::new(move |i| s[i].value)),
    ]);
    c
}

fn processes<'t>(t: &'t Trace, f: &'t Files) -> Vec<Column<'t>> {
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
fn device_rows(t: &Trace) -> Vec<(usize, usize)> {
    t.processes.iter().enumerate().flat_map(|(p, proc)| (0..proc.meta.devices.len()).map(move |d| (p, d))).collect()
}

fn devices<'t>(t: &'t Trace, f: &'t Files, rows: &'t [(usize, usize)]) -> Vec<Column<'t>> {
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

/// The tables are written in parallel, each by one task (the columns of a table are built in its task). One
/// recording: `DIR/<table>.parquet`. Several: Hive-style partitions, `DIR/<table>/host=H/rank=R/part-PID.parquet`
/// (`pid=P` in place of `rank=R` where some file has no rank), the partition columns left out of the files (readers
/// take them from the path: DuckDB's `hive_partitioning`, Spark's partition discovery).
pub(crate) fn write_all(t: &Trace, dir: &Path) -> Result<TablesSummary, TablesError> {
    use rayon::prelude::*;
    let files = Files::new(t);
    let names = ApiNames::new(t);
    let dev_rows = device_rows(t);
    let usage = um_tables::usage_rows(t);
    let nodes = NodeText::new(t);
    let derived = Derived { dev_rows: &dev_rows, usage: &usage, nodes: &nodes };
    let partitions = (t.processes.len() > 1).then(|| Partitions::new(t, &files));
    let written: Vec<Result<(&'static str, u64, u64), TablesError>> = TABLES
        .par_iter()
        .map(|&table| {
            let (rows, columns) = table_columns(table, t, &files, &names, &derived);
            let bytes = match &partitions {
                None => {
                    write(&dir.join(format!("{table}.parquet")), Rows::All(rows), &columns.iter().collect::<Vec<_>>())?
                }
                Some(p) => p.write(dir, table, rows, &columns, |i| row_proc(table, t, &derived, i))?,
            };
            Ok((table, rows as u64, bytes))
        })
        .collect();
    let mut out = TablesSummary::default();
    for w in written {
        let (table, rows, bytes) = w?;
        out.tables.push((table, rows));
        out.bytes += bytes;
    }
    Ok(out)
}

/// The file of row `i` of `table`.
fn row_proc(table: &str, t: &Trace, d: &Derived<'_>, i: usize) -> ProcId {
    match table {
        "processes" => ProcId(i as u16),
        "devices" => ProcId(d.dev_rows[i].0 as u16),
        "um" => t.um[i].proc,
        "memory_usage" => d.usage[i].0,
        "kernels" => t.kernels[i].proc,
        "memcpy" => t.memcpys[i].proc,
        "memset" => t.memsets[i].proc,
        "api_calls" => t.apis[i].proc,
        "syncs" => t.syncs[i].proc,
        "nvtx_ranges" => t.ranges[i].proc,
        "nvtx_marks" => t.marks[i].proc,
        "graph_nodes" => t.graphs.nodes[i].proc,
        _ => t.counters[i].proc,
    }
}

/// The Hive partition of each file, and the columns the path carries instead.
struct Partitions {
    paths: Vec<String>,
    keys: [&'static str; 2],
}

impl Partitions {
    fn new(t: &Trace, f: &Files) -> Partitions {
        // A rank numbered by file order is no name of the recording: such datasets are partitioned by pid.
        let by_rank = f.ranks.iter().all(|r| r.1 != RankSource::FileOrder);
        // Path-safe values: anything but letters, digits, '.', '_' and '-' becomes '_'.
        let safe = |s: &str| -> String {
            s.chars().map(|c| if c.is_ascii_alphanumeric() || ".-_".contains(c) { c } else { '_' }).collect()
        };
        let paths = (0..t.processes.len())
            .map(|i| {
                let second = if by_rank { format!("rank={}", f.ranks[i].0) } else { format!("pid={}", f.pids[i]) };
                format!("host={}/{second}", safe(&f.hosts[i]))
            })
            .collect();
        Partitions { paths, keys: ["host", if by_rank { "rank" } else { "pid" }] }
    }

    /// One file per recording (empty ones too: every partition has every table's schema).
    fn write(
        &self,
        dir: &Path,
        table: &str,
        rows: usize,
        columns: &[Column<'_>],
        proc_of: impl Fn(usize) -> ProcId,
    ) -> Result<u64, TablesError> {
        let mut per_file: Vec<Vec<usize>> = vec![Vec::new(); self.paths.len()];
        for i in 0..rows {
            per_file[proc_of(i).index()].push(i);
        }
        let kept: Vec<&Column<'_>> = columns.iter().filter(|c| !self.keys.contains(&c.name())).collect();
        let mut bytes = 0;
        for (p, idx) in per_file.iter().enumerate() {
            let path = dir.join(table).join(&self.paths[p]).join(format!("part-{p}.parquet"));
            bytes += write(&path, Rows::Only(idx), &kept)?;
        }
        Ok(bytes)
    }
}

/// Rows of the tables that are not the model's own (devices of the files, points of memory in use), and the text
/// of graph nodes' columns.
struct Derived<'a> {
    dev_rows: &'a [(usize, usize)],
    usage: &'a [UsageRow],
    nodes: &'a NodeText,
}

/// A table's rows and columns.
fn table_columns<'t>(
    table: &str,
    t: &'t Trace,
    files: &'t Files,
    names: &'t ApiNames,
    d: &Derived<'t>,
) -> (usize, Vec<Column<'t>>) {
    match table {
        "processes" => (t.processes.len(), processes(t, files)),
        "devices" => (d.dev_rows.len(), devices(t, files, d.dev_rows)),
        "um" => (t.um.len(), um_tables::um(t, files)),
        "memory_usage" => (d.usage.len(), um_tables::memory_usage(files, d.usage)),
        "kernels" => (t.kernels.len(), kernels(t, files, names, d.nodes)),
        "memcpy" => (t.memcpys.len(), memcpys(t, files, names, d.nodes)),
        "memset" => (t.memsets.len(), memsets(t, files, names, d.nodes)),
        "graph_nodes" => (t.graphs.nodes.len(), graph_tables::graph_nodes(t, files, d.nodes)),
        "api_calls" => (t.apis.len(), api_calls(t, files, names)),
        "syncs" => (t.syncs.len(), syncs(t, files)),
        "nvtx_ranges" => (t.ranges.len(), nvtx_ranges(t, files)),
        "nvtx_marks" => (t.marks.len(), nvtx_marks(t, files)),
        _ => (t.counters.len(), counters(t, files)),
    }
}

/// Every table's column names and types, for docs/TABLES.md and its check.
pub fn schemas(t: &Trace) -> Vec<(&'static str, Vec<(String, String)>)> {
    let files = Files::new(t);
    let names = ApiNames::new(t);
    let dev_rows = device_rows(t);
    let usage = um_tables::usage_rows(t);
    let nodes = NodeText::new(t);
    let derived = Derived { dev_rows: &dev_rows, usage: &usage, nodes: &nodes };
    TABLES
        .iter()
        .map(|&table| {
            let (_, columns) = table_columns(table, t, &files, &names, &derived);
            let fields = crate::table::schema(&columns)
                .fields()
                .iter()
                .map(|f| (f.name().clone(), format!("{}", f.data_type())))
                .collect();
            (table, fields)
        })
        .collect()
}
