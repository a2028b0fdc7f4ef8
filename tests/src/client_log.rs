//! The record of which outside clients the tests ran, and which tests were skipped and why. `cargo test -q` hides
//! what a passing test prints, so a test that could not run its client would pass unseen: tools/test.sh names a
//! file in `CUTR_CLIENT_LOG`, every test appends one line to it, and the run's last lines summarise the file.

use std::io::Write;
use std::path::Path;

/// The variable naming the file the lines are appended to; unset (a plain `cargo test`), nothing is recorded.
pub const LOG_VAR: &str = "CUTR_CLIENT_LOG";

/// Records that the current test ran `client` (e.g. "Perfetto trace processor").
pub fn ran(client: &str) {
    record("ran", client, "");
}

/// Records that the current test could not run `client`, and why; says so on standard error too.
pub fn skipped(client: &str, why: &str) {
    eprintln!("SKIPPED: {client}: {why}");
    record("skipped", client, why);
}

/// Appends the line to the file `CUTR_CLIENT_LOG` names, if set.
fn record(outcome: &str, client: &str, why: &str) {
    if let Some(path) = std::env::var_os(LOG_VAR) {
        append(Path::new(&path), outcome, client, why);
    }
}

/// One line, `ran|skipped <TAB> client <TAB> test <TAB> why`; the test is named by its thread, as libtest names it.
fn append(path: &Path, outcome: &str, client: &str, why: &str) {
    let thread = std::thread::current();
    let test = thread.name().unwrap_or("(unnamed test)");
    let line = format!("{outcome}\t{client}\t{test}\t{}\n", why.replace(['\t', '\n'], " "));
    // One write of one line to a file opened for appending: the lines of tests running in parallel stay whole.
    let written =
        std::fs::OpenOptions::new().create(true).append(true).open(path).and_then(|mut f| f.write_all(line.as_bytes()));
    if let Err(e) = written {
        eprintln!("warning: cannot append to {LOG_VAR}={}: {e}", path.display());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_line_per_call_names_the_outcome_client_test_and_reason() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("clients.log");
        // The path given directly (setting CUTR_CLIENT_LOG would race the other tests), from a thread named
        // as libtest names a test's.
        let lines = std::thread::Builder::new()
            .name("some_test".into())
            .spawn({
                let log = log.clone();
                move || {
                    append(&log, "ran", "DuckDB", "");
                    append(&log, "skipped", "Spark", "no Java\tat all\n");
                    std::fs::read_to_string(&log).unwrap()
                }
            })
            .unwrap()
            .join()
            .unwrap();
        assert_eq!(lines, "ran\tDuckDB\tsome_test\t\nskipped\tSpark\tsome_test\tno Java at all \n");
    }
}
