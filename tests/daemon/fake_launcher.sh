#!/usr/bin/env bash
# tests/daemon/fake_launcher.sh: a stand-in for `tessera run` used by the daemon tests only when this
# build has no launcher yet. Same command line (--island VENDOR=DEVICE:COUNT ... -- PROGRAM ARGS); starts
# the ranks with TESSERA_RANK/WORLD_SIZE/ISLAND/ISLAND_VENDOR/DEVICE set, forwards SIGTERM/SIGINT, and
# exits with the first non-zero rank status. No store: only for programs that do not call the comm API.
set -u
islands=()
while [ $# -gt 0 ]; do
  case "$1" in
    --island) islands+=("$2"); shift 2 ;;
    --) shift; break ;;
    *) echo "fake_launcher: unknown option $1" >&2; exit 2 ;;
  esac
done
world=0
for i in "${islands[@]}"; do world=$((world + ${i##*:})); done
pids=()
rank=0
idx=0
for i in "${islands[@]}"; do
  vendor=${i%%=*}; rest=${i#*=}; device=${rest%%:*}; count=${rest##*:}
  for ((k = 0; k < count; k++)); do
    TESSERA_RANK=$rank TESSERA_WORLD_SIZE=$world TESSERA_ISLAND=$idx TESSERA_ISLAND_VENDOR=$vendor \
      TESSERA_DEVICE=$device "$@" &
    pids+=($!)
    rank=$((rank + 1))
  done
  idx=$((idx + 1))
done
trap 'kill -TERM "${pids[@]}" 2>/dev/null' TERM INT
rc=0
for p in "${pids[@]}"; do
  while true; do
    wait "$p"; s=$?
    # wait returns >128 when interrupted by a trapped signal while the child still runs
    if kill -0 "$p" 2>/dev/null; then continue; fi
    break
  done
  [ "$rc" = 0 ] && [ "$s" != 0 ] && rc=$s
done
exit $rc
