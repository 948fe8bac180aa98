#!/usr/bin/env bash
# one device call: install, the LM experiment (cut to fit), allreduce through torch; everything in $OUT/all.tgz
cd "$(dirname "$0")"
export NCCL_NVLS_ENABLE=0
T0=$SECONDS; S=$OUT/summary.txt
scripts/torch-check.sh build-gpu install > $OUT/install.txt 2>&1 || { tail -30 $OUT/install.txt > $S; exit 1; }
echo "install took $((SECONDS - T0)) s" > $S
timeout 30 build-gpu/tessera run --island ascend=cuda:1 --island nvidia=cuda:1 -- python3 bench/torch/allreduce_bench.py > $OUT/ar-auto.txt 2>&1
echo "allreduce torch bridge=auto:" >> $S; grep -o '{.*}' $OUT/ar-auto.txt >> $S || tail -8 $OUT/ar-auto.txt >> $S
LEFT=$(( ${BUDGET:-390} - (SECONDS - T0) ))
echo "lm-experiment gets $LEFT s" >> $S
ACCUM=4 TSTEPS=14 STEPS=300 REPS=2 LM_ARGS="--warmup-steps 4 --corpus-mb 16" timeout $LEFT scripts/lm-experiment.sh build-gpu > $OUT/lm.txt 2>&1
echo "lm exit $?" >> $S; tail -45 $OUT/lm.txt >> $S
cd $OUT && tar czf /tmp/all.tgz --exclude summary.txt . && mv /tmp/all.tgz . && find . -type f ! -name all.tgz ! -name summary.txt ! -name '*.png' -delete
