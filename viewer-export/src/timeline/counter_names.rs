//! Readable names and units of counter series for the viewers. The model names a series by its source's own
//! metric and unit (`PM: sm__inst_executed_realtime.avg.pct_of_peak_sustained_elapsed (percent)`, `power (W)`,
//! `PC samples/ms: long_scoreboard`): exact, but too long for a viewer's track-name column, which cuts the unit
//! off. Here each series the recorder can produce gets a short name in the style of Nsight Systems' GPU metrics
//! rows (`SM Issue`), its unit as viewers show it (`%`), and its place in a GPU's block of metric tracks
//! ([`MetricGroup`], then the order of `KNOWN`); any other series gets a readable form of its own name. The
//! model's name stays the series' identity: `stats` and Parquet print it, and the viewers keep it beside the
//! short one (a Perfetto track's description, a Chrome counter's series).

use std::borrow::Cow;

/// What a counter's values measure: one of Perfetto's built-in units where one fits (the viewer then formats
/// the values itself: KiB, MiB...), else a unit's name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Unit {
    Bytes,
    Nanoseconds,
    /// A plain number: what a series without a unit is taken to be.
    Count,
    Named(Cow<'static, str>),
}

impl Unit {
    /// The unit as text: `bytes`, `ns`, `count`, or its name.
    pub fn label(&self) -> &str {
        match self {
            Unit::Bytes => "bytes",
            Unit::Nanoseconds => "ns",
            Unit::Count => "count",
            Unit::Named(n) => n,
        }
    }
}

/// The blocks of a GPU's metric tracks, in the order they are shown: is the GPU busy, how its SMs are used, its
/// memory, the links to other devices, power and clocks, then PC sampling's stall rates and the rest.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum MetricGroup {
    Utilization,
    Sm,
    Memory,
    Interconnect,
    PowerAndClocks,
    Stalls,
    Other,
}

/// A series as a viewer shows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CounterName {
    /// Short (at most 24 characters for every known series), without the unit.
    pub name: String,
    pub unit: Unit,
    pub group: MetricGroup,
    /// Place in `KNOWN` (`u16::MAX`: not in it).
    rank: u16,
}

impl CounterName {
    /// Where the series' track goes among its GPU's metric tracks: by group, then in `KNOWN`'s order, then
    /// by name.
    pub fn order_key(&self) -> (MetricGroup, u16, &str) {
        (self.group, self.rank, &self.name)
    }
}

/// The name of a Chrome JSON counter: the short name with its unit (`SM Issue (%)`).
pub fn with_unit(name: &str, unit: &Unit) -> String {
    format!("{name} ({})", unit.label())
}

/// Where a known series comes from, which says how its name in the model is spelled.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Source {
    /// PM sampling: the metric's counter (`dram__bytes_read`), whatever its rollup; the recorder asks for a rate
    /// (`.sum.per_second`) or a share of the peak (`.avg.pct_of_peak_sustained_elapsed`), by what the chip has.
    Pm(&'static str),
    /// NVML, or the recorder itself: the series' name without its unit.
    Named(&'static str),
}

/// A known series: where it comes from, its short name, its unit when the recording gives none, its group.
struct Known {
    source: Source,
    name: &'static str,
    /// For series recorded without a unit (NVML's throttle flags, the recording mark): 1 or 0.
    flag: bool,
    group: MetricGroup,
}

const fn pm(metric: &'static str, name: &'static str, group: MetricGroup) -> Known {
    Known { source: Source::Pm(metric), name, flag: false, group }
}

const fn named(series: &'static str, name: &'static str, group: MetricGroup) -> Known {
    Known { source: Source::Named(series), name, flag: false, group }
}

const fn flag(series: &'static str, name: &'static str, group: MetricGroup) -> Known {
    Known { source: Source::Named(series), name, flag: true, group }
}

/// Every series the recorder produces (`recorder/src/counters/`: PM sampling's default metrics and their
/// alternatives, NVML's metrics, the `recording` mark), in the order shown within each group. PM sampling
/// counts the NVLink links' raw bytes and NVML their payload, and PM sampling names PCIe traffic read and write
/// where NVML names it RX and TX: the names keep the two sources apart.
const KNOWN: &[Known] = &[
    pm("gr__cycles_active", "GR Active", MetricGroup::Utilization),
    named("GPU utilization", "GPU Utilization", MetricGroup::Utilization),
    named("memory utilization", "Memory Utilization", MetricGroup::Utilization),
    pm("sm__cycles_active", "SM Active", MetricGroup::Sm),
    pm("sm__inst_executed_realtime", "SM Issue", MetricGroup::Sm),
    pm("sm__pipe_tensor_cycles_active_realtime", "Tensor Active", MetricGroup::Sm),
    pm("tpc__warps_inactive_sm_active_realtime", "Unused Warps, Active SMs", MetricGroup::Sm),
    pm("tpc__warps_inactive_sm_idle_realtime", "Unused Warps, Idle SMs", MetricGroup::Sm),
    pm("dram__bytes_read", "DRAM Read Bandwidth", MetricGroup::Memory),
    pm("dramc__read_throughput", "DRAM Read Bandwidth", MetricGroup::Memory),
    pm("dram__bytes_write", "DRAM Write Bandwidth", MetricGroup::Memory),
    pm("dramc__write_throughput", "DRAM Write Bandwidth", MetricGroup::Memory),
    pm("pcie__read_bytes", "PCIe Read", MetricGroup::Interconnect),
    pm("pcie__write_bytes", "PCIe Write", MetricGroup::Interconnect),
    named("PCIe RX", "PCIe RX", MetricGroup::Interconnect),
    named("PCIe TX", "PCIe TX", MetricGroup::Interconnect),
    pm("nvlrx__bytes", "NVLink RX Bandwidth", MetricGroup::Interconnect),
    pm("nvltx__bytes", "NVLink TX Bandwidth", MetricGroup::Interconnect),
    named("NVLink RX", "NVLink RX Data", MetricGroup::Interconnect),
    named("NVLink TX", "NVLink TX Data", MetricGroup::Interconnect),
    named("power", "GPU Power", MetricGroup::PowerAndClocks),
    named("temperature", "GPU Temperature", MetricGroup::PowerAndClocks),
    named("SM clock", "SM Clock", MetricGroup::PowerAndClocks),
    named("memory clock", "Memory Clock", MetricGroup::PowerAndClocks),
    flag("throttled: power cap", "Throttled: Power Cap", MetricGroup::PowerAndClocks),
    flag("throttled: thermal", "Throttled: Thermal", MetricGroup::PowerAndClocks),
    flag("throttled: hardware slowdown", "Throttled: HW Slowdown", MetricGroup::PowerAndClocks),
    flag("recording", "cutr Recording", MetricGroup::Other),
];

/// The unit of a 1-or-0 series.
const FLAG_UNIT: &str = "0/1";

/// The model's prefix of a PM sampling series (`cutr_model::counters::series_name`).
const PM_PREFIX: &str = "PM: ";
/// The model's prefix of a PC-sample stall rate (`cutr_model::counters::stall_rates`).
const STALL_PREFIX: &str = "PC samples/ms: ";

/// How a series of the model is shown. Never fails: a series not in `KNOWN` keeps a readable form of its
/// name.
pub fn counter_name(series: &str) -> CounterName {
    if let Some(reason) = series.strip_prefix(STALL_PREFIX) {
        let reason = if reason.trim().is_empty() { "unknown" } else { reason.trim() };
        let unit = Unit::Named("samples/ms".into());
        return CounterName { name: format!("stall {reason}"), unit, group: MetricGroup::Stalls, rank: u16::MAX };
    }
    let (name, unit) = split_unit(series);
    match name.strip_prefix(PM_PREFIX) {
        Some(metric) => pm_name(metric, unit),
        None => named_series(name, unit),
    }
}

/// `power (W)` -> (`power`, `W`); a name without a parenthesized unit at its end -> (name, "").
fn split_unit(series: &str) -> (&str, &str) {
    if let Some(inner) = series.strip_suffix(')')
        && let Some(i) = inner.rfind(" (")
    {
        return (&inner[..i], &inner[i + 2..]);
    }
    (series, "")
}

/// A PM sampling metric (`unit__counter.rollup.submetric`) with the unit CUPTI gave it.
fn pm_name(metric: &str, unit: &str) -> CounterName {
    let counter = metric.split('.').next().unwrap_or(metric);
    // Only a rate or a share of the peak is what the known names describe (`dram__bytes_read.sum` is a byte
    // count per sample, not a bandwidth).
    let rate_or_share = metric.ends_with(".per_second") || metric.ends_with(".pct_of_peak_sustained_elapsed");
    let known = KNOWN.iter().position(|k| matches!(k.source, Source::Pm(m) if m == counter));
    let unit = pm_unit(metric, unit);
    match known {
        Some(i) if rate_or_share => {
            CounterName { name: KNOWN[i].name.into(), unit, group: KNOWN[i].group, rank: i as u16 }
        }
        _ => CounterName { name: readable_pm(metric), unit, group: pm_group(counter), rank: u16::MAX },
    }
}

/// A PM metric's unit: a share of the peak is in percent whatever CUPTI calls it; otherwise CUPTI's unit.
fn pm_unit(metric: &str, unit: &str) -> Unit {
    if metric.ends_with(".pct_of_peak_sustained_elapsed") { Unit::Named("%".into()) } else { unit_of(unit) }
}

/// A PM metric not in the table, readable: its hardware unit and counter as words (`l1tex__t_bytes` -> `l1tex
/// t bytes`), the rollup kept only where it is not the usual sum or average (`max`), and the submetric left to
/// the unit (`.per_second` -> `B/s`, `.pct_of_peak_sustained_elapsed` -> `%`).
fn readable_pm(metric: &str) -> String {
    let mut parts = metric.split('.');
    let counter = parts.next().unwrap_or_default();
    let mut words: Vec<String> =
        counter.split("__").flat_map(|p| p.split('_')).filter(|w| !w.is_empty()).map(String::from).collect();
    for part in parts {
        match part {
            "sum" | "avg" | "per_second" | "pct_of_peak_sustained_elapsed" => {}
            other => words.push(other.replace('_', " ")),
        }
    }
    if words.is_empty() { "unnamed PM metric".into() } else { words.join(" ") }
}

/// A PM metric's group, by the hardware unit that counts it (`dram__`, `pcie__`...).
fn pm_group(counter: &str) -> MetricGroup {
    let hw = counter.split("__").next().unwrap_or_default();
    match hw {
        "gr" | "gpu" => MetricGroup::Utilization,
        "sm" | "smsp" | "tpc" | "l1tex" | "idc" => MetricGroup::Sm,
        "dram" | "dramc" | "fbpa" | "lts" => MetricGroup::Memory,
        _ if hw.starts_with("pcie") || hw.starts_with("nvl") => MetricGroup::Interconnect,
        _ => MetricGroup::Other,
    }
}

/// A series of NVML, of the recorder itself, or of a source not known here.
fn named_series(name: &str, unit: &str) -> CounterName {
    let known = KNOWN.iter().position(|k| matches!(k.source, Source::Named(n) if n == name));
    match known {
        Some(i) => {
            let k = &KNOWN[i];
            let unit = if k.flag && unit.is_empty() { Unit::Named(FLAG_UNIT.into()) } else { unit_of(unit) };
            CounterName { name: k.name.into(), unit, group: k.group, rank: i as u16 }
        }
        None => {
            let name = if name.trim().is_empty() { "unnamed counter" } else { name.trim() };
            CounterName { name: name.into(), unit: unit_of(unit), group: MetricGroup::Other, rank: u16::MAX }
        }
    }
}

/// A unit as a recording spells it, as viewers show it: CUPTI's words shortened (`byte/second` -> `B/s`,
/// `percent` -> `%`), bytes and nanoseconds as Perfetto's built-in units, NVML's `C` as `°C`; no unit at all is
/// a plain number.
fn unit_of(unit: &str) -> Unit {
    let unit = unit.trim();
    match unit {
        "" => Unit::Count,
        "byte" | "bytes" => Unit::Bytes,
        "nsecond" | "ns" => Unit::Nanoseconds,
        "percent" => Unit::Named("%".into()),
        "C" => Unit::Named("°C".into()),
        _ => Unit::Named(short_unit(unit).into()),
    }
}

/// CUPTI's unit words shortened: `byte` -> `B`, `second` -> `s`, `msecond` -> `ms`... (`byte/second` -> `B/s`).
fn short_unit(unit: &str) -> String {
    unit.split('/')
        .map(|w| match w {
            "byte" | "bytes" => "B",
            "second" => "s",
            "msecond" => "ms",
            "usecond" => "us",
            "nsecond" => "ns",
            other => other,
        })
        .collect::<Vec<_>>()
        .join("/")
}

/// Makes the names of one GPU's metric tracks, in their order, unique: a name shown twice gets its unit
/// (`DRAM Read Bandwidth (%)` beside `DRAM Read Bandwidth (B/s)`), and one still shown twice a number. Viewers
/// merge or confuse sibling tracks of one name (Perfetto merges them into one track).
pub fn unique_names(names: &mut [(String, &Unit)]) {
    // Counted once, not name by name: a hostile recording may give one GPU any number of series.
    let mut count: std::collections::HashMap<String, usize> = Default::default();
    for n in names.iter() {
        *count.entry(n.0.clone()).or_default() += 1;
    }
    for n in names.iter_mut() {
        if count[&n.0] > 1 {
            n.0 = with_unit(&n.0, n.1);
        }
    }
    let mut seen: std::collections::HashMap<String, usize> = Default::default();
    for n in names.iter_mut() {
        let k = seen.entry(n.0.clone()).or_default();
        *k += 1;
        if *k > 1 {
            n.0 = format!("{} #{k}", n.0);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shown(series: &str) -> (String, String, MetricGroup) {
        let c = counter_name(series);
        (c.name, c.unit.label().to_string(), c.group)
    }

    #[test]
    fn the_recorders_series_have_short_names_and_units() {
        use MetricGroup::*;
        let cases = [
            ("PM: sm__inst_executed_realtime.avg.pct_of_peak_sustained_elapsed (percent)", "SM Issue", "%", Sm),
            ("PM: dram__bytes_read.sum.per_second (byte/second)", "DRAM Read Bandwidth", "B/s", Memory),
            (
                "PM: dramc__read_throughput.avg.pct_of_peak_sustained_elapsed (percent)",
                "DRAM Read Bandwidth",
                "%",
                Memory,
            ),
            ("PM: gr__cycles_active.avg.pct_of_peak_sustained_elapsed (percent)", "GR Active", "%", Utilization),
            ("PM: nvltx__bytes.sum.per_second (byte/second)", "NVLink TX Bandwidth", "B/s", Interconnect),
            ("power (W)", "GPU Power", "W", PowerAndClocks),
            ("temperature (C)", "GPU Temperature", "°C", PowerAndClocks),
            ("NVLink RX (B/s)", "NVLink RX Data", "B/s", Interconnect),
            ("throttled: thermal", "Throttled: Thermal", "0/1", PowerAndClocks),
            ("recording", "cutr Recording", "0/1", Other),
            ("PC samples/ms: long_scoreboard", "stall long_scoreboard", "samples/ms", Stalls),
            ("PC samples/ms: reason 7", "stall reason 7", "samples/ms", Stalls),
        ];
        for (series, name, unit, group) in cases {
            assert_eq!(shown(series), (name.to_string(), unit.to_string(), group), "{series}");
        }
        // Every known name fits the track-name column, and is unique but for the alternatives of one metric.
        assert!(KNOWN.iter().all(|k| k.name.len() <= 24));
        let mut names: Vec<&str> = KNOWN.iter().map(|k| k.name).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), KNOWN.len() - 2, "DRAM read and write have two metrics each");
    }

    #[test]
    fn unknown_series_keep_a_readable_name_and_never_an_empty_one() {
        use MetricGroup::*;
        let cases = [
            ("PM: l1tex__t_bytes.sum.per_second (byte/second)", "l1tex t bytes", "B/s", Sm),
            ("PM: lts__t_sectors.avg.pct_of_peak_sustained_elapsed (percent)", "lts t sectors", "%", Memory),
            ("PM: sm__cycles_active.max (cycle)", "sm cycles active max", "cycle", Sm),
            // A byte count per sample is not the bandwidth the table names.
            ("PM: dram__bytes_read.sum (byte)", "dram bytes read", "bytes", Memory),
            ("PM: gpu__time_duration.sum (nsecond)", "gpu time duration", "ns", Utilization),
            ("PM: xyz", "xyz", "count", Other),
            ("PM: ", "unnamed PM metric", "count", Other),
            ("fan speed (%)", "fan speed", "%", Other),
            ("", "unnamed counter", "count", Other),
            ("()", "()", "count", Other),
            (" (W)", "unnamed counter", "W", Other),
            ("PC samples/ms: ", "stall unknown", "samples/ms", Stalls),
            ("PM: a__b.c (cycle/nsecond)", "a b c", "cycle/ns", Other),
        ];
        for (series, name, unit, group) in cases {
            assert_eq!(shown(series), (name.to_string(), unit.to_string(), group), "{series:?}");
        }
    }

    #[test]
    fn known_metrics_come_in_the_stated_order() {
        let mut series = [
            "PC samples/ms: wait",
            "power (W)",
            "PM: zzz__new.sum (byte)",
            "PM: dram__bytes_read.sum.per_second (byte/second)",
            "GPU utilization (%)",
            "PM: sm__inst_executed_realtime.avg.pct_of_peak_sustained_elapsed (percent)",
            "recording",
            "PC samples/ms: branch_resolving",
            "PM: gr__cycles_active.sum.pct_of_peak_sustained_elapsed (percent)",
            "PCIe TX (B/s)",
        ];
        series.sort_by_cached_key(|s| {
            let c = counter_name(s);
            (c.group, c.rank, c.name)
        });
        let names: Vec<String> = series.iter().map(|s| counter_name(s).name).collect();
        assert_eq!(
            names,
            [
                "GR Active",
                "GPU Utilization",
                "SM Issue",
                "DRAM Read Bandwidth",
                "PCIe TX",
                "GPU Power",
                "stall branch_resolving",
                "stall wait",
                "cutr Recording",
                "zzz new"
            ]
        );
    }

    #[test]
    fn names_shown_twice_get_their_unit_then_a_number() {
        let (pct, rate) = (Unit::Named("%".into()), Unit::Named("B/s".into()));
        let mut names = vec![
            ("DRAM Read Bandwidth".to_string(), &pct),
            ("DRAM Read Bandwidth".to_string(), &rate),
            ("SM Issue".to_string(), &pct),
            ("x".to_string(), &rate),
            ("x".to_string(), &rate),
        ];
        unique_names(&mut names);
        let got: Vec<&str> = names.iter().map(|n| n.0.as_str()).collect();
        assert_eq!(got, ["DRAM Read Bandwidth (%)", "DRAM Read Bandwidth (B/s)", "SM Issue", "x (B/s)", "x (B/s) #2"]);
    }
}
