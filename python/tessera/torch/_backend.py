"""The creator torch.distributed calls for backend "tessera", and the rendezvous behind it.

For every process group (the default one, each new_group, each DeviceMesh dimension) torch calls
`_create` with the group's store (a PrefixStore of the init_process_group store: env://, tcp://, file://),
this rank's group rank and size, and the timeout. `_create`
  1. decides this rank's device: TESSERA_DEVICE (set by `tessera run`), else Options.device, else the
     current device of this process's accelerator (cuda when CUDA is available, else npu or musa when torch's
     PrivateUse1 backend is renamed so and available: torch_npu, torch_musa), else "host"; the device families
     and their torch device types are Tessera's family table's (_devices.py), and the rank's device becomes the
     current one of its torch type (corex:1 -> torch.cuda.set_device(1));
  2. decides this rank's island in the group: TESSERA_ISLAND/TESSERA_ISLAND_VENDOR when set, else
     Options.island/vendor, else one island per device type ("host", "nvidia"). The members publish
     theirs in the store and the islands present in the group are renumbered 0..k-1 in order, so a
     subgroup that lacks an island of the world still has islands without gaps;
  3. group rank 0 makes a Tessera unique id (tsrGetUniqueId) and publishes it in the store, as
     ProcessGroupNCCL does with NCCL's; every rank joins with tsrCommInitRank.
A subgroup is split from its parent's communicator instead (tsrCommSplit: no unique id, no rendezvous, the
members keep their device and island) where every rank of the parent takes part, as ProcessGroupNCCL uses
ncclCommSplit: split_group always (torch calls the backend's split on every rank of the parent), and new_group
(parent: the default group). When the default group is bound to a device (init_process_group's device_id)
torch itself calls perform_nocolor_split on the ranks outside the new group. When it is not, torch calls nothing
on those ranks (ProcessGroupNCCL's communicators are made lazily, so torch splits only from a bound group), but
every rank of the world calls new_group all the same, and a tessera group's communicator exists from its start:
`_install_new_group_split` wraps torch's group maker so that those ranks take part in the split with no colour,
and the members split (_unbound_parent). A new_group made with use_local_synchronization=True (only its members
call in), with a pg_tag, or with Options of its own makes its own unique id as above.
"""
import datetime
import os
import re
import threading

import torch
import torch.distributed as dist

from . import _devices

BACKEND_NAME = "tessera"
_lock = threading.Lock()
_incarnations = {}  # group id -> how many times this process made a backend for it


class Options:
    """Backend options: pass as `pg_options` / `backend_options` to init_process_group or new_group.

    island: this rank's island index in the world (ranks of one island share one vendor library);
    vendor: the island's vendor name; device: "host" or a device family's PREFIX:N ("cuda:0", "npu:1", "corex:0";
    every family with a torch device type). Environment variables set by
    `tessera run` (TESSERA_ISLAND, TESSERA_ISLAND_VENDOR, TESSERA_DEVICE) take precedence.
    """

    def __init__(self, island=None, vendor=None, device=None):
        self.island = island
        self.vendor = vendor
        self.device = device
        self._timeout = None

    def __repr__(self):
        return f"tessera.torch.Options(island={self.island!r}, vendor={self.vendor!r}, device={self.device!r})"


def _privateuse1():
    """The device module of torch's PrivateUse1 backend when it is renamed to the torch type of one of Tessera's device
    families and its module (torch.npu, torch.musa) is registered, else None."""
    name = torch._C._get_privateuse1_backend_name()
    if name not in _devices.PRIVATEUSE1_TYPES:
        return None
    return getattr(torch, name, None)


def known_device_types():
    """The torch device types this process can hand to the backend now: cpu, cuda when CUDA is available, and
    npu / musa when torch's PrivateUse1 backend carries that name (torch_npu, torch_musa, the test device)."""
    types = ["cpu"]
    if torch.cuda.is_available():
        types.append("cuda")
    if _privateuse1() is not None:
        types.append(torch._C._get_privateuse1_backend_name())
    return types


def _device(options):
    dev = os.environ.get("TESSERA_DEVICE") or (options.device if options is not None else None)
    if not dev:
        mod = _privateuse1()
        if torch.cuda.is_available():
            dev = f"cuda:{torch.cuda.current_device()}"
        elif mod is not None and mod.is_available():
            dev = f"{torch._C._get_privateuse1_backend_name()}:{mod.current_device()}"
        else:
            dev = "host"
    if dev == "cpu":
        dev = "host"
    m = re.fullmatch(r"([a-z0-9_]+):\d+", dev)
    family = _devices.family(m.group(1)) if m else None
    if dev != "host" and family is None:
        raise ValueError(f"tessera: device {dev!r} is not one of {_devices.device_words()} (TESSERA_DEVICE or "
                         "Options.device)")
    ttype = family.torch_type if family is not None else None
    if ttype in _devices.PRIVATEUSE1_TYPES and torch._C._get_privateuse1_backend_name() != ttype:
        raise ValueError(f"tessera: device {dev!r} needs torch's PrivateUse1 backend named {ttype!r} (import "
                         f"torch_{ttype} first); this process's is {torch._C._get_privateuse1_backend_name()!r}")
    return dev


def _declared_island(options):
    env = os.environ.get("TESSERA_ISLAND")
    if env is not None and env != "":
        try:
            isl = int(env)
        except ValueError:
            raise ValueError(f"tessera: TESSERA_ISLAND={env!r} is not an island index") from None
    elif options is not None and options.island is not None:
        isl = int(options.island)
    else:
        isl = -1
    vendor = os.environ.get("TESSERA_ISLAND_VENDOR") or (options.vendor if options is not None else None) or ""
    if "|" in vendor:
        raise ValueError(f"tessera: vendor name {vendor!r} may not contain '|'")
    return isl, vendor


def island_layout(records):
    """Maps each member's (declared island, vendor, device kind) to (island in the group, vendor).

    records[r] = (island or -1, vendor or "", kind). Raises ValueError when some members declare an
    island and others don't, or one island mixes vendors or device kinds.
    """
    declared = [isl >= 0 for isl, _, _ in records]
    if any(declared) and not all(declared):
        missing = [r for r, d in enumerate(declared) if not d]
        raise ValueError(f"tessera: group ranks {missing} have no island (set TESSERA_ISLAND or Options.island "
                         "on every rank, or on none to get one island per device type)")
    keys = [isl if d else kind for (isl, _, kind), d in zip(records, declared)]
    order = sorted(set(keys)) if all(declared) and records else list(dict.fromkeys(keys))
    index = {k: i for i, k in enumerate(order)}
    out, seen = [], {}
    for r, ((isl, vendor, kind), key) in enumerate(zip(records, keys)):
        v = vendor or (f"island{isl}" if isl >= 0 else _devices.island_vendor(kind))
        first = seen.setdefault(index[key], (v, kind, r))
        if (first[0], first[1]) != (v, kind):
            raise ValueError(f"tessera: island {key} mixes vendor/device {first[0]}/{first[1]} (group rank "
                             f"{first[2]}) and {v}/{kind} (group rank {r})")
        out.append((index[key], v))
    return out


def parse_duration_ms(text):
    """TESSERA_TIMEOUT's forms: "30", "30s", "500ms", "2m" -> milliseconds."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h)?\s*", text or "")
    if not m:
        raise ValueError(f"tessera: TESSERA_TIMEOUT={text!r} is not a duration (30, 30s, 500ms, 2m)")
    return int(float(m.group(1)) * {"ms": 1, "s": 1000, None: 1000, "m": 60000, "h": 3600000}[m.group(2)])


def _tessera_backend_of(pg, device):
    """pg's backend for `device` when it is a tessera backend (unwrapped from TORCH_DISTRIBUTED_DEBUG=DETAIL's
    wrapper, as torch unwraps it before its perform_nocolor_split), else None."""
    from .. import _C

    try:
        b = pg._get_backend(device)
    except RuntimeError:
        return None
    while isinstance(b, getattr(dist.distributed_c10d, "_ProcessGroupWrapper", ())):
        b = b.wrapped_pg
    return b if isinstance(b, _C.Backend) else None


def _split_parent(dist_opts, options):
    """The default group's tessera backend when the new group `dist_opts` can be split from it (every rank of the
    world takes part in the split: see the module's comment), else None."""
    ranks = list(dist_opts.global_ranks_in_group or [])
    if not ranks or options is not None or not dist.is_initialized():
        return None  # the default group itself, or a group with Options of its own
    world = dist.distributed_c10d._get_default_group()
    # torch names a group that every rank of the world made by its counter, and one made with
    # use_local_synchronization=True (only its members call in) by a hash of its ranks.
    if not str(dist_opts.group_id).isdigit():
        return None
    if world.bound_device_id is None:
        return _unbound_splits.get(dist_opts.group_id)  # decided on every rank by the wrapper of the group maker
    return _tessera_backend_of(world, world.bound_device_id)


# new_group while the default group is bound to no device: group name -> the default group's backend to split
# from, set on the members by the wrapper of torch's group maker for the time it runs (_create reads it).
_unbound_splits = {}


def _unbound_parent(ranks, backend, backend_options, pg_tag, group_name):
    """The default group's tessera backend when torch's group maker, called on every rank of the world with these
    arguments, makes a group that is split from it although the default group is bound to no device; else None.
    Every rank decides alike from the same arguments and the world's configuration: the new group is a subgroup
    made by every rank (torch names it by its counter, not by a hash as with use_local_synchronization=True), with
    no pg_tag (torch returns a tagged group that exists on its members only), no Options of its own (as
    _split_parent), and one backend that is tessera (torch then calls _create once on each member)."""
    if not ranks or not dist.is_initialized() or not str(group_name).isdigit() or pg_tag not in (None, ""):
        return None
    if isinstance(backend_options, Options):
        return None
    world = dist.distributed_c10d._get_default_group()
    if world.bound_device_id is not None:
        return None  # torch splits it itself
    try:
        wanted = dist.distributed_c10d.BackendConfig(dist.Backend(backend)).get_device_backend_map()
        had = dist.distributed_c10d.BackendConfig(
            dist.Backend(dist.distributed_c10d._world.pg_map[world][0])).get_device_backend_map()
    except (KeyError, ValueError, RuntimeError):
        return None
    ours = [d for d, b in wanted.items() if b == BACKEND_NAME]
    if not ours or (len(set(wanted.values())) > 1 and len(ours) > 1):
        return None  # not tessera, or a tessera backend per device type: more than one _create per member
    for device in ["cpu"] + sorted(d for d in had if d != "cpu"):
        if had.get(device) == BACKEND_NAME:
            return _tessera_backend_of(world, torch.device(device))
    return None


def _install_new_group_split():
    """Wraps torch's group maker (distributed_c10d._new_process_group_helper, which new_group and DeviceMesh call
    on every rank of the world); idempotent. See the module's comment."""
    import inspect

    c10d = dist.distributed_c10d
    original = getattr(c10d, "_new_process_group_helper", None)
    if original is None or getattr(original, "_tessera", False):
        return
    signature = inspect.signature(original)

    def helper(*args, **kwargs):
        try:
            a = signature.bind(*args, **kwargs)
            a.apply_defaults()
            ranks, name = list(a.arguments["global_ranks_in_group"] or []), a.arguments["group_name"]
            parent = _unbound_parent(ranks, a.arguments["backend"], a.arguments.get("backend_options"),
                                     a.arguments.get("pg_tag"), name)
        except (TypeError, KeyError):
            parent = None  # a torch whose maker takes other arguments: no split
        if parent is None:
            return original(*args, **kwargs)
        if dist.get_rank() not in ranks:
            parent.perform_nocolor_split(None)  # torch's own path then gives this rank NON_GROUP_MEMBER
            return original(*args, **kwargs)
        _unbound_splits[name] = parent
        try:
            return original(*args, **kwargs)
        finally:
            _unbound_splits.pop(name, None)

    helper._tessera = True
    helper.__wrapped__ = original
    c10d._new_process_group_helper = helper


def _create(dist_opts, backend_options):
    from .. import _C  # the extension; imported here so that registering needs only Python

    store, rank, size = dist_opts.store, dist_opts.group_rank, dist_opts.group_size
    timeout = dist_opts.timeout
    if isinstance(timeout, datetime.timedelta):
        timeout_ms = int(timeout.total_seconds() * 1000)
    else:
        timeout_ms = int(float(timeout) * 1000)
    # The group's timeout bounds every wait; TESSERA_TIMEOUT (set by `tessera run`) bounds it further.
    if os.environ.get("TESSERA_TIMEOUT"):
        timeout_ms = min(timeout_ms, parse_duration_ms(os.environ["TESSERA_TIMEOUT"]))
    options = backend_options if isinstance(backend_options, Options) else None
    parent = _split_parent(dist_opts, options)
    if parent is not None:
        # The new group's ranks are the sorted global ranks; its lowest one names it.
        group = parent.split_off(min(dist_opts.global_ranks_in_group), rank, timeout_ms)
        if group.size() != size:
            raise RuntimeError(f"tessera: new_group: {group.size()} ranks joined the split of the default group, "
                               f"expected {size}: the ranks made their groups in different orders")
        return group
    # The GPU<->host bridge of hybrid CUDA worlds is Tessera's default (the copy-engine device bridge where
    # the ranks share a host, TESSERA_DEVICE_BRIDGE to choose). Its worker thread queues CUDA copies while a
    # collective runs; the backend keeps torch's legacy default stream from waiting for a running
    # collective, which is what made a synchronous copy there deadlock with it (python/csrc/completer.hpp;
    # docs/torch.md, "Streams").
    device = _device(options)
    isl, vendor = _declared_island(options)
    kind = "host" if device == "host" else device.split(":")[0]
    with _lock:
        n = _incarnations.get(dist_opts.group_id, 0)
        _incarnations[dist_opts.group_id] = n + 1
    ns = f"tessera/{n}"
    store.set(f"{ns}/member/{rank}", f"{isl}|{vendor}|{kind}")
    records = []
    for r in range(size):
        f = store.get(f"{ns}/member/{r}").decode().split("|")
        records.append((int(f[0]), f[1], f[2]))
    layout = island_layout(records)
    my_island, my_vendor = layout[rank]
    hybrid = len({isl for isl, _ in layout}) > 1
    if rank == 0:
        store.set(f"{ns}/uid", _C.unique_id())
    uid = store.get(f"{ns}/uid")
    _devices.set_current(device)
    return _C.Backend(uid, rank, size, my_island, my_vendor, device, timeout_ms, hybrid,
                      torch_device=_devices.torch_device(device))


class _KnownDeviceTypes(list):
    """The backend's device list as c10d keeps it (Backend.backend_capability): refreshed from
    known_device_types() whenever c10d reads it. c10d makes the group's backend for every device type listed, so it
    must list only the types this process knows; and the entry point registers the backend on `import torch`,
    before torch_npu or torch_musa is imported, so the list is read when a group is made, not when registering."""

    def _now(self):
        self[:] = known_device_types()
        return self

    def __iter__(self):
        return list.__iter__(self._now())

    def __len__(self):
        return list.__len__(self._now())

    def __contains__(self, item):
        return list.__contains__(self._now(), item)

    def __repr__(self):
        return list.__repr__(self._now())


def register():
    """Registers backend "tessera" for the device types this process knows (idempotent; see _KnownDeviceTypes)."""
    from . import _store

    _store.install()  # rank 0's env:// store listens where the launcher's does (under `tessera run`)
    _install_new_group_split()  # new_group of a default group bound to no device: split, not a new rendezvous
    if BACKEND_NAME.upper() in dist.Backend._plugins:
        return
    dist.Backend.register_backend(BACKEND_NAME, _create, extended_api=True, devices=["cpu"])
    dist.Backend.backend_capability[BACKEND_NAME] = _KnownDeviceTypes(known_device_types())
