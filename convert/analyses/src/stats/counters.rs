//! The `counters` section: each counter series (NVML's device metrics, PM sampling's hardware counters) averaged
//! over the time each kernel ran, and over each NVTX range, time-weighted. A series' value holds from its sample
//! until the next sample; the average over an interval is the integral of that step function over the part of the
//! interval the samples cover, divided by that part. Kernels running at once on a device each get the samples of
//! the whole time they ran (concurrent kernels share them); a range gets the series of every device of its process.

use std::collections::{BTreeMap, HashMap};

use cutr_model::{NameId, ProcId, Trace};
use serde::Serialize;

/// One series' time-weighted average over every execution of a kernel (or every instance of a range).
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct CounterAverage {
    /// `kernel` or `nvtx`.
    pub over: &'static str,
    pub name: String,
    pub device: u32,
    pub series: String,
    /// The time-weighted average over the covered time.
    pub average: f64,
    /// Time of the executions the series' samples cover, and their whole time.
    pub covered_ns: u64,
    pub total_ns: u64,
}

/// A series as a step function with its running integral.
struct Steps {
    ts: Vec<u64>,
    values: Vec<f64>,
    /// `integral[i]`: the integral from `ts[0]` to `ts[i]`.
    integral: Vec<f64>,
}

impl Steps {
    fn new(points: &[(u64, f64)]) -> Steps {
        let (ts, values): (Vec<u64>, Vec<f64>) = points.iter().copied().unzip();
        let mut integral = Vec::with_capacity(ts.len());
        let mut acc = 0.0;
        for i in 0..ts.len() {
            integral.push(acc);
            if i + 1 < ts.len() {
                acc += values[i] * (ts[i + 1] - ts[i]) as f64;
            }
        }
        Steps { ts, values, integral }
    }

    /// The integral from the first sample to `x` (inside the sampled span).
    fn at(&self, x: u64) -> f64 {
        let i = self.ts.partition_point(|&t| t <= x).saturating_sub(1);
        self.integral[i] + self.values[i] * (x - self.ts[i]) as f64
    }

    /// (integral, covered ns) over [a, b].
    fn over(&self, a: u64, b: u64) -> (f64, u64) {
        let (first, last) = (self.ts[0], self.ts[self.ts.len() - 1]);
        let (a, b) = (a.max(first), b.min(last));
        if b <= a {
            return (0.0, 0);
        }
        (self.at(b) - self.at(a), b - a)
    }
}

/// Sums per (what, name, device, series): integral, covered, total.
type Sums = BTreeMap<(&'static str, String, u32, NameId), (f64, u64, u64)>;

/// The section; `top` keeps the names with the most time (`None`: all).
pub(crate) fn counters(t: &Trace, top: Option<usize>) -> Vec<CounterAverage> {
    // Series of counter samples (the PC-sample stall rates are `source`'s).
    let mut series: HashMap<(ProcId, u32), Vec<(NameId, Steps)>> = HashMap::new();
    {
        let mut points: BTreeMap<(ProcId, u32, NameId), Vec<(u64, f64)>> = BTreeMap::new();
        for c in &t.counters {
            if !t.names.get(c.series).starts_with("PC samples/ms:") {
                points.entry((c.proc, c.device, c.series)).or_default().push((c.ts, c.value));
            }
        }
        for ((proc, device, id), mut p) in points {
            p.sort_by_key(|x| x.0);
            series.entry((proc, device)).or_default().push((id, Steps::new(&p)));
        }
    }
    if series.is_empty() {
        return Vec::new();
    }
    let mut sums: Sums = BTreeMap::new();
    let mut add = |what: &'static str, name: &str, device: u32, id: NameId, (a, b): (u64, u64), s: &Steps| {
        let (integral, covered) = s.over(a, b);
        let e = sums.entry((what, name.to_string(), device, id)).or_default();
        e.0 += integral;
        e.1 += covered;
        e.2 += b.saturating_sub(a);
    };
    for k in &t.kernels {
        for (id, s) in series.get(&(k.proc, k.device)).into_iter().flatten() {
            add("kernel", t.kernel_name(k), k.device, *id, (k.start, k.end), s);
        }
    }
    for r in t.ranges.iter().filter(|r| r.closed()) {
        for ((proc, device), list) in &series {
            if *proc == r.proc {
                for (id, s) in list {
                    add("nvtx", t.names.get(r.name), *device, *id, (r.start, r.end), s);
                }
            }
        }
    }
    let mut out: Vec<CounterAverage> = sums
        .into_iter()
        .filter(|(_, (_, covered, _))| *covered > 0)
        .map(|((over, name, device, id), (integral, covered, total))| CounterAverage {
            over,
            name,
            device,
            series: t.names.get(id).to_string(),
            average: integral / covered as f64,
            covered_ns: covered,
            total_ns: total,
        })
        .collect();
    if let Some(n) = top {
        // The names with the most time, per kind.
        let mut time: BTreeMap<(&str, &str), u64> = BTreeMap::new();
        for a in &out {
            let e = time.entry((a.over, a.name.as_str())).or_default();
            *e = (*e).max(a.total_ns);
        }
        let mut ranked: Vec<((&str, &str), u64)> = time.into_iter().collect();
        ranked.sort_by(|x, y| y.1.cmp(&x.1).then(x.0.cmp(&y.0)));
        let keep: std::collections::HashSet<(String, String)> = ranked
            .iter()
            .fold(BTreeMap::<&str, Vec<&str>>::new(), |mut m, ((over, name), _)| {
                let v = m.entry(over).or_default();
                if v.len() < n {
                    v.push(name);
                }
                m
            })
            .into_iter()
            .flat_map(|(over, names)| names.into_iter().map(move |n| (over.to_string(), n.to_string())))
            .collect();
        out.retain(|a| keep.contains(&(a.over.to_string(), a.name.clone())));
    }
    // Kernels first, then ranges; by time, then name, device, series.
    out.sort_by(|a, b| {
        (b.over == "kernel")
            .cmp(&(a.over == "kernel"))
            .then(b.total_ns.cmp(&a.total_ns))
            .then_with(|| (&a.name, a.device, &a.series).cmp(&(&b.name, b.device, &b.series)))
    });
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_step_function_is_averaged_over_the_part_the_samples_cover() {
        // 10 from 100 to 200, 30 from 200 to 300, last sample at 300.
        let s = Steps::new(&[(100, 10.0), (200, 30.0), (300, 5.0)]);
        assert_eq!(s.over(150, 250), (10.0 * 50.0 + 30.0 * 50.0, 100));
        assert_eq!(s.over(0, 1000), (10.0 * 100.0 + 30.0 * 100.0, 200), "clamped to the sampled span");
        assert_eq!(s.over(400, 500), (0.0, 0));
    }
}
