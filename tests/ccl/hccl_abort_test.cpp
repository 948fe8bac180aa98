// tests/ccl/hccl_abort_test: ending an HCCL communicator while one of its operations is in flight. HCCL has no abort;
// HcclCommDestroy, called from another thread, returns HCCL_E_AGAIN while a thread is inside a call on the
// communicator, and otherwise destroys it and ends the operations it still runs with an error (CANN's documented
// behaviour, which the HCCL host shim models: tests/shims/hccl_shim.cpp, [destroy]). So CclComm::Abort on the hccl
// row drains first — waits within the communicator's timeout for what is queued, so that work which can finish
// does — then destroys, retrying HCCL_E_AGAIN until that deadline; an operation stuck on a peer that hangs is ended
// by the destroy, within the bound, and the abort says so naming the library and the island's communicator. The
// shim runs its operations asynchronously on the ACL shim's streams and counts the destroys that ended operations
// (tesseraHcclShimDestroyedInFlight, tests/shims/README.md). Two forked ranks meet through Tessera's store.
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
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

// Whether the HCCL shim still holds `comm` as a live communicator (HcclGetRankSize answers for it).
bool Live(void* comm) {
  void* h = dlopen(TESSERA_SHIM_HCCL, RTLD_NOW | RTLD_NOLOAD);
  auto size = h ? reinterpret_cast<int (*)(void*, uint32_t*)>(dlsym(h, "HcclGetRankSize")) : nullptr;
  uint32_t n = 0;
  return size != nullptr && size(comm, &n) == 0;
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

// A device buffer of `rank + 1` in every element, or null.
void* Buffer(Rank& k) {
  const std::vector<float> mine(kCount, static_cast<float>(k.rank + 1));
  void* d = k.rt->Malloc(kCount * sizeof(float));
  return k.Expect(d && k.rt->ToDevice(d, mine.data(), kCount * sizeof(float)), "device buffer") ? d : nullptr;
}

// An allreduce of `d` in place, queued on the rank's stream: HcclAllReduce's result.
int AllReduce(Rank& k, void* d) {
  return k.comm->lib().AllReduce(d, d, kCount, DType::kFloat32, RedOp::kSum, k.comm->handle(), k.stream);
}

// An allreduce of `rank + 1` in every element, queued on the rank's stream; its device buffer, or null.
void* QueueAllReduce(Rank& k) {
  void* d = Buffer(k);
  if (d == nullptr) return nullptr;
  const int r = AllReduce(k, d);
  return k.Expect(r == 0, "HcclAllReduce: " + std::to_string(r)) ? d : nullptr;
}

// Rank 1 joins the allreduce late: rank 0's abort comes while its allreduce is queued and running, and must wait
// for it (well within the 20 s timeout), then destroy. The allreduce completes with the right sum.
TEST(HcclAbort, WaitsForTheOperationInFlightThenDestroys) {
  const std::string res = RunRanks(std::chrono::seconds(20), [](Rank& k) {
    if (k.rank == 1) std::this_thread::sleep_for(std::chrono::milliseconds(300));
    void* d = QueueAllReduce(k);
    if (d == nullptr) return;
    if (k.rank == 0) {
      const Status s = k.comm->AbortAndReport();
      k.Expect(s.ok(), "the abort of a communicator whose work finished: " + s.message());
    }
    k.Expect(DestroyedInFlight() == 0, "the communicator was destroyed under its running allreduce");
    k.Expect(k.rt->Sync(k.stream), "the allreduce failed: it was not left to finish");
    std::vector<float> got(kCount);
    k.Expect(k.rt->ToHost(got.data(), d, kCount * sizeof(float)) && got == std::vector<float>(kCount, 3.0f),
             "wrong allreduce result");
  });
  EXPECT_EQ(res, "");
}

// Rank 1 hangs (alive, never joins): rank 0's allreduce would run until HCCL's own timeout (the shim's, 60 s
// here; HCCL_EXEC_TIMEOUT is 1836 s by default). Abort waits the communicator's timeout (200 ms), then destroys
// the communicator, which ends the allreduce at once: the abort returns within the bound, says what it ended naming
// the library and the island's communicator, and the stream fails long before the peer or HCCL's timeout would.
TEST(HcclAbort, EndsAnOperationStuckOnAHungPeerWithinTheBoundAndNamesIt) {
  setenv("TESSERA_SHIM_TIMEOUT_MS", "60000", 1);  // read when a communicator is made: set before the forks
  const std::string res = RunRanks(std::chrono::milliseconds(200), [](Rank& k) {
    if (k.rank == 1) {
      std::this_thread::sleep_for(std::chrono::seconds(8));  // alive: the shim would see a dead peer's exit
      return;
    }
    if (QueueAllReduce(k) == nullptr) return;
    const auto t0 = Clock::now();
    const Status s = k.comm->AbortAndReport();
    const auto ms = [&] { return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t0).count(); };
    k.Expect(ms() < 2500, "abort took " + std::to_string(ms()) + " ms: not bounded by the communicator's timeout");
    k.Expect(s.code() == Code::kTimeout && s.message().find("hccl") != std::string::npos &&
                 s.message().find("ccl/abort/id") != std::string::npos &&
                 s.message().find("HcclCommDestroy ended them") != std::string::npos,
             "the abort does not say what it ended, naming the library and the communicator: " + s.message());
    k.Expect(DestroyedInFlight() == 1, "the stuck allreduce was not ended by a destroy");
    k.Expect(!Live(k.comm->handle()), "the communicator was left undestroyed");
    k.Expect(!k.rt->Sync(k.stream), "the allreduce of a hung peer succeeded");
    k.Expect(ms() < 4000, "the stream failed only " + std::to_string(ms()) +
                              " ms after the abort: the stuck allreduce was not ended by it");
  });
  unsetenv("TESSERA_SHIM_TIMEOUT_MS");
  EXPECT_EQ(res, "");
}

// A thread is inside an HCCL call on the communicator (a host call of 500 ms: TESSERA_SHIM_HCCL_CALL_MS) when
// another thread aborts it: HcclCommDestroy answers HCCL_E_AGAIN until that call returns. The abort retries within
// its bound and destroys the communicator then; it is not left alive.
TEST(HcclAbort, RetriesADestroyThatFindsTheCommunicatorInUse) {
  const std::string res = RunRanks(std::chrono::seconds(3), [](Rank& k) {
    setenv("TESSERA_SHIM_HCCL_CALL_MS", "500", 1);
    void* d = Buffer(k);
    if (d == nullptr) return;
    std::atomic<int> r{-1};
    std::thread call([&] { r = AllReduce(k, d); });  // (the shim's streams need no device on this thread)
    if (k.rank == 0) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));  // inside the call
      const auto t0 = Clock::now();
      const Status s = k.comm->AbortAndReport();
      const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t0).count();
      k.Expect(!Live(k.comm->handle()), "the communicator in use at the abort was left undestroyed: " + s.message());
      k.Expect(ms < 2900, "abort took " + std::to_string(ms) + " ms: not bounded by the communicator's timeout");
    }
    call.join();
    k.Expect(r == 0, "HcclAllReduce: " + std::to_string(r));
    (void)k.rt->Sync(k.stream);  // done or ended by the destroy; either is right here
  });
  EXPECT_EQ(res, "");
}

}  // namespace
}  // namespace tessera::comm
