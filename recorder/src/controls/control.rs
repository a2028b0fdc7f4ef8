//! On-demand control of a running recording (`--control`): an operator turns recording on and off, or forces
//! everything recorded so far into the file, without stopping the job. Two ways in, both local and owner-only:
//! SIGUSR1 toggles recording, SIGUSR2 dumps; `cupti-record ctl PID start|stop|dump|status` talks to a Unix socket
//! `PID.sock`, never a network port. One line in (at most 256 bytes), one line out.
//!
//! The socket's directory is `$CUTR_CONTROL_DIR` if set, else `$XDG_RUNTIME_DIR/cutr`, else `/tmp/cutr-UID`. It
//! is created with mode 0700; one that exists must be a real directory (not a symbolic link), owned by this user,
//! with mode exactly 0700, else control is refused with a line that says which and names `CUTR_CONTROL_DIR` as the
//! way out. Both ends also check who is on the other side (`SO_PEERCRED`): the recorder answers only its own
//! user, and `ctl` talks only to a recorder of its own user, so a socket planted by someone else never gets a
//! request nor forges a reply.
//!
//! Requests never wait on each other: each connection is answered on a short-lived thread (at most
//! [`MAX_CONNECTIONS`] at once, beyond that "busy"), which has [`REQUEST_DEADLINE`] to read the whole line and as
//! long to write the reply. Requests that change the recording's state run one at a time (the session's own lock).
//!
//! The signals are chained: the application's own SIGUSR1/SIGUSR2 handlers still run, and get the signals back
//! when the recording's control ends (see `signals`).

mod signals;

use std::io::{BufRead, Read, Write};
use std::os::fd::{AsFd, AsRawFd};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// The variable that chooses the socket's directory, over `$XDG_RUNTIME_DIR/cutr` and `/tmp/cutr-UID`.
pub const DIR_VAR: &str = "CUTR_CONTROL_DIR";
/// The longest request line, newline excluded; longer ones are refused unread.
pub const MAX_REQUEST: usize = 256;
/// Connections answered at once; more are told "busy".
pub const MAX_CONNECTIONS: usize = 16;
/// How long a connection has to send its whole request line (and the recorder to write the reply).
pub const REQUEST_DEADLINE: Duration = Duration::from_secs(2);
/// How often the control threads look whether the recording has ended.
const POLL_MS: i32 = 20;

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
    /// Whether the recording has ended (the control threads then stop).
    fn ended(&self) -> bool;
    /// Whether recording is on now (SIGUSR1 toggles from this, whatever turned it on or off).
    fn recording(&self) -> bool;
}

/// The directory of the control sockets of this user (see the module's documentation).
pub fn socket_dir() -> PathBuf {
    if let Some(d) = std::env::var_os(DIR_VAR).filter(|d| !d.is_empty()) {
        return PathBuf::from(d);
    }
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

fn euid() -> u32 {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() }
}

/// Why a socket directory cannot be used.
enum DirError {
    /// It does not exist (the client: no recording has control).
    Missing(std::io::Error),
    /// One line: what is wrong, and the way out.
    Refused(String),
}

fn refuse(dir: &Path, problem: String) -> DirError {
    DirError::Refused(format!(
        "the control socket directory {} {problem}; fix or remove it, or set {DIR_VAR} to a directory of your own \
         with mode 0700",
        dir.display()
    ))
}

/// Opens `dir` (created with mode 0700 if `create` and missing) and checks it is a real directory, owned by this
/// user, mode 0700: nobody else can then enter it, replace the socket or swap what it holds. The checks are made
/// on the opened directory (O_NOFOLLOW, fstat), so a symbolic link swapped in after them is not followed.
fn open_private_dir(dir: &Path, create: bool) -> Result<std::fs::File, DirError> {
    let mut created = false;
    if create {
        // The mode is applied by mkdir itself: there is no moment where the directory is open to others.
        match std::fs::DirBuilder::new().mode(0o700).create(dir) {
            Ok(()) => created = true,
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(refuse(dir, format!("cannot be created ({e})"))),
        }
    }
    // symlink_metadata for the message; the checks that count are made on the directory opened below.
    match std::fs::symlink_metadata(dir) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Err(DirError::Missing(e)),
        Err(e) => return Err(refuse(dir, format!("cannot be examined ({e})"))),
        Ok(m) if m.file_type().is_symlink() => {
            return Err(refuse(dir, "is a symbolic link, not a directory".into()));
        }
        Ok(m) if !m.is_dir() => return Err(refuse(dir, "is not a directory".into())),
        Ok(_) => {}
    }
    // O_NOFOLLOW: a symbolic link swapped in since is refused, not followed.
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(dir)
        .map_err(|e| refuse(dir, format!("cannot be opened as a directory ({e})")))?;
    let m = f.metadata().map_err(|e| refuse(dir, format!("cannot be examined ({e})")))?;
    let me = euid();
    if m.uid() != me {
        return Err(refuse(dir, format!("is owned by uid {}, not by this user (uid {me})", m.uid())));
    }
    if m.mode() & 0o777 != 0o700 && created {
        // Ours, just made, narrowed further by an unusual umask: set through the open descriptor, not the path.
        use std::os::unix::fs::PermissionsExt;
        let _ = f.set_permissions(std::fs::Permissions::from_mode(0o700));
        return Ok(f);
    }
    if m.mode() & 0o777 != 0o700 {
        return Err(refuse(dir, format!("has mode {:04o}, not 0700", m.mode() & 0o777)));
    }
    Ok(f)
}

/// The uid of the process at the other end of `s` (for a listening socket's peer: its uid when it listened).
fn peer_uid(s: &impl AsFd) -> Option<u32> {
    let mut cred = libc::ucred { pid: 0, uid: 0, gid: 0 };
    let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: SO_PEERCRED fills a ucred of the given length on a socket we hold open.
    let r = unsafe {
        libc::getsockopt(
            s.as_fd().as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            &mut cred as *mut libc::ucred as *mut libc::c_void,
            &mut len,
        )
    };
    (r == 0 && len as usize == std::mem::size_of::<libc::ucred>()).then_some(cred.uid)
}

/// Sends `r` to the recording in process `pid`; its reply. Refused if the socket's directory is not this user's
/// private one, or if the socket is served by another user.
pub fn send(pid: u32, r: Request) -> Result<String, String> {
    let dir = socket_dir();
    let path = dir.join(format!("{pid}.sock"));
    let absent = |e: std::io::Error| {
        format!(
            "no recording with control in process {pid} ({}: {e}); record with `cupti-record --control`",
            path.display()
        )
    };
    match open_private_dir(&dir, false) {
        Ok(_) => {}
        Err(DirError::Missing(e)) => return Err(absent(e)),
        Err(DirError::Refused(why)) => return Err(why),
    }
    let mut s = UnixStream::connect(&path).map_err(absent)?;
    let me = euid();
    match peer_uid(&s) {
        Some(uid) if uid == me => {}
        Some(uid) => {
            return Err(format!(
                "{} is served by uid {uid}, not by this user (uid {me}): not talking to it",
                path.display()
            ));
        }
        None => return Err(format!("cannot tell who serves {}: not talking to it", path.display())),
    }
    s.set_write_timeout(Some(REQUEST_DEADLINE)).map_err(|e| e.to_string())?;
    // A dump may wait up to 60 s for the writer (a large flight-recorder window).
    s.set_read_timeout(Some(Duration::from_secs(90))).map_err(|e| e.to_string())?;
    writeln!(s, "{}", r.as_str()).map_err(|e| format!("cannot send to process {pid}: {e}"))?;
    // One line, of bounded length: whatever is on the other side cannot make us read without end.
    let mut reply = Vec::new();
    std::io::BufReader::new((&s).take(4096))
        .read_until(b'\n', &mut reply)
        .map_err(|e| format!("no reply from process {pid}: {e}"))?;
    let line = reply.strip_suffix(b"\n").unwrap_or(&reply);
    if line.is_empty() {
        return Err(format!("no reply from process {pid}"));
    }
    Ok(String::from_utf8_lossy(line).into_owned())
}

/// Whether a recording's control runs in this process: from `start` until its threads have seen the recording
/// end (within 20 ms), put the signals back and removed the socket.
pub fn active() -> bool {
    STARTED.load(Ordering::Acquire)
}

static STARTED: AtomicBool = AtomicBool::new(false);
/// Connections being answered now, all recordings of the process together.
static CONNECTIONS: AtomicUsize = AtomicUsize::new(0);

/// Held by each control thread; the last one dropped frees control for a later recording.
struct Claim;

impl Drop for Claim {
    fn drop(&mut self) {
        STARTED.store(false, Ordering::Release);
    }
}

/// Starts the control threads of `target` for process `pid`: the socket, SIGUSR1 and SIGUSR2. Returns the
/// socket's path. One recording at a time per process; a socket that cannot be made is an error (and the signals
/// are not taken either).
pub(crate) fn start(target: &'static dyn Controlled, pid: u32) -> Result<PathBuf, String> {
    // The control threads of a recording that just ended stop within one of their 20 ms polls.
    let t0 = Instant::now();
    while STARTED.swap(true, Ordering::AcqRel) {
        if t0.elapsed() > Duration::from_millis(500) {
            return Err("control is already running in this process".into());
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    // Dropped on every error below (control free again), or moved into the threads.
    let claim = Arc::new(Claim);
    let dir = socket_dir();
    let socket = Socket::bind(&dir, pid)?;
    let c = claim.clone();
    crate::threads::spawn("cutr-control", move || accept_loop(target, socket, c))
        .map_err(|e| format!("cannot start the control thread: {e}"))?;
    // Without the signals, the socket still works.
    if let Some(tap) = signals::SignalTap::install() {
        // A thread that cannot start drops the tap, which puts the signals back.
        let _ = crate::threads::spawn("cutr-control-sig", move || watch_signals(target, tap, claim));
    }
    Ok(dir.join(format!("{pid}.sock")))
}

/// The listening socket, removed when dropped.
struct Socket {
    listener: UnixListener,
    dir: std::fs::File,
    name: std::ffi::CString,
}

impl Socket {
    fn bind(dir: &Path, pid: u32) -> Result<Socket, String> {
        let d = open_private_dir(dir, true).map_err(|e| match e {
            DirError::Missing(e) => format!("cannot use {}: {e}", dir.display()),
            DirError::Refused(why) => why,
        })?;
        let name = std::ffi::CString::new(format!("{pid}.sock")).map_err(|e| e.to_string())?;
        // A stale socket of an earlier process that had this pid.
        // SAFETY: unlinkat on the directory we hold open, with a NUL-terminated name.
        unsafe { libc::unlinkat(d.as_raw_fd(), name.as_ptr(), 0) };
        // Bound through the descriptor of the directory we checked (/proc/self/fd/N), so the socket lands in
        // that directory even if its path were swapped after the check; the plain path where /proc is missing.
        let via_fd = PathBuf::from(format!("/proc/self/fd/{}", d.as_raw_fd()));
        let at = if via_fd.is_dir() { via_fd } else { dir.to_path_buf() };
        let listener = UnixListener::bind(at.join(format!("{pid}.sock")))
            .map_err(|e| format!("cannot listen on {}: {e}", dir.join(format!("{pid}.sock")).display()))?;
        let socket = Socket { listener, dir: d, name };
        // bind made the socket with the umask's mode; then owner-only. The gap is harmless: the directory is
        // ours with mode 0700, so nobody else could reach the socket in between anyway.
        // SAFETY: fchmodat on the directory we hold open, with a NUL-terminated name.
        unsafe { libc::fchmodat(socket.dir.as_raw_fd(), socket.name.as_ptr(), 0o600, 0) };
        socket.listener.set_nonblocking(true).map_err(|e| e.to_string())?;
        Ok(socket)
    }
}

impl Drop for Socket {
    fn drop(&mut self) {
        // SAFETY: unlinkat on the directory we hold open, with a NUL-terminated name.
        unsafe { libc::unlinkat(self.dir.as_raw_fd(), self.name.as_ptr(), 0) };
    }
}

/// Waits up to POLL_MS for `fd` to be readable.
fn wait_readable(fd: &impl AsFd) {
    let mut p = libc::pollfd { fd: fd.as_fd().as_raw_fd(), events: libc::POLLIN, revents: 0 };
    // SAFETY: one valid pollfd.
    unsafe { libc::poll(&mut p, 1, POLL_MS) };
}

/// Accepts connections until the recording ends, each answered on a thread of its own.
fn accept_loop(target: &'static dyn Controlled, socket: Socket, claim: Arc<Claim>) {
    loop {
        wait_readable(&socket.listener);
        // Checked after the wait: a client that comes as the recording ends is closed unanswered, as the
        // socket is gone, rather than told about a recording that no longer is.
        if target.ended() {
            break;
        }
        match socket.listener.accept() {
            Ok((stream, _)) => dispatch(target, stream),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            // Out of descriptors or the like: try again later rather than spin.
            Err(_) => std::thread::sleep(Duration::from_millis(100)),
        }
    }
    drop(socket);
    drop(claim);
}

/// Counts a connection being answered while alive.
struct Answering;

impl Drop for Answering {
    fn drop(&mut self) {
        CONNECTIONS.fetch_sub(1, Ordering::AcqRel);
    }
}

fn dispatch(target: &'static dyn Controlled, stream: UnixStream) {
    // Only our own user: the directory keeps others out, bar root, which gets nothing either.
    if peer_uid(&stream) != Some(euid()) {
        return;
    }
    if CONNECTIONS.fetch_add(1, Ordering::AcqRel) >= MAX_CONNECTIONS {
        CONNECTIONS.fetch_sub(1, Ordering::AcqRel);
        // Never wait on this client: the reply fits the socket's buffer, or is lost.
        let _ = stream.set_nonblocking(true);
        let _ = (&stream).write_all(format!("error: busy ({MAX_CONNECTIONS} requests in progress)\n").as_bytes());
        return;
    }
    let answering = Answering;
    // A thread that cannot start drops the closure: the connection closes, the count goes back.
    let _ = crate::threads::spawn("cutr-control-req", move || {
        let _a = answering;
        answer(target, &stream);
    });
}

/// Reads one request line within REQUEST_DEADLINE, carries it out and writes the reply.
fn answer(target: &'static dyn Controlled, stream: &UnixStream) {
    let request = read_request(stream);
    if target.ended() {
        return; // closed unanswered, as if the socket were already gone
    }
    let reply = match request {
        Ok(line) => match std::str::from_utf8(&line) {
            Ok(text) => match Request::parse(text) {
                Some(r) => target.control(r),
                None => {
                    format!("error: unknown request '{}': use start, stop, dump or status", sanitize(text.trim()))
                }
            },
            Err(_) => "error: the request is not UTF-8 text".into(),
        },
        Err(RequestError::Empty) => return,
        Err(RequestError::TooLong) => format!("error: request too long (at most {MAX_REQUEST} bytes)"),
        Err(RequestError::Late) => {
            format!("error: no complete request within {} s", REQUEST_DEADLINE.as_secs())
        }
    };
    let _ = stream.set_nonblocking(false);
    let _ = stream.set_write_timeout(Some(REQUEST_DEADLINE));
    let _ = (&*stream).write_all(format!("{reply}\n").as_bytes());
}

enum RequestError {
    /// Closed before sending anything.
    Empty,
    TooLong,
    /// No newline within the deadline.
    Late,
}

/// The request line (without its newline), read into a fixed buffer: at most MAX_REQUEST + 1 bytes are ever
/// read, whatever the client sends.
fn read_request(stream: &UnixStream) -> Result<Vec<u8>, RequestError> {
    let deadline = Instant::now() + REQUEST_DEADLINE;
    let _ = stream.set_nonblocking(false);
    let mut buf = [0u8; MAX_REQUEST + 1];
    let mut len = 0;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() || stream.set_read_timeout(Some(left)).is_err() {
            return Err(RequestError::Late);
        }
        match (&*stream).read(&mut buf[len..]) {
            Ok(0) if len == 0 => return Err(RequestError::Empty),
            // The client closed its writing side without a newline: the request is what came.
            Ok(0) => return Ok(buf[..len].to_vec()),
            Ok(n) => {
                let seen = len;
                len += n;
                if let Some(i) = buf[seen..len].iter().position(|&b| b == b'\n') {
                    return Ok(buf[..seen + i].to_vec());
                }
                if len == buf.len() {
                    return Err(RequestError::TooLong);
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => return Err(RequestError::Late),
        }
    }
}

/// A short prefix of `text` fit to echo back: printable ASCII only, at most 32 characters.
fn sanitize(text: &str) -> String {
    let mut s: String = text.chars().take(32).map(|c| if c.is_ascii_graphic() || c == ' ' { c } else { '?' }).collect();
    if text.chars().nth(32).is_some() {
        s.push_str("...");
    }
    s
}

/// Carries out the signals until the recording ends: each SIGUSR1 toggles (from the recording's real state),
/// each SIGUSR2 dumps. A thread of its own, so a long dump never holds up the socket.
fn watch_signals(target: &'static dyn Controlled, tap: signals::SignalTap, claim: Arc<Claim>) {
    while !target.ended() {
        wait_readable(&tap);
        let mut b = [0u8; 16];
        // SAFETY: reading into a valid buffer from our own non-blocking pipe.
        let n = unsafe { libc::read(tap.as_fd().as_raw_fd(), b.as_mut_ptr() as *mut libc::c_void, b.len()) };
        for &byte in &b[..n.max(0) as usize] {
            let r = match byte {
                signals::DUMP => Request::Dump,
                _ if target.recording() => Request::Stop,
                _ => Request::Start,
            };
            let _ = target.control(r);
        }
    }
    // The signals go back to the application, and the pipe is closed, before control is free again.
    drop(tap);
    drop(claim);
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

    #[test]
    fn bad_input_is_echoed_short_and_printable() {
        assert_eq!(sanitize("pause"), "pause");
        assert_eq!(sanitize("a\u{1b}[2Jb\tc\u{e9}"), "a?[2Jb?c?");
        assert_eq!(sanitize(&"x".repeat(40)), format!("{}...", "x".repeat(32)));
    }

    #[test]
    fn the_peer_of_a_socket_pair_is_this_user() {
        let (a, _b) = UnixStream::pair().unwrap();
        assert_eq!(peer_uid(&a), Some(euid()));
    }
}
