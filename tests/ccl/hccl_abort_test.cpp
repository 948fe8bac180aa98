// tests/ccl/hccl_abort_test: ending an HCCL communicator while one of its operations is in flight. HCCL has no abort,
// and HcclCommDestroy frees what a running operation uses, so CclComm::Abort on the hccl row must first wait (within
// the communicator's timeout) for what is queued, then destroy; a communicator whose work is still running then is
// left undestroyed. The HCCL host shim runs its operations asynchronously on the ACL shim's streams, as the real
// library does, and counts every destroy made under queued or running operations (tesseraHcclShimDestroyedInFlight,
// tests/shims/README.md): that count must stay 0. Two forked ranks meet through Tessera's store.
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "ccl/ccl_runtime.hpp"
#include "comm/ccl/ccl.hpp"
#include "comm/store/store.hpp"

namespace tessera::comm {
namespace {

using Clock = std::chrono::steady_clock;

// One rank: the ACL shim's runtime and a communicator of the hccl row (on the HCCL shim) with `timeout`.
struct Rank {
  int rank = 0;
  std::unique_ptr<ccltest::Runtime> rt;
  std::unique_ptr<CclComm> comm;
  void* stream = nullptr;
  std::string failures;
  bool Expect(bool ok, const std::string& what) {
    if (!ok) failures += "rank " + std::to_string(rank) + ": " + what + "\n";
    return ok;
  }
};

uint64_t DestroyedInFlight() {
  void* h = dlopen(TESSERA_SHIM_HCCL, RTLD_NOW | RTLD_NOLOAD);
  auto count = h ? reinterpret_cast<uint64_t (*)()>(dlsym(h, "tesseraHcclShimDestroyedInFlight")) : nullptr;
  return count ? count() : ~uint64_t{0};
}

// Runs `body` on 2 forked ranks; "" when both passed, else their failures.
std::string RunRanks(std::chrono::milliseconds timeout, const std::function<void(Rank&)>& body) {
  auto server = StoreServer::Start("127.0.0.1", 0, "tok");
  if (!server.ok()) return server.status().message();
  const std::string addr = "127.0.0.1:" + std::to_string((*server)->port());
  std::vector<pid_t> pids;
  std::vector<int> fds;
  for (int r = 0; r < 2; ++r) {
    int p[2];
    if (pipe(p) != 0) return "pipe";
    const pid_t pid = fork();
    if (pid == 0) {
      close(p[0]);
      Rank k;
      k.rank = r;
      k.rt = std::make_unique<ccltest::AclRuntime>(TESSERA_SHIM_ACL);
      const std::string why = k.rt->Init(r);
      CclRow row = *FindCclRow("hccl");
      row.soname = TESSERA_SHIM_HCCL;
      auto lib = CclLibrary::Load(row);
      auto store = StoreClient::Connect(addr, "tok", std::chrono::seconds(20));
      if (k.Expect(why.empty(), why) && k.Expect(lib.ok(), lib.status().message()) &&
          k.Expect(store.ok(), store.status().message())) {
        auto c = CclComm::Create(*lib, store->get(), "ccl/abort/id", 2, r, timeout);
        if (k.Expect(c.ok(), c.status().message())) {
          k.comm = std::move(*c);
          k.stream = k.rt->Stream();
          body(k);
          k.comm.reset();
        }
      }
      if (write(p[1], k.failures.data(), k.failures.size()) < 0) _exit(3);
      _exit(k.failures.empty() ? 0 : 1);
    }
    close(p[1]);
    pids.push_back(pid);
    fds.push_back(p[0]);
  }
  std::string all;
  for (int r = 0; r < 2; ++r) {
    char buf[4096];
    ssize_t n;
    while ((n = read(fds[r], buf, sizeof buf)) > 0) all.append(buf, static_cast<size_t>(n));
    close(fds[r]);
    int st = 0;
    waitpid(pids[r], &st, 0);
    if (!WIFEXITED(st) || (WEXITSTATUS(st) != 0 && all.empty()))
      all += "rank " + std::to_string(r) + " ended with status " + std::to_string(st) + "\n";
  }
  return all;
}

constexpr size_t kCount = 1024;

// An allreduce of `rank + 1` in every element, queued on the rank's stream; its device buffer, or null.
void* QueueAllReduce(Rank& k) {
  const std::vector<float> mine(kCount, static_cast<float>(k.rank + 1));
  void* d = k.rt->Malloc(kCount * sizeof(float));
  if (!k.Expect(d && k.rt->ToDevice(d, mine.data(), kCount * sizeof(float)), "device buffer")) return nullptr;
  const int r = k.comm->lib().AllReduce(d, d, kCount, DType::kFloat32, RedOp::kSum, k.comm->handle(), k.stream);
  return k.Expect(r == 0, "HcclAllReduce: " + std::to_string(r)) ? d : nullptr;
}

// Rank 1 joins the allreduce late: rank 0's abort comes while its allreduce is queued and running, and must wait
// for it (well within the 20 s timeout), then destroy. The allreduce completes with the right sum.
TEST(HcclAbort, WaitsForTheOperationInFlightThenDestroys) {
  const std::string res = RunRanks(std::chrono::seconds(20), [](Rank& k) {
    if (k.rank == 1) std::this_thread::sleep_for(std::chrono::milliseconds(300));
    void* d = QueueAllReduce(k);
    if (d == nullptr) return;
    if (k.rank == 0) k.comm->Abort();
    k.Expect(DestroyedInFlight() == 0, "the communicator was destroyed under its running allreduce");
    k.Expect(k.rt->Sync(k.stream), "the allreduce failed: it was not left to finish");
    std::vector<float> got(kCount);
    k.Expect(k.rt->ToHost(got.data(), d, kCount * sizeof(float)) && got == std::vector<float>(kCount, 3.0f),
             "wrong allreduce result");
  });
  EXPECT_EQ(res, "");
}

// Rank 1 never joins: rank 0's allreduce runs until the shim's own timeout (3 s). Abort waits only the
// communicator's timeout (200 ms), then leaves the communicator undestroyed rather than destroy it under the
// running allreduce, which later fails on its own.
TEST(HcclAbort, LeavesACommunicatorWhoseOperationStillRunsUndestroyed) {
  const std::string res = RunRanks(std::chrono::milliseconds(200), [](Rank& k) {
    setenv("TESSERA_SHIM_TIMEOUT_MS", "3000", 1);
    if (k.rank == 1) {
      std::this_thread::sleep_for(std::chrono::milliseconds(3500));
      return;
    }
    if (QueueAllReduce(k) == nullptr) return;
    const auto t0 = Clock::now();
    k.comm->Abort();
    const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t0).count();
    k.Expect(ms < 2500, "abort took " + std::to_string(ms) + " ms: not bounded by the communicator's timeout");
    k.Expect(DestroyedInFlight() == 0, "the communicator was destroyed under its running allreduce");
    k.Expect(!k.rt->Sync(k.stream), "the allreduce of a missing peer succeeded");
  });
  EXPECT_EQ(res, "");
}

}  // namespace
}  // namespace tessera::comm
