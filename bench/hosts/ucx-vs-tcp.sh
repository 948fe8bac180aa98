#!/usr/bin/env bash
# bench/hosts/ucx-vs-tcp.sh — the ucx transport row against the tcp row, ucx_perftest and iperf3, between two
# "hosts" (network namespaces joined by one veth pair, scripts/netns-hosts.sh; needs root), in one run.
#
# For each size, for $ROUNDS rounds, back to back so that a noisy (shared) machine hurts all alike:
#   iperf3 -P 1, h0 -> h1, ITERS x SIZE bytes, -w 4M (the tcp row's socket buffers);
#   ucx_perftest -t stream_bw (UCP stream bandwidth, the API the ucx row uses), UCX_TLS=$UCX_TLS, messages of SIZE,
#     ITERS iterations: what UCX itself moves on this link and transport. Busy-polling: with UCX 1.13 its `-E sleep`
#     mode hangs at these sizes (stream_bw and tag_bw, 64 MiB, between these hosts). It runs as the ranks do
#     (netns-hosts.sh exec: private IPC namespace and /dev/shm), so that UCX finds the same transports for both: with
#     the IPC namespace shared, UCX left to choose takes SysV shared memory between the "hosts", which the ranks
#     cannot;
#   Tessera broadcast from rank 0 (h0) to rank 1 (h1) over the ucx row (TESSERA_TRANSPORTS=ucx, UCX_TLS=$UCX_TLS)
#     and over the tcp row (the default between hosts): `tessera bench broadcast --in-place` algbw, every byte
#     crossing once. In place, as ucx_perftest and iperf3 move bytes: out of place the root also copies its whole
#     buffer into its output in the same call, CPU time the kernel's TCP needs on a small box.
#   with BASELINE=path/to/another/tessera: the ucx row of that build too, in the same rounds (an A/B of a change).
# Prints medians over rounds (GB/s = 1e9 B/s) and the per-round ratios' medians: ucx row / ucx_perftest,
# ucx row / iperf3, tcp row / iperf3 (and the baseline's ucx row / ucx_perftest); the 1-minute load average is
# recorded per round; writes every measurement to RESULTS/hosts-ucx-<date>.json
# (RESULTS: BUILD/bench-results).
# LINK=loopback: no namespaces (no root needed): both ends on this host's loopback interface, the ranks made to take
#   the ucx and tcp rows with TESSERA_TRANSPORTS (ucx / tcp) instead of shared memory, ucx_perftest and iperf3 on
#   127.0.0.1. The loopback link has a 64 KiB MTU and no veth hop, so it costs far less CPU per byte than the veth
#   pair: its figures are not the namespace hosts' and are reported under their own link name.
# Knobs (environment): BUILD=build SIZES="64M" ROUNDS=5 ITERS=10 WARMUP=2 UCX_TLS= (unset: UCX's own choice) BASELINE=
#   LINK=veth|loopback (default veth)
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD=${BUILD:-build}
SIZES=${SIZES:-"64M"}
ROUNDS=${ROUNDS:-5}
ITERS=${ITERS:-10}
WARMUP=${WARMUP:-2}
TLS=${UCX_TLS:-}  # empty: UCX chooses (tcp between these hosts)
NS=scripts/netns-hosts.sh
TAG=ucxb$$
LINK=${LINK:-veth}
die() { echo "ucx-vs-tcp: $*" >&2; exit 1; }
case "$LINK" in
  veth) $NS check || die "cannot make network namespaces here (LINK=loopback measures on this host's loopback instead)" ;;
  loopback) ;;
  *) die "LINK=$LINK must be veth or loopback" ;;
esac
command -v iperf3 >/dev/null || die "iperf3 is missing (scripts/install-deps.sh installs it)"
command -v ucx_perftest >/dev/null || die "ucx_perftest is missing (scripts/install-deps.sh installs ucx-utils)"
[ -x "$BUILD/tessera" ] || die "$BUILD/tessera is missing: build it first (cmake --build $BUILD --target tessera_cli)"
BIN=$(realpath "$BUILD/tessera")
RESULTS=${RESULTS:-$BUILD/bench-results}; mkdir -p "$RESULTS"
OUT=$RESULTS/hosts-ucx-$LINK-$(date -u +%Y-%m-%dT%H%M).json
BASE=${BASELINE:+$(realpath "$BASELINE")}
[ -z "$BASE" ] || [ -x "$BASE" ] || die "BASELINE=$BASELINE is not an executable"
TMP=$(mktemp -d)
if [ "$LINK" = veth ]; then
  trap '$NS down $TAG; rm -rf $TMP' EXIT
  $NS up $TAG 2
  h() { ip netns exec "tsr-$TAG-h$1" "${@:2}"; }
  x() { $NS exec $TAG "$@"; }  # as the ranks run
  PEER=10.77.0.2
else
  trap 'rm -rf $TMP' EXIT
  h() { "${@:2}"; }
  x() { "${@:2}"; }
  PEER=127.0.0.1
fi
export TESSERA_TOKEN=$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')
bytes() { numfmt --from=iec "$1"; }
ucxenv() { if [ -n "$TLS" ]; then UCX_TLS=$TLS "$@"; else "$@"; fi; }

iperf() {  # size -> GB/s received
  local total=$(($(bytes "$1") * ITERS))
  h 1 iperf3 -s -1 -p 5201 -J >"$TMP/iperf-server.json" &
  local srv=$!
  for _ in $(seq 50); do h 1 ss -ltn 2>/dev/null | grep -q ':5201 ' && break; sleep 0.05; done
  h 0 iperf3 -c $PEER -p 5201 -n "$total" -P 1 -w 4M -J >"$TMP/iperf.json"
  wait $srv || true
  python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["end"]["sum_received"]["bits_per_second"]/8e9)' "$TMP/iperf.json"
}

perftest() {  # size -> GB/s (the "Final:" line's average bandwidth, printed in MB/s = 2^20 B/s)
  ucxenv x 1 ucx_perftest -p 13337 >"$TMP/perf-server.log" 2>&1 &
  local srv=$!
  for _ in $(seq 50); do h 1 ss -ltn 2>/dev/null | grep -q ':13337 ' && break; sleep 0.05; done
  ucxenv x 0 ucx_perftest $PEER -p 13337 -t stream_bw -s "$(bytes "$1")" -n "$ITERS" -w "$WARMUP" \
    >"$TMP/perf.log" 2>&1 || { cat "$TMP/perf.log" >&2; die "ucx_perftest failed"; }
  wait $srv || true
  awk '/Final:/ {print $(NF-3) * 1048576 / 1e9}' "$TMP/perf.log"
}

tessera() {  # binary size VAR=VALUE... -> GB/s (algbw of the slowest rank, as tessera bench reports it)
  local BIN=$1 size=$2
  shift 2
  if [ "$LINK" = loopback ]; then
    # One host: tcp, or the row a TESSERA_TRANSPORTS of the caller's names (env takes the later assignment).
    env TESSERA_TRANSPORTS=tcp "$@" "$BIN" run --timeout 120s --island ascend=host:1 --island nvidia=host:1 -- \
      "$BIN" bench broadcast --in-place --sizes "$size" --dtype f32 --iters "$ITERS" --warmup "$WARMUP" --json "$TMP/t0.json" \
      >"$TMP/t0.log" 2>&1
    : >"$TMP/t1.log"
  else
    for i in 0 1; do
      env "$@" $NS exec $TAG $i "$BIN" run --nnodes 2 --node-rank $i --store 10.77.0.1:29400 --timeout 120s \
        --island ascend=host:1 --island nvidia=host:1 -- \
        "$BIN" bench broadcast --in-place --sizes "$size" --dtype f32 --iters "$ITERS" --warmup "$WARMUP" --json "$TMP/t$i.json" \
        >"$TMP/t$i.log" 2>&1 &
    done
    wait
  fi
  python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); r=d["rows"] if "rows" in d else d["results"]; print(r[0]["algbw_GBps"])' "$TMP/t0.json" ||
    { cat "$TMP/t0.log" "$TMP/t1.log" >&2; die "tessera bench failed"; }
}

echo "# link $LINK; $(uname -srm), $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg); $ROUNDS rounds, $ITERS iterations; UCX_TLS=${TLS:-(UCX chooses)}; $(ucx_info -v | head -1)"
records=()
for round in $(seq "$ROUNDS"); do
  for size in $SIZES; do
    load=$(cut -d' ' -f1 /proc/loadavg)
    a=$(iperf "$size")
    p=$(perftest "$size")
    b=null
    [ -z "$BASE" ] || b=$(tessera "$BASE" "$size" TESSERA_TRANSPORTS=ucx ${TLS:+UCX_TLS=$TLS})
    u=$(tessera "$BIN" "$size" TESSERA_TRANSPORTS=ucx ${TLS:+UCX_TLS=$TLS})
    t=$(tessera "$BIN" "$size")
    printf 'round %s %s (load %s): iperf3 %.2f  ucx_perftest stream_bw %.2f  ucx row %.2f  tcp row %.2f GB/s%s\n' \
      "$round" "$size" "$load" "$a" "$p" "$u" "$t" "${BASE:+  (baseline ucx row $b)}"
    records+=("{\"round\":$round,\"size\":\"$size\",\"load1\":$load,\"iperf3\":$a,\"ucx_perftest\":$p,\"ucx_row\":$u,\"tcp_row\":$t,\"ucx_row_baseline\":$b}")
  done
done
printf '%s\n' "${records[@]}" | python3 -c '
import json, os, platform, statistics, sys
rows = [json.loads(l) for l in sys.stdin]
nan = float("nan")
for r in rows:  # a run that moved nothing (a starved busy-polling perftest prints 0) gives no ratio
    r["ucx_over_perftest"] = r["ucx_row"] / r["ucx_perftest"] if r["ucx_perftest"] > 0 else nan
    r["ucx_over_iperf3"] = r["ucx_row"] / r["iperf3"]
    r["tcp_over_iperf3"] = r["tcp_row"] / r["iperf3"]
    b = r["ucx_row_baseline"]
    r["baseline_over_perftest"] = b / r["ucx_perftest"] if b is not None and r["ucx_perftest"] > 0 else nan
out = {"machine": {"uname": " ".join(platform.uname()), "cpus": os.cpu_count()}, "link": sys.argv[3], "ucx_tls": sys.argv[2], "rows": rows}
keys = ("load1", "iperf3", "ucx_perftest", "ucx_row", "tcp_row", "ucx_over_perftest", "ucx_over_iperf3", "tcp_over_iperf3")
if any(r["ucx_row_baseline"] is not None for r in rows):
    keys += ("ucx_row_baseline", "baseline_over_perftest")
print("GB/s and ratios: median (min-max) over rounds; ratios per round")
print("| size | " + " | ".join(keys) + " |")
print("|---|" + "---|" * len(keys))
for size in dict.fromkeys(r["size"] for r in rows):
    sel = [r for r in rows if r["size"] == size]
    cells = []
    for k in keys:
        v = [r[k] for r in sel if r[k] is not None and r[k] == r[k]]  # without NaN
        cells.append("%.2f (%.2f-%.2f), n=%d" % (statistics.median(v), min(v), max(v), len(v)) if v else "none")
    print("| %s | %s |" % (size, " | ".join(cells)))
json.dump(json.loads(json.dumps(out).replace("NaN", "null")), open(sys.argv[1], "w"), indent=1)
' "$OUT" "$TLS" "$LINK"
echo "wrote $OUT"
