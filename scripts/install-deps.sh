#!/usr/bin/env bash
# Installs what Tessera needs to build, test and run its demo on Debian 12 (idempotent, fast when
# everything is present): Debian packages via apt, and the Python test tools (PyTorch for the CPU ranks,
# the S3 test server moto, playwright) via pip into the project-local virtual environment .venv/, pinned
# in python/requirements-test.txt.
# Usage: scripts/install-deps.sh [--demo]   (`make demo` passes --demo: only what the demo builds and runs;
#        `make test` and `make build` install everything)
# TESSERA_PYTHON picks the interpreter the venv is made from (default: Debian's /usr/bin/python3).
set -euo pipefail
cd "$(dirname "$0")/.."

MODE=all
case ${1:-} in
  --demo) MODE=demo ;;
  "") ;;
  *) echo "install-deps: unknown argument '$1' (usage: scripts/install-deps.sh [--demo])" >&2; exit 2 ;;
esac

# What `make demo` needs: the compiler and build tools, the libraries of the binary it runs, the demo
# trainer's digits data (python3-sklearn ships digits.csv.gz) and the daemon's sandbox.
DEMO_PACKAGES=(
  build-essential cmake ninja-build pkg-config ccache git curl              # build
  libfmt-dev libspdlog-dev libcli11-dev nlohmann-json3-dev libyaml-cpp-dev   # core
  libsqlite3-dev sqlite3 libglpk-dev                                         # sched: ledger, solver
  libssl-dev libcurl4-openssl-dev libzstd-dev zlib1g-dev                     # ckpt: S3, archive
  libcpp-httplib-dev libbrotli-dev                                           # daemon HTTP API (httplib.h includes brotli's)
  bubblewrap                                                                  # daemon: job sandbox (non-root)
  python3 python3-sklearn                                                     # digits data of the demo trainer
)
# What `make test` adds.
TEST_PACKAGES=(
  clang-format                                                                # make format-check
  clang libclang-rt-14-dev                                                    # the C API enums under clang's -fsanitize=enum
  libgtest-dev libgmock-dev libbenchmark-dev                                 # tests, benchmarks
  libgloo-dev libopenmpi-dev openmpi-bin                                     # benchmark peers
  python3-botocore                                                            # SigV4 reference signer
  python3-venv python3-dev                                                    # .venv: PyTorch, moto, playwright; tessera._C's headers
  prometheus chromium                                                         # promtool (checks /metrics), the web console's browser test
  iproute2 util-linux iperf3                                                  # tests/hosts (namespaces), bench/hosts (iperf3)
  libucx-dev ucx-utils                                                        # the ucx transport row (headers; UCX loads at run time), ucx_perftest
  slurm-wlm munge                                                             # the daemon's Slurm executor tests (a real cluster)
  gdb                                                                         # native stacks of a hung torch rank (scripts/stacks-lib.sh)
)
PACKAGES=("${DEMO_PACKAGES[@]}")
[ "$MODE" = all ] && PACKAGES+=("${TEST_PACKAGES[@]}")

missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "install-deps: installing ${missing[*]}"
  SUDO=""
  if [ "$(id -u)" != 0 ]; then SUDO=sudo; fi
  export DEBIAN_FRONTEND=noninteractive
  t0=$SECONDS
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" > /dev/null
  echo "install-deps: apt done in $((SECONDS - t0)) s"
fi
[ "$MODE" = demo ] && { echo "install-deps: all dependencies of the demo present"; exit 0; }

# The project-local virtual environment. Its stamp holds the hash of the requirements it was made from, so
# a changed pin rebuilds it; pip's cache (~/.cache/pip) makes a rebuild on the same machine quick.
REQ=python/requirements-test.txt
VENV=.venv
PY=${TESSERA_PYTHON:-/usr/bin/python3}
want=$(sha256sum "$REQ" | cut -c1-16)-$("$PY" -c 'import sys; print("%d.%d.%d" % sys.version_info[:3])')
if [ "$(cat "$VENV/.tessera-stamp" 2>/dev/null)" != "$want" ]; then
  echo "install-deps: making $VENV from $REQ with $PY (PyTorch and its CUDA libraries: about 3 GiB the first time)"
  t0=$SECONDS
  rm -rf "$VENV"
  "$PY" -m venv "$VENV"
  "$VENV/bin/python" -m pip install -q --disable-pip-version-check --upgrade "pip==25.3"
  "$VENV/bin/python" -m pip install -q --disable-pip-version-check -r "$REQ"
  echo "$want" > "$VENV/.tessera-stamp"
  echo "install-deps: $VENV ready in $((SECONDS - t0)) s ($(du -sh "$VENV" | cut -f1))"
fi
# Room for the build trees `make test` writes (measured on a fresh clone: build 4.0 GiB, build-asan 1.8 GiB,
# build-tsan 0.9 GiB, plus ccache's growth): a nearly full disk otherwise fails late with "No space left".
need_kib=$((9 * 1024 * 1024))
avail_kib=$(df -Pk . | awk 'NR == 2 { print $4 }')
if [ ! -d build ] && [ -n "$avail_kib" ] && [ "$avail_kib" -lt "$need_kib" ]; then
  echo "install-deps: WARNING: $((avail_kib / 1024)) MiB free under $PWD; a first \`make test\` writes about 9 GiB" \
       "of build trees (build, build-asan, build-tsan): free some space first, or expect 'No space left on device'" >&2
fi
echo "install-deps: all dependencies present"
