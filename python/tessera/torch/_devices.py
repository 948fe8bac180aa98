"""The device families as tessera.torch sees them: the torch side of Tessera's one family table.

The rows come from tessera/_families.py, which the package build writes from src/common/vendor.hpp
(scripts/gen-families-py.py): nothing here names a vendor. What is said here is about torch, not about families:
which device types torch has of its own; any other family's type comes through torch's PrivateUse1 backend, renamed
by the vendor's extension (torch_npu: "npu", torch_musa: "musa"), whose module (torch.npu) it registers.
"""
import torch

try:
    from .._families import FAMILIES
except ImportError:  # a source tree used without building the package
    raise ImportError("tessera: tessera/_families.py is missing: the package build writes it from "
                      "src/common/vendor.hpp (pip install ./python, or the CMake target tessera_torch)") from None

# torch's own device types that a family's torch type may be (CoreX's torch build is CUDA's).
TORCH_OWN_TYPES = ("cuda",)

# The families whose ranks torch can hold tensors of (a torch device type), in table order: cuda, npu, musa, corex.
TORCH_FAMILIES = tuple(f for f in FAMILIES if f.torch_type)
# Their torch device types (cuda, npu, musa), and those that come through PrivateUse1 (npu, musa).
DEVICE_TYPES = tuple(dict.fromkeys(f.torch_type for f in TORCH_FAMILIES))
PRIVATEUSE1_TYPES = tuple(t for t in DEVICE_TYPES if t not in TORCH_OWN_TYPES)

_BY_PREFIX = {f.prefix: f for f in TORCH_FAMILIES}


def family(prefix):
    """The row of a device prefix a torch rank may have ("corex"), or None."""
    return _BY_PREFIX.get(prefix)


def island_vendor(kind):
    """The island name of ranks of device kind `kind` that declare none: "host" for host ranks, else the family's
    usual vendor name ("cuda" -> "nvidia", "corex" -> "iluvatar")."""
    f = family(kind)
    return f.vendors[0] if f is not None and f.vendors else kind


def device_words():
    """"'host', 'cuda:N', 'npu:N', ..." for messages."""
    return ", ".join(["'host'"] + [f"'{f.prefix}:N'" for f in TORCH_FAMILIES])


def torch_device(device):
    """Tessera's device string as torch names the device: the family's torch type and the index ("corex:1" ->
    "cuda:1", "npu:0" -> "npu:0"); "host" stays "host"."""
    if device == "host":
        return device
    prefix, _, index = device.partition(":")
    f = family(prefix)
    return f"{f.torch_type}:{index}" if f is not None else device


def module(device_type):
    """torch's module of a device type of the table (torch.cuda; torch.npu once torch_npu registered it), or None:
    for any other type (cpu, meta, ...) and for a PrivateUse1 type whose extension is not loaded."""
    if device_type not in DEVICE_TYPES:
        return None
    return getattr(torch, device_type, None)


def set_current(device):
    """Makes `device` ("corex:1": the family's torch type, index 1; "host": nothing) the current device of its torch
    type in this thread, as torch.cuda.set_device does for CUDA. A family whose torch module is not loaded (a
    PrivateUse1 type without its extension) is left alone: _backend._device has refused such a device already."""
    if device == "host":
        return
    torch_type, _, index = torch_device(device).partition(":")
    mod = module(torch_type)
    if mod is not None and hasattr(mod, "set_device"):
        mod.set_device(int(index))
