// Tests of the planner: on random small instances its optimum equals a brute-force enumeration (same
// feasibility, same objective exactly); placements respect every constraint; infeasible jobs name the
// binding constraint and a fix that really fits. A job that names its model: the same against a brute force
// that predicts every mix (sched/perf_model), and the search's lattice against every mix on a larger fleet.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <map>
#include <random>
#include <set>

#include "sched/perf_model.hpp"
#include "sched/planner_internal.hpp"
#include "sched/sched.hpp"

using namespace tessera::sched;
using i128 = __int128;

namespace {

struct Instance {
  Catalog catalog;
  Fleet fleet;
  Policy policy;
  Job job;
  std::vector<RunningJob> running;
};

Instance RandomInstance(std::mt19937_64& rng) {
  auto uni = [&](int64_t a, int64_t b) { return std::uniform_int_distribution<int64_t>(a, b)(rng); };
  Instance in;
  in.catalog.source = "random";
  in.catalog.price_version = "r";
  const int ntypes = static_cast<int>(uni(2, 4));
  for (int t = 0; t < ntypes; ++t) {
    AcceleratorType a;
    a.name = fmt::format("t{}", t);
    a.vendor = fmt::format("v{}", t % 3);
    a.domestic = t == 0 ? true : (t == 1 ? false : uni(0, 1) == 1);
    a.price_per_card_hour = uni(5, 90) * 100'000;  // 0.5 .. 9.0
    a.throughput["w"] = uni(1, 20) * 100;          // 0.1 .. 2.0
    a.throughput["policy"] = uni(1, 20) * 100;
    in.catalog.types.push_back(a);
  }
  const int nzones = static_cast<int>(uni(1, 3));
  for (int z = 0; z < nzones; ++z)
    for (int t = 0; t < ntypes; ++t) {
      int64_t nodes = uni(0, 2);
      for (int64_t k = 0; k < nodes; ++k) {
        Node n{fmt::format("z{}-t{}-{}", z, t, k), fmt::format("z{}", z), fmt::format("t{}", t), uni(1, 4)};
        in.fleet.index[n.id] = in.fleet.nodes.size();
        in.fleet.nodes.push_back(n);
      }
    }
  // Half the instances carry the loaders' zone index (Fleet::Reindex), half make Plan build it.
  if (uni(0, 1)) {
    EXPECT_TRUE(in.fleet.Reindex().ok());
  }
  // Running jobs on some nodes.
  for (size_t i = 0; i < in.fleet.nodes.size(); ++i) {
    if (uni(0, 2) != 0) continue;
    RunningJob r;
    r.name = fmt::format("r{}", i);
    r.allocations.push_back({in.fleet.nodes[i].id, uni(1, in.fleet.nodes[i].cards)});
    in.running.push_back(r);
  }
  in.policy.source = "random";
  in.policy.unit = uni(0, 2) == 0 ? ShareUnit::kThroughput : ShareUnit::kCards;
  in.policy.weight_class = in.policy.unit == ShareUnit::kThroughput ? "policy" : "";
  static const Ppm kFloors[] = {0, 300'000, 500'000, 600'000, 750'000, 333'333};
  in.policy.calendar.push_back({0, kFloors[uni(0, 5)]});
  in.job.source = "random";
  in.job.name = "j";
  in.job.tenant = "t";
  in.job.workload_class = "w";
  if (uni(0, 2) == 0) {
    in.job.throughput_target = uni(1, 12) * 250;
  } else {
    in.job.cards = uni(1, 10);
  }
  std::set<std::string> comp;
  for (int t = 0; t < ntypes; ++t)
    if (uni(0, 3) != 0) comp.insert(uni(0, 1) ? fmt::format("t{}", t) : fmt::format("v{}", t % 3));
  if (comp.empty()) comp.insert("t0");
  in.job.compatible.assign(comp.begin(), comp.end());
  // Bounds on an accepted type (a min on a type the job does not accept is an input error).
  const auto& bt = in.catalog.types[uni(0, ntypes - 1)];
  if (uni(0, 3) == 0 && in.job.Accepts(bt)) {
    TypeBounds b;
    b.min = uni(0, 2);
    if (uni(0, 1)) b.max = b.min + uni(0, 3);
    in.job.bounds[bt.name] = b;
  }
  return in;
}

// An independent enumeration of every allocation in every zone. A job that names its model: the best is the
// lowest predicted cost per million tokens (each mix predicted by sched/perf_model).
struct Brute {
  bool feasible = false;
  i128 cost = 0, work = 0;  // of the best
  double cost_per_million_tokens = 0;
};

Brute BruteForce(const Instance& in) {
  const auto& types = in.catalog.types;
  std::vector<int> cand;
  for (size_t t = 0; t < types.size(); ++t)
    if (in.job.Accepts(types[t]) && types[t].throughput.count(in.job.workload_class))
      cand.push_back(static_cast<int>(t));
  std::map<std::string, int64_t> used;
  i128 rdom = 0, rtot = 0;
  auto weight = [&](const AcceleratorType& a) -> int64_t {
    return in.policy.unit == ShareUnit::kCards ? 1 : a.throughput.at(in.policy.weight_class);
  };
  for (const auto& r : in.running)
    for (const auto& a : r.allocations) {
      used[a.node] += a.cards;
      const auto* t = in.catalog.Find(in.fleet.Find(a.node)->type);
      rtot += static_cast<i128>(weight(*t)) * a.cards;
      if (t->domestic) rdom += static_cast<i128>(weight(*t)) * a.cards;
    }
  std::map<std::string, std::vector<int64_t>> free;  // zone -> per cand
  for (const auto& n : in.fleet.nodes) {
    auto& v = free[n.zone];
    v.resize(cand.size(), 0);
    for (size_t c = 0; c < cand.size(); ++c)
      if (types[cand[c]].name == n.type) v[c] += n.cards - used[n.id];
  }
  const Ppm floor = in.policy.FloorAt(0);
  Brute best;
  for (const auto& [zone, fr] : free) {
    std::vector<int64_t> x(cand.size(), 0);
    // odometer over x[c] in [0, fr[c]]
    while (true) {
      bool ok = true;
      i128 n = 0, cost = 0, work = 0, dom = 0, tot = 0;
      for (size_t c = 0; c < cand.size(); ++c) {
        const auto& a = types[cand[c]];
        auto b = in.job.bounds.find(a.name);
        if (b != in.job.bounds.end() && (x[c] < b->second.min || (b->second.max && x[c] > *b->second.max))) ok = false;
        n += x[c];
        cost += static_cast<i128>(a.price_per_card_hour) * x[c];
        work += static_cast<i128>(a.throughput.at(in.job.workload_class)) * x[c];
        tot += static_cast<i128>(weight(a)) * x[c];
        if (a.domestic) dom += static_cast<i128>(weight(a)) * x[c];
      }
      if (in.job.cards > 0 && n != in.job.cards) ok = false;
      if (in.job.throughput_target > 0 && work < in.job.throughput_target) ok = false;
      if ((rdom + dom) * kPpmScale < static_cast<i128>(floor) * (rtot + tot)) ok = false;
      double cpm = 0;
      if (ok && n > 0 && in.job.model) {
        std::vector<const AcceleratorType*> ct;
        for (int t : cand) ct.push_back(&types[t]);
        auto sc = tessera::sched::perf::MixScenario(in.catalog, *in.job.model, ct, x);
        EXPECT_TRUE(sc.ok()) << sc.status().ToString();
        sc->sum_of_parts = false;  // not needed for the cost per token
        auto pr = tessera::sched::perf::Predict(*sc);
        EXPECT_TRUE(pr.ok()) << pr.status().ToString();
        cpm = pr->cost_per_million_tokens;
      }
      if (ok && n > 0) {
        bool better;
        if (!best.feasible)
          better = true;
        else if (in.job.model)
          better = cpm < best.cost_per_million_tokens;
        else if (in.job.cards > 0)
          better = cost * best.work < best.cost * work;
        else
          better = cost < best.cost;
        if (better) best = {true, cost, work, cpm};
      }
      size_t c = 0;
      while (c < cand.size() && x[c] == fr[c]) x[c++] = 0;
      if (c == cand.size()) break;
      ++x[c];
    }
  }
  return best;
}

// The instance in words, printed when the planner and the brute force disagree.
std::string Describe(const Instance& in) {
  std::string s = fmt::format("unit {} floor {} ", ShareUnitName(in.policy.unit), in.policy.FloorAt(0));
  for (const auto& t : in.catalog.types)
    s += fmt::format("| {} {} dom={} p={} tp={} w={} ", t.name, t.vendor, t.domestic, t.price_per_card_hour,
                     t.throughput.at("w"), t.throughput.at("policy"));
  s += "\nnodes:";
  for (const auto& n : in.fleet.nodes) s += fmt::format(" {}:{}", n.id, n.cards);
  s += "\nrunning:";
  for (const auto& r : in.running)
    for (const auto& a : r.allocations) s += fmt::format(" {}:{}", a.node, a.cards);
  s += fmt::format("\njob cards={} target={} compatible=", in.job.cards, in.job.throughput_target);
  for (const auto& c : in.job.compatible) s += c + ",";
  for (const auto& [t, b] : in.job.bounds) s += fmt::format(" bounds {} [{}, {}]", t, b.min, b.max ? *b.max : -1);
  return s;
}

PlanRequest Request(const Instance& in) {
  PlanRequest r;
  r.catalog = &in.catalog;
  r.fleet = &in.fleet;
  r.policy = &in.policy;
  r.job = &in.job;
  r.running = &in.running;
  r.day = 0;
  return r;
}

// Every constraint, checked from the placement's own node list.
void CheckPlacement(const Instance& in, const Placement& p) {
  std::map<std::string, int64_t> used, per_type;
  for (const auto& r : in.running)
    for (const auto& a : r.allocations) used[a.node] += a.cards;
  for (const auto& nc : p.by_node) {
    const Node* n = in.fleet.Find(nc.node);
    ASSERT_NE(n, nullptr) << nc.node;
    EXPECT_EQ(n->zone, p.zone) << "all cards in one zone";
    EXPECT_GT(nc.cards, 0);
    used[nc.node] += nc.cards;
    EXPECT_LE(used[nc.node], n->cards) << "capacity of " << nc.node;
    per_type[n->type] += nc.cards;
    EXPECT_TRUE(in.job.Accepts(*in.catalog.Find(n->type)));
  }
  int64_t total = 0;
  for (const auto& t : p.by_type) {
    EXPECT_EQ(per_type[t.type], t.cards) << t.type;
    total += t.cards;
  }
  EXPECT_EQ(total, p.total_cards);
  if (in.job.cards) {
    EXPECT_EQ(p.total_cards, in.job.cards);
  } else {
    EXPECT_GE(p.total_throughput, in.job.throughput_target);
  }
  for (const auto& [type, b] : in.job.bounds) {
    EXPECT_GE(per_type[type], b.min);
    if (b.max) {
      EXPECT_LE(per_type[type], *b.max);
    }
  }
}

}  // namespace

TEST(SchedPlanner, MatchesBruteForceOnRandomInstances) {
  if (!HaveGlpk()) GTEST_SKIP() << "built without GLPK";
  std::mt19937_64 rng(20260301);
  int placed = 0, infeasible = 0, with_floor = 0;
  for (int i = 0; i < 2000; ++i) {
    Instance in = RandomInstance(rng);
    SCOPED_TRACE(fmt::format("instance {}", i));
    auto r = Plan(Request(in));
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    Brute b = BruteForce(in);
    ASSERT_EQ(r->placed(), b.feasible) << (r->placed() ? "planner placed, brute force found nothing"
                                                       : "planner: " + r->infeasible->reason)
                                       << "\n"
                                       << Describe(in);
    if (!b.feasible) {
      ++infeasible;
      EXPECT_FALSE(r->infeasible->reason.empty());
      continue;
    }
    ++placed;
    if (in.policy.FloorAt(0) > 0) ++with_floor;
    const Placement& p = *r->placement;
    CheckPlacement(in, p);
    i128 cost = p.cost_per_hour, work = p.total_throughput;
    if (in.job.cards > 0) {
      EXPECT_TRUE(cost * b.work == b.cost * work)
          << "cost/work " << static_cast<int64_t>(cost) << "/" << static_cast<int64_t>(work) << " vs brute force "
          << static_cast<int64_t>(b.cost) << "/" << static_cast<int64_t>(b.work);
    } else {
      EXPECT_EQ(static_cast<int64_t>(cost), static_cast<int64_t>(b.cost));
    }
    // The reported share after placement equals the share of running jobs plus this placement.
    Instance after = in;
    after.running.push_back({"new", "t", p.by_node});
    auto share = FleetShare(in.catalog, in.fleet, in.policy, after.running, 0);
    ASSERT_TRUE(share.ok()) << share.status().ToString();
    EXPECT_EQ(share->share, p.share_after);
    EXPECT_TRUE(share->compliant);
    EXPECT_GE(p.share_after, p.floor);
  }
  // The generator must exercise both outcomes and the floor.
  EXPECT_GT(placed, 400);
  EXPECT_GT(infeasible, 100);
  EXPECT_GT(with_floor, 200);
}

// A move (PlanMove, the daemon's "Moving running jobs"): the job runs on the mix it was placed on, then the floor
// or the prices change; its new mix gives its own cards back and keeps the others', and equals a brute force over
// the fleet without the job (same feasibility, same cost per unit of work), keeping the floor next to the others.
TEST(SchedPlanner, MoveMatchesBruteForceWithTheJobsOwnCardsFree) {
  if (!HaveGlpk()) GTEST_SKIP() << "built without GLPK";
  std::mt19937_64 rng(20260303);
  auto uni = [&](int64_t a, int64_t b) { return std::uniform_int_distribution<int64_t>(a, b)(rng); };
  int moved = 0, other_mix = 0, on_own_cards = 0;
  for (int i = 0; i < 600; ++i) {
    Instance in = RandomInstance(rng);
    SCOPED_TRACE(fmt::format("instance {}", i));
    auto first = Plan(Request(in));
    ASSERT_TRUE(first.ok()) << first.status().ToString();
    if (!first->placed()) continue;
    Instance now = in;
    now.running.push_back({"j", "t", first->placement->by_node});
    static const Ppm kFloors[] = {0, 300'000, 500'000, 600'000, 750'000, 1'000'000};
    now.policy.calendar = {{0, kFloors[uni(0, 5)]}};
    for (auto& t : now.catalog.types)
      if (uni(0, 1)) t.price_per_card_hour = uni(5, 90) * 100'000;
    auto mv = PlanMove(Request(now), "j");
    ASSERT_TRUE(mv.ok()) << mv.status().ToString();
    Instance without = now;
    without.running.pop_back();
    Brute b = BruteForce(without);
    ASSERT_EQ(mv->placed(), b.feasible) << (mv->placed() ? "planner moved, brute force found nothing"
                                                         : "planner: " + mv->infeasible->reason)
                                        << "\n"
                                        << Describe(without);
    if (!b.feasible) continue;
    ++moved;
    const Placement& p = *mv->placement;
    CheckPlacement(without, p);
    i128 cost = p.cost_per_hour, work = p.total_throughput;
    if (without.job.cards > 0) {
      EXPECT_TRUE(cost * b.work == b.cost * work) << Describe(without);
    } else {
      EXPECT_EQ(static_cast<int64_t>(cost), static_cast<int64_t>(b.cost)) << Describe(without);
    }
    std::map<std::string, int64_t> before, after;
    for (const auto& t : first->placement->by_type) before[t.type] = t.cards;
    for (const auto& t : p.by_type) after[t.type] = t.cards;
    if (before != after) ++other_mix;
    for (const auto& nc : p.by_node)
      for (const auto& old : first->placement->by_node)
        if (nc.node == old.node) ++on_own_cards;
    without.running.push_back({"j", "t", p.by_node});
    auto share = FleetShare(without.catalog, without.fleet, without.policy, without.running, 0);
    ASSERT_TRUE(share.ok()) << share.status().ToString();
    EXPECT_TRUE(share->compliant);
  }
  EXPECT_GT(moved, 150);
  EXPECT_GT(other_mix, 30);     // the changes move many jobs to another mix
  EXPECT_GT(on_own_cards, 50);  // and their own cards are free to them
  Instance in = RandomInstance(rng);
  auto none = PlanMove(Request(in), "not-running");
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.status().message().find("cannot plan a move of 'not-running': it is not among the running jobs"),
            std::string::npos);
}

namespace {

// One zone per entry: {zone, type, free cards}; catalog: d (domestic, 2.4), n (6.8), equal throughput.
Instance Simple(const std::vector<std::tuple<std::string, std::string, int64_t>>& cells, Ppm floor, int64_t cards) {
  Instance in;
  auto cat = ParseCatalog(R"(price_version: v
types:
  - {name: d, vendor: dv, domestic: true, price_per_card_hour: 2.4, throughput: {w: 1}}
  - {name: n, vendor: nv, domestic: false, price_per_card_hour: 6.8, throughput: {w: 1}}
)");
  EXPECT_TRUE(cat.ok());
  in.catalog = *cat;
  int k = 0;
  for (const auto& [zone, type, cards] : cells) {
    Node n{fmt::format("{}-{}-{}", zone, type, k++), zone, type, cards};
    in.fleet.index[n.id] = in.fleet.nodes.size();
    in.fleet.nodes.push_back(n);
  }
  in.policy.calendar.push_back({0, floor});
  in.job.name = "j";
  in.job.tenant = "t";
  in.job.workload_class = "w";
  in.job.cards = cards;
  in.job.compatible = {"dv", "nv"};
  return in;
}

}  // namespace

TEST(SchedPlanner, MoveOnARisingFloorReusesTheJobsOwnCards) {
  if (!HaveGlpk()) GTEST_SKIP() << "built without GLPK";
  // The foreign card does more work per money (d at 9.0 against n at 6.8, equal throughput): with a 50% floor a
  // 4-card job takes 2 + 2, all the fleet's free domestic-and-foreign pairs but 2 + 2.
  Instance in = Simple({{"z", "d", 4}, {"z", "n", 4}}, 500'000, 4);
  in.catalog.types[0].price_per_card_hour = 9'000'000;
  auto first = Plan(Request(in));
  ASSERT_TRUE(first.ok() && first->placed());
  ASSERT_EQ(first->placement->by_type.size(), 2u);
  EXPECT_EQ(first->placement->by_type[0].cards, 2);
  in.running.push_back({"j", "t", first->placement->by_node});
  in.policy.calendar[0].floor = 750'000;
  // Planned as a new job next to itself it cannot keep 75% (it would need 4 more domestic cards; 2 are free) ...
  auto fresh = Plan(Request(in));
  ASSERT_TRUE(fresh.ok());
  EXPECT_FALSE(fresh->placed());
  // ... moved, its own cards are free: 3 + 1.
  auto mv = PlanMove(Request(in), "j");
  ASSERT_TRUE(mv.ok()) << mv.status().ToString();
  ASSERT_TRUE(mv->placed()) << mv->infeasible->reason;
  ASSERT_EQ(mv->placement->by_type.size(), 2u);
  EXPECT_EQ(mv->placement->by_type[0].cards, 3);
  EXPECT_EQ(mv->placement->by_type[1].cards, 1);
  EXPECT_EQ(mv->placement->share_after, 750'000);
}

TEST(SchedPlanner, FloorDiagnosisNamesTheZoneAndAFixThatFits) {
  if (!HaveGlpk()) GTEST_SKIP() << "built without GLPK";
  // 8 cards, 60% floor: needs ceil(4.8) = 5 domestic cards in one zone; zone b has the most (3).
  Instance in = Simple({{"a", "d", 2}, {"a", "n", 16}, {"b", "d", 3}, {"b", "n", 16}}, 600'000, 8);
  auto r = Plan(Request(in));
  ASSERT_TRUE(r.ok());
  ASSERT_FALSE(r->placed());
  EXPECT_EQ(r->infeasible->binding, Binding::kFloor);
  EXPECT_NE(r->infeasible->reason.find("needs 5 domestic cards in one zone"), std::string::npos)
      << r->infeasible->reason;
  EXPECT_NE(r->infeasible->reason.find("zone b has 3 free"), std::string::npos) << r->infeasible->reason;
  // 3 domestic of N cards >= 60% -> N <= 5; 3/8 = 37.5%.
  EXPECT_NE(r->infeasible->fix.find("at most 5 cards"), std::string::npos) << r->infeasible->fix;
  EXPECT_NE(r->infeasible->fix.find("floor of at most 37.5%"), std::string::npos) << r->infeasible->fix;
  // The fixes really fit.
  in.job.cards = 5;
  EXPECT_TRUE(Plan(Request(in))->placed());
  in.job.cards = 8;
  in.policy.calendar[0].floor = 375'000;
  EXPECT_TRUE(Plan(Request(in))->placed());
}

TEST(SchedPlanner, RunningJobsCountTowardsTheFloor) {
  if (!HaveGlpk()) GTEST_SKIP() << "built without GLPK";
  Instance in = Simple({{"a", "d", 16}, {"a", "n", 16}}, 500'000, 8);
  // Nothing running: cheapest per unit is all domestic.
  auto r0 = Plan(Request(in));
  ASSERT_TRUE(r0.ok() && r0->placed());
  EXPECT_EQ(r0->placement->total_cards, 8);
  EXPECT_EQ(r0->placement->by_type.size(), 1u);
  EXPECT_EQ(r0->placement->by_type[0].type, "d");
  // Now 12 imported cards run elsewhere and only 6 domestic cards are free: (6) / (12 + 8) < 50%.
  Instance in2 = Simple({{"a", "d", 6}, {"a", "n", 16}, {"x", "n", 12}}, 500'000, 8);
  in2.running.push_back({"busy", "t", {{in2.fleet.nodes[2].id, 12}}});
  auto r = Plan(Request(in2));
  ASSERT_TRUE(r.ok());
  ASSERT_FALSE(r->placed());
  EXPECT_EQ(r->infeasible->binding, Binding::kFloor);
  EXPECT_NE(r->infeasible->reason.find("running jobs: 0 of 12 cards domestic"), std::string::npos)
      << r->infeasible->reason;
  EXPECT_NE(r->infeasible->reason.find("needs 10 domestic cards"), std::string::npos) << r->infeasible->reason;
  // A lower floor in force on a later date lets it through; the calendar decides.
  in2.policy.calendar.push_back({100, 250'000});
  PlanRequest req = Request(in2);
  req.day = 100;
  auto later = Plan(req);
  ASSERT_TRUE(later.ok() && later->placed());
  EXPECT_EQ(later->placement->share_before, 0);
  EXPECT_EQ(later->placement->share_after, 6 * kPpmScale / 20);
}

TEST(SchedPlanner, CapacityAndBoundsDiagnoses) {
  if (!HaveGlpk()) GTEST_SKIP() << "built without GLPK";
  Instance in = Simple({{"a", "d", 4}, {"a", "n", 4}, {"b", "d", 2}, {"b", "n", 2}}, 0, 12);
  auto r = Plan(Request(in));
  ASSERT_TRUE(r.ok() && !r->placed());
  EXPECT_EQ(r->infeasible->binding, Binding::kCapacity);
  EXPECT_NE(r->infeasible->reason.find("zone a, has 8 usable free"), std::string::npos) << r->infeasible->reason;
  EXPECT_NE(r->infeasible->fix.find("at most 8 cards"), std::string::npos) << r->infeasible->fix;
  // A per-type minimum no zone can meet.
  in.job.cards = 6;
  in.job.bounds["n"] = TypeBounds{5, std::nullopt};
  r = Plan(Request(in));
  ASSERT_TRUE(r.ok() && !r->placed());
  EXPECT_EQ(r->infeasible->binding, Binding::kBounds);
  EXPECT_NE(r->infeasible->reason.find("bounds.n.min"), std::string::npos) << r->infeasible->reason;
  // A max forces the expensive type even though the domestic one is cheaper.
  in.job.bounds.clear();
  in.job.bounds["d"] = TypeBounds{0, 1};
  in.job.cards = 3;
  r = Plan(Request(in));
  ASSERT_TRUE(r.ok() && r->placed());
  EXPECT_EQ(r->placement->cost_per_hour, 2'400'000 + 2 * 6'800'000);
  // Accepting no type that exists.
  in.job.bounds.clear();
  in.job.compatible = {"moore"};
  r = Plan(Request(in));
  ASSERT_TRUE(r.ok() && !r->placed());
  EXPECT_EQ(r->infeasible->binding, Binding::kCompatibility);
  EXPECT_NE(r->infeasible->reason.find("moore"), std::string::npos);
}

TEST(SchedPlanner, PrefersTheZoneWithTheCheaperMixAndPacksNodes) {
  if (!HaveGlpk()) GTEST_SKIP() << "built without GLPK";
  // Zone a can only offer imported cards; zone b has enough domestic ones.
  Instance in = Simple({{"a", "n", 8}, {"a", "n", 8}, {"b", "d", 2}, {"b", "d", 8}, {"b", "d", 4}}, 0, 10);
  auto r = Plan(Request(in));
  ASSERT_TRUE(r.ok() && r->placed());
  EXPECT_EQ(r->placement->zone, "b");
  EXPECT_EQ(r->placement->cost_per_hour, 10 * 2'400'000);
  // Largest free nodes first: 8 + 2 of the 4-card node.
  ASSERT_EQ(r->placement->by_node.size(), 2u);
  EXPECT_EQ(r->placement->by_node[0].cards, 8);
  EXPECT_EQ(r->placement->by_node[1].cards, 2);
}

TEST(SchedPlanner, ThroughputTargetMinimisesCostPerHour) {
  if (!HaveGlpk()) GTEST_SKIP() << "built without GLPK";
  Instance in = Simple({{"a", "d", 16}, {"a", "n", 16}}, 0, 0);
  // n is 3x as fast as d: 6.8 for 3 units beats 2.4 per unit.
  in.catalog.types[1].throughput["w"] = 3000;
  in.job.cards = 0;
  in.job.throughput_target = 9000;
  auto r = Plan(Request(in));
  ASSERT_TRUE(r.ok() && r->placed());
  EXPECT_EQ(r->placement->cost_per_hour, 3 * 6'800'000);
  EXPECT_EQ(r->placement->total_throughput, 9000);
  // A 50% card floor forces domestic cards in: the cheapest mix reaching 9 units with d >= n.
  in.policy.calendar[0].floor = 500'000;
  r = Plan(Request(in));
  ASSERT_TRUE(r.ok() && r->placed());
  EXPECT_EQ(r->placement->cost_per_hour, 3 * 2'400'000 + 2 * 6'800'000);  // 3 d + 2 n = 9 units, 3 >= 2
}

TEST(SchedPlanner, FleetShareForPreemption) {
  Instance in = Simple({{"a", "d", 8}, {"a", "n", 8}}, 600'000, 1);
  in.running.push_back({"x", "t", {{in.fleet.nodes[0].id, 4}, {in.fleet.nodes[1].id, 4}}});
  auto s = FleetShare(in.catalog, in.fleet, in.policy, in.running, 0);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->share, 500'000);
  EXPECT_FALSE(s->compliant);  // a policy change to 60% makes the fleet non-compliant
  in.policy.calendar[0].floor = 500'000;
  EXPECT_TRUE(FleetShare(in.catalog, in.fleet, in.policy, in.running, 0)->compliant);
}

// Builds without the optional libraries say so instead of failing obscurely.
TEST(SchedPlanner, BuildsWithoutGlpkOrSqliteReportIt) {
  if (HaveGlpk() && HaveSqlite()) GTEST_SKIP() << "built with GLPK and SQLite";
  if (!HaveGlpk()) {
    Instance in = Simple({{"a", "d", 8}}, 0, 4);
    auto r = Plan(Request(in));
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), tessera::Code::kUnsupported);
    EXPECT_NE(r.status().message().find("without GLPK"), std::string::npos);
  }
  if (!HaveSqlite()) {
    auto l = Ledger::Open("/tmp/never-created.db");
    ASSERT_FALSE(l.ok());
    EXPECT_EQ(l.status().code(), tessera::Code::kUnsupported);
    EXPECT_NE(l.status().message().find("without SQLite"), std::string::npos);
  }
}

// Regression: GLPK declared this feasible 1-card job infeasible while the floor row carried ~1e9
// coefficients (throughput unit, a 1/3 floor); the row is now scaled.
TEST(SchedPlanner, LargeFloorCoefficientsStayFeasible) {
  if (!HaveGlpk()) GTEST_SKIP() << "built without GLPK";
  Instance in;
  in.catalog = *ParseCatalog(R"(price_version: x
types:
  - {name: t0, vendor: v0, domestic: true, price_per_card_hour: 6.7, throughput: {w: 1.3, policy: 1.7}}
  - {name: t1, vendor: v1, domestic: false, price_per_card_hour: 1.3, throughput: {w: 1.5, policy: 1.8}}
  - {name: t2, vendor: v2, domestic: false, price_per_card_hour: 5.0, throughput: {w: 1.7, policy: 0.4}}
)");
  in.fleet = *ParseFleet(R"(nodes:
  - {id: a, zone: z0, type: t0, cards: 5}
  - {id: b, zone: z0, type: t1, cards: 3}
  - {id: c, zone: z0, type: t2, cards: 6}
)");
  in.policy = *ParsePolicy("unit: throughput\nweight_class: policy\nfloor: 0.333333\n");
  in.job = *ParseJob("name: j\ntenant: t\nclass: w\ncards: 1\ncompatible: [v0, v1, v2]\n");
  auto r = Plan(Request(in));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_TRUE(r->placed()) << r->infeasible->reason;
  ASSERT_EQ(r->placement->by_type.size(), 1u);
  EXPECT_EQ(r->placement->by_type[0].type, "t0");  // the only type keeping the floor with one card
}

// A fleet edited after loading: a stale zone index is not trusted, a stale id index is reported.
TEST(SchedPlanner, StaleFleetIndexIsNotTrusted) {
  if (!HaveGlpk()) GTEST_SKIP() << "built without GLPK";
  Instance in = Simple({{"a", "n", 8}, {"b", "d", 8}}, 0, 4);
  ASSERT_TRUE(in.fleet.Reindex().ok());
  in.fleet.nodes[0].zone = "b";  // now both nodes are in zone b; zone_of still says a
  in.fleet.nodes[0].type = "d";
  in.job.cards = 16;
  auto r = Plan(Request(in));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_TRUE(r->placed()) << r->infeasible->reason;  // 16 cards fit only if both nodes count as zone b
  EXPECT_EQ(r->placement->zone, "b");
  in.fleet.nodes.erase(in.fleet.nodes.begin());  // index now points past the end for the second node
  in.running.push_back({"x", "t", {{"b-d-1", 1}}});
  auto bad = Plan(Request(in));
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("stale"), std::string::npos) << bad.status().message();
}

// Reproducer: 2 domestic of 3 cards is 66.6666...%, less than 1 ppm under a 66.6667% floor. The
// cheaper mix must be refused exactly (not by retrying GLPK), leaving 3 domestic cards at 9.00/h.
TEST(SchedPlanner, NearFloorReproducerIsDecidedExactly) {
  if (!HaveGlpk()) GTEST_SKIP() << "built without GLPK";
  Instance in;
  in.catalog = *ParseCatalog(R"(currency: CNY
price_version: probe
types:
  - {name: dom, vendor: ascend, domestic: true, price_per_card_hour: 3, throughput: {llm-train: 1}}
  - {name: for, vendor: nvidia, domestic: false, price_per_card_hour: 1, throughput: {llm-train: 1}}
)");
  in.fleet =
      *ParseFleet("nodes:\n  - {id: d0, zone: a, type: dom, cards: 8}\n  - {id: f0, zone: a, type: for, cards: 8}\n");
  in.policy = *ParsePolicy("unit: cards\nfloor: 66.6667%\n");
  in.job = *ParseJob("name: a\ntenant: probe\nclass: llm-train\ncards: 3\ncompatible: [ascend, nvidia]\n");
  auto r = Plan(Request(in));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_TRUE(r->placed()) << r->infeasible->reason;
  ASSERT_EQ(r->placement->by_type.size(), 1u);
  EXPECT_EQ(r->placement->by_type[0].type, "dom");
  EXPECT_EQ(r->placement->by_type[0].cards, 3);
  EXPECT_EQ(r->placement->cost_per_hour, 9'000'000);
  in.fleet.nodes[0].cards = 2;  // d0 at 2 cards: 2 of 3 is all there is, and it misses the floor
  r = Plan(Request(in));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_FALSE(r->placed());
  EXPECT_EQ(r->infeasible->binding, Binding::kFloor);
}

namespace {

// Floors of k/n rounded up to the policy's precision (ppm): the share k/n of a placement lies a fraction of
// a ppm under them, so only exact arithmetic tells the two apart.
Instance NearFloorInstance(std::mt19937_64& rng) {
  auto uni = [&](int64_t a, int64_t b) { return std::uniform_int_distribution<int64_t>(a, b)(rng); };
  Instance in = RandomInstance(rng);
  int64_t n = uni(2, 40), k = uni(1, n - 1);
  Ppm f = static_cast<Ppm>((static_cast<i128>(k) * kPpmScale + n - 1) / n);
  in.policy.calendar.assign(1, {0, f});
  // More cards and fewer running jobs than RandomInstance, so that placements land near the floor.
  for (auto& node : in.fleet.nodes) node.cards = uni(1, 8);
  if (uni(0, 1)) in.running.clear();
  for (auto it = in.running.begin(); it != in.running.end();) {
    const Node* node = in.fleet.Find(it->allocations[0].node);
    if (it->allocations[0].cards > node->cards) it->allocations[0].cards = node->cards;
    ++it;
  }
  if (in.job.cards > 0) in.job.cards = uni(1, 12);
  return in;
}

}  // namespace

TEST(SchedPlanner, NearFloorInstancesAgreeWithBruteForce) {
  if (!HaveGlpk()) GTEST_SKIP() << "built without GLPK";
  std::mt19937_64 rng(13);
  const int64_t searches_before = internal::ExactSearchCount();
  int placed = 0, infeasible = 0;
  for (int i = 0; i < 3000; ++i) {
    Instance in = NearFloorInstance(rng);
    SCOPED_TRACE(fmt::format("near-floor instance {}", i));
    auto r = Plan(Request(in));
    ASSERT_TRUE(r.ok()) << r.status().ToString() << "\n" << Describe(in);
    Brute b = BruteForce(in);
    ASSERT_EQ(r->placed(), b.feasible) << (r->placed() ? "planner placed, brute force found nothing"
                                                       : "planner: " + r->infeasible->reason)
                                       << "\n"
                                       << Describe(in);
    if (!b.feasible) {
      ++infeasible;
      continue;
    }
    ++placed;
    const Placement& p = *r->placement;
    CheckPlacement(in, p);
    i128 cost = p.cost_per_hour, work = p.total_throughput;
    if (in.job.cards > 0) {
      EXPECT_TRUE(cost * b.work == b.cost * work) << Describe(in);
    } else {
      EXPECT_EQ(static_cast<int64_t>(cost), static_cast<int64_t>(b.cost)) << Describe(in);
    }
    Instance after = in;
    after.running.push_back({"new", "t", p.by_node});
    auto share = FleetShare(in.catalog, in.fleet, in.policy, after.running, 0);
    ASSERT_TRUE(share.ok()) << share.status().ToString();
    EXPECT_TRUE(share->compliant) << Describe(in);
  }
  EXPECT_GT(placed, 600);
  EXPECT_GT(infeasible, 300);
  std::printf("near-floor instances: %d placed, %d infeasible; %lld solves decided by the exact search\n", placed,
              infeasible, static_cast<long long>(internal::ExactSearchCount() - searches_before));
}

namespace {

// "would fit with at most N cards" -> N, or -1 when the fix does not say it.
int64_t FitsWithAtMost(const std::string& fix) {
  const std::string key = "would fit with at most ";
  auto pos = fix.find(key);
  if (pos == std::string::npos) return -1;
  return std::stoll(fix.substr(pos + key.size()));
}

// The largest card count below the job's that fits, by brute force over every count; -1 when none does.
int64_t LargestFittingByBruteForce(Instance in) {
  for (int64_t n = in.job.cards - 1; n >= 1; --n) {
    in.job.cards = n;
    if (BruteForce(in).feasible) return n;
  }
  return -1;
}

}  // namespace

// Fitting is not monotone in the card count: 10 imported cards run and the floor is 50%, so a job needs at
// least 10 cards (all domestic) to keep it, and zone a has 12 domestic cards free. Fits: 10, 11, 12 only.
TEST(SchedPlanner, LargestFittingCardCountIsFoundWhenFittingIsNotMonotone) {
  if (!HaveGlpk()) GTEST_SKIP() << "built without GLPK";
  Instance in = Simple({{"a", "d", 12}, {"x", "n", 10}}, 500'000, 30);
  in.running.push_back({"busy", "t", {{in.fleet.nodes[1].id, 10}}});
  auto r = Plan(Request(in));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_FALSE(r->placed());
  EXPECT_EQ(FitsWithAtMost(r->infeasible->fix), 12) << r->infeasible->fix;
  EXPECT_EQ(LargestFittingByBruteForce(in), 12);
  in.job.cards = 12;
  EXPECT_TRUE(Plan(Request(in))->placed());
}

TEST(SchedPlanner, LargestFittingCardCountMatchesExhaustiveSearch) {
  if (!HaveGlpk()) GTEST_SKIP() << "built without GLPK";
  std::mt19937_64 rng(14);
  int checked = 0, some_fit = 0;
  for (int i = 0; i < 3000 && checked < 400; ++i) {
    Instance in = i % 2 ? NearFloorInstance(rng) : RandomInstance(rng);
    if (in.job.cards == 0) continue;
    auto r = Plan(Request(in));
    ASSERT_TRUE(r.ok()) << r.status().ToString() << "\n" << Describe(in);
    if (r->placed()) continue;
    ++checked;
    SCOPED_TRACE(fmt::format("instance {}", i));
    int64_t want = LargestFittingByBruteForce(in);
    if (want > 0) ++some_fit;
    EXPECT_EQ(FitsWithAtMost(r->infeasible->fix), want) << r->infeasible->fix << "\n" << Describe(in);
  }
  EXPECT_GT(checked, 200);
  EXPECT_GT(some_fit, 50);
}

// The exact integer search that decides whenever GLPK's solution misses a constraint in integers, run alone
// on every solve (GLPK ignored): same feasibility, same optimum and same "at most N cards" as brute force.
TEST(SchedPlanner, ExactSearchAloneMatchesBruteForce) {
  if (!HaveGlpk()) GTEST_SKIP() << "built without GLPK";
  struct Force {
    Force() { internal::SetForceExactSearch(true); }
    ~Force() { internal::SetForceExactSearch(false); }
  } force;
  const int64_t searches_before = internal::ExactSearchCount();
  std::mt19937_64 rng(1313);
  int placed = 0, infeasible = 0, fixes = 0;
  for (int i = 0; i < 3000; ++i) {
    Instance in = i % 2 ? NearFloorInstance(rng) : RandomInstance(rng);
    SCOPED_TRACE(fmt::format("instance {}", i));
    auto r = Plan(Request(in));
    ASSERT_TRUE(r.ok()) << r.status().ToString() << "\n" << Describe(in);
    Brute b = BruteForce(in);
    ASSERT_EQ(r->placed(), b.feasible) << Describe(in);
    if (!b.feasible) {
      ++infeasible;
      if (in.job.cards > 0) {
        int64_t want = LargestFittingByBruteForce(in);
        if (want > 0) ++fixes;
        EXPECT_EQ(FitsWithAtMost(r->infeasible->fix), want) << r->infeasible->fix << "\n" << Describe(in);
      }
      continue;
    }
    ++placed;
    const Placement& p = *r->placement;
    CheckPlacement(in, p);
    i128 cost = p.cost_per_hour, work = p.total_throughput;
    if (in.job.cards > 0) {
      EXPECT_TRUE(cost * b.work == b.cost * work) << Describe(in);
    } else {
      EXPECT_EQ(static_cast<int64_t>(cost), static_cast<int64_t>(b.cost)) << Describe(in);
    }
    EXPECT_GE(p.share_after, p.floor);
  }
  EXPECT_GT(internal::ExactSearchCount() - searches_before, 3000);
  EXPECT_GT(placed, 800);
  EXPECT_GT(infeasible, 400);
  EXPECT_GT(fixes, 100);
}

// The exact search alone on large fleets near a throughput-weighted floor: 4,800 cards of 4 types and 60,000
// cards of 6 types (3 domestic, priced above the imported ones, so the floor binds). It finishes, within its
// node limit, with the same optimum as the integer program, for both job kinds and several floors.
TEST(SchedPlanner, ExactSearchAgreesWithTheSolverOnLargeFleets) {
  if (!HaveGlpk()) GTEST_SKIP() << "built without GLPK";
  struct Case {
    const char* catalog;
    const char* fleet;
    std::vector<const char*> floors, sizes;
  };
  const std::vector<Case> cases = {
      {R"(price_version: x
types:
  - {name: a, vendor: va, domestic: true, price_per_card_hour: 2.4, throughput: {w: 0.7, p: 0.7}}
  - {name: b, vendor: vb, domestic: true, price_per_card_hour: 3.1, throughput: {w: 1.1, p: 1.3}}
  - {name: c, vendor: vc, domestic: false, price_per_card_hour: 6.8, throughput: {w: 2.0, p: 1.9}}
  - {name: d, vendor: vd, domestic: false, price_per_card_hour: 4.3, throughput: {w: 1.2, p: 1.7}}
)",
       R"(nodes:
  - {id: a, zone: z, type: a, cards: 8, count: 150}
  - {id: b, zone: z, type: b, cards: 8, count: 150}
  - {id: c, zone: z, type: c, cards: 8, count: 150}
  - {id: d, zone: z, type: d, cards: 8, count: 150}
  - {id: e, zone: y, type: a, cards: 8, count: 100}
  - {id: f, zone: y, type: c, cards: 8, count: 100}
)",
       {"66.6667%"},
       {"cards: 2999", "cards: 2000", "throughput: 3000", "throughput: 3000.5"}},
      {R"(price_version: x
types:
  - {name: a, vendor: va, domestic: true, price_per_card_hour: 6.4, throughput: {w: 0.7, p: 0.7}}
  - {name: b, vendor: vb, domestic: true, price_per_card_hour: 7.1, throughput: {w: 1.1, p: 1.3}}
  - {name: c, vendor: vc, domestic: false, price_per_card_hour: 6.8, throughput: {w: 2.0, p: 1.9}}
  - {name: d, vendor: vd, domestic: false, price_per_card_hour: 4.3, throughput: {w: 1.2, p: 1.7}}
  - {name: e, vendor: ve, domestic: true, price_per_card_hour: 8.7, throughput: {w: 1.4, p: 1.1}}
  - {name: g, vendor: vg, domestic: false, price_per_card_hour: 5.9, throughput: {w: 1.8, p: 2.1}}
)",
       R"(nodes:
  - {id: a, zone: z, type: a, cards: 8, count: 1250}
  - {id: b, zone: z, type: b, cards: 8, count: 1250}
  - {id: c, zone: z, type: c, cards: 8, count: 1250}
  - {id: d, zone: z, type: d, cards: 8, count: 1250}
  - {id: e, zone: y, type: a, cards: 8, count: 100}
  - {id: f, zone: y, type: c, cards: 8, count: 100}
  - {id: g, zone: z, type: e, cards: 8, count: 1250}
  - {id: h, zone: z, type: g, cards: 8, count: 1250}
)",
       {"66.6667%", "33.3333%", "57.1429%", "12.5%"},
       {"cards: 29999", "throughput: 30000.5"}},
  };
  for (const auto& k : cases) {
    Instance in;
    in.catalog = *ParseCatalog(k.catalog);
    in.fleet = *ParseFleet(k.fleet);
    std::string compatible;
    for (const auto& t : in.catalog.types) compatible += (compatible.empty() ? "" : ", ") + t.vendor;
    for (const char* floor : k.floors)
      for (const char* size : k.sizes) {
        SCOPED_TRACE(fmt::format("{} types, floor {}, {}", in.catalog.types.size(), floor, size));
        in.policy = *ParsePolicy(std::string("unit: throughput\nweight_class: p\nfloor: ") + floor + "\n");
        in.job =
            *ParseJob(std::string("name: j\ntenant: t\nclass: w\n") + size + "\ncompatible: [" + compatible + "]\n");
        auto glpk = Plan(Request(in));
        internal::SetForceExactSearch(true);
        auto exact = Plan(Request(in));
        internal::SetForceExactSearch(false);
        ASSERT_TRUE(glpk.ok() && exact.ok()) << glpk.status().ToString() << " / " << exact.status().ToString();
        ASSERT_TRUE(glpk->placed() && exact->placed());
        CheckPlacement(in, *exact->placement);
        i128 c1 = glpk->placement->cost_per_hour, w1 = glpk->placement->total_throughput;
        i128 c2 = exact->placement->cost_per_hour, w2 = exact->placement->total_throughput;
        if (in.job.cards > 0) {
          EXPECT_TRUE(c1 * w2 == c2 * w1) << static_cast<int64_t>(c1) << "/" << static_cast<int64_t>(w1) << " vs "
                                          << static_cast<int64_t>(c2) << "/" << static_cast<int64_t>(w2);
        } else {
          EXPECT_EQ(static_cast<int64_t>(c1), static_cast<int64_t>(c2));
        }
        EXPECT_GE(exact->placement->share_after, exact->placement->floor);
      }
  }
}

namespace {

// The planner's order between placements of equal optimum (docs/sched.md): most domestic share units, then the
// lowest cost per hour, then the zone listed first in the fleet. Lower is better.
struct TieKey {
  i128 domestic = 0;
  i128 cost = 0;
  int zone = 0;
  bool operator<(const TieKey& o) const {
    if (domestic != o.domestic) return domestic > o.domestic;
    if (cost != o.cost) return cost < o.cost;
    return zone < o.zone;
  }
  bool operator==(const TieKey& o) const { return domestic == o.domestic && cost == o.cost && zone == o.zone; }
};

int ZoneOrder(const Instance& in, const std::string& zone) {
  std::vector<std::string> seen;
  for (const auto& n : in.fleet.nodes)
    if (std::find(seen.begin(), seen.end(), n.zone) == seen.end()) seen.push_back(n.zone);
  return static_cast<int>(std::find(seen.begin(), seen.end(), zone) - seen.begin());
}

// By brute force: the best key among all optimal placements; nullopt when nothing fits.
std::optional<TieKey> BestTieKey(const Instance& in) {
  Brute b = BruteForce(in);
  if (!b.feasible) return std::nullopt;
  const auto& types = in.catalog.types;
  std::vector<int> cand;
  for (size_t t = 0; t < types.size(); ++t)
    if (in.job.Accepts(types[t]) && types[t].throughput.count(in.job.workload_class))
      cand.push_back(static_cast<int>(t));
  std::map<std::string, int64_t> used;
  i128 rdom = 0, rtot = 0;
  auto weight = [&](const AcceleratorType& a) -> int64_t {
    return in.policy.unit == ShareUnit::kCards ? 1 : a.throughput.at(in.policy.weight_class);
  };
  for (const auto& r : in.running)
    for (const auto& a : r.allocations) {
      used[a.node] += a.cards;
      const auto* t = in.catalog.Find(in.fleet.Find(a.node)->type);
      rtot += static_cast<i128>(weight(*t)) * a.cards;
      if (t->domestic) rdom += static_cast<i128>(weight(*t)) * a.cards;
    }
  std::map<std::string, std::vector<int64_t>> free;
  for (const auto& n : in.fleet.nodes) {
    auto& v = free[n.zone];
    v.resize(cand.size(), 0);
    for (size_t c = 0; c < cand.size(); ++c)
      if (types[cand[c]].name == n.type) v[c] += n.cards - used[n.id];
  }
  const Ppm floor = in.policy.FloorAt(0);
  std::optional<TieKey> best;
  for (const auto& [zone, fr] : free) {
    std::vector<int64_t> x(cand.size(), 0);
    while (true) {
      bool ok = true;
      i128 n = 0, cost = 0, work = 0, dom = 0, tot = 0;
      for (size_t c = 0; c < cand.size(); ++c) {
        const auto& a = types[cand[c]];
        auto bd = in.job.bounds.find(a.name);
        if (bd != in.job.bounds.end() && (x[c] < bd->second.min || (bd->second.max && x[c] > *bd->second.max)))
          ok = false;
        n += x[c];
        cost += static_cast<i128>(a.price_per_card_hour) * x[c];
        work += static_cast<i128>(a.throughput.at(in.job.workload_class)) * x[c];
        tot += static_cast<i128>(weight(a)) * x[c];
        if (a.domestic) dom += static_cast<i128>(weight(a)) * x[c];
      }
      if (in.job.cards > 0 && n != in.job.cards) ok = false;
      if (in.job.throughput_target > 0 && work < in.job.throughput_target) ok = false;
      if ((rdom + dom) * kPpmScale < static_cast<i128>(floor) * (rtot + tot)) ok = false;
      bool optimal = in.job.cards > 0 ? cost * b.work == b.cost * work : cost == b.cost;
      if (ok && n > 0 && optimal) {
        TieKey k{dom, cost, ZoneOrder(in, zone)};
        if (!best || k < *best) best = k;
      }
      size_t c = 0;
      while (c < cand.size() && x[c] == fr[c]) x[c++] = 0;
      if (c == cand.size()) break;
      ++x[c];
    }
  }
  return best;
}

TieKey KeyOf(const Instance& in, const Placement& p) {
  TieKey k;
  for (const auto& t : p.by_type) {
    const auto* a = in.catalog.Find(t.type);
    int64_t w = in.policy.unit == ShareUnit::kCards ? 1 : a->throughput.at(in.policy.weight_class);
    if (a->domestic) k.domestic += static_cast<i128>(w) * t.cards;
  }
  k.cost = p.cost_per_hour;
  k.zone = ZoneOrder(in, p.zone);
  return k;
}

}  // namespace

// Between equal optima the planner prefers the most domestic share units, then the lowest cost
// per hour, then the zone listed first in the fleet (GLPK alone took the imported card at an equal price).
TEST(SchedPlanner, EqualOptimaPreferDomesticThenCheaperThenFirstZone) {
  if (!HaveGlpk()) GTEST_SKIP() << "built without GLPK";
  auto run = [](const std::string& fleet, const std::string& size) {
    Instance in;
    in.catalog = *ParseCatalog(R"(price_version: x
types:
  - {name: dom, vendor: d, domestic: true, price_per_card_hour: 2, throughput: {w: 1}}
  - {name: imp, vendor: f, domestic: false, price_per_card_hour: 2, throughput: {w: 1}}
  - {name: dom2, vendor: d, domestic: true, price_per_card_hour: 4, throughput: {w: 2}}
)");
    in.fleet = *ParseFleet(fleet);
    in.policy = *ParsePolicy("floor: 0%\n");
    in.job = *ParseJob("name: j\ntenant: t\nclass: w\n" + size + "\ncompatible: [d, f]\n");
    auto r = Plan(Request(in));
    EXPECT_TRUE(r.ok() && r->placed());
    std::string s = r->placement->zone + ":";
    for (const auto& t : r->placement->by_type) s += fmt::format(" {}={}", t.type, t.cards);
    return s;
  };
  // Domestic and imported at the same price and speed: domestic, whichever the fleet lists first.
  EXPECT_EQ(run("nodes:\n  - {id: f0, zone: a, type: imp, cards: 8}\n  - {id: d0, zone: a, type: dom, cards: 8}\n",
                "cards: 4"),
            "a: dom=4");
  EXPECT_EQ(run("nodes:\n  - {id: f0, zone: a, type: imp, cards: 8}\n  - {id: d0, zone: a, type: dom, cards: 8}\n",
                "throughput: 4"),
            "a: dom=4");
  // ... also when they are in different zones: the domestic share comes before the zone order.
  EXPECT_EQ(run("nodes:\n  - {id: f0, zone: b, type: imp, cards: 8}\n  - {id: d0, zone: a, type: dom, cards: 8}\n",
                "cards: 4"),
            "a: dom=4");
  // Two equal zones: the one listed first in the fleet.
  EXPECT_EQ(run("nodes:\n  - {id: d1, zone: b, type: dom, cards: 8}\n  - {id: d0, zone: a, type: dom, cards: 8}\n",
                "cards: 4"),
            "b: dom=4");
  // Same cost per unit of work (2 per unit on dom, 4 for 2 units on dom2), same domestic cards: the cheaper hour.
  EXPECT_EQ(run("nodes:\n  - {id: e0, zone: a, type: dom2, cards: 8}\n  - {id: d0, zone: a, type: dom, cards: 8}\n",
                "cards: 4"),
            "a: dom=4");
}

TEST(SchedPlanner, EqualOptimaFollowTheDocumentedOrderOnRandomInstances) {
  if (!HaveGlpk()) GTEST_SKIP() << "built without GLPK";
  std::mt19937_64 rng(16);
  int checked = 0;
  for (int i = 0; i < 3000; ++i) {
    Instance in = i % 2 ? NearFloorInstance(rng) : RandomInstance(rng);
    // Equal prices and throughputs make ties common.
    for (auto& t : in.catalog.types) {
      t.price_per_card_hour = t.price_per_card_hour / 2'000'000 * 1'000'000 + 1'000'000;
      t.throughput["w"] = (t.throughput["w"] / 1000 + 1) * 1000;
    }
    SCOPED_TRACE(fmt::format("instance {}", i));
    auto r = Plan(Request(in));
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    auto want = BestTieKey(in);
    ASSERT_EQ(r->placed(), want.has_value()) << Describe(in);
    if (!want) continue;
    TieKey got = KeyOf(in, *r->placement);
    EXPECT_TRUE(got == *want) << "domestic " << static_cast<int64_t>(got.domestic) << " vs "
                              << static_cast<int64_t>(want->domestic) << ", cost " << static_cast<int64_t>(got.cost)
                              << " vs " << static_cast<int64_t>(want->cost) << ", zone " << got.zone << " vs "
                              << want->zone << "\n"
                              << Describe(in);
    if (!(got == *want)) break;
    ++checked;
  }
  EXPECT_GT(checked, 1000);
}

// ---- a job that names its model -------------------------------------------------------------------------

namespace {

// The performance model's figures on every type of `in` (random ones) and a model on its job (a card count).
void AddModel(Instance& in, std::mt19937_64& rng) {
  auto uni = [&](int64_t a, int64_t b) { return std::uniform_int_distribution<int64_t>(a, b)(rng); };
  for (auto& t : in.catalog.types)
    t.model = CardFigures{static_cast<double>(uni(50, 1000)), 0.4, static_cast<double>(uni(50, 400)),
                          static_cast<double>(uni(800, 3400)), uni(1, 4)};
  in.catalog.model = HostFigures{static_cast<double>(uni(1, 16) * 25), 25, 2, 20, 200};
  const auto& classes = tessera::sched::perf::ModelClasses();
  static const double kParams[] = {1e8, 7e9, 1.3e11};
  in.job.model = JobModel{kParams[uni(0, 2)], classes[uni(0, classes.size() - 1)].name, 0};
  if (in.job.cards == 0) {
    in.job.throughput_target = 0;
    in.job.cards = uni(1, 10);
  }
}

}  // namespace

TEST(SchedPlanner, ModelJobsMatchBruteForceOnRandomInstances) {
  if (!HaveGlpk()) GTEST_SKIP() << "built without GLPK";
  std::mt19937_64 rng(20261202);
  int placed = 0, infeasible = 0, with_floor = 0, differs = 0;
  for (int i = 0; i < 600; ++i) {
    Instance in = RandomInstance(rng);
    AddModel(in, rng);
    SCOPED_TRACE(fmt::format("instance {} (model {:.3g}, {})", i, in.job.model->params, in.job.model->model_class));
    auto r = Plan(Request(in));
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    Brute b = BruteForce(in);
    ASSERT_EQ(r->placed(), b.feasible) << Describe(in);
    ++(b.feasible ? placed : infeasible);
    if (!b.feasible) continue;  // the diagnosis is the linear planner's (ModelJobThatDoesNotFitIsDiagnosedAsBefore)
    with_floor += in.policy.FloorAt(0) > 0;
    const Placement& p = *r->placement;
    CheckPlacement(in, p);
    EXPECT_GE(p.share_after, p.floor);
    ASSERT_TRUE(p.predicted.has_value());
    EXPECT_EQ(p.predicted->lattice_step, 1) << "small fleets: every mix";
    EXPECT_NEAR(p.predicted->cost_per_million_tokens, b.cost_per_million_tokens, 1e-9 * b.cost_per_million_tokens)
        << Describe(in);
    // The reported prediction is the model's for the placed mix.
    std::vector<const AcceleratorType*> types;
    std::vector<int64_t> cards;
    for (const auto& t : p.by_type) {
      types.push_back(in.catalog.Find(t.type));
      cards.push_back(t.cards);
    }
    auto pr =
        tessera::sched::perf::Predict(*tessera::sched::perf::MixScenario(in.catalog, *in.job.model, types, cards));
    ASSERT_TRUE(pr.ok());
    EXPECT_DOUBLE_EQ(p.predicted->tokens_per_s, pr->tokens_per_s);
    EXPECT_EQ(p.predicted->binding, pr->binding);
    // How often the model's choice differs from the sum of the catalog's throughputs.
    Instance linear = in;
    linear.job.model.reset();
    auto lr = Plan(Request(linear));
    ASSERT_TRUE(lr.ok() && lr->placed());
    if (lr->placement->cost_per_hour != p.cost_per_hour || lr->placement->total_throughput != p.total_throughput)
      ++differs;
  }
  EXPECT_GT(placed, 150);
  EXPECT_GT(infeasible, 30);
  EXPECT_GT(with_floor, 80);
  EXPECT_GT(differs, 20) << "the model should change some placements";
}

TEST(SchedPlanner, ModelSearchOnALatticeFindsTheBestMixOfALargerFleet) {
  if (!HaveGlpk()) GTEST_SKIP() << "built without GLPK";
  // 2 types, 400 cards: more mixes than the search predicts one by one, so a lattice and then moves. Against
  // every mix predicted (the brute force), for four classes and sizes.
  const std::pair<const char*, double> jobs[] = {
      {"dp", 7e9}, {"zero1", 1.3e11}, {"zero3", 7e9}, {"zero3-offload", 1.3e11}};
  for (const auto& [name, params] : jobs) {
    SCOPED_TRACE(fmt::format("{} {:.3g}", name, params));
    Instance in = Simple({{"z", "d", 400}, {"z", "n", 400}}, 250'000, 400);
    in.catalog.types[0].model = CardFigures{320, 0.4, 196, 1600, 8};
    in.catalog.types[1].model = CardFigures{989, 0.4, 200, 3350, 8};
    in.catalog.model = HostFigures{200, 25, 2, 20, 200};
    in.job.model = JobModel{params, name, 0};
    auto r = Plan(Request(in));
    ASSERT_TRUE(r.ok() && r->placed()) << (r.ok() ? r->infeasible->reason : r.status().ToString());
    const PredictedStep& st = *r->placement->predicted;
    EXPECT_GT(st.lattice_step, 1);
    EXPECT_LT(st.mixes_evaluated, 301) << "fewer predictions than mixes";
    Brute b = BruteForce(in);
    ASSERT_TRUE(b.feasible);
    EXPECT_NEAR(st.cost_per_million_tokens, b.cost_per_million_tokens, 1e-9 * b.cost_per_million_tokens);
  }
}

TEST(SchedPlanner, ModelJobsNeedTheCatalogsFigures) {
  if (!HaveGlpk()) GTEST_SKIP() << "built without GLPK";
  Instance in = Simple({{"z", "d", 8}, {"z", "n", 8}}, 500'000, 8);
  in.job.source = "job.yaml";
  in.job.model = JobModel{7e9, "dp", 6};
  auto r = Plan(Request(in));
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("job.yaml:6: model: the catalog <catalog> has no host figures"),
            std::string::npos)
      << r.status().ToString();
  in.catalog.model = HostFigures{200, 25, 2, 20, 200};
  in.catalog.types[0].model = CardFigures{320, 0.4, 196, 1600, 8};
  r = Plan(Request(in));
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("type 'n' has no model figures"), std::string::npos) << r.status().ToString();
  in.catalog.types[1].model = CardFigures{989, 0.4, 200, 3350, 8};
  in.job.model->model_class = "zero4";  // built in code, past the loader's check
  r = Plan(Request(in));
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("'zero4' is not a model class (one of: dp, zero1"), std::string::npos)
      << r.status().ToString();
  in.job.model->model_class = "zero3";
  in.job.model->params = 0;
  r = Plan(Request(in));
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("model size 0 is not a positive number"), std::string::npos)
      << r.status().ToString();
  in.job.model->params = 7e9;
  in.job.cards = 0;
  in.job.throughput_target = 8000;
  r = Plan(Request(in));
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("placed by a card count"), std::string::npos) << r.status().ToString();
}

TEST(SchedPlanner, ModelJobThatDoesNotFitIsDiagnosedAsBefore) {
  if (!HaveGlpk()) GTEST_SKIP() << "built without GLPK";
  Instance in = Simple({{"a", "d", 3}, {"a", "n", 10}}, 600'000, 10);
  in.catalog.model = HostFigures{200, 25, 2, 20, 200};
  in.catalog.types[0].model = CardFigures{320, 0.4, 196, 1600, 8};
  in.catalog.types[1].model = CardFigures{989, 0.4, 200, 3350, 8};
  Instance with = in;
  with.job.model = JobModel{7e9, "dp", 0};
  auto a = Plan(Request(in)), b = Plan(Request(with));
  ASSERT_TRUE(a.ok() && b.ok());
  ASSERT_FALSE(a->placed());
  ASSERT_FALSE(b->placed());
  EXPECT_EQ(b->infeasible->binding, a->infeasible->binding);
  EXPECT_EQ(b->infeasible->reason, a->infeasible->reason);
  EXPECT_EQ(b->infeasible->fix, a->infeasible->fix);
}
