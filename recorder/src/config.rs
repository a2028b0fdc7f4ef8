//! Recorder configuration: built by the Rust API, or read from `CUTR_*` environment variables by the injection
//! library (the `cupti-record` launcher turns its flags into those variables).

use std::path::PathBuf;
use std::time::Duration;

use cutr_schema::kinds;

use crate::units::{parse_duration, parse_size};
use thiserror::Error;

#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum ConfigError {
    #[error("{var}: {msg}")]
    Invalid { var: String, msg: String },
}

fn invalid(var: &str, msg: impl Into<String>) -> ConfigError {
    ConfigError::Invalid { var: var.to_string(), msg: msg.into() }
}

/// Named groups of CUPTI activity kinds, as `--kinds` accepts them.
pub const KIND_GROUPS: &[(&str, &[u32], &str)] = &[
    ("kernel", &[kinds::CONCURRENT_KERNEL], "kernels (concurrent kernel records; graph node ids included)"),
    ("runtime", &[kinds::RUNTIME], "CUDA runtime API calls"),
    ("driver", &[kinds::DRIVER], "CUDA driver API calls"),
    ("memcpy", &[kinds::MEMCPY, kinds::MEMCPY2], "memory copies, peer-to-peer included"),
    ("memset", &[kinds::MEMSET], "memsets"),
    ("sync", &[kinds::SYNCHRONIZATION], "stream, event and context synchronizations"),
    ("external", &[kinds::EXTERNAL_CORRELATION], "external correlation ids (PyTorch op ids)"),
    ("overhead", &[kinds::OVERHEAD], "CUPTI and driver overhead"),
    ("nvtx", &[kinds::MARKER, kinds::MARKER_DATA], "NVTX ranges and markers"),
    ("name", &[kinds::NAME], "NVTX names of threads, devices, streams"),
    ("memory", &[kinds::MEMORY2], "device memory allocations and frees"),
    ("memory-pool", &[kinds::MEMORY_POOL], "memory pool operations"),
    ("event", &[kinds::CUDA_EVENT], "CUDA event records"),
    ("graph-trace", &[kinds::GRAPH_TRACE], "whole CUDA graph launches instead of their nodes (cheaper)"),
    ("device", &[kinds::DEVICE], "device properties"),
    ("context", &[kinds::CONTEXT], "contexts"),
    ("stream", &[kinds::STREAM], "streams"),
    ("jit", &[kinds::JIT], "JIT compilation and cache"),
];

/// What the recorder enables unless told otherwise: PyTorch profiler's set (kernels, runtime and driver API,
/// copies, memsets, syncs, external correlation, overhead) plus NVTX, names, allocations and the devices.
pub const DEFAULT_GROUPS: &[&str] = &[
    "kernel", "runtime", "driver", "memcpy", "memset", "sync", "external", "overhead", "nvtx", "name", "memory",
    "device", "context", "event",
];

/// Parses a `--kinds` list: group names, `default`, `all`, or CUPTI kind numbers, comma-separated; `-name`
/// removes a group.
pub fn parse_kinds(spec: &str) -> Result<Vec<u32>, String> {
    let mut out: Vec<u32> = Vec::new();
    let add = |out: &mut Vec<u32>, ks: &[u32]| {
        for k in ks {
            if !out.contains(k) {
                out.push(*k);
            }
        }
    };
    for item in spec.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let (remove, name) = match item.strip_prefix('-') {
            Some(n) => (true, n),
            None => (false, item.strip_prefix('+').unwrap_or(item)),
        };
        let ks: Vec<u32> = match name {
            "default" => DEFAULT_GROUPS
                .iter()
                .flat_map(|g| KIND_GROUPS.iter().find(|e| e.0 == *g).unwrap().1.iter().copied())
                .collect(),
            "all" => KIND_GROUPS.iter().filter(|g| g.0 != "graph-trace").flat_map(|g| g.1.iter().copied()).collect(),
            _ => match KIND_GROUPS.iter().find(|g| g.0 == name) {
                Some(g) => g.1.to_vec(),
                None => match name.parse::<u32>() {
                    Ok(k) if kinds::name(k).is_some() => vec![k],
                    _ => {
                        let names: Vec<&str> = KIND_GROUPS.iter().map(|g| g.0).collect();
                        return Err(format!(
                            "unknown activity kind '{name}' (known: default, all, {})",
                            names.join(", ")
                        ));
                    }
                },
            },
        };
        if remove {
            out.retain(|k| !ks.contains(k));
        } else {
            add(&mut out, &ks);
        }
    }
    if out.is_empty() {
        return Err("no activity kinds selected".into());
    }
    Ok(out)
}

/// Longest a crash handler waits for the file to be closed by default (`Config::crash_timeout`).
pub const DEFAULT_CRASH_TIMEOUT: Duration = Duration::from_secs(2);

#[derive(Clone, Debug, PartialEq)]
pub struct Config {
    /// Output path; `%p` becomes the process id, `%h` the host name, `%%` a percent sign.
    pub output: String,
    /// CUPTI activity kinds to enable.
    pub kinds: Vec<u32>,
    /// Size of each activity buffer handed to CUPTI.
    pub buffer_bytes: usize,
    /// Most memory the recorder's buffers may take; beyond it, buffer requests are refused (and counted).
    pub memory_cap_bytes: usize,
    /// Buffers allocated up front, so that steady-state requests never allocate.
    pub initial_buffers: usize,
    /// How often completed buffers are collected and the file is synced, and clocks are sampled.
    pub flush_period: Duration,
    /// Start recording this long after CUDA initializes.
    pub start_delay: Duration,
    /// Stop recording after this long (the file is closed at exit).
    pub duration: Option<Duration>,
    /// On a crash (SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT), how long the file may take to be closed before the
    /// signal goes through anyway.
    pub crash_timeout: Duration,
    /// Accept control requests (SIGUSR1, `cupti-record ctl`): turn recording on and off, dump.
    pub control: bool,
    /// Start with recording off (with `control`, or the API, to turn it on).
    pub start_paused: bool,
    /// Flight recorder: keep only this window in memory, written at a dump, at exit or on a crash.
    pub ring: Option<crate::controls::ring::RingLimit>,
    /// Flight recorder: also write the window when these appear in the records (`--ring-trigger`).
    pub ring_triggers: Vec<crate::controls::triggers::RingTrigger>,
    /// Record only inside these ranges (`--capture-range`, `--capture-range-end`).
    pub capture: Option<(crate::controls::capture::CaptureRange, crate::controls::capture::CaptureEnd)>,
    pub zstd_level: i32,
    /// CUPTI's device-side buffer size (`CUPTI_ACTIVITY_ATTR_DEVICE_BUFFER_SIZE`); CUPTI's default when `None`.
    pub device_buffer_bytes: Option<usize>,
    /// CUPTI's device buffer pool limit; CUPTI's default when `None`.
    pub device_buffer_pool_limit: Option<usize>,
    /// Use this libcupti instead of searching for one.
    pub cupti_library: Option<PathBuf>,
    /// Skip the noisy API calls PyTorch's profiler also skips (cudaGetDevice, cuCtxGetCurrent, ...).
    pub filter_noisy_api: bool,
    /// Replace an existing output file (otherwise this process writes `<stem>.<pid>.cutr` beside it).
    pub overwrite: bool,
    pub quiet: bool,
    /// Continuous PC sampling and cubin capture (off by default).
    pub pc_sampling: Option<crate::pc_sampling::PcSamplingConfig>,
    /// Counter samples over time (`--counters`): `None` records none.
    pub counters: Option<crate::counters::CountersConfig>,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            output: "cutr-%p.cutr".into(),
            kinds: parse_kinds("default").unwrap(),
            buffer_bytes: 4 << 20,
            memory_cap_bytes: 256 << 20,
            initial_buffers: 4,
            flush_period: Duration::from_secs(1),
            start_delay: Duration::ZERO,
            crash_timeout: DEFAULT_CRASH_TIMEOUT,
            control: false,
            start_paused: false,
            ring: None,
            ring_triggers: Vec::new(),
            capture: None,
            duration: None,
            zstd_level: 3,
            device_buffer_bytes: None,
            device_buffer_pool_limit: None,
            cupti_library: None,
            filter_noisy_api: true,
            overwrite: false,
            quiet: false,
            pc_sampling: None,
            counters: None,
        }
    }
}

/// The environment variables of every option, with what they take.
pub const ENV_VARS: &[(&str, &str)] = &[
    ("CUTR_OUTPUT", "output path (%p = pid, %h = host name)"),
    ("CUTR_KINDS", "activity kinds (see --kinds)"),
    ("CUTR_BUFFER_SIZE", "bytes per CUPTI activity buffer, e.g. 4M"),
    ("CUTR_MEMORY_CAP", "most memory for buffers, e.g. 256M"),
    ("CUTR_INITIAL_BUFFERS", "buffers allocated at start"),
    ("CUTR_FLUSH_PERIOD", "seconds between flushes, e.g. 1 or 500ms"),
    ("CUTR_START_DELAY", "seconds to wait before recording"),
    ("CUTR_DURATION", "seconds to record"),
    ("CUTR_ZSTD_LEVEL", "zstd level of stored chunks"),
    ("CUTR_DEVICE_BUFFER_SIZE", "CUPTI device buffer size"),
    ("CUTR_DEVICE_BUFFER_POOL_LIMIT", "CUPTI device buffer pool limit"),
    ("CUTR_CUPTI_LIB", "path of the libcupti to use"),
    ("CUTR_FILTER_NOISY_API", "0 to keep cudaGetDevice & co."),
    ("CUTR_OVERWRITE", "1 to replace an existing output file"),
    ("CUTR_QUIET", "1 to print nothing but errors"),
    ("CUTR_PC_SAMPLING", "1 to sample PCs continuously and keep the cubins loaded"),
    ("CUTR_PC_PERIOD", "PC sampling period as 2^N SM cycles, N in 5..31"),
    ("CUTR_STALL_REASONS", "PC sampling stall reasons: default, all or a list"),
    ("CUTR_COUNTERS", "counters over time: default, nvml or a list of PM metrics"),
    ("CUTR_COUNTER_INTERVAL", "PM sampling interval, e.g. 100us"),
    ("CUTR_NVML_INTERVAL", "NVML sampling interval, e.g. 10ms, or off"),
    ("CUTR_CRASH_TIMEOUT", "longest wait to close the file on a crash, e.g. 2s"),
    ("CUTR_CONTROL", "1 to accept SIGUSR1 and `cupti-record ctl` requests"),
    ("CUTR_START_PAUSED", "1 to start with recording off"),
    ("CUTR_RING", "flight recorder window: a time (5s) or a size (512M)"),
    ("CUTR_RING_TRIGGERS", "flight recorder dumps on: nvtx:NAME, cuda-profiler-stop"),
    ("CUTR_CAPTURE_RANGE", "record only inside: cuda-profiler-api or nvtx:NAME[@DOMAIN]"),
    ("CUTR_CAPTURE_RANGE_END", "after a capture range: stop, repeat or repeat:N"),
];

impl Config {
    /// Reads the configuration from `CUTR_*` variables (unset ones keep their defaults).
    pub fn from_env() -> Result<Config, ConfigError> {
        Config::from_lookup(|k| std::env::var(k).ok())
    }

    pub fn from_lookup(get: impl Fn(&str) -> Option<String>) -> Result<Config, ConfigError> {
        let mut c = Config::default();
        if let Some(v) = get("CUTR_OUTPUT") {
            if v.is_empty() {
                return Err(invalid("CUTR_OUTPUT", "empty output path"));
            }
            c.output = v;
        }
        if let Some(v) = get("CUTR_KINDS") {
            c.kinds = parse_kinds(&v).map_err(|e| invalid("CUTR_KINDS", e))?;
        }
        let size = |var: &str| get(var).map(|v| parse_size(&v).map_err(|e| invalid(var, e))).transpose();
        let secs = |var: &str| get(var).map(|v| parse_duration(&v).map_err(|e| invalid(var, e))).transpose();
        let int = |var: &str| {
            get(var)
                .map(|v| v.trim().parse::<i64>().map_err(|_| invalid(var, format!("not a number: '{v}'"))))
                .transpose()
        };
        if let Some(v) = size("CUTR_BUFFER_SIZE")? {
            c.buffer_bytes = v;
        }
        if let Some(v) = size("CUTR_MEMORY_CAP")? {
            c.memory_cap_bytes = v;
        }
        if let Some(v) = int("CUTR_INITIAL_BUFFERS")? {
            c.initial_buffers = v.max(0) as usize;
        }
        if let Some(v) = secs("CUTR_FLUSH_PERIOD")? {
            c.flush_period = v;
        }
        if let Some(v) = secs("CUTR_START_DELAY")? {
            c.start_delay = v;
        }
        c.duration = secs("CUTR_DURATION")?;
        if let Some(v) = secs("CUTR_CRASH_TIMEOUT")? {
            c.crash_timeout = v;
        }
        c.control = get("CUTR_CONTROL").is_some_and(|v| v == "1");
        c.start_paused = get("CUTR_START_PAUSED").is_some_and(|v| v == "1");
        if let Some(v) = get("CUTR_CAPTURE_RANGE").filter(|v| !v.is_empty()) {
            let range =
                crate::controls::capture::CaptureRange::parse(&v).map_err(|e| invalid("CUTR_CAPTURE_RANGE", e))?;
            let end = match get("CUTR_CAPTURE_RANGE_END") {
                Some(e) => {
                    crate::controls::capture::CaptureEnd::parse(&e).map_err(|e| invalid("CUTR_CAPTURE_RANGE_END", e))?
                }
                None => crate::controls::capture::CaptureEnd::Stop,
            };
            c.capture = Some((range, end));
        }
        if let Some(v) = get("CUTR_RING").filter(|v| !v.is_empty()) {
            c.ring = Some(crate::controls::ring::RingLimit::parse(&v).map_err(|e| invalid("CUTR_RING", e))?);
        }
        if let Some(v) = get("CUTR_RING_TRIGGERS").filter(|v| !v.is_empty()) {
            c.ring_triggers =
                crate::controls::triggers::RingTrigger::parse_list(&v).map_err(|e| invalid("CUTR_RING_TRIGGERS", e))?;
        }
        if let Some(v) = int("CUTR_ZSTD_LEVEL")? {
            c.zstd_level = v as i32;
        }
        c.device_buffer_bytes = size("CUTR_DEVICE_BUFFER_SIZE")?;
        c.device_buffer_pool_limit = int("CUTR_DEVICE_BUFFER_POOL_LIMIT")?.map(|v| v.max(1) as usize);
        c.cupti_library = get("CUTR_CUPTI_LIB").filter(|v| !v.is_empty()).map(PathBuf::from);
        c.filter_noisy_api = get("CUTR_FILTER_NOISY_API").is_none_or(|v| v != "0");
        c.overwrite = get("CUTR_OVERWRITE").is_some_and(|v| v == "1");
        c.quiet = get("CUTR_QUIET").is_some_and(|v| v == "1");
        if get("CUTR_PC_SAMPLING").is_some_and(|v| v == "1") {
            let period_log2 = int("CUTR_PC_PERIOD")?.map(|v| v as u32);
            let stall_reasons = match get("CUTR_STALL_REASONS") {
                Some(v) => crate::pc_sampling::StallReasons::parse(&v).map_err(|e| invalid("stall reasons", e))?,
                None => Default::default(),
            };
            c.pc_sampling = Some(crate::pc_sampling::PcSamplingConfig { period_log2, stall_reasons });
        }
        if let Some(set) = get("CUTR_COUNTERS") {
            let nvml_interval = match get("CUTR_NVML_INTERVAL") {
                Some(v) if v == "off" => None,
                Some(v) => Some(parse_duration(&v).map_err(|e| invalid("NVML interval", e))?),
                None => Some(crate::counters::DEFAULT_NVML_INTERVAL),
            };
            let interval = match get("CUTR_COUNTER_INTERVAL") {
                Some(v) => parse_duration(&v).map_err(|e| invalid("counter interval", e))?,
                None => crate::counters::pm_sampling::DEFAULT_INTERVAL,
            };
            c.counters = Some(
                crate::counters::CountersConfig::parse(&set, interval, nvml_interval)
                    .map_err(|e| invalid("counters", e))?,
            );
        }
        c.validate()?;
        Ok(c)
    }

    /// The variables that give this configuration to an injected library.
    pub fn to_env(&self) -> Vec<(String, String)> {
        let mut v = vec![
            ("CUTR_OUTPUT".into(), self.output.clone()),
            ("CUTR_KINDS".into(), self.kinds.iter().map(u32::to_string).collect::<Vec<_>>().join(",")),
            ("CUTR_BUFFER_SIZE".into(), self.buffer_bytes.to_string()),
            ("CUTR_MEMORY_CAP".into(), self.memory_cap_bytes.to_string()),
            ("CUTR_INITIAL_BUFFERS".into(), self.initial_buffers.to_string()),
            ("CUTR_FLUSH_PERIOD".into(), format!("{}", self.flush_period.as_secs_f64())),
            ("CUTR_START_DELAY".into(), format!("{}", self.start_delay.as_secs_f64())),
            ("CUTR_CRASH_TIMEOUT".into(), format!("{}", self.crash_timeout.as_secs_f64())),
            ("CUTR_CONTROL".into(), if self.control { "1" } else { "0" }.into()),
            ("CUTR_START_PAUSED".into(), if self.start_paused { "1" } else { "0" }.into()),
            ("CUTR_RING".into(), self.ring.map(|r| r.to_arg()).unwrap_or_default()),
            ("CUTR_RING_TRIGGERS".into(), crate::controls::triggers::RingTrigger::list_arg(&self.ring_triggers)),
            ("CUTR_CAPTURE_RANGE".into(), self.capture.as_ref().map(|c| c.0.to_arg()).unwrap_or_default()),
            (
                "CUTR_CAPTURE_RANGE_END".into(),
                self.capture.as_ref().map(|c| c.1.to_arg()).unwrap_or_else(|| "stop".into()),
            ),
            ("CUTR_ZSTD_LEVEL".into(), self.zstd_level.to_string()),
            ("CUTR_FILTER_NOISY_API".into(), if self.filter_noisy_api { "1" } else { "0" }.into()),
            ("CUTR_QUIET".into(), if self.quiet { "1" } else { "0" }.into()),
            ("CUTR_OVERWRITE".into(), if self.overwrite { "1" } else { "0" }.into()),
        ];
        if let Some(d) = self.duration {
            v.push(("CUTR_DURATION".into(), format!("{}", d.as_secs_f64())));
        }
        if let Some(b) = self.device_buffer_bytes {
            v.push(("CUTR_DEVICE_BUFFER_SIZE".into(), b.to_string()));
        }
        if let Some(b) = self.device_buffer_pool_limit {
            v.push(("CUTR_DEVICE_BUFFER_POOL_LIMIT".into(), b.to_string()));
        }
        if let Some(p) = &self.cupti_library {
            v.push(("CUTR_CUPTI_LIB".into(), p.display().to_string()));
        }
        if let Some(pc) = &self.pc_sampling {
            v.push(("CUTR_PC_SAMPLING".into(), "1".into()));
            if let Some(n) = pc.period_log2 {
                v.push(("CUTR_PC_PERIOD".into(), n.to_string()));
            }
            v.push(("CUTR_STALL_REASONS".into(), pc.stall_reasons.to_arg()));
        }
        if let Some(c) = &self.counters {
            v.push(("CUTR_COUNTERS".into(), c.set_arg()));
            if let Some(pm) = &c.pm {
                v.push(("CUTR_COUNTER_INTERVAL".into(), format!("{}us", pm.interval.as_micros())));
            }
            let nvml = c.nvml_interval.map_or("off".to_string(), |d| format!("{}s", d.as_secs_f64()));
            v.push(("CUTR_NVML_INTERVAL".into(), nvml));
        }
        v
    }

    pub fn validate(&self) -> Result<(), ConfigError> {
        if !(64 << 10..=1 << 30).contains(&self.buffer_bytes) || !self.buffer_bytes.is_multiple_of(8) {
            return Err(invalid(
                "buffer size",
                format!("{} bytes: use a multiple of 8 between 64K and 1G", self.buffer_bytes),
            ));
        }
        if self.memory_cap_bytes < self.buffer_bytes * 2 {
            return Err(invalid(
                "memory cap",
                format!("{} bytes is less than two buffers ({} bytes each)", self.memory_cap_bytes, self.buffer_bytes),
            ));
        }
        if self.flush_period < Duration::from_millis(10) {
            return Err(invalid("flush period", "must be at least 10ms"));
        }
        if !(-7..=22).contains(&self.zstd_level) {
            return Err(invalid("zstd level", format!("{} is outside -7..=22", self.zstd_level)));
        }
        if let Some(n) = self.pc_sampling.as_ref().and_then(|p| p.period_log2)
            && !(5..=31).contains(&n)
        {
            return Err(invalid("PC sampling period", format!("2^{n} cycles: use an exponent from 5 to 31")));
        }
        if let Some(d) = self.counters.as_ref().and_then(|c| c.nvml_interval)
            && d < crate::counters::MIN_NVML_INTERVAL
        {
            return Err(invalid("NVML interval", format!("{d:?} is shorter than 1ms")));
        }
        Ok(())
    }

    /// Key/value pairs recorded in the file's metadata.
    pub fn describe(&self) -> Vec<(String, String)> {
        let mut v = self.to_env();
        v.retain(|(k, _)| k != "CUTR_QUIET");
        v.into_iter().map(|(k, val)| (k.trim_start_matches("CUTR_").to_ascii_lowercase(), val)).collect()
    }

    /// How many buffers fit under the memory cap.
    pub fn max_buffers(&self) -> usize {
        (self.memory_cap_bytes / self.buffer_bytes).max(2)
    }
}

/// Expands `%p` (pid), `%h` (host name) and `%%` in an output path.
pub fn expand_output(template: &str, pid: u32, host: &str) -> String {
    let mut out = String::with_capacity(template.len() + 16);
    let mut chars = template.chars();
    while let Some(c) = chars.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('p') => out.push_str(&pid.to_string()),
            Some('h') => out.push_str(host),
            Some('%') => out.push('%'),
            Some(other) => {
                out.push('%');
                out.push(other);
            }
            None => out.push('%'),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

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
}
