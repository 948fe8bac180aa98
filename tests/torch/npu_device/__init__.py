"""tests/torch/npu_device: the test-only torch device `npu` on the ACL host shim (npu_device.cpp says what it is).

    python -m npu_device BUILD      (from tests/torch) compiles the extension with torch.utils.cpp_extension (ninja,
                                    MAX_JOBS=2) into BUILD/torch-npu-device against BUILD/tests/shims/lib/libascendcl.so
                                    and prints the path of the built module
    npu_device.load()               in a rank: imports the module named by TESSERA_TEST_NPU_EXT, renames torch's
                                    PrivateUse1 backend to "npu" and registers torch.npu, as torch_npu does

A rank's Tessera communicator must reach the same libascendcl.so: the extension links it by soname with an rpath,
and scripts/torch-check.sh starts npu ranks with LD_LIBRARY_PATH on the shims' directory, where the runtime row's
dlopen("libascendcl.so") and the HCCL row's libhccl.so are found.
"""
import importlib.util
import os
import sys
import types
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]
NAME = "tessera_test_npu"
_module = None


def build(build_dir):
    """Compiles the extension into BUILD/torch-npu-device; returns the path of the module file."""
    from torch.utils import cpp_extension
    os.environ.setdefault("MAX_JOBS", "2")
    build_dir = Path(build_dir).resolve()
    shim_lib = build_dir / "tests" / "shims" / "lib"
    if not (shim_lib / "libascendcl.so").exists():
        raise SystemExit(f"npu_device: no {shim_lib / 'libascendcl.so'} (build the CMake target tessera_shim_acl)")
    out = build_dir / "torch-npu-device"
    out.mkdir(parents=True, exist_ok=True)
    mod = cpp_extension.load(name=NAME, sources=[str(HERE / "npu_device.cpp")],
                             extra_include_paths=[str(ROOT / "tests" / "shims")],
                             extra_cflags=["-O1"],
                             extra_ldflags=[f"-L{shim_lib}", "-lascendcl", f"-Wl,-rpath,{shim_lib}"],
                             build_directory=str(out), verbose=False)
    return mod.__file__


def load():
    """Makes `npu` a torch device in this process (idempotent); returns the extension module."""
    global _module
    if _module is not None:
        return _module
    import torch
    path = os.environ.get("TESSERA_TEST_NPU_EXT")
    if not path or not Path(path).exists():
        raise RuntimeError(f"npu_device: TESSERA_TEST_NPU_EXT={path!r} is not the built test device module "
                           "(python -m npu_device BUILD prints it)")
    spec = importlib.util.spec_from_file_location(NAME, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    torch.utils.rename_privateuse1_backend("npu")
    dev = types.ModuleType("torch.npu")  # what torch and the tests ask of torch.npu
    dev.is_available = lambda: mod.device_count() > 0
    dev.device_count = mod.device_count
    dev.current_device = mod.current_device
    dev.set_device = lambda d: mod.set_device(torch.device(d, 0).index if isinstance(d, str) else int(d))
    dev.synchronize = lambda d=None: mod.synchronize(mod.current_device() if d is None else int(d))
    dev.is_initialized = lambda: True
    dev._is_in_bad_fork = lambda: False
    dev.manual_seed = dev.manual_seed_all = lambda seed: None
    torch._register_device_module("npu", dev)
    torch.utils.generate_methods_for_privateuse1_backend(for_tensor=True, for_module=True, for_storage=True)
    _module = mod
    return mod


