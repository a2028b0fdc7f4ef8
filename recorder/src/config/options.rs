//! The recorder's options, declared once: each `Config` field with its default and the `CUTR_*` variables that
//! carry it to an injected library, each variable with its `cupti-record` flag, its help, and how its text is
//! read into the field and written back. `Config::from_lookup` (the injected library), `Config::to_env` (the
//! launcher, for its command), `Config::describe` (a file's metadata) and `cupti-record`'s flags and help all
//! walk this one table, so an option is added here and nowhere else.

use std::path::PathBuf;
use std::str::FromStr;
use std::time::Duration;

use super::{DEFAULT_CONTROL_WAIT, DEFAULT_CRASH_TIMEOUT, SplitLimit, parse_kinds};
use crate::controls::capture::{CaptureEnd, CaptureRange};
use crate::controls::ring::RingLimit;
use crate::controls::triggers::RingTrigger;
use crate::counters::{CountersConfig, DEFAULT_NVML_INTERVAL, pm_sampling};
use crate::pc_sampling::{PcSamplingConfig, StallReasons};
use crate::units::{parse_duration, parse_size};

use super::table::{Flag, Opt, Takes};

/// Declares `Config`, its `Default` and `OPTIONS` from one list: each field with its type, its default, and the
/// variables that carry it (at least one: the injected library learns its whole configuration from them).
macro_rules! options {
    ($( $(#[$doc:meta])* $field:ident: $ty:ty = $default:expr => [$($opt:expr),+ $(,)?] ),* $(,)?) => {
        /// Recorder configuration: built by the Rust API, or read from `CUTR_*` environment variables by the
        /// injection library (the `cupti-record` launcher turns its flags into those variables). Declared with
        /// its variables in `config/options.rs`.
        #[derive(Clone, Debug, PartialEq)]
        pub struct Config {
            $( $(#[$doc])* pub $field: $ty, )*
        }

        impl Default for Config {
            fn default() -> Self {
                Config { $( $field: $default, )* }
            }
        }

        /// Every option, in the order of `cupti-record --help`.
        pub static OPTIONS: &[Opt] = &[ $( $( $opt.of_field(stringify!($field)), )+ )* ];
    };
}

/// Boolean variables take `1` for on; any other text is off (as it always was).
fn on(v: &str) -> bool {
    v == "1"
}

fn bit(b: bool) -> Option<String> {
    Some(if b { "1" } else { "0" }.into())
}

fn secs(d: Duration) -> String {
    format!("{}", d.as_secs_f64())
}

fn number<T: FromStr>(v: &str) -> Result<T, String> {
    v.trim().parse().map_err(|_| format!("not a number: '{v}'"))
}

options! {
    /// Output path; `%p` becomes the process id, `%h` the host name, `%n` the part number, `%%` a percent sign.
    output: String = "cutr-%p.cutr".into() => [
        Opt::new(
            "CUTR_OUTPUT",
            "Output file; %p becomes the process id (one file per process), %h the host name, %n the part number \
             (with --split; 001 without), %% a percent sign",
            |c, v| {
                if v.is_empty() {
                    return Err("empty output path".into());
                }
                c.output = v.into();
                Ok(())
            },
            |c| Some(c.output.clone()),
        )
        .flag(Flag::value("output", "PATH").short('o').default("cutr-%p.cutr")),
    ],
    /// CUPTI activity kinds to enable.
    kinds: Vec<u32> = parse_kinds("default").unwrap() => [
        Opt::new(
            "CUTR_KINDS",
            "Activity kinds to record (listed below)",
            |c, v| {
                c.kinds = parse_kinds(v)?;
                Ok(())
            },
            |c| Some(c.kinds.iter().map(u32::to_string).collect::<Vec<_>>().join(",")),
        )
        .flag(Flag::value("kinds", "LIST").default("default")),
    ],
    /// Record unified memory too (the `um` kinds group): migrations, CPU and GPU page faults, thrashing.
    um: bool = false => [
        Opt::new(
            "CUTR_UM",
            "Record unified memory: migrations (bytes, direction, cause), CPU and GPU page faults, thrashing, \
             throttling, remote maps (the `um` kinds group). Off by default: it costs nothing measurable where no managed \
             memory moves (launch loop, PyTorch loop: within run-to-run noise, H100), but CUDA's driver slows \
             managed-memory-heavy code while it reports (um_workload: 1.6x, ~16 us per event)",
            |c, v| {
                c.um = on(v);
                Ok(())
            },
            |c| bit(c.um),
        )
        .flag(Flag::switch("um", "1")),
    ],
    /// Graph capture context: node creation, cloning and exec updates, each created node's stack (this many frames).
    graph_context: Option<usize> = Some(crate::graph_context::DEFAULT_STACK_FRAMES) => [
        Opt::new(
            "CUTR_GRAPH_CONTEXT",
            "Record where each CUDA graph node was made (graph structure, the creating call's native stack of up \
             to N frames; 0: no stacks), so replayed kernels get their capture-time NVTX ranges and call; `off` \
             records none. Costs only while graphs are built, nothing at replay",
            |c, v| {
                c.graph_context = match v.trim() {
                    "off" => None,
                    n => Some(number::<usize>(n)?.min(crate::graph_context::MAX_STACK_FRAMES)),
                };
                Ok(())
            },
            |c| Some(c.graph_context.map_or("off".into(), |n| n.to_string())),
        )
        .flag(Flag::value("graph-context", "off|N").default("48")),
    ],
    /// Size of each activity buffer handed to CUPTI.
    buffer_bytes: usize = 4 << 20 => [
        Opt::new(
            "CUTR_BUFFER_SIZE",
            "Bytes per CUPTI activity buffer",
            |c, v| {
                c.buffer_bytes = parse_size(v)?;
                Ok(())
            },
            |c| Some(c.buffer_bytes.to_string()),
        )
        .flag(Flag::value("buffer-size", "SIZE").default("4M")),
    ],
    /// Most memory the recorder's buffers may take; beyond it, buffer requests are refused (and counted).
    memory_cap_bytes: usize = 256 << 20 => [
        Opt::new(
            "CUTR_MEMORY_CAP",
            "Most host memory for activity buffers; when reached, buffers are refused and the loss is counted",
            |c, v| {
                c.memory_cap_bytes = parse_size(v)?;
                Ok(())
            },
            |c| Some(c.memory_cap_bytes.to_string()),
        )
        .flag(Flag::value("memory-cap", "SIZE").default("256M")),
    ],
    /// Buffers allocated up front, so that steady-state requests never allocate.
    initial_buffers: usize = 4 => [
        Opt::new(
            "CUTR_INITIAL_BUFFERS",
            "Activity buffers allocated at start",
            |c, v| {
                c.initial_buffers = number::<i64>(v)?.max(0) as usize;
                Ok(())
            },
            |c| Some(c.initial_buffers.to_string()),
        ),
    ],
    /// How often completed buffers are collected and the file is synced, and clocks are sampled.
    flush_period: Duration = Duration::from_secs(1) => [
        Opt::new(
            "CUTR_FLUSH_PERIOD",
            "Seconds between collections of completed buffers (and clock samples)",
            |c, v| {
                c.flush_period = parse_duration(v)?;
                Ok(())
            },
            |c| Some(secs(c.flush_period)),
        )
        .flag(Flag::value("flush-period", "T").default("1")),
    ],
    /// Start recording this long after CUDA initializes.
    start_delay: Duration = Duration::ZERO => [
        Opt::new(
            "CUTR_START_DELAY",
            "Start recording this many seconds after CUDA starts",
            |c, v| {
                c.start_delay = parse_duration(v)?;
                Ok(())
            },
            |c| Some(secs(c.start_delay)),
        )
        .flag(Flag::value("start-delay", "T")),
    ],
    /// Stop recording after this long (the file is closed at exit).
    duration: Option<Duration> = None => [
        Opt::new(
            "CUTR_DURATION",
            "Record for this many seconds",
            |c, v| {
                c.duration = Some(parse_duration(v)?);
                Ok(())
            },
            |c| c.duration.map(secs),
        )
        .flag(Flag::value("duration", "T")),
    ],
    /// Accept control requests (SIGUSR1, `cupti-record ctl`): turn recording on and off, dump.
    control: bool = false => [
        Opt::new(
            "CUTR_CONTROL",
            "Accept control of the running recording: `cupti-record ctl PID start|stop|dump|status`, or SIGUSR1 \
             to turn recording off and on (each process prints how at start)",
            |c, v| {
                c.control = on(v);
                Ok(())
            },
            |c| bit(c.control),
        )
        .flag(Flag::switch("control", "1")),
    ],
    /// Longest a control action (`ctl stop`, `ctl dump`, SIGUSR1, `--duration`) waits for the records of work in
    /// flight to complete before it answers.
    control_wait: Duration = DEFAULT_CONTROL_WAIT => [
        Opt::new(
            "CUTR_CONTROL_WAIT",
            "When recording is turned off (ctl stop, SIGUSR1, --duration) or dumped while off, wait at most this \
             long for the kernels still running to finish, so their records land complete (a dump while \
             recording waits 20 ms at most; what still runs then lands when it is done). Nothing is forced out \
             before the end of the recording",
            |c, v| {
                c.control_wait = parse_duration(v)?;
                Ok(())
            },
            |c| Some(secs(c.control_wait)),
        )
        .flag(Flag::value("control-wait", "T").default("2s")),
    ],
    /// Start with recording off (with `control`, or the API, to turn it on).
    start_paused: bool = false => [
        Opt::new(
            "CUTR_START_PAUSED",
            "Start with recording off; turn it on with `cupti-record ctl PID start` or SIGUSR1 (implies \
             --control)",
            |c, v| {
                c.start_paused = on(v);
                Ok(())
            },
            |c| bit(c.start_paused),
        )
        .flag(Flag::switch("start-paused", "1").implies("control")),
    ],
    /// Record only inside these ranges (`--capture-range`, `--capture-range-end`).
    capture: Option<(CaptureRange, CaptureEnd)> = None => [
        Opt::new(
            "CUTR_CAPTURE_RANGE",
            "Record only inside ranges: `cuda-profiler-api` (between cudaProfilerStart and cudaProfilerStop) or \
             `nvtx:NAME[@DOMAIN]` (inside NVTX ranges of that name); CUPTI's kinds are off outside",
            |c, v| {
                c.capture = match v {
                    "" => None,
                    v => Some((CaptureRange::parse(v)?, CaptureEnd::Stop)),
                };
                Ok(())
            },
            |c| Some(c.capture.as_ref().map(|r| r.0.to_arg()).unwrap_or_default()),
        )
        .flag(Flag::value("capture-range", "RANGE")),
        Opt::new(
            "CUTR_CAPTURE_RANGE_END",
            "After a capture range: `stop` (record nothing more), `repeat` (every range), `repeat:N` (the first N)",
            |c, v| {
                if let Some(range) = &mut c.capture {
                    range.1 = CaptureEnd::parse(v)?;
                }
                Ok(())
            },
            |c| Some(c.capture.as_ref().map_or(CaptureEnd::Stop, |r| r.1).to_arg()),
        )
        .flag(Flag::value("capture-range-end", "END").default("stop").requires("capture-range")),
    ],
    /// Cut the recording into files of this size or time (`--split`), numbered by `%n` in the output path.
    split: Option<SplitLimit> = None => [
        Opt::new(
            "CUTR_SPLIT",
            "Cut the recording into parts of this time (`1m`, `1h`) or size (`500M`, `2G`), each a complete file \
             (the output path needs %n, the part number: -o run-%n.cutr); read them together as one recording: \
             `cupti-convert stats run-*.cutr`",
            |c, v| {
                c.split = match v {
                    "" => None,
                    v => Some(SplitLimit::parse(v)?),
                };
                Ok(())
            },
            |c| Some(c.split.map(SplitLimit::to_arg).unwrap_or_default()),
        )
        .flag(Flag::value("split", "SIZE|TIME")),
    ],
    /// Flight recorder: keep only this window in memory, written at a dump, at exit or on a crash.
    ring: Option<RingLimit> = None => [
        Opt::new(
            "CUTR_RING",
            "Flight recorder: keep only the most recent window (a time, `5s`, or a size, `512M`) in memory; write \
             it at `cupti-record ctl PID dump` (STEM.dumpN.cutr beside the output), and at exit or on a crash (the \
             output)",
            |c, v| {
                c.ring = match v {
                    "" => None,
                    v => Some(RingLimit::parse(v)?),
                };
                Ok(())
            },
            |c| Some(c.ring.map(RingLimit::to_arg).unwrap_or_default()),
        )
        .flag(Flag::value("ring", "WINDOW")),
    ],
    /// Flight recorder: also write the window when these appear in the records (`--ring-trigger`).
    ring_triggers: Vec<RingTrigger> = Vec::new() => [
        Opt::new(
            "CUTR_RING_TRIGGERS",
            "With --ring, also write the window (STEM.dumpN.cutr) when the records show one of these \
             (comma-separated): `nvtx:NAME` (an NVTX marker or range named NAME), `cuda-profiler-stop` \
             (cudaProfilerStop or cuProfilerStop). Found in the records at each flush, so the dump follows within \
             --flush-period",
            |c, v| {
                c.ring_triggers = match v {
                    "" => Vec::new(),
                    v => RingTrigger::parse_list(v)?,
                };
                Ok(())
            },
            |c| Some(RingTrigger::list_arg(&c.ring_triggers)),
        )
        .flag(Flag::value("ring-trigger", "LIST").requires("ring")),
    ],
    /// On a crash (SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT), how long the file may take to be closed before the
    /// signal goes through anyway.
    crash_timeout: Duration = DEFAULT_CRASH_TIMEOUT => [
        Opt::new(
            "CUTR_CRASH_TIMEOUT",
            "On a crash (SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT), wait at most this long for the file to be \
             closed, then let the signal through (the process dies of it as it would have, core dump included). 0 \
             leaves those signals alone (for runtimes such as the JVM that take SIGSEGV in normal operation)",
            |c, v| {
                c.crash_timeout = parse_duration(v)?;
                Ok(())
            },
            |c| Some(secs(c.crash_timeout)),
        )
        .flag(Flag::value("crash-timeout", "T").default("2s")),
    ],
    /// zstd level of the stored chunks.
    zstd_level: i32 = 3 => [
        Opt::new(
            "CUTR_ZSTD_LEVEL",
            "zstd level of the stored chunks, -7 to 22",
            |c, v| {
                c.zstd_level = number(v)?;
                Ok(())
            },
            |c| Some(c.zstd_level.to_string()),
        ),
    ],
    /// CUPTI's device-side buffer size (`CUPTI_ACTIVITY_ATTR_DEVICE_BUFFER_SIZE`); CUPTI's default when `None`.
    device_buffer_bytes: Option<usize> = None => [
        Opt::new(
            "CUTR_DEVICE_BUFFER_SIZE",
            "CUPTI's device buffer size (CUPTI_ACTIVITY_ATTR_DEVICE_BUFFER_SIZE)",
            |c, v| {
                c.device_buffer_bytes = Some(parse_size(v)?);
                Ok(())
            },
            |c| c.device_buffer_bytes.map(|b| b.to_string()),
        )
        .flag(Flag::value("device-buffer-size", "SIZE")),
    ],
    /// CUPTI's device buffer pool limit; CUPTI's default when `None`.
    device_buffer_pool_limit: Option<usize> = None => [
        Opt::new(
            "CUTR_DEVICE_BUFFER_POOL_LIMIT",
            "CUPTI's device buffer pool limit (CUPTI_ACTIVITY_ATTR_DEVICE_BUFFER_POOL_LIMIT), at least 1",
            |c, v| {
                c.device_buffer_pool_limit = Some(number::<usize>(v)?.max(1));
                Ok(())
            },
            |c| c.device_buffer_pool_limit.map(|b| b.to_string()),
        )
        .flag(Flag::value("device-buffer-pool-limit", "N")),
    ],
    /// Use this libcupti instead of searching for one.
    cupti_library: Option<PathBuf> = None => [
        Opt::new(
            "CUTR_CUPTI_LIB",
            "The libcupti to use (default: the application's own, else the CUDA toolkit's or the nvidia wheels')",
            |c, v| {
                c.cupti_library = (!v.is_empty()).then(|| PathBuf::from(v));
                Ok(())
            },
            |c| c.cupti_library.as_ref().map(|p| p.display().to_string()),
        )
        .flag(Flag::value("cupti-lib", "PATH")),
    ],
    /// Skip the noisy API calls PyTorch's profiler also skips (cudaGetDevice, cuCtxGetCurrent, ...).
    filter_noisy_api: bool = true => [
        Opt::new(
            "CUTR_FILTER_NOISY_API",
            "Keep API calls that launch nothing (cudaGetDevice, cuCtxGetCurrent...)",
            // On unless told 0: the filter is the default.
            |c, v| {
                c.filter_noisy_api = v != "0";
                Ok(())
            },
            |c| bit(c.filter_noisy_api),
        )
        .flag(Flag::switch("keep-noisy-api", "0")),
    ],
    /// Replace an existing output file (otherwise this process writes `<stem>.<pid>.cutr` beside it).
    overwrite: bool = false => [
        Opt::new(
            "CUTR_OVERWRITE",
            "1 to replace an existing output file (else a process writes <stem>.<pid>.cutr beside it)",
            |c, v| {
                c.overwrite = on(v);
                Ok(())
            },
            |c| bit(c.overwrite),
        ),
    ],
    /// Print nothing but errors.
    quiet: bool = false => [
        Opt::new(
            "CUTR_QUIET",
            "Print nothing but errors",
            |c, v| {
                c.quiet = on(v);
                Ok(())
            },
            |c| bit(c.quiet),
        )
        .flag(Flag::switch("quiet", "1").short('q'))
        .unrecorded(),
    ],
    /// Continuous PC sampling and cubin capture (off by default).
    pc_sampling: Option<PcSamplingConfig> = None => [
        Opt::new(
            "CUTR_PC_SAMPLING",
            "Sample the PCs of running kernels continuously (CUPTI's PC Sampling API; kernels are not serialized) \
             and keep every cubin the program loads, for `cupti-convert source` (file:line and stall reasons)",
            |c, v| {
                c.pc_sampling = on(v).then(PcSamplingConfig::default);
                Ok(())
            },
            |c| c.pc_sampling.as_ref().map(|_| "1".into()),
        )
        .flag(Flag::switch("pc-sampling", "1")),
        Opt::new(
            "CUTR_PC_PERIOD",
            "PC sampling period: one sample per SM every 2^N cycles, N from 5 to 31 (default: CUPTI's, by SM \
             count)",
            |c, v| {
                if let Some(pc) = &mut c.pc_sampling {
                    pc.period_log2 = Some(number(v)?);
                }
                Ok(())
            },
            |c| c.pc_sampling.as_ref()?.period_log2.map(|n| n.to_string()),
        )
        .flag(Flag::value("pc-period", "N").requires("pc-sampling")),
        Opt::new(
            "CUTR_STALL_REASONS",
            "Stall reasons counted per PC: `default` (every reason but the `*_not_issued` twins), `all`, or a \
             comma-separated list of names (`long_scoreboard,wait`); `cupti-record` reports names the GPU lacks",
            |c, v| {
                if let Some(pc) = &mut c.pc_sampling {
                    pc.stall_reasons = StallReasons::parse(v)?;
                }
                Ok(())
            },
            |c| c.pc_sampling.as_ref().map(|pc| pc.stall_reasons.to_arg()),
        )
        .flag(Flag::value("stall-reasons", "SET").default("default").requires("pc-sampling")),
    ],
    /// Counter samples over time (`--counters`): `None` records none.
    counters: Option<CountersConfig> = None => [
        Opt::new(
            "CUTR_COUNTERS",
            "Sample counters over time into the file, shown as counter tracks and per-kernel averages by \
             `cupti-convert`: hardware counters through CUPTI's PM sampling (`default`: GR and SM activity, DRAM \
             read and write bytes/s, warps active, tensor pipe, PCIe and NVLink bytes/s, where the chip has them; \
             or a comma-separated list of metric names), and NVML's power, clocks, temperature, utilization and \
             throttle reasons; `nvml` for NVML only",
            |c, v| {
                let nvml = Some(DEFAULT_NVML_INTERVAL);
                c.counters = Some(CountersConfig::parse(v, pm_sampling::DEFAULT_INTERVAL, nvml)?);
                Ok(())
            },
            |c| c.counters.as_ref().map(CountersConfig::set_arg),
        )
        .flag(Flag::new("counters", Takes::OptionalValue("SET", "default"))),
        Opt::new(
            "CUTR_COUNTER_INTERVAL",
            "PM sampling interval with --counters (`100us` = 10 kHz; at least 10us)",
            |c, v| {
                if let Some(cc) = &mut c.counters {
                    // Parsed again with the set, whose parser checks the interval.
                    *cc = CountersConfig::parse(&cc.set_arg(), parse_duration(v)?, cc.nvml_interval)?;
                }
                Ok(())
            },
            |c| c.counters.as_ref()?.pm.as_ref().map(|pm| format!("{}us", pm.interval.as_micros())),
        )
        .flag(Flag::value("counter-interval", "T").default("100us").requires("counters")),
        Opt::new(
            "CUTR_NVML_INTERVAL",
            "How often NVML is read with --counters (`10ms` = 100 Hz; at least 1ms), or `off`",
            |c, v| {
                if let Some(cc) = &mut c.counters {
                    cc.nvml_interval = match v {
                        "off" => None,
                        t => Some(parse_duration(t)?),
                    };
                }
                Ok(())
            },
            |c| Some(c.counters.as_ref()?.nvml_interval.map_or("off".into(), |d| format!("{}s", d.as_secs_f64()))),
        )
        .flag(Flag::value("nvml-interval", "T").default("10ms").requires("counters")),
    ],
    /// Keep counter samples all along, not only while recording is on (capture ranges, pauses, a start delay).
    counters_whole_run: bool = false => [
        Opt::new(
            "CUTR_COUNTERS_WHOLE_RUN",
            "With --counters: keep the counter samples of the whole run; by default only those taken while \
             recording is on are kept (inside capture ranges, outside pauses), as for activity",
            |c, v| {
                c.counters_whole_run = on(v);
                Ok(())
            },
            |c| bit(c.counters_whole_run),
        )
        .flag(Flag::switch("counters-whole-run", "1").requires("counters")),
    ],
}
