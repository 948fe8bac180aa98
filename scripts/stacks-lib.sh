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
