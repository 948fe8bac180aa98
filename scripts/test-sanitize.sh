#!/usr/bin/env bash
# Builds the library and the comm tests under ASan+UBSan (build-asan) and TSan (build-tsan) and runs
# the tests labelled `comm` or `launch` in each. The ASan+UBSan tree also builds and runs the property tests of
# what tenants reach (label `fuzz`, tests/fuzz: checkpoint manifests and safetensors headers, request bodies, job
# and fleet files, every route of the daemon's API against this tree's `tessera daemon`; seed 1, as in the plain
# tree), with only the modules they link (TESSERA_FUZZ: the checkpoint module, the planner, the daemon). UBSan
# is fatal there (-fno-sanitize-recover): a report fails its test. Called by `make test`. The ucx row's tests are
# left out of both trees: a process that has loaded UCX (Debian's 1.13) crashes LeakSanitizer's tracer at exit
# ("Tracer caught signal 11"), after its tests passed, and the row's progress thread has not been checked under
# TSan; they run in the plain tree.
# Longer fuzzing by hand, after a run of this script: FUZZ_ITERS=200000 FUZZ_SEED=N build-asan/tests/fuzz/<test>
# (docs/daemon.md, "Security model").
set -euo pipefail
cd "$(dirname "$0")/.."
JOBS=${JOBS:-$(nproc)}
for san in address thread; do
  dir=build-$([ $san = address ] && echo asan || echo tsan)
  fuzz=$([ $san = address ] && echo ON || echo OFF)
  labels=$([ $san = address ] && echo 'comm|launch|fuzz' || echo 'comm|launch')
  # Configured every time (a few seconds when nothing changed), so that a tree made before TESSERA_FUZZ gets it.
  cmake -S . -B $dir -G Ninja -DTESSERA_SANITIZE=$san -DTESSERA_CUDA=OFF -DTESSERA_BENCH=OFF -DTESSERA_COMM_ONLY=ON \
    -DTESSERA_FUZZ=$fuzz >/dev/null
  targets="comm_worker device_emu_worker accel_worker $(cd $dir && ninja -t targets all | grep -oE "^(${labels})_[a-z_]*test:" | tr -d ':' | sort -u | tr '\n' ' ')"
  cmake --build $dir -j "$JOBS" --target tessera_cli $targets
  echo "== tests labelled ${labels} under the $san sanitizer"
  (cd $dir && TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1" ASAN_OPTIONS="detect_leaks=1" \
     UBSAN_OPTIONS="print_stacktrace=1 halt_on_error=1" \
     ctest --output-on-failure -L "$labels" -E '[Uu]cx' -j "$JOBS" --timeout 900)
done
