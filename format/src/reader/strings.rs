//! The text behind the host pointers in records (names, NVTX messages), by pointer and by the chunk from which
//! a pointer's text holds: a pointer reused for another string later resolves to the text of its time.

/// Text behind the host pointers in records, by (pointer, chunk sequence number).
#[derive(Clone, Debug, Default)]
pub struct StringTable {
    texts: Vec<String>,
    /// (pointer, valid_from_seq, text index), sorted; entries added in file order keep it for equal keys.
    entries: Vec<(u64, u32, u32)>,
    /// Pointer -> its run in `entries` (start, length). One lookup per record with a name, so a fast hash.
    by_ptr: rustc_hash::FxHashMap<u64, (u32, u32)>,
}

impl StringTable {
    /// Builds the table from entries in file order.
    pub(super) fn from_entries(list: impl IntoIterator<Item = (u64, u32, String)>) -> StringTable {
        let mut t = StringTable::default();
        for (ptr, seq, text) in list {
            t.entries.push((ptr, seq, t.texts.len() as u32));
            t.texts.push(text);
        }
        t.entries.sort_unstable();
        t.by_ptr.reserve(t.entries.len());
        let mut i = 0;
        while i < t.entries.len() {
            let ptr = t.entries[i].0;
            let n = t.entries[i..].iter().take_while(|e| e.0 == ptr).count();
            t.by_ptr.insert(ptr, (i as u32, n as u32));
            i += n;
        }
        t
    }

    /// Like [`resolve`](Self::resolve) but returns a stable index into [`texts`](Self::texts).
    pub fn resolve_id(&self, ptr: u64, seq: u32) -> Option<u32> {
        let &(start, len) = self.by_ptr.get(&ptr)?;
        let v = &self.entries[start as usize..(start + len) as usize];
        // The newest entry valid at `seq`; a pointer first seen later than `seq` resolves to its first text.
        let i = v.partition_point(|e| e.1 <= seq);
        Some(if i == 0 { v[0].2 } else { v[i - 1].2 })
    }

    /// The text `ptr` pointed at when the activity chunk with sequence number `seq` was written.
    pub fn resolve(&self, ptr: u64, seq: u32) -> Option<&str> {
        self.resolve_id(ptr, seq).map(|id| self.texts[id as usize].as_str())
    }

    pub fn texts(&self) -> &[String] {
        &self.texts
    }

    pub fn len(&self) -> usize {
        self.texts.len()
    }

    pub fn is_empty(&self) -> bool {
        self.texts.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::StringTable;

    #[test]
    fn a_reused_pointer_resolves_to_the_text_of_its_time() {
        let t = StringTable::from_entries([
            (0x10, 3, "first".to_string()),
            (0x20, 3, "other".to_string()),
            (0x10, 9, "reloaded".to_string()),
            (0x10, 9, "rewritten".to_string()),
        ]);
        assert_eq!(t.texts(), ["first", "other", "reloaded", "rewritten"]);
        // Before any entry, at and after the first, at the second (the later entry of equal seq wins), after.
        let at = |seq| t.resolve(0x10, seq);
        assert_eq!(
            [at(0), at(3), at(8), at(9), at(50)],
            [Some("first"), Some("first"), Some("first"), Some("rewritten"), Some("rewritten")]
        );
        assert_eq!(t.resolve_id(0x20, 100), Some(1));
        assert_eq!(t.resolve(0x30, 5), None);
    }
}
