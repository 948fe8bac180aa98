#!/usr/bin/env bash
# bench/comm/staged_trace.sh — where a staged (npu) rank's allreduce spends its time beside another island: runs
# `tessera bench allreduce` (f32 avg in place) with TESSERA_DEVICE_TRACE for each chunk size and prints, per layout
# and chunk, the median per part of the staged rank's phases (docs/devices.md, TESSERA_DEVICE_TRACE): waiting for its
# copies down, its host step (the bridge collective of the part, peers included), queueing its copies up; and the
# per-call time of plain allreduces (one call at a time) of chunk sizes in the same layouts, with the device-bridge
# rank's phases of each call from its own trace, for the fixed cost a part pays.
# Usage: [CHUNKS="4M 16M"] [SIZE=64M] [PEER=cuda] [CALLS=1] bench/comm/staged_trace.sh BUILD_DIR [OUT_DIR]
#   CALLS=0 leaves out the one-call times; other TESSERA_* variables (TESSERA_DEVICE_PIECE...) pass through to the jobs.
#   PEER: the island beside the npu rank (cuda on a GPU machine with the CUDA-backed shims; emu or host on the CPU).
# The npu rank runs on the shims in BUILD/tests/shims/cuda/lib when PEER=cuda, else BUILD/tests/shims/lib.
set -uo pipefail
B=$(cd "${1:?usage: staged_trace.sh BUILD_DIR [OUT_DIR]}" && pwd) || exit 1
OUT=${2:-$(mktemp -d /tmp/staged-trace.XXXXXX)}
mkdir -p "$OUT"
T=$B/tessera PEER=${PEER:-cuda} SIZE=${SIZE:-64M}
LIB=$B/tests/shims/lib; [ "$PEER" = cuda ] && LIB=$B/tests/shims/cuda/lib
export LD_LIBRARY_PATH=$LIB${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} NCCL_NVLS_ENABLE=0 TESSERA_TIMEOUT=${TESSERA_TIMEOUT:-60s}
AR=(bench allreduce --iters 5 --batch 5 --warmup 2 --op avg --in-place)
for c in ${CHUNKS:-4M 16M}; do
  rm -f "$OUT/trace-$c".rank*
  TESSERA_DEVICE_CHUNK=$c TESSERA_DEVICE_TRACE=$OUT/trace-$c timeout 200 "$T" run --island a=npu:1 --island b="$PEER":1 -- \
    "$T" "${AR[@]}" --sizes "$SIZE" > "$OUT/bench-$c.log" 2>&1 || { echo "npu+$PEER chunk $c failed:"; tail -5 "$OUT/bench-$c.log"; }
  echo "npu+$PEER $SIZE, chunk $c: $(grep -E '^\[rank 0 [^]]*\] +[0-9]' "$OUT/bench-$c.log" | awk '{print $(NF-2) " GB/s busbw, " $(NF-4) " us a call"}')"
done
# The fixed cost of one call of a chunk's size, in each pair (the staged rank's parts are such calls).
[ "${CALLS:-1}" = 0 ] ||
for pair in "npu+$PEER:a=npu:1 b=$PEER:1" "$PEER+$PEER:a=$PEER:1 b=$PEER:1" "$PEER+host:a=$PEER:1 b=host:1"; do
  args=(); for i in ${pair#*:}; do args+=(--island "$i"); done
  log=$OUT/calls-$(echo "${pair%%:*}" | tr + _).log
  TESSERA_DEVICE_TRACE=${log%.log} timeout 200 "$T" run "${args[@]}" -- "$T" bench allreduce --iters 10 --batch 1 --warmup 2 --op avg --in-place --sizes 1M,4M,16M > "$log" 2>&1
  echo "${pair%%:*} one call: $(grep -E '^\[rank 0 [^]]*\] +[0-9]' "$log" | awk '{printf "%s B %s us; ", $4, $(NF-4)}')"
done
python3 - "$OUT" ${CHUNKS:-4M 16M} <<'PY'
import statistics, sys, glob
out = sys.argv[1]
print("\nstaged rank, median per part (us): wait = its copies down after it asked; host = the part's bridge collective;")
print("up = queueing its copies up; gap = from one part's end to the next part's start")
print(f"{'chunk':>6} {'parts':>6} {'MiB/part':>9} {'wait':>8} {'host':>8} {'up':>7} {'gap':>7} {'host GB/s':>10}")
for c in sys.argv[2:]:
    rows = []
    for f in glob.glob(f"{out}/trace-{c}.rank*"):
        lines = open(f).read().split("\n")
        if not lines[0].startswith("call run part"):
            continue
        rows += [l.split() for l in lines[1:] if l.strip()]
    if not rows:
        print(f"{c:>6}  (no staged-rank trace)"); continue
    w = [float(r[6]) - float(r[5]) for r in rows]
    h = [float(r[7]) - float(r[6]) for r in rows]
    u = [float(r[8]) - float(r[7]) for r in rows]
    g = [float(b[5]) - float(a[8]) for a, b in zip(rows, rows[1:]) if a[1] == b[1]]
    mib = statistics.median(int(r[3]) for r in rows) / 2 / 2**20
    hm = statistics.median(h)
    print(f"{c:>6} {len(rows):>6} {mib:>9.2f} {statistics.median(w):>8.1f} {hm:>8.1f} {statistics.median(u):>7.1f} "
          f"{(statistics.median(g) if g else 0):>7.1f} {mib * 2**20 / hm / 1e3:>10.2f}")
PY
# The device-bridge ranks' jobs in the one-call runs (TESSERA_DEVICE_TRACE rows "ticket submitted started ran copied"):
# the median of each phase over the jobs of each size (warm-ups included).
python3 - "$OUT" <<'PY'
import statistics, sys, glob, os
rows = {}
for f in sorted(glob.glob(f"{sys.argv[1]}/calls-*.rank*")):
    lines = open(f).read().split("\n")
    if not lines[0].startswith("ticket"):
        continue
    r = [list(map(float, l.split())) for l in lines[1:] if l.strip()]
    if not r:
        continue
    name = os.path.basename(f)[len("calls-"):]
    k = len(r) // 3  # the 1M, 4M and 16M calls, in that order (equal counts)
    for size, g in zip(("1M", "4M", "16M"), (r[:k], r[k:2 * k], r[2 * k:])):
        q = statistics.median(x[2] - x[1] for x in g)
        run = statistics.median(x[3] - x[2] for x in g)
        cp = statistics.median(x[4] - x[3] for x in g)
        ops = (f", device ops send {statistics.median(x[5] for x in g):.0f} x {statistics.median(x[6] for x in g):.1f} us,"
               f" fold {statistics.median(x[7] for x in g):.0f} x {statistics.median(x[8] for x in g):.1f} us") if len(g[0]) >= 9 else ""
        print(f"{name:>16} {size:>4}: {len(g)} jobs, median us: queued->started {q:.1f}, run {run:.1f}, copies after {cp:.1f}{ops}")
PY
echo "logs: $OUT"
