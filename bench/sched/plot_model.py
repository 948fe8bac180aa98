#!/usr/bin/env python3
"""bench/sched/plot_model: docs/model-extrapolation.png from `tessera predict --json` — hybrid / sum of the parts and
CNY per million tokens against cards (128 -> 1,024) and domestic share (25, 50, 75% Ascend 910B), for the seed's
configuration of docs/model.md (130B, ZeRO-3 + offload, 200 Gb/s RoCE ports), in four variants: as built (every
island's bf16 reductions on its library, widened to f32 on the device) and --island-reduce native (reduced by the
library in bf16), each with one and with eight ports a node (--nics-per-node 8); beside all H800 (--versus) with one
and eight ports. Every point is a model output.

  python3 bench/sched/plot_model.py [--tessera build/tessera] [--out docs/model-extrapolation.png] [--json FILE]

--json FILE writes the predictions (one `tessera predict --json` object a line, with the point's cards, share
and variant); --from FILE plots such a file instead of running tessera. Needs matplotlib.
"""
import argparse
import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CARDS = [128, 256, 512, 1024]
SHARES = [0.25, 0.5, 0.75]
# docs/model.md, "Extrapolation": public specs and the assumed setup.
SEED = ("--tflops ascend-910b=320 --tflops nvidia-h800=989 --mfu ascend-910b=0.4 --mfu nvidia-h800=0.4 "
        "--fabric-gbs ascend-910b=196 --fabric-gbs nvidia-h800=200 --params 130B --zero 3 --offload "
        "--host-adam-gbs 200 --seq 2048 --accum 8 --overlap 1 --net-gbps 200 --shm-gbs 2 --pcie-gbs 25 "
        "--latency-us 20 --versus nvidia-h800").split()


VARIANTS = {
    "as built": [],
    "native": ["--island-reduce", "native"],
    "as built, 8 NICs": ["--nics-per-node", "8"],
    "native, 8 NICs": ["--island-reduce", "native", "--nics-per-node", "8"],
}
STYLES = {"as built": "-", "native": "--", "as built, 8 NICs": "-.", "native, 8 NICs": ":"}


def predict(tessera, cards, share, variant):
    dom = int(round(cards * share))
    args = [tessera, "predict", "--island", f"ascend-910b={dom}@8", "--island", f"nvidia-h800={cards - dom}@8",
            "--batch", str(4 * cards), "--catalog",
            os.path.join(ROOT, "examples/fleet/reference/catalog-equal.yaml"), "--json"] + SEED
    args += VARIANTS[variant]
    out = subprocess.run(args, check=True, capture_output=True, text=True).stdout
    j = json.loads(out)
    j["point"] = {"cards": cards, "share": share, "variant": variant}
    return j


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tessera", default=os.path.join(ROOT, "build/tessera"))
    ap.add_argument("--out", default=os.path.join(ROOT, "docs/model-extrapolation.png"))
    ap.add_argument("--json", help="write the predictions here (JSON lines)")
    ap.add_argument("--from", dest="source", help="plot these predictions (JSON lines) instead of running tessera")
    a = ap.parse_args()
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        import matplotlib.ticker
    except ImportError:
        sys.exit("plot_model.py: needs matplotlib (pip install matplotlib, e.g. into a virtual environment)")
    if a.source:
        with open(a.source) as f:
            rows = [json.loads(line) for line in f if line.strip()]
    else:
        if not os.access(a.tessera, os.X_OK):
            sys.exit(f"plot_model.py: {a.tessera} is not an executable tessera (build it, or give --tessera)")
        rows = [predict(a.tessera, c, s, v) for v in VARIANTS for s in SHARES for c in CARDS]
    if a.json:
        with open(a.json, "w") as f:
            for r in rows:
                f.write(json.dumps(r) + "\n")

    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.8))
    colors = {0.25: "tab:blue", 0.5: "tab:orange", 0.75: "tab:green"}
    for variant, style in STYLES.items():
        for share in SHARES:
            pts = sorted((r for r in rows if r["point"]["variant"] == variant and r["point"]["share"] == share),
                         key=lambda r: r["point"]["cards"])
            if not pts:
                continue
            cards = [r["point"]["cards"] for r in pts]
            label = f"{share:.0%} 910B, {variant}"
            left.plot(cards, [100 * r["hybrid_over_parts"] for r in pts], style, marker="o", color=colors[share],
                      label=label)
            right.plot(cards, [r["cost_per_million_tokens"] for r in pts], style, marker="o", color=colors[share],
                       label=label)
    for variant, style, label in (("as built", "-", "all H800 (NCCL)"), ("as built, 8 NICs", "-.",
                                                                        "all H800 (NCCL), 8 NICs")):
        ref = sorted((r for r in rows if r["point"]["variant"] == variant and r["point"]["share"] == SHARES[0]),
                     key=lambda r: r["point"]["cards"])
        if ref and "versus" in ref[0]:
            right.plot([r["point"]["cards"] for r in ref], [r["versus"]["cost_per_million_tokens"] for r in ref],
                       style, marker="s", color="black", label=label)
    for ax in (left, right):
        ax.set_xscale("log", base=2)
        ax.set_xticks(CARDS, [str(c) for c in CARDS])
        ax.set_xlabel("cards (8 a node)")
        ax.grid(True, alpha=0.3)
    left.set_ylabel("hybrid / sum of the parts (%)")
    left.set_title("Hybrid against its parts (model output)")
    right.set_ylabel("CNY per million tokens")
    right.set_yscale("log")
    plain = matplotlib.ticker.FuncFormatter(lambda v, _: f"{v:g}")
    right.yaxis.set_major_formatter(plain)
    right.yaxis.set_minor_formatter(plain)
    right.set_title("Cost per million tokens (model output)")
    right.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.02, 1))
    fig.suptitle("130B, ZeRO-3 + offload, 200 Gb/s RoCE ports: as built (solid), --island-reduce native (dashed); "
                 "8 ports a node: as built (dash-dot), native (dotted)", fontsize=10)
    fig.tight_layout()
    fig.savefig(a.out, dpi=110)
    print(f"wrote {a.out} ({len(rows)} predictions)")


if __name__ == "__main__":
    main()
