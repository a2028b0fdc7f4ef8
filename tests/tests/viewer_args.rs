//! The two viewers show the same fields: a kernel's and an API call's args in the Perfetto trace (read by
//! Perfetto's trace processor) are the Chrome JSON's, key for key and value for value, on a real recording.

use std::collections::BTreeMap;

use cutr_model::{LoadOptions, load};
use cutr_tests::trace_processor;
use cutr_viewer_export::{ExportOptions, Format, export};
use serde_json::Value;

/// Arg name -> value as text, for one slice.
type Args = BTreeMap<String, String>;

/// Perfetto's spelling of a Chrome JSON key: Kineto's one dotted key has its dot dropped (Perfetto nests at dots).
fn perfetto_key(json_key: &str) -> String {
    if json_key == "est. achieved occupancy %" { "estimated achieved occupancy %".into() } else { json_key.into() }
}

fn text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Number(n) if n.is_f64() => format!("{:.6}", n.as_f64().unwrap()),
        other => other.to_string(),
    }
}

/// The args of the Chrome JSON event of category `cat` with correlation `corr`.
fn json_args(events: &[Value], cat: &str, corr: i64) -> Args {
    let e = events
        .iter()
        .find(|e| e["cat"] == cat && e["args"]["correlation"].as_i64() == Some(corr))
        .unwrap_or_else(|| panic!("no {cat} event with correlation {corr} in the JSON"));
    let args = e["args"].as_object().unwrap();
    args.iter()
        .filter(|(_, v)| !v.is_array())
        .map(|(k, v)| (perfetto_key(k), text(v)))
        .chain(args.iter().filter(|(_, v)| v.is_array()).map(|(k, v)| (k.clone(), v.to_string())))
        .collect()
}

/// The args of the first Perfetto slice of category `cat`, with its correlation id. Arrays (grid, block) come
/// back from the trace processor as one arg per element (`debug.grid[0]`): they are joined back into JSON's form.
fn perfetto_args(trace: &std::path::Path, cat: &str) -> (i64, Args) {
    let q = format!(
        "select a.key, a.int_value, a.real_value, a.string_value from args a where a.arg_set_id = (select \
         arg_set_id from slice where category = '{cat}' order by ts, id limit 1) and a.key like 'debug.%' order by a.key"
    );
    let rows = &trace_processor(trace, &[&q])[0];
    let mut args = Args::new();
    let mut arrays: BTreeMap<String, Vec<(usize, String)>> = BTreeMap::new();
    for r in rows {
        let key = r[0].as_str().unwrap().trim_start_matches("debug.").to_string();
        let value = match (&r[1], &r[2], &r[3]) {
            (Value::Number(n), _, _) => n.to_string(),
            (_, Value::Number(x), _) => format!("{:.6}", x.as_f64().unwrap()),
            (_, _, Value::String(s)) => s.clone(),
            other => panic!("arg {key} has no value: {other:?}"),
        };
        if let Some((name, index)) = key.strip_suffix(']').and_then(|k| k.split_once('[')) {
            arrays.entry(name.to_string()).or_default().push((index.parse().unwrap(), value));
        } else {
            args.insert(key, value);
        }
    }
    for (name, mut items) in arrays {
        items.sort();
        args.insert(name, format!("[{}]", items.into_iter().map(|i| i.1).collect::<Vec<_>>().join(",")));
    }
    let corr = args["correlation"].parse().unwrap();
    (corr, args)
}

#[test]
fn kernel_and_api_slices_carry_the_same_args_in_both_viewers() {
    let dir = tempfile::tempdir().unwrap();
    let src = cutr_tests::repo().join("fixtures/cuda_workload.cutr");
    let t = load(&[src], &LoadOptions::default()).unwrap();
    let (pftrace, json) = (dir.path().join("t.pftrace"), dir.path().join("t.json"));
    export(&t, &pftrace, &ExportOptions { format: Format::Perfetto, ..Default::default() }).unwrap();
    export(&t, &json, &ExportOptions { format: Format::Chrome, ..Default::default() }).unwrap();
    let doc: Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    let events = doc["traceEvents"].as_array().unwrap();

    let (corr, kernel) = perfetto_args(&pftrace, "kernel");
    assert_eq!(kernel, json_args(events, "kernel", corr), "the first kernel's args, Perfetto vs Chrome JSON");
    // The fields the Perfetto trace used to leave out, with the figures of this fixture's first kernel: a grid of
    // 1024 blocks of 256 threads on the H100's 132 SMs is 1024/132 blocks and 1024/132*256/32 warps per SM.
    let wanted = [
        ("queued", "0"),
        ("shared memory", "0"),
        ("blocks per SM", "7.757576"),
        ("warps per SM", "62.060606"),
        ("estimated achieved occupancy %", "97"),
    ];
    for (key, value) in wanted {
        assert_eq!(kernel.get(key).map(String::as_str), Some(value), "kernel arg {key}: {kernel:?}");
    }
    assert!(!kernel.keys().any(|k| k.contains('.')), "no Perfetto arg name holds a dot: {kernel:?}");

    let (corr, api) = perfetto_args(&pftrace, "cuda_runtime");
    assert_eq!(api, json_args(events, "cuda_runtime", corr), "the first runtime call's args");
    assert!(api.contains_key("cbid"), "{api:?}");
}
