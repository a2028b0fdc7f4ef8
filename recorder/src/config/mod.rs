//! Recorder configuration: built by the Rust API, or read from `CUTR_*` environment variables by the injection
//! library (the `cupti-record` launcher turns its flags into those variables). `Config` and its variables are
//! declared together in `config/options.rs`; here is what reads and checks them, and the activity kinds.

mod options;
mod output;
mod table;

use std::time::Duration;

use cutr_schema::kinds;
use thiserror::Error;

pub use options::{Config, OPTIONS};
pub use output::{SplitLimit, expand_output, expand_output_part, has_part_number};
pub use table::{Flag, Opt, Takes};

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
    (
        "um",
        &[kinds::UNIFIED_MEMORY_COUNTER],
        "unified memory migrations, page faults, thrashing (as --um; not in default)",
    ),
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

/// Longest a control action waits for the records of work in flight by default (`Config::control_wait`).
pub const DEFAULT_CONTROL_WAIT: Duration = Duration::from_secs(2);
/// Longest a crash handler waits for the file to be closed by default (`Config::crash_timeout`).
pub const DEFAULT_CRASH_TIMEOUT: Duration = Duration::from_secs(2);

impl Config {
    /// Reads the configuration from `CUTR_*` variables (unset ones keep their defaults).
    pub fn from_env() -> Result<Config, ConfigError> {
        Config::from_lookup(|k| std::env::var(k).ok())
    }

    /// Reads the configuration from variables (`get` gives a variable's text, `None` when unset); unset ones
    /// keep their defaults.
    pub fn from_lookup(get: impl Fn(&str) -> Option<String>) -> Result<Config, ConfigError> {
        let mut c = Config::default();
        for o in OPTIONS {
            if let Some(v) = get(o.var) {
                (o.parse)(&mut c, &v).map_err(|e| invalid(o.var, e))?;
            }
        }
        c.validate()?;
        Ok(c)
    }

    /// The activity kinds to enable: `kinds`, and unified memory's with `um`.
    pub fn activity_kinds(&self) -> Vec<u32> {
        let mut k = self.kinds.clone();
        if self.um && !k.contains(&kinds::UNIFIED_MEMORY_COUNTER) {
            k.push(kinds::UNIFIED_MEMORY_COUNTER);
        }
        k
    }

    /// The variables that give this configuration to an injected library.
    pub fn to_env(&self) -> Vec<(String, String)> {
        OPTIONS.iter().filter_map(|o| Some((o.var.to_string(), (o.format)(self)?))).collect()
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

    /// What a session needs of `--split`, checked at start and by the launcher, apart from [`Config::validate`]
    /// (which the round trip of every option at once must pass). `--split` needs `%n` in the output path (else every part would have one name), and no `--ring` (a
    /// flight recorder keeps a window in memory and writes it whole: there is no stream of records to cut).
    pub fn validate_split(&self) -> Result<(), ConfigError> {
        if self.split.is_some() && !has_part_number(&self.output) {
            return Err(invalid(
                "--split",
                format!("the output path '{}' has no %n for the part number (e.g. -o run-%n.cutr)", self.output),
            ));
        }
        if self.split.is_some() && self.ring.is_some() {
            return Err(invalid("--split", "--split and --ring cannot be combined: a flight recording is one window"));
        }
        Ok(())
    }

    /// Key/value pairs recorded in the file's metadata: the variables, named without `CUTR_` in lower case.
    pub fn describe(&self) -> Vec<(String, String)> {
        let recorded = OPTIONS.iter().filter(|o| o.recorded);
        recorded
            .filter_map(|o| Some((o.var.trim_start_matches("CUTR_").to_ascii_lowercase(), (o.format)(self)?)))
            .collect()
    }

    /// How many buffers fit under the memory cap.
    pub fn max_buffers(&self) -> usize {
        (self.memory_cap_bytes / self.buffer_bytes).max(2)
    }
}

#[cfg(test)]
mod tests;
