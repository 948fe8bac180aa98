#!/usr/bin/env bash
# single copy between host ranks (TESSERA_SINGLE_COPY, commit "comm: single copy ..."), A/B against the
# two-copy rings in one lease, values interleaved (bench/comm/host_threads_sweep.sh), beside allreduce_bound measured
# in the same run. This first run pulled in steps of the engine's turn (1 MiB, cut in 128 KiB pieces per thread).
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
  TESSERA_SINGLE_COPY=off TESSERA_SINGLE_COPY=on TESSERA_SINGLE_COPY=on,TESSERA_HOST_THREADS=4 \
  TESSERA_SINGLE_COPY=on,TESSERA_HOST_THREADS=12
echo "done at $SECONDS s"; uptime
