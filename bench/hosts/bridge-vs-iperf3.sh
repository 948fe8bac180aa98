#!/usr/bin/env bash
# bench/hosts/bridge-vs-iperf3.sh — Tessera's TCP bridge between two "hosts" against iperf3 over the same
# veth pair, in one run (needs root: the hosts are network namespaces made by scripts/netns-hosts.sh).
#
# Two namespaces joined by one veth pair (10.77.0.1 and 10.77.0.2). For each size (64M and 256M), for
# $ROUNDS rounds, interleaved so that a noisy (shared) machine hurts both sides alike:
#   iperf3 -P 1 and -P $TESSERA_TCP_STREAMS (4): one way, h0 -> h1, $ITERS x SIZE bytes (the bytes the
#     Tessera row moves in its timed iterations), with $IPERF_ARGS ("-w 4M": the 4 MiB SO_SNDBUF/SO_RCVBUF
#     that the bridge's TcpTune sets, so both sides run with the same socket buffers);
#   Tessera: `tessera bench broadcast` from rank 0 (island ascend on h0) to rank 1 (island nvidia on h1):
#     every byte crosses the bridge once, one way, as in iperf3 (checked: the veth counters show SIZE per
#     broadcast from h0 and nothing back but ACKs) — with the default 4 streams and with
#     TESSERA_TCP_STREAMS=1; and allreduce (every byte once each way) for context (with BEFORE: both builds).
# Prints a table of medians over rounds (GB/s = 1e9 bytes/s) with the spread (min-max over rounds), and
# the ratios Tessera / iperf3 as the median of the per-round ratios (each round's runs are back to back,
# so they share that moment's load: the paired ratio is steadier than a ratio of medians on a shared
# machine); writes every measurement to RESULTS/hosts-bridge-<date>.json (RESULTS: BUILD/bench-results).
# BEFORE=DIR: a second build (e.g. of the code before a change) whose broadcasts (4 streams and 1) run in
# the same rounds, the two builds in alternating order from round to round; a second table compares them,
# each against the same round's iperf3. Every round records the 1-minute load average.
# Knobs (environment): BUILD=build SIZES="64M 256M" ROUNDS=5 ITERS=10 WARMUP=2 IPERF_ARGS="-w 4M" BEFORE=
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD=${BUILD:-build}
SIZES=${SIZES:-"64M 256M"}
ROUNDS=${ROUNDS:-5}
ITERS=${ITERS:-10}
WARMUP=${WARMUP:-2}
IPERF_ARGS=${IPERF_ARGS:-"-w 4M"}
BEFORE=${BEFORE:-}
NS=scripts/netns-hosts.sh
TAG=bench$$
die() { echo "bridge-vs-iperf3: $*" >&2; exit 1; }
$NS check || die "cannot make network namespaces here"
command -v iperf3 >/dev/null || die "iperf3 is missing (scripts/install-deps.sh installs it)"
[ -x "$BUILD/tessera" ] || die "$BUILD/tessera is missing: build it first (cmake --build $BUILD --target tessera_cli)"
BIN=$(realpath "$BUILD/tessera")
if [ -n "$BEFORE" ]; then
  [ -x "$BEFORE/tessera" ] || die "$BEFORE/tessera is missing"
  BIN_BEFORE=$(realpath "$BEFORE/tessera")
fi
RESULTS=${RESULTS:-$BUILD/bench-results}; mkdir -p "$RESULTS"
OUT=$RESULTS/hosts-bridge-$(date -u +%Y-%m-%dT%H%M).json
TMP=$(mktemp -d)
trap '$NS down $TAG; rm -rf $TMP' EXIT
$NS up $TAG 2
export TESSERA_TOKEN=$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')
bytes() { numfmt --from=iec "$1"; }

iperf() {  # size streams -> GB/s received
  local total=$(( $(bytes "$1") * ITERS ))
  ip netns exec tsr-$TAG-h1 iperf3 -s -1 -p 5201 -J >"$TMP/iperf-server.json" &
  local srv=$!
  for _ in $(seq 50); do ip netns exec tsr-$TAG-h1 ss -ltn 2>/dev/null | grep -q ':5201 ' && break; sleep 0.05; done
  ip netns exec tsr-$TAG-h0 iperf3 -c 10.77.0.2 -p 5201 -n "$total" -P "$2" $IPERF_ARGS -J >"$TMP/iperf.json"
  wait $srv || true
  python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["end"]["sum_received"]["bits_per_second"]/8e9)' "$TMP/iperf.json"
}

tessera() {  # collective size [VAR=VALUE...] -> GB/s (algbw of the slowest rank, as tessera bench reports it)
  local coll=$1 size=$2 BIN=${TBIN:-$BIN}
  shift 2
  for i in 0 1; do
    env "$@" $NS exec $TAG $i "$BIN" run --nnodes 2 --node-rank $i --store 10.77.0.1:29400 --timeout 120s \
      --island ascend=host:1 --island nvidia=host:1 -- \
      "$BIN" bench "$coll" --sizes "$size" --dtype f32 --iters "$ITERS" --warmup "$WARMUP" --json "$TMP/t$i.json" \
      >"$TMP/t$i.log" 2>&1 &
  done
  wait
  python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); r=d["rows"] if "rows" in d else d["results"]; print(r[0]["algbw_GBps"])' "$TMP/t0.json"
}

echo "# $(uname -srm), $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg); $ROUNDS rounds, $ITERS iterations; iperf3 $IPERF_ARGS"
records=()
for round in $(seq "$ROUNDS"); do
  for size in $SIZES; do
    load=$(cut -d' ' -f1 /proc/loadavg)
    a=$(iperf "$size" 1); b=$(iperf "$size" 4)
    if [ -n "$BEFORE" ] && [ $((round % 2)) = 0 ]; then  # even rounds: the other build first
      bc=$(TBIN=$BIN_BEFORE tessera broadcast "$size"); be=$(TBIN=$BIN_BEFORE tessera broadcast "$size" TESSERA_TCP_STREAMS=1)
    fi
    c=$(tessera broadcast "$size"); e=$(tessera broadcast "$size" TESSERA_TCP_STREAMS=1)
    if [ -n "$BEFORE" ] && [ $((round % 2)) = 1 ]; then
      bc=$(TBIN=$BIN_BEFORE tessera broadcast "$size"); be=$(TBIN=$BIN_BEFORE tessera broadcast "$size" TESSERA_TCP_STREAMS=1)
    fi
    d=$(tessera allreduce "$size")
    [ -n "$BEFORE" ] && bd=$(TBIN=$BIN_BEFORE tessera allreduce "$size")
    printf 'round %s %s (load %s): iperf3 -P1 %.2f  -P4 %.2f  tessera broadcast %.2f (1 stream %.2f)  allreduce %.2f GB/s\n' \
      "$round" "$size" "$load" "$a" "$b" "$c" "$e" "$d"
    extra=""
    if [ -n "$BEFORE" ]; then
      printf '  %s: broadcast %.2f (1 stream %.2f)  allreduce %.2f GB/s\n' "$BEFORE" "$bc" "$be" "$bd"
      extra=",\"before_broadcast\":$bc,\"before_broadcast_1stream\":$be,\"before_allreduce\":$bd"
    fi
    records+=("{\"round\":$round,\"size\":\"$size\",\"load1\":$load,\"iperf3_p1\":$a,\"iperf3_p4\":$b,\"tessera_broadcast\":$c,\"tessera_broadcast_1stream\":$e,\"tessera_allreduce\":$d$extra}")
  done
done
cat >"$TMP/report.py" <<'PY'
import json, os, platform, statistics, sys
rows = [json.loads(l) for l in sys.stdin]
out = {"machine": {"uname": " ".join(platform.uname()), "cpus": os.cpu_count()}, "iperf3_args": sys.argv[2],
       "rows": rows, "medians": {}}
for r in rows:
    r["ratio_p4"] = r["tessera_broadcast"] / r["iperf3_p4"]
    r["ratio_p1"] = r["tessera_broadcast_1stream"] / r["iperf3_p1"]
    r["ratio_best"] = max(r["tessera_broadcast"], r["tessera_broadcast_1stream"]) / max(r["iperf3_p1"], r["iperf3_p4"])
print("GB/s: median (min-max) over rounds; ratios: median (min-max) of the per-round ratios")
print("| size | iperf3 -P1 | iperf3 -P4 | Tessera broadcast, 4 streams (default) | 4 streams / iperf3 -P4 | Tessera broadcast, 1 stream | 1 stream / iperf3 -P1 | best Tessera / best iperf3 | Tessera allreduce |")
print("|---|---|---|---|---|---|---|---|---|")
keys = ("iperf3_p1", "iperf3_p4", "tessera_broadcast", "ratio_p4", "tessera_broadcast_1stream", "ratio_p1", "ratio_best", "tessera_allreduce")
for size in dict.fromkeys(r["size"] for r in rows):
    sel = [r for r in rows if r["size"] == size]
    m = {k: {"median": statistics.median(r[k] for r in sel), "min": min(r[k] for r in sel), "max": max(r[k] for r in sel)} for k in keys}
    out["medians"][size] = m
    cells = []
    for k in keys:
        if k.startswith("ratio"):
            cells.append("%.0f%% (%.0f-%.0f)" % (100 * m[k]["median"], 100 * m[k]["min"], 100 * m[k]["max"]))
        else:
            cells.append("%.2f (%.2f-%.2f)" % (m[k]["median"], m[k]["min"], m[k]["max"]))
    print("| %s | %s |" % (size, " | ".join(cells)))
if all("before_broadcast" in r for r in rows):
    out["before"] = sys.argv[3]
    for r in rows:
        r["before_ratio_p4"] = r["before_broadcast"] / r["iperf3_p4"]
        r["before_ratio_p1"] = r["before_broadcast_1stream"] / r["iperf3_p1"]
        r["after_over_before"] = r["tessera_broadcast"] / r["before_broadcast"]
        r["after_over_before_1stream"] = r["tessera_broadcast_1stream"] / r["before_broadcast_1stream"]
        r["allreduce_after_over_before"] = r["tessera_allreduce"] / r["before_allreduce"]
    print()
    print("This build against %s, in the same rounds (broadcast GB/s; ratios per round as above):" % sys.argv[3])
    print("| size | load | iperf3 -P4 | before, 4 streams | after, 4 streams | before / -P4 | after / -P4 | after / before | iperf3 -P1 | before, 1 stream | after, 1 stream | before / -P1 | after / -P1 | allreduce before | allreduce after | after / before |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    keys = ("load1", "iperf3_p4", "before_broadcast", "tessera_broadcast", "before_ratio_p4", "ratio_p4", "after_over_before",
            "iperf3_p1", "before_broadcast_1stream", "tessera_broadcast_1stream", "before_ratio_p1", "ratio_p1",
            "before_allreduce", "tessera_allreduce", "allreduce_after_over_before")
    for size in dict.fromkeys(r["size"] for r in rows):
        sel = [r for r in rows if r["size"] == size]
        cells = []
        for k in keys:
            v = [r[k] for r in sel]
            med, lo, hi = statistics.median(v), min(v), max(v)
            if k == "load1":
                cells.append("%.1f-%.1f" % (lo, hi))
            elif "ratio" in k or "over" in k:
                cells.append("%.0f%% (%.0f-%.0f)" % (100 * med, 100 * lo, 100 * hi))
            else:
                cells.append("%.2f (%.2f-%.2f)" % (med, lo, hi))
        print("| %s | %s |" % (size, " | ".join(cells)))
json.dump(out, open(sys.argv[1], "w"), indent=1)
PY
printf '%s\n' "${records[@]}" | python3 "$TMP/report.py" "$OUT" "$IPERF_ARGS" "$BEFORE"
echo "wrote $OUT"
