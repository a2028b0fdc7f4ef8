//! Little-endian field access and zigzag coding of the codec's deltas (wrapping, so every step is a bijection).

#[inline]
pub(super) fn rd32(b: &[u8], o: usize) -> u32 {
    u32::from_le_bytes(b[o..o + 4].try_into().unwrap())
}
#[inline]
pub(super) fn rd64(b: &[u8], o: usize) -> u64 {
    u64::from_le_bytes(b[o..o + 8].try_into().unwrap())
}
#[inline]
pub(super) fn wr32(b: &mut [u8], o: usize, v: u32) {
    b[o..o + 4].copy_from_slice(&v.to_le_bytes());
}
#[inline]
pub(super) fn wr64(b: &mut [u8], o: usize, v: u64) {
    b[o..o + 8].copy_from_slice(&v.to_le_bytes());
}
#[inline]
pub(super) fn zz64(d: u64) -> u64 {
    let d = d as i64;
    ((d << 1) ^ (d >> 63)) as u64
}
#[inline]
pub(super) fn unzz64(z: u64) -> u64 {
    (z >> 1) ^ (z & 1).wrapping_neg()
}
#[inline]
pub(super) fn zz32(d: u32) -> u32 {
    let d = d as i32;
    ((d << 1) ^ (d >> 31)) as u32
}
#[inline]
pub(super) fn unzz32(z: u32) -> u32 {
    (z >> 1) ^ (z & 1).wrapping_neg()
}
