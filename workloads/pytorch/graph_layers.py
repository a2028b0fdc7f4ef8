#!/usr/bin/env python3
"""A small transformer-like stack run eagerly, captured into a CUDA graph and replayed, with per-layer NVTX ranges.

The workload of issue 33: a replayed graph's kernels must be tied to the NVTX ranges that were open when the graph
was captured (forward > layer{i} > attention / mlp), although at replay time only "phase:replay" is open.

Model (float32, TF32 off, no dropout, no autograd: everything under torch.no_grad()): L layers (--layers, default
4), hidden 512, input batch 8 x 128 x 512, one static input tensor. Each layer is
    attention: LayerNorm, Linear q / k / v, q @ k^T, * 1/sqrt(512), softmax, @ v, Linear out, residual add
    mlp:       LayerNorm, Linear 512 -> 2048, GELU, Linear 2048 -> 512, residual add
NVTX (torch.cuda.nvtx.range_push / range_pop, opened inside Model.forward, the same code path in every phase):
    forward > layer{i} > attention        forward > layer{i} > mlp          (i = 0 .. L-1)
Every kernel of a forward runs inside layer{i}/attention or layer{i}/mlp.

Steps, in one process, each in a top-level range naming the phase:
    (no range)      3 eager forwards with the model's ranges turned off (cuBLAS handles, lazy module loading)
    phase:eager     1 eager forward (the reference: its kernels, in order, per layer), torch.cuda.synchronize()
    (no range)      the documented warm-up before capture: 3 forwards on a side stream, ranges off
    phase:capture   torch.cuda.graph(g): one forward captured from the static input (the ranges are pushed and
                    popped during capture; nothing runs on the GPU)
    phase:replay    g.replay() --replays times (default 20), torch.cuda.synchronize()
With --mode compile, the capture and replay steps are replaced by
    phase:compile   torch.compile(model, mode="reduce-overhead") called --compile-iters times (default 5); CUDA
                    graph trees record graphs after the first warm-up calls and replay them after that.
                    Dynamo cannot trace torch.cuda.nvtx: by default (--compile-nvtx break) each range call is a
                    graph break, so the ranges run eagerly between compiled pieces (which of them survive, and
                    how the pieces are cut, is PyTorch's choice and may change between versions); with
                    --compile-nvtx skip the model's ranges are skipped while Dynamo traces, and the compiled
                    code has none.
The eager forward and the captured forward launch the same kernels in the same order (same shapes, same
cuBLAS settings, no autograd); the replayed output is compared with the eager one.

    python3 graph_layers.py [--mode graph|compile] [--replays N] [--layers L] [--seed S]
                            [--compile-iters N] [--compile-nvtx break|skip]

Prints one JSON line on stdout at the end: mode, replays, layers, eager_ms (the phase:eager forward, synchronized),
capture_ms (the torch.cuda.graph block, synchronized after), replay_ms_mean (N back-to-back replays and one
synchronize, over N), max_abs_diff and bitwise_equal (replayed or compiled output against the eager one), check
(ok when max_abs_diff <= 1e-3; exit status 3 otherwise); in compile mode compile_first_ms (first call, compilation
included) and compile_rest_ms_mean (the other calls, each synchronized) instead of capture_ms / replay_ms_mean.
Times are time.perf_counter() with torch.cuda.synchronize() before and after.
"""
import argparse
import json
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

nvtx = torch.cuda.nvtx

# Whether Model.forward pushes its ranges (off for the unranged warm-ups), and whether it skips them while Dynamo
# traces (--compile-nvtx skip).
RANGES = {"on": False, "skip_when_compiling": False}


def push(name):
    if RANGES["on"] and not (RANGES["skip_when_compiling"] and torch.compiler.is_compiling()):
        nvtx.range_push(name)


def pop():
    if RANGES["on"] and not (RANGES["skip_when_compiling"] and torch.compiler.is_compiling()):
        nvtx.range_pop()


class Attention(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.ln = nn.LayerNorm(d)
        self.q = nn.Linear(d, d)
        self.k = nn.Linear(d, d)
        self.v = nn.Linear(d, d)
        self.out = nn.Linear(d, d)
        self.scale = 1.0 / d**0.5

    def forward(self, x):
        h = self.ln(x)
        q, k, v = self.q(h), self.k(h), self.v(h)
        att = torch.matmul(q, k.transpose(-2, -1)) * self.scale
        att = torch.softmax(att, dim=-1)
        return x + self.out(torch.matmul(att, v))


class MLP(nn.Module):
    def __init__(self, d, ff):
        super().__init__()
        self.ln = nn.LayerNorm(d)
        self.fc1 = nn.Linear(d, ff)
        self.fc2 = nn.Linear(ff, d)

    def forward(self, x):
        return x + self.fc2(F.gelu(self.fc1(self.ln(x))))


class Layer(nn.Module):
    def __init__(self, d, ff):
        super().__init__()
        self.attention = Attention(d)
        self.mlp = MLP(d, ff)

    def forward(self, x):
        push("attention")
        x = self.attention(x)
        pop()
        push("mlp")
        x = self.mlp(x)
        pop()
        return x


class Model(nn.Module):
    def __init__(self, d, ff, layers):
        super().__init__()
        self.layers = nn.ModuleList(Layer(d, ff) for _ in range(layers))

    def forward(self, x):
        push("forward")
        for i, layer in enumerate(self.layers):
            push(f"layer{i}")
            x = layer(x)
            pop()
        pop()
        return x


def parse():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--mode", choices=["graph", "compile"], default="graph")
    p.add_argument("--replays", type=int, default=20)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--compile-iters", type=int, default=5)
    p.add_argument("--compile-nvtx", choices=["break", "skip"], default="break")
    a = p.parse_args()
    if a.replays < 1 or a.layers < 1 or a.compile_iters < 1:
        p.error("--replays, --layers and --compile-iters must be >= 1")
    return a


def timed(fn):
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    r = fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - t0) * 1e3, r


def main():
    a = parse()
    if not torch.cuda.is_available():
        sys.exit("graph_layers.py: CUDA is not available")
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cudnn.benchmark = False
    torch.manual_seed(a.seed)
    torch.cuda.manual_seed_all(a.seed)
    dev = torch.device("cuda", 0)
    torch.cuda.set_device(dev)

    d, ff, batch, seq = 512, 2048, 8, 128
    model = Model(d, ff, a.layers).to(dev).eval()
    static_x = torch.randn(batch, seq, d, device=dev)
    out = {
        "workload": "graph_layers",
        "mode": a.mode,
        "replays": a.replays if a.mode == "graph" else 0,
        "layers": a.layers,
        "batch": batch,
        "seq": seq,
        "dim": d,
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "device": torch.cuda.get_device_name(dev),
    }

    with torch.no_grad():
        RANGES["on"] = False
        for _ in range(3):
            model(static_x)
        torch.cuda.synchronize()

        RANGES["on"] = True
        nvtx.range_push("phase:eager")
        eager_ms, eager_y = timed(lambda: model(static_x))
        nvtx.range_pop()

        if a.mode == "graph":
            # Warm-up on a side stream before capture, as torch.cuda.graph's documentation asks.
            RANGES["on"] = False
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                for _ in range(3):
                    model(static_x)
            torch.cuda.current_stream().wait_stream(side)
            torch.cuda.synchronize()

            RANGES["on"] = True
            g = torch.cuda.CUDAGraph()

            def capture():
                with torch.cuda.graph(g):
                    y = model(static_x)
                return y

            nvtx.range_push("phase:capture")
            capture_ms, static_y = timed(capture)
            nvtx.range_pop()

            def replay():
                for _ in range(a.replays):
                    g.replay()

            nvtx.range_push("phase:replay")
            replay_ms, _ = timed(replay)
            nvtx.range_pop()
            diff = (static_y - eager_y).abs().max().item()
            out.update(capture_ms=capture_ms, replay_ms_mean=replay_ms / a.replays)
        else:
            RANGES["skip_when_compiling"] = a.compile_nvtx == "skip"
            compiled = torch.compile(model, mode="reduce-overhead")
            times = []
            y = None
            nvtx.range_push("phase:compile")
            for _ in range(a.compile_iters):
                # Inference: tell CUDA graph trees that each call is a new iteration (the previous call's output,
                # which the next replay overwrites, is never read).
                torch.compiler.cudagraph_mark_step_begin()
                ms, y = timed(lambda: compiled(static_x))
                times.append(ms)
            nvtx.range_pop()
            diff = (y - eager_y).abs().max().item()
            rest = times[1:]
            out.update(
                compile_iters=a.compile_iters,
                compile_nvtx=a.compile_nvtx,
                compile_first_ms=times[0],
                compile_rest_ms_mean=sum(rest) / len(rest) if rest else None,
            )
    # The graph replays the eager kernels, so the outputs should agree bit for bit (bitwise_equal); the compiled
    # model runs other (fused) kernels, hence the tolerance of the check.
    out.update(eager_ms=eager_ms, max_abs_diff=diff, bitwise_equal=diff == 0.0, check="ok" if diff <= 1e-3 else "FAIL")
    print(json.dumps(out), flush=True)
    return 0 if out["check"] == "ok" else 3


if __name__ == "__main__":
    sys.exit(main())
