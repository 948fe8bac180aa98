#!/usr/bin/env bash
# where the host engine's time goes on 1+1 host ranks (TESSERA_ENGINE_PROFILE, a temporary
# instrumentation: per rank, wall time in each kind of step and the pool's fork/join efficiency), 64 and 256 MiB
# separately, 8 threads (auto) and 1, beside allreduce_bound.
set -o pipefail
B=$TMPDIR/bh; L=$OUT/r35; mkdir -p $L
exec > >(tee $L/run.txt) 2>&1
date -u +%FT%TZ; nproc; uptime
t0=$SECONDS
cmake -S . -B $B -G Ninja -DTESSERA_CUDA=OFF -DTESSERA_TESTS=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O2 -g0 -DNDEBUG" > $L/configure.log 2>&1 &&
  cmake --build $B -j 16 --target tessera_cli allreduce_bound > $L/build.log 2>&1 || { tail -30 $L/configure.log $L/build.log; exit 1; }
echo "build: $((SECONDS - t0)) s"
$B/bench/comm/allreduce_bound --islands 1,1 --sizes 64M,256M
for rep in 1 2; do
  for size in 64M 256M; do
    for t in auto 1; do
      echo "--- rep $rep size $size threads $t"
      TESSERA_ENGINE_PROFILE=1 TESSERA_HOST_THREADS=$t timeout 120 $B/tessera run --timeout 60s --island a=host:1 --island b=host:1 -- \
        $B/tessera bench allreduce --iters 5 --batch 5 --warmup 2 --op avg --in-place --sizes $size 2>&1 | grep -E "PROFILE|^\[rank 0 a\] +[0-9]"
    done
  done
done
echo "done at $SECONDS s"; uptime
