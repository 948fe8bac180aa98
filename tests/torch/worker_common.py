"""What the torch test workers share: the failure list, check() and summary(), the hang dump, and this rank's
device from TESSERA_DEVICE."""
import faulthandler
import os
import sys

import torch

failures = []
_checks = [0]  # how many checks ran (summary())


def check(ok, what):
    """Counts a check; records a failed one (the worker exits non-zero at the end) and prints it as "FAIL ..."."""
    _checks[0] += 1
    if not ok:
        failures.append(what)
        print(f"FAIL {what}", flush=True)


def summary(label):
    """Prints "LABEL: N checks, M failed" and returns the exit status: 0 when no check failed."""
    print(f"{label}: {_checks[0]} checks, {len(failures)} failed", flush=True)
    return 1 if failures else 0


def arm_hang_dump():
    """A hang dumps every thread's Python stack and exits, at 3 x TESSERA_TEST_HANG_S (after Tessera's own timeout had
    its chance)."""
    faulthandler.dump_traceback_later(3 * int(os.environ.get("TESSERA_TEST_HANG_S", "90")), exit=True)


def device():
    """cpu for a host rank, else TESSERA_DEVICE (cuda:0, npu:0 under `tessera run`). An npu rank without torch_npu
    gets the test device of tests/torch/npu_device (TESSERA_TEST_NPU_EXT: its built module) made `npu` first."""
    d = os.environ.get("TESSERA_DEVICE", "host")
    if d == "host":
        return torch.device("cpu")
    if d.startswith("npu") and torch._C._get_privateuse1_backend_name() != "npu":
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        import npu_device
        npu_device.load()
    return torch.device(d)


def use_device(dev):
    """Makes an accelerator (cuda, npu, musa) this process's current one, with LOCAL_RANK its index: `tessera run`
    shows each device rank only its own device, as cuda:0 / npu:0 (CUDA_VISIBLE_DEVICES, ASCEND_RT_VISIBLE_DEVICES),
    while LOCAL_RANK stays the rank's index on the node, and DeepSpeed and Accelerate pick DEVICE:LOCAL_RANK (on the
    H200 rank 1 failed: "device_id cuda:1 is out of range")."""
    if dev.type != "cpu":
        os.environ["LOCAL_RANK"] = str(dev.index or 0)
        getattr(torch, dev.type).set_device(dev.index or 0)
