//! `cupti-convert-sql`: runs one SQL statement on an embedded DuckDB over the tables of `cupti-convert export
//! --parquet DIR` and prints the rows. `cupti-convert sql` runs it (after exporting the recordings it was given),
//! so that `cupti-convert` itself does not link DuckDB's library; it can also be run on its own.

use std::io::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context as _, Result};
use clap::Parser;

/// One SQL statement over an exported dataset (a view per table: kernels, api_calls, nvtx_ranges, ...).
#[derive(Parser, Debug)]
#[command(name = "cupti-convert-sql", version)]
struct Args {
    /// The statement.
    statement: String,
    /// The directory `cupti-convert export --parquet` wrote.
    #[arg(long, value_name = "DIR")]
    parquet: PathBuf,
    /// Print the rows as a JSON array of objects.
    #[arg(long, conflicts_with = "csv")]
    json: bool,
    /// Print the rows as CSV.
    #[arg(long)]
    csv: bool,
}

fn main() -> ExitCode {
    let args = Args::parse();
    match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("cupti-convert sql: error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn run(args: &Args) -> Result<()> {
    let session = cutr_sql::SqlSession::open(&args.parquet)?;
    let table = session.query(&args.statement).context("the query failed")?;
    if args.statement.to_ascii_lowercase().contains("rank") {
        note_ranks_by_file_order(&session);
    }
    let out = if args.json {
        format!("{}\n", serde_json::to_string_pretty(&table.to_json())?)
    } else if args.csv {
        table.to_csv()
    } else {
        table.to_text()
    };
    let mut stdout = std::io::stdout().lock();
    match stdout.write_all(out.as_bytes()).and_then(|()| stdout.flush()) {
        // A reader that stopped early (`| head`) is not an error.
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        r => r.context("cannot write the result"),
    }
}

/// Says which ranks are no recorded rank but numbered by file order (`stats --by-rank`'s rule), so that a rank
/// column of a job without `RANK` (two plain processes, a launcher) is not read as the job's own.
fn note_ranks_by_file_order(session: &cutr_sql::SqlSession) {
    let numbered = session.ranks_by_file_order();
    if numbered.is_empty() {
        return;
    }
    let files: Vec<String> = numbered.iter().map(|(file, rank)| format!("{file} (rank {rank})")).collect();
    eprintln!(
        "cupti-convert sql: note: no rank recorded in {}: numbered by file order, as `stats --by-rank` does \
         (processes.rank_source)",
        files.join(", ")
    );
}
