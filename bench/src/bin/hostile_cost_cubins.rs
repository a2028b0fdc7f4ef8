//! What hostile cubins cost `cupti-convert` (issue 28, "quadratic inputs"): each class at ten times the size of the
//! file that showed it, against an undamaged recording of about the same size, per command (`source`, `--perfetto`,
//! `--chrome`), wall time and peak RSS, repetitions interleaved, medians reported.
//!
//! - `relocations`: one cubin of many functions, each line sequence relocated against its own (the 89 KB
//!   file took over 60 s): ~890 KB.
//! - `inline`: one function whose line rows are each inlined at the previous one, every instruction sampled (98 KB:
//!   33-60 s): ~980 KB.
//! - `claims`: 30 cubins each claiming 255 MiB, stored at under 1024x (three in 849 KB took 1.03 GB): ~8.5 MB.
//! - `under_limit`: 30 cubins of 31 MiB each, just under the 32 MiB a reader inflates, stored the same way.
//!
//! `inline` is also measured against its flat twin (the same rows, lines and samples, nothing inlined), which
//! isolates what the chains cost from what 100,000 sampled lines cost.
//!
//! The undamaged recordings hold copies of `fixtures/cubins/source_workload.sm_90.cubin` (each its own CRC) with
//! every instruction of both kernels sampled, as many copies as bring the file to the hostile one's size.
//!
//! `cargo run --release -p cutr-bench --bin hostile_cost_cubins -- --convert target/release/cupti-convert`
//! (peak RSS through `/usr/bin/time`, GNU's).

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};
use clap::Parser;
use cutr_bench::median;
use cutr_synth::forge::cubins::{self, Sample};

#[derive(Parser)]
struct Args {
    /// The `cupti-convert` to measure.
    #[arg(long)]
    convert: PathBuf,
    #[arg(long, default_value_t = 5)]
    reps: usize,
    /// Where the files go (a temporary directory if not given).
    #[arg(long)]
    dir: Option<PathBuf>,
    /// Only these classes (comma-separated).
    #[arg(long, value_delimiter = ',')]
    only: Vec<String>,
}

/// Records of the generated trace each file carries, so that the viewers convert it (and `annotate` runs).
const TRACE_RECORDS: u64 = 2_000;

/// The fixture cubin's two kernels and their sizes, every 16-byte instruction sampled.
const KERNELS: [(&str, u64); 2] = [("_Z9fma_chainPfi", 1408), ("_Z5chasePKjjiPj", 1920)];

fn fixture_cubin() -> Result<Vec<u8>> {
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures/cubins/source_workload.sm_90.cubin");
    std::fs::read(&p).with_context(|| p.display().to_string())
}

/// An undamaged recording of `copies` fixture cubins, each with all its instructions sampled.
fn reference(path: &Path, copies: usize) -> Result<()> {
    let cubin = fixture_cubin()?;
    let list: Vec<(u64, &[u8])> = (0..copies as u64).map(|i| (0x1000 + i, &cubin[..])).collect();
    let mut samples = Vec::new();
    for (crc, _) in &list {
        for (function, size) in KERNELS {
            for pc in (0..size).step_by(16) {
                samples.push(Sample { crc: *crc, function: function.into(), pc, samples: 1 + (pc % 7) as u32 });
            }
        }
    }
    cubins::recording_with_trace(path, &list, &samples, TRACE_RECORDS);
    Ok(())
}

/// The reference of about `bytes`: copies scaled from a 20-copy file.
fn reference_of_size(dir: &Path, name: &str, bytes: u64) -> Result<PathBuf> {
    let probe = dir.join("probe.cutr");
    reference(&probe, 20)?;
    let per_copy = std::fs::metadata(&probe)?.len() / 20;
    let p = dir.join(name);
    reference(&p, (bytes / per_copy).max(1) as usize)?;
    Ok(p)
}

fn relocations(path: &Path, functions: usize) {
    let sample = Sample { crc: 7, function: format!("f{}", functions - 1), pc: 0, samples: 10 };
    cubins::recording_with_trace(path, &[(7, &cubins::many_relocations(functions)[..])], &[sample], TRACE_RECORDS);
}

fn inline(path: &Path, depth: usize) {
    cubins::recording_with_trace(path, &[(7, &cubins::deep_inline(depth)[..])], &every_pc(depth), TRACE_RECORDS);
}

/// The inline file's undamaged twin: the same rows, lines and samples, nothing inlined.
fn flat(path: &Path, depth: usize) {
    cubins::recording_with_trace(path, &[(7, &cubins::flat_lines(depth)[..])], &every_pc(depth), TRACE_RECORDS);
}

fn every_pc(depth: usize) -> Vec<Sample> {
    (0..=depth as u64)
        .map(|k| Sample { crc: 7, function: "deep".into(), pc: 16 * k, samples: 1 + (k % 5) as u32 })
        .collect()
}

/// `count` cubins of `bytes` each: the fixture ELF, then zeros with one noise byte every 512 (so that the stored
/// chunk stays under the 1024x ratio every chunk is held to).
fn inflated(path: &Path, count: usize, bytes: usize) -> Result<()> {
    let mut cubin = fixture_cubin()?;
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    cubin.resize(bytes, 0);
    for at in (12_448..bytes).step_by(512) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        cubin[at] = x as u8;
    }
    let list: Vec<(u64, &[u8])> = (0..count as u64).map(|i| (0x2000 + i, &cubin[..])).collect();
    let samples = vec![Sample { crc: 0x2000, function: KERNELS[1].0.into(), pc: 0x330, samples: 10 }];
    cubins::recording_with_trace(path, &list, &samples, TRACE_RECORDS);
    Ok(())
}

/// Scales `n` until `make(n)` writes a file of about `bytes`.
fn sized(path: &Path, bytes: u64, start: usize, make: impl Fn(&Path, usize)) -> Result<usize> {
    make(path, start);
    let n = (start as f64 * bytes as f64 / std::fs::metadata(path)?.len() as f64) as usize;
    make(path, n);
    Ok(n)
}

/// One run: wall seconds and peak RSS bytes, from GNU time's `%e %M`.
fn run(convert: &Path, args: &[&str]) -> Result<(f64, u64)> {
    let out = Command::new("/usr/bin/time").arg("-f").arg("TIME %e %M").arg(convert).args(args).output()?;
    let err = String::from_utf8_lossy(&out.stderr);
    let line = err.lines().rfind(|l| l.starts_with("TIME ")).context("GNU time's line")?;
    let mut f = line.split_whitespace().skip(1);
    let secs: f64 = f.next().context("seconds")?.parse()?;
    let kb: u64 = f.next().context("peak RSS")?.parse()?;
    if !out.status.success() {
        bail!("{} {args:?}: {err}", convert.display());
    }
    Ok((secs, kb * 1024))
}

fn main() -> Result<()> {
    let args = Args::parse();
    let tmp = tempfile_dir(&args)?;
    let dir = tmp.as_path();
    let wanted = |c: &str| args.only.is_empty() || args.only.iter().any(|o| o == c);
    let mut classes: Vec<(String, PathBuf, PathBuf)> = Vec::new();
    if wanted("relocations") {
        let p = dir.join("relocations.cutr");
        let n = sized(&p, 890_000, 20_000, relocations)?;
        classes.push((
            format!("relocations ({n} functions)"),
            p.clone(),
            reference_of_size(dir, "ref_rel.cutr", size(&p)?)?,
        ));
    }
    if wanted("inline") {
        let p = dir.join("inline.cutr");
        let n = sized(&p, 980_000, 10_000, inline)?;
        classes.push((
            format!("inline (depth {n}, {} PCs)", n + 1),
            p.clone(),
            reference_of_size(dir, "ref_inl.cutr", size(&p)?)?,
        ));
        let twin = dir.join("flat.cutr");
        flat(&twin, n);
        classes.push((format!("inline vs its flat twin (depth {n})"), p.clone(), twin));
    }
    if wanted("claims") {
        let p = dir.join("claims.cutr");
        inflated(&p, 30, 255 << 20)?;
        classes.push((
            "claims (30 x 255 MiB)".into(),
            p.clone(),
            reference_of_size(dir, "ref_claims.cutr", size(&p)?)?,
        ));
    }
    if wanted("under_limit") {
        let p = dir.join("under_limit.cutr");
        inflated(&p, 30, 31 << 20)?;
        classes.push((
            "under_limit (30 x 31 MiB)".into(),
            p.clone(),
            reference_of_size(dir, "ref_under.cutr", size(&p)?)?,
        ));
    }
    let out = dir.join("out");
    let out = out.to_str().context("a UTF-8 path")?;
    println!(
        "class | command | file (hostile / undamaged) | time s (hostile / undamaged) | peak RSS MB (hostile / undamaged) | ratios"
    );
    for (name, hostile, undamaged) in &classes {
        for command in ["source", "--perfetto", "--chrome"] {
            let argv = |f: &Path| -> Vec<String> {
                let f = f.display().to_string();
                match command {
                    "source" => vec!["source".into(), f],
                    c => vec![f, c.into(), "-o".into(), out.into()],
                }
            };
            let (mut th, mut tu, mut mh, mut mu) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
            for _ in 0..args.reps {
                let a = argv(hostile);
                let (t, m) = run(&args.convert, &a.iter().map(String::as_str).collect::<Vec<_>>())?;
                th.push(t);
                mh.push(m as f64);
                let b = argv(undamaged);
                let (t, m) = run(&args.convert, &b.iter().map(String::as_str).collect::<Vec<_>>())?;
                tu.push(t);
                mu.push(m as f64);
            }
            let (th, tu, mh, mu) = (median(th), median(tu), median(mh) / 1e6, median(mu) / 1e6);
            println!(
                "{name} | {command} | {} / {} KB | {th:.2} / {tu:.2} | {mh:.1} / {mu:.1} | time {:.2}x, RSS {:.2}x",
                size(hostile)? / 1000,
                size(undamaged)? / 1000,
                th / tu.max(0.01),
                mh / mu
            );
        }
    }
    Ok(())
}

fn size(p: &Path) -> Result<u64> {
    Ok(std::fs::metadata(p)?.len())
}

fn tempfile_dir(args: &Args) -> Result<PathBuf> {
    let d = match &args.dir {
        Some(d) => d.clone(),
        None => std::env::temp_dir().join(format!("hostile_cost_cubins.{}", std::process::id())),
    };
    std::fs::create_dir_all(&d)?;
    Ok(d)
}
