//! What the file says about where it was recorded: the session metadata, host name, clock samples.

use cutr_format::{ClockSample, SessionMetadata};
use cutr_schema::LayoutTable;

use crate::config::Config;
use crate::ffi::cupti::Cupti;
use crate::ffi::driver;
use crate::ffi::os;
pub(super) use os::host_name;

pub(super) fn clock_sample(cupti: &dyn Cupti) -> Option<ClockSample> {
    let realtime_ns = os::clock_ns(libc::CLOCK_REALTIME)?;
    let cupti_ns = cupti.timestamp().ok()?;
    let monotonic_ns = os::clock_ns(libc::CLOCK_MONOTONIC)?;
    Some(ClockSample { cupti_ns, realtime_ns, monotonic_ns })
}

pub(super) fn metadata(
    cupti: &dyn Cupti,
    config: &Config,
    layouts: &LayoutTable,
    api: u32,
    pid: u32,
) -> SessionMetadata {
    let mut callback_names = Vec::new();
    for (domain, max) in [(1u32, 2048u32), (2u32, 2048u32)] {
        let mut misses = 0;
        for cbid in 1..max {
            match cupti.callback_name(domain, cbid) {
                Some(n) if !n.is_empty() => {
                    misses = 0;
                    callback_names.push((domain, cbid, n));
                }
                _ => {
                    misses += 1;
                    if misses > 64 {
                        break;
                    }
                }
            }
        }
    }
    let cmdline: Vec<String> = std::fs::read("/proc/self/cmdline")
        .map(|b| {
            b.split(|&c| c == 0).filter(|s| !s.is_empty()).map(|s| String::from_utf8_lossy(s).into_owned()).collect()
        })
        .unwrap_or_default();
    let start = clock_sample(cupti).map(|c| c.realtime_ns).unwrap_or(0);
    let mut environment = vec![("cupti_library".to_string(), cupti.origin())];
    // The launchers' rank variables (torchrun, Open MPI, MPICH/PMI, Slurm): the converter labels and orders the
    // processes of a job by them.
    const JOB_VARIABLES: &[&str] = &[
        "CUDA_VISIBLE_DEVICES",
        "RANK",
        "LOCAL_RANK",
        "WORLD_SIZE",
        "LOCAL_WORLD_SIZE",
        "OMPI_COMM_WORLD_RANK",
        "OMPI_COMM_WORLD_SIZE",
        "OMPI_COMM_WORLD_LOCAL_RANK",
        "PMI_RANK",
        "PMI_SIZE",
        "SLURM_JOB_ID",
        "SLURM_PROCID",
        "SLURM_NTASKS",
        "SLURM_LOCALID",
    ];
    for var in JOB_VARIABLES {
        if let Ok(v) = std::env::var(var) {
            environment.push((var.to_string(), v));
        }
    }
    SessionMetadata {
        writer: "cutr-recorder".into(),
        writer_version: env!("CARGO_PKG_VERSION").into(),
        cupti_api_version: api,
        cuda_driver_version: driver::driver_version().unwrap_or(0),
        cuda_runtime_version: driver::runtime_version().unwrap_or(0),
        host: os::host_name(),
        pid,
        ppid: std::os::unix::process::parent_id(),
        command_line: cmdline,
        start_unix_ns: start,
        thread_id_type: 1,
        config: config.describe(),
        devices: Vec::new(),
        layouts: Some(layouts.clone()),
        callback_names,
        environment,
        synthetic: false,
        mappings: Vec::new(),
    }
}
