#!/usr/bin/env bash
# scripts/device-check.sh — the one command for a GPU machine: configure and build from source, run the
# GPU tests (kernels, hybrid correctness, faults), then benchmark
#   (a) hybrid allreduce busbw with `tessera bench` (CUDA ranks on device memory, as nccl-tests), 1 GPU + 3
#       host ranks and two GPU islands on one GPU, beside the pinned D2H/H2D copy bandwidth measured in the
#       same run by gpu_bench (and the same jobs with --host-memory, for context);
#       on a machine with several GPUs also two GPU islands on two GPUs, beside the copy bandwidth of
#       two GPUs copying at once;
#   (b) a single NCCL island through Tessera against NCCL called directly (one GPU; and two when there);
#   (c) numerics: error against f64 for random f16/bf16/f32 gradients, and bit-identity of all ranks;
# and the Ascend code paths on the CUDA-backed ACL/HCCL shims (scripts/cuda-shim-check.sh).
# Writes OUT/gpu-<date>.json (machine, GPU, driver, commit, all rows; each `tessera bench` job one row
# per size, naming the memory of every rank; OUT defaults to BUILD_DIR/bench-results) and prints a short table last. Usage: [TESSERA_COMMIT=<hash>] scripts/device-check.sh [BUILD_DIR]
# (TESSERA_COMMIT names the tree run where a copy of the tree has no git metadata, or stale metadata.)
# PACK=1 leaves OUT with device-check.log, gpu-<date>.json and files.tgz (everything else), for callers that take back few files.
set -uo pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
cd "$(dirname "$0")/.." || exit
ROOT=$PWD
B=${1:-build-gpu}
OUTDIR=${OUT:-$(realpath -m "$B")/bench-results}
LOG=$OUTDIR/device-check.log
mkdir -p "$OUTDIR"
exec > >(tee "$LOG") 2>&1
step() { echo; echo "=== $* ($(date +%T))"; }
COMMIT=${TESSERA_COMMIT:-$(cat COMMIT 2>/dev/null || git rev-parse HEAD 2>/dev/null || echo unknown)}

step "machine"
nvidia-smi --query-gpu=name,driver_version,memory.total,pcie.link.gen.current,pcie.link.width.current --format=csv || true
GPU=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
NGPU=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
# Jobs meant for one card pin themselves to the first GPU where there are several.
ONE_CARD=; [ "$NGPU" -gt 1 ] && ONE_CARD=CUDA_VISIBLE_DEVICES=0
DRIVER=$(nvidia-smi --query-gpu=driver_version --format=csv,noheader | head -1)
echo "commit $COMMIT; $(nproc) cores; $(uname -r); nvcc $(nvcc --version | tail -1)"
ls -l /usr/lib/x86_64-linux-gnu/libnccl.so* 2>/dev/null || ldconfig -p | grep nccl || true

# Optional: UCX from the carried libucx-cu13 wheel (scripts/ucx-wheel.sh; the GPU image has no UCX): its headers
# build the ucx transport row, its library is what the row loads (step "ucx row" below).
step "UCX: the carried libucx-cu13 wheel (optional)"
UCX_CMAKE=() UCX_LIBRARY=
if ucx_out=$(scripts/ucx-wheel.sh unpack "$ROOT/.deps/ucx" 2>&1); then
  eval "$(echo "$ucx_out" | grep -E '^UCX_(INCLUDE|LIBRARY)=')"
  UCX_CMAKE=(-DTESSERA_UCX_INCLUDE_DIR="$UCX_INCLUDE")
  echo "UCX headers $UCX_INCLUDE, library $UCX_LIBRARY"
else
  echo "SKIPPED (no ucx row in this check): $ucx_out"
fi

step "configure + build"
cmake -S . -B "$B" -G Ninja -DTESSERA_CUDA=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo "${UCX_CMAKE[@]}" > "$OUTDIR/configure.log" 2>&1 \
  || { tail -30 "$OUTDIR/configure.log"; echo "configure FAILED"; exit 1; }
grep -E "Tessera|CUDA" "$OUTDIR/configure.log" | head -5
# Only what this check runs: the library, the launcher binary and the GPU targets (other modules' tests
# are CI's business, and build on CI's compiler).
cmake --build "$B" -j "$(nproc)" --target tessera_cli gpu_test gpu_worker gpu_bench bench_gpu_test framework_gpu_test framework_gpu_worker ccl_loader_test tessera_fake_ccl allreduce_bound \
  accel_worker tessera_cuda_shim_acl tessera_cuda_shim_hccl tessera_cuda_shim_hcomm tessera_cuda_shim_nnopbase \
  tessera_cuda_shim_opapi aclnn_cuda_shim_test runtime_conformance_test tessera_runtime_stub \
  > "$OUTDIR/build.log" 2>&1 || { grep -E "error|FAILED" "$OUTDIR/build.log" | head -30; echo "build FAILED"; exit 1; }
echo "build ok"
T=$B/tessera; W=$B/tests/gpu/gpu_worker; BENCH=$B/bench/gpu/gpu_bench

step "GPU tests (ctest -L gpu), the CCL loader tests and the cuda runtime row's conformance"
TEST_RC=0
(cd "$B" && timeout 280 ctest -L gpu -E '^BenchGpu' --output-on-failure --timeout 150 > "$OUTDIR/ctest-gpu.log" 2>&1) || TEST_RC=1
# `tessera bench` on CUDA islands (tests/gpu/bench_gpu_test: dozens of short jobs, so a limit of its own).
(cd "$B" && timeout 500 ctest -R '^BenchGpu' --output-on-failure --timeout 450 >> "$OUTDIR/ctest-gpu.log" 2>&1) || TEST_RC=1
(cd "$B" && timeout 60 ctest -R CclLoader --output-on-failure >> "$OUTDIR/ctest-gpu.log" 2>&1) || TEST_RC=1
# The device-runtime table's cuda row on this GPU (tests/runtime: the typed suite every row passes, and the
# device bridge's calls); they skip on machines without a GPU, so they are asked for by name here.
# (The binary itself: ctest there does not list the typed tests.)
(cd "$B" && timeout 120 ./tests/runtime/runtime_conformance_test --gtest_filter='RuntimeConformance/cuda.*:RuntimeTable.*' \
  >> "$OUTDIR/ctest-gpu.log" 2>&1) || TEST_RC=1
grep -E '^\[  (PASSED|FAILED|SKIPPED) ' "$OUTDIR/ctest-gpu.log" | tail -3 | sed 's/^/runtime conformance (cuda row): /'
grep -E "^ *[0-9]+/[0-9]+ Test|tests passed|async:|NUMERICS" "$OUTDIR/ctest-gpu.log" | sed 's/^ *//' | cut -c1-160
[ $TEST_RC = 0 ] || { echo "GPU TESTS FAILED (log: ctest-gpu.log)"; grep -B2 -A30 "Failure\|FAIL" "$OUTDIR/ctest-gpu.log" | head -60; }

step "Ascend code paths on the CUDA-backed ACL/HCCL shims (scripts/cuda-shim-check.sh)"
OUT=$OUTDIR/cuda-shim timeout 400 scripts/cuda-shim-check.sh "$B" | grep -vE "^  \[rank" || TEST_RC=1

# The checkpoint test binary of the next two steps, built once, apart from the build above: if it fails to build,
# only these two steps are lost.
CKPT_BUILT=0
cmake --build "$B" -j "$(nproc)" --target ckpt_save_restore_test >> "$OUTDIR/build.log" 2>&1 && CKPT_BUILT=1 \
  || { TEST_RC=1; echo "ckpt_save_restore_test: build FAILED"; grep -E "error" "$OUTDIR/build.log" | tail -5; }

step "checkpoint shards read by the Hugging Face safetensors library (when this image's python has it)"
HF_RC=skip
if [ $CKPT_BUILT = 0 ]; then
  HF_RC=build-failed
elif python3 -c 'import safetensors, numpy' 2>/dev/null; then
  python3 -c 'import safetensors; print("safetensors", safetensors.__version__)'
  (cd "$B" && timeout 120 ctest -R 'SaveRestore.HfLibraryReadsShards' --output-on-failure -V > "$OUTDIR/ctest-hf.log" 2>&1) \
    && HF_RC=passed || HF_RC=FAILED
  grep -E "Passed|Failed|Skipped|SKIP" "$OUTDIR/ctest-hf.log" | head -5
else
  echo "no python3 module safetensors here"
fi
echo "HF safetensors reader: $HF_RC"

step "checkpoints of device memory: a save and restores of CUDA memory through the device-runtime table"
# SaveRestore.DeviceMemory skips without a GPU, so only here does it run; labelled ckpt, not gpu.
if [ $CKPT_BUILT = 1 ]; then
  (cd "$B" && timeout 120 ctest -R 'SaveRestore.DeviceMemory' --output-on-failure -V > "$OUTDIR/ctest-ckpt-device.log" 2>&1) \
    || TEST_RC=1
  grep -E "Passed|Failed|Skipped|SKIP" "$OUTDIR/ctest-ckpt-device.log" | head -3
fi

ROWS=$OUTDIR/rows.jsonl; : > "$ROWS"; : > "$OUTDIR/jobs.log"
run_job() {  # [JOBENV="VAR=value ..."] run_job LABEL TIMEOUT -- tessera-run args...
  local label=$1 lim=$2; shift 3
  echo "--- $label: ${JOBENV:+$JOBENV }tessera run $*"
  # shellcheck disable=SC2086
  timeout "$lim" env ${JOBENV:-} "$T" run --timeout 60s "$@" > "$OUTDIR/job.log" 2>&1; local rc=$?
  { echo "--- $label (exit $rc)"; cat "$OUTDIR/job.log"; } >> "$OUTDIR/jobs.log"
  grep -o '{.*}' "$OUTDIR/job.log" | sed "s/^{/{\"job\":\"$label\",/" | tee -a "$ROWS"
  [ $rc = 0 ] || { echo "job $label exited $rc"; tail -15 "$OUTDIR/job.log"; }
  rm -f "$OUTDIR/job.log"
}

step "bench (a): pinned copy bandwidth and hybrid allreduce"
timeout 60 "$BENCH" copy --mib 256 | sed 's/^{/{"job":"copy",/' | tee -a "$ROWS"
# Two processes copying on one card at once: two CUDA contexts, as the two GPU ranks of the one-card jobs.
env $ONE_CARD timeout 60 "$BENCH" copy --mib 256 --procs 2 | sed 's/^{/{"job":"copy",/' | tee -a "$ROWS"
[ "$NGPU" -gt 1 ] && timeout 60 "$BENCH" copy --mib 256 --gpus 2 | sed 's/^{/{"job":"copy",/' | tee -a "$ROWS"
# Where a CUDA rank's bridge is TCP its received bytes land in host memory: fold them there, or copy them
# to the GPU and fold there? (bench/results/log/2026-12-01-cpu-vector-folds.md)
timeout 120 "$BENCH" folds --mib 64 | sed 's/^{/{"job":"folds",/' | tee -a "$ROWS"
SZ=1M,16M,64M,256M
# Collectives are `tessera bench`'s (the command users run): CUDA ranks on device memory of their GPU and a
# stream of their own (--host-memory: host memory, stream NULL), host ranks on host memory. f32 avg in place;
# a sample = a barrier, 5 calls back to back and a wait for the stream; the slowest rank's time per call,
# median of 5 samples (what gpu_bench allreduce measured before); one JSON line per job on stdout.
AR=("$T" bench allreduce --iters 5 --batch 5 --warmup 2 --op avg --in-place --json -)
run_job gpu1+host3 150 -- --island nvidia=cuda:1 --island ascend=host:3 -- "${AR[@]}" --sizes $SZ
run_job gpu1+host3-hostmem 150 -- --island nvidia=cuda:1 --island ascend=host:3 -- "${AR[@]}" --sizes $SZ --host-memory
run_job gpu1+host3-bf16 90 -- --island nvidia=cuda:1 --island ascend=host:3 -- "${AR[@]}" --sizes 64M,256M --dtype bf16
JOBENV=$ONE_CARD run_job gpu+gpu-one-card 150 -- --island nvidia=cuda:1 --island other=cuda:1 -- "${AR[@]}" --sizes $SZ
JOBENV=$ONE_CARD run_job gpu+gpu-one-card-hostmem 150 -- --island nvidia=cuda:1 --island other=cuda:1 -- "${AR[@]}" --sizes $SZ --host-memory
# The same jobs on the previous bridge (pinned staging + host engine), side by side in this run.
JOBENV=TESSERA_DEVICE_BRIDGE=staged run_job gpu1+host3-staged 150 -- --island nvidia=cuda:1 --island ascend=host:3 -- "${AR[@]}" --sizes 64M,256M
JOBENV="$ONE_CARD TESSERA_DEVICE_BRIDGE=staged" run_job gpu+gpu-one-card-staged 150 -- --island nvidia=cuda:1 --island other=cuda:1 -- "${AR[@]}" --sizes 64M,256M
# Ring and copy size: the device bridge pipelines through the rings, so they bound the bytes in flight
# (defaults TESSERA_DEVICE_RING=64M, TESSERA_DEVICE_PIECE=8M; here a quarter and half of that).
JOBENV="$ONE_CARD TESSERA_DEVICE_RING=16M TESSERA_DEVICE_PIECE=4M" run_job gpu+gpu-one-card-ring16M 150 -- --island nvidia=cuda:1 --island other=cuda:1 -- "${AR[@]}" --sizes 64M,256M
JOBENV="$ONE_CARD TESSERA_DEVICE_PIECE=4M" run_job gpu+gpu-one-card-piece4M 150 -- --island nvidia=cuda:1 --island other=cuda:1 -- "${AR[@]}" --sizes 64M,256M
if [ "$NGPU" -gt 1 ]; then
  # Each island on its own GPU and PCIe link: the layout of a real two-vendor job.
  run_job gpu+gpu-two-cards 150 -- --island nvidia=cuda:1 --island other=cuda:1 -- "${AR[@]}" --sizes 16M,64M,256M
  JOBENV="TESSERA_DEVICE_PIECE=4M" run_job gpu+gpu-two-cards-piece4M 150 -- --island nvidia=cuda:1 --island other=cuda:1 -- "${AR[@]}" --sizes 64M,256M
fi
# One GPU and ONE host rank: the host side is a single process (no island phases), the bridge alone.
run_job gpu1+host1 150 -- --island nvidia=cuda:1 --island ascend=host:1 -- "${AR[@]}" --sizes 64M,256M
run_job host1+host1 150 -- --island a=host:1 --island b=host:1 -- "${AR[@]}" --sizes 64M,256M
# The bridge over TCP (as between hosts; here on this host, TESSERA_BRIDGE=tcp): the CUDA rank's received
# bytes folded on the host (pinned staging: `auto`'s choice over TCP) or on the GPU through TCP links
# relayed into host rings (TESSERA_DEVICE_BRIDGE=device), beside two host ranks over the same TCP.
JOBENV="TESSERA_BRIDGE=tcp" run_job gpu1+host1-tcp-staged 150 -- --island nvidia=cuda:1 --island ascend=host:1 -- "${AR[@]}" --sizes 64M,256M
JOBENV="TESSERA_BRIDGE=tcp TESSERA_DEVICE_BRIDGE=device" run_job gpu1+host1-tcp-device 150 -- --island nvidia=cuda:1 --island ascend=host:1 -- "${AR[@]}" --sizes 64M,256M
JOBENV="TESSERA_BRIDGE=tcp" run_job host1+host1-tcp 150 -- --island a=host:1 --island b=host:1 -- "${AR[@]}" --sizes 64M,256M

step "bench (b): one NCCL island through Tessera vs NCCL directly"
run_job single-island 120 -- --island nvidia=cuda:1 -- "$BENCH" direct --sizes 1M,4M,16M,64M,256M --iters 100 --rounds 15
# 1-4 MiB on one rank are enqueue-bound (~6 us a call) and noisy run to run: three more runs there.
for i in 2 3 4; do
  run_job single-island-small-$i 60 -- --island nvidia=cuda:1 -- "$BENCH" direct --sizes 1M,4M --iters 100 --rounds 15 > /dev/null
done
# NCCL called directly on one rank: a one-rank avg leaves elements unwritten before NCCL 2.29.7
# (NVIDIA/nccl#1950); Tessera sends avg as sum there (GpuSingleIsland.* check Tessera's results).
env $ONE_CARD nvcc -O2 -std=c++17 -o "$B/one_rank_avg" bench/gpu/one_rank_avg.cu -lnccl > "$OUTDIR/one_rank_avg.log" 2>&1 \
  && env $ONE_CARD timeout 60 "$B/one_rank_avg" >> "$OUTDIR/one_rank_avg.log" 2>&1
grep '^one_rank_avg' "$OUTDIR/one_rank_avg.log" || tail -5 "$OUTDIR/one_rank_avg.log"
if [ "$NGPU" -gt 1 ]; then
  run_job single-island-2gpu 120 -- --island nvidia=cuda:2 -- "$BENCH" direct --sizes 1M,4M,16M,64M,256M --iters 100 --rounds 15
  # NCCL called directly: its first collective waits for the caller's stream to drain; Tessera makes that
  # call itself at init (GpuMultiGpu.TwoGpuNcclIslandReturnsAtOnce checks the result).
  nvcc -O2 -std=c++17 -o "$B/first_call" bench/gpu/first_call.cu -lnccl > "$OUTDIR/first_call.log" 2>&1 \
    && for a in "--warm none" "--warm f32 --first f16"; do timeout 60 "$B/first_call" $a; done | tee -a "$OUTDIR/first_call.log"
fi

step "bench (c): numerics, random gradients (4,000,037 elements)"
run_job numerics-gpu1+host3 150 -- --island nvidia=cuda:1 --island ascend=host:3 -- "$W" numerics --count 4000037
run_job numerics-gpu+gpu 150 -- --island nvidia=cuda:1 --island other=cuda:1 -- "$W" numerics --count 4000037

step "ucx row with the carried UCX (libucx-cu13): the channel suite, CUDA ranks across ucx, device memory through it"
if [ -z "$UCX_LIBRARY" ]; then
  echo "SKIPPED: the libucx-cu13 wheel is absent (scripts/ucx-wheel.sh fetches it into .deps/ucx-wheel; carry that)"
elif ! cmake --build "$B" -j "$(nproc)" --target comm_channel_suite_test comm_ucx_memory_test >> "$OUTDIR/build.log" 2>&1; then
  TEST_RC=1; echo "ucx tests: build FAILED"; grep -E "error" "$OUTDIR/build.log" | tail -5
else
  # The memory types this UCX registers (CUDA where its cuda transports load) and its transports here: no RDMA
  # NIC on this machine, so UCX moves bytes over TCP (and cuda_copy for device memory), nothing over RDMA.
  LD_LIBRARY_PATH=$(dirname "$UCX_LIBRARY") "$(dirname "$UCX_LIBRARY")/../bin/ucx_info" -v 2>&1 | head -2
  LD_LIBRARY_PATH=$(dirname "$UCX_LIBRARY") "$(dirname "$UCX_LIBRARY")/../bin/ucx_info" -d 2>&1 | grep -E "Transport:|Memory domain:" | sort | uniq -c | head -20
  # What is registered as what: CUDA memory as CUDA where this UCX reports CUDA support (UcxMemory.*).
  (cd "$B" && TESSERA_UCX_LIBRARY=$UCX_LIBRARY timeout 60 ./tests/comm/comm_ucx_memory_test > "$OUTDIR/ucx-memory.log" 2>&1) || TEST_RC=1
  grep -E '^\[  (PASSED|FAILED|SKIPPED) ' "$OUTDIR/ucx-memory.log" | sed 's/^/ucx memory choice: /'
  (cd "$B" && TESSERA_UCX_LIBRARY=$UCX_LIBRARY UCX_TLS=tcp timeout 200 ./tests/comm/comm_channel_suite_test \
    --gtest_filter='ChannelSuite/ucx.*' > "$OUTDIR/ucx-suite.log" 2>&1) || TEST_RC=1
  grep -E '^\[  (PASSED|FAILED|SKIPPED) ' "$OUTDIR/ucx-suite.log" | sed 's/^/ucx channel suite (UCX_TLS=tcp): /'
  # A CUDA rank and a host rank, the bridge forced onto ucx, every element checked (functional, over TCP).
  JOBENV="TESSERA_TRANSPORTS=ucx TESSERA_UCX_LIBRARY=$UCX_LIBRARY UCX_TLS=tcp,cuda_copy" run_job "gpu1+host1-ucx" 120 -- \
    --island nvidia=cuda:1 --island ascend=host:1 -- "$T" bench allreduce --sizes 1M,64M --dtype f32 --iters 5 --warmup 1 --check --json - > /dev/null
  # Two CUDA islands across ucx with the device bridge on: each link sends from and receives into device memory
  # where this UCX takes CUDA memory, else is relayed through host rings (UCX_TLS=tcp,cuda_copy; GpuUcx.* prints which).
  (cd "$B" && TESSERA_UCX_LIBRARY=$UCX_LIBRARY timeout 320 ./tests/gpu/gpu_test --gtest_filter='GpuUcx.*' \
    > "$OUTDIR/ucx-gpu.log" 2>&1) || TEST_RC=1
  grep -E '^\[  (PASSED|FAILED|SKIPPED) |skipped: |^UCX ' "$OUTDIR/ucx-gpu.log" | cut -c1-200 | sed 's/^/ucx device memory: /'
fi

step "bench (d): the host engine on several threads beside the bound of its layout"
# The bound: this box's memcpy bandwidth on every usable CPU x the memory traffic the allreduce of the layout
# must make (bench/comm/allreduce_bound, its first lines give the model), measured at the start of every rep (the
# box's memcpy moved 39 to 64 GB/s in calls minutes apart: the ratio is to the median). Each job REPS times,
# interleaved with the same job on one thread (TESSERA_HOST_THREADS=1: the engine before the pool) so load hits both.
for rep in $(seq "${HOST_REPS:-3}"); do
  "$B/bench/comm/allreduce_bound" --islands 1,1 --sizes 64M,256M > "$OUTDIR/bound-1-1-r$rep.txt"
  grep '^# memcpy' "$OUTDIR/bound-1-1-r$rep.txt" | sed "s/^# /rep $rep: /"
  for t in auto 1; do
    JOBENV="TESSERA_HOST_THREADS=$t" run_job "host1+host1-threads-$t-r$rep" 90 -- --island a=host:1 --island b=host:1 -- "${AR[@]}" --sizes 64M,256M > /dev/null
    JOBENV="TESSERA_HOST_THREADS=$t" run_job "gpu1+host3-threads-$t-r$rep" 90 -- --island nvidia=cuda:1 --island ascend=host:3 -- "${AR[@]}" --sizes 64M,256M > /dev/null
  done
done

step "results"
STAMP=$(date -u +%Y%m%dT%H%M%SZ)
RES=$OUTDIR/gpu-$STAMP.json
python3 - "$ROWS" "$RES" "$GPU" "$DRIVER" "$COMMIT" "$TEST_RC" <<'PY'
import json, sys, socket, os, datetime
rows_path, res, gpu, driver, commit, test_rc = sys.argv[1:]
rows = []
for line in open(rows_path):
    line = line.strip()
    try: rows.append(json.loads(line))
    except Exception: pass
# `tessera bench --json -` prints one document per job: one row per size, with the layout it ran on. link =
# the bytes each GPU rank moves over its link in EACH direction: a GPU rank owning its island's whole buffer
# sends (k-1)/k of it to the other islands' owners and receives as much (bridge reduce), then the same again
# for the reduced parts (bridge share): 2(k-1)/k of the buffer each way, summed over the job's GPU ranks
# (elements of the wire type; 16-bit partials of a multi-rank host island travel as f32 and are not counted).
def flatten(docs):
    out = []
    for d in docs:
        if "collective" not in d or "rows" not in d:
            out.append(d)
            continue
        ranks = d.get("ranks", [])
        gpu_ranks = sum(1 for x in ranks if x["device"].startswith("cuda"))
        k = len({x["island"] for x in ranks}) or 1
        for row in d["rows"]:
            t = row["time_us"]
            link = gpu_ranks * 2.0 * (k - 1) / k * row["bytes"] / (t * 1e-6) / 1e9 if t > 0 else float("nan")
            out.append({"job": d.get("job", "?"), "bench": d["collective"], "tool": "tessera bench",
                        "ranks": d["world_size"], "islands": k, "gpu_ranks": gpu_ranks,
                        # records made before the field was named device_bridge call it cuda_bridge
                        "device_bridge": d.get("device_bridge", d.get("cuda_bridge", "auto")),
                        "dtype": d["dtype"], "op": d["op"],
                        "in_place": d.get("in_place"), "iters": d.get("iters"), "batch": d.get("batch"),
                        "memory": d.get("memory"), "memory_by_rank": [x["memory"] for x in ranks],
                        "gpu_memory": any(x["memory"] == "device" for x in ranks), "bytes": row["bytes"],
                        "time_us": t, "algbw_GBps": row["algbw_GBps"], "busbw_GBps": row["busbw_GBps"],
                        "link_GBps_each_way": link, "comm": d.get("comm")})
    return out
rows = flatten(rows)
out = {"machine": {"host": socket.gethostname(), "cores": os.cpu_count(), "gpu": gpu, "driver": driver},
       "commit": commit, "date": datetime.datetime.now(datetime.timezone.utc).isoformat(),
       "env": {"NCCL_NVLS_ENABLE": os.environ.get("NCCL_NVLS_ENABLE")},
       "gpu_tests_passed": test_rc == "0", "rows": rows}
json.dump(out, open(res, "w"), indent=1)
def copy_row(gpus, procs):
    return [r for r in rows if r.get("bench") == "pinned_copy" and r.get("gpus", 1) == gpus and r.get("procs", 1) == procs]
copy, copy2, copy1p2 = copy_row(1, 1), copy_row(2, 1), copy_row(1, 2)
bidir = copy[0]["bidir_each_GBps"] if copy else float("nan")
print(f"GPU {gpu}, driver {driver}, commit {commit[:12]}; GPU tests {'PASSED' if test_rc == '0' else 'FAILED'}")
if copy: print(f"pinned copy 256 MiB: D2H {copy[0]['d2h_GBps']:.1f} GB/s, H2D {copy[0]['h2d_GBps']:.1f} GB/s, both at once {copy[0]['bidir_each_GBps']:.1f} GB/s each")
if copy1p2: print(f"pinned copy 256 MiB, 2 processes on one GPU, both together: D2H {copy1p2[0]['d2h_GBps']:.1f} GB/s, H2D {copy1p2[0]['h2d_GBps']:.1f} GB/s, both at once {copy1p2[0]['bidir_each_GBps']:.1f} GB/s each")
if copy2: print(f"pinned copy 256 MiB, 2 GPUs at once, per GPU: D2H {copy2[0]['d2h_GBps']:.1f} GB/s, H2D {copy2[0]['h2d_GBps']:.1f} GB/s, both at once {copy2[0]['bidir_each_GBps']:.1f} GB/s each")
# staging efficiency: the same job with the GPU rank(s) on host memory, over the job on device memory
hostmem = {(r["job"].replace("-hostmem", ""), r["bytes"], r["dtype"]): r["time_us"] for r in rows
           if r.get("bench") == "allreduce" and not r["gpu_memory"]}
# link: bytes each GPU rank moves over the PCIe link in each direction, summed over the GPU ranks on one
# card (per card for the two-card jobs), per second — against the copy bandwidth with both directions busy
# at once (what the bridge does), measured with as many GPUs copying at once as the job uses.
# "same layout": the copy with as many GPUs and processes (CUDA contexts) as the job has.
print(f"{'job':28} {'size':>6} {'dtype':>8} {'memory':>11} {'time us':>10} {'algbw':>7} {'busbw':>7} {'link':>7} {'/bidir copy':>11} {'/same layout':>12} {'host/dev time':>13}")
for r in rows:
    if r.get("bench") == "allreduce" and "-threads-" not in r["job"]:
        mib = r["bytes"] >> 20
        h = hostmem.get((r["job"], r["bytes"], r["dtype"])) if r["gpu_memory"] else None
        eff = f"{h / r['time_us']:>12.0%}" if h else f"{'':>13}"
        link = r.get("link_GBps_each_way", float("nan")) if r["gpu_memory"] else float("nan")
        ref = bidir
        if "two-cards" in r["job"]:
            link /= 2
            ref = copy2[0]["bidir_each_GBps"] if copy2 else float("nan")
        elif "one-card" in r["job"]:
            ref = copy1p2[0]["bidir_each_GBps"] if copy1p2 else float("nan")
        print(f"{r['job']:28} {str(mib)+'M':>6} {r['dtype']:>8} {r.get('memory') or '':>11} {r['time_us']:>10.0f} {r['algbw_GBps']:>7.2f} {r['busbw_GBps']:>7.2f} {link:>7.2f} {link/bidir:>11.0%} {link/ref:>12.0%} {eff}")
for r in rows:
    if r.get("bench") == "single_island" and not r["job"].startswith("single-island-small"):
        print(f"single island ({r['ranks']} GPU) {r['bytes']>>20:>4}M: tessera {r['tessera_us']:.2f} us, nccl {r['nccl_us']:.2f} us, overhead {r['overhead_pct']:+.2f}%; a second nccl communicator {r['nccl2_us']:.2f} us, {r['nccl_vs_nccl_pct']:+.2f}%; nccl on tessera's communicator {r['nccl_on_tessera_comm_pct']:+.2f}%; the device rank's full path {r['full_path_pct']:+.2f}% ({r['ccl']})")
        q = r["enqueue_us"]
        print(f"    host time per call: tessera {q['tessera']:.3f} us, nccl {q['nccl']:.3f}, nccl2 {q['nccl2']:.3f}, nccl on tessera's comm {q['nccl_on_tessera_comm']:.3f}, full path {q['tessera_full_path']:.3f}")
# Every run of the same world and size together: the median over runs of each run's median.
from statistics import median
groups = {}
for r in rows:
    if r.get("bench") == "single_island":
        groups.setdefault((r["ranks"], r["bytes"]), []).append(r)
for (ranks, nbytes), rs in sorted(groups.items()):
    if len(rs) > 1:
        med = lambda k: median(x[k] for x in rs)
        runs = ", ".join(f"{x['overhead_pct']:+.1f}" for x in rs)
        print(f"single island ({ranks} GPU) {nbytes>>20:>4}M over {len(rs)} runs: overhead {med('overhead_pct'):+.2f}% "
              f"(runs {runs}); nccl vs nccl {med('nccl_vs_nccl_pct'):+.2f}%; the device rank's full path {med('full_path_pct'):+.2f}%")
# bench (d): median (min-max) busbw over the reps of each host-threads job, beside the bound of its layout
import glob, re
bounds = {}  # (layout, bytes) -> the bound of each rep (bound-<layout>-r<rep>.txt)
for path in glob.glob(os.path.join(os.path.dirname(rows_path), "bound-*-r*.txt")):
    layout = re.match(r"bound-(.+)-r\d+\.txt$", os.path.basename(path)).group(1)
    for line in open(path):
        f = line.split()
        if f and not line.startswith("#") and len(f) >= 6:
            bounds.setdefault((layout, int(f[0])), []).append(float(f[4]))
bound = {k: median(v) for k, v in bounds.items()}
ht = {}
for r in rows:
    m = re.match(r"(.+)-threads-(\w+)-r\d+$", r.get("job", ""))
    if r.get("bench") == "allreduce" and m:
        ht.setdefault((m.group(1), r["bytes"]), {}).setdefault(m.group(2), []).append(r["busbw_GBps"])
if ht:
    print(f"host engine threads (TESSERA_HOST_THREADS), f32 avg busbw GB/s, median (min-max) over reps; {os.cpu_count()} cores")
    print(f"{'job':14} {'size':>6} {'auto':>20} {'1 thread':>20} {'auto/1':>7} {'bound':>7} {'auto/bound':>10}")
    fmt = lambda v: f"{median(v):.2f} ({min(v):.2f}-{max(v):.2f})" if v else "-"
    for (job, nbytes), by in sorted(ht.items()):
        a, o = by.get("auto", []), by.get("1", [])
        b = bound.get((job.replace("host1+host1", "1-1"), nbytes))
        ratio = f"{median(a) / median(o):.2f}" if a and o else "-"
        vs = f"{median(a) / b:.0%}" if a and b else "-"
        print(f"{job:14} {str(nbytes >> 20) + 'M':>6} {fmt(a):>20} {fmt(o):>20} {ratio:>7} {f'{b:.2f}' if b else '-':>7} {vs:>10}")
    for (layout, nbytes), v in sorted(bounds.items()):
        print(f"bound {layout} {nbytes >> 20}M: median of {len(v)} reps {median(v):.2f} ({min(v):.2f}-{max(v):.2f}) GB/s busbw")
for r in rows:
    if r.get("bench") == "numerics":
        print(f"numerics {r['job']:24} {r['dtype']:>8}: rel err (L2) {r['rel_err_l2']:.2e} vs one rounding {r['one_rounding_rel_err_l2']:.2e}; max rel {r['max_rel_err']:.2e}; beyond bound {r['beyond_one_rounding']}; bit-identical {r['bit_identical']}")
PY
[ -f "$OUTDIR/first_call.log" ] && grep '^first_call' "$OUTDIR/first_call.log"
grep -h '^one_rank_avg' "$OUTDIR/one_rank_avg.log" 2>/dev/null
cp "$RES" "$OUTDIR/" 2>/dev/null || true
echo "wrote $RES"
# PACK=1: every other file under OUT into one archive (for a machine whose caller takes back only a few files).
if [ "${PACK:-0}" = 1 ]; then
  (cd "$OUTDIR" && find . -mindepth 1 -maxdepth 1 ! -name device-check.log ! -name 'gpu-*.json' ! -name files.tgz -printf '%P\n' \
    | tar czf files.tgz --remove-files -T -) && echo "packed the other files into $OUTDIR/files.tgz"
fi
exit $TEST_RC
