//! The host-side rules of `cupti-convert analyze` counted again by DuckDB (the Python package the test set-up
//! installs) over `export --parquet`'s tables of the same recordings: each rule's count and time (union of the
//! intervals, overlaps once, cut at the step's end) equal the SQL's, and the straggler is the file DuckDB finds
//! slowest in most steps.

use std::path::{Path, PathBuf};

use cutr_analyses::analyze::findings::host;
use cutr_analyses::analyze::types::{Context, Outcome, RuleResult, Step, StepSource};
use cutr_model::{LoadOptions, Trace, load};
use cutr_tests::{python_tool, repo};

/// The rows of each statement.
fn duck(dir: &Path, sql: &[String]) -> Vec<Vec<serde_json::Value>> {
    let mut args: Vec<&std::ffi::OsStr> = vec![dir.as_os_str()];
    args.extend(sql.iter().map(std::ffi::OsStr::new));
    let out = python_tool("duck.py", &args, &[]);
    out.as_array().unwrap().iter().map(|s| s["rows"].as_array().unwrap().clone()).collect()
}

/// The recordings' model, and their tables written to a temporary directory.
fn tables(files: &[&str]) -> (Trace, tempfile::TempDir) {
    let paths: Vec<PathBuf> = files.iter().map(|f| repo().join("fixtures").join(f)).collect();
    let t = load(&paths, &LoadOptions::default()).unwrap();
    let dir = tempfile::tempdir().unwrap();
    cutr_tables::write_parquet(&t, dir.path()).unwrap();
    (t, dir)
}

/// One step per closed NVTX range whose name starts with `prefix` (what `--step PREFIX` makes).
fn rules(t: &Trace, prefix: &str) -> Vec<RuleResult> {
    let ranks = t.job_ranks();
    let mut steps: Vec<Step> = t
        .ranges
        .iter()
        .filter(|r| r.closed() && t.names.get(r.name).starts_with(prefix))
        .map(|r| Step {
            proc: r.proc,
            rank: ranks[r.proc.index()].0,
            index: 0,
            name: t.names.get(r.name).into(),
            start: r.start,
            end: r.end,
        })
        .collect();
    steps.sort_by_key(|s| (s.proc, s.start));
    let source = StepSource::NvtxPrefix(prefix.to_string());
    host::rules(&Context { trace: t, steps: &steps, step_source: &source })
}

/// (count, time ns) of a rule's finding, or of nothing (0, 0) when it is clean.
fn count_and_time(r: &RuleResult) -> (u64, u64) {
    match &r.outcome {
        Outcome::Found(f) => (f.count, f.time_ns),
        Outcome::Clean { .. } => (0, 0),
        other => panic!("{}: {other:?}", r.rule),
    }
}

fn steps_sql(prefix: &str) -> String {
    format!("(select file, start_ns, end_ns from <nvtx_ranges> where name like '{prefix}%' and end_ns is not null)")
}

/// Two statements over the intervals `(file, s, e)` of `iv`: how many, and their union per file (gaps and islands).
fn count_and_union(iv: &str) -> [String; 2] {
    let with = format!(
        "with iv as ({iv}), \
         m as (select file, s, e, max(e) over (partition by file order by s, e \
               rows between unbounded preceding and 1 preceding) as prev from iv), \
         g as (select file, s, e, sum(case when prev is null or s > prev then 1 else 0 end) \
               over (partition by file order by s, e) as grp from m)"
    );
    [
        format!("{with} select count(*) from iv"),
        format!(
            "{with} select coalesce(sum(ge - gs), 0) from (select file, grp, min(s) gs, max(e) ge from g group by all)"
        ),
    ]
}

/// Copies (`where` over `memcpy m`) whose launching call starts in a step: the call's time, cut at the step's end.
fn copies(prefix: &str, filter: &str) -> [String; 2] {
    count_and_union(&format!(
        "select m.file, a.start_ns as s, least(a.end_ns, st.end_ns) as e from <memcpy> m \
         join <api_calls> a on a.file = m.file and a.correlation = m.correlation and a.start_ns = m.api_start_ns \
         join {} st on st.file = m.file and a.start_ns >= st.start_ns and a.start_ns < st.end_ns where {filter}",
        steps_sql(prefix)
    ))
}

fn syncs(prefix: &str) -> [String; 2] {
    count_and_union(&format!(
        "select y.file, y.start_ns as s, least(y.end_ns, st.end_ns) as e from <syncs> y \
         join {} st on st.file = y.file and y.start_ns >= st.start_ns and y.start_ns < st.end_ns \
         where y.sync_type <> 'Stream Wait Event'",
        steps_sql(prefix)
    ))
}

/// Kernels not from a graph, launched in a step, under 10 us or shorter than their launching call: the calls.
fn tiny(prefix: &str) -> [String; 2] {
    count_and_union(&format!(
        "select k.file, a.start_ns as s, least(a.end_ns, st.end_ns) as e from <kernels> k \
         join <api_calls> a on a.file = k.file and a.correlation = k.correlation and a.start_ns = k.api_start_ns \
         join {} st on st.file = k.file and a.start_ns >= st.start_ns and a.start_ns < st.end_ns \
         where k.graph_id = 0 and (k.duration_ns < 10000 or k.duration_ns < a.duration_ns)",
        steps_sql(prefix)
    ))
}

fn pair(rows: &[Vec<serde_json::Value>], i: usize) -> (u64, u64) {
    (rows[i][0][0].as_u64().unwrap(), rows[i + 1][0][0].as_u64().unwrap())
}

#[test]
fn copies_syncs_and_tiny_kernels_inside_steps_equal_duckdbs() {
    // cuda_workload's B:iter steps: 30 synchronous copies, 20 pageable ones, 30 syncs (workloads/cuda/EXPECTED.md).
    let (t, dir) = tables(&["cuda_workload.cutr"]);
    let r = rules(&t, "B:iter");
    let sql: Vec<String> = [
        copies("B:iter", "m.api_name not like '%Async%'"),
        copies("B:iter", "m.src_kind = 'Pageable' or m.dst_kind = 'Pageable'"),
        syncs("B:iter"),
        tiny("B:iter"),
    ]
    .concat();
    let rows = duck(dir.path(), &sql);
    assert_eq!(pair(&rows, 0), (30, 2_072_709));
    assert_eq!(count_and_time(&r[0]), pair(&rows, 0), "sync_copy_in_step");
    assert_eq!(pair(&rows, 2), (20, 2_875_131));
    assert_eq!(count_and_time(&r[1]), pair(&rows, 2), "pageable_copy_in_step");
    assert_eq!(pair(&rows, 4), (30, 20_397_126));
    assert_eq!(count_and_time(&r[2]), pair(&rows, 4), "sync_in_step");
    // Clean there (2.3% of step time in launches): 40 tiny kernels all the same.
    assert_eq!(rows[6][0][0].as_u64(), Some(40));

    // pytorch_loop's 20 steps: no copy, no sync inside them; 3,811 tiny kernels.
    let (t, dir) = tables(&["pytorch_loop.cutr"]);
    let r = rules(&t, "step ");
    let sql: Vec<String> = [copies("step ", "true"), syncs("step "), tiny("step ")].concat();
    let rows = duck(dir.path(), &sql);
    assert_eq!([pair(&rows, 0), pair(&rows, 2)], [(0, 0), (0, 0)]);
    assert_eq!((count_and_time(&r[0]), count_and_time(&r[2])), ((0, 0), (0, 0)));
    assert_eq!(pair(&rows, 4), (3_811, 27_084_962));
    assert_eq!(count_and_time(&r[3]), pair(&rows, 4), "tiny_kernels");
}

#[test]
fn the_straggler_is_the_file_duckdb_finds_slowest_in_most_steps() {
    let (t, dir) = tables(&["allreduce/allreduce-588.cutr", "allreduce/allreduce-589.cutr"]);
    let r = rules(&t, "iter ");
    let rows = duck(
        dir.path(),
        &["with d as (select name, file, sum(duration_ns) ns from <nvtx_ranges> \
                     where name like 'iter %' and end_ns is not null group by all), \
                s as (select name, arg_max(file, ns) slowest, max(ns) - min(ns) spread from d \
                      group by name having count(*) > 1) \
           select slowest, count(*), sum(spread) from s group by slowest order by 2 desc"
            .to_string()],
    );
    assert_eq!(rows[0][0], serde_json::json!(["allreduce-588.cutr", 49, 4_939_666]));
    assert_eq!(t.label(cutr_model::ProcId(0)), "allreduce-588.cutr");
    assert_eq!(t.job_ranks()[0].0, 0, "the first file is rank 0");
    assert_eq!(count_and_time(&r[4]), (49, 4_939_666));
    let Outcome::Found(f) = &r[4].outcome else { unreachable!() };
    assert!(f.summary.starts_with("rank 0 was the slowest in 49 of 50 steps"), "{}", f.summary);
}
