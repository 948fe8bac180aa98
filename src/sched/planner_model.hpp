// sched/planner_model: the planner's integer model, shared by its pieces (internal to src/sched):
// planner.cpp (inputs → Model, the placement on nodes, the public Plan/FleetShare), planner_milp.cpp (the
// integer program in GLPK and its Dinkelbach rounds), planner_exact.cpp (the exact integer search near the
// floor, and the tie-break among optima), planner_perf.cpp (the search by the performance model's prediction,
// for a job that names its model) and planner_suggest.cpp (why a job does not fit and what would).
// The solver pieces exist only in a build with GLPK (TESSERA_HAVE_GLPK); Plan() reports Unsupported without.
#pragma once

#include <fmt/format.h>

#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "sched/sched.hpp"

namespace tessera::sched::internal {

using i128 = __int128;

struct Cand {  // a candidate accelerator type for the job
  const AcceleratorType* type = nullptr;
  Money price = 0;
  Throughput tp = 0;   // per card, job's class
  int64_t weight = 0;  // per card, share unit (1 or throughput of the policy's class, milli)
  bool domestic = false;
  int64_t min = 0;
  int64_t max = -1;  // -1: unbounded
};

struct ZoneCell {
  int64_t free = 0;
  std::vector<size_t> nodes;  // fleet indices with free > 0
};

// Everything the integer program needs, after aggregation.
struct Model {
  std::vector<Cand> cands;
  std::vector<std::string> zones;
  std::vector<std::vector<ZoneCell>> cells;  // [zone][cand]
  int64_t cards = 0;                         // card-count mode when > 0: the job takes this many cards ...
  int64_t cards_lo = 0;                      // ... or, when 0 < cards_lo < cards, any count in [cards_lo, cards]
  Throughput target = 0;                     // throughput mode when > 0
  Ppm floor = 0;
  i128 run_dom = 0, run_total = 0;  // running jobs, share units
  int64_t Upper(size_t z, size_t c) const {
    int64_t u = cells[z][c].free;
    if (cands[c].max >= 0) u = std::min(u, cands[c].max);
    return u;
  }
  int64_t CardsLo() const { return cards_lo > 0 && cards_lo < cards ? cards_lo : cards; }
};

// An allocation: cards per (zone, cand); only one zone is non-zero.
struct Alloc {
  int zone = -1;
  std::vector<int64_t> x;  // per cand
  i128 Cost(const Model& m) const {
    i128 s = 0;
    for (size_t c = 0; c < x.size(); ++c) s += static_cast<i128>(m.cands[c].price) * x[c];
    return s;
  }
  i128 Work(const Model& m) const {
    i128 s = 0;
    for (size_t c = 0; c < x.size(); ++c) s += static_cast<i128>(m.cands[c].tp) * x[c];
    return s;
  }
};

// Exact check of every constraint (the solver works in floating point).
inline bool Satisfies(const Model& m, const Alloc& a) {
  if (a.zone < 0) return false;
  i128 n = 0, work = 0, dom = 0, tot = 0;
  for (size_t c = 0; c < m.cands.size(); ++c) {
    int64_t x = a.x[c];
    if (x < 0 || x > m.Upper(a.zone, c) || x < m.cands[c].min) return false;
    n += x;
    work += static_cast<i128>(m.cands[c].tp) * x;
    tot += static_cast<i128>(m.cands[c].weight) * x;
    if (m.cands[c].domestic) dom += static_cast<i128>(m.cands[c].weight) * x;
  }
  if (m.cards > 0 && (n < m.CardsLo() || n > m.cards)) return false;
  if (m.target > 0 && work < m.target) return false;
  return (m.run_dom + dom) * kPpmScale >= static_cast<i128>(m.floor) * (m.run_total + tot);
}

// The floor as one exact integer row, Σ a[c]·x[c] ≥ b over the job's cards x. From
// S·(R_dom + Σ_dom w·x) ≥ f·(R_all + Σ w·x):  a[c] = (S·dom_c − f)·w_c,  b = f·R_all − S·R_dom. With a fixed card
// count N and one weight w for every candidate (always so with `unit: cards`) the row gets f·w·(Σ x − N) = 0
// added, which leaves a[c] = S·w on domestic types and 0 on the others. Coefficients and b are then divided by
// the coefficients' gcd, b rounded up (exact: the left-hand side is an integer). For `unit: cards` and a card
// count the row reads "at least D domestic cards".
struct FloorRow {
  bool active = false;
  std::vector<i128> a;
  i128 b = 0;
};

// ---- planner_exact.cpp (GLPK builds) --------------------------------------------------------------------
// The floor row of `m` (above).
FloorRow ExactFloorRow(const Model& m);
// The exact optimum of Σ obj[c]·x[c] over the model's integer points that keep `floor` (integer arithmetic
// only; nullopt when there is none). Call with GlpkMutex() held (the search asks GLPK for LP multipliers).
Result<std::optional<Alloc>> ExactOptimum(const Model& m, const FloorRow& floor, const std::vector<i128>& obj);
// Among the placements as good as `best`, the preferred one (most domestic share units, then the lowest cost
// per hour, then the first zone); `best` when none is. Call with GlpkMutex() held.
Alloc TieBreak(const Model& m, const Alloc& best);

// ---- planner_milp.cpp (GLPK builds) ---------------------------------------------------------------------
// Held by every use of GLPK (its environment is not thread-safe).
std::mutex& GlpkMutex();
// The optimum of the model, nullopt when infeasible. `rounds` counts MILPs solved.
Result<std::optional<Alloc>> Optimise(const Model& m, int* rounds);
// Whether any placement fits.
Result<bool> Feasible(const Model& m);
// The largest card count in [lo, hi] that fits, or -1.
Result<int64_t> LargestFittingCards(const Model& m, int64_t lo, int64_t hi);

// ---- planner_perf.cpp (GLPK builds) ---------------------------------------------------------------------
// A job that names its model (job.model, a card count): the mix of the lowest cost per hour over the
// performance model's predicted tokens/s under every constraint of `m`, with that prediction; nullopt when
// nothing fits (decided by Optimise, which also seeds the search; `rounds` counts its MILPs).
struct ModelChoice {
  Alloc alloc;
  PredictedStep step;
};
Result<std::optional<ModelChoice>> OptimiseByModel(const Model& m, const Catalog& catalog, const Job& job, int* rounds);

// ---- planner_suggest.cpp (GLPK builds) ------------------------------------------------------------------
// Names the binding constraint and what would make the job fit; called when Optimise found nothing.
Result<Infeasible> Diagnose(const Model& m, const Job& job, ShareUnit unit);

// "a, b, c".
inline std::string Join(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : ", ") + x;
  return s;
}

}  // namespace tessera::sched::internal
