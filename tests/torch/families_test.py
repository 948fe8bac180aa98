"""tessera.torch asks Tessera's device-family table (python/tessera/_families.py, written from src/common/vendor.hpp
when the package is built) for every device family, never a list of its own: the package's copy is the table the
generator reads from this source tree; TESSERA_DEVICE / Options.device accept every family with a torch device type
and name them when refusing one; a rank's device becomes the current device of its family's torch type (corex:1 ->
torch.cuda.set_device(1): CoreX's torch build is CUDA's); an island of ranks that declare none is named after the
family's vendor. One process, no group, no GPU needed (torch's set_device calls are recorded, not made); exit 0 when
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

# Islands of ranks that declare none: one per device kind, named after the family's usual vendor.
layout = _backend.island_layout([(-1, "", "corex"), (-1, "", "host"), (-1, "", "cuda"), (-1, "", "corex")])
check(layout == [(0, "iluvatar"), (1, "host"), (2, "nvidia"), (0, "iluvatar")], f"island_layout: {layout}")

sys.exit(summary("families"))
