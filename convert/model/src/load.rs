//! Loading recordings into a [`Trace`]: inputs opened in parallel, each file's activity chunks decompressed and
//! decoded a window at a time (the rows of one window appended while the next decodes), then the file's NVTX
//! markers paired and its external ids indexed, and at the end the joins of the whole trace ([`crate::joins`]).

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use std::sync::Arc;

use cutr_format::{ChunkError, ChunkInfo, ChunkType, DecodedBuffer, Problem, Reader, SessionMetadata};
use cutr_schema::kinds;
use rayon::prelude::*;

use crate::counters::metric_samples;
use crate::decode::{ChunkCounts, ChunkRows, FileDecoder, RawExternal, RawMarker};
use crate::fields::FileFields;
use crate::ids::{NameId, ProcId};
use crate::recorder_threads::{GpuRowsBefore, RecorderThreads};
use crate::rows::ApiCall;
use crate::runs;

mod indexes;
use crate::stall_rates::{self, FileStalls};
use crate::timebase::ClockCheck;
use crate::timing::{self, timed, timed_with};
use crate::trace::{JoinStats, Process, Trace};

/// What to decode.
#[derive(Clone, Debug, Default)]
pub struct Filter {
    /// Keep records overlapping [start, end] (ns, trace time); `None` = unbounded.
    pub start: Option<u64>,
    pub end: Option<u64>,
    /// Only these CUPTI kinds (empty = all).
    pub kinds: Vec<u32>,
}

impl Filter {
    pub fn wants_kind(&self, k: u32) -> bool {
        self.kinds.is_empty() || self.kinds.contains(&k)
    }

    /// Whether a record spanning [start, end] overlaps the window.
    pub fn keeps(&self, start: u64, end: u64) -> bool {
        self.start.is_none_or(|s| end >= s) && self.end.is_none_or(|e| start <= e)
    }

    pub(crate) fn has_window(&self) -> bool {
        self.start.is_some() || self.end.is_some()
    }
}

/// How to open the inputs.
#[derive(Clone, Debug, Default)]
pub struct LoadOptions {
    pub filter: Filter,
}

/// Errors that stop a load: an input that cannot be read at all.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error("{path}: {err}")]
    Open { path: PathBuf, err: cutr_format::FormatError },
    #[error("{path}: no session metadata, so its records cannot be interpreted")]
    NoMetadata { path: PathBuf },
    #[error("too many input files ({0}; at most 65535)")]
    TooMany(usize),
}

/// Loads and joins one or more recordings (one per process or rank) onto one timeline.
pub fn load(paths: &[PathBuf], opts: &LoadOptions) -> Result<Trace, LoadError> {
    let (readers, prefetched) = open_inputs(paths, !opts.filter.has_window())?;
    load_prefetched(paths, &readers, opts, prefetched)
}

/// Activity chunks of the first input, decoded while its side chunks were read ([`open_inputs`]).
#[derive(Default)]
pub struct Prefetched(Vec<(u32, Result<DecodedBuffer, ChunkError>)>);

impl std::fmt::Debug for Prefetched {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Prefetched({} chunks)", self.0.len())
    }
}

/// Files with at most this many bytes of activity records decode all their chunks at once.
const ONE_WINDOW_RAW_BYTES: u64 = 32 << 20;

/// The most decompressed bytes a window of chunks may claim together (a chunk alone may claim more, up to what
/// [`cutr_format::limits`] allows): bounds the memory a file's headers can make the decoder hold at once.
const WINDOW_RAW_BYTES: u64 = 512 << 20;

/// `chunks` cut into the windows decoded at a time (and held in memory at once): all of a small file's (a small
/// recording is a few chunks of very different sizes, and a window boundary would make the largest wait), else
/// two per worker and at most [`WINDOW_RAW_BYTES`] of claimed records.
fn windows(chunks: &[ChunkInfo]) -> Vec<&[ChunkInfo]> {
    let raw: u64 = chunks.iter().map(|c| c.header.raw_len).sum();
    if raw <= ONE_WINDOW_RAW_BYTES {
        return if chunks.is_empty() { Vec::new() } else { vec![chunks] };
    }
    let per_window = (rayon::current_num_threads() * 2).max(1);
    let mut out = Vec::new();
    let mut rest = chunks;
    while !rest.is_empty() {
        let mut n = 0;
        let mut bytes = 0u64;
        while n < rest.len() && n < per_window && (n == 0 || bytes + rest[n].header.raw_len <= WINDOW_RAW_BYTES) {
            bytes += rest[n].header.raw_len;
            n += 1;
        }
        let (win, tail) = rest.split_at(n);
        out.push(win);
        rest = tail;
    }
    out
}

/// Opens the inputs (in parallel). With `decode_ahead`, the first file's first window of activity chunks is
/// decompressed while its metadata and strings are read: for a small recording those each take about as long as
/// the whole decode. (Leave it off with a `--start/--end` window, which may skip those chunks.)
pub fn open_inputs(paths: &[PathBuf], decode_ahead: bool) -> Result<(Vec<Reader>, Prefetched), LoadError> {
    if paths.len() > u16::MAX as usize {
        return Err(LoadError::TooMany(paths.len()));
    }
    let opened: Vec<Result<(Reader, Prefetched), LoadError>> = paths
        .par_iter()
        .enumerate()
        .map(|(i, p)| {
            timed_with(
                || format!("open {}", p.display()),
                || Reader::open_with(p, |r| if i == 0 && decode_ahead { prefetch(r) } else { Prefetched::default() }),
            )
            .map_err(|err| LoadError::Open { path: p.clone(), err })
        })
        .collect();
    let mut readers = Vec::with_capacity(paths.len());
    let mut prefetched = Prefetched::default();
    for (i, o) in opened.into_iter().enumerate() {
        let (r, p) = o?;
        readers.push(r);
        if i == 0 {
            prefetched = p;
        }
    }
    Ok((readers, prefetched))
}

/// The first window of a file's activity chunks, decompressed.
fn prefetch(r: &Reader) -> Prefetched {
    let chunks: Vec<ChunkInfo> = r.activity_chunks().cloned().collect();
    let mut first: Vec<&ChunkInfo> = windows(&chunks)
        .first()
        .map_or(&[][..], |w| w)
        .iter()
        .filter(|c| c.header.codec == cutr_format::Codec::Records)
        .collect();
    // Largest first: the first workers to come up take the chunks that decode longest (a zstd frame is
    // decompressed by one thread), while later ones share the small.
    first.sort_by_key(|c| std::cmp::Reverse(c.header.raw_len));
    Prefetched(first.par_iter().map(|c| (c.header.seq, decompress(r, c))).collect())
}

fn decompress(r: &Reader, c: &ChunkInfo) -> Result<DecodedBuffer, ChunkError> {
    timed_with(|| format!("decompress+restore chunk {}", c.header.seq), || r.decode_activity(c))
}

/// [`load`] for already open readers (`paths` label them).
pub fn load_readers(paths: &[PathBuf], readers: &[Reader], opts: &LoadOptions) -> Result<Trace, LoadError> {
    load_prefetched(paths, readers, opts, Prefetched::default())
}

/// [`load_readers`] with the chunks [`open_inputs`] decoded ahead.
pub fn load_prefetched(
    paths: &[PathBuf],
    readers: &[Reader],
    opts: &LoadOptions,
    prefetched: Prefetched,
) -> Result<Trace, LoadError> {
    if paths.len() > u16::MAX as usize {
        return Err(LoadError::TooMany(paths.len()));
    }
    let mut trace = Trace::default();
    let mut per_kind: HashMap<u32, u64> = HashMap::new();
    let mut prefetched = Some(prefetched);
    let mut stalls = Vec::with_capacity(paths.len());
    // The parts of a split recording are one process, loaded in part order on its first part's time base.
    let grouping = runs::group(readers);
    // A process's NVTX markers and external ids, gathered over its files (a run's parts) and indexed at its last.
    let (mut markers, mut external) = (Vec::new(), Vec::new());
    let sampled_procs: Vec<ProcId> =
        grouping.order.iter().filter(|o| stall_rates::has_pc_samples(&readers[o.0])).map(|o| o.1).collect();
    for (n, &(i, proc)) in grouping.order.iter().enumerate() {
        let (path, r) = (&paths[i], &readers[i]);
        let ahead = if i == 0 { prefetched.take().unwrap_or_default() } else { Prefetched::default() };
        let first = trace.processes.get(proc.index()).map(|p| p.time);
        let graphs_before = trace.graphs.pending.events.len();
        // Under a window, a function's rate is over its process's runs in every part, sampled there or not.
        let run_sampled = sampled_procs.contains(&proc);
        let from = FileStart { ahead, time: first, run_sampled };
        let file = load_file(&mut trace, &mut per_kind, proc, path, r, &opts.filter, from)?;
        stalls.push(file.stalls);
        runs::add_file(&mut trace, proc, file.process, graphs_before);
        markers.extend(file.markers);
        external.extend(file.external);
        if grouping.order.get(n + 1).is_none_or(|next| next.1 != proc) {
            let (m, e) = (std::mem::take(&mut markers), std::mem::take(&mut external));
            indexes::finish_process(&mut trace, proc, m, e, &opts.filter);
        }
    }
    for (proc, w) in grouping.warnings {
        trace.processes[proc.index()].warnings.push(w);
    }
    trace.records_per_kind = per_kind.into_iter().collect();
    trace.records_per_kind.sort();
    timing::mark("decode");
    trace.finish();
    // The stall rates are drawn over the kernels' executions, so only once all of them are loaded.
    timed("PC sample rates", || stall_rates::draw(&mut trace, stalls, &opts.filter));
    timing::mark("joins");
    Ok(trace)
}

/// The rows of a window of chunks, one entry per chunk (`Err` for a chunk that failed to decode).
type WindowRows = Vec<Result<ChunkRows, ChunkError>>;

/// Decoded chunks waiting for their window, by chunk sequence number.
type Ahead = HashMap<u32, Result<DecodedBuffer, ChunkError>>;

/// A file decoded into the trace, with what is finished once per process ([`indexes::finish_process`]).
struct LoadedFile {
    /// Its PC samples, to be drawn once every file's kernels are loaded.
    stalls: FileStalls,
    /// The file as a process, or as a later part of a split recording's.
    process: Process,
    markers: Vec<RawMarker>,
    external: Vec<RawExternal>,
}

/// What a file's load starts from besides the file.
struct FileStart {
    /// Its first chunks, decoded ahead.
    ahead: Prefetched,
    /// A split recording's first part's time base, for its later parts.
    time: Option<crate::timebase::TimeBase>,
    /// Whether some file of its process (a split recording's parts) holds PC samples.
    run_sampled: bool,
}

/// Decodes one file's activity chunks into `trace`.
fn load_file(
    trace: &mut Trace,
    per_kind: &mut HashMap<u32, u64>,
    proc: ProcId,
    path: &Path,
    r: &Reader,
    filter: &Filter,
    from: FileStart,
) -> Result<LoadedFile, LoadError> {
    let FileStart { ahead, time, run_sampled } = from;
    let mut warnings = Vec::new();
    let (meta, layouts) = match (r.metadata_shared(), r.layouts()) {
        (Some(meta), Some(layouts)) => (meta.clone(), layouts.clone()),
        _ => {
            let (layouts, version) =
                guess_layouts(r).ok_or_else(|| LoadError::NoMetadata { path: path.to_path_buf() })?;
            warnings.push(format!(
                "no readable session metadata: records decoded with the layouts of CUPTI API {version}, chosen by \
                 their record sizes; host, command line, devices and API names are unknown"
            ));
            let meta = SessionMetadata { cupti_api_version: version, ..Default::default() };
            (Arc::new(meta), layouts)
        }
    };
    let layouts = &layouts;
    let clocks = ClockCheck::of_reader(r);
    let time = time.unwrap_or(clocks.time);
    warnings.extend(clocks.warnings());
    let recorder = RecorderThreads::of(r.thread_names());
    let decoder = FileDecoder { reader: r, fields: FileFields::new(layouts), proc, time, filter, recorder };
    // Chunks whose time range is entirely outside the window are skipped without decoding.
    let outside = |c: &ChunkInfo| {
        let (a, b) = (time.to_trace(c.header.t_min), time.to_trace(c.header.t_max));
        c.header.t_max != 0 && (filter.start.is_some_and(|s| b < s) || filter.end.is_some_and(|e| a > e))
    };
    let chunks: Vec<ChunkInfo> = r.activity_chunks().filter(|c| !outside(c)).cloned().collect();
    let mut ahead: Ahead = ahead.0.into_iter().collect();
    // Chunks are decoded in parallel a window at a time, and each window's rows are appended to the trace while
    // the next window decodes: the rows exist once (not once per chunk and again in the trace), decode buffers
    // are reused, and the appends (a task per kind) overlap the decoding.
    let mut windows = windows(&chunks).into_iter();
    let first = windows.next().unwrap_or_default();
    let first_ahead = take_ahead(&mut ahead, first);
    // File-local text ids -> trace name ids, built while the first window decodes (rows carry file-local ids
    // until they are appended).
    let (names, first_rows) = rayon::join(
        || timed("intern texts", || intern_texts(r, &mut trace.names)),
        || decoder.window(first, first_ahead),
    );
    let file_stored: u64 = chunks.iter().map(|c| c.header.stored_len).sum();
    let gpu_before = GpuRowsBefore::of(trace);
    let mut rows = FileRows::new(trace, per_kind, names, file_stored);
    let mut pending = (!first.is_empty()).then_some((first, first_rows));
    for win in windows {
        let win_ahead = take_ahead(&mut ahead, win);
        let next = match pending.take() {
            None => decoder.window(win, win_ahead),
            Some((prev, done)) => rayon::join(|| rows.append(prev, done), || decoder.window(win, win_ahead)).1,
        };
        pending = Some((win, next));
    }
    if let Some((prev, done)) = pending {
        rows.append(prev, done);
    }
    let FileRows { markers, external, mut stats, damaged, names: text_names, recorder_calls, .. } = rows;
    crate::recorder_threads::settle(trace, proc, gpu_before, recorder_calls, &mut stats);
    let mut problems = r.problems().to_vec();
    problems.extend(damaged);
    let (mut stalls, pc_damage) = timed("PC samples", || stall_rates::read_samples(r, proc, &mut trace.names));
    let kernels_kept = filter.wants_kind(kinds::CONCURRENT_KERNEL) || filter.wants_kind(kinds::KERNEL);
    if filter.has_window() && kernels_kept && (!stalls.functions.is_empty() || run_sampled) {
        stalls.whole_file_time =
            Some(timed("kernel time outside the window", || stall_rates::whole_file_time(&decoder, &text_names)));
    }
    let devices: Vec<u32> = meta.devices.iter().map(|d| d.id).collect();
    let names = &mut trace.names;
    let counters = timed("counter samples", || metric_samples(r, proc, &time, filter, names, (&devices, &mut stats)));
    warnings.extend(counters.warnings);
    trace.counters.extend(counters.samples);
    let graph_damage = timed("graph events", || trace.graphs.read_file(r, proc, &time, filter, &mut stats));
    // A damaged chunk is already in the reader's problems when its checksum failed at open.
    for p in pc_damage.into_iter().chain(counters.problems).chain(graph_damage) {
        if !problems.contains(&p) {
            problems.push(p);
        }
    }
    count_damage(&problems, &mut stats);
    problems.sort_by_key(|p| format!("{p}"));
    trace.stats.add(&stats);
    let process = Process {
        path: path.to_path_buf(),
        parts: Vec::new(),
        pid: meta.pid,
        time,
        loss: r.loss().cloned().unwrap_or_default(),
        problems,
        recovery: r.recovery().cloned(),
        warnings,
        stats,
        api_names: Default::default(),
        thread_names: r.thread_names().clone(),
        rank_given: None,
        meta,
    };
    Ok(LoadedFile { stalls, process, markers, external })
}

/// Counts the chunks the reader found damaged or cut (of any type), and the records claimed by the activity
/// ones whose headers could be trusted.
pub(crate) fn count_damage(problems: &[Problem], stats: &mut JoinStats) {
    for p in problems {
        let (records, chunk_type) = match p {
            Problem::DamagedChunk { records, chunk_type, error, .. } => {
                // An implausible header's record count is no more trustworthy than its sizes.
                (if matches!(error, ChunkError::Implausible(_)) { 0 } else { *records }, *chunk_type)
            }
            Problem::TruncatedChunk { records, chunk_type, .. } => (*records, *chunk_type),
            Problem::MissingChunks { count, .. } => {
                stats.damaged_chunks += *count as u64;
                continue;
            }
            _ => continue,
        };
        stats.damaged_chunks += 1;
        if chunk_type == ChunkType::Activity {
            stats.records_in_damaged_chunks += records as u64;
        }
    }
}

/// The built-in layout table whose record sizes match the groups of the file's first decodable activity chunk,
/// and its CUPTI API version: how to read the records of a file whose metadata chunk was lost.
fn guess_layouts(r: &Reader) -> Option<(cutr_schema::LayoutTable, u32)> {
    let groups: Vec<(u32, usize)> = r
        .activity_chunks()
        .find_map(|c| r.decode_activity(c).ok())
        .map(|d| d.groups.iter().map(|g| (g.kind, g.stride)).collect())?;
    cutr_schema::layouts::SUPPORTED.iter().find_map(|&(version, _)| {
        let table = cutr_schema::layouts::builtin(version)?;
        groups.iter().all(|&(kind, stride)| table.size_of(kind) == Some(stride)).then_some((table, version))
    })
}

/// The chunks of `win` decoded ahead, taken out of `ahead`.
fn take_ahead(ahead: &mut Ahead, win: &[ChunkInfo]) -> Vec<Option<Result<DecodedBuffer, ChunkError>>> {
    win.iter().map(|c| ahead.remove(&c.header.seq)).collect()
}

/// The trace name id of each of the file's texts (index = the file's text id + 1; 0 = no text).
fn intern_texts(r: &Reader, names: &mut crate::Names) -> Vec<NameId> {
    std::iter::once(NameId::EMPTY).chain(r.strings().iter().map(|t| names.intern(t))).collect()
}

impl FileDecoder<'_> {
    /// The rows of a window of chunks, decoded in parallel (each from its buffer decoded ahead, if any).
    fn window(&self, win: &[ChunkInfo], ahead: Vec<Option<Result<DecodedBuffer, ChunkError>>>) -> WindowRows {
        win.par_iter()
            .zip(ahead)
            .map(|(c, pre)| {
                // A buffer decoded ahead was decoded before the layouts were read: its strides are checked here.
                let d = pre.unwrap_or_else(|| decompress(self.reader, c))?;
                self.reader.check_strides(&d)?;
                Ok(self.chunk(c, &d))
            })
            .collect()
    }
}

/// Appends a file's decoded windows to the trace, keeping its NVTX markers and external ids for the end of the
/// file.
struct FileRows<'t> {
    trace: &'t mut Trace,
    per_kind: &'t mut HashMap<u32, u64>,
    /// The file's text ids -> trace name ids.
    names: Vec<NameId>,
    /// Stored bytes of the file's chunks to decode, which size the tables ([`FileRows::reserve`]).
    file_stored: u64,
    reserved: bool,
    markers: Vec<RawMarker>,
    external: Vec<RawExternal>,
    /// The file's own counts of records that made no row.
    stats: JoinStats,
    /// Activity chunks that failed to decode.
    damaged: Vec<Problem>,
    /// API calls made on the recorder's threads, until the file is read.
    recorder_calls: Vec<ApiCall>,
}

/// One kind's rows of each chunk, taken out of them.
fn take_kind<T>(rows: &mut [ChunkRows], kind: impl Fn(&mut ChunkRows) -> &mut Vec<T>) -> Vec<Vec<T>> {
    rows.iter_mut().map(|c| std::mem::take(kind(c))).collect()
}

/// Appends `parts` to `dest`, in order.
fn append_all<T>(dest: &mut Vec<T>, parts: Vec<Vec<T>>) {
    for mut p in parts {
        dest.append(&mut p);
    }
}

impl<'t> FileRows<'t> {
    fn new(
        trace: &'t mut Trace,
        per_kind: &'t mut HashMap<u32, u64>,
        names: Vec<NameId>,
        file_stored: u64,
    ) -> FileRows<'t> {
        FileRows {
            trace,
            per_kind,
            names,
            file_stored,
            reserved: false,
            markers: Vec::new(),
            external: Vec::new(),
            stats: JoinStats::default(),
            damaged: Vec::new(),
            recorder_calls: Vec::new(),
        }
    }

    /// Room for the whole file, estimated from the rows of the first window scaled by stored bytes (25% spare):
    /// growing vectors of hundreds of MB by doubling copies them and touches twice the memory. Stored bytes are
    /// in the file, where record counts are only claims: a forged header cannot inflate the estimate beyond what
    /// the file's size allows.
    fn reserve(&mut self, win: &[ChunkInfo], rows: &WindowRows) {
        let got: u64 = win.iter().map(|c| c.header.stored_len).sum::<u64>().max(1);
        let file_stored = self.file_stored;
        let scale = |n: usize| (n as u128 * file_stored as u128 / got as u128 * 5 / 4) as usize;
        let sum = |len: &dyn Fn(&ChunkRows) -> usize| scale(rows.iter().flatten().map(len).sum());
        let t = &mut *self.trace;
        t.kernels.reserve(sum(&|c| c.kernels.len()));
        t.apis.reserve(sum(&|c| c.apis.len()));
        t.memcpys.reserve(sum(&|c| c.memcpys.len()));
        t.memsets.reserve(sum(&|c| c.memsets.len()));
        t.syncs.reserve(sum(&|c| c.syncs.len()));
        t.cuda_events.reserve(sum(&|c| c.events.len()));
        self.markers.reserve(sum(&|c| c.markers.len()));
        self.external.reserve(sum(&|c| c.external.len()));
    }

    /// Appends a decoded window's rows, counting its damaged chunks and the records that made no row.
    fn append(&mut self, win: &[ChunkInfo], rows: WindowRows) {
        timed_with(|| format!("append {} chunks", win.len()), || self.append_window(win, rows))
    }

    fn append_window(&mut self, win: &[ChunkInfo], rows: WindowRows) {
        if !self.reserved {
            self.reserved = true;
            self.reserve(win, &rows);
        }
        let mut ok = Vec::with_capacity(rows.len());
        let mut counts = ChunkCounts::default();
        for (c, rows) in win.iter().zip(rows) {
            let mut c = match rows {
                Ok(c) => c,
                Err(error) => {
                    self.damaged.push(Problem::DamagedChunk {
                        offset: c.offset,
                        seq: c.header.seq,
                        chunk_type: ChunkType::Activity,
                        records: c.header.record_count,
                        error,
                    });
                    continue;
                }
            };
            for (k, n) in c.per_kind.drain(..) {
                *self.per_kind.entry(k).or_default() += n;
            }
            counts.add(&c.counts);
            self.recorder_calls.append(&mut c.recorder_calls);
            ok.push(c);
        }
        let s = &mut self.stats;
        s.zero_timestamp_records += counts.zero;
        s.inverted_records += counts.inverted;
        s.unmodelled_records += counts.unmodelled;
        s.unresolved_names += counts.unresolved;
        s.unparsed_bytes += counts.unparsed;
        s.um_unknown_kind += counts.um_unknown_kind;
        s.recorder_thread_records += counts.recorder_thread;
        self.append_rows(ok);
    }

    /// Each kind's rows are appended by its own task: the copies (and first touches of the reserved memory) of
    /// the kinds at once instead of one after another. Names become trace name ids on the way.
    fn append_rows(&mut self, mut ok: Vec<ChunkRows>) {
        let (k, mc, ms, a) = (
            take_kind(&mut ok, |c| &mut c.kernels),
            take_kind(&mut ok, |c| &mut c.memcpys),
            take_kind(&mut ok, |c| &mut c.memsets),
            take_kind(&mut ok, |c| &mut c.apis),
        );
        let (sy, ev, ov, me) = (
            take_kind(&mut ok, |c| &mut c.syncs),
            take_kind(&mut ok, |c| &mut c.events),
            take_kind(&mut ok, |c| &mut c.overheads),
            take_kind(&mut ok, |c| &mut c.memory),
        );
        let (mk, ex) = (take_kind(&mut ok, |c| &mut c.markers), take_kind(&mut ok, |c| &mut c.external));
        let um = take_kind(&mut ok, |c| &mut c.um);
        let names = &self.names;
        let name = |id: NameId| names.get(id.index()).copied().unwrap_or(NameId::EMPTY);
        let (markers, external, t) = (&mut self.markers, &mut self.external, &mut *self.trace);
        let kernels = &mut t.kernels;
        rayon::scope(|s| {
            s.spawn(|_| {
                for part in k {
                    kernels.extend(part.into_iter().map(|mut k| {
                        k.name = name(k.name);
                        k
                    }));
                }
            });
            s.spawn(|_| append_all(&mut t.apis, a));
            s.spawn(|_| {
                for part in mk {
                    markers.extend(part.into_iter().map(|mut mk| {
                        mk.name = name(mk.name);
                        mk.domain = name(mk.domain);
                        mk
                    }));
                }
            });
            s.spawn(|_| append_all(external, ex));
            append_all(&mut t.memcpys, mc);
            append_all(&mut t.memsets, ms);
            append_all(&mut t.syncs, sy);
            append_all(&mut t.cuda_events, ev);
            append_all(&mut t.overheads, ov);
            append_all(&mut t.memory, me);
            append_all(&mut t.um, um);
        });
    }
}
