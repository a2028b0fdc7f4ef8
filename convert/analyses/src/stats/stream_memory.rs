//! `stats --stream`'s memory in use: the allocation and free records summed in time order per (file, device,
//! class) as [`cutr_model::memory`] sums a loaded trace's, for the memory section's peaks. A window's records are
//! not in time order across its chunks: they wait until the stream has passed their time
//! ([`Batch::next_start`]), then are summed sorted by time. What is held is the records of a window or two
//! and each series' live allocations (address -> bytes), which the running sum needs to subtract a free.
//!
//! A record older than one already summed (a damaged or forged chunk header) is summed when it comes, out of
//! order; the report warns how many there were.

use cutr_model::memory::MemoryClass;
use cutr_model::rows::MemoryOp;
use cutr_model::stream::Batch;
use cutr_model::{ProcId, Trace, describe};
use rustc_hash::FxHashMap;

use super::MemoryPeak;

/// One series' running sum: the fields of [`cutr_model::memory::MemoryInUse`] but its points.
#[derive(Default)]
struct Series {
    /// Live allocations: address -> bytes allocated.
    live: FxHashMap<u64, u64>,
    bytes_now: u64,
    peak_bytes: u64,
    peak_ts: u64,
    peak_allocation: Option<MemoryOp>,
    allocations: u64,
    frees: u64,
    frees_without_allocation: u64,
}

impl Series {
    /// One record, as `cutr_model::memory`'s step takes it.
    fn step(&mut self, op: &MemoryOp) {
        let bytes = if op.free {
            self.frees += 1;
            match self.live.remove(&op.address) {
                // The allocation's size is what was added: subtract that, not the free's own.
                Some(allocated) => self.bytes_now.saturating_sub(allocated),
                None => {
                    self.frees_without_allocation += 1;
                    return;
                }
            }
        } else {
            self.allocations += 1;
            // A second allocation at a live address (a lost free) replaces the first.
            let replaced = self.live.insert(op.address, op.bytes).unwrap_or(0);
            self.bytes_now.saturating_sub(replaced).saturating_add(op.bytes)
        };
        if bytes > self.peak_bytes {
            (self.peak_bytes, self.peak_ts, self.peak_allocation) = (bytes, op.ts, Some(*op));
        }
        self.bytes_now = bytes;
    }
}

/// The memory section's peaks folded window by window.
#[derive(Default)]
pub(super) struct StreamedMemory {
    /// The most records kept waiting ([`cutr_model::stream::StreamOptions::max_waiting`]).
    cap: usize,
    /// Records summed before the stream passed their time: more than the cap waited.
    settled_early: u64,
    /// Records not yet summed: at or after the stream's edge when they came.
    waiting: Vec<MemoryOp>,
    series: FxHashMap<(ProcId, u32, MemoryClass), Series>,
    /// The time of the last record summed.
    summed_to: u64,
    /// Records older than one already summed (see the module).
    pub(super) late_records: u64,
}

impl StreamedMemory {
    pub(super) fn new(cap: usize) -> StreamedMemory {
        StreamedMemory { cap, ..Default::default() }
    }

    pub(super) fn add(&mut self, b: &Batch) {
        let classed = b.memory.iter().filter(|op| MemoryClass::of(op.memory_kind).is_some());
        self.waiting.extend(classed);
        // Stable: records at one time keep their order in the recording.
        self.waiting.sort_by_key(|op| (op.ts, op.proc));
        let ready = self.waiting.partition_point(|op| op.ts < b.next_start.unwrap_or(u64::MAX));
        let early = self.waiting.len().saturating_sub(ready).saturating_sub(self.cap);
        self.settled_early += early as u64;
        let ready = ready + early;
        for op in self.waiting.drain(..ready) {
            if op.ts < self.summed_to {
                self.late_records += 1;
            }
            self.summed_to = self.summed_to.max(op.ts);
            let class = MemoryClass::of(op.memory_kind).expect("only classed records wait");
            self.series.entry((op.proc, op.device, class)).or_default().step(&op);
        }
    }

    /// The peaks as the loaded report lists them; `origin`: the trace's first timestamp.
    pub(super) fn peaks(&self, t: &Trace, origin: u64) -> Vec<MemoryPeak> {
        let classes = [
            (MemoryClass::Device, "device"),
            (MemoryClass::Managed, "managed"),
            (MemoryClass::PinnedHost, "pinned host"),
        ];
        let mut peaks = Vec::new();
        for (class, memory) in classes {
            let mut keys: Vec<&(ProcId, u32, MemoryClass)> = self.series.keys().filter(|k| k.2 == class).collect();
            keys.sort_unstable_by_key(|k| (k.0, k.1));
            for key in keys {
                let s = &self.series[key];
                let allocation = s.peak_allocation.as_ref();
                peaks.push(MemoryPeak {
                    file: t.processes.get(key.0.index()).map(|p| p.path.display().to_string()).unwrap_or_default(),
                    device: key.1,
                    memory,
                    peak_bytes: s.peak_bytes,
                    peak_at_ns: s.peak_ts.saturating_sub(origin),
                    allocation_address: allocation.map_or(0, |a| a.address),
                    allocation_bytes: allocation.map_or(0, |a| a.bytes),
                    allocation_kind: allocation.map_or("", |a| describe::memory_kind(a.memory_kind)),
                    allocations: s.allocations,
                    frees: s.frees,
                    frees_without_allocation: s.frees_without_allocation,
                    bytes_at_end: s.bytes_now,
                });
            }
        }
        // By file and device, device memory first (a stable sort, as the loaded report's).
        peaks.sort_by(|a, b| (&a.file, a.device).cmp(&(&b.file, b.device)));
        peaks
    }

    /// The warnings for records summed early or out of order, if any.
    pub(super) fn warnings(&self) -> Vec<String> {
        let mut out = Vec::new();
        if self.settled_early > 0 {
            out.push(super::stream_utilization::settled_early_warning("memory in use", self.settled_early, self.cap));
        }
        if self.late_records > 0 {
            out.push(format!(
                "memory in use: {} allocation or free records came after later ones were summed (a damaged or forged \
                 chunk header): summed out of time order, so a peak may be off (--no-stream computes it exactly)",
                self.late_records
            ));
        }
        out
    }
}
