"""A decoder-only transformer language model trained across islands through the "tessera" backend.

    tessera run --island ascend=cuda:1 --island nvidia=cuda:1 --sm-share ascend=40 -- \
        python examples/torch/train_lm.py --steps 300 --weights-file lm-weights.json

Model: plain torch, random initialisation (default 12 layers, d_model 1024, 16 heads, sequence 512:
about 151M parameters, GPT-2's N(0, 0.02) embeddings), AdamW, bf16 autocast (--precision: tf32 or f32
matmuls instead), a fixed seed. Data: the Python standard library's own sources
(a real text corpus already on every machine with Python), tokenised at byte level (vocabulary 256), cut
into sequences of --seq + 1 bytes. DDP through backend "tessera", HeteroDistributedSampler with the islands'
measured speeds (--weights-file from --mode calibrate, else TESSERA_ISLAND_WEIGHTS, else equal) and
hetero_allreduce_hook, so the synchronised gradient is the whole global batch's mean gradient. By default
the optimizer is ZeroRedundancyOptimizer (each parameter stepped by one rank and broadcast: replicas stay
bit-identical across devices); --optimizer adamw for plain DDP.

Modes:
  hybrid       (default) one job, DDP over every rank, the global batch split by speed (--split even: equally)
  independent  every rank trains its own copy on its own share of the batch with no synchronisation: the
               "sum of the parts" baseline (same micro-batches as hybrid, all islands at the same time)
  calibrate    each island alone in turn (the others wait), its tokens/s measured; writes --weights-file
               ({"islands": {vendor: tokens/s per rank}, "weights": "w0,w1"}) for the sampler and the catalog
  grad-error   one step; the synchronised gradient against an f64 reference of the same per-rank gradients,
               for the gradient cast to f32, bf16 and f16 before the allreduce
Prints tokens/s per island and in total, and the loss; --log FILE writes one JSON line per step and a
summary (rank 0). Islands run on an SM share (tessera run --sm-share) are labelled as emulated.

Checkpoints and resume (--mode hybrid, any number of islands; run on the H200 by scripts/demo-gpu.sh): with --ckpt-dir DIR
(default $TESSERA_CKPT_ROOT, which the job daemon sets) the whole training state is saved through
torch.distributed.checkpoint into Tessera's store (tessera.torch.checkpoint.TesseraWriter) as step N = the
number of optimizer steps done: every --ckpt-every N steps (default $TESSERA_CKPT_EVERY, else 0: none on the
way), on SIGTERM and at the end. On SIGTERM every rank finishes the current step, the ranks agree (an
all_reduce MAX of the flag after every step) to stop after the same step, save it and exit 143, as the C++
example trainer does (the daemon then queues the job again). A start with TESSERA_RESUME_FROM (set by the
daemon) restores that step (tessera.torch.checkpoint.resume) and continues with the next global batch, so
the resumed run sees the same data as an uninterrupted one, also on another world size and another split of the
same global batch (a job the daemon moved to another mix: the optimizer state is saved per parameter name, so DCP
reshards it onto the new ZeroRedundancyOptimizer partition). Host ranks (--island X=host:N) train on the CPU. Rank 0 prints `step N/M loss L` every
--print-every steps (the daemon's `tessera status` shows the last such line as the job's progress).
"""
import argparse
import base64
import contextlib
import faulthandler
import glob
import itertools
import json
import math
import os
import pickle
import signal
import sys
import sysconfig
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

import tessera.torch as tt


def parse():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--mode", choices=["hybrid", "independent", "calibrate", "grad-error"], default="hybrid")
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--warmup-steps", type=int, default=10, help="steps left out of the tokens/s figures")
    p.add_argument("--global-batch", type=int, default=32, help="sequences per micro-batch, over all ranks")
    p.add_argument("--accum", type=int, default=1,
                   help="micro-batches per optimizer step (gradient accumulation; DDP syncs on the last one)")
    p.add_argument("--seq", type=int, default=512)
    p.add_argument("--layers", type=int, default=12)
    p.add_argument("--dim", type=int, default=1024)
    p.add_argument("--heads", type=int, default=16)
    p.add_argument("--lr", type=float, default=3e-4)
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--split", choices=["speed", "even"], default="speed")
    p.add_argument("--weights-file", default=None, help="calibration output; read in hybrid/independent")
    p.add_argument("--optimizer", choices=["zero", "adamw"], default="zero")
    p.add_argument("--precision", choices=["bf16", "tf32", "f32"], default="bf16",
                   help="bf16: autocast; tf32: f32 weights and activations, TF32 tensor-core matmuls; f32: no TF32. "
                        "On an MPS share of an H200 some SM counts give wrong 16-bit GEMMs "
                        "(bench/gpu/mps_matmul_probe.py): scripts/lm-experiment.sh uses tf32")
    p.add_argument("--corpus-mb", type=int, default=48)
    p.add_argument("--log", default=None,
                   help="rank 0: one JSON line per step ({\"step\": i, \"loss\": L}, i from 0) and a summary line at the "
                        "end; a resumed run keeps the lines of the steps before its checkpoint and appends")
    p.add_argument("--sample-log", default=None,
                   help="rank 0: one JSON line per optimizer step this run trains, {\"step\": i, \"ranks\": [ids, ...]}: "
                        "the sample indices each rank trained on in that step (to check that a resumed or moved run "
                        "trains every sample of the global batch once, as an unmoved one does); written afresh by each run")
    p.add_argument("--print-every", type=int, default=10, help="rank 0 prints `step N/M loss L` every N steps")
    p.add_argument("--ckpt-dir", default=os.environ.get("TESSERA_CKPT_ROOT") or None,
                   help="--mode hybrid: checkpoint directory (Tessera's hot tier); default $TESSERA_CKPT_ROOT, "
                        "else no checkpoints")
    p.add_argument("--ckpt-every", type=int, default=int(os.environ.get("TESSERA_CKPT_EVERY") or 0),
                   help="checkpoint every N optimizer steps; default $TESSERA_CKPT_EVERY, else 0: only on SIGTERM "
                        "and at the end")
    a = p.parse_args()
    if a.ckpt_every < 0 or a.print_every < 1:
        p.error("--ckpt-every must be >= 0 and --print-every >= 1")
    return a


# SIGTERM (preemption or cancel by the job daemon, forwarded by `tessera run`): set here, acted on by every
# rank at the end of the same step (an all_reduce MAX of the flag), as the C++ example trainer does.
STOP = [False]


def on_sigterm(signum, frame):
    STOP[0] = True


class _Skip(torch.utils.data.Sampler):
    """`sampler` without its first `n` indices: HeteroDistributedSampler has no way to start at a given
    global batch, so a resumed run skips the batches already consumed in the current epoch (the order
    itself is a function of seed + epoch only, so this is deterministic)."""

    def __init__(self, sampler, n):
        self.sampler, self.n = sampler, n

    def __len__(self):
        return max(0, len(self.sampler) - self.n)

    def __iter__(self):
        return itertools.islice(iter(self.sampler), self.n, None)


class BatchStream:
    """This rank's micro-batches, epoch after epoch, with its position (epoch, micro-batches consumed in
    it): a resumed run starts at the saved position and so sees the same batches as an uninterrupted one."""

    def __init__(self, data, sampler, epoch=0, pos=0, resumed=False):
        self.data, self.sampler, self.epoch, self.pos = data, sampler, epoch, pos
        if resumed:
            sampler.set_epoch(epoch)
        self.it = self._iter(pos)

    def _iter(self, skip):
        # batches of sample indices (the sequences are data[ids]): --sample-log names what each rank trained on
        s = _Skip(self.sampler, skip * self.sampler.batch_size) if skip else self.sampler
        return iter(torch.utils.data.DataLoader(range(self.data.shape[0]), batch_size=self.sampler.batch_size,
                                                sampler=s, drop_last=True))

    def next(self):
        """The next micro-batch of sequences; its sample indices are in self.ids."""
        try:
            ids = next(self.it)
        except StopIteration:
            self.epoch, self.pos = self.epoch + 1, 0
            self.sampler.set_epoch(self.epoch)
            self.it = self._iter(0)
            ids = next(self.it)
        self.pos += 1
        self.ids = ids.tolist()
        return self.data[ids]


class Block(nn.Module):
    def __init__(self, d, h):
        super().__init__()
        self.h = h
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.fc1, self.fc2 = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, t, 3, self.h, d // self.h).permute(2, 0, 3, 1, 4)
        with attention_kernels():
            a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(a.transpose(1, 2).reshape(b, t, d))
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))


PRECISION = "bf16"
DEVICE = torch.device("cpu")  # this rank's device (main: TESSERA_DEVICE; host ranks train on the CPU)


def amp():
    if PRECISION == "bf16":
        return torch.autocast(DEVICE.type, dtype=torch.bfloat16)
    return contextlib.nullcontext()


def synchronize():
    if DEVICE.type == "cuda":
        torch.cuda.synchronize(DEVICE)


def rng_state():
    return {"cpu": torch.get_rng_state(), **({"cuda": torch.cuda.get_rng_state(DEVICE)} if DEVICE.type == "cuda" else {})}


def set_rng_state(rng):
    torch.set_rng_state(rng["cpu"])
    if "cuda" in rng and DEVICE.type == "cuda":
        torch.cuda.set_rng_state(rng["cuda"], DEVICE)


ATTENTION = None  # None: torch's choice of SDPA kernel; else a list of SDPBackend (choose_attention)


def attention_kernels():
    if ATTENTION is None:
        return contextlib.nullcontext()
    from torch.nn.attention import sdpa_kernel
    return sdpa_kernel(ATTENTION)


def choose_attention(model, data, dev, rank):
    """One forward and backward of two sequences before training: if torch's default SDPA kernel gives a
    non-finite loss or gradient here, name the first module whose output is not finite and use the first
    SDPA kernel that gives finite numbers (every rank takes the same: the largest index any rank needs)."""
    global ATTENTION
    from torch.nn.attention import SDPBackend
    choices = [None, [SDPBackend.FLASH_ATTENTION], [SDPBackend.EFFICIENT_ATTENTION], [SDPBackend.MATH]]
    batch = data[:2].to(dev)

    def finite_with(choice, name_first_bad=False):
        global ATTENTION
        ATTENTION = choice
        bad, hooks = [], []
        if name_first_bad:
            for name, mod in model.named_modules():
                hooks.append(mod.register_forward_hook(
                    lambda m, i, o, name=name: bad.append(name)
                    if (torch.is_tensor(o) and not torch.isfinite(o).all() and not bad) else None))
        try:
            with amp():
                loss = F.cross_entropy(model(batch[:, :-1]).float().reshape(-1, 256), batch[:, 1:].reshape(-1))
            loss.backward()
            ok = bool(torch.isfinite(loss)) and all(
                torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)
        except RuntimeError as e:  # a kernel that does not support these shapes
            ok, bad = False, [f"(error: {str(e).splitlines()[0][:120]})"]
        finally:
            for h in hooks:
                h.remove()
            model.zero_grad(set_to_none=True)
        return ok, bad

    pick = 0
    ok, _ = finite_with(None)
    if not ok:
        _, bad = finite_with(None, name_first_bad=True)
        pick = next((i for i, c in enumerate(choices[1:], 1) if finite_with(c)[0]), -1)
        print(f"rank {rank}: attention: torch's default SDPA kernel gives a non-finite loss or gradient "
              f"(first non-finite output: {bad[0] if bad else 'none in the forward: the backward'}); "
              f"{'no SDPA kernel gives finite numbers' if pick < 0 else 'using ' + str(choices[pick])}",
              flush=True)
        if pick < 0:
            raise SystemExit("train_lm: the model's numbers are not finite with any attention kernel")
    t = torch.tensor([pick], device=dev)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    ATTENTION = choices[int(t.item())]
    if rank == 0 and ATTENTION is not None:
        print(f"attention kernel: {ATTENTION} on every rank", flush=True)


class LM(nn.Module):
    def __init__(self, layers, d, h, seq, vocab=256):
        super().__init__()
        self.tok, self.pos = nn.Embedding(vocab, d), nn.Embedding(seq, d)
        self.blocks = nn.ModuleList(Block(d, h) for _ in range(layers))
        self.ln = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab, bias=False)
        self.head.weight = self.tok.weight
        nn.init.normal_(self.tok.weight, std=0.02)
        nn.init.normal_(self.pos.weight, std=0.02)

    def forward(self, idx):
        x = self.tok(idx) + self.pos(torch.arange(idx.shape[1], device=idx.device))
        for b in self.blocks:
            x = b(x)
        return self.head(self.ln(x))


def corpus(seq, mb):
    """The standard library's .py files in sorted order, as bytes, cut into sequences of seq+1."""
    root = sysconfig.get_paths()["stdlib"]
    data, total = [], 0
    for path in sorted(glob.glob(os.path.join(root, "**", "*.py"), recursive=True)):
        try:
            with open(path, "rb") as f:
                b = f.read()
        except OSError:
            continue
        data.append(b)
        total += len(b)
        if total >= mb << 20:
            break
    raw = torch.frombuffer(bytearray(b"".join(data)), dtype=torch.uint8)
    n = raw.numel() // (seq + 1)
    return raw[: n * (seq + 1)].view(n, seq + 1).long(), root, total


def island_info():
    vendor = os.environ.get("TESSERA_ISLAND_VENDOR", "island0")
    emulated = os.environ.get("TESSERA_EMULATED", "")
    return int(os.environ.get("TESSERA_ISLAND", "0")), vendor, emulated


def per_rank_weights(args, world):
    if args.split == "even":
        return [1.0] * world
    if args.weights_file and os.path.exists(args.weights_file):
        with open(args.weights_file) as f:
            w = json.load(f)["weights"]
        return tt.island_weights_per_rank(world, weights=w)
    return tt.island_weights_per_rank(world) or [1.0] * world


def gather_objects(obj):
    out = [None] * dist.get_world_size()
    dist.all_gather_object(out, obj)
    return out


def local_optimizer(opt):
    """The optimizer whose state this rank holds: ZeroRedundancyOptimizer's own (its partition), else `opt`."""
    from torch.distributed.optim import ZeroRedundancyOptimizer
    return opt.optim if isinstance(opt, ZeroRedundancyOptimizer) else opt


def init_optim_state(optim):
    """Creates the optimizer's state tensors (one step with zero gradients at learning rate 0, which changes
    no parameter) so that DCP has tensors to load into; the load then overwrites them."""
    if optim.state:
        return
    lrs = [g["lr"] for g in optim.param_groups]
    for g in optim.param_groups:
        g["lr"] = torch.zeros_like(g["lr"]) if torch.is_tensor(g["lr"]) else 0.0
        for q in g["params"]:
            if q.requires_grad:
                q.grad = torch.zeros_like(q)
    optim.step()
    for g, lr in zip(optim.param_groups, lrs):
        g["lr"] = lr
    optim.zero_grad(set_to_none=True)


def optim_by_name(model, opt):
    """The optimizer state of the parameters this rank steps, by parameter name: with ZeroRedundancyOptimizer
    its partition (each parameter on one rank), else every parameter (replicated: DCP writes it once). Keyed
    by name, not by rank, so that a run on another world size (another partition) loads each parameter's state
    from wherever it was saved: DCP reshards it."""
    lopt = local_optimizer(opt)
    names = {id(p): n for n, p in model.named_parameters()}
    return {names[id(p)]: lopt.state[p] for g in lopt.param_groups for p in g["params"] if p in lopt.state}


def train_state(model, opt, sched, rank, world, step, epoch, pos, losses, config, shares, rng=True):
    """What a checkpoint holds (dcp.save / dcp.load of this dict):
      model        the model's state_dict (DDP's module; replicated: DCP writes it once)
      optim        the optimizer's state per parameter name (optim_by_name): any world size loads it
      rng_rank<R>  this rank's CPU (and CUDA) generator states: restored on a resume with the same world size only
                   (a rank of another world has no counterpart; the training draws no random numbers, so the
                   curve does not depend on them)
      meta         replicated plain Python values: step, data position (epoch, global batches consumed in it),
                   the learning rates in force, the LR scheduler's state, the loss of every step so far
                   (the loss log continues), the run's configuration (checked on resume) and the world size and
                   split that made it (a resume may use another: the global batch is the same)."""
    meta = {"step": int(step), "epoch": int(epoch), "pos": int(pos), "world": int(world), "shares": json.dumps(shares),
            "lrs": json.dumps([float(g["lr"]) for g in opt.param_groups]),
            "sched": base64.b64encode(pickle.dumps(sched.state_dict())).decode(),
            "losses": json.dumps(losses), "config": json.dumps(config, sort_keys=True)}
    state = {"model": model.state_dict(), "meta": meta, "optim": optim_by_name(model, opt)}
    if rng:
        state[f"rng_rank{rank}"] = rng_state()
    return state


def restore(model, opt, sched, rank, world, config, shares):
    """TESSERA_RESUME_FROM set: loads that step (tessera.torch.checkpoint.resume; an older good step if it is
    damaged) and applies it, on this run's world size and split whatever those of the run that saved it.
    Returns (step, meta, rng or None) or None on a fresh start. Collective."""
    value = os.environ.get("TESSERA_RESUME_FROM")
    if not value:
        return None
    import torch.distributed.checkpoint as dcp
    from tessera.torch.checkpoint import TesseraReader, parse_resume_from, resume
    init_optim_state(local_optimizer(opt))
    # first the replicated values alone (which step loads, and the world that saved it), then the tensors
    meta = train_state(model, opt, sched, rank, world, 0, 0, 0, [], config, shares, rng=False)["meta"]
    step = resume({"meta": meta})
    if step is None:
        return None
    saved = json.loads(meta["config"])
    if saved != config:
        diff = {k: (saved.get(k), config.get(k)) for k in sorted(set(saved) | set(config)) if saved.get(k) != config.get(k)}
        raise SystemExit(f"train_lm: checkpoint step {step} was made by a run with other settings "
                         f"(saved, now): {diff}; resuming would not continue the same run")
    same_world = meta["world"] == world
    state = train_state(model, opt, sched, rank, world, 0, 0, 0, [], config, shares, rng=same_world)
    dcp.load(state, storage_reader=TesseraReader(parse_resume_from(value)[0], step))
    model.load_state_dict(state["model"])  # the optimizer's tensors were loaded in place (optim_by_name)
    sched.load_state_dict(pickle.loads(base64.b64decode(meta["sched"])))
    for g, lr in zip(opt.param_groups, json.loads(meta["lrs"])):
        g["lr"] = lr  # ZeroRedundancyOptimizer's own groups (its partition's optimizer is synced from them)
    return step, meta, state[f"rng_rank{rank}"] if same_world else None


def main():
    args = parse()
    # `kill -USR1` prints every thread's Python stack (scripts/lm-experiment.sh does it to a job that hangs)
    faulthandler.register(signal.SIGUSR1, all_threads=True)
    if args.mode == "hybrid" and args.ckpt_dir:
        signal.signal(signal.SIGTERM, on_sigterm)  # early: a SIGTERM during the start-up is acted on too
    global PRECISION, DEVICE
    PRECISION = args.precision
    torch.backends.cuda.matmul.allow_tf32 = args.precision == "tf32"
    torch.backends.cudnn.allow_tf32 = args.precision == "tf32"
    name = os.environ.get("TESSERA_DEVICE", "cuda:0")
    dev = DEVICE = torch.device("cpu" if name == "host" else name)  # `tessera run`'s host ranks: "host"
    if dev.type == "cuda":
        torch.cuda.set_device(dev)
    dist.init_process_group("tessera")
    rank, world = dist.get_rank(), dist.get_world_size()
    isl, vendor, emulated = island_info()
    label = f"{vendor}" + (f" ({emulated})" if emulated else "")
    data, root, nbytes = corpus(args.seq, args.corpus_mb)
    torch.manual_seed(args.seed)
    model = LM(args.layers, args.dim, args.heads, args.seq).to(dev)
    nparams = sum(p.numel() for p in model.parameters())
    choose_attention(model, data, dev, rank)
    if rank == 0:
        print(f"model {nparams / 1e6:.1f}M parameters; corpus {nbytes / 2**20:.1f} MiB of {root}/**/*.py, "
              f"{data.shape[0]} sequences of {args.seq + 1} bytes; mode {args.mode}", flush=True)

    if args.mode == "grad-error":
        return grad_error(model, data, args, dev, rank, world)

    islands = sorted(set(r[0] for r in gather_objects((isl, vendor))))
    weights = per_rank_weights(args, world)
    sampler = tt.HeteroDistributedSampler(data, args.global_batch, weights=weights, seed=args.seed, shuffle=True)
    if args.mode == "independent":
        ddp = model
    else:
        ddp = nn.parallel.DistributedDataParallel(model)
        ddp.register_comm_hook(sampler.fraction, tt.hetero_allreduce_hook)
    if args.optimizer == "zero" and args.mode != "independent":
        from torch.distributed.optim import ZeroRedundancyOptimizer
        opt = ZeroRedundancyOptimizer(ddp.parameters(), optimizer_class=torch.optim.AdamW, lr=args.lr,
                                      weight_decay=0.1)
    else:
        opt = torch.optim.AdamW(ddp.parameters(), lr=args.lr, weight_decay=0.1)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / 50))
    config = {"seq": args.seq, "layers": args.layers, "dim": args.dim, "heads": args.heads, "seed": args.seed,
              "global_batch": args.global_batch, "accum": args.accum,
              "optimizer": args.optimizer, "lr": args.lr, "corpus_sequences": int(data.shape[0])}
    ckpt_on = args.mode == "hybrid" and bool(args.ckpt_dir)
    if ckpt_on:
        os.makedirs(args.ckpt_dir, exist_ok=True)  # the daemon creates it; a direct run may name a new one
    step0, prev_losses, epoch0, pos0, rng0 = 0, [], 0, 0, None
    if args.mode == "hybrid":
        got = restore(model, opt, sched, rank, world, config, sampler.shares)
        if got is not None:
            step0, meta, rng0 = got
            prev_losses = json.loads(meta["losses"])[:step0]
            epoch0, pos0 = meta["epoch"], meta["pos"]
            if rank == 0:
                was = json.loads(meta["shares"])
                moved = (f"; saved by {meta['world']} ranks splitting the global batch {was}, now {world} ranks "
                         f"splitting it {sampler.shares}" if was != sampler.shares else "")
                print(f"train_lm: resumed from {os.environ['TESSERA_RESUME_FROM']}: {step0} of {args.steps} "
                      f"steps done, data at epoch {epoch0} micro-batch {pos0}{moved}", flush=True)
    elif os.environ.get("TESSERA_RESUME_FROM") and rank == 0:
        print(f"train_lm: TESSERA_RESUME_FROM is ignored in mode {args.mode} (checkpoints: --mode hybrid)", flush=True)
    if rank == 0:
        wenv = os.environ.get("TESSERA_ISLAND_WEIGHTS")
        print(f"batch split: {sampler.shares} of {args.global_batch} sequences per micro-batch "
              f"(TESSERA_ISLAND_WEIGHTS={wenv if wenv else 'unset'}; split {args.split}"
              f"{', weights file ' + args.weights_file if args.weights_file and os.path.exists(args.weights_file) else ''})",
              flush=True)
        if ckpt_on:
            every = f"every {args.ckpt_every} steps, " if args.ckpt_every else ""
            print(f"checkpoints: {args.ckpt_dir}, {every}on SIGTERM and at the end", flush=True)
        elif args.mode == "hybrid" and args.ckpt_every:
            print("train_lm: --ckpt-every without --ckpt-dir (or TESSERA_CKPT_ROOT): no checkpoints", flush=True)
    log_file = None
    if rank == 0 and args.log and args.mode != "calibrate":
        # a resumed run keeps the lines of the steps before its checkpoint (a killed attempt may have
        # written later ones, and no summary belongs in the middle) and appends from there
        kept = []
        if step0 and os.path.exists(args.log):
            with open(args.log) as f:
                for line in f:
                    try:
                        row = json.loads(line)
                    except ValueError:
                        continue
                    if isinstance(row, dict) and set(row) == {"step", "loss"} and row["step"] < step0:
                        kept.append(line if line.endswith("\n") else line + "\n")
        if step0 and [json.loads(line)["step"] for line in kept] != list(range(step0)):
            # no usable earlier log (missing, or not the steps 0..step0-1 once each): the checkpoint's losses
            kept = [json.dumps({"step": i, "loss": l}) + "\n" for i, l in enumerate(prev_losses)]
        log_file = open(args.log, "w")
        log_file.writelines(kept)
        log_file.flush()
    sample_file = open(args.sample_log, "w") if rank == 0 and args.sample_log and args.mode == "hybrid" else None
    # calibrate: island i trains alone in turn; the others wait at a barrier
    turns = islands if args.mode == "calibrate" else [None]
    results = {}
    stopped = False
    for turn in turns:
        active = turn is None or turn == isl
        start = step0 if turn is None else 0
        stream = BatchStream(data, sampler, epoch0, pos0, resumed=start > 0) if turn is None else BatchStream(data, sampler)
        if rng0 is not None and turn is None:  # after the stream: making a DataLoader iterator draws a seed
            set_rng_state(rng0)
        steps = args.steps if turn is None else min(args.steps, 30)
        tokens, t0, log = 0, None, []
        losses_done = list(prev_losses) if turn is None else []  # floats of the steps before log[0]
        saved_step = start if start > 0 else None

        def all_losses():
            losses_done.extend(x.item() for x in log)
            log.clear()
            return losses_done

        def flush_log():
            if log_file is not None:
                done = all_losses()
                have = flush_log.written
                for i in range(have, len(done)):
                    log_file.write(json.dumps({"step": i, "loss": done[i]}) + "\n")
                log_file.flush()
                flush_log.written = len(done)
        flush_log.written = len(losses_done)

        def save(n):
            t = time.perf_counter()
            import torch.distributed.checkpoint as dcp
            from tessera.torch.checkpoint import TesseraWriter
            state = train_state(model, opt, sched, rank, world, n, stream.epoch, stream.pos, all_losses(), config,
                                sampler.shares)
            dcp.save(state, storage_writer=TesseraWriter(args.ckpt_dir, n))
            flush_log()
            if rank == 0:
                print(f"checkpoint: step {n} committed in {time.perf_counter() - t:.1f} s", flush=True)

        if turn is not None:
            dist.barrier()
        for step in range(start, steps if active else start):
            if step - start == args.warmup_steps:
                synchronize()
                t0, tokens = time.perf_counter(), 0
            batch = stream.next()
            ids = list(stream.ids)
            opt.zero_grad(set_to_none=True)
            loss = 0.0
            for micro in range(args.accum):
                if micro > 0:
                    batch = stream.next()
                    ids += stream.ids
                batch = batch.to(dev, non_blocking=True)
                # DDP synchronises the gradient once per step, on the last micro-batch
                last = micro == args.accum - 1
                quiet = ddp.no_sync() if (turn is None and not last and hasattr(ddp, "no_sync")) else contextlib.nullcontext()
                with quiet:
                    with amp():
                        logits = (model if turn is not None else ddp)(batch[:, :-1])
                        part = F.cross_entropy(logits.float().reshape(-1, 256), batch[:, 1:].reshape(-1)) / args.accum
                    part.backward()
                loss = loss + part.detach()
                tokens += batch.shape[0] * args.seq
            if turn is None:
                opt.step()
                sched.step()
            if turn is None and args.mode == "hybrid":
                # the loss of the whole global batch: the ranks' means weighted by their shares
                lt = (loss.detach() * sampler.fraction).float()
                dist.all_reduce(lt)
                log.append(lt)
            elif turn is None:
                log.append(loss.detach().float())
            if turn is None and args.mode == "hybrid" and args.sample_log:
                every = gather_objects(ids)
                if sample_file is not None:
                    sample_file.write(json.dumps({"step": step, "ranks": every}) + "\n")
                    sample_file.flush()
            if turn is None:
                done = step + 1  # optimizer steps done: the number printed and the checkpoint's step
                if rank == 0 and (done % args.print_every == 0 or done == steps):
                    print(f"step {done}/{steps} loss {log[-1].item():.6f}", flush=True)
                if ckpt_on:
                    flag = torch.tensor([1 if STOP[0] else 0], device=dev)
                    dist.all_reduce(flag, op=dist.ReduceOp.MAX)  # every rank stops after the same step
                    stop = bool(flag.item())
                    if stop or (args.ckpt_every and done % args.ckpt_every == 0 and done < steps):
                        save(done)
                        saved_step = done
                    if stop:
                        stopped = True
                        break
        if stopped:
            break
        synchronize()
        if ckpt_on and turn is None and steps > (saved_step or 0):
            save(steps)
        elapsed = time.perf_counter() - t0 if t0 else float("nan")
        mine = {"rank": rank, "island": isl, "vendor": vendor, "label": label, "batch": sampler.batch_size,
                "tokens_per_s": tokens / elapsed if active and t0 else 0.0}
        everyone = gather_objects(mine)
        if turn is not None:
            vend = next(e["vendor"] for e in everyone if e["island"] == turn)
            results[vend] = sum(e["tokens_per_s"] for e in everyone if e["island"] == turn) / max(
                1, sum(1 for e in everyone if e["island"] == turn))
        else:
            flush_log()
            losses = all_losses()
            summary = report(args, everyone, losses, rank, world, nparams, sampler)
            summary["resumed_from_step"] = step0 or None
    if sample_file is not None:
        sample_file.close()
    if stopped:
        # the C++ example trainer's convention: 143 (128 + SIGTERM) after a committed checkpoint; the daemon
        # queues a preempted job again whatever its status, but a 0 would read as "succeeded" after a cancel
        if rank == 0:
            print(f"train_lm: SIGTERM: checkpoint of step {done} committed; exiting to be resumed", flush=True)
        if log_file is not None:
            log_file.close()
        dist.destroy_process_group()
        return 143
    if args.mode == "calibrate":
        if rank == 0:
            order = [next(e["vendor"] for e in everyone if e["island"] == i) for i in islands]
            top = max(results.values())
            w = ",".join(f"{results[v] / top:.4f}" for v in order)
            out = {"islands": {v: round(results[v], 1) for v in order}, "weights": w,
                   "labels": {e["vendor"]: e["label"] for e in everyone}, "seq": args.seq,
                   "model_params": nparams}
            print(f"calibration: tokens/s per rank alone: {out['islands']}; weights {w}", flush=True)
            if args.weights_file:
                with open(args.weights_file, "w") as f:
                    json.dump(out, f, indent=1)
    elif log_file is not None:
        summary.pop("losses")
        log_file.write(json.dumps(summary) + "\n")
        log_file.close()
    if args.mode == "hybrid":
        bad = tt.check_replicas(model)
        if rank == 0:
            print(f"replicas: {'bit-identical on every rank' if not bad else f'{len(bad)} tensors differ'}", flush=True)
    dist.destroy_process_group()


def report(args, everyone, losses, rank, world, nparams, sampler):
    per_island = {}
    for e in everyone:
        d = per_island.setdefault(e["vendor"], {"label": e["label"], "ranks": 0, "tokens_per_s": 0.0, "batch": 0})
        d["ranks"] += 1
        d["tokens_per_s"] += e["tokens_per_s"]
        d["batch"] += e["batch"]
    total = sum(d["tokens_per_s"] for d in per_island.values())
    if args.mode == "hybrid":
        # one synchronised job: every rank does its share of every step, so the job's rate is the global
        # batch over the step time; the per-rank figures above are already that (same step time)
        pass
    summary = {"mode": args.mode, "split": args.split, "optimizer": args.optimizer, "precision": args.precision,
               "world": world,
               "params": nparams, "global_batch": args.global_batch, "accum": args.accum, "seq": args.seq,
               "steps": args.steps, "attention": str(ATTENTION) if ATTENTION is not None else "default",
               "islands": per_island, "tokens_per_s": round(total, 1), "shares": sampler.shares,
               "final_loss_mean_last50": (sum(losses[-50:]) / len(losses[-50:])) if losses else None,
               "losses": losses}
    if rank == 0:
        for v, d in per_island.items():
            print(f"island {d['label']}: {d['ranks']} rank(s), {d['batch']} sequences/micro-batch x {args.accum}, "
                  f"{d['tokens_per_s']:.0f} tokens/s", flush=True)
        last = summary["final_loss_mean_last50"]
        print(f"total {total:.0f} tokens/s; loss {losses[0] if losses else float('nan'):.4f} -> "
              f"{losses[-1] if losses else float('nan'):.4f} (mean of the last 50: {last})", flush=True)
    return summary


def grad_error(model, data, args, dev, rank, world):
    """One step's gradient: each rank's own (f32), the f64 reference of their sum, and the allreduced sum
    after casting to each dtype; max and L2 relative error of the synchronised gradient."""
    g = torch.Generator().manual_seed(args.seed + rank)
    idx = torch.randint(0, data.shape[0], (max(1, args.global_batch // world),), generator=g)
    batch = data[idx].to(dev)
    with amp():
        loss = F.cross_entropy(model(batch[:, :-1]).float().reshape(-1, 256), batch[:, 1:].reshape(-1))
    loss.backward()
    flat = torch.cat([p.grad.reshape(-1).float() for p in model.parameters()])
    everyone = torch.empty(world * flat.numel(), dtype=torch.float32, device=dev)
    dist.all_gather_into_tensor(everyone, flat)
    ref = everyone.view(world, -1).double().sum(0)
    rows = []
    for dt in (torch.float32, torch.bfloat16, torch.float16):
        t = flat.to(dt, copy=True)  # a copy: all_reduce is in place, and flat must stay this rank's gradient
        dist.all_reduce(t)
        # the floor: the same per-rank gradients cast to dt, summed exactly, rounded once to dt
        cast = everyone.view(world, -1).to(dt).double().sum(0)
        floor_t = cast.to(dt).double()
        err = (t.double() - ref).abs()
        floor = (floor_t - ref).abs()
        rows.append({"dtype": str(dt).replace("torch.", ""), "max_rel": (err.max() / ref.abs().max()).item(),
                     "l2_rel": (err.norm() / ref.norm()).item(), "floor_max_rel": (floor.max() / ref.abs().max()).item(),
                     "floor_l2_rel": (floor.norm() / ref.norm()).item(),
                     "equals_exact_sum_rounded_once": bool(torch.equal(t.double(), floor_t))})
    if rank == 0:
        for r in rows:
            print(json.dumps({"bench": "grad_error", "world": world, **r}), flush=True)
        if args.log:
            with open(args.log, "w") as f:
                json.dump(rows, f)
    dist.destroy_process_group()


if __name__ == "__main__":
    sys.exit(main())
