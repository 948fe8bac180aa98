"""bench/gpu/mps_matmul_probe.py: are torch's GEMMs right on an MPS share of the GPU?

    python3 bench/gpu/mps_matmul_probe.py LABEL     (run once plainly, once under MPS with
                                                    CUDA_MPS_ACTIVE_THREAD_PERCENTAGE set)

The LM experiment (examples/torch/train_lm.py) saw a non-finite output of its first Linear layer on every
rank run on an SM share, and finite numbers on the whole GPU. This checks the same shapes alone, no
Tessera involved: bf16 autocast and f32 Linear forward (13 and 19 sequences of 512 tokens, d_model 1024 ->
3072), in bf16 and f16 autocast, TF32 and f32, against an f64 reference, with torch's default BLAS (and
each library it can prefer, PROBE_ALL_BLAS=1). One line per case: finite or not, max relative error.
Measured on the H200 (2026-12-01): every case right alone, on the whole GPU or on a 35% share; with a
second MPS client running at once, bf16 results wrong (max relative error 0.96 to 7e18, some NaN) under
every BLAS library, f32 right.
"""
import os
import sys

import torch
import torch.nn.functional as F

label = sys.argv[1] if len(sys.argv) > 1 else "?"
share = os.environ.get("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", "100 (no MPS limit)")
print(f"== {label}: torch {torch.__version__}, {torch.cuda.get_device_name(0)}, SM share {share}%, "
      f"{torch.cuda.get_device_properties(0).multi_processor_count} SMs visible", flush=True)
g = torch.Generator().manual_seed(0)
libs = ["default"]
if hasattr(torch.backends.cuda, "preferred_blas_library") and os.environ.get("PROBE_ALL_BLAS"):
    libs += ["cublas", "cublaslt"]
for lib in libs:
    if lib != "default":
        try:
            torch.backends.cuda.preferred_blas_library(lib)
        except Exception as e:  # noqa: BLE001
            print(f"  {lib}: cannot select ({e})")
            continue
    for rows in (13 * 512, 19 * 512):
        x = torch.randn(rows, 1024, generator=g)
        w = torch.randn(3072, 1024, generator=g) * 0.03
        b = torch.randn(3072, generator=g) * 0.03
        ref = (x.double() @ w.double().T + b.double())
        xd, wd, bd = x.cuda(), w.cuda(), b.cuda()
        for mode in os.environ.get("PROBE_MODES", "bf16-autocast,f16-autocast,tf32,f32").split(","):
            torch.backends.cuda.matmul.allow_tf32 = mode == "tf32"
            if mode in ("f32", "tf32"):
                y = F.linear(xd, wd, bd)
            else:
                with torch.autocast("cuda", dtype=torch.bfloat16 if mode == "bf16-autocast" else torch.float16):
                    y = F.linear(xd, wd, bd)
            torch.cuda.synchronize()
            yc = y.double().cpu()
            finite = bool(torch.isfinite(yc).all())
            err = ((yc - ref).abs().max() / ref.abs().max()).item() if finite else float("nan")
            bad = int((~torch.isfinite(yc)).sum())
            print(f"  blas={lib:8s} rows={rows:5d} {mode:13s} finite={finite} non-finite={bad} max_rel_err={err:.2e}",
                  flush=True)
