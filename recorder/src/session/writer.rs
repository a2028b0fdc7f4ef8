//! The writer side of the session: CUPTI's buffer callbacks (the hot path), the writer thread that interns
//! strings, encodes and appends chunks (or keeps them in the flight recorder's ring), the loss report, and the
//! file's orderly end.
//!
//! Hot path: CUPTI calls [`on_request`] on application threads (a lock-free pop from the pool) and
//! [`on_complete`] on its own thread (read the dropped-record counter, queue the buffer). Everything else (string
//! interning, encoding, compression, file I/O) happens on the writer thread, which recycles each buffer when done.
//! Every FFI entry catches panics: nothing unwinds into CUDA or the application.

use std::collections::HashMap;
use std::ffi::c_void;
use std::fs::File;
use std::hash::{Hash, Hasher};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use crossbeam_channel::Receiver;
use cutr_format::records::StringPointerPlan;
use cutr_format::{ActivityEncoder, LossCounters, SessionMetadata, Writer, WriterOptions};
use cutr_schema::LayoutTable;

use super::metadata::clock_sample;
use super::{Session, Summary, current};
use crate::ffi::driver;

mod parts;
pub(super) use parts::{mark_part, new_run_id};

/// What reaches the writer thread.
pub(super) enum Msg {
    Buffer {
        ptr: usize,
        valid: usize,
    },
    /// A cubin or a collection of PC samples (`--pc-sampling`).
    Source(crate::pc_sampling::Collected),
    /// Counter samples (`--counters`).
    Counters(cutr_format::CounterSamples),
    /// Graph structure and node creation stacks (`--graph-context`).
    Graphs(cutr_format::GraphEvents),
    /// Write the flight recorder's window to a file of its own (`--ring`); the reply is its path.
    Dump {
        reply: mpsc::Sender<Result<PathBuf, String>>,
    },
    Tick,
    Finish {
        devices: Vec<cutr_format::Device>,
        mappings: Vec<cutr_format::Mapping>,
        reply: mpsc::Sender<Summary>,
    },
}

/// CUPTI asks for an empty buffer (on an application thread).
pub(crate) unsafe extern "C" fn on_request(buffer: *mut *mut u8, size: *mut usize, max_records: *mut usize) {
    let r = catch_unwind(|| {
        let got = current()
            .filter(|s| !s.finishing.load(Ordering::Relaxed) || !s.finished.load(Ordering::Relaxed))
            .and_then(|s| s.pool.take().map(|p| (p, s.pool.buffer_bytes())));
        got.unwrap_or((std::ptr::null_mut(), 0))
    });
    let (p, n) = r.unwrap_or((std::ptr::null_mut(), 0));
    // SAFETY: CUPTI passes valid out-pointers.
    unsafe {
        *buffer = p;
        *size = n;
        *max_records = 0;
    }
}

/// CUPTI hands back a filled buffer (on its own thread).
pub(crate) unsafe extern "C" fn on_complete(
    _ctx: *mut c_void,
    _stream: u32,
    buffer: *mut u8,
    _size: usize,
    valid: usize,
) {
    let _ = catch_unwind(AssertUnwindSafe(|| {
        let Some(s) = current() else { return };
        if buffer.is_null() {
            return;
        }
        if let Ok(n) = s.cupti.dropped_records() {
            s.dropped.fetch_add(n, Ordering::Relaxed);
        }
        if s.finished.load(Ordering::Acquire) || s.tx.send(Msg::Buffer { ptr: buffer as usize, valid }).is_err() {
            // The writer is gone (a completion after the end): nothing can be written any more.
            // SAFETY: CUPTI returns a buffer it got from this pool.
            unsafe { s.pool.give_back(buffer) };
        }
    }));
}

/// Text already written for each string pointer (by content hash), to write each string once and notice when a
/// pointer is reused for other text (a module unloaded and another loaded at the same address).
struct Interner {
    plan: StringPointerPlan,
    seen: HashMap<u64, u64>,
    scratch: Vec<u64>,
    /// How many times `seen` was emptied at [`MAX_INTERNED`].
    resets: u64,
}

/// The most string pointers the interner remembers: a program whose strings keep moving (NVTX messages CUPTI
/// copies anew, modules loaded and unloaded for hours) would otherwise grow the table without end. Past it the
/// table is emptied and strings are written again as records use them: more bytes in the file, nothing lost.
const MAX_INTERNED: usize = 1 << 20;

impl Interner {
    fn new(plan: StringPointerPlan) -> Interner {
        Interner { plan, seen: HashMap::new(), scratch: Vec::new(), resets: 0 }
    }

    /// Forgets what was written: a new part of a split recording writes each string again at its first use.
    fn forget(&mut self) {
        self.seen.clear();
    }

    /// How many string pointers are remembered.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.seen.len()
    }

    /// New (pointer, text) pairs referenced by `buffer`.
    fn new_strings(&mut self, buffer: &[u8], unresolved: &mut u64) -> Vec<(u64, String)> {
        self.scratch.clear();
        self.plan.collect(buffer, &mut self.scratch);
        self.scratch.sort_unstable();
        self.scratch.dedup();
        let mut out = Vec::new();
        for &ptr in &self.scratch {
            // CUPTI's strings live at least until the module or marker they name is gone; records arrive long
            // before that. A pointer that is not a valid address (never seen from CUPTI) is counted, not read.
            if ptr < 4096 {
                *unresolved += 1;
                continue;
            }
            // SAFETY: `ptr` comes from a record CUPTI just delivered and points at a NUL-terminated string CUPTI
            // owns; strnlen bounds the read.
            let bytes = unsafe {
                let p = ptr as *const libc::c_char;
                let n = libc::strnlen(p, 1 << 20);
                std::slice::from_raw_parts(p as *const u8, n)
            };
            let mut h = std::collections::hash_map::DefaultHasher::new();
            bytes.hash(&mut h);
            let hash = h.finish();
            if self.seen.get(&ptr) != Some(&hash) {
                if self.seen.len() >= MAX_INTERNED {
                    self.seen.clear();
                    self.resets += 1;
                }
                self.seen.insert(ptr, hash);
                out.push((ptr, String::from_utf8_lossy(bytes).into_owned()));
            }
        }
        out
    }
}

struct WriterState {
    w: Writer<File>,
    encoder: ActivityEncoder,
    interner: Interner,
    loss: LossCounters,
    buffers: u64,
    records: u64,
    /// Cubins written, PC samples collected and dropped (`--pc-sampling`).
    cubins: u64,
    pc_samples: u64,
    pc_samples_dropped: u64,
    graph_events: u64,
    counter_samples: u64,
    /// Counter samples taken while recording was off, left out.
    counters_outside: u64,
    last_sync: Instant,
    threads: crate::threads::ThreadNames,
    /// The flight recorder's window (`--ring`): activity and samples go here instead of the file.
    ring: Option<crate::controls::ring::Ring>,
    /// `--ring-trigger`: what in the records writes the window.
    triggers: Option<crate::controls::triggers::TriggerScan>,
    dumps: u32,
    /// The metadata of the file being written (with `--split`, marked with its part).
    meta: SessionMetadata,
    /// The file being written.
    path: PathBuf,
    /// `--split`: the part being written and the finished parts' totals.
    parts: Option<parts::Parts>,
}

pub(super) fn writer_loop(
    s: &'static Session,
    w: Writer<File>,
    rx: Receiver<Msg>,
    meta: SessionMetadata,
    layouts: LayoutTable,
) {
    let mut st = WriterState {
        encoder: ActivityEncoder::new(&layouts, s.config.zstd_level),
        interner: Interner::new(StringPointerPlan::new(&layouts)),
        w,
        loss: LossCounters::default(),
        buffers: 0,
        records: 0,
        cubins: 0,
        pc_samples: 0,
        pc_samples_dropped: 0,
        graph_events: 0,
        counter_samples: 0,
        counters_outside: 0,
        last_sync: Instant::now(),
        threads: Default::default(),
        ring: s.config.ring.map(crate::controls::ring::Ring::new),
        triggers: (s.config.ring.is_some() && !s.config.ring_triggers.is_empty())
            .then(|| crate::controls::triggers::TriggerScan::new(&layouts, &s.config.ring_triggers)),
        dumps: 0,
        meta,
        path: s.path.clone(),
        parts: s.config.split.map(|limit| parts::Parts::new(limit, s.path.clone())),
    };
    while let Ok(msg) = rx.recv() {
        let r = catch_unwind(AssertUnwindSafe(|| match msg {
            Msg::Buffer { ptr, valid } => {
                write_buffer(s, &mut st, ptr, valid);
                None
            }
            Msg::Source(c) => {
                write_source(&mut st, c);
                None
            }
            Msg::Counters(mut c) => {
                // The session's own marks are kept; a source's samples only inside the windows of recording.
                if c.source != "cutr" && !s.counters_whole_run() {
                    let left_out = s.windows.retain(&mut c);
                    st.counters_outside += left_out as u64;
                    if c.is_empty() && c.lost_samples == 0 {
                        return None;
                    }
                }
                write_counters(&mut st, &c);
                None
            }
            Msg::Graphs(g) => {
                write_graphs(&mut st, g);
                None
            }
            Msg::Dump { reply } => {
                let _ = reply.send(dump_ring(s, &mut st));
                None
            }
            Msg::Tick => {
                tick(s, &mut st);
                None
            }
            Msg::Finish { devices, mappings, reply } => Some((devices, mappings, reply)),
        }));
        if matches!(r, Ok(None)) {
            parts::roll_if_due(s, &mut st);
        }
        match r {
            Ok(Some((devices, mappings, reply))) => {
                // Buffers CUPTI completed before the finish request.
                while let Ok(Msg::Buffer { ptr, valid }) = rx.try_recv() {
                    write_buffer(s, &mut st, ptr, valid);
                }
                let mut meta = st.meta.clone();
                meta.devices = devices;
                meta.mappings = mappings;
                let summary = close(s, st, &meta);
                let _ = reply.send(summary);
                return;
            }
            Ok(None) => {}
            Err(_) => st.loss.notes.push("internal error in the writer thread; a buffer may be missing".into()),
        }
    }
}

fn write_buffer(s: &Session, st: &mut WriterState, ptr: usize, valid: usize) {
    let cap = s.pool.buffer_bytes();
    // SAFETY: CUPTI filled `valid` bytes of this pool buffer and gave up ownership; the pool gets it back below.
    let bytes = unsafe { std::slice::from_raw_parts(ptr as *const u8, valid.min(cap)) };
    let strings = st.interner.new_strings(bytes, &mut st.loss.unresolved_strings);
    if st.ring.is_some() {
        let fired = st.triggers.as_mut().is_some_and(|t| t.fires(bytes, &strings));
        let ring = st.ring.as_mut().expect("checked");
        let enc = st.encoder.encode(bytes);
        // SAFETY: the buffer came from the pool and `bytes` is not used after this.
        unsafe { s.pool.give_back(ptr as *mut u8) };
        st.loss.zero_timestamp_records += enc.stats.zero_timestamps as u64;
        st.loss.inverted_timestamp_records += enc.stats.inverted_timestamps as u64;
        st.loss.unparsed_bytes += enc.stats.unparsed_bytes as u64;
        st.buffers += 1;
        st.records += enc.stats.records as u64;
        ring.push_activity(strings, enc);
        if fired {
            match dump_ring(s, st) {
                Ok(path) if !s.config.quiet => eprintln!("cutr: ring trigger: wrote {}", path.display()),
                Ok(_) => {}
                Err(e) => st.loss.notes.push(format!("ring trigger: {e}")),
            }
        }
        return;
    }
    if !strings.is_empty() {
        let entries: Vec<(u64, &str)> = strings.iter().map(|(p, t)| (*p, t.as_str())).collect();
        if st.w.write_strings(&entries).is_err() {
            st.loss.write_failures += 1;
        }
    }
    let enc = st.encoder.encode(bytes);
    let stats = enc.stats.clone();
    // SAFETY: the buffer came from the pool and `bytes` is not used after this.
    unsafe { s.pool.give_back(ptr as *mut u8) };
    st.loss.zero_timestamp_records += stats.zero_timestamps as u64;
    st.loss.inverted_timestamp_records += stats.inverted_timestamps as u64;
    st.loss.unparsed_bytes += stats.unparsed_bytes as u64;
    if st.w.append_encoded(enc).is_err() {
        st.loss.write_failures += 1;
        st.loss.records_lost_in_write_failures += stats.records as u64;
    } else {
        st.buffers += 1;
        st.records += stats.records as u64;
    }
}

/// A cubin or a collection of PC samples, to the file.
fn write_source(st: &mut WriterState, c: crate::pc_sampling::Collected) {
    use crate::pc_sampling::Collected;
    if let Some(ring) = &mut st.ring {
        match c {
            Collected::Cubin(cubin) => {
                st.cubins += 1;
                ring.push_cubin(cubin);
            }
            Collected::Samples(p) => {
                st.pc_samples += p.samples(&p.stall_reasons);
                st.pc_samples_dropped += p.dropped_samples;
                st.loss.pc_samples_dropped += p.dropped_samples;
                st.loss.pc_collections_buffer_full += u64::from(p.hardware_buffer_full);
                ring.push_pc(p);
            }
        }
        return;
    }
    let written = match &c {
        Collected::Cubin(cubin) => st.w.write_cubin(cubin),
        Collected::Samples(samples) => st.w.write_pc_samples(samples),
    };
    if written.is_err() {
        st.loss.write_failures += 1;
        return;
    }
    match c {
        Collected::Cubin(_) => st.cubins += 1,
        Collected::Samples(p) => {
            st.pc_samples += p.samples(&p.stall_reasons);
            st.pc_samples_dropped += p.dropped_samples;
            st.loss.pc_samples_dropped += p.dropped_samples;
            st.loss.pc_collections_buffer_full += u64::from(p.hardware_buffer_full);
        }
    }
}

/// Counter samples, to the file; samples lost on the way are counted in the loss report.
fn write_counters(st: &mut WriterState, c: &cutr_format::CounterSamples) {
    st.loss.counter_samples_lost += c.lost_samples;
    if let Some(ring) = &mut st.ring {
        st.counter_samples += c.len() as u64;
        ring.push_counters(c.clone());
        return;
    }
    if st.w.write_counters(c).is_err() {
        st.loss.write_failures += 1;
        st.loss.counter_samples_lost += c.len() as u64;
        return;
    }
    st.counter_samples += c.len() as u64;
}

/// Graph events, to the file (or kept whole in the ring, as cubins are: replays need them however old).
fn write_graphs(st: &mut WriterState, g: cutr_format::GraphEvents) {
    st.graph_events += g.events.len() as u64;
    if let Some(ring) = &mut st.ring {
        ring.push_graphs(g);
        return;
    }
    if st.w.write_graph_events(&g).is_err() {
        st.loss.write_failures += 1;
        st.graph_events -= g.events.len() as u64;
    }
}

/// The flight recorder's window as a complete file beside the output (`<stem>.dump<N>.cutr`).
fn dump_ring(s: &Session, st: &mut WriterState) -> Result<PathBuf, String> {
    let Some(ring) = &st.ring else { return Err("not a flight recording (--ring)".into()) };
    st.dumps += 1;
    let stem = s.path.with_extension("");
    let path = PathBuf::from(format!("{}.dump{}.cutr", stem.display(), st.dumps));
    let write = || -> Result<(), cutr_format::FormatError> {
        let mut w = Writer::create(&path, WriterOptions { zstd_level: s.config.zstd_level, ..Default::default() })?;
        let mut meta = st.meta.clone();
        meta.devices = driver::devices();
        meta.mappings = crate::mappings::executable_mappings().unwrap_or_default();
        w.write_metadata(&meta)?;
        ring.replay(&mut w)?;
        if let Some(c) = clock_sample(s.cupti) {
            w.write_clocks(&[c])?;
        }
        let names = crate::threads::ThreadNames::default().changed();
        if !names.is_empty() {
            w.write_thread_names(&names)?;
        }
        let mut loss = st.loss.clone();
        loss.notes.push(ring.note());
        loss.is_final = true;
        w.write_loss(&loss)?;
        let f = w.finish()?;
        f.sync_all().map_err(|e| cutr_format::FormatError::Io { path: path.clone(), err: e })?;
        Ok(())
    };
    write().map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    Ok(path)
}

/// The loss report of the file being written (with `--split`, of its part: the run's counters since it began).
fn update_loss(s: &Session, st: &mut WriterState) {
    let (dropped_base, refused_base) = st.parts.as_ref().map_or((0, 0), |p| (p.dropped_base, p.refused_base));
    st.loss.cupti_dropped_records = s.dropped.load(Ordering::Relaxed).saturating_sub(dropped_base);
    st.loss.refused_buffers = s.pool.refused().saturating_sub(refused_base);
    for n in s.notes.all().iter() {
        if !st.loss.notes.contains(n) {
            st.loss.notes.push(n.clone());
        }
    }
    // A count, not a loss: the samples the user did not ask for (one note, updated).
    const OUTSIDE: &str = "counter samples taken while recording was off, left out:";
    if st.counters_outside > 0 {
        st.loss.notes.retain(|n| !n.starts_with(OUTSIDE));
        st.loss.notes.push(format!("{OUTSIDE} {}", st.counters_outside));
    }
    const RESETS: &str = "string pointers kept moving; the string table was emptied and written again (times):";
    if st.interner.resets > 0 {
        st.loss.notes.retain(|n| !n.starts_with(RESETS));
        st.loss.notes.push(format!("{RESETS} {}", st.interner.resets));
    }
}

/// Writes the thread names new since the last flush.
fn write_thread_names(st: &mut WriterState) {
    let names = st.threads.changed();
    if !names.is_empty() && st.w.write_thread_names(&names).is_err() {
        st.loss.write_failures += 1;
    }
}

fn tick(s: &Session, st: &mut WriterState) {
    if let Some(ring) = &mut st.ring {
        // Nothing reaches the file until a dump: the clock is kept for it.
        if let Some(c) = clock_sample(s.cupti) {
            ring.push_clock(c);
        }
        return;
    }
    if let Some(c) = clock_sample(s.cupti)
        && st.w.write_clocks(&[c]).is_err()
    {
        st.loss.write_failures += 1;
    }
    write_thread_names(st);
    update_loss(s, st);
    if st.w.write_loss(&st.loss).is_err() {
        st.loss.write_failures += 1;
    }
    // Chunks are in the page cache after each write (safe from kill -9); sync now and then for power loss.
    if st.last_sync.elapsed() >= Duration::from_secs(10) {
        let _ = st.w.sync();
        st.last_sync = Instant::now();
    }
}

fn close(s: &Session, mut st: WriterState, meta: &SessionMetadata) -> Summary {
    if let Some(ring) = st.ring.take() {
        // The output gets the window, as a dump does.
        if ring.replay(&mut st.w).is_err() {
            st.loss.write_failures += 1;
        }
        st.loss.notes.push(ring.note());
    }
    if let Some(c) = clock_sample(s.cupti) {
        let _ = st.w.write_clocks(&[c]);
    }
    write_thread_names(&mut st);
    let _ = st.w.write_metadata(meta);
    update_loss(s, &mut st);
    st.loss.is_final = true;
    let _ = st.w.write_loss(&st.loss);
    let bytes = match st.w.finish() {
        Ok(mut f) => {
            use std::io::Write;
            let _ = f.flush();
            let _ = f.sync_all();
            f.metadata().map(|m| m.len()).unwrap_or(0)
        }
        Err(_) => {
            st.loss.write_failures += 1;
            0
        }
    };
    // A split recording: the run's totals, its first and last parts.
    let (first_path, parts, bytes, loss) = match &st.parts {
        Some(p) => {
            let mut loss = p.finished_loss.clone();
            loss.add(&st.loss);
            loss.is_final = true;
            (Some(p.first_path().clone()), p.count(), p.finished_bytes + bytes, loss)
        }
        None => (None, 1, bytes, st.loss),
    };
    Summary {
        path: st.path,
        first_path,
        parts,
        records: st.records,
        buffers: st.buffers,
        bytes,
        loss,
        peak_buffer_bytes: s.pool.peak_bytes() as u64,
        cubins: st.cubins,
        pc_samples: st.pc_samples,
        pc_samples_dropped: st.pc_samples_dropped,
        counter_samples: st.counter_samples,
        graph_events: st.graph_events,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fake::FakeCupti;

    /// 100,000 buffers naming the same kernels keep the table at the pointers they use, and write each text once.
    #[test]
    fn repeating_names_keep_the_intern_table_at_a_fixed_size() {
        let (_cupti, h) = FakeCupti::new(130001);
        let mut s = cutr_synth::Synth::new(cutr_synth::SynthOptions {
            records: 4_000,
            buffer_bytes: 16 << 10,
            ..Default::default()
        })
        .unwrap();
        let layouts = s.layouts().clone();
        let (mut buffers, mut texts) = (Vec::new(), HashMap::new());
        while let Some(b) = s.next_buffer() {
            texts.extend(b.new_strings);
            buffers.push(b.bytes);
        }
        for b in &mut buffers {
            h.realize_strings(b, &texts);
        }
        let mut interner = Interner::new(StringPointerPlan::new(&layouts));
        let mut unresolved = 0;
        let mut written = 0;
        let mut sizes = Vec::new();
        for i in 0..100_000 {
            written += interner.new_strings(&buffers[i % buffers.len()], &mut unresolved).len();
            if i % 10_000 == 9_999 {
                sizes.push(interner.len());
            }
        }
        let distinct: std::collections::HashSet<&String> = texts.values().collect();
        assert!(sizes.iter().all(|&n| n == sizes[0]), "{sizes:?}");
        assert_eq!(written, sizes[0]);
        assert!(written <= distinct.len() && written > 0, "{written} of {}", distinct.len());
        assert_eq!((unresolved, interner.resets), (0, 0));
        interner.forget();
        assert!(!interner.new_strings(&buffers[0], &mut unresolved).is_empty(), "written again after forget");
    }
}
