// sched/planner_milp: the planner's integer program. One GLPK problem per Model (Milp): cards per (zone, type)
// and a zone-selection binary per zone, the card count or throughput target, per-type bounds, and the floor as
// its exact integer row. With a card count the objective cost/work is a ratio, minimised exactly by Dinkelbach
// iteration (Optimise); with a throughput target it is the cost per hour. Every GLPK solution is checked in
// integers, and the exact search (planner_exact.cpp) decides when one misses; equal optima go to TieBreak.
// Feasible and LargestFittingCards answer the suggestions' questions (planner_suggest.cpp).
#include <algorithm>
#include <atomic>
#include <cmath>
#include <mutex>

#include "sched/planner_internal.hpp"
#include "sched/planner_model.hpp"

#ifdef TESSERA_HAVE_GLPK
#include <glpk.h>
#endif

namespace tessera::sched::internal {

#ifdef TESSERA_HAVE_GLPK

namespace {

std::atomic<bool> g_force_exact{false};
std::atomic<int64_t> g_exact_searches{0};

// One GLPK problem for a Model; the objective can be replaced between solves.
class Milp {
 public:
  explicit Milp(const Model& m) : m_(m), row_(ExactFloorRow(m)) {
    glp_term_out(GLP_OFF);
    lp_ = glp_create_prob();
    glp_set_obj_dir(lp_, GLP_MIN);
    const size_t nz = m.zones.size(), nc = m.cands.size();
    // Columns: x[z][c] then y[z].
    xcol_.assign(nz, std::vector<int>(nc, 0));
    for (size_t z = 0; z < nz; ++z) {
      bool zone_ok = true;
      for (size_t c = 0; c < nc; ++c)
        if (m.Upper(z, c) < m.cands[c].min) zone_ok = false;
      if (!zone_ok) continue;  // a per-type minimum cannot be met here: no columns for this zone
      int any = 0;
      for (size_t c = 0; c < nc; ++c) {
        int64_t u = m.Upper(z, c);
        if (u <= 0) continue;
        int j = glp_add_cols(lp_, 1);
        glp_set_col_kind(lp_, j, GLP_IV);
        glp_set_col_bnds(lp_, j, GLP_DB, 0.0, static_cast<double>(u));
        xcol_[z][c] = j;
        ++any;
      }
      if (!any) continue;
      int y = glp_add_cols(lp_, 1);
      glp_set_col_kind(lp_, y, GLP_BV);
      ycol_.push_back({static_cast<int>(z), y});
    }
    // sum y = 1
    {
      std::vector<int> ind{0};
      std::vector<double> val{0};
      for (auto [z, y] : ycol_) {
        ind.push_back(y);
        val.push_back(1.0);
      }
      AddRow(ind, val, GLP_FX, 1.0, 1.0);
    }
    for (auto [z, y] : ycol_) {
      std::vector<int> sind{0};
      std::vector<double> sval{0};
      for (size_t c = 0; c < nc; ++c) {
        int j = xcol_[z][c];
        if (!j) continue;
        // x <= u*y ; x >= min*y
        AddRow({0, j, y}, {0, 1.0, -static_cast<double>(m.Upper(z, c))}, GLP_UP, 0.0, 0.0);
        if (m.cands[c].min > 0) AddRow({0, j, y}, {0, 1.0, -static_cast<double>(m.cands[c].min)}, GLP_LO, 0.0, 0.0);
        sind.push_back(j);
        sval.push_back(m.cards > 0 ? 1.0 : static_cast<double>(m.cands[c].tp));
      }
      sind.push_back(y);
      if (m.cards > 0 && m.CardsLo() == m.cards) {
        sval.push_back(-static_cast<double>(m.cards));
        AddRow(sind, sval, GLP_FX, 0.0, 0.0);
      } else if (m.cards > 0) {  // a range of card counts: lo*y <= sum x <= hi*y
        sval.push_back(-static_cast<double>(m.cards));
        AddRow(sind, sval, GLP_UP, 0.0, 0.0);
        sval.back() = -static_cast<double>(m.CardsLo());
        AddRow(sind, sval, GLP_LO, 0.0, 0.0);
      } else {
        sval.push_back(-static_cast<double>(m.target));
        Normalise(&sval, nullptr);
        AddRow(sind, sval, GLP_LO, 0.0, 0.0);
      }
    }
    // Domestic floor: the exact row sum a*x >= b, given to GLPK as sum a*x >= b - 1/2. Its left-hand side is an
    // integer, so no integer point is gained; the half only keeps the solver's tolerance from cutting off
    // points exactly at the floor. Whatever GLPK returns is then checked in integers (Solve).
    if (row_.active) {
      std::vector<int> ind{0};
      std::vector<double> val{0};
      for (auto [z, y] : ycol_)
        for (size_t c = 0; c < nc; ++c) {
          int j = xcol_[z][c];
          if (!j || row_.a[c] == 0) continue;
          ind.push_back(j);
          val.push_back(static_cast<double>(row_.a[c]));
        }
      double rhs = static_cast<double>(row_.b) - 0.5;
      // GLPK misjudges feasibility with coefficients ~1e9 (seen: a feasible 1-card job declared infeasible),
      // so the row is scaled to a largest coefficient of 1.
      Normalise(&val, &rhs);
      AddRow(ind, val, GLP_LO, rhs, 0.0);
    }
  }
  ~Milp() { glp_delete_prob(lp_); }
  Milp(const Milp&) = delete;
  Milp& operator=(const Milp&) = delete;

  bool empty() const { return ycol_.empty(); }

  // Objective sum(coef[c] * x[z][c]), exact; GLPK gets coef / divisor.
  void SetObjective(std::vector<i128> coef, double divisor = 1.0) {
    obj_ = std::move(coef);
    for (auto [z, y] : ycol_)
      for (size_t c = 0; c < obj_.size(); ++c)
        if (xcol_[z][c]) glp_set_obj_coef(lp_, xcol_[z][c], static_cast<double>(obj_[c]) / divisor);
  }

  // Solves; nullopt when infeasible. GLPK's solution is final when it keeps every constraint in integer
  // arithmetic (Satisfies). When it does not — the floor row can be off by less than the solver's tolerance —
  // the exact search decides; there is no retry on floating-point rounding. GLPK's "infeasible" is final: the
  // floor row it sees is looser than the exact one, so it can only admit more points, never fewer.
  Result<std::optional<Alloc>> Solve() {
    if (empty()) return std::optional<Alloc>();
    if (g_force_exact.load()) {
      ++g_exact_searches;
      return ExactOptimum(m_, row_, obj_);
    }
    glp_iocp parm;
    glp_init_iocp(&parm);
    parm.presolve = GLP_ON;
    parm.msg_lev = GLP_MSG_OFF;
    parm.mip_gap = 0.0;
    parm.tm_lim = 30000;
    int ret = glp_intopt(lp_, &parm);
    if (ret == GLP_ENOPFS || ret == GLP_ENODFS) return std::optional<Alloc>();
    if (ret != 0) return InternalError(fmt::format("GLPK glp_intopt failed (code {})", ret));
    int st = glp_mip_status(lp_);
    if (st == GLP_NOFEAS) return std::optional<Alloc>();
    if (st != GLP_OPT) return InternalError(fmt::format("GLPK found no optimal solution (status {})", st));
    Alloc a;
    a.x.assign(m_.cands.size(), 0);
    for (auto [z, y] : ycol_) {
      if (std::llround(glp_mip_col_val(lp_, y)) != 1) continue;
      a.zone = z;
      for (size_t c = 0; c < m_.cands.size(); ++c)
        if (xcol_[z][c]) a.x[c] = std::llround(glp_mip_col_val(lp_, xcol_[z][c]));
    }
    if (Satisfies(m_, a)) return std::optional<Alloc>(a);
    ++g_exact_searches;
    return ExactOptimum(m_, row_, obj_);
  }

 private:
  // Divides val[1..] (and *rhs) by the largest |val|; returns the divisor.
  static double Normalise(std::vector<double>* val, double* rhs) {
    double mx = 0;
    for (size_t i = 1; i < val->size(); ++i) mx = std::max(mx, std::abs((*val)[i]));
    if (mx <= 0) return 1.0;
    for (size_t i = 1; i < val->size(); ++i) (*val)[i] /= mx;
    if (rhs) *rhs /= mx;
    return mx;
  }

  int AddRow(std::vector<int> ind, std::vector<double> val, int type, double lb, double ub) {
    int i = glp_add_rows(lp_, 1);
    glp_set_row_bnds(lp_, i, type, lb, ub);
    glp_set_mat_row(lp_, i, static_cast<int>(ind.size()) - 1, ind.data(), val.data());
    return i;
  }

  const Model& m_;
  FloorRow row_;
  glp_prob* lp_ = nullptr;
  std::vector<std::vector<int>> xcol_;
  std::vector<std::pair<int, int>> ycol_;  // (zone, column)
  std::vector<i128> obj_;
};

}  // namespace

std::mutex& GlpkMutex() {
  static std::mutex mu;
  return mu;
}

// The optimum of the model, nullopt when infeasible. `rounds` counts MILPs solved.
Result<std::optional<Alloc>> Optimise(const Model& m, int* rounds) {
  std::lock_guard<std::mutex> lock(GlpkMutex());
  Milp milp(m);
  const size_t nc = m.cands.size();
  std::vector<i128> price(nc);
  for (size_t c = 0; c < nc; ++c) price[c] = m.cands[c].price;
  milp.SetObjective(price);
  ++*rounds;
  TSR_ASSIGN_OR_RETURN(std::optional<Alloc> best, milp.Solve());
  if (!best) return best;
  if (m.cards == 0) return std::optional<Alloc>(TieBreak(m, *best));  // throughput target: cost per hour
  // Dinkelbach on cost / work with l = P / T: minimise sum((T*p - P*tp) * x).
  for (int it = 0; it < 60; ++it) {
    i128 P = best->Cost(m), T = best->Work(m);
    std::vector<i128> ic(nc);
    i128 maxabs = 0;
    for (size_t c = 0; c < nc; ++c) {
      ic[c] = T * m.cands[c].price - P * m.cands[c].tp;
      maxabs = std::max(maxabs, ic[c] < 0 ? -ic[c] : ic[c]);
    }
    // Exact integers while they fit a double's mantissa; otherwise scaled for GLPK (l = P/T as a double).
    bool exact = maxabs < (static_cast<i128>(1) << 50);
    milp.SetObjective(ic, exact ? 1.0 : static_cast<double>(T));
    ++*rounds;
    TSR_ASSIGN_OR_RETURN(std::optional<Alloc> next, milp.Solve());
    if (!next) return InternalError("GLPK lost a feasible solution between Dinkelbach rounds");
    // Strictly better ratio?  cost_n / work_n < P / T
    if (next->Cost(m) * T < P * next->Work(m)) {
      best = next;
    } else {
      return std::optional<Alloc>(TieBreak(m, *best));
    }
  }
  return std::optional<Alloc>(TieBreak(m, *best));
}

Result<bool> Feasible(const Model& m) {
  std::lock_guard<std::mutex> lock(GlpkMutex());
  Milp milp(m);
  milp.SetObjective(std::vector<i128>(m.cands.size(), 0));
  TSR_ASSIGN_OR_RETURN(std::optional<Alloc> a, milp.Solve());
  return a.has_value();
}

// The largest card count in [lo, hi] that fits, or -1: one integer program maximising the count (fitting is
// not monotone in the count, e.g. when running jobs pull the share under the floor, so no bisection).
Result<int64_t> LargestFittingCards(const Model& m, int64_t lo, int64_t hi) {
  if (lo > hi) return int64_t{-1};
  Model t = m;
  t.cards = hi;
  t.cards_lo = lo;
  std::lock_guard<std::mutex> lock(GlpkMutex());
  Milp milp(t);
  milp.SetObjective(std::vector<i128>(t.cands.size(), -1));
  TSR_ASSIGN_OR_RETURN(std::optional<Alloc> a, milp.Solve());
  if (!a) return int64_t{-1};
  int64_t n = 0;
  for (int64_t x : a->x) n += x;
  return n;
}

#endif  // TESSERA_HAVE_GLPK

void SetForceExactSearch(bool on) {
#ifdef TESSERA_HAVE_GLPK
  g_force_exact = on;
#else
  (void)on;
#endif
}

int64_t ExactSearchCount() {
#ifdef TESSERA_HAVE_GLPK
  return g_exact_searches.load();
#else
  return 0;
#endif
}

}  // namespace tessera::sched::internal
