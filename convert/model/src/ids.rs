//! Typed handles of the model: which input file a row came from, which interned string it names, and which
//! launch its correlation id joins it to. Each is a plain integer inside, so tables stay small and `Copy`.

use serde::Serialize;

/// An input file of a trace (one recorded process): the index of its [`crate::Process`] in
/// [`crate::Trace::processes`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub struct ProcId(pub u16);

impl ProcId {
    /// The position of the file in the trace's inputs.
    #[inline]
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

/// A string interned in a trace's [`crate::Names`]: kernel names, NVTX messages and domains, labels.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub struct NameId(pub u32);

impl NameId {
    /// The empty name: a record without a name, or whose string pointer had no text in the file.
    pub const EMPTY: NameId = NameId(0);

    #[inline]
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

/// A correlation id of one input file. CUPTI numbers the API calls of a process and gives the GPU work each call
/// launched (kernels, copies, memsets, syncs) the same number; ids of different files are unrelated, so the file
/// is part of the key.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct CorrKey {
    pub proc: ProcId,
    pub correlation: u32,
}

impl CorrKey {
    /// Bits of a packed key below the file: the correlation id and the arrow number of [`CorrKey::flow_id`].
    const FILE_SHIFT: u32 = 52;
    /// Arrow numbers per launch a flow id can tell apart (20 bits between the correlation id and the file).
    pub const FLOWS_PER_LAUNCH: u32 = 1 << (Self::FILE_SHIFT - 32);

    #[inline]
    pub fn new(proc: ProcId, correlation: u32) -> CorrKey {
        CorrKey { proc, correlation }
    }

    /// The key as one integer: the file above bit 52, the correlation id in the low 32 bits. Files past 4,095
    /// share their bits with earlier ones (a trace merges a few processes, not thousands).
    #[inline]
    pub fn packed(self) -> u64 {
        ((self.proc.0 as u64) << Self::FILE_SHIFT) | self.correlation as u64
    }

    /// The id of the arrow from this launch to the `k`-th GPU record it started: the correlation id itself for
    /// the first (Kineto's `ac2g` ids), distinct for the others (a graph launch starts one per node), distinct per
    /// file. `k` is the bits between the correlation id and the file.
    #[inline]
    pub fn flow_id(self, k: u32) -> u64 {
        self.packed() | (((k % Self::FLOWS_PER_LAUNCH) as u64) << 32)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_launch_numbers_its_arrows_above_the_correlation_id_and_below_the_file() {
        let key = CorrKey::new(ProcId(3), 0xdead_beef);
        assert_eq!(key.packed(), (3 << 52) | 0xdead_beef);
        assert_eq!(key.flow_id(0), key.packed());
        assert_eq!(key.flow_id(5), (3 << 52) | (5 << 32) | 0xdead_beef);
        assert_eq!(key.flow_id(CorrKey::FLOWS_PER_LAUNCH - 1) >> 52, 3);
    }
}
