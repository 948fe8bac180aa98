// Tests of one collective in the performance model (sched/perf_collective.cpp): the bytes per link of every
// collective against invariants of the hierarchical algorithm; each island's path per collective and type as built
// (every multi-card device island with a library on it, 16-bit reductions widened to f32 or native) and in the
// what-ifs (the host-engine reductions of the pinned-staging families, every island staged); the device bridge
// chosen per island; the NICs per node, rail-aligned.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "sched/perf_model.hpp"

namespace {

using namespace tessera::sched::perf;
using nlohmann::json;

// ---- bytes per link ----------------------------------------------------------------------------------

World MakeWorld(const std::vector<int>& sizes, int per_host, bool device_bridge = false) {
  Scenario s;
  for (int n : sizes) {
    IslandSpec is;
    is.type = "t" + std::to_string(s.islands.size());
    is.cards = n;
    is.cards_per_node = per_host;
    is.device = device_bridge;
    s.islands.push_back(is);
  }
  return *WorldOf(s);
}

double Total(const PhaseLoad& p) { return p.total_bytes; }

TEST(PerfModelLoad, EveryPhaseMovesWhatTheAlgorithmMust) {
  // Invariants of the hierarchical algorithm for k islands of n_J ranks and C elements:
  //   island reduce-scatter and island allgather: each island moves (n_J - 1) * C elements;
  //   allreduce bridge: each segment's parts go to k-1 reducers, and each result back: 2 (k-1) C;
  //   allgather bridge: every element from its island's owner to the k-1 other owners: (k-1) C;
  //   every byte is on exactly one link: the network's out = in, locals' out = in.
  const std::vector<std::vector<int>> worlds = {{1, 1}, {2, 2}, {3, 5}, {1, 4}, {2, 3, 4}, {8, 8}, {7}};
  for (const auto& sizes : worlds)
    for (int per_host : {1, 2, 8}) {
      const World w = MakeWorld(sizes, per_host);
      const int k = static_cast<int>(sizes.size());
      size_t W = 0, island_sum = 0;
      for (int n : sizes) {
        W += n;
        island_sum += n - 1;
      }
      const size_t C = 1000 * W;  // a multiple of every island's size: no rounding in the invariants
      const std::string what = fmt::format("islands of {} ranks, {} per host", json(sizes).dump(), per_host);
      auto ar = CollectiveLoad(w, CollKind::kAllReduce, C, 4, 4);
      ASSERT_EQ(ar.size(), k > 1 ? 3u : 2u) << what;
      EXPECT_DOUBLE_EQ(Total(ar.front()), 4.0 * island_sum * C) << what;
      EXPECT_DOUBLE_EQ(Total(ar.back()), 4.0 * island_sum * C) << what;
      if (k > 1) {
        EXPECT_DOUBLE_EQ(Total(ar[1]), 4.0 * 2 * (k - 1) * C) << what;
      }
      auto ag = CollectiveLoad(w, CollKind::kAllGather, C / W, 2, 4);
      if (k > 1) {
        EXPECT_DOUBLE_EQ(Total(ag[1]), 2.0 * (k - 1) * C) << what;
      }
      EXPECT_DOUBLE_EQ(Total(ag.back()), 2.0 * island_sum * C) << what;
      auto rs = CollectiveLoad(w, CollKind::kReduceScatter, C / W, 2, 4);
      if (k > 1) {  // bridge reduce: parts only, as partial sums (f32 from islands of more than one rank)
        double want = 0;
        for (int n : sizes) want += (n == 1 ? 2.0 : 4.0) * (k - 1) * C / k;
        EXPECT_NEAR(Total(rs[1]), want, 1e-6 * want) << what;
      }
      for (const auto& phases : {ar, ag, rs})
        for (const auto& p : phases) {
          double out = 0, in = 0, lo = 0, li = 0, sent = 0;
          for (double x : p.net_out) out += x;
          for (double x : p.net_in) in += x;
          for (double x : p.local_out) lo += x;
          for (double x : p.local_in) li += x;
          for (double x : p.sent) sent += x;
          EXPECT_DOUBLE_EQ(out, in) << what << " " << p.name;
          EXPECT_DOUBLE_EQ(lo, li) << what << " " << p.name;
          EXPECT_DOUBLE_EQ(out + lo, p.total_bytes) << what << " " << p.name;
          EXPECT_DOUBLE_EQ(sent, p.total_bytes) << what << " " << p.name;
          if (per_host == 1) {
            EXPECT_DOUBLE_EQ(lo, 0) << what << " " << p.name;  // every pair crosses hosts
          }
        }
    }
}

TEST(PerfModelLoad, OneIslandMovesARingsVolumePerRank) {
  // A world of one island of n: each rank sends (n-1)/n of the buffer in each island phase — the volume
  // of the vendor library's ring, so both models of a one-island world agree.
  const World w = MakeWorld({8}, 8);
  auto ar = CollectiveLoad(w, CollKind::kAllReduce, 8000, 2, 4);
  for (const auto& p : ar)
    for (double x : p.sent) EXPECT_DOUBLE_EQ(x, 2.0 * 8000 * 7 / 8) << p.name;
}

TEST(PerfModelLoad, TheIslandPhasesOfAHostPathIslandCrossTheNetworkOncePerRank) {
  // Two islands of 16 on 8-card hosts: on the host path every member of an island talks to every other,
  // so a host's network carries what its 8 ranks send off the host — 8 x 8/15 of a ring's per-host volume.
  const World w = MakeWorld({16, 16}, 8);
  const size_t C = 16 * 1000;
  auto ar = CollectiveLoad(w, CollKind::kAllReduce, C, 2, 4);
  const double per_rank_off_host = 2.0 * C / 16 * 8;  // to the 8 members on the island's other host
  EXPECT_DOUBLE_EQ(ar[0].net_out[0], 8 * per_rank_off_host);
}
// ---- each island's path (docs/architecture.md, "Islands of several devices") -------------------------

// A hybrid world of an npu island and a cuda island of `cards` cards each, each on a node of its own (`per_node`
// cards a node), joined by the network: device ranks stage through host memory (no device bridge across hosts).
Scenario NpuAndCuda(IslandPath path, int64_t cards = 4, int64_t per_node = 4) {
  Scenario s;
  for (const char* family : {"npu", "cuda"}) {
    IslandSpec is;
    is.type = family;
    is.family = family;
    is.cards = cards;
    is.cards_per_node = per_node;
    is.fabric_gbs = 100;
    is.tokens_per_s = 1000;
    is.hbm_gbs = 1000;
    s.islands.push_back(is);
  }
  s.links.shm_gbs = 2;
  s.links.net_gbs = 25;
  s.links.pcie_gbs = 25;
  s.island_path = path;
  return s;
}

TEST(PerfModelIslands, A16BitReduceScatterOnAnNpuIslandIsWidenedOnItsLibraryAndStagesItsF32Shard) {
  // 8 ranks, `count` elements per rank's output block: the buffer the schedule cuts is C = 8 count.
  const size_t count = 1 << 20, C = 8 * count;
  const Scenario s = NpuAndCuda(IslandPath::kAsBuilt);
  auto bf16 = CallCost(s, CollKind::kReduceScatter, count, 2);
  auto f32 = CallCost(s, CollKind::kReduceScatter, count, 4);
  ASSERT_TRUE(bf16.ok() && f32.ok()) << bf16.status().ToString() << f32.status().ToString();
  ASSERT_EQ(bf16->islands.size(), 2u);
  // bf16 on either island: widened to f32 on the device, reduce-scattered on HCCL / NCCL in f32, each rank staging
  // only its shard of f32 partial sums (1/4 of the buffer at twice the 16-bit width): the f32 call's bytes.
  for (size_t i : {0u, 1u}) {
    EXPECT_EQ(bf16->islands[i].path, "library") << i;
    EXPECT_TRUE(bf16->islands[i].widened) << i;
    EXPECT_FALSE(bf16->islands[i].native) << i;
    EXPECT_TRUE(bf16->islands[i].why.empty()) << bf16->islands[i].why;
    EXPECT_DOUBLE_EQ(bf16->islands[i].staged_bytes, C / 4 * 4.0) << i;
    EXPECT_DOUBLE_EQ(bf16->islands[i].ring_bytes, 3.0 / 4 * C * 4) << i;  // (n-1)/n of the buffer, f32
    EXPECT_DOUBLE_EQ(bf16->islands[i].staged_bytes, f32->islands[i].staged_bytes) << i;
    EXPECT_DOUBLE_EQ(bf16->islands[i].ring_bytes, f32->islands[i].ring_bytes) << i;
    EXPECT_EQ(f32->islands[i].path, "library") << i;
    EXPECT_FALSE(f32->islands[i].widened) << i;
  }
  EXPECT_DOUBLE_EQ(bf16->staging_s, C * 1.0 / 25e9);
  EXPECT_DOUBLE_EQ(bf16->staging_s, f32->staging_s);
  EXPECT_EQ(bf16->phases[0].name, "island reduce-scatter (vendor ring)");
  EXPECT_DOUBLE_EQ(bf16->phases[0].seconds, 3.0 / 4 * C * 4 / 100e9);
  EXPECT_DOUBLE_EQ(bf16->phases[0].seconds, f32->phases[0].seconds);
  // The bridge: both islands' partial sums cross it in f32 (each owner sends its other-island part: C/8 x 4),
  // whatever the data's width, as the schedule's bytes say.
  const World w = *WorldOf(s);
  auto load = CollectiveLoad(w, CollKind::kReduceScatter, count, 2, 4);
  ASSERT_EQ(load[1].name, "bridge reduce");
  for (int r = 0; r < 8; ++r) EXPECT_DOUBLE_EQ(load[1].sent[r], C / 8 * 4.0) << "rank " << r;
  EXPECT_DOUBLE_EQ(load[1].net_out[0], 4 * C / 8 * 4.0);  // the npu node's 4 owners
}

TEST(PerfModelIslands, HostReduceIsTheOldPathOfThePinnedStagingFamilies) {
  // --island-host-reduce: the npu island (no device bridge: StagedRank) stages a 16-bit reduction whole and runs its
  // island phases on the host engine, as the code did before ACL widened on the device; the cuda island
  // (DeviceBridgeRank) keeps NCCL. Non-reductions and f32 keep the library.
  const size_t count = 1 << 20, C = 8 * count;
  const Scenario s = NpuAndCuda(IslandPath::kHostReduce);
  auto bf16 = CallCost(s, CollKind::kReduceScatter, count, 2);
  ASSERT_TRUE(bf16.ok()) << bf16.status().ToString();
  EXPECT_EQ(bf16->islands[0].path, "host");
  EXPECT_NE(bf16->islands[0].why.find("npu family's pinned-staging rank on the host engine"), std::string::npos)
      << bf16->islands[0].why;
  EXPECT_DOUBLE_EQ(bf16->islands[0].staged_bytes, C * 2.0);  // the whole buffer
  EXPECT_DOUBLE_EQ(bf16->islands[0].ring_bytes, 0);
  EXPECT_EQ(bf16->islands[1].path, "library");
  EXPECT_TRUE(bf16->islands[1].widened);
  EXPECT_DOUBLE_EQ(bf16->staging_s, C * 2.0 / 25e9);  // the npu island's whole buffer binds the copies
  // The island phase mixes the npu island's host path (each rank sends 3 shards of C/4 x 2 on shm at 2 GB/s) and
  // the cuda island's ring (3/4 C x 4 at 100 GB/s): the host path binds.
  EXPECT_EQ(bf16->phases[0].name, "island reduce-scatter (vendor ring + host path)");
  EXPECT_EQ(bf16->phases[0].bound.rfind("shm (rank ", 0), 0u) << bf16->phases[0].bound;
  EXPECT_DOUBLE_EQ(bf16->phases[0].seconds, 3.0 * C / 4 * 2 / 2e9);
  for (auto [kind, esz] : {std::pair{CollKind::kReduceScatter, 4}, std::pair{CollKind::kAllGather, 2}}) {
    auto x = CallCost(s, kind, count, esz);
    ASSERT_TRUE(x.ok()) << x.status().ToString();
    EXPECT_EQ(x->islands[0].path, "library") << CollName(kind);
  }
  // The same with a musa island; an unnamed family is taken to have the device bridge (as cuda).
  for (const char* family : {"musa", ""}) {
    Scenario m = s;
    m.islands[0].family = family;
    auto x = CallCost(m, CollKind::kAllReduce, C, 2);
    ASSERT_TRUE(x.ok()) << x.status().ToString();
    EXPECT_EQ(x->islands[0].path, *family ? "host" : "library") << family;
  }
  // As built the old path is gone: ignoring the switch would stage every npu reduction whole.
  auto built = CallCost(NpuAndCuda(IslandPath::kAsBuilt), CollKind::kReduceScatter, count, 2);
  EXPECT_LT(built->seconds, bf16->seconds);
}

TEST(PerfModelIslands, NonReductionsWhatIfsAndFamiliesWithoutALibrary) {
  const size_t count = 1 << 20, C = 8 * count;
  // A 16-bit allgather is no reduction: both islands on their library, as built. Each rank stages its shard
  // (C/4 elements): its island's contributions to it go down, the other island's come up.
  auto ag = CallCost(NpuAndCuda(IslandPath::kAsBuilt), CollKind::kAllGather, count, 2);
  ASSERT_TRUE(ag.ok()) << ag.status().ToString();
  for (const auto& x : ag->islands) {
    EXPECT_EQ(x.path, "library");
    EXPECT_FALSE(x.widened);
    EXPECT_DOUBLE_EQ(x.staged_bytes, C / 4 * 2.0);
  }
  // The host path of the code before 4d8e064: every rank stages the whole buffer, even for an allgather.
  for (CollKind kind : {CollKind::kAllReduce, CollKind::kReduceScatter, CollKind::kAllGather}) {
    auto host = CallCost(NpuAndCuda(IslandPath::kHost), kind, count, 2);
    ASSERT_TRUE(host.ok()) << host.status().ToString();
    const double whole = (kind == CollKind::kAllReduce ? count : C) * 2.0;
    for (const auto& x : host->islands) {
      EXPECT_EQ(x.path, "host") << CollName(kind);
      EXPECT_DOUBLE_EQ(x.staged_bytes, whole) << CollName(kind);
    }
    EXPECT_EQ(host->phases[0].name.find("vendor"), std::string::npos) << host->phases[0].name;
  }
  // An emu island has no collective library: its island phases on the host engine, the buffer staged whole.
  Scenario emu = NpuAndCuda(IslandPath::kAsBuilt);
  emu.islands[1].family = "emu";
  auto e = CallCost(emu, CollKind::kAllGather, count, 4);
  ASSERT_TRUE(e.ok()) << e.status().ToString();
  EXPECT_EQ(e->islands[1].path, "host");
  EXPECT_NE(e->islands[1].why.find("emu family has no collective library"), std::string::npos) << e->islands[1].why;
  EXPECT_DOUBLE_EQ(e->islands[1].staged_bytes, C * 4.0);
  EXPECT_EQ(e->islands[0].path, "library");
  // A family that is not one is refused.
  Scenario bad = NpuAndCuda(IslandPath::kAsBuilt);
  bad.islands[1].family = "rocm";
  bad.model.params = 1e6;
  bad.model.seq = 8;
  bad.model.batch = 8;
  EXPECT_NE(Predict(bad).status().message().find("island 1 (cuda): device family 'rocm' is not one of cuda, npu"),
            std::string::npos)
      << Predict(bad).status().message();
  EXPECT_EQ(FamilyOfVendor("nvidia"), "cuda");
  EXPECT_EQ(FamilyOfVendor("ascend"), "npu");
  EXPECT_EQ(FamilyOfVendor("musa"), "musa");
  EXPECT_EQ(FamilyOfVendor("v0"), "");
  EXPECT_TRUE(HasDeviceBridge("cuda"));
  EXPECT_TRUE(HasDeviceBridge("emu"));
  EXPECT_FALSE(HasDeviceBridge("npu"));
  EXPECT_FALSE(HasDeviceBridge("musa"));
  EXPECT_TRUE(HasCollectiveLibrary("npu"));
  EXPECT_FALSE(HasCollectiveLibrary("emu"));
  // Iluvatar CoreX: CUDA's API, but its runtime row lacks mapped registration and stream memops (pinned staging),
  // and IXCCL is its library: the model reads both from the rows, not from the family's name.
  EXPECT_EQ(FamilyOfVendor("iluvatar"), "corex");
  EXPECT_FALSE(HasDeviceBridge("corex"));
  EXPECT_TRUE(HasCollectiveLibrary("corex"));
}

TEST(PerfModelIslands, NativeIslandReduceHalvesTheIslandRingOf16BitDataOnly) {
  // TESSERA_ISLAND_REDUCE=native: the library reduces 16-bit data in its own type, so the island reduce-scatter's
  // ring carries 16-bit bytes (half the widened ring's) and each rank's shard comes down in 16-bit (widened on the
  // host); it still crosses the bridge as f32 partial sums (the cross-island fold is f32), so the bridge is
  // unchanged; f32 data and allgathers are unchanged.
  const size_t count = 1 << 20, C = 8 * count;
  Scenario native = NpuAndCuda(IslandPath::kAsBuilt);
  native.island_reduce = IslandReduce::kNative;
  const Scenario widened = NpuAndCuda(IslandPath::kAsBuilt);
  auto n = CallCost(native, CollKind::kReduceScatter, count, 2);
  auto w = CallCost(widened, CollKind::kReduceScatter, count, 2);
  ASSERT_TRUE(n.ok() && w.ok()) << n.status().ToString() << w.status().ToString();
  for (size_t i : {0u, 1u}) {
    EXPECT_TRUE(n->islands[i].native) << i;
    EXPECT_FALSE(n->islands[i].widened) << i;
    EXPECT_DOUBLE_EQ(n->islands[i].ring_bytes, 3.0 / 4 * C * 2) << i;
    EXPECT_DOUBLE_EQ(n->islands[i].ring_bytes, w->islands[i].ring_bytes / 2) << i;
    EXPECT_DOUBLE_EQ(n->islands[i].staged_bytes, C / 4 * 2.0) << i;  // its shard down, its output block up
    EXPECT_DOUBLE_EQ(w->islands[i].staged_bytes, C / 4 * 4.0) << i;
  }
  EXPECT_DOUBLE_EQ(n->phases[0].seconds, w->phases[0].seconds / 2);
  EXPECT_DOUBLE_EQ(n->staging_s, w->staging_s / 2);
  ASSERT_EQ(n->phases.size(), w->phases.size());
  for (size_t ph = 1; ph < n->phases.size(); ++ph) EXPECT_DOUBLE_EQ(n->phases[ph].seconds, w->phases[ph].seconds);
  // The island allgather of an allreduce moves results in the data's type either way.
  auto nar = CallCost(native, CollKind::kAllReduce, C, 2), war = CallCost(widened, CollKind::kAllReduce, C, 2);
  EXPECT_DOUBLE_EQ(nar->phases.back().seconds, war->phases.back().seconds);
  EXPECT_LT(nar->seconds, war->seconds);
  for (auto [kind, esz] : {std::pair{CollKind::kReduceScatter, 4}, std::pair{CollKind::kAllGather, 2}}) {
    auto a = CallCost(native, kind, count, esz), b = CallCost(widened, kind, count, esz);
    EXPECT_DOUBLE_EQ(a->seconds, b->seconds) << CollName(kind) << esz;
    EXPECT_FALSE(a->islands[0].native) << CollName(kind) << esz;
  }
  EXPECT_STREQ(IslandReduceName(IslandReduce::kNative), "native");
  EXPECT_STREQ(IslandReduceName(IslandReduce::kF32), "f32");
}

TEST(PerfModelIslands, AZero3StepOrdersTheWhatIfsAndNativeIsFastestOnTheNetwork) {
  // bf16 ZeRO-3 on 8-card islands across two nodes each: the host path of every island is the slowest, the old
  // host-engine reductions of the npu island next, as built (widened rings) faster, native faster still.
  auto step = [](IslandPath path, IslandReduce reduce) {
    Scenario s = NpuAndCuda(path, 8, 4);
    s.island_reduce = reduce;
    s.model.params = 1e9;
    s.model.zero = 3;
    s.model.seq = 1024;
    s.model.batch = 32;
    s.model.accum = 2;
    auto p = Predict(s);
    EXPECT_TRUE(p.ok()) << p.status().ToString();
    return *p;
  };
  const Prediction host = step(IslandPath::kHost, IslandReduce::kF32),
                   old = step(IslandPath::kHostReduce, IslandReduce::kF32),
                   built = step(IslandPath::kAsBuilt, IslandReduce::kF32),
                   native = step(IslandPath::kAsBuilt, IslandReduce::kNative);
  EXPECT_LT(host.tokens_per_s, old.tokens_per_s);
  EXPECT_LT(old.tokens_per_s, built.tokens_per_s);
  EXPECT_LT(built.tokens_per_s, native.tokens_per_s);
  ASSERT_EQ(built.collectives.size(), 2u);
  EXPECT_EQ(built.collectives[0].name, "gradient reduce-scatter");
  EXPECT_EQ(old.collectives[0].islands[0].path, "host");
  EXPECT_EQ(built.collectives[0].islands[0].path, "library");
  // The allgathers cost the same in all three but the host path: only the reductions differ.
  EXPECT_DOUBLE_EQ(built.collectives[1].seconds, old.collectives[1].seconds);
  EXPECT_DOUBLE_EQ(built.collectives[1].seconds, native.collectives[1].seconds);
  EXPECT_GT(old.collectives[0].seconds, built.collectives[0].seconds);
}

// ---- the device bridge, per island ----------------------------------------------------------------------

TEST(PerfModelIslands, TheDeviceBridgeIsChosenPerIsland) {
  // One-card islands on one host: the cuda island keeps the device bridge beside a staged npu island (the npu rank
  // has no device bridge: it stages the whole buffer over PCIe); the cuda rank stages nothing.
  Scenario s;
  for (const char* family : {"cuda", "npu"}) {
    IslandSpec is;
    is.type = family;
    is.family = family;
    is.cards = 1;
    is.tokens_per_s = 1000;
    s.islands.push_back(is);
  }
  s.one_host = true;
  s.links = {2, 0, 20, 50, 0, 0, 1};
  const World w = *WorldOf(s);
  EXPECT_EQ(w.device_bridge, (std::vector<bool>{true, false}));
  auto c = CallCost(s, CollKind::kAllReduce, 1 << 20, 4);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->islands[0].path, "one rank");
  EXPECT_DOUBLE_EQ(c->islands[0].staged_bytes, 0);
  EXPECT_DOUBLE_EQ(c->islands[1].staged_bytes, 4.0 * (1 << 20));
  // The bridge phase: the cuda rank's bytes on its copy engines (device_gbs), the npu rank's on shm: shm binds.
  EXPECT_EQ(c->phases[1].bound, "shm (rank 1)");
  // Two cuda islands: both on the device bridge. Across hosts (islands on nodes of their own) none is: every
  // bridge channel must be a shm ring for TESSERA_DEVICE_BRIDGE=auto.
  s.islands[1].family = "cuda";
  EXPECT_EQ(WorldOf(s)->device_bridge, (std::vector<bool>{true, true}));
  s.one_host = false;
  EXPECT_EQ(WorldOf(s)->device_bridge, (std::vector<bool>{false, false}));
  s.one_host = true;
  s.device_bridge = false;  // TESSERA_DEVICE_BRIDGE=staged
  EXPECT_EQ(WorldOf(s)->device_bridge, (std::vector<bool>{false, false}));
}

TEST(PerfModelIslands, TheDeviceBridgeIslandFoldsTheStagedIslandsShare) {
  // cuda 1 + npu 1 + host 1 on one host: the staged npu island leaves its share of the bridge's folds to the others
  // (as Comm::FoldWeights): the cuda and host ranks fold half of the segment each; the npu rank sends each its
  // partial sums of that half and no results (C x 4 in all), the others their partial sums and results (3/2 C x 4).
  Scenario s;
  for (const char* family : {"cuda", "npu", ""}) {
    IslandSpec is;
    is.type = *family ? family : "cpu";
    is.family = family;
    is.device = *family != '\0';
    is.cards = 1;
    is.tokens_per_s = 1000;
    s.islands.push_back(is);
  }
  s.one_host = true;
  const World w = *WorldOf(s);
  EXPECT_EQ(w.fold_weights, (std::vector<int>{1, 0, 1}));
  const size_t C = 1 << 20;
  auto load = CollectiveLoad(w, CollKind::kAllReduce, C, 4, 4);
  ASSERT_EQ(load[1].name, "bridge");
  EXPECT_DOUBLE_EQ(load[1].sent[0], 1.5 * C * 4);
  EXPECT_DOUBLE_EQ(load[1].sent[1], 1.0 * C * 4);
  EXPECT_DOUBLE_EQ(load[1].sent[2], 1.5 * C * 4);
  // Without the device bridge (TESSERA_DEVICE_BRIDGE=staged) every island folds a third.
  s.device_bridge = false;
  EXPECT_EQ(WorldOf(s)->fold_weights, (std::vector<int>{1, 1, 1}));
}

// ---- NICs per node ------------------------------------------------------------------------------------

TEST(PerfModelNics, TheBridgeBetweenHostsUsesMinOfNicsAndRanksPerNodeRailAligned) {
  // Two 8-card islands, each on a node of its own: every rank owns a shard and sends its parts to its counterpart
  // on the other node, so the bridge's bytes leave a node on 8 ranks. Rail-aligned, local rank i on NIC i % N: with
  // N NICs the bridge takes 1/min(N, 8) of the one-NIC time.
  const size_t count = 1 << 20;
  auto bridge = [&](int64_t nics, int64_t per_node) {
    Scenario s = NpuAndCuda(IslandPath::kAsBuilt, 8, per_node);
    s.links.nics_per_node = nics;
    s.links.latency_s = 0;
    auto c = CallCost(s, CollKind::kReduceScatter, count, 4);
    EXPECT_TRUE(c.ok()) << c.status().ToString();
    EXPECT_EQ(c->phases[1].name, "bridge reduce");
    return c->phases[1];
  };
  const auto one = bridge(1, 8);
  EXPECT_EQ(one.bound.rfind("net (host ", 0), 0u) << one.bound;
  const double per_node = 8 * (8.0 * count / 8) * 4;  // 8 owners, each its other-island part of C/8 x 4
  EXPECT_DOUBLE_EQ(one.seconds, per_node / 25e9);
  for (int64_t n : {2, 4, 8}) EXPECT_DOUBLE_EQ(bridge(n, 8).seconds, one.seconds / static_cast<double>(n)) << n;
  EXPECT_DOUBLE_EQ(bridge(16, 8).seconds, one.seconds / 8);  // no more rails than ranks on the node
  EXPECT_NE(bridge(8, 8).bound.find("NIC"), std::string::npos) << bridge(8, 8).bound;
  // Nodes of 2 cards (4 nodes an island): 2 ranks a node, so 8 NICs give 2 rails.
  EXPECT_DOUBLE_EQ(bridge(8, 2).seconds, bridge(1, 2).seconds / 2);
  // Three NICs for 8 ranks: ranks 0, 3, 6 share NIC 0, the busiest: 3/8 of the node's bytes.
  EXPECT_DOUBLE_EQ(bridge(3, 8).seconds, one.seconds * 3 / 8);
}

TEST(PerfModelNics, AVendorRingAcrossHostsUsesEveryRail) {
  // A world of one 16-card island on two 8-card nodes: its library's ring crosses the nodes at the slower of the
  // fabric and min(NICs, 8) x the NIC's bandwidth.
  auto ring = [](int64_t nics) {
    Scenario s;
    IslandSpec is;
    is.type = "gpu";
    is.family = "cuda";
    is.cards = 16;
    is.fabric_gbs = 400;
    s.islands.push_back(is);
    s.links.net_gbs = 25;
    s.links.nics_per_node = nics;
    auto c = CallCost(s, CollKind::kAllReduce, 16 << 20, 2);
    EXPECT_TRUE(c.ok()) << c.status().ToString();
    return c->phases[0];
  };
  const double bytes = 15.0 / 16 * (16 << 20) * 2;
  EXPECT_DOUBLE_EQ(ring(1).seconds, bytes / 25e9);
  EXPECT_DOUBLE_EQ(ring(8).seconds, bytes / 200e9);
  EXPECT_EQ(ring(8).bound, "net (island 0's ring between hosts, 8 NICs a node)");
  EXPECT_DOUBLE_EQ(ring(32).seconds, bytes / 200e9);
}

TEST(PerfModelNics, ZeroNicsIsRefused) {
  Scenario s = NpuAndCuda(IslandPath::kAsBuilt);
  s.model.params = 1e6;
  s.model.seq = 8;
  s.model.batch = 8;
  s.links.nics_per_node = 0;
  EXPECT_NE(Predict(s).status().message().find("NICs per node 0 is not a positive count"), std::string::npos)
      << Predict(s).status().message();
}

}  // namespace
