//! A slice on a timeline track: where it comes from in the model, its track and its span.

/// Where a slice comes from: a row of one of the model's tables.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Src {
    Kernel(u32),
    Memcpy(u32),
    Memset(u32),
    Api(u32),
    Range(u32),
    /// An NVTX range over the GPU work it launched on one stream (`Timeline::annotations`).
    Annotation(u32),
    Sync(u32),
    Overhead(u32),
    /// A unified memory event (`Trace::um`).
    Um(u32),
    /// A capture-time NVTX range over one replay of a CUDA graph (`Timeline::graphs.replays`).
    Replay(u32),
    /// The recording-health slice spanning the whole trace.
    Health,
}

impl Src {
    const INDEX_BITS: u32 = 29;
    /// The health slice's index in the kind it shares with unified memory events.
    const HEALTH_INDEX: u32 = (1 << Self::INDEX_BITS) - 1;
    /// Where replay slices start in the kind they share with CUPTI overhead records (a few per buffer: 2^28 of
    /// them is far more than any recording holds).
    const REPLAY_BASE: u32 = 1 << (Self::INDEX_BITS - 1);
    /// Where the NVTX ranges' GPU spans start in the kind they share with the ranges (2^28 ranges is far more
    /// than any recording holds).
    const ANNOTATION_BASE: u32 = 1 << (Self::INDEX_BITS - 1);

    /// The source packed in 32 bits: the kind in the top 3, the row index below (rows < 2^29 per kind). Packed
    /// values order like the enum (kind first, then index). Unified memory events and the one health slice share
    /// the last kind, the health slice taking its last index, so that no kind loses an index bit; replay slices
    /// take the upper half of the overhead kind, the NVTX ranges' GPU spans the upper half of the ranges'.
    #[inline]
    fn pack(self) -> u32 {
        let (kind, i) = match self {
            Src::Kernel(i) => (0, i),
            Src::Memcpy(i) => (1, i),
            Src::Memset(i) => (2, i),
            Src::Api(i) => (3, i),
            Src::Range(i) => {
                assert!(i < Self::ANNOTATION_BASE, "more than 2^28 NVTX ranges");
                (4, i)
            }
            Src::Annotation(i) => {
                assert!(i < Self::ANNOTATION_BASE, "more than 2^28 NVTX range GPU spans");
                (4, Self::ANNOTATION_BASE + i)
            }
            Src::Sync(i) => (5, i),
            Src::Overhead(i) => {
                assert!(i < Self::REPLAY_BASE, "more than 2^28 overhead records");
                (6, i)
            }
            Src::Replay(i) => {
                assert!(i < Self::REPLAY_BASE, "more than 2^28 replay slices");
                (6, Self::REPLAY_BASE + i)
            }
            Src::Um(i) => {
                assert!(i < Self::HEALTH_INDEX, "more than 2^29 - 1 unified memory records");
                (7, i)
            }
            Src::Health => (7, Self::HEALTH_INDEX),
        };
        assert!(i < 1 << Self::INDEX_BITS, "more than 2^29 records of one kind");
        (kind << Self::INDEX_BITS) | i
    }

    #[inline]
    fn unpack(v: u32) -> Src {
        let i = v & ((1 << Self::INDEX_BITS) - 1);
        match v >> Self::INDEX_BITS {
            0 => Src::Kernel(i),
            1 => Src::Memcpy(i),
            2 => Src::Memset(i),
            3 => Src::Api(i),
            4 if i >= Self::ANNOTATION_BASE => Src::Annotation(i - Self::ANNOTATION_BASE),
            4 => Src::Range(i),
            5 => Src::Sync(i),
            6 if i >= Self::REPLAY_BASE => Src::Replay(i - Self::REPLAY_BASE),
            6 => Src::Overhead(i),
            _ if i == Self::HEALTH_INDEX => Src::Health,
            _ => Src::Um(i),
        }
    }
}

/// Rows of one kind the timeline can address (29 bits of an item's packed source).
pub const MAX_ROWS_PER_KIND: usize = 1 << Src::INDEX_BITS;

/// CUPTI overhead records, and replay slices, the timeline can address (each half of one kind's indices).
pub const MAX_OVERHEADS: usize = Src::REPLAY_BASE as usize;

/// NVTX ranges, and their GPU spans, the timeline can address (each half of one kind's indices).
pub const MAX_RANGES: usize = Src::ANNOTATION_BASE as usize;

/// One slice on a track: 24 bytes, as there is one per record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Item {
    pub track: u32,
    src: u32,
    pub start: u64,
    pub end: u64,
}

impl Item {
    pub fn new(track: u32, start: u64, end: u64, src: Src) -> Item {
        Item { track, src: src.pack(), start, end }
    }

    #[inline]
    pub fn src(&self) -> Src {
        Src::unpack(self.src)
    }

    /// Layout order: by track, then start, longer first (so enclosing slices open first), then source.
    #[inline]
    pub(crate) fn key(&self) -> (u32, u64, std::cmp::Reverse<u64>, u32) {
        (self.track, self.start, std::cmp::Reverse(self.end), self.src)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sources_pack_and_unpack_with_shared_kinds_split_in_halves() {
        let last = MAX_OVERHEADS as u32 - 1;
        let all = [
            Src::Kernel(3),
            Src::Range(0),
            Src::Range(last),
            Src::Annotation(0),
            Src::Annotation(last),
            Src::Overhead(0),
            Src::Overhead(last),
            Src::Replay(0),
            Src::Replay(last),
            Src::Um(5),
            Src::Health,
        ];
        for s in all {
            assert_eq!(Src::unpack(s.pack()), s);
        }
        // Packed order: ranges, then their GPU spans; overheads, then replays, then unified memory and the health
        // slice.
        let packed: Vec<u32> = all.iter().map(|s| s.pack()).collect();
        assert!(packed.is_sorted());
        assert_eq!(Src::Replay(0).pack(), (6 << 29) | (1 << 28));
        assert_eq!(Src::Annotation(0).pack(), (4 << 29) | (1 << 28));
    }
}
