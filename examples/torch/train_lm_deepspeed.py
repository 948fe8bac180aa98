"""examples/torch/train_lm.py's language model trained with DeepSpeed (ZeRO stage 3, optimizer state offloaded
to the CPU with DeepSpeed's CPUAdam, mixed precision) on backend "tessera" (or nccl, gloo: --backend).

    tessera run --island ascend=cuda:1 --island nvidia=cuda:1 --sm-share ascend=35 --sm-share nvidia=65 -- \
        python examples/torch/train_lm_deepspeed.py --steps 300 --precision f32 --weights-file lm-weights.json
    tessera run --island nvidia=cuda:1 -- python examples/torch/train_lm_deepspeed.py --backend nccl --steps 300
    tessera run --island ascend=host:1 --island nvidia=host:1 -- python examples/torch/train_lm_deepspeed.py --cpu

The backend: deepspeed.init_distributed(dist_backend=BACKEND) before deepspeed.initialize() (initialize()
alone asks its accelerator, which names nccl on CUDA, gloo/ccl on CPU; it keeps a backend already set up).
The model, corpus (the standard library's sources, bytes) and seed are train_lm.py's; the global batch is
split by the islands' speeds (HeteroDistributedSampler, --weights-file from train_lm.py --mode calibrate,
else TESSERA_ISLAND_WEIGHTS, else equal; --split even), and each rank's loss is scaled by n_r * W / B so that
DeepSpeed's mean over ranks is the whole global batch's mean gradient (docs/torch.md, Heterogeneous batches).
--precision: bf16 or fp16 (DeepSpeed's mixed precision: 16-bit parameters and activations, f32 master weights
in the optimizer; fp16 with dynamic loss scaling), tf32 or f32 (f32 weights; tf32 lets matmuls use TF32).
On MPS shares of the H200 16-bit GEMMs were measured wrong (bench/gpu/mps_matmul_probe.py): there use tf32.
--offload cpu (default): "offload_optimizer": {"device": "cpu"}, DeepSpeed's CPUAdam (its cpu_adam op is
JIT-built on first use). Prints tokens/s per island, the loss, the share of the step time spent in
engine.step() (with offload: the gradient copy to the CPU, CPUAdam, the parameter copy back), and whether the
parameters, gathered after the last step (deepspeed.zero.GatheredParameters), are bit-identical on every rank.
--log FILE (rank 0): one {"step", "loss"} line per step and a summary line, as train_lm.py.
--cpu: a smoke run on CPU ranks (DeepSpeed's CPU accelerator, f32, a 2-layer model, 6 steps).
"""
import argparse
import json
import os
import sys
import time

T_START = time.perf_counter()  # before torch and DeepSpeed are imported (--log's "stamps")
if "--cpu" in sys.argv:
    os.environ.setdefault("DS_ACCELERATOR", "cpu")

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import tessera.torch as tt  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import train_lm  # noqa: E402  (the model, the corpus, the islands' weights)


def parse():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--backend", default="tessera")
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--warmup-steps", type=int, default=10, help="steps left out of the tokens/s figures")
    p.add_argument("--global-batch", type=int, default=32, help="sequences per micro-batch, over all ranks")
    p.add_argument("--accum", type=int, default=1, help="micro-batches per optimizer step")
    p.add_argument("--seq", type=int, default=512)
    p.add_argument("--layers", type=int, default=12)
    p.add_argument("--dim", type=int, default=1024)
    p.add_argument("--heads", type=int, default=16)
    p.add_argument("--lr", type=float, default=3e-4)
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--split", choices=["speed", "even"], default="speed")
    p.add_argument("--weights-file", default=None)
    p.add_argument("--precision", choices=["bf16", "fp16", "tf32", "f32"], default="bf16")
    p.add_argument("--offload", choices=["cpu", "none"], default="cpu")
    p.add_argument("--corpus-mb", type=int, default=48)
    p.add_argument("--log", default=None)
    p.add_argument("--print-every", type=int, default=10)
    p.add_argument("--independent", action="store_true",
                   help="the sum of the parts: each rank trains alone (a DeepSpeed world of one on --backend, "
                        "nccl/gloo) on the micro-batches it would get in the hybrid job, all islands at once; "
                        "--log FILE becomes FILE.VENDOR per island")
    p.add_argument("--cpu", action="store_true", help="smoke run on CPU ranks: f32, 2 layers of 128, seq 64, 6 steps")
    p.add_argument("--zero", default="", metavar="KEY=VALUE,...",
                   help="entries of zero_optimization to set, e.g. stage3_prefetch_bucket_size=1e7 (numbers as int "
                        "when whole, true/false as bools)")
    p.add_argument("--trace", action="store_true",
                   help="per rank, over the timed steps: the host time of each phase of a step (forward, backward "
                        "and its ZeRO epilogue, the drain, engine.step) and every collective DeepSpeed makes (calls, "
                        "bytes, host time in the call and in wait()), per optimizer step; in the --log summary too")
    p.add_argument("--profile", default=None, metavar="FILE",
                   help="after the timed steps, one more step under torch.profiler: a Chrome trace to FILE.RANK.json.gz "
                        "and a summary line (GPU kernel time, copies, the step's wall time)")
    a = p.parse_args()
    if a.cpu:
        a.precision, a.layers, a.dim, a.heads, a.seq, a.global_batch, a.corpus_mb = "f32", 2, 128, 4, 64, 8, 2
        a.steps, a.warmup_steps = min(a.steps, 6), min(a.warmup_steps, 2)
    return a


def ds_config(args, per_rank):
    zero = {"stage": 3, "overlap_comm": True, "contiguous_gradients": True,
            "stage3_param_persistence_threshold": 0}  # every parameter partitioned: each rank owns a shard
    if args.offload == "cpu":
        zero["offload_optimizer"] = {"device": "cpu", "pin_memory": not args.cpu}
    zero.update(zero_overrides(args.zero))
    cfg = {"train_micro_batch_size_per_gpu": per_rank, "gradient_accumulation_steps": args.accum,
           "optimizer": {"type": "AdamW", "params": {"lr": args.lr, "weight_decay": 0.1, "betas": [0.9, 0.95],
                                                     "eps": 1e-8}},
           "scheduler": {"type": "WarmupLR", "params": {"warmup_min_lr": 0, "warmup_max_lr": args.lr,
                                                        "warmup_num_steps": 50, "warmup_type": "linear"}},
           "gradient_clipping": 1.0, "zero_optimization": zero, "steps_per_print": 1 << 30,
           "wall_clock_breakdown": False}
    if args.offload != "cpu" and args.cpu:
        cfg["optimizer"]["params"]["torch_adam"] = True  # no FusedAdam on the CPU accelerator
    if args.precision == "bf16":
        cfg["bf16"] = {"enabled": True}
    elif args.precision == "fp16":
        cfg["fp16"] = {"enabled": True, "loss_scale": 0, "initial_scale_power": 16}
    return cfg


def zero_overrides(text):
    """--zero "k=v,k2=v2": numbers (1e7 -> 10000000), true/false, else strings."""
    out = {}
    for item in filter(None, (t.strip() for t in text.split(","))):
        k, _, v = item.partition("=")
        if v.lower() in ("true", "false"):
            out[k] = v.lower() == "true"
        else:
            try:
                f = float(v)
                out[k] = int(f) if f == int(f) else f
            except ValueError:
                out[k] = v
    return out


class Trace:
    """--trace: host-side accounting, per phase of the step, of the time spent and of the collectives made through
    torch.distributed (DeepSpeed's ZeRO-3 all-gathers, reduce-scatters, all-reduces): calls, bytes (the largest
    tensor of the call), host time inside the call and inside Work.wait(). Installed before
    deepspeed.init_distributed (DeepSpeed keeps references to torch.distributed's functions); counts only while
    `on` (the timed steps)."""
    OPS = ("all_gather_into_tensor", "reduce_scatter_tensor", "all_reduce", "all_gather", "reduce_scatter",
           "broadcast", "all_reduce_coalesced", "all_to_all_single")

    def __init__(self):
        self.on, self.phase = False, "setup"
        self.calls = {}   # "phase/op" -> [calls, bytes, call s, wait s]
        self.times = {}   # phase -> host s
        for name in self.OPS:
            f = getattr(dist, name, None)
            if f is not None:
                setattr(dist, name, self._wrap(name, f))

    def _rec(self, name):
        return self.calls.setdefault(f"{self.phase}/{name}", [0, 0, 0.0, 0.0])

    def _wrap(self, name, f):
        trace = self

        class Waited:  # the Work, with wait() timed
            def __init__(self, work):
                self._work = work

            def wait(self, *a, **k):
                if not trace.on:
                    return self._work.wait(*a, **k)
                t = time.perf_counter()
                r = self._work.wait(*a, **k)
                trace._rec(name)[3] += time.perf_counter() - t
                return r

            def __getattr__(self, attr):
                return getattr(self._work, attr)

        def call(*a, **k):
            if not trace.on:
                return f(*a, **k)
            ts = [x for x in list(a) + list(k.values()) if torch.is_tensor(x)]
            for x in list(a) + list(k.values()):
                if isinstance(x, (list, tuple)):
                    ts += [y for y in x if torch.is_tensor(y)]
            t = time.perf_counter()
            w = f(*a, **k)
            r = trace._rec(name)
            r[0] += 1
            r[1] += max((x.numel() * x.element_size() for x in ts), default=0)
            r[2] += time.perf_counter() - t
            return Waited(w) if w is not None and k.get("async_op") else w
        call.__wrapped__ = f
        return call

    def time(self, phase, t):
        if self.on:
            self.times[phase] = self.times.get(phase, 0.0) + t

    def wrap_method(self, obj, attr, phase):
        """obj.attr timed as `phase` (and the collectives inside it counted there)."""
        f = getattr(obj, attr, None)
        if f is None:
            return

        def call(*a, **k):
            outer, self.phase = self.phase, phase
            t = time.perf_counter()
            try:
                return f(*a, **k)
            finally:
                self.time(phase, time.perf_counter() - t)
                self.phase = outer
        setattr(obj, attr, call)

    def summary(self, steps):
        """per optimizer step, ms and MB"""
        n = max(steps, 1)
        return {"steps": steps,
                "phases_ms": {k: round(v * 1e3 / n, 2) for k, v in sorted(self.times.items())},
                "collectives": {k: {"calls": round(v[0] / n, 2), "MB": round(v[1] / n / 2**20, 1),
                                    "call_ms": round(v[2] * 1e3 / n, 2), "wait_ms": round(v[3] * 1e3 / n, 2)}
                                for k, v in sorted(self.calls.items())}}


STAMPS = {}


def stamp(what):
    """seconds since the start of the process at the end of each part of the run (where a run's time goes)"""
    STAMPS[what] = round(time.perf_counter() - T_START, 2)


def timed_call(trace, phase, f, *a):
    if trace is None:
        return f(*a)
    outer, trace.phase = trace.phase, phase
    t = time.perf_counter()
    try:
        return f(*a)
    finally:
        trace.time(phase, time.perf_counter() - t)
        trace.phase = outer


def profile_step(args, engine, stream, scale, dev, rank, label):
    """--profile: one optimizer step under torch.profiler (after the timed ones); the trace to FILE.RANK.json.gz and
    one line: the step's wall time, the GPU's kernel time (union of intervals: time the GPU computed), copies."""
    from torch.profiler import ProfilerActivity, profile
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if dev.type == "cuda" else [])
    sync(dev)
    with profile(activities=acts) as prof:
        t = time.perf_counter()
        for micro in range(args.accum):
            batch = stream.next().to(dev, non_blocking=True)
            loss = F.cross_entropy(engine(batch[:, :-1]).float().reshape(-1, 256), batch[:, 1:].reshape(-1))
            engine.backward(loss * scale)
            engine.step()
        sync(dev)
        wall = time.perf_counter() - t
    path = f"{args.profile}.{rank}.json.gz"
    prof.export_chrome_trace(path)
    kernels, copies = [], {}
    for e in prof.events():
        if e.device_type.name != "CUDA":
            continue
        start, dur = e.time_range.start, e.time_range.end - e.time_range.start
        if "memcpy" in e.name.lower() or "memset" in e.name.lower():
            copies[e.name] = copies.get(e.name, 0) + dur
        else:
            kernels.append((start, start + dur))
    busy, end = 0, None
    for a, b in sorted(kernels):  # union of the kernels' intervals
        if end is None or a > end:
            busy, end = busy + (b - a), b
        elif b > end:
            busy, end = busy + (b - end), b
    print(f"profile {label} rank {rank}: step {wall * 1e3:.1f} ms, GPU kernels busy {busy / 1e3:.1f} ms "
          f"({busy / 1e3 / (wall * 1e3):.0%} of it), copies " +
          ", ".join(f"{k} {v / 1e3:.1f} ms" for k, v in sorted(copies.items(), key=lambda kv: -kv[1])[:4]) +
          f"; trace {path}", flush=True)


def start_together(rank, world, port, timeout_s=600):
    """--independent: the worlds of one wait for each other before their first step (a TCPStore that job rank 0
    serves on `port`). Unsynchronised, one island's timed steps may start after the other's have ended, and its
    figure is then nearer "alone" than "at once" (seen on an H200: bench/results/log/
    2026-12-03-deepspeed-balanced-split.md). Returns the store, which rank 0 must keep serving while the others may still read it."""
    from datetime import timedelta
    store = dist.TCPStore(os.environ.get("MASTER_ADDR", "127.0.0.1"), port, world, rank == 0,
                          timedelta(seconds=timeout_s))
    store.set(f"ready{rank}", "1")
    store.wait([f"ready{r}" for r in range(world)])
    return store


def sync(dev):
    if dev.type == "cuda":
        torch.cuda.synchronize()


def main():
    args = parse()
    import deepspeed
    dev = torch.device("cpu") if args.cpu else torch.device(os.environ.get("TESSERA_DEVICE", "cuda:0"))
    # `tessera run` shows each GPU rank only its own GPU, as cuda:0, while LOCAL_RANK stays its index on the
    # node; DeepSpeed and Accelerate pick cuda:LOCAL_RANK (on the H200 rank 1 failed: "device_id cuda:1 is out
    # of range"), so LOCAL_RANK is made the index of this rank's device.
    if dev.type == "cuda":
        os.environ["LOCAL_RANK"] = str(dev.index or 0)
        torch.cuda.set_device(dev)
        torch.backends.cuda.matmul.allow_tf32 = args.precision == "tf32"
        torch.backends.cudnn.allow_tf32 = args.precision == "tf32"
    job_rank, job_world = int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1"))
    base_port = int(os.environ.get("MASTER_PORT", "29500"))
    if args.independent:  # a world of one per rank, on a port of its own beside the launcher's MASTER_PORT
        os.environ.update(RANK="0", WORLD_SIZE="1", LOCAL_WORLD_SIZE="1", MASTER_PORT=str(base_port + 1 + job_rank))
    trace = Trace() if args.trace else None
    stamp("imports")
    deepspeed.init_distributed(dist_backend=args.backend)
    stamp("init_distributed")
    rank, world = dist.get_rank(), dist.get_world_size()
    isl, vendor, emulated = train_lm.island_info()
    label = vendor + (f" ({emulated})" if emulated else "")
    data, root, nbytes = train_lm.corpus(args.seq, args.corpus_mb)
    weights = train_lm.per_rank_weights(args, job_world)
    sampler = tt.HeteroDistributedSampler(data, args.global_batch, num_replicas=job_world, rank=job_rank,
                                          weights=weights, seed=args.seed, shuffle=True)
    # n_r * W / B: DeepSpeed's mean over ranks becomes the global batch's mean (a world of one: its own mean)
    scale = 1.0 if args.independent else sampler.fraction * world
    if args.independent and args.log:
        args.log = f"{args.log}.{vendor}"
    torch.manual_seed(args.seed)
    model = train_lm.LM(args.layers, args.dim, args.heads, args.seq)
    model.head.weight = torch.nn.Parameter(model.tok.weight.detach().clone())  # untied: one owner per tensor
    nparams = sum(p.numel() for p in model.parameters())
    stamp("corpus and model")
    engine, opt, _, _ = deepspeed.initialize(model=model, model_parameters=model.parameters(),
                                             config=ds_config(args, max(1, args.global_batch // world)))
    stamp("deepspeed.initialize")
    if trace:  # ZeRO-3's end of backward: the gradients' reduce-scatter and their copy/accumulation (offload)
        trace.wrap_method(engine.optimizer, "independent_gradient_partition_epilogue", "bwd.epilogue")
    if rank == 0:
        print(f"model {nparams / 1e6:.1f}M parameters; corpus {nbytes / 2**20:.1f} MiB, {data.shape[0]} sequences; "
              f"deepspeed {deepspeed.__version__} ZeRO-3, offload {args.offload}, precision {args.precision}, "
              f"backend {dist.get_backend()}, world {world}; optimizer {type(opt.optimizer).__name__}; "
              f"batch split {sampler.shares} of {args.global_batch}", flush=True)
    stream = train_lm.BatchStream(data, sampler)
    if args.independent and job_world > 1:  # the worlds use base_port + 1 .. base_port + job_world
        barrier = start_together(job_rank, job_world, base_port + 1 + job_world)  # noqa: F841 (kept: rank 0 serves it)
        stamp("start barrier")
    losses, tokens, t0, t_opt, t_all = [], 0, None, 0.0, 0.0
    timed = lambda phase, f, *a: timed_call(trace, phase, f, *a)  # noqa: E731
    for step in range(args.steps):
        if step == args.warmup_steps:
            sync(dev)
            t0, tokens, t_opt = time.perf_counter(), 0, 0.0
            if trace:
                trace.on = True
            stamp("warm-up steps")
        total = torch.zeros((), device=dev)
        for micro in range(args.accum):
            batch = stream.next().to(dev, non_blocking=True)
            logits = timed("fwd", engine, batch[:, :-1])
            loss = F.cross_entropy(logits.float().reshape(-1, 256), batch[:, 1:].reshape(-1))
            timed("bwd", engine.backward, loss * scale)  # DeepSpeed divides by accum itself
            total += loss.detach().float() * sampler.fraction / args.accum
            tokens += batch.shape[0] * args.seq
            if micro < args.accum - 1:
                timed("micro_step", engine.step)  # at a micro-batch that is not the boundary DeepSpeed only accumulates
        timed("drain", sync, dev)  # the GPU work still queued when the host is done with the backward
        ts = time.perf_counter()
        timed("step", engine.step)
        sync(dev)
        if t0 is not None:
            t_opt += time.perf_counter() - ts
        timed("loss_allreduce", dist.all_reduce, total)
        losses.append(total.item())
        if rank == 0 and ((step + 1) % args.print_every == 0 or step + 1 == args.steps):
            print(f"step {step + 1}/{args.steps} loss {losses[-1]:.6f}", flush=True)
    sync(dev)
    elapsed = time.perf_counter() - t0 if t0 else float("nan")
    stamp("timed steps")
    traced = None
    if trace:
        trace.on = False
        traced = trace.summary(args.steps - args.warmup_steps)
        traced["step_ms"] = round(elapsed * 1e3 / max(args.steps - args.warmup_steps, 1), 2)
        print(f"trace {label} rank {job_rank}: {json.dumps(traced)}", flush=True)
    if args.profile:
        try:
            profile_step(args, engine, stream, scale, dev, job_rank, label)
        except Exception as e:  # the profiler is a diagnostic: the run's figures stand without it
            print(f"profile {label} rank {job_rank}: failed: {e}", flush=True)
        stamp("profiled step")
    params = list(engine.module.named_parameters())
    with deepspeed.zero.GatheredParameters([p for _, p in params]):
        gathered = {n: p.detach().clone() for n, p in params}
    bad = tt.check_replicas(gathered) if dist.get_backend() == "tessera" else None
    mine = {"island": isl, "vendor": vendor, "label": label, "batch": sampler.batch_size,
            "tokens_per_s": tokens / elapsed if t0 else 0.0, "opt_share": t_opt / elapsed if t0 else 0.0,
            "trace": traced}
    everyone = [None] * world
    dist.all_gather_object(everyone, mine)
    if rank == 0:
        per = {}
        for e in everyone:
            d = per.setdefault(e["vendor"], {"label": e["label"], "ranks": 0, "tokens_per_s": 0.0, "batch": 0})
            d["ranks"] += 1
            d["tokens_per_s"] += e["tokens_per_s"]
            d["batch"] += e["batch"]
        total_tps = sum(d["tokens_per_s"] for d in per.values())
        share = max(e["opt_share"] for e in everyone)
        for d in per.values():
            print(f"island {d['label']}: {d['ranks']} rank(s), {d['batch']} sequences/micro-batch x {args.accum}, "
                  f"{d['tokens_per_s']:.0f} tokens/s", flush=True)
        last = losses[-50:]
        print(f"total {total_tps:.0f} tokens/s; loss {losses[0]:.4f} -> {losses[-1]:.4f} (mean of the last 50: "
              f"{sum(last) / len(last):.6f}); engine.step() (offload {args.offload}: optimizer and copies) "
              f"{share:.1%} of the step time", flush=True)
        if bad is None:
            verdict = f"not checked (backend {dist.get_backend()})"
        else:
            verdict = "bit-identical on every rank" if not bad else f"{len(bad)} tensors differ"
        print(f"replicas: {verdict}", flush=True)
        if args.log:
            with open(args.log, "w") as f:
                for i, l in enumerate(losses):
                    f.write(json.dumps({"step": i, "loss": l}) + "\n")
                f.write(json.dumps({"mode": "deepspeed", "backend": dist.get_backend(), "precision": args.precision,
                                    "offload": args.offload, "world": world, "params": nparams,
                                    "global_batch": args.global_batch, "accum": args.accum, "seq": args.seq,
                                    "steps": args.steps, "islands": per, "tokens_per_s": round(total_tps, 1),
                                    "shares": sampler.shares, "step_share_engine_step": share,
                                    "replicas_identical": None if bad is None else not bad,
                                    "final_loss_mean_last50": sum(last) / len(last),
                                    "zero": ds_config(args, 1)["zero_optimization"],
                                    "trace": {e["vendor"]: e["trace"] for e in everyone if e["trace"]} or None,
                                    "stamps": STAMPS}) + "\n")
    ok = not bad
    stamp("end")
    dist.barrier()
    dist.destroy_process_group()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
