//! The command line of `cupti-convert`: its commands and arguments, and the parsing of times and kinds.

use std::path::{Path, PathBuf};

use anyhow::Result;
use clap::{Args, Parser, Subcommand};

#[derive(Parser, Debug)]
#[command(
    name = "cupti-convert",
    version,
    about = "Convert .cutr CUDA activity recordings to Perfetto or Chrome traces, and report on them",
    args_conflicts_with_subcommands = true,
    subcommand_negates_reqs = true,
    arg_required_else_help = true
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Option<Command>,
    #[command(flatten)]
    pub convert: ConvertArgs,
}

impl Cli {
    /// The recordings the command reads (sizes the worker pool).
    pub fn inputs(&self) -> Vec<&Path> {
        match &self.command {
            None => self.convert.files.iter().map(PathBuf::as_path).collect(),
            Some(Command::Info { files, .. }) => files.iter().map(PathBuf::as_path).collect(),
            Some(Command::Stats { files, .. }) => files.iter().map(PathBuf::as_path).collect(),
            Some(Command::Analyze { files, .. }) => files.iter().map(PathBuf::as_path).collect(),
            Some(Command::Diff { files, base, new, .. }) => {
                files.iter().chain(base).chain(new).map(PathBuf::as_path).collect()
            }
            Some(Command::Source { files, base, new, .. }) => {
                files.iter().chain(base).chain(new).map(PathBuf::as_path).collect()
            }
            Some(Command::Export { files, .. }) => files.iter().map(PathBuf::as_path).collect(),
            Some(Command::Sql { args, query, .. }) => {
                args.iter().skip(usize::from(query.is_none())).map(Path::new).collect()
            }
            Some(Command::Generate { .. } | Command::Docs { .. }) => Vec::new(),
        }
    }

    /// Whether the command writes to standard output: a report, the documentation, or a trace to `-o -`.
    pub fn writes_to_stdout(&self) -> bool {
        match &self.command {
            None => self.convert.output.as_deref() == Some(Path::new("-")),
            Some(Command::Export { .. } | Command::Generate { .. }) => false,
            Some(_) => true,
        }
    }
}

/// Rows per section of `stats`'s text report when `--top` is not given (`sql --query top-kernels` lists as many).
pub const DEFAULT_TOP: usize = 20;

#[derive(Args, Debug)]
pub struct ConvertArgs {
    /// Recordings to convert; several (one per process or rank) merge onto one timeline.
    #[arg(required = true)]
    pub files: Vec<PathBuf>,
    /// Write a Perfetto protobuf trace (.pftrace).
    #[arg(long, conflicts_with = "chrome")]
    pub perfetto: bool,
    /// Write a Chrome trace JSON in PyTorch profiler conventions (.json).
    #[arg(long)]
    pub chrome: bool,
    /// Output path: `-` for standard output; an existing device or FIFO is written in place (default: the first
    /// input's name with .pftrace or .json, plus .gz with --gzip, in the current directory).
    #[arg(short, long)]
    pub output: Option<PathBuf>,
    /// Compress the output with gzip.
    #[arg(long)]
    pub gzip: bool,
    /// Perfetto: write plain packets, not deflate-compressed batches (`compressed_packets`, which every trace
    /// processor since 2019 reads). About 4x larger; for readers that parse the protobuf themselves.
    #[arg(long, conflicts_with = "chrome")]
    pub no_compress: bool,
    /// Keep only activity after this time since the first record (e.g. 1.5, 1.5s, 200ms, 10us).
    #[arg(long)]
    pub start: Option<String>,
    /// Keep only activity before this time since the first record.
    #[arg(long)]
    pub end: Option<String>,
    /// Keep only these kinds: kernel, memcpy, memset, runtime, driver, sync, nvtx, overhead, memory, event.
    #[arg(long, value_delimiter = ',')]
    pub kinds: Vec<String>,
    /// The rank of each input, in order (`--rank 3` for one file, `--rank 0,1` for two): for processes whose
    /// environment names none (`torch.multiprocessing.spawn`); wins over the environment's. HTA reads it from the
    /// JSON's `distributedInfo`; the timeline labels processes by it.
    #[arg(long, value_delimiter = ',', value_name = "RANK")]
    pub rank: Vec<u32>,
    /// The job's world size for --rank (default: one more than the highest rank given).
    #[arg(long, value_name = "N", requires = "rank")]
    pub world_size: Option<u32>,
    /// Draw every driver API call. By default the timeline leaves out the driver calls made inside a runtime call
    /// on the same thread (the runtime's own, as Nsight Systems does) and driver queries (`cu...Get...`) that
    /// launched nothing, and says how many; `stats` counts them all.
    #[arg(long)]
    pub driver_calls: bool,
    /// Refuse an output larger than SIZE (e.g. 500MB, 20GB; `none`: no limit), checked on an estimate before
    /// writing and again while writing (nothing is kept past it). Default: 500 bytes per byte of the inputs, at
    /// least 256 MiB (every real recording's Chrome JSON is under 115 times its size; a hostile one can be
    /// thousands of times).
    #[arg(long, value_name = "SIZE", value_parser = parse_max_output)]
    pub max_output: Option<MaxOutput>,
    /// Add a `cutr: findings` track to each process that has findings: `analyze`'s findings, a slice over each
    /// gap or window one names (rule and severity; summary, event and correlation id as args). Opt-in: running
    /// the analysis adds 45-70% to the conversion time (README).
    #[arg(long)]
    pub findings: bool,
    /// With --findings: the NVTX ranges whose name starts with PREFIX are the steps the findings are judged over,
    /// as `analyze --step` (default: PyTorch's `ProfilerStep#N` ranges, else each CUDA graph launch). With
    /// --split-by step: the steps the trace is split at (default: `ProfilerStep#`).
    #[arg(long, value_name = "PREFIX")]
    pub step: Option<String>,
    /// Perfetto: one trace per window instead of one file, OUT-001.pftrace, OUT-002.pftrace, ... (OUT: -o
    /// without its .pftrace, or the default name's stem). `step`: a window per NVTX step range of the first
    /// process that has them (--step PREFIX, default `ProfilerStep#`; OUT-000 holds what comes before the first
    /// step); a time (`10s`, `500ms`): windows of that length from the first record (empty ones not written).
    /// A slice belongs to the window it starts in, drawn whole there even past the window's end (an NVTX range's
    /// GPU span with its range, over the work starting up to 1 s, at most a window's length, past the end). Every
    /// file has the same process, thread, GPU and stream tracks. Each window reads only the chunks it needs.
    #[arg(long, value_name = "step|TIME", conflicts_with_all = ["chrome", "start", "end"])]
    pub split_by: Option<String>,
    /// Print nothing but errors and warnings.
    #[arg(short, long)]
    pub quiet: bool,
}

/// `--max-output`: a size, or no limit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MaxOutput {
    Bytes(u64),
    Unlimited,
}

fn parse_max_output(s: &str) -> Result<MaxOutput, String> {
    if s.eq_ignore_ascii_case("none") {
        return Ok(MaxOutput::Unlimited);
    }
    cutr_viewer_export::size_limit::parse_size(s).map(MaxOutput::Bytes)
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// What recordings hold: versions, devices, time span, chunks, records per kind, sizes, losses.
    Info {
        /// The recordings to describe, one report each (JSON: an object for one, an array for several).
        #[arg(required = true)]
        files: Vec<PathBuf>,
        /// Print the report as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Tables for SQL engines: one Parquet file per record kind (kernels, memcpy, memset, api_calls, syncs,
    /// nvtx_ranges, nvtx_marks, counters, processes, devices, um, memory_usage), joins done; columns in docs/TABLES.md.
    Export {
        /// Recordings (one per process or rank): one dataset, each row with its file, host, pid and rank.
        #[arg(required = true)]
        files: Vec<PathBuf>,
        /// The directory to write the tables to: written whole beside it and renamed into place once complete, so
        /// that a failed or interrupted export leaves nothing half-written and an earlier export there intact (it is
        /// replaced as a whole on success). A directory holding anything else is refused.
        #[arg(long, value_name = "DIR")]
        parquet: PathBuf,
        /// Stream over the recordings' chunks in time order in bounded memory instead of loading them whole (the
        /// default when their records exceed 2 GiB decompressed): the same tables and values, rows in another
        /// order; the joins of GPU work whose launching call is more than 1M launches back are null, counted and
        /// warned; PC samples' stall rates take a pass of their own over the kernels first.
        #[arg(long, conflicts_with = "no_stream")]
        stream: bool,
        /// Load the recordings whole, however large (memory about the size of their records).
        #[arg(long)]
        no_stream: bool,
    },
    /// SQL over the tables of `export`, on an embedded DuckDB: each table is a view (`select name, sum(duration_ns)
    /// from kernels group by name`); or a named query: stragglers (per step range, the slowest rank), nccl-share
    /// (per rank), top-kernels, step-times (per step and rank). Prints a table, --json or --csv. DuckDB runs in
    /// the companion program cupti-convert-sql (beside this one, or on PATH).
    #[command(arg_required_else_help = true)]
    Sql {
        /// The statement, then the recordings to query (exported to a temporary dataset first). With --query, only
        /// recordings; with --parquet, only the statement.
        #[arg(value_name = "SQL|FILE")]
        args: Vec<String>,
        /// Query the tables `cupti-convert export --parquet DIR` wrote.
        #[arg(long, value_name = "DIR")]
        parquet: Option<PathBuf>,
        /// A named query: stragglers, nccl-share, top-kernels, step-times.
        #[arg(long, value_name = "NAME", value_parser = cutr_tables::NamedQuery::parse)]
        query: Option<cutr_tables::NamedQuery>,
        /// Steps of the named queries: NVTX ranges whose name starts with PREFIX.
        #[arg(long, value_name = "PREFIX", default_value = "iter ")]
        step: String,
        /// top-kernels: this many (0: all).
        #[arg(long, default_value_t = DEFAULT_TOP)]
        top: usize,
        /// Print the rows as a JSON array of objects.
        #[arg(long, conflicts_with = "csv")]
        json: bool,
        /// Print the rows as CSV.
        #[arg(long)]
        csv: bool,
    },
    /// Where GPU time went: kernels, API calls, copies and memsets, NVTX ranges, utilization, losses.
    Stats {
        /// Recordings; several (one per process or rank) are one run of a job, summarized together.
        #[arg(required = true)]
        files: Vec<PathBuf>,
        /// Print JSON.
        #[arg(long, conflicts_with = "csv")]
        json: bool,
        /// Print CSV (one table of every section; the `section` column tells them apart).
        #[arg(long)]
        csv: bool,
        /// Show only the N biggest rows of each section, and a line that sums up the rest (0: all). Default: 20 in
        /// the text report, all in --json and --csv. Totals and percentages are over every row.
        #[arg(long, value_name = "N")]
        top: Option<usize>,
        /// Only these sections, in this order of the report: kernels, api, memory (with peak device memory in use),
        /// nvtx, graphs (CUDA graphs' replays by where their nodes were made; shown by default when the trace has
        /// graphs), utilization, counters, um (unified memory: migrations, faults, thrashing, host functions; shown
        /// by default when the trace has UM events), loss.
        #[arg(long, value_delimiter = ',', value_parser = ["kernels", "api", "memory", "nvtx", "graphs", "utilization", "counters", "um", "loss"])]
        report: Vec<String>,
        /// Text: full names and lines however long. By default the text fits the terminal's width (or `COLUMNS`,
        /// when set): tables leave out their least important columns (StdDev, Min, Max, Med...) and shorten names
        /// in the middle; without a terminal or `COLUMNS`, names are cut at 100 characters. --json and --csv keep
        /// full names.
        #[arg(long, conflicts_with = "width")]
        wide: bool,
        /// Text: fit lines to N characters, whatever the terminal.
        #[arg(long, value_name = "N", value_parser = clap::value_parser!(u16).range(40..))]
        width: Option<u16>,
        /// Where to look for the host binaries and libraries the recording's mappings name when they are not at
        /// their recorded path (by file name; build id checked): --report um names CPU page faults' functions,
        /// --report graphs the functions that made graph nodes.
        #[arg(long, value_name = "DIR")]
        symbols: Vec<PathBuf>,
        /// NVTX ranges get the GPU work launched by any thread of their process while they were open (PyTorch
        /// launches backward's kernels from its autograd thread), not only by the thread that opened them.
        #[arg(long)]
        nvtx_across_threads: bool,
        /// NVTX range names that end in a number (`ProfilerStep#12`, `step 17`): `fold` (the default) lists a
        /// family's names one by one up to 64 of them, past that one row `ProfilerStep#<n>` with all their ranges
        /// (a line under the table says how many names it holds); `each`: every name its own row, however many.
        #[arg(long, value_name = "HOW", value_parser = ["fold", "each"], default_value = "fold")]
        nvtx_names: String,
        /// Only records overlapping the time after this one since the first record (e.g. 1.5, 1.5s, 200ms, 10us),
        /// as the conversion's --start (only the chunks there are read).
        #[arg(long, conflicts_with = "by_rank")]
        start: Option<String>,
        /// Only records overlapping the time before this one since the first record.
        #[arg(long, conflicts_with = "by_rank")]
        end: Option<String>,
        /// Only the GPU work (kernels, copies, memsets) inside the NVTX ranges named NAME, or NAME, a space and more
        /// (`step` names `step 12`): work whose
        /// launching API call started inside such a range of its process, on any thread (or, with no known
        /// launching call, that started inside one itself). API calls and NVTX ranges are not narrowed (use
        /// --start/--end); the report's first line states the window.
        #[arg(long, value_name = "NAME", conflicts_with = "by_rank")]
        nvtx: Option<String>,
        /// Instead of the sections: the ranks of a job side by side (kernels, kernel time, NCCL time, GPU busy).
        /// Streams as the sections do (--stream, or past 2 GiB of records), every figure exact.
        #[arg(long)]
        by_rank: bool,
        /// Stream over the recordings' chunks in time order in bounded memory instead of loading them whole (the
        /// default when their records exceed 2 GiB decompressed, the report's line says so): kernels, API calls,
        /// copies and memsets, NVTX ranges and losses, with counts, totals, min, max and averages exact and medians
        /// exact up to 65,536 instances a row, beyond from a sketch within 0.5% (marked ~); utilization, the
        /// memory section's peaks and unified memory (events by kernel too) exact; CUDA graphs exact (replays per
        /// executable, their medians as above; GPU time by capture range and site; the NVTX rows' graph replays),
        /// from a second pass over the graph events; counter averages as a load gives them up to the order of their
        /// sums (relative 1e-12); --start/--end read only the chunks of the window, as a load does (graphs too:
        /// joined over the window's calls and NVTX ranges); --by-rank exact. The report names what it did not
        /// compute.
        #[arg(long, conflicts_with_all = ["no_stream", "nvtx", "nvtx_across_threads"])]
        stream: bool,
        /// Load the recordings whole, however large (every section; memory about the size of their records).
        #[arg(long)]
        no_stream: bool,
        /// With --by-rank: the NVTX ranges whose name starts with PREFIX are steps (`iter `): each step's time per
        /// rank, and the slowest rank (the straggler) of each.
        #[arg(long, value_name = "PREFIX", requires = "by_rank")]
        step: Option<String>,
    },
    /// Where each GPU's time went and why: per GPU, rank and step, a time budget by interval union (computation,
    /// communication exposed and overlapped, copies, idle), idle time by cause (launch-bound, host sync wait,
    /// short gaps), the longest gaps, launch health, and findings with their evidence (docs/ANALYZE.md). Exit 0
    /// whatever it finds.
    Analyze {
        /// Recordings; several (one per process or rank) are one job's ranks.
        #[arg(required = true)]
        files: Vec<PathBuf>,
        /// The NVTX ranges whose name starts with PREFIX are the steps (`step `). Default: PyTorch's
        /// `ProfilerStep#N` ranges, else each CUDA graph launch where the GPU work is mostly graph replays.
        #[arg(long, value_name = "PREFIX")]
        step: Option<String>,
        /// Print JSON (its fields in docs/ANALYZE.md).
        #[arg(long, conflicts_with = "markdown")]
        json: bool,
        /// Print Markdown fit for a pull-request or CI comment.
        #[arg(long)]
        markdown: bool,
        /// Idle gaps shorter than this are back-to-back ops, not a cause of their own (e.g. 30us, 5us, 500ns):
        /// HTA's "kernel wait" threshold (its `consecutive_kernel_delay`, 30 us).
        #[arg(long, value_name = "DUR", default_value = "30us")]
        gap_threshold: String,
        /// Analyse only the records overlapping the window from this time on (seconds after the first record:
        /// `3600`, `1h`, `90s`); only the chunks it needs are read, so a day-long recording is analysed an hour
        /// at a time in the memory of an hour.
        #[arg(long, value_name = "TIME")]
        start: Option<String>,
        /// ... up to this time (seconds after the first record).
        #[arg(long, value_name = "TIME")]
        end: Option<String>,
        /// Stream over the recordings' chunks in time order in bounded memory instead of loading them whole (the
        /// default when their records exceed 2 GiB decompressed): two passes (the steps first), every figure as a
        /// load gives it except launch latencies' and costs' percentiles past 1,048,576 launches a row, from a sketch
        /// within 0.5% (marked ~).
        #[arg(long, conflicts_with = "no_stream")]
        stream: bool,
        /// Load the recordings whole, however large (memory about the size of their records).
        #[arg(long)]
        no_stream: bool,
    },
    /// Compare recordings: per kernel and NVTX range, what got slower or faster, with a noise-aware verdict.
    /// Exit code 3 when something regressed; 4 when less than half of the base's kernel time is in kernels the new
    /// runs also have (verdict "different programs": nothing is judged).
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
        /// Changes smaller than this per kernel instance and GPU operation are neutral (e.g. 250ns): the
        /// run-to-run drift of short kernels.
        #[arg(long, default_value = "250ns")]
        instance_floor: String,
        /// Rows below this percentage of the baseline's GPU time are reported, not judged.
        #[arg(long, default_value_t = 1.0)]
        min_share: f64,
        /// Also fail on what is reported but not judged by default: `span` (the process's wall span), `count` (a
        /// kernel launched more or fewer times).
        #[arg(long, value_delimiter = ',', value_parser = ["span", "count"])]
        fail_on: Vec<String>,
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
        /// Compare a distributed job rank by rank (--base the files of one job, --new of the other; ranks from
        /// each file's RANK, OMPI_COMM_WORLD_RANK, PMI_RANK or SLURM_PROCID): each rank's verdict and what changed
        /// on it; exit 3 when any rank regressed, 4 when any rank's sides are of different programs.
        #[arg(long)]
        by_rank: bool,
        /// Stream each run over its chunks in time order in bounded memory instead of loading it whole (the default
        /// when the recordings' records exceed 2 GiB decompressed, said on stderr): rows, counts, moments and
        /// verdicts as a whole load gives them; NVTX ranges by the GPU work of each instance, GPU work whose launch
        /// fell out of the last 1,048,576 launches of its run counted in none (the report says how much); counter
        /// averages per kernel as a load gives them up to the order of their sums (relative 1e-12).
        #[arg(long, conflicts_with = "no_stream")]
        stream: bool,
        /// Load the recordings whole, however large (memory about the size of their records).
        #[arg(long)]
        no_stream: bool,
    },
    /// Where kernels spend their time by function, source line and stall reason (a called function's samples also
    /// charged to its call sites), from a recording made with
    /// `cupti-record --pc-sampling` (lines from the cubins it kept; no CUDA needed). With --diff, what changed
    /// between two runs line by line (docs/SOURCE_DIFF.md): exit code 3 when a line's share of its kernel's
    /// samples grew beyond --threshold and sampling noise, 4 when no kernel is on both sides.
    Source {
        /// Recordings (one per process); with --diff, BASE NEW.
        #[arg(required_unless_present = "base")]
        files: Vec<PathBuf>,
        /// Compare BASE NEW (or --base RUN... --new RUN...): per kernel matched by name, each line's (and, where
        /// both sides ran the same cubin, each SASS offset's) share of the kernel's samples and of each stall
        /// reason, base and new, judged against sampling noise (a two-proportion z test per row, Holm-corrected,
        /// 99% family-wise) and --threshold.
        #[arg(long)]
        diff: bool,
        /// Base runs of --diff (several recordings add their samples).
        #[arg(long, num_args = 1.., conflicts_with = "files", requires = "new")]
        base: Vec<PathBuf>,
        /// New runs of --diff.
        #[arg(long, num_args = 1.., requires = "base")]
        new: Vec<PathBuf>,
        /// With --diff: a change of a row's share smaller than this many percentage points of its kernel's
        /// samples is no change, however significant (run-to-run variation beyond sampling noise).
        #[arg(long, value_name = "PP", default_value_t = cutr_analyses::source_diff::DEFAULT_THRESHOLD_PP)]
        threshold: f64,
        /// With --diff: print Markdown fit for a pull-request comment.
        #[arg(long, conflicts_with_all = ["json", "csv"])]
        markdown: bool,
        /// Only kernels whose name contains this.
        #[arg(long)]
        kernel: Option<String>,
        /// Lines and SASS offsets shown per kernel (0: all).
        #[arg(long, default_value_t = 10)]
        top: usize,
        /// Print JSON.
        #[arg(long, conflicts_with = "csv")]
        json: bool,
        /// Print CSV (one row per kernel and line).
        #[arg(long)]
        csv: bool,
        /// Also write the samples as a gzipped pprof profile (`go tool pprof -top OUT`; speedscope): one location
        /// per PC with its inlined frames, labelled by stall reason and kernel (`-` for standard output).
        #[arg(long, value_name = "OUT.pb.gz")]
        pprof: Option<PathBuf>,
        /// Do not run `nvdisasm` for the SASS text of the PCs shown and the call sites of called functions (by
        /// default it runs where it is installed: `CUTR_NVDISASM`, or on the PATH; each run is ended after 60 s,
        /// `CUTR_NVDISASM_TIMEOUT`, and the report says which cubin lacks SASS and why). Without it, samples are
        /// still placed in their functions, but call sites are unknown.
        #[arg(long)]
        no_sass: bool,
    },
    /// Write a synthetic recording (a launch-bound training loop with realistic CUPTI records). Memory stays flat in
    /// the record count (1B records: ~80 MB, a 3.2 GB file, 7 minutes on two cores).
    Generate {
        /// The recording to write: written beside it and renamed into place once complete (an interrupted or
        /// failed run leaves nothing).
        #[arg(short, long)]
        output: PathBuf,
        /// About this many records.
        #[arg(long, default_value_t = 1_000_000)]
        records: u64,
        /// Seed of the random durations and gaps: the same seed writes the same file.
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
        /// RANK/WORLD_SIZE (`3/64`): the file is one rank of a job (on host synthetic-host-<rank / 8>).
        #[arg(long, value_name = "R/W", value_parser = parse_rank)]
        rank: Option<(u32, u32)>,
        /// Unified memory episodes every 5 steps on two GPUs: managed and device allocations, migrations of every
        /// direction, GPU and CPU page faults, thrashing, throttling, remote maps (not with --launches-only).
        #[arg(long, conflicts_with = "launches_only")]
        unified_memory: bool,
    },
    /// Print shell completions or the man page (for packagers; tools/install.sh uses them).
    #[command(hide = true)]
    Docs {
        #[command(subcommand)]
        what: crate::docs::DocsCommand,
    },
}

/// `R/W` with R < W.
fn parse_rank(s: &str) -> Result<(u32, u32), String> {
    let (r, w) = s.split_once('/').ok_or("expected RANK/WORLD_SIZE, e.g. 3/64")?;
    let (r, w): (u32, u32) =
        (r.parse().map_err(|_| "RANK is not a number")?, w.parse().map_err(|_| "WORLD_SIZE is not a number")?);
    if r >= w {
        return Err(format!("rank {r} is not below the world size {w}"));
    }
    Ok((r, w))
}

/// A wrong argument: the command exits with status 2, as for the arguments clap itself rejects.
#[derive(Debug)]
pub struct UsageError(pub String);

impl std::fmt::Display for UsageError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for UsageError {}

/// Returns early with a [`UsageError`].
macro_rules! usage {
    ($($arg:tt)*) => {
        return Err(anyhow::Error::new($crate::cli::UsageError(format!($($arg)*))))
    };
}
pub(crate) use usage;

/// Parses a time like `1.5`, `1.5s`, `200ms`, `10us`, `500ns` into ns.
pub fn parse_time(s: &str) -> Result<u64> {
    let t = s.trim();
    let (num, scale) = [("ns", 1.0), ("us", 1e3), ("ms", 1e6), ("s", 1e9)]
        .iter()
        .find_map(|(suf, sc)| t.strip_suffix(suf).map(|n| (n, *sc)))
        .unwrap_or((t, 1e9));
    let Ok(v) = num.trim().parse::<f64>() else { usage!("not a time: '{s}' (use e.g. 1.5, 200ms, 10us)") };
    if !(v >= 0.0 && v.is_finite()) {
        usage!("time must be a non-negative number: '{s}'");
    }
    Ok((v * scale) as u64)
}

pub fn kinds(names: &[String]) -> Result<Vec<u32>> {
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
            other => usage!(
                "unknown kind '{other}' (kernel, memcpy, memset, runtime, driver, sync, nvtx, overhead, memory, event, external)"
            ),
        };
        out.extend_from_slice(ks);
    }
    Ok(out)
}
