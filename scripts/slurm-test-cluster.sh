#!/usr/bin/env bash
# scripts/slurm-test-cluster.sh up|down|check DIR — a throw-away Slurm cluster on this one machine for the
# daemon's Slurm executor tests (docs/daemon.md, "Slurm executor"): its own munge key and munged, a slurmctld
# and TWO slurmd daemons posing as two nodes (a heterogeneous job does not start on a single node). Node 0 is
# this host's short name with two fake `gpu` GRES, node 1 is `localhost` with two fake `npu` GRES; both names
# resolve, so `tessera run` can find the store on the first node. The GRES files are character devices made
# with mknod (c 1 3). Everything lives under DIR (config, state, logs, sockets); clients need
# SLURM_CONF=DIR/etc/slurm.conf (printed by `up`). Needs root and Debian's slurm-wlm and munge.
#   up     create DIR, start everything, wait until both nodes are idle (exit 77 when Slurm cannot start here)
#   down   stop every daemon started from DIR (by the pid files under DIR/run), idempotent
#   check  exit 0 when both nodes answer as idle
set -uo pipefail
cmd=${1:-}
dir=${2:-}
if [ -z "$cmd" ] || [ -z "$dir" ]; then
  echo "usage: $0 up|down|check DIR" >&2
  exit 2
fi
skip() {
  echo "SKIPPED: $*"
  exit 77
}
export SLURM_CONF=$dir/etc/slurm.conf
host=$(hostname -s)

nodes_idle() {
  local out
  out=$(timeout 5 sinfo -h -N -o '%N %t' 2>/dev/null) || return 1
  [ "$(echo "$out" | grep -c -E ' (idle|mix|alloc)$')" -ge 2 ]
}

# Stops the daemons whose pid files are in DIR/run and waits (by pid, not by pid file: slurmctld removes its file
# before it has stopped) until they are gone: slurmd first (it ignores TERM while munged is down), then the
# controller, then munged; SIGKILL for any that outlives 10 s.
stop_pids() {
  local pids=("$@") p alive
  ((${#pids[@]})) || return 0
  kill "${pids[@]}" 2>/dev/null
  for _ in $(seq 1 100); do
    alive=0
    for p in "${pids[@]}"; do kill -0 "$p" 2>/dev/null && alive=1; done
    [ $alive = 0 ] && return 0
    sleep 0.1
  done
  kill -9 "${pids[@]}" 2>/dev/null
  return 0
}

pids_of() {
  local f pid
  for f in "$@"; do
    [ -f "$f" ] || continue
    pid=$(cat "$f" 2>/dev/null)
    # Only a process started from this cluster's configuration (a stale file may name a reused pid).
    [ -n "$pid" ] && grep -qa -e "$dir" "/proc/$pid/cmdline" 2>/dev/null && echo "$pid"
  done
}

down() {
  stop_pids $(pids_of "$dir"/run/slurmd-*.pid)
  stop_pids $(pids_of "$dir"/run/slurmctld.pid)
  stop_pids $(pids_of "$dir"/run/munged.pid)
  rm -f "$dir"/run/*.pid
  return 0
}

up() {
  [ "$(id -u)" = 0 ] || skip "the test Slurm cluster needs root (slurmd runs jobs as their users)"
  for b in munged mungekey slurmctld slurmd sbatch srun scontrol scancel sacct sinfo; do
    command -v "$b" >/dev/null 2>&1 || skip "$b not found: scripts/install-deps.sh installs slurm-wlm and munge"
  done
  getent hosts "$host" >/dev/null || skip "this host's name '$host' does not resolve"
  [ "$host" != localhost ] || skip "this host is named localhost; the second node needs another name"
  down
  mkdir -p "$dir"/{etc,state,spool,run,log,dev,munge}
  chmod 755 "$dir" "$dir/munge"  # munged refuses a socket directory that is not 0755
  for i in 0 1; do
    [ -e "$dir/dev/gpu$i" ] || mknod "$dir/dev/gpu$i" c 1 3
    [ -e "$dir/dev/npu$i" ] || mknod "$dir/dev/npu$i" c 1 3
  done
  [ -f "$dir/munge/munge.key" ] || mungekey -c -k "$dir/munge/munge.key" >/dev/null 2>&1 ||
    skip "mungekey could not create a key"
  chmod 600 "$dir/munge/munge.key"
  munged --key-file="$dir/munge/munge.key" --socket="$dir/munge/munge.socket.2" \
    --pid-file="$dir/run/munged.pid" --log-file="$dir/log/munged.log" --seed-file="$dir/munge/seed" -f ||
    skip "munged did not start: $(tail -n 3 "$dir/log/munged.log" 2>/dev/null)"
  cat >"$dir/etc/slurm.conf" <<EOF
ClusterName=tessera-test
SlurmctldHost=$host
SlurmctldPort=16817
SlurmUser=root
AuthType=auth/munge
AuthInfo=socket=$dir/munge/munge.socket.2
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
GresTypes=gpu,npu
ReturnToService=2
SchedulerParameters=bf_interval=1
KillWait=5
MinJobAge=600
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool/%n
SlurmctldPidFile=$dir/run/slurmctld.pid
SlurmdPidFile=$dir/run/slurmd-%n.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd-%n.log
JobCompType=jobcomp/filetxt
JobCompLoc=$dir/log/jobcomp.txt
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
NodeName=$host NodeHostname=$host NodeAddr=127.0.0.1 Port=17001 CPUs=2 Gres=gpu:2 State=UNKNOWN
NodeName=localhost NodeHostname=$host NodeAddr=127.0.0.1 Port=17002 CPUs=2 Gres=npu:2 State=UNKNOWN
PartitionName=main Nodes=ALL Default=YES MaxTime=INFINITE State=UP
EOF
  cat >"$dir/etc/gres.conf" <<EOF
NodeName=$host Name=gpu File=$dir/dev/gpu[0-1]
NodeName=localhost Name=npu File=$dir/dev/npu[0-1]
EOF
  slurmctld -c -f "$SLURM_CONF" || skip "slurmctld did not start: $(tail -n 3 "$dir/log/slurmctld.log" 2>/dev/null)"
  slurmd -f "$SLURM_CONF" -N "$host" || skip "slurmd $host did not start: $(tail -n 3 "$dir/log/slurmd-$host.log")"
  slurmd -f "$SLURM_CONF" -N localhost || skip "slurmd localhost did not start: $(tail -n 3 "$dir/log/slurmd-localhost.log")"
  for _ in $(seq 1 100); do
    if nodes_idle; then
      echo "SLURM_CONF=$SLURM_CONF"
      return 0
    fi
    sleep 0.1
  done
  echo "slurm-test-cluster: the nodes did not become idle within 10 s:" >&2
  timeout 5 sinfo -N >&2
  tail -n 5 "$dir"/log/*.log >&2
  down
  skip "Slurm did not start here (see the logs above)"
}

case $cmd in
  up) up ;;
  down) down ;;
  check) nodes_idle ;;
  *)
    echo "usage: $0 up|down|check DIR" >&2
    exit 2
    ;;
esac
