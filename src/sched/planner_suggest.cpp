// sched/planner_suggest: what the planner says when a job does not fit — the binding constraint (per-type
// bounds, capacity of one zone, the domestic-share floor, or only their combination) with the numbers behind it,
// and what would make it fit: the largest card count or throughput target that fits, the highest floor under
// which it fits (bisection, exact because fitting is monotone in both), or waiting for cards to free up.
#ifdef TESSERA_HAVE_GLPK

#include <algorithm>

#include "sched/planner_model.hpp"

namespace tessera::sched::internal {
namespace {

int64_t CeilDiv(i128 a, i128 b) {  // b > 0
  if (a <= 0) return static_cast<int64_t>(a / b);
  return static_cast<int64_t>((a + b - 1) / b);
}

std::string Units(ShareUnit u, i128 v) {
  if (u == ShareUnit::kCards) return fmt::format("{} domestic cards", static_cast<int64_t>(v));
  return fmt::format("{} domestic throughput-weighted units", FormatThroughput(static_cast<int64_t>(v)));
}

// The largest v in [lo, hi] for which fits(v) holds, where fitting is monotone (true up to some value,
// false above it), by bisection; `none` when no value fits. fits returns Result<bool>.
template <typename T, typename F>
Result<T> LargestFitting(T lo, T hi, T none, F&& fits) {
  T found = none;
  while (lo <= hi) {
    const T mid = lo + (hi - lo) / 2;
    TSR_ASSIGN_OR_RETURN(bool ok, fits(mid));
    if (ok) {
      found = mid;
      lo = mid + 1;
    } else {
      hi = mid - 1;
    }
  }
  return found;
}

}  // namespace

// Names the binding constraint and what would make the job fit; called when Optimise found nothing.
Result<Infeasible> Diagnose(const Model& m, const Job& job, ShareUnit unit) {
  Infeasible inf;
  const size_t nz = m.zones.size(), nc = m.cands.size();
  std::vector<std::string> names;
  for (const auto& c : m.cands) names.push_back(c.type->name);
  const std::string what =
      m.cards > 0 ? fmt::format("{} cards", m.cards) : fmt::format("a throughput of {}", FormatThroughput(m.target));
  // Per-type minima.
  int64_t sum_min = 0;
  for (const auto& c : m.cands) sum_min += c.min;
  if (m.cards > 0 && sum_min > m.cards) {
    inf.binding = Binding::kBounds;
    inf.reason = fmt::format("the per-type minima add up to {} cards, more than the job's {}", sum_min, m.cards);
    inf.fix = "lower the bounds' min values or raise the card count";
    return inf;
  }
  // Per zone: which check fails first (bounds, capacity), and free capacity.
  int best_zone = -1;
  int64_t best_cap = -1;
  std::vector<bool> passes(nz, false);
  std::string bounds_reason;
  int bounds_fail = 0;
  for (size_t z = 0; z < nz; ++z) {
    bool ok = true;
    for (size_t c = 0; c < nc; ++c)
      if (m.Upper(z, c) < m.cands[c].min) {
        if (bounds_reason.empty())
          bounds_reason = fmt::format("needs at least {} {} cards (bounds.{}.min) in one zone; zone {} has {} free",
                                      m.cands[c].min, names[c], names[c], m.zones[z], m.cells[z][c].free);
        ok = false;
      }
    if (!ok) {
      ++bounds_fail;
      continue;
    }
    i128 cap = 0;
    for (size_t c = 0; c < nc; ++c)
      cap += m.cards > 0 ? m.Upper(z, c) : static_cast<i128>(m.Upper(z, c)) * m.cands[c].tp;
    if (cap > best_cap) {
      best_cap = static_cast<int64_t>(cap);
      best_zone = static_cast<int>(z);
    }
    passes[z] = m.cards > 0 ? cap >= m.cards : cap >= m.target;
  }
  if (bounds_fail == static_cast<int>(nz)) {
    inf.binding = Binding::kBounds;
    inf.reason = bounds_reason;
    inf.fix = "lower the bounds' min values, or wait for cards of that type to free up";
    return inf;
  }
  bool any_pass = std::any_of(passes.begin(), passes.end(), [](bool b) { return b; });
  if (!any_pass) {
    inf.binding = Binding::kCapacity;
    std::string free_by_type;
    for (size_t c = 0; c < nc; ++c)
      free_by_type += fmt::format("{}{} {}", c ? ", " : "", m.cells[best_zone][c].free, names[c]);
    if (m.cards > 0) {
      inf.reason = fmt::format("needs {} in one zone of types {}; the largest, zone {}, has {} usable free ({})", what,
                               Join(names), m.zones[best_zone], best_cap, free_by_type);
    } else {
      inf.reason = fmt::format("needs {} in one zone of types {}; the largest, zone {}, offers {} ({} free)", what,
                               Join(names), m.zones[best_zone], FormatThroughput(best_cap), free_by_type);
    }
  } else if (m.floor > 0) {
    inf.binding = Binding::kFloor;
    // Domestic capacity per passing zone, and the domestic units the job would need (card-count mode with
    // the cards unit has a closed form; otherwise report the best floor reachable).
    int dz = -1;
    i128 dom_free_best = -1;
    for (size_t z = 0; z < nz; ++z) {
      if (!passes[z]) continue;
      i128 d = 0;
      for (size_t c = 0; c < nc; ++c)
        if (m.cands[c].domestic) d += static_cast<i128>(m.Upper(z, c)) * m.cands[c].weight;
      if (d > dom_free_best) {
        dom_free_best = d;
        dz = static_cast<int>(z);
      }
    }
    if (m.cards > 0 && unit == ShareUnit::kCards) {
      i128 need = CeilDiv(static_cast<i128>(m.floor) * (m.run_total + m.cards) - kPpmScale * m.run_dom, kPpmScale);
      inf.reason = fmt::format(
          "needs {} in one zone to keep the {} floor (running jobs: {} of {} cards domestic); "
          "zone {} has {} free",
          Units(unit, need), FormatShare(m.floor), static_cast<int64_t>(m.run_dom), static_cast<int64_t>(m.run_total),
          m.zones[dz], static_cast<int64_t>(dom_free_best));
    } else {
      inf.reason = fmt::format(
          "cannot keep the {} floor ({} unit) in any zone; zone {} has the most domestic "
          "capacity free: {}",
          FormatShare(m.floor), ShareUnitName(unit), m.zones[dz], Units(unit, dom_free_best));
    }
  } else {
    inf.binding = Binding::kCombination;
    inf.reason = "each constraint can be met alone but not all together in one zone";
  }
  // What would fit: a smaller job, or a lower floor.
  std::vector<std::string> fixes;
  if (m.cards > 0) {
    TSR_ASSIGN_OR_RETURN(int64_t found, LargestFittingCards(m, std::max<int64_t>(sum_min, 1), m.cards - 1));
    if (found > 0) fixes.push_back(fmt::format("would fit with at most {} cards", found));
  } else {
    // A placement reaching a target reaches every smaller one: fitting is monotone in the target.
    Model t = m;
    TSR_ASSIGN_OR_RETURN(int64_t found, LargestFitting<int64_t>(1, m.target - 1, -1, [&](int64_t v) {
                           t.target = v;
                           return Feasible(t);
                         }));
    if (found > 0)
      fixes.push_back(fmt::format("would fit with a throughput target of at most {}", FormatThroughput(found)));
  }
  if (m.floor > 0) {
    // A lower floor admits every placement a higher one does: monotone, so bisection is exact.
    Model t = m;
    t.floor = 0;
    TSR_ASSIGN_OR_RETURN(bool fits_without, Feasible(t));
    if (fits_without) {
      TSR_ASSIGN_OR_RETURN(Ppm found, LargestFitting<Ppm>(0, m.floor - 1, 0, [&](Ppm v) {
                             t.floor = v;
                             return Feasible(t);
                           }));
      // Round down to 0.1% for display so that the printed floor really fits.
      Ppm shown = found / 1000 * 1000;
      fixes.push_back(fmt::format("would fit under a floor of at most {}", FormatShare(shown)));
    }
  }
  if (inf.binding == Binding::kCapacity) fixes.push_back("or wait: the job queues until cards free up");
  (void)job;
  for (size_t i = 0; i < fixes.size(); ++i) inf.fix += (i ? "; " : "") + fixes[i];
  if (inf.fix.empty()) inf.fix = "no smaller size or lower floor makes it fit; free cards of an accepted type";
  return inf;
}

}  // namespace tessera::sched::internal

#endif  // TESSERA_HAVE_GLPK
