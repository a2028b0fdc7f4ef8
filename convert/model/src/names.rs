//! Interned strings: every name in a trace (kernel names, NVTX messages and domains, labels) is stored once and
//! referred to by a [`NameId`].

use rustc_hash::FxHashMap;

use crate::ids::NameId;

/// A trace's interned strings. Id 0 is the empty name ([`NameId::EMPTY`]).
#[derive(Clone, Debug)]
pub struct Names {
    map: FxHashMap<Box<str>, NameId>,
    list: Vec<Box<str>>,
}

impl Default for Names {
    fn default() -> Self {
        let mut names = Names { map: FxHashMap::default(), list: Vec::new() };
        names.intern("");
        names
    }
}

impl Names {
    /// The id of `s`, added if new.
    pub fn intern(&mut self, s: &str) -> NameId {
        if let Some(&id) = self.map.get(s) {
            return id;
        }
        let id = NameId(self.list.len() as u32);
        self.list.push(s.into());
        self.map.insert(s.into(), id);
        id
    }

    /// The text of `id` (empty for an id this table never gave out).
    #[inline]
    pub fn get(&self, id: NameId) -> &str {
        self.list.get(id.index()).map_or("", |s| s)
    }

    /// The id of `s`, if interned.
    pub fn lookup(&self, s: &str) -> Option<NameId> {
        self.map.get(s).copied()
    }

    pub fn len(&self) -> usize {
        self.list.len()
    }

    /// Never true: the empty name is always there.
    pub fn is_empty(&self) -> bool {
        self.list.is_empty()
    }
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
}
