"""all_reduce of large tensors of every floating type through backend "tessera", checked element by element
(scripts/torch-check.sh, job large-floats). ops_worker.py checks every operation at small sizes; this one
checks the sizes a model's gradients have (up to TESSERA_TEST_LARGE elements, default 160M), where the
bridge splits a call into chunks and the device bridge pipelines it through its rings.

Every rank makes every rank's input from (seed, rank) on its device, so each computes the expected sum in
f64 itself. With two ranks the sum of two values of a 16-bit type is exact in f32, so Tessera's result
(accumulated in f32, rounded once) must equal the f64 sum rounded once, bit for bit; with more ranks the
error must stay within one rounding of the type. Each call is made twice: on an input just written by a
kernel on the caller's stream (the cast), and after torch.cuda.synchronize(), so a call that reads its
input before the caller's stream has written it fails the first and passes the second.
Exit status 0 when everything passed; failures are printed as "FAIL ...".
"""
import os
import sys

import torch
import torch.distributed as dist

import tessera.torch  # noqa: F401  registers the backend


def main():
    dist.init_process_group("tessera")
    rank, world = dist.get_rank(), dist.get_world_size()
    d = os.environ.get("TESSERA_DEVICE", "host")
    dev = torch.device("cpu") if d == "host" else torch.device(d)
    if dev.type == "cuda":
        torch.cuda.set_device(dev)
    top = int(os.environ.get("TESSERA_TEST_LARGE", str(160 << 20)))
    sizes = sorted({n for n in (1 << 20, 5 << 20, 40 << 20 | 12345, top) if n <= top})
    failures = checks = 0
    for n in sizes:
        xs = []
        for r in range(world):
            g = torch.Generator(device=dev).manual_seed(7919 * r + n)
            xs.append(torch.randn(n, generator=g, device=dev) * (1 + r))
        for dt in (torch.float32, torch.bfloat16, torch.float16):
            exact = torch.zeros(n, dtype=torch.float64, device=dev)
            for x in xs:
                exact += x.to(dt).double()
            want = exact.to(dt)
            for sync in (False, True):
                t = xs[rank].to(dt, copy=True)  # a copy: the call is in place, and xs must stay the inputs
                if sync and dev.type == "cuda":
                    torch.cuda.synchronize()
                dist.all_reduce(t)
                checks += 1
                if world == 2:
                    bad = (t != want).nonzero()
                    ok = bad.numel() == 0
                    detail = "" if ok else (f"{bad.numel()} of {n} elements differ, first at {bad[0].item()}, "
                                            f"last at {bad[-1].item()}; got {t[bad[0]].item()} want {want[bad[0]].item()}")
                else:
                    err = (t.double() - exact).abs().max().item()
                    lim = torch.finfo(dt).eps * exact.abs().max().item() * 2
                    ok = err <= lim
                    detail = "" if ok else f"max error {err:.3g} over {lim:.3g}"
                if not ok:
                    failures += 1
                    print(f"FAIL rank {rank}: all_reduce {dt} n={n} {'after a synchronize' if sync else 'fresh input'}: "
                          f"{detail}", flush=True)
        del xs
    print(f"rank {rank}: {checks} checks, {failures} failed", flush=True)
    dist.destroy_process_group()
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
