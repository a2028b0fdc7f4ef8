//! Unified memory recording (`--um`): CUPTI delivers migrations, page faults, thrashing, throttling and remote
//! maps as UNIFIED_MEMORY_COUNTER records only for the counter kinds configured before the activity kind is
//! enabled. Every kind is asked for; what this device or driver refuses is named, and the rest is recorded.

use crate::ffi::cupti::Cupti;
use crate::ffi::subscriber::{CBID_CONTEXT_CREATED, DOMAIN_RESOURCE, Event, EventUser};

/// The callbacks [`AtFirstContext`] takes.
pub const AT_CONTEXT: [(u32, u32); 1] = [(DOMAIN_RESOURCE, CBID_CONTEXT_CREATED)];

/// CUPTI takes the counter configuration only once `cuInit` has returned: configured earlier (an injected
/// recorder starts inside `cuInit`) it answers success, then refuses to enable the kind with
/// `CUPTI_ERROR_NOT_READY` (`workloads/cuda/um_probe.cu` on an H100, CUDA 13.0). Managed memory needs a context,
/// so configuring and enabling it when the first context is made misses nothing: this callback user runs the
/// session's retry then.
pub struct AtFirstContext {
    pub retry: Box<dyn Fn() + Send + Sync>,
}

impl EventUser for AtFirstContext {
    fn on_event(&self, event: &Event<'_>) {
        if let Event::ContextCreated { .. } = event {
            (self.retry)();
        }
    }
}

/// `CUpti_ActivityUnifiedMemoryCounterKind` values of CUDA 13 and what each records.
pub const COUNTER_KINDS: [(u32, &str); 8] = [
    (1, "bytes migrated host to device"),
    (2, "bytes migrated device to host"),
    (3, "CPU page faults"),
    (4, "GPU page faults"),
    (5, "thrashing"),
    (6, "throttling"),
    (7, "remote maps"),
    (8, "bytes migrated device to device"),
];

/// Configures every counter kind CUPTI accepts and returns them (empty: record no unified memory). CUPTI fails
/// the whole call when it refuses one kind, so on failure each kind is tried alone to find those it refuses
/// (each named in a note), and the accepted ones are configured together.
pub fn configure(cupti: &dyn Cupti, note: &mut dyn FnMut(String)) -> Vec<u32> {
    let all: Vec<u32> = COUNTER_KINDS.iter().map(|k| k.0).collect();
    if cupti.configure_um_counters(&all).is_ok() {
        return all;
    }
    let mut accepted = Vec::new();
    for &(kind, what) in &COUNTER_KINDS {
        match cupti.configure_um_counters(&[kind]) {
            Ok(()) => accepted.push(kind),
            Err(e) => note(format!("unified memory {what} not recorded: {}", e.name)),
        }
    }
    if accepted.len() > 1
        && let Err(e) = cupti.configure_um_counters(&accepted)
    {
        note(format!("unified memory not recorded: the counters accepted one by one were refused together ({e})"));
        return Vec::new();
    }
    if accepted.is_empty() {
        note("unified memory not recorded: CUPTI refused every counter kind on this system".to_string());
    }
    accepted
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fake::FakeCupti;

    #[test]
    fn every_kind_at_once_when_accepted() {
        let (cupti, handle) = FakeCupti::new(130001);
        let mut notes = Vec::new();
        assert_eq!(configure(&cupti, &mut |n| notes.push(n)), vec![1, 2, 3, 4, 5, 6, 7, 8]);
        assert_eq!(handle.um_configured(), vec![vec![1, 2, 3, 4, 5, 6, 7, 8]]);
        assert!(notes.is_empty());
    }

    #[test]
    fn refused_kinds_are_named_and_the_rest_recorded() {
        let (cupti, handle) = FakeCupti::new(130001);
        handle.refuse_um_counter(5);
        handle.refuse_um_counter(8);
        let mut notes = Vec::new();
        assert_eq!(configure(&cupti, &mut |n| notes.push(n)), vec![1, 2, 3, 4, 6, 7]);
        // One by one, then the accepted ones together (the configuration in effect).
        assert_eq!(handle.um_configured().last(), Some(&vec![1, 2, 3, 4, 6, 7]));
        assert_eq!(
            notes,
            vec![
                "unified memory thrashing not recorded: CUPTI_ERROR_UM_PROFILING_NOT_SUPPORTED_ON_DEVICE",
                "unified memory bytes migrated device to device not recorded: \
                 CUPTI_ERROR_UM_PROFILING_NOT_SUPPORTED_ON_DEVICE",
            ]
        );
    }

    #[test]
    fn nothing_accepted_records_nothing() {
        let (cupti, handle) = FakeCupti::new(130001);
        for k in 1..=8 {
            handle.refuse_um_counter(k);
        }
        let mut notes = Vec::new();
        assert!(configure(&cupti, &mut |n| notes.push(n)).is_empty());
        assert_eq!(notes.len(), 9);
        assert_eq!(notes[8], "unified memory not recorded: CUPTI refused every counter kind on this system");
    }
}
