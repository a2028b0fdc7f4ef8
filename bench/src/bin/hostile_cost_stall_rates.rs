//! Issue 28's quadratic class for stall-rate tracks: many functions' PC samples over many collections with few
//! PCs each (`cutr_synth::forge::pc_samples::write_many_functions`), against an undamaged file of similar size
//! (the same loop, its kernels' samples in few large collections). Runs `cupti-convert FILE --chrome`,
//! `--perfetto` and `stats` of each given binary on each file, interleaved, `--reps` times, and prints the median
//! wall time and the peak RSS of each (GNU time's `%M`).
//!
//! ```sh
//! cargo build --release -p cutr-convert -p cutr-bench
//! target/release/hostile_cost_stall_rates --bin after=target/release/cupti-convert --bin before=/tmp/before
//! ```

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use anyhow::{Context, Result};
use clap::Parser;
use cutr_bench::median;
use cutr_synth::forge::pc_samples::{ManyFunctions, Tables, write_many_functions};

#[derive(Parser)]
struct Args {
    /// `NAME=PATH` of a cupti-convert to measure (repeat to compare builds).
    #[arg(long, required = true)]
    bin: Vec<String>,
    #[arg(long, default_value_t = 3)]
    reps: usize,
    /// Address space each run may take (MB); a run past it fails and is reported as such.
    #[arg(long, default_value_t = 8192)]
    limit_mb: u64,
    /// Where the files are written (a temporary directory if not given).
    #[arg(long)]
    dir: Option<PathBuf>,
    /// Activity records of each file's loop.
    #[arg(long, default_value_t = 400_000)]
    records: u64,
    /// The hostile files' functions, collections, PCs per collection, reason indices (the table's entries, in
    /// the first collection only) and reasons per PC.
    #[arg(long, default_value_t = 1_000)]
    functions: usize,
    #[arg(long, default_value_t = 20_000)]
    collections: usize,
    #[arg(long, default_value_t = 3)]
    pcs: usize,
    #[arg(long, default_value_t = 4096)]
    reasons: u32,
    #[arg(long, default_value_t = 4)]
    reasons_per_pc: u32,
}

/// One child's wall seconds and peak RSS bytes, the latter from GNU time (`%M`): a child's own `ru_maxrss` would
/// count this process's resident memory at the spawn (Linux keeps the high-water mark across exec). The child
/// runs under an address-space limit (`ulimit -v`), so that a quadratic build fails alone instead of calling the
/// OOM killer on the machine; a child that fails gives `None`.
fn run(bin: &Path, args: &[&str], rss_file: &Path, limit_mb: u64) -> Result<(f64, Option<u64>)> {
    let t = Instant::now();
    let status = Command::new("sh")
        .arg("-c")
        .arg(format!("ulimit -v {}; exec /usr/bin/time -f %M -o \"$0\" \"$@\"", limit_mb * 1024))
        .arg(rss_file)
        .arg(bin)
        .args(args)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .with_context(|| format!("/usr/bin/time {}", bin.display()))?;
    let wall = t.elapsed().as_secs_f64();
    if !status.success() {
        return Ok((wall, None));
    }
    let text = std::fs::read_to_string(rss_file)?;
    let kb: u64 = text.trim().parse().with_context(|| format!("GNU time's %M: {text}"))?;
    Ok((wall, Some(kb * 1024)))
}

fn main() -> Result<()> {
    let a = Args::parse();
    let temp = tempfile_dir(&a.dir)?;
    let dir = temp.as_path();
    let hostile = ManyFunctions {
        records: a.records,
        functions: a.functions,
        collections: a.collections,
        pcs_per_collection: a.pcs,
        reasons: a.reasons,
        reasons_per_pc: a.reasons_per_pc,
        tables: Tables::First,
    };
    // Undamaged: the loop's 30 kernels, each with one sampled PC in each collection (one a second of a 20 s run),
    // CUPTI's 40-entry table in every collection: ~20 reasons per kernel, as `--stall-reasons all` can give.
    let undamaged = ManyFunctions {
        functions: 30,
        collections: 20,
        pcs_per_collection: 30,
        reasons: 40,
        reasons_per_pc: 1,
        tables: Tables::Every,
        ..hostile
    };
    let files = [
        ("undamaged", undamaged),
        ("hostile, a 4096-entry table", hostile),
        ("hostile, no tables (old --ring dump)", ManyFunctions { tables: Tables::None, ..hostile }),
    ];
    let mut paths = Vec::new();
    for (i, (name, shape)) in files.iter().enumerate() {
        let p = dir.join(format!("stall_rates_{i}.cutr"));
        write_many_functions(&p, *shape)?;
        println!("{name}: {} ({} bytes) {shape:?}", p.display(), std::fs::metadata(&p)?.len());
        paths.push((name, p));
    }
    let bins: Vec<(&str, PathBuf)> = a
        .bin
        .iter()
        .map(|b| b.split_once('=').map(|(n, p)| (n, PathBuf::from(p))).context("--bin NAME=PATH"))
        .collect::<Result<_>>()?;
    let out_json = dir.join("out.json");
    let out_pf = dir.join("out.pftrace");
    let commands: [(&str, Vec<&str>); 3] = [
        ("--chrome", vec!["--chrome", "-q", "-o", out_json.to_str().unwrap()]),
        ("--perfetto", vec!["--perfetto", "-q", "-o", out_pf.to_str().unwrap()]),
        ("stats", vec![]),
    ];
    println!(
        "{:<40} {:<11} {:<8} {:>10} {:>12} {:>14}",
        "file", "command", "binary", "median s", "peak RSS MB", "output bytes"
    );
    for (cmd, extra) in &commands {
        for (name, path) in &paths {
            let mut samples: Vec<Vec<(f64, Option<u64>)>> = vec![Vec::new(); bins.len()];
            let mut sizes = vec![0u64; bins.len()];
            for _ in 0..a.reps {
                for (i, (_, bin)) in bins.iter().enumerate() {
                    let file = path.to_str().unwrap();
                    let args: Vec<&str> =
                        if *cmd == "stats" { vec!["stats", file] } else { [&[file][..], extra].concat() };
                    samples[i].push(run(bin, &args, &dir.join("rss.txt"), a.limit_mb)?);
                    let out = match *cmd {
                        "--chrome" => Some(&out_json),
                        "--perfetto" => Some(&out_pf),
                        _ => None,
                    };
                    // A failed run leaves no output (or the previous one's): removed before the next.
                    sizes[i] = out.and_then(|o| std::fs::metadata(o).ok()).map_or(0, |m| m.len());
                    if let Some(o) = out {
                        let _ = std::fs::remove_file(o);
                    }
                }
            }
            for (i, (bin_name, _)) in bins.iter().enumerate() {
                let wall = median(samples[i].iter().map(|s| s.0).collect());
                let rss = match samples[i].iter().map(|s| s.1).collect::<Option<Vec<u64>>>() {
                    Some(r) => format!("{:.1}", *r.iter().max().unwrap_or(&0) as f64 / 1e6),
                    None => format!("over {}", a.limit_mb),
                };
                println!("{name:<40} {cmd:<11} {bin_name:<8} {wall:>10.3} {rss:>12} {:>14}", sizes[i]);
            }
        }
    }
    Ok(())
}

/// `dir` if given, else a fresh directory under the system's temporary one.
fn tempfile_dir(dir: &Option<PathBuf>) -> Result<PathBuf> {
    let d = match dir {
        Some(d) => d.clone(),
        None => std::env::temp_dir().join(format!("cutr-stall-rates-{}", std::process::id())),
    };
    std::fs::create_dir_all(&d)?;
    Ok(d)
}
