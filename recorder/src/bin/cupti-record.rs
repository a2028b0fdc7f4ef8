//! `cupti-record [options] -o run.cutr -- CMD ARGS...`: runs CMD with the cutr injection library, so every
//! process of CMD that uses CUDA records its activity (one file per process).
//!
//! Exit status: CMD's own status (128 + signal if it was killed); 125 when cupti-record itself cannot start CMD.

use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::time::Duration;

use clap::parser::ValueSource;
use clap::{Arg, ArgAction, ArgMatches, Parser};
use cutr_recorder::config::{Config, KIND_GROUPS, OPTIONS, Opt, Takes};

#[derive(Parser, Debug)]
#[command(
    name = "cupti-record",
    version,
    about = "Record the CUDA activity of a command into a .cutr file",
    after_help = after_help()
)]
struct Args {
    /// The injected library's options, as the table `config::OPTIONS` declares them.
    #[command(flatten)]
    options: OptionFlags,
    /// The cutr injection library (default: libcutr_recorder.so next to this program).
    #[arg(long, env = "CUTR_INJECTION_LIB")]
    injection_lib: Option<PathBuf>,
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

/// The flags of `config::OPTIONS` given on the command line, in the table's order: each with its long name and
/// the variable's text it stands for.
#[derive(Debug)]
struct OptionFlags(Vec<(&'static Opt, &'static str, String)>);

impl clap::Args for OptionFlags {
    fn augment_args(cmd: clap::Command) -> clap::Command {
        OPTIONS.iter().filter_map(option_arg).fold(cmd, clap::Command::arg)
    }

    fn augment_args_for_update(cmd: clap::Command) -> clap::Command {
        Self::augment_args(cmd)
    }
}

/// The clap argument of an option's flag, if it has one.
fn option_arg(o: &Opt) -> Option<Arg> {
    let f = o.flag?;
    // Each help under its flag (for the whole list of options, as it always was): several are a few lines long.
    let mut a = Arg::new(f.long).long(f.long).help(o.help).next_line_help(true);
    if let Some(s) = f.short {
        a = a.short(s);
    }
    if let Some(d) = f.default {
        a = a.default_value(d);
    }
    if let Some(r) = f.requires {
        a = a.requires(r);
    }
    Some(match f.takes {
        Takes::Value(name) => a.value_name(name).action(ArgAction::Set),
        Takes::OptionalValue(name, missing) => {
            a.value_name(name).action(ArgAction::Set).num_args(0..=1).default_missing_value(missing)
        }
        Takes::Switch(_) => a.action(ArgAction::SetTrue),
    })
}

impl clap::FromArgMatches for OptionFlags {
    fn from_arg_matches(m: &ArgMatches) -> Result<Self, clap::Error> {
        // Only what the user typed: a default shown in --help is Config::default()'s already, and applying it
        // would make a wrong one change the recording instead of only the help.
        let typed = |long: &str| m.value_source(long) == Some(ValueSource::CommandLine);
        let flags = || OPTIONS.iter().filter_map(|o| Some((o, o.flag?)));
        let implied: Vec<&str> = flags().filter(|(_, f)| typed(f.long)).filter_map(|(_, f)| f.implies).collect();
        let mut given = Vec::new();
        for (o, f) in flags() {
            let value = match f.takes {
                Takes::Switch(sets) if typed(f.long) || implied.contains(&f.long) => sets.to_string(),
                Takes::Value(_) | Takes::OptionalValue(..) if typed(f.long) => {
                    m.get_one::<String>(f.long).cloned().unwrap_or_default()
                }
                _ => continue,
            };
            given.push((o, f.long, value));
        }
        Ok(OptionFlags(given))
    }

    fn update_from_arg_matches(&mut self, m: &ArgMatches) -> Result<(), clap::Error> {
        *self = Self::from_arg_matches(m)?;
        Ok(())
    }
}

/// What `--help` shows after the flags: the activity kinds, and the variables with the flags that set them.
fn after_help() -> String {
    let kinds: Vec<String> = KIND_GROUPS.iter().map(|g| format!("  {:<12} {}", g.0, g.2)).collect();
    let defaults = Config::default();
    let vars: Vec<String> = OPTIONS
        .iter()
        .map(|o| {
            let (var, what) = match o.flag {
                Some(f) => match f.takes {
                    Takes::Switch(sets) => (format!("{}={sets}", o.var), format!("--{}", f.long)),
                    _ => (o.var.to_string(), format!("--{}", f.long)),
                },
                None => {
                    let default = (o.format)(&defaults).unwrap_or_default();
                    (o.var.to_string(), format!("{} [default: {default}]", o.help))
                }
            };
            format!("  {var:<30} {what}")
        })
        .collect();
    format!(
        "Activity kinds (--kinds, comma-separated; 'default', 'all', a CUPTI kind number, '-name' removes):\n{}\n\n\
         The injected library reads these variables, which the flags set (each takes what its flag takes):\n{}",
        kinds.join("\n"),
        vars.join("\n")
    )
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

/// The configuration the flags give: each flag's text read as its variable's would be.
fn config(a: &Args) -> Result<Config, String> {
    let mut c = Config::default();
    for (o, long, value) in &a.options.0 {
        (o.parse)(&mut c, value).map_err(|e| format!("--{long}: {e}"))?;
    }
    if let Some(p) = &c.cupti_library
        && !p.exists()
    {
        return Err(format!("--cupti-lib {} does not exist", p.display()));
    }
    c.validate().map_err(|e| e.to_string())?;
    c.validate_split().map_err(|e| e.to_string())?;
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
