//! The gate: whether PM sampling may call CUPTI for a device now, and who may stop sampling.
//!
//! A CUPTI call that touches a device's PM sampling after a CUDA context ended crashes the application
//! (`cuptiPmSamplingSetConfig` after `cudaDeviceReset` dereferenced null inside libnvperf_host on the H100;
//! stopping or decoding then corrupted the heap; a host call then crashed too). So a context about to be
//! destroyed (CUPTI's callback, on the destroying thread, while the context still lives) marks the gate ended
//! and takes its exclusive side to stop sampling; every other device call runs under the shared side and is not
//! made once the gate is ended.
//!
//! # The sides
//! - Shared, waiting ([`Gate::device_calls`]): every CUPTI call of set-up (cuptiProfilerInitialize, the chip
//!   queries, fitting the metrics, Enable, SetConfig to Start) and each decode. `None` once ended.
//! - Shared, never waiting ([`Gate::evaluation`]): each sample an evaluating thread evaluates. Refused while a
//!   finisher holds or awaits the exclusive side (the finisher then evaluates what is left itself) and once ended.
//! - Exclusive ([`Gate::exclusive`]): whoever finishes sampling: the set-up thread at Stop, or when a device's
//!   decoding thread could not be started.
//! - Exclusive within a time ([`Gate::exclusive_within`], [`GATE_WAIT`]): a context's end, after [`Gate::end`].
//!
//! # Lock order
//! Locks are taken in this order only; a thread holding one takes none above it:
//! 1. the CUDA driver's own lock: held by the thread that destroys a context while CUPTI calls back;
//! 2. the gate (either side);
//! 3. one device's session (`Mutex<DeviceSession>`): a decoding thread takes it only under the shared side, so a
//!    finisher holding the exclusive side may lock every session;
//! 4. that device's evaluation state (`Evaluation::state`, and its condvar): hand-over, halt and stop, under the
//!    session; the evaluating thread takes it alone or under the evaluation side, never with a session;
//! 5. leaves, held while taking nothing else: the list of sessions (`Shared::sessions`, taken out before any
//!    session is locked), the evaluation's host object and thread handle, `Shared::devices`,
//!    `Shared::notes_pending`, and the `send` and `note` callbacks' locks.
//!
//! The one reversal is with the driver (1): cuptiPmSamplingEnable, under the shared side, may wait for the driver
//! lock that a thread ending a context holds while it waits for the exclusive side (the H100 showed it). So a
//! context's end waits for the exclusive side [`GATE_WAIT`] at most and then gives up, leaving sampling unstopped
//! with a note: never a hang, never a call into a dead context.
//!
//! # Further rules
//! - `ended` is set before the exclusive side is sought, and read after the shared side is taken: no device call
//!   begins once a context began to end; one under way finishes first.
//! - Under either side, notes are only queued (`Shared::note`); the `note`, `send` and `started` callbacks run
//!   with no side held (`Shared::flush_notes`; a finisher sends its chunks after letting go). They may block
//!   (notes go to stderr), and a thread blocked under the gate would hold up a context's end.
//! - Waits under the gate are bounded: a decoding thread waits for a spare image [`super::evaluation`]'s
//!   `SPARE_WAIT` at most (under the shared side and its session), and a finisher for the evaluating thread's
//!   batch `STOP_WAIT` at most (that thread needs only the evaluation state to give it back).
//! - The evaluating thread lets go of the evaluation side after each sample, so a finisher waits one sample at
//!   most for it.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{RwLock, RwLockReadGuard, RwLockWriteGuard, TryLockError};
use std::time::{Duration, Instant};

/// How long a context that ends waits for a device call of PM sampling under way (the longest seen: ~230 ms).
pub(super) const GATE_WAIT: Duration = Duration::from_millis(1000);

/// See the module's doc.
pub(super) struct Gate {
    lock: RwLock<()>,
    /// A context ended (or sampling stopped on an internal error): no CUPTI call touches a device's PM sampling
    /// any more.
    ended: AtomicBool,
}

/// The shared side, held: device calls (or one evaluation) may be made.
pub(super) struct SharedSide<'a> {
    _guard: RwLockReadGuard<'a, ()>,
}

/// The exclusive side, held: no device call is under way, and none begins.
pub(super) struct ExclusiveSide<'a> {
    _guard: RwLockWriteGuard<'a, ()>,
}

impl Gate {
    pub fn new() -> Gate {
        Gate { lock: RwLock::new(()), ended: AtomicBool::new(false) }
    }

    /// The right to make device calls now: `None` once ended. Shared by set-up and each device's decoding and
    /// evaluating threads (they may run at once); waits while a finisher holds or awaits the exclusive side.
    pub fn device_calls(&self) -> Option<SharedSide<'_>> {
        let guard = self.lock.read().unwrap_or_else(|e| e.into_inner());
        (!self.ended()).then_some(SharedSide { _guard: guard })
    }

    /// The evaluating threads' side: refused, not waited for, while a finisher holds or awaits the exclusive side
    /// (the finisher then evaluates what is left itself), and once ended.
    pub fn evaluation(&self) -> Option<SharedSide<'_>> {
        let guard = match self.lock.try_read() {
            Ok(g) => g,
            Err(TryLockError::Poisoned(e)) => e.into_inner(),
            Err(TryLockError::WouldBlock) => return None,
        };
        (!self.ended()).then_some(SharedSide { _guard: guard })
    }

    /// The finishers' side, waited for as long as it takes.
    pub fn exclusive(&self) -> ExclusiveSide<'_> {
        ExclusiveSide { _guard: self.lock.write().unwrap_or_else(|e| e.into_inner()) }
    }

    /// The exclusive side if it comes within `wait` (a context's end: see the module's doc on the driver's lock).
    pub fn exclusive_within(&self, wait: Duration) -> Option<ExclusiveSide<'_>> {
        let t0 = Instant::now();
        loop {
            match self.lock.try_write() {
                Ok(g) => return Some(ExclusiveSide { _guard: g }),
                Err(TryLockError::Poisoned(e)) => return Some(ExclusiveSide { _guard: e.into_inner() }),
                Err(_) if t0.elapsed() > wait => return None,
                Err(_) => std::thread::sleep(Duration::from_millis(1)),
            }
        }
    }

    /// No device call from now on (one under way finishes).
    pub fn end(&self) {
        self.ended.store(true, Ordering::Release);
    }

    pub fn ended(&self) -> bool {
        self.ended.load(Ordering::Acquire)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Evaluation never waits: refused while a finisher holds the exclusive side; device calls wait for it. Once
    /// ended, neither is given.
    #[test]
    fn evaluation_is_refused_under_a_finisher_and_nothing_after_the_end() {
        let gate: &'static Gate = Box::leak(Box::new(Gate::new()));
        let finisher = gate.exclusive();
        assert!(gate.evaluation().is_none());
        let waiter = std::thread::spawn(|| gate.device_calls().is_some());
        std::thread::sleep(Duration::from_millis(20));
        assert!(!waiter.is_finished(), "a device call waits for the finisher");
        drop(finisher);
        assert!(waiter.join().unwrap());
        assert!(gate.evaluation().is_some());
        gate.end();
        assert!(gate.device_calls().is_none() && gate.evaluation().is_none() && gate.ended());
        assert!(gate.exclusive_within(Duration::from_millis(5)).is_some(), "the exclusive side is still given");
    }
}
