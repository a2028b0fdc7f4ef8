//! The streamed counters section over hand-made batches against the loaded section of the same rows: series held
//! from each reading, spread over the second before it and over the time since the previous one; kernels every
//! millisecond; short NVTX ranges and one that spans the whole run, which only the running integrals noted at its
//! start can average once the series have dropped the samples there. The series hold a few chunks of samples at
//! a time, not the run.

use cutr_model::counters::{CounterSample, CounterSeriesInfo};
use cutr_model::stream::Batch;
use cutr_model::{Kernel, NvtxRange, ProcId, Trace};

use super::counters::{MAX_ROWS, section};
use super::stream_counters::StreamedCounters;

const MS: u64 = 1_000_000;
/// Samples every 10 ms from 2 s to 12 s; the stream's windows 50 ms apart, the samples' chunks 200 ms apart.
const FIRST: u64 = 2_000 * MS;
const LAST: u64 = 12_000 * MS;
const WINDOW: u64 = 50 * MS;
const CHUNK: u64 = 200 * MS;
const SERIES: [&str; 3] = ["SM clock (MHz)", "GPU utilization (%)", "PCIe TX (B/s)"];

fn samples(t: &mut Trace) -> Vec<CounterSample> {
    let ids: Vec<_> = SERIES.iter().map(|s| t.names.intern(s)).collect();
    let mut out = Vec::new();
    for (j, &series) in ids.iter().enumerate() {
        for (i, ts) in (FIRST..=LAST).step_by(10 * MS as usize).enumerate() {
            let value = ((i * 37 + j * 11) % 97) as f64 + 0.25;
            out.push(CounterSample { proc: ProcId(0), device: 0, series, ts, value });
        }
    }
    out
}

/// Kernels of 0.4 ms every millisecond from 1.5 s to 12.5 s (some before the series, some after), NVTX ranges of
/// 30 ms every 100 ms, and one from 1.9 s to 12.3 s.
fn rows(t: &mut Trace) -> (Vec<Kernel>, Vec<NvtxRange>) {
    let (kernel, step, run) = (t.names.intern("gemm"), t.names.intern("step"), t.names.intern("run"));
    let kernels = (1_500..12_500u64)
        .map(|i| Kernel { name: kernel, start: i * MS, end: i * MS + 400_000, ..Default::default() })
        .collect();
    let range = |name, start, end| NvtxRange {
        proc: ProcId(0),
        start,
        end,
        pid: 1,
        tid: 1,
        name,
        domain: cutr_model::NameId::EMPTY,
        id: 0,
        depth: 0,
        parent: NvtxRange::NO_PARENT,
    };
    let mut ranges: Vec<NvtxRange> = (15..125u64).map(|i| range(step, i * 100 * MS, i * 100 * MS + 30 * MS)).collect();
    ranges.push(range(run, 1_900 * MS, 12_300 * MS));
    (kernels, ranges)
}

fn info(all: &[CounterSample]) -> Vec<CounterSeriesInfo> {
    let mut out: Vec<CounterSeriesInfo> = Vec::new();
    for s in all {
        match out.iter_mut().find(|i| i.series == s.series) {
            Some(i) => {
                i.last = i.last.max(s.ts);
                i.samples += 1;
                i.largest = i.largest.max(s.value.abs());
            }
            None => out.push(CounterSeriesInfo {
                proc: s.proc,
                device: s.device,
                series: s.series,
                first: s.ts,
                last: s.ts,
                samples: 1,
                largest: s.value.abs(),
            }),
        }
    }
    out
}

#[test]
fn a_run_long_range_and_every_kernel_average_as_loaded_while_the_series_hold_a_few_chunks() {
    let mut t = Trace::default();
    let all = samples(&mut t);
    let (kernels, ranges) = rows(&mut t);
    let mut loaded = Trace::default();
    loaded.names = t.names.clone();
    (loaded.counters, loaded.kernels, loaded.ranges) = (all.clone(), kernels.clone(), ranges.clone());
    loaded.counters.sort_by_key(|s| (s.device, s.series, s.ts));
    let whole = section(&loaded, None, MAX_ROWS);
    assert_eq!(whole.rows.len(), 3 * 3, "gemm, step and run over 3 series");

    t.counter_series = info(&all);
    let mut fold = StreamedCounters::new(1 << 20);
    let (mut held_most, mut waiting_most, mut delivered) = (0, 0, 0);
    for w in 0..(13_000 * MS / WINDOW) {
        let (from, to) = (w * WINDOW, (w + 1) * WINDOW);
        let last = to >= 13_000 * MS;
        // The chunks whose first sample is before the next window's start.
        let chunk_end = if last { u64::MAX } else { to.div_ceil(CHUNK) * CHUNK };
        let counters: Vec<CounterSample> =
            all.iter().filter(|s| s.ts >= delivered && s.ts < chunk_end).copied().collect();
        delivered = delivered.max(chunk_end);
        let b = Batch {
            kernels: kernels.iter().filter(|k| k.start >= from && k.start < to).copied().collect(),
            ranges: ranges.iter().filter(|r| r.end >= from && r.end < to).copied().collect(),
            range_starts: ranges
                .iter()
                .filter(|r| r.start >= from && r.start < to)
                .map(|r| (r.proc, r.start))
                .collect(),
            counters,
            counters_complete_before: if last { u64::MAX } else { chunk_end },
            next_start: (!last).then_some(to),
            ..Default::default()
        };
        fold.add(&t, &b);
        let (held, waiting) = fold.held();
        (held_most, waiting_most) = (held_most.max(held), waiting_most.max(waiting));
        if last {
            break;
        }
    }
    assert_eq!(fold.warning(), None);
    let streamed = fold.section(&t, None, MAX_ROWS);
    assert_eq!(streamed.rows.len(), whole.rows.len());
    for (a, b) in whole.rows.iter().zip(&streamed.rows) {
        assert_eq!(
            (a.over, &a.name, &a.series, a.covered_ns, a.total_ns),
            (b.over, &b.name, &b.series, b.covered_ns, b.total_ns)
        );
        let close = |x: f64, y: f64| (x - y).abs() <= 1e-12 * x.abs().max(y.abs());
        assert!(close(a.average, b.average) && close(a.own_share, b.own_share), "{a:?}\n{b:?}");
    }
    // 3,003 samples; the 1 s windows of utilization hold ~100 readings open at once, and a kernel waits for the
    // readings of the second after it (their windows reach back over it): a second of kernels, not the run's 11,000.
    assert_eq!((held_most, waiting_most), (HELD_MOST, WAITING_MOST));
}

/// Steps and windows held at once (of 3,003 samples and 2,001 windows), and executions waiting at once.
const HELD_MOST: usize = 508;
const WAITING_MOST: usize = 1_030;
