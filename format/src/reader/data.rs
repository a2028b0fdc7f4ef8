//! A file's bytes: mapped (a file on disk) or in memory, and the mapped pages let go once read.

pub(super) enum Data {
    Mapped(memmap2::Mmap),
    Owned(Vec<u8>),
}

impl Data {
    pub(super) fn bytes(&self) -> &[u8] {
        match self {
            Data::Mapped(m) => m,
            Data::Owned(v) => v,
        }
    }

    /// Lets the kernel take back the mapped pages of `len` bytes from `start` (a no-op for bytes in memory, or a
    /// range outside the file). Every read through the map keeps the pages it touched resident, and the kernel's
    /// fault-around maps the 64 KiB around each: reading the 40,000 chunk headers of a billion-record file left
    /// 1.4 bytes per record resident. Reading the bytes again faults them back in from the page cache.
    pub(super) fn release(&self, start: usize, len: usize) {
        let Data::Mapped(map) = self else { return };
        if len == 0 || start.checked_add(len).is_none_or(|end| end > map.len()) {
            return;
        }
        // SAFETY: the map is a read-only shared mapping of the file (`Mmap::map`), so MADV_DONTNEED drops page
        // table entries and the next access reads the same bytes again from the page cache; nothing is freed
        // that a reference could still point at (the contents of a shared file mapping do not change with the
        // advice). A failure (an old kernel) changes nothing, so it is ignored.
        #[cfg(unix)]
        let _ = unsafe { map.unchecked_advise_range(memmap2::UncheckedAdvice::DontNeed, start, len) };
    }
}
