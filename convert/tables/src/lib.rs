//! The trace model as plain columnar tables for SQL engines (`cupti-convert export --parquet DIR`): one Parquet
//! file per record kind, with the joins the model already made written out as columns (each GPU operation's
//! launching API call, its innermost NVTX range, its PyTorch op id, where a CUDA graph's node was captured),
//! timestamps in ns on the trace's one clock, and the file, host, pid and rank of every row so that many
//! recordings land in one dataset. DuckDB, Spark or any Parquet reader takes them as they are; `docs/TABLES.md`
//! lists every column.
//!
//! Written a batch of rows at a time (65,536), zstd-compressed, one row group per 1M rows: memory stays bounded
//! by one batch per table, however large the trace.
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
mod table;
mod tables;
mod um_tables;

use std::path::Path;

pub use queries::NamedQuery;
pub use table::TablesError;
pub use tables::{TABLES, schemas};

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

/// Writes every table of `trace` into `dir` (created if missing) as `<table>.parquet`.
pub fn write_parquet(trace: &cutr_model::Trace, dir: &Path) -> Result<TablesSummary, TablesError> {
    std::fs::create_dir_all(dir).map_err(|e| TablesError::Io(dir.display().to_string(), e))?;
    tables::write_all(trace, dir)
}
