"""tessera.torch — Tessera as a torch.distributed backend.

    import tessera.torch                      # registers backend "tessera" (also done on `import torch`
    dist.init_process_group("tessera")        # once the package is installed, via its entry point)

One process group may mix islands of different vendors and device types: CPU tensors on host ranks and
CUDA tensors on GPU ranks go through the same backend object, with Tessera's lossless, bit-identical
results on every rank. Also here: `HeteroDistributedSampler` and `hetero_allreduce_hook` (batches split
by island speed, gradients weighted so they equal the whole batch's mean gradient) and `check_replicas`
(are the parameters bit-identical on every rank?). docs/torch.md is the guide.
"""
from ._backend import BACKEND_NAME, Options, register
from .data import HeteroDistributedSampler, hetero_allreduce_hook, island_weights_per_rank
from .replicas import check_replicas, digest

__all__ = [
    "BACKEND_NAME",
    "Options",
    "register",
    "HeteroDistributedSampler",
    "hetero_allreduce_hook",
    "island_weights_per_rank",
    "check_replicas",
    "digest",
]


register()
