//! Where in time a counter reading belongs. PM sampling's counters and NVML's instantaneous readings (clocks,
//! temperature, throttle reasons) describe the moment they were read: the value holds until the next reading. NVML's
//! other readings are averages over a window that ends at (or before) the reading, and a kernel must get the
//! readings whose windows cover it, not the readings taken while it ran:
//!
//! - `power (W)`: `nvmlDeviceGetPowerUsage`, documented as the average over the last 1 s on Ampere (except GA100,
//!   sm_80) and newer, instantaneous on older GPUs. On `fixtures/counter_workload.cutr` (H100) it climbs from
//!   162 W to 403 W over the 1.0 s after the first copy kernel (1357.8 ms: 183 W, 2257.8 ms: 403 W), the ramp of a
//!   1 s average of a step.
//! - `GPU utilization (%)`, `memory utilization (%)`: `nvmlDeviceGetUtilizationRates`, "percent of time over the
//!   past sample period", documented as between 1/6 s and 1 s by product. On the H100 fixture the readings change
//!   every 100 ms and every phase edge shows up late by the same amounts: memory utilization rises 189-197 ms after
//!   each copy phase starts and falls 288-296 ms after it ends (three of each), GPU utilization rises 197 ms after
//!   the first kernel. So on sm_90 a reading at t is the average over [t - 290 ms, t - 190 ms]; on other GPUs,
//!   never measured, over the longest documented period, [t - 1 s, t].
//! - `PCIe TX/RX`, `NVLink TX/RX` (B/s): the recorder's rates between two readings of NVML's byte counters, so
//!   each reading is the average since the series' previous reading.
//!
//! A windowed series is placed by spreading each reading evenly over its window: an op gets the mean of the
//! readings whose windows cover it, each weighted by how much of the op's time its window covers. That is the
//! step function held from each reading, shifted back over the window, where windows tile (PCIe, NVLink); where
//! they overlap (utilization, power) it is the mean of every reading that saw the op, in proportion to what each saw.
//! Weighting by overlap, rather than taking the first reading whose window ends after the op, uses every reading
//! that saw the op and needs no choice of which one: a 1 ms kernel gets the mean of the ~100 power readings whose
//! 1 s windows hold it. Such a kernel fills 0.1% of each window, so its figure is the level around it: the row
//! says so ([`Placed::own_share`]). On the fixture memory utilization reads 100% for 400 ms of each 600 ms cycle
//! (the 300 ms copy phase and 100 ms of the FMA phase after it), so the FMA kernel keeps about a third wherever the
//! window is put; placed, the copy kernel gets 99.9% and the FMA kernel 34.5% (held from each reading: 35.8% and
//! 96.6%, the reverse).

use cutr_format::Device;

use super::counter_math::{Runs, Steps};

/// The span a reading averages over, relative to its time `t`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Window {
    /// The reading is the value at `t` (held until the next reading).
    Instant,
    /// The average over [t - lag - length, t - lag].
    Before { lag_ns: u64, length_ns: u64 },
    /// The average since the series' previous reading.
    SincePrevious,
}

const MS: u64 = 1_000_000;

/// How a series' readings on `device` are placed: NVML's averaged metrics by the table above, everything else
/// (PM sampling's `PM: ` series, NVML's instantaneous readings, any series this table does not name) at its time.
pub(crate) fn window_of(series: &str, device: Option<&Device>) -> Window {
    let arch = device.map_or((0, 0), |d| (d.compute_major, d.compute_minor));
    match series {
        // Ampere except GA100 (sm_80), and newer: the 1 s average; older: instantaneous.
        "power (W)" if arch > (8, 0) => Window::Before { lag_ns: 0, length_ns: 1000 * MS },
        "GPU utilization (%)" | "memory utilization (%)" if arch.0 == 9 => {
            Window::Before { lag_ns: 190 * MS, length_ns: 100 * MS }
        }
        "GPU utilization (%)" | "memory utilization (%)" => Window::Before { lag_ns: 0, length_ns: 1000 * MS },
        "PCIe TX (B/s)" | "PCIe RX (B/s)" | "NVLink TX (B/s)" | "NVLink RX (B/s)" => Window::SincePrevious,
        _ => Window::Instant,
    }
}

impl Window {
    /// The report's words for it (`avg of 1000 ms`), `None` for an instant.
    pub(crate) fn describe(self) -> Option<String> {
        match self {
            Window::Instant => None,
            Window::Before { lag_ns: 0, length_ns } => Some(format!("average over the last {} ms", length_ns / MS)),
            Window::Before { lag_ns, length_ns } => {
                Some(format!("average over {} ms ending {} ms before the reading", length_ns / MS, lag_ns / MS))
            }
            Window::SincePrevious => Some("average since the previous reading".into()),
        }
    }
}

/// What a series gives over an op's executions.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Placed {
    pub value: f64,
    /// The executions' time the readings cover.
    pub covered_ns: u64,
    /// The share of the windows that cover the executions that the executions fill (1 for an instant reading):
    /// small, the value is the level around the op rather than its own.
    pub own_share: f64,
}

/// A series placed in time.
pub(crate) enum Series {
    /// A value holds from its reading until the next.
    Held(Steps),
    /// Each reading spread over its window: per instant, the sum of the readings whose windows cover it and their
    /// count, as step functions (the sums of readings divided by `scale`, so that no sum of finite readings
    /// overflows); and the windows, by start (their ends are in the same order), with their lengths' prefix sums.
    Windowed { sum: Steps, count: Steps, scale: f64, windows: Vec<(u64, u64)>, length_prefix: Vec<u128> },
}

impl Series {
    /// `points` sorted by time, finite values.
    pub(crate) fn new(points: &[(u64, f64)], window: Window) -> Series {
        let windows: Vec<((u64, u64), f64)> = match window {
            Window::Instant => return Series::Held(Steps::new(points)),
            Window::Before { lag_ns, length_ns } => points
                .iter()
                .map(|&(t, v)| {
                    let end = t.saturating_sub(lag_ns);
                    ((end.saturating_sub(length_ns), end), v)
                })
                .collect(),
            // The first reading's window is not known (no earlier reading): it is left out.
            Window::SincePrevious => points.windows(2).map(|w| ((w[0].0, w[1].0), w[1].1)).collect(),
        };
        // A power of two about the largest reading: dividing by it is exact, and a sum of the (at most a few
        // hundred) open windows' readings stays far from overflowing whatever they are.
        let largest = windows.iter().fold(0f64, |m, w| m.max(w.1.abs()));
        let scale = if largest > 0.0 && largest.is_finite() {
            2f64.powi(largest.log2().floor().min(1023.0) as i32)
        } else {
            1.0
        };
        let windows: Vec<((u64, u64), f64)> =
            windows.into_iter().filter(|w| w.0.1 > w.0.0).map(|(w, v)| (w, v / scale)).collect();
        // The sweep: +value at each window's start, -value at its end. Sums are redone from the open windows'
        // values at each step, not kept by adding and subtracting, so no rounding builds up over a long series.
        let mut edges: Vec<(u64, bool, usize)> =
            windows.iter().enumerate().flat_map(|(i, w)| [(w.0.0, true, i), (w.0.1, false, i)]).collect();
        edges.sort_unstable_by_key(|e| (e.0, e.1));
        let (mut sum_points, mut count_points) = (Vec::new(), Vec::new());
        let mut open: std::collections::BTreeSet<usize> = Default::default();
        for same in edges.chunk_by(|a, b| a.0 == b.0) {
            for &(_, opens, i) in same {
                if opens {
                    open.insert(i);
                } else {
                    open.remove(&i);
                }
            }
            sum_points.push((same[0].0, open.iter().map(|&i| windows[i].1).sum::<f64>()));
            count_points.push((same[0].0, open.len() as f64));
        }
        let mut acc = 0u128;
        let length_prefix = std::iter::once(0)
            .chain(windows.iter().map(|w| {
                acc += (w.0.1 - w.0.0) as u128;
                acc
            }))
            .collect();
        Series::Windowed {
            sum: Steps::new(&sum_points),
            count: Steps::new(&count_points),
            scale,
            windows: windows.into_iter().map(|w| w.0).collect(),
            length_prefix,
        }
    }

    /// First and last instant the series covers.
    pub(crate) fn span(&self) -> Option<(u64, u64)> {
        match self {
            Series::Held(s) => s.span(),
            Series::Windowed { count, .. } => count.span(),
        }
    }

    /// The series over every execution in `runs`; `None` where no reading covers them.
    pub(crate) fn over(&self, runs: &Runs) -> Option<Placed> {
        let meeting = match self {
            Series::Held(_) => 0,
            Series::Windowed { windows, length_prefix, .. } => {
                // Windows meeting the executions: per merged execution interval a run of windows (starts and ends
                // are both in order), runs merged where they touch.
                let mut meeting = 0u128;
                let mut last_end = 0usize;
                for (a, b) in runs.merged() {
                    let from = windows.partition_point(|w| w.1 <= a).max(last_end);
                    let to = windows.partition_point(|w| w.0 < b);
                    if to > from {
                        meeting += length_prefix[to] - length_prefix[from];
                        last_end = to;
                    }
                }
                meeting
            }
        };
        self.place(&self.integrate(runs), meeting)
    }

    /// The integrals [`Series::place`] averages, over every execution in `runs`: sums over executions, so those
    /// of parts of the executions add up to those of all of them ([`Integrals::add`]).
    pub(crate) fn integrate(&self, runs: &Runs) -> Integrals {
        match self {
            Series::Held(s) => {
                let (value, covered_ns) = s.integral_over(runs);
                Integrals { value, count: 0.0, covered_ns }
            }
            Series::Windowed { sum, count, .. } => {
                let (value, covered_ns) = sum.integral_over(runs);
                // The same sample times as `sum`'s: the same covered time.
                let (count, _) = count.integral_over(runs);
                Integrals { value, count, covered_ns }
            }
        }
    }

    /// What the series gives over executions of which `sums` are the integrals and `meeting` the summed length of
    /// the windows meeting them (0 for a held series); `None` where no reading covers them.
    pub(crate) fn place(&self, sums: &Integrals, meeting: u128) -> Option<Placed> {
        match self {
            Series::Held(s) => s.average(sums.value, sums.covered_ns).map(|(value, covered_ns)| Placed {
                value,
                covered_ns,
                own_share: 1.0,
            }),
            Series::Windowed { sum, count, scale, .. } => {
                let (sum_avg, covered_ns) = sum.average(sums.value, sums.covered_ns)?;
                let (count_avg, _) = count.average(sums.count, sums.covered_ns)?;
                if count_avg <= 0.0 {
                    return None;
                }
                let filled = count_avg * covered_ns as f64;
                let own_share = if meeting > 0 { (filled / meeting as f64).min(1.0) } else { 0.0 };
                Some(Placed { value: sum_avg / count_avg * scale, covered_ns, own_share })
            }
        }
    }
}

/// A series' integrals over executions, scaled as its step functions are: of the values (of the windows' summed
/// readings for a windowed series), of the number of windows open (0 for a held series), and the time covered.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub(crate) struct Integrals {
    pub value: f64,
    pub count: f64,
    pub covered_ns: u64,
}

impl Integrals {
    /// Those of more executions added (the covered time saturating, as one sum over them all does).
    pub(crate) fn add(&mut self, more: &Integrals) {
        self.value += more.value;
        self.count += more.count;
        self.covered_ns = self.covered_ns.saturating_add(more.covered_ns);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn device(major: i32, minor: i32) -> Device {
        Device { compute_major: major, compute_minor: minor, ..Default::default() }
    }

    #[test]
    fn windows_follow_the_gpu() {
        let second = Window::Before { lag_ns: 0, length_ns: 1000 * MS };
        assert_eq!(window_of("power (W)", Some(&device(9, 0))), second);
        assert_eq!(window_of("power (W)", Some(&device(8, 6))), second);
        assert_eq!(window_of("power (W)", Some(&device(8, 0))), Window::Instant, "GA100: instantaneous");
        assert_eq!(window_of("power (W)", None), Window::Instant);
        let h100 = Window::Before { lag_ns: 190 * MS, length_ns: 100 * MS };
        assert_eq!(window_of("memory utilization (%)", Some(&device(9, 0))), h100);
        assert_eq!(window_of("GPU utilization (%)", Some(&device(8, 6))), second);
        assert_eq!(window_of("PCIe RX (B/s)", None), Window::SincePrevious);
        assert_eq!(window_of("SM clock (MHz)", Some(&device(9, 0))), Window::Instant);
        assert_eq!(window_of("PM: dram__bytes_read.sum.per_second (byte/second)", None), Window::Instant);
    }

    #[test]
    fn tiling_windows_shift_each_reading_back_over_its_interval() {
        // Rates read at 10, 20, 30: 5 over [10, 20], 7 over [20, 30]; the first reading has no window.
        let s = Series::new(&[(10, 1.0), (20, 5.0), (30, 7.0)], Window::SincePrevious);
        let placed = s.over(&Runs::new(vec![(12, 18)])).unwrap();
        assert_eq!(placed, Placed { value: 5.0, covered_ns: 6, own_share: 0.6 });
        let both = s.over(&Runs::new(vec![(15, 25)])).unwrap();
        assert_eq!(both, Placed { value: 6.0, covered_ns: 10, own_share: 0.5 });
    }

    #[test]
    fn overlapping_windows_weigh_each_reading_by_what_it_saw() {
        // Windows of 100 ending at each reading: [0, 100] reads 10, [50, 150] reads 30, [100, 200] reads 50.
        let s = Series::new(&[(100, 10.0), (150, 30.0), (200, 50.0)], Window::Before { lag_ns: 0, length_ns: 100 });
        // [90, 110] sees 10 for 10 ns (of [0, 100]), 30 for 20, 50 for 10: (100 + 600 + 500) / 40.
        let placed = s.over(&Runs::new(vec![(90, 110)])).unwrap();
        assert_eq!(placed.value, 30.0);
        assert_eq!((placed.covered_ns, placed.own_share), (20, 40.0 / 300.0));
        // Readings of the largest float: their sums would overflow unscaled (and log2 of it rounds to 1024).
        let big = Series::new(&[(100, f64::MAX), (150, f64::MAX)], Window::Before { lag_ns: 0, length_ns: 100 });
        assert_eq!(big.over(&Runs::new(vec![(60, 90)])).unwrap().value, f64::MAX.next_down(), "a number");
        // A lag moves the windows back: the reading at 200 covers [40, 140].
        let late = Series::new(&[(200, 8.0)], Window::Before { lag_ns: 60, length_ns: 100 });
        assert_eq!(late.over(&Runs::new(vec![(0, 50)])).unwrap().value, 8.0);
        assert_eq!(late.over(&Runs::new(vec![(150, 190)])), None, "after the window");
    }
}
