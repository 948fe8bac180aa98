"""tessera.torch.checkpoint under `tessera run` (or alone, world of one): python ckpt_worker.py MODE ROOT.

Modes (exit 0 when every check passed; failures print "FAIL ..."):
  roundtrip  every dtype, a plain model + AdamW state, a DDP model, and non-tensor state (step, RNG state,
             sampler position): dcp.save then dcp.load into fresh state, bit-exact; also dcp.async_save
  fsdp-save  FSDP2 (fully_shard) model + AdamW after 3 steps: saves step 10 and the full state's digests
  fsdp-load  loads step 10 into FSDP2 in this (other) world size; the full state's digests must match
  ddp-save   DDP model + AdamW (any mix of host and GPU ranks): saves step 20 and the state's digest
  ddp-load   loads step 20 in this (other) job, e.g. GPU ranks only; the digest must match
  corrupt    two steps; a flipped byte in step 2's shard: loading step 2 fails naming the file, and
             resume() with TESSERA_RESUME_FROM=step 2 falls back to step 1 (bit-exact)
  killed     a child process is killed in the middle of saving step 2: step 1 is still the newest, intact
  tiers      a step demoted to the cold tier (zstd archive) loads through TesseraReader (staged back)
  hf         safetensors files saved by the Hugging Face library, imported with `tessera ckpt import`,
             load into a matching model through TesseraReader
"""
import hashlib
import json
import logging
import os
import subprocess
import sys

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.api import CheckpointException
import torch.nn as nn

import tessera.torch  # noqa: F401
from tessera.torch.checkpoint import TesseraReader, TesseraWriter, latest_step, resume

from worker_common import check, device, failures  # noqa: E402
DTYPES = [torch.float32, torch.float16, torch.bfloat16, torch.float64, torch.int8, torch.uint8, torch.int32,
          torch.int64, torch.bool]


def rand(dtype, shape, seed):
    g = torch.Generator().manual_seed(seed)
    if dtype == torch.bool:
        return torch.rand(shape, generator=g) < 0.5
    if dtype.is_floating_point:
        return torch.randn(shape, generator=g, dtype=torch.float64).to(dtype)
    info = torch.iinfo(dtype)
    return torch.randint(max(info.min, -1000), min(info.max, 1000), shape, generator=g).to(dtype)


def model(seed=0):
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 8))


def same(a, b):
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and a.dtype == b.dtype and a.shape == b.shape and torch.equal(
            a.cpu(), b.cpu())
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    return a == b


def trained(dev, seed):
    """A model and its AdamW state after 3 steps, trained on the CPU so that every rank holds the same bits
    (DCP saves a plain tensor once, as replicated), then moved to `dev` (the optimizer state with it)."""
    m = model(seed)
    opt = torch.optim.AdamW(m.parameters(), lr=1e-2)
    for s in range(3):
        x = torch.randn(16, 32, generator=torch.Generator().manual_seed(seed + s))
        m(x).square().mean().backward()
        opt.step()
        opt.zero_grad()
    m.to(dev)
    for st in opt.state.values():
        for k, v in st.items():
            if torch.is_tensor(v) and v.dim() > 0:
                st[k] = v.to(dev)
    return m, opt


def roundtrip(root, dev, rank):
    tensors = {f"t_{str(dt).split('.')[-1]}": rand(dt, (5, 7), i).to(dev) for i, dt in enumerate(DTYPES)}
    tensors["scalar"] = torch.tensor(3.25, device=dev)
    m, opt = trained(dev, 1)
    ddp = nn.parallel.DistributedDataParallel(model(2).to(dev)) if dist.is_initialized() else None
    # the same on every rank (replicated state): a generator's state, not this process's RNG
    extra = {"step": 1234, "rng": torch.Generator().manual_seed(77).get_state(), "sampler": {"epoch": 3, "offset": 4096},
             "name": "run-a"}
    state = {"tensors": tensors, "model": m.state_dict(), "optim": opt.state_dict(), "extra": extra}
    if ddp is not None:
        state["ddp"] = ddp.module.state_dict()
    dcp.save(state, storage_writer=TesseraWriter(root, 1))
    fresh = {"tensors": {k: torch.zeros_like(v) for k, v in tensors.items()},
             "model": model(9).to(dev).state_dict(),
             "optim": trained(dev, 7)[1].state_dict(),
             "extra": {"step": 0, "rng": torch.zeros_like(extra["rng"]), "sampler": {"epoch": 0, "offset": 0},
                       "name": ""}}  # DCP loads the keys the target names
    if ddp is not None:
        fresh["ddp"] = {k: torch.zeros_like(v) for k, v in ddp.module.state_dict().items()}
    dcp.load(fresh, storage_reader=TesseraReader(root, 1))
    for key in state:
        check(same(state[key], fresh[key]), f"roundtrip: '{key}' differs after save + load")
    # async_save: the returned future completes once the step is committed
    state["tensors"]["t_float32"].add_(1)
    fut = dcp.async_save(state, storage_writer=TesseraWriter(root, 2))
    fut.result()
    again = {"tensors": {k: torch.zeros_like(v) for k, v in tensors.items()}}
    dcp.load(again, storage_reader=TesseraReader(root))  # newest: step 2
    check(same(state["tensors"], again["tensors"]), "async_save: tensors differ after load of the newest step")
    if rank == 0:
        print(f"roundtrip: {len(DTYPES)} dtypes + scalar, model, AdamW state, DDP, extra state: bit-exact; "
              f"async_save committed step 2", flush=True)


def full_digest(m, opt):
    """sha256 of the full (unsharded) model and optimizer state; meaningful on rank 0, the only rank that
    holds the gathered state (cpu_offload=True)."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_state_dict
    msd, osd = get_state_dict(m, opt, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
    h = hashlib.sha256()
    for sd in (msd, osd.get("state", {})):
        for k in sorted(sd, key=str):
            v = sd[k]
            items = sorted(v.items()) if isinstance(v, dict) else [("", v)]
            for kk, t in items:
                if isinstance(t, torch.Tensor):
                    h.update(f"{k}.{kk}".encode())
                    h.update(t.detach().cpu().reshape(-1).view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


def fsdp(root, dev, rank, save):
    from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
    from torch.distributed.fsdp import fully_shard
    m = model(3).to(dev)
    for layer in m:
        if isinstance(layer, nn.Linear):
            fully_shard(layer)
    fully_shard(m)
    opt = torch.optim.AdamW(m.parameters(), lr=1e-2)
    if save:
        for s in range(3):
            x = torch.randn(8, 32, generator=torch.Generator().manual_seed(100 * rank + s)).to(dev)
            m(x).square().mean().backward()
            opt.step()
            opt.zero_grad()
        msd, osd = get_state_dict(m, opt)
        dcp.save({"model": msd, "optim": osd}, storage_writer=TesseraWriter(root, 10))
        d = full_digest(m, opt)
        if rank == 0:
            with open(os.path.join(root, "digest.json"), "w") as f:
                json.dump({"digest": d, "world": dist.get_world_size()}, f)
            print(f"fsdp-save: world {dist.get_world_size()} saved step 10", flush=True)
    else:
        # one step so that the optimizer state exists, then load over it
        m(torch.zeros(1, 32, device=dev)).sum().backward()
        opt.step()
        opt.zero_grad()
        msd, osd = get_state_dict(m, opt)
        state = {"model": msd, "optim": osd}
        dcp.load(state, storage_reader=TesseraReader(root, 10))
        set_state_dict(m, opt, model_state_dict=state["model"], optim_state_dict=state["optim"])
        d = full_digest(m, opt)
        with open(os.path.join(root, "digest.json")) as f:
            saved = json.load(f)
        # full_digest's state (full_state_dict + cpu_offload) is gathered on rank 0 only: the others hash nothing
        if rank == 0:
            check(d == saved["digest"], f"fsdp-load: world {dist.get_world_size()} loaded a state whose digest "
                                        f"differs from the one world {saved['world']} saved")
        if rank == 0 and d == saved["digest"]:
            print(f"fsdp-load: world {dist.get_world_size()} loaded step 10 saved by world {saved['world']}: "
                  "model + AdamW state bit-exact", flush=True)


def plain_digest(m, opt):
    h = hashlib.sha256()
    for k, v in sorted(m.state_dict().items()):
        h.update(k.encode())
        h.update(v.detach().cpu().reshape(-1).view(torch.uint8).numpy().tobytes())
    for pid, st in sorted(opt.state_dict()["state"].items()):
        for k, v in sorted(st.items()):
            if isinstance(v, torch.Tensor):
                h.update(f"{pid}.{k}".encode())
                h.update(v.detach().cpu().reshape(-1).view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


def ddp(root, dev, rank, save):
    from torch.distributed.optim import ZeroRedundancyOptimizer  # noqa: F401  (plain AdamW here)
    m = nn.parallel.DistributedDataParallel(model(5).to(dev))
    opt = torch.optim.AdamW(m.parameters(), lr=1e-2)
    x = torch.randn(8, 32, generator=torch.Generator().manual_seed(rank)).to(dev)
    m(x).square().mean().backward()
    opt.step()
    opt.zero_grad()
    if save:
        # AdamW rounds differently on CPU and GPU: save rank 0's replica, which every rank then holds
        for p in m.module.parameters():
            dist.broadcast(p.data, src=0)
        for st in opt.state.values():
            for v in st.values():
                if isinstance(v, torch.Tensor) and v.dim() > 0:
                    dist.broadcast(v, src=0)
        dcp.save({"model": m.module.state_dict(), "optim": opt.state_dict()}, storage_writer=TesseraWriter(root, 20))
        if rank == 0:
            with open(os.path.join(root, "ddp-digest.json"), "w") as f:
                json.dump({"digest": plain_digest(m.module, opt), "layout": os.environ.get("TESSERA_ISLANDS")}, f)
            print(f"ddp-save: {os.environ.get('TESSERA_ISLANDS')} saved step 20", flush=True)
    else:
        state = {"model": m.module.state_dict(), "optim": opt.state_dict()}
        dcp.load(state, storage_reader=TesseraReader(root, 20))
        m.module.load_state_dict(state["model"])
        opt.load_state_dict(state["optim"])
        with open(os.path.join(root, "ddp-digest.json")) as f:
            saved = json.load(f)
        d = plain_digest(m.module, opt)
        check(d == saved["digest"], f"ddp-load: {os.environ.get('TESSERA_ISLANDS')} loaded a state that differs from "
                                    f"the one {saved['layout']} saved")
        if rank == 0 and d == saved["digest"]:
            print(f"ddp-load: {os.environ.get('TESSERA_ISLANDS')} loaded step 20 saved by {saved['layout']}: "
                  "bit-exact", flush=True)


def corrupt(root, dev, rank):
    a = {"w": rand(torch.float32, (64, 16), 1).to(dev)}
    b = {"w": rand(torch.float32, (64, 16), 2).to(dev)}
    dcp.save(a, storage_writer=TesseraWriter(root, 1))
    dcp.save(b, storage_writer=TesseraWriter(root, 2))
    if dist.is_initialized():
        dist.barrier()
    step2 = os.path.join(root, "step-0000000002")
    if rank == 0:
        shard = sorted(f for f in os.listdir(step2) if f.endswith(".safetensors"))[0]
        path = os.path.join(step2, shard)
        with open(path, "r+b") as f:
            f.seek(os.path.getsize(path) - 3)
            byte = f.read(1)
            f.seek(-1, 1)
            f.write(bytes([byte[0] ^ 0x40]))
    if dist.is_initialized():
        dist.barrier()
    out = {"w": torch.zeros_like(a["w"])}
    try:
        dcp.load(out, storage_reader=TesseraReader(root, 2))
        check(False, "corrupt: loading the damaged step 2 succeeded")
    except (Exception, CheckpointException) as e:  # noqa: BLE001 - DCP wraps every rank's error in a BaseException
        msg = str(e)
        check(".safetensors" in msg, f"corrupt: the error does not name the shard file: {msg[:300]}")
        if rank == 0:
            print(f"corrupt: load of step 2 failed: {msg.splitlines()[-1][:200]}", flush=True)
    os.environ["TESSERA_RESUME_FROM"] = step2
    out = {"w": torch.zeros_like(a["w"])}
    got = resume(out)
    check(got == 1, f"corrupt: resume() returned step {got}, expected the fallback to step 1")
    check(same(out["w"], a["w"]), "corrupt: resume() did not restore step 1's bits")
    os.environ.pop("TESSERA_RESUME_FROM")
    check(resume({"w": out["w"]}) is None, "resume() without TESSERA_RESUME_FROM is not a no-op")


def killed(root, dev):
    code = f"""
import os, threading, torch, torch.distributed.checkpoint as dcp
import tessera.torch
from tessera.torch.checkpoint import TesseraWriter
dcp.save({{"w": torch.full((1024, 1024), 1.0)}}, storage_writer=TesseraWriter({root!r}, 1))
w = TesseraWriter({root!r}, 2)
orig = w.finish
def finish(metadata, results):
    w._writer.save(w.step, w._pending)   # the shard starts persisting in the background ...
    os._exit(9)                            # ... and the process dies before the step is committed
w.finish = finish
dcp.save({{"w": torch.full((4096, 4096), 2.0)}}, storage_writer=w)
"""
    env = dict(os.environ)
    for k in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "LOCAL_RANK", "TESSERA_RANK", "TESSERA_WORLD_SIZE"):
        env.pop(k, None)
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    check(r.returncode == 9, f"killed: the child exited {r.returncode}, expected 9: {r.stderr[-300:]}")
    check(latest_step(root) == 1, f"killed: newest good step is {latest_step(root)}, expected 1")
    out = {"w": torch.zeros(1024, 1024)}
    dcp.load(out, storage_reader=TesseraReader(root))
    check(torch.equal(out["w"], torch.full((1024, 1024), 1.0)), "killed: step 1 does not load intact")
    print("killed: a save killed before its commit left step 1 the newest, intact and loadable", flush=True)


def s3_server():
    """A local S3 server in this process: moto's when installed, else fake_s3's. .endpoint, .kind, .stop()."""
    try:
        from moto.server import ThreadedMotoServer
    except ImportError:
        from fake_s3 import FakeS3
        srv = FakeS3()
        srv.kind = "fake_s3"
        return srv
    # Werkzeug, under moto, logs every request to stderr ("127.0.0.1 - - [...] "PUT /b/k HTTP/1.1" 200 -"),
    # hundreds of lines per tier test; its warnings and errors still show.
    logging.getLogger("werkzeug").setLevel(logging.WARNING)
    moto = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    moto.start()
    host, port = moto.get_host_and_port()
    moto.endpoint, moto.kind = f"http://{host}:{port}", "moto"
    return moto


def tiers(root, dev):
    from tessera import _C
    cold = root + "-cold"
    os.makedirs(cold, exist_ok=True)
    s = {"w": rand(torch.bfloat16, (300, 17), 5), "n": rand(torch.int64, (9,), 6)}
    dcp.save(s, storage_writer=TesseraWriter(root, 7))
    _C.ckpt.demote(root, "", cold, 7, "cold")
    check(not os.path.exists(os.path.join(root, "step-0000000007", "manifest.json")), "tiers: hot copy not removed")
    out = {"w": torch.zeros(300, 17, dtype=torch.bfloat16), "n": torch.zeros(9, dtype=torch.int64)}
    dcp.load(out, storage_reader=TesseraReader(root, cold=cold))
    check(same(s, out), "tiers: the step loaded from the cold tier differs")
    print("tiers: a step only in the cold tier loaded through TesseraReader (staged back, verified)", flush=True)
    # The warm tier: S3, served by moto's S3 server where the project's .venv has it (CI, the development
    # machine), else by tests/torch/fake_s3.py (a GPU machine, where nothing can be installed). The C++
    # tests (tests/ckpt/s3_test.cpp) run the same client against moto with its signature checks.
    import urllib.request
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    srv = s3_server()
    try:
        os.environ.update({"TESSERA_S3_ENDPOINT": srv.endpoint, "AWS_ACCESS_KEY_ID": "test",
                           "AWS_SECRET_ACCESS_KEY": "test"})
        urllib.request.urlopen(urllib.request.Request(srv.endpoint + "/ckpt", method="PUT")).read()
        warm = "s3://ckpt/tiers"
        s2 = {"w": rand(torch.float32, (257, 33), 8), "n": rand(torch.int32, (5,), 9)}
        dcp.save(s2, storage_writer=TesseraWriter(root, 8))
        _C.ckpt.demote(root, warm, "", 8, "warm")
        check(not os.path.exists(os.path.join(root, "step-0000000008", "manifest.json")),
              "tiers: hot copy not removed after the demotion to warm")
        out2 = {"w": torch.zeros(257, 33), "n": torch.zeros(5, dtype=torch.int32)}
        dcp.load(out2, storage_reader=TesseraReader(root, 8, warm=warm))
        check(same(s2, out2), "tiers: the step loaded from the warm (S3) tier differs")
        print(f"tiers: a step only in the warm tier (S3, {srv.kind}) loaded through TesseraReader (staged back, "
              "verified)", flush=True)
    finally:
        srv.stop()


def hf(root, dev):
    from safetensors.torch import save_file
    m = model(11)
    files = os.path.join(root + "-hf")
    os.makedirs(files, exist_ok=True)
    save_file({k: v.contiguous() for k, v in m.state_dict().items()}, os.path.join(files, "model.safetensors"))
    tessera = os.environ.get("TESSERA_BIN", "tessera")
    r = subprocess.run([tessera, "ckpt", "--root", root, "import", "5", files], capture_output=True, text=True)
    check(r.returncode == 0, f"hf: tessera ckpt import failed: {r.stderr[-300:]}")
    fresh = model(12)
    sd = fresh.state_dict()
    dcp.load(sd, storage_reader=TesseraReader(root, 5))
    fresh.load_state_dict(sd)
    check(same(m.state_dict(), fresh.state_dict()), "hf: the imported Hugging Face weights differ after load")
    print("hf: Hugging Face safetensors imported with `tessera ckpt import` loaded into a matching model", flush=True)


def main():
    mode, root = sys.argv[1], sys.argv[2]
    dev = device()
    if dev.type == "cuda":
        torch.cuda.set_device(dev)
    multi = "TESSERA_STORE" in os.environ
    if multi:
        dist.init_process_group("tessera")
    rank = dist.get_rank() if multi else 0
    os.makedirs(root, exist_ok=True)
    if mode == "roundtrip":
        roundtrip(root, dev, rank)
    elif mode in ("fsdp-save", "fsdp-load"):
        fsdp(root, dev, rank, mode == "fsdp-save")
    elif mode in ("ddp-save", "ddp-load"):
        ddp(root, dev, rank, mode == "ddp-save")
    elif mode == "corrupt":
        corrupt(root, dev, rank)
    elif mode == "killed":
        killed(root, dev)
    elif mode == "tiers":
        tiers(root, dev)
    elif mode == "hf":
        hf(root, dev)
    if multi:
        dist.destroy_process_group()
    print(f"rank {rank}: {mode} {'passed' if not failures else 'FAILED'}", flush=True)
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
