// tests/comm/ucx_memory_test: what the ucx row hands UCX as what (comm/transport/ucx.hpp, UcxMemoryFor), given the
// memory types the loaded UCX reports — host memory registered as host memory; CUDA memory registered as CUDA
// memory only where UCX reports CUDA support, else staged through host memory; NPU memory never handed to UCX
// whatever UCX reports (staged through the row's host ring); kinds the row does not know staged; the emulated device's
// memory (host memory) as host memory — and that the UCX loaded here reports host memory (the bits the choice reads
// are UCX's).
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <string>

#include "comm/transport/ucx.hpp"

namespace tessera::comm {
namespace {

constexpr uint64_t kHostOnly = kUcxMemoryHostBit;
constexpr uint64_t kWithCuda = kUcxMemoryHostBit | kUcxMemoryCudaBit;
constexpr uint64_t kEverything = ~uint64_t{0};

TEST(UcxMemory, HostMemoryIsRegisteredAsHostMemory) {
  EXPECT_EQ(UcxMemoryFor("host", kHostOnly).use, UcxMemoryUse::kHost);
  EXPECT_EQ(UcxMemoryFor("host", kWithCuda).use, UcxMemoryUse::kHost);
}

TEST(UcxMemory, CudaMemoryIsRegisteredAsCudaOnlyWhereUcxHasCudaSupport) {
  EXPECT_EQ(UcxMemoryFor("cuda", kWithCuda).use, UcxMemoryUse::kCuda);
  const UcxMemoryChoice without = UcxMemoryFor("cuda", kHostOnly);
  EXPECT_EQ(without.use, UcxMemoryUse::kStage);
  EXPECT_NE(without.why.find("no CUDA support"), std::string::npos) << without.why;
}

TEST(UcxMemory, NpuMemoryIsNeverHandedToUcxWhateverItReports) {
  for (uint64_t types : {kHostOnly, kWithCuda, kEverything}) {
    const UcxMemoryChoice c = UcxMemoryFor("npu", types);
    EXPECT_EQ(c.use, UcxMemoryUse::kStage) << "memory types " << types;
    EXPECT_NE(c.why.find("staged through host memory"), std::string::npos) << c.why;
  }
}

TEST(UcxMemory, KindsTheRowDoesNotKnowAreStaged) {
  for (const char* kind : {"musa", "acl", "rocm", ""}) {
    EXPECT_EQ(UcxMemoryFor(kind, kEverything).use, UcxMemoryUse::kStage) << "'" << kind << "'";
  }
}

// The emulated device (a test device whose memory is host memory) goes as host memory: its device bridge takes the
// path a CUDA rank takes where UCX has CUDA support.
TEST(UcxMemory, TheEmulatedDevicesMemoryGoesAsHostMemory) {
  EXPECT_EQ(UcxMemoryFor("emu", kHostOnly).use, UcxMemoryUse::kHost);
  EXPECT_EQ(UcxMemoryFor("emu", kWithCuda).use, UcxMemoryUse::kHost);
}

TEST(UcxMemory, TheLoadedUcxReportsHostMemory) {
  auto types = UcxMemoryTypes();
  if (!types.ok()) GTEST_SKIP() << types.status().ToString();
  std::printf("the loaded UCX registers memory types 0x%llx: host %s, CUDA %s\n",
              static_cast<unsigned long long>(*types), (*types & kUcxMemoryHostBit) != 0 ? "yes" : "no",
              (*types & kUcxMemoryCudaBit) != 0 ? "yes" : "no");
  EXPECT_NE(*types & kUcxMemoryHostBit, 0u) << "memory types " << *types;
  // Whatever it says of CUDA decides the choice for CUDA memory.
  EXPECT_EQ(UcxMemoryFor("cuda", *types).use,
            (*types & kUcxMemoryCudaBit) != 0 ? UcxMemoryUse::kCuda : UcxMemoryUse::kStage);
}

}  // namespace
}  // namespace tessera::comm
