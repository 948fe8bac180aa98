#!/usr/bin/env bash
# scripts/torch-check.sh — the PyTorch backend on any machine with torch: build libtessera, install the
# `tessera` Python package offline (pip install --no-build-isolation ./python; skipped when nothing it is
# built from changed), then run the torch tests under `tessera run` in the worlds docs/torch.md lists, and
# the torch benchmarks. Without a GPU (CI) the worlds are CPU ranks only (1, 2, 3
# and 5 ranks in 1-3 islands); with one, GPU and CPU ranks mixed as well as CPU ranks with the GPU hidden.
# Usage: scripts/torch-check.sh [BUILD_DIR] [tests|bench|all|install] [GROUP]
#   default build-gpu, all; install: build and install only; GROUP: ops, train, ckpt, faults, init, groups, npu or stacks
#   (the tests of one group only; default all of them). stacks: DeepSpeed ZeRO-3 and a Hugging Face Trainer
#   on two CPU islands, where the interpreter has deepspeed, transformers and accelerate (CI's .venv does).
#   npu: the ops, DDP with HeteroDistributedSampler and a DCP save on `npu` tensors of the test device
#   (tests/torch/npu_device: torch's PrivateUse1 renamed npu, on the ACL host shim of tests/shims), alone and
#   beside CPU ranks, and the save loaded on CPU ranks; with a GPU also on the CUDA-backed shims (tests/shims/cuda),
#   beside CPU and CUDA ranks
# Writes torch-*.log (and bench rows torch-bench.jsonl) under $OUT when set, else BUILD_DIR/bench-results/.
# PYTHON picks the interpreter (default: the project's .venv/bin/python, else python3). Without one that
# imports torch it says so and exits 77 (ctest's SKIPPED).
set -uo pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
cd "$(dirname "$0")/.." || exit 1
ROOT=$PWD
B=${1:-build-gpu}
WHAT=${2:-all}
GROUP=${3:-all}
case $WHAT in tests|bench|all|install) ;; *) echo "torch-check: '$WHAT' is not tests, bench, all or install" >&2; exit 2 ;; esac
case $GROUP in all|ops|train|ckpt|faults|init|groups|npu|stacks) ;; *) echo "torch-check: group '$GROUP' is not ops, train, ckpt, faults, init, groups, npu, stacks or all" >&2; exit 2 ;; esac
OUTDIR=${OUT:-$(realpath -m "$B")/bench-results}
mkdir -p "$OUTDIR"
PY=${PYTHON:-}
[ -z "$PY" ] && { [ -x "$ROOT/.venv/bin/python" ] && PY=$ROOT/.venv/bin/python || PY=python3; }
# DeepSpeed JIT-builds its ops (the shm comm op, cpu_adam) into TORCH_EXTENSIONS_DIR under a file lock. One
# directory per build tree, not ~/.cache: a build interrupted elsewhere leaves its lock behind, and every rank of
# a later run that finds it waits on it until the job times out.
case $B in /*) B_ABS=$B ;; *) B_ABS=$ROOT/$B ;; esac
export TORCH_EXTENSIONS_DIR=${TORCH_EXTENSIONS_DIR:-$B_ABS/torch-extensions}
step() { echo; echo "=== $* ($(date +%T))"; }

# What the script needs of torch, from one interpreter: starting one and importing torch takes seconds on 2 cores,
# and ctest runs this script once per group.
if ! TORCH_INFO=$("$PY" -c 'import torch; print(torch.__version__, torch.version.cuda, torch.cuda.device_count())' \
                  2>/dev/null | tail -n 1); then
  echo "torch-check: SKIPPED: $PY cannot import torch (scripts/install-deps.sh installs it into .venv)"
  exit 77
fi
read -r TORCH_VERSION TORCH_CUDA NGPU <<< "$TORCH_INFO"
echo "torch $TORCH_VERSION cuda $TORCH_CUDA gpus $NGPU"

case $B in /*) ;; *) B=$ROOT/$B ;; esac
T=$B/tessera
# tessera._C is rebuilt only when what it is built from changed (its sources, the package, the C API's
# headers, the device-family table it copies, libtessera, torch): the stamp in the build tree holds their hash.
stamp=$B/tessera-python.stamp
want_stamp() {
  (cd "$ROOT" && cat python/setup.py python/pyproject.toml python/csrc/* python/tessera/*.py python/tessera/torch/*.py \
     include/tessera/*.h src/common/vendor.hpp scripts/gen-families-py.py; sha256sum "$B"/libtessera.so* 2>/dev/null; echo "$TORCH_VERSION") \
    | sha256sum | cut -c1-16
}
up_to_date() { [ -x "$T" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$(want_stamp)" ] && (cd /tmp && "$PY" -c 'import torch, tessera._C') 2>/dev/null; }
# `tests` on an installed, current tessera._C touches no build; otherwise build libtessera and tessera, then
# install. Under ctest (TCHK_INSTALLED=1: the groups after the torch_install fixture, several side by side)
# `tests` never installs: a second pip install of the package while other groups import it raced them.
if [ "$WHAT" = tests ] && [ -n "${TCHK_INSTALLED:-}" ]; then
  [ "$(cat "$stamp" 2>/dev/null)" = "$(want_stamp)" ] ||
    echo "torch-check: note: $stamp does not match the tree (torch_install's install is used as it is)"
elif [ "$WHAT" != tests ] || ! up_to_date; then
  step "build libtessera + tessera"
  # The kit of scripts/gpu-kit.sh, when it was carried here: the daemon and the planner then build on the GPU
  # image too (it lacks SQLite's headers, cpp-httplib and GLPK), for scripts/demo-gpu.sh.
  KIT=()
  [ -f "$ROOT/.deps/gpu-kit/include/sqlite3.h" ] && KIT=(-DTESSERA_KIT="$ROOT/.deps/gpu-kit")
  if [ ! -f "$B/build.ninja" ]; then
    cmake -S . -B "$B" -G Ninja -DTESSERA_CUDA=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo "${KIT[@]}" \
      > "$OUTDIR/torch-configure.log" 2>&1 || { tail -30 "$OUTDIR/torch-configure.log"; echo "configure FAILED"; exit 1; }
  fi
  # the ACL/HCCL host shims: the npu group's test device and its ranks' runtime
  CUDA_SHIMS=(); ((NGPU > 0)) && CUDA_SHIMS=(tessera_cuda_shim_acl tessera_cuda_shim_hccl tessera_cuda_shim_hcomm)
  cmake --build "$B" -j "$(nproc)" --target libtessera tessera_cli tessera_shim_acl tessera_shim_hccl tessera_shim_hcomm \
    "${CUDA_SHIMS[@]}" \
    > "$OUTDIR/torch-build.log" 2>&1 \
    || { grep -E "error|FAILED" "$OUTDIR/torch-build.log" | head -30; echo "build FAILED"; exit 1; }
  if up_to_date; then
    step "tessera._C is up to date (pip install skipped)"
  else
    step "pip install --no-build-isolation ./python (offline)"
    t0=$SECONDS
    # tessera._C's compiler through ccache where there is one (torch's build finds it as c++ on PATH), with the
    # source tree as its base directory as CMakeLists.txt has it: a fresh clone's build is then mostly cache hits.
    CCACHE=()
    if command -v ccache > /dev/null; then
      mkdir -p "$B/ccache-bin" && ln -sf "$(command -v ccache)" "$B/ccache-bin/c++" &&
        CCACHE=(PATH="$B/ccache-bin:$PATH" CCACHE_BASEDIR="$ROOT" CCACHE_NOHASHDIR=true)
    fi
    env "${CCACHE[@]}" TESSERA_BUILD_DIR=$B "$PY" -m pip install --no-build-isolation --no-index --no-deps -q ./python \
      > "$OUTDIR/torch-pip.log" 2>&1 || { grep -E "error|Error" "$OUTDIR/torch-pip.log" | head -40; echo "pip install FAILED"; exit 1; }
    want_stamp > "$stamp"
    echo "built and installed in $((SECONDS - t0)) s"
  fi
fi
(cd /tmp && "$PY" -c 'import torch, torch.distributed as d, tessera._C as c; print("tessera._C", c.version(), "cuda build:", c.cuda_build, "registered:", "TESSERA" in d.Backend._plugins)') ||
  { echo "torch-check: tessera._C does not import (scripts/torch-check.sh BUILD install, or ctest's torch_install, installs it)"; exit 1; }

[ "$WHAT" = install ] && exit 0
RC=0
# Diagnostics for every rank: Python stacks on a fatal signal (faulthandler) and the native stack before it
# (TESSERA_TORCH_CRASH_TRACE, resolved with addr2line at the end); a hang-dump at TESSERA_TEST_HANG_S, after
# Tessera's own timeout (TCHK_TIMEOUT) has had the chance to raise; native stacks of all threads of a rank
# still running then (gdb or eu-stack, where the machine has one) in torch-LABEL.stacks.
# TCHK_ONLY="label ..." runs only those jobs (to spend GPU time on what is being debugged); TCHK_BENCH_REPS
# (3) repetitions of each benchmark; TCHK_TRACE=1 adds the bridge's per-job traces of torch and the C API.
TCHK_TIMEOUT=${TCHK_TIMEOUT:-30s}
export PYTHONFAULTHANDLER=1 TESSERA_TORCH_CRASH_TRACE=1
export TESSERA_TEST_HANG_S=${TESSERA_TEST_HANG_S:-$(( $(echo "$TCHK_TIMEOUT" | tr -dc 0-9) * 2 + 10 ))}
selected() { [ -z "${TCHK_ONLY:-}" ] || [[ " $TCHK_ONLY " == *" $1 "* ]]; }
# shellcheck source=scripts/stacks-lib.sh
source "$ROOT/scripts/stacks-lib.sh"
job() {  # job LABEL TIMEOUT tessera-run-args... -- program...
  local label=$1 lim=$2; shift 2
  selected "$label" || return 0
  echo "--- $label: tessera run $*"
  timeout "$lim" "$T" run --timeout "$TCHK_TIMEOUT" "$@" > "$OUTDIR/torch-$label.log" 2>&1 &
  local pid=$!
  hang_watch $pid $((TESSERA_TEST_HANG_S - 3)) "$ROOT/tests/torch/" "$OUTDIR/torch-$label.stacks"
  wait $pid; local rc=$?
  hang_watch_stop
  grep -E "FAIL|checks,|passed|FAILED|raised|replicas|against|uneven:|fsdp:|Error|fatal signal" "$OUTDIR/torch-$label.log" | head -12
  if [ $rc = 0 ]; then echo "$label: ok"; else echo "$label: FAILED (exit $rc)"; tail -20 "$OUTDIR/torch-$label.log"; RC=1; fi
}
plain() {  # plain LABEL TIMEOUT program...: a job started without `tessera run`
  local label=$1 lim=$2; shift 2
  selected "$label" || return 0
  echo "--- $label: $*"
  (cd /tmp && timeout "$lim" "$@") > "$OUTDIR/torch-$label.log" 2>&1; local rc=$?
  grep -E "FAIL|passed|FAILED|Error" "$OUTDIR/torch-$label.log" | head -8
  if [ $rc = 0 ]; then echo "$label: ok"; else echo "$label: FAILED (exit $rc)"; tail -20 "$OUTDIR/torch-$label.log"; RC=1; fi
}
expect_fail() {  # a job whose ranks must all raise (fault injection): exit status != 0, no hang
  local label=$1 lim=$2; shift 2
  selected "$label" || return 0
  echo "--- $label: tessera run $*"
  local t0=$SECONDS
  timeout "$lim" "$T" run --timeout 20s "$@" > "$OUTDIR/torch-$label.log" 2>&1; local rc=$?
  grep -E "raised|FAIL|exited|killed" "$OUTDIR/torch-$label.log" | head -8
  echo "$label: launcher exit $rc after $((SECONDS - t0)) s"
  [ $rc = 124 ] && { echo "$label: HUNG"; RC=1; }
  grep -q "FAIL " "$OUTDIR/torch-$label.log" && RC=1
}

in_group() { [ "$GROUP" = all ] || [ "$GROUP" = "$1" ]; }
if [ "$WHAT" != bench ]; then
  W="$PY $ROOT/tests/torch/ops_worker.py"
  TW="$PY $ROOT/tests/torch/train_worker.py"
  CW="$PY $ROOT/tests/torch/ckpt_worker.py"
  IW="$PY $ROOT/tests/torch/init_worker.py"
  export TESSERA_BIN=$T
  if ((NGPU > 0)); then
    # GPU ranks (each on this machine's first GPU; several islands share it) beside CPU ranks
    G1=(--island nvidia=cuda:1) GG=(--island ascend=cuda:1 --island nvidia=cuda:1)
    MIX1=(--island nvidia=cuda:1 --island ascend=host:1) MIX2=(--island nvidia=cuda:1 --island ascend=host:2)
  else
    # CPU ranks only: the same jobs in worlds of host islands
    G1=(--island nvidia=host:1) GG=(--island ascend=host:1 --island nvidia=host:1)
    MIX1=(--island nvidia=host:1 --island ascend=host:1) MIX2=(--island nvidia=host:2 --island ascend=host:1)
  fi
  if in_group ops; then
    step "operations x types x reduce ops (tests/torch/ops_worker.py)"
    # tessera._C's dtype and reduce-op maps alone, in one process
    plain maps 60 "$PY" "$ROOT/tests/torch/maps_test.py"
    # the device types the backend is registered for: only those this process knows
    plain registration 60 "$PY" "$ROOT/tests/torch/registration_test.py"
    # the device families: the package's copy of the C++ table, device strings, the current device of each family
    plain families 60 "$PY" "$ROOT/tests/torch/families_test.py"
    if ((NGPU > 0)); then
      job two-islands-one-gpu 200 "${GG[@]}" -- $W
      # the same with the ranks' work on a side stream of their own instead of torch's legacy default stream
      TESSERA_TEST_SIDE_STREAM=1 job two-islands-side 200 "${GG[@]}" -- $W
      job gpu-plus-3cpu 200 --island nvidia=cuda:1 --island ascend=host:3 -- $W
      job one-gpu 200 "${G1[@]}" -- $W
      # gradient-sized all_reduce of every floating type, element by element (the bridge's chunks and rings)
      job large-floats 200 "${GG[@]}" -- $PY $ROOT/tests/torch/large_worker.py
    else
      job one-cpu 200 --island ascend=host:1 -- $W
      job two-cpu-one-island 200 --island ascend=host:2 -- $W
      job two-cpu-two-islands 200 "${GG[@]}" -- $W
      job five-cpu-three-islands 400 --island ascend=host:2 --island nvidia=host:2 --island moore=host:1 -- $W
      # up to 48M elements on CPU ranks (the 160M of a GPU run is minutes of f64 references on 2 cores)
      TESSERA_TEST_LARGE=${TESSERA_TEST_LARGE:-$((48 << 20))} job large-floats 300 "${GG[@]}" -- $PY $ROOT/tests/torch/large_worker.py
    fi
    job three-cpu 200 --island ascend=host:2 --island moore=host:1 -- $W
  fi
  if in_group train; then
    step "training (tests/torch/train_worker.py)"
    job ddp-mixed 300 "${MIX2[@]}" -- $TW ddp
    job ddp-cpu 300 --island ascend=host:2 --island moore=host:1 -- $TW ddp
    job replicas-mixed 300 "${MIX1[@]}" -- $TW replicas
    job uneven 300 "${MIX2[@]}" -- $TW uneven
    job fsdp-two-islands 300 "${GG[@]}" -- $TW fsdp
  fi
  if in_group ckpt; then
    step "checkpoints (tests/torch/ckpt_worker.py)"
    CK=$(mktemp -d /tmp/tsr-ckpt-XXXXXX)
    job ckpt-roundtrip 300 "${MIX1[@]}" -- $CW roundtrip $CK/rt
    job ckpt-fsdp2-save 300 "${GG[@]}" -- $CW fsdp-save $CK/fsdp
    job ckpt-fsdp1-load 300 "${G1[@]}" -- $CW fsdp-load $CK/fsdp
    job ckpt-fsdp1-save 300 "${G1[@]}" -- $CW fsdp-save $CK/fsdp1
    job ckpt-fsdp2-load 300 "${GG[@]}" -- $CW fsdp-load $CK/fsdp1
    job ckpt-mixed-save 300 "${MIX1[@]}" -- $CW ddp-save $CK/mixed
    job ckpt-gpu-load 300 "${G1[@]}" -- $CW ddp-load $CK/mixed
    job ckpt-corrupt 300 "${MIX1[@]}" -- $CW corrupt $CK/corrupt
    # examples/torch/train_lm.py resumed on another world size and split of the same global batch (2 -> 3 -> 1 ranks)
    plain lm-resume-moved 400 "$PY" "$ROOT/tests/torch/lm_resume_test.py"
    for m in killed tiers hf; do
      selected "ckpt-$m" || continue
      echo "--- ckpt-$m (one process)"
      (cd /tmp && timeout 300 "$PY" "$ROOT/tests/torch/ckpt_worker.py" $m $CK/$m > "$OUTDIR/torch-ckpt-$m.log" 2>&1) \
        && echo "ckpt-$m: ok" || { echo "ckpt-$m: FAILED"; tail -15 "$OUTDIR/torch-ckpt-$m.log"; RC=1; }
      grep -E "^(killed|tiers|hf):|FAIL" "$OUTDIR/torch-ckpt-$m.log" | head -4
    done
    rm -rf "$CK"
  fi
  if in_group faults; then
    step "faults: a rank gone, ranks calling different collectives, a group destroyed under a pending call"
    expect_fail fault 120 "${MIX2[@]}" -- $TW fault
    expect_fail mismatch 120 "${MIX1[@]}" -- $TW mismatch
    job destroy-pending 120 --island a=host:2 -- $TW destroy
  fi
  if in_group groups; then
    step "groups: subgroups split from their parent, torch's store on MASTER_ADDR, a wrong token (tests/torch/group_worker.py)"
    GW="$PY $ROOT/tests/torch/group_worker.py"
    job group-split 300 --island a=host:2 --island b=host:2 -- $GW split
    job group-store 200 --island a=host:2 -- $GW store
    # the same where the job's store is on this host's own address, as on several nodes (--store ADDR:0)
    ADDR=$(hostname -I 2>/dev/null | tr ' ' '\n' | grep -E '^[0-9]+\.[0-9]+\.[0-9]+\.[0-9]+$' | grep -v '^127\.' | head -n 1)
    if [ -n "$ADDR" ]; then
      TESSERA_TOKEN=$(od -An -tx1 -N16 /dev/urandom | tr -d ' \n') job group-store-addr 200 --store "$ADDR:0" \
        --island a=host:2 -- $GW store
    else
      echo "group-store-addr: SKIPPED: this host has no non-loopback IPv4 address"
    fi
    job group-token 200 --island a=host:2 -- $GW token
  fi
  if in_group init; then
    step "init_process_group without tessera run: env://, tcp://, file://, torchrun (tests/torch/init_worker.py)"
    # With a GPU, the same ranks with CUDA hidden: a CUDA build of torch on a host without a usable GPU.
    HIDE=(); ((NGPU > 0)) && HIDE=(env CUDA_VISIBLE_DEVICES=)
    for m in env tcp file; do
      plain "init-$m" 150 "${HIDE[@]}" $IW launch $m 2
    done
    plain init-file-3 150 "${HIDE[@]}" $IW launch file 3
    UNSET=(); for v in $(compgen -e | grep '^TESSERA_'); do UNSET+=(-u "$v"); done  # torchrun's ranks: no TESSERA_*
    plain init-torchrun 150 env "${UNSET[@]}" "${HIDE[@]}" "$PY" -m torch.distributed.run --standalone \
      --nproc-per-node 2 "$ROOT/tests/torch/init_worker.py" torchrun
  fi
fi

if [ "$WHAT" != bench ] && in_group npu; then
  step "npu tensors: the test device on the ACL host shim (tests/torch/npu_device), alone and beside CPU ranks"
  SHIMS=$B/tests/shims/lib
  if [ ! -f "$SHIMS/libascendcl.so" ] || [ ! -f "$SHIMS/libhccl.so" ]; then
    echo "npu: SKIPPED: no ACL/HCCL host shims in $SHIMS (build the CMake targets tessera_shim_acl, tessera_shim_hccl)"
    [ "$GROUP" = npu ] && exit 77
  elif ! NPU_EXT=$(cd "$ROOT/tests/torch" && MAX_JOBS=2 "$PY" -m npu_device "$B" 2> "$OUTDIR/torch-npu-device-build.log" | tail -1) \
       || [ ! -f "$NPU_EXT" ]; then
    tail -20 "$OUTDIR/torch-npu-device-build.log"; echo "npu: building the test device FAILED"; RC=1
  else
    echo "test device: $NPU_EXT"
    # the ranks' Tessera finds the same libascendcl.so (and libhccl.so) by soname on the library path
    export TESSERA_TEST_NPU_EXT=$NPU_EXT
    NX=(--island ascend=npu:1 --island nvidia=host:1)
    (
      export LD_LIBRARY_PATH="$SHIMS${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"  # the launcher and every rank of the group
      # npu joins the backend's device types once the test device is loaded (after the backend was registered)
      plain npu-registration 60 "$PY" "$ROOT/tests/torch/registration_test.py" --npu
      # the checkpoint library on npu tensors in one process: saved as they are, restored into npu and CPU tensors
      plain npu-ckpt-devices 120 "$PY" "$ROOT/tests/torch/ckpt_devices_test.py"
      job npu-one 300 --island ascend=npu:1 -- $W
      job npu-two-one-island 400 --island ascend=npu:2 -- $W
      job npu-cpu 400 "${NX[@]}" -- $W
      job npu-ddp 300 "${NX[@]}" -- $TW ddp
      job npu-uneven 300 "${NX[@]}" -- $TW uneven
      # a callback still running on the completion thread when the rank exits runs to its end, with and without a
      # destroyed group (the thread ended mid-call by Python's finalization aborted the process)
      for m in exit-callback destroy-callback; do
        selected "npu-$m" || continue
        job "npu-$m" 120 "${NX[@]}" -- $TW $m
        n=$(grep -c "callback ran at exit, sum 3" "$OUTDIR/torch-npu-$m.log")
        [ "$n" = 2 ] || { echo "npu-$m: FAILED: $n of 2 ranks' callbacks ran to their end"; RC=1; }
      done
      job npu-fork-exit 120 "${NX[@]}" -- $TW fork-exit
      NK=$(mktemp -d /tmp/tsr-npu-ckpt-XXXXXX)
      job npu-ckpt-save 300 "${NX[@]}" -- $CW ddp-save $NK/mixed
      job npu-ckpt-cpu-load 300 --island nvidia=host:2 -- $CW ddp-load $NK/mixed
      rm -rf "$NK"
      exit $RC
    ) || RC=1
    # With a GPU: the same test device and ranks on the CUDA-backed ACL/HCCL shims (tests/shims/cuda: the ABI on
    # cudart and NCCL, so real device memory and streams; the extension links libascendcl.so by soname with a
    # RUNPATH, which LD_LIBRARY_PATH overrides — checked first), an npu rank beside a CPU rank and beside a CUDA
    # rank and a CPU rank. Two npu ranks in one island need two GPUs there (HCCL runs on NCCL).
    CSHIMS=$B/tests/shims/cuda/lib
    if ((NGPU > 0)) && [ -f "$CSHIMS/libascendcl.so" ]; then
      step "npu tensors on the CUDA-backed ACL/HCCL shims ($CSHIMS)"
      (
        export LD_LIBRARY_PATH="$CSHIMS${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
        plain npu-cudashim-loaded 60 "$PY" -c "
import sys; sys.path.insert(0, '$ROOT/tests/torch'); import torch, npu_device; npu_device.load()
m = [l.split()[-1] for l in open('/proc/self/maps') if 'libascendcl' in l]
print('libascendcl.so mapped from', sorted(set(m)))
sys.exit(0 if m and all(p.startswith('$CSHIMS') for p in m) else 1)"
        job npu-cudashim-one 300 --island ascend=npu:1 -- $W
        job npu-cudashim-cpu 400 "${NX[@]}" -- $W
        job npu-cudashim-cuda-cpu 400 --island ascend=npu:1 --island nvidia=cuda:1 --island x86=host:1 -- $W
        job npu-cudashim-ddp 300 "${NX[@]}" -- $TW ddp
        exit $RC
      ) || RC=1
    fi
  fi
fi

if [ "$WHAT" != bench ] && in_group stacks; then
  step "the seed's stacks on two CPU islands: DeepSpeed ZeRO-3 (tests/torch/deepspeed_worker.py), Hugging Face Trainer"
  if ! (cd /tmp && "$PY" -c 'import deepspeed, transformers, accelerate') > "$OUTDIR/torch-stacks-import.log" 2>&1; then
    echo "stacks: SKIPPED: $PY cannot import deepspeed, transformers and accelerate ($(tail -1 "$OUTDIR/torch-stacks-import.log"));"
    echo "  scripts/install-deps.sh puts them in .venv; on a GPU machine scripts/deepspeed-experiment.sh carries them"
    [ "$GROUP" = stacks ] && exit 77
  else
    DW="$PY $ROOT/tests/torch/deepspeed_worker.py"
    H2=(--island ascend=host:1 --island nvidia=host:1)
    ST=$(mktemp -d /tmp/tsr-stacks-XXXXXX)
    # gloo first, then tessera checked against it (--expect: the same losses and parameters, bit for bit)
    job ds-zero3-gloo 300 "${H2[@]}" -- $DW zero3 --backend gloo --log "$ST/zero3-gloo.json"
    job ds-zero3 300 "${H2[@]}" -- $DW zero3 --expect "$ST/zero3-gloo.json"
    job hf-trainer 300 "${H2[@]}" -- "$PY" "$ROOT/tests/torch/hf_trainer_worker.py" --steps 6 --ckpt-dir "$ST/hf" --ckpt-every 3
    rm -rf "$ST"
  fi
fi

if [ "$WHAT" != tests ] && [ -f "$ROOT/bench/torch/ddp_bench.py" ]; then
  step "benchmarks (bench/torch)"
  ROWS=$OUTDIR/torch-bench.jsonl; : > "$ROWS"
  REPS=$(seq "${TCHK_BENCH_REPS:-3}")
  for rep in $REPS; do
    for be in nccl tessera; do
      timeout 300 "$T" run --island nvidia=cuda:1 -- "$PY" "$ROOT/bench/torch/ddp_bench.py" --backend $be \
        >> "$OUTDIR/torch-bench.log" 2>&1 || echo "ddp_bench $be rep $rep failed"
    done
  done
  # torch's synchronous calls against the C API one call at a time (--batch 1), and torch's async calls
  # waited together against the C API's batch of 5: like for like (docs/benchmarks.md, "PyTorch")
  for rep in $REPS; do
    for mode in "" --async; do
      timeout 300 "$T" run --island ascend=cuda:1 --island nvidia=cuda:1 -- "$PY" "$ROOT/bench/torch/allreduce_bench.py" \
        $mode >> "$OUTDIR/torch-bench.log" 2>&1 || echo "allreduce_bench $mode rep $rep failed"
    done
    # the C API on device memory, same layout, sizes and timing (`tessera bench`: CUDA ranks on device memory)
    for batch in 1 5; do
      timeout 300 "$T" run --island ascend=cuda:1 --island nvidia=cuda:1 -- "$T" bench allreduce \
        --sizes 64M,256M --iters 5 --batch $batch --warmup 2 --op avg --in-place --json - \
        >> "$OUTDIR/torch-bench.log" 2>&1 || echo "tessera bench --batch $batch rep $rep failed"
    done
  done
  # TCHK_TRACE=1: one async torch run and one C API --batch 5 run with the bridge's per-job trace
  # (TESSERA_DEVICE_TRACE: submission, worker start, run end, copies end), to see where torch's calls lose time
  if [ -n "${TCHK_TRACE:-}" ]; then
    TESSERA_DEVICE_TRACE=$OUTDIR/trace-torch timeout 300 "$T" run --island ascend=cuda:1 --island nvidia=cuda:1 -- \
      "$PY" "$ROOT/bench/torch/allreduce_bench.py" --async --sizes 64M --rounds 3 --phases 8 >> "$OUTDIR/torch-bench.log" 2>&1
    TESSERA_DEVICE_TRACE=$OUTDIR/trace-capi timeout 300 "$T" run --island ascend=cuda:1 --island nvidia=cuda:1 -- \
      "$T" bench allreduce --sizes 64M --iters 3 --batch 5 --warmup 2 --op avg --in-place >> "$OUTDIR/torch-bench.log" 2>&1
    ls "$OUTDIR"/trace-* 2>/dev/null
  fi
  # torch.distributed.checkpoint: FileSystemWriter/Reader against TesseraWriter/Reader, one process, ~2 GiB state
  # (bench/torch/dcp_bench.py; DCP_BENCH_DIR picks the disk). Its JSON rows join the others; its table goes to
  # torch-dcp-bench.err.
  if [ -f "$ROOT/bench/torch/dcp_bench.py" ]; then
    timeout 400 "$PY" "$ROOT/bench/torch/dcp_bench.py" --dir "${DCP_BENCH_DIR:-/tmp/tsr-dcp-bench}" \
      >> "$OUTDIR/torch-bench.log" 2> "$OUTDIR/torch-dcp-bench.err" || echo "dcp_bench failed (exit $?; torch-dcp-bench.err)"
    grep -vE "^\s*$" "$OUTDIR/torch-dcp-bench.err" | tail -n 20
  fi
  grep -o '{.*}' "$OUTDIR/torch-bench.log" > "$ROWS" || true
  cat "$ROWS"
fi
# Native frames the crash handler printed (module(+offset)), resolved while the build is still here.
frames=$(grep -ohE '/[^ ()]+\.so[^ ()]*\(\+0x[0-9a-f]+\)' "$OUTDIR"/torch-*.log 2>/dev/null | sort -u)
if [ -n "$frames" ] && command -v addr2line >/dev/null; then
  while read -r f; do
    lib=${f%%(*}; off=${f##*(+}; off=${off%)}
    echo "$f -> $(addr2line -f -C -i -e "$lib" "$off" 2>/dev/null | tr '\n' ' ')"
  done <<< "$frames" > "$OUTDIR/torch-frames.txt"
  echo "native frames of crashes: torch-frames.txt ($(wc -l < "$OUTDIR/torch-frames.txt") resolved)"
fi
echo
[ $RC = 0 ] && echo "torch-check: all passed" || echo "torch-check: FAILURES (logs torch-*.log)"
exit $RC
