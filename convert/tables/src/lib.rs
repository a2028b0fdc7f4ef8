//! The trace model as plain columnar tables for SQL engines (`cupti-convert export --parquet DIR`): one Parquet
//! file per record kind, with the joins the model already made written out as columns (each GPU operation's
//! launching API call, its innermost NVTX range, its PyTorch op id, where a CUDA graph's node was captured),
//! timestamps in ns on the trace's one clock, and the file, host, pid and rank of every row so that many
//! recordings land in one dataset. DuckDB, Spark or any Parquet reader takes them as they are; `docs/TABLES.md`
//! lists every column.
//!
//! The directory is written whole beside its target and renamed into place (`target`): never half an export.
//! Written a batch of rows at a time (65,536), zstd-compressed, one row group per 1M rows. [`write_parquet`]
//! writes a loaded trace; [`write_parquet_streamed`] streams over the recordings' chunks ([`cutr_model::stream`])
//! with every table's files open across the windows, so that memory is bounded by a window and the stream's
//! horizon, not the recording (`whole` and `streamed`; the columns of both are `tables`).
//!
//! ```
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let trace = cutr_model::load(&["../../fixtures/cuda_workload.cutr".into()], &Default::default())?;
//! let dir = tempfile::tempdir()?;
//! let summary = cutr_tables::write_parquet(&trace, dir.path())?;
//! assert_eq!(summary.rows("kernels"), Some(trace.kernels.len() as u64));
//! # Ok(())
//! # }
//! ```

mod graph_tables;
mod queries;
mod streamed;
mod table;
mod tables;
mod target;
mod um_tables;
mod whole;

use std::path::Path;

pub use queries::NamedQuery;
pub use streamed::{StreamedExport, write_parquet_streamed};
pub use table::TablesError;
pub use tables::TABLES;
pub use whole::schemas;

/// What was written: rows per table, in [`TABLES`] order.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TablesSummary {
    pub tables: Vec<(&'static str, u64)>,
    pub bytes: u64,
}

impl TablesSummary {
    /// Rows of one table.
    pub fn rows(&self, table: &str) -> Option<u64> {
        self.tables.iter().find(|t| t.0 == table).map(|t| t.1)
    }
}

/// Writes every table of `trace` as the directory `dir` (`<table>.parquet`, or Hive partitions for several
/// recordings): made beside it and renamed into place once complete, replacing an earlier export there as a
/// whole; a directory holding anything else is refused (see [`check_output_dir`]). On an error, or SIGINT/SIGTERM
/// with `cutr_cleanup::exit_on_signals`, nothing is left but what was there before.
pub fn write_parquet(trace: &cutr_model::Trace, dir: &Path) -> Result<TablesSummary, TablesError> {
    let staging = target::Staging::new(&target::check(dir)?)?;
    let summary = whole::write_all(trace, staging.path())?;
    staging.commit()?;
    Ok(summary)
}

/// Whether `dir` can take an export: missing, empty, or an earlier export (only tables' files and directories);
/// a symbolic link is followed. For commands to refuse before the work.
pub fn check_output_dir(dir: &Path) -> Result<(), TablesError> {
    target::check(dir).map(drop)
}
