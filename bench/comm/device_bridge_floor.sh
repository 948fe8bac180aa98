#!/usr/bin/env bash
# bench/comm/device_bridge_floor.sh — the device bridge's fixed cost per call, and where its worker spends it: the
# per-call time of small allreduces between two device-bridge ranks (two one-GPU islands on one GPU) on device memory
# and on host memory (--host-memory: the host engine alone), one call per sample; the device run again under
# TESSERA_DEVICE_TRACE, for its device operations per call and their latency; then a long run of one size under
# which the device-bridge worker thread of rank 0 is sampled with gdb (SAMPLES stacks, its innermost Tessera frames
# counted), the poor man's profiler (needs gdb).
# Usage: [SIZES=4K,64K,1M] [SIZE=1M] [SAMPLES=20 (0: none)] [DEV=cuda] bench/comm/device_bridge_floor.sh BUILD_DIR [OUT_DIR]
#   DEV=emu runs it on a machine without a GPU (the emulated device: its copies are host threads).
set -uo pipefail
B=$(cd "${1:?usage: device_bridge_floor.sh BUILD_DIR [OUT_DIR]}" && pwd) || exit 1
OUT=${2:-$(mktemp -d /tmp/bridge-floor.XXXXXX)}
mkdir -p "$OUT"
T=$B/tessera DEV=${DEV:-cuda} SIZE=${SIZE:-1M}
export NCCL_NVLS_ENABLE=0 TESSERA_TIMEOUT=${TESSERA_TIMEOUT:-60s}
ISL=(--island "a=$DEV:1" --island "b=$DEV:1")
AR=(bench allreduce --op sum --in-place --batch 1 --warmup 20)
for mem in device host; do
  flag=; [ $mem = host ] && flag=--host-memory
  timeout 120 "$T" run "${ISL[@]}" -- "$T" "${AR[@]}" --iters 200 --sizes "${SIZES:-4K,64K,1M}" $flag > "$OUT/floor-$mem.log" 2>&1 ||
    { echo "$mem memory run failed:"; tail -5 "$OUT/floor-$mem.log"; }
  echo "$DEV+$DEV on $mem memory, one call: $(grep -E '^\[rank 0 [^]]*\] +[0-9]' "$OUT/floor-$mem.log" | awk '{printf "%s B %s us; ", $4, $(NF-4)}')"
done
# The same device-memory run again under TESSERA_DEVICE_TRACE: per size, the median bridge job's run on the worker and
# its device operations — how many per queue, and their mean time from being queued to being seen done.
rm -f "$OUT/trace".rank*
TESSERA_DEVICE_TRACE=$OUT/trace timeout 120 "$T" run "${ISL[@]}" -- "$T" "${AR[@]}" --iters 200 --sizes "${SIZES:-4K,64K,1M}" \
  > /dev/null 2>&1
python3 - "$OUT" "${SIZES:-4K,64K,1M}" <<'PY'
import glob, statistics, sys
sizes = sys.argv[2].split(",")
for f in sorted(glob.glob(f"{sys.argv[1]}/trace.rank*")):
    rows = [list(map(float, l.split())) for l in open(f).read().split("\n")[1:] if l.strip()]
    k = len(rows) // len(sizes)
    for i, size in enumerate(sizes):
        g = rows[i * k:(i + 1) * k][20:]  # past the warm-up
        if not g or len(g[0]) < 9:
            continue
        med = lambda j: statistics.median(x[j] for x in g)
        print(f"{f.rsplit('.', 1)[1]} {size:>5}: run {statistics.median(x[3] - x[2] for x in g):.1f} us; "
              f"send queue {med(5):.0f} ops, {med(6):.1f} us each; fold queue {med(7):.0f} ops, {med(8):.1f} us each")
PY
# gdb only: cuda-gdb, attached so, stalls the rank's device work (every sample after the first few shows the worker
# polling one fold-queue event), so its samples are not a profile.
[ "${SAMPLES:-20}" -gt 0 ] || exit 0
command -v gdb > /dev/null || { echo "no gdb here: no stack samples"; exit 0; }
timeout 200 "$T" run "${ISL[@]}" -- "$T" "${AR[@]}" --iters 100000 --sizes "$SIZE" > "$OUT/long.log" 2>&1 &
sleep 4
pid=$(pgrep -f "^$T bench allreduce" | head -1)
[ -n "$pid" ] || { echo "no rank process found"; tail -5 "$OUT/long.log"; exit 1; }
: > "$OUT/stacks.txt"
for i in $(seq "${SAMPLES:-20}"); do
  echo "=== sample $i" >> "$OUT/stacks.txt"
  timeout 20 gdb -p "$pid" -batch -ex "set pagination off" -ex "thread apply all bt 40" >> "$OUT/stacks.txt" 2>/dev/null
  sleep 0.2
done
pkill -f "^$T run" || true
wait
# Per sample, the worker's stack (the thread whose frames hold WorkerLoop): its innermost frame in Tessera's code and
# the function it called into, counted.
python3 - "$OUT/stacks.txt" <<'PY'
import collections, re, sys
text = open(sys.argv[1]).read()
inner, leaf = collections.Counter(), collections.Counter()
n = 0
for sample in text.split("=== sample")[1:]:
    for th in re.split(r"\nThread \d+ ", sample):
        if "WorkerLoop" not in th:
            continue
        frames = [re.sub(r"^#\d+\s+(0x[0-9a-f]+ in )?", "", l).split(" (")[0] for l in th.split("\n") if re.match(r"#\d+", l)]
        n += 1
        leaf[frames[0] if frames else "?"] += 1
        mine = [f for f in frames if "tessera::" in f]
        inner[" < ".join(re.sub(r"tessera::comm::|\(.*", "", f) for f in mine[:3]) if mine else "?"] += 1
print(f"\ndevice-bridge worker of rank 0, {n} stack samples during {sys.argv[1].rsplit('/', 2)[0]} long run")
print("innermost three Tessera frames:")
for f, c in inner.most_common(12): print(f"  {c:>3}  {f[:200]}")
print("innermost frame:")
for f, c in leaf.most_common(8): print(f"  {c:>3}  {f[:150]}")
PY
echo "logs: $OUT"
