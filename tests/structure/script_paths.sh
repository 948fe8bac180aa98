#!/usr/bin/env bash
# Every build output that a script names by its path in the build tree ($B/tests/..., ${B}/bench/...) is where the
# build puts it, so that a test or tool moved between folders cannot leave a script looking in the old place (the
# CUDA shim check once failed that way, without running: scripts/cuda-shim-check.sh looked for
# tests/runtime/accel_worker after it had moved to tests/comm). Paths under tests/gpu, bench/gpu and
# tests/shims/cuda are checked only in a build with CUDA. Usage: script_paths.sh SRC_DIR BUILD_DIR CUDA(ON|OFF)
# (ctest: structure_script_paths, run after the whole build).
set -uo pipefail
src=${1:?usage: script_paths.sh SRC_DIR BUILD_DIR CUDA}
build=${2:?usage: script_paths.sh SRC_DIR BUILD_DIR CUDA}
cuda=${3:?usage: script_paths.sh SRC_DIR BUILD_DIR CUDA}
cd "$src" || exit 1
checked=0 missing=0
while IFS=: read -r file rel; do
  case $rel in tests/gpu/* | bench/gpu/* | tests/shims/cuda/*) [ "$cuda" = ON ] || continue ;; esac
  checked=$((checked + 1))
  if [ ! -e "$build/$rel" ]; then
    echo "FAIL: $file names \$B/$rel, which the build does not make ($build/$rel is missing)"
    missing=$((missing + 1))
  fi
done < <(grep -oE '\$\{?B\}?/(tests|bench|python)/[A-Za-z0-9_./-]*[A-Za-z0-9_]' scripts/*.sh bench/*/*.sh |
  sed -E 's/:\$\{?B\}?\//:/' | sort -u)
echo "script paths: $checked checked, $missing missing"
[ "$checked" -gt 0 ] || { echo "FAIL: no paths found (the pattern no longer matches the scripts?)"; exit 1; }
[ "$missing" = 0 ]
