//! The kernel running at each unified memory event, joined while streaming: as a load finds it
//! ([`cutr_model::um::RunningKernels`]: on the event's file and device, the kernel holding its start, the latest to
//! start, then to end, then the highest correlation id), from the events kept (they are the `um` table's rows)
//! and the kernels that may still hold a later event: those ending at or after the next window's start. Only
//! where the recordings hold unified memory records.

use std::collections::BTreeMap;

use cutr_model::rows::{Kernel, UmEvent};
use cutr_model::{NameId, ProcId};

/// A kernel as a match: (start, end, correlation) orders them, the largest wins; its mangled name.
type Candidate = ((u64, u64, u32), NameId);

#[derive(Default)]
pub(crate) struct UmKernels {
    /// The events so far, and each one's best kernel.
    pub(crate) events: Vec<UmEvent>,
    best: Vec<Option<Candidate>>,
    /// (file, device, start, event index) of the events with a device.
    by_time: BTreeMap<(ProcId, u32, u64, u32), ()>,
    /// Kernels of earlier windows still running at the current window's start.
    running: Vec<Kernel>,
}

impl UmKernels {
    /// A window's events and kernels (`next_start`: where the next window begins, `None` after the last).
    pub(crate) fn window(&mut self, events: &mut Vec<UmEvent>, kernels: &[Kernel], next_start: Option<u64>) {
        for e in events.drain(..) {
            let i = self.events.len() as u32;
            let mut best = None;
            if let Some(device) = e.device() {
                self.by_time.insert((e.proc, device, e.start, i), ());
                for k in self.running.iter().filter(|k| (k.proc, k.device) == (e.proc, device)) {
                    if k.start <= e.start && e.start <= k.end {
                        best = better(best, k);
                    }
                }
            }
            self.events.push(e);
            self.best.push(best);
        }
        for k in kernels {
            let range = (k.proc, k.device, k.start, 0)..=(k.proc, k.device, k.end, u32::MAX);
            for &(_, _, _, i) in self.by_time.range(range).map(|(key, _)| key) {
                let slot = &mut self.best[i as usize];
                *slot = better(*slot, k);
            }
        }
        match next_start {
            Some(t) => {
                self.running.extend(kernels.iter().filter(|k| k.end >= t).copied());
                self.running.retain(|k| k.end >= t);
            }
            None => self.running.clear(),
        }
    }

    /// The events sorted as a load sorts them, each with its kernel's mangled name.
    pub(crate) fn finish(self) -> (Vec<UmEvent>, Vec<Option<NameId>>) {
        let mut rows: Vec<(UmEvent, Option<NameId>)> =
            self.events.into_iter().zip(self.best).map(|(e, b)| (e, b.map(|b| b.1))).collect();
        rows.sort_by_key(|(k, _)| (k.start, k.proc, k.kind, k.address));
        rows.into_iter().unzip()
    }
}

fn better(best: Option<Candidate>, k: &Kernel) -> Option<Candidate> {
    let c = ((k.start, k.end, k.correlation), k.name);
    Some(match best {
        Some(b) if b.0 >= c.0 => b,
        _ => c,
    })
}
