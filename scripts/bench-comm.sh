#!/usr/bin/env bash
# scripts/bench-comm.sh — Tessera's CPU allreduce next to its peers, in one run (`make bench` calls it).
# Builds what is missing, then runs f32 sum allreduce at $SIZES on the same machine, interleaved for
# $ROUNDS rounds (the machine may be shared and noisy; the table reports medians over rounds):
#   Tessera: islands 1+1 and 2+2 (ascend + nvidia, host backend), a single host island of 2 and of 4
#   Gloo:    every allreduce algorithm on 2 and 4 ranks (the best per size counts), TCP transport
#   OpenMPI: MPI_Allreduce on 2 and 4 ranks (mpirun, ob1 PML + vader shared-memory BTL on one host)
#   memcpy:  1 and 2 threads, for context
#   bound:   bench/comm/allreduce_bound for the 1+1 and 2+2 layouts: this box's memcpy bandwidth on every
#            CPU x the memory traffic the layout's allreduce must make (the highest busbw without fewer passes)
# Writes RESULTS/cpu-allreduce-<date>.json (every run's rows and the medians) and a markdown table
# (.md beside it, also printed) with the ratios against the targets; RESULTS defaults to BUILD/bench-results
# (a run worth keeping: RESULTS=bench/results/<run> and a record in bench/results/log/, bench/results/README.md).
# Knobs (environment): BUILD=build SIZES=16M,64M,256M ROUNDS=3 ITERS=7 WARMUP=1 CHECK_ROUNDS=1
#   CONFIGS="t11 t22 th2 th4 g2 g4 m2 m4 memcpy bound" (a subset runs only those) GLOO_ALGOS=all GLOO_BUDGET=40
#   (seconds per Gloo algorithm and size; slower ones run fewer iterations or are skipped)
set -euo pipefail
cd "$(dirname "$0")/.."

BUILD=${BUILD:-build}
SIZES=${SIZES:-16M,64M,256M}
ROUNDS=${ROUNDS:-3}
ITERS=${ITERS:-7}
WARMUP=${WARMUP:-1}
CHECK_ROUNDS=${CHECK_ROUNDS:-1}
CONFIGS=${CONFIGS:-"t11 t22 th2 th4 g2 g4 m2 m4 memcpy bound"}
GLOO_ALGOS=${GLOO_ALGOS:-all}
GLOO_BUDGET=${GLOO_BUDGET:-40}
JOBS=${JOBS:-2}

die() { echo "bench-comm: $*" >&2; exit 1; }
[[ "$ROUNDS" =~ ^[1-9][0-9]*$ ]] || die "ROUNDS='$ROUNDS' is not a positive integer"
[[ "$ITERS" =~ ^[1-9][0-9]*$ ]] || die "ITERS='$ITERS' is not a positive integer"
[[ "$WARMUP" =~ ^[0-9]+$ ]] || die "WARMUP='$WARMUP' is not a non-negative integer"

# ---- build --------------------------------------------------------------------------------------------
[ -f "$BUILD/build.ninja" ] || cmake -S . -B "$BUILD" -G Ninja
cmake --build "$BUILD" -j "$JOBS" --target tessera_cli memcpy_bandwidth allreduce_bound \
  $(grep -q '^build bench/comm/gloo_allreduce:' "$BUILD/build.ninja" && echo gloo_allreduce) \
  $(grep -q '^build bench/comm/mpi_allreduce:' "$BUILD/build.ninja" && echo mpi_allreduce)
T=${TESSERA:-$BUILD/tessera}  # the launcher and bench binary (override only for testing)
GLOO="$BUILD/bench/comm/gloo_allreduce"
MPI="$BUILD/bench/comm/mpi_allreduce"
MEMCPY="$BUILD/bench/comm/memcpy_bandwidth"
BOUND="$BUILD/bench/comm/allreduce_bound"
"$T" run --help >/dev/null 2>&1 || die "'$T run' (the launcher) is not available in this build"

STAMP=$(date +%Y-%m-%d)
RESULTS=${RESULTS:-$BUILD/bench-results}
OUT=$RESULTS/cpu-allreduce-$STAMP.json
[ -e "$OUT" ] && OUT=$RESULTS/cpu-allreduce-$STAMP-$(date +%H%M).json
mkdir -p "$RESULTS"
RAW=$(mktemp -d /tmp/tessera-bench-comm.XXXXXX)
trap '[ -n "${KEEP_RAW:-}" ] && echo "bench-comm: raw results kept in $RAW" || rm -rf "$RAW"' EXIT

# ---- the configurations ---------------------------------------------------------------------------------
# run_config NAME JSON CHECK: runs one configuration (each bounded by `timeout`).
run_config() {
  local name=$1 json=$2 check=$3 to=(timeout 1800)
  local bench=(bench allreduce --sizes "$SIZES" --iters "$ITERS" --warmup "$WARMUP" --dtype f32 --op sum --json "$json")
  [ "$check" = 1 ] && bench+=(--check)
  local gloo=("$GLOO" --sizes "$SIZES" --iters "$ITERS" --warmup "$WARMUP" --algos "$GLOO_ALGOS" --budget "$GLOO_BUDGET" --json "$json")
  local mpi=(mpirun --allow-run-as-root --oversubscribe --bind-to none -np)
  local mpiargs=("$MPI" allreduce --sizes "$SIZES" --iters "$ITERS" --warmup "$WARMUP" --json "$json")
  case $name in
    t11) "${to[@]}" "$T" run --island ascend=host:1 --island nvidia=host:1 -- "$T" "${bench[@]}" ;;
    t22) "${to[@]}" "$T" run --island ascend=host:2 --island nvidia=host:2 -- "$T" "${bench[@]}" ;;
    th2) "${to[@]}" "$T" run --island cpu=host:2 -- "$T" "${bench[@]}" ;;
    th4) "${to[@]}" "$T" run --island cpu=host:4 -- "$T" "${bench[@]}" ;;
    g2) "${to[@]}" "$T" run --island cpu=host:2 -- "${gloo[@]}" ;;
    g4) "${to[@]}" "$T" run --island cpu=host:4 -- "${gloo[@]}" ;;
    m2) "${to[@]}" "${mpi[@]}" 2 "${mpiargs[@]}" ;;
    m4) "${to[@]}" "${mpi[@]}" 4 "${mpiargs[@]}" ;;
    memcpy) "${to[@]}" "$MEMCPY" --sizes "$SIZES" --threads 1,2 --iters "$ITERS" --warmup "$WARMUP" --json "$json" ;;
    bound) for l in 1,1 2,2; do "${to[@]}" "$BOUND" --islands "$l" --sizes "$SIZES" > "${json%.json}.$l.txt"; done ;;
    *) echo "unknown configuration '$name'" >&2; return 2 ;;
  esac
}

for c in $CONFIGS; do
  case $c in
    t11|t22|th2|th4|memcpy|bound|g2|g4|m2|m4) ;;
    *) die "unknown configuration '$c' in CONFIGS (use t11 t22 th2 th4 g2 g4 m2 m4 memcpy bound)" ;;
  esac
  case $c in
    g2|g4) [ -x "$GLOO" ] || die "Gloo peer not built (apt install libgloo-dev, then re-run cmake)" ;;
    m2|m4) [ -x "$MPI" ] || die "MPI peer not built (apt install libopenmpi-dev openmpi-bin, then re-run cmake)" ;;
  esac
done

echo "bench-comm: f32 allreduce, sizes $SIZES, $ROUNDS round(s) of: $CONFIGS (iters $ITERS, warmup $WARMUP)"
echo "bench-comm: machine $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), load $(cut -d' ' -f1-3 /proc/loadavg)"
for ((round = 1; round <= ROUNDS; round++)); do
  for c in $CONFIGS; do
    check=0
    ((round <= CHECK_ROUNDS)) && check=1
    start=$(date +%s)
    load_now=$(cut -d' ' -f1 /proc/loadavg)
    if ! run_config "$c" "$RAW/$c.$round.json" "$check" >"$RAW/$c.$round.log" 2>&1; then
      echo "bench-comm: round $round: $c FAILED; its output:" >&2
      tail -n 30 "$RAW/$c.$round.log" >&2
      exit 1
    fi
    load_before=$load_now
    load_now=$(cut -d' ' -f1 /proc/loadavg)
    printf 'bench-comm: round %d: %-6s %4ds  (1-min load average %s before, %s after)\n' "$round" "$c" \
      $(($(date +%s) - start)) "$load_before" "$load_now"
    echo "$round $c $(($(date +%s) - start)) $load_before $load_now" >>"$RAW/runs.txt"
  done
done

# ---- medians, the JSON and the table -------------------------------------------------------------------------
COMMIT=$(git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)
DIRTY=$(git status --porcelain --untracked-files=no 2>/dev/null | grep -q . && echo true || echo false)
CMDLINE="SIZES=$SIZES ROUNDS=$ROUNDS ITERS=$ITERS WARMUP=$WARMUP scripts/bench-comm.sh"
python3 - "$RAW" "$OUT" "$ROUNDS" "$COMMIT" "$DIRTY" "$CMDLINE" "$CONFIGS" <<'PY'
import json, os, statistics, sys, datetime
raw, out, rounds, commit, dirty, cmdline, configs = sys.argv[1:8]
rounds, configs = int(rounds), configs.split()
names = {"t11": "Tessera 1+1 islands", "t22": "Tessera 2+2 islands", "th2": "Tessera 1 island x2",
         "th4": "Tessera 1 island x4", "g2": "Gloo best, 2 ranks", "g4": "Gloo best, 4 ranks",
         "m2": "OpenMPI, 2 ranks", "m4": "OpenMPI, 4 ranks", "memcpy1": "memcpy 1 thread",
         "memcpy2": "memcpy 2 threads", "b11": "bound 1+1", "b22": "bound 2+2"}
factor = {"t11": 1.0, "t22": 1.5, "th2": 1.0, "th4": 1.5, "g2": 1.0, "g4": 1.5, "m2": 1.0, "m4": 1.5,
          "memcpy1": 1.0, "memcpy2": 1.0, "b11": 1.0, "b22": 1.5}  # busbw/algbw: 2(n-1)/n for allreduce
runs = {}  # series -> list (per round) of rows
meta = {}
machine = None
for c in configs:
    for r in range(1, rounds + 1):
        if c == "bound":  # allreduce_bound's table: size, traffic, ring, bound(us), bound-busbw, all-in-memory
            for layout, key in (("1,1", "b11"), ("2,2", "b22")):
                rows = []
                for line in open(os.path.join(raw, f"{c}.{r}.{layout}.txt")):
                    f = line.split()
                    if f and not line.startswith("#"):
                        rows.append({"bytes": int(f[0]), "count": int(f[0]) // 4, "time_us": float(f[3]),
                                     "busbw_GBps": float(f[4]), "all_in_memory_busbw_GBps": float(f[5])})
                runs.setdefault(key, []).append(rows)
            continue
        with open(os.path.join(raw, f"{c}.{r}.json")) as f:
            j = json.load(f)
        machine = machine or j["machine"]
        if c == "memcpy":
            for res in j["results"]:
                runs.setdefault(f"memcpy{res['threads']}", []).append(res["rows"])
            continue
        runs.setdefault(c, []).append(j["rows"])
        m = meta.setdefault(c, {})
        for k in ("world_size", "islands", "bridge", "transport", "library", "gloo_version", "commit"):
            if k in j:
                m[k] = j[k]
        if "algorithms" in j:  # Gloo: every algorithm's busbw per size, per round
            m.setdefault("algorithms_busbw_by_round", []).append(
                {a["name"]: [row.get("busbw_GBps") for row in a["rows"]] for a in j["algorithms"]})

series = {}
for s, per_round in runs.items():
    rows = []
    for i, row0 in enumerate(per_round[0]):
        samples = [rr[i] for rr in per_round]
        t = statistics.median(x["time_us"] for x in samples)
        algbw = row0["bytes"] / (t * 1e3) if t > 0 else 0.0
        wrong = [x.get("wrong") for x in samples if x.get("wrong") is not None]
        row = {"bytes": row0["bytes"], "count": row0["count"], "time_us": t, "algbw_GBps": algbw,
               "busbw_GBps": algbw * factor[s], "wrong": sum(wrong) if wrong else None,
               "busbw_by_round": [x["busbw_GBps"] for x in samples]}
        if "algorithm" in row0:
            row["algorithm_by_round"] = [x["algorithm"] for x in samples]
        if any("identical" in x for x in samples):
            row["identical"] = all(x.get("identical", True) for x in samples)
        rows.append(row)
    series[s] = {"name": names[s], "rows": rows, **meta.get(s, {})}

result = {"collective": "allreduce", "dtype": "float32", "op": "sum", "date": datetime.datetime.now().isoformat(
    timespec="seconds"), "machine": machine,
    "commit": commit, "dirty": dirty == "true", "command": cmdline, "rounds": rounds,
    "timing": "per row: median over rounds of (median over iterations of the max over ranks, each iteration "
              "bracketed by a barrier); busbw = algbw * 2(n-1)/n", "series": series}

def bw(s, i):
    return series[s]["rows"][i]["busbw_GBps"] if s in series and i < len(series[s]["rows"]) else None

def fmt(x):
    return "—" if x is None else f"{x:.2f}"

def size(b):
    for unit, d in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if b >= d and b % d == 0:
            return f"{b // d} {unit}iB"
    return f"{b} B"

order = [s for s in ("t11", "t22", "th2", "th4", "g2", "g4", "m2", "m4", "memcpy1", "memcpy2", "b11", "b22")
         if s in series]
first = series[order[0]]["rows"]
lines = ["busbw in GB/s (1e9 B/s), median of %d rounds; memcpy: copy bandwidth." % rounds, "",
         "| size | " + " | ".join(names[s] for s in order) + " |",
         "|---:|" + "---:|" * len(order)]
for i, row in enumerate(first):
    lines.append(f"| {size(row['bytes'])} | " + " | ".join(fmt(bw(s, i)) for s in order) + " |")
targets = [("t11", "g2", 1.5), ("t11", "m2", 1.0), ("t22", "g4", 1.5), ("t22", "m4", 1.0), ("th2", "m2", 1.0),
           ("th4", "m4", 1.0), ("t11", "b11", 0.7), ("t22", "b22", 0.7)]
targets = [t for t in targets if t[0] in series and t[1] in series]
ratios = []
if targets:
    short = {"t11": "1+1", "t22": "2+2", "th2": "1×2", "th4": "1×4", "g2": "Gloo-best(2)", "g4": "Gloo-best(4)",
             "m2": "MPI(2)", "m4": "MPI(4)", "b11": "bound(1+1)", "b22": "bound(2+2)"}
    lines += ["", "Ratios of busbw (target in brackets; ✓ met, ✗ missed):", "",
              "| size | " + " | ".join(f"{short[a]} / {short[b]} (≥{t:g})" for a, b, t in targets) + " |",
              "|---:|" + "---:|" * len(targets)]
    for i, row in enumerate(first):
        cells = []
        for a, b, t in targets:
            x, y = bw(a, i), bw(b, i)
            r = x / y if x is not None and y else None
            ratios.append({"bytes": row["bytes"], "tessera": a, "peer": b, "ratio": r, "target": t,
                           "met": r is not None and r >= t})
            cells.append("—" if r is None else f"{r:.2f} {'✓' if r >= t else '✗'}")
        lines.append(f"| {size(row['bytes'])} | " + " | ".join(cells) + " |")
bad = [s for s in series for r in series[s]["rows"] if r.get("wrong") or r.get("identical") is False]
if bad:
    lines += ["", "CHECK FAILURES in: " + ", ".join(sorted(set(bad)))]
result["ratios"] = ratios
result["runs"] = []
with open(os.path.join(raw, "runs.txt")) as f:
    for line in f:
        r, c, secs, l0, l1 = line.split()
        result["runs"].append({"round": int(r), "config": c, "seconds": int(secs), "load1_before": float(l0),
                               "load1_after": float(l1)})
loads = [x["load1_before"] for x in result["runs"]] + [x["load1_after"] for x in result["runs"]]
lines.insert(1, f"1-minute load average during the runs: {min(loads):.1f}–{max(loads):.1f} on {machine['cores']} cores"
                " (other work on the machine; see `runs` in the JSON).")
result["table_markdown"] = "\n".join(lines)
with open(out, "w") as f:
    json.dump(result, f, indent=2)
    f.write("\n")
with open(out[:-5] + ".md", "w") as f:
    f.write(f"Machine: {result['machine']['cpu']}, {result['machine']['cores']} cores, "
            f"{result['machine']['uname']}; commit {commit}{' (dirty)' if dirty == 'true' else ''}; "
            f"command: `{cmdline}`\n\n" + result["table_markdown"] + "\n")
print(result["table_markdown"])
print(f"\nbench-comm: wrote {out} and {out[:-5]}.md")
PY
