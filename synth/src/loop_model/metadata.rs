//! The session metadata of a synthetic run: an H100 host, the API functions the loop calls.

use cutr_format::{Device, SessionMetadata};
use cutr_schema::callbacks::{self, DOMAIN_DRIVER, DOMAIN_RUNTIME, runtime as cb};

use super::*;

impl Synth {
    /// Session metadata describing a synthetic H100 run.
    pub fn metadata(&self) -> SessionMetadata {
        // The names of the API functions this generator calls (a recorder stores every name libcupti knows).
        let um = self.um_slots.is_some();
        let used = [
            (DOMAIN_RUNTIME, cb::CUDA_MALLOC),
            (DOMAIN_RUNTIME, cb::CUDA_MEMCPY),
            (DOMAIN_RUNTIME, cb::CUDA_MEMCPY_ASYNC),
            (DOMAIN_RUNTIME, cb::CUDA_MEMSET_ASYNC),
            (DOMAIN_RUNTIME, cb::CUDA_STREAM_SYNCHRONIZE),
            (DOMAIN_RUNTIME, cb::CUDA_EVENT_RECORD),
            (DOMAIN_RUNTIME, cb::CUDA_STREAM_WAIT_EVENT),
            (DOMAIN_RUNTIME, cb::CUDA_LAUNCH_KERNEL),
            (DOMAIN_RUNTIME, cb::CUDA_GRAPH_LAUNCH),
            (DOMAIN_DRIVER, DRIVER_LAUNCH_KERNEL),
        ];
        let um_used = [
            (DOMAIN_RUNTIME, um::CUDA_FREE),
            (DOMAIN_RUNTIME, um::CUDA_MALLOC_MANAGED),
            (DOMAIN_RUNTIME, um::CUDA_MEM_PREFETCH_ASYNC),
            (DOMAIN_RUNTIME, cb::CUDA_DEVICE_SYNCHRONIZE),
        ];
        let callback_names = used
            .iter()
            .chain(if um { &um_used[..] } else { &[] })
            .map(|&(d, c)| (d, c, callbacks::raw_name(d, c).expect("cbid in the CUDA 13.0 headers").to_string()))
            .collect();
        SessionMetadata {
            writer: "cutr-synth".into(),
            writer_version: env!("CARGO_PKG_VERSION").into(),
            cupti_api_version: self.opts.cupti_api_version,
            cuda_driver_version: 13000,
            cuda_runtime_version: if self.opts.cupti_api_version == 28 { 12090 } else { 13000 },
            host: match self.opts.rank {
                Some((r, _)) => format!("synthetic-host-{}", r / 8),
                None => "synthetic-host".into(),
            },
            pid: PID,
            ppid: 1,
            command_line: vec!["python".into(), "train.py".into(), format!("--seed={}", self.opts.seed)],
            start_unix_ns: self.t0,
            thread_id_type: 0,
            config: vec![
                ("records".into(), self.opts.records.to_string()),
                ("seed".into(), self.opts.seed.to_string()),
                ("buffer_bytes".into(), self.opts.buffer_bytes.to_string()),
            ],
            // The unified memory episodes prefetch to a second GPU.
            devices: (0..if um { 2 } else { 1 })
                .map(|id| Device {
                    id: DEVICE_ID + id,
                    name: "NVIDIA H100 80GB HBM3 (synthetic)".into(),
                    uuid: (0u8..16).map(|b| b + 16 * id as u8).collect(),
                    pci_bus_id: format!("0000:{:02x}:00.0", 0x19 + id),
                    compute_major: 9,
                    compute_minor: 0,
                    multiprocessors: 132,
                    total_memory_bytes: 85_029_158_912,
                    properties: vec![("warpSize".into(), "32".into()), ("maxThreadsPerBlock".into(), "1024".into())],
                })
                .collect(),
            layouts: Some(self.l.table.clone()),
            callback_names,
            environment: match self.opts.rank {
                Some((r, w)) => vec![("RANK".into(), r.to_string()), ("WORLD_SIZE".into(), w.to_string())],
                None => Vec::new(),
            },
            synthetic: true,
            mappings: if um { self.opts.um_host.mappings.clone() } else { Vec::new() },
        }
    }
}
