#!/usr/bin/env bash
# (before/engine.cpp and before/engine.hpp were `git show 3b50ee2:src/comm/engine.cpp` and `...engine.hpp`: the engine before e2a0085.)
# the turn's copies and folds in one join, guided parts (this tree) against 3b50ee2 (one join per copy
# or fold, 4 equal parts a thread), interleaved A/B, plus this tree with 12 threads a rank.
set -o pipefail
D=bench/results/host-join-h200
L=$OUT/r35; mkdir -p $L
exec > >(tee $L/run.txt) 2>&1
date -u +%FT%TZ; nproc; uptime
rm -rf $TMPDIR/old-src && mkdir -p $TMPDIR/old-src && tar --exclude='./build*' -cf - . | tar -xf - -C $TMPDIR/old-src
cp $D/before/engine.cpp $D/before/engine.hpp $TMPDIR/old-src/src/comm/
bench/comm/host_build.sh $TMPDIR/bnew && $TMPDIR/old-src/bench/comm/host_build.sh $TMPDIR/bold || exit 1
OUT=$L REPS=${REPS:-5} bench/comm/host_threads_sweep.sh $TMPDIR/bnew build:$TMPDIR/bnew build:$TMPDIR/bold TESSERA_HOST_THREADS=12
echo "done at $SECONDS s"; uptime
