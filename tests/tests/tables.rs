//! The Parquet tables of `cupti-convert export` read by DuckDB (the Python package, installed by the test
//! set-up): for every real fixture, the counts and total ns per kernel name, per API function, per memcpy kind and
//! per NVTX range name equal `stats`'s; the two ranks of the all-reduce job land in one dataset, each row with its
//! rank; and the schema is the one docs/TABLES.md documents.

use std::collections::BTreeMap;
use std::path::PathBuf;

use cutr_analyses::stats::{StatsOptions, compute};
use cutr_model::{LoadOptions, load};
use cutr_tests::{python_tool, repo};

fn duck(dir: &std::path::Path, sql: &[&str]) -> Vec<serde_json::Value> {
    let mut args: Vec<&std::ffi::OsStr> = vec![dir.as_os_str()];
    args.extend(sql.iter().map(|s| std::ffi::OsStr::new(*s)));
    python_tool("duck.py", &args, &[]).as_array().unwrap().clone()
}

/// name -> (count, total ns) from DuckDB rows `[name, count, sum]`.
fn by_name(rows: &serde_json::Value) -> BTreeMap<String, (u64, u64)> {
    rows["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| (r[0].as_str().unwrap_or("").to_string(), (r[1].as_u64().unwrap(), r[2].as_u64().unwrap())))
        .collect()
}

#[test]
fn duckdb_reads_every_fixtures_tables_with_stats_totals() {
    let fixtures: Vec<Vec<PathBuf>> = vec![
        vec![repo().join("fixtures/pytorch_loop.cutr")],
        vec![repo().join("fixtures/cuda_workload.cutr")],
        vec![repo().join("fixtures/cuda_workload_events.cutr")],
        vec![repo().join("fixtures/source_workload_pcs.cutr")],
        vec![repo().join("fixtures/graph_workload.cutr")],
        vec![repo().join("fixtures/graph_layers.cutr")],
        std::fs::read_dir(repo().join("fixtures/allreduce_torchrun"))
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|x| x == "cutr"))
            .collect(),
    ];
    for files in fixtures {
        let dir = tempfile::tempdir().unwrap();
        let t = load(&files, &LoadOptions::default()).unwrap();
        let summary = cutr_tables::write_parquet(&t, dir.path()).unwrap();
        assert_eq!(summary.rows("kernels"), Some(t.kernels.len() as u64));
        let s = compute(&t, &StatsOptions::default());
        let r = duck(
            dir.path(),
            &[
                "select name, count(*), sum(duration_ns) from <kernels> group by name",
                "select name, count(*), sum(duration_ns) from <api_calls> group by name",
                "select name, count(*), sum(duration_ns) from <nvtx_ranges> where end_ns is not null group by name",
                "select count(*), count(distinct file), count(distinct rank) from <kernels>",
                "select count(*) from <processes>",
            ],
        );
        let want = |v: &[cutr_analyses::stats::Summary]| -> BTreeMap<String, (u64, u64)> {
            v.iter().map(|x| (x.name.clone(), (x.count, x.total_ns))).collect()
        };
        assert_eq!(by_name(&r[0]), want(&s.kernels), "kernels of {files:?}");
        assert_eq!(by_name(&r[1]), want(&s.api), "API calls of {files:?}");
        let nvtx: BTreeMap<String, (u64, u64)> =
            s.nvtx.iter().map(|x| (x.time.name.clone(), (x.time.count, x.time.total_ns))).collect();
        assert_eq!(by_name(&r[2]), nvtx, "NVTX ranges of {files:?}");
        let totals = &r[3]["rows"][0];
        let with_kernels = t.kernels.iter().map(|k| k.proc).collect::<std::collections::BTreeSet<_>>().len();
        assert_eq!(totals[0].as_u64(), Some(t.kernels.len() as u64));
        assert_eq!(totals[1].as_u64(), Some(with_kernels as u64), "each file named");
        if files.len() > 1 {
            // torchrun's launcher recorded no kernel; each rank's kernels carry its rank.
            assert_eq!(totals[2].as_u64(), Some(2), "each rank its own");
            // Several recordings: Hive partitions, by host and (the launcher has no rank) pid, one file each.
            let mut parts: Vec<String> = t
                .processes
                .iter()
                .enumerate()
                .map(|(i, p)| format!("kernels/host={}/pid={}/part-{i}.parquet", p.meta.host, p.pid))
                .collect();
            parts.sort();
            for p in &parts {
                assert!(dir.path().join(p).is_file(), "{p}");
            }
            let by_path = duck(dir.path(), &["select count(distinct pid), count(distinct host) from <processes>"]);
            assert_eq!(by_path[0]["rows"][0], serde_json::json!([files.len(), 1]), "pid and host from the path");
        }
        assert_eq!(r[4]["rows"][0][0].as_u64(), Some(files.len() as u64), "one process row per file");
    }
}

/// Copies by kind: DuckDB's counts and bytes per (copy kind, source, destination) equal the model's.
#[test]
fn memcpy_rows_keep_their_kinds_and_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let t = load(&[repo().join("fixtures/pytorch_loop.cutr")], &LoadOptions::default()).unwrap();
    cutr_tables::write_parquet(&t, dir.path()).unwrap();
    let r = duck(dir.path(), &["select copy_kind, count(*), sum(bytes) from <memcpy> group by copy_kind order by 1"]);
    let mut want: BTreeMap<String, (u64, u64)> = BTreeMap::new();
    for m in &t.memcpys {
        let e = want.entry(cutr_model::describe::memcpy_kind(m.copy_kind).to_string()).or_default();
        e.0 += 1;
        e.1 += m.bytes;
    }
    assert_eq!(by_name(&r[0]), want);
}

/// docs/TABLES.md lists every column of every table with its Arrow type, in order, and nothing else.
#[test]
fn the_schema_is_the_documented_one() {
    let t = load(&[repo().join("fixtures/cuda_workload.cutr")], &LoadOptions::default()).unwrap();
    let doc = std::fs::read_to_string(repo().join("docs/TABLES.md")).unwrap();
    let mut documented: Vec<(String, Vec<(String, String)>)> = Vec::new();
    for line in doc.lines() {
        if let Some(t) = line.strip_prefix("### `").and_then(|l| l.strip_suffix('`')) {
            documented.push((t.to_string(), Vec::new()));
        } else if let Some(row) = line.strip_prefix("| `")
            && let Some(last) = documented.last_mut()
        {
            let cells: Vec<&str> = row.split('|').map(str::trim).collect();
            last.1.push((cells[0].trim_end_matches('`').to_string(), cells[1].trim_matches('`').to_string()));
        }
    }
    let actual: Vec<(String, Vec<(String, String)>)> =
        cutr_tables::schemas(&t).into_iter().map(|(n, c)| (n.to_string(), c)).collect();
    assert_eq!(documented, actual);
}

/// `stats --by-rank --step "iter "` on the two-rank all-reduce job gives the numbers DuckDB gives over the same
/// recordings' tables: kernels, kernel time and NCCL time per rank, each step's time per rank; the slowest rank of
/// each step is the one with the most time in it.
#[test]
fn ranks_side_by_side_equal_duckdbs_over_the_tables() {
    let files: Vec<PathBuf> = ["ar-3326.cutr", "ar-3373.cutr", "ar-3374.cutr"]
        .iter()
        .map(|f| repo().join("fixtures/allreduce_torchrun").join(f))
        .collect();
    let t = load(&files, &LoadOptions::default()).unwrap();
    let r = cutr_analyses::ranks::by_rank(&t, Some("iter "));
    let dir = tempfile::tempdir().unwrap();
    cutr_tables::write_parquet(&t, dir.path()).unwrap();
    let q = duck(
        dir.path(),
        &[
            "select rank, count(*), sum(duration_ns), sum(case when name like 'nccl%' then duration_ns else 0 end) \
             from <kernels> group by rank order by rank",
            "select name, rank, sum(duration_ns) from <nvtx_ranges> where name like 'iter %' and end_ns is not null \
             group by name, rank order by name, rank",
        ],
    );
    let ours: Vec<(u64, u64, u64, u64)> =
        r.ranks.iter().map(|x| (u64::from(x.rank), x.kernels, x.kernel_ns, x.nccl_ns)).collect();
    let theirs: Vec<(u64, u64, u64, u64)> = q[0]["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|row| {
            let n = |i: usize| row[i].as_u64().or_else(|| row[i].as_str().and_then(|s| s.parse().ok())).unwrap();
            (n(0), n(1), n(2), n(3))
        })
        .collect();
    assert_eq!(ours, theirs);
    assert_eq!(ours.len(), 2, "the launcher has no GPU work");
    let mut ours: Vec<(String, u64, u64)> = r
        .steps
        .iter()
        .flat_map(|s| s.per_rank.iter().map(move |&(rank, ns)| (s.step.clone(), u64::from(rank), ns)))
        .collect();
    ours.sort();
    let theirs: Vec<(String, u64, u64)> = q[1]["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|row| {
            let n = |i: usize| row[i].as_u64().or_else(|| row[i].as_str().and_then(|s| s.parse().ok())).unwrap();
            (row[0].as_str().unwrap().to_string(), n(1), n(2))
        })
        .collect();
    assert_eq!(ours, theirs);
    assert_eq!(r.steps.len(), 20);
    for s in &r.steps {
        assert_eq!(s.slowest_rank, s.per_rank.iter().max_by_key(|x| x.1).unwrap().0, "{}", s.step);
    }
    assert_eq!(r.stragglers, [(0, 12), (1, 8)]);
}
