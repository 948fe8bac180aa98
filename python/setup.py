"""Builds tessera._C, the C++ half of the torch.distributed backend, against libtessera.

Where libtessera comes from (first that applies):
  TESSERA_PREFIX     an installed tree (include/tessera/tessera.h, lib/libtessera.so)
  TESSERA_BUILD_DIR  a CMake build tree of this repository (default: ../build next to this file)
The extension is linked with an rpath to that library. CUDA support is compiled in when torch has CUDA
and nvcc's toolkit is found (CUDA_HOME); without it the backend serves CPU tensors only.
"""
import os
import re
import sys
from pathlib import Path

from setuptools import setup

HERE = Path(__file__).resolve().parent
REPO = HERE.parent


def version():
    text = (REPO / "CMakeLists.txt").read_text() if (REPO / "CMakeLists.txt").exists() else ""
    m = re.search(r"project\(tessera VERSION ([0-9.]+)", text)
    return m.group(1) if m else "0.0.0"


def tessera_paths():
    prefix = os.environ.get("TESSERA_PREFIX")
    if prefix:
        inc, lib = Path(prefix) / "include", Path(prefix) / "lib"
    else:
        build = Path(os.environ.get("TESSERA_BUILD_DIR", REPO / "build")).resolve()
        inc, lib = REPO / "include", build
    if not (inc / "tessera" / "tessera.h").exists():
        sys.exit(f"tessera setup: no tessera/tessera.h under {inc} (set TESSERA_PREFIX or TESSERA_BUILD_DIR)")
    if not any(lib.glob("libtessera.so*")):
        sys.exit(f"tessera setup: no libtessera.so in {lib}: build it first (cmake --build build), "
                 "or set TESSERA_BUILD_DIR / TESSERA_PREFIX")
    return str(inc), str(lib)


def extension():
    import torch
    from torch.utils import cpp_extension

    inc, lib = tessera_paths()
    cuda = torch.version.cuda is not None and cpp_extension.CUDA_HOME is not None
    kind = cpp_extension.CUDAExtension if cuda else cpp_extension.CppExtension
    return kind(
        name="tessera._C",
        sources=["csrc/backend.cpp", "csrc/ckpt.cpp"],
        include_dirs=[inc],
        library_dirs=[lib],
        libraries=["tessera"],
        define_macros=[("TESSERA_TORCH_CUDA", "1")] if cuda else [],
        extra_compile_args={"cxx": ["-O2", "-std=c++17"]} if not cuda else {"cxx": ["-O2", "-std=c++17"], "nvcc": []},
        extra_link_args=[f"-Wl,-rpath,{lib}"],
    )


if __name__ == "__main__":
    from torch.utils.cpp_extension import BuildExtension

    setup(version=version(), ext_modules=[extension()], cmdclass={"build_ext": BuildExtension})
