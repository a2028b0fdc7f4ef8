//! A query's result as plain values, and its three renderings: an aligned text table, CSV, JSON.

use std::fmt::Write as _;

use duckdb::arrow::array::{Array, AsArray};
use duckdb::arrow::datatypes::{
    DataType, Float32Type, Float64Type, Int8Type, Int16Type, Int32Type, Int64Type, SchemaRef, UInt8Type, UInt16Type,
    UInt32Type, UInt64Type,
};
use duckdb::arrow::record_batch::RecordBatch;
use duckdb::arrow::util::display::{ArrayFormatter, FormatOptions};

/// One cell.
#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    Null,
    Bool(bool),
    /// Every integer type, DuckDB's HUGEINT sums included.
    Int(i128),
    Float(f64),
    Text(String),
}

/// Rows with their columns' names and DuckDB's types (as Arrow names them).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ResultTable {
    pub columns: Vec<(String, String)>,
    pub rows: Vec<Vec<Value>>,
}

impl ResultTable {
    pub(crate) fn from_batches(schema: &SchemaRef, batches: &[RecordBatch]) -> ResultTable {
        let columns = schema.fields().iter().map(|f| (f.name().clone(), f.data_type().to_string())).collect();
        let mut rows = Vec::new();
        for b in batches {
            let cols: Vec<Vec<Value>> = b.columns().iter().map(|c| values(c.as_ref())).collect();
            for i in 0..b.num_rows() {
                rows.push(cols.iter().map(|c| c[i].clone()).collect());
            }
        }
        ResultTable { columns, rows }
    }

    /// Column names over aligned rows (numbers to the right, floats with 3 decimals), and the row count.
    pub fn to_text(&self) -> String {
        let cell = |v: &Value| match v {
            Value::Null => String::new(),
            Value::Bool(b) => b.to_string(),
            Value::Int(i) => i.to_string(),
            Value::Float(f) => format!("{f:.3}"),
            Value::Text(s) => s.clone(),
        };
        let cells: Vec<Vec<String>> = self.rows.iter().map(|r| r.iter().map(cell).collect()).collect();
        let mut widths: Vec<usize> = self.columns.iter().map(|c| c.0.chars().count()).collect();
        for r in &cells {
            for (w, c) in widths.iter_mut().zip(r) {
                *w = (*w).max(c.chars().count());
            }
        }
        let numeric: Vec<bool> = (0..self.columns.len())
            .map(|j| self.rows.iter().all(|r| matches!(r[j], Value::Int(_) | Value::Float(_) | Value::Null)))
            .collect();
        let line = |items: &[String]| -> String {
            let parts: Vec<String> = items
                .iter()
                .enumerate()
                .map(|(j, s)| {
                    let pad = widths[j].saturating_sub(s.chars().count());
                    if numeric[j] { format!("{}{s}", " ".repeat(pad)) } else { format!("{s}{}", " ".repeat(pad)) }
                })
                .collect();
            parts.join("  ").trim_end().to_string()
        };
        let mut out = String::new();
        let names: Vec<String> = self.columns.iter().map(|c| c.0.clone()).collect();
        let _ = writeln!(out, "{}", line(&names));
        let _ = writeln!(out, "{}", widths.iter().map(|w| "-".repeat(*w)).collect::<Vec<_>>().join("  "));
        for r in &cells {
            let _ = writeln!(out, "{}", line(r));
        }
        let _ = writeln!(out, "({} row{})", self.rows.len(), if self.rows.len() == 1 { "" } else { "s" });
        out
    }

    /// A header line, then one line per row (RFC 4180 quoting); floats in full.
    pub fn to_csv(&self) -> String {
        let field = |s: &str| {
            if s.contains([',', '"', '\n', '\r']) { format!("\"{}\"", s.replace('"', "\"\"")) } else { s.to_string() }
        };
        let cell = |v: &Value| match v {
            Value::Null => String::new(),
            Value::Bool(b) => b.to_string(),
            Value::Int(i) => i.to_string(),
            Value::Float(f) => f.to_string(),
            Value::Text(s) => field(s),
        };
        let mut out = String::new();
        let _ = writeln!(out, "{}", self.columns.iter().map(|c| field(&c.0)).collect::<Vec<_>>().join(","));
        for r in &self.rows {
            let _ = writeln!(out, "{}", r.iter().map(cell).collect::<Vec<_>>().join(","));
        }
        out
    }

    /// An array of objects, one per row, keyed by column name; numbers as JSON numbers (an integer beyond 64 bits
    /// as a string), NULL as null.
    pub fn to_json(&self) -> serde_json::Value {
        let cell = |v: &Value| match v {
            Value::Null => serde_json::Value::Null,
            Value::Bool(b) => serde_json::Value::Bool(*b),
            Value::Int(i) => u64::try_from(*i)
                .map(serde_json::Value::from)
                .or_else(|_| i64::try_from(*i).map(serde_json::Value::from))
                .unwrap_or_else(|_| serde_json::Value::String(i.to_string())),
            Value::Float(f) => {
                serde_json::Number::from_f64(*f).map_or(serde_json::Value::Null, serde_json::Value::Number)
            }
            Value::Text(s) => serde_json::Value::String(s.clone()),
        };
        let rows = self
            .rows
            .iter()
            .map(|r| {
                let obj: serde_json::Map<String, serde_json::Value> =
                    self.columns.iter().zip(r).map(|(c, v)| (c.0.clone(), cell(v))).collect();
                serde_json::Value::Object(obj)
            })
            .collect();
        serde_json::Value::Array(rows)
    }
}

/// The cells of one column.
fn values(a: &dyn Array) -> Vec<Value> {
    macro_rules! prim {
        ($t:ty, $conv:expr) => {{
            let p = a.as_primitive::<$t>();
            (0..a.len()).map(|i| if p.is_null(i) { Value::Null } else { $conv(p.value(i)) }).collect()
        }};
    }
    match a.data_type() {
        DataType::Int8 => prim!(Int8Type, |v| Value::Int(i128::from(v))),
        DataType::Int16 => prim!(Int16Type, |v| Value::Int(i128::from(v))),
        DataType::Int32 => prim!(Int32Type, |v| Value::Int(i128::from(v))),
        DataType::Int64 => prim!(Int64Type, |v| Value::Int(i128::from(v))),
        DataType::UInt8 => prim!(UInt8Type, |v| Value::Int(i128::from(v))),
        DataType::UInt16 => prim!(UInt16Type, |v| Value::Int(i128::from(v))),
        DataType::UInt32 => prim!(UInt32Type, |v| Value::Int(i128::from(v))),
        DataType::UInt64 => prim!(UInt64Type, |v| Value::Int(i128::from(v))),
        DataType::Float32 => prim!(Float32Type, |v: f32| Value::Float(f64::from(v))),
        DataType::Float64 => prim!(Float64Type, Value::Float),
        DataType::Decimal128(_, scale) => {
            let p = a.as_primitive::<duckdb::arrow::datatypes::Decimal128Type>();
            let scale = *scale;
            (0..a.len())
                .map(|i| match (p.is_null(i), scale) {
                    (true, _) => Value::Null,
                    (false, 0) => Value::Int(p.value(i)),
                    (false, s) => Value::Float(p.value(i) as f64 / 10f64.powi(i32::from(s))),
                })
                .collect()
        }
        DataType::Boolean => {
            let b = a.as_boolean();
            (0..a.len()).map(|i| if b.is_null(i) { Value::Null } else { Value::Bool(b.value(i)) }).collect()
        }
        _ => match ArrayFormatter::try_new(a, &FormatOptions::default()) {
            Ok(f) => (0..a.len())
                .map(|i| if a.is_null(i) { Value::Null } else { Value::Text(f.value(i).to_string()) })
                .collect(),
            // Not silently empty: the cell says which type could not be shown.
            Err(_) => vec![Value::Text(format!("<{}>", a.data_type())); a.len()],
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table() -> ResultTable {
        ResultTable {
            columns: vec![
                ("name".into(), "Utf8".into()),
                ("n".into(), "Int64".into()),
                ("ms".into(), "Float64".into()),
            ],
            rows: vec![
                vec![Value::Text("gemm, fused".into()), Value::Int(12), Value::Float(1.5)],
                vec![Value::Text("relu".into()), Value::Int(3), Value::Null],
            ],
        }
    }

    #[test]
    fn text_aligns_numbers_right() {
        assert_eq!(
            table().to_text(),
            "name          n     ms\n-----------  --  -----\ngemm, fused  12  1.500\nrelu          3\n(2 rows)\n"
        );
    }

    #[test]
    fn csv_quotes_and_json_keeps_numbers() {
        assert_eq!(table().to_csv(), "name,n,ms\n\"gemm, fused\",12,1.5\nrelu,3,\n");
        assert_eq!(
            table().to_json(),
            serde_json::json!([{"name": "gemm, fused", "n": 12, "ms": 1.5}, {"name": "relu", "n": 3, "ms": null}])
        );
    }
}
