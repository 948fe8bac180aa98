"""The speed split of a global batch: how many of B samples each of W ranks of different speeds takes.

Pure Python (no torch), so the arithmetic is tested where PyTorch is absent (tests/torch/split_test.py).
tessera.torch.data.HeteroDistributedSampler cuts every global batch by it; docs/torch.md explains it.
"""
import heapq
import math


def apportion(total, weights):
    """Split `total` samples into len(weights) integer parts, each >= 1, so that the step time
    max_r n_r / w_r (rank r processes n_r samples at speed w_r) is as small as any integer split allows.

    Each rank first gets one sample; every further sample goes to the rank that would finish its share
    soonest with it, the smallest (n_r + 1) / w_r; on a tie, to the rank with less work so far (n_r / w_r),
    then to the lower rank. Giving unit tasks one at a time to the machine that completes them earliest is
    optimal for the makespan on machines of different speeds, and the parts are within one sample of
    total * w_r / sum(w)."""
    if isinstance(total, bool) or not isinstance(total, int):
        raise ValueError(f"the global batch must be an integer number of samples, got {total!r}")
    if not weights:
        raise ValueError("no ranks to split the global batch over (empty speed list)")
    if any(isinstance(w, bool) or not isinstance(w, (int, float)) or not math.isfinite(w) or w <= 0
           for w in weights):
        raise ValueError(f"speeds must be positive numbers, got {list(weights)}")
    if total < len(weights):
        raise ValueError(f"a global batch of {total} cannot give each of {len(weights)} ranks a sample")
    parts = [1] * len(weights)
    heap = [(2 / w, 1 / w, r) for r, w in enumerate(weights)]
    heapq.heapify(heap)
    for _ in range(total - len(weights)):
        _, _, r = heapq.heappop(heap)
        parts[r] += 1
        heapq.heappush(heap, ((parts[r] + 1) / weights[r], parts[r] / weights[r], r))
    return parts
