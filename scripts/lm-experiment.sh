#!/usr/bin/env bash
# scripts/lm-experiment.sh — the headline experiment at the scale of one GPU (docs/benchmarks.md, "Training
# across two islands of different speed"): a ~151M-parameter decoder-only LM (examples/torch/train_lm.py)
# trained across two islands emulated on SM shares of one GPU (tessera run --sm-share, NVIDIA MPS):
#   1. calibration: each island's tokens/s alone -> weights for the sampler and the catalog
#   2. throughput: the islands as two independent jobs at once (sum of the parts) against one hybrid job
#      (DDP through backend "tessera", speed-proportional split), and the hybrid job with an even split;
#      REPS repetitions each, medians and spread
#   3. loss parity: hybrid against one island training the same global batch with the same seed, twice (A/A)
#   4. gradient synchronisation error against an f64 reference, per dtype
#   5. cost: `tessera plan` with the measured throughputs at the reference scenario's prices
# Needs torch (a GPU machine); run scripts/torch-check.sh BUILD install first (or it does it).
# Usage: scripts/lm-experiment.sh [BUILD_DIR]   env: STEPS (300), REPS (3), SLOW (35), FAST (65) percent of SMs,
# PRECISION (tf32), OPTIMIZER (adamw; zero for ZeroRedundancyOptimizer), TSTEPS (6) optimizer steps per throughput run
# (the first TWARM (2) not timed), ACCUM (16) micro-batches of GB (64) sequences of 512 per step in the
# throughput runs (524,288 tokens: GPT-2's batch; 64 sequences split 23 : 41 where 32 could only split 12 : 20),
# CAL_ACCUM (8) in calibration, SPLIT_FROM (concurrent: the hybrid runs' speed split from the islands' rates in
# the independent run just before, both islands at once as in the hybrid job; calibration: each alone)
# runs (loss parity runs one per step), LM_ARGS (extra train_lm.py arguments, e.g. "--layers 2" for a smoke run),
# PHASES (default "calibrate throughput parity grad report"; a subset runs only those, in that order),
# ISLANDS (the tessera run island arguments instead of the two SM shares), HANG_S (100: seconds after which a
# job still running gets its ranks' Python stacks in its log, and their native stacks in lm-LABEL.stacks),
# LM_TIMEOUT (120s: tessera run --timeout), TKINDS ("indep hybrid even": the throughput runs made)
set -uo pipefail
export NCCL_NVLS_ENABLE=0
cd "$(dirname "$0")/.." || exit 1
ROOT=$PWD
B=${1:-build-gpu}; case $B in /*) ;; *) B=$ROOT/$B ;; esac
OUTDIR=${OUT:-$B/bench-results}; mkdir -p "$OUTDIR"
PY=${PYTHON:-python3}
STEPS=${STEPS:-300}; REPS=${REPS:-3}; SLOW=${SLOW:-35}; FAST=${FAST:-65}; TSTEPS=${TSTEPS:-6}; TWARM=${TWARM:-2}; ACCUM=${ACCUM:-16}; GB=${GB:-64}; SPLIT_FROM=${SPLIT_FROM:-concurrent}; CAL_ACCUM=${CAL_ACCUM:-8}
T=$B/tessera
# TF32 matmuls, not bf16: on an MPS share of the H200 (35%, 40%, 60%, 65%, 80% measured), cuBLAS's bf16 and
# f16 GEMMs give wrong results (finite or not) while TF32 and f32 are right (bench/gpu/mps_matmul_probe.py)
PRECISION=${PRECISION:-tf32}
# plain DDP + AdamW: two islands of one device type keep identical replicas with it (train_lm checks at the
# end); ZeroRedundancyOptimizer adds a broadcast of every parameter to each step's gradient allreduce
OPTIMIZER=${OPTIMIZER:-adamw}
LM="$PY $ROOT/examples/torch/train_lm.py --precision $PRECISION --optimizer $OPTIMIZER ${LM_ARGS:-}"
W=$OUTDIR/lm-weights.json
# ISLANDS replaces the layout, e.g. ISLANDS="--island ascend=cuda:1 --island nvidia=cuda:1" (no MPS)
ISL=${ISLANDS:-"--island ascend=cuda:1 --island nvidia=cuda:1 --sm-share ascend=$SLOW --sm-share nvidia=$FAST"}
PHASES=" ${PHASES:-calibrate throughput parity grad report} "
# shellcheck source=scripts/stacks-lib.sh
source "$ROOT/scripts/stacks-lib.sh"
phase() { [[ "$PHASES" == *" $1 "* ]]; }
step() { echo; echo "=== $* ($(date +%T))"; }
RANKS="^[^ ]*python[0-9.]* [^ ]*examples/torch/train_lm.py"
run() {  # run LABEL tessera-run-args -- program...
  local label=$1; shift
  timeout 580 "$T" run --timeout "${LM_TIMEOUT:-120s}" "$@" > "$OUTDIR/lm-$label.log" 2>&1 &
  local pid=$! waited=0
  # A job still running HANG_S seconds in gets its ranks' Python stacks (train_lm's SIGUSR1 handler) in
  # its log, once: where each rank waits, before Tessera's timeout (120 s) ends the job.
  while kill -0 "$pid" 2>/dev/null; do
    sleep 1; waited=$((waited + 1))
    if [ "$waited" = "${HANG_S:-100}" ]; then
      echo "lm-experiment: $label still running after ${HANG_S:-100} s: the ranks' stacks follow" >> "$OUTDIR/lm-$label.log"
      # the ranks only (anchored at the interpreter): SIGUSR1 would end the launcher, whose command line names the script too
      pkill -USR1 -f "$RANKS" || true
      sleep 2; native_stacks "$RANKS" > "$OUTDIR/lm-$label.stacks" 2>&1
    fi
  done
  wait "$pid"; local rc=$?
  grep -E "island |total |calibration|replicas|grad_error|emulated|Error|FAIL" "$OUTDIR/lm-$label.log" | grep -v "^\s*$" | head -8
  [ $rc = 0 ] || { echo "$label: exit $rc"; tail -15 "$OUTDIR/lm-$label.log"; }
}

if phase calibrate; then
step "calibration (each island alone on its SM share)"
run calibrate $ISL -- $LM --mode calibrate --accum "$CAL_ACCUM" --weights-file "$W"
cat "$W"
fi

if phase throughput; then
step "throughput: independent (sum of the parts) vs hybrid, $REPS reps of $TSTEPS steps of $ACCUM micro-batches"
TKINDS=" ${TKINDS:-indep hybrid even} "
TB="--steps $TSTEPS --warmup-steps $TWARM --accum $ACCUM --global-batch $GB"
for rep in $(seq "$REPS"); do
  [[ "$TKINDS" == *" indep "* ]] && run indep-$rep $ISL -- $LM --mode independent $TB --weights-file "$W" --log "$OUTDIR/lm-indep-$rep.jsonl"
  # SPLIT_FROM=concurrent: the speed split from the islands' rates in this repetition's independent run
  # (both at once, as in the hybrid job) instead of the calibration's (each alone)
  WH=$W
  if [ "$SPLIT_FROM" = concurrent ] && [ -f "$OUTDIR/lm-indep-$rep.jsonl" ]; then
    WH=$OUTDIR/lm-weights-concurrent-$rep.json
    "$PY" "$ROOT/scripts/lm_report.py" --weights-from "$OUTDIR/lm-indep-$rep.jsonl" "$W" > "$WH" || WH=$W
  fi
  [[ "$TKINDS" == *" hybrid "* ]] && run hybrid-$rep $ISL -- $LM --mode hybrid $TB --weights-file "$WH" --log "$OUTDIR/lm-hybrid-$rep.jsonl"
  [[ "$TKINDS" == *" even "* ]] && run even-$rep $ISL -- $LM --mode hybrid --split even $TB --weights-file "$W" --log "$OUTDIR/lm-even-$rep.jsonl"
done
fi

if phase parity; then
step "loss parity: hybrid vs one island, $STEPS steps, same global batch and seed"
run parity-hybrid $ISL -- $LM --mode hybrid --steps "$STEPS" --weights-file "$W" --log "$OUTDIR/lm-parity-hybrid.jsonl"
run parity-single-a --island nvidia=cuda:1 -- $LM --mode hybrid --steps "$STEPS" --log "$OUTDIR/lm-parity-single-a.jsonl"
run parity-single-b --island nvidia=cuda:1 -- $LM --mode hybrid --steps "$STEPS" --log "$OUTDIR/lm-parity-single-b.jsonl"
fi

if phase grad; then
step "gradient synchronisation error"
run grad-error $ISL -- $LM --mode grad-error --log "$OUTDIR/lm-grad-error.json"
fi

phase report || exit 0
step "summary, cost and plots"
"$PY" "$ROOT/scripts/lm_report.py" "$OUTDIR" "$T" "$ROOT" | tee "$OUTDIR/lm-summary.txt"
