"""What the torch test workers share: the failure list, check(), and this rank's device from TESSERA_DEVICE."""
import os

import torch

failures = []


def check(ok, what):
    """Records a failed check (the worker exits non-zero at the end) and prints it as "FAIL ..."."""
    if not ok:
        failures.append(what)
        print(f"FAIL {what}", flush=True)


def device():
    """cpu for a host rank, else TESSERA_DEVICE (cuda:0 under `tessera run`)."""
    d = os.environ.get("TESSERA_DEVICE", "host")
    return torch.device("cpu") if d == "host" else torch.device(d)


def use_device(dev):
    """Makes a CUDA device this process's current one, with LOCAL_RANK its index: `tessera run` shows each GPU
    rank only its own GPU, as cuda:0, while LOCAL_RANK stays the rank's index on the node, and DeepSpeed and
    Accelerate pick cuda:LOCAL_RANK (on the H200 rank 1 failed: "device_id cuda:1 is out of range")."""
    if dev.type == "cuda":
        os.environ["LOCAL_RANK"] = str(dev.index or 0)
        torch.cuda.set_device(dev)
