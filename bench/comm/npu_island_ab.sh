#!/usr/bin/env bash
# bench/comm/npu_island_ab.sh — npu islands on the host ABI shims (tests/shims), two builds interleaved (A/B): a bf16
# sum allreduce in place on device memory (`tessera bench allreduce`) in the layouts `npu:2 + host:1` and
# `npu:2 + npu:2` (or LAYOUTS), at 16 and 64 MiB, REPS rounds (default 5) with the builds alternating inside each round so that
# the box's load hits them alike. Prints the median busbw of each build per layout and size, its range, and the
# ratio new/old; raw rows go to $OUT/npu-ab.jsonl when OUT is set.
#   Usage: bench/comm/npu_island_ab.sh NEW_BUILD OLD_BUILD
# A/B of settings instead of builds: the same directory twice, with NEW_ENV / OLD_ENV (space-separated VAR=value for
# each side), e.g. NEW_ENV=TESSERA_COPY_BRIDGE=on. LAYOUTS (`label:island island;label:...`) and DTYPE (bfloat16) and
# OP (sum) choose the jobs.
# Each build directory must hold `tessera` and tests/shims/lib (the shims: `cmake --build DIR --target tessera_cli
# tessera_shim_acl tessera_shim_hccl tessera_shim_hcomm`, plus the operator-API shims where the tree has them). The
# shims do their device work on host threads: this measures Tessera's plan (what is staged, widened and overlapped),
# not an Ascend device. SHIM_LIB=tests/shims/cuda/lib (relative to each build) takes the CUDA-backed shims instead,
# on a machine with a GPU (targets tessera_cuda_shim_acl, _hccl, _hcomm, _nnopbase, _opapi), where layouts may also
# hold cuda islands.
# MPS=1 (with a GPU): every round runs under one NVIDIA MPS server started for the run (a private pipe directory),
# so that both processes on the one GPU — the CUDA-backed shims' npu ranks too — run their work side by side instead
# of taking turns in time slices: a closer stand-in for two cards than two contexts on one GPU. With
# CUDA_DEVICE_MAX_CONNECTIONS=32, as `tessera run --sm-share` sets.
set -uo pipefail
NEW=${1:?usage: npu_island_ab.sh NEW_BUILD OLD_BUILD}
OLD=${2:?usage: npu_island_ab.sh NEW_BUILD OLD_BUILD}
SHIM_LIB=${SHIM_LIB:-tests/shims/lib}
for b in "$NEW" "$OLD"; do
  [ -x "$b/tessera" ] && [ -d "$b/$SHIM_LIB" ] || { echo "npu_island_ab: $b lacks tessera or $SHIM_LIB" >&2; exit 2; }
done
OUTDIR=${OUT:-$(mktemp -d)}
mkdir -p "$OUTDIR"
ROWS=$OUTDIR/npu-ab.jsonl
: > "$ROWS"
SIZES=${SIZES:-16M,64M}
LAYOUTS=${LAYOUTS:-npu2+host1:ascend=npu:2 x86=host:1;npu2+npu2:ascend=npu:2 ascend2=npu:2}
DTYPE=${DTYPE:-bfloat16} OP=${OP:-sum}
read -ra NEW_SET <<< "${NEW_ENV:-}"
read -ra OLD_SET <<< "${OLD_ENV:-}"
IFS=';' read -ra LAYOUT_LIST <<< "$LAYOUTS"
if [ "${MPS:-0}" = 1 ]; then
  command -v nvidia-cuda-mps-control >/dev/null || { echo "npu_island_ab: MPS=1 needs nvidia-cuda-mps-control" >&2; exit 2; }
  MPS_DIR=$(mktemp -d)
  export CUDA_MPS_PIPE_DIRECTORY=$MPS_DIR/pipe CUDA_MPS_LOG_DIRECTORY=$MPS_DIR/log
  export CUDA_DEVICE_MAX_CONNECTIONS=${CUDA_DEVICE_MAX_CONNECTIONS:-32}
  mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
  nvidia-cuda-mps-control -d || { echo "npu_island_ab: starting MPS failed" >&2; exit 2; }
  trap 'echo quit | nvidia-cuda-mps-control; sleep 1; rm -rf "$MPS_DIR"' EXIT
fi
echo "npu_island_ab: $(nproc) cpus, ${REPS:-5} rounds, MPS ${MPS:-0}, sizes $SIZES, $DTYPE $OP, shims $SHIM_LIB, new=$NEW ${NEW_ENV:-} old=$OLD ${OLD_ENV:-}"
for rep in $(seq "${REPS:-5}"); do
  for layout in "${LAYOUT_LIST[@]}"; do
    label=${layout%%:*}
    args=()
    for i in ${layout#*:}; do args+=(--island "$i"); done
    for which in new old; do
      b=$NEW set=("${NEW_SET[@]}")
      [ "$which" = old ] && b=$OLD set=("${OLD_SET[@]}")
      b=$(cd "$b" && pwd)
      env "${set[@]}" LD_LIBRARY_PATH="$b/$SHIM_LIB" TESSERA_TIMEOUT=120s timeout 600 "$b/tessera" run "${args[@]}" -- \
        "$b/tessera" bench allreduce --sizes "$SIZES" --dtype "$DTYPE" --op "$OP" --in-place --iters 3 --warmup 1 \
        --json - 2> "$OUTDIR/err-$label-$which-r$rep.txt" | grep -o '{.*}' |
        sed "s/^{/{\"layout\":\"$label\",\"build\":\"$which\",/" >> "$ROWS" ||
        { echo "round $rep $label $which failed:"; tail -5 "$OUTDIR/err-$label-$which-r$rep.txt"; }
    done
  done
done
python3 - "$ROWS" "$DTYPE" "$OP" <<'PY'
import json, statistics, sys
got = {}
for line in open(sys.argv[1]):
    d = json.loads(line)
    for r in d.get("rows", []):
        got.setdefault((d["layout"], d["build"], r["bytes"]), []).append(r["busbw_GBps"])
print(f"\n{sys.argv[2]} {sys.argv[3]} allreduce in place, busbw GB/s, median (min..max) of the rounds")
print("layout     | size    | new                  | old                  | new/old")
for (layout, build, size) in sorted(k for k in got if k[1] == "new"):
    n, o = got[(layout, "new", size)], got.get((layout, "old", size), [])
    med = lambda v: statistics.median(v) if v else float("nan")
    cell = lambda v: f"{med(v):.3f} ({min(v):.3f}..{max(v):.3f})" if v else "-"
    print(f"{layout:10} | {size >> 20:3} MiB | {cell(n):20} | {cell(o):20} | {med(n) / med(o):.2f}x")
PY
echo "rows: $ROWS"
