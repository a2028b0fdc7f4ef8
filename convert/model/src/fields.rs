//! The CUPTI record fields the model reads, declared once per record kind by their names in NVIDIA's structs.
//!
//! Each declaration makes a struct of [`FieldReader`]s, looked up once per file in that file's layout table, with
//! one named reader per field: `kernel.correlation(rec)`. Records of CUPTI 12.9 and 13.0 (or any later layout a
//! file carries) decode alike; a field the file's layout lacks reads as 0.

use cutr_format::records::FieldReader;
use cutr_schema::{LayoutTable, RecordLayout, kinds};

/// A field value as the model stores it, converted from the record's little-endian integer.
pub(crate) trait FieldValue: Sized {
    fn read(field: Option<FieldReader>, rec: &[u8]) -> Self;
}

impl FieldValue for u64 {
    #[inline]
    fn read(field: Option<FieldReader>, rec: &[u8]) -> u64 {
        field.map_or(0, |f| f.u64(rec))
    }
}

/// Narrower unsigned values keep the low bits (CUPTI enums are 32-bit in the structs, small in value).
macro_rules! narrow_field {
    ($($t:ty),*) => {$(
        impl FieldValue for $t {
            #[inline]
            fn read(field: Option<FieldReader>, rec: &[u8]) -> $t {
                u64::read(field, rec) as $t
            }
        }
    )*};
}
narrow_field!(u32, u16, u8);

impl FieldValue for i32 {
    #[inline]
    fn read(field: Option<FieldReader>, rec: &[u8]) -> i32 {
        field.map_or(0, |f| f.i64(rec) as i32)
    }
}

/// Declares the fields of one record kind: `reader_name: type = "cuptiFieldName"`.
macro_rules! record_fields {
    ($(#[$doc:meta])* $name:ident { $($field:ident: $ty:ty = $cupti:literal,)* }) => {
        $(#[$doc])*
        #[derive(Clone, Copy, Debug)]
        pub(crate) struct $name {
            $($field: Option<FieldReader>,)*
        }

        impl $name {
            pub(crate) fn new(layout: &RecordLayout) -> Self {
                Self { $($field: FieldReader::new(layout, $cupti),)* }
            }

            $(
                #[inline]
                pub(crate) fn $field(&self, rec: &[u8]) -> $ty {
                    <$ty as FieldValue>::read(self.$field, rec)
                }
            )*
        }
    };
}

record_fields! {
    /// `CUpti_ActivityKernel*`.
    KernelFields {
        start: u64 = "start",
        end: u64 = "end",
        device: u32 = "deviceId",
        context: u32 = "contextId",
        stream: u32 = "streamId",
        correlation: u32 = "correlationId",
        name: u64 = "name",
        grid_x: i32 = "gridX",
        grid_y: i32 = "gridY",
        grid_z: i32 = "gridZ",
        block_x: i32 = "blockX",
        block_y: i32 = "blockY",
        block_z: i32 = "blockZ",
        registers: u16 = "registersPerThread",
        static_smem: i32 = "staticSharedMemory",
        dynamic_smem: i32 = "dynamicSharedMemory",
        queued: u64 = "queued",
        graph_id: u32 = "graphId",
        graph_node_id: u64 = "graphNodeId",
        channel: u32 = "channelID",
        channel_type: u8 = "channelType",
        cluster_x: u16 = "clusterX",
        cluster_y: u16 = "clusterY",
        cluster_z: u16 = "clusterZ",
        cluster_policy: u8 = "clusterSchedulingPolicy",
        launch_type: u8 = "launchType",
        device_launched: u8 = "isDeviceLaunched",
        local_memory_per_thread: u32 = "localMemoryPerThread",
        shared_memory_executed: u32 = "sharedMemoryExecuted",
    }
}

record_fields! {
    /// `CUpti_ActivityMemcpy*` and `CUpti_ActivityMemcpyPtoP*` (whose source and destination devices differ).
    MemcpyFields {
        start: u64 = "start",
        end: u64 = "end",
        device: u32 = "deviceId",
        context: u32 = "contextId",
        stream: u32 = "streamId",
        correlation: u32 = "correlationId",
        bytes: u64 = "bytes",
        copy_kind: u8 = "copyKind",
        src_kind: u8 = "srcKind",
        dst_kind: u8 = "dstKind",
        flags: u8 = "flags",
        graph_id: u32 = "graphId",
        graph_node_id: u64 = "graphNodeId",
        src_device: u32 = "srcDeviceId",
        dst_device: u32 = "dstDeviceId",
    }
}

record_fields! {
    /// `CUpti_ActivityMemset*`.
    MemsetFields {
        start: u64 = "start",
        end: u64 = "end",
        device: u32 = "deviceId",
        context: u32 = "contextId",
        stream: u32 = "streamId",
        correlation: u32 = "correlationId",
        bytes: u64 = "bytes",
        value: u32 = "value",
        memory_kind: u16 = "memoryKind",
        graph_id: u32 = "graphId",
        graph_node_id: u64 = "graphNodeId",
    }
}

record_fields! {
    /// `CUpti_ActivityAPI` (runtime and driver calls).
    ApiFields {
        start: u64 = "start",
        end: u64 = "end",
        pid: u32 = "processId",
        tid: u32 = "threadId",
        correlation: u32 = "correlationId",
        cbid: u32 = "cbid",
        return_value: u32 = "returnValue",
    }
}

record_fields! {
    /// `CUpti_ActivitySynchronization*`.
    SyncFields {
        start: u64 = "start",
        end: u64 = "end",
        sync_type: u32 = "type",
        correlation: u32 = "correlationId",
        context: u32 = "contextId",
        stream: u32 = "streamId",
        event: u32 = "cudaEventId",
    }
}

record_fields! {
    /// `CUpti_ActivityCudaEvent*`.
    EventFields {
        correlation: u32 = "correlationId",
        context: u32 = "contextId",
        stream: u32 = "streamId",
        event: u32 = "eventId",
        device: u32 = "deviceId",
        device_timestamp: u64 = "deviceTimestamp",
    }
}

record_fields! {
    /// `CUpti_ActivityExternalCorrelation`.
    ExternalFields {
        external_kind: u32 = "externalKind",
        external_id: u64 = "externalId",
        correlation: u32 = "correlationId",
    }
}

record_fields! {
    /// `CUpti_ActivityMarker2` (NVTX).
    MarkerFields {
        flags: u32 = "flags",
        timestamp: u64 = "timestamp",
        id: u32 = "id",
        object_kind: u32 = "objectKind",
        pid: u32 = "objectId.pt.processId",
        tid: u32 = "objectId.pt.threadId",
        name: u64 = "name",
        domain: u64 = "domain",
    }
}

record_fields! {
    /// `CUpti_ActivityOverhead*`.
    OverheadFields {
        start: u64 = "start",
        end: u64 = "end",
        overhead_kind: u32 = "overheadKind",
        object_kind: u32 = "objectKind",
        tid: u32 = "objectId.pt.threadId",
    }
}

record_fields! {
    /// `CUpti_ActivityMemory*` (allocations and frees).
    MemoryFields {
        timestamp: u64 = "timestamp",
        device: u32 = "deviceId",
        stream: u32 = "streamId",
        correlation: u32 = "correlationId",
        address: u64 = "address",
        bytes: u64 = "bytes",
        operation: u32 = "memoryOperationType",
        memory_kind: u32 = "memoryKind",
    }
}

record_fields! {
    /// `CUpti_ActivityUnifiedMemoryCounter3` (unified memory migrations, faults, thrashing).
    UmFields {
        counter_kind: u32 = "counterKind",
        value: u64 = "value",
        start: u64 = "start",
        end: u64 = "end",
        address: u64 = "address",
        src: u32 = "srcId",
        dst: u32 = "dstId",
        flags: u32 = "flags",
        processors: u64 = "processors",
    }
}

/// The field readers of every kind the model reads, for one file's layout table (`None`: the file has no layout
/// for that kind, so its records are not decoded).
#[derive(Clone, Copy, Debug)]
pub(crate) struct FileFields {
    pub kernel: Option<KernelFields>,
    pub memcpy: Option<MemcpyFields>,
    pub memcpy2: Option<MemcpyFields>,
    pub memset: Option<MemsetFields>,
    pub runtime: Option<ApiFields>,
    pub driver: Option<ApiFields>,
    pub sync: Option<SyncFields>,
    pub event: Option<EventFields>,
    pub external: Option<ExternalFields>,
    pub marker: Option<MarkerFields>,
    pub overhead: Option<OverheadFields>,
    pub memory: Option<MemoryFields>,
    pub um: Option<UmFields>,
}

impl FileFields {
    pub fn new(t: &LayoutTable) -> FileFields {
        FileFields {
            kernel: t.get(kinds::CONCURRENT_KERNEL).map(KernelFields::new),
            memcpy: t.get(kinds::MEMCPY).map(MemcpyFields::new),
            memcpy2: t.get(kinds::MEMCPY2).map(MemcpyFields::new),
            memset: t.get(kinds::MEMSET).map(MemsetFields::new),
            runtime: t.get(kinds::RUNTIME).map(ApiFields::new),
            driver: t.get(kinds::DRIVER).map(ApiFields::new),
            sync: t.get(kinds::SYNCHRONIZATION).map(SyncFields::new),
            event: t.get(kinds::CUDA_EVENT).map(EventFields::new),
            external: t.get(kinds::EXTERNAL_CORRELATION).map(ExternalFields::new),
            marker: t.get(kinds::MARKER).map(MarkerFields::new),
            overhead: t.get(kinds::OVERHEAD).map(OverheadFields::new),
            memory: t.get(kinds::MEMORY2).map(MemoryFields::new),
            um: t.get(kinds::UNIFIED_MEMORY_COUNTER).map(UmFields::new),
        }
    }
}
