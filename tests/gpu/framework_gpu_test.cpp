// tests/gpu/framework_gpu_test: the framework C API on CUDA ranks — tsrCommInitRank with a
// device in tsrConfig_t, tsrAllToAll/tsrAllToAllv, a tsrGroupStart/End ring and tsrCommSplit, on device
// memory and a stream, in a hybrid world (one GPU rank + host ranks: pinned staging) and in a world of
// one CUDA island (NCCL's own group calls; needs two GPUs). Ranks are framework_gpu_worker processes
// started without the launcher; ids come from tsrGetUniqueId here. Skips, saying why, without a GPU.
#include <cuda_runtime.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <cstring>
#include <fstream>
#include <regex>
#include <string>
#include <vector>

#include "tessera/tessera.h"

extern char** environ;

namespace {

std::string FewerGpusThan(int want) {
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) return std::string("no usable CUDA GPU: ") + cudaGetErrorString(e);
  if (n < want) return std::to_string(n) + " CUDA GPU(s) visible, the test needs " + std::to_string(want);
  return "";
}
#define REQUIRE_GPUS(n)                                   \
  do {                                                    \
    std::string why = FewerGpusThan(n);                   \
    if (!why.empty()) GTEST_SKIP() << "skipped: " << why; \
  } while (0)

// `spec`: ISLAND:VENDOR:DEVICE per rank, comma-separated. Returns every rank's output.
std::string RunWorld(const std::string& spec, int world, const std::string& scenario = "all") {
  tsrUniqueId id;
  EXPECT_EQ(tsrGetUniqueId(&id), tsrSuccess) << tsrGetLastError(nullptr);
  const std::string ids = testing::TempDir() + "/framework_gpu_id_" + std::to_string(getpid());
  std::ofstream(ids, std::ios::binary).write(id.internal, sizeof(id.internal));
  std::vector<std::string> env_s;
  for (char** e = environ; *e; ++e)
    if (std::strncmp(*e, "TESSERA_", 8) != 0 || std::strncmp(*e, "TESSERA_LOG=", 12) == 0 ||
        std::strncmp(*e, "TESSERA_HOST_THREADS=", 21) == 0)
      env_s.push_back(*e);
  std::vector<char*> envp;
  for (auto& s : env_s) envp.push_back(s.data());
  envp.push_back(nullptr);
  int fds[2];
  EXPECT_EQ(pipe(fds), 0);
  std::vector<pid_t> pids;
  for (int r = 0; r < world; ++r) {
    std::vector<std::string> args = {
        TESSERA_FRAMEWORK_GPU_WORKER, scenario, "--ids", ids, "--rank", std::to_string(r), "--spec", spec};
    pid_t pid = fork();
    if (pid == 0) {
      dup2(fds[1], 1);
      dup2(fds[1], 2);
      close(fds[0]);
      std::vector<char*> argv;
      for (auto& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      execve(argv[0], argv.data(), envp.data());
      _exit(127);
    }
    pids.push_back(pid);
  }
  close(fds[1]);
  std::string out;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(300);
  std::array<char, 4096> buf;
  for (;;) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now()).count();
    if (left <= 0) {
      for (pid_t p : pids) kill(p, SIGKILL);
      out += "\n[test] ranks killed after 300 s\n";
      break;
    }
    pollfd p{fds[0], POLLIN, 0};
    if (poll(&p, 1, static_cast<int>(left)) <= 0) continue;
    const ssize_t n = read(fds[0], buf.data(), buf.size());
    if (n <= 0) break;
    out.append(buf.data(), static_cast<size_t>(n));
  }
  close(fds[0]);
  for (pid_t p : pids) {
    int st = 0;
    waitpid(p, &st, 0);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) out += "\n[test] a rank exited abnormally\n";
  }
  std::remove(ids.c_str());
  return out;
}

int Count(const std::string& text, const std::string& pattern) {
  std::regex re(pattern);
  return static_cast<int>(std::distance(std::sregex_iterator(text.begin(), text.end(), re), std::sregex_iterator()));
}

TEST(GpuFramework, HybridWorldInitRankAllToAllGroupSplitOnDeviceMemory) {
  REQUIRE_GPUS(1);
  const std::string out = RunWorld("0:nvidia:cuda:0,1:ascend:host,1:ascend:host", 3);
  EXPECT_EQ(Count(out, "OK rank"), 3) << out;
  EXPECT_EQ(Count(out, "FAIL|abnormally"), 0) << out;
}

TEST(GpuFramework, TwoGpuIslandsSharingOneGpu) {
  REQUIRE_GPUS(1);
  const std::string out = RunWorld("0:nvidia:cuda:0,1:other:cuda:0,2:ascend:host", 3);
  EXPECT_EQ(Count(out, "OK rank"), 3) << out;
  EXPECT_EQ(Count(out, "FAIL|abnormally"), 0) << out;
}

TEST(GpuFramework, OneCudaIslandUsesTheCclGroupCalls) {
  REQUIRE_GPUS(2);
  const std::string out = RunWorld("0:nvidia:cuda:0,0:nvidia:cuda:1", 2);
  EXPECT_EQ(Count(out, "OK rank"), 2) << out;
  EXPECT_EQ(Count(out, "FAIL|abnormally"), 0) << out;
}

TEST(GpuFramework, AbortReleasesAStreamWaitingOnAQueuedRecv) {
  REQUIRE_GPUS(1);
  const std::string out = RunWorld("0:nvidia:cuda:0,1:ascend:host", 2, "abort");
  EXPECT_EQ(Count(out, "OK rank"), 2) << out;
  EXPECT_EQ(Count(out, "FAIL|abnormally"), 0) << out;
}

TEST(GpuFramework, NoGpuGivesUnsupportedNamingTheDevice) {
  int n = 0;
  if (cudaGetDeviceCount(&n) == cudaSuccess && n > 0) GTEST_SKIP() << "skipped: a GPU is present";
  tsrUniqueId id;
  ASSERT_EQ(tsrGetUniqueId(&id), tsrSuccess);
  tsrConfig_t cfg = TSR_CONFIG_INITIALIZER;
  cfg.device = "cuda:0";
  cfg.timeout_ms = 2000;
  tsrComm_t c = nullptr;
  EXPECT_EQ(tsrCommInitRank(&c, 1, id, 0, &cfg), tsrUnsupported);
  EXPECT_NE(std::string(tsrGetLastError(nullptr)).find("cuda:0"), std::string::npos) << tsrGetLastError(nullptr);
}

}  // namespace
