//! `sync_copy_in_step` and `pageable_copy_in_step`: copies inside steps that hold the host until the copy is
//! done (Nsight Systems' `cuda_memcpy_sync` and `cuda_memcpy_async` pageable rules, judged per step). A copy is
//! in a step when its launching call started in one (the copy's own start where no call was recorded); its time
//! is that call's, clipped to the step: the host time the copy held.

use cutr_model::describe::{memcpy_kind, memory_kind};
use cutr_model::{Memcpy, Trace};

use super::super::super::types::{Context, EventRef, Outcome, RuleResult};
use super::{Hits, StepWindows, counted, ms, no_steps};

/// `CUPTI_ACTIVITY_FLAG_MEMCPY_ASYNC`: the record's flag for a copy made by an asynchronous call.
const MEMCPY_ASYNC_FLAG: u8 = 1;
/// `CUPTI_ACTIVITY_MEMORY_KIND_PAGEABLE`.
const PAGEABLE: u8 = 1;

/// Synchronous copies (`cudaMemcpy`, `cuMemcpyHtoD`..., any copy whose record lacks the async flag) in steps.
pub fn sync_copy_in_step(cx: &Context<'_>) -> RuleResult {
    const RULE: &str = "sync_copy_in_step";
    let Some(windows) = StepWindows::of_steps(cx) else { return no_steps(RULE, cx) };
    let hits = copies_in_steps(cx.trace, &windows, is_synchronous);
    let outcome = if hits.count() == 0 {
        Outcome::Clean { checked: checked(cx.trace, &windows, "synchronous") }
    } else {
        hits.found(
            &windows,
            |n, ns, pct| {
                format!(
                    "{} inside steps held the host {} ({pct:.1}% of step time)",
                    counted(n, "synchronous copy", "synchronous copies"),
                    ms(ns)
                )
            },
            "Use cudaMemcpyAsync on a stream (from pinned memory) and synchronize once where the result is needed, \
             so the host keeps launching while the copy runs.",
        )
    };
    RuleResult { rule: RULE, outcome }
}

/// Copies to or from pageable host memory in steps: the driver stages them through a pinned buffer, so even an
/// asynchronous call returns only once the copy is done.
pub fn pageable_copy_in_step(cx: &Context<'_>) -> RuleResult {
    const RULE: &str = "pageable_copy_in_step";
    let Some(windows) = StepWindows::of_steps(cx) else { return no_steps(RULE, cx) };
    let hits = copies_in_steps(cx.trace, &windows, |_, m| m.src_kind == PAGEABLE || m.dst_kind == PAGEABLE);
    let outcome = if hits.count() == 0 {
        Outcome::Clean { checked: checked(cx.trace, &windows, "pageable") }
    } else {
        hits.found(
            &windows,
            |n, ns, pct| {
                format!(
                    "{} from or to pageable memory inside steps held the host {} ({pct:.1}% of step time)",
                    counted(n, "copy", "copies"),
                    ms(ns)
                )
            },
            "Allocate the host buffers pinned (cudaMallocHost, or pin_memory=True in a PyTorch DataLoader) so the \
             copies run asynchronously.",
        )
    };
    RuleResult { rule: RULE, outcome }
}

/// Whether a copy held its host thread: its record lacks the async flag, or its call is a synchronous one. A
/// graph's copies are launched by `cudaGraphLaunch`, never synchronous.
fn is_synchronous(trace: &Trace, m: &Memcpy) -> bool {
    if m.graph_id != 0 {
        return false;
    }
    if m.flags & MEMCPY_ASYNC_FLAG == 0 {
        return true;
    }
    trace.launcher(m.corr()).is_some_and(|a| {
        let name = trace.api_name(a);
        name.contains("emcpy") && !name.contains("Async")
    })
}

/// The copies that `pick` keeps whose launching call (or own start) is inside a step.
fn copies_in_steps(trace: &Trace, windows: &StepWindows, pick: impl Fn(&Trace, &Memcpy) -> bool) -> Hits {
    let mut hits = Hits::default();
    for m in &trace.memcpys {
        let launcher = trace.launcher(m.corr());
        let (start, end) = launcher.map_or((m.start, m.end), |a| (a.start, a.end));
        let Some(clipped) = windows.clip(m.proc, start, end) else { continue };
        if !pick(trace, m) {
            continue;
        }
        let call = launcher.map_or_else(|| "copy".to_string(), |a| trace.api_name(a));
        let what = format!(
            "{call} {} {} ({} -> {})",
            crate::fmt::bytes(m.bytes),
            memcpy_kind(m.copy_kind),
            memory_kind(m.src_kind as u32),
            memory_kind(m.dst_kind as u32)
        );
        hits.push(clipped, EventRef { proc: m.proc, start, end, correlation: m.correlation, what });
    }
    hits
}

/// What a clean result looked at.
fn checked(trace: &Trace, windows: &StepWindows, which: &str) -> String {
    let in_steps = trace
        .memcpys
        .iter()
        .filter(|m| {
            let (s, e) = trace.launcher(m.corr()).map_or((m.start, m.end), |a| (a.start, a.end));
            windows.clip(m.proc, s, e).is_some()
        })
        .count();
    format!("{in_steps} copies inside {} steps: none {which}", windows.count)
}
