"""The `torch.backends` entry point of the package (python/pyproject.toml): `import torch` calls `load`, which
registers the torch.distributed backend "tessera".

It lives outside `tessera.torch` because `import tessera.torch` itself imports torch, whose import then calls this
entry point while `tessera.torch` is only partly initialised; pointing the entry point into that module made the
first import fail ("partially initialized module 'tessera.torch' has no attribute '_autoload'"). Here that case is
seen and left to `tessera.torch`, which registers the backend when its own import finishes.
"""
import sys


def load():
    backend = sys.modules.get("tessera.torch._backend")
    if backend is not None and not hasattr(backend, "register"):
        return  # tessera.torch is being imported (it imported torch): it registers the backend when it is done
    from tessera.torch import register

    register()
