#!/usr/bin/env bash
# scripts/stacks-lib.sh's hang_watch: once hang_watch_stop has ended the watcher of a job that finished, nothing
# of the watcher is left — no sleep, and nothing holding the caller's output open (ctest waits for a test's
# output to close: a sleep left holding it kept each torch group running its full hang delay after its last job).
# Usage: hang_watch.sh SOURCE_DIR
set -uo pipefail
# shellcheck source=scripts/stacks-lib.sh
source "${1:?usage: hang_watch.sh SOURCE_DIR}/scripts/stacks-lib.sh"
secs=$((30000 + RANDOM))  # a delay no other process has: the sleep to look for afterwards
stacks=$(mktemp)
trap 'rm -f "$stacks"' EXIT
# The command substitution reads until every writer of its pipe has closed it: a watcher's sleep left behind
# holding it would keep it open for $secs seconds, past this test's ctest TIMEOUT.
out=$(
  sleep 0.2 & job=$!
  hang_watch $job $secs "hang_watch_no_such_process" "$stacks"
  wait $job
  hang_watch_stop
  echo "job ended"
)
[ "$out" = "job ended" ] || { echo "FAIL: the job's output was '$out'"; exit 1; }
if left=$(pgrep -a -x -f "sleep $secs"); then
  echo "FAIL: hang_watch_stop left the watcher's sleep running: $left"; exit 1
fi
[ -s "$stacks" ] && { echo "FAIL: the watcher wrote stacks for a job that had ended: $(head -3 "$stacks")"; exit 1; }
echo "hang_watch: the watcher of an ended job is gone, its sleep with it"
