#!/usr/bin/env bash
# Runs `tessera ckpt bench` with a local S3 server for the S3 comparison and writes the JSON result to
# RESULTS (default build/bench-results/). The server is moto's standalone server from the project's .venv
# (scripts/install-deps.sh; or TESSERA_S3_SERVER=/path/to/moto_server), with SigV4 checking switched on as
# the tests do it (tests/ckpt/s3_harness.hpp; docs/ckpt.md, "Tests"). moto keeps the objects in memory.
# Usage: scripts/ckpt-bench.sh [DIR] [GIB] [SHARDS]   (defaults: /tmp 2 4)
# Extra env (e.g. TESSERA_S3_SIGN_PAYLOAD=1 TESSERA_S3_MULTIPART_THRESHOLD=64MiB for the signed multipart
# path that loopback endpoints no longer use by default) is passed through to tessera.
set -euo pipefail
cd "$(dirname "$0")/.."
DIR=${1:-/tmp}
GIB=${2:-2}
SHARDS=${3:-4}
BIN=${TESSERA_BIN:-build/tessera}
S3SERVER=${TESSERA_S3_SERVER:-.venv/bin/moto_server}
RESULTS=${RESULTS:-build/bench-results}
mkdir -p "$RESULTS"
OUT=$RESULTS/ckpt-$(date +%Y%m%d-%H%M%S).json
S3ARGS=()
if [ -x "$S3SERVER" ] && command -v curl >/dev/null; then
  PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
  LOG=$(mktemp)
  # Without INITIAL_NO_AUTH_ACTION_COUNT nothing is checked until reset-auth below.
  env -u INITIAL_NO_AUTH_ACTION_COUNT "$S3SERVER" -H 127.0.0.1 -p "$PORT" >"$LOG" 2>&1 &
  S3PID=$!
  trap 'kill $S3PID 2>/dev/null; wait $S3PID 2>/dev/null; rm -f "$LOG"' EXIT
  fail() { echo "ckpt-bench: $1 failed; $S3SERVER's log:" >&2; tail -20 "$LOG" >&2; exit 1; }
  for _ in $(seq 300); do
    (echo >/dev/tcp/127.0.0.1/"$PORT") 2>/dev/null && break
    kill -0 $S3PID 2>/dev/null || fail "starting $S3SERVER (it exited)"
    sleep 0.1
  done
  EP=http://127.0.0.1:$PORT
  # An IAM user with an access key and a policy allowing s3:*. moto routes these by the credential scope of
  # the Authorization header and checks nothing else yet.
  iam() {
    curl -sf -H 'Authorization: AWS4-HMAC-SHA256 Credential=tessera-setup/20000101/us-east-1/iam/aws4_request, SignedHeaders=host, Signature=0' \
      -d "Action=$1" -d UserName=tessera -d Version=2010-05-08 "${@:2}" "$EP/" || fail "moto IAM $1"
  }
  iam CreateUser >/dev/null
  KEY=$(iam CreateAccessKey)
  AK=$(sed -n 's:.*<AccessKeyId>\([^<]*\)</AccessKeyId>.*:\1:p' <<<"$KEY")
  SK=$(sed -n 's:.*<SecretAccessKey>\([^<]*\)</SecretAccessKey>.*:\1:p' <<<"$KEY")
  if [ -z "$AK" ] || [ -z "$SK" ]; then fail "reading the access key from moto's CreateAccessKey answer ($KEY)"; fi
  iam PutUserPolicy -d PolicyName=s3-all \
    --data-urlencode 'PolicyDocument={"Version":"2012-10-17","Statement":[{"Effect":"Allow","Action":"s3:*","Resource":"*"}]}' >/dev/null
  # From here every request needs a valid SigV4 signature by that key (a form Content-Type would hide the
  # body from moto: text/plain).
  curl -sf -H 'Content-Type: text/plain' --data-binary 0 "$EP/moto-api/reset-auth" >/dev/null ||
    fail "switching moto's SigV4 checking on (POST /moto-api/reset-auth)"
  export AWS_ACCESS_KEY_ID=$AK AWS_SECRET_ACCESS_KEY=$SK TESSERA_S3_ENDPOINT=$EP
  unset AWS_SESSION_TOKEN
  S3ARGS=(--s3 s3://bench/ckpt)
else
  echo "ckpt-bench: no $S3SERVER (scripts/install-deps.sh installs it into .venv; or set TESSERA_S3_SERVER) or no curl; skipping the S3 comparison" >&2
fi
"$BIN" ckpt bench --dir "$DIR" --gib "$GIB" --shards "$SHARDS" --reps 3 "${S3ARGS[@]}" --json "$OUT"
echo "results: $OUT"
