#!/usr/bin/env bash
# scripts/torch-conformance.sh — PyTorch's own distributed test suite (torch.testing._internal.distributed.
# distributed_test, the suite torch runs for gloo and nccl) against backend "tessera", beside gloo in the
# same run: each backend's passed/failed/skipped counts, then every test whose outcome differs from gloo's.
# A third run, tessera-as-gloo, tells the suite it runs gloo while every group is made with tessera: the
# tests the suite gates on gloo's name run on tessera too (tests/torch/conformance_suite.py).
# Exit status 0 when every test that passes with gloo passes with tessera or is listed, with its reason, in
# tests/torch/conformance_known.txt (docs/torch.md, "Conformance"); 1 otherwise; 77 when no python with
# torch and tessera is found.
# Usage: scripts/torch-conformance.sh [--world N] [-k EXPR] [--start fork|spawn] [--budget SECONDS] [--doc]
#   --world N    ranks per test (default 2)
#   -k EXPR      pytest's -k: a subset of the tests (default: all)
#   --start      how each test's ranks start (default fork; spawn is torch's runner's way, slower)
#   --budget S   bound on each backend's run (default 1800): past it the run is stopped and counts as failed
#   --doc        write the test-by-test table to docs/torch-conformance.md (a generated page)
# PYTHON (default .venv/bin/python, else python3) must import torch and tessera._C (scripts/torch-check.sh
# BUILD install puts it there). Reports go to $OUT when set, else build/bench-results/: conformance-*.xml/.log.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
ROOT=$PWD
WORLD=2 K="" START=fork BUDGET=1800 DOC=""
while (($#)); do
  case $1 in
    --world) WORLD=${2:?--world needs a number}; shift 2 ;;
    -k) K=${2:?-k needs an expression}; shift 2 ;;
    --start) START=${2:?--start needs fork or spawn}; shift 2 ;;
    --budget) BUDGET=${2:?--budget needs seconds}; shift 2 ;;
    --doc) DOC=1; shift ;;
    *) echo "torch-conformance: unknown argument '$1' (see the usage at the top of $0)" >&2; exit 2 ;;
  esac
done
[[ $WORLD =~ ^[0-9]+$ ]] && ((WORLD >= 2)) || { echo "torch-conformance: --world $WORLD: need an integer >= 2" >&2; exit 2; }
[[ $BUDGET =~ ^[0-9]+$ ]] && ((BUDGET >= 1)) || { echo "torch-conformance: --budget $BUDGET: need seconds >= 1" >&2; exit 2; }
case $START in fork|spawn) ;; *) echo "torch-conformance: --start $START: need fork or spawn" >&2; exit 2 ;; esac
PY=${PYTHON:-}
[ -z "$PY" ] && { [ -x "$ROOT/.venv/bin/python" ] && PY=$ROOT/.venv/bin/python || PY=python3; }
if ! (cd /tmp && "$PY" -c 'import torch, tessera._C') 2>/dev/null; then
  echo "torch-conformance: SKIPPED: $PY cannot import torch and tessera._C (scripts/install-deps.sh, then scripts/torch-check.sh BUILD install)"
  exit 77
fi
OUTDIR=${OUT:-$ROOT/build/bench-results}
mkdir -p "$OUTDIR"
export PYTHONPATH="$ROOT/tests/torch${PYTHONPATH:+:$PYTHONPATH}" TESSERA_CONFORMANCE_START=$START WORLD_SIZE=$WORLD
export PYTHONFAULTHANDLER=1
export TORCHINDUCTOR_CACHE_DIR=${TORCHINDUCTOR_CACHE_DIR:-${TMPDIR:-/tmp}/torchinductor_$(id -un)}
KARGS=()
[ -n "$K" ] && KARGS=(-k "$K")
reports=()
for be in gloo tessera tessera-as-gloo; do
  tag=$be-w$WORLD
  xml=$OUTDIR/conformance-$tag.xml log=$OUTDIR/conformance-$tag.log
  rm -f "$xml"
  echo "=== $be, $WORLD ranks per test${K:+, -k '$K'} ($(date +%T))"
  t0=$SECONDS
  # each backend in a fresh temporary directory (the suite's barrier and init files), and TMPDIR in it: the
  # run must leave nothing there (each test's FileStore file is a tempfile). Inductor's cache stays where it
  # is by default (TMPDIR/torchinductor_USER), kept between runs.
  tmp=$(mktemp -d /tmp/tsr-conformance-XXXXXX); mkdir -p "$tmp/barrier" "$tmp/tmp"
  (cd "$ROOT/tests/torch" && BACKEND=$be TEMP_DIR=$tmp TMPDIR=$tmp/tmp timeout -k 10 "$BUDGET" "$PY" -m pytest \
      conformance_suite.py -q -p no:cacheprovider -W ignore::DeprecationWarning --junitxml="$xml" "${KARGS[@]}") > "$log" 2>&1
  rc=$?
  left=$(find "$tmp/tmp" -mindepth 1 -maxdepth 1 | wc -l)
  ((left == 0)) || echo "torch-conformance: $be left $left files in its TMPDIR, e.g. $(find "$tmp/tmp" -mindepth 1 | head -3 | tr '\n' ' ')"
  rm -rf "$tmp"
  ((left == 0)) || exit 1
  echo "$be: $(tail -n 1 "$log") [exit $rc, $((SECONDS - t0)) s]"
  if [ $rc -ge 124 ] && [ ! -s "$xml" ]; then
    echo "torch-conformance: $be ran past --budget $BUDGET s (log $log)"; exit 1
  fi
  [ -s "$xml" ] || { echo "torch-conformance: $be wrote no report (log $log)"; tail -20 "$log"; exit 1; }
  # pytest: 0 all passed, 1 some failed — both are results; 2-5 (collection error, interrupted, internal or
  # usage error, no tests) are not, whatever the report holds
  if [ $rc -ne 0 ] && [ $rc -ne 1 ]; then
    echo "torch-conformance: $be: pytest exited $rc, which is no test result (log $log):"
    grep -E "Error|error|Interrupted" "$log" | head -5; exit 1
  fi
  reports+=("$be=$xml")
done
DOCARGS=()
if [ -n "$DOC" ]; then
  DOCARGS=(--doc "$ROOT/docs/torch-conformance.md"
           --machine "$(nproc) cores, torch $("$PY" -c 'import torch; print(torch.__version__)'), $WORLD ranks, $START")
fi
"$PY" "$ROOT/tests/torch/conformance_report.py" --known "$ROOT/tests/torch/conformance_known.txt" \
  --markdown "$OUTDIR/conformance-w$WORLD.md" "${DOCARGS[@]}" "${reports[@]}"
