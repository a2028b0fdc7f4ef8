//! Reading fields of raw records by name, through a layout table.

use cutr_schema::RecordLayout;

/// Reads little-endian integers out of record bytes at the offsets a [`RecordLayout`] gives.
#[derive(Clone, Copy, Debug)]
pub struct FieldReader {
    offset: usize,
    size: usize,
}

impl FieldReader {
    /// A reader for field `name` of `layout`, if the struct has it.
    pub fn new(layout: &RecordLayout, name: &str) -> Option<FieldReader> {
        layout.field(name).map(|f| FieldReader { offset: f.offset as usize, size: f.size as usize })
    }

    /// The field as an unsigned integer (zero-extended; 1, 2, 4 or 8 bytes).
    #[inline]
    pub fn u64(&self, rec: &[u8]) -> u64 {
        let b = &rec[self.offset..self.offset + self.size];
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

    pub fn bytes<'a>(&self, rec: &'a [u8]) -> &'a [u8] {
        &rec[self.offset..self.offset + self.size]
    }
}
