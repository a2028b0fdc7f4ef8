//! One table: named, typed columns read from row indices, written to Parquet a batch at a time.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use arrow_array::{ArrayRef, Float64Array, Int64Array, StringArray, UInt32Array, UInt64Array};
use arrow_schema::{DataType, Field, Schema};
use parquet::arrow::ArrowWriter;
use parquet::arrow::arrow_writer::{ArrowColumnWriter, ArrowRowGroupWriterFactory, compute_leaves};
use parquet::basic::{Compression, ZstdLevel};
use parquet::errors::ParquetError;
use parquet::file::properties::WriterProperties;
use parquet::file::writer::SerializedFileWriter;
use rayon::prelude::*;

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
/// so what it holds is at most one row group's encoded columns. Each column is encoded on its own worker (Parquet's
/// dictionary, statistics and zstd work is most of an export's time, and a table has 10-20 columns), then the
/// columns are written in order as one row group.
pub(crate) struct TableFile {
    path: PathBuf,
    schema: Arc<Schema>,
    file: SerializedFileWriter<File>,
    factory: ArrowRowGroupWriterFactory,
    /// The open row group's column writers (one per column: the columns are flat), and its rows so far.
    group: Vec<ArrowColumnWriter>,
    group_rows: usize,
    groups: usize,
    pub(crate) rows: u64,
}

impl TableFile {
    /// Creates `path` (its directory made) for rows of `columns`.
    pub(crate) fn create(path: &Path, columns: &[&Column<'_>]) -> Result<TableFile, TablesError> {
        let what = path.display().to_string();
        let pq = |e: ParquetError| TablesError::Parquet(what.clone(), e.to_string());
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
        // The Arrow writer sets the file up (the Arrow schema in its metadata); its parts write the row groups.
        let writer = ArrowWriter::try_new(file, schema.clone(), Some(props)).map_err(pq)?;
        let (file, factory) = writer.into_serialized_writer().map_err(pq)?;
        let group = factory.create_column_writers(0).map_err(pq)?;
        if group.len() != columns.len() {
            return Err(TablesError::Parquet(
                what,
                format!("{} column writers for {} columns", group.len(), columns.len()),
            ));
        }
        Ok(TableFile { path: path.to_path_buf(), schema, file, factory, group, group_rows: 0, groups: 0, rows: 0 })
    }

    fn error(&self, e: impl ToString) -> TablesError {
        TablesError::Parquet(self.path.display().to_string(), e.to_string())
    }

    /// Appends `rows` of `columns` (the columns it was created for), a batch of 65,536 at a time, a row group
    /// written each [`ROW_GROUP_ROWS`].
    pub(crate) fn append(&mut self, rows: Rows<'_>, columns: &[&Column<'_>]) -> Result<(), TablesError> {
        let (mut start, n) = (0, rows.len());
        while start < n {
            let end = (start + BATCH_ROWS).min(n).min(start + ROW_GROUP_ROWS - self.group_rows);
            let batch_rows = rows.batch(start, end);
            // The columns read the model through closures that stay on this thread; the encoding does not.
            let arrays: Vec<ArrayRef> = columns.iter().map(|c| c.array(&batch_rows)).collect();
            let fields = self.schema.fields();
            self.group
                .par_iter_mut()
                .zip(arrays.par_iter().zip(fields.par_iter()))
                .try_for_each(|(writer, (array, field))| {
                    compute_leaves(field, array)?.iter().try_for_each(|leaf| writer.write(leaf))
                })
                .map_err(|e| self.error(e))?;
            self.group_rows += end - start;
            if self.group_rows == ROW_GROUP_ROWS {
                self.end_row_group()?;
            }
            start = end;
        }
        self.rows += n as u64;
        Ok(())
    }

    /// Writes the open row group (its columns closed in parallel, appended in order) and opens the next.
    fn end_row_group(&mut self) -> Result<(), TablesError> {
        if self.group_rows == 0 {
            return Ok(());
        }
        let next = self.factory.create_column_writers(self.groups + 1).map_err(|e| self.error(e))?;
        let writers = std::mem::replace(&mut self.group, next);
        let chunks = writers.into_par_iter().map(ArrowColumnWriter::close).collect::<Result<Vec<_>, _>>();
        let chunks = chunks.map_err(|e| self.error(e))?;
        let what = self.path.display().to_string();
        let pq = |e: ParquetError| TablesError::Parquet(what.clone(), e.to_string());
        let mut group = self.file.next_row_group().map_err(pq)?;
        for chunk in chunks {
            chunk.append_to_row_group(&mut group).map_err(pq)?;
        }
        group.close().map_err(pq)?;
        self.groups += 1;
        self.group_rows = 0;
        Ok(())
    }

    /// Ends the file; returns its size.
    pub(crate) fn close(mut self) -> Result<u64, TablesError> {
        self.end_row_group()?;
        let what = self.path.display().to_string();
        self.file.close().map_err(|e| TablesError::Parquet(what.clone(), e.to_string()))?;
        std::fs::metadata(&self.path).map(|m| m.len()).map_err(|e| TablesError::Io(what, e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;

    /// Rows appended in windows that straddle the 1M-row group boundary: each row group is cut at exactly 1M rows
    /// (a batch split across two), and every value comes back in order, its nullable text column too.
    #[test]
    fn row_groups_are_cut_at_a_million_rows_across_appends() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.parquet");
        let offset = std::cell::Cell::new(0usize);
        let value = Column::U64("value", Box::new(|i| (offset.get() + i) as u64 * 3));
        let text = Column::Str("text", Box::new(|i| (offset.get() + i).is_multiple_of(5).then_some("five")));
        let columns = [&value, &text];
        let mut file = TableFile::create(&path, &columns).unwrap();
        for n in [700_000, 700_000, 700_001] {
            file.append(Rows::All(n), &columns).unwrap();
            offset.set(offset.get() + n);
        }
        assert_eq!(file.rows, 2_100_001);
        file.close().unwrap();
        let reader = ParquetRecordBatchReaderBuilder::try_new(File::open(&path).unwrap()).unwrap();
        let groups: Vec<i64> = reader.metadata().row_groups().iter().map(|g| g.num_rows()).collect();
        assert_eq!(groups, [1 << 20, 1 << 20, 2_100_001 - (2 << 20)]);
        let (mut next, mut fives) = (0u64, 0usize);
        for batch in reader.build().unwrap() {
            let batch = batch.unwrap();
            let values = batch.column(0).as_any().downcast_ref::<UInt64Array>().unwrap();
            for v in values.iter() {
                assert_eq!(v, Some(next * 3));
                next += 1;
            }
            fives += batch.column(1).len() - batch.column(1).null_count();
        }
        assert_eq!((next, fives), (2_100_001, 420_001));
    }
}
