#!/usr/bin/env bash
# two-contributor host jobs straight into dst for every type (this tree) against the engine before it
# (engine-before.cpp = `git show <this commit>~1:src/comm/engine.cpp`), interleaved A/B, bound every round.
set -o pipefail
D=bench/results/fold-direct-h200  # (the folder this ran from; engine-before.cpp was `git show 92bf132~1:src/comm/engine.cpp`)
L=$TMPDIR/r35e; rm -rf $L; mkdir -p $L
exec > >(tee $L/run.txt) 2>&1
date -u +%FT%TZ; nproc; uptime
rm -rf $TMPDIR/old-src && mkdir -p $TMPDIR/old-src && tar --exclude='./build*' -cf - . | tar -xf - -C $TMPDIR/old-src
cp $D/engine-before.cpp $TMPDIR/old-src/src/comm/engine.cpp
bench/comm/host_build.sh $TMPDIR/bnew && $TMPDIR/old-src/bench/comm/host_build.sh $TMPDIR/bold || exit 1
OUT=$L REPS=${REPS:-6} bench/comm/host_threads_sweep.sh $TMPDIR/bnew build:$TMPDIR/bnew build:$TMPDIR/bold
echo "done at $SECONDS s"; uptime
rm -f $L/*.err; tar czf $OUT/r35e.tgz -C $L .
