// comm/host_pool: the rank's host threads for large copies and folds; see host_pool.hpp.
#include "comm/host_pool.hpp"

#include <fmt/format.h>
#include <pthread.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <new>
#include <set>
#include <string>

#include "common/env.hpp"

namespace tessera::comm {
namespace {
constexpr uint32_t Gen(uint64_t w) { return static_cast<uint32_t>(w >> 32); }
inline void CpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}
// How long an idle worker spins (yielding) for the next job before it sleeps.
constexpr std::chrono::microseconds kSpin{200};
}  // namespace

// The live pools, for the fork handlers (never destroyed: a static destructor could run while a pool lives).
struct PoolForkHooks {
  static std::mutex& Mu() {
    static auto* mu = new std::mutex;
    return *mu;
  }
  static std::set<HostPool*>& Pools() {
    static auto* pools = new std::set<HostPool*>;
    return *pools;
  }
  static void Prepare() {  // no worker holds a pool's lock across the fork
    Mu().lock();
    for (HostPool* p : Pools()) p->mu_.lock();
  }
  static void Parent() {
    for (HostPool* p : Pools()) p->mu_.unlock();
    Mu().unlock();
  }
  static void Child() {
    for (HostPool* p : Pools()) {
      p->mu_.unlock();
      // The condition variable may count the parent's sleeping workers as waiters, which a notify would wait
      // for forever (glibc): start it afresh.
      new (&p->cv_) std::condition_variable();
      // The std::thread objects name the parent's workers, which do not exist here: forget them without
      // join (it would wait forever) or destruction (a joinable thread's destructor terminates).
      for (auto& t : p->workers_) new (&t) std::thread();
      p->forked_.store(true, std::memory_order_relaxed);
    }
    Mu().unlock();
  }
  static void Add(HostPool* p) {
    static const bool installed = pthread_atfork(Prepare, Parent, Child) == 0;
    (void)installed;
    std::lock_guard<std::mutex> l(Mu());
    Pools().insert(p);
  }
  static void Remove(HostPool* p) {
    std::lock_guard<std::mutex> l(Mu());
    Pools().erase(p);
  }
};

HostPool::HostPool(int threads) : threads_(std::clamp(threads, 1, kMaxThreads)) {
  workers_.reserve(threads_ - 1);
  for (int i = 1; i < threads_; ++i) workers_.emplace_back([this] { Work(); });
  PoolForkHooks::Add(this);
}

void HostPool::RebuildAfterFork() {
  workers_.clear();  // none of them joinable (PoolForkHooks::Child)
  // A job the parent was running on another thread has no caller here: retire it.
  word_.store(static_cast<uint64_t>(Gen(word_.load()) + 1) << 32);
  finished_.store(0);
  busy_.store(false);
  sleepers_.store(0);
  stop_.store(false);
  for (int i = 1; i < threads_; ++i) workers_.emplace_back([this] { Work(); });
  forked_.store(false, std::memory_order_release);
}

HostPool::~HostPool() {
  PoolForkHooks::Remove(this);
  {
    std::lock_guard<std::mutex> lk(mu_);
    stop_.store(true);
  }
  cv_.notify_all();
  for (auto& t : workers_)
    if (t.joinable()) t.join();  // none is, in a forked child that never ran a job
}

int HostPool::Claim(uint32_t gen) {
  uint64_t w = word_.load(std::memory_order_acquire);
  for (;;) {
    if (Gen(w) != gen) return -1;
    const uint64_t parts = (w >> 16) & 0xffff, next = w & 0xffff;
    if (next >= parts) return -1;
    if (word_.compare_exchange_weak(w, w + 1, std::memory_order_acq_rel, std::memory_order_acquire))
      return static_cast<int>(next);
  }
}

void HostPool::ParallelFor(int parts, void (*fn)(void*, int), void* ctx) {
  if (parts <= 0) return;
  if (forked_.load(std::memory_order_relaxed)) RebuildAfterFork();
  if (threads_ == 1 || parts == 1 || busy_.exchange(true, std::memory_order_acquire)) {
    for (int i = 0; i < parts; ++i) fn(ctx, i);
    return;
  }
  split_jobs_.fetch_add(1, std::memory_order_relaxed);
  split_parts_.fetch_add(static_cast<uint64_t>(parts), std::memory_order_relaxed);
  fn_ = fn;
  ctx_ = ctx;
  finished_.store(0, std::memory_order_relaxed);
  const uint32_t gen = Gen(word_.load(std::memory_order_relaxed)) + 1;
  // seq_cst store, then the sleepers' count: a worker going to sleep either sees this job or is woken.
  word_.store((static_cast<uint64_t>(gen) << 32) | (static_cast<uint64_t>(parts) << 16));
  if (sleepers_.load() > 0) {
    { std::lock_guard<std::mutex> lk(mu_); }
    cv_.notify_all();
  }
  for (int i; (i = Claim(gen)) >= 0;) {
    fn(ctx, i);
    finished_.fetch_add(1, std::memory_order_release);
  }
  while (finished_.load(std::memory_order_acquire) < parts) CpuRelax();
  busy_.store(false, std::memory_order_release);
}

void HostPool::Work() {
  uint32_t seen = Gen(word_.load(std::memory_order_acquire));
  for (;;) {
    // Spin for the next job a little (the engine hands out one every few microseconds), then sleep.
    auto until = std::chrono::steady_clock::now() + kSpin;
    for (int n = 0;; ++n) {
      if (stop_.load(std::memory_order_relaxed)) return;
      if (Gen(word_.load(std::memory_order_acquire)) != seen) break;
      if (n < 64) {
        CpuRelax();
        continue;
      }
      if ((n & 63) == 0 && std::chrono::steady_clock::now() > until) {
        std::unique_lock<std::mutex> lk(mu_);
        sleepers_.fetch_add(1);
        cv_.wait(lk, [&] { return stop_.load() || Gen(word_.load()) != seen; });
        sleepers_.fetch_sub(1);
        if (stop_.load()) return;
        break;
      }
      sched_yield();  // ranks may outnumber cores: leave the core to whoever needs it
    }
    seen = Gen(word_.load(std::memory_order_acquire));
    for (int i; (i = Claim(seen)) >= 0;) {
      fn_(ctx_, i);
      finished_.fetch_add(1, std::memory_order_release);
    }
  }
}

int UsableCpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) {
    const int n = CPU_COUNT(&set);
    if (n > 0) return n;
  }
  const long online = sysconf(_SC_NPROCESSORS_ONLN);
  return online > 0 ? static_cast<int>(online) : 1;
}

int DefaultHostThreads(int cpus, int local_ranks) { return std::max(1, std::min(8, cpus / std::max(1, local_ranks))); }

Result<int> HostThreadsFromEnv(int local_ranks) {
  const std::string text = env::GetOrDefault("TESSERA_HOST_THREADS");
  if (text == "auto") return DefaultHostThreads(UsableCpus(), local_ranks);
  auto n = env::ParseInt("TESSERA_HOST_THREADS", text, 1, HostPool::kMaxThreads);
  if (!n.ok())
    return InvalidArgument(fmt::format("TESSERA_HOST_THREADS='{}' must be `auto` or a number of threads, 1 to {}", text,
                                       HostPool::kMaxThreads));
  return static_cast<int>(*n);
}

}  // namespace tessera::comm
