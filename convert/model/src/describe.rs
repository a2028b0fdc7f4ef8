//! Display strings for CUPTI enumerations, exactly as PyTorch's profiler (Kineto) writes them, so tools keyed on
//! Kineto's names (HTA classifies kernels by `^Memcpy`, `^Memset`) work on our output.

/// `CUpti_ActivityMemcpyKind` -> `HtoD`, `DtoH`...
pub fn memcpy_kind(k: u8) -> &'static str {
    match k {
        1 => "HtoD",
        2 => "DtoH",
        3 => "HtoA",
        4 => "AtoH",
        5 => "AtoA",
        6 => "AtoD",
        7 => "DtoA",
        8 => "DtoD",
        9 => "HtoH",
        10 => "PtoP",
        _ => "<unknown>",
    }
}

/// `CUpti_ActivityMemoryKind` -> `Pageable`, `Pinned`, `Device`...
pub fn memory_kind(k: u32) -> &'static str {
    match k {
        0 => "Unknown",
        1 => "Pageable",
        2 => "Pinned",
        3 => "Device",
        4 => "Array",
        5 => "Managed",
        6 => "Device Static",
        7 => "Managed Static",
        0x7fff_ffff => "Force Int",
        _ => "Unrecognized",
    }
}

/// `Memcpy HtoD (Pageable -> Device)`.
pub fn memcpy_name(copy_kind: u8, src: u8, dst: u8) -> String {
    format!("Memcpy {} ({} -> {})", memcpy_kind(copy_kind), memory_kind(src as u32), memory_kind(dst as u32))
}

/// `Memset (Device)`.
pub fn memset_name(memory: u16) -> String {
    format!("Memset ({})", memory_kind(memory as u32))
}

/// `CUpti_ActivitySynchronizationType` -> `Stream Sync`...
pub fn sync_type(t: u32) -> &'static str {
    match t {
        1 => "Event Sync",
        2 => "Stream Wait Event",
        3 => "Stream Sync",
        4 => "Context Sync",
        _ => "Unknown Sync",
    }
}

/// `CUpti_ActivityOverheadKind` -> `Instrumentation`...
pub fn overhead_kind(k: u32) -> &'static str {
    match k {
        0 => "Unknown",
        1 => "Driver Compiler",
        0x1_0000 => "Buffer Flush",
        0x2_0000 => "Instrumentation",
        0x3_0000 => "Resource",
        0x4_0000 => "Runtime Triggered Module Loading",
        0x5_0000 => "Lazy Function Loading",
        0x6_0000 => "Command Buffer Full",
        0x7_0000 => "Activity Buffer Request",
        0x7fff_ffff => "Force Int",
        _ => "Unrecognized",
    }
}

/// `CUpti_ActivityLaunchType` -> `regular`, `cooperative`...
pub fn launch_type(t: u8) -> &'static str {
    match t {
        0 => "regular",
        1 => "cooperative (single device)",
        2 => "cooperative (multi device)",
        3 => "CBL command list",
        _ => "unknown",
    }
}

/// `CUpti_ChannelType` -> `compute`, `async memcpy`...
pub fn channel_type(t: u8) -> &'static str {
    match t {
        1 => "compute",
        2 => "async memcpy",
        3 => "decompression",
        _ => "invalid",
    }
}

/// `CUclusterSchedulingPolicy` -> `default`, `spread`, `load balancing`.
pub fn cluster_policy(p: u8) -> &'static str {
    match p {
        0 => "default",
        1 => "spread",
        2 => "load balancing",
        _ => "unknown",
    }
}

/// Runtime and driver API functions whose records start a CPU->GPU arrow in Kineto's traces (its cbid registry),
/// extended with the per-thread-stream variants and graph/driver launches that launch GPU work just the same.
pub fn starts_flow(driver: bool, cbid: u32) -> bool {
    if driver {
        matches!(cbid, 307 | 442 | 477 | 478 | 514 | 515 | 652 | 653)
    } else {
        matches!(cbid, 31..=52 | 131 | 147 | 165 | 211 | 214 | 269 | 272 | 311 | 312 | 430 | 431)
    }
}

/// `CUpti_ActivityUnifiedMemoryMigrationCause` (the `flags` of a migration).
pub fn um_migration_cause(flags: u32) -> &'static str {
    match flags {
        0 => "unknown",
        1 => "user",
        2 => "coherence",
        3 => "prefetch",
        4 => "eviction",
        5 => "access counters",
        _ => "unrecognized",
    }
}

/// `CUpti_ActivityUnifiedMemoryAccessType` (the `flags` of a GPU page fault).
pub fn um_access_type(flags: u32) -> &'static str {
    match flags {
        0 => "unknown",
        1 => "read",
        2 => "write",
        3 => "atomic",
        4 => "prefetch",
        _ => "unrecognized",
    }
}

/// `CUpti_ActivityUnifiedMemoryRemoteMapCause` (the `flags` of a remote map).
pub fn um_remote_map_cause(flags: u32) -> &'static str {
    match flags {
        0 => "unknown",
        1 => "coherence",
        2 => "thrashing",
        3 => "policy",
        4 => "out of memory",
        5 => "eviction",
        _ => "unrecognized",
    }
}

/// What a unified memory event's `flags` say, by its kind: the cause of a migration or remote map, the access
/// type of a page fault; empty for the kinds whose flags are CUPTI's generic activity flags.
pub fn um_flags(e: &crate::rows::UmEvent) -> &'static str {
    use crate::rows::UmKind::*;
    match e.kind {
        BytesHtoD | BytesDtoH | BytesDtoD => um_migration_cause(e.flags),
        // CUDA 13 gives CPU page faults an access type too (read 1, write 2 on an H100).
        GpuPageFault | CpuPageFault => um_access_type(e.flags),
        RemoteMap => um_remote_map_cause(e.flags),
        Thrashing | Throttling => "",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kineto_strings() {
        assert_eq!(memcpy_name(1, 1, 3), "Memcpy HtoD (Pageable -> Device)");
        assert_eq!(memcpy_name(8, 3, 3), "Memcpy DtoD (Device -> Device)");
        assert_eq!(memcpy_name(42, 9, 3), "Memcpy <unknown> (Unrecognized -> Device)");
        assert_eq!(memset_name(3), "Memset (Device)");
        assert_eq!(sync_type(3), "Stream Sync");
        assert_eq!(overhead_kind(2 << 16), "Instrumentation");
        assert!(starts_flow(false, 211) && starts_flow(true, 307) && !starts_flow(false, 17));
    }
}
