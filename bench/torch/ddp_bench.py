"""DDP step time of a ~100M-parameter model on this job's GPU ranks: backend "tessera" against "nccl".

    tessera run --island nvidia=cuda:1 -- python bench/torch/ddp_bench.py --backend tessera|nccl

Model: 24 Linear(2048, 2048) layers with GELU (100.7M parameters, f32), batch 32 x 2048, SGD. Times
--steps steps after --warmup with CUDA events; prints one JSON row {"bench": "ddp_step", ...} from rank 0
with the median and the spread (min, max) of the step times.
"""
import argparse
import json
import os
import statistics

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

p = argparse.ArgumentParser()
p.add_argument("--backend", default="tessera")
p.add_argument("--steps", type=int, default=30)
p.add_argument("--warmup", type=int, default=10)
a = p.parse_args()
if a.backend == "tessera":
    import tessera.torch  # noqa: F401
dev = torch.device(os.environ.get("TESSERA_DEVICE", "cuda:0"))
torch.cuda.set_device(dev)
dist.init_process_group(a.backend)
torch.manual_seed(0)
layers = []
for _ in range(24):
    layers += [nn.Linear(2048, 2048), nn.GELU()]
model = DDP(nn.Sequential(*layers).to(dev))
nparams = sum(p.numel() for p in model.parameters())
opt = torch.optim.SGD(model.parameters(), lr=1e-4)
x = torch.randn(32, 2048, device=dev)
times = []
for step in range(a.warmup + a.steps):
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    opt.zero_grad(set_to_none=True)
    model(x).square().mean().backward()
    opt.step()
    end.record()
    torch.cuda.synchronize()
    if step >= a.warmup:
        times.append(start.elapsed_time(end))
if dist.get_rank() == 0:
    print(json.dumps({"bench": "ddp_step", "backend": a.backend, "world": dist.get_world_size(), "params": nparams,
                      "median_ms": round(statistics.median(times), 3), "min_ms": round(min(times), 3),
                      "max_ms": round(max(times), 3), "steps": a.steps}), flush=True)
dist.destroy_process_group()
