//! The configuration's tests: the table of options (every option through the environment and back, the metadata
//! it writes), the activity kinds, output paths.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use super::*;
use crate::controls::capture::{CaptureEnd, CaptureRange};
use crate::controls::ring::RingLimit;
use crate::controls::triggers::RingTrigger;
use crate::counters::CountersConfig;
use crate::counters::pm_sampling::PmConfig;
use crate::pc_sampling::{PcSamplingConfig, StallReasons};

#[test]
fn kinds_lists() {
    let d = parse_kinds("default").unwrap();
    assert!(d.contains(&kinds::CONCURRENT_KERNEL) && d.contains(&kinds::MARKER) && d.contains(&kinds::MEMCPY2));
    // Event records name the event a stream waited on (Kineto's wait_on_* arguments); graph traces replace the
    // graph's kernel records, so they are asked for, never default.
    assert!(d.contains(&kinds::CUDA_EVENT) && !d.contains(&kinds::GRAPH_TRACE));
    assert_eq!(parse_kinds("kernel,runtime").unwrap(), vec![10, 5]);
    assert_eq!(parse_kinds("kernel,runtime,-runtime,39").unwrap(), vec![10, 39]);
    let no_driver = parse_kinds("default,-driver").unwrap();
    assert_eq!(no_driver.len(), d.len() - 1);
    assert!(parse_kinds("kernal").unwrap_err().contains("unknown activity kind 'kernal'"));
    assert!(parse_kinds("kernel,-kernel").is_err());
    assert!(parse_kinds("999").is_err());
}

#[test]
fn output_paths_expand() {
    assert_eq!(expand_output("run-%p-%h-100%%.cutr", 42, "gpu1"), "run-42-gpu1-100%.cutr");
}

/// `--split` without `%n` in the path, or with `--ring`, is refused at start with the reason.
#[test]
fn a_split_needs_a_part_number_and_no_ring() {
    let split = Some(SplitLimit::Every(Duration::from_secs(60)));
    let no_n = Config { split, ..Config::default() };
    assert_eq!(
        no_n.validate_split().unwrap_err().to_string(),
        "--split: the output path 'cutr-%p.cutr' has no %n for the part number (e.g. -o run-%n.cutr)"
    );
    let ring = Config {
        split,
        output: "run-%n.cutr".into(),
        ring: Some(RingLimit { window: Some(Duration::from_secs(5)), bytes: None }),
        ..Config::default()
    };
    assert_eq!(
        ring.validate_split().unwrap_err().to_string(),
        "--split: --split and --ring cannot be combined: a flight recording is one window"
    );
    assert_eq!(Config { split, output: "run-%n.cutr".into(), ..Config::default() }.validate_split(), Ok(()));
    // %n without --split: one file, part 1.
    assert_eq!(Config { output: "run-%n.cutr".into(), ..Config::default() }.validate_split(), Ok(()));
}

#[test]
fn env_round_trip_and_errors() {
    let c = Config {
        output: "x-%p.cutr".into(),
        kinds: vec![10, 5],
        duration: Some(Duration::from_secs(3)),
        device_buffer_bytes: Some(3_200_000),
        ..Default::default()
    };
    let env: HashMap<String, String> = c.to_env().into_iter().collect();
    let back = Config::from_lookup(|k| env.get(k).cloned()).unwrap();
    assert_eq!(back, c);
    let bad = Config::from_lookup(|k| (k == "CUTR_BUFFER_SIZE").then(|| "12".to_string())).unwrap_err();
    assert!(bad.to_string().starts_with("buffer size: 12 bytes"), "{bad}");
    let bad = Config::from_lookup(|k| (k == "CUTR_KINDS").then(|| "nope".to_string())).unwrap_err();
    assert!(bad.to_string().starts_with("CUTR_KINDS: unknown activity kind"), "{bad}");
}

/// Every option away from its default, each variable of a field included (a capture range's end, the PC
/// sampling period, the counter intervals).
fn all_changed() -> Config {
    Config {
        output: "run-%h.cutr".into(),
        kinds: vec![kinds::CONCURRENT_KERNEL, kinds::RUNTIME],
        um: true,
        graph_context: Some(12),
        buffer_bytes: 8 << 20,
        memory_cap_bytes: 64 << 20,
        initial_buffers: 2,
        flush_period: Duration::from_millis(250),
        start_delay: Duration::from_millis(1500),
        duration: Some(Duration::from_secs(30)),
        control: true,
        control_wait: Duration::from_millis(500),
        start_paused: true,
        capture: Some((
            CaptureRange::Nvtx { name: "step".into(), domain: Some("train".into()) },
            CaptureEnd::Repeat(Some(3)),
        )),
        split: Some(SplitLimit::Every(Duration::from_secs(60))),
        ring: Some(RingLimit { window: Some(Duration::from_secs(5)), bytes: None }),
        ring_triggers: vec![RingTrigger::Nvtx("oops".into()), RingTrigger::CudaProfilerStop],
        crash_timeout: Duration::ZERO,
        zstd_level: 9,
        device_buffer_bytes: Some(16 << 20),
        device_buffer_pool_limit: Some(8),
        cupti_library: Some("/opt/cuda/lib64/libcupti.so.13".into()),
        filter_noisy_api: false,
        overwrite: true,
        quiet: true,
        pc_sampling: Some(PcSamplingConfig {
            period_log2: Some(12),
            stall_reasons: StallReasons::Only(vec!["long_scoreboard".into(), "wait".into()]),
        }),
        counters: Some(CountersConfig {
            nvml_interval: Some(Duration::from_millis(20)),
            pm: Some(PmConfig { metrics: vec!["a__b.sum".into()], interval: Duration::from_micros(50) }),
        }),
        counters_whole_run: true,
    }
}

fn vars(env: &[(String, String)]) -> Vec<&str> {
    env.iter().map(|(k, _)| k.as_str()).collect()
}

#[test]
fn every_option_round_trips_through_the_environment() {
    let c = all_changed();
    let env = c.to_env();
    // Every variable is written (none is at the default that leaves it unset), in the table's order.
    assert_eq!(vars(&env), OPTIONS.iter().map(|o| o.var).collect::<Vec<_>>());
    let map: HashMap<String, String> = env.into_iter().collect();
    assert_eq!(Config::from_lookup(|k| map.get(k).cloned()), Ok(c));
    let d = Config::default();
    let map: HashMap<String, String> = d.to_env().into_iter().collect();
    assert_eq!(Config::from_lookup(|k| map.get(k).cloned()), Ok(d));
}

/// Names every field of `Config` with no `..`, so that a field added to `Config` fails to compile here until it
/// is listed: that is the intent. Each listed field must have a variable in `OPTIONS` (`options!` demands one
/// too) and a value in `all_changed()` other than its default, so that the round trip above covers it.
#[test]
fn every_field_has_a_variable_and_is_changed_by_the_round_trip() {
    macro_rules! fields {
        ($($f:ident),* $(,)?) => {{
            let Config { $($f),* } = all_changed();
            let d = Config::default();
            $(
                assert_ne!($f, d.$f, "all_changed() leaves {} at its default", stringify!($f));
                assert!(OPTIONS.iter().any(|o| o.field == stringify!($f)), "no variable sets {}", stringify!($f));
            )*
            vec![$(stringify!($f)),*]
        }};
    }
    let fields = fields!(
        output,
        kinds,
        um,
        graph_context,
        buffer_bytes,
        memory_cap_bytes,
        initial_buffers,
        flush_period,
        start_delay,
        duration,
        control,
        control_wait,
        start_paused,
        capture,
        split,
        ring,
        ring_triggers,
        crash_timeout,
        zstd_level,
        device_buffer_bytes,
        device_buffer_pool_limit,
        cupti_library,
        filter_noisy_api,
        overwrite,
        quiet,
        pc_sampling,
        counters,
        counters_whole_run,
    );
    let in_table: HashSet<&str> = OPTIONS.iter().map(|o| o.field).collect();
    assert_eq!(in_table, fields.into_iter().collect());
}

/// The metadata of recordings already made carries these keys and texts: they must not change.
#[test]
fn the_metadata_keeps_its_keys_and_formats() {
    let pairs = |c: &Config| c.describe().into_iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>();
    let kinds = Config::default().kinds.iter().map(u32::to_string).collect::<Vec<_>>().join(",");
    assert_eq!(
        pairs(&Config::default()),
        [
            "output=cutr-%p.cutr".to_string(),
            format!("kinds={kinds}"),
            "um=0".to_string(),
            "graph_context=48".into(),
            "buffer_size=4194304".into(),
            "memory_cap=268435456".into(),
            "initial_buffers=4".into(),
            "flush_period=1".into(),
            "start_delay=0".into(),
            "control=0".into(),
            "control_wait=2".into(),
            "start_paused=0".into(),
            "capture_range=".into(),
            "capture_range_end=stop".into(),
            "split=".into(),
            "ring=".into(),
            "ring_triggers=".into(),
            "crash_timeout=2".into(),
            "zstd_level=3".into(),
            "filter_noisy_api=1".into(),
            "overwrite=0".into(),
            "counters_whole_run=0".into(),
        ]
    );
    assert_eq!(
        pairs(&all_changed()),
        [
            "output=run-%h.cutr",
            "kinds=10,5",
            "um=1",
            "graph_context=12",
            "buffer_size=8388608",
            "memory_cap=67108864",
            "initial_buffers=2",
            "flush_period=0.25",
            "start_delay=1.5",
            "duration=30",
            "control=1",
            "control_wait=0.5",
            "start_paused=1",
            "capture_range=nvtx:step@train",
            "capture_range_end=repeat:3",
            "split=60s",
            "ring=5000ms",
            "ring_triggers=nvtx:oops,cuda-profiler-stop",
            "crash_timeout=0",
            "zstd_level=9",
            "device_buffer_size=16777216",
            "device_buffer_pool_limit=8",
            "cupti_lib=/opt/cuda/lib64/libcupti.so.13",
            "filter_noisy_api=0",
            "overwrite=1",
            "pc_sampling=1",
            "pc_period=12",
            "stall_reasons=long_scoreboard,wait",
            "counters=a__b.sum",
            "counter_interval=50us",
            "nvml_interval=0.02s",
            "counters_whole_run=1",
        ]
    );
}

/// The defaults `--help` shows are the configuration's: given as flags, they change nothing, with the option
/// they refine on (`--capture-range-end stop` after `--capture-range`) or without it.
#[test]
fn flag_defaults_are_the_configuration_defaults() {
    let refined = Config {
        capture: Some((CaptureRange::ProfilerApi, CaptureEnd::Stop)),
        pc_sampling: Some(PcSamplingConfig::default()),
        counters: Some(CountersConfig::default()),
        ..Config::default()
    };
    let mut checked = 0;
    for base in [Config::default(), refined] {
        for o in OPTIONS {
            let Some(d) = o.flag.and_then(|f| f.default) else { continue };
            let mut c = base.clone();
            (o.parse)(&mut c, d).unwrap();
            assert_eq!(c, base, "{} {d}", o.var);
            checked += 1;
        }
    }
    assert_eq!(checked, 2 * 12);
}

/// Names are unique; a flag's `requires` names an earlier variable's flag (read first, so that a variable
/// refining another's field finds it set); `implies` names a switch.
#[test]
fn the_table_is_consistent() {
    let mut vars = HashSet::new();
    let mut longs: HashMap<&str, (usize, &Opt)> = HashMap::new();
    let mut shorts = HashSet::new();
    for (i, o) in OPTIONS.iter().enumerate() {
        assert!(o.var.starts_with("CUTR_") && vars.insert(o.var), "{}", o.var);
        assert!(!o.help.is_empty(), "{}", o.var);
        if let Some(f) = o.flag {
            assert!(longs.insert(f.long, (i, o)).is_none(), "--{}", f.long);
            assert!(f.short.is_none_or(|s| shorts.insert(s)), "--{}", f.long);
        }
    }
    for (i, o) in OPTIONS.iter().enumerate() {
        let Some(f) = o.flag else { continue };
        if let Some(r) = f.requires {
            assert!(longs[r].0 < i, "--{} requires --{r}", f.long);
        }
        if let Some(r) = f.implies {
            assert!(matches!(longs[r].1.flag.unwrap().takes, Takes::Switch(_)), "--{} implies --{r}", f.long);
        }
    }
    assert_eq!((OPTIONS.len(), longs.len()), (33, 30));
}
