//! The quadratic counters class of issue 28 against an undamaged file of the same size: wall time and peak RSS of
//! every `cupti-convert` command on each, each run its own process (GNU time's `%e %M`), interleaved, medians.
//!
//! The hostile file: a generated recording with one `counters` chunk of `20,000 x --scale` metrics of 4 samples
//! each over the whole recording (the file: 20,000 metrics in 925 KB made `stats` allocate a key per
//! kernel x metric, 13-19 s). The undamaged one: the same recording with 10 metrics sampled often enough to make a
//! file of about the same size. Run: `cargo build --release -p cutr-convert -p cutr-bench && target/release/
//! hostile_cost_counters --scale 10`.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{Context, Result, bail};
use clap::Parser;
use cutr_bench::median;
use cutr_synth::SynthOptions;
use cutr_synth::forge::counters::{metric_flood, write_with_counters};

#[derive(Parser)]
struct Args {
    /// Times the 20,000 metrics.
    #[arg(long, default_value_t = 10)]
    scale: usize,
    /// Activity records of both recordings.
    #[arg(long, default_value_t = 20_000)]
    records: u64,
    #[arg(long, default_value_t = 3)]
    reps: usize,
    /// The cupti-convert binary to measure.
    #[arg(long, default_value = "target/release/cupti-convert")]
    bin: PathBuf,
    /// Where to write the recordings and the outputs.
    #[arg(long, default_value = "/tmp/cutr-bench-counters")]
    dir: PathBuf,
}

/// A reading that does not compress away: a hash of (metric, sample) scaled to 0-100.
fn reading(metric: usize, sample: usize) -> f64 {
    let mut z = (metric as u64) << 32 ^ sample as u64;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    (z >> 11) as f64 / (1u64 << 53) as f64 * 100.0
}

/// Writes a recording of `records` records with `metrics` x `samples` counter readings; returns its size.
fn write(path: &Path, records: u64, metrics: usize, samples: usize) -> Result<u64> {
    let opts = SynthOptions { records, buffer_bytes: 256 << 10, ..Default::default() };
    write_with_counters(path, opts, |t| vec![metric_flood((t.t_min, t.t_max), metrics, samples, 0, reading)])?;
    Ok(std::fs::metadata(path)?.len())
}

/// Runs `cupti-convert ARGS` under GNU time; returns (seconds, peak RSS bytes).
fn measure(bin: &Path, args: &[String], dir: &Path) -> Result<(f64, u64)> {
    let out = dir.join("time.txt");
    let status = Command::new("/usr/bin/time")
        .args(["-f", "%e %M", "-o"])
        .arg(&out)
        .arg(bin)
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .context("running /usr/bin/time (GNU time)")?;
    if !status.success() {
        bail!("cupti-convert {} failed: {status}", args.join(" "));
    }
    let text = std::fs::read_to_string(&out)?;
    let mut it = text.split_whitespace();
    let secs: f64 = it.next().context("no time")?.parse()?;
    let kb: u64 = it.next().context("no RSS")?.parse()?;
    Ok((secs, kb * 1024))
}

/// The commands, on `file`.
fn commands(file: &Path, dir: &Path) -> Vec<(&'static str, Vec<String>)> {
    let f = file.display().to_string();
    let out = |ext: &str| dir.join(format!("out.{ext}")).display().to_string();
    vec![
        ("info", vec!["info".into(), f.clone()]),
        ("stats", vec!["stats".into(), f.clone()]),
        ("stats --json", vec!["stats".into(), "--json".into(), f.clone()]),
        ("diff", vec!["diff".into(), f.clone(), f.clone()]),
        ("--perfetto", vec![f.clone(), "--perfetto".into(), "-o".into(), out("pftrace")]),
        ("--chrome", vec![f.clone(), "--chrome".into(), "-o".into(), out("json")]),
        ("export --parquet", vec!["export".into(), "--parquet".into(), out("parquet"), f]),
    ]
}

fn main() -> Result<()> {
    let a = Args::parse();
    std::fs::create_dir_all(&a.dir)?;
    let hostile = a.dir.join("hostile.cutr");
    let metrics = 20_000 * a.scale;
    let hostile_bytes = write(&hostile, a.records, metrics, 4)?;
    // 10 metrics, as many samples as make the same size (the size grows about linearly with the readings).
    let plain = a.dir.join("undamaged.cutr");
    let mut samples = 1_000;
    let mut plain_bytes = write(&plain, a.records, 10, samples)?;
    for _ in 0..3 {
        samples = (samples as f64 * hostile_bytes as f64 / plain_bytes as f64).max(2.0) as usize;
        plain_bytes = write(&plain, a.records, 10, samples)?;
    }
    println!(
        "hostile: {metrics} metrics x 4 samples, {hostile_bytes} bytes; undamaged: 10 metrics x {samples} samples, \
         {plain_bytes} bytes; {} records each; {} reps, medians",
        a.records, a.reps
    );
    println!(
        "{:<18} {:>12} {:>12} {:>12} {:>12} {:>7} {:>7}",
        "command", "plain s", "hostile s", "plain MB", "hostile MB", "time x", "RSS x"
    );
    for (name, _) in commands(&plain, &a.dir) {
        let mut times = [Vec::new(), Vec::new()];
        let mut rss = [Vec::new(), Vec::new()];
        for _ in 0..a.reps {
            for (i, file) in [&plain, &hostile].iter().enumerate() {
                let args = commands(file, &a.dir).into_iter().find(|c| c.0 == name).map(|c| c.1).unwrap_or_default();
                let (s, bytes) = measure(&a.bin, &args, &a.dir)?;
                times[i].push(s);
                rss[i].push(bytes as f64 / 1e6);
            }
        }
        let [tp, th] = times.map(median);
        let [rp, rh] = rss.map(median);
        println!("{name:<18} {tp:>12.2} {th:>12.2} {rp:>12.1} {rh:>12.1} {:>7.2} {:>7.2}", th / tp, rh / rp);
    }
    Ok(())
}
