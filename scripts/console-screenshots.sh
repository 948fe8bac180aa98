#!/usr/bin/env bash
# Regenerates the console screenshots the README and docs/daemon.md show (docs/console-fleet.png, docs/console-job.png,
# docs/console-queue.png, docs/console-compliance.png): runs the console's browser test
# (tests/browser/console_test.py: a daemon with the demo fleet, two tenants, the example trainer and sleep
# jobs) and copies four of the screenshots it saves. Needs chromium and the project's venv .venv with
# playwright (scripts/install-deps.sh installs both) and a build with the example trainer.
# Usage: scripts/console-screenshots.sh [build-dir]
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=$(realpath "${1:-$ROOT/build}")
PY=$ROOT/.venv/bin/python
[ -x "$PY" ] || { echo "console-screenshots: $PY not found (scripts/install-deps.sh makes the venv)" >&2; exit 1; }
OUT=$(mktemp -d /tmp/tessera-shots-XXXXXX)
trap 'rm -rf "$OUT"' EXIT
# A skip (exit 77: no chromium, no playwright, not built) ends this script with that status, after the test says why.
"$PY" "$ROOT/tests/browser/console_test.py" --tessera "$BUILD/tessera" --trainer "$BUILD/examples/trainer" \
  --source "$ROOT" --screenshots "$OUT"
for page in fleet queue job compliance; do cp "$OUT/console-$page.png" "$ROOT/docs/console-$page.png"; done
echo "console-screenshots: wrote docs/console-{fleet,queue,job,compliance}.png"
