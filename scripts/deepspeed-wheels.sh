#!/usr/bin/env bash
# scripts/deepspeed-wheels.sh — the one list of wheels a GPU machine lacks for scripts/deepspeed-experiment.sh
# (DeepSpeed and what it needs that the GPU image does not have), fetched here into .whl/ (git-ignored) to be
# carried there and installed offline:
#   python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
#   export PYTHONPATH=/tmp/site
# The GPU image (Python 3.12, torch 2.11+cu130, transformers, accelerate, safetensors) already has DeepSpeed's
# other needs: einops, msgpack, ninja, numpy, packaging, psutil, py-cpuinfo, tqdm, typing-extensions,
# nvidia-ml-py (docs/.../KINDS.md's package list). DeepSpeed is published as a source archive only: its wheel is
# built here with DS_BUILD_OPS=0 (pure Python; its C++/CUDA ops, CPUAdam included, are JIT-built on first use
# there, with the image's nvcc and ninja). The pydantic versions are python/requirements-test.txt's.
# Usage: scripts/deepspeed-wheels.sh   (PYTHON: the pip to use, default python3)
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
DEEPSPEED=deepspeed==0.19.8
BINARY=(hjson==3.1.0 pydantic==2.14.4 pydantic_core==2.50.5 annotated-types==0.8.0 typing-inspection==0.4.5)
mkdir -p .whl
grep -qxF /.whl/ .git/info/exclude 2>/dev/null || grep -qxF /.whl/ .gitignore || echo /.whl/ >> .git/info/exclude
for w in "${BINARY[@]}"; do
  "$PY" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 -d .whl "$w"
done
if ! ls .whl/deepspeed-"${DEEPSPEED#*==}"-py3-none-any.whl > /dev/null 2>&1; then
  DS_BUILD_OPS=0 "$PY" -m pip wheel -q --no-deps -w .whl "$DEEPSPEED"
fi
# one version of each: an older one left in .whl/ would stop the install there
for w in "${BINARY[@]}" "$DEEPSPEED"; do
  n=$(echo "${w%%==*}" | tr - _); v=${w#*==}
  for f in .whl/*.whl; do
    b=$(basename "$f"); bn=$(echo "${b%%-*}" | tr - _ | tr '[:upper:]' '[:lower:]')
    [ "$bn" = "$(echo "$n" | tr '[:upper:]' '[:lower:]')" ] && [[ "$b" != *-"$v"-* ]] && { echo "removing stale $b"; rm -f "$f"; }
  done
done
ls -la .whl/
du -ch .whl/*.whl | tail -1
