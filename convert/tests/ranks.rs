//! `cupti-convert --rank`: processes whose environment names no rank (`torch.multiprocessing.spawn`) get the one
//! the user gives, in the JSON's `distributedInfo` (which HTA reads), the inputs list and the timeline's labels;
//! bad rank lists are refused with one line and the usage exit code.

mod common;

use std::path::{Path, PathBuf};

use common::{fixture, run};
use serde_json::{Value, json};

fn convert(inputs: &[PathBuf], extra: &[&str], out: &Path) -> Value {
    let mut args: Vec<&str> = inputs.iter().map(|p| p.to_str().unwrap()).collect();
    args.extend(["--chrome", "-q", "-o", out.to_str().unwrap()]);
    args.extend(extra);
    let o = run(&args);
    assert_eq!(o.status.code(), Some(0), "{}", String::from_utf8_lossy(&o.stderr));
    serde_json::from_slice(&std::fs::read(out).unwrap()).unwrap()
}

/// The two processes of fixtures/allreduce were started without RANK in their environment.
fn allreduce() -> [PathBuf; 2] {
    [fixture("allreduce/allreduce-588.cutr"), fixture("allreduce/allreduce-589.cutr")]
}

#[test]
fn a_given_rank_reaches_distributed_info_and_the_inputs() {
    let dir = tempfile::tempdir().unwrap();
    let [a, b] = allreduce();
    let out = dir.path().join("r.json");

    let doc = convert(std::slice::from_ref(&b), &[], &out);
    assert_eq!(doc.get("distributedInfo"), None, "no rank in the environment: none claimed");

    let doc = convert(std::slice::from_ref(&b), &["--rank", "1", "--world-size", "2"], &out);
    assert_eq!(doc["distributedInfo"], json!({"backend": "nccl", "rank": 1, "world_size": 2}));
    // HTA finds the rank by the text `"rank": N` (a blank after the colon).
    assert!(String::from_utf8(std::fs::read(&out).unwrap()).unwrap().contains("\"rank\": 1"));

    // Two inputs, ranks in input order; the world size defaults to one more than the highest rank.
    let doc = convert(&[a, b], &["--rank", "1,0"], &out);
    let ranks: Vec<&Value> = doc["cutr"]["inputs"].as_array().unwrap().iter().map(|i| &i["rank"]).collect();
    assert_eq!(ranks, [&json!({"rank": 1, "world_size": 2}), &json!({"rank": 0, "world_size": 2})]);
    let labels: Vec<&str> = doc["traceEvents"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["ph"] == "M" && e["name"] == "process_name")
        .filter_map(|e| e["args"]["name"].as_str())
        .filter(|n| n.contains("rank"))
        .collect();
    assert!(labels.iter().any(|n| n.contains("rank 1")) && labels.iter().any(|n| n.contains("rank 0")), "{labels:?}");
}

#[test]
fn bad_rank_lists_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("r.json");
    let [a, b] = allreduce();
    let (a, b, o) = (a.to_str().unwrap(), b.to_str().unwrap(), out.to_str().unwrap());
    for (args, message) in [
        (vec![a, b, "--rank", "1"], "--rank gives 1 rank(s) for 2 input(s): give one per input, in order"),
        (vec![a, b, "--rank", "1,1"], "--rank 1 is given to two inputs"),
        (vec![a, b, "--rank", "0,3", "--world-size", "2"], "--rank 3 is not below --world-size 2"),
    ] {
        let mut all = args.clone();
        all.extend(["--chrome", "-q", "-o", o]);
        let r = run(&all);
        assert_eq!(r.status.code(), Some(2), "{args:?}");
        let err = String::from_utf8(r.stderr).unwrap();
        assert_eq!(err.lines().last(), Some(format!("cupti-convert: error: {message}").as_str()), "{args:?}: {err}");
        assert!(!out.exists(), "nothing written for {args:?}");
    }
}
