//! Memory in use over time, from the allocation and free records (MEMORY2): one step series per (file, device),
//! its peak and when it was reached, for one class of memory: device memory (`cudaMalloc`, `cudaMallocAsync` from
//! pools, arrays, `__device__` variables), managed memory (`cudaMallocManaged`: resident wherever it was last
//! touched, so not counted as device memory) or pinned host memory (`cudaMallocHost`).
//!
//! A free whose allocation was not recorded (made before recording began, or lost) cannot be subtracted from a
//! total that never held it: it is counted in [`MemoryInUse::frees_without_allocation`], never taken below zero.

use rustc_hash::FxHashMap;

use crate::ids::ProcId;
use crate::rows::MemoryOp;
use crate::trace::Trace;

/// One point of a device's memory in use: from `ts` on, `bytes` are allocated.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct InUsePoint {
    pub ts: u64,
    pub bytes: u64,
}

/// Memory in use on one device of one file, over the recording.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MemoryInUse {
    pub proc: ProcId,
    pub device: u32,
    /// A point per allocation or free, in time order (the last point at a timestamp wins).
    pub points: Vec<InUsePoint>,
    /// The most bytes in use at once, and the first time it was reached.
    pub peak_bytes: u64,
    pub peak_ts: u64,
    /// The allocation that reached the peak (its index in `Trace::memory`).
    pub peak_allocation: Option<usize>,
    /// Allocations and frees seen.
    pub allocations: u64,
    pub frees: u64,
    /// Frees of an address with no recorded allocation (made before recording began): not subtracted.
    pub frees_without_allocation: u64,
    /// Bytes still allocated at the end of the recording.
    pub bytes_at_end: u64,
}

/// A class of memory, by `CUpti_ActivityMemoryKind`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum MemoryClass {
    /// Device (3), array (4) and device static (6) memory.
    Device,
    /// Managed (5) and managed static (7) memory.
    Managed,
    /// Pinned host memory (2).
    PinnedHost,
}

impl MemoryClass {
    /// The class of a `CUpti_ActivityMemoryKind`; `None` for unknown and pageable kinds.
    pub fn of(memory_kind: u32) -> Option<MemoryClass> {
        match memory_kind {
            3 | 4 | 6 => Some(MemoryClass::Device),
            5 | 7 => Some(MemoryClass::Managed),
            2 => Some(MemoryClass::PinnedHost),
            _ => None,
        }
    }
}

/// Device memory in use per (file, device), in (file, device) order: [`memory_in_use_of`] the device class.
pub fn memory_in_use(trace: &Trace) -> Vec<MemoryInUse> {
    memory_in_use_of(trace, MemoryClass::Device)
}

/// Memory of one class in use per (file, device), in (file, device) order. `trace.memory` is sorted by time.
pub fn memory_in_use_of(trace: &Trace, class: MemoryClass) -> Vec<MemoryInUse> {
    let mut series: FxHashMap<(ProcId, u32), (MemoryInUse, FxHashMap<u64, u64>)> = FxHashMap::default();
    for (i, op) in trace.memory.iter().enumerate() {
        if MemoryClass::of(op.memory_kind) != Some(class) {
            continue;
        }
        let (s, live) = series.entry((op.proc, op.device)).or_insert_with(|| {
            (MemoryInUse { proc: op.proc, device: op.device, ..Default::default() }, FxHashMap::default())
        });
        step(s, live, i, op);
    }
    let mut out: Vec<MemoryInUse> = series.into_values().map(|(s, _)| s).collect();
    out.sort_by_key(|s| (s.proc, s.device));
    out
}

fn step(s: &mut MemoryInUse, live: &mut FxHashMap<u64, u64>, index: usize, op: &MemoryOp) {
    let now = s.points.last().map_or(0, |p| p.bytes);
    let bytes = if op.free {
        s.frees += 1;
        match live.remove(&op.address) {
            // The free's own size is what CUPTI reports; the allocation's is what was added: subtract that.
            Some(allocated) => now.saturating_sub(allocated),
            None => {
                s.frees_without_allocation += 1;
                return;
            }
        }
    } else {
        s.allocations += 1;
        // A second allocation at a live address (a lost free) replaces the first, not adds to it.
        let replaced = live.insert(op.address, op.bytes).unwrap_or(0);
        now.saturating_sub(replaced).saturating_add(op.bytes)
    };
    match s.points.last_mut() {
        Some(p) if p.ts == op.ts => p.bytes = bytes,
        _ => s.points.push(InUsePoint { ts: op.ts, bytes }),
    }
    if bytes > s.peak_bytes {
        s.peak_bytes = bytes;
        s.peak_ts = op.ts;
        s.peak_allocation = Some(index);
    }
    s.bytes_at_end = bytes;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn op(ts: u64, address: u64, bytes: u64, free: bool) -> MemoryOp {
        op_of(ts, address, bytes, free, 3)
    }

    fn op_of(ts: u64, address: u64, bytes: u64, free: bool, memory_kind: u32) -> MemoryOp {
        MemoryOp { proc: ProcId(0), ts, device: 0, stream: 0, correlation: 0, address, bytes, free, memory_kind }
    }

    #[test]
    fn peak_and_frees_without_allocation() {
        let trace = Trace {
            memory: vec![
                op(10, 0x100, 4096, false),
                op(20, 0x200, 1 << 20, false),
                op(30, 0x999, 77, true),
                op(40, 0x100, 4096, true),
                op(50, 0x300, 512, false),
                op(50, 0x200, 1 << 20, true),
            ],
            ..Default::default()
        };
        let s = &memory_in_use(&trace)[0];
        assert_eq!(s.peak_bytes, 4096 + (1 << 20));
        assert_eq!((s.peak_ts, s.peak_allocation), (20, Some(1)));
        assert_eq!((s.allocations, s.frees, s.frees_without_allocation), (3, 3, 1));
        assert_eq!(s.bytes_at_end, 512);
        let pts: Vec<(u64, u64)> = s.points.iter().map(|p| (p.ts, p.bytes)).collect();
        assert_eq!(pts, vec![(10, 4096), (20, 4096 + (1 << 20)), (40, 1 << 20), (50, 512)]);
    }

    #[test]
    fn classes_are_kept_apart() {
        let trace = Trace {
            memory: vec![
                op_of(10, 0x100, 4096, false, 3),
                op_of(20, 0x200, 1 << 20, false, 5),
                op_of(30, 0x300, 512, false, 2),
                op_of(40, 0x200, 1 << 20, true, 5),
            ],
            ..Default::default()
        };
        assert_eq!(memory_in_use(&trace)[0].peak_bytes, 4096);
        let managed = &memory_in_use_of(&trace, MemoryClass::Managed)[0];
        assert_eq!((managed.peak_bytes, managed.bytes_at_end, managed.frees), (1 << 20, 0, 1));
        assert_eq!(memory_in_use_of(&trace, MemoryClass::PinnedHost)[0].peak_bytes, 512);
    }
}
