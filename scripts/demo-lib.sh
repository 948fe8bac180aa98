# shellcheck shell=bash
# Helpers shared by scripts/demo.sh (the CPU demo) and scripts/demo-gpu.sh (the same flow on one GPU).
# Sourced, not run. The caller sets TESSERA (the CLI), STATE (the daemon's state directory, also
# TESSERA_HOME), T0 (the start time, date +%s) and DAEMON_PID (empty until the daemon runs).

# Stops the daemon and the demo's jobs still running; says where the state is.
demo_cleanup() {
  set +e
  if [ -n "$DAEMON_PID" ]; then kill "$DAEMON_PID" 2>/dev/null; wait "$DAEMON_PID" 2>/dev/null; fi
  # Jobs run in their own sessions (they outlive a daemon crash by design): stop the demo's ones.
  for f in "$STATE"/jobs/*/attempt-*/pid.json; do
    [ -f "$f" ] || continue
    [ -f "$(dirname "$f")/exit.json" ] && continue
    sid=$(sed 's/.*"shim":\([0-9]*\).*/\1/' "$f")
    pkill -KILL -s "$sid" 2>/dev/null
  done
  echo
  echo "demo: state, logs and checkpoints are in $STATE (remove it when done)"
}

step() { printf '\n\033[1m== %s\033[0m  (t=%ds)\n' "$*" "$(($(date +%s) - T0))"; }
run() { printf '$ %s\n' "$*"; "$@"; }
state_of() { "$TESSERA" status "$1" --json | sed -n 's/^  "state": "\(.*\)",$/\1/p'; }
wait_state() {  # job, state, timeout seconds; gives up at once when the job ended in another state
  local i s
  for ((i = 0; i < $3 * 5; i++)); do
    s=$(state_of "$1")
    [ "$s" = "$2" ] && return 0
    case $s in succeeded | failed | cancelled) break ;; esac
    sleep 0.2
  done
  echo "demo: job $1 did not reach '$2' within $3 s (it is '$s')" >&2
  "$TESSERA" status "$1" >&2
  echo "demo: the end of its log:" >&2
  "$TESSERA" logs "$1" --tail 3000 >&2
  exit 1
}
progress_of() { "$TESSERA" status "$1" --json | tr -d '\n ' | sed -n 's/.*"progress":{[^}]*"step":\([0-9]*\).*/\1/p'; }
wait_progress() {  # job, step, timeout seconds
  local i
  for ((i = 0; i < $3 * 5; i++)); do
    local s
    s=$(progress_of "$1")
    [ -n "$s" ] && [ "$s" -ge "$2" ] && return 0
    case $(state_of "$1") in succeeded | failed | cancelled) break ;; esac
    sleep 0.2
  done
  echo "demo: job $1 did not reach step $2 within $3 s" >&2
  "$TESSERA" status "$1" >&2
  "$TESSERA" logs "$1" --tail 3000 >&2
  exit 1
}

# As root, the daemon runs jobs as the unprivileged user nobody (docs/daemon.md, Security model): nobody
# must be able to reach every file the job runs, i.e. every parent directory must be world-traversable.
# Says so now (exit 1) instead of failing inside the first job. Arguments: the files to check.
demo_check_nobody() {
  [ "$(id -u)" = 0 ] && command -v setpriv >/dev/null || return 0
  local f op
  for f in "$@"; do
    op=-r
    [ -x "$f" ] && op=-x  # a program must be executable for nobody, a script or data file readable
    if ! setpriv --reuid=nobody --regid=nogroup --clear-groups test "$op" "$f" 2>/dev/null; then
      echo "demo: running as root, the daemon runs jobs as the unprivileged user 'nobody', which cannot reach" >&2
      echo "      $f (a parent directory is not world-traversable, e.g. /root is 0700)." >&2
      echo "      Clone Tessera under /opt, /srv or /home, or allow traversal: chmod o+x on each parent directory." >&2
      exit 1
    fi
  done
}

# Starts the daemon with its embedded defaults on $STATE; prints the console's address. Sets DAEMON_PID, ADDR.
demo_start_daemon() {
  "$TESSERA" daemon --state-dir "$STATE" >"$STATE/daemon.log" 2>&1 &
  DAEMON_PID=$!
  local i
  for ((i = 0; i < 100; i++)); do [ -f "$STATE/daemon.json" ] && break; sleep 0.1; done
  [ -f "$STATE/daemon.json" ] || { cat "$STATE/daemon.log" >&2; exit 1; }
  head -1 "$STATE/daemon.log"
  ADDR=$(sed 's/.*"address":"\([^"]*\)".*/\1/' "$STATE/daemon.json")
  printf '\033[1mweb console: http://%s/\033[0m  (log in with the admin token: %s daemon token)\n' "$ADDR" "$TESSERA"
  echo "metrics: http://$ADDR/metrics"
}

# The bill, the compliance report and the same series from /metrics. Argument: the policy file.
demo_bill() {
  run "$TESSERA" bill --by job
  run "$TESSERA" bill --by type
  run "$TESSERA" bill compliance --day "$(date -u +%F)" --policy "$1"
  echo "the daemon's /metrics (what Prometheus scrapes; docs/daemon.md lists every series): the money and job counts"
  echo "as above; tessera_domestic_share is the share of the cards allocated now (1 when nothing runs), not the day's:"
  curl -s -H "Authorization: Bearer $(cat "$STATE/token")" "http://$ADDR/metrics" |
    grep -E '^tessera_(billed_amount_total|job_(starts|resumes|preemptions|moves)_total|domestic_(share|floor))' || true
}

# KEEP=1: the daemon and its console stay up until Ctrl-C. Argument: how the demo was started (for the hint).
demo_keep() {
  if [ "${KEEP:-0}" = 1 ]; then
    echo "KEEP=1: the daemon and its web console stay up at http://$ADDR/ until Ctrl-C"
    while kill -0 "$DAEMON_PID" 2>/dev/null; do sleep 1; done
  else
    echo "(KEEP=1 $1 keeps the daemon and its console up after this step, until Ctrl-C)"
  fi
}
