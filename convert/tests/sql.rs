//! `cupti-convert sql` as a user runs it: SQL on the embedded DuckDB over the tables of `export`, the three output
//! formats, and clear errors (the named queries against `stats --by-rank`: `sql_ranks.rs`).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn fixture(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures").join(rel)
}

/// `cupti-convert` with its DuckDB companion from this build: `cargo test` builds only the tested package's
/// programs, so tools/test.sh builds `cupti-convert-sql` (crate cutr-sql) first.
fn run(args: &[&str]) -> Output {
    let exe = Path::new(env!("CARGO_BIN_EXE_cupti-convert"));
    let companion = exe.with_file_name("cupti-convert-sql");
    assert!(
        companion.is_file(),
        "{} is missing: build it first (tools/fetch-duckdb.sh && cargo build -p cutr-sql; tools/test.sh does)",
        companion.display()
    );
    Command::new(exe).args(args).env("CUTR_SQL_PROGRAM", &companion).output().expect("cupti-convert runs")
}

fn json_of(o: &Output) -> serde_json::Value {
    let e = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(0), "{e}");
    assert!(!e.contains("panicked"), "{e}");
    serde_json::from_slice(&o.stdout).unwrap_or_else(|err| panic!("{err}: {}", String::from_utf8_lossy(&o.stdout)))
}

fn torchrun() -> Vec<String> {
    ["ar-3326.cutr", "ar-3373.cutr", "ar-3374.cutr"]
        .iter()
        .map(|f| fixture("allreduce_torchrun").join(f).display().to_string())
        .collect()
}

/// A user's SELECT over a recording gives `stats`' kernel totals exactly (name, count, ns), in its order.
#[test]
fn a_select_over_a_recording_gives_stats_kernel_totals() {
    let f = fixture("cuda_workload.cutr").display().to_string();
    let q = "select name, count(*) as count, sum(duration_ns) as total_ns from kernels group by name \
             order by total_ns desc, name";
    let rows = json_of(&run(&["sql", q, &f, "--json"]));
    let stats = json_of(&run(&["stats", &f, "--json"]));
    let want: Vec<serde_json::Value> = stats["kernels"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| serde_json::json!({"name": k["name"], "count": k["count"], "total_ns": k["total_ns"]}))
        .collect();
    assert_eq!(rows.as_array().unwrap(), &want);
    assert_eq!(want.len(), 6, "cuda_workload's kernel names");
    assert_eq!(want[0]["count"], 10);
    assert_eq!(want[0]["total_ns"], 20_009_843);
}

/// `--parquet DIR` reads an export; `--csv` and the text table have their exact shapes; `top-kernels` adds up to
/// the kernel totals.
#[test]
fn an_export_is_queried_in_place_as_csv_and_text() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().join("t");
    let files = torchrun();
    let mut a: Vec<&str> = vec!["export", "--parquet", d.to_str().unwrap()];
    a.extend(files.iter().map(String::as_str));
    assert_eq!(run(&a).status.code(), Some(0));
    let q = "select rank, count(*) as kernels from kernels group by rank order by rank";
    let csv = run(&["sql", q, "--parquet", d.to_str().unwrap(), "--csv"]);
    assert_eq!(String::from_utf8(csv.stdout).unwrap(), "rank,kernels\n0,108\n1,108\n");
    let text = run(&["sql", q, "--parquet", d.to_str().unwrap()]);
    assert_eq!(
        String::from_utf8(text.stdout).unwrap(),
        "rank  kernels\n----  -------\n   0      108\n   1      108\n(2 rows)\n"
    );
    let top =
        json_of(&run(&["sql", "--query", "top-kernels", "--top", "0", "--parquet", d.to_str().unwrap(), "--json"]));
    let total: u64 = top.as_array().unwrap().iter().map(|k| k["count"].as_u64().unwrap()).sum();
    assert_eq!(total, 216);
}

/// Bad SQL, a missing dataset and a directory without tables are one-line errors with exit code 1, not panics;
/// wrong arguments are usage errors with exit code 2.
#[test]
fn bad_sql_and_missing_tables_are_clear_errors() {
    let f = fixture("cuda_workload.cutr").display().to_string();
    let o = run(&["sql", "selec name from kernels", &f]);
    let e = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{e}");
    assert_eq!(
        e,
        "cupti-convert sql: error: the query failed: Parser Error: syntax error at or near \"selec\"\n\n\
         LINE 1: selec name from kernels\n        ^\n"
    );
    let o = run(&["sql", "select 1", "--parquet", "/nonexistent/tables"]);
    assert_eq!(o.status.code(), Some(1));
    assert_eq!(String::from_utf8_lossy(&o.stderr), "cupti-convert sql: error: /nonexistent/tables: not a directory\n");
    let empty = tempfile::tempdir().unwrap();
    let o = run(&["sql", "select 1", "--parquet", empty.path().to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1));
    assert_eq!(
        String::from_utf8_lossy(&o.stderr),
        format!(
            "cupti-convert sql: error: {}: no tables of `cupti-convert export --parquet` in it (no kernels.parquet \
             or kernels/)\n",
            empty.path().display()
        )
    );
    let o = run(&["sql", "--query", "slowest", &f]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&o.stderr)
            .contains("unknown query 'slowest': one of stragglers, nccl-share, top-kernels, step-times"),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let o = run(&["sql", "select 1"]);
    assert_eq!(
        (o.status.code(), String::from_utf8_lossy(&o.stderr).trim()),
        (Some(2), "cupti-convert: error: sql: give recordings to query, or --parquet DIR")
    );
}

/// A statement that starts with `-` reaches DuckDB as a statement (after `--`), not as an option of the companion.
#[test]
fn a_statement_starting_with_a_dash_is_a_statement() {
    let f = fixture("cuda_workload.cutr").display().to_string();
    let o = run(&["sql", "--csv", "--", "-- a comment\nselect count(*) as n from kernels", &f]);
    let e = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(0), "{e}");
    assert_eq!(String::from_utf8_lossy(&o.stdout), "n\n75\n");
}

/// Without the companion program that links DuckDB, `sql` says what to build or install, with exit code 1.
#[test]
fn a_missing_companion_program_is_a_clear_error() {
    let f = fixture("cuda_workload.cutr").display().to_string();
    let o = Command::new(env!("CARGO_BIN_EXE_cupti-convert"))
        .args(["sql", "select 1", &f])
        .env("CUTR_SQL_PROGRAM", "/nonexistent/cupti-convert-sql")
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1));
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(e.starts_with("cupti-convert: error: cannot run /nonexistent/cupti-convert-sql"), "{e}");
}

/// A `cupti-convert` with no companion beside it nor on PATH names the one command that builds every program.
#[test]
fn no_companion_anywhere_names_the_build_command() {
    let dir = tempfile::tempdir().unwrap();
    let lone = dir.path().join("cupti-convert");
    std::fs::copy(env!("CARGO_BIN_EXE_cupti-convert"), &lone).unwrap();
    let o = Command::new(&lone)
        .args(["sql", "select 1", &fixture("cuda_workload.cutr").display().to_string()])
        .env_remove("CUTR_SQL_PROGRAM")
        .env("PATH", dir.path())
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1));
    assert_eq!(
        String::from_utf8_lossy(&o.stderr),
        "cupti-convert: error: sql needs the companion program cupti-convert-sql (it links DuckDB), found neither \
         beside this program nor on PATH: `tools/build.sh` builds it with the other programs (one release build, \
         DuckDB's library fetched first), `tools/install.sh` installs them all\n"
    );
}

/// The `um` and `memory_usage` tables of a generated recording with unified memory episodes, read by DuckDB,
/// give `stats --report um,memory`'s totals: bytes, count and time per migration direction, GPU fault records and
/// groups per access type, faults joined to the kernel, the peak memory in use.
#[test]
fn um_and_memory_usage_tables_give_stats_totals() {
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("um.cutr").display().to_string();
    let o = run(&["generate", "-o", &f, "--records", "3000", "--unified-memory"]);
    assert_eq!(o.status.code(), Some(0), "{}", String::from_utf8_lossy(&o.stderr));
    let stats = json_of(&run(&["stats", &f, "--json", "--report", "um,memory"]));
    let q = "select replace(kind, 'migration ', '') as direction, count(*) as count, sum(bytes)::ubigint as bytes, \
             sum(duration_ns)::ubigint as total_ns from um where kind like 'migration%' group by kind order by bytes desc, direction";
    let rows = json_of(&run(&["sql", q, &f, "--json"]));
    let want: Vec<serde_json::Value> = stats["um"]["migrations"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| serde_json::json!({"direction": m["direction"], "count": m["count"], "bytes": m["bytes"], "total_ns": m["total_ns"]}))
        .collect();
    assert_eq!(rows.as_array().unwrap(), &want);
    assert_eq!(
        want[0],
        serde_json::json!({"direction": "HtoD", "count": 24, "bytes": 24 << 21, "total_ns": want[0]["total_ns"]})
    );
    let q = "select device, cause as access, count(*) as records, sum(fault_groups)::ubigint as groups \
             from um where kind = 'GPU page fault' group by all order by device, records desc, access";
    let rows = json_of(&run(&["sql", q, &f, "--json"]));
    assert_eq!(rows.as_array().unwrap(), stats["um"]["gpu_faults"].as_array().unwrap());
    let q = "select kernel, count(*) filter (where kind = 'GPU page fault') as faults, \
             count(*) filter (where kind like 'migration%') as migrations from um \
             where device is not null group by kernel order by kernel nulls last";
    let rows = json_of(&run(&["sql", q, &f, "--json"]));
    assert_eq!(
        rows,
        serde_json::json!([
            {"kernel": "um_touch(float*, unsigned long)", "faults": 18, "migrations": 18},
            {"kernel": null, "faults": 0, "migrations": 24},
        ])
    );
    let q = "select count(*) as faults, count(host_file) as mapped from um where kind = 'CPU page fault'";
    assert_eq!(json_of(&run(&["sql", q, &f, "--json"])), serde_json::json!([{"faults": 36, "mapped": 27}]));
    let q = "select device, memory, max(bytes_in_use) as peak_bytes from memory_usage group by all order by all";
    let rows = json_of(&run(&["sql", q, &f, "--json"]));
    let want: Vec<serde_json::Value> = stats["memory_peaks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| serde_json::json!({"device": m["device"], "memory": m["memory"], "peak_bytes": m["peak_bytes"]}))
        .collect();
    assert_eq!(rows.as_array().unwrap(), &want);
    assert_eq!(want[0]["peak_bytes"], 654_311_424u64, "592 MiB of the prologue and a 32 MiB scratch buffer");
    assert_eq!(want[1]["peak_bytes"], 8u64 << 20, "one 8 MiB managed buffer at a time");
}

/// The H100 unified memory fixture's `um` table through DuckDB: the program's 128 MiB to the GPU and 64 MiB back
/// (fixtures/um_workload.json), equal to `stats --report um`; every GPU fault with a kernel; every CPU fault with
/// its mapped file.
#[test]
fn the_um_fixture_in_duckdb_equals_stats() {
    let f = fixture("um_workload.cutr").display().to_string();
    let stats = json_of(&run(&["stats", &f, "--json", "--report", "um"]));
    let q = "select replace(kind, 'migration ', '') as direction, count(*) as count, sum(bytes)::ubigint as bytes, \
             sum(duration_ns)::ubigint as total_ns from um where kind like 'migration%' group by kind order by bytes desc";
    let rows = json_of(&run(&["sql", q, &f, "--json"]));
    let want: Vec<serde_json::Value> = stats["um"]["migrations"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| serde_json::json!({"direction": m["direction"], "count": m["count"], "bytes": m["bytes"], "total_ns": m["total_ns"]}))
        .collect();
    assert_eq!(rows.as_array().unwrap(), &want);
    assert_eq!(
        (&want[0]["bytes"], &want[1]["bytes"]),
        (&serde_json::json!(134_217_728), &serde_json::json!(67_108_864))
    );
    let q = "select count(*) filter (where kind = 'GPU page fault' and kernel is null) as faults_outside, \
             count(*) filter (where kind = 'CPU page fault' and host_file like '%/um_workload') as cpu_mapped, \
             sum(fault_groups)::ubigint as groups from um";
    assert_eq!(
        json_of(&run(&["sql", q, &f, "--json"])),
        serde_json::json!([{"faults_outside": 0, "cpu_mapped": 768, "groups": 754}])
    );
}
