#!/usr/bin/env python3
"""A small PyTorch training loop: the realistic workload for the recorder and the PyTorch-profiler baseline.

A stack of pre-norm transformer blocks (explicit attention: matmuls + softmax, no fused SDPA) on one fixed random
batch on the GPU, cross-entropy loss, AdamW (foreach). A few hundred small kernels per step, the same number every
step after the first (AdamW creates its state in step 1, which is why warm-up steps run first).

NVTX (torch.cuda.nvtx.range_push/pop): warm-up steps are "warmup i"; measured steps are "step i" (i = 0..steps-1),
each containing "forward", "backward" and "optimizer". With --annotations record_function the same regions are
torch.profiler.record_function ranges instead, which the PyTorch profiler (Kineto) writes as `user_annotation`
and `gpu_user_annotation` events: the Kineto baseline of the NVTX ranges cutr records.

    python3 train_loop.py [--steps N] [--warmup W] [--mode plain|profiler] [--trace-out PATH]
                          [--annotations nvtx|record_function] [--profiler-api]

--profiler-api (plain mode) calls cudaProfilerStart/Stop around the measured steps, so that `cupti-record
--capture-range cuda-profiler-api` records exactly what the profiler mode profiles.

Prints one JSON line on stdout: steps, seconds of the measured steps (torch.cuda.synchronize before and after,
time.perf_counter), and in profiler mode the profiled-region time (entering the profiler to leaving it, which
includes Kineto's start-up and the processing of its activity buffers), export_seconds, trace_bytes and
kernel_events (events with cat == "kernel" in the exported Chrome trace).

Determinism of the kernel count: fixed seed, fixed shapes, TF32 off for matmul and cuDNN (cuBLAS then runs plain
FP32 kernels), cudnn.benchmark off (the model uses no cuDNN op anyway), no torch.compile, no dropout,
zero_grad(set_to_none=True) so no memset kernels, and the loss is never read back inside a measured step.
"""
import argparse
import json
import os
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, d, heads, ff):
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.ln2 = nn.LayerNorm(d)
        self.fc1 = nn.Linear(d, ff)
        self.fc2 = nn.Linear(ff, d)

    def forward(self, x):
        b, t, d = x.shape
        h = self.ln1(x)
        q, k, v = self.qkv(h).split(d, dim=-1)
        q = q.view(b, t, self.heads, d // self.heads).transpose(1, 2)
        k = k.view(b, t, self.heads, d // self.heads).transpose(1, 2)
        v = v.view(b, t, self.heads, d // self.heads).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / (d // self.heads) ** 0.5)
        att = att.softmax(dim=-1)
        y = (att @ v).transpose(1, 2).reshape(b, t, d)
        x = x + self.proj(y)
        x = x + self.fc2(F.gelu(self.fc1(self.ln2(x))))
        return x


class Model(nn.Module):
    def __init__(self, d_in, d, heads, ff, layers, classes):
        super().__init__()
        self.inp = nn.Linear(d_in, d)
        self.blocks = nn.ModuleList(Block(d, heads, ff) for _ in range(layers))
        self.ln = nn.LayerNorm(d)
        self.head = nn.Linear(d, classes)

    def forward(self, x):
        x = self.inp(x)
        for blk in self.blocks:
            x = blk(x)
        return self.head(self.ln(x).mean(dim=1))


def parse():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--mode", choices=["plain", "profiler"], default="plain")
    p.add_argument("--trace-out", default=None, help="Chrome trace path (profiler mode; default: a temp file)")
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--seq", type=int, default=64)
    p.add_argument("--dim", type=int, default=256)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--annotations", choices=["nvtx", "record_function"], default="nvtx")
    p.add_argument("--profiler-api", action="store_true", help="cudaProfilerStart/Stop around the measured steps")
    a = p.parse_args()
    if a.steps < 1 or a.warmup < 1:
        p.error("--steps and --warmup must be >= 1 (warm-up step 1 creates the optimizer state)")
    return a


def main():
    a = parse()
    if not torch.cuda.is_available():
        sys.exit("train_loop.py: CUDA is not available")
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cudnn.benchmark = False
    torch.manual_seed(a.seed)
    torch.cuda.manual_seed_all(a.seed)
    dev = torch.device("cuda", 0)
    torch.cuda.set_device(dev)

    classes, d_in = 10, 64
    model = Model(d_in, a.dim, heads=4, ff=4 * a.dim, layers=a.layers, classes=classes).to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01, foreach=True)
    x = torch.randn(a.batch, a.seq, d_in, device=dev)
    y = torch.randint(0, classes, (a.batch,), device=dev)
    if a.annotations == "nvtx":
        region = torch.cuda.nvtx.range
    else:
        region = torch.profiler.record_function

    def step(label):
        with region(label):
            with region("forward"):
                loss = F.cross_entropy(model(x), y)
            with region("backward"):
                loss.backward()
            with region("optimizer"):
                opt.step()
                opt.zero_grad(set_to_none=True)
        return loss

    for i in range(a.warmup):
        step(f"warmup {i}")
    torch.cuda.synchronize()

    def measured():
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        loss = None
        for i in range(a.steps):
            loss = step(f"step {i}")
        torch.cuda.synchronize()
        return time.perf_counter() - t0, loss

    out = {
        "workload": "train_loop",
        "mode": a.mode,
        "steps": a.steps,
        "warmup": a.warmup,
        "layers": a.layers,
        "batch": a.batch,
        "seq": a.seq,
        "dim": a.dim,
        "params": sum(p.numel() for p in model.parameters()),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "device": torch.cuda.get_device_name(dev),
        "tf32_matmul": torch.backends.cuda.matmul.allow_tf32,
        "tf32_cudnn": torch.backends.cudnn.allow_tf32,
        "annotations": a.annotations,
    }
    if a.mode == "plain":
        if a.profiler_api:
            torch.cuda.profiler.start()
        seconds, loss = measured()
        if a.profiler_api:
            torch.cuda.profiler.stop()
    else:
        from torch.profiler import ProfilerActivity, profile

        trace = a.trace_out
        if not trace:
            import tempfile

            trace = os.path.join(tempfile.mkdtemp(prefix="train_loop_"), "trace.json")
        tp0 = time.perf_counter()
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            seconds, loss = measured()
        profiled = time.perf_counter() - tp0
        te0 = time.perf_counter()
        prof.export_chrome_trace(trace)
        export_s = time.perf_counter() - te0
        with open(trace) as f:
            events = json.load(f).get("traceEvents", [])
        out.update(
            trace_out=trace,
            profiled_region_seconds=profiled,
            export_seconds=export_s,
            trace_bytes=os.path.getsize(trace),
            trace_events=len(events),
            kernel_events=sum(1 for e in events if e.get("cat") == "kernel"),
            kernel_events_per_step=sum(1 for e in events if e.get("cat") == "kernel") / a.steps,
        )
    out["seconds"] = seconds
    out["seconds_per_step"] = seconds / a.steps
    out["final_loss"] = float(loss.item())
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
