//! `cupti-convert`: reads `.cutr` recordings and converts them or reports on them.
//!
//! Exit codes: 0 success (warnings, e.g. a recovered file or failed joins, go to stderr); 1 an input could not
//! be read or an output not written (standard output closed included); 2 wrong arguments; 3 `diff` found a
//! regression; 4 `diff` compared recordings of different programs; 130 and 143 interrupted by
//! SIGINT and SIGTERM (temporary outputs removed, children ended: `cutr-cleanup`).

mod cli;
mod convert;
mod diff_command;
mod docs;
mod memory;
mod progress;
mod reports;
mod source_diff;
mod split;
mod stdout;
mod streaming;
mod warnings;
mod workers;

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Result;
use clap::Parser;
use cutr_model::timing;

use cli::{Cli, Command};

// The system allocator, measured against mimalloc (docs/BENCHMARKS.md): since chunks are decoded a window at a
// time into pre-sized rows, mimalloc's arenas and per-thread heaps only added memory the kernel must zero
// (10M records: 0.95 GB vs 0.75 GB peak, 2.8 s vs 2.15 s; a small recording: 13.3 ms vs 12.1 ms).

fn run(cli: Cli) -> Result<ExitCode> {
    // Before any work: a report or trace for a closed standard output would be lost.
    if cli.writes_to_stdout() {
        stdout::check_open()?;
    }
    match cli.command {
        None => convert::run(cli.convert).map(|()| ExitCode::SUCCESS),
        Some(Command::Stats { files, json, by_rank: true, step, stream, no_stream, .. }) => {
            reports::ranks(&files, step.as_deref(), json, streaming::Choice::of(stream, no_stream))
        }
        Some(Command::Stats {
            files,
            json,
            csv,
            top,
            report,
            wide,
            width,
            nvtx_across_threads,
            nvtx_names,
            symbols,
            start,
            end,
            nvtx,
            stream,
            no_stream,
            ..
        }) => {
            let sections = if report.is_empty() {
                cutr_analyses::stats::Section::ALL.to_vec()
            } else {
                report.iter().filter_map(|r| cutr_analyses::stats::Section::parse(r)).collect()
            };
            // People read the text: its tables stop at the biggest rows; scripts get every row unless they ask.
            let top = top.unwrap_or(if json || csv { 0 } else { cli::DEFAULT_TOP });
            let opts = cutr_analyses::stats::StatsOptions {
                top: (top > 0).then_some(top),
                sections,
                nvtx_across_threads,
                symbol_dirs: symbols,
                nvtx_names: if nvtx_names == "each" {
                    cutr_analyses::stats::NvtxNames::Each
                } else {
                    cutr_analyses::stats::NvtxNames::Fold
                },
            };
            let width = width.map(usize::from).or_else(stdout::width);
            let out = reports::StatsOutput { json, csv, text: cutr_analyses::stats::TextOptions { wide, width } };
            let choice = streaming::Choice::of(stream, no_stream);
            reports::stats(&files, out, &reports::StatsWindow { start, end, nvtx, choice }, &opts)
        }
        Some(Command::Diff {
            files,
            base,
            new,
            threshold,
            min_delta,
            instance_floor,
            min_share,
            fail_on,
            normalize_templates,
            json,
            markdown,
            all,
            by_rank,
            stream,
            no_stream,
        }) => {
            let opts = cutr_analyses::diff::DiffOptions {
                threshold_pct: threshold,
                min_share_pct: min_share,
                normalize_templates,
                ..Default::default()
            };
            let limits = diff_command::DiffLimits { min_delta, instance_floor, fail_on };
            let choice = streaming::Choice::of(stream, no_stream);
            diff_command::diff(
                diff_command::DiffArgs { files, base, new, opts, json, markdown, all, by_rank, choice },
                limits,
            )
        }
        Some(Command::Info { files, json }) => reports::info(&files, json),
        Some(Command::Analyze { files, step, json, markdown, gap_threshold, start, end, stream, no_stream }) => {
            let format = match (json, markdown) {
                (true, _) => reports::AnalyzeFormat::Json,
                (_, true) => reports::AnalyzeFormat::Markdown,
                _ => reports::AnalyzeFormat::Text,
            };
            let choice = streaming::Choice::of(stream, no_stream);
            reports::analyze(&files, step, &gap_threshold, (start.as_deref(), end.as_deref(), choice), format)
        }
        Some(Command::Source {
            files,
            diff,
            base,
            new,
            threshold,
            markdown,
            kernel,
            top,
            json,
            csv,
            pprof,
            no_sass,
        }) => {
            if diff || !base.is_empty() {
                let format = source_diff::Format::of(json, csv, markdown, pprof.is_some())?;
                return source_diff::run(&source_diff::Sides { files, base, new }, kernel, threshold, top, format);
            }
            if markdown {
                cli::usage!("--markdown is for --diff (source's own report: text, --json or --csv)");
            }
            let opts = cutr_analyses::source::SourceOptions { kernel, top, sass: !no_sass, nvdisasm: None };
            reports::source(&files, &opts, json, csv, pprof.as_deref())
        }
        Some(Command::Export { files, parquet, stream, no_stream }) => {
            reports::export(&files, &parquet, streaming::Choice::of(stream, no_stream))
        }
        Some(Command::Sql { args, parquet, query, step, top, json, csv }) => {
            let (statement, files) = match query {
                Some(q) => (q.sql(&step, top), args),
                None if args.is_empty() => cli::usage!("sql: give a statement or --query NAME"),
                None => (args[0].clone(), args[1..].to_vec()),
            };
            let files: Vec<PathBuf> = files.into_iter().map(PathBuf::from).collect();
            match (&parquet, files.is_empty()) {
                (Some(_), false) => cli::usage!("sql: give recordings or --parquet DIR, not both"),
                (None, true) => cli::usage!("sql: give recordings to query, or --parquet DIR"),
                _ => {}
            }
            let format = match (json, csv) {
                (true, _) => reports::SqlFormat::Json,
                (_, true) => reports::SqlFormat::Csv,
                _ => reports::SqlFormat::Text,
            };
            reports::sql(&statement, &files, parquet.as_deref(), format)
        }
        Some(Command::Docs { what }) => {
            docs::run(&what)?;
            Ok(ExitCode::SUCCESS)
        }
        Some(Command::Generate {
            output,
            records,
            seed,
            cupti_api,
            buffer_bytes,
            launches_only,
            rank,
            unified_memory,
        }) => {
            let opts = cutr_synth::SynthOptions {
                records,
                seed,
                cupti_api_version: cupti_api,
                buffer_bytes,
                launches_only,
                rank,
                unified_memory,
                ..Default::default()
            };
            reports::generate(&output, opts)
        }
    }
}

/// At most [`MALLOC_ARENAS`] malloc arenas, unless `MALLOC_ARENA_MAX` says otherwise. glibc gives each thread
/// that meets contention an arena of its own, up to 8 per core, and an arena keeps what its thread freed: the
/// decode workers' windows then stay in RSS many times over. Measured on 16 cores at 100M records
/// (`measurements/long_runs/device-malloc-arenas-100m.jsonl`): peak RSS of `stats --stream` 1.15 -> 0.87 GB,
/// `diff --stream` 1.63 -> 1.48 GB, `analyze --stream` 1.58 -> 1.33 GB, wall time within 4%.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn cap_malloc_arenas() {
    if std::env::var_os("MALLOC_ARENA_MAX").is_none() {
        // SAFETY: mallopt sets an allocator parameter; called before any thread of ours is started.
        unsafe { libc::mallopt(libc::M_ARENA_MAX, MALLOC_ARENAS) };
    }
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn cap_malloc_arenas() {}

/// The malloc arenas a command uses at most ([`cap_malloc_arenas`]).
#[cfg(all(target_os = "linux", target_env = "gnu"))]
const MALLOC_ARENAS: libc::c_int = 4;

fn main() -> ExitCode {
    // A pipe closed early (`cupti-convert info --json F | head`) ends the command quietly by SIGPIPE, as for any
    // Unix tool, instead of failing a print; a standard output closed from the start is an error (`stdout`).
    // SAFETY: restoring the default action of a signal; no handler is involved.
    unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) };
    cap_malloc_arenas();
    // Ctrl-C or a SIGTERM removes the temporary files of the outputs being written and ends our children
    // (`cutr-cleanup`), then exits with 130 or 143.
    if let Err(e) = cutr_cleanup::exit_on_signals("cupti-convert") {
        eprintln!(
            "cupti-convert: warning: cannot watch for SIGINT/SIGTERM ({e}): an interrupted command may leave temporary files"
        );
    }
    timing::init();
    memory::start_small();
    let cli = timing::timed("parse arguments", Cli::parse);
    let result = workers::run_on_workers(workers::workers_for(&cli.inputs()), || run(cli));
    timing::print_spans();
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("cupti-convert: error: {e:#}");
            ExitCode::from(if e.is::<cli::UsageError>() { 2 } else { 1 })
        }
    }
}
