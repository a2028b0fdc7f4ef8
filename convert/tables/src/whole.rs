//! The whole export: every table of a loaded trace, written in parallel, each table's rows from the model's
//! vectors; and the Hive partitions both exports share.

use std::path::Path;

use cutr_model::{ProcId, RankSource, Trace};

use crate::TablesSummary;
use crate::graph_tables::{self, NodeText};
use crate::table::{Column, Rows, TablesError, write};
use crate::tables::{
    ApiNames, Ctx, Files, KernelNames, TABLES, WholeJoins, api_calls, counters, device_rows, devices, kernels, memcpys,
    memsets, nvtx_marks, nvtx_ranges, processes, syncs,
};
use crate::um_tables::{self, UsageRow};

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
    let joins = WholeJoins(t);
    let ctx = whole_ctx(t, &files, &names, &joins, &nodes);
    let derived = Derived { dev_rows: &dev_rows, usage: &usage };
    let partitions = (t.processes.len() > 1).then(|| Partitions::new(t, &files));
    let written: Vec<Result<(&'static str, u64, u64), TablesError>> = TABLES
        .par_iter()
        .map(|&table| {
            let (rows, columns) = table_columns(table, &ctx, &derived);
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

/// The context of a loaded trace's columns.
fn whole_ctx<'t>(
    t: &'t Trace,
    files: &'t Files,
    names: &'t ApiNames,
    joins: &'t WholeJoins<'t>,
    nodes: &'t NodeText,
) -> Ctx<'t> {
    Ctx { t, files, names, joins, kernel_names: KernelNames::Trace(t), graphs: t, nodes }
}

/// The Hive partition of each file, and the columns the path carries instead.
pub(crate) struct Partitions {
    pub(crate) paths: Vec<String>,
    pub(crate) keys: [&'static str; 2],
}

impl Partitions {
    pub(crate) fn new(t: &Trace, f: &Files) -> Partitions {
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

/// Rows of the tables that are not the model's own (devices of the files, points of memory in use).
struct Derived<'a> {
    dev_rows: &'a [(usize, usize)],
    usage: &'a [UsageRow],
}

/// A table's rows and columns.
fn table_columns<'t>(table: &str, c: &'t Ctx<'t>, d: &Derived<'t>) -> (usize, Vec<Column<'t>>) {
    let (t, files) = (c.t, c.files);
    match table {
        "processes" => (t.processes.len(), processes(t, files)),
        "devices" => (d.dev_rows.len(), devices(t, files, d.dev_rows)),
        "um" => (t.um.len(), um_tables::um(t, files, None)),
        "memory_usage" => (d.usage.len(), um_tables::memory_usage(files, d.usage)),
        "kernels" => (t.kernels.len(), kernels(c, &t.kernels)),
        "memcpy" => (t.memcpys.len(), memcpys(c, &t.memcpys)),
        "memset" => (t.memsets.len(), memsets(c, &t.memsets)),
        "graph_nodes" => (t.graphs.nodes.len(), graph_tables::graph_nodes(t, files, c.nodes)),
        "api_calls" => (t.apis.len(), api_calls(c, &t.apis)),
        "syncs" => (t.syncs.len(), syncs(files, &t.syncs)),
        "nvtx_ranges" => (t.ranges.len(), nvtx_ranges(t, files, &t.ranges)),
        "nvtx_marks" => (t.marks.len(), nvtx_marks(t, files, &t.marks)),
        _ => (t.counters.len(), counters(t, files, &t.counters)),
    }
}

/// Every table's column names and types, for docs/TABLES.md and its check.
pub fn schemas(t: &Trace) -> Vec<(&'static str, Vec<(String, String)>)> {
    let files = Files::new(t);
    let names = ApiNames::new(t);
    let dev_rows = device_rows(t);
    let usage = um_tables::usage_rows(t);
    let nodes = NodeText::new(t);
    let joins = WholeJoins(t);
    let ctx = whole_ctx(t, &files, &names, &joins, &nodes);
    let derived = Derived { dev_rows: &dev_rows, usage: &usage };
    TABLES
        .iter()
        .map(|&table| {
            let (_, columns) = table_columns(table, &ctx, &derived);
            let fields = crate::table::schema(&columns)
                .fields()
                .iter()
                .map(|f| (f.name().clone(), format!("{}", f.data_type())))
                .collect();
            (table, fields)
        })
        .collect()
}
