//! Interned strings: every name in a trace (kernel names, NVTX messages and domains, labels) is stored once and
//! referred to by a [`NameId`].
//!
//! A day of training names millions of steps apart, so a name costs its text and ~17 bytes: the texts are one
//! `String` with their ends, and the table from text to id holds only ids (hashed by the text they point at).
//! A `Box<str>` in a list and another as a map's key cost ~110 bytes a name more.

use std::hash::BuildHasher;

use hashbrown::HashTable;
use rustc_hash::FxBuildHasher;

use crate::ids::NameId;

/// A trace's interned strings. Id 0 is the empty name ([`NameId::EMPTY`]).
#[derive(Clone, Debug)]
pub struct Names {
    /// Every name, one after another, in id order.
    text: String,
    /// The end of each name in `text`.
    ends: Vec<usize>,
    /// The ids, hashed by their text.
    ids: HashTable<NameId>,
}

impl Default for Names {
    fn default() -> Self {
        let mut names = Names { text: String::new(), ends: Vec::new(), ids: HashTable::new() };
        names.intern("");
        names
    }
}

/// The hash of a name's text.
fn hash(s: &str) -> u64 {
    FxBuildHasher.hash_one(s)
}

impl Names {
    /// The id of `s`, added if new.
    pub fn intern(&mut self, s: &str) -> NameId {
        let h = hash(s);
        let (text, ends) = (&self.text, &self.ends);
        if let Some(&id) = self.ids.find(h, |&id| text_of(text, ends, id) == s) {
            return id;
        }
        let id = NameId(self.ends.len() as u32);
        self.text.push_str(s);
        self.ends.push(self.text.len());
        let (text, ends) = (&self.text, &self.ends);
        self.ids.insert_unique(h, id, |&id| hash(text_of(text, ends, id)));
        id
    }

    /// The text of `id` (empty for an id this table never gave out).
    #[inline]
    pub fn get(&self, id: NameId) -> &str {
        text_of(&self.text, &self.ends, id)
    }

    /// The id of `s`, if interned.
    pub fn lookup(&self, s: &str) -> Option<NameId> {
        self.ids.find(hash(s), |&id| self.get(id) == s).copied()
    }

    pub fn len(&self) -> usize {
        self.ends.len()
    }

    /// Never true: the empty name is always there.
    pub fn is_empty(&self) -> bool {
        self.ends.is_empty()
    }

    /// Bytes of memory the table holds (texts, their ends, the index by text).
    pub fn heap_bytes(&self) -> usize {
        self.text.capacity() + std::mem::size_of::<usize>() * self.ends.capacity() + self.ids.allocation_size()
    }
}

/// The text of `id` in `text` cut at `ends` (empty past the last).
#[inline]
fn text_of<'a>(text: &'a str, ends: &[usize], id: NameId) -> &'a str {
    let i = id.index();
    let Some(&end) = ends.get(i) else { return "" };
    let start = if i == 0 { 0 } else { ends[i - 1] };
    &text[start..end]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strings_are_stored_once_and_the_empty_name_is_id_zero() {
        let mut n = Names::default();
        assert_eq!(n.intern(""), NameId::EMPTY);
        let a = n.intern("gemm");
        assert_eq!((a, n.intern("gemm"), n.intern("relu")), (NameId(1), NameId(1), NameId(2)));
        assert_eq!((n.get(a), n.get(NameId(99)), n.lookup("relu"), n.lookup("x")), ("gemm", "", Some(NameId(2)), None));
        assert_eq!(n.len(), 3);
    }

    #[test]
    fn a_million_numbered_names_cost_their_text_and_under_20_bytes_each() {
        let mut n = Names::default();
        let mut text = 0;
        for i in 0..1_000_000 {
            let s = format!("step {i}");
            text += s.len();
            assert_eq!(n.intern(&s), NameId(i + 1));
        }
        assert_eq!(
            (n.get(NameId(500_001)), n.lookup("step 999999"), n.len()),
            ("step 500000", Some(NameId(1_000_000)), 1_000_001)
        );
        // 10,888,890 bytes of text (grown by doubling to 16 MiB: the tail never written is never resident), the
        // ends (8 bytes a name, 2^20 of them allocated) and hashbrown's table (a 4-byte id and a control byte a
        // bucket, 2^21 buckets for a million ids, and 16 control bytes more): 18.9 bytes a name besides its text.
        assert_eq!(text, 10_888_890);
        assert_eq!(
            (n.text.capacity(), n.ends.capacity(), n.ids.allocation_size()),
            (1 << 24, 1 << 20, 5 * (1 << 21) + 16)
        );
        assert_eq!(n.heap_bytes(), (1 << 24) + 8 * (1 << 20) + 5 * (1 << 21) + 16);
    }
}
