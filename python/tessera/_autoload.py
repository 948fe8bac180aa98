"""The `torch.backends` entry point of the package (python/pyproject.toml): `import torch` calls `load`, which
registers the torch.distributed backend "tessera".

It lives outside `tessera.torch` because `import tessera.torch` itself imports torch, whose import then calls this
entry point while `tessera.torch` is only partly initialised; pointing the entry point into that module made the
first import fail ("partially initialized module 'tessera.torch' has no attribute '_autoload'"). Here that case is
seen and left to `tessera.torch`, which registers the backend when its own import finishes.

A failure here (a broken or half-built install: tessera._C missing or built for another torch) must not take
`import torch` down with it, for every program of the environment: torch turns an entry point's exception into its
own import error. It is a warning instead, naming the error; backend "tessera" is then not registered, and
`import tessera.torch` raises the error itself.
"""
import sys
import warnings


def load():
    backend = sys.modules.get("tessera.torch._backend")
    if backend is not None and not hasattr(backend, "register"):
        return  # tessera.torch is being imported (it imported torch): it registers the backend when it is done
    try:
        from tessera.torch import register

        register()
    except Exception as e:  # noqa: BLE001  any failure of the package, reported, never raised into `import torch`
        warnings.warn(
            f"tessera: the torch.distributed backend 'tessera' is not registered: {type(e).__name__}: {e} "
            "(`import tessera.torch` shows the whole error; build libtessera, then `pip install --no-build-isolation ./python`)",
            RuntimeWarning,
            stacklevel=2,
        )
