"""Heterogeneous batches: each rank takes a share of every global batch proportional to its speed.

HeteroDistributedSampler is a drop-in for torch.utils.data.DistributedSampler. Per step, the global
batch of B samples is cut into one contiguous run per rank; rank r's run has n_r samples, with n_r
proportional to its island's per-card speed w_r (tessera.split.apportion: the integer split with the
shortest step, max n_r / w_r; sum n_r = B exactly and every rank has at least one sample). Use it with
`DataLoader(ds, batch_size=sampler.batch_size, sampler=sampler)`.

With uneven n_r, plain DDP averages the ranks' mean gradients with equal weights: (1/W) sum_r g_r, where
g_r is rank r's mean gradient over its n_r samples. The mean gradient of the whole global batch is
sum_r (n_r/B) g_r. `hetero_allreduce_hook` (a DDP comm hook) makes DDP compute the latter: each rank
scales its bucket by n_r/B and the ranks SUM. Equivalently, without the hook, scale each rank's loss by
n_r*W/B (DDP then divides by W). docs/torch.md works through the arithmetic.
"""
import math
import os

import torch
import torch.distributed as dist
from torch.utils.data import Sampler

from ..split import apportion  # noqa: F401  (re-exported: tessera.torch.data.apportion)


def island_weights_per_rank(world_size=None, weights=None, layout=None):
    """Per-rank speeds from TESSERA_ISLAND_WEIGHTS ("0.5,1", one per island) and TESSERA_ISLANDS
    ("ascend=host:3,nvidia=cuda:1", island sizes in rank order), as `tessera run` and the daemon set them.
    Returns None when they are not set."""
    weights = weights if weights is not None else os.environ.get("TESSERA_ISLAND_WEIGHTS")
    layout = layout if layout is not None else os.environ.get("TESSERA_ISLANDS")
    if not weights or not layout:
        return None
    try:
        w = [float(x) for x in weights.split(",")]
    except ValueError:
        raise ValueError(f"TESSERA_ISLAND_WEIGHTS={weights!r} is not a list of numbers") from None
    counts = []
    for part in layout.split(","):
        try:
            counts.append(int(part.rsplit(":", 1)[1]))
        except (IndexError, ValueError):
            raise ValueError(f"TESSERA_ISLANDS={layout!r}: {part!r} is not VENDOR=DEVICE:COUNT") from None
    if len(w) != len(counts):
        raise ValueError(f"TESSERA_ISLAND_WEIGHTS={weights!r} has {len(w)} values for {len(counts)} islands "
                         f"(TESSERA_ISLANDS={layout!r})")
    per_rank = [wi for wi, c in zip(w, counts) for _ in range(c)]
    if world_size is not None and len(per_rank) != world_size:
        raise ValueError(f"TESSERA_ISLANDS={layout!r} has {len(per_rank)} ranks, the group has {world_size}")
    return per_rank


class HeteroDistributedSampler(Sampler):
    """DistributedSampler whose per-rank share of each global batch follows the ranks' speeds.

    dataset: a sized dataset. global_batch_size: samples per step over all ranks. weights: per-rank
    speeds (default: from TESSERA_ISLAND_WEIGHTS/TESSERA_ISLANDS, else equal). num_replicas, rank,
    shuffle, seed, drop_last: as DistributedSampler (without drop_last the last global batch is padded
    by wrapping around, as DistributedSampler pads).
    """

    def __init__(self, dataset, global_batch_size, num_replicas=None, rank=None, weights=None, shuffle=True,
                 seed=0, drop_last=False):
        if num_replicas is None:
            num_replicas = dist.get_world_size() if dist.is_initialized() else 1
        if rank is None:
            rank = dist.get_rank() if dist.is_initialized() else 0
        if not 0 <= rank < num_replicas:
            raise ValueError(f"rank {rank} is not in 0..{num_replicas - 1}")
        if weights is None:
            weights = island_weights_per_rank(num_replicas) or [1.0] * num_replicas
        weights = [float(w) for w in weights]
        if len(weights) != num_replicas:
            raise ValueError(f"{len(weights)} speeds for {num_replicas} ranks")
        self.dataset, self.num_replicas, self.rank = dataset, num_replicas, rank
        self.global_batch_size, self.shuffle, self.seed, self.drop_last = global_batch_size, shuffle, seed, drop_last
        self.weights = weights
        self.shares = apportion(global_batch_size, weights)
        self.offset = sum(self.shares[:rank])
        self.batch_size = self.shares[rank]
        n = len(dataset)
        self.steps = n // global_batch_size if drop_last else math.ceil(n / global_batch_size)
        if self.steps == 0:
            raise ValueError(f"dataset of {n} samples is smaller than one global batch of {global_batch_size}")
        self.epoch = 0

    @property
    def fraction(self):
        """This rank's share of the global batch, n_r / B (the weight hetero_allreduce_hook applies)."""
        return self.batch_size / self.global_batch_size

    def set_epoch(self, epoch):
        self.epoch = epoch

    def __len__(self):
        return self.steps * self.batch_size

    def __iter__(self):
        n = len(self.dataset)
        if self.shuffle:
            g = torch.Generator()
            g.manual_seed(self.seed + self.epoch)
            order = torch.randperm(n, generator=g).tolist()
        else:
            order = list(range(n))
        need = self.steps * self.global_batch_size
        while len(order) < need:
            order += order[: need - len(order)]
        for step in range(self.steps):
            base = step * self.global_batch_size + self.offset
            yield from order[base:base + self.batch_size]


def hetero_allreduce_hook(fraction, bucket):
    """DDP comm hook: the synchronised gradient is the mean gradient of the whole global batch.

    `fraction` is this rank's n_r / B (HeteroDistributedSampler.fraction). Register with
    `ddp_model.register_comm_hook(sampler.fraction, hetero_allreduce_hook)`.
    """
    t = bucket.buffer()
    t.mul_(fraction)
    group = dist.group.WORLD
    return dist.all_reduce(t, op=dist.ReduceOp.SUM, group=group, async_op=True).get_future().then(
        lambda fut: fut.value()[0])
