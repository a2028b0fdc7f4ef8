//! The `counters` section: each counter series (NVML's device metrics, PM sampling's hardware counters) averaged
//! over the time each kernel ran, each kind of copy and memset, and each NVTX range, time-weighted. A reading is
//! placed where it belongs ([`counter_windows`](super::counter_windows)): PM sampling's and NVML's instantaneous
//! values hold from their sample until the next, NVML's averages (power, utilization, PCIe and NVLink rates) are
//! spread over the window they average. The average over an interval is the integral of the placed series over
//! the part of the interval the readings cover, divided by that part. Ops running at once on a device each get the
//! readings of the whole time they ran (concurrent kernels share them); a range gets the series of every device of
//! its process.
//!
//! The cost is bounded by the report, not by kernels x series: executions are grouped by name first
//! ([`counter_math::Runs`]), each (name, series) pair costs the smaller of its executions and its samples, groups
//! are ranked by time before any average is computed, and a report stops at [`MAX_ROWS`] rows (20,000 metrics
//! over 100 kernels would be 2,000,000), saying how many groups it left out.

use std::collections::{BTreeMap, HashMap};

use cutr_model::{NameId, ProcId, Trace, describe};
use serde::Serialize;

use super::counter_math::Runs;
use super::counter_windows::{Placed, Series, Window, window_of};

/// The most rows a `counters` section holds (real recordings have tens of series over hundreds of names).
pub const MAX_ROWS: usize = 10_000;

/// One series' time-weighted average over every execution of a kernel (or copy kind, or every instance of a range).
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct CounterAverage {
    /// `kernel`, `copy` (memcpys and memsets, by kind) or `nvtx`.
    pub over: &'static str,
    pub name: String,
    pub device: u32,
    /// The series' name, its unit in parentheses (`power (W)`).
    pub series: String,
    /// The time-weighted average over the covered time.
    pub average: f64,
    /// Time of the executions the series' readings cover, and their whole time.
    pub covered_ns: u64,
    pub total_ns: u64,
    /// What each reading averages (`average over the last 1000 ms`), `None` (left out) for a reading of one instant.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub window: Option<String>,
    /// The share of the windows covering the executions that the executions fill (1 for an instant reading):
    /// under one half the average is mostly of other time, the level around the op rather than its own.
    pub own_share: f64,
}

/// Below this share of its readings' windows an average is reported as the windows' (the level around the op).
pub const OWN_SHARE: f64 = 0.5;

/// The section, and what it left out.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct CounterSection {
    pub rows: Vec<CounterAverage>,
    /// (kernel, copy or range, device) groups with series over them whose rows are not in the report (past
    /// [`MAX_ROWS`]), the first of them perhaps in part.
    pub groups_not_shown: usize,
    /// Averages that came out as no number (an infinite or NaN reading the model let through), named.
    pub not_finite: Vec<String>,
    /// Counter series recorded, by (file, device), when none covers a kernel, copy or range: no row says so.
    pub series_over_nothing: usize,
}

/// A (file, device)'s series, by name, with what each reading averages.
pub(super) type SeriesList = [(NameId, Window, Series)];

/// Every (file, device)'s series.
pub(super) type SeriesByDevice = HashMap<(ProcId, u32), Vec<(NameId, Window, Series)>>;

/// A memcpy's kind: (copy kind, source memory kind, destination memory kind).
type CopyKind = (u8, u8, u8);

/// Per process: its executions of a name, and the series they are averaged against.
type Parts<'s> = Vec<(Runs, &'s SeriesList)>;

/// Executions of one name on one device (of every process with series there), `over` a kernel, copy or range;
/// `P` holds a process's part: its executions (loaded) or their sums (streamed).
pub(super) struct Group<P> {
    pub over: &'static str,
    pub name: String,
    pub device: u32,
    /// Per process (a name's ids apart): its part, and the series it is averaged against.
    pub parts: Vec<P>,
    /// The executions' whole time (saturating).
    pub total: u64,
}

/// The most rows `diff` compares per side: every row of a real recording (8 GPUs x 100 kernels x 25 series is
/// 20,000), a bounded memory for a hostile one (20,000 metrics x 193 kernels and ranges made 3.9 million rows,
/// 789 MB and 7.3 s).
pub const MAX_DIFF_ROWS: usize = 100_000;

/// The section as `diff` compares it, at most [`MAX_DIFF_ROWS`] rows (`top` keeps the names with the most time),
/// and how many (name, device) groups did not fit.
pub(crate) fn counters(t: &Trace, top: Option<usize>) -> (Vec<CounterAverage>, usize) {
    let s = section(t, top, MAX_DIFF_ROWS);
    (s.rows, s.groups_not_shown)
}

/// The section of the `stats` report: at most `max_rows` rows.
pub(crate) fn section(t: &Trace, top: Option<usize>, max_rows: usize) -> CounterSection {
    use cutr_model::timing::timed;
    let series = timed("counter series", || series(t));
    if series.is_empty() {
        return CounterSection::default();
    }
    let groups = timed("counter groups", || groups(t, &series));
    let rows_of = |g: &Group<(Runs, &SeriesList)>, limit: usize| {
        let parts = g.parts.iter().map(|(runs, list)| {
            (runs.total, list.iter().filter_map(|(id, window, series)| Some((*id, *window, series.over(runs)?))))
        });
        merge_rows(t, g, parts, limit)
    };
    cut(groups, top, max_rows, series.values().map(Vec::len).sum(), rows_of)
}

/// The section of `groups` (ranked here, `top` kept), at most `max_rows` rows; `rows_of` gives a group's first
/// rows, at most its `limit`.
pub(super) fn cut<P>(
    mut groups: Vec<Group<P>>,
    top: Option<usize>,
    max_rows: usize,
    series_count: usize,
    rows_of: impl Fn(&Group<P>, usize) -> Vec<CounterAverage>,
) -> CounterSection {
    cutr_model::timing::timed("counter groups ranked", || rank(&mut groups, top));
    let mut out = CounterSection::default();
    for (i, g) in groups.iter().enumerate() {
        if out.rows.len() >= max_rows {
            out.groups_not_shown = groups.len() - i;
            break;
        }
        // One more row than fits tells a group cut short from one that just fits.
        let room = max_rows - out.rows.len();
        let mut rows = rows_of(g, room.saturating_add(1));
        if rows.len() > room {
            rows.truncate(room);
            out.groups_not_shown = groups.len() - i;
        }
        out.rows.append(&mut rows);
        if out.groups_not_shown > 0 {
            break;
        }
    }
    if out.rows.is_empty() {
        out.series_over_nothing = series_count;
    }
    out.not_finite = out
        .rows
        .iter()
        .filter(|r| !r.average.is_finite())
        .map(|r| format!("{} over {} {} on GPU {}", r.series, r.over, r.name, r.device))
        .collect();
    out
}

impl CounterSection {
    /// What the report warns of: averages that are no number, series over no op.
    pub(crate) fn warnings(&self) -> Vec<String> {
        let mut warnings: Vec<String> =
            self.not_finite.iter().map(|what| format!("the average of {what} is not a number")).collect();
        if self.series_over_nothing > 0 {
            // A part of a --split recording holds the records delivered while it was written: the kernels that ran
            // in its samples' time can be in the next part.
            warnings.push(format!(
                "{} counter series were recorded, but no kernel, copy or NVTX range ran while their samples were \
                 taken: no averages (read a --split recording's parts together)",
                self.series_over_nothing
            ));
        }
        warnings
    }
}

/// One series of one (file, device) placed over any intervals (an idle stretch, a phase): its average there, as
/// a row of the section would give it over ops that ran then (`over` = `interval`); `None` where no reading
/// covers them or the series is not recorded there.
pub fn average_over_intervals(
    t: &Trace,
    (proc, device): (ProcId, u32),
    series_name: &str,
    intervals: Vec<(u64, u64)>,
) -> Option<CounterAverage> {
    let all = series(t);
    let (id, window, placed) = all.get(&(proc, device))?.iter().find(|(id, ..)| t.names.get(*id) == series_name)?;
    let runs = Runs::new(intervals);
    let p = placed.over(&runs)?;
    Some(CounterAverage {
        over: "interval",
        name: String::new(),
        device,
        series: t.names.get(*id).to_string(),
        average: p.value,
        covered_ns: p.covered_ns,
        total_ns: runs.total,
        window: window.describe(),
        own_share: p.own_share,
    })
}

/// Series of counter samples per (file, device) (the PC-sample stall rates are `source`'s), sorted by name. The
/// model keeps each series' samples together in time order, so a series is a run of samples with one key: the
/// runs are sorted by key (a key in two runs is merged), and each series is built from its samples in one pass.
pub(super) fn series(t: &Trace) -> SeriesByDevice {
    let key = |c: &cutr_model::CounterSample| (c.proc, c.device, c.series);
    let mut runs: Vec<&[cutr_model::CounterSample]> = t
        .counters
        .chunk_by(|a, b| key(a) == key(b))
        .filter(|run| !t.names.get(run[0].series).starts_with("PC samples/ms:"))
        .collect();
    runs.sort_by_key(|run| key(&run[0]));
    let mut series: SeriesByDevice = HashMap::new();
    for same in runs.chunk_by(|a, b| key(&a[0]) == key(&b[0])) {
        let mut points: Vec<(u64, f64)> =
            same.iter().flat_map(|run| run.iter()).filter(|c| c.value.is_finite()).map(|c| (c.ts, c.value)).collect();
        if !points.is_sorted_by_key(|x| x.0) {
            points.sort_by_key(|x| x.0);
        }
        let (proc, device, id) = key(&same[0][0]);
        let gpu = t.processes.get(proc.0 as usize).and_then(|p| p.meta.devices.iter().find(|d| d.id == device));
        let window = window_of(t.names.get(id), gpu);
        series.entry((proc, device)).or_default().push((id, window, Series::new(&points, window)));
    }
    for list in series.values_mut() {
        list.sort_unstable_by(|a, b| t.names.get(a.0).cmp(t.names.get(b.0)));
    }
    series
}

/// Kernels and copies by (name, device) on the devices with series, ranges by (name, device) for every device of
/// their process with series; only those whose executions meet some series' readings.
fn groups<'s>(t: &Trace, series: &'s SeriesByDevice) -> Vec<Group<(Runs, &'s SeriesList)>> {
    let hull = hulls(series);
    let mut kernels: HashMap<(NameId, u32, ProcId), Vec<(u64, u64)>> = HashMap::new();
    for k in t.kernels.iter().filter(|k| series.contains_key(&(k.proc, k.device))) {
        kernels.entry((t.display_name_id(k.name), k.device, k.proc)).or_default().push((k.start, k.end));
    }
    let copies = copies(t, series);
    let mut ranges: HashMap<(NameId, ProcId), Vec<(u64, u64)>> = HashMap::new();
    for r in t.ranges.iter().filter(|r| r.closed()) {
        ranges.entry((r.name, r.proc)).or_default().push((r.start, r.end));
    }
    let mut by_key: BTreeMap<(&'static str, String, u32), Parts<'s>> = BTreeMap::new();
    let meets = |runs: &Runs, key: (ProcId, u32)| meets(&hull, key, (runs.first, runs.last));
    let ops = kernels
        .into_iter()
        .map(|((name, device, proc), runs)| ("kernel", t.names.get(name).to_string(), device, proc, runs));
    for (over, name, device, proc, runs) in
        ops.chain(copies.into_iter().map(|((name, device, proc), runs)| ("copy", name, device, proc, runs)))
    {
        let runs = Runs::new(runs);
        if meets(&runs, (proc, device)) {
            by_key.entry((over, name, device)).or_default().push((runs, &series[&(proc, device)]));
        }
    }
    for ((name, proc), runs) in ranges {
        for ((p, device), list) in series.iter().filter(|((p, _), _)| *p == proc) {
            let runs = Runs::new(runs.clone());
            if meets(&runs, (*p, *device)) {
                by_key.entry(("nvtx", t.names.get(name).to_string(), *device)).or_default().push((runs, list));
            }
        }
    }
    by_key
        .into_iter()
        .map(|((over, name, device), parts)| {
            let total = parts.iter().fold(0u64, |t, p| t.saturating_add(p.0.total));
            Group { over, name, device, parts, total }
        })
        .collect()
}

/// The span all of a (file, device)'s series cover together: a group outside it has no row.
pub(super) fn hulls(series: &SeriesByDevice) -> HashMap<(ProcId, u32), (u64, u64)> {
    series
        .iter()
        .map(|(k, list)| {
            let spans = list.iter().filter_map(|(_, _, s)| s.span());
            (*k, spans.fold((u64::MAX, 0), |h, (a, b)| (h.0.min(a), h.1.max(b))))
        })
        .collect()
}

/// Whether executions from `first` to `last` on (file, device) `key` meet the span of its series.
pub(super) fn meets(hulls: &HashMap<(ProcId, u32), (u64, u64)>, key: (ProcId, u32), (first, last): (u64, u64)) -> bool {
    hulls.get(&key).is_some_and(|h| first < h.1 && last > h.0)
}

/// Copies and memsets by (kind's name, device, process): `Memcpy HtoD (Pageable -> Device)`, `Memset (Device)`.
fn copies(t: &Trace, series: &SeriesByDevice) -> HashMap<(String, u32, ProcId), Vec<(u64, u64)>> {
    let mut kinds: HashMap<(CopyKind, u32, ProcId), Vec<(u64, u64)>> = HashMap::new();
    for m in t.memcpys.iter().filter(|m| series.contains_key(&(m.proc, m.device))) {
        kinds.entry(((m.copy_kind, m.src_kind, m.dst_kind), m.device, m.proc)).or_default().push((m.start, m.end));
    }
    let mut sets: HashMap<(u16, u32, ProcId), Vec<(u64, u64)>> = HashMap::new();
    for m in t.memsets.iter().filter(|m| series.contains_key(&(m.proc, m.device))) {
        sets.entry((m.memory_kind, m.device, m.proc)).or_default().push((m.start, m.end));
    }
    let mut out: HashMap<(String, u32, ProcId), Vec<(u64, u64)>> = HashMap::new();
    for (((c, s, d), device, proc), runs) in kinds {
        out.entry((describe::memcpy_name(c, s, d), device, proc)).or_default().extend(runs);
    }
    for ((kind, device, proc), runs) in sets {
        out.entry((describe::memset_name(kind), device, proc)).or_default().extend(runs);
    }
    out
}

/// The order of the kinds of row: kernels, copies, ranges.
fn kind_order(over: &str) -> u8 {
    match over {
        "kernel" => 0,
        "copy" => 1,
        _ => 2,
    }
}

/// Kernels first, then copies, then ranges; by time, then name and device. With `top`, only the `top` names of
/// each kind with the most time (on their busiest device).
fn rank<P>(groups: &mut Vec<Group<P>>, top: Option<usize>) {
    if let Some(n) = top {
        let mut time: BTreeMap<(&str, &str), u64> = BTreeMap::new();
        for g in groups.iter() {
            let e = time.entry((g.over, g.name.as_str())).or_default();
            *e = (*e).max(g.total);
        }
        let mut ranked: Vec<((&str, &str), u64)> = time.into_iter().collect();
        ranked.sort_by(|x, y| y.1.cmp(&x.1).then(x.0.cmp(&y.0)));
        let mut kept: BTreeMap<&str, Vec<String>> = BTreeMap::new();
        for ((over, name), _) in ranked {
            let v = kept.entry(over).or_default();
            if v.len() < n {
                v.push(name.to_string());
            }
        }
        groups.retain(|g| kept.get(g.over).is_some_and(|v| v.contains(&g.name)));
    }
    groups.sort_by(|a, b| {
        kind_order(a.over)
            .cmp(&kind_order(b.over))
            .then(b.total.cmp(&a.total))
            .then_with(|| (&a.name, a.device).cmp(&(&b.name, b.device)))
    });
}

/// A group's first `limit` rows, one per series with samples during its executions, by series name, from each
/// part's whole time and what each of its series gives (by name: only the first `limit` with samples there can be
/// among the first `limit` of all, so the rest are not computed).
pub(super) fn merge_rows<P, S>(
    t: &Trace,
    g: &Group<P>,
    parts: impl Iterator<Item = (u64, S)>,
    limit: usize,
) -> Vec<CounterAverage>
where
    S: Iterator<Item = (NameId, Window, Placed)>,
{
    // Per series: the row so far; files' averages (and own shares) are merged weighted by their cover.
    let mut per_series: BTreeMap<&str, CounterAverage> = BTreeMap::new();
    for (total, placed) in parts {
        for (id, window, p) in placed.take(limit) {
            let e = per_series.entry(t.names.get(id)).or_insert_with(|| CounterAverage {
                over: g.over,
                name: g.name.clone(),
                device: g.device,
                series: t.names.get(id).to_string(),
                window: window.describe(),
                ..Default::default()
            });
            let sum = e.covered_ns.saturating_add(p.covered_ns);
            // A weighted mean of two, never their weighted sum: that could overflow where each is a number.
            let (old, new) = (e.covered_ns as f64 / sum as f64, p.covered_ns as f64 / sum as f64);
            e.average = e.average * old + p.value * new;
            e.own_share = e.own_share * old + p.own_share * new;
            e.covered_ns = sum;
            e.total_ns = e.total_ns.saturating_add(total);
        }
    }
    per_series.into_values().take(limit).collect()
}
