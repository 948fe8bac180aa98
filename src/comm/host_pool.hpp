// comm/host_pool: a rank's pool of host threads for the engine's large copies and folds.
//
// One pool per communicator (Links::host_pool, made by Comm::SetUpChannels), sized by TESSERA_HOST_THREADS:
// `auto` gives max(1, min(8, cpus / ranks of this communicator on this host)), where cpus are the ones this
// process may run on. A pool of one thread has no workers: everything runs on the calling thread, as
// before the pool existed. Workers spin briefly between jobs (a collective hands them one every few
// microseconds), then sleep on a condition variable; the destructor joins them.
//
// ParallelFor splits nothing itself: the caller cuts its work into parts and the calling thread takes
// parts too, so a job never waits for a sleeping worker to wake. One job at a time: a second caller
// while a job runs (another thread on the same communicator) runs its parts inline.
//
// Fork-safe: around a fork (pthread_atfork) every pool's lock is taken, so no worker holds it in the child (its
// condition variable, which may count the parent's sleeping workers as waiters, starts afresh there); the
// child's copy of a pool has no workers (only the forking thread is copied), so it forgets them without
// joining and starts new ones at its first job (a pool rebuilt in the child), and it can be destroyed there.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <thread>
#include <type_traits>
#include <vector>

#include "tessera/status.hpp"

namespace tessera::comm {

class HostPool {
 public:
  static constexpr int kMaxThreads = 64;
  explicit HostPool(int threads);  // threads - 1 workers (threads is clamped to [1, kMaxThreads])
  ~HostPool();
  HostPool(const HostPool&) = delete;
  HostPool& operator=(const HostPool&) = delete;

  int threads() const { return threads_; }
  // Jobs run across the threads so far (not those run inline): for tests.
  uint64_t split_jobs() const { return split_jobs_.load(std::memory_order_relaxed); }
  uint64_t split_parts() const { return split_parts_.load(std::memory_order_relaxed); }  // ... and their parts
  // Runs fn(ctx, i) for every i in [0, parts) on the workers and the calling thread; returns when all
  // have finished. parts must be at most 65535.
  void ParallelFor(int parts, void (*fn)(void* ctx, int part), void* ctx);
  template <typename F>
  void ParallelFor(int parts, F&& f) {
    ParallelFor(
        parts, [](void* c, int i) { (*static_cast<std::remove_reference_t<F>*>(c))(i); },
        const_cast<void*>(static_cast<const void*>(&f)));
  }

 private:
  void Work();
  // In a forked child: the workers of the parent are gone; new ones are started at the next job.
  void RebuildAfterFork();
  friend struct PoolForkHooks;
  // Claims the next part of job `gen`; -1 when that job has none left (or is not the current one).
  int Claim(uint32_t gen);

  int threads_;
  // The current job: generation (high 32 bits), parts (bits 16..31), next part to claim (bits 0..15).
  std::atomic<uint64_t> word_{0};
  void (*fn_)(void*, int) = nullptr;  // written before word_ is published, read after a claim
  void* ctx_ = nullptr;
  std::atomic<int> finished_{0};  // parts of the current job finished
  std::atomic<bool> busy_{false};
  std::atomic<uint64_t> split_jobs_{0};
  std::atomic<uint64_t> split_parts_{0};
  std::atomic<bool> stop_{false};
  std::mutex mu_;
  std::condition_variable cv_;
  std::atomic<int> sleepers_{0};  // changed under mu_
  std::vector<std::thread> workers_;
  std::atomic<bool> forked_{false};  // set in a forked child until RebuildAfterFork
};

// The number of CPUs this process may run on (its affinity mask; the online CPUs without one).
int UsableCpus();
// TESSERA_HOST_THREADS for a communicator with `local_ranks` ranks on this host: `auto` (the default)
// gives max(1, min(8, UsableCpus() / local_ranks)); a number 1..64 is taken as it is. InvalidArgument
// naming the variable for anything else.
Result<int> HostThreadsFromEnv(int local_ranks);
// The `auto` rule on its own, for tests: max(1, min(8, cpus / local_ranks)).
int DefaultHostThreads(int cpus, int local_ranks);

}  // namespace tessera::comm
