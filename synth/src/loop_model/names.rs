//! The host pointers of NVTX messages, in memory bounded by the number of distinct repeated names.
//!
//! A message's pointer is the base plus its FNV-1a hash cut to 24 bits, times 16, as the generator always drew them
//! (so files of a size that had no collision keep their bytes). The step ranges' names ("step N") are each used
//! once: at a million steps their hashes collide, and a colliding name pointed at an earlier step's text, so the
//! file named the step wrongly. Each slot taken is one bit of a 2 MiB set (not a set of pointers growing with the
//! steps); a name whose slot is taken gets a pointer of its own in a range hashes never reach.

use std::collections::HashMap;

/// Fake host addresses of the NVTX messages.
const NVTX_NAME_BASE: u64 = 0x5555_7000_0000;
/// Bits of the hash kept in a pointer.
const HASH_BITS: u32 = 24;
/// Pointers for names whose hash slot is taken: above every hashed one (`NVTX_NAME_BASE + 16 << 24`).
const SPARE_BASE: u64 = 0x5556_0000_0000;

pub(super) struct NvtxNames {
    /// One bit per hash slot: taken by a name already.
    taken: Vec<u64>,
    /// Names used again and again (`forward`), by the pointer they were given first.
    repeated: HashMap<String, u64>,
    /// Pointers handed out from the spare range.
    spares: u64,
}

impl NvtxNames {
    pub(super) fn new() -> NvtxNames {
        NvtxNames { taken: vec![0; (1usize << HASH_BITS) / 64], repeated: HashMap::new(), spares: 0 }
    }

    /// The pointer of `name`, and whether it is new (its text must reach the file). `once`: the name is used this
    /// one time only (a step's), so it is not remembered.
    pub(super) fn pointer(&mut self, name: &str, once: bool) -> (u64, bool) {
        if !once && let Some(&ptr) = self.repeated.get(name) {
            return (ptr, false);
        }
        let hash = name.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| (h ^ b as u64).wrapping_mul(0x100_0000_01b3));
        let slot = (hash & ((1 << HASH_BITS) - 1)) as usize;
        let (word, bit) = (slot / 64, 1u64 << (slot % 64));
        let ptr = if self.taken[word] & bit == 0 {
            self.taken[word] |= bit;
            NVTX_NAME_BASE + slot as u64 * 16
        } else {
            self.spares += 1;
            SPARE_BASE + self.spares * 16
        };
        if !once {
            self.repeated.insert(name.to_string(), ptr);
        }
        (ptr, true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_taken_slot_gives_a_spare_pointer_and_repeated_names_keep_theirs() {
        let mut names = NvtxNames::new();
        let (forward, new) = names.pointer("forward", false);
        assert!(new);
        assert_eq!(names.pointer("forward", false), (forward, false));
        // Two names of one 24-bit slot: the second gets the first spare pointer, not the first's.
        let slot = |s: &str| {
            s.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| (h ^ b as u64).wrapping_mul(0x100_0000_01b3)) & 0xff_ffff
        };
        let first = (0u64..).map(|n| format!("step {n}")).next().unwrap();
        let twin = (1u64..).map(|n| format!("step {n}")).find(|s| slot(s) == slot(&first)).unwrap();
        assert_eq!(names.pointer(&first, true), (NVTX_NAME_BASE + slot(&first) * 16, true));
        assert_eq!(names.pointer(&twin, true), (SPARE_BASE + 16, true));
    }
}
