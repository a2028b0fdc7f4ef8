//! The control socket and signals (`--control`) against hostile and careless clients, unsafe socket directories
//! and an application with its own SIGUSR1/SIGUSR2 handlers; with the fake CUPTI (no GPU).

use std::io::{Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use cutr_recorder::controls::control::{self, Request, send, socket_path};
use cutr_recorder::fake::{FakeCupti, FakeHandle};
use cutr_recorder::{Config, Recorder};
use cutr_schema::kinds;

/// One recording at a time (CUPTI's callbacks and the signals are process-wide), and the environment
/// (`CUTR_CONTROL_DIR`) is changed only while this is held.
static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

/// Points `CUTR_CONTROL_DIR` at `dir` (or removes it), and `XDG_RUNTIME_DIR` likewise when given.
fn set_env(var: &str, value: Option<&Path>) {
    // SAFETY: every test of this file changes the environment only while holding SERIAL, and reads it (the
    // recorder reads it at start and in `send`) only from the thread holding SERIAL.
    unsafe {
        match value {
            Some(v) => std::env::set_var(var, v),
            None => std::env::remove_var(var),
        }
    }
}

/// A fresh private socket directory for this test, in `CUTR_CONTROL_DIR`.
fn private_dir() -> tempfile::TempDir {
    let d = tempfile::tempdir().unwrap();
    std::fs::set_permissions(d.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
    set_env(control::DIR_VAR, Some(d.path()));
    d
}

/// A recording stopped when dropped, so that a failed test leaves the next one free to record.
struct Running(Option<Recorder>);

impl std::ops::Deref for Running {
    type Target = Recorder;
    fn deref(&self) -> &Recorder {
        self.0.as_ref().unwrap()
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Some(r) = self.0.take() {
            let _ = r.stop();
        }
    }
}

fn start(dir: &Path, f: impl FnOnce(&mut Config)) -> (Running, FakeHandle) {
    let (cupti, h) = FakeCupti::new(130001);
    let mut cfg = Config {
        output: dir.join("c.cutr").display().to_string(),
        buffer_bytes: 256 << 10,
        memory_cap_bytes: 64 << 20,
        flush_period: Duration::from_millis(50),
        quiet: true,
        control: true,
        ..Config::default()
    };
    f(&mut cfg);
    (Running(Some(Recorder::start_with(Box::new(cupti), cfg).unwrap())), h)
}

/// Stops `rec` and waits (bounded) for its control threads to put everything back.
fn stop(mut rec: Running) -> cutr_recorder::Summary {
    let s = rec.0.take().unwrap().stop().unwrap();
    let t = Instant::now();
    while control::active() && t.elapsed() < Duration::from_secs(2) {
        std::thread::sleep(Duration::from_millis(5));
    }
    assert!(!control::active(), "control ends within 2 s of the recording");
    s
}

fn me() -> u32 {
    std::process::id()
}

fn connect() -> UnixStream {
    let s = UnixStream::connect(socket_path(me())).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s
}

/// The line the recorder answers on `s` ("" if it closes without one). A reset after the line is the recorder
/// closing with the client's unread bytes (a refused request), not an error.
fn reply(mut s: &UnixStream) -> String {
    let mut r = Vec::new();
    let mut b = [0u8; 256];
    while !r.ends_with(b"\n") {
        match s.read(&mut b) {
            Ok(0) => break,
            Ok(n) => r.extend_from_slice(&b[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset && r.is_empty() => break,
            Err(e) => panic!("reading the reply: {e}"),
        }
    }
    String::from_utf8(r).unwrap()
}

fn ask(raw: &[u8]) -> String {
    let mut s = connect();
    s.write_all(raw).unwrap();
    reply(&s)
}

fn wait_for(rec: &Running, on: bool) {
    let t = Instant::now();
    while rec.is_recording() != on && t.elapsed() < Duration::from_secs(5) {
        std::thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(rec.is_recording(), on);
}

#[test]
fn idle_slow_and_deaf_clients_never_hold_up_a_request() {
    let _g = serial();
    let dir = private_dir();
    let (rec, _h) = start(dir.path(), |_| {});
    let on = format!("ok: recording on to {}", rec.path().display());
    // Four clients that connect and send nothing (the old server gave each 5 s, one after the other).
    let idle: Vec<UnixStream> = (0..4).map(|_| connect()).collect();
    // Clients that ask and never read their reply, one of them with a dump.
    let mut deaf = Vec::new();
    for req in [&b"status\n"[..], b"dump\n"] {
        let mut s = connect();
        s.write_all(req).unwrap();
        deaf.push(s);
    }
    // One that sends half a request and stalls.
    let mut slow = connect();
    slow.write_all(b"sta").unwrap();
    let slow_since = Instant::now();
    let t = Instant::now();
    assert_eq!(send(me(), Request::Status).unwrap(), on);
    let took = t.elapsed();
    assert!(took < Duration::from_secs(2), "status took {took:?} behind idle clients");
    // The stalled one is cut off at the request deadline.
    assert_eq!(reply(&slow), "error: no complete request within 2 s\n");
    let cut = slow_since.elapsed();
    assert!(cut >= Duration::from_millis(1900) && cut < Duration::from_secs(4), "{cut:?}");
    // The deaf clients' replies were written all the same.
    for s in &deaf {
        assert_eq!(reply(s), format!("{on}\n"));
    }
    drop((idle, deaf));
    // Beyond MAX_CONNECTIONS at once, the next is told "busy" at once; a request works again once they go.
    std::thread::sleep(Duration::from_millis(200)); // the closed clients' threads see their end
    let crowd: Vec<UnixStream> = (0..control::MAX_CONNECTIONS).map(|_| connect()).collect();
    assert_eq!(reply(&connect()), format!("error: busy ({} requests in progress)\n", control::MAX_CONNECTIONS));
    drop(crowd);
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(send(me(), Request::Status).unwrap(), on);
    stop(rec);
}

/// Pages this process has in memory, in bytes.
fn rss() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap();
    let pages: u64 = statm.split_whitespace().nth(1).unwrap().parse().unwrap();
    // SAFETY: sysconf has no preconditions.
    pages * unsafe { libc::sysconf(libc::_SC_PAGESIZE) } as u64
}

#[test]
fn a_huge_line_is_refused_unread_and_costs_no_memory() {
    let _g = serial();
    let dir = private_dir();
    let (rec, _h) = start(dir.path(), |_| {});
    let chunk = vec![b'x'; 1 << 20];
    let _ = ask(b"status\n"); // the first request's thread and buffers exist before the measure
    let before = rss();
    let s = connect();
    // Up to 64 MiB without a newline (the old server kept it all, and echoed it back); the recorder hangs up
    // after 257 bytes, which ends the writing.
    let writer = {
        let (mut w, chunk) = (s.try_clone().unwrap(), chunk.clone());
        std::thread::spawn(move || {
            let mut sent = 0usize;
            while sent < 64 << 20 && w.write_all(&chunk).is_ok() {
                sent += chunk.len();
            }
            sent
        })
    };
    assert_eq!(reply(&s), "error: request too long (at most 256 bytes)\n");
    let sent = writer.join().unwrap();
    assert!(sent < 64 << 20, "the recorder read all {sent} bytes");
    let grew = rss().saturating_sub(before);
    assert!(grew < 4 << 20, "the process grew by {grew} bytes");
    // A line of exactly 256 bytes is still read (and refused for what it says).
    let long = format!("{}\n", "y".repeat(256));
    assert_eq!(
        ask(long.as_bytes()),
        format!("error: unknown request '{}...': use start, stop, dump or status\n", "y".repeat(32))
    );
    stop(rec);
}

#[test]
fn bad_requests_get_a_short_error_and_nothing_else() {
    let _g = serial();
    let dir = private_dir();
    let (rec, _h) = start(dir.path(), |_| {});
    assert_eq!(ask(b"\xff\xfestatus\n"), "error: the request is not UTF-8 text\n");
    let hostile = format!("pause\x1b[31m{}\n", "x".repeat(100));
    assert_eq!(
        ask(hostile.as_bytes()),
        format!("error: unknown request 'pause?[31m{}...': use start, stop, dump or status\n", "x".repeat(22))
    );
    // A client that closes its side after the request, without a newline, is answered.
    let s = connect();
    (&s).write_all(b"status").unwrap();
    s.shutdown(std::net::Shutdown::Write).unwrap();
    assert_eq!(reply(&s), format!("ok: recording on to {}\n", rec.path().display()));
    // One that closes without a word gets nothing, and breaks nothing.
    drop(connect());
    assert_eq!(send(me(), Request::Stop).unwrap(), format!("ok: recording off to {}", rec.path().display()));
    stop(rec);
}

/// What `start` refused, and what `send` says, with `CUTR_CONTROL_DIR` at `dir`.
fn refusals(dir: &Path, out: &Path) -> (String, String) {
    set_env(control::DIR_VAR, Some(dir));
    let (rec, _h) = start(out, |_| {});
    assert!(!control::active(), "no control without a safe directory");
    // The notes of the process so far, this recording's last.
    let note = stop(rec).loss.notes.pop().unwrap_or_default();
    let sent = send(me(), Request::Status).unwrap_err();
    (note, sent)
}

fn refused(dir: &Path, problem: &str) -> String {
    format!(
        "the control socket directory {} {problem}; fix or remove it, or set CUTR_CONTROL_DIR to a directory of \
         your own with mode 0700",
        dir.display()
    )
}

#[test]
fn an_unsafe_socket_directory_is_refused_with_the_way_out() {
    let _g = serial();
    let base = tempfile::tempdir().unwrap();
    let b = base.path();
    let open = b.join("open");
    std::fs::create_dir(&open).unwrap();
    std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o755)).unwrap();
    let good = b.join("good");
    std::fs::create_dir(&good).unwrap();
    std::fs::set_permissions(&good, std::fs::Permissions::from_mode(0o700)).unwrap();
    let link = b.join("link");
    std::os::unix::fs::symlink(&good, &link).unwrap();
    let file = b.join("file");
    std::fs::write(&file, "").unwrap();
    let mut cases = vec![
        (open, "has mode 0755, not 0700"),
        (link, "is a symbolic link, not a directory"),
        (file, "is not a directory"),
    ];
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    let theirs = b.join("theirs");
    if root {
        std::fs::create_dir(&theirs).unwrap();
        std::fs::set_permissions(&theirs, std::fs::Permissions::from_mode(0o700)).unwrap();
        std::os::unix::fs::chown(&theirs, Some(65534), Some(65534)).unwrap();
        cases.push((theirs, "is owned by uid 65534, not by this user (uid 0)"));
    } else {
        println!("skipped: a directory of another user needs root to make (chown)");
    }
    for (dir, problem) in cases {
        let want = refused(&dir, problem);
        let (note, sent) = refusals(&dir, b);
        assert_eq!(note, format!("no control of this recording: {want}"));
        assert_eq!(sent, want);
    }
    // A missing one is made private; `$XDG_RUNTIME_DIR/cutr` without CUTR_CONTROL_DIR; the socket owner-only.
    let xdg = b.join("xdg");
    std::fs::create_dir(&xdg).unwrap();
    for (var, dir, made) in
        [(control::DIR_VAR, b.join("new"), b.join("new")), ("XDG_RUNTIME_DIR", xdg.clone(), xdg.join("cutr"))]
    {
        set_env(control::DIR_VAR, None);
        set_env(var, Some(&dir));
        let (rec, _h) = start(b, |_| {});
        let sock = socket_path(me());
        assert_eq!(sock, made.join(format!("{}.sock", me())));
        assert_eq!(std::fs::metadata(&made).unwrap().permissions().mode() & 0o7777, 0o700);
        assert_eq!(std::fs::symlink_metadata(&sock).unwrap().permissions().mode() & 0o777, 0o600);
        assert_eq!(send(me(), Request::Status).unwrap(), format!("ok: recording on to {}", rec.path().display()));
        stop(rec);
        assert!(!sock.exists(), "the socket goes with the recording");
        set_env(var, None);
    }
}

/// Switches this thread alone (a raw syscall, not glibc's process-wide setuid) to effective uid 65534, keeping
/// root's file access (fsuid 0): what `SO_PEERCRED` reports is then another user.
fn become_other_user_on_this_thread() {
    // SAFETY: raw credential syscalls on the calling thread only; the thread ends after its test step.
    unsafe {
        assert_eq!(libc::syscall(libc::SYS_setresuid, 0, 65534, 0), 0);
        libc::syscall(libc::SYS_setfsuid, 0);
    }
}

#[test]
fn both_ends_refuse_a_peer_of_another_user() {
    let _g = serial();
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        println!("skipped: acting as another user needs root");
        return;
    }
    let dir = private_dir();
    // A socket planted by another user, answering a forged "ok": `send` will not talk to it.
    let fake_pid = 4_000_000_001u32;
    let path = socket_path(fake_pid);
    let planted = std::os::unix::net::UnixListener::bind(&path).unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let server = std::thread::spawn(move || {
        become_other_user_on_this_thread();
        // A client sees the credentials of whoever called listen() last: listen again, as uid 65534.
        // SAFETY: listen on a socket this thread owns.
        assert_eq!(unsafe { libc::listen(std::os::fd::AsRawFd::as_raw_fd(&planted), 4) }, 0);
        tx.send(()).unwrap();
        let (mut s, _) = planted.accept().unwrap();
        let _ = s.write_all(b"ok: recording on to /forged\n");
    });
    rx.recv().unwrap();
    assert_eq!(
        send(fake_pid, Request::Stop).unwrap_err(),
        format!("{} is served by uid 65534, not by this user (uid 0): not talking to it", path.display())
    );
    // Should `send` not have connected, this frees the planted server's accept, so the test fails, not hangs.
    let _ = UnixStream::connect(&path);
    server.join().unwrap();
    std::fs::remove_file(&path).unwrap();
    // The recorder answers nobody but its own user: a request from uid 65534 is closed unanswered.
    let (rec, _h) = start(dir.path(), |_| {});
    let other = std::thread::spawn(|| {
        become_other_user_on_this_thread();
        let mut s = connect();
        // The recorder may have hung up already (then the write fails with EPIPE): either way, no reply.
        let _ = s.write_all(b"stop\n");
        reply(&s)
    });
    assert_eq!(other.join().unwrap(), "");
    assert!(rec.is_recording(), "the other user's stop was not carried out");
    stop(rec);
}

static APP_USR1: AtomicUsize = AtomicUsize::new(0);
static APP_USR2: AtomicUsize = AtomicUsize::new(0);

extern "C" fn app_usr1(_: libc::c_int) {
    APP_USR1.fetch_add(1, Ordering::SeqCst);
}

extern "C" fn app_usr2(sig: libc::c_int, info: *mut libc::siginfo_t, _: *mut libc::c_void) {
    // SAFETY: the kernel's siginfo for this delivery.
    if sig == libc::SIGUSR2 && unsafe { (*info).si_signo } == libc::SIGUSR2 {
        APP_USR2.fetch_add(1, Ordering::SeqCst);
    }
}

/// The disposition of `sig` now.
fn disposition(sig: libc::c_int) -> libc::sigaction {
    // SAFETY: querying with a valid sigaction struct.
    unsafe {
        let mut a: libc::sigaction = std::mem::zeroed();
        assert_eq!(libc::sigaction(sig, std::ptr::null(), &mut a), 0);
        a
    }
}

fn set_disposition(sig: libc::c_int, a: &libc::sigaction) {
    // SAFETY: setting a valid sigaction struct.
    assert_eq!(unsafe { libc::sigaction(sig, a, std::ptr::null_mut()) }, 0);
}

fn raise(sig: libc::c_int) {
    // SAFETY: signalling this thread; every handler involved only writes to a pipe or counts.
    assert_eq!(unsafe { libc::raise(sig) }, 0);
}

#[test]
fn the_applications_own_handlers_still_run_and_come_back() {
    let _g = serial();
    let dir = private_dir();
    let original = [disposition(libc::SIGUSR1), disposition(libc::SIGUSR2)];
    // SAFETY: valid sigaction structs for two handlers that only count.
    let (plain, with_info) = unsafe {
        let mut p: libc::sigaction = std::mem::zeroed();
        p.sa_sigaction = app_usr1 as *const () as usize;
        let mut i: libc::sigaction = std::mem::zeroed();
        i.sa_sigaction = app_usr2 as *const () as usize;
        i.sa_flags = libc::SA_SIGINFO;
        (p, i)
    };
    set_disposition(libc::SIGUSR1, &plain);
    set_disposition(libc::SIGUSR2, &with_info);
    let (u1, u2) = (APP_USR1.load(Ordering::SeqCst), APP_USR2.load(Ordering::SeqCst));
    let (rec, _h) = start(dir.path(), |_| {});
    raise(libc::SIGUSR1);
    assert_eq!(APP_USR1.load(Ordering::SeqCst), u1 + 1, "the application's SIGUSR1 handler ran");
    wait_for(&rec, false);
    raise(libc::SIGUSR2);
    assert_eq!(APP_USR2.load(Ordering::SeqCst), u2 + 1, "the application's SIGUSR2 handler ran, with its siginfo");
    stop(rec);
    let (now1, now2) = (disposition(libc::SIGUSR1), disposition(libc::SIGUSR2));
    assert_eq!((now1.sa_sigaction, now1.sa_flags & libc::SA_SIGINFO), (app_usr1 as *const () as usize, 0));
    assert_eq!(
        (now2.sa_sigaction, now2.sa_flags & libc::SA_SIGINFO),
        (app_usr2 as *const () as usize, libc::SA_SIGINFO)
    );
    raise(libc::SIGUSR1);
    assert_eq!(APP_USR1.load(Ordering::SeqCst), u1 + 2);
    set_disposition(libc::SIGUSR1, &original[0]);
    set_disposition(libc::SIGUSR2, &original[1]);
}

#[test]
fn the_first_sigusr1_turns_a_paused_recording_on() {
    let _g = serial();
    let dir = private_dir();
    assert_eq!(disposition(libc::SIGUSR1).sa_sigaction, libc::SIG_DFL, "nothing else handles SIGUSR1 here");
    let (rec, h) = start(dir.path(), |c| c.start_paused = true);
    assert!(!rec.is_recording() && h.enabled().is_empty());
    raise(libc::SIGUSR1);
    wait_for(&rec, true);
    assert!(h.enabled().contains(&kinds::CONCURRENT_KERNEL));
    // Paused through the API: SIGUSR1 turns it on again, whatever the control thread last did.
    rec.pause().unwrap();
    raise(libc::SIGUSR1);
    wait_for(&rec, true);
    raise(libc::SIGUSR1);
    wait_for(&rec, false);
    stop(rec);
    assert_eq!(disposition(libc::SIGUSR1).sa_sigaction, libc::SIG_DFL, "SIG_DFL is back");
}

fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd").unwrap().count()
}

#[test]
fn a_recording_with_control_leaves_no_descriptor_behind() {
    let _g = serial();
    let dir = private_dir();
    // What the recorder sets up once per process (the exit hook's pipes) is there before the count.
    let (rec, _h) = start(dir.path(), |c| c.control = false);
    stop(rec);
    let before = open_fds();
    for _ in 0..3 {
        let (rec, _h) = start(dir.path(), |_| {});
        assert!(open_fds() > before);
        assert!(send(me(), Request::Status).unwrap().starts_with("ok: recording on"));
        raise(libc::SIGUSR2);
        stop(rec);
        // The request's thread closes its end just after the reply: give it a moment.
        let t = Instant::now();
        while open_fds() != before && t.elapsed() < Duration::from_secs(2) {
            std::thread::sleep(Duration::from_millis(5));
        }
        assert_eq!(open_fds(), before, "every descriptor of the recording and its control is closed");
    }
}

#[test]
fn ctl_prints_its_usage_on_help_and_talks_to_a_recording() {
    let _g = serial();
    let dir = private_dir();
    let ctl = |args: &[&str]| {
        std::process::Command::new(env!("CARGO_BIN_EXE_cupti-record")).arg("ctl").args(args).output().unwrap()
    };
    for args in [vec!["--help"], vec!["-h"], vec!["12", "start", "--help"]] {
        let o = ctl(&args);
        assert_eq!(o.status.code(), Some(0), "{args:?}");
        let out = String::from_utf8(o.stdout).unwrap();
        assert!(out.starts_with("usage: cupti-record ctl PID start|stop|dump|status\n\nSends one request"), "{out}");
        assert!(out.contains("CUTR_CONTROL_DIR"), "{out}");
        assert!(o.stderr.is_empty());
    }
    let (rec, _h) = start(dir.path(), |_| {});
    let o = ctl(&[&me().to_string(), "stop"]);
    assert_eq!(o.status.code(), Some(0));
    assert_eq!(String::from_utf8(o.stdout).unwrap(), format!("ok: recording off to {}\n", rec.path().display()));
    assert!(!rec.is_recording());
    stop(rec);
}
