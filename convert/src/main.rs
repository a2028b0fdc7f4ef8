//! `cupti-convert`: reads `.cutr` recordings and converts them or reports on them.
//!
//! Exit codes: 0 success (warnings, e.g. a recovered file or failed joins, go to stderr); 1 an input could not
//! be read or an output not written; 2 wrong arguments; 3 `diff` found a regression.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Instant;

use anyhow::{Context, Result, bail};
use clap::{Args, Parser, Subcommand};
use cutr_convert::export::{ExportOptions, Format, Progress, Stage, export, shard_slices_for};
use cutr_convert::layout::slice_rows;
use cutr_convert::model::{Filter, LoadOptions, load_prefetched, load_readers, open_inputs};
use cutr_format::Reader;
use cutr_format::synth::{SynthOptions, write_file};

// The system allocator, measured against mimalloc (docs/BENCHMARKS.md): since chunks are decoded a window at a
// time into pre-sized rows, mimalloc's arenas and per-thread heaps only added memory the kernel must zero
// (10M records: 0.95 GB vs 0.75 GB peak, 2.8 s vs 2.15 s; a small recording: 13.3 ms vs 12.1 ms).

#[derive(Parser, Debug)]
#[command(
    name = "cupti-convert",
    version,
    about = "Convert .cutr CUDA activity recordings to Perfetto or Chrome traces, and report on them",
    args_conflicts_with_subcommands = true,
    subcommand_negates_reqs = true
)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    #[command(flatten)]
    convert: ConvertArgs,
}

impl Cli {
    /// The recordings the command reads (sizes the worker pool).
    fn inputs(&self) -> Vec<&Path> {
        match &self.command {
            None => self.convert.files.iter().map(PathBuf::as_path).collect(),
            Some(Command::Info { file, .. }) => vec![file.as_path()],
            Some(Command::Stats { files, .. }) => files.iter().map(PathBuf::as_path).collect(),
            Some(Command::Diff { files, base, new, .. }) => {
                files.iter().chain(base).chain(new).map(PathBuf::as_path).collect()
            }
            Some(Command::Generate { .. }) => Vec::new(),
        }
    }
}

#[derive(Args, Debug)]
struct ConvertArgs {
    /// Recordings to convert; several (one per process or rank) merge onto one timeline.
    #[arg(required = true)]
    files: Vec<PathBuf>,
    /// Write a Perfetto protobuf trace (.pftrace).
    #[arg(long, conflicts_with = "chrome", required_unless_present = "chrome")]
    perfetto: bool,
    /// Write a Chrome trace JSON in PyTorch profiler conventions (.json).
    #[arg(long)]
    chrome: bool,
    /// Output path (default: the first input with .pftrace or .json, plus .gz with --gzip).
    #[arg(short, long)]
    output: Option<PathBuf>,
    /// Compress the output with gzip.
    #[arg(long)]
    gzip: bool,
    /// Perfetto: write plain packets, not deflate-compressed batches (`compressed_packets`, which every trace
    /// processor since 2019 reads). About 4x larger; for readers that parse the protobuf themselves.
    #[arg(long, conflicts_with = "chrome")]
    no_compress: bool,
    /// Keep only activity after this time since the first record (e.g. 1.5, 1.5s, 200ms, 10us).
    #[arg(long)]
    start: Option<String>,
    /// Keep only activity before this time since the first record.
    #[arg(long)]
    end: Option<String>,
    /// Keep only these kinds: kernel, memcpy, memset, runtime, driver, sync, nvtx, overhead, memory, event.
    #[arg(long, value_delimiter = ',')]
    kinds: Vec<String>,
    /// Print nothing but errors and warnings.
    #[arg(short, long)]
    quiet: bool,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// What a recording holds: versions, devices, time span, chunks, records per kind, sizes, losses.
    Info {
        file: PathBuf,
        /// Print the report as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Where GPU time went: kernels, API calls, copies and memsets, NVTX ranges, utilization, losses.
    Stats {
        #[arg(required = true)]
        files: Vec<PathBuf>,
        /// Print JSON.
        #[arg(long, conflicts_with = "csv")]
        json: bool,
        /// Print CSV (one table; the `section` column tells the summaries apart).
        #[arg(long)]
        csv: bool,
        /// Show only the N biggest rows of each summary.
        #[arg(long)]
        top: Option<usize>,
    },
    /// Compare recordings: per kernel and NVTX range, what got slower or faster, with a noise-aware verdict.
    /// Exit code 3 when something regressed.
    Diff {
        /// BASE NEW (one recording each); use --base/--new for several runs per side.
        #[arg(num_args = 0..=2)]
        files: Vec<PathBuf>,
        /// Baseline runs (several recordings estimate run-to-run noise).
        #[arg(long, num_args = 1.., conflicts_with = "files")]
        base: Vec<PathBuf>,
        /// New runs.
        #[arg(long, num_args = 1.., requires = "base")]
        new: Vec<PathBuf>,
        /// Changes within this many percent are neutral.
        #[arg(long, default_value_t = 5.0)]
        threshold: f64,
        /// Changes smaller than this per run are neutral (e.g. 10us, 1ms).
        #[arg(long, default_value = "10us")]
        min_delta: String,
        /// Match kernels with template arguments and parameter lists removed.
        #[arg(long)]
        normalize_templates: bool,
        /// Print JSON.
        #[arg(long, conflicts_with = "markdown")]
        json: bool,
        /// Print Markdown fit for a pull-request comment.
        #[arg(long)]
        markdown: bool,
        /// Also list unchanged rows.
        #[arg(long)]
        all: bool,
    },
    /// Write a synthetic recording (a launch-bound training loop with realistic CUPTI records).
    Generate {
        #[arg(short, long)]
        output: PathBuf,
        /// About this many records.
        #[arg(long, default_value_t = 1_000_000)]
        records: u64,
        #[arg(long, default_value_t = 1)]
        seed: u64,
        /// CUPTI API version whose record layouts to write (130001 = CUDA 13.0, 28 = CUDA 12.9).
        #[arg(long, default_value_t = 130001)]
        cupti_api: u32,
        /// Bytes per activity buffer (one chunk each).
        #[arg(long, default_value_t = 4 << 20)]
        buffer_bytes: usize,
        /// Kernel launches only (external correlation + runtime API + kernel record per launch).
        #[arg(long)]
        launches_only: bool,
    },
}

fn warn(file: &Path, msg: &str) {
    eprintln!("cupti-convert: warning: {}: {msg}", file.display());
}

fn open(file: &Path) -> Result<Reader> {
    let _s = cutr_convert::phase::span(|| format!("open {}", file.display()));
    Reader::open(file).with_context(|| file.display().to_string())
}

/// Parses a time like `1.5`, `1.5s`, `200ms`, `10us`, `500ns` into ns.
fn parse_time(s: &str) -> Result<u64> {
    let t = s.trim();
    let (num, scale) = [("ns", 1.0), ("us", 1e3), ("ms", 1e6), ("s", 1e9)]
        .iter()
        .find_map(|(suf, sc)| t.strip_suffix(suf).map(|n| (n, *sc)))
        .unwrap_or((t, 1e9));
    let v: f64 = num.trim().parse().with_context(|| format!("not a time: '{s}' (use e.g. 1.5, 200ms, 10us)"))?;
    if !(v >= 0.0 && v.is_finite()) {
        bail!("time must be a non-negative number: '{s}'");
    }
    Ok((v * scale) as u64)
}

fn kinds(names: &[String]) -> Result<Vec<u32>> {
    use cutr_schema::kinds::*;
    let mut out = Vec::new();
    for n in names {
        let ks: &[u32] = match n.as_str() {
            "kernel" => &[CONCURRENT_KERNEL, KERNEL],
            "memcpy" => &[MEMCPY, MEMCPY2],
            "memset" => &[MEMSET],
            "runtime" => &[RUNTIME],
            "driver" => &[DRIVER],
            "sync" => &[SYNCHRONIZATION],
            "nvtx" => &[MARKER, MARKER_DATA],
            "overhead" => &[OVERHEAD],
            "memory" => &[MEMORY2],
            "event" => &[CUDA_EVENT],
            "external" => &[EXTERNAL_CORRELATION],
            other => bail!(
                "unknown kind '{other}' (kernel, memcpy, memset, runtime, driver, sync, nvtx, overhead, memory, event, external)"
            ),
        };
        out.extend_from_slice(ks);
    }
    Ok(out)
}

/// The progress bar on stderr while converting: a spinner while decoding and laying out, then a bar over the
/// shards written. Only on a terminal, and never with `--quiet`: piped or logged stderr gets no control characters.
struct ProgressBar(Option<indicatif::ProgressBar>);

impl ProgressBar {
    fn new(quiet: bool) -> Self {
        if quiet || !std::io::IsTerminal::is_terminal(&std::io::stderr()) {
            return ProgressBar(None);
        }
        let b = indicatif::ProgressBar::new_spinner();
        b.enable_steady_tick(std::time::Duration::from_millis(100));
        ProgressBar(Some(b))
    }

    fn stage(&self, what: &str) {
        if let Some(b) = &self.0 {
            b.set_message(what.to_string());
        }
    }

    fn export_progress(&self) -> Option<Progress> {
        let b = self.0.clone()?;
        let style =
            indicatif::ProgressStyle::with_template("{spinner} writing [{bar:40}] {pos}/{len} shards, {elapsed}")
                .expect("a valid template")
                .progress_chars("=> ");
        Some(Progress(Arc::new(move |stage| match stage {
            Stage::Layout => b.set_message("laying out tracks"),
            Stage::Writing { done, total } => {
                if b.length() != Some(total) {
                    b.set_style(style.clone());
                    b.set_length(total);
                }
                b.set_position(done);
            }
        })))
    }

    /// Runs `f` (which prints to stderr) with the bar hidden, so the two do not garble each other.
    fn suspend(&self, f: impl FnOnce()) {
        match &self.0 {
            Some(b) => b.suspend(f),
            None => f(),
        }
    }

    fn clear(&self) {
        if let Some(b) = &self.0 {
            b.finish_and_clear();
        }
    }
}

impl Drop for ProgressBar {
    fn drop(&mut self) {
        self.clear();
    }
}

fn convert(a: ConvertArgs) -> Result<()> {
    let started = Instant::now();
    let format = if a.perfetto { Format::Perfetto } else { Format::Chrome };
    let output = a.output.clone().unwrap_or_else(|| {
        let ext = match (format, a.gzip) {
            (Format::Perfetto, false) => "pftrace",
            (Format::Perfetto, true) => "pftrace.gz",
            (Format::Chrome, false) => "json",
            (Format::Chrome, true) => "json.gz",
        };
        let stem = if a.files.len() > 1 { "merged" } else { "" };
        let base = a.files[0].with_extension("");
        let name = format!("{}{}{}.{ext}", base.display(), if stem.is_empty() { "" } else { "." }, stem);
        PathBuf::from(name)
    });
    let (readers, prefetched) =
        open_inputs(&a.files, a.start.is_none() && a.end.is_none()).map_err(|e| anyhow::anyhow!("{e}"))?;
    for (f, r) in a.files.iter().zip(&readers) {
        if let Some(rec) = r.recovery() {
            warn(
                f,
                &format!(
                    "not closed cleanly ({}); converting up to its last complete chunk, {} bytes lost",
                    rec.reason, rec.lost_bytes
                ),
            );
        }
        for p in r.problems() {
            warn(f, &p.to_string());
        }
    }
    // --start/--end count from the earliest record of all inputs.
    let mut filter = Filter { kinds: kinds(&a.kinds)?, ..Default::default() };
    if a.start.is_some() || a.end.is_some() {
        let first = readers
            .iter()
            .filter_map(|r| {
                let tb = cutr_convert::timebase::TimeBase::from_clocks(r.clocks());
                r.activity_chunks().filter(|c| c.header.t_min != 0).map(|c| tb.to_trace(c.header.t_min)).min()
            })
            .min()
            .unwrap_or(0);
        filter.start = a.start.as_deref().map(parse_time).transpose()?.map(|t| first + t);
        filter.end = a.end.as_deref().map(parse_time).transpose()?.map(|t| first + t);
        if let (Some(s), Some(e)) = (filter.start, filter.end)
            && e < s
        {
            bail!("--end is before --start");
        }
    }
    let raw_bytes: u64 = readers.iter().flat_map(|r| r.activity_chunks()).map(|c| c.header.raw_len).sum();
    cutr_convert::memory::input_size_known(raw_bytes);
    let bar = ProgressBar::new(a.quiet);
    let records: u64 = readers.iter().flat_map(|r| r.activity_chunks()).map(|c| u64::from(c.header.record_count)).sum();
    bar.stage(&format!("decoding {records} records from {} file(s)", readers.len()));
    cutr_convert::phase::mark("open");
    let mut trace =
        load_prefetched(&a.files, &readers, &LoadOptions { filter }, prefetched).map_err(|e| anyhow::anyhow!("{e}"))?;
    drop(readers);
    let s = &trace.stats;
    let join_warnings = [
        (s.gpu_without_api, "GPU records have no launching runtime/driver API record (no arrow)"),
        (s.graph_kernels_without_launch, "CUDA graph kernels have no graph launch record"),
        (s.external_without_api, "external correlation ids match no API record"),
        (s.nvtx_ends_without_start, "NVTX range ends have no start"),
        (s.nvtx_unclosed_ranges, "NVTX ranges were never closed (shown up to the end of the trace)"),
        (s.zero_timestamp_records, "records have no timestamps (CUPTI could not time them); left out"),
        (s.inverted_records, "records end before they start; left out"),
        (s.records_in_damaged_chunks, "records are in damaged or truncated chunks; lost"),
        (s.unresolved_names, "string pointers have no text in the file"),
    ];
    for (n, what) in join_warnings {
        if n > 0 {
            bar.suspend(|| warn(&a.files[0], &format!("{n} {what}")));
        }
    }
    let loss = trace.loss();
    for (k, v) in loss.entries() {
        if v > 0 {
            bar.suspend(|| warn(&a.files[0], &format!("recording lost data: {k} = {v}")));
        }
    }
    let opts = ExportOptions {
        format,
        gzip: a.gzip,
        compress_packets: !a.no_compress,
        shard_slices: shard_slices_for(slice_rows(&trace), format),
        progress: bar.export_progress(),
    };
    let summary = export(&mut trace, &output, &opts).with_context(|| format!("cannot write {}", output.display()));
    bar.clear();
    let summary = summary?;
    if !a.quiet {
        eprintln!(
            "cupti-convert: wrote {} ({} bytes): {} slices, {} arrows, {} tracks in {:.3} s",
            output.display(),
            summary.bytes,
            summary.slices,
            summary.flows,
            summary.tracks,
            started.elapsed().as_secs_f64()
        );
    }
    // The process ends now: handing the rows back to the allocator one vector at a time (and their pages to the
    // kernel) is work nobody waits for but the user.
    std::mem::forget(trace);
    Ok(())
}

/// Loads each file as its own trace (one run each).
fn load_runs(files: &[PathBuf]) -> Result<Vec<cutr_convert::model::Trace>> {
    files
        .iter()
        .map(|f| {
            let r = open(f)?;
            if let Some(rec) = r.recovery() {
                warn(f, &format!("not closed cleanly ({}); using it up to its last complete chunk", rec.reason));
            }
            load_readers(std::slice::from_ref(f), std::slice::from_ref(&r), &LoadOptions::default())
                .map_err(|e| anyhow::anyhow!("{e}"))
        })
        .collect()
}

/// Exit code of `diff` when it finds a regression.
const EXIT_REGRESSION: u8 = 3;

fn run(cli: Cli) -> Result<ExitCode> {
    match cli.command {
        None => convert(cli.convert).map(|()| ExitCode::SUCCESS),
        Some(Command::Stats { files, json, csv, top }) => {
            let mut t = load_runs(&files)?;
            let mut trace = if t.len() == 1 {
                t.pop().unwrap()
            } else {
                let readers: Vec<Reader> = files.iter().map(|f| open(f)).collect::<Result<_>>()?;
                load_readers(&files, &readers, &LoadOptions::default()).map_err(|e| anyhow::anyhow!("{e}"))?
            };
            let s = cutr_convert::stats::compute(&mut trace, top);
            cutr_convert::phase::mark("stats");
            // The process ends after printing: freeing the trace's rows first is work nobody waits for.
            std::mem::forget(trace);
            if json {
                println!("{}", serde_json::to_string_pretty(&s)?);
            } else if csv {
                print!("{}", cutr_convert::stats::render_csv(&s));
            } else {
                print!("{}", cutr_convert::stats::render_text(&s));
            }
            Ok(ExitCode::SUCCESS)
        }
        Some(Command::Diff { files, base, new, threshold, min_delta, normalize_templates, json, markdown, all }) => {
            let (base, new) = if !base.is_empty() {
                if new.is_empty() {
                    bail!("--base needs --new");
                }
                (base, new)
            } else if files.len() == 2 {
                (vec![files[0].clone()], vec![files[1].clone()])
            } else {
                bail!("give BASE NEW, or --base RUN... --new RUN...");
            };
            if !(threshold >= 0.0 && threshold.is_finite()) {
                bail!("--threshold must be a non-negative percentage");
            }
            let opts = cutr_convert::diff::DiffOptions {
                threshold_pct: threshold,
                min_delta_ns: parse_time(&min_delta)?,
                normalize_templates,
                ..Default::default()
            };
            let mut b = load_runs(&base)?;
            let mut n = load_runs(&new)?;
            let report = cutr_convert::diff::diff(&mut b, &mut n, &opts);
            cutr_convert::phase::mark("diff");
            // The process ends after printing: freeing two traces' rows first is work nobody waits for.
            std::mem::forget((b, n));
            if json {
                println!("{}", serde_json::to_string_pretty(&report)?);
            } else if markdown {
                print!("{}", cutr_convert::diff::render_markdown(&report, 20));
            } else {
                print!("{}", cutr_convert::diff::render_text(&report, all));
            }
            Ok(if report.verdict == cutr_convert::diff::Verdict::Regression {
                ExitCode::from(EXIT_REGRESSION)
            } else {
                ExitCode::SUCCESS
            })
        }
        Some(Command::Info { file, json }) => {
            let reader = open(&file)?;
            let report = cutr_convert::info::report(&reader);
            for w in &report.warnings {
                warn(&file, w);
            }
            if json {
                println!("{}", serde_json::to_string_pretty(&report)?);
            } else {
                print!("{}", cutr_convert::info::render_text(&report));
            }
            Ok(ExitCode::SUCCESS)
        }
        Some(Command::Generate { output, records, seed, cupti_api, buffer_bytes, launches_only }) => {
            let opts = SynthOptions { records, seed, cupti_api_version: cupti_api, buffer_bytes, launches_only };
            let truth = write_file(&output, opts).with_context(|| output.display().to_string())?;
            eprintln!(
                "cupti-convert: wrote {} ({} records in {} buffers, {} steps)",
                output.display(),
                truth.records,
                truth.buffers,
                truth.steps
            );
            Ok(ExitCode::SUCCESS)
        }
    }
}

fn main() -> ExitCode {
    cutr_convert::phase::init();
    cutr_convert::memory::start_small();
    let cli = {
        let _s = cutr_convert::phase::span(|| "parse arguments".into());
        Cli::parse()
    };
    let result = cutr_convert::pool::run_on_pool(cutr_convert::pool::workers_for(&cli.inputs()), || run(cli));
    cutr_convert::phase::print_spans();
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("cupti-convert: error: {e:#}");
            ExitCode::from(1)
        }
    }
}
