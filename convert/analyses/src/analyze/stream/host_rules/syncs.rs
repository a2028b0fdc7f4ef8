//! `sync_in_step` over a stream. A load counts every host-blocking SYNCHRONIZATION record inside a step (named by
//! its call) and every `...Synchronize` call inside a step that has no such record (a runtime call and the driver
//! call beneath it once). A record and its call can come in different windows, so each correlation key of a record
//! or a synchronizing call waits here until the stream's edge passes the end of everything seen for it (a record
//! lies inside its call, so nothing more can come for the key); then it is counted as the load counts it.

use rustc_hash::FxHashMap;

use cutr_model::stream::Batch;
use cutr_model::{ApiCall, CorrKey, Sync, Trace};

use super::super::super::findings::host::syncs::{SyncCalls, blocks_host, record_what};
use super::super::super::findings::host::{Hits, StepWindows};

/// What was seen of one correlation key.
#[derive(Default)]
struct Key {
    /// Its host-blocking records.
    records: Vec<Sync>,
    /// The call that names a record: a runtime call wins over the driver call beneath it, as on a load.
    launcher: Option<ApiCall>,
    /// Its first synchronizing call inside a step (a load's call order: by start), with the part inside the step.
    first_in_step: Option<(ApiCall, (u64, u64))>,
    /// The latest end of anything seen for the key: once the edge passes it, nothing more can come.
    until: u64,
}

/// The rule's fold: the keys still waiting, and the hits of those settled.
#[derive(Default)]
pub(super) struct SyncFold {
    pub(super) hits: Hits,
    waiting: FxHashMap<CorrKey, Key>,
    sync_calls: SyncCalls,
    /// Keys settled before the edge passed them: more than the cap waited.
    pub(super) settled_early: u64,
}

impl SyncFold {
    pub(super) fn batch(&mut self, trace: &Trace, windows: &StepWindows, b: &Batch) {
        for s in b.syncs.iter().filter(|s| blocks_host(s)) {
            let key = self.waiting.entry(s.corr()).or_default();
            key.until = key.until.max(s.end);
            key.records.push(*s);
        }
        for a in &b.apis {
            // A record's call is a synchronizing one (`...Synchronize`): other calls are not kept for its name.
            if self.sync_calls.name(trace, a).is_none() {
                continue;
            }
            let key = self.waiting.entry(a.corr()).or_default();
            key.until = key.until.max(a.end);
            if key.launcher.is_none_or(|l| l.driver && !a.driver) {
                key.launcher = Some(*a);
            }
            if let Some(clipped) = windows.clip(a.proc, a.start, a.end)
                && key.first_in_step.is_none_or(|(f, _)| (a.start, a.end) < (f.start, f.end))
            {
                key.first_in_step = Some((*a, clipped));
            }
        }
    }

    /// Counts the keys whose time the stream passed (`edge`: no later row starts before it), and the oldest past
    /// `cap` waiting; returns the earliest start of a key still waiting (what the hits' union must not settle
    /// past).
    pub(super) fn settle(&mut self, trace: &Trace, windows: &StepWindows, edge: u64, cap: usize) -> u64 {
        let mut done: Vec<CorrKey> = self.waiting.iter().filter(|(_, k)| k.until < edge).map(|(c, _)| *c).collect();
        if self.waiting.len() - done.len() > cap {
            let mut rest: Vec<(u64, CorrKey)> =
                self.waiting.iter().filter(|(_, k)| k.until >= edge).map(|(c, k)| (k.until, *c)).collect();
            let early = rest.len() - cap;
            rest.select_nth_unstable(early - 1);
            self.settled_early += early as u64;
            done.extend(rest[..early].iter().map(|r| r.1));
        }
        // Hits in a key order that does not depend on the hash: evidence ties keep their order.
        done.sort_unstable_by_key(|c| (c.proc, c.correlation));
        for c in done {
            if let Some(key) = self.waiting.remove(&c) {
                self.count(trace, windows, key);
            }
        }
        self.waiting.values().map(earliest_start).min().unwrap_or(edge)
    }

    /// A settled key as a load counts it: its records inside steps, else its first synchronizing call inside one.
    fn count(&mut self, trace: &Trace, windows: &StepWindows, key: Key) {
        if key.records.is_empty() {
            if let Some((a, clipped)) = key.first_in_step {
                let name = self.sync_calls.name(trace, &a).cloned().unwrap_or_default();
                self.hits.offer(clipped, (a.start, a.proc, a.correlation), a.end, || name);
            }
            return;
        }
        for s in &key.records {
            let Some(clipped) = windows.clip(s.proc, s.start, s.end) else { continue };
            let what = || record_what(s, key.launcher.as_ref().map(|a| trace.api_name(a)));
            self.hits.offer(clipped, (s.start, s.proc, s.correlation), s.end, what);
        }
    }
}

/// The earliest start of what a waiting key holds: where its hit's interval can begin.
fn earliest_start(k: &Key) -> u64 {
    let records = k.records.iter().map(|s| s.start);
    records.chain(k.first_in_step.iter().map(|f| f.1.0)).min().unwrap_or(u64::MAX)
}
