//! How large an output may grow: estimated from the timeline's counts before anything is written, and checked
//! again byte by byte while writing ([`crate::output::Output::set_limit`]), against a stated limit. A hostile or
//! unlucky input (a 596 KB file once gave a 2.1 GB Chrome trace) is refused with its estimate and the limit,
//! instead of filling the disk with a trace no viewer opens.
//!
//! The default limit is relative to the input: [`SizeLimit::PER_INPUT_BYTE`] bytes of output per byte of
//! recording, never under [`SizeLimit::FLOOR`]. On the 40 fixtures the Chrome JSON is 0-112 times its recording
//! (`launch_loop_100k.cutr`, the densest: 112), Perfetto 0-3 times; a generated trace (`cupti-convert generate`,
//! 1M records, 3.2 MB) gives 102 times (325 MB), Perfetto 3.7 times. The hostile file of issue 28 gave 3,600 times.

use cutr_model::Trace;

use crate::export::{ExportOptions, Format};
use crate::timeline::{Src, Timeline};

/// The bytes an output may not pass, and where that figure comes from (said in the errors).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SizeLimit {
    pub bytes: u64,
    /// `500 x the input's 596 KB`, `--max-output 2 GB`.
    pub origin: String,
}

impl SizeLimit {
    /// Output bytes allowed per byte of input, by default: 4.5 times the densest fixture's Chrome JSON, 4.9 times
    /// a generated trace's; a seventh of the hostile file's.
    pub const PER_INPUT_BYTE: u64 = 500;
    /// The default limit for small inputs: any recording under 512 KiB may give this much.
    pub const FLOOR: u64 = 256 << 20;

    /// The default for inputs of `input_bytes` in all.
    pub fn for_input(input_bytes: u64) -> SizeLimit {
        let relative = input_bytes.saturating_mul(Self::PER_INPUT_BYTE);
        let origin = if relative >= Self::FLOOR {
            format!("{} x the input's {}", Self::PER_INPUT_BYTE, human(input_bytes))
        } else {
            format!("the least limit, for inputs under {}", human(Self::FLOOR / Self::PER_INPUT_BYTE))
        };
        SizeLimit { bytes: relative.max(Self::FLOOR), origin }
    }

    /// The error once the file being written passes the limit (the estimate fell short).
    pub(crate) fn passed_while_writing(&self) -> String {
        format!(
            "the output passed the limit of {} ({}) while being written; nothing was kept: write less with \
             --start/--end or --kinds, or raise the limit with --max-output SIZE",
            human(self.bytes),
            self.origin
        )
    }
}

/// What each event costs in each output, in bytes: fitted (least relative error) to the outputs of the 40
/// fixtures and a 1M-record generated trace, arrows and marks set by hand (too few in the fixtures to fit). The
/// estimates fall within 0.4-1.5x of the real sizes (the test below holds them to it).
#[derive(Clone, Copy, Debug)]
struct EventBytes {
    gpu_slice: f64,
    cpu_slice: f64,
    arrow: f64,
    counter_point: f64,
    mark: f64,
    /// Descriptors, names and the file's own header and trailer, per track.
    track: f64,
}

fn event_bytes(opts: &ExportOptions) -> EventBytes {
    let (gpu_slice, cpu_slice, arrow, counter_point, mark, track) =
        match (opts.format, opts.gzip, opts.compress_packets) {
            (Format::Chrome, false, _) => (511.0, 160.0, 200.0, 164.0, 250.0, 602.0),
            (Format::Chrome, true, _) => (7.0, 17.0, 20.0, 8.0, 25.0, 235.0),
            (Format::Perfetto, false, false) => (155.0, 38.0, 16.0, 25.0, 60.0, 260.0),
            (Format::Perfetto, true, _) => (8.0, 11.0, 4.0, 3.0, 12.0, 226.0),
            (Format::Perfetto, false, true) => (9.0, 12.0, 4.0, 3.0, 12.0, 259.0),
        };
    EventBytes { gpu_slice, cpu_slice, arrow, counter_point, mark, track }
}

/// About how many bytes `tl` of `trace` takes in the output `opts` asks for.
pub(crate) fn estimate(trace: &Trace, tl: &Timeline, opts: &ExportOptions) -> u64 {
    let per = event_bytes(opts);
    let gpu = tl.items.iter().filter(|it| matches!(it.src(), Src::Kernel(_) | Src::Memcpy(_) | Src::Memset(_))).count();
    let cpu = tl.items.len() - gpu;
    let points = trace.counters.len() + tl.step_counters.iter().map(|c| c.points.len()).sum::<usize>();
    let bytes = gpu as f64 * per.gpu_slice
        + cpu as f64 * per.cpu_slice
        + tl.flows.total as f64 * per.arrow
        + points as f64 * per.counter_point
        + trace.marks.len() as f64 * per.mark
        + tl.tracks.len() as f64 * per.track;
    bytes as u64
}

/// The error when the output would pass `limit`: its estimate, what it holds, and the limit.
pub(crate) fn check(trace: &Trace, tl: &Timeline, opts: &ExportOptions, limit: &SizeLimit) -> Result<(), String> {
    let bytes = estimate(trace, tl, opts);
    if bytes <= limit.bytes {
        return Ok(());
    }
    let what = match (opts.format, opts.gzip) {
        (Format::Chrome, false) => "Chrome trace",
        (Format::Chrome, true) => "gzipped Chrome trace",
        (Format::Perfetto, _) => "Perfetto trace",
    };
    let points = trace.counters.len() + tl.step_counters.iter().map(|c| c.points.len()).sum::<usize>();
    Err(format!(
        "the {what} would be about {} ({} slices, {} arrows, {} counter points), over the limit of {} ({}): write \
         less with --start/--end or --kinds, or raise the limit with --max-output SIZE",
        human(bytes),
        tl.items.len(),
        tl.flows.total,
        points,
        human(limit.bytes),
        limit.origin
    ))
}

/// `596 KB`, `2.1 GB`: decimal units, three significant figures at most.
pub fn human(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["KB", "MB", "GB", "TB", "PB"];
    if bytes < 1000 {
        return format!("{bytes} bytes");
    }
    let mut v = bytes as f64;
    let mut unit = "";
    for u in UNITS {
        if v < 999.5 {
            break;
        }
        v /= 1000.0;
        unit = u;
    }
    if v < 9.95 { format!("{v:.1} {unit}") } else { format!("{v:.0} {unit}") }
}

/// Reads a size as users write it: `500MB`, `2G`, `1.5 GB`, `300000` (bytes); decimal units (K, M, G, T, with or
/// without B).
pub fn parse_size(text: &str) -> Result<u64, String> {
    let t = text.trim();
    let upper = t.to_ascii_uppercase();
    let digits = upper.trim_end_matches('B').trim_end();
    let (num, scale) = match digits.chars().last() {
        Some('K') => (&digits[..digits.len() - 1], 1e3),
        Some('M') => (&digits[..digits.len() - 1], 1e6),
        Some('G') => (&digits[..digits.len() - 1], 1e9),
        Some('T') => (&digits[..digits.len() - 1], 1e12),
        _ => (digits, 1.0),
    };
    match num.trim().parse::<f64>() {
        Ok(v) if v >= 0.0 && (v * scale) < u64::MAX as f64 => Ok((v * scale) as u64),
        _ => Err(format!("not a size: '{text}' (e.g. 500MB, 2GB, 1.5G)")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_read_and_print_in_decimal_units() {
        assert_eq!(parse_size("500MB"), Ok(500_000_000));
        assert_eq!(parse_size("2g"), Ok(2_000_000_000));
        assert_eq!(parse_size("1.5 GB"), Ok(1_500_000_000));
        assert_eq!(parse_size("300000"), Ok(300_000));
        assert_eq!(parse_size("-1G"), Err("not a size: '-1G' (e.g. 500MB, 2GB, 1.5G)".into()));
        assert!(parse_size("lots").is_err());
        assert_eq!(human(596_000), "596 KB");
        assert_eq!(human(2_143_000_000), "2.1 GB");
        assert_eq!(human(999), "999 bytes");
        assert_eq!(human(268_435_456), "268 MB");
    }

    #[test]
    fn the_default_limit_grows_with_the_input_above_a_floor() {
        let small = SizeLimit::for_input(100_000);
        assert_eq!(small, SizeLimit { bytes: 256 << 20, origin: "the least limit, for inputs under 537 KB".into() });
        let hostile = SizeLimit::for_input(596_000);
        assert_eq!(hostile, SizeLimit { bytes: 298_000_000, origin: "500 x the input's 596 KB".into() });
    }
}

#[cfg(test)]
mod estimates {
    use super::*;
    use crate::export::export;

    /// Each format's estimate within 0.4-1.6x of what is written, on recordings of every shape: a small CUDA
    /// program, a PyTorch loop, counters, unified memory, CUDA graphs, PC samples, two ranks.
    #[test]
    fn the_estimate_is_within_a_factor_of_the_output() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("out");
        for name in [
            "cuda_workload.cutr",
            "pytorch_loop_filtered.cutr",
            "counter_two_gpus.cutr",
            "um_workload.cutr",
            "graph_layers.cutr",
            "source_workload_pcs.cutr",
            "allreduce/allreduce-588.cutr",
        ] {
            let f = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures").join(name);
            let trace = cutr_model::load(&[f], &Default::default()).unwrap();
            let tl = Timeline::build(&trace, 50_000);
            for (format, gzip, compress_packets) in [
                (Format::Chrome, false, true),
                (Format::Chrome, true, true),
                (Format::Perfetto, false, true),
                (Format::Perfetto, false, false),
                (Format::Perfetto, true, true),
            ] {
                let opts = ExportOptions { format, gzip, compress_packets, ..Default::default() };
                let written = export(&trace, &out, &opts).unwrap().bytes as f64;
                let ratio = estimate(&trace, &tl, &opts) as f64 / written;
                assert!((0.4..=1.6).contains(&ratio), "{name} {format:?} gzip {gzip}: estimate {ratio:.2}x");
            }
        }
    }
}
