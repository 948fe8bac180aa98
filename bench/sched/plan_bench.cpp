// bench/sched/plan_bench: time per placement of tessera::sched::Plan on a synthetic fleet — by default
// 10,000 nodes of 8 cards (80,000 cards) of 4 types in 20 zones, 1,000 running jobs, a 50% floor — and
// report the median and p99 over many jobs (card counts and throughput targets, random accepted types).
// Prices of the two types beyond the reference scenario's are synthetic. Usage: sched_plan_bench [--nodes N] [--jobs J]
// [--json]
#include <fmt/format.h>
#include <time.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>

#include "sched/sched.hpp"

using namespace tessera::sched;

int main(int argc, char** argv) {
  CLI::App app{"Planner benchmark: time per placement"};
  int64_t nodes = 10000, zones = 20, running_jobs = 1000, jobs = 500, cards_per_node = 8;
  uint64_t seed = 1;
  int64_t huge_pct = 5;
  bool json = false;
  app.add_option("--nodes", nodes, "nodes in the fleet")->capture_default_str();
  app.add_option("--zones", zones, "zones")->capture_default_str();
  app.add_option("--cards-per-node", cards_per_node, "cards per node")->capture_default_str();
  app.add_option("--running", running_jobs, "running jobs")->capture_default_str();
  app.add_option("--jobs", jobs, "jobs to plan (timed one by one)")->capture_default_str();
  app.add_option("--seed", seed, "random seed")->capture_default_str();
  app.add_option("--unplaceable-pct", huge_pct, "percent of jobs too large for any zone (timed with their diagnosis)")
      ->capture_default_str();
  app.add_flag("--json", json, "print JSON");
  CLI11_PARSE(app, argc, argv);

  std::mt19937_64 rng(seed);
  auto uni = [&](int64_t a, int64_t b) { return std::uniform_int_distribution<int64_t>(a, b)(rng); };

  Catalog catalog;
  catalog.source = "bench";
  catalog.price_version = "bench";
  auto add = [&](const char* name, const char* vendor, bool dom, Money price, Throughput tp) {
    AcceleratorType t;
    t.name = name;
    t.vendor = vendor;
    t.domestic = dom;
    t.price_per_card_hour = price;
    t.throughput["llm-train"] = tp;
    catalog.types.push_back(t);
  };
  add("ascend-910b", "ascend", true, 2'400'000, 800);
  add("nvidia-h800", "nvidia", false, 6'800'000, 1000);
  add("moore-s4000", "moore", true, 1'900'000, 450);          // synthetic price and throughput
  add("iluvatar-bi-v100", "iluvatar", true, 1'500'000, 300);  // synthetic price and throughput

  Fleet fleet;
  fleet.source = "bench";
  for (int64_t i = 0; i < nodes; ++i) {
    Node n;
    n.id = fmt::format("n{:05d}", i);
    n.zone = fmt::format("z{:02d}", i % zones);
    n.type = catalog.types[uni(0, 99) < 40 ? 1 : uni(0, 99) < 60 ? 0 : uni(2, 3)].name;
    n.cards = cards_per_node;
    fleet.index[n.id] = fleet.nodes.size();
    fleet.nodes.push_back(n);
  }
  if (auto st = fleet.Reindex(); !st.ok()) {
    std::fprintf(stderr, "%s\n", st.ToString().c_str());
    return 1;
  }
  // Running jobs: whole nodes or parts of nodes, about 40% of the fleet busy.
  std::vector<int64_t> used(fleet.nodes.size(), 0);
  std::vector<RunningJob> running;
  for (int64_t j = 0; j < running_jobs; ++j) {
    RunningJob r;
    r.name = fmt::format("run{}", j);
    r.tenant = "bench";
    int64_t want = uni(1, 8) * 4;
    int64_t start = uni(0, nodes - 1);
    for (int64_t k = 0; k < nodes && want > 0; ++k) {
      size_t i = static_cast<size_t>((start + k * zones) % nodes);  // stay in one zone
      int64_t take = std::min(want, fleet.nodes[i].cards - used[i]);
      if (take <= 0) continue;
      used[i] += take;
      want -= take;
      r.allocations.push_back({fleet.nodes[i].id, take});
    }
    running.push_back(std::move(r));
  }
  Policy policy;
  policy.source = "bench";
  policy.calendar.push_back({0, 500'000});

  static const std::vector<std::vector<std::string>> kCompat = {{"ascend", "nvidia"},
                                                                {"ascend", "moore", "nvidia"},
                                                                {"ascend", "moore", "iluvatar", "nvidia"},
                                                                {"nvidia"},
                                                                {"ascend"}};
  std::vector<double> ms, ms_placed, ms_unplaced, cpu_ms;
  auto thread_cpu_ms = [] {
    timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
  };
  int placed = 0, rounds = 0;
  for (int64_t j = 0; j < jobs; ++j) {
    Job job;
    job.source = "bench";
    job.name = fmt::format("job{}", j);
    job.tenant = "bench";
    job.workload_class = "llm-train";
    job.compatible = kCompat[uni(0, static_cast<int64_t>(kCompat.size()) - 1)];
    if (uni(0, 99) < huge_pct) {
      job.cards = uni(400, 800) * 8;  // more than any zone has free: diagnosed, not placed
    } else if (uni(0, 3) == 0) {
      job.throughput_target = uni(8, 512) * 1000;
    } else {
      job.cards = uni(1, 64) * 8;
    }
    PlanRequest req;
    req.catalog = &catalog;
    req.fleet = &fleet;
    req.policy = &policy;
    req.job = &job;
    req.running = &running;
    req.day = 1;
    double c0 = thread_cpu_ms();
    auto t0 = std::chrono::steady_clock::now();
    auto r = Plan(req);
    auto t1 = std::chrono::steady_clock::now();
    cpu_ms.push_back(thread_cpu_ms() - c0);
    if (!r.ok()) {
      std::fprintf(stderr, "plan failed: %s\n", r.status().ToString().c_str());
      return 1;
    }
    if (r->placed()) {
      ++placed;
      rounds += r->placement->solver_rounds;
    }
    double d = std::chrono::duration<double, std::milli>(t1 - t0).count();
    ms.push_back(d);
    (r->placed() ? ms_placed : ms_unplaced).push_back(d);
  }
  struct Stats {
    double median = 0, p99 = 0, max = 0;
  };
  auto stats = [](std::vector<double> v) {
    Stats st;
    if (v.empty()) return st;
    std::sort(v.begin(), v.end());
    auto pct = [&](double p) { return v[std::min(v.size() - 1, static_cast<size_t>(p * (v.size() - 1) + 0.5))]; };
    st.median = pct(0.5);
    st.p99 = pct(0.99);
    st.max = v.back();
    return st;
  };
  Stats all = stats(ms), pl = stats(ms_placed), un = stats(ms_unplaced), cpu = stats(cpu_ms);
  int64_t cards = nodes * cards_per_node;
  double mean_rounds = placed ? static_cast<double>(rounds) / placed : 0.0;
  if (json) {
    std::printf(
        "{\"nodes\": %lld, \"cards\": %lld, \"types\": 4, \"zones\": %lld, \"running_jobs\": %lld, "
        "\"jobs\": %lld, \"placed\": %d, \"mean_solver_rounds\": %.2f, \"median_ms\": %.3f, \"p99_ms\": %.3f, "
        "\"max_ms\": %.3f, \"placed_median_ms\": %.3f, \"placed_p99_ms\": %.3f, \"unplaced_median_ms\": %.3f, "
        "\"unplaced_p99_ms\": %.3f, \"cpu_median_ms\": %.3f, \"cpu_p99_ms\": %.3f}\n",
        static_cast<long long>(nodes), static_cast<long long>(cards), static_cast<long long>(zones),
        static_cast<long long>(running_jobs), static_cast<long long>(jobs), placed, mean_rounds, all.median, all.p99,
        all.max, pl.median, pl.p99, un.median, un.p99, cpu.median, cpu.p99);
  } else {
    std::printf("fleet: %lld nodes, %lld cards, 4 types, %lld zones; %lld running jobs; floor 50%%\n",
                static_cast<long long>(nodes), static_cast<long long>(cards), static_cast<long long>(zones),
                static_cast<long long>(running_jobs));
    std::printf("jobs planned: %lld (%d placed, %zu not placed), mean solver rounds per placement %.2f\n",
                static_cast<long long>(jobs), placed, ms_unplaced.size(), mean_rounds);
    std::printf("time per plan, all:        median %7.3f ms, p99 %7.3f ms, max %7.3f ms\n", all.median, all.p99,
                all.max);
    std::printf("time per plan, placed:     median %7.3f ms, p99 %7.3f ms, max %7.3f ms\n", pl.median, pl.p99, pl.max);
    std::printf("time per plan, not placed: median %7.3f ms, p99 %7.3f ms, max %7.3f ms (with diagnosis)\n", un.median,
                un.p99, un.max);
    std::printf("CPU time per plan, all:    median %7.3f ms, p99 %7.3f ms, max %7.3f ms (this thread only)\n",
                cpu.median, cpu.p99, cpu.max);
  }
  return 0;
}
