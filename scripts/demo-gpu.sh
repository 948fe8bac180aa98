#!/usr/bin/env bash
# scripts/demo-gpu.sh — scripts/demo.sh's flow with a real PyTorch job on one NVIDIA GPU: a language model
# (examples/torch/train_lm.py, DDP through the "tessera" backend) on two cards EMULATED on SM shares of
# that GPU (examples/fleet-gpu-sm-share.yaml: an "Ascend 910B" on 35% and an "NVIDIA H800" on 65% of the
# streaming multiprocessors, through NVIDIA MPS; a model of a slower card next to a faster one, NOT real
# Ascend or H800 hardware).
#   1. starts the job daemon (its state in a fresh directory under /tmp);
#   2. registers the fleet with the demo catalog and policy (examples/demo/);
#   3. submits the LM job (examples/demo-gpu/lm.yaml: 120 steps, a checkpoint every 20);
#   4. shows the queue and the progress until step 40;
#   5. interrupts it: a priority-10 job (examples/demo-gpu/urgent.yaml) needs the 910B card, so the LM job
#      gets SIGTERM, checkpoints the step it is at and goes back to the queue; when the urgent job ends
#      the LM job starts again by itself with TESSERA_RESUME_FROM (its newest checkpoint) and finishes;
#   6. runs the same job uninterrupted (`tessera run` with the same islands, shares and batch split) and
#      compares the losses: the mean loss of the last 20 steps must agree within 1% (relative; LOSS_TOL);
#      bit-equal losses are not expected on MPS shares (GPU kernels need not be deterministic), the script
#      reports how many steps agree to the printed 6 decimals;
#   7. prints the bill and the domestic-share compliance report (and the same series from /metrics).
# Ran on the H200 on 2026-12-01 in 127 s (bench/results/demo-gpu-20261201T1925Z.log). Needs a GPU machine after `scripts/torch-check.sh build-gpu install`
# (the tessera binary in build-gpu/, the tessera Python package installed into the Python that has torch).
# Refuses (exit 2, saying why) without an NVIDIA GPU, without nvidia-cuda-mps-control, or without a Python
# that imports torch (with CUDA) and tessera.torch.
# Usage: scripts/demo-gpu.sh [path/to/tessera or its build directory]    env: PYTHON (python3), LOSS_TOL (0.01), KEEP=1 (keep the
# daemon and its web console up at the end, until Ctrl-C)
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
refuse() { echo "demo-gpu: $*" >&2; exit 2; }

TESSERA=${1:-$ROOT/build-gpu/tessera}
[ -d "$TESSERA" ] && TESSERA=$TESSERA/tessera  # a build directory names its binary
[ -f "$TESSERA" ] && [ -x "$TESSERA" ] || refuse "no tessera binary at $TESSERA (build it: scripts/torch-check.sh build-gpu install)"
TESSERA=$(realpath "$TESSERA")
GPUS=$(nvidia-smi -L 2>/dev/null || true)   # (no `| grep -q` under pipefail: an early exit is a SIGPIPE)
[[ "$GPUS" == *"GPU "* ]] ||
  refuse "no NVIDIA GPU here (nvidia-smi -L lists none): the fleet's cards are shares of one GPU"
command -v nvidia-cuda-mps-control >/dev/null ||
  refuse "no nvidia-cuda-mps-control on PATH: the SM shares (tessera run --sm-share) need NVIDIA MPS"
PY=$(command -v "${PYTHON:-python3}") || refuse "no ${PYTHON:-python3} on PATH (set PYTHON)"
"$PY" -c 'import torch, torch.distributed.checkpoint, tessera.torch, tessera.torch.checkpoint
assert torch.cuda.is_available(), "torch sees no CUDA device"' 2>"/tmp/demo-gpu-python-check.$$" || {
  tail -1 "/tmp/demo-gpu-python-check.$$" >&2; rm -f "/tmp/demo-gpu-python-check.$$"
  refuse "$PY cannot import torch (with CUDA) and tessera.torch (install: scripts/torch-check.sh build-gpu install, or set PYTHON)"
}
rm -f "/tmp/demo-gpu-python-check.$$"
"$TESSERA" daemon --help >/dev/null 2>&1 ||
  refuse "this build has no job daemon (it needs libsqlite3-dev and libcpp-httplib-dev at configure time; on the GPU image, carry the kit of scripts/gpu-kit.sh as .deps/gpu-kit and let scripts/torch-check.sh configure)"

# shellcheck source=scripts/demo-lib.sh
. "$ROOT/scripts/demo-lib.sh"
LM_JOB=$ROOT/examples/demo-gpu/lm.yaml
URGENT_JOB=$ROOT/examples/demo-gpu/urgent.yaml
FLEET=$ROOT/examples/fleet-gpu-sm-share.yaml
POLICY=$ROOT/examples/demo/policy.yaml
demo_check_nobody "$TESSERA" "$PY" "$ROOT/examples/demo-gpu/train-lm.sh" "$ROOT/examples/torch/train_lm.py"
if [ "$(id -u)" = 0 ] && command -v setpriv >/dev/null &&
   ! setpriv --reuid=nobody --regid=nogroup --clear-groups "$PY" -c 'import torch, tessera.torch' 2>/dev/null; then
  echo "demo-gpu: running as root, the daemon runs jobs as 'nobody', who cannot import torch and tessera.torch" >&2
  echo "          with $PY (its packages are under a directory nobody cannot read?); use a Python under /opt or /usr" >&2
  exit 1
fi

# The job files run examples/demo-gpu/train-lm.sh, which runs train_lm.py with this Python; jobs inherit the
# daemon's environment but its TESSERA_* variables.
export DEMO_GPU_PYTHON=$PY
export NCCL_NVLS_ENABLE=0   # as scripts/lm-experiment.sh (NVLink multicast off)
STATE=$(mktemp -d /tmp/tessera-demo-gpu-XXXXXX)
export TESSERA_HOME=$STATE            # the daemon's state and the CLI's way to find it
export TESSERA_LEDGER=$STATE/ledger.db
# shellcheck disable=SC2034  # read by demo_cleanup (scripts/demo-lib.sh)
DAEMON_PID=""
T0=$(date +%s)
trap demo_cleanup EXIT
trap 'exit 130' INT TERM

# The LM job's arguments (its command after ./train-lm.sh), its steps, and the fleet's shares, read from
# the files so that the uninterrupted run below is the same job.
mapfile -t LM_ARGS < <(sed -n 's/^command: \[\(.*\)\]$/\1/p' "$LM_JOB" | tr ',' '\n' | sed 's/^ *//; s/ *$//; s/^"\(.*\)"$/\1/' | tail -n +2)
STEPS=$(printf '%s\n' "${LM_ARGS[@]}" | sed -n '/^--steps$/{n;p;}')
SLOW=$(sed -n 's/.*type: ascend-910b.*sm_share: *\([0-9]*\).*/\1/p' "$FLEET")
FAST=$(sed -n 's/.*type: nvidia-h800.*sm_share: *\([0-9]*\).*/\1/p' "$FLEET")
if [ -z "$STEPS" ] || [ -z "$SLOW" ] || [ -z "$FAST" ]; then echo "demo-gpu: cannot read $LM_JOB or $FLEET" >&2; exit 1; fi
echo "${GPUS%%$'\n'*}"

step "1. Start the job daemon with its embedded defaults (SQLite in WAL mode under $STATE)"
demo_start_daemon

step "2. Register the fleet: an \"Ascend 910B\" card on ${SLOW}% and an \"NVIDIA H800\" card on ${FAST}% of this GPU's SMs (emulated)"
run "$TESSERA" fleet register "$FLEET" --catalog "$ROOT/examples/demo/catalog.yaml" --policy "$POLICY"
run "$TESSERA" fleet show

step "3. Submit the language model: train_lm.py --mode hybrid on one card of each type, $STEPS steps"
run "$TESSERA" submit "$LM_JOB"
JOB=1

step "4. The queue and the progress (torch start-up, MPS and the corpus take a while before step 1)"
wait_state $JOB running 60
wait_progress $JOB 40 600
run "$TESSERA" queue
run "$TESSERA" status $JOB --no-events

step "5. Interrupt: a priority-10 job needs the 910B card, so the language model is preempted"
run "$TESSERA" submit "$URGENT_JOB"
URGENT=2
wait_state $JOB queued 300
"$TESSERA" logs $JOB >"$STATE/lm-job.log"
grep -q "SIGTERM: checkpoint of step" "$STATE/lm-job.log" || {
  echo "demo-gpu: job $JOB went back to the queue without train_lm's SIGTERM checkpoint:" >&2
  "$TESSERA" logs $JOB --tail 3000 >&2; exit 1; }
echo "(the language model received SIGTERM, finished its step, checkpointed it and went back to the queue)"
run "$TESSERA" queue
wait_state $URGENT succeeded 600
echo "(the urgent job ended: its card is free; nobody touches the language model)"
wait_state $JOB running 120
run "$TESSERA" queue
wait_state $JOB succeeded 900
run "$TESSERA" status $JOB
echo
echo "the job's output around the interruption and at the end:"
"$TESSERA" logs $JOB >"$STATE/lm-job.log"
grep -E "=== tessera daemon|batch split|SIGTERM|resumed from|checkpoint: step|step (1|20|40|60|80|100|$STEPS)/$STEPS |replicas|tokens/s" \
  "$STATE/lm-job.log" | head -40 || true
grep -q "train_lm: resumed from" "$STATE/lm-job.log" || {
  echo "demo-gpu: the second attempt of job $JOB did not resume from a checkpoint" >&2; exit 1; }

step "6. Nothing lost: the same job uninterrupted, on the same islands and shares, against the resumed one"
# The batch split the daemon's job had (TESSERA_ISLAND_WEIGHTS from the catalog's throughput for the job's
# class), as a weights file for the direct run.
WEIGHTS=$(sed -n 's/.*(TESSERA_ISLAND_WEIGHTS=\([0-9.,]*\);.*/\1/p' "$STATE/lm-job.log" | sed -n 1p)
WARGS=()
if [ -n "$WEIGHTS" ]; then
  printf '{"weights": "%s"}\n' "$WEIGHTS" >"$STATE/weights.json"
  WARGS=(--weights-file "$STATE/weights.json")
fi
mkdir -p "$STATE/straight"
printf '$ %s\n' "tessera run --island ascend=cuda:1 --island nvidia=cuda:1 --sm-share ascend=$SLOW --sm-share nvidia=$FAST -- $(basename "$PY") examples/torch/train_lm.py ${LM_ARGS[*]} ${WARGS[*]}"
(cd "$STATE/straight" && env -u TESSERA_CKPT_ROOT -u TESSERA_CKPT_EVERY -u TESSERA_RESUME_FROM \
  "$TESSERA" run --island ascend=cuda:1 --island nvidia=cuda:1 --sm-share ascend="$SLOW" --sm-share nvidia="$FAST" -- \
  "$PY" "$ROOT/examples/torch/train_lm.py" "${LM_ARGS[@]}" "${WARGS[@]}") >"$STATE/straight.log" 2>&1 || {
  echo "demo-gpu: the uninterrupted run failed ($STATE/straight.log):" >&2; tail -20 "$STATE/straight.log" >&2; exit 1; }
grep -E "batch split|tokens/s|replicas" "$STATE/straight.log" || true
losses() { sed -n "s/.*step \([0-9][0-9]*\)\/$STEPS loss \([-0-9.eE+naif]*\).*/\1 \2/p"; }
losses <"$STATE/lm-job.log" >"$STATE/resumed-losses.txt"
losses <"$STATE/straight.log" >"$STATE/straight-losses.txt"
# Per step, the last line wins (an attempt killed after its checkpoint may have printed later steps twice).
awk -v steps="$STEPS" -v last="${PARITY_LAST:-20}" -v tol="${LOSS_TOL:-0.01}" '
  FNR == 1 { f++ }
  f == 1 { a[$1] = $2; next }
  { b[$1] = $2 }
  END {
    miss = 0; same = 0; maxd = 0; sa = 0; sb = 0
    for (s = 1; s <= steps; s++) {
      if (!(s in a) || !(s in b)) { miss++; continue }
      if (a[s] == b[s]) same++
      d = a[s] - b[s]; if (d < 0) d = -d; if (d > maxd) maxd = d
      if (s > steps - last) { sa += a[s]; sb += b[s] }
    }
    if (miss) { printf "  %d of %d steps have no loss line in one of the runs\n", miss, steps; exit 1 }
    ma = sa / last; mb = sb / last; rel = (ma - mb) / mb; if (rel < 0) rel = -rel
    printf "  interrupted and resumed: mean loss of the last %d steps %.6f\n", last, ma
    printf "  uninterrupted:           mean loss of the last %d steps %.6f\n", last, mb
    printf "  relative difference %.2e (tolerance %g); %d of %d steps equal to 6 decimals; largest difference %.6f\n",
           rel, tol, same, steps, maxd
    exit rel < tol ? 0 : 1
  }' "$STATE/resumed-losses.txt" "$STATE/straight-losses.txt" || {
  echo "demo-gpu: the resumed run's loss differs from the uninterrupted one's beyond the tolerance" \
       "(or a step is missing); losses in $STATE/resumed-losses.txt and $STATE/straight-losses.txt" >&2
  exit 1; }
echo "  within the tolerance"

step "7. The bill (per second, fixed-point money) and the compliance report"
demo_bill "$POLICY"
demo_keep "scripts/demo-gpu.sh"

step "Done in $(($(date +%s) - T0)) s"
