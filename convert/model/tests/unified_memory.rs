//! The unified memory fixture (`fixtures/um_workload.cutr`, `workloads/cuda/um_workload.cu` with 32 MiB buffers
//! on an H100, `cupti-record --um`) against what the program knows (`fixtures/um_workload.json`): every byte a
//! kernel touched migrates to the device exactly once, a prefetched buffer takes no GPU fault, only the buffers
//! the host read back come back, and every CPU fault's instruction is in the program's own host loops.

use cutr_model::memory::{MemoryClass, memory_in_use, memory_in_use_of};
use cutr_model::um::RunningKernels;
use cutr_model::{LoadOptions, Trace, UmEvent, UmKind, load};

const MIB32: u64 = 32 << 20;

struct Buffer {
    name: &'static str,
    address: u64,
    bytes: u64,
}

/// The buffers as the program printed them (fixtures/um_workload.json).
const BUFFERS: [Buffer; 4] = [
    Buffer { name: "touch", address: 140054823436288, bytes: MIB32 },
    Buffer { name: "prefetch", address: 140054789881856, bytes: MIB32 },
    Buffer { name: "readonly", address: 140054756327424, bytes: MIB32 },
    Buffer { name: "partial", address: 140054622109696, bytes: 4 * MIB32 },
];

fn trace() -> Trace {
    load(&["../../fixtures/um_workload.cutr".into()], &LoadOptions::default()).unwrap()
}

fn events<'t>(t: &'t Trace, b: &Buffer, kind: UmKind) -> impl Iterator<Item = &'t UmEvent> {
    let range = b.address..b.address + b.bytes;
    t.um.iter().filter(move |e| e.kind == kind && range.contains(&e.address))
}

fn bytes(t: &Trace, b: &Buffer, kind: UmKind) -> u64 {
    events(t, b, kind).map(|e| e.value).sum()
}

#[test]
fn the_program_json_names_the_buffers_the_test_uses() {
    let json = std::fs::read_to_string("../../fixtures/um_workload.json").unwrap();
    for b in &BUFFERS {
        let entry = format!("\"name\": \"{}\", \"address\": {}, \"bytes\": {}", b.name, b.address, b.bytes);
        assert!(json.contains(&entry), "{entry} not in {json}");
    }
}

#[test]
fn migrations_are_exactly_what_each_buffer_went_through() {
    let t = trace();
    assert_eq!(t.um.len(), 4_693);
    assert_eq!(t.stats.um_unknown_kind + t.stats.inverted_records + t.stats.zero_timestamp_records, 0);
    // Host to device: exactly the 32 MiB the kernel touched, in each buffer (a quarter of `partial`).
    for b in &BUFFERS {
        assert_eq!(bytes(&t, b, UmKind::BytesHtoD), MIB32, "{}", b.name);
    }
    // Device to host: only where the host read back what the GPU wrote.
    let back: Vec<u64> = BUFFERS.iter().map(|b| bytes(&t, b, UmKind::BytesDtoH)).collect();
    assert_eq!(back, vec![MIB32, MIB32, 0, 0]);
    // Nothing else moved, and nothing between devices on one GPU.
    assert_eq!(t.um.iter().filter(|e| e.kind.is_migration()).map(|e| e.value).sum::<u64>(), 6 * MIB32);
    assert_eq!(t.um.iter().filter(|e| e.kind == UmKind::BytesDtoD).count(), 0);
    // The prefetched buffer moved by the program's own calls (cause "user"), both ways, in 2 MiB blocks.
    let prefetch = &BUFFERS[1];
    for kind in [UmKind::BytesHtoD, UmKind::BytesDtoH] {
        let e: Vec<&UmEvent> = events(&t, prefetch, kind).collect();
        assert_eq!(e.len(), 16);
        assert!(e.iter().all(|e| e.flags == 1 && e.value == 2 << 20 && cutr_model::describe::um_flags(e) == "user"));
    }
}

#[test]
fn gpu_faults_happen_during_kernels_and_never_after_a_prefetch() {
    let t = trace();
    let running = RunningKernels::new(&t);
    let faults: Vec<usize> = BUFFERS.iter().map(|b| events(&t, b, UmKind::GpuPageFault).count()).collect();
    assert_eq!(faults[1], 0, "prefetched: no GPU fault");
    assert!(faults[0] > 0 && faults[2] > 0 && faults[3] > 0, "{faults:?}");
    let gpu: Vec<&UmEvent> = t.um.iter().filter(|e| e.kind == UmKind::GpuPageFault).collect();
    assert!(gpu.iter().all(|e| e.device() == Some(0) && running.of_um(e).is_some()));
    // The faulting kernel is the one the buffer went to: `sum_read` for the read-mostly buffer.
    let readonly = events(&t, &BUFFERS[2], UmKind::GpuPageFault).next().unwrap();
    let k = &t.kernels[running.of_um(readonly).unwrap()];
    assert!(t.kernel_name(k).starts_with("sum_read("), "{}", t.kernel_name(k));
}

#[test]
fn cpu_faults_are_in_the_programs_host_loops() {
    let t = trace();
    let cpu: Vec<&UmEvent> = t.um.iter().filter(|e| e.kind == UmKind::CpuPageFault).collect();
    // Writes in every buffer (host_write), reads only where the host read back data the GPU held (touch).
    let writes: Vec<usize> =
        BUFFERS.iter().map(|b| events(&t, b, UmKind::CpuPageFault).filter(|e| e.flags == 2).count()).collect();
    let reads: Vec<usize> =
        BUFFERS.iter().map(|b| events(&t, b, UmKind::CpuPageFault).filter(|e| e.flags == 1).count()).collect();
    assert!(writes.iter().all(|&n| n > 0), "{writes:?}");
    assert_eq!((reads[1], reads[2], reads[3]), (0, 0, 0));
    assert!(reads[0] > 0);
    // Each instruction is in the executable's mapping, inside host_write (0x2ec0..0x2ef0) or host_sum
    // (0x2ef0..) as `nm fixtures/bin/um_workload` places them; the file's build id is the recorded one.
    let meta = &t.processes[0].meta;
    let exe = meta.mappings.iter().find(|m| m.path.ends_with("/um_workload")).unwrap();
    assert_eq!(hex(&exe.build_id), "2eb75f9348107a3baf5f171d72ede4be45e53374");
    for e in &cpu {
        let off = exe.file_offset_of(e.pc).expect("pc in the executable");
        let in_write = (0x2ec0..0x2ef0).contains(&off);
        let in_sum = (0x2ef0..0x2f20).contains(&off);
        assert!(if e.flags == 2 { in_write } else { in_sum }, "pc offset {off:#x} flags {}", e.flags);
    }
}

#[test]
fn managed_memory_is_not_device_memory_in_use() {
    let t = trace();
    // One 8-byte cudaMalloc (the read sum) is the only device memory.
    let device = memory_in_use(&t);
    assert_eq!(device.len(), 1);
    assert_eq!((device[0].peak_bytes, device[0].allocations, device[0].frees), (8, 1, 1));
    // The four managed buffers: 3 x 32 MiB + 128 MiB at once, all freed.
    let managed = memory_in_use_of(&t, MemoryClass::Managed);
    assert_eq!((managed[0].peak_bytes, managed[0].bytes_at_end, managed[0].allocations), (7 * MIB32, 0, 4));
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}
