//! `cupti-record [options] -o run.cutr -- CMD ARGS...`: runs CMD with the cutr injection library, so every
//! process of CMD that uses CUDA records its activity (one file per process).
//!
//! Exit status: CMD's own status (128 + signal if it was killed); 125 when cupti-record itself cannot start CMD.

use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::time::Duration;

use clap::Parser;
use cutr_recorder::config::{self, Config, KIND_GROUPS};
use cutr_recorder::units;

#[derive(Parser, Debug)]
#[command(
    name = "cupti-record",
    version,
    about = "Record the CUDA activity of a command into a .cutr file",
    after_help = "Activity kinds (--kinds, comma-separated; 'default', 'all', a CUPTI kind number, '-name' removes):\n".to_string()
        + &KIND_GROUPS.iter().map(|g| format!("  {:<12} {}", g.0, g.2)).collect::<Vec<_>>().join("\n")
        + "\n\nThe injected library also reads these variables (flags set them):\n"
        + &config::ENV_VARS.iter().map(|(k, v)| format!("  {k:<30} {v}")).collect::<Vec<_>>().join("\n")
)]
struct Args {
    /// Output file; %p becomes the process id (one file per process), %h the host name.
    #[arg(short, long, default_value = "cutr-%p.cutr")]
    output: String,
    /// Activity kinds to record.
    #[arg(long, default_value = "default")]
    kinds: String,
    /// Bytes per CUPTI activity buffer.
    #[arg(long, default_value = "4M")]
    buffer_size: String,
    /// Most host memory for activity buffers; when reached, buffers are refused and the loss is counted.
    #[arg(long, default_value = "256M")]
    memory_cap: String,
    /// Seconds between collections of completed buffers (and clock samples).
    #[arg(long, default_value = "1")]
    flush_period: String,
    /// Start recording this many seconds after CUDA starts.
    #[arg(long)]
    start_delay: Option<String>,
    /// Record for this many seconds.
    #[arg(long)]
    duration: Option<String>,
    /// Accept control of the running recording: `cupti-record ctl PID start|stop|dump|status`, or SIGUSR1 to
    /// turn recording off and on (each process prints how at start).
    #[arg(long)]
    control: bool,
    /// Start with recording off; turn it on with `cupti-record ctl PID start` or SIGUSR1 (implies --control).
    #[arg(long)]
    start_paused: bool,
    /// Record only inside ranges: `cuda-profiler-api` (between cudaProfilerStart and cudaProfilerStop) or
    /// `nvtx:NAME[@DOMAIN]` (inside NVTX ranges of that name); CUPTI's kinds are off outside.
    #[arg(long, value_name = "RANGE")]
    capture_range: Option<String>,
    /// After a capture range: `stop` (record nothing more), `repeat` (every range), `repeat:N` (the first N).
    #[arg(long, value_name = "END", requires = "capture_range", default_value = "stop")]
    capture_range_end: String,
    /// Flight recorder: keep only the most recent window (a time, `5s`, or a size, `512M`) in memory; write it at
    /// `cupti-record ctl PID dump` (STEM.dumpN.cutr beside the output), and at exit or on a crash (the output).
    #[arg(long, value_name = "WINDOW")]
    ring: Option<String>,
    /// With --ring, also write the window (STEM.dumpN.cutr) when the records show one of these (comma-separated):
    /// `nvtx:NAME` (an NVTX marker or range named NAME), `cuda-profiler-stop` (cudaProfilerStop or
    /// cuProfilerStop). Found in the records at each flush, so the dump follows within --flush-period.
    #[arg(long, value_name = "LIST", requires = "ring")]
    ring_trigger: Option<String>,
    /// On a crash (SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT), wait at most this long for the file to be closed,
    /// then let the signal through (the process dies of it as it would have, core dump included). 0 leaves those
    /// signals alone (for runtimes such as the JVM that take SIGSEGV in normal operation).
    #[arg(long, value_name = "T", default_value = "2s")]
    crash_timeout: String,
    /// CUPTI's device buffer size (CUPTI_ACTIVITY_ATTR_DEVICE_BUFFER_SIZE).
    #[arg(long)]
    device_buffer_size: Option<String>,
    /// CUPTI's device buffer pool limit (CUPTI_ACTIVITY_ATTR_DEVICE_BUFFER_POOL_LIMIT).
    #[arg(long)]
    device_buffer_pool_limit: Option<usize>,
    /// The libcupti to use (default: the application's own, else the CUDA toolkit's or the nvidia wheels').
    #[arg(long)]
    cupti_lib: Option<PathBuf>,
    /// The cutr injection library (default: libcutr_recorder.so next to this program).
    #[arg(long, env = "CUTR_INJECTION_LIB")]
    injection_lib: Option<PathBuf>,
    /// Keep API calls that launch nothing (cudaGetDevice, cuCtxGetCurrent...).
    #[arg(long)]
    keep_noisy_api: bool,
    /// Print nothing but errors.
    #[arg(short, long)]
    quiet: bool,
    /// Sample the PCs of running kernels continuously (CUPTI's PC Sampling API; kernels are not serialized) and
    /// keep every cubin the program loads, for `cupti-convert source` (file:line and stall reasons).
    #[arg(long)]
    pc_sampling: bool,
    /// PC sampling period: one sample per SM every 2^N cycles, N from 5 to 31 (default: CUPTI's, by SM count).
    #[arg(long, value_name = "N", requires = "pc_sampling")]
    pc_period: Option<u32>,
    /// Stall reasons counted per PC: `default` (every reason but the `*_not_issued` twins), `all`, or a
    /// comma-separated list of names (`long_scoreboard,wait`); `cupti-record` reports names the GPU lacks.
    #[arg(long, value_name = "SET", requires = "pc_sampling", default_value = "default",
          value_parser = cutr_recorder::pc_sampling::StallReasons::parse)]
    stall_reasons: cutr_recorder::pc_sampling::StallReasons,
    /// Sample counters over time into the file, shown as counter tracks and per-kernel averages by
    /// `cupti-convert`: hardware counters through CUPTI's PM sampling (`default`: GR and SM activity, DRAM read
    /// and write bytes/s, warps active, tensor pipe, PCIe and NVLink bytes/s, where the chip has them; or a
    /// comma-separated list of metric names), and NVML's power, clocks, temperature, utilization and throttle
    /// reasons; `nvml` for NVML only.
    #[arg(long, value_name = "SET", num_args = 0..=1, default_missing_value = "default")]
    counters: Option<String>,
    /// PM sampling interval with --counters (`100us` = 10 kHz; at least 10us).
    #[arg(long, value_name = "T", requires = "counters", default_value = "100us")]
    counter_interval: String,
    /// How often NVML is read with --counters (`10ms` = 100 Hz; at least 1ms), or `off`.
    #[arg(long, value_name = "T", requires = "counters", default_value = "10ms")]
    nvml_interval: String,
    /// Print the shell completion script for SHELL (bash, zsh, fish, elvish, powershell) and exit.
    #[arg(long, value_name = "SHELL", hide = true, exclusive = true)]
    completions: Option<clap_complete::Shell>,
    /// Print the man page (roff) and exit.
    #[arg(long, hide = true, exclusive = true)]
    manpage: bool,
    /// The command to record, after `--`.
    #[arg(last = true, required_unless_present_any = ["completions", "manpage"])]
    command: Vec<String>,
}

/// The completion script or man page asked for, on stdout.
fn print_docs(a: &Args) -> std::io::Result<()> {
    use clap::CommandFactory;
    let mut cmd = Args::command();
    if let Some(shell) = a.completions {
        clap_complete::generate(shell, &mut cmd, "cupti-record", &mut std::io::stdout());
    } else {
        clap_mangen::Man::new(cmd).render(&mut std::io::stdout())?;
    }
    Ok(())
}

fn fail(msg: String) -> ExitCode {
    eprintln!("cupti-record: error: {msg}");
    ExitCode::from(125)
}

fn injection_library(arg: Option<PathBuf>) -> Result<PathBuf, String> {
    if let Some(p) = arg {
        return p.exists().then(|| p.clone()).ok_or(format!("injection library {} does not exist", p.display()));
    }
    let exe = std::env::current_exe().map_err(|e| format!("cannot find this program's path: {e}"))?;
    let dir = exe.parent().unwrap_or(Path::new("."));
    for candidate in [dir.join("libcutr_recorder.so"), dir.join("../lib/libcutr_recorder.so")] {
        if candidate.exists() {
            return candidate.canonicalize().map_err(|e| e.to_string());
        }
    }
    Err(format!(
        "libcutr_recorder.so is neither next to {} nor in ../lib: `cargo install` installs programs only. \
         Install both with tools/install.sh PREFIX, or pass --injection-lib (or set CUTR_INJECTION_LIB) to a \
         libcutr_recorder.so built with `cargo build --release -p cutr-recorder`",
        exe.display()
    ))
}

fn config(a: &Args) -> Result<Config, String> {
    let mut c = Config {
        output: a.output.clone(),
        kinds: config::parse_kinds(&a.kinds).map_err(|e| format!("--kinds: {e}"))?,
        buffer_bytes: units::parse_size(&a.buffer_size).map_err(|e| format!("--buffer-size: {e}"))?,
        memory_cap_bytes: units::parse_size(&a.memory_cap).map_err(|e| format!("--memory-cap: {e}"))?,
        flush_period: units::parse_duration(&a.flush_period).map_err(|e| format!("--flush-period: {e}"))?,
        cupti_library: a.cupti_lib.clone(),
        filter_noisy_api: !a.keep_noisy_api,
        quiet: a.quiet,
        pc_sampling: a.pc_sampling.then(|| cutr_recorder::pc_sampling::PcSamplingConfig {
            period_log2: a.pc_period,
            stall_reasons: a.stall_reasons.clone(),
        }),
        counters: match &a.counters {
            Some(set) => {
                let nvml_interval = match a.nvml_interval.as_str() {
                    "off" => None,
                    t => Some(units::parse_duration(t).map_err(|e| format!("--nvml-interval: {e}"))?),
                };
                let interval =
                    units::parse_duration(&a.counter_interval).map_err(|e| format!("--counter-interval: {e}"))?;
                Some(
                    cutr_recorder::counters::CountersConfig::parse(set, interval, nvml_interval)
                        .map_err(|e| format!("--counters: {e}"))?,
                )
            }
            None => None,
        },
        ..Config::default()
    };
    c.crash_timeout = units::parse_duration(&a.crash_timeout).map_err(|e| format!("--crash-timeout: {e}"))?;
    c.control = a.control || a.start_paused;
    c.start_paused = a.start_paused;
    if let Some(r) = &a.capture_range {
        let range =
            cutr_recorder::controls::capture::CaptureRange::parse(r).map_err(|e| format!("--capture-range: {e}"))?;
        let end = cutr_recorder::controls::capture::CaptureEnd::parse(&a.capture_range_end)
            .map_err(|e| format!("--capture-range-end: {e}"))?;
        c.capture = Some((range, end));
    }
    if let Some(r) = &a.ring {
        c.ring = Some(cutr_recorder::controls::ring::RingLimit::parse(r).map_err(|e| format!("--ring: {e}"))?);
    }
    if let Some(t) = &a.ring_trigger {
        c.ring_triggers = cutr_recorder::controls::triggers::RingTrigger::parse_list(t)
            .map_err(|e| format!("--ring-trigger: {e}"))?;
    }
    if let Some(s) = &a.start_delay {
        c.start_delay = units::parse_duration(s).map_err(|e| format!("--start-delay: {e}"))?;
    }
    if let Some(s) = &a.duration {
        c.duration = Some(units::parse_duration(s).map_err(|e| format!("--duration: {e}"))?);
    }
    if let Some(s) = &a.device_buffer_size {
        c.device_buffer_bytes = Some(units::parse_size(s).map_err(|e| format!("--device-buffer-size: {e}"))?);
    }
    c.device_buffer_pool_limit = a.device_buffer_pool_limit;
    if let Some(p) = &c.cupti_library
        && !p.exists()
    {
        return Err(format!("--cupti-lib {} does not exist", p.display()));
    }
    c.validate().map_err(|e| e.to_string())?;
    Ok(c)
}

const CTL_HELP: &str = "Sends one request to the recording of process PID, started with --control:
  start   turn recording on
  stop    turn recording off (what CUPTI holds is written first)
  dump    write everything recorded so far into the file (with --ring: the window, to STEM.dumpN.cutr)
  status  whether recording is on, and the file

The socket is $CUTR_CONTROL_DIR/PID.sock, else $XDG_RUNTIME_DIR/cutr/PID.sock, else /tmp/cutr-UID/PID.sock.
Its directory must be yours, mode 0700, and not a symbolic link; the recording must run as your user.
Exit status: 0 on an ok reply, 1 on an error, 2 on wrong arguments.";

/// `cupti-record ctl PID start|stop|dump|status`: one request to a recording started with `--control`.
fn ctl(args: &[String]) -> ExitCode {
    use cutr_recorder::controls::control::{Request, send};
    let usage = "usage: cupti-record ctl PID start|stop|dump|status";
    if args.iter().any(|a| a == "--help" || a == "-h") {
        println!("{usage}\n\n{CTL_HELP}");
        return ExitCode::SUCCESS;
    }
    let (Some(pid), Some(req), None) = (args.first(), args.get(1), args.get(2)) else {
        eprintln!("cupti-record: error: {usage}");
        return ExitCode::from(2);
    };
    let (Ok(pid), Some(req)) = (pid.parse::<u32>(), Request::parse(req)) else {
        eprintln!("cupti-record: error: {usage}");
        return ExitCode::from(2);
    };
    match send(pid, req) {
        Ok(reply) if reply.starts_with("ok") => {
            println!("{reply}");
            ExitCode::SUCCESS
        }
        Ok(reply) => {
            eprintln!("cupti-record: {reply}");
            ExitCode::from(1)
        }
        Err(e) => {
            eprintln!("cupti-record: error: {e}");
            ExitCode::from(1)
        }
    }
}

fn main() -> ExitCode {
    let argv: Vec<String> = std::env::args().collect();
    if argv.get(1).map(String::as_str) == Some("ctl") {
        return ctl(&argv[2..]);
    }
    let args = Args::parse();
    if args.completions.is_some() || args.manpage {
        return match print_docs(&args) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => fail(format!("cannot write: {e}")),
        };
    }
    let cfg = match config(&args) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("cupti-record: error: {e}");
            return ExitCode::from(2);
        }
    };
    let lib = match injection_library(args.injection_lib.clone()) {
        Ok(l) => l,
        Err(e) => return fail(e),
    };
    // The output path without %p belongs to the first process that records; remove a stale file from an
    // earlier run so that process can claim it (others of the job write <stem>.<pid>.cutr beside it).
    if !cfg.output.contains('%') {
        let _ = std::fs::remove_file(&cfg.output);
    }
    let status_dir = StatusDir::create();
    let mut cmd = Command::new(&args.command[0]);
    cmd.args(&args.command[1..]);
    if let Some(d) = &status_dir {
        cmd.env("CUTR_STATUS_DIR", &d.0);
    }
    cmd.env("CUDA_INJECTION64_PATH", &lib);
    // NVTX ranges reach CUPTI through the same library, which forwards to the libcupti the recorder uses.
    cmd.env("NVTX_INJECTION64_PATH", &lib);
    for (k, v) in cfg.to_env() {
        cmd.env(k, v);
    }
    // Let the terminal's Ctrl-C reach the command (it is in our process group) and not kill us first: we wait
    // for the command to close its files.
    // SAFETY: setting the disposition of two signals in the parent before spawning.
    unsafe {
        libc::signal(libc::SIGINT, libc::SIG_IGN);
    }
    // SAFETY: in the child, between fork and exec, only restore the default disposition (async-signal-safe).
    unsafe {
        cmd.pre_exec(|| {
            libc::signal(libc::SIGINT, libc::SIG_DFL);
            Ok(())
        });
    }
    // A second early: file times come from a coarser clock than SystemTime::now.
    let started = std::time::SystemTime::now() - Duration::from_secs(1);
    let mut child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => return fail(format!("cannot run {}: {e}", args.command[0])),
    };
    forward_sigterm(child.id());
    let status = match child.wait() {
        Ok(s) => s,
        Err(e) => return fail(format!("waiting for {}: {e}", args.command[0])),
    };
    if !cfg.quiet && !recording_written(Path::new(&cfg.output), started) {
        let why = match status_dir.as_ref().map(StatusDir::failures) {
            Some((0, failed)) if failed.is_empty() => {
                format!("{} never initialized CUDA (no process of it loaded the recorder)", args.command[0])
            }
            Some((_, failed)) if !failed.is_empty() => format!(
                "the recorder could not start in {} (pid {}; see the cutr: line above)",
                args.command[0],
                failed.iter().map(u32::to_string).collect::<Vec<_>>().join(", ")
            ),
            Some(_) => format!("{}'s recordings went to other paths (see the cutr: lines above)", args.command[0]),
            None => format!("{} never initialized CUDA, or the recorder could not start", args.command[0]),
        };
        eprintln!("cupti-record: warning: no recording was written to {}: {why}", cfg.output);
    }
    if let Some(code) = status.code() {
        ExitCode::from(code as u8)
    } else {
        ExitCode::from(128 + status.signal().unwrap_or(0) as u8)
    }
}

/// A private folder where each process the recorder loads in leaves one line about its start
/// (`CUTR_STATUS_DIR`); removed when dropped.
struct StatusDir(PathBuf);

impl StatusDir {
    fn create() -> Option<StatusDir> {
        let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
        let dir = std::env::temp_dir().join(format!("cutr-status-{}-{nanos}", std::process::id()));
        std::fs::create_dir(&dir).ok().map(|()| StatusDir(dir))
    }

    /// How many processes started recording, and the pids of those where the recorder could not start.
    fn failures(&self) -> (usize, Vec<u32>) {
        let (mut started, mut failed) = (0, Vec::new());
        for e in std::fs::read_dir(&self.0).into_iter().flatten().flatten() {
            let text = std::fs::read_to_string(e.path()).unwrap_or_default();
            if text.starts_with("recording") {
                started += 1;
            } else if let Some(pid) = e.file_name().to_str().and_then(|p| p.parse().ok()) {
                failed.push(pid);
            }
        }
        failed.sort_unstable();
        (started, failed)
    }
}

impl Drop for StatusDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Whether the job wrote a recording to `output` since `since`: the file itself, or for a pattern with `%p`/`%h`
/// (or the `<stem>.<pid>.cutr` files a job's later processes write beside the first), any file in its folder with
/// the same beginning and end. A pattern whose folder holds `%` is not checked.
fn recording_written(output: &Path, since: std::time::SystemTime) -> bool {
    let name = output.file_name().and_then(|n| n.to_str()).unwrap_or("");
    let dir = output.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
    if dir.to_string_lossy().contains('%') {
        return true;
    }
    let (prefix, suffix) = match (name.find('%'), name.rfind('%')) {
        (Some(first), Some(last)) => (&name[..first], name.get(last + 2..).unwrap_or("")),
        _ => (name.strip_suffix(".cutr").unwrap_or(name), ".cutr"),
    };
    let Ok(entries) = std::fs::read_dir(dir) else { return true };
    entries.flatten().any(|e| {
        let n = e.file_name();
        let n = n.to_string_lossy();
        n.starts_with(prefix)
            && n.ends_with(suffix)
            && e.metadata().and_then(|m| m.modified()).is_ok_and(|t| t >= since)
    })
}

static CHILD: std::sync::atomic::AtomicI32 = std::sync::atomic::AtomicI32::new(0);

extern "C" fn on_sigterm(sig: libc::c_int) {
    let pid = CHILD.load(std::sync::atomic::Ordering::Relaxed);
    if pid > 0 {
        // SAFETY: kill is async-signal-safe.
        unsafe { libc::kill(pid, sig) };
    }
}

/// SIGTERM to cupti-record (a job scheduler stopping the job) goes to the command, which closes its file.
fn forward_sigterm(pid: u32) {
    CHILD.store(pid as i32, std::sync::atomic::Ordering::Relaxed);
    // SAFETY: installing a handler that only calls kill.
    unsafe {
        libc::signal(libc::SIGTERM, on_sigterm as *const () as libc::sighandler_t);
    }
}
