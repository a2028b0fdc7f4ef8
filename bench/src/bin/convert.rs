//! Conversion benchmark (docs/BENCHMARKS.md, "Converter"): a generated trace converted by the `cupti-convert`
//! binary to Perfetto and to Chrome JSON, and analysed by `stats` and `diff`, each as its own process (wall time
//! and peak RSS from wait4), interleaved with decompression alone (decode every chunk, in this process) as the
//! floor, repeated; medians reported.

use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use anyhow::{Context, Result, bail};
use clap::Parser;
use cutr_bench::median;
use cutr_format::Reader;
use cutr_synth::{SynthOptions, write_file};
use rayon::prelude::*;

#[derive(Parser)]
struct Args {
    #[arg(long, default_value_t = 10_000_000)]
    records: u64,
    #[arg(long, default_value_t = 3)]
    reps: usize,
    /// The cupti-convert binary to measure.
    #[arg(long, default_value = "target/release/cupti-convert")]
    bin: PathBuf,
    /// Where to write the generated trace and the outputs.
    #[arg(long, default_value = "/tmp/cutr-bench")]
    dir: PathBuf,
}

/// Writes `n` bytes to `path` from a reused block (as an exporter streaming its shards would).
fn write_bytes(path: &Path, n: u64, block: &[u8]) -> Result<()> {
    use std::io::Write;
    let mut f = std::fs::File::create(path)?;
    let mut left = n;
    while left > 0 {
        let k = left.min(block.len() as u64) as usize;
        f.write_all(&block[..k])?;
        left -= k as u64;
    }
    Ok(())
}

/// Runs a command; returns (seconds, peak RSS bytes, stderr).
fn measure(cmd: &mut Command) -> Result<(f64, u64, String)> {
    let t = Instant::now();
    let child = cmd.stdout(Stdio::null()).stderr(Stdio::piped()).spawn()?;
    let pid = child.id() as i32;
    let mut status = 0;
    // SAFETY: a zeroed rusage is a valid out-parameter.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    let stderr = child.stderr.map(|mut e| {
        let mut s = String::new();
        let _ = std::io::Read::read_to_string(&mut e, &mut s);
        s
    });
    // SAFETY: waiting for our own child with valid out-pointers.
    unsafe { libc::wait4(pid, &mut status, 0, &mut ru) };
    let secs = t.elapsed().as_secs_f64();
    if std::process::ExitStatus::from_raw(status).code().is_none_or(|c| c != 0 && c != 3) {
        bail!("command failed: {:?}: {}", cmd, stderr.unwrap_or_default());
    }
    Ok((secs, ru.ru_maxrss as u64 * 1024, stderr.unwrap_or_default()))
}

fn slices(stderr: &str) -> Option<u64> {
    let i = stderr.find(" slices")?;
    stderr[..i].rsplit(' ').next()?.parse().ok()
}

/// A command to run, made afresh each rep.
type Make<'a> = Box<dyn Fn() -> Command + 'a>;

/// The converter runs measured: Perfetto (compressed and plain), Chrome JSON, stats and diff.
fn converter_commands<'a>(
    bin: &'a Path,
    input: &'a Path,
    out: &'a dyn Fn(&str) -> PathBuf,
) -> Vec<(&'static str, Make<'a>)> {
    let run = move |args: Vec<std::ffi::OsString>| -> Make<'a> {
        Box::new(move || {
            let mut c = Command::new(bin);
            c.args(&args);
            c
        })
    };
    let os = |v: &[&dyn AsRef<std::ffi::OsStr>]| v.iter().map(|a| a.as_ref().to_os_string()).collect::<Vec<_>>();
    vec![
        ("perfetto", run(os(&[&input, &"--perfetto", &"-o", &out("o.pftrace")]))),
        ("perfetto --no-compress", run(os(&[&input, &"--perfetto", &"--no-compress", &"-o", &out("o.plain.pftrace")]))),
        ("chrome json", run(os(&[&input, &"--chrome", &"-o", &out("o.json")]))),
        ("stats", run(os(&[&"stats", &input, &"--json"]))),
        ("diff (self)", run(os(&[&"diff", &input, &input, &"--json"]))),
    ]
}

/// Decompressing every chunk of `input`, as the floor of every conversion; checks the record count.
fn decompress_all(input: &Path, records: u64) -> Result<()> {
    let r = Reader::open(input)?;
    let n: usize = r.par_map_activity(|_, d| d.map(|d| d.record_count()).unwrap_or(0)).iter().sum();
    assert_eq!(n as u64, records);
    Ok(())
}

/// Compresses `plain` as the converter compresses Perfetto packets (libdeflate level 1, 128 KiB batches, on every
/// thread) and writes the result to `path`.
fn compress_and_write(plain: &[u8], path: &Path) -> Result<()> {
    let batches: Vec<Vec<u8>> = plain
        .par_chunks(128 << 10)
        .map_init(
            || libdeflater::Compressor::new(libdeflater::CompressionLvl::new(1).unwrap_or_default()),
            |c, batch| {
                let mut z = vec![0u8; c.zlib_compress_bound(batch.len())];
                let n = c.zlib_compress(batch, &mut z).unwrap_or(0);
                z.truncate(n);
                z
            },
        )
        .collect();
    let mut f = std::io::BufWriter::with_capacity(8 << 20, std::fs::File::create(path)?);
    for b in &batches {
        std::io::Write::write_all(&mut f, b)?;
    }
    Ok(())
}

/// The least any converter producing each output can take, with no decoding, joining, layout or encoding at all:
/// decompression, then (a) writing as many bytes as the compressed Perfetto output has, (b) writing the plain
/// packets, (c) compressing the plain packets as the converter does and writing the result. (b) and (c) bound the
/// two forms of the output from below. Prints each median against decompression alone (`floor` s).
fn measure_floors(a: &Args, input: &Path, records: u64, floor: f64) -> Result<()> {
    let out = |n: &str| a.dir.join(n);
    let pf_bytes = std::fs::metadata(out("o.pftrace")).map(|m| m.len()).unwrap_or(0);
    let plain = std::fs::read(out("o.plain.pftrace")).context("reading the plain Perfetto output")?;
    let block: Vec<u8> = (0..8usize << 20).map(|i| (i * 31 % 251) as u8).collect();
    type Job<'a> = Box<dyn Fn() -> Result<()> + 'a>;
    let floors: [(String, Job); 3] = [
        (
            format!("decompression + writing {} MB (the compressed Perfetto output's size)", pf_bytes / 1_000_000),
            Box::new(|| write_bytes(&out("floor.bin"), pf_bytes, &block)),
        ),
        (
            format!("decompression + writing the {} MB of plain packets", plain.len() / 1_000_000),
            Box::new(|| Ok(std::fs::write(out("floor.bin"), &plain)?)),
        ),
        (
            format!("decompression + compressing the {} MB of plain packets + writing them", plain.len() / 1_000_000),
            Box::new(|| compress_and_write(&plain, &out("floor.bin"))),
        ),
    ];
    let mut floor_times: Vec<Vec<f64>> = vec![Vec::new(); floors.len()];
    for _ in 0..a.reps {
        for (i, (_, job)) in floors.iter().enumerate() {
            let t = Instant::now();
            decompress_all(input, records)?;
            job()?;
            floor_times[i].push(t.elapsed().as_secs_f64());
        }
    }
    for (i, (name, _)) in floors.iter().enumerate() {
        let wf = median(floor_times[i].clone());
        println!("floor: {name}: {wf:.3} s ({:.1}x decompression)", wf / floor);
    }
    Ok(())
}

fn main() -> Result<()> {
    let a = Args::parse();
    std::fs::create_dir_all(&a.dir)?;
    let input = a.dir.join("bench.cutr");
    let truth = write_file(&input, SynthOptions { records: a.records, ..Default::default() }).context("generating")?;
    let r = Reader::open(&input)?;
    let raw: u64 = r.activity_chunks().map(|c| c.header.raw_len).sum();
    drop(r);
    println!(
        "# converter benchmark: {} records ({} MB decompressed record bytes, {} MB file), {} reps, {} threads",
        truth.records,
        raw / 1_000_000,
        std::fs::metadata(&input)?.len() / 1_000_000,
        a.reps,
        rayon::current_num_threads()
    );
    let out = |n: &str| a.dir.join(n);
    let cmds = converter_commands(&a.bin, &input, &out);
    let mut floor = Vec::new();
    let mut times: Vec<Vec<f64>> = vec![Vec::new(); cmds.len()];
    let mut rss: Vec<u64> = vec![0; cmds.len()];
    let mut slice_count = 0;
    for _ in 0..a.reps {
        let t = Instant::now();
        decompress_all(&input, truth.records)?;
        floor.push(t.elapsed().as_secs_f64());
        for (i, (_, make)) in cmds.iter().enumerate() {
            let (s, m, err) = measure(&mut make())?;
            times[i].push(s);
            rss[i] = rss[i].max(m);
            if i == 0 {
                slice_count = slices(&err).unwrap_or(0);
            }
        }
    }
    let f = median(floor);
    println!("decompression alone (decode every chunk): {:.3} s, {:.1} M records/s", f, truth.records as f64 / f / 1e6);
    measure_floors(&a, &input, truth.records, f)?;
    for (i, (name, _)) in cmds.iter().enumerate() {
        let t = median(times[i].clone());
        println!(
            "{name}: {:.3} s ({:.1}x decompression), {:.1} M records/s, peak RSS {} MB ({:.2}x decompressed bytes)",
            t,
            t / f,
            truth.records as f64 / t / 1e6,
            rss[i] / 1_000_000,
            rss[i] as f64 / raw as f64
        );
    }
    let size = |p: &Path| std::fs::metadata(p).map(|m| m.len()).unwrap_or(0);
    let per_slice = |p: &Path| {
        format!("{:.1} bytes/slice ({} MB)", size(p) as f64 / slice_count.max(1) as f64, size(p) / 1_000_000)
    };
    println!(
        "perfetto: {slice_count} slices, {}; plain packets: {}; chrome json: {}",
        per_slice(&out("o.pftrace")),
        per_slice(&out("o.plain.pftrace")),
        per_slice(&out("o.json")),
    );
    Ok(())
}
