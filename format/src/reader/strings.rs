//! The text behind the host pointers in records (names, NVTX messages), by pointer and by the chunk from which
//! a pointer's text holds: a pointer reused for another string later resolves to the text of its time.
//!
//! A long run names millions of things apart (a day of training has millions of `step N` ranges), so a text costs
//! its bytes and ~29 more: each strings chunk's texts are one `String` with their ends, the (pointer, chunk, text)
//! entries are sorted in one `Vec`, and the index by pointer holds only a position in it. A `String` per text, a
//! map of (pointer → run) and the decoded chunk's copy cost ~160 bytes a text more at their peak.

use std::hash::BuildHasher;

use cutr_schema::fb;
use hashbrown::HashTable;
use rustc_hash::FxBuildHasher;

use crate::error::ChunkError;

/// The texts of one strings chunk, one after another.
#[derive(Clone, Debug, Default)]
struct Texts {
    text: String,
    /// The end of each text in `text` (a chunk holds at most 256 MiB, so 32 bits).
    ends: Vec<u32>,
}

impl Texts {
    fn get(&self, i: usize) -> &str {
        let start = if i == 0 { 0 } else { self.ends[i - 1] as usize };
        &self.text[start..self.ends[i] as usize]
    }

    fn iter(&self) -> impl Iterator<Item = &str> {
        (0..self.ends.len()).map(|i| self.get(i))
    }
}

/// A strings chunk decoded: its entries as (pointer, valid_from_seq), their texts in the same order.
pub(super) struct StringsChunk {
    entries: Vec<(u64, u32)>,
    texts: Texts,
}

/// Decodes a strings chunk's payload (a `StringTable` flatbuffer) without a `String` per text.
pub(super) fn read_chunk(bytes: &[u8]) -> Result<StringsChunk, ChunkError> {
    let opts =
        flatbuffers::VerifierOptions { max_tables: 10_000_000, max_apparent_size: 1 << 31, ..Default::default() };
    let t = flatbuffers::root_with_opts::<fb::StringTable>(&opts, bytes)
        .map_err(|e| ChunkError::Malformed(format!("string table: {e}")))?;
    let Some(list) = t.entries() else {
        return Ok(StringsChunk { entries: Vec::new(), texts: Texts::default() });
    };
    // The texts' total first, so that the chunk's text is allocated once at its size.
    let total: usize = list.iter().map(|e| e.text().map_or(0, str::len)).sum();
    let mut texts = Texts { text: String::with_capacity(total), ends: Vec::with_capacity(list.len()) };
    let mut entries = Vec::with_capacity(list.len());
    for e in list.iter() {
        texts.text.push_str(e.text().unwrap_or(""));
        // The verified payload is under 2 GiB (`max_apparent_size`), so its texts' ends fit.
        texts.ends.push(texts.text.len() as u32);
        entries.push((e.ptr(), e.valid_from_seq()));
    }
    Ok(StringsChunk { entries, texts })
}

/// Text behind the host pointers in records, by (pointer, chunk sequence number).
#[derive(Clone, Debug, Default)]
pub struct StringTable {
    /// Each strings chunk's texts, in file order; text ids count on from one chunk to the next.
    chunks: Vec<Texts>,
    /// The id of each chunk's first text.
    firsts: Vec<u32>,
    /// (pointer, valid_from_seq, text id), sorted; entries added in file order keep it for equal keys.
    entries: Vec<(u64, u32, u32)>,
    /// The position in `entries` of each pointer's first entry, hashed by the pointer. One lookup per record with
    /// a name, so a fast hash.
    by_ptr: HashTable<u32>,
}

impl StringTable {
    /// Builds the table from decoded strings chunks in file order.
    pub(super) fn from_chunks(list: impl IntoIterator<Item = StringsChunk>) -> StringTable {
        let mut t = StringTable::default();
        let mut count = 0u32;
        for chunk in list {
            // Text ids are 32 bits; a file with more texts than that (64 GB of strings chunks) keeps the first.
            let Ok(n) = u32::try_from(chunk.entries.len()) else { break };
            let Some(next) = count.checked_add(n) else { break };
            if n == 0 {
                continue;
            }
            t.entries.extend(chunk.entries.iter().zip(count..).map(|(&(ptr, seq), id)| (ptr, seq, id)));
            t.firsts.push(count);
            t.chunks.push(chunk.texts);
            count = next;
        }
        t.entries.sort_unstable();
        t.entries.shrink_to_fit();
        t.index_pointers();
        t
    }

    /// Builds the table from (pointer, valid_from_seq, text) entries in file order, as one chunk.
    #[cfg(test)]
    fn from_entries<'a>(list: impl IntoIterator<Item = (u64, u32, &'a str)>) -> StringTable {
        let mut chunk = StringsChunk { entries: Vec::new(), texts: Texts::default() };
        for (ptr, seq, text) in list {
            chunk.texts.text.push_str(text);
            chunk.texts.ends.push(chunk.texts.text.len() as u32);
            chunk.entries.push((ptr, seq));
        }
        StringTable::from_chunks([chunk])
    }

    /// Fills `by_ptr` from the sorted entries: each pointer's first position.
    fn index_pointers(&mut self) {
        let entries = &self.entries;
        let hash = |i: &u32| FxBuildHasher.hash_one(entries[*i as usize].0);
        let mut by_ptr = HashTable::with_capacity(0);
        let mut runs = 0;
        for (i, e) in entries.iter().enumerate() {
            runs += (i == 0 || entries[i - 1].0 != e.0) as usize;
        }
        by_ptr.reserve(runs, hash);
        for (i, e) in entries.iter().enumerate() {
            if i == 0 || entries[i - 1].0 != e.0 {
                by_ptr.insert_unique(FxBuildHasher.hash_one(e.0), i as u32, hash);
            }
        }
        self.by_ptr = by_ptr;
    }

    /// Like [`resolve`](Self::resolve) but returns a stable id for [`text`](Self::text).
    pub fn resolve_id(&self, ptr: u64, seq: u32) -> Option<u32> {
        let &start = self.by_ptr.find(FxBuildHasher.hash_one(ptr), |&i| self.entries[i as usize].0 == ptr)?;
        let run = &self.entries[start as usize..];
        let v = &run[..run.iter().take_while(|e| e.0 == ptr).count()];
        // The newest entry valid at `seq`; a pointer first seen later than `seq` resolves to its first text.
        let i = v.partition_point(|e| e.1 <= seq);
        Some(if i == 0 { v[0].2 } else { v[i - 1].2 })
    }

    /// The text `ptr` pointed at when the activity chunk with sequence number `seq` was written.
    pub fn resolve(&self, ptr: u64, seq: u32) -> Option<&str> {
        self.resolve_id(ptr, seq).map(|id| self.text(id))
    }

    /// The text of an id from [`resolve_id`](Self::resolve_id) (ids count from 0 in file order; empty for an id
    /// past the last).
    pub fn text(&self, id: u32) -> &str {
        let Some(c) = self.firsts.partition_point(|&f| f <= id).checked_sub(1) else { return "" };
        let i = (id - self.firsts[c]) as usize;
        if i < self.chunks[c].ends.len() { self.chunks[c].get(i) } else { "" }
    }

    /// Every text in id order.
    pub fn iter(&self) -> impl Iterator<Item = &str> {
        self.chunks.iter().flat_map(Texts::iter)
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Bytes of memory the table holds (texts, entries, index): what opening a file costs for its names.
    pub fn heap_bytes(&self) -> usize {
        let texts: usize = self.chunks.iter().map(|c| c.text.capacity() + 4 * c.ends.capacity()).sum();
        texts
            + 4 * self.firsts.capacity()
            + std::mem::size_of::<(u64, u32, u32)>() * self.entries.capacity()
            + self.by_ptr.allocation_size()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reused_pointer_resolves_to_the_text_of_its_time() {
        let t = StringTable::from_entries([
            (0x10, 3, "first"),
            (0x20, 3, "other"),
            (0x10, 9, "reloaded"),
            (0x10, 9, "rewritten"),
        ]);
        assert_eq!(t.iter().collect::<Vec<_>>(), ["first", "other", "reloaded", "rewritten"]);
        // Before any entry, at and after the first, at the second (the later entry of equal seq wins), after.
        let at = |seq| t.resolve(0x10, seq);
        assert_eq!(
            [at(0), at(3), at(8), at(9), at(50)],
            [Some("first"), Some("first"), Some("first"), Some("rewritten"), Some("rewritten")]
        );
        assert_eq!(t.resolve_id(0x20, 100), Some(1));
        assert_eq!(t.resolve(0x30, 5), None);
        assert_eq!((t.text(3), t.text(4), t.len()), ("rewritten", "", 4));
    }

    #[test]
    fn texts_of_several_chunks_keep_their_ids_and_empty_chunks_take_none() {
        let payload = |entries: &[(u64, &str)]| crate::meta::strings_to_bytes(7, entries);
        let chunks = [
            read_chunk(&payload(&[(1, "a"), (2, "")])).unwrap(),
            read_chunk(&payload(&[])).unwrap(),
            read_chunk(&payload(&[(3, "step 17"), (1, "b")])).unwrap(),
        ];
        let t = StringTable::from_chunks(chunks);
        assert_eq!(t.iter().collect::<Vec<_>>(), ["a", "", "step 17", "b"]);
        assert_eq!(
            (t.resolve(3, 7), t.resolve(2, 7), t.resolve_id(1, 7), t.text(2)),
            (Some("step 17"), Some(""), Some(3), "step 17")
        );
        // 4 texts of 9 bytes in all: their ends (4 each), the two chunks' first ids (a `Vec`'s smallest allocation
        // holds 4), the entries (16 each); then the index (hashbrown's table for 3 pointers).
        assert_eq!(t.heap_bytes() - t.by_ptr.allocation_size(), 9 + 4 * 4 + 4 * 4 + 4 * 16);
    }

    #[test]
    fn a_damaged_strings_payload_is_an_error() {
        assert!(matches!(read_chunk(&[0xff; 12]), Err(ChunkError::Malformed(_))));
    }
}
