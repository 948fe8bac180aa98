// common/parallel: the one small thread pool the I/O paths share — indices 0..n-1 handed out to a few
// threads, the caller's among them.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

namespace tessera {

// Calls work(i, t) for i in [0, n) on min(threads, n) threads (at least one); t in [0, threads) names the
// thread (the caller's is 0), for per-thread buffers. Each thread takes the next index until they run
// out or its work returns false (that thread stops; the others go on). Returns when all have finished.
inline void ParallelFor(uint64_t n, int threads, const std::function<bool(uint64_t i, int t)>& work) {
  const int nt = static_cast<int>(std::max<uint64_t>(1, std::min<uint64_t>(std::max(1, threads), n)));
  std::atomic<uint64_t> next{0};
  auto run = [&](int t) {
    for (uint64_t i; (i = next.fetch_add(1)) < n;)
      if (!work(i, t)) return;
  };
  std::vector<std::thread> pool;
  for (int t = 1; t < nt; ++t) pool.emplace_back(run, t);
  run(0);
  for (auto& th : pool) th.join();
}

// One scratch buffer of `bytes` per ParallelFor thread, made when that thread first asks for it.
class ThreadBuffers {
 public:
  ThreadBuffers(int threads, size_t bytes) : bufs_(static_cast<size_t>(std::max(1, threads))), bytes_(bytes) {}
  char* get(int t) {
    auto& b = bufs_[static_cast<size_t>(t)];
    if (!b) b.reset(new char[bytes_]);
    return b.get();
  }

 private:
  std::vector<std::unique_ptr<char[]>> bufs_;
  size_t bytes_;
};

}  // namespace tessera
