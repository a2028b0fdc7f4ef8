//! The export streamed over the recordings' chunks ([`cutr_model::stream`]) instead of a loaded trace: every
//! table's Parquet files stay open while the windows come, each window's rows written and dropped, so memory is
//! a window of records, the stream's correlation horizon and one row group per open file, whatever the length of
//! the recording.
//!
//! The join columns come from what the stream kept: a GPU operation's launching call, its innermost NVTX range
//! and its PyTorch op id while the call is within the horizon of [`StreamOptions::horizon`] launches (beyond it
//! they are null, counted in [`StreamedExport::launches_out_of_horizon`] and warned). NVTX ranges are written as
//! they close, the ones never closed at the end. Rows come in window order, not sorted by time: the tables are
//! sets (docs/TABLES.md). CUDA graphs are joined from a pass of their own over the recordings
//! ([`graph_context`], only where graphs were recorded). Counter samples are written a chunk at a time as they
//! come ([`StreamOptions::counter_feed`]); `memory_usage` is built at the end from the allocation
//! records, kept until then, as `um` from its events (each joined to its kernel while streaming:
//! [`UmJoin`]). The PC samples' stall-rate series of `counters` are swept behind the stream's edge after a pass
//! of their own over the kernels ([`StallStream`], only where PC samples were recorded), and written at the end,
//! each series in a whole export's order; what a damaged file keeps from being drawn as a load draws it is in
//! [`StreamedExport::warnings`].

use std::path::{Path, PathBuf};

use cutr_format::Reader;
use cutr_model::graphs::NONE;
use cutr_model::rows::{ApiCall, MemoryOp, NvtxRange, UmEvent};
use cutr_model::stall_stream::{StallEnd, StallStream};
use cutr_model::stream::{Batch, RangeStacks, StreamOptions, graph_context, stream_readers};
use cutr_model::um::UmJoin;
use cutr_model::{Filter, GraphContext, NameId, Names, Trace};
use rayon::prelude::*;
use rustc_hash::FxHashMap as HashMap;

use crate::graph_tables::{NodeText, graph_nodes};
use crate::table::{Column, Rows, TableFile, TablesError};
use crate::tables::{
    ApiNames, Ctx, Files, Gpu, Joins, KernelNames, TABLES, api_calls, counters, device_rows, devices, kernels, memcpys,
    memsets, nvtx_marks, nvtx_ranges, processes, syncs,
};
use crate::um_tables::{memory_usage, um, usage_rows};
use crate::whole::Partitions;
use crate::{TablesSummary, target};

/// What a streamed export wrote and what it could not join.
#[derive(Debug)]
pub struct StreamedExport {
    pub summary: TablesSummary,
    /// The trace of processes and names (no rows), with each file's join statistics and problems.
    pub trace: Trace,
    /// GPU operations whose launching call fell out of the horizon: their call, range and op id columns are null.
    pub launches_out_of_horizon: u64,
    /// What kept the PC samples' stall rates from being drawn as a whole export draws them (`None`: no PC samples).
    pub stall_rates: Option<StallEnd>,
    /// What the streamed tables lack against a whole export, one sentence each.
    pub warnings: Vec<String>,
}

/// Writes every table of the recordings `paths` (opened as `readers`) as the directory `dir`, streaming, made
/// beside it and renamed into place once complete as [`crate::write_parquet`] does.
pub fn write_parquet_streamed(
    paths: &[PathBuf],
    readers: &[Reader],
    dir: &Path,
    opts: &StreamOptions,
) -> Result<StreamedExport, TablesError> {
    let staging = target::Staging::new(&target::check(dir)?)?;
    // CUDA graphs first: each node's call and ranges, from a pass of their own (only where graphs were recorded).
    let graphs = graph_context(paths, readers, opts)?;
    // Counter samples come a chunk at a time with the windows, written as they come (a whole export writes each
    // series' samples together; the rows are the same).
    let opts = StreamOptions { counter_feed: true, hold_unlaunched: true, ..opts.clone() };
    // PC samples' stall rates: each sampled function's execution time first, from a pass over the kernels.
    let mut stalls = StallStream::read(readers, &Filter::default(), opts.max_waiting);
    let mut sink: Option<Sink> = None;
    let mut failed: Option<TablesError> = None;
    let (trace, end) = stream_readers(paths, readers, &opts, |t, stacks, batch| {
        if failed.is_some() {
            return;
        }
        if let Some(stalls) = &mut stalls {
            stalls.window(&t.names, &batch.kernels, batch.next_start);
        }
        let s = match &mut sink {
            Some(s) => s,
            None => match Sink::open(t, graphs.as_ref(), staging.path(), opts.max_waiting) {
                Ok(s) => sink.insert(s),
                Err(e) => {
                    failed = Some(e);
                    return;
                }
            },
        };
        if let Err(e) = s.window(t, graphs.as_ref(), stacks, batch) {
            failed = Some(e);
        }
    })?;
    if let Some(e) = failed {
        return Err(e);
    }
    let mut sink = match sink {
        Some(s) => s,
        None => Sink::open(&trace, graphs.as_ref(), staging.path(), opts.max_waiting)?,
    };
    let mut trace = trace;
    if let Some(g) = &graphs {
        add_graph_counts(&mut trace, g);
    }
    let stall_rates = stalls.map(|s| s.finish(&mut trace));
    sink.finish(&trace, graphs.as_ref(), &end.unclosed_ranges)?;
    let (um_late_rows, um_early) = (sink.um.late_rows(), sink.um.settled_early());
    let summary = sink.close()?;
    staging.commit()?;
    let mut warnings = stall_rates.map(|e| e.warnings(opts.max_waiting)).unwrap_or_default();
    if end.held_released_early > 0 {
        warnings.push(format!(
            "{} GPU operations waiting for their launching call's chunk were written before it came, as more than {} \
             waited (chunk headers claiming earlier times than their rows: a damaged or forged file): their call \
             columns may be null (--no-stream joins them all)",
            end.held_released_early, opts.max_waiting
        ));
    }
    if um_early > 0 {
        warnings.push(format!(
            "{um_early} unified memory events were joined to their kernels before the stream passed their time, as \
             more than {} waited (chunk headers claiming earlier times than their rows: a damaged or forged file): \
             the um table's kernel column may miss their matches (--no-stream joins them all)",
            opts.max_waiting
        ));
    }
    if um_late_rows > 0 {
        warnings.push(format!(
            "{um_late_rows} kernels or unified memory events started before the time their chunks claim (a damaged \
             file): the um table's kernel column may miss their matches (--no-stream joins them all)"
        ));
    }
    if end.launches_out_of_horizon > 0 {
        warnings.insert(
            0,
            format!(
                "{} GPU operations were read after their launching call had left the horizon of the last {} \
                 launches: their api_start_ns, api_tid, api_name, nvtx_range and external_id are null \
                 (--no-stream joins them all)",
                end.launches_out_of_horizon, opts.horizon
            ),
        );
    }
    Ok(StreamedExport { summary, trace, launches_out_of_horizon: end.launches_out_of_horizon, stall_rates, warnings })
}

/// The graph joins' counts of the graphs' pass, into the stream's trace (its warnings say them as a load's do).
fn add_graph_counts(trace: &mut Trace, graphs: &Trace) {
    for (p, g) in trace.processes.iter_mut().zip(&graphs.processes) {
        let (s, g) = (&mut p.stats, &g.stats);
        s.graph_events_lost = s.graph_events_lost.saturating_add(g.graph_events_lost);
        s.graph_nodes_without_api += g.graph_nodes_without_api;
        s.graph_events_unjoined += g.graph_events_unjoined;
        trace.stats.graph_events_lost = trace.stats.graph_events_lost.saturating_add(g.graph_events_lost);
        trace.stats.graph_nodes_without_api += g.graph_nodes_without_api;
        trace.stats.graph_events_unjoined += g.graph_events_unjoined;
    }
}

/// Every table's open files: one per table, or one per table and recording for Hive partitions.
struct Sink {
    files: Files,
    partitions: Option<Partitions>,
    /// By table (in [`TABLES`] order): its files, by recording when partitioned.
    tables: Vec<(&'static str, Vec<TableFile>)>,
    names: ApiNames,
    kernel_names: HashMap<NameId, String>,
    /// The text of each graph node's columns (of the graphs' trace).
    nodes: NodeText,
    memory: Vec<MemoryOp>,
    um: UmJoin,
    /// The unified memory events the join has handed on (the `um` table's rows), each with its kernel's mangled
    /// name.
    um_rows: Vec<(UmEvent, Option<NameId>)>,
    bytes: u64,
}

/// The joins of a window's rows, from what the stream kept.
struct WindowJoins<'b> {
    batch: &'b Batch,
    stacks: &'b RangeStacks,
    names: &'b Names,
    graphs: Option<&'b GraphContext>,
}

impl WindowJoins<'_> {
    /// Where `kind`'s rows start in the batch's per-operation vectors (kernels, then copies, then memsets).
    fn at(&self, kind: Gpu, i: usize) -> usize {
        let b = self.batch;
        match kind {
            Gpu::Kernel => i,
            Gpu::Memcpy => b.kernels.len() + i,
            Gpu::Memset => b.kernels.len() + b.memcpys.len() + i,
        }
    }

    fn innermost(&self, set: u32) -> Option<&str> {
        self.stacks.names(set).next().map(|n| self.names.get(n))
    }
}

impl Joins for WindowJoins<'_> {
    fn call(&self, kind: Gpu, i: usize) -> Option<&ApiCall> {
        self.batch.gpu_calls.get(self.at(kind, i))?.as_ref()
    }

    fn call_range(&self, kind: Gpu, i: usize) -> Option<&str> {
        self.innermost(*self.batch.gpu_ranges.get(self.at(kind, i))?)
    }

    fn op_id(&self, kind: Gpu, i: usize) -> u64 {
        self.batch.gpu_external.get(self.at(kind, i)).map_or(0, |e| e.0)
    }

    /// The node the operation was replayed from, at its launch (the launching call's start, else its own), as a
    /// load traces it back.
    fn capture(&self, kind: Gpu, i: usize) -> u32 {
        let b = self.batch;
        let (proc, graph, node, start) = match kind {
            Gpu::Kernel => (b.kernels[i].proc, b.kernels[i].graph_id, b.kernels[i].graph_node_id, b.kernels[i].start),
            Gpu::Memcpy => (b.memcpys[i].proc, b.memcpys[i].graph_id, b.memcpys[i].graph_node_id, b.memcpys[i].start),
            Gpu::Memset => (b.memsets[i].proc, b.memsets[i].graph_id, b.memsets[i].graph_node_id, b.memsets[i].start),
        };
        let Some(g) = self.graphs.filter(|_| graph != 0) else { return NONE };
        let t = self.call(kind, i).map_or(start, |a| a.start);
        g.origin_of(proc, node, t).unwrap_or(NONE)
    }

    fn api_range(&self, i: usize) -> Option<&str> {
        self.innermost(*self.batch.api_ranges.get(i)?)
    }
}

/// No joins: for tables written without GPU operations or calls (their schemas, the end's tables).
struct NoJoins;

impl Joins for NoJoins {
    fn call(&self, _: Gpu, _: usize) -> Option<&ApiCall> {
        None
    }
    fn call_range(&self, _: Gpu, _: usize) -> Option<&str> {
        None
    }
    fn op_id(&self, _: Gpu, _: usize) -> u64 {
        0
    }
    fn capture(&self, _: Gpu, _: usize) -> u32 {
        cutr_model::graphs::NONE
    }
    fn api_range(&self, _: usize) -> Option<&str> {
        None
    }
}

impl Sink {
    /// Every table's files created, empty, with the schemas of a whole export (`graphs`: the graphs' trace).
    fn open(t: &Trace, graphs: Option<&Trace>, dir: &Path, max_waiting: usize) -> Result<Sink, TablesError> {
        let files = Files::new(t);
        let partitions = (t.processes.len() > 1).then(|| Partitions::new(t, &files));
        let names = ApiNames::default();
        let kernel_names = HashMap::default();
        let nodes = NodeText::new(graphs.unwrap_or(t));
        let ctx = Ctx {
            t,
            files: &files,
            names: &names,
            joins: &NoJoins,
            kernel_names: KernelNames::Map(&kernel_names),
            graphs: t,
            nodes: &nodes,
        };
        let mut tables = Vec::with_capacity(TABLES.len());
        for table in TABLES {
            let columns = empty_columns(table, &ctx);
            let mut opened = Vec::new();
            match &partitions {
                None => opened.push(TableFile::create(&dir.join(format!("{table}.parquet")), &refs(&columns, None))?),
                Some(p) => {
                    for (i, path) in p.paths.iter().enumerate() {
                        let path = dir.join(table).join(path).join(format!("part-{i}.parquet"));
                        opened.push(TableFile::create(&path, &refs(&columns, Some(&p.keys)))?);
                    }
                }
            }
            tables.push((table, opened));
        }
        Ok(Sink {
            files,
            partitions,
            tables,
            names,
            kernel_names,
            nodes,
            memory: Vec::new(),
            um: UmJoin::with_cap(max_waiting),
            um_rows: Vec::new(),
            bytes: 0,
        })
    }

    /// A window's rows appended to their tables, the tables in parallel.
    fn window(&mut self, t: &Trace, g: Option<&Trace>, stacks: &RangeStacks, mut b: Batch) -> Result<(), TablesError> {
        self.names.add(t, b.apis.iter().chain(b.gpu_calls.iter().flatten()));
        for k in &b.kernels {
            self.kernel_names.entry(k.name).or_insert_with(|| cutr_model::demangle::demangle(t.names.get(k.name)));
        }
        self.memory.append(&mut b.memory);
        // Every window: a kernel still running at the window's end may hold a later window's first event.
        let um_rows = &mut self.um_rows;
        self.um.window(b.um.drain(..), &b.kernels, b.next_start, |e, k| um_rows.push((e, k)));
        let joins = WindowJoins { batch: &b, stacks, names: &t.names, graphs: g.map(|g| &g.graphs) };
        let ctx = Ctx {
            t,
            files: &self.files,
            names: &self.names,
            joins: &joins,
            kernel_names: KernelNames::Map(&self.kernel_names),
            graphs: g.unwrap_or(t),
            nodes: &self.nodes,
        };
        let partitions = self.partitions.as_ref();
        self.tables.par_iter_mut().try_for_each(|(table, out)| {
            let (columns, procs): (Vec<Column<'_>>, Vec<u16>) = match *table {
                "kernels" => (kernels(&ctx, &b.kernels), b.kernels.iter().map(|r| r.proc.0).collect()),
                "memcpy" => (memcpys(&ctx, &b.memcpys), b.memcpys.iter().map(|r| r.proc.0).collect()),
                "memset" => (memsets(&ctx, &b.memsets), b.memsets.iter().map(|r| r.proc.0).collect()),
                "api_calls" => (api_calls(&ctx, &b.apis), b.apis.iter().map(|r| r.proc.0).collect()),
                "syncs" => (syncs(ctx.files, &b.syncs), b.syncs.iter().map(|r| r.proc.0).collect()),
                "nvtx_ranges" => (nvtx_ranges(t, ctx.files, &b.ranges), b.ranges.iter().map(|r| r.proc.0).collect()),
                "nvtx_marks" => (nvtx_marks(t, ctx.files, &b.marks), b.marks.iter().map(|r| r.proc.0).collect()),
                "counters" => (counters(t, ctx.files, &b.counters), b.counters.iter().map(|r| r.proc.0).collect()),
                _ => return Ok(()),
            };
            append(out, partitions, &columns, &procs)
        })
    }

    /// The tables a stream gives at its end: the ranges never closed, the PC samples' stall-rate series, the
    /// files and devices, unified memory events and memory in use.
    fn finish(&mut self, t: &Trace, g: Option<&Trace>, unclosed: &[NvtxRange]) -> Result<(), TablesError> {
        self.memory.sort_by_key(|m| (m.ts, m.proc));
        let mut memory = Trace::default();
        memory.memory = std::mem::take(&mut self.memory);
        let usage = usage_rows(&memory);
        // The unified memory events on a trace of their own, with the kernels found while streaming.
        let mut rows = std::mem::take(&mut self.um_rows);
        // Sorted as a load sorts them.
        rows.sort_by_key(|(e, _)| (e.start, e.proc, e.kind, e.address));
        let (events, kernels): (Vec<UmEvent>, Vec<Option<NameId>>) = rows.into_iter().unzip();
        let mut um_trace = Trace::default();
        (um_trace.processes, um_trace.um) = (t.processes.clone(), events);
        let kernel_names = &self.kernel_names;
        let um_kernels: Vec<Option<&str>> =
            kernels.iter().map(|k| k.and_then(|id| kernel_names.get(&id)).map(String::as_str)).collect();
        let dev_rows = device_rows(t);
        let (nodes, g) = (&self.nodes, g.unwrap_or(t));
        let partitions = self.partitions.as_ref();
        let files = &self.files;
        self.tables.par_iter_mut().try_for_each(|(table, out)| {
            let (columns, procs): (Vec<Column<'_>>, Vec<u16>) = match *table {
                "nvtx_ranges" => (nvtx_ranges(t, files, unclosed), unclosed.iter().map(|r| r.proc.0).collect()),
                // The stall-rate series, drawn at the end (the samples came with the windows).
                "counters" => (counters(t, files, &t.counters), t.counters.iter().map(|r| r.proc.0).collect()),
                "processes" => (processes(t, files), (0..t.processes.len() as u16).collect()),
                "devices" => (devices(t, files, &dev_rows), dev_rows.iter().map(|r| r.0 as u16).collect()),
                "um" => {
                    (um(&um_trace, files, Some(um_kernels.clone())), um_trace.um.iter().map(|r| r.proc.0).collect())
                }
                "memory_usage" => (memory_usage(files, &usage), usage.iter().map(|r| r.0.0).collect()),
                "graph_nodes" => (graph_nodes(g, files, nodes), g.graphs.nodes.iter().map(|n| n.proc.0).collect()),
                _ => return Ok(()),
            };
            append(out, partitions, &columns, &procs)
        })
    }

    /// Every file ended; rows and bytes per table.
    fn close(mut self) -> Result<TablesSummary, TablesError> {
        let mut out = TablesSummary::default();
        for (table, files) in std::mem::take(&mut self.tables) {
            let rows = files.iter().map(|f| f.rows).sum();
            for f in files {
                self.bytes += f.close()?;
            }
            out.tables.push((table, rows));
        }
        out.bytes = self.bytes;
        Ok(out)
    }
}

/// `columns` without the partition keys (`keys`), which the path carries.
fn refs<'c, 't>(columns: &'c [Column<'t>], keys: Option<&[&'static str; 2]>) -> Vec<&'c Column<'t>> {
    columns.iter().filter(|c| keys.is_none_or(|k| !k.contains(&c.name()))).collect()
}

/// Rows `0..procs.len()` of `columns` appended to the table's file, or each to its recording's (`procs[i]`).
fn append(
    out: &mut [TableFile],
    partitions: Option<&Partitions>,
    columns: &[Column<'_>],
    procs: &[u16],
) -> Result<(), TablesError> {
    match partitions {
        None => out[0].append(Rows::All(procs.len()), &refs(columns, None)),
        Some(p) => {
            let mut per_file: Vec<Vec<usize>> = vec![Vec::new(); out.len()];
            for (i, &proc) in procs.iter().enumerate() {
                per_file[proc as usize].push(i);
            }
            let kept = refs(columns, Some(&p.keys));
            for (file, rows) in out.iter_mut().zip(&per_file) {
                file.append(Rows::Only(rows), &kept)?;
            }
            Ok(())
        }
    }
}

/// A table's columns over no rows: its schema.
fn empty_columns<'t>(table: &str, c: &'t Ctx<'t>) -> Vec<Column<'t>> {
    let t = c.t;
    match table {
        "processes" => processes(t, c.files),
        "devices" => devices(t, c.files, &[]),
        "um" => um(t, c.files, None),
        "memory_usage" => memory_usage(c.files, &[]),
        "kernels" => kernels(c, &[]),
        "memcpy" => memcpys(c, &[]),
        "memset" => memsets(c, &[]),
        "graph_nodes" => graph_nodes(t, c.files, c.nodes),
        "api_calls" => api_calls(c, &[]),
        "syncs" => syncs(c.files, &[]),
        "nvtx_ranges" => nvtx_ranges(t, c.files, &[]),
        "nvtx_marks" => nvtx_marks(t, c.files, &[]),
        _ => counters(t, c.files, &[]),
    }
}
