"""torch's env:// (and tcp://) store under `tessera run`, listening where the launcher's store does.

Group rank 0 of init_process_group starts torch's TCPStore server, which listens on every interface: TCPStore
takes no address to listen on (the libuv server binds the port on "::" / 0.0.0.0, the legacy one on every address
getaddrinfo gives for a passive socket), only a socket that already listens (master_listen_fd). Under
`tessera run` (TESSERA_STORE set) `install` makes rank 0's server on a socket bound to MASTER_ADDR instead: the
launcher sets it to 127.0.0.1 on one host and to node 0's store address across hosts, where the launcher's own
store listens (docs/launcher.md). Where that socket cannot be made (the port is taken, MASTER_ADDR is not an
address of this host) torch's own server is made as before, with a warning.
"""
import importlib
import os
import socket
import warnings

from torch.distributed import TCPStore

# The module (torch.distributed's attribute `rendezvous` is the function of that name).
_rdzv = importlib.import_module("torch.distributed.rendezvous")


def _listening_socket(host, port):
    """A socket listening on host:port (host: a name or address of this host), or the OSError of the last try."""
    last = None
    for family, kind, proto, _, addr in socket.getaddrinfo(host, port, type=socket.SOCK_STREAM):
        s = socket.socket(family, kind, proto)
        try:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind(addr)
            s.listen(socket.SOMAXCONN)
            return s
        except OSError as e:
            s.close()
            last = e
    raise last or OSError(f"no address for {host}")


def install():
    """Wraps torch's store maker (torch.distributed.rendezvous._create_c10d_store, what env:// and tcp:// call);
    idempotent. Outside `tessera run`, or on the ranks that only connect, it does what torch does."""
    original = getattr(_rdzv, "_create_c10d_store", None)
    if original is None or getattr(original, "_tessera", False):
        return  # installed, or a torch without it (then its store listens on every interface)

    def create(hostname, port, rank, world_size, timeout, use_libuv=True):
        if rank != 0 or not os.environ.get("TESSERA_STORE") or _rdzv._torchelastic_use_agent_store():
            return original(hostname, port, rank, world_size, timeout, use_libuv)
        try:
            sock = _listening_socket(hostname, port)
        except OSError as e:
            warnings.warn(f"tessera: torch's store cannot listen on MASTER_ADDR {hostname}:{port} alone ({e}); "
                          "torch's TCPStore listens on every interface", stacklevel=2)
            return original(hostname, port, rank, world_size, timeout, use_libuv)
        try:
            store = TCPStore(host_name=hostname, port=port, world_size=world_size, is_master=True, timeout=timeout,
                             multi_tenant=True, master_listen_fd=sock.fileno(), use_libuv=use_libuv)
        except BaseException:
            sock.close()
            raise
        sock.detach()  # the store's server owns the descriptor now
        return store

    create._tessera = True
    _rdzv._create_c10d_store = create
