// bench/comm/peers/gloo_allreduce.cpp — the Gloo peer of `tessera bench allreduce`: f32 sum allreduce with
// every algorithm that Debian's Gloo (2022 snapshot, TCP transport) offers — the old-style classes
// AllreduceRing, AllreduceRingChunked, AllreduceHalvingDoubling, AllreduceBcube and the new-style
// gloo::allreduce() with its RING and BCUBE algorithms — printed per algorithm and as the best per size.
//
// Launch it like any Tessera program: `tessera run --island host=host:4 -- gloo_allreduce ...` (reads
// TESSERA_RANK and TESSERA_WORLD_SIZE); ranks meet through a gloo FileStore in --store-dir (default
// /tmp/tessera-gloo-$TESSERA_TOKEN). Timing as in tessera bench: every iteration is bracketed by a
// barrier, the per-iteration time is the max over ranks, the row reports the median over iterations.
#include <gloo/allreduce.h>
#include <gloo/allreduce_bcube.h>
#include <gloo/allreduce_halving_doubling.h>
#include <gloo/allreduce_ring.h>
#include <gloo/allreduce_ring_chunked.h>
#include <gloo/barrier_all_to_all.h>
#include <gloo/config.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/file_store.h>
#include <gloo/rendezvous/prefix_store.h>
#include <gloo/transport/tcp/device.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "harness.hpp"

namespace {

using tessera::bench::Row;
using Clock = std::chrono::steady_clock;

const std::vector<std::string> kAllAlgos = {"ring",  "ring_chunked", "halving_doubling",
                                            "bcube", "new_ring",     "new_bcube"};

// One allreduce of `count` floats, ready to run repeatedly; `out` is the output (and, for the old-style
// in-place classes, also the input, restored by refill()).
struct Op {
  std::function<void()> run;
  std::function<void()> refill;  // restores the input before the checked call
  std::vector<float>* out = nullptr;
};

struct Job {
  std::shared_ptr<gloo::Context> ctx;
  int rank = 0;
  int world = 1;
  uint32_t tag = 1;
};

// Elementwise max across ranks of a vector of doubles (per-iteration times) and sum of a counter.
void AllreduceDoubles(Job& job, std::vector<double>& v, const gloo::ReductionFunction<double>* fn) {
  gloo::AllreduceRing<double> ar(job.ctx, {v.data()}, static_cast<int>(v.size()), fn);
  ar.run();
}

Op MakeOp(Job& job, const std::string& algo, std::vector<float>& in, std::vector<float>& out) {
  const int count = static_cast<int>(out.size());
  std::vector<float*> ptrs = {out.data()};
  Op op;
  op.out = &out;
  if (algo == "ring" || algo == "ring_chunked" || algo == "halving_doubling" || algo == "bcube") {
    std::shared_ptr<gloo::Algorithm> a;
    if (algo == "ring") a = std::make_shared<gloo::AllreduceRing<float>>(job.ctx, ptrs, count);
    if (algo == "ring_chunked") a = std::make_shared<gloo::AllreduceRingChunked<float>>(job.ctx, ptrs, count);
    if (algo == "halving_doubling") a = std::make_shared<gloo::AllreduceHalvingDoubling<float>>(job.ctx, ptrs, count);
    if (algo == "bcube") a = std::make_shared<gloo::AllreduceBcube<float>>(job.ctx, ptrs, count);
    // In place, as Gloo's own benchmark and PyTorch's ProcessGroupGloo use these classes: the timed call
    // is the allreduce alone (no copy of the input), which is Gloo's best case.
    op.run = [a] { a->run(); };
    op.refill = [&in, &out] { std::copy(in.begin(), in.end(), out.begin()); };
    return op;
  }
  // New-style API: unbound buffers, out of place, one options object reused by every call.
  auto opts = std::make_shared<gloo::AllreduceOptions>(job.ctx);
  opts->setAlgorithm(algo == "new_ring" ? gloo::AllreduceOptions::Algorithm::RING
                                        : gloo::AllreduceOptions::Algorithm::BCUBE);
  opts->setInput(in.data(), in.size());
  opts->setOutput(out.data(), out.size());
  void (*fn)(void*, const void*, const void*, size_t) = &gloo::sum<float>;
  opts->setReduceFunction(fn);
  opts->setTag(job.tag++);
  op.run = [opts] { gloo::allreduce(*opts); };
  op.refill = [] {};
  return op;
}

struct AlgoResult {
  std::string algo;
  std::vector<std::optional<Row>> rows;  // one per size; empty when skipped
};

int Main(int argc, char** argv) {
  CLI::App app{"Gloo allreduce peer harness (f32 sum, every Gloo algorithm); run under `tessera run`"};
  std::string sizes_text = "16M,64M,256M", algos_text = "all", json_path, store_dir, iface = "lo";
  int iters = 20, warmup = 3;
  double timeout_s = 300, budget_s = 60;
  app.add_option("--sizes", sizes_text, "Sizes in bytes: list and/or ranges (16M,64M or 1K:256M:x4)");
  app.add_option("--iters", iters, "Timed iterations per size")->check(CLI::Range(1, 100000));
  app.add_option("--warmup", warmup, "Untimed iterations per size")->check(CLI::Range(0, 100000));
  app.add_option("--algos", algos_text,
                 "Comma-separated subset of ring,ring_chunked,halving_doubling,bcube,"
                 "new_ring,new_bcube, or 'all'");
  app.add_option("--json", json_path, "Write the results to this JSON file (rank 0)");
  app.add_option("--store-dir", store_dir, "Directory for gloo's FileStore (default /tmp/tessera-gloo-$TESSERA_TOKEN)");
  app.add_option("--iface", iface, "Network interface for gloo's TCP transport");
  app.add_option("--budget", budget_s, "Seconds per algorithm and size; slow ones run fewer iterations or are skipped")
      ->check(CLI::PositiveNumber);
  app.add_option("--timeout", timeout_s, "Gloo timeout per operation, seconds")->check(CLI::PositiveNumber);
  CLI11_PARSE(app, argc, argv);

  std::vector<uint64_t> sizes;
  std::vector<std::string> algos;
  Job job;
  try {
    sizes = tessera::bench::ParseSizes(sizes_text);
    job.rank = tessera::bench::EnvInt("TESSERA_RANK", nullptr, 0, 1 << 20);
    job.world = tessera::bench::EnvInt("TESSERA_WORLD_SIZE", nullptr, 1, 1 << 20);
    if (job.rank >= job.world)
      throw std::invalid_argument("TESSERA_RANK=" + std::to_string(job.rank) +
                                  " is not below TESSERA_WORLD_SIZE=" + std::to_string(job.world));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gloo_allreduce: %s\n", e.what());
    return 2;
  }
  if (algos_text == "all") {
    algos = kAllAlgos;
  } else {
    for (size_t p = 0; p <= algos_text.size();) {
      size_t c = algos_text.find(',', p);
      std::string a = algos_text.substr(p, c == std::string::npos ? std::string::npos : c - p);
      if (std::find(kAllAlgos.begin(), kAllAlgos.end(), a) == kAllAlgos.end()) {
        std::fprintf(stderr, "gloo_allreduce: --algos: unknown algorithm '%s'\n", a.c_str());
        return 2;
      }
      algos.push_back(a);
      if (c == std::string::npos) break;
      p = c + 1;
    }
  }
  if (store_dir.empty()) {
    const char* token = std::getenv("TESSERA_TOKEN");
    if (!token || !*token) {
      std::fprintf(stderr, "gloo_allreduce: pass --store-dir DIR (TESSERA_TOKEN is not set, so no default)\n");
      return 2;
    }
    store_dir = std::string("/tmp/tessera-gloo-") + token;
  }
  std::filesystem::create_directories(store_dir);

  gloo::transport::tcp::attr attr;
  attr.iface = iface;
  auto dev = gloo::transport::tcp::CreateDevice(attr);
  gloo::rendezvous::FileStore file_store(store_dir);
  gloo::rendezvous::PrefixStore store("gloo-bench", file_store);
  auto ctx = std::make_shared<gloo::rendezvous::Context>(job.rank, job.world);
  ctx->setTimeout(std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000)));
  ctx->connectFullMesh(store, dev);
  job.ctx = ctx;
  gloo::BarrierAllToAll barrier(ctx);

  if (job.rank == 0) {
    std::printf("# gloo %d.%d.%d (Debian libgloo), transport tcp (iface %s), ranks %d, f32 sum allreduce\n",
                GLOO_VERSION_MAJOR, GLOO_VERSION_MINOR, GLOO_VERSION_PATCH, iface.c_str(), job.world);
    std::printf("# timing: barrier before each iteration, max over ranks, median of %d iterations (%d warmup)\n", iters,
                warmup);
  }

  std::vector<AlgoResult> results;
  for (const auto& algo : algos) {
    AlgoResult res{algo, {}};
    if (job.rank == 0) tessera::bench::PrintHeader(("gloo " + algo).c_str());
    bool too_slow = false;
    for (uint64_t bytes : sizes) {
      uint64_t count = bytes / sizeof(float);
      res.rows.emplace_back();
      if (count == 0 || count > static_cast<uint64_t>(INT32_MAX)) {
        if (job.rank == 0)
          std::printf("# skipping size %llu: gloo needs 1..2^31-1 floats\n", static_cast<unsigned long long>(bytes));
        continue;
      }
      if (too_slow) continue;
      std::vector<float> in(count), out(count);
      for (uint64_t i = 0; i < count; ++i) in[i] = tessera::bench::CheckValue(job.rank, i);
      Op op = MakeOp(job, algo, in, out);
      op.refill();
      // The first call, timed (max over ranks, so that every rank takes the same decision), sizes the run
      // to the --budget: fewer iterations (at least 3) when slow; skipped with larger sizes when too slow.
      barrier.run();
      auto f0 = Clock::now();
      op.run();
      std::vector<double> first(1, std::chrono::duration<double>(Clock::now() - f0).count());
      AllreduceDoubles(job, first, gloo::ReductionFunction<double>::max);
      if (first[0] > budget_s / 4) {
        too_slow = true;
        if (job.rank == 0)
          std::printf(
              "# %s: one call at %llu bytes took %.1f s (over a quarter of --budget %.0f s): skipped at this "
              "size and above\n",
              algo.c_str(), static_cast<unsigned long long>(bytes), first[0], budget_s);
        continue;
      }
      int n_iters = iters;
      if (first[0] * (warmup + iters + 1) > budget_s) {
        n_iters = std::max(3, static_cast<int>(budget_s / first[0]) - warmup - 1);
        n_iters = std::min(n_iters, iters);
        if (job.rank == 0 && n_iters < iters)
          std::printf("# %s: %d iterations instead of %d at %llu bytes (--budget %.0f s)\n", algo.c_str(), n_iters,
                      iters, static_cast<unsigned long long>(bytes), budget_s);
      }
      for (int i = 1; i < warmup; ++i) op.run();
      std::vector<double> times(n_iters);
      for (int i = 0; i < n_iters; ++i) {
        barrier.run();
        auto t0 = Clock::now();
        op.run();
        times[i] = std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
      }
      // Check one more call on fresh input (old-style classes work in place).
      op.refill();
      op.run();
      std::vector<double> wrong(1, 0);
      for (uint64_t i = 0; i < count; ++i) wrong[0] += out[i] != tessera::bench::CheckSum(job.world, i);
      AllreduceDoubles(job, times, gloo::ReductionFunction<double>::max);
      AllreduceDoubles(job, wrong, gloo::ReductionFunction<double>::sum);
      Row row = tessera::bench::MakeRow("allreduce", job.world, count * sizeof(float), count,
                                        tessera::bench::Median(times), static_cast<int64_t>(wrong[0]));
      if (job.rank == 0) tessera::bench::PrintRow(row, "float", "sum");
      res.rows.back() = row;
    }
    results.push_back(res);
  }

  // Best algorithm per size (among those that ran at that size).
  nlohmann::json best_rows = nlohmann::json::array();
  if (job.rank == 0 && !results.empty()) {
    tessera::bench::PrintHeader("gloo best per size");
    for (size_t s = 0; s < sizes.size(); ++s) {
      int b = -1;
      for (size_t a = 0; a < results.size(); ++a)
        if (results[a].rows[s] && (b < 0 || results[a].rows[s]->time_us < results[b].rows[s]->time_us))
          b = static_cast<int>(a);
      if (b < 0) continue;
      Row row = *results[b].rows[s];
      tessera::bench::PrintRow(row, "float", "sum");
      std::printf("   ^ %s\n", results[b].algo.c_str());
      auto j = tessera::bench::RowJson(row);
      j["algorithm"] = results[b].algo;
      best_rows.push_back(j);
    }
  }
  if (job.rank == 0 && !json_path.empty()) {
    nlohmann::json j;
    j["peer"] = "gloo";
    j["collective"] = "allreduce";
    j["dtype"] = "float32";
    j["op"] = "sum";
    j["world_size"] = job.world;
    j["transport"] = "tcp (" + iface + ")";
    j["gloo_version"] = std::to_string(GLOO_VERSION_MAJOR) + "." + std::to_string(GLOO_VERSION_MINOR) + "." +
                        std::to_string(GLOO_VERSION_PATCH);
    j["machine"] = tessera::bench::Machine();
    j["iters"] = iters;
    j["warmup"] = warmup;
    j["algorithms"] = nlohmann::json::array();
    for (const auto& r : results) {
      nlohmann::json rows = nlohmann::json::array();
      for (size_t s = 0; s < r.rows.size(); ++s)
        rows.push_back(r.rows[s]
                           ? tessera::bench::RowJson(*r.rows[s])
                           : nlohmann::json{{"bytes", sizes[s] / sizeof(float) * sizeof(float)}, {"skipped", true}});
      j["algorithms"].push_back({{"name", r.algo}, {"rows", rows}});
    }
    j["rows"] = best_rows;  // the best per size: what the comparison uses
    tessera::bench::WriteJson(json_path, j);
  }
  barrier.run();
  if (job.rank == 0) std::filesystem::remove_all(store_dir);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return Main(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gloo_allreduce: %s\n", e.what());
    return 1;
  }
}
