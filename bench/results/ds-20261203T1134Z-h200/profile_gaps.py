"""The GPU timeline of one profiled optimizer step (train_lm_deepspeed.py --profile): per rank, the time the
compute stream (7) ran kernels, the bridge's copy streams (15, 16) and DeepSpeed's reduce stream (25) were busy,
the pageable copies, and every gap of the compute stream over 2 ms with what ran during it.
    python3 profile_gaps.py prof-hybrid-1.0.json.gz prof-hybrid-1.1.json.gz"""
import gzip
import json
import sys


def union(evs):
    out = []
    for a, b in sorted((e["ts"], e["ts"] + e["dur"]) for e in evs):
        if out and a <= out[-1][1]:
            out[-1][1] = max(out[-1][1], b)
        else:
            out.append([a, b])
    return out


def overlap(iv, a, b):
    return sum(max(0, min(b, y) - max(a, x)) for x, y in iv)


for path in sys.argv[1:]:
    ev = json.load(gzip.open(path))["traceEvents"]
    gpu = sorted([e for e in ev if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")], key=lambda e: e["ts"])
    t0, t1 = gpu[0]["ts"], max(e["ts"] + e["dur"] for e in gpu)
    stream = lambda s: [e for e in gpu if e["args"].get("stream") in s]  # noqa: E731
    comp = union([e for e in stream((7,)) if e["cat"] == "kernel"])
    bridge, red = union(stream((15, 16))), union(stream((25,)))
    pag = union([e for e in gpu if "Pageable" in e["name"]])
    print(f"{path}: window {(t1 - t0) / 1e3:.1f} ms; compute kernels {sum(b - a for a, b in comp) / 1e3:.1f} ms; "
          f"bridge copies {sum(b - a for a, b in bridge) / 1e3:.1f}; reduce stream {sum(b - a for a, b in red) / 1e3:.1f}; "
          f"pageable copies {sum(b - a for a, b in pag) / 1e3:.1f}")
    gaps, prev = [], t0
    for a, b in comp:
        if a - prev > 2000:
            gaps.append((prev, a))
        prev = max(prev, b)
    if t1 - prev > 2000:
        gaps.append((prev, t1))
    for a, b in gaps:
        print(f"  gap at {(a - t0) / 1e3:6.1f} ms: {(b - a) / 1e3:5.1f} ms; bridge {overlap(bridge, a, b) / 1e3:4.1f}, "
              f"reduce stream {overlap(red, a, b) / 1e3:4.1f}, pageable {overlap(pag, a, b) / 1e3:4.1f}")
    print(f"  gaps over 2 ms: {sum(b - a for a, b in gaps) / 1e3:.1f} ms in all")
