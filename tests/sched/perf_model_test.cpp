// Tests of the performance model (sched/perf_model): the split against tessera.split's rule and a brute-force
// optimum, each term of the step, bad input, and the validation rows of docs/model.md reproduced from the
// committed result files (tests/data/, README.md there): the link figures calibrated from a device check, then the
// LM runs' tokens/s predicted and compared with what was measured. One collective's load and paths:
// perf_collective_test.cpp.
// Also the host-rank allreduces of the 2-core VM (scripts/bench-comm.sh) and of the namespaced TCP hosts
// (bench/hosts/bridge-vs-iperf3.sh), each calibrated from one row of its file and checked on the others.
#include "sched/perf_model.hpp"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <sstream>
#include <tuple>

namespace {

using namespace tessera::sched::perf;
using nlohmann::json;

const char* SourceDir() {
  const char* env = std::getenv("TESSERA_SOURCE_DIR");
  return env ? env : TESSERA_TEST_SOURCE_DIR;
}

std::string Results(const std::string& f) { return std::string(SourceDir()) + "/tests/data/" + f; }

json ReadJson(const std::string& path) {
  std::ifstream in(path);
  EXPECT_TRUE(in.good()) << path;
  return json::parse(in);
}

// The summary line of a train_lm.py run: its last JSON line.
json LastLine(const std::string& path) {
  std::ifstream in(path);
  EXPECT_TRUE(in.good()) << path;
  std::string line, last;
  while (std::getline(in, line))
    if (!line.empty()) last = line;
  return json::parse(last);
}

std::vector<double> Weights(const json& w) {  // "0.5733,1.0000"
  std::vector<double> out;
  std::stringstream ss(w.at("weights").get<std::string>());
  std::string x;
  while (std::getline(ss, x, ',')) out.push_back(std::stod(x));
  return out;
}

// ---- the split ---------------------------------------------------------------------------------------

TEST(PerfModelSplit, MatchesTheSamplersFixedCases) {
  // tests/torch/split_test.py's cases for tessera.split.apportion.
  EXPECT_EQ(*Apportion(64, {0.5721, 1.0}), (std::vector<int64_t>{23, 41}));
  EXPECT_EQ(*Apportion(10, {1, 1, 1}), (std::vector<int64_t>{4, 3, 3}));
  EXPECT_EQ(*Apportion(3, {1, 1, 1}), (std::vector<int64_t>{1, 1, 1}));
}

TEST(PerfModelSplit, IsTheShortestIntegerStepOnSmallCases) {
  // Every split of `total` into parts >= 1 over 2-3 ranks: none has a shorter step max n_r / w_r.
  const std::vector<std::vector<double>> speeds = {{1, 1}, {0.3, 1}, {0.5721, 1}, {1, 2, 3}, {0.35, 0.65, 1}};
  for (const auto& w : speeds)
    for (int64_t total = static_cast<int64_t>(w.size()); total <= 24; ++total) {
      auto parts = Apportion(total, w);
      ASSERT_TRUE(parts.ok()) << parts.status().ToString();
      int64_t sum = 0;
      double step = 0;
      for (size_t r = 0; r < w.size(); ++r) {
        EXPECT_GE((*parts)[r], 1);
        sum += (*parts)[r];
        step = std::max(step, static_cast<double>((*parts)[r]) / w[r]);
      }
      EXPECT_EQ(sum, total);
      double best = 1e300;
      std::function<void(size_t, int64_t, double)> all = [&](size_t r, int64_t left, double worst) {
        if (r + 1 == w.size()) {
          if (left >= 1) best = std::min(best, std::max(worst, static_cast<double>(left) / w[r]));
          return;
        }
        for (int64_t n = 1; n <= left - static_cast<int64_t>(w.size() - r - 1); ++n)
          all(r + 1, left - n, std::max(worst, static_cast<double>(n) / w[r]));
      };
      all(0, total, 0);
      EXPECT_LE(step, best * (1 + 1e-12)) << "total " << total;
    }
}

TEST(PerfModelSplit, ReproducesTheSplitOfEveryCommittedLmRun) {
  // The fourth run: each hybrid run split by the independent run before it (lm-weights-concurrent-N.json).
  for (int rep = 1; rep <= 3; ++rep) {
    const json w = ReadJson(Results(fmt::format("lm-20261201T1940Z/lm-weights-concurrent-{}.json", rep)));
    const json run = LastLine(Results(fmt::format("lm-20261201T1940Z/lm-hybrid-{}.jsonl", rep)));
    auto parts = Apportion(run.at("global_batch").get<int64_t>(), Weights(w));
    ASSERT_TRUE(parts.ok());
    EXPECT_EQ(json(*parts), run.at("shares")) << "repetition " << rep;
  }
  // The third run: split by the calibration's weights.
  const json w = ReadJson(Results("lm-20261201T1812Z/lm-weights.json"));
  const json run = LastLine(Results("lm-20261201T1812Z/lm-hybrid-1.jsonl"));
  EXPECT_EQ(json(*Apportion(run.at("global_batch").get<int64_t>(), Weights(w))), run.at("shares"));
}

TEST(PerfModelSplit, BadInputNamesTheValue) {
  EXPECT_NE(Apportion(1, {1, 1}).status().message().find("a global batch of 1 cannot give each of 2"),
            std::string::npos);
  EXPECT_NE(Apportion(4, {1, -2}).status().message().find("got -2 for rank 1"), std::string::npos);
  EXPECT_NE(Apportion(4, {}).status().message().find("empty speed list"), std::string::npos);
}

// ---- the step's terms --------------------------------------------------------------------------------

Scenario TwoCards(double slow, double fast) {
  Scenario s;
  for (double r : {slow, fast}) {
    IslandSpec is;
    is.type = r == slow ? "slow" : "fast";
    is.cards = 1;
    is.tokens_per_s = r;
    is.hbm_gbs = 1000;
    s.islands.push_back(is);
  }
  s.one_host = true;
  s.model.params = 1e8;
  s.model.grad_bytes = 4;
  s.model.seq = 100;
  s.model.batch = 8;
  s.model.accum = 4;
  s.links.device_gbs = 10;
  s.links.shm_gbs = 1;
  s.links.pcie_gbs = 20;
  return s;
}

TEST(PerfModelStep, ComputeIsTheSlowestRanksShare) {
  Scenario s = TwoCards(1000, 3000);
  auto p = Predict(s);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_EQ(p->split, (std::vector<int64_t>{2, 6}));
  EXPECT_DOUBLE_EQ(p->compute_s, std::max(2.0 * 4 * 100 / 1000, 6.0 * 4 * 100 / 3000));
  // A stale weight moves the split and lengthens the step.
  s.islands[0].split_weight = 3000;
  auto even = Predict(s);
  EXPECT_EQ(even->split, (std::vector<int64_t>{4, 4}));
  EXPECT_DOUBLE_EQ(even->compute_s, 4.0 * 4 * 100 / 1000);
}

TEST(PerfModelStep, CommunicationIsTheSchedulesBytesOverTheLink) {
  Scenario s = TwoCards(1000, 3000);
  auto p = Predict(s);
  ASSERT_EQ(p->collectives.size(), 1u);
  // Two one-card islands on the device bridge: each rank sends half as a part and half as a result.
  EXPECT_DOUBLE_EQ(p->comm_s, 1e8 * 4 / 10e9);
  EXPECT_EQ(p->collectives[0].phases[1].bound, "device (rank 0)");
  // Without the device bridge the ranks stage over PCIe and move the buffer through shm: the longer binds.
  s.device_bridge = false;
  auto staged = Predict(s);
  EXPECT_DOUBLE_EQ(staged->collectives[0].staging_s, 1e8 * 4 / 20e9);
  EXPECT_DOUBLE_EQ(staged->comm_s, 1e8 * 4 / 1e9);
  // Host ranks beyond the cores share them.
  s.links.cores_per_host = 1;
  for (auto& is : s.islands) is.device = false;
  EXPECT_DOUBLE_EQ(Predict(s)->comm_s, 2 * 1e8 * 4 / 1e9);
}

TEST(PerfModelStep, HostRanksBeyondTheCoresShareThem) {
  // One island of n host ranks on one host: each phase of the allreduce has every rank send (n-1)/n of the
  // buffer on shm. With cores_per_host c < n the ranks share the cores: each runs at c/n of shm_gbs; with
  // n <= c, or c = 0 (the term off), at shm_gbs.
  for (int64_t n : {2, 3, 4, 8})
    for (int64_t cores : {0, 1, 2, 4, 8}) {
      Scenario s;
      IslandSpec is;
      is.type = "cpu";
      is.cards = n;
      is.device = false;
      s.islands = {is};
      s.one_host = true;
      s.links.shm_gbs = 2;
      s.links.cores_per_host = cores;
      const size_t count = 1000 * static_cast<size_t>(n);
      auto c = CallCost(s, CollKind::kAllReduce, count, 4);
      ASSERT_TRUE(c.ok()) << c.status().ToString();
      const double share = cores > 0 && n > cores ? static_cast<double>(cores) / static_cast<double>(n) : 1.0;
      const double want = 2 * (n - 1.0) / n * count * 4 / (2e9 * share);
      EXPECT_NEAR(c->seconds, want, 1e-12 * want) << n << " ranks on " << cores << " cores";
    }
  // Counted per host: an island of 8 host ranks, 4 per host, on 4 cores each shares nothing; on 2 cores each
  // host's 4 ranks run at half (the network left fast, so shm binds: 3 of 8 shards to the host's peers).
  Scenario two;
  IslandSpec is;
  is.type = "cpu";
  is.cards = 8;
  is.cards_per_node = 4;
  is.device = false;
  two.islands = {is};
  two.links.shm_gbs = 1;
  two.links.net_gbs = 1e6;
  const size_t count = 8000;
  for (int64_t cores : {4, 2}) {
    two.links.cores_per_host = cores;
    auto c = CallCost(two, CollKind::kAllReduce, count, 4);
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    const double want = 2 * (3.0 / 8 * count * 4) / (1e9 * (cores == 4 ? 1.0 : 0.5));
    EXPECT_NEAR(c->seconds, want, 1e-9 * want) << cores << " cores per host";
    EXPECT_EQ(c->phases[0].bound.rfind("shm", 0), 0u) << c->phases[0].bound;
  }
  // A rank on the device bridge (a one-GPU island) is not a host rank: beside 2 host ranks on 2 cores nothing
  // is shared; on 1 core the two host ranks are.
  Scenario mixed;
  IslandSpec gpu;
  gpu.type = "gpu";
  gpu.cards = 1;
  IslandSpec host = gpu;
  host.type = "host";
  host.cards = 2;
  host.device = false;
  mixed.islands = {gpu, host};
  mixed.one_host = true;
  mixed.links.shm_gbs = 1;
  mixed.links.device_gbs = 10;
  auto at = [&](int64_t cores) {
    mixed.links.cores_per_host = cores;
    return CallCost(mixed, CollKind::kAllReduce, 6000, 4)->seconds;
  };
  EXPECT_DOUBLE_EQ(at(2), at(0));
  EXPECT_GT(at(1), at(0) * 1.5);
}

TEST(PerfModelStep, OverlapHidesCommunicationUpToItsWindow) {
  Scenario s = TwoCards(1000, 3000);
  s.model.overlap = 1;
  auto p = Predict(s);
  const double window = s.model.backward_share * p->compute_s / s.model.accum;  // the last backward
  EXPECT_DOUBLE_EQ(p->hidden_s, std::min(p->comm_s, window));
  EXPECT_DOUBLE_EQ(p->step_s, p->compute_s + p->comm_s - p->hidden_s + p->optimizer_s);
  s.model.overlap = 0;
  EXPECT_DOUBLE_EQ(Predict(s)->exposed_comm_s, p->comm_s);
}

TEST(PerfModelStep, OptimizerOnTheCardAndOnTheHost) {
  Scenario s = TwoCards(1000, 3000);
  EXPECT_DOUBLE_EQ(Predict(s)->optimizer_s, 1e8 * 32 / 1000e9);
  s.model.zero = 1;  // each rank updates its half
  EXPECT_DOUBLE_EQ(Predict(s)->optimizer_s, 0.5e8 * 32 / 1000e9);
  s.model.offload = true;
  s.model.host_adam_gbs = 100;
  // One host: both halves on its memory, plus each rank's gradients down and parameters up over PCIe.
  EXPECT_DOUBLE_EQ(Predict(s)->optimizer_s, 1e8 * 32 / 100e9 + 0.5e8 * (4 + 2) / 20e9);
}

TEST(PerfModelStep, TokensCostShareAndTheSumOfTheParts) {
  Scenario s = TwoCards(1000, 3000);
  s.islands[0].price_per_card_hour = 2'400'000;  // 2.4
  s.islands[0].domestic = true;
  s.islands[1].price_per_card_hour = 6'800'000;
  auto p = Predict(s);
  EXPECT_DOUBLE_EQ(p->tokens_per_s, 8.0 * 4 * 100 / p->step_s);
  EXPECT_EQ(p->cost_per_hour, 9'200'000);
  EXPECT_DOUBLE_EQ(p->cost_per_million_tokens, 9.2 / (p->tokens_per_s * 3600) * 1e6);
  EXPECT_DOUBLE_EQ(p->domestic_card_share, 0.5);
  EXPECT_DOUBLE_EQ(p->domestic_compute_share, 0.25);
  // Each card alone has no one to synchronise with: the parts are their compute (and optimizer) alone.
  const double part0 = 2.0 * 4 * 100 / (2.0 * 4 * 100 / 1000 + 1e8 * 32 / 1000e9);
  const double part1 = 6.0 * 4 * 100 / (6.0 * 4 * 100 / 3000 + 1e8 * 32 / 1000e9);
  EXPECT_DOUBLE_EQ(p->sum_of_parts_tokens_per_s, part0 + part1);
  EXPECT_DOUBLE_EQ(p->hybrid_over_parts, p->tokens_per_s / (part0 + part1));
}

TEST(PerfModelStep, BindingTermIsTheLongest) {
  Scenario s = TwoCards(1000, 3000);
  EXPECT_EQ(Predict(s)->binding, "compute");
  s.links.device_gbs = 0.01;  // a slow bridge
  auto p = Predict(s);
  EXPECT_EQ(p->binding, "communication");
  EXPECT_NE(p->binding_detail.find("bridge phase, bound by device"), std::string::npos) << p->binding_detail;
  s.links.device_gbs = 10;
  s.islands[0].hbm_gbs = s.islands[1].hbm_gbs = 0.1;
  EXPECT_EQ(Predict(s)->binding, "optimizer");
}

TEST(PerfModelStep, BadInputNamesTheField) {
  auto msg = [](const Scenario& s) { return Predict(s).status().message(); };
  Scenario s = TwoCards(1000, 3000);
  s.islands[1].cards = 0;
  EXPECT_NE(msg(s).find("island 1 (fast): cards 0"), std::string::npos) << msg(s);
  s = TwoCards(1000, 3000);
  s.model.overlap = 1.5;
  EXPECT_NE(msg(s).find("overlap 1.5"), std::string::npos) << msg(s);
  s = TwoCards(1000, 3000);
  s.model.zero = 4;
  EXPECT_NE(msg(s).find("ZeRO stage 4"), std::string::npos) << msg(s);
  s = TwoCards(1000, 3000);
  s.links.device_gbs = 0;
  EXPECT_NE(msg(s).find("bridge phase moves 400000000 bytes on device"), std::string::npos) << msg(s);
  s = TwoCards(1000, 3000);
  s.model.batch = 1;
  EXPECT_NE(msg(s).find("a micro-batch of 1 sequences cannot give each of 2 cards one"), std::string::npos);
  s = TwoCards(1000, 3000);
  s.islands[0].tokens_per_s = 0;
  EXPECT_NE(msg(s).find("needs tokens/s per card or TFLOP/s"), std::string::npos) << msg(s);
}

// ---- validation against the committed runs -----------------------------------------------------------

// The link figures, from a device check (tests/data/gpu-20261201T212053Z.json): the device
// bridge from two one-GPU islands' allreduce, host ranks' shm from two host ranks', PCIe from the pinned
// copy, each at 256 MiB.
struct Calibration {
  double device_gbs = 0, shm_gbs = 0, pcie_gbs = 0;
  json rows;
};

Calibration Calibrate() {
  Calibration c;
  const json d = ReadJson(Results("gpu-20261201T212053Z.json"));
  EXPECT_EQ(d.at("commit").get<std::string>().substr(0, 7), "cfa4078");
  c.rows = d.at("rows");
  for (const auto& r : c.rows) {
    const bool big = r.value("bytes", 0) == 268435456;
    if (r.at("job") == "copy" && r.value("procs", 0) == 1) c.pcie_gbs = r.at("d2h_GBps");
    // Each rank of a 1+1 allreduce sends the whole buffer (half as parts, half as results) in one phase.
    if (big && r.at("job") == "gpu+gpu-one-card") c.device_gbs = r.at("algbw_GBps");
    if (big && r.at("job") == "host1+host1") c.shm_gbs = r.at("algbw_GBps");
  }
  EXPECT_GT(c.device_gbs, 0);
  EXPECT_GT(c.shm_gbs, 0);
  EXPECT_GT(c.pcie_gbs, 0);
  return c;
}

// The LM experiment's hybrid job: the per-card rates of the independent run (both islands at once, which
// is what the sum of the parts measures), split by the weights the run's sampler was given.
Scenario LmScenario(const Calibration& c, const json& indep, const std::vector<double>& weights) {
  Scenario s;
  size_t i = 0;
  for (const char* name : {"ascend", "nvidia"}) {
    IslandSpec is;
    is.type = name;
    is.cards = 1;
    is.tokens_per_s = indep.at("islands").at(name).at("tokens_per_s");
    is.split_weight = weights.at(i++);
    is.hbm_gbs = 4800;  // H200 (NVIDIA's datasheet: 4.8 TB/s), shared by the two MPS clients
    s.islands.push_back(is);
  }
  s.one_host = true;
  s.model.params = indep.at("params");
  s.model.grad_bytes = 4;  // TF32 training: f32 gradients
  s.model.param_bytes = 4;
  s.model.seq = indep.at("seq");
  s.model.batch = indep.at("global_batch");
  s.model.accum = indep.at("accum");
  s.links.device_gbs = c.device_gbs;
  s.links.shm_gbs = c.shm_gbs;
  s.links.pcie_gbs = c.pcie_gbs;
  return s;
}

struct Row {
  std::string what;
  double measured = 0, predicted = 0;
  double Error() const { return predicted / measured - 1; }
};

void Print(const Row& r) {
  const bool small = r.measured < 100;
  std::printf("  %-46s measured %10.*f  model %10.*f  error %+6.1f%%\n", r.what.c_str(), small ? 2 : 0, r.measured,
              small ? 2 : 0, r.predicted, 100 * r.Error());
}

TEST(PerfModelValidation, TheLmRunsOnTheH200WithinFivePercent) {
  const Calibration c = Calibrate();
  std::vector<Row> rows;
  // Fourth run (tree bcd78f4 + 0fe715e): 16 micro-batches of 64, each hybrid split by the independent run
  // just before it.
  for (int rep = 1; rep <= 3; ++rep) {
    const json indep = LastLine(Results(fmt::format("lm-20261201T1940Z/lm-indep-{}.jsonl", rep)));
    const json hybrid = LastLine(Results(fmt::format("lm-20261201T1940Z/lm-hybrid-{}.jsonl", rep)));
    const json w = ReadJson(Results(fmt::format("lm-20261201T1940Z/lm-weights-concurrent-{}.json", rep)));
    auto p = Predict(LmScenario(c, indep, Weights(w)));
    ASSERT_TRUE(p.ok()) << p.status().ToString();
    EXPECT_EQ(json(p->split), hybrid.at("shares"));
    rows.push_back({fmt::format("4th run, rep {}: hybrid {}", rep, hybrid.at("shares").dump()),
                    hybrid.at("tokens_per_s"), p->tokens_per_s});
    EXPECT_NEAR(p->sum_of_parts_tokens_per_s / indep.at("tokens_per_s").get<double>(), 1, 0.01);
  }
  // Third run (tree cc56989): 32 micro-batches of 32, split by the calibration (each island alone).
  const json w3 = ReadJson(Results("lm-20261201T1812Z/lm-weights.json"));
  for (int rep = 1; rep <= 2; ++rep) {
    const json indep = LastLine(Results(fmt::format("lm-20261201T1812Z/lm-indep-{}.jsonl", rep)));
    const json hybrid = LastLine(Results(fmt::format("lm-20261201T1812Z/lm-hybrid-{}.jsonl", rep)));
    auto p = Predict(LmScenario(c, indep, Weights(w3)));
    ASSERT_TRUE(p.ok());
    EXPECT_EQ(json(p->split), hybrid.at("shares"));
    rows.push_back({fmt::format("3rd run, rep {}: hybrid {}", rep, hybrid.at("shares").dump()),
                    hybrid.at("tokens_per_s"), p->tokens_per_s});
  }
  std::printf("LM experiment, tokens/s (device bridge %.2f GB/s from cfa4078):\n", c.device_gbs);
  for (const auto& r : rows) {
    Print(r);
    EXPECT_LT(std::fabs(r.Error()), 0.05) << r.what;
  }
}

TEST(PerfModelValidation, TheEvenSplitIsWhereTheModelIsWrong) {
  // With an even split the fast island idles and the slow one runs faster than in the independent run
  // (the MPS clients share one GPU's memory system; idle, one frees it for the other). The model keeps the
  // independent rates, so it must under-predict: the row documents a known miss, not a fit.
  const Calibration c = Calibrate();
  std::printf("even split (documented miss):\n");
  for (const auto& [dir, rep] :
       std::vector<std::pair<std::string, int>>{{"lm-20261201T1940Z", 1}, {"lm-20261201T1812Z", 1}}) {
    const json indep = LastLine(Results(fmt::format("{}/lm-indep-{}.jsonl", dir, rep)));
    const json even = LastLine(Results(fmt::format("{}/lm-even-{}.jsonl", dir, rep)));
    auto p = Predict(LmScenario(c, indep, {1, 1}));
    ASSERT_TRUE(p.ok());
    EXPECT_EQ(json(p->split), even.at("shares"));
    Row r{dir + ": even " + even.at("shares").dump(), even.at("tokens_per_s"), p->tokens_per_s};
    Print(r);
    EXPECT_LT(r.Error(), -0.05) << r.what;
    const double slow_alone = even.at("islands").at("ascend").at("tokens_per_s");
    const double slow_indep = indep.at("islands").at("ascend").at("tokens_per_s");
    EXPECT_GT(slow_alone, slow_indep) << "the slow island ran faster while the fast one idled";
  }
}

TEST(PerfModelValidation, TheDeviceChecksAllreducesFromTheSchedule) {
  // The other allreduce rows of the same device check, predicted from the three calibrated figures and the
  // schedule's bytes: a GPU rank on the device bridge beside host ranks, and two GPU islands staged. The
  // ±5% target is the tokens/s of a step; a collective alone is predicted within 15% (docs/model.md).
  const Calibration c = Calibrate();
  std::printf("allreduce algbw (GB/s) of the device check of cfa4078:\n");
  struct Job {
    const char* name;
    std::vector<std::pair<int64_t, bool>> islands;  // cards, device
    bool device_bridge;
    double tolerance;
  };
  const Job jobs[] = {{"gpu1+host1", {{1, true}, {1, false}}, true, 0.15},
                      {"gpu1+host3", {{1, true}, {3, false}}, true, 0.15},
                      {"gpu+gpu-one-card-staged", {{1, true}, {1, true}}, false, 0.15}};
  for (const auto& job : jobs)
    for (const auto& r : c.rows) {
      if (r.at("job") != job.name || r.value("bytes", 0) != 268435456) continue;
      Scenario s;
      for (const auto& [cards, device] : job.islands) {
        IslandSpec is;
        is.type = device ? "gpu" : "host";
        is.cards = cards;
        is.device = device;
        s.islands.push_back(is);
      }
      s.one_host = true;
      s.device_bridge = job.device_bridge;
      s.links = {c.shm_gbs, 0, c.device_gbs, c.pcie_gbs, 0, 0, 1};
      auto cost = CallCost(s, CollKind::kAllReduce, 268435456 / 4, 4);
      ASSERT_TRUE(cost.ok()) << cost.status().ToString();
      Row row{fmt::format("{} at 256 MiB", job.name), r.at("algbw_GBps"), 268435456 / cost->seconds / 1e9};
      Print(row);
      EXPECT_LT(std::fabs(row.Error()), job.tolerance) << row.what;
    }
}

// ---- validation: host-rank jobs of the 2-core development VM ------------------------------------------

// An allreduce world of host-rank islands on one host ("ascend=host:2,nvidia=host:2"), every rank's copies at
// shm_gbs, shared when more ranks than cores.
Scenario HostRanks(const std::string& islands, double shm_gbs, int64_t cores) {
  Scenario s;
  std::stringstream ss(islands);
  std::string part;
  while (std::getline(ss, part, ',')) {
    IslandSpec is;
    is.type = part.substr(0, part.find('='));
    is.cards = std::stoll(part.substr(part.rfind(':') + 1));
    is.device = false;
    s.islands.push_back(is);
  }
  s.one_host = true;
  s.links.shm_gbs = shm_gbs;
  s.links.cores_per_host = cores;
  return s;
}

// The busbw (algbw x 2(n-1)/n, as scripts/bench-comm.sh reports it) the model predicts for `series` of
// `run` at `bytes`, f32.
double PredictedBusbw(const json& run, const std::string& series, double bytes, double shm_gbs, int64_t cores) {
  const json& se = run.at("series").at(series);
  Scenario s = HostRanks(se.at("islands"), shm_gbs, cores);
  auto c = CallCost(s, CollKind::kAllReduce, static_cast<size_t>(bytes) / 4, 4);
  EXPECT_TRUE(c.ok()) << c.status().ToString();
  const double n = se.at("world_size");
  return bytes / c->seconds / 1e9 * 2 * (n - 1) / n;
}

const json& RowAt(const json& run, const std::string& series, double bytes) {
  for (const auto& r : run.at("series").at(series).at("rows"))
    if (r.at("bytes").get<double>() == bytes) return r;
  ADD_FAILURE() << series << " has no row of " << bytes << " bytes";
  static const json none = json::object();
  return none;
}

TEST(PerfModelValidation, TheCpuHostRankAllreducesOfTheTwoCoreVm) {
  // scripts/bench-comm.sh on the 2-core VM (docs/benchmarks.md), f32 sum, 256 MiB. Each run calibrates shm_gbs
  // from its own "Tessera 1+1 islands" row (two one-rank islands: each rank sends the whole buffer once, half as
  // parts, half as results, so algbw = shm_gbs) and the cores from the file's machine; the model then predicts
  // the run's other layouts from the schedule's bytes: 1 island x2, 2+2 islands and 1 island x4 (4 ranks on 2
  // cores: the cores-per-host term). Stated tolerance for these collectives: ±10% (the ±5% target is met by the
  // rows docs/model.md marks; the others are its misses).
  const double bytes = 268435456;
  std::printf("CPU host-rank allreduce busbw (GB/s), 256 MiB, shm from the same run's 1+1 row:\n");
  for (const auto& [file, commit] : std::vector<std::pair<std::string, std::string>>{
           {"cpu-allreduce-2026-11-29-1824.json", "33ee866"}, {"cpu-allreduce-2026-11-29-1706.json", "64e52e6"}}) {
    const json run = ReadJson(Results(file));
    EXPECT_EQ(run.at("commit").get<std::string>().substr(0, 7), commit);
    const int64_t cores = run.at("machine").at("cores");
    EXPECT_EQ(cores, 2);
    const double shm = RowAt(run, "t11", bytes).at("algbw_GBps");
    for (const char* series : {"th2", "t22", "th4"}) {
      Row r{fmt::format("{} {} ({})", commit, series, run.at("series").at(series).at("islands").get<std::string>()),
            RowAt(run, series, bytes).at("busbw_GBps"), PredictedBusbw(run, series, bytes, shm, cores)};
      Print(r);
      EXPECT_LT(std::fabs(r.Error()), 0.10) << r.what;
      if (run.at("series").at(series).at("world_size") == 4) {
        // Without the cores term the 4-rank rows would be predicted at twice the busbw.
        const double free = PredictedBusbw(run, series, bytes, shm, 0);
        EXPECT_GT(free / r.measured - 1, 0.8) << r.what;
      }
    }
  }
}

TEST(PerfModelValidation, WhereTheCoresTermIsWrongOnTheCpu) {
  // Documented misses. (1) The long 16 MiB run of c725fac (5 rounds x 20 iterations, the steadiest CPU run):
  // 4 ranks on 2 cores lose more than the cores' share (busbw 0.38-0.43 of the 2-rank layouts, the model
  // 0.5): each of a call's phases waits for all four ranks, two of which are off a core at any moment, and at
  // 16 MiB a call (13 ms) is a few scheduler slices. The model over-predicts by more than 20%.
  // (2) The run of 13152ab under a load of 8-22 from other work on the same 2 cores: the cores term counts the
  // job's own ranks only, so every layout is over-predicted by more than 10%.
  const json quick = ReadJson(Results("cpu-allreduce-2026-11-29-1831.json"));
  EXPECT_EQ(quick.at("commit").get<std::string>().substr(0, 7), "c725fac");
  const double b16 = 16777216;
  const double shm16 = RowAt(quick, "t11", b16).at("algbw_GBps");
  std::printf("CPU host-rank allreduce busbw (GB/s), documented misses:\n");
  for (const char* series : {"t22", "th4"}) {
    Row r{fmt::format("c725fac {} at 16 MiB", series), RowAt(quick, series, b16).at("busbw_GBps"),
          PredictedBusbw(quick, series, b16, shm16, 2)};
    Print(r);
    EXPECT_GT(r.Error(), 0.20) << r.what;
  }
  const json loaded = ReadJson(Results("cpu-allreduce-2026-11-29.json"));
  EXPECT_EQ(loaded.at("commit").get<std::string>().substr(0, 7), "13152ab");
  const double b256 = 268435456;
  const double shm = RowAt(loaded, "t11", b256).at("algbw_GBps");
  for (const char* series : {"th2", "t22", "th4"}) {
    Row r{fmt::format("13152ab {} at 256 MiB, load 8-22", series), RowAt(loaded, series, b256).at("busbw_GBps"),
          PredictedBusbw(loaded, series, b256, shm, 2)};
    Print(r);
    EXPECT_GT(r.Error(), 0.10) << r.what;
  }
}

// ---- validation: the namespaced TCP hosts ------------------------------------------------------------

// bench/hosts/bridge-vs-iperf3.sh: two hosts (network namespaces on one veth pair of the 2-vCPU VM), one host
// rank each (ascend=host:1 on h0, nvidia=host:1 on h1), f32 allreduce: each host sends the whole buffer over
// the network and receives it (half as parts, half as results), so the model's algbw is net_gbs.
double PredictedTcpAlgbw(double net_gbs, double bytes) {
  Scenario s;
  for (const char* name : {"ascend", "nvidia"}) {
    IslandSpec is;
    is.type = name;
    is.cards = 1;
    is.cards_per_node = 1;
    is.device = false;
    s.islands.push_back(is);
  }
  s.links.net_gbs = net_gbs;
  s.links.shm_gbs = 1;
  auto w = WorldOf(s);
  EXPECT_EQ(w->hosts, 2);
  auto c = CallCost(s, CollKind::kAllReduce, static_cast<size_t>(bytes) / 4, 4);
  EXPECT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->phases.at(1).bound.rfind("net", 0), 0u) << c->phases.at(1).bound;  // the bridge phase
  return bytes / c->seconds / 1e9;
}

double Median(const std::string& file, const std::string& size, const std::string& what) {
  return ReadJson(Results(file)).at("medians").at(size).at(what).at("median");
}

TEST(PerfModelValidation, TheNamespacedTcpHostsAllreduce) {
  // net_gbs is calibrated from one point: the 256 MiB allreduce of hosts-bridge-2026-12-01T1706.json (median of
  // 5 rounds, the sender of 638a4b2). Every other allreduce row of that run and of the runs after it on the same
  // bridge code (T1707, and T1855 / T1857 on the final tree of 077f842), and of the earlier run T1631 (tree
  // 43f2cf5; that sender change left the allreduce at 98-102%), is predicted from it. Target ±5%; T1631 at
  // 256 MiB misses (below).
  const double net = Median("hosts-bridge-2026-12-01T1706.json", "256M", "tessera_allreduce");
  std::printf("namespaced TCP hosts, allreduce algbw (GB/s), net %.3f GB/s from T1706 at 256 MiB:\n", net);
  const std::vector<std::tuple<std::string, std::string, bool>> rows = {
      {"T1706", "64M", true},  {"T1707", "64M", true}, {"T1707", "256M", true}, {"T1855", "64M", true},
      {"T1855", "256M", true}, {"T1857", "64M", true}, {"T1631", "64M", true},  {"T1631", "256M", false}};
  for (const auto& [run, size, calibrated] : rows) {
    const std::string file = fmt::format("hosts-bridge-2026-12-01{}.json", run);
    const double bytes = size == "64M" ? 67108864 : 268435456;
    Row r{fmt::format("{} {}", run, size), Median(file, size, "tessera_allreduce"), PredictedTcpAlgbw(net, bytes)};
    Print(r);
    if (calibrated) {
      EXPECT_LT(std::fabs(r.Error()), 0.05) << r.what;
    } else {
      // Two of its five rounds ran at 0.92 and 0.77 GB/s (other work on the 2 vCPUs): the median is 12% under
      // the other runs', and the model, with no load term, over-predicts it.
      EXPECT_GT(r.Error(), 0.05) << r.what;
      EXPECT_LT(r.Error(), 0.20) << r.what;
    }
  }
}

TEST(PerfModelValidation, TheVethIsNotAFullDuplexLink) {
  // Documented miss: the model's network is full duplex (net_gbs each direction at once). Taken from the same
  // run's one-way broadcast (4 streams, every byte once from h0 to h1), net_gbs predicts the allreduce at the
  // broadcast's rate; measured, the allreduce (every byte once each way, and folded) runs at 0.4-0.6 of it: the
  // veth's two directions, both TCP stacks and the folds share the same 2 vCPUs. So the figure of one traffic
  // pattern does not carry to another here; the model over-predicts by more than 50%.
  std::printf("namespaced TCP hosts, allreduce from the one-way broadcast (documented miss):\n");
  for (const char* run : {"T1631", "T1706", "T1707", "T1855"}) {
    const std::string file = fmt::format("hosts-bridge-2026-12-01{}.json", run);
    const double bcast = Median(file, "256M", "tessera_broadcast");
    Row r{fmt::format("{} 256M, net = broadcast {:.2f}", run, bcast), Median(file, "256M", "tessera_allreduce"),
          PredictedTcpAlgbw(bcast, 268435456)};
    Print(r);
    EXPECT_GT(r.Error(), 0.5) << r.what;
  }
}

}  // namespace
