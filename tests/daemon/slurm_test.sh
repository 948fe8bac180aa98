#!/usr/bin/env bash
# tests/daemon/slurm_test.sh TEST_BINARY [GTEST FLAGS...]: runs the daemon's Slurm tests (slurm_e2e_test.cpp)
# against a real Slurm started for them on this machine (scripts/slurm-test-cluster.sh: munge, a controller and
# two slurmd nodes), and stops every daemon of that cluster when it exits, whether the tests pass, fail or are
# killed. Exits 77 (ctest: skipped) with the reason when Slurm cannot start here (not root, packages missing).
set -uo pipefail
bin=$1
shift
src=${TESSERA_SOURCE_DIR:?ctest sets TESSERA_SOURCE_DIR}
dir=$(mktemp -d /tmp/tessera-slurm-XXXXXX)
cleanup() {
  "$src/scripts/slurm-test-cluster.sh" down "$dir" >/dev/null 2>&1
  rm -rf "$dir"
}
trap cleanup EXIT
trap 'exit 143' TERM INT
out=$("$src/scripts/slurm-test-cluster.sh" up "$dir")
rc=$?
if [ $rc = 77 ]; then
  echo "$out"
  exit 77
fi
if [ $rc != 0 ]; then
  echo "$out"
  echo "slurm_test: the test cluster did not start (exit $rc)"
  exit 1
fi
export SLURM_CONF=$dir/etc/slurm.conf
"$bin" "$@"
rc=$?
if [ $rc != 0 ]; then
  echo "--- slurmctld log (tail) ---"
  tail -n 30 "$dir/log/slurmctld.log"
fi
exit $rc
