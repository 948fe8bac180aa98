// sched/planner_perf: the placement of a job that names its model (Job::model): among the card mixes that keep
// every constraint of the planner's Model (card count, per-type bounds, free cards of one zone, the floor),
// the one of the lowest cost per hour over the performance model's predicted tokens/s (sched/perf_model), i.e.
// the most predicted tokens per unit of money. The prediction is not linear in the mix, so this is a search,
// not an integer program: every mix when there are few enough (then exact, as the tests' brute force checks),
// otherwise a lattice of mixes (step s, a power of two) and then moves of d = s, s/2, ..., 1 cards between two
// types from the best while they improve. The linear planner's optimum (Optimise) seeds it and decides, exactly,
// whether anything fits at all. Equal predictions: the most domestic share units, the lowest cost per hour,
// then the first zone (as TieBreak orders the linear planner's optima).
#ifdef TESSERA_HAVE_GLPK
#include <fmt/format.h>

#include <algorithm>
#include <functional>
#include <map>

#include "sched/inputs_internal.hpp"
#include "sched/perf_model.hpp"
#include "sched/planner_model.hpp"

namespace tessera::sched::internal {
namespace {

// The lattice's size: at most max(kMinLatticeMixes, kLatticeRanks / cards) mixes (a prediction costs about
// the square of the largest island).
constexpr int64_t kLatticeRanks = int64_t{1} << 17;
constexpr int64_t kMinLatticeMixes = 64;

class Search {
 public:
  Search(const Model& m, const Catalog& catalog, const JobModel& jm) : m_(m), catalog_(catalog), jm_(jm) {
    for (const auto& c : m.cands) types_.push_back(c.type);
  }

  // The mix x (cards per candidate): its predicted cost per hour / tokens per s, or nullopt where it breaks a
  // constraint; the best so far is kept.
  Result<std::optional<double>> Value(const std::vector<int64_t>& x) {
    if (auto it = seen_.find(x); it != seen_.end()) return it->second;
    std::optional<double> v;
    Alloc a;
    a.x = x;
    for (size_t z = 0; z < m_.zones.size() && a.zone < 0; ++z) {
      Alloc in{static_cast<int>(z), x};
      if (Satisfies(m_, in)) a.zone = static_cast<int>(z);
    }
    if (a.zone >= 0 && m_.cards > 0) {
      TSR_ASSIGN_OR_RETURN(perf::Scenario s, perf::MixScenario(catalog_, jm_, types_, x));
      s.sum_of_parts = false;
      TSR_ASSIGN_OR_RETURN(perf::Prediction p, perf::Predict(s));
      ++evaluated_;
      v = static_cast<double>(a.Cost(m_)) / p.tokens_per_s;
      i128 dom = 0;
      for (size_t c = 0; c < x.size(); ++c)
        if (m_.cands[c].domestic) dom += static_cast<i128>(m_.cands[c].weight) * x[c];
      const i128 cost = a.Cost(m_);
      if (!best_ || *v < best_value_ ||
          (*v == best_value_ && (dom > best_dom_ || (dom == best_dom_ && cost < best_->Cost(m_))))) {
        best_ = a;
        best_value_ = *v;
        best_dom_ = dom;
      }
    }
    seen_[x] = v;
    return v;
  }

  // Every mix on the lattice of step `step` (per type from its minimum, and its maximum; the last type takes
  // the rest).
  Status Lattice(int64_t step) {
    const size_t n = types_.size();
    std::vector<int64_t> x(n, 0);
    std::function<Status(size_t, int64_t)> walk = [&](size_t c, int64_t left) -> Status {
      if (c + 1 == n) {
        x[c] = left;
        if (left >= Lo(c) && left <= Hi(c)) return Value(x).status();
        return Status::Ok();
      }
      for (int64_t v : Values(c, step)) {
        if (v > left) break;
        x[c] = v;
        TSR_RETURN_IF_ERROR(walk(c + 1, left - v));
      }
      return Status::Ok();
    };
    return walk(0, m_.cards);
  }

  // The smallest power of two whose lattice has at most `limit` mixes.
  int64_t StepFor(int64_t limit) const {
    for (int64_t step = 1;; step *= 2) {
      double mixes = 1;
      for (size_t c = 0; c + 1 < types_.size(); ++c) mixes *= static_cast<double>(Values(c, step).size());
      if (mixes <= static_cast<double>(limit) || step >= m_.cards) return step;
    }
  }

  // Moves of d cards from one type to another, from the best, while one improves; d = step, step/2, ..., 1.
  Status Refine(int64_t step) {
    for (int64_t d = step; d >= 1; d /= 2) {
      for (bool moved = true; moved;) {
        moved = false;
        const std::vector<int64_t> from = best_->x;
        for (size_t i = 0; i < from.size(); ++i)
          for (size_t j = 0; j < from.size(); ++j) {
            if (i == j || from[i] - d < 0) continue;
            std::vector<int64_t> y = from;
            y[i] -= d;
            y[j] += d;
            TSR_RETURN_IF_ERROR(Value(y).status());
          }
        moved = best_->x != from;
      }
    }
    return Status::Ok();
  }

  const std::optional<Alloc>& best() const { return best_; }
  int64_t evaluated() const { return evaluated_; }

 private:
  int64_t Lo(size_t c) const { return m_.cands[c].min; }
  int64_t Hi(size_t c) const {
    int64_t hi = 0;
    for (size_t z = 0; z < m_.zones.size(); ++z) hi = std::max(hi, m_.Upper(z, c));
    return std::min(hi, m_.cards);
  }
  std::vector<int64_t> Values(size_t c, int64_t step) const {
    std::vector<int64_t> v;
    for (int64_t x = Lo(c); x <= Hi(c); x += step) v.push_back(x);
    if (!v.empty() && v.back() != Hi(c)) v.push_back(Hi(c));
    return v;
  }

  const Model& m_;
  const Catalog& catalog_;
  const JobModel& jm_;
  std::vector<const AcceleratorType*> types_;
  std::map<std::vector<int64_t>, std::optional<double>> seen_;
  std::optional<Alloc> best_;
  double best_value_ = 0;
  i128 best_dom_ = 0;
  int64_t evaluated_ = 0;
};

}  // namespace

Result<std::optional<ModelChoice>> OptimiseByModel(const Model& m, const Catalog& catalog, const Job& job,
                                                   int* rounds) {
  const JobModel& jm = *job.model;
  if (m.cards <= 0 || m.target > 0)
    return InvalidArgument(fmt::format("{}: job '{}' names its model: it is placed by a card count, give 'cards'",
                                       Where(job.source, jm.line, "model"), job.name));
  // Every candidate's figures, before any search (the error names the job's model and the type).
  for (const auto& c : m.cands)
    if (auto s = perf::MixScenario(catalog, jm, {c.type}, {1}); !s.ok())
      return InvalidArgument(fmt::format("{}: {}", Where(job.source, jm.line, "model"), s.status().message()));
  // The linear planner's optimum: whether anything fits, and the search's first mix.
  TSR_ASSIGN_OR_RETURN(std::optional<Alloc> seed, Optimise(m, rounds));
  if (!seed) return std::optional<ModelChoice>();
  Search search(m, catalog, jm);
  TSR_RETURN_IF_ERROR(search.Value(seed->x).status());
  const int64_t step = search.StepFor(std::max(kMinLatticeMixes, kLatticeRanks / m.cards));
  TSR_RETURN_IF_ERROR(search.Lattice(step));
  if (step > 1) TSR_RETURN_IF_ERROR(search.Refine(step));
  if (!search.best())
    return InternalError("planner: the linear planner's placement broke a constraint of the model's search");

  ModelChoice out;
  out.alloc = *search.best();
  TSR_ASSIGN_OR_RETURN(perf::Scenario s, perf::MixScenario(
                                             catalog, jm,
                                             [&] {
                                               std::vector<const AcceleratorType*> t;
                                               for (const auto& c : m.cands) t.push_back(c.type);
                                               return t;
                                             }(),
                                             out.alloc.x));
  TSR_ASSIGN_OR_RETURN(perf::Prediction p, perf::Predict(s));
  PredictedStep& st = out.step;
  st.step_s = p.step_s;
  st.compute_s = p.compute_s;
  st.exposed_comm_s = p.exposed_comm_s;
  st.optimizer_s = p.optimizer_s;
  st.tokens_per_s = p.tokens_per_s;
  st.sum_of_parts_tokens_per_s = p.sum_of_parts_tokens_per_s;
  st.hybrid_over_parts = p.hybrid_over_parts;
  st.cost_per_million_tokens = p.cost_per_million_tokens;
  st.binding = p.binding;
  st.binding_detail = p.binding_detail;
  st.mixes_evaluated = search.evaluated();
  st.lattice_step = step;
  return std::optional<ModelChoice>(std::move(out));
}

}  // namespace tessera::sched::internal

#endif  // TESSERA_HAVE_GLPK
