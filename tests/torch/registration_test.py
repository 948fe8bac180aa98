"""Backend "tessera" is registered for the device types this process knows, and only those (docs/torch.md,
"Registration lists only the device types this process knows"): cpu, cuda when torch.cuda.is_available(), and the
PrivateUse1 backend's name when it is npu or musa with its torch module registered. c10d makes the group's backend
for every listed type, and reads the list when a group is made. With --npu (TESSERA_TEST_NPU_EXT set: the test
device of tests/torch/npu_device), the test device is loaded after the backend was registered, and `npu` must then
be listed too. One process, no group; exit 0 when every check passed (scripts/torch-check.sh, groups ops and npu).
"""
import sys

import torch
import torch.distributed as dist

import tessera.torch  # noqa: F401  registers the backend (also done on `import torch` by the entry point)

from worker_common import check, failures  # noqa: E402


def listed():
    config = dist.distributed_c10d.BackendConfig(dist.Backend("tessera"))
    return sorted(config.get_device_backend_map()), sorted(dist.Backend.backend_capability["tessera"])


expected = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
check(torch._C._get_privateuse1_backend_name() not in ("npu", "musa") or "--npu" not in sys.argv,
      "the PrivateUse1 backend is renamed before the test device was loaded")
mapped, capability = listed()
check(mapped == sorted(expected), f"c10d maps tessera to {mapped}, expected {sorted(expected)}")
check(capability == sorted(expected), f"tessera's device list is {capability}, expected {sorted(expected)}")
if "--npu" in sys.argv:
    sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parent))
    import npu_device
    npu_device.load()
    mapped, capability = listed()
    want = sorted(expected + ["npu"])
    check(mapped == want, f"after loading the npu test device c10d maps tessera to {mapped}, expected {want}")
    check(capability == want, f"after loading the npu test device tessera's device list is {capability}")
# A fresh interpreter: `import tessera.torch` first (it imports torch, whose entry point then runs mid-import), and
# `import torch` alone (the entry point registers the backend), each with the backend registered afterwards.
import subprocess  # noqa: E402

for first in ("import tessera.torch", "import torch"):
    code = f"{first}; import torch.distributed as dist; assert 'TESSERA' in dist.Backend._plugins, 'not registered'"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    check(r.returncode == 0, f"a fresh interpreter running {first!r} failed: {r.stderr.strip()[-400:]}")
# A broken install (here: a module of the package that will not import) costs backend "tessera", never `import torch`:
# torch turns an entry point's exception into its own import error, for every program of the environment.
broken = "import sys; sys.modules['tessera._families'] = None; "
r = subprocess.run([sys.executable, "-c", broken + "import torch; print('torch', torch.__version__)"],
                   capture_output=True, text=True, timeout=120)
check(r.returncode == 0, f"`import torch` failed with a broken tessera package: {r.stderr.strip()[-400:]}")
check("backend 'tessera' is not registered" in r.stderr and "_families" in r.stderr,
      f"`import torch` with a broken tessera package did not warn naming the error: {r.stderr.strip()[-400:]}")
r = subprocess.run([sys.executable, "-c", broken + "import tessera.torch"], capture_output=True, text=True,
                   timeout=120)
check(r.returncode != 0 and "ImportError" in r.stderr,
      f"`import tessera.torch` with a broken package did not raise its error: {r.stderr.strip()[-400:]}")
print(f"registration: {mapped}: {'passed' if not failures else 'FAILED'}", flush=True)
sys.exit(1 if failures else 0)
