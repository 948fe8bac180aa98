#!/usr/bin/env bash
# The README's main job (make demo). For now: a hybrid allreduce across two islands of host ranks.
set -euo pipefail
TESSERA=${1:-build/tessera}
exec "$TESSERA" run --island ascend=host:2 --island nvidia=host:2 -- "$TESSERA" bench allreduce --sizes 1M,16M,64M --dtype f32 --check --iters 5 --verbose
