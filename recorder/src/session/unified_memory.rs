//! Unified memory's kind, enabled apart from the others: CUPTI takes the counters' configuration only after
//! `cuInit` has returned, so the kind may have to wait for the first context (`crate::unified_memory`).

use std::sync::atomic::Ordering;

use super::Session;

impl Session {
    /// Enables unified memory where CUPTI was not ready for it yet, if recording is on now (else the next turn
    /// on enables it). Called when a context is made.
    pub(crate) fn enable_um_after_init(&self) {
        if !self.um_pending.load(Ordering::Relaxed) {
            return;
        }
        let mut enabled = self.enabled.lock().unwrap();
        if !enabled.is_empty() {
            self.enable_um(&mut enabled);
        }
    }

    /// Enables the unified memory kind. CUPTI takes the counters' configuration only after `cuInit` has returned
    /// (see `unified_memory::AtFirstContext`): where it is not ready, configure again and retry; still not ready
    /// (inside `cuInit`), it stays pending until a context is made.
    pub(super) fn enable_um(&self, enabled: &mut Vec<u32>) {
        let um = cutr_schema::kinds::UNIFIED_MEMORY_COUNTER;
        let not_ready = |r: &Result<(), crate::ffi::cupti::CuptiError>| matches!(r, Err(e) if e.code == crate::ffi::cupti::CUPTI_ERROR_NOT_READY);
        let mut r = self.cupti.enable(um);
        if not_ready(&r) {
            if crate::unified_memory::configure(self.cupti, &mut |n| self.note(n)).is_empty() {
                self.um_refused.store(true, Ordering::Relaxed);
                self.um_pending.store(false, Ordering::Relaxed);
                return;
            }
            r = self.cupti.enable(um);
        }
        self.um_pending.store(not_ready(&r), Ordering::Relaxed);
        match r {
            Ok(()) => enabled.push(um),
            Err(_) if self.um_pending.load(Ordering::Relaxed) => {}
            Err(e) => self.note(format!("activity kind UNIFIED_MEMORY_COUNTER not recorded: {e}")),
        }
    }
}
