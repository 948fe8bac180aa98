"""Builds tessera._C, the C++ half of the torch.distributed backend, against libtessera.

Where libtessera comes from (first that applies):
  TESSERA_PREFIX     an installed tree (include/tessera/tessera.h, lib/libtessera.so)
  TESSERA_BUILD_DIR  a CMake build tree of this repository (default: ../build next to this file)
The extension is linked with an rpath to that library.
The package's copy of the device-family table, tessera/_families.py, is written from src/common/vendor.hpp (the
one table) by scripts/gen-families-py.py every time this runs; it is not committed.
CUDA support (TESSERA_TORCH_CUDA=auto|1|0, default auto) is compiled in when torch is a CUDA build and a
CUDA toolkit of the same major version is found (CUDA_HOME, else nvcc on PATH); otherwise the backend
serves CPU tensors only, and the setup says why. 1 requires it (an error naming what is missing); 0 builds
the CPU-only extension.
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


def write_families():
    """tessera/_families.py from the C++ family table (scripts/gen-families-py.py), so the package's copy is always
    the table it is built with. A source tree without the table (a copy of python/ alone) keeps the module it has."""
    import subprocess

    gen, out = REPO / "scripts" / "gen-families-py.py", HERE / "tessera" / "_families.py"
    if not gen.exists() and out.exists():
        return
    if not gen.exists():
        sys.exit(f"tessera setup: no {gen} to write {out} from src/common/vendor.hpp (build from a Tessera checkout)")
    if subprocess.run([sys.executable, str(gen), str(out)]).returncode != 0:
        sys.exit(f"tessera setup: {gen} failed: {out} not written")


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


def toolkit_major(cuda_home):
    """The major version of the toolkit's nvcc ("release 13.0" -> 13), or None."""
    import subprocess

    try:
        out = subprocess.run([str(Path(cuda_home) / "bin" / "nvcc"), "--version"], capture_output=True, text=True,
                             check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return None
    m = re.search(r"release (\d+)\.", out)
    return int(m.group(1)) if m else None


def want_cuda(torch, cpp_extension):
    mode = os.environ.get("TESSERA_TORCH_CUDA", "auto")
    if mode not in ("auto", "0", "1"):
        sys.exit(f"tessera setup: TESSERA_TORCH_CUDA={mode!r} is not auto, 1 or 0")
    if mode == "0":
        return False
    why = None
    if torch.version.cuda is None:
        why = f"torch {torch.__version__} is not a CUDA build"
    elif cpp_extension.CUDA_HOME is None:
        why = "no CUDA toolkit found (set CUDA_HOME)"
    else:
        have, need = toolkit_major(cpp_extension.CUDA_HOME), int(torch.version.cuda.split(".")[0])
        if have != need:
            why = f"the toolkit at {cpp_extension.CUDA_HOME} is CUDA {have}, torch was built with CUDA {torch.version.cuda}"
    if why is None:
        return True
    if mode == "1":
        sys.exit(f"tessera setup: TESSERA_TORCH_CUDA=1 but {why}")
    print(f"tessera setup: building the CPU-only extension: {why}", file=sys.stderr)
    return False


def extension():
    import torch
    from torch.utils import cpp_extension

    inc, lib = tessera_paths()
    cuda = want_cuda(torch, cpp_extension)
    kind = cpp_extension.CUDAExtension if cuda else cpp_extension.CppExtension
    return kind(
        name="tessera._C",
        sources=sorted(f"csrc/{p.name}" for p in (HERE / "csrc").glob("*.cpp")),
        include_dirs=[inc],
        library_dirs=[lib],
        libraries=["tessera"],
        define_macros=[("TESSERA_TORCH_CUDA", "1")] if cuda else [],
        extra_compile_args={"cxx": ["-O2", "-std=c++17"]} if not cuda else {"cxx": ["-O2", "-std=c++17"], "nvcc": []},
        extra_link_args=[f"-Wl,-rpath,{lib}"],
    )


if __name__ == "__main__":
    # First: importing torch runs the torch.backends entry point, which may import this tree's tessera.torch, and
    # that needs the module.
    write_families()
    from torch.utils.cpp_extension import BuildExtension

    setup(version=version(), ext_modules=[extension()], cmdclass={"build_ext": BuildExtension})
