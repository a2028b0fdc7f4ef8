//! A streaming writer of Perfetto `TracePacket`s (protos/perfetto/trace/trace_packet.proto).
//!
//! Output is a sequence of shards, each its own packet sequence (`trusted_packet_sequence_id`) with its own
//! interning tables, so shards are encoded in parallel and simply concatenated (a trace is just repeated field 1).
//! Within a shard events must come in non-decreasing time order: timestamps are deltas on an incremental,
//! sequence-scoped clock (a few bytes instead of ten), declared by a `ClockSnapshot` that maps it to BOOTTIME
//! with equal values. BOOTTIME is trace-relative (ns since an epoch, [`Shard::relative_to`]), and one snapshot
//! ([`write_epoch`]) maps it to CLOCK_REALTIME, so viewers hold every nanosecond and the absolute time is kept.
//!
//! Field numbers and wire types follow docs/reference/conventions.md section 3; in particular flows use fields
//! 36/42 (the only ones Perfetto v20 reads, still read today), and no repeated field is packed.
//!
//! A shard may compress its packets as it goes ([`Shard::compressed`]): every [`COMPRESS_BATCH`] bytes of
//! packets become one `compressed_packets` packet (field 50: a zlib stream of a serialized `Trace`), which the
//! trace processor inflates and reads as if the packets were inline, the way it reads the Perfetto service's own
//! deflate-compressed traces. Packet order, sequences and interning are unchanged.

use std::cell::RefCell;

use super::descriptor_fields::{counter_unit, track};
use crate::args::{Arg, ArgKey, Category, Value};
use crate::protobuf as pb;
use crate::timeline::Unit;

/// `TracePacket` fields.
mod packet {
    pub const CLOCK_SNAPSHOT: u32 = 6;
    pub const TIMESTAMP: u32 = 8;
    pub const SEQ_ID: u32 = 10;
    pub const TRACK_EVENT: u32 = 11;
    pub const INTERNED_DATA: u32 = 12;
    pub const SEQUENCE_FLAGS: u32 = 13;
    pub const COMPRESSED_PACKETS: u32 = 50;
    pub const DEFAULTS: u32 = 59;
    pub const TRACK_DESCRIPTOR: u32 = 60;
}

/// Bytes of packets per `compressed_packets` wrapper: well under the 512 KB the Perfetto service itself uses, so
/// a batch is compressed while it is still in cache, and large enough that the wrapper's ~15 bytes do not count.
pub const COMPRESS_BATCH: usize = 128 << 10;

thread_local! {
    /// One libdeflate compressor (level 1) and output buffer per thread: allocating them costs more than
    /// compressing a batch.
    static DEFLATE: RefCell<(libdeflater::Compressor, Vec<u8>)> = RefCell::new((
        // Level 1: libdeflate's fastest that compresses (`fastest()` is level 0, stored blocks). ~430 MB/s and
        // 3.9x on our packets, against zlib-rs's 470 MB/s and 2.9x and miniz's 270 MB/s and 3.3x (level 1 each).
        libdeflater::Compressor::new(libdeflater::CompressionLvl::new(1).unwrap_or_default()),
        Vec::new(),
    ));
}

/// Replaces the packets in `out[from..]` by one `compressed_packets` packet holding them.
fn compress_tail(out: &mut Vec<u8>, from: usize) {
    if from >= out.len() {
        return;
    }
    DEFLATE.with(|cell| {
        let (compressor, buf) = &mut *cell.borrow_mut();
        let plain = &out[from..];
        buf.resize(compressor.zlib_compress_bound(plain.len()), 0);
        // libdeflate guarantees success into zlib_compress_bound bytes; were it ever to fail, the packets stay
        // as they are, which readers take just the same.
        let Ok(n) = compressor.zlib_compress(plain, buf) else { return };
        out.truncate(from);
        let inner = pb::varint_len((packet::COMPRESSED_PACKETS << 3) as u64) + pb::varint_len(n as u64) + n;
        pb::tag(out, 1, pb::LEN);
        pb::varint(out, inner as u64);
        pb::bytes(out, packet::COMPRESSED_PACKETS, &buf[..n]);
    });
}

const SEQ_INCREMENTAL_STATE_CLEARED: u64 = 1;
const SEQ_NEEDS_INCREMENTAL_STATE: u64 = 2;
/// Sequence-scoped clock of the deltas (ids 64..127 are per sequence).
const DELTA_CLOCK: u64 = 64;
const BOOTTIME: u64 = 6;
const REALTIME: u64 = 1;

/// An event's name: `key` identifies the text within a shard (the text is interned on first use).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Name<'a> {
    pub key: u32,
    pub text: &'a str,
}

/// A slice beginning on `track` at `ts`. Each id in `flows_out` starts an arrow from it; each in `flows_in` ends
/// one at it.
/// `named_args` are args whose names are not [`ArgKey`]s (written with their names inline, not interned).
#[derive(Clone, Copy, Debug)]
pub struct SliceBegin<'a> {
    pub track: u64,
    pub ts: u64,
    pub name: Name<'a>,
    pub category: Category,
    pub args: &'a [Arg<'a>],
    pub named_args: &'a [(&'a str, Value<'a>)],
    pub flows_out: &'a [u64],
    pub flows_in: &'a [u64],
}

/// An instant event on `track` at `ts`.
#[derive(Clone, Copy, Debug)]
pub struct Instant<'a> {
    pub track: u64,
    pub ts: u64,
    pub name: Name<'a>,
    pub category: Category,
    pub args: &'a [Arg<'a>],
}

/// How a track is shown.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TrackKind {
    /// A process (host process, or a GPU shown as one): `pid` must be unique in the trace.
    Process { pid: u32, name: String },
    /// A host thread of a process.
    Thread { pid: u32, tid: u32, name: String },
    /// Any other track (context, stream, NVTX lane), under `parent`. `ordered_children`: its children are shown
    /// in the order of their [`TrackDescriptor::sibling_order`], not by name.
    Custom { name: String, ordered_children: bool },
    /// A counter track: the unit of its values, and what it is (shown by the viewer beside the name; empty:
    /// none).
    Counter { name: String, unit: Unit, description: String },
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TrackDescriptor {
    /// Unique in the trace, non-zero.
    pub uuid: u64,
    pub parent: Option<u64>,
    pub kind: TrackKind,
    /// The track's place among its siblings, where their parent orders its children.
    pub sibling_order: Option<i32>,
}

/// A DebugAnnotation's value field.
fn annotation_value(d: &mut Vec<u8>, value: Value<'_>) {
    match value {
        Value::Int(v) => pb::int(d, 4, v),
        Value::UInt(v) => pb::uint(d, 3, v),
        Value::Double(v) => pb::double(d, 5, v),
        Value::Bool(v) => pb::uint(d, 2, v as u64),
        Value::Str(s) => pb::string(d, 6, s),
        Value::Int3(v) => {
            for x in v {
                pb::message(d, 12, |e| pb::int(e, 4, x));
            }
        }
    }
}

/// The clock snapshot that keeps a relative trace's absolute time: trace time 0 (BOOTTIME, the trace
/// processor's clock) is `epoch` ns of CLOCK_REALTIME (Unix time).
pub fn write_epoch(epoch: u64, seq_id: u32, out: &mut Vec<u8>) {
    pb::message(out, 1, |p| {
        pb::uint(p, packet::SEQ_ID, seq_id as u64);
        pb::message(p, packet::CLOCK_SNAPSHOT, |cs| {
            pb::message(cs, 1, |c| {
                pb::uint(c, 1, BOOTTIME);
                pb::uint(c, 2, 0);
            });
            pb::message(cs, 1, |c| {
                pb::uint(c, 1, REALTIME);
                pb::uint(c, 2, epoch);
            });
        });
    });
}

/// Encodes the track descriptors (written first, on their own sequence).
pub fn write_descriptors(tracks: &[TrackDescriptor], seq_id: u32, out: &mut Vec<u8>) {
    for t in tracks {
        pb::message(out, 1, |p| {
            pb::uint(p, packet::SEQ_ID, seq_id as u64);
            pb::message(p, packet::TRACK_DESCRIPTOR, |d| {
                pb::uint(d, 1, t.uuid);
                if let Some(parent) = t.parent {
                    pb::uint(d, 5, parent);
                }
                match &t.kind {
                    TrackKind::Process { pid, name } => {
                        pb::string(d, 2, name);
                        pb::message(d, 3, |pd| {
                            pb::int(pd, 1, *pid as i64);
                            pb::string(pd, 6, name);
                        });
                    }
                    TrackKind::Thread { pid, tid, name } => {
                        pb::string(d, 2, name);
                        pb::message(d, 4, |td| {
                            pb::int(td, 1, *pid as i64);
                            pb::int(td, 2, *tid as i64);
                            pb::string(td, 5, name);
                        });
                    }
                    TrackKind::Custom { name, ordered_children } => {
                        pb::string(d, 2, name);
                        if *ordered_children {
                            pb::uint(d, track::CHILD_ORDERING, track::ORDER_EXPLICIT);
                        }
                    }
                    TrackKind::Counter { name, unit, description } => {
                        pb::string(d, 2, name);
                        if !description.is_empty() {
                            pb::string(d, track::DESCRIPTION, description);
                        }
                        pb::message(d, 8, |c| counter_unit(c, unit));
                    }
                }
                if let Some(rank) = t.sibling_order {
                    pb::int(d, track::SIBLING_ORDER_RANK, rank as i64);
                }
            });
        });
    }
}

/// One packet sequence being encoded: interning tables, the delta clock and the output bytes.
#[derive(Debug)]
pub struct Shard {
    out: Vec<u8>,
    seq_id: u32,
    /// Clock value of the last packet (the snapshot's value before the first event).
    last_ts: u64,
    started: bool,
    /// Interned event-name iid by caller key (0 = not yet interned).
    name_iids: Vec<u32>,
    next_name_iid: u32,
    /// Interned annotation-name iids, by [`ArgKey`] (0 = not yet interned).
    arg_iids: [u32; ArgKey::COUNT],
    next_arg_iid: u32,
    /// Interned category iids, by [`Category`].
    cat_iids: [u32; Category::COUNT],
    next_cat_iid: u32,
    /// Interned data of the packet being built.
    pending: Vec<u8>,
    event: Vec<u8>,
    /// The track events go to unless they name another (a packet default, so events leave it out).
    default_track: Option<u64>,
    /// Start of the packets not yet compressed, when compressing.
    batch_start: Option<usize>,
    /// Timestamps are written relative to this (ns); see [`write_epoch`].
    epoch: u64,
    pub events: u64,
}

impl Shard {
    /// A shard whose first event is at or after `t0`.
    pub fn new(seq_id: u32, t0: u64) -> Shard {
        Shard {
            out: Vec::new(),
            seq_id,
            last_ts: t0,
            started: false,
            name_iids: Vec::new(),
            next_name_iid: 1,
            arg_iids: [0; ArgKey::COUNT],
            next_arg_iid: 1,
            cat_iids: [0; Category::COUNT],
            next_cat_iid: 1,
            pending: Vec::new(),
            event: Vec::with_capacity(256),
            default_track: None,
            batch_start: None,
            epoch: 0,
            events: 0,
        }
    }

    /// Writes the packets as `compressed_packets` batches of about [`COMPRESS_BATCH`] bytes.
    pub fn compressed(mut self) -> Shard {
        self.batch_start = Some(self.out.len());
        self
    }

    /// Reserves room for `bytes` of output up front (growing a multi-MB buffer by doubling copies it).
    pub fn with_capacity(mut self, bytes: usize) -> Shard {
        self.out.reserve(bytes);
        self
    }

    /// Writes timestamps relative to `epoch` (the events' own stay absolute): a viewer holding timestamps in
    /// doubles keeps every nanosecond of a trace-relative clock, where absolute ns (~1.8e18) lose up to 256.
    pub fn relative_to(mut self, epoch: u64) -> Shard {
        self.epoch = epoch;
        self
    }

    /// Makes `track` the sequence's default track: events on it leave out their `track_uuid` (2+ bytes each).
    pub fn on_track(mut self, track: u64) -> Shard {
        self.default_track = Some(track);
        self
    }

    #[inline]
    fn track(&mut self, track: u64) {
        if self.default_track != Some(track) {
            pb::uint(&mut self.event, 11, track);
        }
    }

    /// The clock snapshot that anchors the deltas; written before the first event.
    fn start(&mut self) {
        self.started = true;
        let t0 = self.last_ts.saturating_sub(self.epoch);
        let seq = self.seq_id as u64;
        pb::message(&mut self.out, 1, |p| {
            pb::uint(p, packet::SEQ_ID, seq);
            pb::message(p, packet::CLOCK_SNAPSHOT, |cs| {
                pb::message(cs, 1, |c| {
                    pb::uint(c, 1, BOOTTIME);
                    pb::uint(c, 2, t0);
                });
                pb::message(cs, 1, |c| {
                    pb::uint(c, 1, DELTA_CLOCK);
                    pb::uint(c, 2, t0);
                    pb::uint(c, 3, 1);
                });
            });
        });
    }

    fn intern_name(&mut self, key: u32, text: &str) -> u32 {
        let k = key as usize;
        if self.name_iids.len() <= k {
            self.name_iids.resize(k + 1, 0);
        }
        if self.name_iids[k] == 0 {
            let iid = self.next_name_iid;
            self.next_name_iid += 1;
            self.name_iids[k] = iid;
            pb::message(&mut self.pending, 2, |e| {
                pb::uint(e, 1, iid as u64);
                pb::string(e, 2, text);
            });
        }
        self.name_iids[k]
    }

    fn intern_arg(&mut self, key: ArgKey) -> u32 {
        let k = key as usize;
        if self.arg_iids[k] == 0 {
            let iid = self.next_arg_iid;
            self.next_arg_iid += 1;
            self.arg_iids[k] = iid;
            let name = key.perfetto_name();
            pb::message(&mut self.pending, 3, |e| {
                pb::uint(e, 1, iid as u64);
                pb::string(e, 2, name);
            });
        }
        self.arg_iids[k]
    }

    fn intern_category(&mut self, category: Category) -> u32 {
        let k = category as usize;
        if self.cat_iids[k] == 0 {
            let iid = self.next_cat_iid;
            self.next_cat_iid += 1;
            self.cat_iids[k] = iid;
            let name = category.name();
            pb::message(&mut self.pending, 1, |e| {
                pb::uint(e, 1, iid as u64);
                pb::string(e, 2, name);
            });
        }
        self.cat_iids[k]
    }

    /// Writes the packet around `self.event` (an encoded TrackEvent) at `ts`. Only the first packet carries
    /// sequence flags: it clears and sets up the sequence's state (defaults, first interned names), and the later
    /// packets of a sequence written in one piece cannot find that state lost, so marking each of them as
    /// needing it (2 bytes per packet) would change nothing.
    fn emit(&mut self, ts: u64) {
        if !self.started {
            self.start();
        }
        debug_assert!(ts >= self.last_ts, "events of a shard must be in time order");
        let delta = ts.saturating_sub(self.last_ts);
        self.last_ts = self.last_ts.max(ts);
        let first = self.events == 0;
        let seq = self.seq_id as u64;
        let (pending, event, default_track) = (&self.pending, &self.event, self.default_track);
        pb::message(&mut self.out, 1, |p| {
            pb::uint(p, packet::TIMESTAMP, delta);
            pb::uint(p, packet::SEQ_ID, seq);
            if first {
                pb::uint(p, packet::SEQUENCE_FLAGS, SEQ_INCREMENTAL_STATE_CLEARED | SEQ_NEEDS_INCREMENTAL_STATE);
                pb::message(p, packet::DEFAULTS, |d| {
                    // Every packet of this sequence uses the delta clock ...
                    pb::uint(d, 58, DELTA_CLOCK);
                    // ... and its events go to the default track unless they name one.
                    if let Some(t) = default_track {
                        pb::message(d, 11, |te| pb::uint(te, 11, t));
                    }
                });
            }
            if !pending.is_empty() {
                pb::bytes(p, packet::INTERNED_DATA, pending);
            }
            pb::bytes(p, packet::TRACK_EVENT, event);
        });
        self.pending.clear();
        self.events += 1;
        if let Some(from) = self.batch_start
            && self.out.len() - from >= COMPRESS_BATCH
        {
            compress_tail(&mut self.out, from);
            self.batch_start = Some(self.out.len());
        }
    }

    fn annotations(&mut self, args: &[Arg<'_>]) {
        for a in args {
            let iid = self.intern_arg(a.key);
            pb::message(&mut self.event, 4, |d| {
                pb::uint(d, 1, iid as u64);
                annotation_value(d, a.value);
            });
        }
    }

    /// Annotations with their names inline (DebugAnnotation.name, field 10).
    fn named_annotations(&mut self, args: &[(&str, Value<'_>)]) {
        for (name, value) in args {
            pb::message(&mut self.event, 4, |d| {
                pb::string(d, 10, name);
                annotation_value(d, *value);
            });
        }
    }

    /// A slice begins.
    pub fn begin(&mut self, s: &SliceBegin<'_>) {
        let name_iid = self.intern_name(s.name.key, s.name.text);
        let cat_iid = self.intern_category(s.category);
        self.event.clear();
        pb::uint(&mut self.event, 9, 1); // TYPE_SLICE_BEGIN
        self.track(s.track);
        pb::uint(&mut self.event, 10, name_iid as u64);
        pb::uint(&mut self.event, 3, cat_iid as u64);
        self.annotations(s.args);
        self.named_annotations(s.named_args);
        for &f in s.flows_out {
            pb::uint(&mut self.event, 36, f);
        }
        for &f in s.flows_in {
            pb::uint(&mut self.event, 42, f);
        }
        self.emit(s.ts);
    }

    /// The slice most recently begun on `track` and still open ends at `ts`.
    pub fn end(&mut self, track: u64, ts: u64) {
        self.event.clear();
        pb::uint(&mut self.event, 9, 2); // TYPE_SLICE_END
        self.track(track);
        self.emit(ts);
    }

    /// An instant event.
    pub fn instant(&mut self, i: &Instant<'_>) {
        let name_iid = self.intern_name(i.name.key, i.name.text);
        let cat_iid = self.intern_category(i.category);
        self.event.clear();
        pb::uint(&mut self.event, 9, 3); // TYPE_INSTANT
        self.track(i.track);
        pb::uint(&mut self.event, 10, name_iid as u64);
        pb::uint(&mut self.event, 3, cat_iid as u64);
        self.annotations(i.args);
        self.emit(i.ts);
    }

    /// A counter value at `ts` on a counter track.
    pub fn counter(&mut self, track: u64, ts: u64, value: f64) {
        self.event.clear();
        pb::uint(&mut self.event, 9, 4); // TYPE_COUNTER
        self.track(track);
        pb::double(&mut self.event, 44, value);
        self.emit(ts);
    }

    pub fn into_bytes(mut self) -> Vec<u8> {
        if let Some(from) = self.batch_start {
            compress_tail(&mut self.out, from);
        }
        self.out
    }

    pub fn len(&self) -> usize {
        self.out.len()
    }

    pub fn is_empty(&self) -> bool {
        self.out.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    /// Reads one length-delimited field 1 (a packet) at `at`: (packet bytes, next offset).
    fn packet_at(b: &[u8], mut at: usize) -> (&[u8], usize) {
        assert_eq!(b[at], 0x0a, "field 1, length-delimited");
        at += 1;
        let (mut len, mut shift) = (0usize, 0);
        loop {
            let c = b[at];
            at += 1;
            len |= ((c & 0x7f) as usize) << shift;
            shift += 7;
            if c < 0x80 {
                break;
            }
        }
        (&b[at..at + len], at + len)
    }

    fn shard_bytes(compress: bool, slices: u64) -> Vec<u8> {
        let mut s = Shard::new(7, 1_000).on_track(3);
        if compress {
            s = s.compressed();
        }
        for i in 0..slices {
            let args = [Arg::new(ArgKey::Grid, Value::Int3([i as i64, 1, 1]))];
            let text = format!("k{}", i % 5);
            s.begin(&SliceBegin {
                track: 3,
                ts: 1_000 + i * 10,
                name: Name { key: (i % 5) as u32, text: &text },
                category: Category::Kernel,
                args: &args,
                named_args: &[],
                flows_out: &[i + 1],
                flows_in: &[],
            });
            s.end(3, 1_005 + i * 10);
        }
        s.into_bytes()
    }

    /// Compressed packets inflate to exactly the plain packets, in batches of about COMPRESS_BATCH bytes.
    #[test]
    fn compressed_batches_inflate_to_the_plain_packets() {
        let plain = shard_bytes(false, 20_000);
        let packed = shard_bytes(true, 20_000);
        let (mut at, mut inflated, mut wrappers) = (0, Vec::new(), 0);
        while at < packed.len() {
            let (p, next) = packet_at(&packed, at);
            // The wrapper holds field 50 only: tag 0x92 0x03, then the zlib stream's length and bytes.
            assert_eq!(&p[..2], &[0x92, 0x03]);
            let mut r = &p[2..];
            let mut len = 0usize;
            let mut shift = 0;
            while let Some((&c, rest)) = r.split_first() {
                r = rest;
                len |= ((c & 0x7f) as usize) << shift;
                shift += 7;
                if c < 0x80 {
                    break;
                }
            }
            assert_eq!(len, r.len(), "nothing after the compressed bytes");
            let before = inflated.len();
            flate2::read::ZlibDecoder::new(r).read_to_end(&mut inflated).unwrap();
            // Every batch but the last reaches the batch size by less than one packet.
            assert!(inflated.len() - before < COMPRESS_BATCH + 256 || next == packed.len());
            (at, wrappers) = (next, wrappers + 1);
        }
        assert_eq!(inflated, plain);
        assert_eq!(plain.len().div_ceil(COMPRESS_BATCH), wrappers);
        assert!(packed.len() * 3 < plain.len(), "{} -> {}", plain.len(), packed.len());
    }

    /// An empty compressed shard writes nothing at all.
    #[test]
    fn an_empty_compressed_shard_is_empty() {
        assert_eq!(shard_bytes(true, 0), Vec::<u8>::new());
    }
}
