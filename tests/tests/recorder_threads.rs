//! No record of the recorder's own threads reaches any output (issue 31, item 2). `fixtures/counter_100khz.cutr`
//! was recorded with `--counters`: its threads `cutr-pm` (PM sampling's set-up, 442 `cuDeviceGet`) and
//! `cutr-nvml` (NVML's 25 device queries) made 467 driver calls and 4 CUPTI overhead records beside the
//! program's. Counted here straight from the file's records, and then looked for in every output: the Perfetto
//! trace and the Chrome JSON (both read by Perfetto's trace processor), `stats --report api`, and the Parquet
//! tables (read by DuckDB).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use cutr_analyses::stats::{Section, StatsOptions, compute};
use cutr_format::Reader;
use cutr_format::records::FieldReader;
use cutr_model::{LoadOptions, load};
use cutr_schema::kinds;
use cutr_tests::{int, python_tool, repo, trace_processor};
use cutr_viewer_export::{DriverCalls, ExportOptions, Format, export};

use cutr_tests::IMPORT_PROBLEMS as STATS;

fn fixture() -> PathBuf {
    repo().join("fixtures/counter_100khz.cutr")
}

/// Records per (kind, thread id) of the kinds keyed by thread (runtime, driver, NVTX markers, overhead), read
/// from the file's raw records through its layout table: not through the model, which leaves some out.
fn records_by_thread(path: &Path) -> BTreeMap<(u32, u32), u64> {
    let r = Reader::open(path).unwrap();
    let layouts = r.layouts().unwrap();
    let thread_field = |kind: u32| {
        let name = if matches!(kind, kinds::RUNTIME | kinds::DRIVER) { "threadId" } else { "objectId.pt.threadId" };
        FieldReader::new(layouts.get(kind).unwrap(), name).unwrap()
    };
    let mut out = BTreeMap::new();
    for c in r.activity_chunks() {
        for g in r.decode_activity(c).unwrap().groups {
            if matches!(g.kind, kinds::RUNTIME | kinds::DRIVER | kinds::MARKER | kinds::OVERHEAD) {
                let tid = thread_field(g.kind);
                for rec in g.bytes.chunks_exact(g.stride) {
                    *out.entry((g.kind, tid.u32(rec))).or_default() += 1;
                }
            }
        }
    }
    out
}

#[test]
fn no_record_of_a_recorder_thread_reaches_any_output() {
    let path = fixture();
    let names = Reader::open(&path).unwrap().thread_names().clone();
    let recorder: BTreeMap<u32, &str> =
        names.iter().filter(|(_, n)| n.starts_with("cutr-")).map(|(&t, n)| (t, n.as_str())).collect();
    let by_thread = records_by_thread(&path);
    let of = |pred: &dyn Fn(u32, u32) -> bool| -> u64 {
        by_thread.iter().filter(|(k, _)| pred(k.0, k.1)).map(|e| e.1).sum()
    };
    let on_recorder = |kind| of(&|k, tid| k == kind && recorder.contains_key(&tid));
    let api_in_file = of(&|k, _| k == kinds::RUNTIME || k == kinds::DRIVER);
    let per_thread: Vec<(&str, u64)> = recorder
        .iter()
        .map(|(&tid, &name)| (name, of(&|k, t| t == tid && (k == kinds::RUNTIME || k == kinds::DRIVER))))
        .filter(|(_, n)| *n > 0)
        .collect();
    assert_eq!(per_thread, [("cutr-pm", 442), ("cutr-nvml", 25)], "API calls per recorder thread");
    let recorder_calls = on_recorder(kinds::RUNTIME) + on_recorder(kinds::DRIVER);
    let left_out = recorder_calls + on_recorder(kinds::MARKER) + on_recorder(kinds::OVERHEAD);
    assert_eq!((api_in_file, recorder_calls, left_out), (3_444, 467, 471));

    let t = load(std::slice::from_ref(&path), &LoadOptions::default()).unwrap();
    assert_eq!((t.stats.recorder_thread_records, t.stats.recorder_thread_launches), (left_out, 0));
    assert_eq!(t.apis.len() as u64, api_in_file - recorder_calls);
    assert!(t.apis.iter().all(|a| !recorder.contains_key(&a.tid)));
    assert!(t.overheads.iter().all(|o| !recorder.contains_key(&o.tid)));

    // `stats --report api`: every call but the recorder's.
    let s = compute(&t, &StatsOptions { sections: vec![Section::Api], ..Default::default() });
    assert_eq!(s.api.iter().map(|r| r.count).sum::<u64>(), 3_444 - 467);

    let dir = tempfile::tempdir().unwrap();
    let tids: Vec<String> = recorder.keys().map(|t| t.to_string()).collect();
    let tids = tids.join(", ");
    let queries = [
        STATS.to_string(),
        "select count(*) from thread where name like '%cutr-%'".to_string(),
        format!(
            "select count(*) from slice s join thread_track tt on s.track_id = tt.id join thread using(utid) where tid in ({tids})"
        ),
        format!("select count(*) from thread where tid in ({tids})"),
        "select count(*) from slice where category in ('cuda_runtime', 'cuda_driver')".to_string(),
    ];
    let queries: Vec<&str> = queries.iter().map(String::as_str).collect();
    for (format, name) in [(Format::Perfetto, "c.pftrace"), (Format::Chrome, "c.json")] {
        let out = dir.path().join(name);
        // Every driver call drawn (`--driver-calls`): the count is then the model's, queries included.
        export(&t, &out, &ExportOptions { format, driver_calls: DriverCalls::All, ..Default::default() }).unwrap();
        let r = trace_processor(&out, &queries);
        assert_eq!(r[0], Vec::<Vec<serde_json::Value>>::new(), "{name}: clean import");
        let counts: Vec<i64> = r[1..].iter().map(|rows| int(rows)).collect();
        assert_eq!(counts, [0, 0, 0, 3_444 - 467], "{name}: recorder threads, their slices, their tids, API slices");
    }
    // The Chrome JSON scanned itself: no row named for a recorder thread, no event on one's tid.
    let doc: serde_json::Value = serde_json::from_slice(&std::fs::read(dir.path().join("c.json")).unwrap()).unwrap();
    let events = doc["traceEvents"].as_array().unwrap();
    let pid = i64::from(t.processes[0].pid);
    let on_recorder_tid =
        events.iter().filter(|e| e["pid"] == pid && recorder.contains_key(&(e["tid"].as_i64().unwrap_or(-1) as u32)));
    assert_eq!(on_recorder_tid.count(), 0);
    let named: BTreeSet<&str> =
        events.iter().filter(|e| e["ph"] == "M").filter_map(|e| e["args"]["name"].as_str()).collect();
    assert!(named.iter().all(|n| !n.contains("cutr-")), "{named:?}");

    // The Parquet tables, read by DuckDB (a directory of their own: an export replaces its directory whole).
    let tables = dir.path().join("tables");
    cutr_tables::write_parquet(&t, &tables).unwrap();
    let sql = format!("select count(*), count(*) filter (where tid in ({tids})) from <api_calls>");
    let r = python_tool("duck.py", &[tables.as_os_str(), std::ffi::OsStr::new(&sql)], &[]);
    assert_eq!(r[0]["rows"][0], serde_json::json!([3_444 - 467, 0]));
}
