//! SQL over a recording's tables (`cupti-convert sql`): an embedded DuckDB (the `duckdb` crate over DuckDB's C
//! library) with one view per table of `cupti-convert export --parquet` (docs/TABLES.md), and the result as an
//! aligned text table, CSV or JSON ([`ResultTable`]). The program `cupti-convert-sql` runs it for `cupti-convert
//! sql`, so that the converter itself never needs DuckDB's 70 MB library.
//!
//! The views read the Parquet files in place, whether one recording's (`DIR/kernels.parquet`) or the Hive
//! partitions of several (`DIR/kernels/host=H/rank=R/part-N.parquet`), whose `host`, `rank` or `pid` come from the
//! path with the types the files would give them (`rank` UBIGINT, `host` VARCHAR even where it reads `007`).

mod result;

use std::path::{Path, PathBuf};

pub use result::{ResultTable, Value};

/// The tables `cupti-convert export` writes, each a view here.
pub use cutr_tables::TABLES;

/// What can go wrong.
#[derive(Debug, thiserror::Error)]
pub enum SqlError {
    #[error("{0}: not a directory")]
    NotADirectory(PathBuf),
    #[error("{0}: no tables of `cupti-convert export --parquet` in it (no kernels.parquet or kernels/)")]
    NoTables(PathBuf),
    /// DuckDB's own message (kept as text: its error's source chain repeats it and adds "Unknown error code").
    #[error("{0}")]
    Duck(String),
}

/// An in-memory DuckDB with a view per table of one dataset.
pub struct SqlSession {
    conn: duckdb::Connection,
    /// The tables the dataset has, in [`TABLES`]' order.
    tables: Vec<&'static str>,
}

impl SqlSession {
    /// A session over the export in `dir`. A table the dataset lacks gets no view (a query naming it fails with
    /// DuckDB's "Table ... does not exist").
    pub fn open(dir: &Path) -> Result<SqlSession, SqlError> {
        if !dir.is_dir() {
            return Err(SqlError::NotADirectory(dir.to_path_buf()));
        }
        let conn = duckdb::Connection::open_in_memory()?;
        let mut tables = Vec::new();
        for t in TABLES {
            let Some(source) = source(dir, t) else { continue };
            conn.execute_batch(&format!("create view {t} as select * from {source};"))?;
            tables.push(t);
        }
        if !tables.contains(&"kernels") {
            return Err(SqlError::NoTables(dir.to_path_buf()));
        }
        Ok(SqlSession { conn, tables })
    }

    /// The tables with a view.
    pub fn tables(&self) -> &[&'static str] {
        &self.tables
    }

    /// The recordings whose rank was numbered by file order (none recorded), as (file, rank), where the dataset
    /// has several recordings: what a statement over `rank` should be told. Empty for one recording (its rank 0
    /// is no guess) and for an export without `processes.rank_source` (made before it).
    pub fn ranks_by_file_order(&self) -> Vec<(String, u64)> {
        let sql = "select file, rank from processes where rank_source = 'file order' \
                   and (select count(*) from processes) > 1 order by rank";
        let Ok(table) = self.query(sql) else { return Vec::new() };
        table
            .to_json()
            .as_array()
            .map(|rows| {
                rows.iter().filter_map(|r| Some((r["file"].as_str()?.to_string(), r["rank"].as_u64()?))).collect()
            })
            .unwrap_or_default()
    }

    /// Runs one statement; its rows with their column names and types.
    pub fn query(&self, sql: &str) -> Result<ResultTable, SqlError> {
        let mut stmt = self.conn.prepare(sql)?;
        let stream = stmt.stream_arrow([])?;
        let schema = stream.get_schema();
        let mut batches = Vec::new();
        for b in stream {
            batches.push(b);
        }
        Ok(ResultTable::from_batches(&schema, &batches))
    }
}

/// The `read_parquet` of a table: one file, or every file under its partition directory. `None` where the dataset
/// has neither.
fn source(dir: &Path, table: &str) -> Option<String> {
    let quote = |p: &Path| p.display().to_string().replace('\'', "''");
    let file = dir.join(format!("{table}.parquet"));
    if file.is_file() {
        return Some(format!("read_parquet('{}')", quote(&file)));
    }
    let part = dir.join(table);
    let keys = partition_keys(&part)?;
    // The partition columns (taken out of the files) with the files' own types: `host=007` stays a name.
    let types: Vec<String> = keys
        .iter()
        .filter_map(|k| match k.as_str() {
            "host" => Some("'host': 'VARCHAR'".to_string()),
            "rank" => Some("'rank': 'UBIGINT'".to_string()),
            "pid" => Some("'pid': 'UINTEGER'".to_string()),
            _ => None,
        })
        .collect();
    Some(format!(
        "read_parquet('{}/**/*.parquet', hive_partitioning = true, union_by_name = true, hive_types = {{{}}})",
        quote(&part),
        types.join(", ")
    ))
}

/// The `key=value` directory names on the way to the first `.parquet` file under `dir`, by key; `None` where
/// there is no such file.
fn partition_keys(dir: &Path) -> Option<Vec<String>> {
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir).ok()?.flatten().map(|e| e.path()).collect();
    entries.sort();
    for p in entries {
        if p.is_dir() {
            if let Some(mut keys) = partition_keys(&p) {
                if let Some((k, _)) = p.file_name().and_then(|n| n.to_str()).and_then(|n| n.split_once('=')) {
                    keys.insert(0, k.to_string());
                }
                return Some(keys);
            }
        } else if p.extension().is_some_and(|x| x == "parquet") {
            return Some(Vec::new());
        }
    }
    None
}

impl From<duckdb::Error> for SqlError {
    fn from(e: duckdb::Error) -> SqlError {
        SqlError::Duck(e.to_string())
    }
}
