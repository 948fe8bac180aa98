// tests/gpu/gpu_test: the CUDA backend on a real GPU — kernels bit-identical to the CPU path, and
// multi-process hybrid jobs (1 GPU + 3 host ranks; two GPU islands sharing one GPU) for correctness,
// bit-identity, stream semantics and faults; two GPU islands across the ucx row taking device memory themselves
// (where UCX has CUDA support). Every test that needs a GPU skips, saying why, when there is
// none (CI); the no-GPU error path is tested there instead.
#include <cuda_runtime.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdlib>
#include <fstream>
#include <random>
#include <sstream>
#include <thread>
#include <vector>

#include "comm/kernels/kernels.hpp"
#include "comm/reduce/reduce.hpp"
#include "comm/store/store.hpp"
#include "comm/transport/ucx.hpp"
#include "common/dtype.hpp"

namespace tessera::comm {
namespace {

std::string NoGpuReason() {
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) return std::string("no usable CUDA GPU: ") + cudaGetErrorString(e);
  if (n == 0) return "no CUDA GPU visible";
  return "";
}
// Why a test that needs `want` GPUs cannot run here ("" when it can).
std::string FewerGpusThan(int want) {
  std::string why = NoGpuReason();
  if (!why.empty()) return why;
  int n = 0;
  (void)cudaGetDeviceCount(&n);
  if (n < want) return std::to_string(n) + " CUDA GPU(s) visible, the test needs " + std::to_string(want);
  return "";
}
#define REQUIRE_GPUS(n)                                   \
  do {                                                    \
    std::string why = FewerGpusThan(n);                   \
    if (!why.empty()) GTEST_SKIP() << "skipped: " << why; \
  } while (0)
#define REQUIRE_GPU() REQUIRE_GPUS(1)

struct RankSpec {
  int island;
  std::string vendor, device;
};
struct RankOut {
  int status = -1;  // exit status, or 128+signal, or -1 when killed for running over time
  std::string out;
};

// Starts one gpu_worker process per rank with the TESSERA_* environment, against a store served from
// this process (so a dying rank 0 does not take the store with it). Kills everything after `limit_s`.
std::vector<RankOut> RunWorld(const std::vector<RankSpec>& ranks, const std::vector<std::string>& args, int limit_s,
                              const std::string& timeout = "20s",
                              const std::vector<std::pair<std::string, std::string>>& env = {}) {
  auto server = StoreServer::Start("127.0.0.1", 0, "gputest");
  EXPECT_TRUE(server.ok());
  if (!server.ok()) return {};
  const int W = static_cast<int>(ranks.size());
  std::vector<pid_t> pids(W);
  std::vector<std::string> logs(W);
  for (int r = 0; r < W; ++r) {
    logs[r] = ::testing::TempDir() + "gpu_test_rank" + std::to_string(r) + "_" + std::to_string(getpid()) + ".log";
    pid_t pid = fork();
    if (pid == 0) {
      FILE* f = std::freopen(logs[r].c_str(), "w", stdout);
      if (f == nullptr) _exit(99);
      dup2(fileno(stdout), 2);
      setenv("TESSERA_RANK", std::to_string(r).c_str(), 1);
      setenv("TESSERA_WORLD_SIZE", std::to_string(W).c_str(), 1);
      setenv("TESSERA_ISLAND", std::to_string(ranks[r].island).c_str(), 1);
      setenv("TESSERA_ISLAND_VENDOR", ranks[r].vendor.c_str(), 1);
      setenv("TESSERA_DEVICE", ranks[r].device.c_str(), 1);
      setenv("TESSERA_STORE", ("127.0.0.1:" + std::to_string((*server)->port())).c_str(), 1);
      setenv("TESSERA_TOKEN", "gputest", 1);
      setenv("TESSERA_TIMEOUT", timeout.c_str(), 1);
      setenv("NCCL_NVLS_ENABLE", "0", 1);
      // Small bridge chunks, so that the pipelined path (many chunks, slot reuse) runs at test sizes.
      setenv("TESSERA_DEVICE_CHUNK", "65536", 1);
      for (const auto& [k, v] : env) setenv(k.c_str(), v.c_str(), 1);
      std::vector<std::string> argv_s = {TESSERA_GPU_WORKER};
      argv_s.insert(argv_s.end(), args.begin(), args.end());
      std::vector<char*> argv;
      for (auto& a : argv_s) argv.push_back(a.data());
      argv.push_back(nullptr);
      execv(argv[0], argv.data());
      _exit(98);
    }
    pids[r] = pid;
  }
  std::vector<RankOut> out(W);
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(limit_s);
  int left = W;
  while (left > 0) {
    for (int r = 0; r < W; ++r) {
      if (pids[r] == 0) continue;
      int st = 0;
      if (waitpid(pids[r], &st, WNOHANG) == pids[r]) {
        out[r].status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
        pids[r] = 0;
        --left;
      }
    }
    if (left > 0 && std::chrono::steady_clock::now() > deadline) {
      for (int r = 0; r < W; ++r)
        if (pids[r] != 0) {
          // Where it hung, when a GPU machine's cuda-gdb is there (it attaches to running programs).
          std::string bt = "command -v cuda-gdb >/dev/null && timeout 30 cuda-gdb -p " + std::to_string(pids[r]) +
                           " -batch -ex 'thread apply all bt 12' >> " + logs[r] + " 2>&1";
          if (std::system(bt.c_str()) != 0) std::printf("(no backtrace of rank %d)\n", r);
          kill(pids[r], SIGKILL);
          waitpid(pids[r], nullptr, 0);
          out[r].status = -1;
          pids[r] = 0;
        }
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  for (int r = 0; r < W; ++r) {
    std::ifstream f(logs[r]);
    std::stringstream ss;
    ss << f.rdbuf();
    out[r].out = ss.str();
    std::remove(logs[r].c_str());
  }
  return out;
}

std::string Dump(const std::vector<RankOut>& outs) {
  std::string s;
  for (size_t r = 0; r < outs.size(); ++r)
    s += "--- rank " + std::to_string(r) + " (status " + std::to_string(outs[r].status) + ")\n" + outs[r].out;
  return s;
}

const std::vector<RankSpec> kOneGpuThreeHost = {
    {0, "nvidia", "cuda:0"}, {1, "ascend", "host"}, {1, "ascend", "host"}, {1, "ascend", "host"}};
const std::vector<RankSpec> kTwoGpuIslandsOneGpu = {{0, "nvidia", "cuda:0"}, {1, "other", "cuda:0"}};

// ---- without a GPU: the error a cuda rank gets ----
TEST(GpuBackend, CudaDeviceWithoutGpuIsAClearError) {
  if (NoGpuReason().empty()) GTEST_SKIP() << "skipped: this machine has a GPU (the test is for machines without)";
  auto outs = RunWorld({{0, "nvidia", "cuda:0"}}, {"check"}, 60);
  ASSERT_EQ(outs.size(), 1u);
  EXPECT_EQ(outs[0].status, 3) << Dump(outs);
  EXPECT_NE(outs[0].out.find("TESSERA_DEVICE='cuda:0'"), std::string::npos) << Dump(outs);
  EXPECT_NE(outs[0].out.find("unsupported"), std::string::npos) << Dump(outs);
}

// ---- kernels: the same bits as the CPU path ----
TEST(GpuKernels, ConversionsAndFoldsMatchTheCpuBitForBit) {
  REQUIRE_GPU();
  std::mt19937_64 gen(7);
  // Every 16-bit pattern (f16 and bf16), plus random f32 accumulators around rounding ties.
  const size_t n = 65536 * 4;
  std::vector<uint16_t> halves(n);
  for (size_t i = 0; i < n; ++i) halves[i] = static_cast<uint16_t>(i < 65536 ? i : gen());
  std::vector<float> accs(n);
  for (size_t i = 0; i < n; ++i) {
    uint32_t u = static_cast<uint32_t>(gen());
    if (i % 4 == 0) u = (u & ~0x1fffu) | 0x1000u;  // f16 ties
    if (i % 4 == 1) u = (u & ~0xffffu) | 0x8000u;  // bf16 ties
    accs[i] = BitsF32(u);
  }
  void *d_h, *d_a, *d_o;
  ASSERT_EQ(cudaMalloc(&d_h, n * 2), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&d_a, n * 4), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&d_o, n * 4), cudaSuccess);
  for (DType t : {DType::kFloat16, DType::kBfloat16}) {
    for (RedOp op : {RedOp::kSum, RedOp::kMax, RedOp::kMin, RedOp::kProd, RedOp::kAvg}) {
      for (bool first : {true, false}) {
        // Fold: acc op= widen(half)
        std::vector<float> cpu = accs, gpu(n);
        Fold(cpu.data(), halves.data(), n, t, t, op, first);
        ASSERT_EQ(cudaMemcpy(d_h, halves.data(), n * 2, cudaMemcpyHostToDevice), cudaSuccess);
        ASSERT_EQ(cudaMemcpy(d_a, accs.data(), n * 4, cudaMemcpyHostToDevice), cudaSuccess);
        ASSERT_EQ(kernels::Fold(d_a, d_h, n, t, t, op, first, nullptr), cudaSuccess);
        ASSERT_EQ(cudaMemcpy(gpu.data(), d_a, n * 4, cudaMemcpyDeviceToHost), cudaSuccess);
        // NaN stays NaN on both; its payload may differ (the GPU returns the canonical NaN).
        for (size_t i = 0; i < n; ++i)
          if (!(std::isnan(cpu[i]) && std::isnan(gpu[i]))) {
            ASSERT_EQ(F32Bits(cpu[i]), F32Bits(gpu[i]))
                << DTypeName(t) << " fold " << RedOpName(op) << " first=" << first << " at " << i << " half 0x"
                << std::hex << halves[i] << " acc 0x" << F32Bits(accs[i]);
          }
      }
      // Finalize: narrow(acc [/ divisor]) with round-to-nearest-even
      for (int divisor : {1, 3, 7}) {
        std::vector<uint16_t> cpu(n), gpu(n);
        Finalize(cpu.data(), accs.data(), n, t, op, divisor);
        ASSERT_EQ(cudaMemcpy(d_a, accs.data(), n * 4, cudaMemcpyHostToDevice), cudaSuccess);
        ASSERT_EQ(kernels::Finalize(d_o, d_a, n, t, op, divisor, nullptr), cudaSuccess);
        ASSERT_EQ(cudaMemcpy(gpu.data(), d_o, n * 2, cudaMemcpyDeviceToHost), cudaSuccess);
        auto is_nan = [&](uint16_t h) {
          return t == DType::kFloat16 ? (h & 0x7c00) == 0x7c00 && (h & 0x3ff) : (h & 0x7f80) == 0x7f80 && (h & 0x7f);
        };
        for (size_t i = 0; i < n; ++i)
          if (!(is_nan(cpu[i]) && is_nan(gpu[i]))) {
            ASSERT_EQ(cpu[i], gpu[i]) << DTypeName(t) << " finalize " << RedOpName(op) << "/" << divisor << " at " << i
                                      << " acc 0x" << std::hex << F32Bits(accs[i]);
          }
      }
    }
  }
  // f32: fold and avg-finalize
  std::vector<float> src(n), cpu = accs, gpu(n);
  for (auto& v : src) v = static_cast<float>(std::normal_distribution<double>(0, 1)(gen));
  Fold(cpu.data(), src.data(), n, DType::kFloat32, DType::kFloat32, RedOp::kSum, false);
  Finalize(cpu.data(), cpu.data(), n, DType::kFloat32, RedOp::kAvg, 5);
  ASSERT_EQ(cudaMemcpy(d_a, accs.data(), n * 4, cudaMemcpyHostToDevice), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(d_o, src.data(), n * 4, cudaMemcpyHostToDevice), cudaSuccess);
  ASSERT_EQ(kernels::Fold(d_a, d_o, n, DType::kFloat32, DType::kFloat32, RedOp::kSum, false, nullptr), cudaSuccess);
  ASSERT_EQ(kernels::Finalize(d_a, d_a, n, DType::kFloat32, RedOp::kAvg, 5, nullptr), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(gpu.data(), d_a, n * 4, cudaMemcpyDeviceToHost), cudaSuccess);
  for (size_t i = 0; i < n; ++i)
    if (!(std::isnan(cpu[i]) && std::isnan(gpu[i]))) {
      ASSERT_EQ(F32Bits(cpu[i]), F32Bits(gpu[i])) << "f32 at " << i;
    }
  cudaFree(d_h);
  cudaFree(d_a);
  cudaFree(d_o);
}

// ---- hybrid jobs ----
void ExpectAllOk(const std::vector<RankOut>& outs) {
  for (size_t r = 0; r < outs.size(); ++r) {
    EXPECT_EQ(outs[r].status, 0) << Dump(outs);
    EXPECT_NE(outs[r].out.find("OK rank"), std::string::npos) << Dump(outs);
  }
}

constexpr const char* kDeviceBridge = "copy engines straight into the shm rings";

TEST(GpuHybrid, OneGpuAndThreeHostRanksAgreeBitForBit) {
  REQUIRE_GPU();
  auto outs = RunWorld(kOneGpuThreeHost, {"check"}, 100);
  ExpectAllOk(outs);
  EXPECT_NE(outs[0].out.find("async: allreduce returned"), std::string::npos) << Dump(outs);
  EXPECT_NE(outs[0].out.find(kDeviceBridge), std::string::npos) << Dump(outs);
}

TEST(GpuHybrid, TwoGpuIslandsOnOneGpuMeetThroughTheBridge) {
  REQUIRE_GPU();
  auto outs = RunWorld(kTwoGpuIslandsOneGpu, {"check"}, 100);
  ExpectAllOk(outs);
  EXPECT_NE(outs[1].out.find(kDeviceBridge), std::string::npos) << Dump(outs);
}

// The device bridge through rings of 64 KiB and 16 KiB copies: every message wraps the ring many times,
// pieces are cut at the wrap, and several copies and folds are in flight per channel.
TEST(GpuHybrid, DeviceBridgeThroughSmallRingsWrapsCorrectly) {
  REQUIRE_GPU();
  auto outs = RunWorld(kTwoGpuIslandsOneGpu, {"check", "--sizes", "1,4099,300001,2000003"}, 150, "20s",
                       {{"TESSERA_DEVICE_RING", "65536"}, {"TESSERA_DEVICE_PIECE", "16384"}});
  ExpectAllOk(outs);
  outs = RunWorld(kOneGpuThreeHost, {"check", "--sizes", "7,300001,2000003"}, 150, "20s",
                  {{"TESSERA_DEVICE_RING", "65536"}, {"TESSERA_DEVICE_PIECE", "16384"}});
  ExpectAllOk(outs);
}

// TESSERA_DEVICE_BRIDGE=device with TCP links: the GPU rank's links to the host ranks go through TcpRelays
// (host rings registered with CUDA, a pump thread per link), with default and with small rings: same bits.
TEST(GpuHybrid, DeviceBridgeOverRelayedTcpLinksAgreesBitForBit) {
  REQUIRE_GPU();
  for (const char* ring : {"67108864", "65536"}) {
    auto outs = RunWorld(kOneGpuThreeHost, {"check", "--sizes", "7,4099,300001,2000003"}, 150, "20s",
                         {{"TESSERA_BRIDGE", "tcp"},
                          {"TESSERA_DEVICE_BRIDGE", "device"},
                          {"TESSERA_DEVICE_RING", ring},
                          {"TESSERA_DEVICE_PIECE", "16384"}});
    ExpectAllOk(outs);
    EXPECT_NE(outs[0].out.find("3 links relayed through host rings"), std::string::npos) << Dump(outs);
  }
}

// TESSERA_DEVICE_BRIDGE=staged keeps the pinned-staging pipeline (chunked host allreduce): same bits.
TEST(GpuHybrid, StagedBridgeAgreesBitForBit) {
  REQUIRE_GPU();
  for (const auto* layout : {&kOneGpuThreeHost, &kTwoGpuIslandsOneGpu}) {
    auto outs = RunWorld(*layout, {"check"}, 100, "20s", {{"TESSERA_DEVICE_BRIDGE", "staged"}});
    ExpectAllOk(outs);
    EXPECT_NE(outs[0].out.find("pinned staging"), std::string::npos) << Dump(outs);
  }
}

// Two CUDA islands joined by the ucx row, UCX over TCP and its cuda_copy transport (UCX_TLS=tcp,cuda_copy: no RDMA
// NIC needed), the device bridge taken (TESSERA_DEVICE_BRIDGE=device). Where the loaded UCX takes CUDA memory
// (UcxMemoryFor: CUDA support, and a release whose detection of CUDA memory takes no context lock), each GPU rank's
// link takes device memory itself — sends posted from device memory, copies received into their destination, folds
// from a landing buffer in device memory, which the 64 KiB case wraps many times; elsewhere the link is relayed through
// host rings, as a TCP link is. Every element checked, the same bits on both ranks. Skipped, saying why, without a GPU
// or without UCX (TESSERA_UCX_LIBRARY).
TEST(GpuUcx, TwoGpuIslandsAcrossTheUcxRowCarryDeviceMemory) {
  REQUIRE_GPU();
#if TESSERA_HAVE_UCX_HEADERS
  auto ucx = LoadedUcxFacts();
  if (!ucx.ok()) GTEST_SKIP() << "skipped: " << ucx.status().message();
  const UcxMemoryChoice cuda = UcxMemoryFor("cuda", *ucx);
  const char* path = cuda.use == UcxMemoryUse::kCuda ? "1 link sending from and receiving into cuda memory, no ring"
                                                     : "1 link relayed through host rings";
  std::printf("UCX %u.%u: %s; expecting \"%s\"\n", ucx->version >> 16, ucx->version & 0xffff, cuda.why.c_str(), path);
  // Sizes that keep the check short (over UCX's TCP transport device memory moves in small staged fragments);
  // 70001 elements still wrap the 64 KiB landing buffer.
  for (const char* ring : {"67108864", "65536"}) {
    auto outs = RunWorld(kTwoGpuIslandsOneGpu, {"check", "--sizes", "1,4099,70001"}, 150, "30s",
                         {{"TESSERA_TRANSPORTS", "ucx"},
                          {"UCX_TLS", "tcp,cuda_copy"},
                          {"TESSERA_DEVICE_BRIDGE", "device"},
                          {"TESSERA_DEVICE_RING", ring}});
    ExpectAllOk(outs);
    for (const RankOut& o : outs) EXPECT_NE(o.out.find(path), std::string::npos) << Dump(outs);
  }
#else
  GTEST_SKIP() << "skipped: this build has no ucx row (UCX's headers were not found)";
#endif
}

TEST(GpuHybrid, NumericsOfRandomGradients) {
  REQUIRE_GPU();
  auto outs = RunWorld(kOneGpuThreeHost, {"numerics", "--count", "1000003"}, 240);
  ExpectAllOk(outs);
  std::printf("%s", outs[0].out.c_str());
}

TEST(GpuSingleIsland, OneGpuWorldCallsTheCclOnTheStream) {
  REQUIRE_GPU();
  auto outs = RunWorld({{0, "nvidia", "cuda:0"}}, {"check", "--sizes", "0,1,1000,4099,300001"}, 240);
  ExpectAllOk(outs);
}

// Repeated calls on the same buffers go the C API's lean path: every result checked, and the errors after
// them (a count past the allocation, a call after the failure) still refused.
TEST(GpuSingleIsland, RepeatedCallsOnKnownBuffersStayCheckedAndCorrect) {
  REQUIRE_GPU();
  auto outs = RunWorld({{0, "nvidia", "cuda:0"}}, {"repeat"}, 120, "10s");
  ExpectAllOk(outs);
  EXPECT_NE(outs[0].out.find("but its allocation has"), std::string::npos) << Dump(outs);
}

// ---- several GPUs (skipped on a machine with one) ----

// A real 2-GPU NCCL island: the collective is enqueued and the call returns at once (the worker checks it
// returned before a delay kernel ahead of it on the stream finished — NCCL connects at init, so the first
// call has no connection set-up to wait for).
TEST(GpuMultiGpu, TwoGpuNcclIslandReturnsAtOnce) {
  REQUIRE_GPUS(2);
  auto outs = RunWorld({{0, "nvidia", "cuda:0"}, {0, "nvidia", "cuda:1"}}, {"check"}, 150);
  ExpectAllOk(outs);
  EXPECT_NE(outs[0].out.find("async: allreduce returned"), std::string::npos) << Dump(outs);
}

TEST(GpuMultiGpu, TwoGpuIslandsOnTwoGpusMeetThroughTheDeviceBridge) {
  REQUIRE_GPUS(2);
  auto outs = RunWorld({{0, "nvidia", "cuda:0"}, {1, "other", "cuda:1"}}, {"check"}, 150);
  ExpectAllOk(outs);
  EXPECT_NE(outs[0].out.find(kDeviceBridge), std::string::npos) << Dump(outs);
  EXPECT_NE(outs[1].out.find(kDeviceBridge), std::string::npos) << Dump(outs);
}

// Islands of several GPUs beside other islands: NCCL runs the island phases on the GPUs, only each
// rank's shard is staged and crosses the bridge (docs/architecture.md, "Islands of several devices"); same bits.
constexpr const char* kIslandPhases = "runs the island phases, only shards cross the bridge";

TEST(GpuMultiGpu, TwoGpuIslandAndTwoHostRanksAgreeBitForBit) {
  REQUIRE_GPUS(2);
  auto outs = RunWorld({{0, "nvidia", "cuda:0"}, {0, "nvidia", "cuda:1"}, {1, "ascend", "host"}, {1, "ascend", "host"}},
                       {"check"}, 150);
  ExpectAllOk(outs);
  EXPECT_NE(outs[0].out.find(kIslandPhases), std::string::npos) << Dump(outs);
}

// Three GPUs: the schedule's shards are uneven at most counts, padded into NCCL's equal blocks on the device.
TEST(GpuMultiGpu, ThreeGpuIslandBesideOneHostRankAgreesBitForBit) {
  REQUIRE_GPUS(3);
  auto outs =
      RunWorld({{0, "nvidia", "cuda:0"}, {0, "nvidia", "cuda:1"}, {0, "nvidia", "cuda:2"}, {1, "ascend", "host"}},
               {"check"}, 150);
  ExpectAllOk(outs);
  EXPECT_NE(outs[2].out.find(kIslandPhases), std::string::npos) << Dump(outs);
}

// Two islands of two GPUs each, every island on its own NCCL communicator.
TEST(GpuMultiGpu, TwoIslandsOfTwoGpusAgreeBitForBit) {
  REQUIRE_GPUS(4);
  auto outs =
      RunWorld({{0, "nvidia", "cuda:0"}, {0, "nvidia", "cuda:1"}, {1, "other", "cuda:2"}, {1, "other", "cuda:3"}},
               {"check"}, 150);
  ExpectAllOk(outs);
  EXPECT_NE(outs[3].out.find(kIslandPhases), std::string::npos) << Dump(outs);
}

// ---- faults ----
void ExpectAllFailInTime(const std::vector<RankOut>& outs, int offender, const char* offender_error) {
  for (size_t r = 0; r < outs.size(); ++r) {
    if (static_cast<int>(r) == offender && offender_error == nullptr) continue;  // it died
    EXPECT_EQ(outs[r].status, 0) << "rank " << r << " did not end with the expected error\n" << Dump(outs);
    EXPECT_NE(outs[r].out.find("ERROR rank"), std::string::npos) << Dump(outs);
  }
  if (offender_error) {
    EXPECT_NE(outs[offender].out.find(offender_error), std::string::npos) << Dump(outs);
  }
}

TEST(GpuFaults, HostMemoryWithAStreamIsInvalidArgument) {
  REQUIRE_GPU();
  auto outs = RunWorld(kOneGpuThreeHost, {"wrongmem"}, 60, "10s");
  ExpectAllFailInTime(outs, 0, "is not device memory (host memory or no allocation at all), but a stream");
}

TEST(GpuFaults, DeviceMemoryOnAHostIslandIsInvalidArgument) {
  REQUIRE_GPU();
  std::vector<RankSpec> layout = {{0, "ascend", "host"}, {1, "nvidia", "cuda:0"}};
  auto outs = RunWorld(layout, {"wrongmem"}, 60, "10s");
  ExpectAllFailInTime(outs, 0, "is device memory, but its island (ascend) uses host memory");
}

TEST(GpuFaults, IllegalDevicePointerIsInvalidArgumentEverywhere) {
  REQUIRE_GPU();
  auto outs = RunWorld(kOneGpuThreeHost, {"badptr"}, 60, "10s");
  ExpectAllFailInTime(outs, 0, "0x7f00deadbe00 is not device memory");
}

TEST(GpuFaults, ADyingGpuRankFailsTheOthersWithinTheTimeout) {
  REQUIRE_GPU();
  auto t0 = std::chrono::steady_clock::now();
  auto outs = RunWorld(kOneGpuThreeHost, {"die", "0"}, 60, "10s");
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_EQ(outs[0].status, 7) << Dump(outs);
  ExpectAllFailInTime(outs, 0, nullptr);
  EXPECT_LT(secs, 40) << Dump(outs);
}

// A rank of a two-GPU island dies: its island peer (inside NCCL) and the host ranks fail within the timeout.
TEST(GpuFaults, ADyingRankOfATwoGpuIslandFailsTheOthersWithinTheTimeout) {
  REQUIRE_GPUS(2);
  auto t0 = std::chrono::steady_clock::now();
  auto outs = RunWorld({{0, "nvidia", "cuda:0"}, {0, "nvidia", "cuda:1"}, {1, "ascend", "host"}, {1, "ascend", "host"}},
                       {"die", "1"}, 60, "10s");
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_EQ(outs[1].status, 7) << Dump(outs);
  ExpectAllFailInTime(outs, 1, nullptr);
  EXPECT_LT(secs, 40) << Dump(outs);
}

TEST(GpuFaults, ADyingHostRankFailsTheGpuRankWithinTheTimeout) {
  REQUIRE_GPU();
  auto outs = RunWorld(kOneGpuThreeHost, {"die", "2"}, 60, "10s");
  EXPECT_EQ(outs[2].status, 7) << Dump(outs);
  ExpectAllFailInTime(outs, 2, nullptr);
}

}  // namespace
}  // namespace tessera::comm
