#!/usr/bin/env bash
# scripts/ucx-wheel.sh — UCX for a GPU machine whose image has none: PyPI's libucx-cu13 wheel (UCX built with
# CUDA 13 support: its cuda_copy/cuda_ipc transports and CUDA memory registration), fetched here into
# .deps/ucx-wheel/ (git-ignored) to be carried there like the DeepSpeed wheels (scripts/deepspeed-wheels.sh).
# Pinned by version and sha256; a wheel is a zip, so the machine that uses it needs no pip:
#   scripts/ucx-wheel.sh unpack DIR    unpacks the carried wheel into DIR and prints the paths a build and a run
#                                      need, as shell assignments: UCX_INCLUDE (UCX's headers, for
#                                      -DTESSERA_UCX_INCLUDE_DIR: the ucx row is compiled where its headers are)
#                                      and UCX_LIBRARY (libucp.so.0, for TESSERA_UCX_LIBRARY)
# scripts/device-check.sh uses it as an optional step (and says so when the wheel is absent).
# Usage: scripts/ucx-wheel.sh            (fetch; PYTHON: the pip to use, default python3)
#        scripts/ucx-wheel.sh unpack DIR
set -euo pipefail
cd "$(dirname "$0")/.."
VERSION=1.22.0
WHEEL=libucx_cu13-$VERSION-py3-none-manylinux_2_24_x86_64.manylinux_2_28_x86_64.whl
SHA256=c6e0aaa82dc6e49dc3ddaac465b530e014f48b6c1c6b5ae74fbdd199d824351b
D=.deps/ucx-wheel
die() { echo "ucx-wheel: $*" >&2; exit 1; }
check() { echo "$SHA256  $D/$WHEEL" | sha256sum -c --quiet - >/dev/null 2>&1; }

if [ "${1:-}" = unpack ]; then
  [ -n "${2:-}" ] || die "usage: scripts/ucx-wheel.sh unpack DIR"
  [ -f "$D/$WHEEL" ] || die "$D/$WHEEL is absent (fetch it with scripts/ucx-wheel.sh on a machine with PyPI, and carry $D)"
  check || die "$D/$WHEEL does not have the pinned sha256 $SHA256"
  rm -rf "$2"
  mkdir -p "$2"
  python3 -m zipfile -e "$D/$WHEEL" "$2"
  OUTDIR=$(cd "$2" && pwd)
  chmod +x "$OUTDIR"/libucx/bin/* 2>/dev/null || true
  [ -f "$OUTDIR/libucx/include/ucp/api/ucp.h" ] && [ -f "$OUTDIR/libucx/lib/libucp.so.0" ] || die "$WHEEL lacks UCX's headers or libucp.so.0"
  echo "UCX_INCLUDE=$OUTDIR/libucx/include"
  echo "UCX_LIBRARY=$OUTDIR/libucx/lib/libucp.so.0"
  exit 0
fi

mkdir -p "$D"
if ! check; then
  rm -f "$D"/libucx_cu13-*.whl
  "${PYTHON:-python3}" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_24_x86_64 -d "$D" "libucx-cu13==$VERSION"
  check || die "the downloaded $WHEEL does not have the pinned sha256 $SHA256"
fi
ls -la "$D"
