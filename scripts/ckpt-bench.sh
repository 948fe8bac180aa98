#!/usr/bin/env bash
# Runs `tessera ckpt bench` with a local s3rver for the S3 comparison and keeps the JSON results in
# bench/ckpt/results/. Usage: scripts/ckpt-bench.sh [DIR] [GIB] [SHARDS]   (defaults: /tmp 2 4)
# Extra env (e.g. TESSERA_S3_SIGN_PAYLOAD=1 TESSERA_S3_MULTIPART_THRESHOLD=64MiB for the signed multipart
# path that loopback endpoints no longer use by default) is passed through to tessera.
set -euo pipefail
cd "$(dirname "$0")/.."
DIR=${1:-/tmp}
GIB=${2:-2}
SHARDS=${3:-4}
BIN=${TESSERA_BIN:-build/tessera}
S3RVER=${TESSERA_S3RVER:-.deps/node/node_modules/.bin/s3rver}
mkdir -p bench/ckpt/results
OUT=bench/ckpt/results/ckpt-$(date +%Y%m%d-%H%M%S).json
S3ARGS=()
if [ -x "$S3RVER" ] && command -v node >/dev/null && command -v curl >/dev/null; then
  DATA=$(mktemp -d)
  PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
  "$S3RVER" -d "$DATA" -a 127.0.0.1 -p "$PORT" --silent >/dev/null 2>&1 &
  S3PID=$!
  trap 'kill $S3PID 2>/dev/null; wait $S3PID 2>/dev/null; rm -rf "$DATA"' EXIT
  for _ in $(seq 100); do (echo >/dev/tcp/127.0.0.1/$PORT) 2>/dev/null && break; sleep 0.1; done
  export AWS_ACCESS_KEY_ID=S3RVER AWS_SECRET_ACCESS_KEY=S3RVER TESSERA_S3_ENDPOINT=http://127.0.0.1:$PORT
  S3ARGS=(--s3 s3://bench/ckpt)
else
  echo "ckpt-bench: no s3rver/node/curl; skipping the S3 comparison" >&2
fi
"$BIN" ckpt bench --dir "$DIR" --gib "$GIB" --shards "$SHARDS" --reps 3 "${S3ARGS[@]}" --json "$OUT"
echo "results: $OUT"
