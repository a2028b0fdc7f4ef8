//! The loop itself: the prologue, a training step (or a launch-only step), a graph replay.

use super::*;

impl Synth {
    /// The one-time records CUPTI writes when tracing starts: allocations and an instrumentation overhead.
    pub(super) fn prologue(&mut self) {
        if let Some(mem) = self.l.table.get(kinds::MEMORY2).cloned() {
            for (i, bytes) in [512u64 << 20, 64 << 20, 16 << 20].into_iter().enumerate() {
                let api_dur = self.rng.range(40_000, 90_000);
                let (corr, start, _) = self.api_call(false, cb::CUDA_MALLOC, MAIN_THREAD, api_dur, false);
                let mut r = vec![0u8; mem.size as usize];
                r[0..4].copy_from_slice(&kinds::MEMORY2.to_le_bytes());
                let put = |r: &mut Vec<u8>, name: &str, v: u64| {
                    let f = mem.field(name).unwrap();
                    let (o, s) = (f.offset as usize, f.size as usize);
                    r[o..o + s].copy_from_slice(&v.to_le_bytes()[..s]);
                };
                put(&mut r, "memoryOperationType", 1);
                put(&mut r, "memoryKind", 3);
                put(&mut r, "correlationId", corr as u64);
                put(&mut r, "address", 0x7f00_0000_0000 + (i as u64) * (1 << 30));
                put(&mut r, "bytes", bytes);
                put(&mut r, "timestamp", start + 20_000);
                self.track_memory((DEVICE_ID, false), start + 20_000, bytes, false);
                put(&mut r, "processId", PID as u64);
                put(&mut r, "deviceId", DEVICE_ID as u64);
                put(&mut r, "contextId", CONTEXT_ID as u64);
                put(&mut r, "streamId", COMPUTE_STREAM as u64);
                self.emit(r);
            }
        }
        if let Some(ovh) = self.l.table.get(kinds::OVERHEAD).cloned() {
            let mut r = vec![0u8; ovh.size as usize];
            r[0..4].copy_from_slice(&kinds::OVERHEAD.to_le_bytes());
            let put = |r: &mut Vec<u8>, name: &str, v: u64| {
                let f = ovh.field(name).unwrap();
                let (o, s) = (f.offset as usize, f.size as usize);
                r[o..o + s].copy_from_slice(&v.to_le_bytes()[..s]);
            };
            let start = self.host + 1_000;
            put(&mut r, "overheadKind", 2 << 16); // CUPTI_INSTRUMENTATION
            put(&mut r, "objectKind", 2);
            put(&mut r, "objectId.pt.processId", PID as u64);
            put(&mut r, "objectId.pt.threadId", MAIN_THREAD as u64);
            put(&mut r, "start", start);
            put(&mut r, "end", start + 350_000);
            self.see_time(start + 350_000);
            self.host = start + 350_000;
            self.emit(r);
        }
    }

    /// One training step.
    pub(super) fn step(&mut self) {
        if self.opts.launches_only {
            return self.launch_step();
        }
        self.step += 1;
        let n = self.step;
        if self.um_slots.is_some() && (n - 1).is_multiple_of(um::UM_EVERY) {
            self.um_episode();
        }
        let step_range = self.range(&format!("step {n}"));
        // Input batch: the loader thread copies pinned memory on the copy stream; compute waits on an event.
        self.memcpy(1, 2, 3, 4 << 20, COPY_STREAM, false, LOADER_THREAD);
        self.event_id += 1;
        let ev = self.event_id;
        let (corr, _, _) = self.api_call_between(false, cb::CUDA_EVENT_RECORD, LOADER_THREAD, (1_500, 2_500), false);
        let s = &self.l.event;
        let mut r = s.new_record();
        s.set(&mut r, f::event::CORR, corr as u64);
        s.set(&mut r, f::event::CONTEXT, CONTEXT_ID as u64);
        s.set(&mut r, f::event::STREAM, COPY_STREAM as u64);
        s.set(&mut r, f::event::EVENT, ev as u64);
        s.set(&mut r, f::event::DEVICE, DEVICE_ID as u64);
        self.emit(r);
        let (corr, ws, we) =
            self.api_call_between(false, cb::CUDA_STREAM_WAIT_EVENT, MAIN_THREAD, (1_500, 2_500), false);
        self.sync_record(2, corr, ws, we, COMPUTE_STREAM, ev);
        let copy_done = self.stream_free.get(&COPY_STREAM).copied().unwrap_or(0);
        let cf = self.stream_free.entry(COMPUTE_STREAM).or_default();
        *cf = (*cf).max(copy_done);

        self.ext_id += 1;
        self.memset(16 << 20, COMPUTE_STREAM);
        let fwd = self.range("forward");
        for _ in 0..LAYERS {
            for ki in [GEMM, ADD, RELU] {
                self.ext_id += 1;
                self.launch(ki, COMPUTE_STREAM);
            }
        }
        for ki in [SOFTMAX, REDUCE] {
            self.ext_id += 1;
            self.launch(ki, COMPUTE_STREAM);
        }
        self.nvtx(false, "", fwd);
        let bwd = self.range("backward");
        for _ in 0..LAYERS {
            for ki in [GEMM, CUTLASS, MUL] {
                self.ext_id += 1;
                self.launch(ki, COMPUTE_STREAM);
            }
        }
        self.nvtx(false, "", bwd);
        self.ext_id += 1;
        self.launch(NCCL, COMM_STREAM);
        self.ext_id += 1;
        self.launch(ADAM, COMPUTE_STREAM);
        self.ext_id += 1;
        self.launch(TRITON, COMPUTE_STREAM);
        self.ext_id += 1;
        self.launch(FILL, COMPUTE_STREAM);
        if n.is_multiple_of(10) {
            self.ext_id += 1;
            self.memcpy(8, 3, 3, 32 << 20, COMPUTE_STREAM, false, MAIN_THREAD);
        }
        if n.is_multiple_of(GRAPH_EVERY) {
            self.graph_replay();
        }
        // loss.item(): a pageable device-to-host copy, then the step's stream synchronize.
        self.ext_id += 1;
        self.memcpy(2, 3, 1, 4, COMPUTE_STREAM, true, MAIN_THREAD);
        let busy = self.stream_free.values().copied().max().unwrap_or(0);
        let dur = busy.saturating_sub(self.host).max(2_000) + self.rng.range(1_000, 2_000);
        let (corr, s0, s1) = self.api_call(false, cb::CUDA_STREAM_SYNCHRONIZE, MAIN_THREAD, dur, true);
        self.sync_record(3, corr, s0, s1, COMPUTE_STREAM, u32::MAX);
        self.nvtx(false, "", step_range);
        self.truth.steps += 1;
    }

    /// A step of kernel launches only (forward and backward passes, optimizer), one stream.
    pub(super) fn launch_step(&mut self) {
        self.step += 1;
        for ki in [GEMM, ADD, RELU].repeat(LAYERS).into_iter().chain([SOFTMAX, REDUCE]) {
            self.ext_id += 1;
            self.launch(ki, COMPUTE_STREAM);
        }
        for ki in [GEMM, CUTLASS, MUL].repeat(LAYERS).into_iter().chain([ADAM, FILL]) {
            self.ext_id += 1;
            self.launch(ki, COMPUTE_STREAM);
        }
        self.truth.steps += 1;
    }

    /// A CUDA graph of four kernels replayed with one cudaGraphLaunch: its kernels carry the launch's
    /// correlation id and the graph and node ids.
    pub(super) fn graph_replay(&mut self) {
        self.ext_id += 1;
        let (corr, api_start, _) =
            self.api_call_between(false, cb::CUDA_GRAPH_LAUNCH, MAIN_THREAD, (6_000, 9_000), true);
        let mut t = api_start;
        for (node, ki) in [ADD, RELU, MUL, FILL].into_iter().enumerate() {
            let dur = self.rng.jitter(KERNELS[ki].mean_ns);
            let (start, end) = self.schedule(COMPUTE_STREAM, t, dur);
            t = start;
            let r = self.kernel_record(ki, COMPUTE_STREAM, corr, start, end, Some(node as u64 + 1));
            self.truth.graph_kernels += 1;
            self.truth.gpu_records_with_api += 1;
            self.gpu(end, r);
        }
    }
}
