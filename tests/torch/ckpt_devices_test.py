"""tessera.torch.checkpoint on the tensors of a device family other than CUDA: `npu` tensors of the test device
(tests/torch/npu_device, on the ACL host shim) in one process, no group (DCP's no_dist). The device types come from
Tessera's family table: a family's tensors go to the checkpoint library as they are (it copies device memory through
the family's runtime row — on the shim that memory cannot be read by host code, so a host read of it would crash),
after the work queued on their device has been waited for; async_save's staging waits for its copies out of every
family's devices; the state restores bit-exact into npu and into CPU tensors. Run by scripts/torch-check.sh, group npu,
with TESSERA_TEST_NPU_EXT and the shims on LD_LIBRARY_PATH. Exit 0 when every check passed.
"""
import os
import sys
import tempfile
from pathlib import Path

import torch
import torch.distributed.checkpoint as dcp

sys.path.insert(0, str(Path(__file__).resolve().parent))
import npu_device  # noqa: E402
from worker_common import check, summary  # noqa: E402

npu_device.load()
import tessera.torch  # noqa: E402,F401
from tessera.torch import checkpoint as ckpt  # noqa: E402

dev = torch.device("npu:0")
g = torch.Generator().manual_seed(5)
host = {"w": torch.randn(64, 8, generator=g), "b": torch.arange(-20, 20, dtype=torch.int64),
        "h": torch.randn(33, generator=g).to(torch.bfloat16), "flag": torch.rand(7, generator=g) > 0.5,
        "scalar": torch.tensor(2.5), "on_host": torch.randn(5, generator=g)}
state = {k: (v if k == "on_host" else v.to(dev)) for k, v in host.items()}
check(all(state[k].device.type == "npu" for k in host if k != "on_host"), "the state is on npu")

# What reaches the library, and the device synchronisations, recorded around the real calls.
seen, syncs = [], []
real_ckpt, real_sync = ckpt._ckpt, torch.npu.synchronize


class RecordingWriter:
    def __init__(self, *args):
        self._w = real_ckpt().Writer(*args)

    def save(self, step, items):
        seen.extend((name, t.device.type) for name, t, _, _ in items)
        self._w.save(step, items)

    def __getattr__(self, name):
        return getattr(self._w, name)


class Recording:
    Writer = RecordingWriter

    def __getattr__(self, name):
        return getattr(real_ckpt(), name)


def sync(d=None):
    syncs.append(d)
    real_sync(d)


ckpt._ckpt = lambda: Recording()
torch.npu.synchronize = sync
try:
    with tempfile.TemporaryDirectory(prefix="tsr-ckpt-devices-") as root:
        dcp.save(state, storage_writer=ckpt.TesseraWriter(root, 1), no_dist=True)
        on = {name: t for name, t in seen}
        for k in ("w", "b", "h", "scalar"):
            check(on.get(k) == "npu", f"{k}: the library was handed a {on.get(k)} tensor, expected the npu one itself")
        check(on.get("on_host") == "cpu", f"on_host: handed {on.get('on_host')}")
        check(len(syncs) > 0, "the save did not wait for the npu device's queued work")

        # Restores: into npu tensors and into CPU tensors, bit-exact.
        for where in (dev, torch.device("cpu")):
            target = {k: torch.zeros_like(v, device=where if k != "on_host" else "cpu") for k, v in host.items()}
            dcp.load(target, storage_reader=ckpt.TesseraReader(root, 1), no_dist=True)
            for k, v in host.items():
                got = target[k].cpu()
                check(got.dtype == v.dtype and torch.equal(got, v), f"restored {k} on {where} differs")

        # async_save's stager: copies out of npu memory, waited for before it returns.
        syncs.clear()
        w = ckpt.TesseraWriter(root, 2)
        staged = w.stage(state)
        check(len(syncs) > 0, "stage() returned without waiting for the npu device")
        check(all(staged[k].device.type == "cpu" and torch.equal(staged[k], host[k]) for k in host),
              "the staged copy is not the state on the host")
        ckpt.release_staging()
finally:
    ckpt._ckpt, torch.npu.synchronize = real_ckpt, real_sync

sys.exit(summary("ckpt-devices"))
