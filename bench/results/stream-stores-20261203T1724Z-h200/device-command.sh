#!/usr/bin/env bash
# streaming (non-temporal) stores for a received copy into its destination when the message has at least
# TESSERA_STREAM_MIN MiB (an experiment knob; 100000: never = the engine as before), A/B in one lease, values
# interleaved, 5 rounds, beside allreduce_bound measured in the same run.
set -o pipefail
B=$TMPDIR/bh; L=$OUT/r35; mkdir -p $L
exec > >(tee $L/run.txt) 2>&1
date -u +%FT%TZ; nproc; uptime; lscpu | grep -E "Model name|L3"
t0=$SECONDS
cmake -S . -B $B -G Ninja -DTESSERA_CUDA=OFF -DTESSERA_TESTS=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O2 -g0 -DNDEBUG" > $L/configure.log 2>&1 &&
  cmake --build $B -j 16 --target tessera_cli allreduce_bound > $L/build.log 2>&1 || { tail -30 $L/configure.log $L/build.log; exit 1; }
echo "build: $((SECONDS - t0)) s"
OUT=$L REPS=${REPS:-5} bench/comm/host_threads_sweep.sh $B \
  TESSERA_STREAM_MIN=100000 TESSERA_STREAM_MIN=0 TESSERA_STREAM_MIN=64 TESSERA_STREAM_MIN=100000,TESSERA_HOST_THREADS=1 \
  TESSERA_STREAM_MIN=0,TESSERA_HOST_THREADS=1
echo "done at $SECONDS s"; uptime
