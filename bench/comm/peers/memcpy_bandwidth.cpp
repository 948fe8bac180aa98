// bench/comm/peers/memcpy_bandwidth.cpp — memcpy bandwidth of this machine at the benchmark's sizes, with 1
// and 2 threads (each thread copies its share), for context next to the collectives: a CPU allreduce of
// B bytes has to move several B through memory, so memcpy bounds what any implementation can reach.
// Bandwidth = bytes copied / time (1e9 B/s); each copy also reads as many bytes as it writes.
// Timing: persistent threads released by a barrier each iteration; the span from the first thread's start
// to the last thread's end; the median over iterations.
#include <CLI/CLI.hpp>
#include <barrier>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "harness.hpp"

namespace {

using Clock = std::chrono::steady_clock;

// Copies `bytes` with `threads` threads, `iters` times after `warmup`; returns the median time in us of
// the span from the first thread's start to the last thread's end in each iteration.
double TimeCopy(char* dst, const char* src, uint64_t bytes, int threads, int iters, int warmup) {
  const int total = iters + warmup;
  std::vector<std::vector<Clock::time_point>> begin(threads, std::vector<Clock::time_point>(total)),
      end(threads, std::vector<Clock::time_point>(total));
  std::barrier start(threads);
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      uint64_t lo = bytes * t / threads, hi = bytes * (t + 1) / threads;
      for (int i = 0; i < total; ++i) {
        start.arrive_and_wait();
        begin[t][i] = Clock::now();
        std::memcpy(dst + lo, src + lo, hi - lo);
        end[t][i] = Clock::now();
      }
    });
  }
  for (auto& th : pool) th.join();
  std::vector<double> times;
  for (int i = warmup; i < total; ++i) {
    auto b = begin[0][i], e = end[0][i];
    for (int t = 1; t < threads; ++t) b = std::min(b, begin[t][i]), e = std::max(e, end[t][i]);
    times.push_back(std::chrono::duration<double, std::micro>(e - b).count());
  }
  return tessera::bench::Median(times);
}

int Main(int argc, char** argv) {
  CLI::App app{"memcpy bandwidth at the benchmark sizes, 1 and 2 threads"};
  std::string sizes_text = "16M,64M,256M", threads_text = "1,2", json_path;
  int iters = 20, warmup = 3;
  app.add_option("--sizes", sizes_text, "Sizes in bytes: list and/or ranges (16M,64M or 1K:256M:x4)");
  app.add_option("--threads", threads_text, "Comma-separated thread counts");
  app.add_option("--iters", iters, "Timed iterations per size")->check(CLI::Range(1, 100000));
  app.add_option("--warmup", warmup, "Untimed iterations per size")->check(CLI::Range(0, 100000));
  app.add_option("--json", json_path, "Write the results to this JSON file");
  CLI11_PARSE(app, argc, argv);
  std::vector<uint64_t> sizes;
  std::vector<int> thread_counts;
  try {
    sizes = tessera::bench::ParseSizes(sizes_text);
    for (size_t p = 0; p <= threads_text.size();) {
      size_t c = threads_text.find(',', p);
      std::string t = threads_text.substr(p, c == std::string::npos ? std::string::npos : c - p);
      char* end = nullptr;
      long v = std::strtol(t.c_str(), &end, 10);
      if (t.empty() || *end || v < 1 || v > 256)
        throw std::invalid_argument("--threads: '" + t + "' is not a thread count in [1, 256]");
      thread_counts.push_back(static_cast<int>(v));
      if (c == std::string::npos) break;
      p = c + 1;
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "memcpy_bandwidth: %s\n", e.what());
    return 2;
  }
  uint64_t max_bytes = 0;
  for (auto s : sizes) max_bytes = std::max(max_bytes, s);
  std::vector<char> src(max_bytes), dst(max_bytes);
  for (uint64_t i = 0; i < max_bytes; ++i) src[i] = static_cast<char>(i * 131 + 7);
  std::memset(dst.data(), 0, max_bytes);  // fault the pages in

  nlohmann::json results = nlohmann::json::array();
  for (int threads : thread_counts) {
    tessera::bench::PrintHeader(
        ("memcpy, " + std::to_string(threads) + " thread(s); algbw = busbw = copy bandwidth").c_str());
    nlohmann::json rows = nlohmann::json::array();
    for (uint64_t bytes : sizes) {
      std::memset(dst.data(), 0, bytes);
      double us = TimeCopy(dst.data(), src.data(), bytes, threads, iters, warmup);
      int64_t wrong = std::memcmp(dst.data(), src.data(), bytes) != 0;
      tessera::bench::Row r;
      r.bytes = bytes;
      r.count = bytes;
      r.time_us = us;
      r.algbw = r.busbw = us > 0 ? static_cast<double>(bytes) / (us * 1e3) : 0;
      r.wrong = wrong;
      tessera::bench::PrintRow(r, "uint8", "none");
      rows.push_back(tessera::bench::RowJson(r));
    }
    results.push_back({{"threads", threads}, {"rows", rows}});
  }
  if (!json_path.empty()) {
    nlohmann::json j;
    j["peer"] = "memcpy";
    j["machine"] = tessera::bench::Machine();
    j["iters"] = iters;
    j["warmup"] = warmup;
    j["results"] = results;
    tessera::bench::WriteJson(json_path, j);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return Main(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "memcpy_bandwidth: %s\n", e.what());
    return 1;
  }
}
