//! `--split`: the writer ends the part it writes and starts the next at each boundary (a size or a time).
//!
//! Each part is a complete file on its own: at the boundary the writer thread ends the part as `finish` ends the
//! recording (clock sample, thread names, metadata with devices and mappings, that part's loss report, footer,
//! fsync), and begins the next with what a reader of that part alone needs from before: metadata marked with the
//! run id and the part number (`split.run`, `split.part` in its `config`), a clock sample, every thread name
//! known, the cubins and graph events of the parts before (read back from the part just ended, so the recorder
//! holds none of them between boundaries), and each string pointer again the first time the new part's records
//! use it. Buffers are written between messages, so a buffer goes to exactly one part.

use std::hash::{BuildHasher, Hasher};
use std::path::PathBuf;
use std::time::Instant;

use cutr_format::{LossCounters, Reader, SessionMetadata, Writer, WriterOptions};

use super::{Session, WriterState, update_loss, write_thread_names};
use crate::config::SplitLimit;
use crate::session::metadata::clock_sample;

/// Metadata keys of a split recording's parts (in `SessionMetadata::config`): the run id the parts share, and
/// this part's number (1-based).
pub(crate) const RUN_KEY: &str = "split.run";
pub(crate) const PART_KEY: &str = "split.part";

/// The most graph events carried from part to part: graph structure is kept whole (a replay needs its capture,
/// however old), up to this; a program that builds graphs without end has its oldest events left out of later
/// parts (they stay in the parts that recorded them), counted in a note.
pub(crate) const MAX_CARRIED_GRAPH_EVENTS: usize = 1 << 20;

/// A fresh random run id: 16 hex digits (the standard library's hasher keys are drawn from the OS's randomness).
pub(crate) fn new_run_id() -> String {
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u32(std::process::id());
    h.write_u128(std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos()));
    format!("{:016x}", h.finish())
}

/// Marks `meta` as part `part` of run `run`.
pub(crate) fn mark_part(meta: &mut SessionMetadata, run: &str, part: u32) {
    meta.config.retain(|(k, _)| k != RUN_KEY && k != PART_KEY);
    meta.config.push((RUN_KEY.into(), run.into()));
    meta.config.push((PART_KEY.into(), part.to_string()));
}

/// The part being written and what the parts before it add up to.
pub(super) struct Parts {
    limit: SplitLimit,
    part: u32,
    started: Instant,
    /// The run-wide counters when this part began: the part's loss report counts from here.
    pub(super) dropped_base: u64,
    pub(super) refused_base: u64,
    /// What the finished parts wrote.
    pub(super) finished_bytes: u64,
    pub(super) finished_loss: LossCounters,
    first_path: PathBuf,
    /// Where the next boundary is retried after a part could not be started (bytes written by then).
    retry_at_bytes: u64,
}

impl Parts {
    pub(super) fn new(limit: SplitLimit, first_path: PathBuf) -> Parts {
        Parts {
            limit,
            part: 1,
            started: Instant::now(),
            dropped_base: 0,
            refused_base: 0,
            finished_bytes: 0,
            finished_loss: LossCounters::default(),
            first_path,
            retry_at_bytes: 0,
        }
    }

    /// How many parts were started.
    pub(super) fn count(&self) -> u32 {
        self.part
    }

    pub(super) fn first_path(&self) -> &PathBuf {
        &self.first_path
    }

    fn due(&self, bytes: u64) -> bool {
        match self.limit {
            SplitLimit::Bytes(b) => bytes >= b.max(self.retry_at_bytes),
            SplitLimit::Every(d) => self.started.elapsed() >= d,
        }
    }
}

/// Ends the part and starts the next when its size or time is reached.
pub(super) fn roll_if_due(s: &Session, st: &mut WriterState) {
    let due = st.parts.as_ref().is_some_and(|p| p.due(st.w.bytes_written()));
    if due {
        roll(s, st);
    }
}

fn roll(s: &Session, st: &mut WriterState) {
    let Some(parts) = st.parts.as_mut() else { return };
    let next = parts.part + 1;
    // The next file first: if it cannot be made, this part goes on and the boundary is tried again later.
    let (path, file) = match crate::session::create_output(&s.config, s.pid, next) {
        Ok(f) => f,
        Err(e) => {
            s.note(format!("--split: part {next} could not be started ({e}); part {} goes on", parts.part));
            parts.started = Instant::now();
            parts.retry_at_bytes = st.w.bytes_written().saturating_mul(2);
            return;
        }
    };
    let w = match Writer::new(file, WriterOptions { zstd_level: s.config.zstd_level, ..Default::default() }) {
        Ok(w) => w,
        Err(e) => {
            s.note(format!("--split: part {next} ({}) could not be started: {e}", path.display()));
            let _ = std::fs::remove_file(&path);
            return;
        }
    };
    let old = std::mem::replace(&mut st.w, w);
    *s.writing.lock().unwrap_or_else(|e| e.into_inner()) = path.clone();
    let old_path = std::mem::replace(&mut st.path, path);
    end_part(s, st, old);
    let parts = st.parts.as_mut().expect("checked");
    parts.part = next;
    parts.started = Instant::now();
    parts.retry_at_bytes = 0;
    let run = st.meta.config.iter().find(|(k, _)| k == RUN_KEY).map(|(_, v)| v.clone()).unwrap_or_default();
    mark_part(&mut st.meta, &run, next);
    begin_part(s, st, &old_path);
}

/// Ends the part written by `w`: what `finish` writes, with the metadata as it stands now.
fn end_part(s: &Session, st: &mut WriterState, mut w: Writer<std::fs::File>) {
    if let Some(c) = clock_sample(s.cupti) {
        let _ = w.write_clocks(&[c]);
    }
    let names = st.threads.changed();
    if !names.is_empty() && w.write_thread_names(&names).is_err() {
        st.loss.write_failures += 1;
    }
    let mut meta = st.meta.clone();
    meta.devices = crate::ffi::driver::devices();
    meta.mappings = crate::mappings::executable_mappings().unwrap_or_default();
    if w.write_metadata(&meta).is_err() {
        st.loss.write_failures += 1;
    }
    update_loss(s, st);
    st.loss.is_final = true;
    if w.write_loss(&st.loss).is_err() {
        st.loss.write_failures += 1;
    }
    let bytes = match w.finish() {
        Ok(f) => {
            let _ = f.sync_all();
            f.metadata().map(|m| m.len()).unwrap_or(0)
        }
        Err(_) => {
            st.loss.write_failures += 1;
            0
        }
    };
    let parts = st.parts.as_mut().expect("only a split recording ends parts");
    parts.finished_bytes += bytes;
    parts.finished_loss.add(&st.loss);
    parts.dropped_base = s.dropped.load(std::sync::atomic::Ordering::Relaxed);
    parts.refused_base = s.pool.refused();
    st.loss = LossCounters::default();
}

/// Begins a part: its metadata, a clock sample, every thread name known, and the cubins and graph events of
/// the parts before, copied from the part just ended (`previous`).
fn begin_part(s: &Session, st: &mut WriterState, previous: &std::path::Path) {
    if st.w.write_metadata(&st.meta).is_err() {
        st.loss.write_failures += 1;
    }
    if let Some(c) = clock_sample(s.cupti) {
        let _ = st.w.write_clocks(&[c]);
    }
    // Strings are written again as the new part's records first use them.
    st.interner.forget();
    st.threads.write_all_again();
    write_thread_names(st);
    match Reader::open(previous) {
        Ok(r) => carry(s, st, &r),
        Err(e) => s.note(format!(
            "--split: {} could not be read back ({e}); its cubins and graph events are not in the parts after it",
            previous.display()
        )),
    }
    let _ = st.w.sync();
}

/// The cubins and graph events of `previous` (which carries those of the parts before it), into the new part.
fn carry(s: &Session, st: &mut WriterState, previous: &Reader) {
    for chunk in previous.cubin_chunks() {
        let written = previous.read_cubin(chunk).map(|c| st.w.write_cubin(&c.to_blob()));
        if !matches!(written, Ok(Ok(_))) {
            st.loss.write_failures += 1;
        }
    }
    let (mut graphs, _) = previous.graph_events();
    let total: usize = graphs.iter().map(|g| g.events.len()).sum();
    let mut left_out = 0;
    // The oldest chunks go first when there are too many to carry.
    let mut kept = total;
    while kept > MAX_CARRIED_GRAPH_EVENTS && !graphs.is_empty() {
        let g = graphs.remove(0);
        kept -= g.events.len();
        left_out += g.events.len();
    }
    if left_out > 0 {
        s.note(format!(
            "--split: more than {MAX_CARRIED_GRAPH_EVENTS} graph events; the oldest are only in the parts that \
             recorded them"
        ));
    }
    for g in &mut graphs {
        // The events a copy holds were counted where they were recorded, and so were those lost then.
        g.lost_events = 0;
        if st.w.write_graph_events(g).is_err() {
            st.loss.write_failures += 1;
        }
    }
}
