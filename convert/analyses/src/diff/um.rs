//! Unified memory between the sides: bytes migrated per direction and page faults, per run. Reported, not judged:
//! more pages moving explains a kernel that got slower (the kernel rows judge that), it is not a duration itself.

use serde::Serialize;

use super::inputs::{RunInput, UM_FIGURES};

/// One unified memory figure, as a mean per run on each side.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct UmChange {
    /// `HtoD bytes`, `DtoH bytes`, `DtoD bytes`, `GPU page faults` (records), `GPU fault groups`, `CPU page faults`,
    /// `thrashing`, `throttling`, `remote maps`.
    pub what: &'static str,
    pub base: f64,
    pub new: f64,
    /// `None` when the base is 0 and the new is not (no percentage of nothing).
    pub delta_pct: Option<f64>,
}

/// Every figure, base against new, when either side has UM events; nothing otherwise.
pub(super) fn um_changes(base: &[&RunInput], new: &[&RunInput]) -> Vec<UmChange> {
    if base.iter().chain(new).all(|r| r.um.events == 0) {
        return Vec::new();
    }
    let mean = |rs: &[&RunInput]| -> [f64; UM_FIGURES.len()] {
        let mut m = [0.0; UM_FIGURES.len()];
        for r in rs {
            for (s, v) in m.iter_mut().zip(r.um.figures) {
                *s += v as f64 / rs.len() as f64;
            }
        }
        m
    };
    let (b, n) = (mean(base), mean(new));
    (0..UM_FIGURES.len())
        .map(|i| UmChange {
            what: UM_FIGURES[i],
            base: b[i],
            new: n[i],
            delta_pct: if b[i] > 0.0 {
                Some(100.0 * (n[i] - b[i]) / b[i])
            } else if n[i] > 0.0 {
                None
            } else {
                Some(0.0)
            },
        })
        .collect()
}
