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

// What the loaded UCX offers that the row's memory choice reads: the memory types it registers (ucp_context_query's
// memory_types: bit T for ucs_memory_type_t T) and its release (ucp_get_version, as UcxVersion).
constexpr uint32_t UcxVersion(uint32_t major, uint32_t minor) { return major << 16 | minor; }
struct UcxFacts {
  uint64_t memory_types = 0;
  uint32_t version = 0;
};
constexpr uint64_t kUcxMemoryHostBit = uint64_t{1} << 0;  // UCS_MEMORY_TYPE_HOST
constexpr uint64_t kUcxMemoryCudaBit = uint64_t{1} << 1;  // UCS_MEMORY_TYPE_CUDA
// UCX up to 1.22 detects the memory type of every CUDA buffer handed to an operation without a memory handle, and
// that detection calls cuCtxSetFlags(CU_CTX_SYNC_MEMOPS), which takes the CUDA context's write lock on every call.
// A link posting from the device bridge's thread then deadlocks against the rank's own thread inside the CUDA driver
// (UCX's source names a kernel launch), whose work waits on that very link (UCX's fix sets the flag once per context:
// openucx/ucx pull request 11705, merged after 1.22.0). The first release the row hands CUDA memory to:
constexpr uint32_t kUcxCudaSafeFrom = UcxVersion(1, 23);

// How the ucx row hands UCX a rank's memory: registered as host memory, registered as CUDA memory (UCX moves it
// itself, through its cuda transports), or never handed to UCX — staged through the row's host ring (plain mmap
// memory registered as host memory). `memory` is the memory's kind as the runtime table names its rows ("host",
// "cuda", "npu", ...). NPU memory is always staged (a third-party NIC cannot address it); CUDA memory where UCX has
// no CUDA support or is older than kUcxCudaSafeFrom; and any kind the row does not know. The emulated device's
// memory ("emu", a test device) is host memory, and goes as host memory.
enum class UcxMemoryUse { kHost, kCuda, kStage };
struct UcxMemoryChoice {
  UcxMemoryUse use;
  std::string why;  // for messages and logs
};
UcxMemoryChoice UcxMemoryFor(std::string_view memory, const UcxFacts& ucx);
// The same choice without its reason: no allocation, for the channels' checks on every call.
UcxMemoryUse UcxMemoryUseFor(std::string_view memory, const UcxFacts& ucx);

// What the loaded UCX offers (above), or why there is no UCX here.
Result<UcxFacts> LoadedUcxFacts();

}  // namespace tessera::comm
