//! The few protobuf encoding primitives the Perfetto writer needs: varints, tags and length-delimited fields.
//! Hand-written because generated message structs cost ~27x more per event (`research/rust-feasibility.md` 4);
//! tests decode the output with Perfetto's own `.proto` schema.

/// Wire types.
pub const VARINT: u32 = 0;
pub const I64: u32 = 1;
pub const LEN: u32 = 2;

#[inline]
pub fn varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

#[inline]
pub fn tag(out: &mut Vec<u8>, field: u32, wire: u32) {
    varint(out, ((field << 3) | wire) as u64);
}

#[inline]
pub fn uint(out: &mut Vec<u8>, field: u32, v: u64) {
    tag(out, field, VARINT);
    varint(out, v);
}

/// int32/int64 fields: negative values are sign-extended to 10-byte varints (no zigzag in these protos).
#[inline]
pub fn int(out: &mut Vec<u8>, field: u32, v: i64) {
    tag(out, field, VARINT);
    varint(out, v as u64);
}

#[inline]
pub fn double(out: &mut Vec<u8>, field: u32, v: f64) {
    tag(out, field, I64);
    out.extend_from_slice(&v.to_le_bytes());
}

#[inline]
pub fn bytes(out: &mut Vec<u8>, field: u32, b: &[u8]) {
    tag(out, field, LEN);
    varint(out, b.len() as u64);
    out.extend_from_slice(b);
}

#[inline]
pub fn string(out: &mut Vec<u8>, field: u32, s: &str) {
    bytes(out, field, s.as_bytes());
}

/// Number of bytes `varint(v)` takes.
#[inline]
pub fn varint_len(v: u64) -> usize {
    (64 - (v | 1).leading_zeros() as usize).div_ceil(7)
}

/// Writes a nested message: `f` encodes it after a length placeholder, which is then filled in. The placeholder
/// is one byte; longer messages shift their bytes right once (rare: most nested messages are under 128 bytes).
#[inline]
pub fn message(out: &mut Vec<u8>, field: u32, f: impl FnOnce(&mut Vec<u8>)) {
    tag(out, field, LEN);
    let at = out.len();
    out.push(0);
    f(out);
    let len = out.len() - at - 1;
    if len < 0x80 {
        out[at] = len as u8;
    } else {
        let extra = varint_len(len as u64) - 1;
        out.splice(at..at + 1, std::iter::repeat_n(0u8, extra + 1));
        let mut v = len as u64;
        let mut i = at;
        while v >= 0x80 {
            out[i] = (v as u8) | 0x80;
            v >>= 7;
            i += 1;
        }
        out[i] = v as u8;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encodings() {
        let mut b = Vec::new();
        varint(&mut b, 300);
        assert_eq!(b, [0xAC, 0x02]);
        assert_eq!((varint_len(0), varint_len(127), varint_len(128), varint_len(u64::MAX)), (1, 1, 2, 10));
        let mut b = Vec::new();
        int(&mut b, 1, -1);
        assert_eq!(b.len(), 11);
        let mut b = Vec::new();
        message(&mut b, 2, |m| string(m, 1, "hi"));
        assert_eq!(b, [0x12, 4, 0x0A, 2, b'h', b'i']);
        let long = "x".repeat(300);
        let mut b = Vec::new();
        message(&mut b, 2, |m| string(m, 1, &long));
        assert_eq!(&b[..5], &[0x12, 0xAF, 0x02, 0x0A, 0xAC]);
        assert_eq!(b.len(), 3 + 3 + 300);
    }
}
