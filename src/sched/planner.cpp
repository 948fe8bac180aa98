// sched/planner: places one job on the fleet at the lowest cost per unit of work while the fleet-wide
// domestic-share floor holds. Nodes are first aggregated to free cards per (zone, type); an integer program
// (GLPK glp_intopt) then chooses cards per (zone, type) plus one zone-selection binary per zone; the cards
// are finally assigned to nodes greedily (largest free first, so the job spans the fewest nodes).
//
// With a card count N the objective sum(p*x) / sum(tp*x) is a ratio; it is minimised exactly by Dinkelbach
// iteration: solve min sum((p - l*tp) * x) for l = the ratio of the incumbent, until no solution with a
// strictly lower ratio exists (checked in exact integer arithmetic). With a throughput target the objective
// sum(p*x) is linear. When nothing fits, Diagnose() names the binding constraint and what would make it fit.
//
// Feasibility is decided in integers: the floor is one exact integer row (ExactFloorRow), every GLPK solution
// is checked against all constraints in 128-bit arithmetic, and when one misses (GLPK's tolerance is ~1e-7, a
// placement can miss the floor by less) an exact integer search decides (ExactSearch). Between equal optima,
// TieBreak() takes the most domestic share units, then the lowest cost per hour, then the first zone.
//
// A job that names its model (Job::model) is placed instead by the performance model's predicted tokens/s per
// unit of money of the mix, under the same constraints (planner_perf.cpp); the rest is shared.
//
// This file: the inputs → Model (candidate types, free cards per zone, running jobs' share) and the placement
// on nodes; the integer program is planner_milp.cpp, the exact search planner_exact.cpp, the suggestions when
// nothing fits planner_suggest.cpp (their shared model: planner_model.hpp).
#include <fmt/format.h>

#include <algorithm>
#include <unordered_map>

#include "sched/inputs_internal.hpp"
#include "sched/planner_model.hpp"
#include "sched/sched.hpp"

namespace tessera::sched {
namespace {

using internal::Alloc;
using internal::Cand;
using internal::i128;
using internal::Join;
using internal::Model;
using internal::ZoneCell;

// Share units of one allocation of `cards` on a node of type `t`.
int64_t ShareWeight(const Policy& p, const AcceleratorType& t) {
  if (p.unit == ShareUnit::kCards) return 1;
  auto it = t.throughput.find(p.weight_class);
  return it == t.throughput.end() ? 0 : it->second;
}

// Per node: its catalog type and its zone, as indices (strings compared once per run of equal values).
struct FleetIndex {
  std::vector<int> type;
  std::vector<int> zone;
  std::vector<std::string> zones;  // first-seen order
};

Result<FleetIndex> IndexFleet(const Catalog& catalog, const Fleet& fleet) {
  FleetIndex ix;
  ix.type.resize(fleet.nodes.size());
  // Use the loaders' zone index (Fleet::Reindex) when it matches the nodes; comparing short equal strings is
  // much cheaper than hashing them.
  bool have_zones = fleet.zone_of.size() == fleet.nodes.size();
  for (size_t i = 0; have_zones && i < fleet.nodes.size(); ++i) {
    int z = fleet.zone_of[i];
    have_zones = z >= 0 && static_cast<size_t>(z) < fleet.zones.size() && fleet.zones[z] == fleet.nodes[i].zone;
  }
  if (have_zones) {
    ix.zone = fleet.zone_of;
    ix.zones = fleet.zones;
  } else {
    ix.zone.resize(fleet.nodes.size());
  }
  std::unordered_map<std::string, int> zix;
  const std::string* last_type = nullptr;
  int lt = -1;
  for (size_t i = 0; i < fleet.nodes.size(); ++i) {
    const Node& n = fleet.nodes[i];
    if (!last_type || n.type != *last_type) {  // few types: a linear scan beats hashing
      lt = -1;
      for (size_t t = 0; t < catalog.types.size(); ++t)
        if (catalog.types[t].name == n.type) lt = static_cast<int>(t);
      if (lt < 0) return internal::UnknownNodeType(fleet, n, catalog);
      last_type = &n.type;
    }
    ix.type[i] = lt;
    if (!have_zones) {
      auto [it, inserted] = zix.emplace(n.zone, static_cast<int>(ix.zones.size()));
      if (inserted) ix.zones.push_back(n.zone);
      ix.zone[i] = it->second;
    }
  }
  return ix;
}

// Running jobs: cards used per node (by fleet index) and the fleet-wide share units.
Status Occupancy(const Catalog& catalog, const Fleet& fleet, const FleetIndex& ix, const Policy& policy,
                 const std::vector<RunningJob>* running, std::vector<int64_t>* used, i128* dom, i128* total) {
  used->assign(fleet.nodes.size(), 0);
  *dom = *total = 0;
  if (!running) return Status::Ok();
  std::vector<int64_t> weight(catalog.types.size());
  for (size_t t = 0; t < catalog.types.size(); ++t) weight[t] = ShareWeight(policy, catalog.types[t]);
  for (const auto& j : *running) {
    for (const auto& a : j.allocations) {
      auto it = fleet.index.find(a.node);
      if (it == fleet.index.end()) return internal::UnknownRunningNode(j, a, fleet);
      if (it->second >= fleet.nodes.size() || fleet.nodes[it->second].id != a.node)
        return InvalidArgument(
            fmt::format("fleet {}: its node index is stale (call Fleet::Reindex() after editing "
                        "nodes)",
                        fleet.source));
      const Node& n = fleet.nodes[it->second];
      int64_t& u = (*used)[it->second];
      u += a.cards;
      if (u > n.cards) return internal::OverAllocated(j, a, u, n.cards);
      int t = ix.type[it->second];
      i128 w = static_cast<i128>(weight[t]) * a.cards;
      *total += w;
      if (catalog.types[t].domestic) *dom += w;
    }
  }
  return Status::Ok();
}

// With a throughput unit every type needs a throughput for the policy's weight class.
Status CheckWeightClass(const Catalog& catalog, const Policy& policy) {
  if (policy.unit != ShareUnit::kThroughput) return Status::Ok();
  for (const auto& t : catalog.types)
    if (!t.throughput.count(policy.weight_class)) return internal::NoWeightClassThroughput(policy, t, catalog);
  return Status::Ok();
}

Ppm ShareOf(i128 dom, i128 total) {
  if (total <= 0) return kPpmScale;
  return static_cast<Ppm>(dom * kPpmScale / total);
}

}  // namespace

bool HaveGlpk() {
#ifdef TESSERA_HAVE_GLPK
  return true;
#else
  return false;
#endif
}

Result<PlanResult> PlanMove(const PlanRequest& request, const std::string& moving) {
  std::vector<RunningJob> rest;
  bool found = false;
  if (request.running)
    for (const auto& r : *request.running) {
      if (r.name == moving)
        found = true;
      else
        rest.push_back(r);
    }
  if (!found) return NotFound(fmt::format("cannot plan a move of '{}': it is not among the running jobs", moving));
  PlanRequest req = request;
  req.running = &rest;
  return Plan(req);
}

Result<ShareStatus> FleetShare(const Catalog& catalog, const Fleet& fleet, const Policy& policy,
                               const std::vector<RunningJob>& running, int64_t day) {
  TSR_RETURN_IF_ERROR(CheckWeightClass(catalog, policy));
  TSR_ASSIGN_OR_RETURN(FleetIndex ix, IndexFleet(catalog, fleet));
  std::vector<int64_t> used;
  i128 dom, total;
  TSR_RETURN_IF_ERROR(Occupancy(catalog, fleet, ix, policy, &running, &used, &dom, &total));
  ShareStatus s;
  s.unit = policy.unit;
  s.floor = policy.FloorAt(day);
  s.domestic_units = static_cast<int64_t>(dom);
  s.total_units = static_cast<int64_t>(total);
  s.share = ShareOf(dom, total);
  s.compliant = dom * kPpmScale >= static_cast<i128>(s.floor) * total;
  return s;
}

Result<PlanResult> Plan(const PlanRequest& req) {
  if (!req.catalog || !req.fleet || !req.policy || !req.job)
    return InvalidArgument("Plan: catalog, fleet, policy and job are required");
  const Catalog& catalog = *req.catalog;
  const Fleet& fleet = *req.fleet;
  const Policy& policy = *req.policy;
  const Job& job = *req.job;
  if ((job.cards > 0) == (job.throughput_target > 0))
    return InvalidArgument(fmt::format("{}: job '{}' needs exactly one of cards and throughput", job.source, job.name));
  TSR_RETURN_IF_ERROR(CheckWeightClass(catalog, policy));
  for (const auto& [name, b] : job.bounds) {
    const AcceleratorType* t = catalog.Find(name);
    if (!t) return internal::UnknownBoundsType(job, name, b, catalog);
    if (!job.Accepts(*t) && b.min > 0)
      return InvalidArgument(fmt::format("{}: is {} but the job does not accept {} (compatible: {})",
                                         internal::Where(job.source, b.line, "bounds." + name + ".min"), b.min, name,
                                         Join(job.compatible)));
  }

  Model m;
  m.cards = job.cards;
  m.target = job.throughput_target;
  m.floor = policy.FloorAt(req.day);
  std::vector<int> cand_of_type(catalog.types.size(), -1);
  std::vector<std::string> no_class;
  for (size_t i = 0; i < catalog.types.size(); ++i) {
    const AcceleratorType& t = catalog.types[i];
    if (!job.Accepts(t)) continue;
    auto it = t.throughput.find(job.workload_class);
    if (it == t.throughput.end()) {
      no_class.push_back(t.name);
      continue;
    }
    Cand c;
    c.type = &t;
    c.price = t.price_per_card_hour;
    c.tp = it->second;
    c.weight = ShareWeight(policy, t);
    c.domestic = t.domestic;
    if (auto b = job.bounds.find(t.name); b != job.bounds.end()) {
      c.min = b->second.min;
      c.max = b->second.max ? *b->second.max : -1;
    }
    cand_of_type[i] = static_cast<int>(m.cands.size());
    m.cands.push_back(c);
  }

  TSR_ASSIGN_OR_RETURN(FleetIndex ix, IndexFleet(catalog, fleet));
  std::vector<int64_t> used;
  TSR_RETURN_IF_ERROR(Occupancy(catalog, fleet, ix, policy, req.running, &used, &m.run_dom, &m.run_total));
  m.zones = ix.zones;
  m.cells.assign(m.zones.size(), std::vector<ZoneCell>(m.cands.size()));
  bool any_node = false;
  for (size_t i = 0; i < fleet.nodes.size(); ++i) {
    int c = cand_of_type[ix.type[i]];
    if (c < 0) continue;
    any_node = true;
    int64_t free = fleet.nodes[i].cards - used[i];
    if (free <= 0) continue;
    ZoneCell& cell = m.cells[ix.zone[i]][c];
    cell.free += free;
    cell.nodes.push_back(i);
  }

  PlanResult out;
  if (m.cands.empty() || !any_node) {
    Infeasible inf;
    inf.binding = Binding::kCompatibility;
    std::vector<std::string> fleet_types;
    for (const auto& t : catalog.types) fleet_types.push_back(t.name + " (" + t.vendor + ")");
    if (m.cands.empty()) {
      inf.reason = fmt::format("no catalog type matches compatible: [{}]{}", Join(job.compatible),
                               no_class.empty() ? std::string()
                                                : fmt::format(" with a throughput for class '{}' (missing for {})",
                                                              job.workload_class, Join(no_class)));
      inf.fix = fmt::format("accept one of the catalog's types: {}{}", Join(fleet_types),
                            no_class.empty() ? "" : ", or add the class's throughput to the catalog");
    } else {
      std::vector<std::string> names;
      for (const auto& c : m.cands) names.push_back(c.type->name);
      inf.reason = fmt::format("no node in the fleet has an accepted type ({})", Join(names));
      inf.fix = "accept more vendors or types, or add such nodes to the fleet";
    }
    out.infeasible = inf;
    return out;
  }

#ifndef TESSERA_HAVE_GLPK
  return Unsupported("tessera was built without GLPK (install libglpk-dev and rebuild): the planner needs it");
#else
  int rounds = 0;
  std::optional<Alloc> best;
  std::optional<PredictedStep> predicted;
  if (job.model) {  // by the performance model's predicted tokens/s per unit of money (planner_perf.cpp)
    TSR_ASSIGN_OR_RETURN(auto choice, internal::OptimiseByModel(m, catalog, job, &rounds));
    if (choice) {
      best = choice->alloc;
      predicted = choice->step;
    }
  } else {
    TSR_ASSIGN_OR_RETURN(best, internal::Optimise(m, &rounds));
  }
  if (!best) {
    TSR_ASSIGN_OR_RETURN(out.infeasible, internal::Diagnose(m, job, policy.unit));
    return out;
  }

  Placement p;
  p.zone = m.zones[best->zone];
  p.unit = policy.unit;
  p.floor = m.floor;
  p.share_before = ShareOf(m.run_dom, m.run_total);
  p.solver_rounds = rounds;
  i128 dom = 0, tot = 0, cost = 0, work = 0;
  for (size_t c = 0; c < m.cands.size(); ++c) {
    int64_t x = best->x[c];
    if (x == 0) continue;
    const Cand& cd = m.cands[c];
    TypeAlloc ta;
    ta.type = cd.type->name;
    ta.domestic = cd.domestic;
    ta.cards = x;
    ta.cost_per_hour = static_cast<Money>(static_cast<i128>(cd.price) * x);
    ta.throughput = static_cast<Throughput>(static_cast<i128>(cd.tp) * x);
    p.by_type.push_back(ta);
    p.total_cards += x;
    cost += static_cast<i128>(cd.price) * x;
    work += static_cast<i128>(cd.tp) * x;
    tot += static_cast<i128>(cd.weight) * x;
    if (cd.domestic) dom += static_cast<i128>(cd.weight) * x;
    // Nodes: largest free first, then by id, so the job spans as few nodes as possible.
    std::vector<std::pair<int64_t, size_t> > nodes;
    for (size_t i : m.cells[best->zone][c].nodes) nodes.push_back({fleet.nodes[i].cards - used[i], i});
    std::sort(nodes.begin(), nodes.end(), [&](const auto& a, const auto& b) {
      if (a.first != b.first) return a.first > b.first;
      return fleet.nodes[a.second].id < fleet.nodes[b.second].id;
    });
    int64_t left = x;
    for (const auto& [free, i] : nodes) {
      if (left == 0) break;
      int64_t take = std::min(free, left);
      p.by_node.push_back({fleet.nodes[i].id, take});
      left -= take;
    }
    if (left != 0) return InternalError("planner: node assignment ran out of free cards");
  }
  p.cost_per_hour = static_cast<Money>(cost);
  p.total_throughput = static_cast<Throughput>(work);
  p.cost_per_work_hour = work > 0 ? static_cast<Money>((cost * kThroughputScale * 2 + work) / (2 * work)) : 0;
  p.share_after = ShareOf(m.run_dom + dom, m.run_total + tot);
  p.predicted = std::move(predicted);
  out.placement = std::move(p);
  return out;
#endif
}

}  // namespace tessera::sched
