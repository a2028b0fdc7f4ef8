//! The report commands: `info`, `stats`, `analyze` and `source` over the analyses, `export` and `sql`, and
//! `generate` (`diff` is `diff_command`).

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context, Result};
use cutr_analyses::{info, stats};
use cutr_format::Reader;
use cutr_model::{Filter, LoadOptions, Process, Trace, load_prefetched, load_readers, open_inputs, timing};
use cutr_synth::{SynthOptions, write_file};

use crate::cli::{parse_time, usage};
use crate::stdout;
use crate::streaming::Choice;
use crate::warnings::{input_warnings, warn};

fn open(file: &Path) -> Result<Reader> {
    timing::timed_with(|| format!("open {}", file.display()), || Reader::open(file))
        .with_context(|| file.display().to_string())
}

/// Opens recordings.
pub(crate) fn open_all(files: &[PathBuf]) -> Result<Vec<Reader>> {
    files.iter().map(|f| open(f)).collect()
}

/// Every warning about `trace`'s inputs, on stderr.
pub(crate) fn warn_all(trace: &Trace) {
    for (file, w) in input_warnings(trace, &Filter::default()) {
        warn(file, &w);
    }
}

/// How `stats` prints.
pub struct StatsOutput {
    pub json: bool,
    pub csv: bool,
    pub text: stats::TextOptions,
}

/// The part of the recordings `stats` reports on: `--start`/`--end` and `--nvtx`.
pub struct StatsWindow {
    pub start: Option<String>,
    pub end: Option<String>,
    pub nvtx: Option<String>,
    /// `--stream`, `--no-stream` or neither.
    pub choice: crate::streaming::Choice,
}

pub fn stats(
    files: &[PathBuf],
    out: StatsOutput,
    window: &StatsWindow,
    opts: &stats::StatsOptions,
) -> Result<ExitCode> {
    use crate::convert::{extents_text, filter, record_extents, window_text};
    if window.nvtx.as_deref() == Some("") {
        usage!("--nvtx needs the name of NVTX ranges (e.g. --nvtx step)");
    }
    let (start, end) = (window.start.as_deref(), window.end.as_deref());
    let timed_window = start.is_some() || end.is_some();
    // Several files are one merged trace (one run of a multi-process job); a time window reads only its chunks.
    // Inputs that may stream are opened without decoding ahead: a stream reads its chunks in its own order.
    let may_stream = window.choice.may_stream(files, window.nvtx.is_some());
    let (readers, prefetched) = open_inputs(files, !timed_window && !may_stream).map_err(|e| anyhow::anyhow!("{e}"))?;
    let filter = filter(start, end, &[], &readers)?;
    let extents = timed_window.then(|| record_extents(&readers));
    if may_stream && window.choice.streams(&readers, &filter) {
        let window = extents.map(|extents| crate::streaming::Window { start, end, extents });
        return crate::streaming::stats(files, &readers, out, opts, &filter, window);
    }
    let mut trace =
        load_prefetched(files, &readers, &LoadOptions { filter }, prefetched).map_err(|e| anyhow::anyhow!("{e}"))?;
    drop(readers);
    warn_all(&trace);
    let mut said = Vec::new();
    if let Some(extents) = &extents {
        if trace.records() == 0 {
            eprintln!(
                "cupti-convert: warning: the window {} keeps no record: the records lie at {} (seconds after the \
                 first record)",
                window_text(start, end),
                extents_text(extents)
            );
        }
        said.push(format!("records overlapping {} (from the first record)", window_text(start, end)));
    }
    if let Some(name) = &window.nvtx {
        let ranges = stats::keep_gpu_work_in_ranges(&mut trace, name);
        if ranges == 0 {
            eprintln!(
                "cupti-convert: warning: --nvtx {name}: no closed NVTX range is named {name}: no GPU work is kept"
            );
        }
        said.push(format!(
            "GPU work launched inside the {ranges} NVTX ranges named {name} (--nvtx; API calls and NVTX ranges not \
             narrowed)"
        ));
    }
    let mut s = stats::compute(&trace, opts);
    s.window = (!said.is_empty()).then(|| said.join("; "));
    timing::mark("stats");
    // The process ends after printing: freeing the trace's rows first is work nobody waits for.
    std::mem::forget(trace);
    if out.json {
        stdout::json(&s)?;
    } else if out.csv {
        stdout::print(&stats::render_csv(&s))?;
    } else {
        stdout::print(&stats::render_text(&s, out.text))?;
    }
    Ok(ExitCode::SUCCESS)
}

/// `export --parquet DIR`: the tables of the merged trace of `files`, loaded whole or streamed (`choice`).
pub fn export(files: &[PathBuf], dir: &Path, choice: crate::streaming::Choice) -> Result<ExitCode> {
    // Before the work: a file, or a directory of other files (never replaced), is refused.
    match cutr_tables::check_output_dir(dir) {
        Err(cutr_tables::TablesError::Target(_, why)) => {
            anyhow::bail!("cannot write tables to {}: {why}", dir.display())
        }
        other => other?,
    }
    let readers = open_all(files)?;
    if choice.may_stream(files, false) && choice.streams(&readers, &Filter::default()) {
        return crate::streaming::export(files, &readers, dir);
    }
    let trace = load_readers(files, &readers, &LoadOptions::default()).map_err(|e| anyhow::anyhow!("{e}"))?;
    drop(readers);
    warn_all(&trace);
    let s = cutr_tables::write_parquet(&trace, dir).with_context(|| format!("cannot write {}", dir.display()))?;
    timing::mark("tables");
    print_export_summary(&s, dir, None);
    std::mem::forget(trace);
    Ok(ExitCode::SUCCESS)
}

/// The export's line on stderr: tables, rows, bytes, and (streamed) the GPU operations whose launch fell out of
/// the horizon.
pub(crate) fn print_export_summary(s: &cutr_tables::TablesSummary, dir: &Path, out_of_horizon: Option<u64>) {
    let rows: u64 = s.tables.iter().map(|t| t.1).sum();
    eprintln!(
        "cupti-convert: wrote {} tables to {} ({} rows, {} bytes): {}",
        s.tables.len(),
        dir.display(),
        rows,
        s.bytes,
        s.tables.iter().map(|(n, r)| format!("{n} {r}")).collect::<Vec<_>>().join(", ")
    );
    if let Some(n) = out_of_horizon {
        eprintln!("cupti-convert: streamed: {n} GPU operations past the launch horizon (joins null)");
    }
}

/// How `sql` prints its rows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SqlFormat {
    Text,
    Json,
    Csv,
}

/// `sql`: one statement over the tables of `dir`, or of `files` exported to a temporary dataset first, run by
/// the companion program `cupti-convert-sql` (which links DuckDB; this program does not). Its exit status is ours.
pub fn sql(statement: &str, files: &[PathBuf], dir: Option<&Path>, format: SqlFormat) -> Result<ExitCode> {
    let program = sql_program()?;
    // The temporary dataset, removed on return, on an error, and on SIGINT/SIGTERM (registered as it is made).
    let temp;
    let dir = match dir {
        Some(d) => d.to_path_buf(),
        None => {
            temp = cutr_cleanup::hold(|| {
                let t = tempfile::Builder::new().prefix("cutr-sql").tempdir()?;
                let registered = cutr_cleanup::remove_on_interrupt(t.path());
                std::io::Result::Ok((t, registered))
            })
            .context("cannot make a temporary directory")?;
            let tables = temp.0.path().join("tables");
            let readers = open_all(files)?;
            let trace = load_readers(files, &readers, &LoadOptions::default()).map_err(|e| anyhow::anyhow!("{e}"))?;
            drop(readers);
            warn_all(&trace);
            cutr_tables::write_parquet(&trace, &tables)
                .with_context(|| format!("cannot write tables to {}", tables.display()))?;
            timing::mark("tables");
            drop(trace);
            tables
        }
    };
    let mut command = std::process::Command::new(&program);
    command.arg("--parquet").arg(&dir);
    match format {
        SqlFormat::Json => {
            command.arg("--json");
        }
        SqlFormat::Csv => {
            command.arg("--csv");
        }
        SqlFormat::Text => {}
    }
    // After `--`: a statement that starts with `-` is not an option.
    command.arg("--").arg(statement);
    // Through the registry: an interrupted `sql` ends its companion too.
    let companion = cutr_cleanup::spawn(&mut command).with_context(|| format!("cannot run {}", program.display()))?;
    let status = companion.wait().with_context(|| format!("cannot wait for {}", program.display()))?;
    timing::mark("query");
    Ok(match status.code() {
        Some(0) => ExitCode::SUCCESS,
        Some(c) => ExitCode::from(u8::try_from(c).unwrap_or(1)),
        None => anyhow::bail!("{} was killed ({status})", program.display()),
    })
}

/// `cupti-convert-sql`: `$CUTR_SQL_PROGRAM`, else beside this program, else on PATH.
fn sql_program() -> Result<PathBuf> {
    const NAME: &str = "cupti-convert-sql";
    if let Some(p) = std::env::var_os("CUTR_SQL_PROGRAM") {
        return Ok(PathBuf::from(p));
    }
    let beside = std::env::current_exe().ok().and_then(|e| e.parent().map(|d| d.join(NAME)));
    let on_path = std::env::var_os("PATH").into_iter().flat_map(|p| std::env::split_paths(&p).collect::<Vec<_>>());
    beside.into_iter().chain(on_path.map(|d| d.join(NAME))).find(|p| p.is_file()).ok_or_else(|| {
        anyhow::anyhow!(
            "sql needs the companion program {NAME} (it links DuckDB), found neither beside this program nor on \
             PATH: `tools/build.sh` builds it with the other programs (one release build, DuckDB's library fetched \
             first), `tools/install.sh` installs them all"
        )
    })
}

/// `stats --by-rank`: the ranks side by side, loaded or streamed (`choice`).
pub fn ranks(files: &[PathBuf], step: Option<&str>, json: bool, choice: Choice) -> Result<ExitCode> {
    let readers = open_all(files)?;
    let r = if choice.streams(&readers, &Filter::default()) {
        crate::streaming::ranks(files, &readers, step)?
    } else {
        let trace = load_readers(files, &readers, &LoadOptions::default()).map_err(|e| anyhow::anyhow!("{e}"))?;
        drop(readers);
        warn_all(&trace);
        let r = cutr_analyses::ranks::by_rank(&trace, step);
        std::mem::forget(trace);
        r
    };
    if json {
        stdout::json(&r)?;
    } else {
        stdout::print(&cutr_analyses::ranks::render_text(&r))?;
    }
    Ok(ExitCode::SUCCESS)
}

/// How `analyze` prints.
pub enum AnalyzeFormat {
    Text,
    Json,
    Markdown,
}

/// `analyze`: the files are one job's ranks (or processes), analysed together; `window`: `--start`/`--end` and
/// whether to stream.
pub fn analyze(
    files: &[PathBuf],
    step: Option<String>,
    gap_threshold: &str,
    window: (Option<&str>, Option<&str>, crate::streaming::Choice),
    format: AnalyzeFormat,
) -> Result<ExitCode> {
    use crate::convert::{extents_text, filter, record_extents, window_text};
    use cutr_analyses::analyze;
    use cutr_model::timebase::first_record;
    if step.as_deref() == Some("") {
        usage!("--step needs the start of the step ranges' names (e.g. --step \"step \")");
    }
    let short_gap_ns = parse_time(gap_threshold)?;
    if !gap_threshold.trim().ends_with('s') {
        usage!("--gap-threshold needs a unit (e.g. 30us, 500ns): '{gap_threshold}'");
    }
    let (start, end, choice) = window;
    let timed_window = start.is_some() || end.is_some();
    let may_stream = choice.may_stream(files, false);
    // A window reads only its chunks, and a stream reads them in its own order: nothing is decoded ahead.
    let (readers, prefetched) = open_inputs(files, !timed_window && !may_stream).map_err(|e| anyhow::anyhow!("{e}"))?;
    let filter = filter(start, end, &[], &readers)?;
    let origin = first_record(&readers);
    let extents = timed_window.then(|| record_extents(&readers));
    let opts = analyze::AnalyzeOptions { step_prefix: step.clone(), short_gap_ns };
    let (mut a, records) = if may_stream && choice.streams(&readers, &filter) {
        let streamed = analyze::stream::analyze_streamed(files, &readers, &opts, &Default::default(), &filter)
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        drop(readers);
        warn_all(&streamed.trace);
        for w in &streamed.warnings {
            eprintln!("cupti-convert: warning: {w}");
        }
        let records = streamed.end.span.1 > 0;
        (streamed.analysis, records)
    } else {
        let mut trace = load_prefetched(files, &readers, &LoadOptions { filter }, prefetched)
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        // The stall rule reads each kernel's hottest line and stall reason, which the PC samples give.
        for (path, r) in files.iter().zip(&readers) {
            for w in cutr_analyses::source::annotate(&mut trace, &[r]) {
                crate::warnings::warn(path, &w);
            }
        }
        drop(readers);
        warn_all(&trace);
        let a = analyze::analyze(&trace, &opts);
        let records = trace.records() > 0;
        std::mem::forget(trace);
        (a, records)
    };
    if let Some(extents) = &extents
        && !records
    {
        eprintln!(
            "cupti-convert: warning: the window {} keeps no record: the records lie at {} (seconds after the first \
             record)",
            window_text(start, end),
            extents_text(extents)
        );
    }
    if timed_window {
        // Times print from the recording's first record, where the window counts from, not the window's.
        a.first_record_ns = origin;
        a.launch.first_record_ns = origin;
        a.window = Some(format!(
            "records overlapping {} (from the first record): the span of each GPU is that of its kept records",
            window_text(start, end)
        ));
    }
    timing::mark("analyze");
    if let Some(p) = &step
        && a.steps.is_empty()
    {
        eprintln!("cupti-convert: warning: --step {p:?}: no closed NVTX range's name starts with it: no steps");
    }
    if a.gpus.is_empty() {
        eprintln!("cupti-convert: warning: the recordings hold no kernel, copy or memset: no GPU to analyse");
    }
    match format {
        AnalyzeFormat::Json => stdout::json(&a)?,
        AnalyzeFormat::Markdown => stdout::print(&analyze::render::render_markdown(&a))?,
        AnalyzeFormat::Text => stdout::print(&analyze::render::render_text(&a))?,
    }
    Ok(ExitCode::SUCCESS)
}

/// One report per file, in order; a file that cannot be read ends the command (after the ones before it).
pub fn info(files: &[PathBuf], json: bool) -> Result<ExitCode> {
    let mut reports = Vec::new();
    for (i, file) in files.iter().enumerate() {
        let reader = open(file)?;
        let report = info::report(&reader);
        for w in &report.warnings {
            warn(file, w);
        }
        if !json {
            if i > 0 {
                stdout::println("")?;
            }
            stdout::print(&info::render_text(&report))?;
        }
        reports.push(report);
    }
    if json {
        match reports.as_slice() {
            [one] => stdout::json(one)?,
            all => stdout::json(all)?,
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// `source`: PC samples by kernel, line and stall reason.
pub fn source(
    files: &[PathBuf],
    opts: &cutr_analyses::source::SourceOptions,
    json: bool,
    csv: bool,
    pprof: Option<&Path>,
) -> Result<ExitCode> {
    use cutr_analyses::source;
    if let Some(out) = pprof {
        crate::convert::check_output_is_not_an_input(out, files)?;
    }
    let readers = open_all(files)?;
    let refs: Vec<&Reader> = readers.iter().collect();
    let r = source::report(&refs, opts);
    warn_source_inputs(files, &readers, &r);
    // `--pprof -` puts the profile on standard output, and nothing else there.
    if pprof != Some(Path::new("-")) {
        if json {
            // Each input's problems and PC-sample losses, as stderr says them, so a script reading the JSON
            // alone knows what the figures leave out.
            let mut v = serde_json::to_value(&r)?;
            v["inputs"] = files
                .iter()
                .zip(&r.inputs)
                .map(|(f, input)| {
                    serde_json::json!({
                        "path": f.display().to_string(),
                        "problems": input.problems.iter().map(ToString::to_string).collect::<Vec<_>>(),
                        "warnings": input.warnings(),
                    })
                })
                .collect();
            stdout::json(&v)?;
        } else if csv {
            stdout::print(&source::render_csv(&r))?;
        } else {
            stdout::print(&source::render_text(&r))?;
        }
    }
    if let Some(path) = pprof {
        // The cubins the report disassembled for its call sites are not disassembled again; --no-sass holds.
        let (bytes, summary, _) = source::pprof_after(&refs, &r, opts);
        let write = || -> std::io::Result<u64> {
            let mut out = cutr_viewer_export::output::Output::create(path, false)?;
            out.write(&bytes)?;
            out.finish()
        };
        write().with_context(|| format!("cannot write {}", path.display()))?;
        if path != Path::new("-") {
            eprintln!(
                "cupti-convert: wrote {} ({} bytes): {} samples at {} PCs in {} functions",
                path.display(),
                bytes.len(),
                summary.samples,
                summary.locations,
                summary.functions
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// Each input's recovery, damaged chunks, recorded losses and PC-sample losses, said as every other command says
/// them, and the report's own warnings (`source`, `source --diff`).
pub(crate) fn warn_source_inputs(files: &[PathBuf], readers: &[Reader], r: &cutr_analyses::source::SourceReport) {
    let mut inputs = Trace::default();
    inputs.processes = files
        .iter()
        .zip(readers)
        .zip(&r.inputs)
        .map(|((f, reader), input)| Process {
            path: f.clone(),
            loss: reader.loss().cloned().unwrap_or_default(),
            problems: input.problems.clone(),
            recovery: reader.recovery().cloned(),
            ..Default::default()
        })
        .collect();
    warn_all(&inputs);
    for (f, input) in files.iter().zip(&r.inputs) {
        for w in input.warnings() {
            warn(f, &w);
        }
        if input.collections == 0 && input.lost_collections == 0 {
            warn(f, "no PC samples: record with `cupti-record --pc-sampling`");
        }
    }
    for w in &r.warnings {
        eprintln!("cupti-convert: warning: {w}");
    }
}

/// Writes a generated recording beside `output` and renames it into place once complete: a billion records take
/// minutes, and an interrupted or failed run leaves nothing half-written (the temporary file is removed).
pub fn generate(output: &Path, opts: SynthOptions) -> Result<ExitCode> {
    let mut tmp = output.as_os_str().to_owned();
    tmp.push(format!(".tmp-{}", std::process::id()));
    let tmp = std::path::PathBuf::from(tmp);
    let registered = cutr_cleanup::remove_on_interrupt(&tmp);
    let truth = match write_file(&tmp, opts) {
        Ok(truth) => truth,
        Err(e) => {
            let _ = std::fs::remove_file(&tmp);
            return Err(anyhow::Error::new(e).context(output.display().to_string()));
        }
    };
    cutr_cleanup::hold(|| std::fs::rename(&tmp, output)).with_context(|| output.display().to_string())?;
    drop(registered);
    eprintln!(
        "cupti-convert: wrote {} ({} records in {} buffers, {} steps)",
        output.display(),
        truth.records,
        truth.buffers,
        truth.steps
    );
    Ok(ExitCode::SUCCESS)
}
