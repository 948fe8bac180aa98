// tests/comm/host_threads_test: the rank's host thread pool (comm/host_pool, TESSERA_HOST_THREADS).
//
// The pool alone: every part runs once, callers nest and overlap safely, threads are joined on
// destruction, a forked child rebuilds its pool, the `auto` rule and the variable's errors. The engine alone over
// in-memory rings with pools of 1, 2 and 7 threads: large copies and folds give the same bits. And whole jobs under
// `tessera run` (host_threads_worker) with TESSERA_HOST_THREADS=1, 2 and 7: every collective × type × op
// is exact and gives the same bits for every thread count, on 1+1 and 2+1 islands.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <regex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "comm/engine.hpp"
#include "comm/host_pool.hpp"
#include "comm/reduce/reduce.hpp"
#include "comm/transport/shm.hpp"
#include "common/shell.hpp"

namespace tessera::comm {
namespace {

TEST(HostPool, EveryPartRunsOnceAndTheCallerWaitsForAll) {
  for (int threads : {1, 2, 7}) {
    HostPool pool(threads);
    EXPECT_EQ(pool.threads(), threads);
    for (int round = 0; round < 200; ++round) {
      const int parts = 1 + round % 13;
      std::vector<std::atomic<int>> hits(parts);
      for (auto& h : hits) h = 0;
      pool.ParallelFor(parts, [&](int i) { hits[i].fetch_add(1); });
      for (int i = 0; i < parts; ++i) ASSERT_EQ(hits[i].load(), 1) << "threads " << threads << " part " << i;
    }
  }
}

TEST(HostPool, ConcurrentCallersRunInlineWithoutMixingJobs) {
  HostPool pool(4);
  std::atomic<long> sum_a{0}, sum_b{0};
  std::thread other([&] {
    for (int r = 0; r < 300; ++r) pool.ParallelFor(8, [&](int i) { sum_b += i; });
  });
  for (int r = 0; r < 300; ++r) pool.ParallelFor(8, [&](int i) { sum_a += i; });
  other.join();
  EXPECT_EQ(sum_a.load(), 300L * 28);
  EXPECT_EQ(sum_b.load(), 300L * 28);
}

TEST(HostPool, WorkersThatSleptWakeForTheNextJob) {
  HostPool pool(3);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));  // past the spin: the workers sleep
  std::atomic<int> n{0};
  pool.ParallelFor(6, [&](int) { ++n; });
  EXPECT_EQ(n.load(), 6);
}

TEST(HostPool, AForkedChildRebuildsItsPoolAndCanDestroyIt) {
#if defined(__SANITIZE_THREAD__)
  // With die_after_fork=0 GCC 12's TSan dies in every child ("ThreadSanitizer: dup thread with used id", exit 66):
  // its thread registry still holds the parent's threads, whose ids the child's new workers reuse.
  GTEST_SKIP() << "TSan does not support starting threads after a multi-threaded fork (die_after_fork)";
#endif
  // The parent's workers are busy around the forks (another thread hands them jobs): a child's copy of the pool
  // has none of them. Each child runs jobs, which must run on more than one thread again (new workers), and then
  // destroys the pool (joining the parent's workers there waited forever).
  //
  // The forks come only once every thread of the parent is past its start and does nothing but the pool's jobs,
  // which do not allocate: a child may use malloc only if no other thread of the parent held an allocator lock at
  // the fork. glibc's malloc takes its locks around fork(); the sanitizers' allocators before LLVM 18 do not
  // (GCC 12's libasan installs no fork handler: llvm/llvm-project#75290, "[asan] Install pthread_atfork", which
  // came later). When this test forked right after starting the pool's workers and the load thread, a parent
  // thread inside ASan's allocator at the fork (a thread's start allocates and frees: AsanThread::Init ->
  // pthread_getattr_np) left a size class's lock held in the child, and the child's new workers blocked on it in
  // their own start (seen with gdb in children hung under ASan, 2 of 116 runs). That is the allocator's limitation,
  // not the pool's; in this form of the test no parent thread is in the allocator at a fork, under ASan too.
  auto pool = std::make_unique<HostPool>(4);
  {
    std::mutex m;
    std::set<std::thread::id> ids;
    while (ids.size() < 4)  // every worker has run a part: all of them are started
      pool->ParallelFor(8, [&](int) {
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
        std::lock_guard<std::mutex> l(m);
        ids.insert(std::this_thread::get_id());
      });
  }
  std::atomic<bool> stop{false}, loaded{false};
  std::thread load([&] {
    while (!stop) {
      pool->ParallelFor(8, [](int) { std::this_thread::sleep_for(std::chrono::microseconds(50)); });
      loaded = true;
    }
  });
  while (!loaded) std::this_thread::sleep_for(std::chrono::milliseconds(1));  // the load thread is started too
  std::vector<pid_t> kids;
  for (int k = 0; k < 8; ++k) {
    std::this_thread::sleep_for(std::chrono::milliseconds(k % 3));  // forks at different points of a job
    const pid_t pid = ::fork();
    if (pid == 0) {
      std::mutex m;
      std::set<std::thread::id> ids;
      std::atomic<int> n{0};
      for (int r = 0; r < 20; ++r)
        pool->ParallelFor(8, [&](int) {
          std::this_thread::sleep_for(std::chrono::milliseconds(2));
          ++n;
          std::lock_guard<std::mutex> l(m);
          ids.insert(std::this_thread::get_id());
        });
      pool.reset();
      ::_exit(n != 160 ? 2 : ids.size() < 2 ? 3 : 0);
    }
    ASSERT_GT(pid, 0);
    kids.push_back(pid);
  }
  stop = true;
  load.join();
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  for (pid_t pid : kids) {
    int st = 0;
    while (::waitpid(pid, &st, WNOHANG) == 0) {
      if (std::chrono::steady_clock::now() > deadline) {
        ::kill(pid, SIGKILL);
        ::waitpid(pid, &st, 0);
        ADD_FAILURE() << "child " << pid << " hung (its pool waited for the parent's workers)";
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    if (WIFSIGNALED(st)) {
      ADD_FAILURE() << "child " << pid << " was killed by signal " << WTERMSIG(st);
    } else {
      EXPECT_EQ(WEXITSTATUS(st), 0) << "2: a part did not run; 3: every part ran on the calling thread (no workers)";
    }
  }
}

TEST(HostPool, AutoRuleAndTheVariablesErrors) {
  EXPECT_EQ(DefaultHostThreads(2, 2), 1);
  EXPECT_EQ(DefaultHostThreads(16, 2), 8);
  EXPECT_EQ(DefaultHostThreads(16, 4), 4);
  EXPECT_EQ(DefaultHostThreads(64, 1), 8);
  EXPECT_EQ(DefaultHostThreads(3, 8), 1);
  ::setenv("TESSERA_HOST_THREADS", "3", 1);
  EXPECT_EQ(*HostThreadsFromEnv(2), 3);
  ::setenv("TESSERA_HOST_THREADS", "auto", 1);
  EXPECT_EQ(*HostThreadsFromEnv(1), DefaultHostThreads(UsableCpus(), 1));
  for (const char* bad : {"0", "65", "two", "-1", "4x"}) {
    ::setenv("TESSERA_HOST_THREADS", bad, 1);
    auto r = HostThreadsFromEnv(1);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_NE(r.status().ToString().find("TESSERA_HOST_THREADS='" + std::string(bad) + "'"), std::string::npos)
        << r.status().ToString();
  }
  ::unsetenv("TESSERA_HOST_THREADS");
}

// Two "ranks" as two engines on two threads of this process, joined by private shm rings (the same
// ShmWriter/ShmReader as between processes), each with its own pool.
class RingLinks final : public Links {
 public:
  RingLinks(std::unique_ptr<SendChannel> s, std::unique_ptr<RecvChannel> r)
      : send_(std::move(s)), recv_(std::move(r)) {}
  SendChannel* send(int) override { return send_.get(); }
  RecvChannel* recv(int) override { return recv_.get(); }
  Status CheckHealth(const std::vector<int>&) override { return Status::Ok(); }
  std::string PeerName(int peer) const override { return "rank " + std::to_string(peer); }
  std::chrono::milliseconds timeout() const override { return std::chrono::seconds(60); }

 private:
  std::unique_ptr<SendChannel> send_;
  std::unique_ptr<RecvChannel> recv_;
};

// One bridge step of a 1+1 allreduce on both ranks (as hierarchical.cpp's BridgeReduce, with the whole
// buffer owned by rank `owner` of each half): rank r folds part r of (mine, the peer's) in rank order,
// sends the result, and receives the other part's result. Returns each rank's output bytes.
std::array<std::vector<unsigned char>, 2> BridgeAllReduce(int threads, DType dt, RedOp op, size_t n) {
  const size_t esz = DTypeSize(dt);
  auto box0 = ShmInbox::CreatePrivate({1 << 20, 1 << 20});  // rank 0's inbox: ring 1 carries rank 1's bytes
  auto box1 = ShmInbox::CreatePrivate({1 << 20, 1 << 20});
  EXPECT_TRUE(box0.ok() && box1.ok());
  RingLinks l0((*box1)->Writer(0), (*box0)->Reader(1)), l1((*box0)->Writer(1), (*box1)->Reader(0));
  l0.set_host_pool(std::make_unique<HostPool>(threads));
  l1.set_host_pool(std::make_unique<HostPool>(threads));
  std::array<std::vector<unsigned char>, 2> in, out;
  for (int r = 0; r < 2; ++r) {
    in[r].resize(n * esz);
    out[r].assign(n * esz, 0);
    uint64_t x = 0x9E3779B97F4A7C15ull * (r + 1) + static_cast<uint64_t>(dt) * 31 + static_cast<uint64_t>(op);
    for (size_t i = 0; i < n * esz; ++i) {
      x ^= x << 13, x ^= x >> 7, x ^= x << 17;
      in[r][i] = static_cast<unsigned char>(x);
    }
    if (IsFloat(dt)) {  // finite values of the type: the raw bytes of a sane range
      for (size_t i = 0; i < n; ++i) {
        const double v = (static_cast<double>(in[r][i * esz] % 200) - 100.0) / 7.0 + 1e-3 * static_cast<double>(i % 97);
        StoreElement(in[r].data(), i, dt, op == RedOp::kProd ? 1.0 + v / 1000.0 : v);
      }
    }
  }
  const size_t half = n / 2;
  auto rank = [&](int r, Links* links) {
    const size_t begin = r == 0 ? 0 : half, count = r == 0 ? half : n - half;
    const size_t obegin = r == 0 ? half : 0, ocount = r == 0 ? n - half : half;
    std::vector<unsigned char> acc(count * DTypeSize(AccumType(dt)));
    ReduceJob job;
    job.acc = acc.data();
    job.n = count;
    job.dtype = dt;
    job.op = op;
    job.dst = out[r].data() + begin * esz;
    job.divisor = 2;
    job.Init(2);
    Engine e(links);
    e.Send(1 - r, in[r].data() + obegin * esz, ocount * esz);  // the peer's part of my input
    e.LocalFold(&job, r, in[r].data() + begin * esz);          // contributors in rank order
    e.RecvFold(1 - r, &job, 1 - r);
    e.SendResult(1 - r, &job);
    e.RecvCopy(1 - r, out[r].data() + obegin * esz, ocount * esz);
    Status s = e.Run("bridge");
    EXPECT_TRUE(s.ok()) << s.ToString();
  };
  std::thread t1([&] { rank(1, &l1); });
  rank(0, &l0);
  t1.join();
  if (threads > 1 && n * esz >= (4 << 20)) {  // large enough: the copies and folds were cut across threads
    EXPECT_GT(l0.host_pool()->split_jobs(), 4u);
    EXPECT_GT(l1.host_pool()->split_jobs(), 4u);
    // ... into more parts than threads, which the threads claim one at a time (engine.cpp: kPartsPerThread).
    for (const RingLinks* l : {&l0, &l1})
      EXPECT_GT(l->host_pool()->split_parts(), l->host_pool()->split_jobs() * static_cast<uint64_t>(threads));
  }
  return out;
}

TEST(HostPool, EngineGivesTheSameBitsForEveryThreadCount) {
  const size_t n = (3 << 20) / 4 + 13;  // several steps and pieces, and a ragged end
  for (int ti = 0; ti < static_cast<int>(DType::kCount); ++ti) {
    const DType dt = static_cast<DType>(ti);
    for (RedOp op : {RedOp::kSum, RedOp::kProd, RedOp::kMax, RedOp::kMin, RedOp::kAvg}) {
      auto one = BridgeAllReduce(1, dt, op, n);
      EXPECT_EQ(one[0], one[1]) << DTypeName(dt);
      for (int threads : {2, 7}) {
        auto many = BridgeAllReduce(threads, dt, op, n);
        ASSERT_TRUE(many[0] == one[0] && many[1] == one[1])
            << DTypeName(dt) << " op " << static_cast<int>(op) << ": " << threads << " threads differ from one";
      }
    }
  }
}

using testing_shell::Bin;
using testing_shell::Proc;
using testing_shell::Shell;

std::string Worker() {
  std::string bin = Bin();
  return bin.substr(0, bin.rfind('/')) + "/tests/comm/host_threads_worker";
}

// "HASH rank R what h" lines → (R, what) → h.
std::map<std::string, std::string> Hashes(const std::string& out) {
  std::map<std::string, std::string> h;
  std::regex re(R"(HASH rank (\d+) (\S+) ([0-9a-f]+))");
  for (auto it = std::sregex_iterator(out.begin(), out.end(), re); it != std::sregex_iterator(); ++it)
    h[(*it)[1].str() + " " + (*it)[2].str()] = (*it)[3].str();
  return h;
}

class Jobs : public ::testing::TestWithParam<const char*> {};

TEST_P(Jobs, EveryCollectiveTypeAndOpGivesTheSameBitsWithOneTwoAndSevenThreads) {
  std::map<std::string, std::string> first;
  for (const char* threads : {"1", "2", "7"}) {
    Proc r = Shell(std::string("TESSERA_TIMEOUT=120s TESSERA_HOST_THREADS=") + threads + " " + Bin() + " run " +
                   GetParam() + " -- " + Worker() + " --sizes 600011");
    ASSERT_EQ(r.status, 0) << "TESSERA_HOST_THREADS=" << threads << "\n" << r.out;
    ASSERT_EQ(r.out.find("FAIL"), std::string::npos) << r.out;
    auto h = Hashes(r.out);
    ASSERT_GT(h.size(), 100u) << r.out;
    if (first.empty()) {
      first = h;
      continue;
    }
    ASSERT_EQ(h.size(), first.size());
    for (const auto& [k, v] : first) EXPECT_EQ(h[k], v) << k << " with TESSERA_HOST_THREADS=" << threads;
  }
}

INSTANTIATE_TEST_SUITE_P(Comm, Jobs,
                         ::testing::Values("--island ascend=host:1 --island nvidia=host:1",
                                           "--island ascend=host:2 --island nvidia=host:1"));

TEST(HostThreads, ABadValueFailsEveryRankNamingTheVariable) {
  Proc r = Shell("TESSERA_TIMEOUT=20s TESSERA_HOST_THREADS=many " + Bin() +
                 " run --island ascend=host:1 --island nvidia=host:1 -- " + Worker() + " --sizes 1");
  EXPECT_NE(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("TESSERA_HOST_THREADS='many'"), std::string::npos) << r.out;
}

}  // namespace
}  // namespace tessera::comm
