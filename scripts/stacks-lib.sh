# shellcheck shell=bash
# Native stacks of hung processes, shared by scripts/torch-check.sh and scripts/lm-experiment.sh. Sourced.
# native_stacks PATTERN: every thread of every process whose command line matches PATTERN (pgrep -f), through
# gdb or eu-stack where the machine has one, else each thread's name and kernel wait channel.
native_stacks() {
  local p
  for p in $(pgrep -f "$1" || true); do
    echo "=== pid $p: $(tr '\0' ' ' < /proc/$p/cmdline 2>/dev/null | cut -c1-160)"
    if command -v gdb >/dev/null; then
      timeout 60 gdb -p "$p" -batch -ex "thread apply all bt 30" 2>&1 | grep -vE "^\[(New|Thread) " | head -400
    elif command -v eu-stack >/dev/null; then
      timeout 60 eu-stack -p "$p" 2>&1 | head -400
    else
      for t in /proc/$p/task/*; do echo "task ${t##*/}: $(cat "$t/comm") wchan=$(cat "$t/wchan" 2>/dev/null)"; done
    fi
  done
}

# hang_watch PID SECONDS PATTERN FILE: in the background, native_stacks PATTERN into FILE if PID still runs
# SECONDS from now; the watcher's pid in HANG_WATCHER. hang_watch_stop ends it, and its sleep with it: the
# watcher holds none of the caller's output open, so that ctest, which waits for a test's output to close,
# does not wait out the watcher's sleep after the job it watched has ended.
hang_watch() {
  local pid=$1 secs=$2 pattern=$3 file=$4
  ( trap 'kill $s 2>/dev/null; exit 0' TERM
    sleep "$secs" & s=$!
    wait $s && kill -0 "$pid" 2>/dev/null && native_stacks "$pattern" > "$file" 2>&1 ) > /dev/null 2>&1 &
  HANG_WATCHER=$!
}
hang_watch_stop() {
  kill "$HANG_WATCHER" 2>/dev/null
  wait "$HANG_WATCHER" 2>/dev/null
  return 0
}
