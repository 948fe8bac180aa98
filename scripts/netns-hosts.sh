#!/usr/bin/env bash
# Makes "hosts" on one machine out of Linux namespaces, for the multi-host tests and benchmarks.
#
#   scripts/netns-hosts.sh check              exit 0 when namespaces can be made here (root, `ip netns`), else
#                                              print why and exit 1
#   scripts/netns-hosts.sh up TAG N           hosts 0..N-1: network namespaces tsr-TAG-h0..; host I has address
#                                              10.77.0.(I+1)/24 on its interface eth0. N=2: one veth pair between
#                                              the two; N>2: each host's veth to a bridge in namespace tsr-TAG-sw;
#                                              names h0..hN-1 resolve on every host (/etc/netns/NS/hosts)
#   scripts/netns-hosts.sh exec TAG I CMD...  runs CMD on host I: in its network namespace and in new UTS, IPC
#                                              and mount namespaces, with hostname hI and a private /dev/shm (so
#                                              neither SysV nor POSIX shared memory crosses hosts)
#   scripts/netns-hosts.sh cut TAG I          takes host I's link down (the host "disappears" from the network)
#   scripts/netns-hosts.sh down TAG           removes every namespace of TAG (and with them the links)
#   scripts/netns-hosts.sh down-all           removes every tsr-* namespace (CI's clean-up)
set -euo pipefail
cmd=${1:-}
ns() { echo "tsr-$1-h$2"; }

case "$cmd" in
  check)
    if [ "$(id -u)" != 0 ]; then echo "netns-hosts: not root (network namespaces need root)"; exit 1; fi
    if ! command -v ip >/dev/null || ! command -v unshare >/dev/null; then
      echo "netns-hosts: 'ip' (iproute2) or 'unshare' (util-linux) is missing"; exit 1
    fi
    probe="tsr-probe-$$"
    if ! out=$(ip netns add "$probe" 2>&1); then echo "netns-hosts: 'ip netns add' fails here: $out"; exit 1; fi
    ok=1
    ip -n "$probe" link add v0 type veth peer name v1 2>/dev/null || ok=0
    ip netns exec "$probe" unshare --ipc --uts --mount true 2>/dev/null || ok=0
    ip netns del "$probe"
    if [ $ok = 0 ]; then echo "netns-hosts: veth links or unshare --ipc --uts --mount fail here"; exit 1; fi
    ;;
  up)
    tag=$2 n=$3
    [[ "$n" =~ ^[0-9]+$ ]] && [ "$n" -ge 2 ] && [ "$n" -le 200 ] || { echo "netns-hosts: N='$n' is not in 2..200" >&2; exit 2; }
    for ((i = 0; i < n; i++)); do
      ip netns add "$(ns "$tag" $i)"
      ip -n "$(ns "$tag" $i)" link set lo up
    done
    if [ "$n" = 2 ]; then
      ip -n "$(ns "$tag" 0)" link add eth0 type veth peer name eth0 netns "$(ns "$tag" 1)"
    else
      sw="tsr-$tag-sw"
      ip netns add "$sw"
      ip -n "$sw" link add br0 type bridge
      ip -n "$sw" link set br0 up
      for ((i = 0; i < n; i++)); do
        ip -n "$sw" link add "p$i" type veth peer name eth0 netns "$(ns "$tag" $i)"
        ip -n "$sw" link set "p$i" master br0
        ip -n "$sw" link set "p$i" up
      done
    fi
    for ((i = 0; i < n; i++)); do
      ip -n "$(ns "$tag" $i)" addr add "10.77.0.$((i + 1))/24" dev eth0
      ip -n "$(ns "$tag" $i)" link set eth0 up
    done
    # Until every eth0 is running: the kernel reports a new link's carrier up to a second late, and a program that
    # lists the interfaces meanwhile (UCX does, once) leaves eth0 out.
    for ((i = 0; i < n; i++)); do
      for _ in $(seq 100); do
        ip -n "$(ns "$tag" $i)" link show eth0 | grep -q 'state UP' && break
        sleep 0.05
      done
    done
    # Host names h0..hN-1 resolve on every host (`ip netns exec` mounts /etc/netns/NS/hosts on /etc/hosts).
    for ((i = 0; i < n; i++)); do
      mkdir -p "/etc/netns/$(ns "$tag" $i)"
      { echo "127.0.0.1 localhost"; for ((j = 0; j < n; j++)); do echo "10.77.0.$((j + 1)) h$j"; done; } \
        >"/etc/netns/$(ns "$tag" $i)/hosts"
    done
    ;;
  exec)
    tag=$2 i=$3
    shift 3
    exec ip netns exec "$(ns "$tag" "$i")" unshare --ipc --uts --mount --propagation private \
      sh -c 'hostname "$0" && mount -t tmpfs -o mode=1777 tmpfs /dev/shm && exec "$@"' "h$i" "$@"
    ;;
  cut)
    tag=$2 i=$3
    ip -n "$(ns "$tag" "$i")" link set eth0 down
    ;;
  down)
    tag=$2
    for n in $(ip netns list | awk '{print $1}' | grep -E "^tsr-$tag-(h[0-9]+|sw)$" || true); do ip netns del "$n"; done
    rm -rf /etc/netns/tsr-"$tag"-h*
    ;;
  down-all)
    for n in $(ip netns list | awk '{print $1}' | grep -E "^tsr-" || true); do ip netns del "$n"; done
    rm -rf /etc/netns/tsr-*
    ;;
  *)
    sed -n '2,17p' "$0" >&2
    exit 2
    ;;
esac
