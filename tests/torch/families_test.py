"""tessera.torch asks Tessera's device-family table (python/tessera/_families.py, written from src/common/vendor.hpp
when the package is built) for every device family, never a list of its own: the package's copy is the table the
generator reads from this source tree; TESSERA_DEVICE / Options.device accept every family with a torch device type
and name them when refusing one; a rank's device becomes the current device of its family's torch type (corex:1 ->
torch.cuda.set_device(1): CoreX's torch build is CUDA's) and the backend's device half opens it as torch names it
(cuda:1); an island of ranks that declare none is named after the family's vendor. One process, no group, no GPU needed (torch's set_device calls are recorded, not made); exit 0 when
every check passed (scripts/torch-check.sh, group ops).
"""
import os
import subprocess
import sys
import types
from pathlib import Path

import torch

import tessera._families as families
from tessera.torch import _backend, _devices

sys.path.insert(0, str(Path(__file__).resolve().parent))
from worker_common import check, failures, summary  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]

# The installed copy is what the generator writes from this tree's table (a package built from an older table fails).
gen = subprocess.run([sys.executable, str(ROOT / "scripts" / "gen-families-py.py"), "--rows"], capture_output=True,
                     text=True, timeout=60)
check(gen.returncode == 0, f"gen-families-py.py --rows failed: {gen.stderr.strip()}")
rows = [line.split("\t") for line in gen.stdout.splitlines()]
have = [[f.prefix, f.label, f.visible_env, f.torch_type, f.runtime, f.ccl, str(int(f.mps)), " ".join(f.vendors),
         f.slurm_gres] for f in families.FAMILIES]
check(have == rows, f"tessera/_families.py ({families.__file__}) is not the table of src/common/vendor.hpp:\n"
      f"  package {have}\n  header  {rows}")

by_prefix = {f.prefix: f for f in families.FAMILIES}
corex = by_prefix.get("corex")
check(corex is not None and corex.torch_type == "cuda", f"the table's corex row: {corex}")
check(_devices.PRIVATEUSE1_TYPES == ("npu", "musa"), f"PrivateUse1 types {_devices.PRIVATEUSE1_TYPES}")
check([f.prefix for f in _devices.TORCH_FAMILIES] == [f.prefix for f in families.FAMILIES if f.torch_type],
      "the torch families are the table's rows with a torch device type")

# Device strings: every family with a torch type, host; the refusal names the value and the accepted forms.
os.environ.pop("TESSERA_DEVICE", None)
for dev in ["host", "cuda:0", "corex:3"]:
    try:
        check(_backend._device(_backend.Options(device=dev)) == dev, f"_device({dev!r})")
    except ValueError as e:
        check(False, f"_device({dev!r}) refused: {e}")
for bad in ["emu:0", "gpu:0", "corex", "corex:x", "CUDA:0"]:
    try:
        _backend._device(_backend.Options(device=bad))
        check(False, f"_device({bad!r}) accepted")
    except ValueError as e:
        check(repr(bad) in str(e) and "'corex:N'" in str(e) and "'emu:N'" not in str(e), f"_device({bad!r}): {e}")
if torch._C._get_privateuse1_backend_name() != "npu":
    try:
        _backend._device(_backend.Options(device="npu:0"))
        check(False, "npu:0 accepted without torch's PrivateUse1 backend named npu")
    except ValueError as e:
        check("PrivateUse1" in str(e) and "'npu'" in str(e), f"npu:0 without torch_npu: {e}")

# The current device: the family's torch module's set_device, for every family (recorded, not made).
calls = []
real_cuda_set = torch.cuda.set_device
torch.cuda.set_device = lambda i: calls.append(("cuda", i))
had_npu = hasattr(torch, "npu")
real_npu = getattr(torch, "npu", None)
torch.npu = types.SimpleNamespace(set_device=lambda i: calls.append(("npu", i)))
try:
    for dev, want in [("host", []), ("cuda:2", [("cuda", 2)]), ("corex:1", [("cuda", 1)]), ("npu:3", [("npu", 3)])]:
        calls.clear()
        _devices.set_current(dev)
        check(calls == want, f"set_current({dev!r}) called {calls}, expected {want}")
finally:
    torch.cuda.set_device = real_cuda_set
    if had_npu:
        torch.npu = real_npu
    else:
        del torch.npu

# The device as torch names it, which the backend's device half opens: the family's torch type.
for dev, want in [("host", "host"), ("cuda:2", "cuda:2"), ("corex:1", "cuda:1"), ("npu:0", "npu:0"),
                  ("musa:3", "musa:3")]:
    got = _devices.torch_device(dev)
    check(got == want, f"torch_device({dev!r}) = {got!r}, expected {want!r}")

# A corex rank's group, made by the backend's creator in a world of one (a store of this process; tessera._C.Backend
# recorded, not made: a CUDA device is needed to open it): torch's CUDA device made current, and the device half given
# the device as torch names it beside Tessera's name for it.
import datetime  # noqa: E402

import tessera._C as C  # noqa: E402


class Store(dict):
    def set(self, k, v):
        self[k] = v.encode() if isinstance(v, str) else v

    def get(self, k):
        return self[k]


made = []
real_backend = C.Backend
C.Backend = lambda *args, **kw: made.append((args, kw)) or "backend"
torch.cuda.set_device = lambda i: calls.append(("cuda", i))
calls.clear()
try:
    opts = types.SimpleNamespace(store=Store(), group_rank=0, group_size=1, timeout=datetime.timedelta(seconds=5),
                                 group_id="0", global_ranks_in_group=[0])
    check(_backend._create(opts, _backend.Options(device="corex:0")) == "backend", "_create made no backend")
    check(calls == [("cuda", 0)], f"a corex:0 group set the current devices {calls}, expected torch.cuda's 0")
    args, kw = made[0] if made else ((), {})
    check(len(args) > 5 and args[5] == "corex:0" and kw.get("torch_device") == "cuda:0",
          f"_C.Backend got device {args[5] if len(args) > 5 else None!r}, torch_device {kw.get('torch_device')!r}; "
          "expected 'corex:0' and 'cuda:0'")
    check(args[4] == "iluvatar" if len(args) > 4 else False, f"the corex island's name: {args[4:5]}")
finally:
    C.Backend = real_backend
    torch.cuda.set_device = real_cuda_set

# Islands of ranks that declare none: one per device kind, named after the family's usual vendor.
layout = _backend.island_layout([(-1, "", "corex"), (-1, "", "host"), (-1, "", "cuda"), (-1, "", "corex")])
check(layout == [(0, "iluvatar"), (1, "host"), (2, "nvidia"), (0, "iluvatar")], f"island_layout: {layout}")

sys.exit(summary("families"))
