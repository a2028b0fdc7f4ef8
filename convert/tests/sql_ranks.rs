//! `cupti-convert sql`'s named queries against `stats --by-rank --step "iter "` (and `stats`) on every fixture of
//! several recordings, each folder of fixtures/ as one job: the same ranks, the same per-rank and per-step figures
//! in ns, the same straggler. A recording without a rank (two plain processes, torchrun's launcher) is numbered by
//! file order in both, said so by `processes.rank_source` and a note on stderr; DuckDB's Python package (the
//! outside client) reads the same ranks from `export --parquet`'s files.

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use common::{fixture, stderr_lines, text};
use serde_json::{Value, json};

const STEP: &str = "iter ";
const NOTE: &str = "cupti-convert sql: note: no rank recorded in";

/// A recording's file name, its rank and where the rank comes from (`environment`, `--rank`, `file order`).
type RankedFile = (String, u64, String);

/// `cupti-convert` with its DuckDB companion from this build (tools/test.sh builds `cupti-convert-sql` first).
fn run(args: &[&str]) -> Output {
    let exe = Path::new(env!("CARGO_BIN_EXE_cupti-convert"));
    let companion = exe.with_file_name("cupti-convert-sql");
    assert!(companion.is_file(), "{} is missing: build it first (cargo build -p cutr-sql)", companion.display());
    Command::new(exe).args(args).env("CUTR_SQL_PROGRAM", &companion).output().expect("cupti-convert runs")
}

fn json_of(o: &Output) -> Value {
    let e = text(&o.stderr);
    assert_eq!(o.status.code(), Some(0), "{e}");
    serde_json::from_slice(&o.stdout).unwrap_or_else(|err| panic!("{err}: {}", text(&o.stdout)))
}

fn with_files<'a>(args: &[&'a str], files: &'a [String]) -> Vec<&'a str> {
    args.iter().copied().chain(files.iter().map(String::as_str)).collect()
}

fn rows(v: &Value) -> &Vec<Value> {
    v.as_array().unwrap_or_else(|| panic!("not an array: {v}"))
}

fn int(v: &Value, key: &str) -> u64 {
    v[key].as_u64().unwrap_or_else(|| panic!("{key} is not an integer: {v}"))
}

fn name(v: &Value, key: &str) -> String {
    v[key].as_str().unwrap_or_else(|| panic!("{key} is not text: {v}")).to_string()
}

/// Every folder of fixtures/ with two or more recordings, its files in name order (as a shell's glob gives them).
fn jobs() -> Vec<(String, Vec<String>)> {
    let sorted = |d: &Path| -> Vec<PathBuf> {
        let mut v: Vec<PathBuf> = std::fs::read_dir(d).unwrap().map(|e| e.unwrap().path()).collect();
        v.sort();
        v
    };
    sorted(&fixture(""))
        .into_iter()
        .filter(|d| d.is_dir())
        .map(|d| {
            let files: Vec<String> = sorted(&d)
                .into_iter()
                .filter(|p| p.extension().is_some_and(|x| x == "cutr"))
                .map(|p| p.display().to_string())
                .collect();
            (d.file_name().unwrap().to_string_lossy().into_owned(), files)
        })
        .filter(|(_, files)| files.len() > 1)
        .collect()
}

/// What one job gave: `stats --by-rank --step`, and each named query's rows with its notes on stderr (the
/// converter's own warnings about the recordings left out).
struct Job {
    name: String,
    files: Vec<String>,
    by_rank: Value,
    queries: BTreeMap<&'static str, (Value, Vec<String>)>,
}

fn job(name: &str, files: Vec<String>) -> Job {
    let by_rank = json_of(&run(&with_files(&["stats", "--by-rank", "--step", STEP, "--json"], &files)));
    let mut queries = BTreeMap::new();
    for q in ["nccl-share", "step-times", "stragglers", "top-kernels"] {
        let o = run(&with_files(&["sql", "--query", q, "--step", STEP, "--top", "0", "--json"], &files));
        let notes = stderr_lines(&o).into_iter().filter(|l| l.starts_with(NOTE)).collect();
        queries.insert(q, (json_of(&o), notes));
    }
    Job { name: name.to_string(), files, by_rank, queries }
}

/// nccl-share's (rank, kernels, kernel ns, NCCL ns) are `stats --by-rank`'s rows, and its share their quotient.
fn check_nccl_share(j: &Job) {
    let share = rows(&j.queries["nccl-share"].0);
    let ours: Vec<(u64, u64, u64, u64)> =
        share.iter().map(|r| (int(r, "rank"), int(r, "kernels"), int(r, "kernel_ns"), int(r, "nccl_ns"))).collect();
    let theirs: Vec<(u64, u64, u64, u64)> = rows(&j.by_rank["ranks"])
        .iter()
        .map(|r| (int(r, "rank"), int(r, "kernels"), int(r, "kernel_ns"), int(r, "nccl_ns")))
        .collect();
    assert_eq!(ours, theirs, "nccl-share of {}", j.name);
    for r in share {
        // DuckDB divides its 128-bit sums: to the last bit or one off.
        let want = int(r, "nccl_ns") as f64 / int(r, "kernel_ns") as f64;
        let got = r["nccl_share"].as_f64().unwrap();
        assert!((got - want).abs() <= 1e-15, "nccl_share of {}: {r}, not {want}", j.name);
    }
}

/// step-times' (step, rank, ns) are every cell of `stats --by-rank --step`, steps in numeric order, ranks in order.
fn check_step_times(j: &Job) -> usize {
    let ours: Vec<(String, u64, u64)> =
        rows(&j.queries["step-times"].0).iter().map(|r| (name(r, "step"), int(r, "rank"), int(r, "ns"))).collect();
    let theirs: Vec<(String, u64, u64)> = rows(&j.by_rank["steps"])
        .iter()
        .flat_map(|s| {
            rows(&s["per_rank"]).iter().map(move |c| (name(s, "step"), c[0].as_u64().unwrap(), c[1].as_u64().unwrap()))
        })
        .collect();
    assert_eq!(ours, theirs, "step-times of {}", j.name);
    ours.len()
}

/// stragglers' slowest rank, its ns, the ranks and the spread of each step are `stats --by-rank`'s (its spread
/// printed in %, to 0.1); the steps each rank was slowest in are its straggler counts. Returns those counts.
fn check_stragglers(j: &Job) -> Vec<(u64, u64)> {
    let ours = rows(&j.queries["stragglers"].0);
    let steps = rows(&j.by_rank["steps"]);
    assert_eq!(ours.len(), steps.len(), "stragglers of {}", j.name);
    let mut slowest: BTreeMap<u64, u64> = BTreeMap::new();
    for (q, s) in ours.iter().zip(steps) {
        let per_rank: Vec<u64> = rows(&s["per_rank"]).iter().map(|c| c[1].as_u64().unwrap()).collect();
        assert_eq!(
            (name(q, "step"), int(q, "slowest_rank"), int(q, "slowest_ns"), int(q, "ranks")),
            (name(s, "step"), int(s, "slowest_rank"), *per_rank.iter().max().unwrap(), per_rank.len() as u64),
            "{} of {}",
            name(s, "step"),
            j.name
        );
        let spread = q["spread"].as_f64().unwrap() * 100.0;
        assert!((spread - s["spread_pct"].as_f64().unwrap()).abs() < 1e-9, "{q} against {s}");
        if per_rank.len() > 1 {
            *slowest.entry(int(q, "slowest_rank")).or_default() += 1;
        }
    }
    let mut counts: Vec<(u64, u64)> = slowest.into_iter().collect();
    counts.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    let theirs: Vec<(u64, u64)> =
        rows(&j.by_rank["stragglers"]).iter().map(|x| (x[0].as_u64().unwrap(), x[1].as_u64().unwrap())).collect();
    assert_eq!(counts, theirs, "the straggler of {}", j.name);
    counts
}

/// top-kernels (all of them): count and ns per name are `stats`' kernel totals over the job, in its order; the
/// ranks, least and most per-rank ns are `stats` of each rank's recording alone (`stats --by-rank` has no
/// per-kernel rows).
fn check_top_kernels(j: &Job) {
    let top = rows(&j.queries["top-kernels"].0);
    let ours: Vec<(String, u64, u64)> =
        top.iter().map(|r| (name(r, "name"), int(r, "count"), int(r, "total_ns"))).collect();
    let stats = json_of(&run(&with_files(&["stats", "--json"], &j.files)));
    let theirs: Vec<(String, u64, u64)> =
        rows(&stats["kernels"]).iter().map(|k| (name(k, "name"), int(k, "count"), int(k, "total_ns"))).collect();
    assert_eq!(ours, theirs, "top-kernels of {}", j.name);
    // name -> each rank's ns, from each rank's recording alone.
    let mut per_rank: BTreeMap<String, Vec<u64>> = BTreeMap::new();
    for r in rows(&j.by_rank["ranks"]) {
        let file = j.files.iter().find(|f| f.ends_with(&format!("/{}", name(r, "file")))).unwrap();
        for k in rows(&json_of(&run(&["stats", "--json", file]))["kernels"]) {
            per_rank.entry(name(k, "name")).or_default().push(int(k, "total_ns"));
        }
    }
    for r in top {
        let ns = &per_rank[&name(r, "name")];
        assert_eq!(
            (int(r, "ranks"), int(r, "least_rank_ns"), int(r, "most_rank_ns")),
            (ns.len() as u64, *ns.iter().min().unwrap(), *ns.iter().max().unwrap()),
            "{r} of {}",
            j.name
        );
    }
}

/// (file, rank, rank source) of every recording with GPU work, in rank order, as `stats --by-rank` says.
fn by_rank_files(j: &Job) -> Vec<RankedFile> {
    rows(&j.by_rank["ranks"]).iter().map(|r| (name(r, "file"), int(r, "rank"), name(r, "rank_source"))).collect()
}

/// The note `sql` gives where ranks are numbered by file order: every such recording with its rank.
fn note_of(numbered: &[(String, u64)]) -> String {
    let files: Vec<String> = numbered.iter().map(|(f, r)| format!("{f} (rank {r})")).collect();
    format!("{NOTE} {}: numbered by file order, as `stats --by-rank` does (processes.rank_source)", files.join(", "))
}

/// DuckDB's Python package over `export --parquet`'s files: [(file, rank, rank source)] of `processes`, and
/// [(rank, kernels, kernel ns)] of `kernels`.
fn exported_ranks(files: &[String]) -> (Vec<RankedFile>, Vec<(u64, u64, u64)>) {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().join("tables");
    let o = run(&with_files(&["export", "--parquet", d.to_str().unwrap()], files));
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let o = Command::new("python3")
        .arg(repo.join("tests/clients/duck.py"))
        .arg(&d)
        .arg("select file, rank, rank_source from <processes> order by rank")
        .arg("select rank, count(*), sum(duration_ns) from <kernels> group by rank order by rank")
        .env("CUTR_CACHE", repo.join(".cache"))
        .output()
        .expect("python3 runs");
    let v: Value = serde_json::from_slice(&o.stdout)
        .unwrap_or_else(|e| panic!("duck.py: {e}: {}{}", text(&o.stdout), text(&o.stderr)));
    let cells = |i: usize| rows(&v[i]["rows"]).clone();
    let procs = cells(0)
        .iter()
        .map(|r| (r[0].as_str().unwrap().to_string(), r[1].as_u64().unwrap(), r[2].as_str().unwrap().to_string()))
        .collect();
    let kernels =
        cells(1).iter().map(|r| (r[0].as_u64().unwrap(), r[1].as_u64().unwrap(), r[2].as_u64().unwrap())).collect();
    (procs, kernels)
}

/// Every job of several recordings: each named query equals `stats --by-rank` (and `stats`); the tables'
/// `processes` name each recording's rank as `stats --by-rank` does, and `export --parquet`'s files read by DuckDB's
/// Python package carry the same rank on every kernel; the note names exactly the recordings numbered by file order.
#[test]
fn named_queries_equal_stats_by_rank_on_every_job() {
    let jobs = jobs();
    let names: Vec<&str> = jobs.iter().map(|j| j.0.as_str()).collect();
    assert_eq!(
        names,
        ["allreduce", "allreduce_torchrun", "diff", "pc_ring", "regress", "source_diff"],
        "the jobs of fixtures/"
    );
    for (job_name, files) in jobs {
        let j = job(&job_name, files);
        check_nccl_share(&j);
        check_step_times(&j);
        check_stragglers(&j);
        check_top_kernels(&j);

        let procs = json_of(&run(&with_files(
            &["sql", "select file, rank, rank_source from processes order by rank", "--json"],
            &j.files,
        )));
        let procs: Vec<RankedFile> =
            rows(&procs).iter().map(|r| (name(r, "file"), int(r, "rank"), name(r, "rank_source"))).collect();
        let with_gpu: Vec<RankedFile> =
            procs.iter().filter(|p| by_rank_files(&j).iter().any(|r| r.0 == p.0)).cloned().collect();
        assert_eq!(with_gpu, by_rank_files(&j), "the ranks of {}'s recordings", j.name);
        let (exported, kernels) = exported_ranks(&j.files);
        assert_eq!(exported, procs, "export --parquet's processes of {}", j.name);
        let want: Vec<(u64, u64, u64)> = rows(&j.by_rank["ranks"])
            .iter()
            .map(|r| (int(r, "rank"), int(r, "kernels"), int(r, "kernel_ns")))
            .collect();
        assert_eq!(kernels, want, "export --parquet's kernels per rank of {}", j.name);

        let numbered: Vec<(String, u64)> =
            procs.iter().filter(|p| p.2 == "file order").map(|p| (p.0.clone(), p.1)).collect();
        for (q, (_, stderr)) in &j.queries {
            let want: Vec<String> = if numbered.is_empty() { vec![] } else { vec![note_of(&numbered)] };
            assert_eq!(stderr, &want, "{q} of {}", j.name);
        }
    }
}

/// The two processes of `fixtures/allreduce/` (no launcher, no RANK): ranks 0 and 1 by file order in `stats
/// --by-rank`, in `nccl-share` and in the tables, with a note saying so; 50 steps on each rank, rank 0 the slowest in
/// 49.
#[test]
fn two_processes_without_a_rank_are_ranks_by_file_order() {
    let files: Vec<String> = ["allreduce-588.cutr", "allreduce-589.cutr"]
        .iter()
        .map(|f| fixture("allreduce").join(f).display().to_string())
        .collect();
    let j = job("allreduce", files);
    assert_eq!(
        by_rank_files(&j),
        [
            ("allreduce-588.cutr".to_string(), 0, "file order".to_string()),
            ("allreduce-589.cutr".to_string(), 1, "file order".to_string())
        ]
    );
    check_nccl_share(&j);
    let share: Vec<Value> = rows(&j.queries["nccl-share"].0)
        .iter()
        .map(|r| json!([r["rank"], r["kernels"], r["kernel_ns"], r["nccl_ns"]]))
        .collect();
    assert_eq!(share, [json!([0, 228, 10_768_887, 9_776_380]), json!([1, 228, 16_880_660, 15_886_432])]);
    assert_eq!(check_step_times(&j), 100);
    assert_eq!(check_stragglers(&j), [(0, 49), (1, 1)], "rank 0 the slowest in 49 of 50 steps");
    assert_eq!(
        j.queries["nccl-share"].1,
        [note_of(&[("allreduce-588.cutr".to_string(), 0), ("allreduce-589.cutr".to_string(), 1)])]
    );
    let o = run(&with_files(&["stats", "--by-rank"], &j.files));
    assert!(
        text(&o.stdout).contains("  (no rank recorded for rank 0, 1: numbered by file order)\n"),
        "{}",
        text(&o.stdout)
    );
}

/// torchrun's job (`fixtures/allreduce_torchrun/`): ranks 0 and 1 from RANK, the launcher (no GPU work) rank 2 by
/// file order, never rank 0 beside the real one; 20 steps on each rank, rank 0 the slowest in 12 of them.
#[test]
fn torchruns_launcher_takes_the_first_free_rank() {
    let files: Vec<String> = ["ar-3326.cutr", "ar-3373.cutr", "ar-3374.cutr"]
        .iter()
        .map(|f| fixture("allreduce_torchrun").join(f).display().to_string())
        .collect();
    let j = job("allreduce_torchrun", files);
    assert_eq!(
        by_rank_files(&j),
        [
            ("ar-3373.cutr".to_string(), 0, "environment".to_string()),
            ("ar-3374.cutr".to_string(), 1, "environment".to_string())
        ]
    );
    let share: Vec<Value> = rows(&j.queries["nccl-share"].0)
        .iter()
        .map(|r| json!([r["rank"], r["kernels"], r["kernel_ns"], r["nccl_ns"]]))
        .collect();
    assert_eq!(share, [json!([0, 108, 2_471_449, 2_009_367]), json!([1, 108, 35_884_174, 35_421_610])]);
    check_nccl_share(&j);
    assert_eq!(check_step_times(&j), 40);
    assert_eq!(check_stragglers(&j), [(0, 12), (1, 8)], "rank 0 is the straggler");
    assert_eq!(j.queries["stragglers"].1, [note_of(&[("ar-3326.cutr".to_string(), 2)])]);
}
