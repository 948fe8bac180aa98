#!/usr/bin/env bash
# The throughput gap, call 2 (bench/results/ds-20261203T1134Z-h200/device-command-2.sh, adapted): tessera
# of the commit in build-ds-carry/HEAD (git archive, built in its own build dir and installed with --target, so
# nothing of another session's install is touched or used), then scripts/deepspeed-experiment.sh of the working
# tree: the a1 layout (one micro-batch of 128 a step) with the split balanced from call 1's independent a1 runs
# (0.605 : 1 -> 48:80), 3 interleaved reps (independent, hybrid; traced).
# Changes against device-command-2.sh: BUDGET bounds this command's own seconds (the machine's uptime is no
# measure of the lease: call 1's machine had been up 6 min when its command began); RUN_LIMIT 90 s a job (the
# a1 runs took 31-34 s), so a hung job cannot push the call past its limit.
set -o pipefail
R=$PWD; C=$R/build-ds-carry; L=$TMPDIR/ds; S=$TMPDIR/dssite; B=$TMPDIR/bds; DEVOUT=$OUT
rm -rf $L; mkdir -p $L $TMPDIR/hsrc $S
exec > >(tee $L/run.txt) 2>&1
echo "$(date -u +%FT%TZ) tessera $(cat $C/HEAD) (git archive HEAD); scripts and example from the working tree"
nvidia-smi --query-gpu=name,driver_version,memory.used,utilization.gpu --format=csv,noheader; nproc; uptime
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target $S $R/.whl/*.whl || exit 1
export PYTHONPATH=$S
tar -xzf $C/head.tar.gz -C $TMPDIR/hsrc || exit 1
# DeepSpeed's cpu_adam op (JIT, into the experiment's TORCH_EXTENSIONS_DIR) beside the build, not in the first run
(cd /tmp && DS_ACCELERATOR=cuda TORCH_EXTENSIONS_DIR=$TMPDIR/tessera-ds-ext python3 -c \
   'from deepspeed.ops.op_builder import CPUAdamBuilder; CPUAdamBuilder().load()' > $L/jit.log 2>&1
 echo "cpu_adam JIT: exit $? at $SECONDS s" >> $L/jit.log) &
JIT=$!
t0=$SECONDS
# RelWithDebInfo's -O2 without -g (the same code, a faster build)
cmake -S $TMPDIR/hsrc -B $B -G Ninja -DTESSERA_CUDA=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O2 -DNDEBUG" -DCMAKE_C_FLAGS_RELWITHDEBINFO="-O2 -DNDEBUG" > $L/configure.log 2>&1 &&
  cmake --build $B -j 16 --target libtessera tessera_cli > $L/build.log 2>&1 &&
  (cd $TMPDIR/hsrc && TESSERA_BUILD_DIR=$B python3 -m pip install --no-build-isolation --no-index --no-deps -q \
     --target $S ./python > $L/pip.log 2>&1) || { tail -40 $L/configure.log $L/build.log $L/pip.log; exit 1; }
echo "build: $((SECONDS - t0)) s"; wait $JIT; tail -2 $L/jit.log
(cd /tmp && python3 -c 'import torch, tessera._C as c; print("tessera._C", c.version(), "cuda build", c.cuda_build)') || exit 1
cp $R/bench/results/ds-20261202T0850Z-h200/ds-weights.json $L/   # the calibration of 2026-12-02 (0.7428 : 1)
E="$R/scripts/deepspeed-experiment.sh $B"
export OUT=$L RUN_TIMEOUT=60s RUN_LIMIT=${RUN_LIMIT:-90} LM_ARGS=--trace ARGS_a1b="--accum 1 --global-batch 128" DS_READY=1
save() { tar -czf "$DEVOUT/ds.tgz" -C /tmp ds; }   # after each rep: what ran comes back even if the call is cut
# the split of the a1 layout, balanced from call 1's independent a1 runs (carried with the tree): 0.605 : 1 -> 48:80
PHASES=balance BALANCE_FROM=$R/bench/results/ds-20261203T1134Z-h200 BALANCE_VARIANT=a1 $E
# a rep (two runs, ~65-70 s) starts only if it ends inside BUDGET seconds of this command
for r in 1 2 3; do
  if [ $((SECONDS + 75)) -lt ${BUDGET:-440} ]; then PHASES=throughput REPS=1 REP_FROM=$r TKINDS="${T2:-indep:a1b hybrid:a1b}" $E; save
  else echo "rep $r not started: $SECONDS s of this call gone (BUDGET ${BUDGET:-440})"; fi
done
PHASES=summary $E
echo "done at $SECONDS s"
cp $L/run.txt "$DEVOUT/"; save; ls -la "$DEVOUT"
