#!/usr/bin/env bash
# tests/daemon/sleep_job.sh SECONDS [ignore-term]: a job for the daemon tests. Rank 0 records its pid and
# environment at the path prefix $OUT_PREFIX (attempt-numbered), prints "step N" once per 0.1 s, and on SIGTERM writes
# term.<attempt> and exits 143 — unless "ignore-term" is given, then only SIGKILL stops it.
set -u
secs=$1
mode=${2:-}
a=${TESSERA_ATTEMPT:-0}
r=${TESSERA_RANK:-0}
if [ "$mode" = ignore-term ]; then
  trap 'echo "ignoring SIGTERM"' TERM
else
  trap 'echo term > "${OUT_PREFIX}term.$a.$r"; exit 143' TERM
fi
# The pid file is written after the trap is set: a test that sees it may signal at once.
if [ "$r" = 0 ]; then
  # Written to a temporary name and renamed, so that a test never reads half a file.
  env | grep '^TESSERA_' | sort > "${OUT_PREFIX}env.$a.tmp" && mv "${OUT_PREFIX}env.$a.tmp" "${OUT_PREFIX}env.$a"
  echo $$ > "${OUT_PREFIX}pid.$a.tmp" && mv "${OUT_PREFIX}pid.$a.tmp" "${OUT_PREFIX}pid.$a"
fi
n=$((secs * 10))
for ((i = 1; i <= n; i++)); do
  [ "$r" = 0 ] && echo "step $i/$n"
  sleep 0.1
done
[ "$r" = 0 ] && echo done > "${OUT_PREFIX}done.$a"
exit 0
