// comm/transport/rows: the rows of the transport registry (transport.hpp) — shm (rings in shared memory,
// transport/shm.hpp) and tcp (parallel TCP streams, transport/tcp.hpp) — and the host identity that is shm's
// domain.
#pragma once

#include <memory>
#include <string>

#include "comm/transport/transport.hpp"

namespace tessera::comm {

// This machine as the ranks compare it: "UTS hostname/boot id/net namespace/IPC namespace". Ranks with
// equal identities share memory (shm channels) and see each other's pids; any difference means another
// host (TCP). Namespaces share the boot id, so the namespace inodes (and the hostname, which `unshare
// --uts` makes per namespace) tell "hosts" made of network/IPC namespaces on one machine apart.
std::string HostId();

std::unique_ptr<Transport> MakeShmTransport();
std::unique_ptr<Transport> MakeTcpTransport();

}  // namespace tessera::comm
