// comm/transport/ucx: the ucx row (UCX's UCP, loaded at run time), for links with RDMA lanes; see ucx.cpp.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

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

// How the ucx row hands UCX a rank's memory: registered as host memory, registered as CUDA memory (UCX moves it
// itself, through its cuda transports), or never handed to UCX — staged through the row's host ring (plain mmap
// memory registered as host memory). `memory` is the memory's kind as the runtime table names its rows ("host",
// "cuda", "npu", ...); `ucx_memory_types` what the loaded UCX registers (ucp_context_query's memory_types: bit T
// for ucs_memory_type_t T). NPU memory is always staged (a third-party NIC cannot address it), CUDA memory where
// UCX has no CUDA support, and any kind the row does not know. The emulated device's memory ("emu", a test device)
// is host memory, and goes as host memory.
enum class UcxMemoryUse { kHost, kCuda, kStage };
struct UcxMemoryChoice {
  UcxMemoryUse use;
  std::string why;  // for messages and logs
};
constexpr uint64_t kUcxMemoryHostBit = uint64_t{1} << 0;  // UCS_MEMORY_TYPE_HOST
constexpr uint64_t kUcxMemoryCudaBit = uint64_t{1} << 1;  // UCS_MEMORY_TYPE_CUDA
UcxMemoryChoice UcxMemoryFor(std::string_view memory, uint64_t ucx_memory_types);
// The same choice without its reason: no allocation, for the channels' checks on every call.
UcxMemoryUse UcxMemoryUseFor(std::string_view memory, uint64_t ucx_memory_types);

// The memory types the loaded UCX registers (bits as above), or why there is no UCX here.
Result<uint64_t> UcxMemoryTypes();

}  // namespace tessera::comm
