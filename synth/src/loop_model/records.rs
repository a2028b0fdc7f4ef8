//! The records one call or GPU operation makes, appended to buffers in completion order, with the truth kept.

use super::*;

impl Synth {
    /// A kernel name's text reaches the file once, before the first record that names it.
    pub(super) fn intern_kernel_name(&mut self, ptr: u64, text: &str) {
        if self.kernel_names.insert(ptr) {
            self.new_strings.push((ptr, text.to_string()));
        }
    }

    pub(super) fn count(&mut self, rec: &[u8]) {
        let kind = u32::from_le_bytes(rec[0..4].try_into().unwrap());
        *self.truth.records_per_kind.entry(kind).or_default() += 1;
        self.truth.records += 1;
    }

    /// Appends a record to the current buffer, completing the buffer when it is full.
    pub(super) fn emit(&mut self, rec: Vec<u8>) {
        if self.buf.len() + rec.len() > self.opts.buffer_bytes {
            self.complete_buffer();
        }
        self.count(&rec);
        self.buf.extend_from_slice(&rec);
    }

    pub(super) fn complete_buffer(&mut self) {
        if self.buf.is_empty() {
            return;
        }
        let bytes = std::mem::replace(&mut self.buf, Vec::with_capacity(self.opts.buffer_bytes));
        self.truth.buffers += 1;
        self.truth.raw_bytes += bytes.len() as u64;
        let new_strings = std::mem::take(&mut self.new_strings);
        self.ready.push_back(SynthBuffer { bytes, new_strings });
    }

    /// Device (or managed) memory in use on `device` after an allocation (or free) of `bytes` at `ts`, and its peak.
    pub(super) fn track_memory(&mut self, (device, managed): (u32, bool), ts: u64, bytes: u64, free: bool) {
        let now = self.in_use.entry((device, managed)).or_default();
        *now = if free { now.saturating_sub(bytes) } else { *now + bytes };
        let peaks = if managed { &mut self.truth.managed_peak } else { &mut self.truth.memory_peak };
        let peak = peaks.entry(device).or_default();
        if *now > peak.0 {
            *peak = (*now, ts);
        }
    }

    pub(super) fn see_time(&mut self, t: u64) {
        if t != 0 {
            self.truth.t_min = self.truth.t_min.min(t);
            self.truth.t_max = self.truth.t_max.max(t);
        }
    }

    /// Queues a GPU record; it reaches a buffer once the host clock passes its end.
    pub(super) fn gpu(&mut self, end: u64, rec: Vec<u8>) {
        self.pending_seq += 1;
        self.pending.push(Reverse((end, self.pending_seq, rec)));
    }

    /// Moves GPU records that ended before `t` into the buffer.
    pub(super) fn drain_gpu(&mut self, t: u64) {
        while let Some(Reverse((end, _, _))) = self.pending.peek() {
            if *end > t {
                break;
            }
            let Reverse((_, _, rec)) = self.pending.pop().unwrap();
            self.emit(rec);
        }
    }

    pub(super) fn advance_host(&mut self, ns: u64) {
        self.host += ns;
        // A clock sample every simulated second, as the recorder takes them.
        let last = self.clocks.last().map(|c| c.cupti_ns).unwrap_or(0);
        if self.host >= last + 1_000_000_000 {
            let t = self.host;
            self.clocks.push(ClockSample { cupti_ns: t, realtime_ns: t, monotonic_ns: t - MONOTONIC_OFFSET });
        }
    }

    /// An API record (runtime or driver) on `thread`, with its external correlation record before it.
    pub(super) fn api_call(&mut self, driver: bool, cbid: u32, thread: u32, dur: u64, ext: bool) -> (u32, u64, u64) {
        let gap = self.rng.range(300, 1500);
        self.advance_host(gap);
        self.corr += 1;
        let corr = self.corr;
        let start = self.host;
        let end = start + dur;
        self.see_time(start);
        self.see_time(end);
        self.drain_gpu(end);
        if ext {
            let s = &self.l.ext;
            let mut r = s.new_record();
            s.set(&mut r, f::ext::KIND, 3); // CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0, as PyTorch pushes op ids
            s.set(&mut r, f::ext::ID, self.ext_id);
            s.set(&mut r, f::ext::CORR, corr as u64);
            self.emit(r);
        }
        let s = if driver { &self.l.driver } else { &self.l.api };
        let mut r = s.new_record();
        s.set(&mut r, f::api::CBID, cbid as u64);
        s.set(&mut r, f::api::START, start);
        s.set(&mut r, f::api::END, end);
        s.set(&mut r, f::api::PID, PID as u64);
        s.set(&mut r, f::api::TID, thread as u64);
        s.set(&mut r, f::api::CORR, corr as u64);
        self.emit(r);
        self.host = end;
        (corr, start, end)
    }

    /// [`Synth::api_call`] with a duration drawn from `dur`.
    pub(super) fn api_call_between(
        &mut self,
        driver: bool,
        cbid: u32,
        thread: u32,
        dur: (u64, u64),
        ext: bool,
    ) -> (u32, u64, u64) {
        let d = self.rng.range(dur.0, dur.1);
        self.api_call(driver, cbid, thread, d, ext)
    }

    /// When GPU work launched at `api_start` on `stream` starts, and marks the stream busy until it ends.
    /// Like CUDA's launch queue, a stream accepts at most [`MAX_QUEUED`] pending operations: beyond that the
    /// launching call blocks until the oldest one finishes.
    pub(super) fn schedule(&mut self, stream: u32, api_start: u64, dur: u64) -> (u64, u64) {
        if self.pending.len() >= MAX_QUEUED
            && let Some(Reverse((oldest_end, _, _))) = self.pending.peek()
        {
            let wait = *oldest_end;
            self.host = self.host.max(wait);
            self.drain_gpu(wait);
        }
        let free = self.stream_free.get(&stream).copied().unwrap_or(0);
        let start = (api_start + self.rng.range(4_000, 8_000)).max(free + self.rng.range(800, 2_000));
        let end = start + dur;
        self.stream_free.insert(stream, end);
        self.see_time(start);
        self.see_time(end);
        (start, end)
    }

    pub(super) fn kernel_record(
        &mut self,
        ki: usize,
        stream: u32,
        corr: u32,
        start: u64,
        end: u64,
        graph: Option<u64>,
    ) -> Vec<u8> {
        let kd = kernel_def(ki);
        let ptr = KERNEL_NAME_BASE + 0x100 * ki as u64;
        self.intern_kernel_name(ptr, kd.name);
        self.grid_id += 1;
        let s = &self.l.kernel;
        let mut r = s.new_record();
        s.set(&mut r, f::kern::START, start);
        s.set(&mut r, f::kern::END, end);
        s.set(&mut r, f::kern::COMPLETED, end);
        s.set(&mut r, f::kern::DEVICE, DEVICE_ID as u64);
        s.set(&mut r, f::kern::CONTEXT, CONTEXT_ID as u64);
        s.set(&mut r, f::kern::STREAM, stream as u64);
        for i in 0..3 {
            s.set(&mut r, f::kern::GRID + i, kd.grid[i] as u32 as u64);
            s.set(&mut r, f::kern::BLOCK + i, kd.block[i] as u32 as u64);
        }
        s.set(&mut r, f::kern::STATIC_SMEM, kd.static_smem as u32 as u64);
        s.set(&mut r, f::kern::DYN_SMEM, kd.dynamic_smem as u32 as u64);
        s.set(&mut r, f::kern::CORR, corr as u64);
        s.set(&mut r, f::kern::GRID_ID, self.grid_id as u64);
        s.set(&mut r, f::kern::NAME, ptr);
        s.set(&mut r, f::kern::REGS, kd.registers as u64);
        s.set(&mut r, f::kern::SMEM_EXEC, if kd.dynamic_smem > 48 * 1024 { 233_472 } else { 49_152 });
        s.set(&mut r, f::kern::CHANNEL, stream as u64 % 4);
        s.set(&mut r, f::kern::CACHE, 0x11);
        if let Some(node) = graph {
            s.set(&mut r, f::kern::GRAPH_NODE, node);
            s.set(&mut r, f::kern::GRAPH, GRAPH_ID as u64);
        }
        let t = self.truth.kernels.entry(kd.name).or_default();
        t.0 += 1;
        t.1 += end - start;
        r
    }

    /// A kernel launched through `cudaLaunchKernel` (or `cuLaunchKernel` for Triton).
    pub(super) fn launch(&mut self, ki: usize, stream: u32) {
        let driver = ki == TRITON;
        let cbid = if driver { DRIVER_LAUNCH_KERNEL } else { cb::CUDA_LAUNCH_KERNEL };
        let api_dur = self.rng.range(2_500, 5_500);
        let (corr, api_start, _) = self.api_call(driver, cbid, MAIN_THREAD, api_dur, true);
        // The launch-only loop is launch-bound: its kernels are a few microseconds, shorter than a launch.
        let mean = if self.opts.launches_only { (KERNELS[ki].mean_ns / 6).max(1_200) } else { KERNELS[ki].mean_ns };
        let dur = self.rng.jitter(mean);
        let (start, end) = self.schedule(stream, api_start, dur);
        let r = self.kernel_record(ki, stream, corr, start, end, None);
        self.truth.gpu_records_with_api += 1;
        self.gpu(end, r);
    }

    #[allow(clippy::too_many_arguments)]
    pub(super) fn memcpy(&mut self, copy_kind: u8, src: u8, dst: u8, bytes: u64, stream: u32, sync: bool, thread: u32) {
        let cbid = if sync { cb::CUDA_MEMCPY } else { cb::CUDA_MEMCPY_ASYNC };
        let gbps = match (copy_kind, src.max(dst)) {
            (8, _) => 1500,
            (_, 1) => 10, // pageable staging
            _ => 25,
        };
        let dur = (bytes / gbps).max(1_200) + self.rng.range(0, 400);
        let api_dur = if sync { dur + self.rng.range(8_000, 12_000) } else { self.rng.range(3_000, 6_000) };
        let (corr, api_start, api_end) = self.api_call(false, cbid, thread, api_dur, thread == MAIN_THREAD);
        let (start, end) = if sync {
            let start = api_start + self.rng.range(2_000, 4_000);
            let end = start + dur;
            self.stream_free.insert(stream, end.max(self.stream_free.get(&stream).copied().unwrap_or(0)));
            self.see_time(start);
            self.see_time(end.min(api_end));
            (start, end.min(api_end - 1_000))
        } else {
            self.schedule(stream, api_start, dur)
        };
        let s = &self.l.memcpy;
        let mut r = s.new_record();
        s.set(&mut r, f::copy::COPY_KIND, copy_kind as u64);
        s.set(&mut r, f::copy::SRC, src as u64);
        s.set(&mut r, f::copy::DST, dst as u64);
        s.set(&mut r, f::copy::FLAGS, if sync { 0 } else { 1 });
        s.set(&mut r, f::copy::BYTES, bytes);
        s.set(&mut r, f::copy::START, start);
        s.set(&mut r, f::copy::END, end);
        s.set(&mut r, f::copy::DEVICE, DEVICE_ID as u64);
        s.set(&mut r, f::copy::CONTEXT, CONTEXT_ID as u64);
        s.set(&mut r, f::copy::STREAM, stream as u64);
        s.set(&mut r, f::copy::CORR, corr as u64);
        let t = self.truth.memcpys.entry((copy_kind, src, dst)).or_default();
        t.0 += 1;
        t.1 += bytes;
        t.2 += end - start;
        self.truth.gpu_records_with_api += 1;
        self.gpu(end, r);
    }

    pub(super) fn memset(&mut self, bytes: u64, stream: u32) {
        let api_dur = self.rng.range(2_500, 4_000);
        let (corr, api_start, _) = self.api_call(false, cb::CUDA_MEMSET_ASYNC, MAIN_THREAD, api_dur, true);
        let dur = bytes / 2_000 + self.rng.range(500, 900);
        let (start, end) = self.schedule(stream, api_start, dur);
        let s = &self.l.memset;
        let mut r = s.new_record();
        s.set(&mut r, f::set::VALUE, 0);
        s.set(&mut r, f::set::BYTES, bytes);
        s.set(&mut r, f::set::START, start);
        s.set(&mut r, f::set::END, end);
        s.set(&mut r, f::set::DEVICE, DEVICE_ID as u64);
        s.set(&mut r, f::set::CONTEXT, CONTEXT_ID as u64);
        s.set(&mut r, f::set::STREAM, stream as u64);
        s.set(&mut r, f::set::CORR, corr as u64);
        s.set(&mut r, f::set::FLAGS, 1);
        s.set(&mut r, f::set::MEM_KIND, 3);
        self.truth.memsets.0 += 1;
        self.truth.memsets.1 += bytes;
        self.truth.memsets.2 += end - start;
        self.truth.gpu_records_with_api += 1;
        self.gpu(end, r);
    }

    /// NVTX push (start = true) or pop on the main thread.
    pub(super) fn nvtx(&mut self, start: bool, name: &str, id: u32) {
        let gap = self.rng.range(200, 600);
        self.advance_host(gap);
        let ts = self.host;
        self.see_time(ts);
        self.drain_gpu(ts);
        // One pointer per distinct message (end markers carry none); each step's name is used once.
        let ptr = if start {
            let (ptr, new) = self.nvtx_names.pointer(name, name.starts_with("step "));
            if new {
                self.new_strings.push((ptr, name.to_string()));
            }
            ptr
        } else {
            0
        };
        let s = &self.l.marker;
        let mut r = s.new_record();
        s.set(&mut r, f::marker::FLAGS, if start { 1 << 1 } else { 1 << 2 });
        s.set(&mut r, f::marker::TS, ts);
        s.set(&mut r, f::marker::ID, id as u64);
        s.set(&mut r, f::marker::OBJ_KIND, 2); // THREAD
        s.set(&mut r, f::marker::PID, PID as u64);
        s.set(&mut r, f::marker::TID, MAIN_THREAD as u64);
        s.set(&mut r, f::marker::NAME, ptr);
        self.emit(r);
    }

    pub(super) fn range(&mut self, name: &str) -> u32 {
        self.marker_id += 1;
        let id = self.marker_id;
        self.nvtx(true, name, id);
        let key = if name.starts_with("step ") { "step".to_string() } else { name.to_string() };
        *self.truth.nvtx_ranges.entry(key).or_default() += 1;
        id
    }

    /// A sync record of the API call spanning [start, end]. As CUPTI writes them, the wait lies inside the call:
    /// it begins a little after the call does (133 ns to 6 us on the H100 fixture) and ends before it returns.
    pub(super) fn sync_record(&mut self, ty: u64, corr: u32, start: u64, end: u64, stream: u32, event: u32) {
        let (start, end) = if end > start + 400 { (start + 150, end - 100) } else { (start, end) };
        let s = &self.l.sync;
        let mut r = s.new_record();
        s.set(&mut r, f::sync::TYPE, ty);
        s.set(&mut r, f::sync::START, start);
        s.set(&mut r, f::sync::END, end);
        s.set(&mut r, f::sync::CORR, corr as u64);
        s.set(&mut r, f::sync::CONTEXT, CONTEXT_ID as u64);
        s.set(&mut r, f::sync::STREAM, stream as u64);
        s.set(&mut r, f::sync::EVENT, event as u64);
        self.emit(r);
    }
}
