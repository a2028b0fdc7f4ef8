//! What `cupti-convert docs` gives packagers, used as a shell and `man` use it: the bash completion script sourced
//! into bash and driven as readline drives it (`COMP_WORDS`/`COMP_CWORD`, then the function `complete -F` names),
//! and the man pages, every page the main page names written by `docs manpage --dir`.

mod common;

use std::path::Path;
use std::process::Command;

use common::{names, path_str, run, text};

/// What bash offers for `words` (the last one being completed), from the script `docs completions bash` prints.
fn bash_offers(script: &Path, words: &[&str]) -> Vec<String> {
    let quoted: Vec<String> = words.iter().map(|w| format!("'{w}'")).collect();
    let cword = words.len() - 1;
    let prev = if cword > 0 { words[cword - 1] } else { "" };
    // The function's arguments are what bash passes: the command, the word being completed, the word before it.
    let driver = format!(
        "source '{}'; COMP_WORDS=({}); COMP_CWORD={cword}; _cupti__convert cupti-convert '{}' '{prev}'; \
         printf '%s\\n' \"${{COMPREPLY[@]}}\"",
        script.display(),
        quoted.join(" "),
        words[cword],
    );
    let o = Command::new("bash").args(["--norc", "-c", &driver]).output().expect("bash runs");
    assert!(o.status.success(), "{}", text(&o.stderr));
    text(&o.stdout).lines().filter(|l| !l.is_empty()).map(String::from).collect()
}

/// `cupti-convert stats --<TAB>` offers stats' own options (it offered nothing: clap_complete 4.6.11 spelt the
/// subcommands' case arms unlike the state its loop computes for a program whose name has a hyphen), a nested
/// command's values complete, and the top level still offers the converter's options.
#[test]
fn bash_completes_the_options_of_each_subcommand() {
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("cupti-convert.bash");
    let o = run(&["docs", "completions", "bash"]);
    assert_eq!(o.status.code(), Some(0));
    std::fs::write(&script, &o.stdout).unwrap();

    let stats = bash_offers(&script, &["cupti-convert", "stats", "--"]);
    for option in ["--by-rank", "--step", "--nvtx-across-threads", "--report", "--json", "--csv", "--top"] {
        assert!(stats.contains(&option.to_string()), "{option} not in {stats:?}");
    }
    assert!(!stats.contains(&"--perfetto".to_string()), "the top level's options offered for stats: {stats:?}");
    assert_eq!(bash_offers(&script, &["cupti-convert", "stats", "--by-"]), ["--by-rank"]);
    assert_eq!(bash_offers(&script, &["cupti-convert", "diff", "--fail-"]), ["--fail-on"]);
    assert_eq!(
        bash_offers(&script, &["cupti-convert", "docs", "completions", ""]),
        ["-h", "--help", "bash", "elvish", "fish", "powershell", "zsh"]
    );
    assert_eq!(bash_offers(&script, &["cupti-convert", "--perf"]), ["--perfetto"]);
}

/// `docs manpage --dir` writes the main page and a page for every `cupti-convert-COMMAND(1)` the main page names
/// (it named eight, `help` among them, and none existed); `docs manpage` prints the same main page.
#[test]
fn every_man_page_the_main_page_names_is_written() {
    let dir = tempfile::tempdir().unwrap();
    let man = dir.path().join("man1");
    let o = run(&["docs", "manpage", "--dir", path_str(&man)]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));

    let main = std::fs::read_to_string(man.join("cupti-convert.1")).unwrap();
    assert_eq!(text(&run(&["docs", "manpage"]).stdout), main);
    let named: Vec<String> = main
        .lines()
        .filter_map(|l| l.strip_prefix(r"cupti\-convert\-")?.strip_suffix("(1)"))
        .map(|command| format!("cupti-convert-{command}.1"))
        .collect();
    assert_eq!(
        named,
        ["info", "export", "sql", "stats", "analyze", "diff", "source", "generate"]
            .map(|c| format!("cupti-convert-{c}.1"))
    );
    let mut expected = named.clone();
    expected.push("cupti-convert.1".into());
    expected.sort();
    assert_eq!(names(&man), expected);
    let stats = std::fs::read_to_string(man.join("cupti-convert-stats.1")).unwrap();
    let version = env!("CARGO_PKG_VERSION");
    assert!(stats.contains(&format!(".TH cupti-convert-stats 1  \"cupti-convert {version}\"")), "{stats}");
    assert!(stats.contains(r"\fBcupti\-convert stats\fR"), "{stats}");
    assert!(stats.contains(r"\fB\-\-by\-rank\fR"), "{stats}");
}

/// A directory that cannot be made is one line and status 1, not a panic.
#[test]
fn a_man_directory_that_cannot_be_made_is_one_line() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("file");
    std::fs::write(&file, "").unwrap();
    let o = run(&["docs", "manpage", "--dir", path_str(&file.join("man1"))]);
    assert_eq!(o.status.code(), Some(1));
    let err = text(&o.stderr);
    assert!(err.starts_with("cupti-convert: error: cannot make "), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
}
