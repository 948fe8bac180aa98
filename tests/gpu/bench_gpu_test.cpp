// tests/gpu/bench_gpu_test: `tessera bench` on CUDA islands, end to end under `tessera run`. CUDA ranks must
// use device memory of their GPU (host memory with --host-memory), say so per rank, and --check every
// collective on device buffers (results copied back), out of place and in place, on the three layouts a
// CUDA rank meets: a world of one CUDA island (NCCL on the stream), a GPU island beside a host island
// (the device bridge) and two GPU islands on one GPU. Needs a GPU and skips, saying why, without one; the
// error a CUDA rank gets there is tested instead. Timings are not asserted (see docs/benchmarks.md).
#include <cuda_runtime.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "common/shell.hpp"

namespace {

std::string NoGpuReason() {
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) return std::string("no usable CUDA GPU: ") + cudaGetErrorString(e);
  if (n == 0) return "no CUDA GPU visible";
  return "";
}
#define REQUIRE_GPU()                                     \
  do {                                                    \
    std::string why = NoGpuReason();                      \
    if (!why.empty()) GTEST_SKIP() << "skipped: " << why; \
  } while (0)

using tessera::testing_shell::Bin;
using tessera::testing_shell::Proc;
using tessera::testing_shell::Shell;

class BenchGpu : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() / ("tessera-bench-gpu-test-" + std::to_string(getpid()));
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  // `tessera bench ARGS` under `tessera run ISLANDS` (one GPU: every CUDA rank on cuda:0), JSON parsed.
  Proc Bench(const std::string& islands, const std::string& args, nlohmann::json* json) {
    std::string path = (dir_ / "out.json").string();
    std::filesystem::remove(path);
    Proc p = Shell("CUDA_VISIBLE_DEVICES=0 NCCL_NVLS_ENABLE=0 " + Bin() + " run --timeout 60s " + islands + " -- " +
                   Bin() + " bench " + args + " --json " + path);
    if (json && std::filesystem::exists(path)) *json = nlohmann::json::parse(std::ifstream(path), nullptr, false);
    return p;
  }

  std::filesystem::path dir_;
};

struct Layout {
  const char* islands;
  const char* memory;        // the JSON's summary on device memory
  const char* memory_line;   // what rank 0 prints
  std::vector<bool> on_gpu;  // per rank: a CUDA rank
};
const Layout kLayouts[] = {
    {"--island nvidia=cuda:1", "device", "# memory: device on rank 0", {true}},
    {"--island nvidia=cuda:1 --island ascend=host:2",
     "device+host",
     "# memory: device on rank 0, host on ranks 1-2",
     {true, false, false}},
    {"--island nvidia=cuda:1 --island other=cuda:1", "device", "# memory: device on ranks 0-1", {true, true}},
};

// Every rank's memory in the JSON: device memory on CUDA ranks (unless --host-memory), host memory elsewhere.
void ExpectMemory(const nlohmann::json& j, const Layout& l, bool host_memory, const std::string& ctx) {
  ASSERT_EQ(j["ranks"].size(), l.on_gpu.size()) << ctx;
  for (size_t r = 0; r < l.on_gpu.size(); ++r) {
    const auto& rk = j["ranks"][r];
    EXPECT_EQ(rk["device"].get<std::string>().rfind("cuda:", 0) == 0, l.on_gpu[r]) << ctx << " " << rk.dump();
    EXPECT_EQ(rk["memory"], l.on_gpu[r] && !host_memory ? "device" : "host") << ctx << " " << rk.dump();
  }
  EXPECT_EQ(j["memory"], host_memory ? "host" : l.memory) << ctx;
}

void ExpectChecked(const nlohmann::json& j, const std::string& coll, size_t rows, const std::string& ctx) {
  ASSERT_EQ(j["rows"].size(), rows) << ctx;
  for (const auto& row : j["rows"]) {
    EXPECT_EQ(row["wrong"], 0) << ctx << " " << row.dump();
    if (coll != "reduce_scatter") {
      EXPECT_EQ(row["identical"], true) << ctx << " " << row.dump();
    }
  }
}

TEST(BenchGpuNoGpu, CudaIslandWithoutGpuIsAClearError) {
  if (NoGpuReason().empty()) GTEST_SKIP() << "skipped: this machine has a GPU (the test is for machines without)";
  // Under the launcher: it refuses the layout before a rank starts.
  Proc p = Shell(Bin() + " run --timeout 20s --island nvidia=cuda:1 --island ascend=host:1 -- " + Bin() +
                 " bench allreduce --sizes 1M --iters 1");
  EXPECT_EQ(p.status, 2) << p.out;
  EXPECT_NE(p.out.find("--island 'nvidia=cuda:1' needs CUDA devices"), std::string::npos) << p.out;
  // A rank started by hand (a world of one, serving its own store): the communicator refuses the device,
  // and bench exits "unsupported" (4) saying why.
  p = Shell(
      "TESSERA_RANK=0 TESSERA_WORLD_SIZE=1 TESSERA_DEVICE=cuda:0 TESSERA_STORE=127.0.0.1:0 "
      "TESSERA_TOKEN=benchtest TESSERA_TIMEOUT=20s " +
      Bin() + " bench allreduce --sizes 1M --iters 1");
  EXPECT_EQ(p.status, 4) << p.out;
  EXPECT_NE(p.out.find("TESSERA_DEVICE='cuda:0' but this machine has no usable CUDA device"), std::string::npos)
      << p.out;
}

// Every collective, out of place and in place, f32 and bf16 (the device bridge's floating types) and, out of
// place, i32 (staged through pinned memory), on every layout, checked element by element on the copied-back results.
TEST_F(BenchGpu, EveryCollectiveOnDeviceMemoryIsChecked) {
  REQUIRE_GPU();
  for (const Layout& l : kLayouts) {
    for (const char* coll : {"allreduce", "reduce_scatter", "allgather", "broadcast"}) {
      for (const auto& [dtype, place] : {std::pair<const char*, const char*>{"f32", ""},
                                         {"bf16", ""},
                                         {"i32", ""},
                                         {"f32", " --in-place"},
                                         {"bf16", " --in-place"}}) {
        const std::string ctx = std::string(l.islands) + " " + coll + " " + dtype + place;
        nlohmann::json j;
        Proc p = Bench(
            l.islands,
            std::string(coll) + " --sizes 0,3,4099,131072,1M --iters 3 --warmup 1 --check --dtype " + dtype + place,
            &j);
        ASSERT_EQ(p.status, 0) << ctx << "\n" << p.out;
        ASSERT_TRUE(j.is_object()) << ctx << "\n" << p.out;
        ExpectMemory(j, l, false, ctx);
        ExpectChecked(j, coll, 5, ctx);
        EXPECT_EQ(j["in_place"], *place != '\0') << ctx;
        EXPECT_NE(p.out.find(l.memory_line), std::string::npos) << ctx << "\n" << p.out;
        EXPECT_NE(p.out.find("0(cuda:0, device memory)"), std::string::npos) << ctx << "\n" << p.out;
      }
    }
  }
}

// The options device-check.sh runs with: avg in place, --batch calls per sample; and larger sizes, which
// the device bridge pipelines through its rings in several pieces.
TEST_F(BenchGpu, BatchedInPlaceAvgAtBridgeSizes) {
  REQUIRE_GPU();
  for (const Layout& l : kLayouts) {
    nlohmann::json j;
    Proc p =
        Bench(l.islands, "allreduce --sizes 16M,64M --iters 2 --batch 3 --warmup 2 --op avg --in-place --check", &j);
    ASSERT_EQ(p.status, 0) << l.islands << "\n" << p.out;
    ASSERT_TRUE(j.is_object()) << p.out;
    ExpectMemory(j, l, false, l.islands);
    ExpectChecked(j, "allreduce", 2, l.islands);
    EXPECT_EQ(j["batch"], 3);
    for (const auto& row : j["rows"]) EXPECT_GT(row["time_us"].get<double>(), 0) << row.dump();
  }
}

// --host-memory: CUDA ranks keep their buffers in host memory (stream NULL), as `tessera bench` did before.
TEST_F(BenchGpu, HostMemoryOptOut) {
  REQUIRE_GPU();
  for (const Layout& l : kLayouts) {
    nlohmann::json j;
    Proc p = Bench(l.islands, "allreduce --sizes 3,131072 --iters 2 --check --host-memory", &j);
    ASSERT_EQ(p.status, 0) << l.islands << "\n" << p.out;
    ASSERT_TRUE(j.is_object()) << p.out;
    ExpectMemory(j, l, true, l.islands);
    ExpectChecked(j, "allreduce", 2, l.islands);
    EXPECT_NE(p.out.find("0(cuda:0, host memory)"), std::string::npos) << p.out;
  }
}

}  // namespace
