//! Shared helpers of the benchmarks: timing with interleaved repetitions and medians.

use std::time::Instant;

/// Runs each closure `reps` times, interleaved (A B A B ...), and returns each one's median seconds.
pub fn interleaved_medians(reps: usize, fs: &mut [&mut dyn FnMut()]) -> Vec<f64> {
    let mut times: Vec<Vec<f64>> = vec![Vec::with_capacity(reps); fs.len()];
    for _ in 0..reps {
        for (i, f) in fs.iter_mut().enumerate() {
            let t = Instant::now();
            f();
            times[i].push(t.elapsed().as_secs_f64());
        }
    }
    times.into_iter().map(median).collect()
}

pub fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let n = v.len();
    if n == 0 {
        return f64::NAN;
    }
    if n % 2 == 1 { v[n / 2] } else { (v[n / 2 - 1] + v[n / 2]) / 2.0 }
}

/// Peak resident set size of this process so far, in bytes (Linux `VmHWM`).
pub fn peak_rss_bytes() -> Option<u64> {
    let s = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = s.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}
