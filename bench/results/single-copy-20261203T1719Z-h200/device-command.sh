#!/usr/bin/env bash
# single copy, second run: pulls take a whole descriptor at once (each thread a contiguous stripe),
# TESSERA_PULL_STEP=N (MiB, an experiment knob) caps them; then cma_probe.cpp (here): process_vm_readv against
# memcpy on 8 and 16 threads of one process, into memory and into a 64 KiB buffer per thread.
set -o pipefail
B=$TMPDIR/bh; L=$OUT/r35; mkdir -p $L
exec > >(tee $L/run.txt) 2>&1
date -u +%FT%TZ; nproc; uptime; lscpu | grep -E "Model name|L3"
t0=$SECONDS
cmake -S . -B $B -G Ninja -DTESSERA_CUDA=OFF -DTESSERA_TESTS=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O2 -g0 -DNDEBUG" > $L/configure.log 2>&1 &&
  cmake --build $B -j 16 --target tessera_cli allreduce_bound > $L/build.log 2>&1 || { tail -30 $L/configure.log $L/build.log; exit 1; }
echo "build: $((SECONDS - t0)) s"
OUT=$L REPS=${REPS:-3} bench/comm/host_threads_sweep.sh $B \
  TESSERA_SINGLE_COPY=off TESSERA_SINGLE_COPY=on TESSERA_SINGLE_COPY=on,TESSERA_PULL_STEP=1 TESSERA_SINGLE_COPY=on,TESSERA_PULL_STEP=8 \
  TESSERA_SINGLE_COPY=on,TESSERA_HOST_THREADS=12
g++ -O2 -pthread bench/results/single-copy-20261203T1719Z-h200/cma_probe.cpp -o $TMPDIR/cma_probe 2>/dev/null && $TMPDIR/cma_probe 8 16
echo "done at $SECONDS s"; uptime
