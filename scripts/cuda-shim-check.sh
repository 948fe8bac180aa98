#!/usr/bin/env bash
# scripts/cuda-shim-check.sh: on a GPU machine, after the project is built, Tessera's Ascend code paths run on the
# CUDA-backed ACL/HCCL shims of tests/shims/cuda (libascendcl.so on cudart, libhccl.so on NCCL): real device memory,
# streams and events. It runs accel_worker check (tests/comm) under `tessera run` in three worlds:
#   npu_beside_host     --island ascend=npu:1 --island x86=host:1    an Ascend rank on device memory beside a host rank
#   npu_alone           --island ascend=npu:1                        a world of one Ascend island: HCCL (NCCL) inside
#   npu_beside_2_hosts  --island ascend=npu:1 --island moore=host:2  as the first, with two host ranks
# all three staged through pinned memory (TESSERA_COPY_BRIDGE=off), then `tessera bench C --check` (allreduce,
# reduce_scatter, allgather, broadcast; f32 and bf16) with an Ascend rank beside a CUDA rank, staged, the same jobs and
# checks on the copy bridge (the default beside a CUDA rank: the Ascend rank's rings registered with
# aclrtHostRegisterV2, here cudaHostRegister), and the allreduce's speed, on the copy bridge and staged, beside two CUDA
# islands and beside host ranks (a table last).
# A job passes when it exits 0 and every rank printed "OK rank R" (tessera run prefixes its lines with "[rank R
# ISLAND] "). Prints PASS/FAIL per job with its rank lines and exits 1 if any failed. This proves only that Tessera
# calls the ABI correctly on asynchronous device memory, not that Ascend hardware behaves so (tests/shims/README.md).
# Usage: scripts/cuda-shim-check.sh [BUILD_DIR]   (default build; it must have tessera, tests/comm/accel_worker
# and tests/shims/cuda/lib). Full logs: one file per job under $OUT when set, else under a temporary directory.
# TESSERA_TIMEOUT (default 60s) bounds each job inside tessera run; the shell stops a job after 300 s.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
B=${1:-build}
B=$(cd "$B" 2>/dev/null && pwd) || { echo "FAIL: build directory '${1:-build}' not found"; exit 1; }
T=$B/tessera
W=$B/tests/comm/accel_worker
LIB=$B/tests/shims/cuda/lib
for f in "$T" "$W" "$LIB/libascendcl.so" "$LIB/libhccl.so" "$LIB/libhcomm.so"; do
  [ -e "$f" ] || { echo "FAIL: $f is missing (build with CUDA and NCCL: the shims are tests/shims/cuda)"; exit 1; }
done
LOGS=${OUT:-$(mktemp -d /tmp/cuda-shim-check.XXXXXX)}
mkdir -p "$LOGS"
export LD_LIBRARY_PATH=$LIB${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} NCCL_NVLS_ENABLE=0
export TESSERA_TIMEOUT=${TESSERA_TIMEOUT:-60s} TESSERA_SHIM_VERBOSE=${TESSERA_SHIM_VERBOSE:-1}

FAILED=0
RANK_RE='^(\[rank [0-9]+ [^]]*\] )?'  # tessera run prefixes each rank's lines with "[rank R ISLAND] "
job() {  # job NAME ISLAND-ARGS...
  local name=$1 log=$LOGS/$1.log ranks=0 ok rc; shift
  for a in "$@"; do case $a in *=*:*) ranks=$((ranks + ${a##*:})) ;; esac; done
  { echo "\$ tessera run $* -- accel_worker check"; echo; } > "$log"
  timeout 300 "$T" run "$@" -- "$W" check >> "$log" 2>&1; rc=$?
  ok=$(grep -cE "$RANK_RE"'OK rank [0-9]' "$log")
  if [ "$rc" = 0 ] && [ "$ok" = "$ranks" ]; then
    echo "PASS $name ($ranks ranks)"
    grep -E "$RANK_RE"'(OK|FAIL) rank ' "$log" | sed 's/^/  /'
  else
    echo "FAIL $name (exit $rc, $ok of $ranks ranks OK; log: $log)"
    grep -E "$RANK_RE"'(OK|FAIL) rank ' "$log" | sed 's/^/  /'
    tail -20 "$log" | grep -vE "$RANK_RE"'(OK|FAIL) rank ' | sed 's/^/  | /'
    FAILED=1
  fi
}

# `tessera bench C --check`: every element against an f64 reference and bit-identity across ranks, on device memory
# of every device rank — here an Ascend rank (ACL/HCCL rows, CUDA-backed) beside a CUDA rank (DeviceBridgeRank on the cuda runtime row, NCCL).
bench_check() {  # bench_check NAME COLLECTIVE DTYPE ISLAND-ARGS...
  local name=$1 coll=$2 dt=$3 log=$LOGS/$1.log rc; shift 3
  timeout 300 "$T" run "$@" -- "$T" bench "$coll" --sizes 4K,1M,16M --dtype "$dt" --iters 2 --warmup 1 --check \
    --json - > "$log" 2>&1; rc=$?
  if [ "$rc" = 0 ] && grep -q '"memory":"device"' "$log" && ! grep -q '"wrong":[1-9]' "$log"; then
    echo "PASS $name (tessera bench $coll $dt --check on device memory of both ranks)"
  else
    echo "FAIL $name (exit $rc; log: $log)"; tail -8 "$log" | sed 's/^/  | /'; FAILED=1
  fi
}

nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1 | sed 's/^/GPU: /'
TESSERA_COPY_BRIDGE=off job npu_beside_host --island ascend=npu:1 --island x86=host:1
job npu_alone --island ascend=npu:1
TESSERA_COPY_BRIDGE=off job npu_beside_2_hosts --island ascend=npu:1 --island moore=host:2
for coll in allreduce reduce_scatter allgather broadcast; do
  for dt in float32 bfloat16; do
    TESSERA_COPY_BRIDGE=off bench_check "npu+cuda-$coll-$dt" "$coll" "$dt" --island ascend=npu:1 --island nvidia=cuda:1
  done
done
# The copy bridge (the npu rank's allreduce, reduce-scatter, allgather and broadcast copied between device memory and
# the rings it registers with aclrtHostRegisterV2, here cudaHostRegister): the default beside a CUDA rank
# (TESSERA_COPY_BRIDGE=auto), and beside host ranks with =on.
job npu_copy_bridge_beside_cuda --island ascend=npu:1 --island nvidia=cuda:1
TESSERA_COPY_BRIDGE=on job npu_copy_bridge_beside_2_hosts --island ascend=npu:1 --island moore=host:2
for coll in allreduce reduce_scatter allgather broadcast; do
  for dt in float32 bfloat16; do
    bench_check "npu+cuda-copy-$coll-$dt" "$coll" "$dt" --island ascend=npu:1 --island nvidia=cuda:1
  done
done

# Speed beside the peers in the same run (f32 avg in place, `tessera bench allreduce`, median of 5 samples of 5
# calls): the npu rank beside a CUDA rank and beside a host rank, against two CUDA islands and CUDA beside a host
# rank, interleaved REPS (3) times. Beside the CUDA rank an npu rank copies its allreduce between its memory and the
# rings (the copy bridge), or, "staged" (TESSERA_COPY_BRIDGE=off), stages it on its caller's thread in double-buffered
# bridge chunks (docs/devices.md, "The staged rank"); beside a host rank it stages, or, "copy" (=on), copies. The CUDA
# rank keeps the device bridge beside it.
ROWS=$LOGS/bench-rows.jsonl
: > "$ROWS"
for rep in $(seq "${REPS:-3}"); do
  # npu+cuda staged@16M: staged with fixed chunks (TESSERA_DEVICE_CHUNK; the default `auto` cuts a call into about
  # four).
  for layout in "npu+cuda:ascend=npu:1 nvidia=cuda:1" "npu+cuda staged:ascend=npu:1 nvidia=cuda:1" \
                "cuda+cuda:a=cuda:1 b=cuda:1" "npu+host:ascend=npu:1 x86=host:1" \
                "npu+host copy:ascend=npu:1 x86=host:1" "cuda+host:nvidia=cuda:1 x86=host:1" \
                "npu+cuda staged@16M:ascend=npu:1 nvidia=cuda:1"; do
    label=${layout%%:*}
    how=(env)
    [[ $label == *@* ]] && how+=("TESSERA_DEVICE_CHUNK=${label#*@}")
    [[ $label == *" staged"* ]] && how+=(TESSERA_COPY_BRIDGE=off)
    [[ $label == *" copy" ]] && how+=(TESSERA_COPY_BRIDGE=on)
    args=()
    for i in ${layout#*:}; do args+=(--island "$i"); done
    timeout 200 "${how[@]}" "$T" run "${args[@]}" -- "$T" bench allreduce --sizes 64M,256M --iters 5 --batch 5 --warmup 2 --op avg \
      --in-place --json - 2> "$LOGS/bench-${label// /-}-r$rep.err" | grep -o '{.*}' | sed "s/^{/{\"layout\":\"$label\",/" >> "$ROWS" \
      || { echo "bench $label round $rep failed"; tail -5 "$LOGS/bench-${label// /-}-r$rep.err"; FAILED=1; }
  done
done
python3 - "$ROWS" <<'PY'
import json, statistics, sys
got = {}
for line in open(sys.argv[1]):
    d = json.loads(line)
    for r in d.get("rows", []):
        got.setdefault((d["layout"], r["bytes"]), []).append(r["busbw_GBps"])
sizes = sorted({b for (_, b) in got})
print("\nallreduce f32 avg busbw GB/s, median (min..max) of the rounds")
print("layout        | " + " | ".join(f"{s >> 20} MiB" for s in sizes))
for layout in ["npu+cuda", "npu+cuda staged", "cuda+cuda", "npu+host", "npu+host copy", "cuda+host",
               "npu+cuda staged@16M"]:
    cells = []
    for s in sizes:
        v = got.get((layout, s), [])
        cells.append(f"{statistics.median(v):.2f} ({min(v):.2f}..{max(v):.2f})" if v else "-")
    print(f"{layout:13} | " + " | ".join(cells))
PY
echo "logs: $LOGS"
[ "$FAILED" = 0 ] && echo "cuda-shim-check: all jobs passed" || echo "cuda-shim-check: FAILED"
exit "$FAILED"
