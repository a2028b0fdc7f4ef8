//! A counter series placed in time as its samples come (`stats --stream`, [`super::stream_counters`]), holding
//! only the samples from the oldest execution still to be integrated on. It is the same series as
//! [`Series::new`](super::counter_windows::Series::new) of all its samples: the same step functions, their running
//! integrals summed in the same order (so the integral up to any time is the same number), the same windows, by
//! the same indices. What it cannot know before its samples have come is told by [`LiveSeries::ready`]: the time
//! up to which its integrals are final. Samples come in time order per series (a chunk's samples are sorted, and a
//! series' chunks follow each other); a sample earlier than one already taken (chunks of one series overlapping:
//! a damaged file) is left out and counted.

use std::collections::{BTreeMap, VecDeque};

use cutr_model::counters::CounterSeriesInfo;

use super::counter_math::{Runs, Steps, scale_of};
use super::counter_windows::{Integrals, Placed, Window};

pub(crate) struct LiveSeries {
    shape: Shape,
    window: Window,
    /// The last sample's time taken, and the series' first and last sample's time (known from the stream's open).
    last_taken: Option<u64>,
    first_sample: u64,
    last_sample: u64,
    /// Every sample has come.
    done: bool,
    /// Integrals from this time on can be taken: the samples before it are dropped.
    kept_from: u64,
    /// Samples earlier than one taken before them: left out.
    pub late: u64,
}

enum Shape {
    Held(Steps),
    Windowed(Box<Windowed>),
}

/// Each reading spread over its window, as [`Series::new`](super::counter_windows::Series::new) places it, swept
/// as the windows come: their starts and ends come in the order of the readings.
struct Windowed {
    /// What readings are divided by.
    scale: f64,
    /// The windows known (start, end, scaled reading) from global index `base` on, and their lengths' prefix
    /// sums: `prefix[i]` sums the windows before `base + i`, from the series' first.
    windows: VecDeque<(u64, u64, f64)>,
    prefix: VecDeque<u128>,
    base: usize,
    /// The first window whose start, and whose end, is not a step of `sum` and `count` yet.
    next_open: usize,
    next_close: usize,
    /// The windows open at the last step, by index, with their readings.
    open: BTreeMap<usize, f64>,
    sum: Steps,
    count: Steps,
    /// The last reading's time (the start of the next reading's window, for [`Window::SincePrevious`]).
    previous: Option<u64>,
}

/// A series' running integrals up to a time: what an NVTX range that began long ago needs of its start.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Prefix {
    /// The time (at or after the series' first step), and the integrals of the values and of the open windows'
    /// count up to it.
    at: u64,
    value: f64,
    count: f64,
    /// The first window ending after the time, and the summed length of the windows before it.
    windows: Option<(usize, u128)>,
}

impl LiveSeries {
    /// A series of which the stream's open told `info`, placed by `window`.
    pub(crate) fn new(window: Window, info: &CounterSeriesInfo) -> LiveSeries {
        let scale = scale_of(info.largest);
        let shape = match window {
            Window::Instant => Shape::Held(Steps::empty(scale)),
            _ => Shape::Windowed(Box::new(Windowed {
                scale,
                windows: VecDeque::new(),
                prefix: VecDeque::from([0]),
                base: 0,
                next_open: 0,
                next_close: 0,
                open: BTreeMap::new(),
                // The sums are of readings divided by `scale` already: at most a few hundred windows' open at once.
                sum: Steps::empty(1.0),
                count: Steps::empty(1.0),
                previous: None,
            })),
        };
        LiveSeries {
            shape,
            window,
            last_taken: None,
            first_sample: info.first,
            last_sample: info.last,
            done: false,
            kept_from: 0,
            late: 0,
        }
    }

    /// The next sample (a finite reading).
    pub(crate) fn take(&mut self, t: u64, value: f64) {
        if self.last_taken.is_some_and(|last| t < last) {
            self.late += 1;
            return;
        }
        self.last_taken = Some(t);
        match &mut self.shape {
            Shape::Held(steps) => steps.push(t, value),
            Shape::Windowed(w) => w.reading(self.window, t, value),
        }
    }

    /// Every sample before `complete_before` has come: the steps they make are placed.
    pub(crate) fn advance(&mut self, complete_before: u64) {
        self.done |= complete_before > self.last_sample;
        if let Shape::Windowed(w) = &mut self.shape {
            // No later reading can open or close a window before this.
            let bound = match (self.done, self.window, self.last_taken) {
                (true, ..) => u64::MAX,
                (false, Window::Before { lag_ns, length_ns }, Some(t)) => t.saturating_sub(lag_ns + length_ns),
                (false, _, Some(t)) => t,
                (false, _, None) => 0,
            };
            w.sweep(bound);
        }
    }

    /// The time up to which the series' integrals are final: executions ending by it can be integrated.
    pub(crate) fn ready(&self) -> u64 {
        if self.done {
            return u64::MAX;
        }
        // Before any step, no step comes before the first sample's (its window's start): nothing to integrate
        // there, the executions ending by then are final at 0.
        let first_step = match self.window {
            Window::Before { lag_ns, length_ns } => self.first_sample.saturating_sub(lag_ns + length_ns),
            _ => self.first_sample,
        };
        match &self.shape {
            Shape::Held(steps) => steps.last().unwrap_or(first_step),
            Shape::Windowed(w) => w.sum.last().unwrap_or(first_step),
        }
    }

    /// The time from which integrals can be taken (the samples before it are dropped).
    pub(crate) fn kept_from(&self) -> u64 {
        self.kept_from
    }

    /// The integrals over every execution of `runs` (all between [`LiveSeries::kept_from`] and
    /// [`LiveSeries::ready`]), as [`Series::integrate`](super::counter_windows::Series::integrate) gives them.
    pub(crate) fn integrate(&self, runs: &Runs) -> Integrals {
        match &self.shape {
            Shape::Held(steps) => {
                let (value, covered_ns) = steps.integral_over(runs);
                Integrals { value, count: 0.0, covered_ns }
            }
            Shape::Windowed(w) => {
                let (value, covered_ns) = w.sum.integral_over(runs);
                let (count, _) = w.count.integral_over(runs);
                Integrals { value, count, covered_ns }
            }
        }
    }

    /// The running integrals up to `t` (at or after [`LiveSeries::kept_from`], by [`LiveSeries::ready`]).
    pub(crate) fn prefix(&self, t: u64) -> Prefix {
        let (steps, count) = match &self.shape {
            Shape::Held(steps) => (steps, None),
            Shape::Windowed(w) => (&w.sum, Some(&w.count)),
        };
        let windows = match &self.shape {
            Shape::Held(_) => None,
            Shape::Windowed(w) => Some(w.meeting_from(t)),
        };
        match steps.span() {
            // Before the first step, the integrals are those at it: nothing.
            Some((first, _)) if t > first => {
                Prefix { at: t, value: steps.at(t), count: count.map_or(0.0, |c| c.at(t)), windows }
            }
            _ => Prefix { at: 0, value: 0.0, count: 0.0, windows },
        }
    }

    /// The integrals over [start, end] (an NVTX range's), `start`'s running integrals taken before
    /// ([`LiveSeries::prefix`]), as [`LiveSeries::integrate`] gives them over the one interval.
    pub(crate) fn between(&self, start: &Prefix, end: u64) -> Integrals {
        let (steps, count) = match &self.shape {
            Shape::Held(steps) => (steps, None),
            Shape::Windowed(w) => (&w.sum, Some(&w.count)),
        };
        let Some((first, last)) = steps.span() else { return Integrals::default() };
        let (a, b) = (start.at.max(first), end.min(last));
        if b <= a {
            return Integrals::default();
        }
        // At the first step the running integrals are 0, as a start before it has them.
        let value = steps.at(b) - start.value;
        let count = count.map_or(0.0, |c| c.at(b) - start.count);
        Integrals { value, count, covered_ns: b - a }
    }

    /// The windows meeting [a, b] (by global index, with the summed length of the windows before each end);
    /// `None` for a series held from each reading.
    pub(crate) fn meeting(&self, a: u64, b: u64) -> Option<((usize, u128), (usize, u128))> {
        let Shape::Windowed(w) = &self.shape else { return None };
        Some((w.meeting_from(a), w.meeting_to(b)))
    }

    /// The windows meeting an interval from `start` (its [`Prefix`]) to `end`.
    pub(crate) fn meeting_since(&self, start: &Prefix, end: u64) -> Option<((usize, u128), (usize, u128))> {
        let Shape::Windowed(w) = &self.shape else { return None };
        Some((start.windows?, w.meeting_to(end)))
    }

    /// Samples and windows before `t` dropped (but what holds at `t`): integrals from `t` on can still be taken.
    pub(crate) fn keep_from(&mut self, t: u64) {
        let t = t.min(self.ready());
        if t <= self.kept_from {
            return;
        }
        self.kept_from = t;
        match &mut self.shape {
            Shape::Held(steps) => steps.keep_from(t),
            Shape::Windowed(w) => {
                w.sum.keep_from(t);
                w.count.keep_from(t);
                while w.base < w.next_close && w.windows.front().is_some_and(|x| x.1 <= t) {
                    w.windows.pop_front();
                    w.prefix.pop_front();
                    w.base += 1;
                }
            }
        }
    }

    /// The steps and windows held.
    #[cfg(test)]
    pub(crate) fn held(&self) -> usize {
        match &self.shape {
            Shape::Held(steps) => steps.len(),
            Shape::Windowed(w) => w.sum.len() + w.count.len() + w.windows.len(),
        }
    }

    /// The first and last step: the span the series covers.
    pub(crate) fn span(&self) -> Option<(u64, u64)> {
        match &self.shape {
            Shape::Held(steps) => steps.span(),
            Shape::Windowed(w) => w.count.span(),
        }
    }

    /// What the series gives over executions of which `sums` are the integrals and `meeting` the summed length of
    /// the windows meeting them, as [`Series::place`](super::counter_windows::Series::place) gives it.
    pub(crate) fn place(&self, sums: &Integrals, meeting: u128) -> Option<Placed> {
        match &self.shape {
            Shape::Held(steps) => steps.average(sums.value, sums.covered_ns).map(|(value, covered_ns)| Placed {
                value,
                covered_ns,
                own_share: 1.0,
            }),
            Shape::Windowed(w) => {
                let (sum_avg, covered_ns) = w.sum.average(sums.value, sums.covered_ns)?;
                let (count_avg, _) = w.count.average(sums.count, sums.covered_ns)?;
                if count_avg <= 0.0 {
                    return None;
                }
                let filled = count_avg * covered_ns as f64;
                let own_share = if meeting > 0 { (filled / meeting as f64).min(1.0) } else { 0.0 };
                Some(Placed { value: sum_avg / count_avg * w.scale, covered_ns, own_share })
            }
        }
    }
}

impl Windowed {
    /// A reading at `t`: its window, if it has a length, after the others.
    fn reading(&mut self, window: Window, t: u64, value: f64) {
        let span = match window {
            Window::Before { lag_ns, length_ns } => {
                let end = t.saturating_sub(lag_ns);
                Some((end.saturating_sub(length_ns), end))
            }
            // The first reading's window is not known (no earlier reading): it is left out.
            _ => self.previous.map(|p| (p, t)),
        };
        self.previous = Some(t);
        if let Some((start, end)) = span.filter(|(s, e)| e > s) {
            let before = *self.prefix.back().unwrap_or(&0);
            self.windows.push_back((start, end, value / self.scale));
            self.prefix.push_back(before + u128::from(end - start));
        }
    }

    /// Every window start and end before `bound` made a step: the sum of the open windows' readings and their
    /// count, from each edge's time, as [`Series::new`](super::counter_windows::Series::new) sweeps them.
    fn sweep(&mut self, bound: u64) {
        loop {
            let opens = self.windows.get(self.next_open - self.base).map(|w| w.0);
            let closes = self.windows.get(self.next_close - self.base).map(|w| w.1);
            let Some(x) = [opens, closes].into_iter().flatten().min().filter(|&x| x < bound || bound == u64::MAX)
            else {
                return;
            };
            while self.windows.get(self.next_close - self.base).is_some_and(|w| w.1 == x) {
                self.open.remove(&self.next_close);
                self.next_close += 1;
            }
            while let Some(w) = self.windows.get(self.next_open - self.base).filter(|w| w.0 == x) {
                self.open.insert(self.next_open, w.2);
                self.next_open += 1;
            }
            self.sum.push(x, self.open.values().sum::<f64>());
            self.count.push(x, self.open.len() as f64);
        }
    }

    /// The first window ending after `a`, and the windows' length before it.
    fn meeting_from(&self, a: u64) -> (usize, u128) {
        let i = self.windows.partition_point(|w| w.1 <= a);
        (self.base + i, self.prefix[i])
    }

    /// The first window starting at or after `b`, and the windows' length before it.
    fn meeting_to(&self, b: u64) -> (usize, u128) {
        let i = self.windows.partition_point(|w| w.0 < b);
        (self.base + i, self.prefix[i])
    }
}
