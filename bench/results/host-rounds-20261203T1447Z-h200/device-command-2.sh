#!/usr/bin/env bash
# Issue #35, call 2: the larger ring (TESSERA_SHM_RING, steps and pieces scale with it) against the default, with
# and without bridge rounds, 5 interleaved reps (call 1 left the ring's gain at 64 MiB inside the spread).
set -o pipefail
B=/tmp/bh; L=$OUT/r35b; mkdir -p $L
exec > >(tee $L/run.txt) 2>&1
date -u +%FT%TZ; nproc; uptime; echo "ptrace_scope: $(cat /proc/sys/kernel/yama/ptrace_scope 2>&1)"
t0=$SECONDS
[ -x $B/tessera ] || cmake -S . -B $B -G Ninja -DTESSERA_CUDA=OFF -DTESSERA_TESTS=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O2 -g0 -DNDEBUG" > $L/configure.log 2>&1
cmake --build $B -j 16 --target tessera_cli allreduce_bound > $L/build.log 2>&1 || { tail -30 $L/build.log; exit 1; }
echo "build: $((SECONDS - t0)) s"
$B/bench/comm/allreduce_bound --islands 1,1 --sizes 64M,256M --round 0 | tee $L/bound-round0.txt
OUT=$L REPS=${REPS:-5} bench/comm/host_threads_sweep.sh $B \
  TESSERA_BRIDGE_ROUND=0 TESSERA_BRIDGE_ROUND=0,TESSERA_SHM_RING=8M TESSERA_BRIDGE_ROUND=1M,TESSERA_SHM_RING=8M \
  TESSERA_BRIDGE_ROUND=0,TESSERA_SHM_RING=16M
$B/bench/comm/allreduce_bound --islands 1,1 --sizes 64M,256M --round 0 | tee -a $L/bound-round0.txt
# the copy rate out of the caches (16 threads x 256 KiB and x 2 MiB: L2 and L3) beside the 256 MiB one above
for cb in 4194304 33554432 1073741824; do $B/bench/comm/allreduce_bound --islands 1,1 --sizes 64M --copy-bytes $cb --iters 50 | head -1; done | tee $L/copy-rates.txt
echo "done at $SECONDS s"; uptime
