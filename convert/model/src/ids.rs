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
    #[inline]
    pub fn new(proc: ProcId, correlation: u32) -> CorrKey {
        CorrKey { proc, correlation }
    }

    /// The key as one integer, unique in a trace of `files` files: the correlation id, plus 2^32 times the file
    /// (one file keeps CUPTI's own numbers). This is the correlation id merged traces write, and the id of the
    /// launch's first arrow.
    #[inline]
    pub fn packed(self, files: u64) -> u64 {
        self.flow_id(0, files)
    }

    /// The id of the arrow from this launch to the `k`-th record it started, in a trace of `files` files:
    /// `correlation + 2^32 * (k * files + file)`. The first arrow's id is the correlation id itself in a single
    /// file (Kineto's `ac2g` ids); a graph launch's other arrows and other files' launches get ids of their own.
    /// Ids stay below 2^53 (exact in JSON readers' doubles) while `k * files + file < 2^21`.
    #[inline]
    pub fn flow_id(self, k: u32, files: u64) -> u64 {
        let above = (k as u64).wrapping_mul(files.max(1)).wrapping_add(self.proc.0 as u64);
        (self.correlation as u64).wrapping_add(above << 32)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arrow_ids_keep_one_files_correlation_ids_and_separate_files_and_graph_nodes() {
        let one = CorrKey::new(ProcId(0), 0xdead_beef);
        assert_eq!(
            (one.packed(1), one.flow_id(0, 1), one.flow_id(5, 1)),
            (0xdead_beef, 0xdead_beef, (5 << 32) | 0xdead_beef)
        );
        // Two files: file 1's ids sit between file 0's, never on them.
        let (a, b) = (CorrKey::new(ProcId(0), 7), CorrKey::new(ProcId(1), 7));
        let ids: Vec<u64> = (0..3).flat_map(|k| [a.flow_id(k, 2), b.flow_id(k, 2)]).collect();
        assert_eq!(ids, [7, (1 << 32) + 7, (2 << 32) + 7, (3 << 32) + 7, (4 << 32) + 7, (5 << 32) + 7]);
        assert_eq!(b.packed(2), (1 << 32) + 7);
    }
}
