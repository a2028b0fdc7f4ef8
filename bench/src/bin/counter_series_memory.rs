//! Counter series in streamed summaries (issue 35): wall time and peak RSS of `stats --stream --report
//! kernels,counters`, `diff --stream` and `analyze --stream` on generated recordings with more and more counter
//! readings (10 PM-like metrics sampled evenly over the run, a chunk per 10,000 samples, as the recorder writes a
//! chunk per drain) beside the same activity, for two binaries side by side (`--before`: one that reads the series
//! whole at open; `--bin`: this tree's, which streams them), each run its own process (GNU time's `%e %M`),
//! interleaved, medians; and whether both print the same report. Run: `cargo build --release -p cutr-convert -p
//! cutr-bench && target/release/counter_series_memory --before OLD/cupti-convert`.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{Context, Result, bail};
use clap::Parser;
use cutr_bench::median;
use cutr_synth::SynthOptions;
use cutr_synth::forge::counters::{metric_flood, write_with_counters};

#[derive(Parser)]
struct Args {
    /// Counter readings per recording (metrics x samples), comma-separated.
    #[arg(long, default_value = "10000000,40000000,160000000", value_delimiter = ',')]
    readings: Vec<usize>,
    /// Activity records of each recording.
    #[arg(long, default_value_t = 2_000_000)]
    records: u64,
    #[arg(long, default_value_t = 3)]
    reps: usize,
    /// This tree's cupti-convert.
    #[arg(long, default_value = "target/release/cupti-convert")]
    bin: PathBuf,
    /// A cupti-convert to compare with (one that reads counter series whole at open).
    #[arg(long)]
    before: Option<PathBuf>,
    /// Where to write the recordings and the outputs.
    #[arg(long, default_value = "/tmp/cutr-bench-counter-series")]
    dir: PathBuf,
}

const METRICS: usize = 10;
const SAMPLES_PER_CHUNK: usize = 10_000;

/// A reading that does not compress away: a hash of (metric, sample) scaled to 0-100.
fn reading(metric: usize, sample: usize) -> f64 {
    let mut z = (metric as u64) << 32 ^ sample as u64;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    (z >> 11) as f64 / (1u64 << 53) as f64 * 100.0
}

/// Writes a recording of `records` records with `readings` counter readings over its span; returns its size.
fn write(path: &Path, records: u64, readings: usize) -> Result<u64> {
    let opts = SynthOptions { records, buffer_bytes: 256 << 10, ..Default::default() };
    let samples = (readings / METRICS).max(2);
    write_with_counters(path, opts, |t| {
        let chunks = samples.div_ceil(SAMPLES_PER_CHUNK);
        let step = (t.t_max - t.t_min) / samples as u64;
        (0..chunks)
            .map(|c| {
                let first = c * SAMPLES_PER_CHUNK;
                let n = SAMPLES_PER_CHUNK.min(samples - first);
                let from = t.t_min + first as u64 * step;
                let to = from + (n.max(2) as u64 - 1) * step;
                metric_flood((from, to), METRICS, n.max(2), 0, move |j, i| reading(j, first + i))
            })
            .collect()
    })?;
    Ok(std::fs::metadata(path)?.len())
}

/// Runs `BIN ARGS` under GNU time; returns (seconds, peak RSS bytes, stdout).
fn measure(bin: &Path, args: &[String], dir: &Path) -> Result<(f64, u64, Vec<u8>)> {
    let out = dir.join("time.txt");
    let run = Command::new("/usr/bin/time")
        .args(["-f", "%e %M", "-o"])
        .arg(&out)
        .arg(bin)
        .args(args)
        .stderr(Stdio::null())
        .output()
        .context("running /usr/bin/time (GNU time)")?;
    if !run.status.success() {
        bail!("{} {} failed: {}", bin.display(), args.join(" "), run.status);
    }
    let text = std::fs::read_to_string(&out)?;
    let mut it = text.split_whitespace();
    let secs: f64 = it.next().context("no time")?.parse()?;
    let kb: u64 = it.next().context("no RSS")?.parse()?;
    Ok((secs, kb * 1024, run.stdout))
}

/// The commands, on `file`.
fn commands(file: &Path) -> Vec<(&'static str, Vec<String>)> {
    let f = file.display().to_string();
    let v = |a: &[&str]| a.iter().map(|s| s.to_string()).chain(std::iter::once(f.clone())).collect::<Vec<_>>();
    vec![
        ("stats --stream (counters)", v(&["stats", "--stream", "--report", "kernels,counters", "--top", "0"])),
        ("diff --stream", {
            let mut a = v(&["diff", "--stream"]);
            a.push(f.clone());
            a
        }),
        ("analyze --stream", v(&["analyze", "--stream"])),
    ]
}

fn main() -> Result<()> {
    let a = Args::parse();
    std::fs::create_dir_all(&a.dir)?;
    let bins: Vec<(&str, &Path)> =
        a.before.iter().map(|b| ("before", b.as_path())).chain([("streamed", a.bin.as_path())]).collect();
    println!(
        "{} activity records; {METRICS} metrics, {SAMPLES_PER_CHUNK} samples a chunk; {} reps, medians",
        a.records, a.reps
    );
    println!(
        "{:<12} {:>10} {:<27} {:<9} {:>9} {:>10} {:>5}",
        "readings", "file MB", "command", "binary", "wall s", "RSS MiB", "same"
    );
    for &readings in &a.readings {
        let file = a.dir.join(format!("counters-{readings}.cutr"));
        let bytes = write(&file, a.records, readings)?;
        for (name, args) in commands(&file) {
            let mut runs: Vec<(Vec<f64>, Vec<f64>, Vec<u8>)> = vec![Default::default(); bins.len()];
            for _ in 0..a.reps {
                for (i, (_, bin)) in bins.iter().enumerate() {
                    let (s, rss, out) = measure(bin, &args, &a.dir)?;
                    runs[i].0.push(s);
                    runs[i].1.push(rss as f64 / (1 << 20) as f64);
                    runs[i].2 = out;
                }
            }
            // The reports but for the line that says how the file was read.
            let report = |out: &[u8]| -> String {
                String::from_utf8_lossy(out).lines().filter(|l| !l.starts_with("Read:")).collect::<Vec<_>>().join("\n")
            };
            let same = runs.iter().all(|r| report(&r.2) == report(&runs[0].2));
            for ((label, _), (wall, rss, _)) in bins.iter().zip(runs) {
                println!(
                    "{readings:<12} {:>10.1} {name:<27} {label:<9} {:>9.2} {:>10.0} {:>5}",
                    bytes as f64 / 1e6,
                    median(wall),
                    median(rss),
                    if same { "yes" } else { "NO" }
                );
            }
        }
        std::fs::remove_file(&file)?;
    }
    Ok(())
}
