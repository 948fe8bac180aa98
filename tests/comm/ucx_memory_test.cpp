// tests/comm/ucx_memory_test: what the ucx row hands UCX as what (comm/transport/ucx.hpp, UcxMemoryFor), given the
// memory types the loaded UCX reports — host memory registered as host memory; CUDA memory registered as CUDA
// memory only where UCX reports CUDA support and is a release whose detection of CUDA memory takes no context lock
// on the data path, else staged through host memory; NPU memory never handed to UCX
// whatever UCX reports (staged through the row's host ring); kinds the row does not know staged; the emulated device's
// memory (host memory) as host memory — and that the UCX loaded here reports host memory (the bits the choice reads
// are UCX's).
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <string>

#include "comm/transport/ucx.hpp"

namespace tessera::comm {
namespace {

constexpr UcxFacts kHostOnly{kUcxMemoryHostBit, kUcxCudaSafeFrom};
constexpr UcxFacts kWithCuda{kUcxMemoryHostBit | kUcxMemoryCudaBit, kUcxCudaSafeFrom};
constexpr UcxFacts kEverything{~uint64_t{0}, kUcxCudaSafeFrom};

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

// UCX up to 1.22 takes the CUDA context's write lock each time it detects CUDA memory on the data path, which can
// deadlock a link against a kernel launch: CUDA memory is staged there, and the reason names the release.
TEST(UcxMemory, CudaMemoryIsStagedOnAUcxWhoseDetectionLocksTheContext) {
  for (uint32_t old : {UcxVersion(1, 13), UcxVersion(1, 22)}) {
    const UcxMemoryChoice c = UcxMemoryFor("cuda", {kWithCuda.memory_types, old});
    EXPECT_EQ(c.use, UcxMemoryUse::kStage) << c.why;
    EXPECT_EQ(UcxMemoryUseFor("cuda", {kWithCuda.memory_types, old}), UcxMemoryUse::kStage);
    EXPECT_NE(c.why.find(fmt::format("UCX 1.{}", old & 0xffff)), std::string::npos) << c.why;
    EXPECT_NE(c.why.find("deadlock"), std::string::npos) << c.why;
    EXPECT_EQ(UcxMemoryFor("host", {kWithCuda.memory_types, old}).use, UcxMemoryUse::kHost);
  }
  EXPECT_EQ(UcxMemoryFor("cuda", {kWithCuda.memory_types, UcxVersion(1, 23)}).use, UcxMemoryUse::kCuda);
  EXPECT_EQ(UcxMemoryFor("cuda", {kWithCuda.memory_types, UcxVersion(2, 0)}).use, UcxMemoryUse::kCuda);
}

TEST(UcxMemory, NpuMemoryIsNeverHandedToUcxWhateverItReports) {
  for (const UcxFacts& ucx : {kHostOnly, kWithCuda, kEverything}) {
    const UcxMemoryChoice c = UcxMemoryFor("npu", ucx);
    EXPECT_EQ(c.use, UcxMemoryUse::kStage) << "memory types " << ucx.memory_types;
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

TEST(UcxMemory, TheLoadedUcxReportsHostMemoryAndItsRelease) {
  auto ucx = LoadedUcxFacts();
  if (!ucx.ok()) GTEST_SKIP() << ucx.status().ToString();
  std::printf("the loaded UCX %u.%u registers memory types 0x%llx: host %s, CUDA %s\n", ucx->version >> 16,
              ucx->version & 0xffff, static_cast<unsigned long long>(ucx->memory_types),
              (ucx->memory_types & kUcxMemoryHostBit) != 0 ? "yes" : "no",
              (ucx->memory_types & kUcxMemoryCudaBit) != 0 ? "yes" : "no");
  EXPECT_NE(ucx->memory_types & kUcxMemoryHostBit, 0u) << "memory types " << ucx->memory_types;
  EXPECT_GE(ucx->version, UcxVersion(1, 13));  // the oldest the row loads (its UCP API)
  // What it says of CUDA, and its release, decide the choice for CUDA memory.
  EXPECT_EQ(UcxMemoryFor("cuda", *ucx).use,
            (ucx->memory_types & kUcxMemoryCudaBit) != 0 && ucx->version >= kUcxCudaSafeFrom ? UcxMemoryUse::kCuda
                                                                                             : UcxMemoryUse::kStage);
}

}  // namespace
}  // namespace tessera::comm
