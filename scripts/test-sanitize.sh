#!/usr/bin/env bash
# Builds the library and the comm tests under ASan+UBSan (build-asan) and TSan (build-tsan) and runs
# the tests labelled `comm` or `launch` in each. Called by `make test`. The ucx row's tests are left out of both
# trees: a process that has loaded UCX (Debian's 1.13) crashes LeakSanitizer's tracer at exit ("Tracer caught signal
# 11"), after its tests passed, and the row's progress thread has not been checked under TSan; they run in the
# plain tree.
set -euo pipefail
cd "$(dirname "$0")/.."
JOBS=${JOBS:-$(nproc)}
for san in address thread; do
  dir=build-$([ $san = address ] && echo asan || echo tsan)
  [ -f $dir/build.ninja ] || cmake -S . -B $dir -G Ninja -DTESSERA_SANITIZE=$san -DTESSERA_CUDA=OFF -DTESSERA_BENCH=OFF -DTESSERA_COMM_ONLY=ON >/dev/null
  targets="comm_worker device_emu_worker accel_worker $(cd $dir && ninja -t targets all | grep -oE '^(comm|launch)_[a-z_]*test:' | tr -d ':' | sort -u | tr '\n' ' ')"
  cmake --build $dir -j "$JOBS" --target tessera_cli $targets
  echo "== comm tests under $san sanitizer"
  (cd $dir && TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1" ASAN_OPTIONS="detect_leaks=1" \
     ctest --output-on-failure -L 'comm|launch' -E '[Uu]cx' -j "$JOBS" --timeout 900)
done
