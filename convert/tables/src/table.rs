//! One table: named, typed columns read from row indices, written to Parquet a batch at a time.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use arrow_array::{ArrayRef, Float64Array, Int64Array, RecordBatch, StringArray, UInt32Array, UInt64Array};
use arrow_schema::{DataType, Field, Schema};
use parquet::arrow::ArrowWriter;
use parquet::basic::{Compression, ZstdLevel};
use parquet::file::properties::WriterProperties;

/// Rows built and written at once.
const BATCH_ROWS: usize = 65_536;
/// Rows per Parquet row group: large enough for scans, small enough to skip by statistics.
const ROW_GROUP_ROWS: usize = 1 << 20;

/// Why a table could not be written.
#[derive(Debug, thiserror::Error)]
pub enum TablesError {
    #[error("{0}: {1}")]
    Io(String, std::io::Error),
    #[error("{0}: {1}")]
    Parquet(String, String),
    /// The output directory (named first) cannot take an export, and why.
    #[error("{0}: {1}")]
    Target(String, String),
    /// The recordings could not be streamed.
    #[error(transparent)]
    Load(#[from] cutr_model::LoadError),
}

/// A column: its name and how to read row `i`.
pub(crate) enum Column<'t> {
    U64(&'static str, Box<dyn Fn(usize) -> u64 + 't>),
    I64(&'static str, Box<dyn Fn(usize) -> i64 + 't>),
    U32(&'static str, Box<dyn Fn(usize) -> u32 + 't>),
    F64(&'static str, Box<dyn Fn(usize) -> f64 + 't>),
    /// Nullable text.
    Str(&'static str, Box<dyn Fn(usize) -> Option<&'t str> + 't>),
    /// Nullable integer.
    OptU64(&'static str, Box<dyn Fn(usize) -> Option<u64> + 't>),
}

impl Column<'_> {
    fn field(&self) -> Field {
        match self {
            Column::U64(n, _) => Field::new(*n, DataType::UInt64, false),
            Column::I64(n, _) => Field::new(*n, DataType::Int64, false),
            Column::U32(n, _) => Field::new(*n, DataType::UInt32, false),
            Column::F64(n, _) => Field::new(*n, DataType::Float64, false),
            Column::Str(n, _) => Field::new(*n, DataType::Utf8, true),
            Column::OptU64(n, _) => Field::new(*n, DataType::UInt64, true),
        }
    }

    pub(crate) fn name(&self) -> &'static str {
        match self {
            Column::U64(n, _)
            | Column::I64(n, _)
            | Column::U32(n, _)
            | Column::F64(n, _)
            | Column::Str(n, _)
            | Column::OptU64(n, _) => n,
        }
    }

    fn array(&self, rows: &[usize]) -> ArrayRef {
        let rows = rows.iter().copied();
        match self {
            Column::U64(_, f) => Arc::new(rows.map(f).collect::<UInt64Array>()),
            Column::I64(_, f) => Arc::new(rows.map(f).collect::<Int64Array>()),
            Column::U32(_, f) => Arc::new(rows.map(f).collect::<UInt32Array>()),
            Column::F64(_, f) => Arc::new(rows.map(f).collect::<Float64Array>()),
            Column::Str(_, f) => Arc::new(rows.map(f).collect::<StringArray>()),
            Column::OptU64(_, f) => Arc::new(rows.map(f).collect::<UInt64Array>()),
        }
    }
}

/// The Arrow schema of `columns`.
pub(crate) fn schema(columns: &[Column<'_>]) -> Arc<Schema> {
    Arc::new(Schema::new(columns.iter().map(Column::field).collect::<Vec<_>>()))
}

/// Which rows of a table a file gets.
pub(crate) enum Rows<'a> {
    /// `0..n`.
    All(usize),
    /// These (one file's, for a partition).
    Only(&'a [usize]),
}

impl Rows<'_> {
    fn len(&self) -> usize {
        match self {
            Rows::All(n) => *n,
            Rows::Only(v) => v.len(),
        }
    }

    fn batch(&self, start: usize, end: usize) -> Vec<usize> {
        match self {
            Rows::All(_) => (start..end).collect(),
            Rows::Only(v) => v[start..end].to_vec(),
        }
    }
}

/// Writes `rows` of `columns` to `path` (its directory created); returns the file's size.
pub(crate) fn write(path: &Path, rows: Rows<'_>, columns: &[&Column<'_>]) -> Result<u64, TablesError> {
    let mut file = TableFile::create(path, columns)?;
    file.append(rows, columns)?;
    file.close()
}

/// One table's Parquet file, open while its rows come (a stream's windows): a row group is written each 1M rows,
/// so what it holds is at most one row group's encoded columns.
pub(crate) struct TableFile {
    path: PathBuf,
    schema: Arc<Schema>,
    writer: ArrowWriter<File>,
    pub(crate) rows: u64,
}

impl TableFile {
    /// Creates `path` (its directory made) for rows of `columns`.
    pub(crate) fn create(path: &Path, columns: &[&Column<'_>]) -> Result<TableFile, TablesError> {
        let what = path.display().to_string();
        let pq = |e: parquet::errors::ParquetError| TablesError::Parquet(what.clone(), e.to_string());
        // Inside `hold`: a signal's cleanup, removing the export's temporary directory, never races a table's
        // creation (`create_dir_all` would make the removed directory again).
        let file = cutr_cleanup::hold(|| {
            if let Some(dir) = path.parent() {
                std::fs::create_dir_all(dir).map_err(|e| TablesError::Io(dir.display().to_string(), e))?;
            }
            File::create(path).map_err(|e| TablesError::Io(what.clone(), e))
        })?;
        let props = WriterProperties::builder()
            .set_compression(Compression::ZSTD(ZstdLevel::try_new(3).map_err(pq)?))
            .set_max_row_group_row_count(Some(ROW_GROUP_ROWS))
            .set_created_by(format!("cutr {}", env!("CARGO_PKG_VERSION")))
            .build();
        let schema = Arc::new(Schema::new(columns.iter().map(|c| c.field()).collect::<Vec<_>>()));
        let writer = ArrowWriter::try_new(file, schema.clone(), Some(props)).map_err(pq)?;
        Ok(TableFile { path: path.to_path_buf(), schema, writer, rows: 0 })
    }

    fn error(&self, e: impl ToString) -> TablesError {
        TablesError::Parquet(self.path.display().to_string(), e.to_string())
    }

    /// Appends `rows` of `columns` (the columns it was created for), a batch of 65,536 at a time.
    pub(crate) fn append(&mut self, rows: Rows<'_>, columns: &[&Column<'_>]) -> Result<(), TablesError> {
        let (mut start, n) = (0, rows.len());
        while start < n {
            let end = (start + BATCH_ROWS).min(n);
            let batch_rows = rows.batch(start, end);
            let arrays: Vec<ArrayRef> = columns.iter().map(|c| c.array(&batch_rows)).collect();
            let batch = RecordBatch::try_new(self.schema.clone(), arrays).map_err(|e| self.error(e))?;
            self.writer.write(&batch).map_err(|e| self.error(e))?;
            start = end;
        }
        self.rows += n as u64;
        Ok(())
    }

    /// Ends the file; returns its size.
    pub(crate) fn close(self) -> Result<u64, TablesError> {
        let what = self.path.display().to_string();
        self.writer.close().map_err(|e| TablesError::Parquet(what.clone(), e.to_string()))?;
        std::fs::metadata(&self.path).map(|m| m.len()).map_err(|e| TablesError::Io(what, e))
    }
}
