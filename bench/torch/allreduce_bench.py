"""all_reduce busbw through torch.distributed with backend "tessera", on CUDA tensors.

    tessera run --island ascend=cuda:1 --island nvidia=cuda:1 -- python bench/torch/allreduce_bench.py

The same measurement as the C API's benchmark on device memory (`tessera bench allreduce --iters 5 --batch 5
--warmup 2 --op avg --in-place`, as scripts/torch-check.sh runs it): --iters calls of all_reduce on one f32
buffer of each --sizes, after a warm-up, timed as it times (host clock around the calls and a sync, the slowest
rank, median of --rounds); busbw = bytes/time
x 2(n-1)/n, as nccl-tests. One JSON row per size from rank 0: {"bench": "torch_allreduce", ...}.
"""
import argparse
import json
import os
import statistics
import time

import torch
import torch.distributed as dist

import tessera.torch  # noqa: F401

p = argparse.ArgumentParser()
p.add_argument("--sizes", default="64M,256M")
p.add_argument("--iters", type=int, default=5)
p.add_argument("--rounds", type=int, default=5)
p.add_argument("--async", dest="asynchronous", action="store_true",
               help="queue the --iters calls with async_op=True and wait for them together (as the C API's --batch)")
p.add_argument("--phases", type=int, default=0,
               help="then N more calls per size, each timed in phases on the monotonic clock (of TESSERA_DEVICE_TRACE): "
                    "issued, its end seen by polling Work.is_completed(), wait() returned, torch.cuda.synchronize() "
                    "returned; one row per rank")
a = p.parse_args()
if a.phases < 0 or a.iters < 1 or a.rounds < 1:
    p.error(f"--phases must be >= 0 and --iters, --rounds >= 1 (got {a.phases}, {a.iters}, {a.rounds})")
dev = torch.device(os.environ.get("TESSERA_DEVICE", "cuda:0"))
torch.cuda.set_device(dev)
dist.init_process_group("tessera")
n = dist.get_world_size()
for s in a.sizes.split(","):
    nbytes = int(s[:-1]) << {"K": 10, "M": 20, "G": 30}[s[-1]] if s[-1] in "KMG" else int(s)
    t = torch.randn(nbytes // 4, device=dev)
    for _ in range(2):
        dist.all_reduce(t)
    torch.cuda.synchronize()
    busbw, issue_us = [], []
    for _ in range(a.rounds):  # as tessera bench --batch: host clock around --iters calls + a sync, slowest rank's time
        dist.barrier()
        t0 = time.perf_counter()
        if a.asynchronous:
            works = [dist.all_reduce(t, async_op=True) for _ in range(a.iters)]
            issue_us.append((time.perf_counter() - t0) / a.iters * 1e6)  # host time to queue one call
            for w in works:
                w.wait()
        else:
            for _ in range(a.iters):
                dist.all_reduce(t)
        torch.cuda.synchronize()
        sec = torch.tensor([(time.perf_counter() - t0) / a.iters], dtype=torch.float64, device=dev)
        dist.all_reduce(sec, op=dist.ReduceOp.MAX)
        busbw.append(nbytes / sec.item() / 1e9 * 2 * (n - 1) / n)
    if dist.get_rank() == 0:
        print(json.dumps({"bench": "torch_allreduce", "calls": "async" if a.asynchronous else "sync",
                          "bytes": nbytes, "dtype": "f32", "world": n,
                          "layout": os.environ.get("TESSERA_ISLANDS", ""), "busbw_GBps": round(statistics.median(busbw), 3),
                          "min": round(min(busbw), 3), "max": round(max(busbw), 3),
                          **({"issue_us": round(statistics.median(issue_us), 1)} if issue_us else {})}), flush=True)
    if a.phases:  # where a synchronous call's time goes between the bridge's end and the caller's return
        us = lambda: time.perf_counter() * 1e6  # noqa: E731  CLOCK_MONOTONIC on Linux, as the trace's
        calls = []
        for i in range(a.phases):
            dist.barrier()
            torch.cuda.synchronize()
            c = {"start": us()}
            w = dist.all_reduce(t, async_op=True)
            c["issued"] = us()
            if i % 2 == 0:  # every other call also polls for its end on the GPU, before wait()
                while not w.is_completed():
                    pass
                c["completed"] = us()
            w.wait()
            c["waited"] = us()
            torch.cuda.synchronize()
            c["synced"] = us()
            calls.append({k: round(v, 1) for k, v in c.items()})
        print(json.dumps({"bench": "torch_allreduce_phases", "rank": dist.get_rank(), "bytes": nbytes,
                          "calls": calls}), flush=True)
dist.destroy_process_group()
