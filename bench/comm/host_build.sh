#!/usr/bin/env bash
# bench/comm/host_build.sh — the host-only build that the host engine's benchmarks run from (`tessera` and
# allreduce_bound; no CUDA, no tests), optimised as a release is: what a device run of bench/comm/host_threads_sweep.sh
# builds first, instead of a preamble in each run's command. Prints the build's time; on failure the tail of its log.
#   Usage: bench/comm/host_build.sh BUILD_DIR   (logs: BUILD_DIR/host-build.log)
set -uo pipefail
B=${1:?usage: host_build.sh BUILD_DIR}
mkdir -p "$B"
log=$B/host-build.log
t0=$SECONDS
gen=()
command -v ninja > /dev/null && gen=(-G Ninja)
{
  cmake -S "$(dirname "$0")/../.." -B "$B" "${gen[@]}" -DTESSERA_CUDA=OFF -DTESSERA_TESTS=OFF \
    -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O2 -g0 -DNDEBUG" &&
    cmake --build "$B" -j "$(nproc)" --target tessera_cli allreduce_bound
} > "$log" 2>&1 || {
  echo "host_build: the build in $B failed; the end of $log:" >&2
  tail -30 "$log" >&2
  exit 1
}
echo "host_build: $B built in $((SECONDS - t0)) s"
