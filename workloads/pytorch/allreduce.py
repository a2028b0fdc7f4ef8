#!/usr/bin/env python3
"""Two-process NCCL all-reduce loop: the multi-process, multi-GPU workload for the recorder.

Each rank owns one GPU. Per iteration: fill a 16 MiB float32 tensor with (rank + 1), all_reduce (sum) it, and run a
small 512 x 512 matmul; NVTX ranges "iter i" around each iteration with "all_reduce" and "matmul" inside. After the
loop every element must equal 1 + 2 + ... + world_size. Each rank prints one JSON line on stdout.

Launch either way:
    python3 allreduce.py [--iters N] [--warmup W] [--world-size 2]     (spawns the ranks itself, free localhost port)
    torchrun --nproc_per_node=2 allreduce.py [--iters N] [--warmup W]   (uses torchrun's RANK / WORLD_SIZE / ...)

With a CUPTI injection library (CUDA_INJECTION64_PATH), every rank process loads it; give per-process output paths
(e.g. FLOOR_OUT=/tmp/floor-%p.json).
"""
import argparse
import json
import os
import socket
import sys
import time

# NVLink multicast (NVLS) stays off: this workload does not need it, and on shared hosts it must not be used.
os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
os.environ.setdefault("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1")

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

NUMEL = 16 * 1024 * 1024 // 4  # 16 MiB of float32


def parse(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--iters", type=int, default=50)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--world-size", type=int, default=2, help="ranks to spawn when not under torchrun")
    p.add_argument("--matmul", type=int, default=512)
    a = p.parse_args(argv)
    if a.iters < 1 or a.warmup < 0 or a.world_size < 1:
        p.error("--iters >= 1, --warmup >= 0, --world-size >= 1")
    return a


def run(rank, world, a, init_method):
    if torch.cuda.device_count() < world:
        sys.exit(f"allreduce.py: {world} ranks need {world} GPUs, found {torch.cuda.device_count()}")
    torch.cuda.set_device(rank)
    dev = torch.device("cuda", torch.cuda.current_device())
    dist.init_process_group("nccl", init_method=init_method, rank=rank, world_size=world, device_id=dev)
    torch.manual_seed(rank)
    t = torch.empty(NUMEL, dtype=torch.float32, device=dev)
    m = torch.randn(a.matmul, a.matmul, device=dev) / a.matmul
    nvtx = torch.cuda.nvtx

    def one(label):
        nvtx.range_push(label)
        nvtx.range_push("all_reduce")
        t.fill_(float(rank + 1))
        dist.all_reduce(t, op=dist.ReduceOp.SUM)
        nvtx.range_pop()
        nvtx.range_push("matmul")
        r = m @ m
        nvtx.range_pop()
        nvtx.range_pop()
        return r

    for i in range(a.warmup):
        one(f"warmup {i}")
    torch.cuda.synchronize()
    dist.barrier()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for i in range(a.iters):
        one(f"iter {i}")
    torch.cuda.synchronize()
    seconds = time.perf_counter() - t0
    expect = float(world * (world + 1) // 2)
    ok = bool(torch.all(t == expect).item())
    nbytes = NUMEL * 4
    # Bus bandwidth as nccl-tests defines it for all-reduce: algbw * 2 (n - 1) / n.
    algbw = nbytes * a.iters / seconds / 1e9
    out = {
        "workload": "allreduce",
        "rank": rank,
        "world_size": world,
        "device": torch.cuda.get_device_name(dev),
        "cuda_device": dev.index,
        "pid": os.getpid(),
        "iters": a.iters,
        "warmup": a.warmup,
        "bytes": nbytes,
        "seconds": seconds,
        "us_per_iter": seconds / a.iters * 1e6,
        "algbw_GBps": algbw,
        "busbw_GBps": algbw * 2 * (world - 1) / world if world > 1 else 0.0,
        "nccl": nccl_version(),
        "check": "ok" if ok else "FAIL",
    }
    # One write(2) per line, so that the ranks' lines never interleave on a shared stdout.
    sys.stdout.flush()
    os.write(sys.stdout.fileno(), (json.dumps(out) + "\n").encode())
    dist.barrier()
    dist.destroy_process_group()
    if not ok:
        sys.exit(3)


def nccl_version():
    try:
        v = torch.cuda.nccl.version()
        return ".".join(map(str, v)) if isinstance(v, tuple) else str(v)
    except Exception:  # noqa: BLE001 - informational only
        return None


def _spawned(rank, world, a, init_method):
    # As torchrun sets them, before CUDA starts: a recorder in this process reads them to label its rank.
    os.environ.update(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(world), LOCAL_WORLD_SIZE=str(world))
    run(rank, world, a, init_method)


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main():
    a = parse()
    if "RANK" in os.environ and "WORLD_SIZE" in os.environ:  # torchrun
        run(int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]), a, "env://")
        return
    # The parent does not touch CUDA (no cuInit here, so an injected CUPTI client loads in the ranks only).
    import torch.multiprocessing as mp

    init = f"tcp://127.0.0.1:{free_port()}"
    mp.spawn(_spawned, args=(a.world_size, a, init), nprocs=a.world_size, join=True)


if __name__ == "__main__":
    main()
