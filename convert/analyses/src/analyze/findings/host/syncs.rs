//! `sync_in_step`: device, stream, event and context synchronizations inside steps (Nsight Systems'
//! `cuda_api_sync` rule, judged per step): each holds the host until the GPU catches up, so the host launches
//! nothing meanwhile. Counted from CUPTI's SYNCHRONIZATION records (a stream's wait on an event, which blocks no
//! host thread, left out) and from the `...Synchronize` calls that have no such record (a runtime call and the
//! driver call beneath it once); time is the host time blocked, clipped to the step, overlaps once.

use rustc_hash::{FxHashMap, FxHashSet};

use cutr_model::describe::sync_type;
use cutr_model::{ApiCall, CorrKey, ProcId, Sync, Trace};

use super::super::super::types::{Context, EventRef, Outcome, RuleResult};
use super::{Hits, StepWindows, counted, ms, no_steps};

/// `CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_STREAM_WAIT_EVENT`: the GPU waits, not the host.
const STREAM_WAIT_EVENT: u32 = 2;
/// Below this share of the steps' time (%), synchronizations are reported clean: one short sync per step (to read
/// a loss) is how most loops end a step.
pub const SYNC_FLOOR_PCT: f64 = 1.0;

pub(crate) const RULE: &str = "sync_in_step";

pub fn sync_in_step(cx: &Context<'_>) -> RuleResult {
    let Some(windows) = StepWindows::of_steps(cx) else { return no_steps(RULE, cx) };
    result(syncs_in_steps(cx.trace, &windows), &windows)
}

/// Whether a SYNCHRONIZATION record held a host thread (a stream's wait on an event does not).
pub(crate) fn blocks_host(s: &Sync) -> bool {
    s.sync_type != STREAM_WAIT_EVENT
}

/// What a counted record is called: its call's name (`name`), else its type's.
pub(crate) fn record_what(s: &Sync, name: Option<String>) -> String {
    name.unwrap_or_else(|| sync_type(s.sync_type).to_string())
}

/// Whether API calls of a function (by file, driver or runtime, cbid) are synchronizations, and the function's
/// name where they are: looked up once per function.
#[derive(Default)]
pub(crate) struct SyncCalls(FxHashMap<(ProcId, bool, u32), Option<String>>);

impl SyncCalls {
    pub(crate) fn name<'a>(&'a mut self, trace: &Trace, a: &ApiCall) -> Option<&'a String> {
        let name = self.0.entry((a.proc, a.driver, a.cbid)).or_insert_with(|| {
            let name = trace.api_name(a);
            name.ends_with("Synchronize").then_some(name)
        });
        name.as_ref()
    }
}

/// The rule's result from its hits over `windows`.
pub(crate) fn result(mut hits: Hits, windows: &StepWindows) -> RuleResult {
    let (count, time_ns) = (hits.count(), hits.time_ns());
    let share = windows.share_pct(time_ns);
    let outcome = if count == 0 || share < SYNC_FLOOR_PCT {
        Outcome::Clean {
            checked: format!(
                "{count} synchronizations inside {} steps blocked the host {} ({share:.2}% of step time, under \
                 {SYNC_FLOOR_PCT}%)",
                windows.count,
                ms(time_ns)
            ),
        }
    } else {
        hits.found(
            windows,
            |n, ns, pct| {
                format!(
                    "{} inside steps blocked the host {} ({pct:.1}% of step time)",
                    counted(n, "synchronization", "synchronizations"),
                    ms(ns)
                )
            },
            "Synchronize only where the host needs a result (a loss to print, a copy to read); wait on events with \
             cudaStreamWaitEvent between streams, and leave .item()/.cpu() calls out of the step.",
        )
    };
    RuleResult { rule: RULE, outcome }
}

/// Every host-blocking synchronization whose start is inside a step.
fn syncs_in_steps(trace: &Trace, windows: &StepWindows) -> Hits {
    let mut hits = Hits::default();
    let mut counted: FxHashSet<CorrKey> = FxHashSet::default();
    for s in trace.syncs.iter().filter(|s| blocks_host(s)) {
        counted.insert(s.corr());
        let Some(clipped) = windows.clip(s.proc, s.start, s.end) else { continue };
        let what = record_what(s, trace.launcher(s.corr()).map(|a| trace.api_name(a)));
        hits.push(clipped, EventRef { proc: s.proc, start: s.start, end: s.end, correlation: s.correlation, what });
    }
    let mut sync_calls = SyncCalls::default();
    for a in &trace.apis {
        let Some(clipped) = windows.clip(a.proc, a.start, a.end) else { continue };
        // A runtime call and the driver call it makes share a correlation id: one synchronization.
        if let Some(name) = sync_calls.name(trace, a)
            && counted.insert(a.corr())
        {
            let what = name.clone();
            hits.push(clipped, EventRef { proc: a.proc, start: a.start, end: a.end, correlation: a.correlation, what });
        }
    }
    hits
}
