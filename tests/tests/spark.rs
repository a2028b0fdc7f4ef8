//! The Parquet tables of `cupti-convert export` read by Spark (PySpark 4.3.0 in local mode, installed with a Java
//! runtime by the test set-up) through `examples/spark_fleet.py`, the program docs/FLEET.md gives for a cluster:
//! for every fixture (each recording at the top of fixtures/ alone, each folder of recordings as one dataset) the
//! counts and ns per kernel name, API function, copy/memset kind and NVTX range equal `cupti-convert stats --json`'s
//! (the same `compute`), and on the two-rank all-reduce job the ranks, step times and stragglers equal
//! `stats --by-rank --step "iter "`'s. Spark runs once for all the datasets (its JVM takes seconds to start).
//! Skipped, saying so and why, where the set-up could not unpack a Java 17 or newer nor find one; never under CI=true.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Command;
use std::sync::OnceLock;

use cutr_analyses::ranks::{RankReport, by_rank};
use cutr_analyses::stats::{NvtxNames, Stats, StatsOptions, Summary, compute};
use cutr_model::{LoadOptions, load};
use cutr_tests::{cache, client_log, installed, repo};
use serde_json::Value;

const SPARK: &str = "spark-4.3.0";
const CLIENT: &str = "Spark 4.3.0 (PySpark, local mode)";
const STEP: &str = "iter ";

struct Dataset {
    /// The fixture: `cuda_workload.cutr`, or a folder, `allreduce_torchrun/`.
    name: String,
    /// What `stats --json` prints.
    stats: Stats,
    /// What `stats --by-rank --step "iter "` prints.
    ranks: RankReport,
    /// examples/spark_fleet.py's answers: question -> result -> {columns, rows}.
    answers: Value,
}

/// Every fixture: each recording at the top of fixtures/ alone, each folder of recordings (the ranks or the runs of
/// one job) as one dataset.
fn fixtures() -> Vec<(String, Vec<PathBuf>)> {
    let cutr = |p: &PathBuf| p.extension().is_some_and(|x| x == "cutr");
    let list = |d: PathBuf| -> Vec<PathBuf> {
        let mut v: Vec<PathBuf> = std::fs::read_dir(d).unwrap().map(|e| e.unwrap().path()).collect();
        v.sort();
        v
    };
    let mut out = Vec::new();
    for p in list(repo().join("fixtures")) {
        let name = p.file_name().unwrap().to_string_lossy().into_owned();
        if p.is_dir() {
            let files: Vec<PathBuf> = list(p).into_iter().filter(cutr).collect();
            if !files.is_empty() {
                out.push((format!("{name}/"), files));
            }
        } else if cutr(&p) {
            out.push((name, vec![p]));
        }
    }
    out
}

/// PySpark's directory and the JAVA_HOME that setup-clients.sh found, or why Spark cannot run here.
fn spark_install() -> Result<(PathBuf, PathBuf), String> {
    let skipped = cache().join(format!("clients/{SPARK}.skipped"));
    if let Ok(why) = std::fs::read_to_string(&skipped) {
        return Err(why.trim().to_string());
    }
    let dir = installed(&format!("clients/{SPARK}/.complete"), ".ci/setup-clients.sh").parent().unwrap().to_path_buf();
    let java_home = PathBuf::from(std::fs::read_to_string(dir.join("java_home")).unwrap_or_default().trim());
    if !java_home.join("bin/java").exists() {
        return Err(format!("no java at {}: run .ci/setup-clients.sh again", java_home.display()));
    }
    Ok((dir, java_home))
}

/// Exports every fixture and runs examples/spark_fleet.py once over all of them; `None` where Spark cannot run.
/// Each calling test is recorded as having run Spark or been skipped (cutr_tests::client_log).
fn datasets() -> Option<&'static [Dataset]> {
    static RUN: OnceLock<Result<Vec<Dataset>, String>> = OnceLock::new();
    let run = RUN.get_or_init(|| {
        let (spark, java_home) = match spark_install() {
            Ok(x) => x,
            Err(why) => {
                assert_ne!(std::env::var("CI").as_deref(), Ok("true"), "CI must run the Spark test: {why}");
                return Err(why);
            }
        };
        let tmp = tempfile::tempdir().unwrap();
        let mut sets = Vec::new();
        let mut dirs = Vec::new();
        for (i, (name, files)) in fixtures().into_iter().enumerate() {
            let t = load(&files, &LoadOptions::default()).unwrap();
            let dir = tmp.path().join(format!("d{i}"));
            cutr_tables::write_parquet(&t, &dir).unwrap();
            sets.push(Dataset {
                name,
                // Spark groups NVTX ranges by their exact name: every name its own row (the kill -9 recording's
                // 89 steps would fold into `step <n>` by default).
                stats: compute(&t, &StatsOptions { nvtx_names: NvtxNames::Each, ..Default::default() }),
                ranks: by_rank(&t, Some(STEP)),
                answers: Value::Null,
            });
            dirs.push(dir);
        }
        let python = installed("clients/venv/bin/python", ".ci/setup-clients.sh");
        let py4j: Vec<PathBuf> = std::fs::read_dir(&spark)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.file_name().unwrap().to_string_lossy().starts_with("py4j-"))
            .collect();
        assert_eq!(py4j.len(), 1, "Spark's py4j in {}", spark.display());
        let out = tmp.path().join("answers.json");
        let started = std::time::Instant::now();
        // Local mode on 2 cores: one shuffle partition is plenty for these tables, and the JIT's first tier alone
        // halves the CPU a short run spends compiling.
        let o = Command::new(spark.join("pyspark/bin/spark-submit"))
            .args(["--master", "local[2]", "--driver-java-options", "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"])
            .args(["--conf", "spark.ui.enabled=false", "--conf", "spark.ui.showConsoleProgress=false"])
            .args(["--conf", "spark.sql.shuffle.partitions=1", "--conf", "spark.log.level=WARN"])
            .arg(repo().join("examples/spark_fleet.py"))
            .args(["--json", "--top", "0", "--step", STEP, "--out"])
            .arg(&out)
            .arg("all")
            .args(&dirs)
            .current_dir(tmp.path())
            .env("JAVA_HOME", &java_home)
            .env("SPARK_HOME", spark.join("pyspark"))
            .env("PYTHONPATH", std::env::join_paths([spark.clone(), py4j[0].clone()]).unwrap())
            .env("PYSPARK_PYTHON", &python)
            .env("PYSPARK_DRIVER_PYTHON", &python)
            .env("SPARK_LOCAL_IP", "127.0.0.1")
            .output()
            .expect("spark-submit runs");
        let log = || format!("{}\n{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
        assert!(o.status.success(), "spark-submit failed ({}): {}", o.status, log());
        eprintln!("spark-submit: {} datasets in {:.1} s", dirs.len(), started.elapsed().as_secs_f64());
        let doc: Value = serde_json::from_slice(&std::fs::read(&out).unwrap())
            .unwrap_or_else(|e| panic!("spark_fleet.py wrote no JSON ({e}): {}", log()));
        let answers = doc["datasets"].as_array().unwrap();
        assert_eq!(answers.len(), sets.len());
        for ((d, a), dir) in sets.iter_mut().zip(answers).zip(&dirs) {
            assert_eq!(a["dataset"].as_str(), dir.to_str());
            d.answers = a["answers"].clone();
        }
        Ok(sets)
    });
    match run {
        Ok(sets) => {
            client_log::ran(CLIENT);
            Some(sets)
        }
        Err(why) => {
            client_log::skipped(CLIENT, why);
            None
        }
    }
}

/// One result as rows of column -> value.
fn rows(d: &Dataset, question: &str, result: &str) -> Vec<BTreeMap<String, Value>> {
    let r = &d.answers[question][result];
    let cols: Vec<&str> = r["columns"].as_array().unwrap().iter().map(|c| c.as_str().unwrap()).collect();
    r["rows"]
        .as_array()
        .unwrap_or_else(|| panic!("{}: no {question}/{result} in {}", d.name, d.answers))
        .iter()
        .map(|row| cols.iter().zip(row.as_array().unwrap()).map(|(c, v)| (c.to_string(), v.clone())).collect())
        .collect()
}

fn int(row: &BTreeMap<String, Value>, col: &str) -> u64 {
    row[col].as_u64().unwrap_or_else(|| panic!("{col} is not an integer: {row:?}"))
}

fn text(row: &BTreeMap<String, Value>, col: &str) -> String {
    row[col].as_str().unwrap_or("").to_string()
}

/// (name, count, total ns), in `stats`'s order (most time first, then by name).
fn summaries(v: &[Summary]) -> Vec<(String, u64, u64)> {
    v.iter().map(|s| (s.name.clone(), s.count, s.total_ns)).collect()
}

fn totals(d: &Dataset, result: &str) -> Vec<(String, u64, u64)> {
    rows(d, "totals", result).iter().map(|r| (text(r, "name"), int(r, "count"), int(r, "total_ns"))).collect()
}

#[test]
fn spark_reads_every_fixtures_tables_with_stats_totals() {
    let Some(sets) = datasets() else { return };
    assert!(sets.len() >= 10, "every fixture: {:?}", sets.iter().map(|d| &d.name).collect::<Vec<_>>());
    for d in sets {
        let s = &d.stats;
        assert_eq!(totals(d, "kernels"), summaries(&s.kernels), "kernels of {}", d.name);
        assert_eq!(totals(d, "api"), summaries(&s.api), "API calls of {}", d.name);
        let memory: Vec<(String, u64, u64, u64)> = rows(d, "totals", "memory_ops")
            .iter()
            .map(|r| (text(r, "name"), int(r, "count"), int(r, "total_ns"), int(r, "bytes")))
            .collect();
        let want: Vec<(String, u64, u64, u64)> =
            s.memory_ops.iter().map(|m| (m.time.name.clone(), m.time.count, m.time.total_ns, m.bytes)).collect();
        assert_eq!(memory, want, "copies and memsets of {}", d.name);
        let nvtx: Vec<Summary> = s.nvtx.iter().map(|r| r.time.clone()).collect();
        assert_eq!(totals(d, "nvtx"), summaries(&nvtx), "NVTX ranges of {}", d.name);

        // top-kernels with --top 0 loses nothing: its (rank, NVTX range, name) groups add up to the kernel totals.
        let mut by_name: BTreeMap<String, (u64, u64)> = BTreeMap::new();
        for r in rows(d, "top-kernels", "kernels") {
            let e = by_name.entry(text(&r, "name")).or_default();
            e.0 += int(&r, "count");
            e.1 += int(&r, "ns");
        }
        let want: BTreeMap<String, (u64, u64)> =
            s.kernels.iter().map(|k| (k.name.clone(), (k.count, k.total_ns))).collect();
        assert_eq!(by_name, want, "top-kernels of {}", d.name);

        // nccl-share: every kernel in some rank's row, the ranks `stats --by-rank` numbers (file order where a
        // recording has no rank of its own, as in the tables).
        let share = rows(d, "nccl-share", "ranks");
        let kernels: u64 = s.kernels.iter().map(|k| k.count).sum();
        let kernel_ns: u64 = s.kernels.iter().map(|k| k.total_ns).sum();
        assert_eq!(
            (share.iter().map(|r| int(r, "kernels")).sum::<u64>(), share.iter().map(|r| int(r, "kernel_ns")).sum()),
            (kernels, kernel_ns),
            "nccl-share of {}",
            d.name
        );
        let theirs: Vec<(u64, u64, u64, u64)> =
            share.iter().map(|r| (int(r, "rank"), int(r, "kernels"), int(r, "kernel_ns"), int(r, "nccl_ns"))).collect();
        let ours: Vec<(u64, u64, u64, u64)> =
            d.ranks.ranks.iter().map(|x| (u64::from(x.rank), x.kernels, x.kernel_ns, x.nccl_ns)).collect();
        assert_eq!(theirs, ours, "ranks of {}", d.name);
        assert_eq!(rows(d, "stragglers", "steps").len(), d.ranks.steps.len(), "`iter ` steps of {}", d.name);
    }
}

/// The two-rank all-reduce job (torchrun: a launcher without GPU work, ranks 0 and 1): two ranks with
/// `stats --by-rank`'s kernels, kernel time and NCCL time; each step's time per rank; each step's slowest rank;
/// and rank 0 named the straggler, slowest in 12 of the 20 steps (rank 1 in 8), as `stats --by-rank` says.
#[test]
fn spark_names_the_straggler_of_the_two_rank_all_reduce_job() {
    let Some(sets) = datasets() else { return };
    let d = sets.iter().find(|d| d.name == "allreduce_torchrun/").unwrap();
    let ranks: Vec<u64> = rows(d, "nccl-share", "ranks").iter().map(|r| int(r, "rank")).collect();
    assert_eq!(ranks, [0, 1], "two ranks; the launcher has no kernels");

    let times: Vec<(String, u64, u64)> =
        rows(d, "step-times", "steps").iter().map(|r| (text(r, "step"), int(r, "rank"), int(r, "ns"))).collect();
    let want: Vec<(String, u64, u64)> = d
        .ranks
        .steps
        .iter()
        .flat_map(|s| s.per_rank.iter().map(move |&(r, ns)| (s.step.clone(), u64::from(r), ns)))
        .collect();
    assert_eq!(times, want, "step times per rank, steps in order");
    assert_eq!(d.ranks.steps.len(), 20);

    let steps: Vec<(String, u64, u64, u64)> = rows(d, "stragglers", "steps")
        .iter()
        .map(|r| (text(r, "step"), int(r, "slowest_rank"), int(r, "slowest_ns"), int(r, "fastest_ns")))
        .collect();
    let want: Vec<(String, u64, u64, u64)> = d
        .ranks
        .steps
        .iter()
        .map(|s| {
            let ns = s.per_rank.iter().map(|x| x.1);
            (s.step.clone(), u64::from(s.slowest_rank), ns.clone().max().unwrap(), ns.min().unwrap())
        })
        .collect();
    assert_eq!(steps, want, "the slowest rank of each step");

    let slowest: Vec<(u64, u64)> =
        rows(d, "stragglers", "slowest").iter().map(|r| (int(r, "rank"), int(r, "steps"))).collect();
    let want: Vec<(u64, u64)> = d.ranks.stragglers.iter().map(|&(r, n)| (u64::from(r), n)).collect();
    assert_eq!(slowest, want);
    assert_eq!(slowest, [(0, 12), (1, 8)], "rank 0 is the straggler");
}
