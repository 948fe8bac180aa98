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
