#!/usr/bin/env bash
# parts per thread in the pool's fork/join (TESSERA_PIECE_SPLIT parts per thread, TESSERA_PIECE_MIN KiB
# the smallest; temporary knobs), A/B interleaved, plus one profiled 256 MiB run of each.
set -o pipefail
B=$TMPDIR/bh; L=$OUT/r35; mkdir -p $L
exec > >(tee $L/run.txt) 2>&1
date -u +%FT%TZ; nproc; uptime
t0=$SECONDS
cmake -S . -B $B -G Ninja -DTESSERA_CUDA=OFF -DTESSERA_TESTS=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O2 -g0 -DNDEBUG" > $L/configure.log 2>&1 &&
  cmake --build $B -j 16 --target tessera_cli allreduce_bound > $L/build.log 2>&1 || { tail -30 $L/configure.log $L/build.log; exit 1; }
echo "build: $((SECONDS - t0)) s"
OUT=$L REPS=${REPS:-3} bench/comm/host_threads_sweep.sh $B \
  TESSERA_PIECE_SPLIT=1 TESSERA_PIECE_SPLIT=4,TESSERA_PIECE_MIN=32 TESSERA_PIECE_SPLIT=8,TESSERA_PIECE_MIN=16
for v in "TESSERA_PIECE_SPLIT=1" "TESSERA_PIECE_SPLIT=4 TESSERA_PIECE_MIN=32"; do
  echo "--- profiled 256M $v"
  env $v TESSERA_ENGINE_PROFILE=1 timeout 120 $B/tessera run --timeout 60s --island a=host:1 --island b=host:1 -- \
    $B/tessera bench allreduce --iters 5 --batch 5 --warmup 2 --op avg --in-place --sizes 256M 2>&1 | grep -E "PROFILE pid|^\[rank 0 a\] +[0-9]"
done
echo "done at $SECONDS s"; uptime
