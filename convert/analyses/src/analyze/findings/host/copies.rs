//! `sync_copy_in_step` and `pageable_copy_in_step`: copies inside steps that hold the host until the copy is
//! done (Nsight Systems' `cuda_memcpy_sync` and `cuda_memcpy_async` pageable rules, judged per step). A copy is
//! in a step when its launching call started in one (the copy's own start where no call was recorded); its time
//! is that call's, clipped to the step: the host time the copy held.

use rustc_hash::FxHashMap;

use cutr_model::describe::{memcpy_kind, memory_kind};
use cutr_model::{ApiCall, Memcpy, ProcId, Trace};

use super::super::super::types::{Context, Outcome, RuleResult};
use super::{Hits, StepWindows, counted, ms, no_steps};

/// `CUPTI_ACTIVITY_FLAG_MEMCPY_ASYNC`: the record's flag for a copy made by an asynchronous call.
const MEMCPY_ASYNC_FLAG: u8 = 1;
/// `CUPTI_ACTIVITY_MEMORY_KIND_PAGEABLE`.
const PAGEABLE: u8 = 1;

/// Which of the two copy rules.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum CopyRule {
    /// `sync_copy_in_step`.
    Synchronous,
    /// `pageable_copy_in_step`.
    Pageable,
}

impl CopyRule {
    pub(crate) fn name(self) -> &'static str {
        match self {
            CopyRule::Synchronous => "sync_copy_in_step",
            CopyRule::Pageable => "pageable_copy_in_step",
        }
    }
}

/// Synchronous copies (`cudaMemcpy`, `cuMemcpyHtoD`..., any copy whose record lacks the async flag) in steps.
pub fn sync_copy_in_step(cx: &Context<'_>) -> RuleResult {
    over_trace(cx, CopyRule::Synchronous)
}

/// Copies to or from pageable host memory in steps: the driver stages them through a pinned buffer, so even an
/// asynchronous call returns only once the copy is done.
pub fn pageable_copy_in_step(cx: &Context<'_>) -> RuleResult {
    over_trace(cx, CopyRule::Pageable)
}

fn over_trace(cx: &Context<'_>, rule: CopyRule) -> RuleResult {
    let Some(windows) = StepWindows::of_steps(cx) else { return no_steps(rule.name(), cx) };
    let mut copies = CopyHits::new(rule);
    for m in &cx.trace.memcpys {
        copies.add(cx.trace, &windows, m, cx.trace.launcher(m.corr()));
    }
    copies.result(&windows)
}

/// One copy rule's hits, and how many copies were inside steps at all: what a load or a stream folds copy by
/// copy.
pub(crate) struct CopyHits {
    rule: CopyRule,
    pub(crate) hits: Hits,
    in_steps: u64,
    /// Whether a call (by file, driver or runtime, cbid) is a synchronous copy: names looked up once.
    sync_call: FxHashMap<(ProcId, bool, u32), bool>,
}

impl CopyHits {
    pub(crate) fn new(rule: CopyRule) -> CopyHits {
        CopyHits { rule, hits: Hits::default(), in_steps: 0, sync_call: FxHashMap::default() }
    }

    /// Counts copy `m`, launched by `launcher` (`None`: no call recorded or known).
    pub(crate) fn add(&mut self, trace: &Trace, windows: &StepWindows, m: &Memcpy, launcher: Option<&ApiCall>) {
        let (start, end) = launcher.map_or((m.start, m.end), |a| (a.start, a.end));
        let Some(clipped) = windows.clip(m.proc, start, end) else { return };
        self.in_steps += 1;
        let picked = match self.rule {
            CopyRule::Synchronous => self.is_synchronous(trace, m, launcher),
            CopyRule::Pageable => m.src_kind == PAGEABLE || m.dst_kind == PAGEABLE,
        };
        if !picked {
            return;
        }
        let what = || {
            let call = launcher.map_or_else(|| "copy".to_string(), |a| trace.api_name(a));
            format!(
                "{call} {} {} ({} -> {})",
                crate::fmt::bytes(m.bytes),
                memcpy_kind(m.copy_kind),
                memory_kind(m.src_kind as u32),
                memory_kind(m.dst_kind as u32)
            )
        };
        self.hits.offer(clipped, (start, m.proc, m.correlation), end, what);
    }

    /// Whether a copy held its host thread: its record lacks the async flag, or its call is a synchronous one. A
    /// graph's copies are launched by `cudaGraphLaunch`, never synchronous.
    fn is_synchronous(&mut self, trace: &Trace, m: &Memcpy, launcher: Option<&ApiCall>) -> bool {
        if m.graph_id != 0 {
            return false;
        }
        if m.flags & MEMCPY_ASYNC_FLAG == 0 {
            return true;
        }
        launcher.is_some_and(|a| {
            *self.sync_call.entry((a.proc, a.driver, a.cbid)).or_insert_with(|| {
                let name = trace.api_name(a);
                name.contains("emcpy") && !name.contains("Async")
            })
        })
    }

    /// The rule's result over `windows` (the steps' windows the copies were counted in).
    pub(crate) fn result(self, windows: &StepWindows) -> RuleResult {
        let rule = self.rule.name();
        let (which, noun) = match self.rule {
            CopyRule::Synchronous => ("synchronous", "synchronous copy"),
            CopyRule::Pageable => ("pageable", "copy"),
        };
        if self.hits.count() == 0 {
            let checked = format!("{} copies inside {} steps: none {which}", self.in_steps, windows.count);
            return RuleResult { rule, outcome: Outcome::Clean { checked } };
        }
        let outcome = match self.rule {
            CopyRule::Synchronous => self.hits.found(
                windows,
                |n, ns, pct| {
                    format!(
                        "{} inside steps held the host {} ({pct:.1}% of step time)",
                        counted(n, noun, "synchronous copies"),
                        ms(ns)
                    )
                },
                "Use cudaMemcpyAsync on a stream (from pinned memory) and synchronize once where the result is \
                 needed, so the host keeps launching while the copy runs.",
            ),
            CopyRule::Pageable => self.hits.found(
                windows,
                |n, ns, pct| {
                    format!(
                        "{} from or to pageable memory inside steps held the host {} ({pct:.1}% of step time)",
                        counted(n, noun, "copies"),
                        ms(ns)
                    )
                },
                "Allocate the host buffers pinned (cudaMallocHost, or pin_memory=True in a PyTorch DataLoader) so \
                 the copies run asynchronously.",
            ),
        };
        RuleResult { rule, outcome }
    }
}
