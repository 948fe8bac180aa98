"""torch.distributed.checkpoint on Tessera against DCP's own file system storage, one process.

    python bench/torch/dcp_bench.py [--gib 2] [--reps 3] [--dir /tmp/tsr-dcp-bench] [--evict]

No process group: dcp.save/load/async_save run in a single process (DCP's no_dist path; TesseraWriter then
writes as rank 0 of a world of 1). The state: an nn.Sequential of Linear(--width, --width) layers on the GPU
(CPU when there is none), sized so that the parameters plus AdamW's exp_avg and exp_avg_sq (f32) come to
about --gib GiB, after one optimizer step; state = {"model": model.state_dict(), "optim": opt.state_dict()}.

Per repetition, interleaved (filesystem, tessera, filesystem, tessera, ...), each into a fresh subdirectory of
--dir removed afterwards, os.sync() before each timed call:
  save           dcp.save(state, storage_writer=FileSystemWriter(path) | TesseraWriter(path, 1))
  load           dcp.load(target, storage_reader=FileSystemReader(path) | TesseraReader(path, 1)) into a
                 preallocated state of the same shapes (filled with NaN / 0 first), then torch.equal on every
                 tensor against the saved state ("check" in the row). The page cache is warm (the files were
                 just written) unless --evict (posix_fadvise DONTNEED on every file after the sync).
  d2h_pinned     the reference: copying the same tensors GPU -> pinned host memory (allocated once, outside the
                 timing), copy_(non_blocking=True) then torch.cuda.synchronize(). GPU only.
  async_blocked  dcp.async_save(state, storage_writer=...): the time until the call returns;
  async_total    ... until the returned future completes (the checkpoint is durable); then loaded and checked.

Output: one JSON row per measurement on stdout,
  {"bench": "dcp", "what": "save"|"load"|"async_blocked"|"async_total"|"d2h_pinned",
   "writer": "filesystem"|"tessera"|"reference", "rep": i, "seconds": s, "gb_per_s": g, "bytes": n, ...}
then one summary row {"bench": "dcp", "what": "summary", ...} with median/min/max per (what, writer) and the
ratios tessera/filesystem (save and load GB/s) and async_blocked/d2h_pinned (target <= 1.2 for Tessera);
a table on stderr. Exit 0 when every measurement ran and every check passed, 1 otherwise, 2 on a setup error.
"""
import argparse
import copy
import json
import os
import shutil
import statistics
import sys
import time
import traceback
import warnings

WRITERS = ("filesystem", "tessera")
TARGET_BLOCKED_OVER_COPY = 1.2


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def die(msg, code=2):
    log(f"dcp_bench: {msg}")
    sys.exit(code)


try:
    import torch
    import torch.nn as nn
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint import FileSystemReader, FileSystemWriter
except Exception as e:  # noqa: BLE001
    die(f"cannot import torch / torch.distributed.checkpoint ({type(e).__name__}: {e}); run this on the machine "
        "with torch (scripts/torch-check.sh installs the tessera package there)")
for _name in ("save", "load", "async_save"):
    if not hasattr(dcp, _name):
        die(f"torch {torch.__version__}: torch.distributed.checkpoint has no {_name}() (needs torch >= 2.4)")
try:
    from tessera.torch.checkpoint import TesseraReader, TesseraWriter
except Exception as e:  # noqa: BLE001
    die(f"cannot import tessera.torch.checkpoint ({type(e).__name__}: {e}); install the package: "
        "pip install --no-build-isolation ./python (or scripts/torch-check.sh BUILD install)")

# DCP warns on every call without a process group that it assumes a single process: that is the intent here.
warnings.filterwarnings("ignore", message=".*assuming the intent is to.*single process.*")


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--gib", type=float, default=2.0, help="state size in GiB: parameters + AdamW state (default 2)")
    p.add_argument("--reps", type=int, default=3, help="interleaved repetitions (default 3)")
    p.add_argument("--dir", default="/tmp/tsr-dcp-bench", help="where the checkpoints go (default /tmp/tsr-dcp-bench)")
    p.add_argument("--width", type=int, default=4096, help="Linear layer width (default 4096)")
    p.add_argument("--device", default="", help="cuda, cuda:N or cpu (default: cuda:0 when available, else cpu)")
    p.add_argument("--only", default="save,load,async",
                   help="comma list of the parts to run: save, load, async (default all; load implies save)")
    p.add_argument("--evict", action="store_true",
                   help="drop the checkpoint's files from the page cache before each load (posix_fadvise)")
    p.add_argument("--time-limit", type=float, default=370.0,
                   help="start no repetition that would end (at the last one's pace) after this many seconds "
                        "(default 370: the summary still comes out under torch-check.sh's timeout of 400 s)")
    a = p.parse_args()
    if a.gib <= 0 or a.reps < 1 or a.width < 1:
        die("--gib must be > 0, --reps and --width >= 1")
    a.only = {s.strip() for s in a.only.split(",") if s.strip()}
    bad = a.only - {"save", "load", "async"}
    if bad:
        die(f"--only: unknown part(s) {sorted(bad)} (save, load, async)")
    return a


# ---------------------------------------------------------------- state

def walk(obj, prefix=""):
    """(path, tensor) for every tensor in a nested dict/list/tuple, in order."""
    if isinstance(obj, torch.Tensor):
        yield prefix, obj
    elif isinstance(obj, dict):
        for k, v in obj.items():
            yield from walk(v, f"{prefix}/{k}")
    elif isinstance(obj, (list, tuple)):
        for i, v in enumerate(obj):
            yield from walk(v, f"{prefix}/{i}")


def like(obj):
    """The same structure with new tensors of the same shapes, dtypes and devices; other values copied."""
    if isinstance(obj, torch.Tensor):
        return torch.empty_like(obj)
    if isinstance(obj, dict):
        return {k: like(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [like(v) for v in obj]
    if isinstance(obj, tuple):
        return tuple(like(v) for v in obj)
    return copy.deepcopy(obj)


def poison(target):
    """Fill every tensor with a value the saved state does not hold (NaN; 0 for integers), so a load that
    leaves a tensor untouched fails the check."""
    for _, t in walk(target):
        if t.is_floating_point() or t.is_complex():
            t.fill_(float("nan"))
        else:
            t.zero_()


def compare(saved, loaded):
    """Names of the tensors that differ (shape, dtype or any bit), or that are missing in `loaded`."""
    got = dict(walk(loaded))
    bad = []
    for name, a in walk(saved):
        b = got.get(name)
        if b is None or b.shape != a.shape or b.dtype != a.dtype or not torch.equal(a, b.to(a.device)):
            bad.append(name)
    return bad


def build_state(gib, width, dev):
    per_layer = (width * width + width) * 4 * 3  # f32 weight + bias, and AdamW's exp_avg, exp_avg_sq
    layers = max(1, round(gib * (1 << 30) / per_layer))
    torch.manual_seed(0)
    model = nn.Sequential(*[nn.Linear(width, width, device=dev) for _ in range(layers)])
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    x = torch.randn(8, width, device=dev)
    model(x).square().mean().backward()
    opt.step()  # one step, so that exp_avg and exp_avg_sq exist
    opt.zero_grad(set_to_none=True)
    state = {"model": model.state_dict(), "optim": opt.state_dict()}
    return model, opt, state, layers


# ---------------------------------------------------------------- helpers

def dev_sync(dev):
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)


def make_writer(kind, path):
    return FileSystemWriter(path) if kind == "filesystem" else TesseraWriter(path, 1)


def make_reader(kind, path):
    return FileSystemReader(path) if kind == "filesystem" else TesseraReader(path, 1)


def wait_async(ret):
    """dcp.async_save returns a concurrent.futures.Future (torch 2.4-2.11 with the default stagers), or an
    AsyncSaveResponse (staging_completion, upload_completion) when the stager stages asynchronously."""
    if hasattr(ret, "upload_completion"):
        ret.staging_completion.result()
        return ret.upload_completion.result()
    if hasattr(ret, "result"):
        return ret.result()
    if hasattr(ret, "wait"):  # a torch.futures.Future
        return ret.wait()
    raise TypeError(f"dcp.async_save returned {type(ret).__name__}, which this benchmark cannot wait on")


def evict(path):
    """Drop the files under `path` from the page cache (they are clean after os.sync())."""
    n = 0
    for d, _, files in os.walk(path):
        for f in files:
            fd = os.open(os.path.join(d, f), os.O_RDONLY)
            try:
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
                n += 1
            finally:
                os.close(fd)
    return n


def fresh(base, name):
    path = os.path.join(base, name)
    shutil.rmtree(path, ignore_errors=True)
    os.makedirs(path)
    return path


def fs_type(path):
    """The mount (device, fstype) holding `path`, from /proc/mounts: longest matching mount point."""
    best, out = "", {}
    try:
        real = os.path.realpath(path)
        with open("/proc/mounts") as f:
            for line in f:
                dev, mnt, typ = line.split()[:3]
                mnt = mnt.replace("\\040", " ")
                if (real == mnt or real.startswith(mnt.rstrip("/") + "/")) and len(mnt) >= len(best):
                    best, out = mnt, {"mount": mnt, "fs_type": typ, "fs_device": dev}
    except OSError:
        pass
    return out


class Bench:
    def __init__(self, a, dev, state, nbytes):
        self.a, self.dev, self.state, self.nbytes = a, dev, state, nbytes
        self.rows, self.errors, self.notes, self.checks_failed = [], [], [], 0
        self.target = None

    def row(self, what, writer, rep, seconds, **extra):
        r = {"bench": "dcp", "what": what, "writer": writer, "rep": rep, "seconds": round(seconds, 4),
             "gb_per_s": round(self.nbytes / seconds / 1e9, 3) if seconds > 0 else None, "bytes": self.nbytes}
        r.update(extra)
        self.rows.append(r)
        print(json.dumps(r), flush=True)

    def fail(self, what, writer, rep, e):
        msg = f"{what} {writer} rep {rep}: {type(e).__name__}: {e}"
        self.errors.append(msg[:500])
        log(f"dcp_bench: FAILED {msg}")
        log(traceback.format_exc())

    def check(self, what, writer, rep):
        bad = compare(self.state, self.target)
        if bad:
            self.checks_failed += 1
            log(f"dcp_bench: CHECK FAILED {what} {writer} rep {rep}: {len(bad)} tensor(s) differ from the saved "
                f"state, e.g. {bad[:3]}")
        return not bad

    def load_target(self):
        if self.target is None:
            self.target = like(self.state)
        poison(self.target)
        dev_sync(self.dev)
        return self.target

    def save_load(self, kind, rep):
        path = fresh(self.a.dir, f"{kind}-save-r{rep}")
        try:
            dev_sync(self.dev)
            os.sync()
            t0 = time.perf_counter()
            dcp.save(self.state, storage_writer=make_writer(kind, path))
            self.row("save", kind, rep, time.perf_counter() - t0)
            if "load" not in self.a.only:
                return
            target = self.load_target()
            os.sync()
            cache = "warm"
            if self.a.evict:
                evict(path)
                cache = "evicted"
            t0 = time.perf_counter()
            dcp.load(target, storage_reader=make_reader(kind, path))
            dev_sync(self.dev)
            sec = time.perf_counter() - t0
            self.row("load", kind, rep, sec, page_cache=cache, check=self.check("load", kind, rep))
        except Exception as e:  # noqa: BLE001
            self.fail("save/load", kind, rep, e)
        finally:
            shutil.rmtree(path, ignore_errors=True)

    def d2h(self, rep, pinned):
        try:
            dev_sync(self.dev)
            t0 = time.perf_counter()
            for (_, src), dst in zip(walk(self.state), pinned):
                dst.copy_(src, non_blocking=True)
            torch.cuda.synchronize(self.dev)
            self.row("d2h_pinned", "reference", rep, time.perf_counter() - t0)
        except Exception as e:  # noqa: BLE001
            self.fail("d2h_pinned", "reference", rep, e)

    def async_save(self, kind, rep):
        path = fresh(self.a.dir, f"{kind}-async-r{rep}")
        try:
            dev_sync(self.dev)
            os.sync()
            t0 = time.perf_counter()
            ret = dcp.async_save(self.state, storage_writer=make_writer(kind, path))
            blocked = time.perf_counter() - t0
            wait_async(ret)
            total = time.perf_counter() - t0
            self.row("async_blocked", kind, rep, blocked, returned=type(ret).__name__)
            target = self.load_target()
            dcp.load(target, storage_reader=make_reader(kind, path))
            dev_sync(self.dev)
            self.row("async_total", kind, rep, total, check=self.check("async_save", kind, rep))
        except Exception as e:  # noqa: BLE001
            self.fail("async_save", kind, rep, e)
        finally:
            shutil.rmtree(path, ignore_errors=True)

    def warmup(self):
        """One small save, load and async_save per writer (first-call costs: imports, thread pools, the
        Tessera library), untimed; a failure here is reported and the timed runs still try."""
        small = {"w": torch.arange(4096, dtype=torch.float32, device=self.dev), "n": 7}
        for kind in WRITERS:
            path = fresh(self.a.dir, f"{kind}-warmup")
            try:
                dcp.save(small, storage_writer=make_writer(kind, path))
                out = {"w": torch.zeros_like(small["w"]), "n": 0}
                dcp.load(out, storage_reader=make_reader(kind, path))
                if not torch.equal(out["w"], small["w"]):
                    raise RuntimeError("the small state loaded back differs")
                if "async" in self.a.only:
                    shutil.rmtree(path, ignore_errors=True)
                    os.makedirs(path)
                    wait_async(dcp.async_save(small, storage_writer=make_writer(kind, path)))
            except Exception as e:  # noqa: BLE001
                self.fail("warmup", kind, 0, e)
            finally:
                shutil.rmtree(path, ignore_errors=True)


def stats(values):
    return {"median": round(statistics.median(values), 4), "min": round(min(values), 4),
            "max": round(max(values), 4), "n": len(values)}


def summarize(b, meta):
    by = {}
    for r in b.rows:
        by.setdefault((r["what"], r["writer"]), []).append(r)
    out = {}
    for (what, writer), rs in by.items():
        out[f"{what}/{writer}"] = {"seconds": stats([r["seconds"] for r in rs]),
                                   "gb_per_s": stats([r["gb_per_s"] for r in rs if r["gb_per_s"] is not None])}

    def med(key, field):
        s = out.get(key)
        return s[field]["median"] if s else None

    def ratio(x, y):
        return round(x / y, 3) if x is not None and y else None

    ratios = {
        "save_gbps_tessera_over_filesystem": ratio(med("save/tessera", "gb_per_s"), med("save/filesystem", "gb_per_s")),
        "load_gbps_tessera_over_filesystem": ratio(med("load/tessera", "gb_per_s"), med("load/filesystem", "gb_per_s")),
        "async_total_s_tessera_over_filesystem": ratio(med("async_total/tessera", "seconds"),
                                                     med("async_total/filesystem", "seconds")),
        "async_blocked_over_d2h_pinned_tessera": ratio(med("async_blocked/tessera", "seconds"),
                                                       med("d2h_pinned/reference", "seconds")),
        "async_blocked_over_d2h_pinned_filesystem": ratio(med("async_blocked/filesystem", "seconds"),
                                                          med("d2h_pinned/reference", "seconds")),
    }
    t = ratios["async_blocked_over_d2h_pinned_tessera"]
    summary = {"bench": "dcp", "what": "summary", **meta, "stats": out, "ratios": ratios,
               "target_async_blocked_over_d2h_pinned": TARGET_BLOCKED_OVER_COPY,
               "tessera_meets_async_target": (t <= TARGET_BLOCKED_OVER_COPY) if t is not None else None,
               "checks_failed": b.checks_failed, "errors": b.errors, "notes": b.notes}
    print(json.dumps(summary), flush=True)

    log("")
    log(f"dcp_bench: {meta['bytes'] / 1e9:.3f} GB ({meta['tensors']} tensors) on {meta['device']}, "
        f"{meta['reps_done']} rep(s), torch {meta['torch']}, dir {meta['dir']} ({meta.get('fs_type', '?')})")
    log(f"{'what':<14} {'writer':<11} {'median s':>9} {'min s':>8} {'max s':>8} {'GB/s':>8}")
    for key in sorted(out):
        what, writer = key.split("/")
        s, g = out[key]["seconds"], out[key]["gb_per_s"]
        log(f"{what:<14} {writer:<11} {s['median']:>9.3f} {s['min']:>8.3f} {s['max']:>8.3f} "
            f"{g['median'] if g['n'] else float('nan'):>8.2f}")
    for k, v in ratios.items():
        log(f"  {k}: {v}")
    if t is not None:
        log(f"  Tessera async_save blocks {t:.2f}x the pinned copy (target <= {TARGET_BLOCKED_OVER_COPY}): "
            f"{'met' if t <= TARGET_BLOCKED_OVER_COPY else 'NOT met'}")
    if b.checks_failed or b.errors:
        log(f"dcp_bench: {b.checks_failed} check(s) failed, {len(b.errors)} error(s)")


def main():
    a = parse_args()
    t_start = time.perf_counter()
    if a.device:
        dev = torch.device(a.device)
    else:
        dev = torch.device("cuda:0" if torch.cuda.is_available() else "cpu")
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            die(f"--device {a.device}: CUDA is not available here")
        if dev.index is None:
            dev = torch.device("cuda", torch.cuda.current_device())
        torch.cuda.set_device(dev)
    os.makedirs(a.dir, exist_ok=True)

    est = int(a.gib * (1 << 30))
    free = shutil.disk_usage(a.dir).free
    if free < 2.2 * est:  # one checkpoint at a time, plus margin
        die(f"{a.dir}: {free / 1e9:.1f} GB free, the benchmark needs about {2.2 * est / 1e9:.1f} GB (--dir elsewhere "
            "or a smaller --gib)")

    try:
        t0 = time.perf_counter()
        model, opt, state, layers = build_state(a.gib, a.width, dev)
        dev_sync(dev)
        build_s = time.perf_counter() - t0
    except Exception as e:  # noqa: BLE001
        log(traceback.format_exc())
        die(f"building the state on {dev} failed: {type(e).__name__}: {e}")
    tensors = list(walk(state))
    nbytes = sum(t.numel() * t.element_size() for _, t in tensors)
    log(f"dcp_bench: state {nbytes / 1e9:.3f} GB: {layers} x Linear({a.width}, {a.width}) + AdamW (exp_avg, "
        f"exp_avg_sq) after one step, {len(tensors)} tensors on {dev} (built in {build_s:.1f} s); dir {a.dir}")

    b = Bench(a, dev, state, nbytes)
    pinned = None
    if "async" in a.only and dev.type == "cuda":
        try:
            pinned = [torch.empty(t.shape, dtype=t.dtype, device="cpu", pin_memory=True) for _, t in tensors]
            for (_, src), dst in zip(tensors, pinned):  # touch once, outside the timing
                dst.copy_(src, non_blocking=True)
            torch.cuda.synchronize(dev)
        except Exception as e:  # noqa: BLE001
            b.fail("d2h_pinned setup", "reference", 0, e)
            pinned = None
    elif "async" in a.only:
        log("dcp_bench: no GPU: the d2h_pinned reference (and the async_blocked/d2h_pinned ratio) is skipped")

    b.warmup()
    reps_done, last_rep_s = 0, 0.0
    for rep in range(a.reps):
        elapsed = time.perf_counter() - t_start
        if elapsed + 1.1 * last_rep_s > a.time_limit:
            msg = (f"time limit {a.time_limit:.0f} s: after {reps_done} rep(s) ({elapsed:.0f} s, the last one "
                   f"{last_rep_s:.0f} s) the remaining reps are skipped")
            log(f"dcp_bench: {msg}")
            b.notes.append(msg)
            break
        if "save" in a.only or "load" in a.only:
            for kind in WRITERS:
                b.save_load(kind, rep)
        if "async" in a.only:
            if pinned is not None:
                b.d2h(rep, pinned)
            for kind in WRITERS:
                b.async_save(kind, rep)
        reps_done += 1
        last_rep_s = time.perf_counter() - t_start - elapsed
        log(f"dcp_bench: rep {rep} done in {last_rep_s:.1f} s ({time.perf_counter() - t_start:.0f} s in all)")

    meta = {"bytes": nbytes, "tensors": len(tensors), "layers": layers, "width": a.width, "device": str(dev),
            "gpu": torch.cuda.get_device_name(dev) if dev.type == "cuda" else None, "torch": torch.__version__,
            "reps": a.reps, "reps_done": reps_done, "dir": a.dir, "evict": a.evict, **fs_type(a.dir),
            "wall_s": round(time.perf_counter() - t_start, 1)}
    summarize(b, meta)
    try:
        os.rmdir(a.dir)  # only when empty: a directory the caller named stays if it holds anything else
    except OSError:
        pass
    del model, opt
    sys.exit(1 if b.errors or b.checks_failed else 0)


if __name__ == "__main__":
    main()
