// bench/comm/allreduce_bound.cpp — a bound on the host engine's allreduce busbw on this box:
// the box's memcpy bandwidth on T threads, times the memory traffic that Tessera's allreduce of a layout
// of host islands makes (the hierarchical algorithm through the shm rings: every byte sent is copied
// into a ring and out of it or folded from it), gives the shortest time the whole job can take and so
// the highest busbw. Printed per size beside what `tessera bench allreduce` reports for the same layout:
//
//   build/bench/comm/allreduce_bound --islands 1,1 --sizes 64M,256M              # T = every usable CPU
//   build/tessera run --island a=host:1 --island b=host:1 -- build/tessera bench allreduce --sizes 64M,256M
//
// Model, per rank, for islands of m members (k islands, buffer S bytes, accumulator a × the element size):
// phase 1 (m > 1) sends (m−1)/m·S and folds m contributions of S/m into its accumulator; phase 2 (k > 1)
// sends (k−1)/k of its shard (the accumulator when m > 1), folds k parts of S/(mk) in island order,
// sends the result to k−1 owners and receives (k−1)/k of its shard's results; phase 3 (m > 1) sends its
// shard to m−1 members and receives theirs. A copy of B bytes reads B and writes B, a fold reads its
// inputs and writes its output. Two figures: `bound` leaves out the ring bytes (the rings are small and
// stay in cache; what must reach memory is the inputs, the outputs and the accumulators: 2.5·S per rank
// for 1+1): no busbw above it without fewer passes over memory than the engine makes. `all-in-memory`
// counts every ring byte as memory traffic too (4.5·S per rank for 1+1); a run above it is helped by the
// cache. On a GPU machine (a 16-core VM) the engine tracks `all-in-memory`: there a copy through a ring
// costs as much as one through memory (bench/results/log/2026-12-03-fewer-passes-over-memory.md).
// memcpy bandwidth = bytes copied / time, so the traffic rate is 2× it. The memcpy runs on --threads
// threads over --copy-bytes (default: every usable CPU, 256 MiB: the box's memory bandwidth).
#include <sched.h>

#include <CLI/CLI.hpp>
#include <barrier>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "peers/harness.hpp"

namespace {

using Clock = std::chrono::steady_clock;

// Median over iterations of the time (s) for `threads` threads to copy `bytes` between two buffers.
double CopySeconds(uint64_t bytes, int threads, int iters) {
  std::unique_ptr<char[]> src(new char[bytes]), dst(new char[bytes]);
  std::memset(src.get(), 1, bytes);
  std::memset(dst.get(), 2, bytes);
  const int total = iters + 2;
  std::vector<double> times;
  std::vector<Clock::time_point> begin(threads), end(threads);
  std::barrier start(threads);
  std::barrier stop(threads, [&]() noexcept {
    auto b = begin[0], e = end[0];
    for (int t = 1; t < threads; ++t) b = std::min(b, begin[t]), e = std::max(e, end[t]);
    times.push_back(std::chrono::duration<double>(e - b).count());
  });
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t)
    pool.emplace_back([&, t] {
      const uint64_t lo = bytes * t / threads, hi = bytes * (t + 1) / threads;
      for (int i = 0; i < total; ++i) {
        start.arrive_and_wait();
        begin[t] = Clock::now();
        std::memcpy(dst.get() + lo, src.get() + lo, hi - lo);
        end[t] = Clock::now();
        stop.arrive_and_wait();
      }
    });
  for (auto& th : pool) th.join();
  times.erase(times.begin(), times.begin() + 2);  // warm-up
  return tessera::bench::Median(times);
}

struct Traffic {
  double all = 0;   // bytes read + written, every rank
  double ring = 0;  // of which in the shm rings
};

// The traffic of one allreduce of S bytes on islands `sizes` (see the model above); a = accumulator bytes
// per element byte (1, or 2 for f16/bf16).
Traffic Model(const std::vector<int>& sizes, double S, double a) {
  Traffic t;
  const int k = static_cast<int>(sizes.size());
  for (int m : sizes) {
    Traffic r;
    auto send = [&](double b) { r.all += 2 * b, r.ring += b; };  // read the source, write the ring
    auto recv = [&](double b) { r.all += 2 * b, r.ring += b; };  // read the ring, write the destination
    const double shard = S / m;
    if (m > 1) {  // phase 1: island reduce-scatter into an accumulator
      send((m - 1) * shard);
      for (int c = 1; c < m; ++c) recv(0), r.ring += shard;  // ring reads of the received pieces
      r.all += (m - 1) * shard + shard + a * shard;          // the fused pair: two reads, one write
      r.all += (m - 2) * 2 * a * shard;                      // later folds: read and write acc
      if (k == 1) r.all += (a > 1 ? a * shard + shard : 0);  // finalize into the output
    }
    if (k > 1) {  // phase 2: bridge reduce of this rank's part, results shared
      const double e = m > 1 ? a : 1, part = shard / k;
      send(e * (k - 1) * part);
      r.ring += e * (k - 1) * part;  // the received parts, read from the rings by the folds
      r.all += e * (k - 1) * part + e * part + a * part + (k - 2) * 2 * a * part;
      if (a > 1 && !(k == 2 && m == 1)) r.all += a * part + part;  // finalize (two 16-bit parts: direct)
      send((k - 1) * part);
      recv((k - 1) * part);
    }
    if (m > 1) {  // phase 3: island allgather of the shards
      send((m - 1) * shard);
      recv((m - 1) * shard);
    }
    t.all += m * r.all;
    t.ring += m * r.ring;
  }
  return t;
}

int UsableCpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0 && CPU_COUNT(&set) > 0) return CPU_COUNT(&set);
  return static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}

int Main(int argc, char** argv) {
  CLI::App app{"bound on the host engine's allreduce busbw: memcpy bandwidth × the allreduce's memory traffic"};
  std::string sizes_text = "64M,256M", islands_text = "1,1", dtype = "float32";
  int threads = UsableCpus(), iters = 10;
  uint64_t copy_bytes = 256ull << 20;
  app.add_option("--islands", islands_text, "Host island sizes, as `tessera run --island X=host:N` (1,1; 1,3; 2,2)");
  app.add_option("--sizes", sizes_text, "Allreduce sizes in bytes: list and/or ranges (64M,256M or 1M:256M:x4)");
  app.add_option("--threads", threads, "memcpy threads (default: every CPU this process may use)")
      ->check(CLI::Range(1, 1024));
  app.add_option("--copy-bytes", copy_bytes, "Bytes per measured copy (default 256M: out of cache)");
  app.add_option("--dtype", dtype, "float32 (also int*, float64: accumulator = element) or float16/bfloat16");
  app.add_option("--iters", iters, "Timed copies")->check(CLI::Range(1, 10000));
  CLI11_PARSE(app, argc, argv);
  std::vector<int> islands;
  for (size_t p = 0; p <= islands_text.size();) {
    size_t c = islands_text.find(',', p);
    islands.push_back(std::atoi(islands_text.substr(p, c - p).c_str()));
    if (islands.back() < 1) {
      std::fprintf(stderr, "allreduce_bound: --islands %s: sizes must be at least 1\n", islands_text.c_str());
      return 2;
    }
    if (c == std::string::npos) break;
    p = c + 1;
  }
  std::vector<uint64_t> sizes;
  try {
    sizes = tessera::bench::ParseSizes(sizes_text);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "allreduce_bound: %s\n", e.what());
    return 2;
  }
  const double a = dtype == "float16" || dtype == "bfloat16" ? 2.0 : 1.0;
  int n = 0;
  for (int m : islands) n += m;
  const double copy_s = CopySeconds(copy_bytes, threads, iters);
  const double bw = static_cast<double>(copy_bytes) / copy_s;  // bytes copied per second
  std::printf("# memcpy %llu MiB on %d threads: %.2f GB/s copied (%.2f GB/s of traffic); islands %s (%d ranks), %s\n",
              static_cast<unsigned long long>(copy_bytes >> 20), threads, bw / 1e9, 2 * bw / 1e9, islands_text.c_str(),
              n, dtype.c_str());
  std::printf("# %12s %14s %14s %12s %12s %14s\n", "size", "traffic(MB)", "ring(MB)", "bound(us)", "bound-busbw",
              "all-in-memory");
  for (uint64_t s : sizes) {
    const Traffic t = Model(islands, static_cast<double>(s), a);
    const double bound_s = (t.all - t.ring) / (2 * bw), all_s = t.all / (2 * bw);
    const double bus = static_cast<double>(s) * 2 * (n - 1) / n;
    std::printf("  %12llu %14.1f %14.1f %12.1f %12.2f %14.2f\n", static_cast<unsigned long long>(s), t.all / 1e6,
                t.ring / 1e6, bound_s * 1e6, bus / bound_s / 1e9, bus / all_s / 1e9);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return Main(argc, argv); }
