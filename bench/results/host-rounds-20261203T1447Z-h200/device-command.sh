#!/usr/bin/env bash
# the host allreduce's bridge in rounds (TESSERA_BRIDGE_ROUND) and larger ring steps (TESSERA_SHM_RING),
# A/B against one round and the default ring (= the engine before this change) in one lease, values interleaved.
# Ran on the tree of d9d6786 (before its clang-format; the rows say 7506d57 + uncommitted changes); TESSERA_BRIDGE_ROUND
# and the ring-scaled steps were removed after it (docs/benchmarks.md, "Fewer passes over memory did not pay").
set -o pipefail
B=$TMPDIR/bh; L=$OUT/r35; mkdir -p $L
exec > >(tee $L/run.txt) 2>&1
date -u +%FT%TZ; nproc; uptime; lscpu | grep -E "Model name|L3"
t0=$SECONDS
cmake -S . -B $B -G Ninja -DTESSERA_CUDA=OFF -DTESSERA_TESTS=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O2 -g0 -DNDEBUG" > $L/configure.log 2>&1 &&
  cmake --build $B -j 16 --target tessera_cli allreduce_bound > $L/build.log 2>&1 || { tail -30 $L/configure.log $L/build.log; exit 1; }
echo "build: $((SECONDS - t0)) s"
$B/bench/comm/allreduce_bound --islands 1,1 --sizes 64M,256M --round 0 | tee $L/bound-round0.txt
OUT=$L REPS=${REPS:-3} bench/comm/host_threads_sweep.sh $B \
  TESSERA_BRIDGE_ROUND=0 TESSERA_BRIDGE_ROUND=4M TESSERA_BRIDGE_ROUND=1M TESSERA_BRIDGE_ROUND=16M \
  TESSERA_BRIDGE_ROUND=0,TESSERA_SHM_RING=8M TESSERA_BRIDGE_ROUND=4M,TESSERA_SHM_RING=8M \
  TESSERA_BRIDGE_ROUND=0,TESSERA_HOST_THREADS=1 TESSERA_BRIDGE_ROUND=4M,TESSERA_HOST_THREADS=1
echo "done at $SECONDS s"; uptime
