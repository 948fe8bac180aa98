// comm/transport/ucx: the ucx row (UCX's UCP, loaded at run time), for links with RDMA lanes; see ucx.cpp.
#pragma once

#include <memory>
#include <string>

#include "comm/transport/transport.hpp"

// The row is built where UCX's headers are (Debian's libucx-dev); the library itself is loaded at run time.
#if __has_include(<ucp/api/ucp.h>)
#define TESSERA_HAVE_UCX_HEADERS 1
#else
#define TESSERA_HAVE_UCX_HEADERS 0
#endif

namespace tessera::comm {

std::unique_ptr<Transport> MakeUcxTransport();

// This local rank's entry of TESSERA_UCX_DEVICES ("mlx5_0:1;mlx5_1:1": entry TESSERA_LOCAL_RANK modulo their
// number), handed to UCX as its NET_DEVICES; "" when unset (UCX chooses).
std::string UcxDeviceForLocalRank();

}  // namespace tessera::comm
