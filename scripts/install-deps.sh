#!/usr/bin/env bash
# Installs what Tessera needs to build, test and run its demo on Debian 12 (idempotent, fast when
# everything is present). Debian packages via apt; the S3 test server (s3rver) via npm into .deps/.
# Usage: scripts/install-deps.sh            (also run by `make demo` and `make test`)
set -euo pipefail
cd "$(dirname "$0")/.."

PACKAGES=(
  build-essential cmake ninja-build pkg-config ccache git curl clang-format    # clang-format: make format-check
  libfmt-dev libspdlog-dev libcli11-dev nlohmann-json3-dev libyaml-cpp-dev   # core
  libgtest-dev libgmock-dev libbenchmark-dev                                 # tests, benchmarks
  libsqlite3-dev sqlite3 libglpk-dev                                         # sched: ledger, solver
  libssl-dev libcurl4-openssl-dev libzstd-dev zlib1g-dev                     # ckpt: S3, archive
  libcpp-httplib-dev                                                          # daemon HTTP API
  bubblewrap                                                                  # daemon: job sandbox (non-root)
  libgloo-dev libopenmpi-dev openmpi-bin                                     # benchmark peers
  python3 python3-botocore python3-sklearn                                   # SigV4 reference, digits data
  nodejs                                                                      # s3rver (test S3 server)
  prometheus chromium                                                         # promtool (checks /metrics), the web console's browser test
  iproute2 util-linux iperf3                                                  # tests/hosts (namespaces), bench/hosts (iperf3)
  slurm-wlm munge                                                             # the daemon's Slurm executor tests (a real cluster)
)

missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
# nodesource's nodejs ships npm itself; Debian's npm package is only needed with Debian's nodejs.
command -v npm >/dev/null 2>&1 || missing+=(npm)
# A nodejs from another source (nodesource) satisfies the need.
if command -v node >/dev/null 2>&1; then
  missing=("${missing[@]/nodejs/}")
fi
missing=($(printf '%s\n' "${missing[@]}" | grep -v '^$' || true))

if ((${#missing[@]})); then
  echo "install-deps: installing ${missing[*]}"
  SUDO=""
  if [ "$(id -u)" != 0 ]; then SUDO=sudo; fi
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# s3rver for the S3 integration tests, pinned, kept out of the source tree's tracked files.
if [ ! -x .deps/node/node_modules/.bin/s3rver ]; then
  echo "install-deps: installing s3rver (npm) into .deps/node"
  mkdir -p .deps/node
  npm install --silent --no-audit --no-fund --prefix .deps/node s3rver@3.7.1 >/dev/null
fi
# playwright-core drives Debian's chromium in the web console's browser test (tests/browser/), pinned.
if [ ! -f .deps/node/node_modules/playwright-core/package.json ] ||
  ! grep -q '"version": "1.65.1"' .deps/node/node_modules/playwright-core/package.json; then
  echo "install-deps: installing playwright-core (npm) into .deps/node"
  mkdir -p .deps/node
  npm install --silent --no-audit --no-fund --prefix .deps/node playwright-core@1.65.1 >/dev/null
fi
echo "install-deps: all dependencies present"
