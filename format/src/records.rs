//! Reading fields of raw records by name, through a layout table.

use cutr_schema::RecordLayout;

/// Reads little-endian integers out of record bytes at the offsets a [`RecordLayout`] gives.
#[derive(Clone, Copy, Debug)]
pub struct FieldReader {
    offset: usize,
    size: usize,
    /// The field's bits of an 8-byte little-endian load at `offset` (all of them from 8 bytes up).
    mask: u64,
}

impl FieldReader {
    /// A reader for field `name` of `layout`, if the struct has it.
    pub fn new(layout: &RecordLayout, name: &str) -> Option<FieldReader> {
        layout.field(name).map(|f| {
            let size = f.size as usize;
            let mask = if size >= 8 { u64::MAX } else { (1u64 << (8 * size)) - 1 };
            FieldReader { offset: f.offset as usize, size, mask }
        })
    }

    /// The field as an unsigned integer (zero-extended; 1, 2, 4 or 8 bytes).
    #[inline]
    pub fn u64(&self, rec: &[u8]) -> u64 {
        // One load and a mask, without a branch on the width: the converter reads ~20 fields of every record.
        if let Some(b) = rec.get(self.offset..self.offset + 8) {
            return u64::from_le_bytes(b.try_into().unwrap()) & self.mask;
        }
        self.u64_near_end(rec)
    }

    /// [`u64`](Self::u64) for a field less than 8 bytes from the end of the record (0 for a record too short to
    /// hold the field, which a decoder that checked strides never passes).
    #[cold]
    fn u64_near_end(&self, rec: &[u8]) -> u64 {
        let Some(b) = rec.get(self.offset..self.offset + self.size) else { return 0 };
        match self.size {
            1 => b[0] as u64,
            2 => u16::from_le_bytes([b[0], b[1]]) as u64,
            4 => u32::from_le_bytes(b.try_into().unwrap()) as u64,
            8 => u64::from_le_bytes(b.try_into().unwrap()),
            _ => {
                let mut v = [0u8; 8];
                let n = self.size.min(8);
                v[..n].copy_from_slice(&b[..n]);
                u64::from_le_bytes(v)
            }
        }
    }

    #[inline]
    pub fn u32(&self, rec: &[u8]) -> u32 {
        self.u64(rec) as u32
    }

    /// The field as a signed integer (sign-extended from its width).
    #[inline]
    pub fn i64(&self, rec: &[u8]) -> i64 {
        let v = self.u64(rec);
        match self.size {
            1 => v as u8 as i8 as i64,
            2 => v as u16 as i16 as i64,
            4 => v as u32 as i32 as i64,
            _ => v as i64,
        }
    }

    /// The field's bytes (empty for a record too short to hold it).
    pub fn bytes<'a>(&self, rec: &'a [u8]) -> &'a [u8] {
        rec.get(self.offset..self.offset + self.size).unwrap_or_default()
    }
}

/// Where the string pointers are in each record kind, to find every pointer a buffer references.
#[derive(Clone, Debug, Default)]
pub struct StringPointerPlan {
    /// By kind: (record size, offsets of StringPtr fields); size 0 = unknown kind.
    by_kind: Vec<(usize, Vec<usize>)>,
}

impl StringPointerPlan {
    pub fn new(layouts: &cutr_schema::LayoutTable) -> StringPointerPlan {
        let mut by_kind: Vec<(usize, Vec<usize>)> = Vec::new();
        for r in layouts.records() {
            let k = r.kind as usize;
            if by_kind.len() <= k {
                by_kind.resize(k + 1, (0, Vec::new()));
            }
            let ptrs = r
                .fields
                .iter()
                .filter(|f| f.role == cutr_schema::FieldRole::StringPtr && f.size == 8)
                .map(|f| f.offset as usize)
                .collect();
            by_kind[k] = (r.size as usize, ptrs);
        }
        StringPointerPlan { by_kind }
    }

    /// Calls `f(position in buffer, pointer)` for every string pointer field of `buffer`'s records (null ones
    /// included), walking until the first record of a kind without a layout.
    pub fn visit(&self, buffer: &[u8], mut f: impl FnMut(usize, u64)) {
        let mut off = 0;
        while off + 4 <= buffer.len() {
            let kind = u32::from_le_bytes(buffer[off..off + 4].try_into().unwrap()) as usize;
            let Some((size, ptrs)) = self.by_kind.get(kind).filter(|e| e.0 > 0) else { return };
            if off + size > buffer.len() {
                return;
            }
            for &p in ptrs {
                f(off + p, u64::from_le_bytes(buffer[off + p..off + p + 8].try_into().unwrap()));
            }
            off += size;
        }
    }

    /// Appends every non-null string pointer found in `buffer`'s records to `out` (duplicates included).
    pub fn collect(&self, buffer: &[u8], out: &mut Vec<u64>) {
        self.visit(buffer, |_, v| {
            if v != 0 {
                out.push(v);
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cutr_schema::kinds;

    #[test]
    fn finds_kernel_and_marker_name_pointers() {
        let t = cutr_schema::layouts::builtin(130001).unwrap();
        let plan = StringPointerPlan::new(&t);
        let k = t.get(kinds::CONCURRENT_KERNEL).unwrap();
        let m = t.get(kinds::MARKER).unwrap();
        let mut buf = vec![0u8; k.size as usize + m.size as usize + 40];
        buf[0..4].copy_from_slice(&kinds::CONCURRENT_KERNEL.to_le_bytes());
        let name = k.offset("name").unwrap();
        buf[name..name + 8].copy_from_slice(&0xabcdu64.to_le_bytes());
        let at = k.size as usize;
        buf[at..at + 4].copy_from_slice(&kinds::MARKER.to_le_bytes());
        let mn = at + m.offset("name").unwrap();
        buf[mn..mn + 8].copy_from_slice(&0x1234u64.to_le_bytes());
        let at = at + m.size as usize;
        buf[at..at + 4].copy_from_slice(&kinds::RUNTIME.to_le_bytes());
        let mut out = Vec::new();
        plan.collect(&buf, &mut out);
        assert_eq!(out, vec![0xabcd, 0x1234]);
        assert_eq!(FieldReader::new(k, "name").unwrap().u64(&buf), 0xabcd);
    }

    /// Every field of every built-in layout reads as its bytes zero-extended (and sign-extended for `i64`),
    /// whether it lies 8 or more bytes from the end of the record (one masked load) or not.
    #[test]
    fn every_field_reads_as_its_little_endian_bytes() {
        let t = cutr_schema::layouts::builtin(130001).unwrap();
        let mut x = 0x2545_f491_4f6c_dd1du64;
        let mut fields = 0;
        for layout in t.records() {
            let rec: Vec<u8> = (0..layout.size)
                .map(|_| {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    x as u8
                })
                .collect();
            for f in layout.fields.iter() {
                let (at, n) = (f.offset as usize, (f.size as usize).min(8));
                let mut v = [0u8; 8];
                v[..n].copy_from_slice(&rec[at..at + n]);
                let want = u64::from_le_bytes(v);
                let r = FieldReader::new(layout, &f.name).unwrap();
                assert_eq!(r.u64(&rec), want, "{} {}", layout.struct_name, f.name);
                let signed = match f.size {
                    1 => want as u8 as i8 as i64,
                    2 => want as u16 as i16 as i64,
                    4 => want as u32 as i32 as i64,
                    _ => want as i64,
                };
                assert_eq!(r.i64(&rec), signed, "{} {}", layout.struct_name, f.name);
                fields += 1;
            }
        }
        assert!(fields > 300, "{fields} fields");
    }
}
