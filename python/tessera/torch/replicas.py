"""check_replicas: are the parameters bit-identical on every rank?

Each rank reduces every tensor to two 64-bit digests of its bits (sums of the 8-byte words times two
position weights, modulo 2^64: integer arithmetic, so CPU and GPU ranks compute the same digest for the
same bits, whatever the order of the sum), gathers everyone's digests (16 bytes per tensor per rank) and
compares. It never moves whole tensors.
"""
import torch
import torch.distributed as dist

_MUL = 0x9E3779B97F4A7C15 - (1 << 64)  # odd 64-bit constant, as a signed int64


def digest(t):
    """Two int64 digests of the bits of tensor t (shape and dtype included)."""
    t = t.detach()
    if not t.is_contiguous():
        t = t.contiguous()
    raw = t.reshape(-1).view(torch.uint8)
    pad = (-raw.numel()) % 8
    if pad:
        raw = torch.cat([raw, torch.zeros(pad, dtype=torch.uint8, device=raw.device)])
    words = raw.view(torch.int64)
    pos = torch.arange(words.numel(), dtype=torch.int64, device=words.device)
    w1 = pos * 2 + 1
    w2 = pos * _MUL + 0x632BE59BD9B4E019
    d1 = (words * w1).sum()
    d2 = ((words ^ w2) * w1).sum() + t.numel() * 1000003 + sum(map(ord, str(t.dtype)))
    return torch.stack([d1, d2])


def check_replicas(module_or_tensors, group=None):
    """Compares parameters (a Module's named_parameters and buffers, a dict, or a list of tensors)
    across the ranks of `group`. Returns {name: [ranks whose bits differ from group rank 0]} for the
    tensors that differ: {} when every rank holds the same bits. Collective: every rank must call it."""
    if isinstance(module_or_tensors, torch.nn.Module):
        items = list(module_or_tensors.named_parameters()) + list(module_or_tensors.named_buffers())
    elif isinstance(module_or_tensors, dict):
        items = list(module_or_tensors.items())
    else:
        items = [(str(i), t) for i, t in enumerate(module_or_tensors)]
    if not items:
        return {}
    dev = items[0][1].device
    mine = torch.stack([digest(t).to(dev) for _, t in items])  # [n, 2]
    world = dist.get_world_size(group)
    # the output as the concatenation along dim 0 ([world * n, 2]), the form every backend takes (gloo
    # refuses the stacked [world, n, 2] that NCCL and tessera also accept)
    out = torch.empty((world * mine.shape[0],) + tuple(mine.shape[1:]), dtype=mine.dtype, device=dev)
    dist.all_gather_into_tensor(out, mine.contiguous(), group=group)
    out = out.view((world,) + tuple(mine.shape)).cpu()
    report = {}
    for i, (name, _) in enumerate(items):
        bad = [r for r in range(1, world) if not torch.equal(out[r, i], out[0, i])]
        if bad:
            report[name] = bad
    return report
