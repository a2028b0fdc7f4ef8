//! Evaluation of decoded PM samples to metric values, on a thread of its own per device. Decoding
//! (`cuptiPmSamplingDecodeData`, one call at a time per device) and evaluation
//! (`cuptiProfilerHostEvaluateToGpuValues`, host-only) each cost ~4-5 us per metric per sample on the H100
//! (`bench/gpu/pm_cpu_time_vs_decode_period.sh`: the default set's 10 metrics took 93% of one thread at 10 kHz doing both): with
//! evaluation here the decoding thread has the rest, and a rate whose decoding fits one thread is kept.
//!
//! Images travel: the decoding thread fills one, hands it over with its samples' timestamps when it is nearly
//! full ([`Evaluation::hand_over`]) and goes on in a spare; this thread evaluates it, sends the chunk, resets the
//! image and returns it as a spare. Every evaluation runs under the device gate's shared side and not once a
//! context has ended (the gate's rule); whoever finishes a session (under the exclusive side, while the context
//! lives) evaluates what is still queued itself ([`Evaluation::evaluate_all`]).

use std::collections::VecDeque;
use std::ffi::CString;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use cutr_format::CounterSamples;

use super::Shared;
use super::host::SharedHost;
use crate::ffi::pm::{Api, CounterDataImage};

/// Images in use at most per device (the one being decoded into, those queued or being evaluated, spares): past
/// it a batch that finds no spare within [`SPARE_WAIT`] is not evaluated and its samples are counted as lost. The
/// wait is short: the decoding thread waits under the gate, and the hardware buffer holds only ~100 ms (a decode
/// that comes too late overflows it, which ends sampling on the device).
const MAX_IMAGES: usize = 4;
const SPARE_WAIT: Duration = Duration::from_millis(10);
/// How long [`Evaluation::stop`] waits for a batch in the evaluating thread's hands (it gives it back within one
/// sample once it may not go on); past it the thread is left, its batch counted as lost.
const STOP_WAIT: Duration = Duration::from_secs(2);

/// A filled image's samples: the indices to evaluate and, in `samples`, their timestamps and the losses counted
/// while they were decoded.
pub(super) struct Batch {
    pub(super) image: CounterDataImage,
    pub(super) indices: Vec<usize>,
    pub(super) samples: CounterSamples,
    /// Samples evaluated so far (their values are in `samples.values`).
    evaluated: usize,
}

impl Batch {
    pub fn new(image: CounterDataImage, indices: Vec<usize>, samples: CounterSamples) -> Batch {
        Batch { image, indices, samples, evaluated: 0 }
    }

    /// The image (to reuse) and the samples evaluated, with their values; the samples not evaluated are left
    /// out and counted as lost.
    pub fn into_parts(mut self) -> (CounterDataImage, CounterSamples) {
        let missing = self.indices.len() - self.evaluated;
        self.samples.t_start.truncate(self.evaluated);
        self.samples.t_end.truncate(self.evaluated);
        self.samples.lost_samples += missing as u64;
        (self.image, self.samples)
    }
}

struct State {
    queue: VecDeque<Batch>,
    spares: Vec<CounterDataImage>,
    /// Images made so far (counted against [`MAX_IMAGES`]).
    images: usize,
    /// The thread holds a batch taken from the queue, of this many samples (counted as lost if the thread dies
    /// with it).
    in_hand: Option<u64>,
    /// Samples lost with a batch the thread did not give back.
    lost: u64,
    stop: bool,
    /// No more evaluation: the device's context is ending (its samples are counted as lost at finish).
    halted: bool,
    /// An evaluation failed (noted once; its values are NaN).
    failed_noted: bool,
}

/// What a device's decoding thread, its evaluating thread and the finisher share.
pub(super) struct Evaluation {
    state: Mutex<State>,
    changed: Condvar,
    /// Nanoseconds the evaluating thread spent evaluating (its share of the sampling cost, for the busy note).
    pub busy_ns: AtomicU64,
    /// The device's host object: used by one thread at a time (the evaluating thread under the gate's
    /// evaluation side, or the finisher under its exclusive side), released by the finisher.
    host: SharedHost,
    names: Vec<CString>,
    pristine: Arc<CounterDataImage>,
    device: u32,
    thread: Mutex<Option<JoinHandle<()>>>,
    /// [`Evaluation::stop`] left the thread in a call that did not return: the host object stays with it.
    left_running: std::sync::atomic::AtomicBool,
}

impl Evaluation {
    /// Starts device `device`'s evaluating thread. `pristine` is an initialized, empty image; the decoding thread
    /// holds one image already (counted here).
    pub fn start(
        shared: &'static Shared,
        device: u32,
        host: SharedHost,
        names: Vec<CString>,
        pristine: Arc<CounterDataImage>,
    ) -> Result<Arc<Evaluation>, String> {
        let e = Arc::new(Evaluation {
            state: Mutex::new(State {
                queue: VecDeque::new(),
                spares: vec![(*pristine).clone()],
                images: 2,
                in_hand: None,
                lost: 0,
                stop: false,
                halted: false,
                failed_noted: false,
            }),
            changed: Condvar::new(),
            busy_ns: AtomicU64::new(0),
            host,
            names,
            pristine,
            device,
            thread: Mutex::new(None),
            left_running: std::sync::atomic::AtomicBool::new(false),
        });
        let mine = Arc::clone(&e);
        let thread = crate::threads::spawn(format!("cutr-pm-eval{device}"), move || {
            if std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| mine.run(shared))).is_err() {
                let mut st = mine.state.lock().unwrap_or_else(|e| e.into_inner());
                st.lost += st.in_hand.take().unwrap_or(0);
                mine.changed.notify_all();
                drop(st);
                shared.note("PM sampling: the evaluating thread stopped on an internal error".into());
            }
        })
        .map_err(|e| format!("cannot start the evaluating thread: {e}"))?;
        *e.thread.lock().unwrap() = Some(thread);
        Ok(e)
    }

    /// Queues a filled image and returns a spare to decode into next. Without a spare within [`SPARE_WAIT`] once
    /// [`MAX_IMAGES`] exist (evaluation is behind), or once stopping, the batch is not evaluated: its image is
    /// reset and returned, and its samples are counted in the returned lost count.
    pub fn hand_over(&self, mut batch: Batch, ended: &dyn Fn() -> bool) -> (CounterDataImage, u64) {
        let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let deadline = Instant::now() + SPARE_WAIT;
        loop {
            if st.stop || st.halted || ended() || Instant::now() >= deadline {
                let lost = batch.indices.len() as u64 + batch.samples.lost_samples;
                batch.image.reset_from(&self.pristine);
                return (batch.image, lost);
            }
            let spare = match st.spares.pop() {
                Some(spare) => Some(spare),
                None if st.images < MAX_IMAGES => {
                    st.images += 1;
                    Some((*self.pristine).clone())
                }
                None => None,
            };
            if let Some(spare) = spare {
                st.queue.push_back(batch);
                self.changed.notify_all();
                return (spare, 0);
            }
            let left = deadline.saturating_duration_since(Instant::now());
            st = self.changed.wait_timeout(st, left).unwrap_or_else(|e| e.into_inner()).0;
        }
    }

    /// No more evaluation on this device (its context is ending): the thread gives its batch back and waits to
    /// be stopped.
    pub fn halt(&self) {
        self.state.lock().unwrap_or_else(|e| e.into_inner()).halted = true;
        self.changed.notify_all();
    }

    /// Stops the evaluating thread and returns what it had not evaluated, in order, for the finisher (who holds
    /// the gate's exclusive side: a batch in the thread's hands comes back at its next sample), and the samples
    /// lost with a batch it did not give back (a panic, or a CUPTI call that did not return within
    /// [`STOP_WAIT`]: that thread is then left, not joined).
    pub fn stop(&self) -> (Vec<Batch>, u64) {
        let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        st.stop = true;
        self.changed.notify_all();
        let deadline = Instant::now() + STOP_WAIT;
        while st.in_hand.is_some() && Instant::now() < deadline {
            st = self.changed.wait_timeout(st, Duration::from_millis(10)).unwrap_or_else(|e| e.into_inner()).0;
        }
        let stuck = st.in_hand.take();
        drop(st);
        self.left_running.store(stuck.is_some(), Ordering::Release);
        let thread = self.thread.lock().unwrap_or_else(|e| e.into_inner()).take();
        if stuck.is_none()
            && let Some(t) = thread
        {
            let _ = t.join();
        }
        let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let lost = std::mem::take(&mut st.lost) + stuck.unwrap_or(0);
        (st.queue.drain(..).collect(), lost)
    }

    /// Whether [`Evaluation::stop`] had to leave the thread in a call.
    pub fn left_running(&self) -> bool {
        self.left_running.load(Ordering::Acquire)
    }

    /// Evaluates `batch` to its end (the finisher, holding the gate's exclusive side while the context lives),
    /// unless `interrupted` says to stop (checked at every sample). Returns whether it reached the end.
    pub fn evaluate_all(
        &self,
        api: &Api,
        batch: &mut Batch,
        note: &dyn Fn(String),
        interrupted: &dyn Fn() -> bool,
    ) -> bool {
        while batch.evaluated < batch.indices.len() {
            if interrupted() {
                return false;
            }
            if let Some(n) = self.evaluate_next(api, batch) {
                note(n);
            }
        }
        true
    }

    fn run(&self, shared: &'static Shared) {
        loop {
            let mut batch = {
                let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
                loop {
                    if st.stop {
                        return;
                    }
                    if !st.halted
                        && let Some(b) = st.queue.pop_front()
                    {
                        st.in_hand = Some((b.indices.len() - b.evaluated) as u64);
                        break b;
                    }
                    st = self.changed.wait(st).unwrap_or_else(|e| e.into_inner());
                }
            };
            let t0 = Instant::now();
            let mut complete = true;
            while batch.evaluated < batch.indices.len() {
                // Shared with the decoding thread; refused while a finisher holds it or once a context ended.
                let gate = shared.gate.evaluation();
                if gate.is_none() || self.state.lock().unwrap_or_else(|e| e.into_inner()).halted {
                    complete = false;
                    break;
                }
                let failed = self.evaluate_next(&shared.api, &mut batch);
                drop(gate);
                if let Some(n) = failed {
                    shared.note(n);
                }
            }
            self.busy_ns.fetch_add(t0.elapsed().as_nanos() as u64, Ordering::Relaxed);
            debug!("evaluate {:.2} ms of {} samples", t0.elapsed().as_secs_f64() * 1e3, batch.evaluated);
            let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
            st.in_hand = None;
            if complete {
                drop(st);
                let (mut image, samples) = batch.into_parts();
                if !samples.is_empty() || samples.lost_samples > 0 {
                    shared.send(samples);
                }
                image.reset_from(&self.pristine);
                let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
                st.spares.push(image);
                self.changed.notify_all();
            } else {
                // The finisher takes it from here (it holds the gate), or nothing more is evaluated (the context
                // ended): back in front of the queue, and wait to be stopped.
                st.queue.push_front(batch);
                self.changed.notify_all();
                while !st.stop {
                    st = self.changed.wait(st).unwrap_or_else(|e| e.into_inner());
                }
                return;
            }
            shared.flush_notes();
        }
    }

    /// Evaluates the batch's next sample into its values: NaN where CUPTI refuses, with a note to give (the
    /// first time only) returned rather than given here, where a lock or the gate may be held.
    fn evaluate_next(&self, api: &Api, batch: &mut Batch) -> Option<String> {
        let index = batch.indices[batch.evaluated];
        let mut values = vec![f64::NAN; self.names.len()];
        // The host object's lock is let go before the state's (it is a leaf: see the gate's lock order).
        let evaluated = match &*self.host.lock().unwrap_or_else(|e| e.into_inner()) {
            Some(host) => api.evaluate(host, &batch.image, index, &self.names, &mut values),
            None => Err("no host object to evaluate with (released)".to_string()),
        };
        let mut failed = None;
        if let Err(e) = evaluated {
            values.fill(f64::NAN);
            let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
            if !st.failed_noted {
                st.failed_noted = true;
                failed = Some(format!("PM sampling on device {}: {e}; those samples' values are NaN", self.device));
            }
        }
        batch.samples.values.extend_from_slice(&values);
        batch.evaluated += 1;
        failed
    }
}

#[cfg(test)]
mod tests {
    use super::super::device::empty;
    use super::super::tests::shared_collecting;
    use super::*;

    fn image(byte: u8) -> CounterDataImage {
        CounterDataImage::from_bytes_for_test(vec![byte; 16])
    }

    fn batch(device: u32, indices: Vec<usize>, lost: u64) -> Batch {
        Batch::new(image(1), indices, CounterSamples { lost_samples: lost, ..empty(device, &[]) })
    }

    /// An evaluation of device `device` without a host object (nothing here may reach CUPTI with it).
    fn start(shared: &'static Shared, device: u32) -> Arc<Evaluation> {
        Evaluation::start(shared, device, Arc::new(Mutex::new(None)), Vec::new(), Arc::new(image(7))).unwrap()
    }

    /// Images go round: each handed-over image comes back reset as a spare, and the batches are sent in order
    /// (batches without samples to evaluate: no CUPTI call is made).
    #[test]
    fn evaluation_sends_batches_in_order_and_recycles_images() {
        let (shared, notes, sent) = shared_collecting();
        let eval = start(shared, 3);
        for k in 1..=6 {
            let (spare, lost) = eval.hand_over(batch(3, Vec::new(), k), &|| false);
            assert_eq!((spare, lost), (image(7), 0), "a reset spare or a fresh image");
        }
        let t0 = Instant::now();
        while sent.lock().unwrap().len() < 6 && t0.elapsed() < Duration::from_secs(5) {
            std::thread::sleep(Duration::from_millis(1));
        }
        let lost: Vec<u64> = sent.lock().unwrap().iter().map(|c| c.lost_samples).collect();
        assert_eq!(lost, [1, 2, 3, 4, 5, 6]);
        let (left, lost) = eval.stop();
        assert!(left.is_empty() && lost == 0);
        assert!(notes.lock().unwrap().is_empty());
    }

    /// An evaluating thread that cannot go on (a finisher holds the gate) keeps its batches for the finisher;
    /// once MAX_IMAGES are in use a further batch waits SPARE_WAIT for a spare, then is counted as lost (its
    /// samples and the losses it carried) and its image reused; once a context ended, at once.
    #[test]
    fn evaluation_behind_counts_a_batch_without_a_spare_as_lost() {
        let (shared, _notes, sent) = shared_collecting();
        let eval = start(shared, 0);
        let finisher = shared.gate.exclusive();
        for k in 0..3 {
            assert_eq!(eval.hand_over(batch(0, vec![0], k), &|| false).1, 0, "images 2, 3, 4");
        }
        let t0 = Instant::now();
        let (spare, lost) = eval.hand_over(batch(0, vec![0, 1], 5), &|| false);
        assert!(t0.elapsed() >= SPARE_WAIT, "{:?}", t0.elapsed());
        assert_eq!((spare, lost), (image(7), 2 + 5));
        let t0 = Instant::now();
        assert_eq!(eval.hand_over(batch(0, vec![0; 4], 1), &|| true).1, 5);
        assert!(t0.elapsed() < SPARE_WAIT);
        let (left, lost) = eval.stop();
        let left: Vec<u64> = left.iter().map(|b| b.samples.lost_samples).collect();
        assert_eq!((left, lost), (vec![0, 1, 2], 0), "queued, in order, for the finisher");
        assert!(sent.lock().unwrap().is_empty());
        drop(finisher);
    }

    /// A halted evaluation (the device's context is ending) takes no more batches: a hand-over is refused at
    /// once and counted; the finisher, interrupted, evaluates nothing and counts the batch's samples as lost,
    /// sending only timestamps that have values.
    #[test]
    fn a_halted_or_interrupted_evaluation_counts_its_samples_as_lost() {
        let (shared, notes, sent) = shared_collecting();
        let eval = start(shared, 0);
        eval.halt();
        let t0 = Instant::now();
        assert_eq!(eval.hand_over(batch(0, vec![0, 1, 2], 4), &|| false), (image(7), 7));
        assert!(t0.elapsed() < SPARE_WAIT);
        let (left, lost) = eval.stop();
        assert!(left.is_empty() && lost == 0);

        let mut b = batch(0, vec![5, 6, 7], 2);
        b.samples.t_start = vec![10, 20, 30];
        b.samples.t_end = vec![20, 30, 40];
        assert!(!eval.evaluate_all(&shared.api, &mut b, &|_| {}, &|| true), "interrupted before the first");
        let (_, samples) = b.into_parts();
        assert_eq!((samples.len(), samples.values.len(), samples.lost_samples), (0, 0, 5));
        assert!(sent.lock().unwrap().is_empty() && notes.lock().unwrap().is_empty());
    }
}
