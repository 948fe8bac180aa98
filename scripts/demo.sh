#!/usr/bin/env bash
# The README's main job (`make demo`): one training job through the whole of Tessera, on this machine.
#   0. the collective underneath: a hybrid allreduce across two islands (ascend + nvidia host ranks);
#   1. starts the job daemon with its embedded defaults (SQLite state in a fresh directory);
#   2. registers the example fleet: host-EMULATED Ascend 910B and NVIDIA H800 cards at the reference scenario's prices;
#   3. submits the example trainer with --policy-compatible ascend,nvidia and shows the plan;
#   4. shows the queue and the progress;
#   5. interrupts it (a higher-priority job takes the 910B cards: SIGTERM -> checkpoint -> queue), and shows
#      it waking up by itself and resuming from its checkpoint when the cards free up, then checks that it
#      ends with the same parameter bits as the same job run without interruption;
#   6. a move: with the H800 made cheaper per unit of work (a new catalog version), a 2-card job starts on
#      1 x 910B + 1 x H800; the policy's calendar then puts a 100% floor in force from today, and the running job
#      is stopped and continues from its checkpoint on 2 x 910B (docs/daemon.md, "Moving running jobs");
#   7. prints the bill and the domestic-share compliance report (and the same series from /metrics).
# The daemon's web console (http://ADDRESS/, printed at step 1) shows the jobs, bills and compliance as they
# happen; with KEEP=1 the daemon stays up after the last step until Ctrl-C.
# Finishes in about two minutes on a 2-core machine; the daemon and any job are stopped on exit.
# Usage: scripts/demo.sh [path/to/tessera]
set -euo pipefail
TESSERA=$(realpath "${1:-build/tessera}")
BUILD=$(dirname "$TESSERA")
ROOT=$(cd "$(dirname "$0")/.." && pwd)
if [ ! -x "$BUILD/examples/trainer" ]; then
  echo "demo: $BUILD/examples/trainer is missing (build first: make build)" >&2
  exit 1
fi
# shellcheck source=scripts/demo-lib.sh
. "$ROOT/scripts/demo-lib.sh"
demo_check_nobody "$TESSERA" "$BUILD/examples/trainer"
export PATH="$BUILD/examples:$PATH"   # the job files run `trainer`
STATE=$(mktemp -d /tmp/tessera-demo-XXXXXX)
export TESSERA_HOME=$STATE            # the daemon's state and the CLI's way to find it
export TESSERA_LEDGER=$STATE/ledger.db
DAEMON_PID=""
T0=$(date +%s)

trap demo_cleanup EXIT
trap 'exit 130' INT TERM

step "0. The collective underneath: one allreduce across an Ascend island and an NVIDIA island (host ranks)"
if "$TESSERA" bench --help >/dev/null 2>&1; then
  run "$TESSERA" run --island ascend=host:2 --island nvidia=host:2 -- \
    "$TESSERA" bench allreduce --sizes 1M,16M --dtype f32 --check --iters 5 --verbose
else
  echo "(skipped: this build has no \`tessera bench\` subcommand)"
fi

if ! "$TESSERA" daemon --help >/dev/null 2>&1; then
  echo "demo: this build has no job daemon (it needs libsqlite3-dev and libcpp-httplib-dev at configure time)" >&2
  exit 1
fi

step "1. Start the job daemon with its embedded defaults (SQLite in WAL mode under $STATE)"
demo_start_daemon

step "2. Register the example fleet: host-emulated Ascend 910B and NVIDIA H800 cards, the reference scenario's prices"
run "$TESSERA" fleet register "$ROOT/examples/demo/fleet.yaml" --catalog "$ROOT/examples/demo/catalog.yaml" \
  --policy "$ROOT/examples/demo/policy.yaml"
run "$TESSERA" fleet show

step "3. Submit the example job: it accepts any Ascend or NVIDIA card"
run "$TESSERA" submit "$ROOT/examples/jobs/digits-mlp.yaml" --policy-compatible ascend,nvidia
JOB=1

step "4. The queue and the progress"
wait_state $JOB running 30
wait_progress $JOB 100 60
run "$TESSERA" queue
run "$TESSERA" status $JOB --no-events

step "5. Interrupt: a priority-10 job needs both 910B cards, so the example job is preempted"
run "$TESSERA" submit "$ROOT/examples/jobs/urgent-eval.yaml"
URGENT=2
wait_state $JOB queued 60
echo "(the example job received SIGTERM, wrote a checkpoint of its current step and went back to the queue)"
run "$TESSERA" queue
wait_state $URGENT succeeded 90
echo "(the urgent job ended: its cards are free; nobody touches the example job)"
wait_state $JOB running 60
run "$TESSERA" queue
wait_state $JOB succeeded 120
run "$TESSERA" status $JOB
echo
echo "the job's output around the interruption and at the end:"
"$TESSERA" logs $JOB | grep -E "=== tessera daemon|SIGTERM|resuming|step (1[0-9]0|2[0-9]0|400)/|final params" | head -20

echo
echo "nothing was lost: the same job run straight through, on the same islands, ends with the same bits:"
HASH_DAEMON=$("$TESSERA" logs $JOB | sed -n 's/.*final params fnv1a=\([0-9a-f]*\) after step 400.*/\1/p' | tail -1)
HASH_STRAIGHT=$("$TESSERA" run --island ascend=host:2 --island nvidia=host:2 -- trainer --steps 400 --batch 64 \
  --weights 0.5,1 --ckpt-every 0 2>&1 | sed -n 's/.*final params fnv1a=\([0-9a-f]*\) after step 400.*/\1/p' | tail -1)
echo "  interrupted and resumed: $HASH_DAEMON"
echo "  uninterrupted:           $HASH_STRAIGHT"
if [ -n "$HASH_DAEMON" ] && [ "$HASH_DAEMON" = "$HASH_STRAIGHT" ]; then echo "  identical"; else
  echo "demo: the resumed run differs from the uninterrupted one" >&2; exit 1; fi

step "6. A move: the floor rises at a date of the policy's calendar, and a running job continues on a compliant mix"
run "$TESSERA" fleet register "$ROOT/examples/demo/fleet.yaml" \
  --catalog "$ROOT/examples/demo/catalog-h800-discount.yaml" --policy "$ROOT/examples/demo/policy.yaml"
run "$TESSERA" submit "$ROOT/examples/jobs/moving-mlp.yaml"
MOVING=3
wait_state $MOVING running 30
wait_progress $MOVING 60 60
printf 'unit: cards\ncalendar:\n  - {from: 2025-01-01, floor: 50%%}\n  - {from: %s, floor: 100%%}\n' \
  "$(date -u +%F)" >"$STATE/policy-rise.yaml"
cat "$STATE/policy-rise.yaml"
run "$TESSERA" fleet policy "$STATE/policy-rise.yaml"
wait_state $MOVING succeeded 90
run "$TESSERA" status $MOVING --no-events
if ! "$TESSERA" status $MOVING | grep -q "moved (policy)"; then
  echo "demo: job $MOVING did not move to a compliant mix" >&2; exit 1; fi

step "7. The bill (per second, fixed-point money) and the compliance report"
demo_bill "$ROOT/examples/demo/policy.yaml"
demo_keep "make demo"

step "Done in $(($(date +%s) - T0)) s"
