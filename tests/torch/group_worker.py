"""Subgroups and what a torch job exposes, under `tessera run` with host ranks (scripts/torch-check.sh, group "groups").

  split  (4 ranks) new_group and split_group make their groups by tsrCommSplit of the parent's communicator: each
         group's collectives are right, no rank makes a unique id for it (tessera._C.unique_ids_made: every id
         starts a store and a rendezvous) and the parent's comm_split_count grows on every rank of the parent, the
         ranks outside the group included; those get what torch gives them (NON_GROUP_MEMBER, None). That holds
         for new_group of a subset also while the default group is bound to no device (torch itself splits only
         from a bound one); a subset made with use_local_synchronization=True (only its members call in) or with
         Options of its own has its own rendezvous, and one of another backend (gloo) is not split. A host has no GPU here: init_process_group(device_id=cuda:0) is refused there,
         so the default group maps cuda to tessera too ("cpu:tessera,cuda:tessera") and is bound to cuda:0 by
         hand, which is what torch's split paths look at; the tensors stay on the CPU.
  store  (2 ranks) torch's env:// store listens on MASTER_ADDR alone, not on every interface: 127.0.0.1 on one
         host; under `tessera run --store ADDR:0` (a job of several nodes; scripts/torch-check.sh passes this
         host's first non-loopback address) the job's store address. The unique id rank 0 publishes in it names a
         per-group store that listens on the same address (TESSERA_BRIDGE_ADDR, else 127.0.0.1), and no key or
         value in torch's store (every one, by list_keys) holds TESSERA_TOKEN.
  token  (2 ranks) a rank whose TESSERA_TOKEN is not the job's is refused ("refused the job token") and the
         other rank's init_process_group fails within the group's timeout naming it.
"""
import datetime
import os
import sys
import time

import torch
import torch.distributed as dist

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from worker_common import arm_hang_dump, check, summary  # noqa: E402

import tessera.torch  # noqa: E402,F401
from tessera import _C  # noqa: E402


def world_backend():
    return dist.group.WORLD._get_backend(torch.device("cpu"))


def sum_of(ranks):
    return float(sum(r + 1 for r in ranks))


def check_group(g, ranks, label):
    """g's collectives on the members of `ranks` (global ranks), and torch's behaviour elsewhere."""
    me = dist.get_rank()
    if me not in ranks:
        check(g is None or g == dist.GroupMember.NON_GROUP_MEMBER, f"{label}: rank {me} outside got {g!r}")
        if g is not None:
            check(dist.get_rank(g) == -1, f"{label}: get_rank on a group this rank is outside is not -1")
            t = torch.full((4,), 7.0)
            dist.all_reduce(t, group=g)  # torch warns and does nothing on a rank outside the group
            check(torch.equal(t, torch.full((4,), 7.0)), f"{label}: all_reduce changed a non-member's tensor")
        return
    check(g is not None and dist.get_world_size(g) == len(ranks), f"{label}: size {dist.get_world_size(g)}")
    check(dist.get_rank(g) == sorted(ranks).index(me), f"{label}: group rank {dist.get_rank(g)}")
    t = torch.full((1000,), float(me + 1))
    dist.all_reduce(t, group=g)
    check(torch.equal(t, torch.full((1000,), sum_of(ranks))), f"{label}: all_reduce gave {t[0].item()}")
    out = [torch.zeros(3) for _ in ranks]
    dist.all_gather(out, torch.full((3,), float(me)), group=g)
    check([o[0].item() for o in out] == [float(r) for r in sorted(ranks)], f"{label}: all_gather gave {out}")
    b = torch.full((5,), float(me))
    dist.broadcast(b, src=max(ranks), group=g)
    check(torch.equal(b, torch.full((5,), float(max(ranks)))), f"{label}: broadcast gave {b}")


def split_mode():
    dist.init_process_group("cpu:tessera,cuda:tessera", timeout=datetime.timedelta(seconds=60))
    me, world = dist.get_rank(), dist.get_world_size()
    check(world == 4, f"split: needs 4 ranks, got {world}")
    parent = world_backend()
    check(isinstance(parent, _C.Backend) and parent.supports_splitting, f"split: world backend {parent!r}")

    def counts():
        return _C.unique_ids_made(), parent.comm_split_count()

    # Not bound to a device: new_group of every rank and of a subset are split (every rank calls new_group).
    ids, splits = counts()
    g_all = dist.new_group(list(range(world)))
    check(counts() == (ids, splits + 1), f"split: new_group(all) made an id or no split: {counts()} vs {ids, splits}")
    check_group(g_all, list(range(world)), "new_group(all)")
    # new_group made by its members alone: no split (the others do not call in), a rendezvous of its own. Made
    # while every rank has made the same groups: torch names it by a hash of its ranks and of how many groups this
    # rank belongs to, so after a group that some ranks are outside its members would name it differently.
    ids, splits = counts()
    g_local = dist.new_group([0, 1], use_local_synchronization=True)
    check_group(g_local, [0, 1], "new_group([0, 1], use_local_synchronization=True)")
    made = 1 if me == 0 else 0  # group rank 0 of [0, 1] made its id
    check(counts() == (ids + made, splits), f"split: local new_group([0, 1]): {counts()} vs {ids + made, splits}")
    ids, splits = counts()
    g_sub = dist.new_group([0, 1])
    check(counts() == (ids, splits + 1), f"split: unbound new_group([0, 1]): {counts()} vs {ids, splits + 1}")
    check_group(g_sub, [0, 1], "new_group([0, 1]) unbound")
    ids, splits = counts()
    g_three = dist.new_group([1, 2, 3])
    check(counts() == (ids, splits + 1), f"split: unbound new_group([1, 2, 3]): {counts()} vs {ids, splits + 1}")
    check_group(g_three, [1, 2, 3], "new_group([1, 2, 3]) unbound")
    # a new group of another backend, or with Options of its own, is not split from the default group
    ids, splits = counts()
    g_gloo = dist.new_group([0, 1], backend="gloo")
    check(counts() == (ids, splits), f"split: new_group(backend=gloo): {counts()} vs {ids, splits}")
    check_group(g_gloo, [0, 1], "new_group([0, 1], backend=gloo)")
    ids, splits = counts()
    g_opt = dist.new_group([2, 3], pg_options=tessera.torch.Options())
    made = 1 if me == 2 else 0  # group rank 0 of [2, 3] made its id
    check(counts() == (ids + made, splits), f"split: new_group with Options: {counts()} vs {ids + made, splits}")
    check_group(g_opt, [2, 3], "new_group([2, 3], pg_options=Options())")
    # the subgroups and the parent after one another: each still computes
    check_group(g_sub, [0, 1], "new_group([0, 1]) unbound, again")
    t = torch.ones(3)
    dist.all_reduce(t)
    check(torch.equal(t, torch.full((3,), float(world))), f"split: world all_reduce after the unbound splits gave {t}")

    # Bound (what init_process_group(device_id=cuda:N) does on a GPU host): new_group of a subset and
    # split_group are split, the ranks outside take part with no colour.
    dist.group.WORLD.bound_device_id = torch.device("cuda", 0)
    ids, splits = counts()
    g_odd = dist.new_group([1, 3])
    check(counts() == (ids, splits + 1), f"split: bound new_group([1, 3]): {counts()} vs {ids, splits + 1}")
    check_group(g_odd, [1, 3], "new_group([1, 3])")

    ids, splits = counts()
    pair = dist.split_group(split_ranks=[[0, 1], [2, 3]])
    check(counts() == (ids, splits + 1), f"split: split_group pairs: {counts()} vs {ids, splits + 1}")
    mine = [0, 1] if me < 2 else [2, 3]
    check_group(pair, mine, "split_group([[0, 1], [2, 3]])")
    check(pair.bound_device_id == torch.device("cuda", 0), "split: the split group lost the bound device")

    ids, splits = counts()
    evens = dist.split_group(split_ranks=[[0, 2]])
    check(counts() == (ids, splits + 1), f"split: split_group([[0, 2]]): {counts()} vs {ids, splits + 1}")
    check_group(evens, [0, 2], "split_group([[0, 2]])")

    # A split of a split: the pair's backend splits its own communicator into one-rank groups.
    pair_backend = pair._get_backend(torch.device("cuda"))
    pair_splits = pair_backend.comm_split_count()
    single = dist.split_group(parent_pg=pair, split_ranks=[[0], [1]])
    check(pair_backend.comm_split_count() == pair_splits + 1, "split: split_group of the pair made no split")
    check(single is not None and dist.get_world_size(single) == 1, "split: split_group of the pair: size")
    t = torch.full((2,), float(me))
    dist.all_reduce(t, group=single)
    check(torch.equal(t, torch.full((2,), float(me))), f"split: all_reduce on a group of one gave {t}")

    # The parent still works, and every group goes away with it.
    t = torch.ones(10)
    dist.all_reduce(t)
    check(torch.equal(t, torch.full((10,), float(world))), f"split: world all_reduce after the splits gave {t}")
    # rank 0: the world's id and the use_local_synchronization group's; rank 2: the group with Options
    made = {0: 2, 2: 1}.get(me, 0)
    check(_C.unique_ids_made() == made, f"split: rank {me} made {_C.unique_ids_made()} ids, not {made}")
    dist.destroy_process_group()


def listening(port):
    """The local addresses of the sockets listening on `port` (IPv4 and IPv6), from /proc/net/tcp*."""
    found = []
    for name, width in (("/proc/net/tcp", 8), ("/proc/net/tcp6", 32)):
        try:
            lines = open(name).read().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            f = line.split()
            addr, p = f[1].split(":")
            if f[3] == "0A" and int(p, 16) == port:  # 0A: LISTEN
                if width == 8:
                    found.append(".".join(str(b) for b in reversed(bytes.fromhex(addr))))
                else:
                    found.append("any6" if int(addr, 16) == 0 else "v6:" + addr)
    return found


def store_mode():
    dist.init_process_group("tessera", timeout=datetime.timedelta(seconds=60))
    me = dist.get_rank()
    if me == 0:
        port = int(os.environ["MASTER_PORT"])
        addrs = listening(port)
        print(f"store: torch's store at MASTER_PORT {port} listens on {addrs}", flush=True)
        check(addrs and all(a == os.environ["MASTER_ADDR"] for a in addrs),
              f"store: torch's store listens on {addrs}, not only on MASTER_ADDR {os.environ['MASTER_ADDR']}")
        # The store the backend got: torch's PrefixStore of the device over the group's
        store = dist.PrefixStore("cpu/", dist.distributed_c10d._get_default_store())
        check(store.check(["tessera/0/uid"]), "store: no unique id published in torch's store")
        uid = store.get("tessera/0/uid")
        token = os.environ["TESSERA_TOKEN"].encode()
        check(token not in uid, "store: the unique id published in torch's store carries TESSERA_TOKEN")
        text = uid.split(b"\0")[0].decode()
        print(f"store: the published unique id reads {text!r}", flush=True)
        want = os.environ.get("TESSERA_BRIDGE_ADDR") or "127.0.0.1"
        check(text.startswith(f"TSRU2 - {want}:"), f"store: the unique id {text!r} does not name a store on {want}")
        id_port = int(text.rsplit(":", 1)[1])
        check(listening(id_port) == [want], f"store: the group's store listens on {listening(id_port)}, not on {want}")
    t = torch.ones(4)
    dist.all_reduce(t)
    check(torch.equal(t, torch.full((4,), 2.0)), f"store: all_reduce gave {t}")
    dist.barrier()  # every rank's keys are in the store
    if me == 0:
        # What anyone who reaches torch's store (it checks no credentials) can read: every key and value.
        store = dist.distributed_c10d._get_default_store()
        token = os.environ["TESSERA_TOKEN"]
        forms = [token.encode(), token.lower().encode(), token.upper().encode(), bytes.fromhex(token)]
        keys = store.list_keys()
        print(f"store: torch's store holds {len(keys)} keys: {sorted(keys)}", flush=True)
        check(any(k.endswith("tessera/0/uid") for k in keys), "store: list_keys does not list the unique id's key")
        leaks = [k for k in keys if any(f in k.encode() or f in store.get(k) for f in forms)]
        check(not leaks, f"store: TESSERA_TOKEN in torch's store under {leaks}")
    dist.barrier()
    dist.destroy_process_group()


def token_mode():
    rank = int(os.environ["RANK"])
    if rank == 1:
        os.environ["TESSERA_TOKEN"] = "0" * 32  # not the job's
    start = time.monotonic()
    try:
        dist.init_process_group("tessera", timeout=datetime.timedelta(seconds=10))
        dist.all_reduce(torch.ones(4))
        check(False, f"token: rank {rank} joined and computed")
    except RuntimeError as e:
        msg, took = str(e), time.monotonic() - start
        print(f"token: rank {rank} raised after {took:.1f}s: {msg.splitlines()[0][:300]}", flush=True)
        if rank == 1:
            check("refused the job token" in msg, f"token: the wrong-token rank's error does not say so: {msg[:300]}")
        else:
            check("rank 1" in msg, f"token: rank 0's error does not name rank 1: {msg[:300]}")
        check(took < 25, f"token: rank {rank} took {took:.1f}s (timeout 10s)")
    os._exit(summary(f"token rank {rank}"))


def main():
    mode = sys.argv[1]
    arm_hang_dump()
    {"split": split_mode, "store": store_mode, "token": token_mode}[mode]()
    sys.exit(summary(f"{mode} rank {os.environ.get('RANK')}"))


if __name__ == "__main__":
    main()
