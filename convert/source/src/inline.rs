//! Inline chains: each row inlined at a call site names that site's row by its number in the sequence (its
//! context). The site is found once per row, when the table is read, through a map from row number to position,
//! so that walking a chain costs one step per level, never a search of the function's rows.

use std::collections::HashMap;

use crate::lines::Row;

/// The deepest chain of call sites a location reports. Real inlining is a few levels deep (a CUTLASS kernel's
/// deepest is a few dozen); a longer chain is cut here, and said, so that a forged table cannot make every sampled
/// PC carry thousands of call sites.
pub const MAX_INLINE_DEPTH: usize = 64;

/// Resolves the call-site links of each function's rows, counting what was wrong.
#[derive(Default)]
pub(crate) struct Links {
    /// Contexts that name no earlier row of the function (a context always points back).
    dangling: usize,
    /// Rows whose chain is deeper than [`MAX_INLINE_DEPTH`].
    too_deep: usize,
}

impl Links {
    /// Sets `parent` of every row of one function (rows sorted by offset): a context names the row of that
    /// number within the sequence, the first such row where two sequences share a function.
    pub fn resolve(&mut self, rows: &mut [Row]) {
        let mut position_of: HashMap<u32, u32> = HashMap::with_capacity(rows.len());
        for (p, r) in rows.iter().enumerate() {
            position_of.entry(r.index).or_insert(p as u32);
        }
        // Rows in number order, so that a site's depth is known before the rows inlined at it.
        let mut order: Vec<u32> = (0..rows.len() as u32).collect();
        order.sort_by_key(|&p| rows[p as usize].index);
        let mut depth = vec![0u32; rows.len()];
        for p in order {
            let row = rows[p as usize];
            if row.context == 0 {
                continue;
            }
            // Only a link to a lower number is kept: every chain then ends, whatever the table says.
            match position_of.get(&row.context) {
                Some(&site) if row.context < row.index => {
                    let at = &rows[site as usize];
                    let step = [u64::from(row.function_name), u64::from(at.file), u64::from(at.line), at.chain];
                    rows[p as usize].parent = site + 1;
                    rows[p as usize].chain = mix(&step);
                    depth[p as usize] = depth[site as usize].saturating_add(1);
                    if depth[p as usize] as usize > MAX_INLINE_DEPTH {
                        self.too_deep += 1;
                    }
                }
                _ => self.dangling += 1,
            }
        }
    }

    /// What was wrong, as sentences.
    pub fn problems(&self) -> Vec<String> {
        let mut out = Vec::new();
        if self.dangling > 0 {
            out.push(format!(
                "{} inlined rows name a call site that is no earlier row of their function: read as not inlined",
                self.dangling
            ));
        }
        if self.too_deep > 0 {
            out.push(format!(
                "{} rows are inlined more than {MAX_INLINE_DEPTH} levels deep: their chains are cut at \
                 {MAX_INLINE_DEPTH}",
                self.too_deep
            ));
        }
        out
    }
}

/// A 64-bit hash of one chain step and the chain beyond it (FNV-1a over the words, then a final avalanche); never
/// 0, which stands for no chain. Equal chains hash equal; unequal ones collide with odds of 2^-64.
fn mix(words: &[u64]) -> u64 {
    let mut h = 0xcbf2_9ce4_8422_2325u64;
    for w in words {
        for b in w.to_le_bytes() {
            h = (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^= h >> 33;
    h.max(1)
}

/// The rows a chain goes through, from `row`'s call site outwards: at most [`MAX_INLINE_DEPTH`] steps, each an
/// index.
pub(crate) fn chain(rows: &[Row], row: &Row) -> impl Iterator<Item = (u32, usize)> {
    let mut cur = *row;
    std::iter::from_fn(move || {
        let site_at = (cur.parent as usize).checked_sub(1)?;
        let site = rows.get(site_at)?;
        let step = (cur.function_name, site_at);
        cur = *site;
        Some(step)
    })
    .take(MAX_INLINE_DEPTH)
}
