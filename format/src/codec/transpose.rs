//! Byte-matrix transposition: records of one kind <-> byte planes (SSE2 16x16 tiles, 8x8 tiles in u64
//! arithmetic, single bytes at the edges).

use super::bytes::{rd64, wr64};

/// Transposes an 8x8 matrix of bytes held as 8 little-endian rows.
#[inline(always)]
fn transpose8(x: &mut [u64; 8]) {
    for i in 0..4 {
        let t = ((x[i] >> 32) ^ x[i + 4]) & 0x0000_0000_FFFF_FFFF;
        x[i] ^= t << 32;
        x[i + 4] ^= t;
    }
    for i in [0, 1, 4, 5] {
        let t = ((x[i] >> 16) ^ x[i + 2]) & 0x0000_FFFF_0000_FFFF;
        x[i] ^= t << 16;
        x[i + 2] ^= t;
    }
    for i in [0, 2, 4, 6] {
        let t = ((x[i] >> 8) ^ x[i + 1]) & 0x00FF_00FF_00FF_00FF;
        x[i] ^= t << 8;
        x[i + 1] ^= t;
    }
}

/// `n` records of `s` bytes -> `s` planes of `n` bytes (byte j of record i at `planes[j * n + i]`).
pub(super) fn records_to_planes(records: &[u8], n: usize, s: usize, planes: &mut [u8]) {
    transpose(records, s, n, s, planes, n);
}

/// The inverse of [`records_to_planes`]: `records` receives records `first..first + m` of the `n` in the planes.
pub(super) fn planes_to_records(planes: &[u8], n: usize, s: usize, first: usize, records: &mut [u8]) {
    let m = records.len() / s;
    if m > 0 {
        transpose(&planes[first..], n, s, m, records, s);
    }
}

/// Square blocks of the matrix transposed together, so that the rows written by a block stay in L1.
const TRANSPOSE_BLOCK: usize = 64;

/// Transposes a byte matrix: `dst[c * dst_stride + r] = src[r * src_stride + c]` for `r < rows`, `c < cols`.
/// 16x16 tiles with SSE2 byte unpacks on x86-64 (every x86-64 CPU has SSE2), 8x8 tiles in u64 arithmetic for
/// what remains (and elsewhere), single bytes for the edges: 2.2-3.4x the 8x8 tiles alone on the record sizes of
/// our chunks (12-19 GB/s against 5-6 on one core).
fn transpose(src: &[u8], src_stride: usize, rows: usize, cols: usize, dst: &mut [u8], dst_stride: usize) {
    if rows == 0 || cols == 0 {
        return;
    }
    // Every access below, the unchecked SIMD ones included, lies inside these bounds.
    assert!(
        (rows - 1) * src_stride + cols <= src.len() && (cols - 1) * dst_stride + rows <= dst.len(),
        "transpose out of bounds"
    );
    let (r8, c8) = (rows / 8 * 8, cols / 8 * 8);
    #[cfg(target_arch = "x86_64")]
    let (r16, c16) = (rows / 16 * 16, cols / 16 * 16);
    #[cfg(not(target_arch = "x86_64"))]
    let (r16, c16) = (0, 0);
    #[cfg(target_arch = "x86_64")]
    for rb in (0..r16).step_by(TRANSPOSE_BLOCK) {
        for cb in (0..c16).step_by(TRANSPOSE_BLOCK) {
            for c0 in (cb..(cb + TRANSPOSE_BLOCK).min(c16)).step_by(16) {
                for r0 in (rb..(rb + TRANSPOSE_BLOCK).min(r16)).step_by(16) {
                    // SAFETY: r0 + 16 <= rows and c0 + 16 <= cols, inside the bounds asserted above.
                    unsafe { transpose16(src, src_stride, r0, c0, dst, dst_stride) };
                }
            }
        }
    }
    for r0 in (0..r8).step_by(8) {
        // The 16x16 tiles covered rows below r16 up to column c16.
        let from = if r0 < r16 { c16 } else { 0 };
        for c0 in (from..c8).step_by(8) {
            let mut x = [0u64; 8];
            for (k, row) in x.iter_mut().enumerate() {
                *row = rd64(src, (r0 + k) * src_stride + c0);
            }
            transpose8(&mut x);
            for (b, col) in x.iter().enumerate() {
                wr64(dst, (c0 + b) * dst_stride + r0, *col);
            }
        }
        for c in c8..cols {
            for r in r0..r0 + 8 {
                dst[c * dst_stride + r] = src[r * src_stride + c];
            }
        }
    }
    for r in r8..rows {
        for c in 0..cols {
            dst[c * dst_stride + r] = src[r * src_stride + c];
        }
    }
}

/// Transposes the 16x16 tile at row `r0`, column `c0` of [`transpose`]'s matrix: four rounds of interleaving
/// row k with row k + 8 (a perfect shuffle of the rows, applied log2(16) times) turn rows into columns.
///
/// # Safety
/// `r0 + 16 <= rows` and `c0 + 16 <= cols` of a matrix that [`transpose`]'s bounds hold for.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn transpose16(src: &[u8], src_stride: usize, r0: usize, c0: usize, dst: &mut [u8], dst_stride: usize) {
    use std::arch::x86_64::{__m128i, _mm_loadu_si128, _mm_storeu_si128, _mm_unpackhi_epi8, _mm_unpacklo_epi8};
    let mut a: [__m128i; 16] = std::array::from_fn(|k| {
        // SAFETY: row r0 + k, columns c0..c0 + 16, inside src (the caller's bounds); unaligned loads.
        unsafe { _mm_loadu_si128(src.as_ptr().add((r0 + k) * src_stride + c0) as *const __m128i) }
    });
    for _ in 0..4 {
        let t = a;
        for k in 0..8 {
            // SAFETY: SSE2 is part of x86-64.
            unsafe {
                a[2 * k] = _mm_unpacklo_epi8(t[k], t[k + 8]);
                a[2 * k + 1] = _mm_unpackhi_epi8(t[k], t[k + 8]);
            }
        }
    }
    for (b, col) in a.iter().enumerate() {
        // SAFETY: column c0 + b, rows r0..r0 + 16, inside dst (the caller's bounds); unaligned stores.
        unsafe { _mm_storeu_si128(dst.as_mut_ptr().add((c0 + b) * dst_stride + r0) as *mut __m128i, *col) };
    }
}
