//! `cupti-convert`: reads `.cutr` recordings and reports on or converts them.
//!
//! Exit codes: 0 success (warnings, e.g. a recovered file, go to stderr); 1 an input could not be read or an
//! output not written; 2 wrong arguments.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context, Result};
use clap::{Parser, Subcommand};
use cutr_format::Reader;
use cutr_format::synth::{SynthOptions, write_file};

#[derive(Parser, Debug)]
#[command(name = "cupti-convert", version, about = "Analyse and convert .cutr CUDA activity recordings")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// What a recording holds: versions, devices, time span, chunks, records per kind, sizes, losses.
    Info {
        file: PathBuf,
        /// Print the report as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Write a synthetic recording (a launch-bound training loop with realistic CUPTI records).
    Generate {
        #[arg(short, long)]
        output: PathBuf,
        /// About this many records.
        #[arg(long, default_value_t = 1_000_000)]
        records: u64,
        #[arg(long, default_value_t = 1)]
        seed: u64,
        /// CUPTI API version whose record layouts to write (130001 = CUDA 13.0, 28 = CUDA 12.9).
        #[arg(long, default_value_t = 130001)]
        cupti_api: u32,
        /// Bytes per activity buffer (one chunk each).
        #[arg(long, default_value_t = 4 << 20)]
        buffer_bytes: usize,
        /// Kernel launches only (external correlation + runtime API + kernel record per launch).
        #[arg(long)]
        launches_only: bool,
    },
}

fn warn(file: &Path, msg: &str) {
    eprintln!("cupti-convert: warning: {}: {msg}", file.display());
}

fn open(file: &Path) -> Result<Reader> {
    Reader::open(file).with_context(|| file.display().to_string())
}

fn run(cli: Cli) -> Result<()> {
    match cli.command {
        Command::Info { file, json } => {
            let reader = open(&file)?;
            let report = cutr_convert::info::report(&reader);
            for w in &report.warnings {
                warn(&file, w);
            }
            if json {
                println!("{}", serde_json::to_string_pretty(&report)?);
            } else {
                print!("{}", cutr_convert::info::render_text(&report));
            }
        }
        Command::Generate { output, records, seed, cupti_api, buffer_bytes, launches_only } => {
            let opts = SynthOptions { records, seed, cupti_api_version: cupti_api, buffer_bytes, launches_only };
            let truth = write_file(&output, opts).with_context(|| output.display().to_string())?;
            eprintln!(
                "cupti-convert: wrote {} ({} records in {} buffers, {} steps)",
                output.display(),
                truth.records,
                truth.buffers,
                truth.steps
            );
        }
    }
    Ok(())
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("cupti-convert: error: {e:#}");
            ExitCode::from(1)
        }
    }
}
