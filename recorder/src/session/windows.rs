//! When recording was on. Counter sources (NVML, PM sampling) sample all along, since starting and stopping them
//! costs set-up on the GPU; their samples are kept only where they fall inside a window of recording, so that a
//! capture range or a `ctl stop` means the same for counters as for activity (unless the user asks for the whole
//! run with `--counters-whole-run`).

use std::sync::Mutex;

use cutr_format::CounterSamples;

/// The most closed windows kept: a capture range hit every step for hours would otherwise grow the list without
/// end. Counter samples arrive within a flush period of being taken, so only the latest windows are ever asked
/// about; a sample older than every window kept is left out (counted as outside, as any sample outside is).
pub(super) const MAX_WINDOWS: usize = 4096;

/// Windows of recording, in CUPTI's time: closed ones and the one open now.
pub(super) struct Windows {
    state: Mutex<State>,
}

struct State {
    closed: Vec<(u64, u64)>,
    open: Option<u64>,
}

impl Windows {
    /// `open_since`: the start of a window open from the beginning (recording on at start).
    pub(super) fn new(open_since: Option<u64>) -> Windows {
        Windows { state: Mutex::new(State { closed: Vec::new(), open: open_since }) }
    }

    /// Recording turned on at `t`.
    pub(super) fn open(&self, t: u64) {
        let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        s.open.get_or_insert(t);
    }

    /// Recording turned off at `t`.
    pub(super) fn close(&self, t: u64) {
        let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(from) = s.open.take() {
            if s.closed.len() >= MAX_WINDOWS {
                let excess = s.closed.len() + 1 - MAX_WINDOWS;
                s.closed.drain(..excess);
            }
            s.closed.push((from, t.max(from)));
        }
    }

    /// Whether the interval `[start, end]` lies inside one window.
    fn contains(s: &State, start: u64, end: u64) -> bool {
        s.open.is_some_and(|from| start >= from) || s.closed.iter().any(|&(from, to)| start >= from && end <= to)
    }

    /// Keeps the samples that lie inside a window; returns how many were left out.
    pub(super) fn retain(&self, c: &mut CounterSamples) -> usize {
        let s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let keep: Vec<bool> = c.t_start.iter().zip(&c.t_end).map(|(&a, &b)| Self::contains(&s, a, b)).collect();
        drop(s);
        let left_out = keep.iter().filter(|k| !**k).count();
        if left_out == 0 {
            return 0;
        }
        let kept = |v: &[u64]| v.iter().zip(&keep).filter(|(_, k)| **k).map(|(t, _)| *t).collect::<Vec<u64>>();
        c.t_start = kept(&c.t_start);
        c.t_end = kept(&c.t_end);
        let m = c.metrics.len().max(1);
        c.values =
            c.values.chunks(m).zip(&keep).filter(|(_, k)| **k).flat_map(|(row, _)| row.iter().copied()).collect();
        left_out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn samples(times: &[(u64, u64)]) -> CounterSamples {
        CounterSamples {
            source: "nvml".into(),
            device: 0,
            metrics: vec![Default::default(), Default::default()],
            t_start: times.iter().map(|t| t.0).collect(),
            t_end: times.iter().map(|t| t.1).collect(),
            values: (0..times.len() * 2).map(|v| v as f64).collect(),
            lost_samples: 0,
        }
    }

    #[test]
    fn samples_outside_every_window_are_left_out_with_their_values() {
        let w = Windows::new(None);
        w.open(100);
        w.close(200);
        w.open(300);
        let mut c = samples(&[(50, 60), (100, 150), (190, 210), (250, 260), (300, 400), (1000, 2000)]);
        assert_eq!(w.retain(&mut c), 3);
        assert_eq!(c.t_start, [100, 300, 1000]);
        assert_eq!(c.t_end, [150, 400, 2000]);
        assert_eq!(c.values, [2.0, 3.0, 8.0, 9.0, 10.0, 11.0]);
        w.close(500);
        let mut late = samples(&[(450, 500), (480, 520)]);
        assert_eq!(w.retain(&mut late), 1);
        assert_eq!(late.t_start, [450]);
    }

    #[test]
    fn a_window_open_from_the_start_keeps_everything_until_closed() {
        let w = Windows::new(Some(0));
        let mut c = samples(&[(0, 1), (5, 10)]);
        assert_eq!(w.retain(&mut c), 0);
        assert_eq!(c.len(), 2);
    }

    /// A range toggled every step for hours keeps the latest windows only; a sample in them is still kept.
    #[test]
    fn the_latest_windows_are_kept() {
        let w = Windows::new(None);
        for i in 0..100_000u64 {
            w.open(i * 10);
            w.close(i * 10 + 5);
        }
        assert_eq!(w.state.lock().unwrap().closed.len(), MAX_WINDOWS);
        assert_eq!(w.state.lock().unwrap().closed[0], ((100_000 - 4096) * 10, (100_000 - 4096) * 10 + 5));
        let mut c = samples(&[(999_990, 999_995), (10, 15)]);
        assert_eq!(w.retain(&mut c), 1);
        assert_eq!(c.t_start, [999_990]);
    }
}
