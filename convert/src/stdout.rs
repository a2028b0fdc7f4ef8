//! Standard output: whether the command was started with it closed, and printing that fails with an error.
//!
//! Rust's runtime opens `/dev/null` on a closed standard output before `main` (so that no file opened later takes
//! its number), which makes every write there succeed: `cupti-convert X --perfetto -o - >&-` would say "wrote -"
//! and exit 0 with the trace lost. So the descriptor is looked at before the runtime starts, from the ELF
//! `.init_array` (which the C library runs before `main`), and a command that writes to standard output fails
//! when it was closed.
//!
//! A pipe closed early (`stats | head -1`) ends the process by SIGPIPE, quietly and with the conventional status
//! (141 in a shell), as for `cat` and `grep`: `main` restores SIGPIPE's default action.

use std::io::Write as _;
use std::sync::atomic::{AtomicBool, Ordering};

use anyhow::Result;

static CLOSED_AT_START: AtomicBool = AtomicBool::new(false);

/// Notes whether descriptor 1 is open; run by the C library before Rust's runtime replaces a closed one.
#[cfg(target_os = "linux")]
extern "C" fn note_closed_stdout() {
    // SAFETY: F_GETFD on a descriptor number only reads its flags; -1 (EBADF) means it is not open.
    if unsafe { libc::fcntl(libc::STDOUT_FILENO, libc::F_GETFD) } == -1 {
        CLOSED_AT_START.store(true, Ordering::Relaxed);
    }
}

#[cfg(target_os = "linux")]
#[used]
// SAFETY: a function pointer with the C calling convention and no arguments, as `.init_array` entries are.
#[unsafe(link_section = ".init_array")]
static NOTE_CLOSED_STDOUT: extern "C" fn() = note_closed_stdout;

/// An error unless standard output was open when the command started.
pub fn check_open() -> Result<()> {
    if CLOSED_AT_START.load(Ordering::Relaxed) {
        anyhow::bail!(
            "standard output is closed: nothing could be written there (redirect it to a file, or to /dev/null to \
             discard it)"
        );
    }
    Ok(())
}

/// Writes `text` to standard output, and says so when it cannot (a full disk, a closed output).
pub fn print(text: &str) -> Result<()> {
    check_open()?;
    let mut out = std::io::stdout().lock();
    out.write_all(text.as_bytes())
        .and_then(|()| out.flush())
        .map_err(|e| anyhow::anyhow!("cannot write to standard output: {e}"))
}

/// `value` as pretty JSON and a newline, written as it is made: a report of millions of rows (a day's steps)
/// is never held as text.
pub fn json<T: serde::Serialize + ?Sized>(value: &T) -> Result<()> {
    check_open()?;
    let mut out = std::io::BufWriter::with_capacity(1 << 16, std::io::stdout().lock());
    serde_json::to_writer_pretty(&mut out, value)
        .map_err(std::io::Error::from)
        .and_then(|()| out.write_all(b"\n"))
        .and_then(|()| out.flush())
        .map_err(|e| anyhow::anyhow!("cannot write to standard output: {e}"))
}

/// [`print()`] with a newline.
pub fn println(text: &str) -> Result<()> {
    print(&format!("{text}\n"))
}

/// The width `stats` text fits: the terminal's when standard output is one (else `COLUMNS` there too), `COLUMNS`
/// when set for a pipe or file, else none (scripts reading the text get it as wide as it comes).
pub fn width() -> Option<usize> {
    use std::io::IsTerminal as _;
    let columns = || std::env::var("COLUMNS").ok().and_then(|c| c.trim().parse::<usize>().ok()).filter(|&c| c > 0);
    if std::io::stdout().is_terminal() {
        terminal_size::terminal_size_of(std::io::stdout())
            .map(|(terminal_size::Width(w), _)| usize::from(w))
            .filter(|&w| w > 0)
            .or_else(columns)
    } else {
        columns()
    }
}
