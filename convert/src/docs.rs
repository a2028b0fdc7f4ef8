//! The hidden `docs` command: shell completions and man pages for packagers (`tools/install.sh` installs them).

use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use clap::{CommandFactory, Subcommand};

use crate::cli::Cli;

/// What `cupti-convert docs` prints or writes.
#[derive(Subcommand, Debug)]
pub enum DocsCommand {
    /// The shell completion script for SHELL.
    Completions { shell: clap_complete::Shell },
    /// The man page (roff) on stdout; with --dir, every page (cupti-convert.1 and one per command) written there.
    Manpage {
        /// Write cupti-convert.1 and cupti-convert-COMMAND.1 for each command the main page names into DIR
        /// (made if missing).
        #[arg(long, value_name = "DIR")]
        dir: Option<PathBuf>,
    },
}

/// Runs `docs`: a completion script or the main man page on stdout, or every man page into a directory.
pub fn run(what: &DocsCommand) -> Result<()> {
    match what {
        DocsCommand::Completions { shell } => {
            let mut out = std::io::stdout().lock();
            out.write_all(&completions(*shell)).context("cannot write the completions")?;
            out.flush().context("cannot write the completions")
        }
        DocsCommand::Manpage { dir: None } => {
            clap_mangen::Man::new(man_command()).render(&mut std::io::stdout()).context("cannot write the man page")
        }
        DocsCommand::Manpage { dir: Some(dir) } => write_man_pages(dir),
    }
}

const BIN: &str = "cupti-convert";

/// The completion script for `shell`, with bash's case arms spelt as its loop spells them.
pub fn completions(shell: clap_complete::Shell) -> Vec<u8> {
    let mut script = Vec::new();
    clap_complete::generate(shell, &mut Cli::command(), BIN, &mut script);
    if shell != clap_complete::Shell::Bash {
        return script;
    }
    fix_bash_arms(&String::from_utf8_lossy(&script), BIN).into_bytes()
}

/// clap_complete 4.6.11's bash script names a subcommand's state two ways when the program's name has a hyphen
/// (clap-rs/clap#6421, still open): the loop over the words computes `cupti__convert__subcmd__stats`, the arm that
/// should offer `stats`' options reads `cupti__subcmd__convert__subcmd__stats`, so no arm matched and no option
/// of any subcommand ever completed. The arms are respelt the loop's way; once clap_complete is fixed this finds
/// nothing to replace.
fn fix_bash_arms(script: &str, bin: &str) -> String {
    let loop_spelling = format!("{}__subcmd__", bin.replace('-', "__"));
    let arm_spelling = format!("{}__subcmd__", bin.replace('-', "__subcmd__"));
    script.replace(&arm_spelling, &loop_spelling)
}

/// The command the man pages describe: without clap's `help` subcommand, which has no page of its own (the main
/// page's COMMANDS section names a `cupti-convert-COMMAND(1)` page for each command it lists).
fn man_command() -> clap::Command {
    Cli::command().disable_help_subcommand(true)
}

/// Writes the main page and one page per visible command into `dir`, each rendered to memory first so that a
/// failure leaves no half-written page.
fn write_man_pages(dir: &Path) -> Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("cannot make {}", dir.display()))?;
    let mut cmd = man_command();
    cmd.build();
    let pages = std::iter::once(cmd.clone()).chain(cmd.get_subcommands().filter(|c| !c.is_hide_set()).cloned());
    for page in pages {
        // A command has no version of its own: its page's footer names the program's.
        let man = clap_mangen::Man::new(page).source(format!("{BIN} {}", env!("CARGO_PKG_VERSION")));
        let mut roff = Vec::new();
        man.render(&mut roff).context("cannot render a man page")?;
        let path = dir.join(man.get_filename());
        std::fs::write(&path, roff).with_context(|| format!("cannot write {}", path.display()))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::fix_bash_arms;

    #[test]
    fn arms_take_the_loops_spelling() {
        let script = "cmd=\"my__app__subcmd__run\"\n        my__subcmd__app__subcmd__run)\n        my__app)";
        assert_eq!(
            fix_bash_arms(script, "my-app"),
            "cmd=\"my__app__subcmd__run\"\n        my__app__subcmd__run)\n        my__app)"
        );
        assert_eq!(fix_bash_arms(script, "myapp"), script);
    }
}
