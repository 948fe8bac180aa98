"""scripts/lm_report.py OUTDIR TESSERA ROOT — the summary of scripts/lm-experiment.sh: throughput against
the sum of the parts, loss parity against one island (with the A/A spread), gradient error, the cost of the
mix from `tessera plan` with the measured throughputs, and two plots (lm-loss.png, lm-throughput.png).
Prints a table and writes lm-summary.json.

scripts/lm_report.py --weights-from INDEP.jsonl CALIBRATION.json — prints a weights file like the
calibration's (train_lm --weights-file) whose per-rank speeds are the islands' tokens/s in an independent
run (both islands at once), for the hybrid runs' speed split."""
import glob
import json
import os
import statistics
import subprocess
import sys
import tempfile

if len(sys.argv) == 4 and sys.argv[1] == "--weights-from":
    with open(sys.argv[2]) as f:
        last = [json.loads(l) for l in f if l.strip()][-1]
    with open(sys.argv[3]) as f:
        cal = json.load(f)
    if "islands" not in last:
        sys.exit(f"lm_report: {sys.argv[2]}: its last line has no per-island rates (not a finished independent run?)")
    per_rank = {v: d["tokens_per_s"] / d["ranks"] for v, d in last["islands"].items()}
    order = list(cal["islands"].keys())  # island order, as in the calibration's weights
    missing = [v for v in order if v not in per_rank]
    if missing:
        sys.exit(f"lm_report: {sys.argv[2]} has no rate for island(s) {', '.join(missing)} of {sys.argv[3]}")
    top = max(per_rank.values())
    print(json.dumps({**cal, "islands": {v: round(per_rank[v], 1) for v in order},
                      "weights": ",".join(f"{per_rank[v] / top:.4f}" for v in order),
                      "source": f"independent run {os.path.basename(sys.argv[2])} (both islands at once)"}, indent=1))
    sys.exit(0)

out, tessera, root = sys.argv[1], sys.argv[2], sys.argv[3]


def summary(path):
    with open(path) as f:
        lines = [json.loads(l) for l in f if l.strip()]
    return lines[-1], [l["loss"] for l in lines[:-1]]


def med(xs):
    return (statistics.median(xs), min(xs), max(xs)) if xs else (float("nan"),) * 3


res = {}
w = json.load(open(os.path.join(out, "lm-weights.json")))
res["calibration"] = w
for kind in ("indep", "hybrid", "even"):
    tps = [summary(p)[0]["tokens_per_s"] for p in sorted(glob.glob(os.path.join(out, f"lm-{kind}-*.jsonl")))]
    res[kind] = {"tokens_per_s": tps, "median": med(tps)[0], "min": med(tps)[1], "max": med(tps)[2]}
ratio = res["hybrid"]["median"] / res["indep"]["median"]
even_ratio = res["even"]["median"] / res["indep"]["median"]
# pairwise per repetition (each rep ran indep, hybrid, even back to back): the spread of the ratio
pair = [h / i for h, i in zip(res["hybrid"]["tokens_per_s"], res["indep"]["tokens_per_s"])]
res["hybrid_over_parts"] = {"median_ratio": ratio, "per_rep": pair}
res["even_over_parts"] = even_ratio

_, lh = summary(os.path.join(out, "lm-parity-hybrid.jsonl"))
_, la = summary(os.path.join(out, "lm-parity-single-a.jsonl"))
_, lb = summary(os.path.join(out, "lm-parity-single-b.jsonl"))
n = min(len(lh), len(la), len(lb))


def mrd(x, y):
    xs, ys = x[n - 50:n], y[n - 50:n]
    return sum(abs(a - b) / abs(b) for a, b in zip(xs, ys)) / len(xs)


res["loss"] = {"steps": n, "hybrid_final50": sum(lh[n - 50:n]) / 50, "single_final50": sum(la[n - 50:n]) / 50,
               "mean_rel_diff_hybrid_vs_single": mrd(lh, la), "mean_rel_diff_AA": mrd(lb, la)}
res["grad_error"] = json.load(open(os.path.join(out, "lm-grad-error.json")))

# cost: the reference scenario's prices, the measured per-rank throughputs (tokens/s) as the catalog's llm-train figures
slow_v, fast_v = list(w["islands"].keys())[0], list(w["islands"].keys())[1]
slow, fast = w["islands"][slow_v], w["islands"][fast_v]
ref = os.path.join(root, "examples", "fleet", "reference")
with tempfile.TemporaryDirectory() as tmp:
    cat = os.path.join(tmp, "catalog.yaml")
    with open(cat, "w") as f:
        f.write("# measured: tokens/s of one emulated card (an SM share of one GPU) alone, scripts/lm-experiment.sh\n"
                "currency: CNY\nprice_version: reference-2026-03\ntypes:\n"
                f"  - {{name: ascend-910b, vendor: ascend, domestic: true, price_per_card_hour: 2.4, throughput: {{llm-train: {slow:.1f}}}}}\n"
                f"  - {{name: nvidia-h800, vendor: nvidia, domestic: false, price_per_card_hour: 6.8, throughput: {{llm-train: {fast:.1f}}}}}\n")
    plan = subprocess.run([tessera, "plan", "--catalog", cat, "--fleet", os.path.join(ref, "pool-480-960.yaml"),
                           "--policy", os.path.join(ref, "policy-50.yaml"), "--job", os.path.join(ref, "job-960.yaml"),
                           "--at", "2026-03-01", "--json"], capture_output=True, text=True)
p = json.loads(plan.stdout) if plan.returncode == 0 else {"error": plan.stderr}
if plan.returncode == 0:
    cph = p["cost_per_hour_micro"] / 1e6
    tput = float(p["total_throughput"]) * ratio  # the mix loses (1 - ratio) to synchronisation, as measured
    mix_cost = cph / (tput * 3600) * 1e6
    fast_cost = 6.8 / (fast * 3600) * 1e6  # all H800: per card, no synchronisation loss assumed
    res["cost"] = {"plan": {k: p[k] for k in ("by_type", "cost_per_hour", "share_after", "floor")},
                   "mix_cny_per_million_tokens": mix_cost, "all_fast_cny_per_million_tokens": fast_cost,
                   "saving": 1 - mix_cost / fast_cost}
else:
    res["cost"] = p
json.dump(res, open(os.path.join(out, "lm-summary.json"), "w"), indent=1)

print(f"calibration (tokens/s per emulated card alone): {w['islands']} -> weights {w['weights']}")
print(f"throughput, tokens/s (median of {len(res['indep']['tokens_per_s'])}, [min, max]):")
for k, label in (("indep", "sum of the parts (two independent jobs)"), ("hybrid", "hybrid, speed split"),
                 ("even", "hybrid, even split")):
    print(f"  {label:42s} {res[k]['median']:9.0f}  [{res[k]['min']:.0f}, {res[k]['max']:.0f}]")
print(f"  hybrid / parts = {ratio:.4f} (per rep {', '.join(f'{x:.4f}' for x in pair)}); even / parts = {even_ratio:.4f}")
L = res["loss"]
print(f"loss over the last 50 of {n} steps: hybrid {L['hybrid_final50']:.4f}, one island {L['single_final50']:.4f}; "
      f"mean relative difference {L['mean_rel_diff_hybrid_vs_single']:.2e} (A/A {L['mean_rel_diff_AA']:.2e})")
for r in res["grad_error"]:
    print(f"grad sync error {r['dtype']:9s} max rel {r['max_rel']:.2e}  L2 rel {r['l2_rel']:.2e}  "
          f"(one rounding of the exact sum: max {r['floor_max_rel']:.2e}, L2 {r['floor_l2_rel']:.2e}; "
          f"equal to it: {r['equals_exact_sum_rounded_once']})")
if "mix_cny_per_million_tokens" in res["cost"]:
    c = res["cost"]
    print(f"cost: plan {c['plan']['by_type'][0]['cards']}+{c['plan']['by_type'][1]['cards']} cards, "
          f"{c['plan']['cost_per_hour']} CNY/h, domestic share {c['plan']['share_after']} (floor {c['plan']['floor']}); "
          f"{c['mix_cny_per_million_tokens']:.3f} CNY per million tokens against {c['all_fast_cny_per_million_tokens']:.3f} "
          f"all-fast: {100 * c['saving']:.1f}% less")
else:
    print(f"cost: plan failed: {res['cost']}")

try:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(7, 4))
    ax.plot(lh[:n], label="hybrid: two emulated islands, DDP through tessera", lw=1)
    ax.plot(la[:n], label="one island, same global batch and seed (run A)", lw=1)
    ax.plot(lb[:n], label="one island (run B, A/A)", lw=1, ls=":")
    ax.set_xlabel("step")
    ax.set_ylabel("training loss (bytes, nats)")
    ax.set_title("Loss: hybrid against one island")
    ax.legend()
    fig.tight_layout()
    fig.savefig(os.path.join(out, "lm-loss.png"), dpi=110)
    fig, ax = plt.subplots(figsize=(7, 3.6))
    names = ["sum of the parts", "hybrid (speed split)", "hybrid (even split)"]
    vals = [res["indep"]["median"], res["hybrid"]["median"], res["even"]["median"]]
    errs = [[v - res[k]["min"] for v, k in zip(vals, ("indep", "hybrid", "even"))],
            [res[k]["max"] - v for v, k in zip(vals, ("indep", "hybrid", "even"))]]
    ax.bar(names, vals, yerr=errs, capsize=4, color=["#999", "#2a7", "#c84"])
    ax.set_ylabel("tokens/s (median, min-max)")
    ax.set_title("Throughput: two islands emulated on SM shares of one GPU")
    fig.tight_layout()
    fig.savefig(os.path.join(out, "lm-throughput.png"), dpi=110)
    print("plots: lm-loss.png, lm-throughput.png")
except Exception as e:  # noqa: BLE001
    print(f"plots skipped: {e}")
