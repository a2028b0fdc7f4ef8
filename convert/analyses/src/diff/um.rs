//! Unified memory between the sides: bytes migrated per direction and page faults, per run. Reported, not judged:
//! more pages moving explains a kernel that got slower (the kernel rows judge that), it is not a duration itself.

use cutr_model::Trace;
use cutr_model::rows::UmKind;
use serde::Serialize;

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

/// The figures, in report order.
const WHAT: [&str; 9] = [
    "HtoD bytes",
    "DtoH bytes",
    "DtoD bytes",
    "GPU page faults",
    "GPU fault groups",
    "CPU page faults",
    "thrashing",
    "throttling",
    "remote maps",
];

/// One run's figures (bytes saturate at 2^64-1, as `stats` does: a damaged value cannot make them small).
fn figures(t: &Trace) -> [u64; WHAT.len()] {
    let mut f = [0u64; WHAT.len()];
    for e in &t.um {
        let (i, v) = match e.kind {
            UmKind::BytesHtoD => (0, e.value),
            UmKind::BytesDtoH => (1, e.value),
            UmKind::BytesDtoD => (2, e.value),
            UmKind::GpuPageFault => {
                f[4] = f[4].saturating_add(e.value);
                (3, 1)
            }
            UmKind::CpuPageFault => (5, 1),
            UmKind::Thrashing => (6, 1),
            UmKind::Throttling => (7, 1),
            UmKind::RemoteMap => (8, 1),
        };
        f[i] = f[i].saturating_add(v);
    }
    f
}

/// Every figure, base against new, when either side has UM events; nothing otherwise.
pub(super) fn um_changes(base: &[&Trace], new: &[&Trace]) -> Vec<UmChange> {
    if base.iter().chain(new).all(|t| t.um.is_empty()) {
        return Vec::new();
    }
    let mean = |ts: &[&Trace]| -> [f64; WHAT.len()] {
        let mut m = [0.0; WHAT.len()];
        for t in ts {
            for (s, v) in m.iter_mut().zip(figures(t)) {
                *s += v as f64 / ts.len() as f64;
            }
        }
        m
    };
    let (b, n) = (mean(base), mean(new));
    (0..WHAT.len())
        .map(|i| UmChange {
            what: WHAT[i],
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
