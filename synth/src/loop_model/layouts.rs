//! Where each field of the records the generator writes lies, looked up by name in the chosen CUPTI version's
//! layout table once.

use cutr_schema::{LayoutTable, RecordLayout, kinds};

/// Where each field of one record kind is, looked up once by name.
pub(super) struct Slots {
    pub(super) layout: RecordLayout,
    pub(super) off: Vec<(usize, usize)>,
}

impl Slots {
    pub(super) fn new(table: &LayoutTable, kind: u32, names: &[&str]) -> Slots {
        let layout = table.get(kind).unwrap_or_else(|| panic!("no layout for kind {kind}")).clone();
        let off = names
            .iter()
            .map(|n| {
                let f = layout.field(n).unwrap_or_else(|| panic!("{} has no field {n}", layout.struct_name));
                (f.offset as usize, f.size as usize)
            })
            .collect();
        Slots { layout, off }
    }

    pub(super) fn new_record(&self) -> Vec<u8> {
        let mut r = vec![0u8; self.layout.size as usize];
        r[0..4].copy_from_slice(&self.layout.kind.to_le_bytes());
        r
    }

    #[inline]
    pub(super) fn set(&self, rec: &mut [u8], slot: usize, v: u64) {
        let (o, s) = self.off[slot];
        rec[o..o + s].copy_from_slice(&v.to_le_bytes()[..s]);
    }
}

// Slot indices per kind (order of the name lists in `Layouts::new`).
pub(super) mod f {
    pub mod api {
        pub const CBID: usize = 0;
        pub const START: usize = 1;
        pub const END: usize = 2;
        pub const PID: usize = 3;
        pub const TID: usize = 4;
        pub const CORR: usize = 5;
    }
    pub mod kern {
        pub const START: usize = 0;
        pub const END: usize = 1;
        pub const COMPLETED: usize = 2;
        pub const DEVICE: usize = 3;
        pub const CONTEXT: usize = 4;
        pub const STREAM: usize = 5;
        pub const GRID: usize = 6;
        pub const BLOCK: usize = 9;
        pub const STATIC_SMEM: usize = 12;
        pub const DYN_SMEM: usize = 13;
        pub const CORR: usize = 14;
        pub const GRID_ID: usize = 15;
        pub const NAME: usize = 16;
        pub const REGS: usize = 17;
        pub const SMEM_EXEC: usize = 18;
        pub const GRAPH_NODE: usize = 19;
        pub const GRAPH: usize = 20;
        pub const CHANNEL: usize = 21;
        pub const CACHE: usize = 22;
    }
    pub mod ext {
        pub const KIND: usize = 0;
        pub const ID: usize = 1;
        pub const CORR: usize = 2;
    }
    pub mod copy {
        pub const COPY_KIND: usize = 0;
        pub const SRC: usize = 1;
        pub const DST: usize = 2;
        pub const FLAGS: usize = 3;
        pub const BYTES: usize = 4;
        pub const START: usize = 5;
        pub const END: usize = 6;
        pub const DEVICE: usize = 7;
        pub const CONTEXT: usize = 8;
        pub const STREAM: usize = 9;
        pub const CORR: usize = 10;
    }
    pub mod set {
        pub const VALUE: usize = 0;
        pub const BYTES: usize = 1;
        pub const START: usize = 2;
        pub const END: usize = 3;
        pub const DEVICE: usize = 4;
        pub const CONTEXT: usize = 5;
        pub const STREAM: usize = 6;
        pub const CORR: usize = 7;
        pub const FLAGS: usize = 8;
        pub const MEM_KIND: usize = 9;
    }
    pub mod marker {
        pub const FLAGS: usize = 0;
        pub const TS: usize = 1;
        pub const ID: usize = 2;
        pub const OBJ_KIND: usize = 3;
        pub const PID: usize = 4;
        pub const TID: usize = 5;
        pub const NAME: usize = 6;
    }
    pub mod sync {
        pub const TYPE: usize = 0;
        pub const START: usize = 1;
        pub const END: usize = 2;
        pub const CORR: usize = 3;
        pub const CONTEXT: usize = 4;
        pub const STREAM: usize = 5;
        pub const EVENT: usize = 6;
    }
    pub mod event {
        pub const CORR: usize = 0;
        pub const CONTEXT: usize = 1;
        pub const STREAM: usize = 2;
        pub const EVENT: usize = 3;
        pub const DEVICE: usize = 4;
    }
}

pub(super) struct Layouts {
    pub(super) api: Slots,
    pub(super) driver: Slots,
    pub(super) kernel: Slots,
    pub(super) ext: Slots,
    pub(super) memcpy: Slots,
    pub(super) memset: Slots,
    pub(super) marker: Slots,
    pub(super) sync: Slots,
    pub(super) event: Slots,
    pub(super) table: LayoutTable,
}

impl Layouts {
    pub(super) fn new(table: LayoutTable) -> Layouts {
        let api_fields = ["cbid", "start", "end", "processId", "threadId", "correlationId"];
        Layouts {
            api: Slots::new(&table, kinds::RUNTIME, &api_fields),
            driver: Slots::new(&table, kinds::DRIVER, &api_fields),
            kernel: Slots::new(
                &table,
                kinds::CONCURRENT_KERNEL,
                &[
                    "start",
                    "end",
                    "completed",
                    "deviceId",
                    "contextId",
                    "streamId",
                    "gridX",
                    "gridY",
                    "gridZ",
                    "blockX",
                    "blockY",
                    "blockZ",
                    "staticSharedMemory",
                    "dynamicSharedMemory",
                    "correlationId",
                    "gridId",
                    "name",
                    "registersPerThread",
                    "sharedMemoryExecuted",
                    "graphNodeId",
                    "graphId",
                    "channelID",
                    "cacheConfig",
                ],
            ),
            ext: Slots::new(&table, kinds::EXTERNAL_CORRELATION, &["externalKind", "externalId", "correlationId"]),
            memcpy: Slots::new(
                &table,
                kinds::MEMCPY,
                &[
                    "copyKind",
                    "srcKind",
                    "dstKind",
                    "flags",
                    "bytes",
                    "start",
                    "end",
                    "deviceId",
                    "contextId",
                    "streamId",
                    "correlationId",
                ],
            ),
            memset: Slots::new(
                &table,
                kinds::MEMSET,
                &[
                    "value",
                    "bytes",
                    "start",
                    "end",
                    "deviceId",
                    "contextId",
                    "streamId",
                    "correlationId",
                    "flags",
                    "memoryKind",
                ],
            ),
            marker: Slots::new(
                &table,
                kinds::MARKER,
                &["flags", "timestamp", "id", "objectKind", "objectId.pt.processId", "objectId.pt.threadId", "name"],
            ),
            sync: Slots::new(
                &table,
                kinds::SYNCHRONIZATION,
                &["type", "start", "end", "correlationId", "contextId", "streamId", "cudaEventId"],
            ),
            event: Slots::new(
                &table,
                kinds::CUDA_EVENT,
                &["correlationId", "contextId", "streamId", "eventId", "deviceId"],
            ),
            table,
        }
    }
}
