"""DeepSpeed ZeRO-3 through backend "tessera" (or gloo/nccl, to compare) under `tessera run`:

    build/tessera run --island ascend=host:1 --island nvidia=host:1 -- \
        python tests/torch/deepspeed_worker.py zero3 [--backend tessera] [--init deepspeed] [--log F] [--expect F]

Modes (each rank exits 0 when its checks pass; failures print "FAIL ..."; exit 77 when DeepSpeed is missing):
  zero3          ZeRO stage 3, fp32, torch's AdamW inside DeepSpeed ("torch_adam": no C++ op to build)
  zero3-offload  ZeRO stage 3, fp32, optimizer state offloaded to the CPU ("offload_optimizer": cpu) with
                 DeepSpeed's own DeepSpeedCPUAdam (its cpu_adam op is JIT-built on first use: g++ and ninja)
Checks: every parameter is really partitioned (each rank holds a shard only); the loss falls; after the last
step the parameters, gathered with deepspeed.zero.GatheredParameters, are bit-identical on every rank
(tessera.torch.check_replicas); the loss of every step and the final parameters match the same model trained
on one process with torch.optim.AdamW on the whole global batch (tolerance 1e-4 relative). --log FILE (rank 0)
writes the losses and the final parameters' digests as JSON; --expect FILE compares them with such a file of
another run (e.g. backend gloo against tessera: with two ranks the sums are exact-order, so the bits agree).

The model is built from a config (a small byte-level decoder, `CONFIG`), trained on the Python standard
library's sources (bytes), as examples/torch/train_lm.py. Host ranks use DeepSpeed's CPU accelerator
(DS_ACCELERATOR=cpu is set before DeepSpeed is imported), CUDA ranks its CUDA accelerator.

The backend: `--init deepspeed` (default) calls deepspeed.init_distributed(dist_backend=BACKEND) before
deepspeed.initialize(), which then finds DeepSpeed's communication backend initialised and keeps it
(initialize() itself would ask the accelerator for its backend name: gloo/ccl on CPU, nccl on CUDA);
`--init torch` calls torch.distributed.init_process_group(BACKEND) first, which DeepSpeed wraps as it is.
"""
import argparse
import datetime
import json
import os
import sys

# DeepSpeed picks its accelerator when it is first imported: a host rank is a CPU rank even where CUDA exists.
if os.environ.get("TESSERA_DEVICE", "host") == "host":
    os.environ.setdefault("DS_ACCELERATOR", "cpu")

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import tessera.torch as tt  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from worker_common import arm_hang_dump, check, device, failures, use_device  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "examples", "torch"))
from train_lm import Block, corpus  # noqa: E402  the LM experiment's transformer block and byte corpus

CONFIG = {"vocab": 256, "seq": 32, "dim": 64, "heads": 4, "layers": 2}
STEPS, GLOBAL_BATCH, LR, WD, CLIP, SEED = 8, 8, 3e-3, 0.1, 1.0, 1234
TOL = 1e-4


class TinyLM(nn.Module):
    """A decoder-only LM from a config dict; forward(batch of seq+1 tokens) returns the mean next-token loss."""

    def __init__(self, cfg):
        super().__init__()
        d = cfg["dim"]
        self.tok, self.pos = nn.Embedding(cfg["vocab"], d), nn.Embedding(cfg["seq"], d)
        self.blocks = nn.ModuleList(Block(d, cfg["heads"]) for _ in range(cfg["layers"]))
        self.ln, self.head = nn.LayerNorm(d), nn.Linear(d, cfg["vocab"], bias=False)
        self.vocab = cfg["vocab"]

    def forward(self, batch):
        idx, tgt = batch[:, :-1], batch[:, 1:]
        x = self.tok(idx) + self.pos(torch.arange(idx.shape[1], device=idx.device))
        for b in self.blocks:
            x = b(x)
        logits = self.head(self.ln(x))
        return F.cross_entropy(logits.float().reshape(-1, self.vocab), tgt.reshape(-1))


def build_model():
    torch.manual_seed(SEED)
    return TinyLM(CONFIG)


def global_batch(data, step):
    g = torch.Generator().manual_seed(SEED + step)
    return data[torch.randint(0, data.shape[0], (GLOBAL_BATCH,), generator=g)]


def ds_config(mode, per_rank):
    opt_params = {"lr": LR, "weight_decay": WD, "betas": [0.9, 0.999], "eps": 1e-8}
    zero = {"stage": 3, "stage3_param_persistence_threshold": 0,  # every parameter partitioned, none kept whole
            "reduce_bucket_size": 1 << 16, "stage3_prefetch_bucket_size": 1 << 16, "contiguous_gradients": True}
    if mode == "zero3-offload":
        zero["offload_optimizer"] = {"device": "cpu", "pin_memory": torch.cuda.is_available()}
    else:
        opt_params["torch_adam"] = True
    return {"train_micro_batch_size_per_gpu": per_rank, "gradient_accumulation_steps": 1,
            "optimizer": {"type": "AdamW", "params": opt_params}, "zero_optimization": zero,
            "gradient_clipping": CLIP,  # DeepSpeed's default is 1.0; stated, and done alike in reference()
            "steps_per_print": 1 << 30, "wall_clock_breakdown": False}


def reference(data):
    """The same model and global batches on one process, torch.optim.AdamW and the same gradient clipping
    (global norm): losses and final parameters."""
    m = build_model()
    opt = torch.optim.AdamW(m.parameters(), lr=LR, weight_decay=WD, betas=(0.9, 0.999), eps=1e-8)
    losses = []
    for step in range(STEPS):
        loss = m(global_batch(data, step))
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(m.parameters(), CLIP)
        opt.step()
        losses.append(loss.item())
    return losses, {n: p.detach().clone() for n, p in m.named_parameters()}


def digest_hex(t):
    return "%016x%016x" % tuple(int(x) & (2**64 - 1) for x in tt.digest(t.detach().cpu()).tolist())


def main():
    p = argparse.ArgumentParser()
    p.add_argument("mode", choices=["zero3", "zero3-offload"])
    p.add_argument("--backend", default="tessera")
    p.add_argument("--init", choices=["deepspeed", "torch"], default="deepspeed")
    p.add_argument("--log", default=None)
    p.add_argument("--expect", default=None)
    args = p.parse_args()
    arm_hang_dump()
    try:
        import deepspeed
    except ImportError as e:
        print(f"deepspeed_worker: SKIPPED: cannot import deepspeed ({e})", flush=True)
        sys.exit(77)
    from deepspeed.accelerator import get_accelerator
    dev = device()
    use_device(dev)
    timeout = datetime.timedelta(seconds=300)
    if args.init == "torch":
        dist.init_process_group(args.backend, timeout=timeout)
    else:
        deepspeed.init_distributed(dist_backend=args.backend, timeout=timeout)
    rank, world = dist.get_rank(), dist.get_world_size()
    backend = dist.get_backend()
    check(backend == args.backend, f"torch.distributed's backend is {backend}, not {args.backend}")
    if rank == 0:
        print(f"deepspeed {deepspeed.__version__}, accelerator {get_accelerator().device_name()} "
              f"(its own backend name: {get_accelerator().communication_backend_name()}), process group backend "
              f"{backend}, world {world}, init {args.init}, mode {args.mode}", flush=True)
    check(GLOBAL_BATCH % world == 0, f"world {world} does not divide the global batch {GLOBAL_BATCH}")
    per = GLOBAL_BATCH // world
    data = corpus(CONFIG["seq"], 1)[0]  # 1 MiB of the standard library, as train_lm.py reads it
    model = build_model()
    engine, opt, _, _ = deepspeed.initialize(model=model, model_parameters=model.parameters(),
                                             config=ds_config(args.mode, per))
    check(dist.get_backend() == args.backend, f"after deepspeed.initialize the backend is {dist.get_backend()}")
    params = list(engine.module.named_parameters())
    whole = [n for n, q in params if not hasattr(q, "ds_tensor") or q.ds_tensor.numel() >= q.ds_numel]
    check(not whole and world > 1 or world == 1, f"ZeRO-3 left parameters whole on rank {rank}: {whole[:5]}")
    if rank == 0:
        shard = sum(q.ds_tensor.numel() for _, q in params)
        full = sum(q.ds_numel for _, q in params)
        print(f"zero3: {full} parameters, {shard} held by rank 0 ({shard / full:.1%}); optimizer "
              f"{type(opt.optimizer).__name__ if hasattr(opt, 'optimizer') else type(opt).__name__}", flush=True)
    losses = []
    for step in range(STEPS):
        batch = global_batch(data, step)[rank * per:(rank + 1) * per].to(dev)
        loss = engine(batch)
        engine.backward(loss)
        engine.step()
        lt = loss.detach().clone()
        dist.all_reduce(lt)
        losses.append(lt.item() / world)
        if rank == 0:
            print(f"step {step + 1}/{STEPS} loss {losses[-1]:.6f}", flush=True)
    check(losses[-1] < losses[0], f"loss did not fall: {losses[0]:.5f} -> {losses[-1]:.5f}")
    with deepspeed.zero.GatheredParameters([q for _, q in params]):
        gathered = {n: q.detach().clone().cpu() for n, q in params}
    check(all(t.numel() > 0 for t in gathered.values()), "GatheredParameters gave empty tensors")
    bad = tt.check_replicas({n: t.to(dev) for n, t in gathered.items()})
    check(not bad, f"parameters differ across ranks after the last step: {bad}")
    if rank == 0:
        print(f"replicas: {'bit-identical on every rank' if not bad else f'{len(bad)} tensors differ'} "
              f"({len(gathered)} gathered tensors)", flush=True)
    ref_losses, ref_params = reference(data)
    worst_loss = max(abs(a - b) / abs(b) for a, b in zip(losses, ref_losses))
    # parameters: the relative L2 difference of the whole parameter vector (Adam turns rounding-level gradient
    # differences of elements whose gradient is near 0 into updates of either sign, so the largest element
    # difference, or that of a small tensor such as a LayerNorm bias, says little)
    diff2 = sum((gathered[n].double() - ref_params[n].double()).pow(2).sum() for n in gathered)
    worst_param = (diff2.sqrt() / sum(t.double().pow(2).sum() for t in ref_params.values()).sqrt()).item()
    if rank == 0:
        print("one process losses:", " ".join(f"{x:.6f}" for x in ref_losses), flush=True)
        print(f"one process: loss {ref_losses[0]:.6f} -> {ref_losses[-1]:.6f}; max relative difference of the loss "
              f"{worst_loss:.2e}, of the parameters (L2) {worst_param:.2e} (tolerance {TOL:.0e})", flush=True)
    check(worst_loss <= TOL, f"loss differs from the one-process run by {worst_loss:.2e} (> {TOL:.0e})")
    check(worst_param <= TOL, f"parameters differ from the one-process run by {worst_param:.2e} (> {TOL:.0e})")
    digests = {n: digest_hex(t) for n, t in gathered.items()}
    if rank == 0 and args.log:
        with open(args.log, "w") as f:
            json.dump({"backend": backend, "mode": args.mode, "world": world, "losses": losses,
                       "digests": digests}, f)
    if args.expect:
        with open(args.expect) as f:
            other = json.load(f)
        same_loss = [a == b for a, b in zip(losses, other["losses"])]
        same_param = [n for n in digests if digests[n] == other["digests"].get(n)]
        wl = max(abs(a - b) / abs(b) for a, b in zip(losses, other["losses"]))
        if rank == 0:
            print(f"against {other['backend']} ({args.expect}): {sum(same_loss)} of {len(losses)} losses and "
                  f"{len(same_param)} of {len(digests)} parameter tensors bit-identical; max relative loss "
                  f"difference {wl:.2e}", flush=True)
        check(wl <= TOL, f"loss differs from the {other['backend']} run by {wl:.2e} (> {TOL:.0e})")
    dist.barrier()
    engine.destroy() if hasattr(engine, "destroy") else None
    dist.destroy_process_group()
    print(f"rank {rank}: deepspeed {args.mode} on {backend} {'passed' if not failures else 'FAILED'}", flush=True)
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
