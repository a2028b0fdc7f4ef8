//! On-demand control of a running recording (`--control`): an operator turns recording on and off, or forces
//! everything recorded so far into the file, without stopping the job. Two ways in, both local and owner-only:
//! SIGUSR1 toggles recording, SIGUSR2 dumps; `cupti-record ctl PID start|stop|dump|status` talks to a Unix socket at
//! `$XDG_RUNTIME_DIR/cutr/PID.sock` (else `/tmp/cutr-UID/PID.sock`), in a directory only the user can enter,
//! never a network port. One line in, one line out.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::time::Duration;

/// What a control request asks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Request {
    /// Turn recording on.
    Start,
    /// Turn recording off (what CUPTI holds is flushed first).
    Stop,
    /// Flush what CUPTI holds into the file now and sync it: the file as it stands is readable by every command.
    Dump,
    /// Whether recording is on, and the file.
    Status,
}

impl Request {
    pub fn parse(s: &str) -> Option<Request> {
        match s.trim() {
            "start" => Some(Request::Start),
            "stop" => Some(Request::Stop),
            "dump" => Some(Request::Dump),
            "status" => Some(Request::Status),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Request::Start => "start",
            Request::Stop => "stop",
            Request::Dump => "dump",
            Request::Status => "status",
        }
    }
}

/// What carries requests out: the session.
pub(crate) trait Controlled: Sync {
    /// Carries out `r`; the reply line.
    fn control(&'static self, r: Request) -> String;
    /// Whether the recording has ended (the control thread then stops).
    fn ended(&self) -> bool;
}

/// The directory of the control sockets of this user.
pub fn socket_dir() -> PathBuf {
    match std::env::var_os("XDG_RUNTIME_DIR").filter(|d| !d.is_empty()) {
        Some(d) => PathBuf::from(d).join("cutr"),
        // SAFETY: getuid has no preconditions.
        None => PathBuf::from(format!("/tmp/cutr-{}", unsafe { libc::getuid() })),
    }
}

/// The control socket of process `pid`.
pub fn socket_path(pid: u32) -> PathBuf {
    socket_dir().join(format!("{pid}.sock"))
}

/// Sends `r` to the recording in process `pid`; its reply.
pub fn send(pid: u32, r: Request) -> Result<String, String> {
    let path = socket_path(pid);
    let mut s = UnixStream::connect(&path).map_err(|e| {
        format!(
            "no recording with control in process {pid} ({}: {e}); record with `cupti-record --control`",
            path.display()
        )
    })?;
    s.set_read_timeout(Some(Duration::from_secs(30))).map_err(|e| e.to_string())?;
    writeln!(s, "{}", r.as_str()).map_err(|e| e.to_string())?;
    let mut line = String::new();
    BufReader::new(s).read_line(&mut line).map_err(|e| format!("no reply from process {pid}: {e}"))?;
    Ok(line.trim_end().to_string())
}

static SIGUSR1_FD: AtomicI32 = AtomicI32::new(-1);
static STARTED: AtomicBool = AtomicBool::new(false);

/// What a signal asks, as the byte written to the control thread's pipe.
const TOGGLE: u8 = 1;
const DUMP: u8 = 2;

extern "C" fn on_signal(sig: libc::c_int) {
    let fd = SIGUSR1_FD.load(Ordering::Acquire);
    if fd >= 0 {
        let b = if sig == libc::SIGUSR2 { DUMP } else { TOGGLE };
        // SAFETY: write is async-signal-safe; one byte from a valid buffer.
        unsafe { libc::write(fd, &b as *const u8 as *const libc::c_void, 1) };
    }
}

/// Starts the control thread of `target` for process `pid`: the socket, SIGUSR1 and SIGUSR2. Returns the socket's
/// path. One recording at a time per process; a socket that cannot be made is an error (and the signals are not
/// taken either).
pub(crate) fn start(target: &'static dyn Controlled, pid: u32) -> Result<PathBuf, String> {
    // The control thread of a recording that just ended stops within one of its 20 ms polls.
    let t0 = std::time::Instant::now();
    while STARTED.swap(true, Ordering::AcqRel) {
        if t0.elapsed() > Duration::from_millis(500) {
            return Err("control is already running in this process".into());
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let started = listen(target, pid);
    if started.is_err() {
        STARTED.store(false, Ordering::Release);
    }
    started
}

/// The socket, the signals and the thread of [`start`].
fn listen(target: &'static dyn Controlled, pid: u32) -> Result<PathBuf, String> {
    let dir = socket_dir();
    std::fs::create_dir_all(&dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    // Owner-only: nobody else may enter the directory (and so reach the socket).
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700))
        .map_err(|e| format!("cannot make {} private: {e}", dir.display()))?;
    let path = socket_path(pid);
    let _ = std::fs::remove_file(&path);
    let listener = UnixListener::bind(&path).map_err(|e| format!("cannot listen on {}: {e}", path.display()))?;
    let _ = std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600));
    listener.set_nonblocking(true).map_err(|e| e.to_string())?;
    let mut fds = [-1; 2];
    // SAFETY: a two-int array for pipe2 to fill.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC | libc::O_NONBLOCK) } != 0 {
        fds = [-1, -1]; // no signals, the socket still works
    } else {
        SIGUSR1_FD.store(fds[1], Ordering::Release);
        // SAFETY: a valid sigaction for a handler that only writes to a pipe.
        unsafe {
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = on_signal as *const () as usize;
            sa.sa_flags = libc::SA_RESTART;
            libc::sigaction(libc::SIGUSR1, &sa, std::ptr::null_mut());
            libc::sigaction(libc::SIGUSR2, &sa, std::ptr::null_mut());
        }
    }
    let (signals, socket) = (fds[0], path.clone());
    std::thread::Builder::new()
        .name("cutr-control".into())
        .spawn(move || serve(target, &listener, signals, &socket))
        .map_err(|e| e.to_string())?;
    Ok(path)
}

/// Answers requests until the recording ends: each SIGUSR1 toggles, each SIGUSR2 dumps, each connection carries
/// one request.
fn serve(target: &'static dyn Controlled, listener: &UnixListener, signals: i32, socket: &std::path::Path) {
    let mut recording = true;
    while !target.ended() {
        let mut b = [0u8; 16];
        let n = if signals >= 0 {
            // SAFETY: reading into a valid buffer from our own non-blocking pipe.
            unsafe { libc::read(signals, b.as_mut_ptr() as *mut libc::c_void, b.len()) }
        } else {
            0
        };
        for &byte in &b[..n.max(0) as usize] {
            if byte == DUMP {
                let _ = target.control(Request::Dump);
                continue;
            }
            recording = !recording;
            let r = if recording { Request::Start } else { Request::Stop };
            let _ = target.control(r);
        }
        match listener.accept() {
            Ok((stream, _)) => {
                let _ = stream.set_nonblocking(false);
                let _ = stream.set_read_timeout(Some(Duration::from_secs(5)));
                let mut line = String::new();
                let mut reader = BufReader::new(&stream);
                if reader.read_line(&mut line).is_ok() {
                    let reply = match Request::parse(&line) {
                        Some(r) => {
                            if r == Request::Start || r == Request::Stop {
                                recording = r == Request::Start;
                            }
                            target.control(r)
                        }
                        None => format!("error: unknown request '{}': use start, stop, dump or status", line.trim()),
                    };
                    let _ = writeln!(&stream, "{reply}");
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => std::thread::sleep(Duration::from_millis(20)),
            Err(_) => std::thread::sleep(Duration::from_millis(100)),
        }
    }
    let _ = std::fs::remove_file(socket);
    // A later recording in this process may take control again (its own pipe and socket).
    SIGUSR1_FD.store(-1, Ordering::Release);
    if signals >= 0 {
        // SAFETY: our own pipe's read end, not used after this.
        unsafe { libc::close(signals) };
    }
    STARTED.store(false, Ordering::Release);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_read_back() {
        for r in [Request::Start, Request::Stop, Request::Dump, Request::Status] {
            assert_eq!(Request::parse(&format!(" {}\n", r.as_str())), Some(r));
        }
        assert_eq!(Request::parse("pause"), None);
    }
}
