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
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cmath>
#include <map>
#include <mutex>
#include <numeric>

#include "sched/inputs_internal.hpp"
#include "sched/planner_internal.hpp"
#include "tessera/sched.hpp"

#ifdef TESSERA_HAVE_GLPK
#include <glpk.h>
#endif

namespace tessera::sched {
namespace {

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
[[maybe_unused]] bool Satisfies(const Model& m, const Alloc& a) {
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

#ifdef TESSERA_HAVE_GLPK

i128 Abs(i128 v) { return v < 0 ? -v : v; }

i128 Gcd(i128 a, i128 b) {
  a = Abs(a);
  b = Abs(b);
  while (b != 0) {
    i128 t = a % b;
    a = b;
    b = t;
  }
  return a;
}

i128 FloorDiv(i128 a, i128 b) {  // b != 0, rounds towards minus infinity
  i128 q = a / b;
  if (a % b != 0 && ((a < 0) != (b < 0))) --q;
  return q;
}

i128 CeilDiv128(i128 a, i128 b) { return -FloorDiv(-a, b); }

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

FloorRow ExactFloorRow(const Model& m) {
  FloorRow r;
  if (m.floor <= 0) return r;
  r.active = true;
  const size_t nc = m.cands.size();
  r.a.resize(nc);
  for (size_t c = 0; c < nc; ++c)
    r.a[c] = (static_cast<i128>(m.cands[c].domestic ? kPpmScale : 0) - m.floor) * m.cands[c].weight;
  r.b = static_cast<i128>(m.floor) * m.run_total - static_cast<i128>(kPpmScale) * m.run_dom;
  bool one_weight = nc > 0 && std::all_of(m.cands.begin(), m.cands.end(),
                                          [&](const Cand& c) { return c.weight == m.cands[0].weight; });
  if (m.cards > 0 && m.CardsLo() == m.cards && one_weight) {
    i128 shift = static_cast<i128>(m.floor) * m.cands[0].weight;
    for (auto& a : r.a) a += shift;
    r.b += shift * m.cards;
  }
  i128 g = 0;
  for (i128 a : r.a) g = Gcd(g, a);
  if (g > 1) {
    for (auto& a : r.a) a /= g;
    r.b = CeilDiv128(r.b, g);
  }
  return r;
}

// The exact optimum of Σ obj[c]·x[c] over the model's integer points, in integer arithmetic only: depth first
// over the candidate types of each zone (the last type in closed form), pruned by bounds that are exact
// relaxations (each drops a constraint). The solver's answer is final only when it keeps every constraint in
// integers; when it does not (the floor row is off by less than GLPK's tolerance), this search decides.
// Ties keep the first optimum found: zones in fleet order, each type's count tried from the cheaper end.
class ExactSearch {
 public:
  static constexpr int64_t kNodeLimit = 200'000'000;  // counts tried (~10 s)
  static constexpr size_t kMaxRows = 2;
  using Partial = std::array<i128, kMaxRows>;  // left-hand sides of the rows so far

  // Minimises obj over the model's points that also keep every row in `extra` (at most one: the tie-break's
  // "objective stays optimal"). Keeps references to `floor`, `obj` and the rows of `extra`: they must outlive it.
  ExactSearch(const Model& m, const FloorRow& floor, const std::vector<i128>& obj,
              const std::vector<FloorRow>& extra = {})
      : m_(m), obj_(obj) {
    if (floor.active) rows_.push_back(&floor);
    for (const auto& r : extra)
      if (r.active && rows_.size() < kMaxRows) rows_.push_back(&r);
  }

  // Optional: a constant added to the objective per zone, a known solution to beat (strictly), a node limit.
  void SetZoneCost(std::vector<i128> cost) { zone_cost_ = std::move(cost); }
  void Seed(const Alloc& a, i128 value) {
    have_ = true;
    best_ = a;
    best_value_ = value;
  }
  void SetNodeLimit(int64_t limit) { node_limit_ = limit; }
  std::optional<Alloc> Best() const { return have_ ? std::optional<Alloc>(best_) : std::nullopt; }

  Result<std::optional<Alloc>> Run() {
    const size_t nc = m_.cands.size();
    for (size_t z = 0; z < m_.zones.size(); ++z) {
      bool ok = nc > 0, any = false;
      for (size_t c = 0; c < nc; ++c) {
        if (m_.Upper(z, c) < m_.cands[c].min) ok = false;
        if (m_.Upper(z, c) > 0) any = true;
      }
      if (!ok || !any) continue;  // as in the integer program: no columns for this zone
      SetUpZone(z);
      x_.assign(nc, 0);
      Dfs(0, 0, 0, Partial{}, zone_cost_.empty() ? 0 : zone_cost_[z]);
      if (nodes_ > node_limit_)
        return InternalError(
            fmt::format("planner: the exact search (floor {}) gave up after {} nodes ({} candidate "
                        "types)",
                        FormatShare(m_.floor), node_limit_, nc));
    }
    if (!have_) return std::optional<Alloc>();
    return std::optional<Alloc>(best_);
  }

 private:
  i128 RowA(size_t r, size_t c) const { return rows_[r]->a[c]; }  // by candidate
  i128 A(size_t r, size_t d) const { return da_[r][d]; }          // by depth in the search

  void SetUpZone(size_t z) {
    const size_t k = m_.cands.size(), nr = rows_.size();
    zone_ = static_cast<int>(z);
    lo_.assign(k, 0);
    hi_.assign(k, 0);
    for (size_t c = 0; c < k; ++c) {
      lo_[c] = m_.cands[c].min;
      hi_[c] = std::max<int64_t>(m_.Upper(z, c), 0);
    }
    Multipliers();
    // Search order: types the LP relaxation holds at a bound first, those with the largest reduced cost times
    // range first (a step away from the bound costs most, so few values survive); the LP's basic types last,
    // the very last solved in closed form. Everything below is indexed by depth d, type ord_[d].
    ord_.resize(k);
    for (size_t c = 0; c < k; ++c) ord_[c] = c;
    std::stable_sort(ord_.begin(), ord_.end(), [&](size_t p, size_t q) {
      if (basic_[p] != basic_[q]) return !basic_[p];
      return reduced_[p] > reduced_[q];
    });
    {
      std::vector<int64_t> lo(k), hi(k);
      std::vector<i128> lag(k);
      dtp_.assign(k, 0);
      dobj_.assign(k, 0);
      for (size_t r = 0; r < nr; ++r) da_[r].assign(k, 0);
      for (size_t d = 0; d < k; ++d) {
        const size_t c = ord_[d];
        lo[d] = lo_[c];
        hi[d] = hi_[c];
        lag[d] = lag_[c];
        dtp_[d] = m_.cands[c].tp;
        dobj_[d] = obj_[c];
        for (size_t r = 0; r < nr; ++r) da_[r][d] = RowA(r, c);
      }
      lo_ = std::move(lo);
      hi_ = std::move(hi);
      lag_ = std::move(lag);
    }
    // Suffix sums over the types not yet fixed.
    sum_lo_.assign(k + 1, 0);
    sum_hi_.assign(k + 1, 0);
    tp_hi_.assign(k + 1, 0);
    tp_lo_.assign(k + 1, 0);
    lag_box_.assign(k + 1, 0);
    lag_lo_.assign(k + 1, 0);
    for (size_t r = 0; r < nr; ++r) {
      row_max_[r].assign(k + 1, 0);
      row_lo_[r].assign(k + 1, 0);
    }
    for (size_t i = k; i-- > 0;) {
      const i128 tp = dtp_[i], l = lag_[i];
      sum_lo_[i] = sum_lo_[i + 1] + lo_[i];
      sum_hi_[i] = sum_hi_[i + 1] + hi_[i];
      tp_hi_[i] = tp_hi_[i + 1] + tp * hi_[i];
      tp_lo_[i] = tp_lo_[i + 1] + tp * lo_[i];
      lag_box_[i] = lag_box_[i + 1] + std::min(l * lo_[i], l * hi_[i]);
      lag_lo_[i] = lag_lo_[i + 1] + l * lo_[i];
      for (size_t r = 0; r < nr; ++r) {
        row_max_[r][i] = row_max_[r][i + 1] + std::max(A(r, i) * lo_[i], A(r, i) * hi_[i]);
        row_lo_[r][i] = row_lo_[r][i + 1] + A(r, i) * lo_[i];
      }
    }
    // Per level: the remaining types by Lagrangian coefficient, lowest first (for the card-count bound), and
    // by each row's coefficient, highest first (for the card-count row tests).
    by_lag_.assign(k + 1, {});
    for (size_t r = 0; r < nr; ++r) by_row_[r].assign(k + 1, {});
    for (size_t i = 0; i < k; ++i) {
      for (size_t j = i; j < k; ++j) by_lag_[i].push_back(j);
      for (size_t r = 0; r < nr; ++r) {
        by_row_[r][i] = by_lag_[i];
        std::stable_sort(by_row_[r][i].begin(), by_row_[r][i].end(),
                         [&](size_t p, size_t q) { return A(r, p) > A(r, q); });
      }
      std::stable_sort(by_lag_[i].begin(), by_lag_[i].end(), [&](size_t p, size_t q) { return lag_[p] < lag_[q]; });
    }
  }

  // Lagrange multipliers for the rows (lambda) and, with a throughput target, the throughput row (mu), taken
  // from the zone's LP relaxation (GLPK, floating point) and rounded to rationals lambda_q / q and mu_q / q.
  // Any multipliers >= 0 give a valid bound, and the bound is then computed in integers:
  //   q * objective >= q*obj·x - Σ_r lambda_q[r]*(a_r·x - b_r) - mu_q*(tp·x - target),  minimised over the
  // relaxation. Good multipliers make it as tight as the LP relaxation, so the search visits few nodes.
  void Multipliers() {
    const size_t k = m_.cands.size(), nr = rows_.size();
    q_ = 1;
    lambda_q_.fill(0);
    mu_q_ = 0;
    std::array<long double, kMaxRows> lambda{};
    long double mu = 0;
    glp_prob* lp = glp_create_prob();
    glp_set_obj_dir(lp, GLP_MIN);
    glp_add_cols(lp, static_cast<int>(k));
    long double oscale = 1, tscale = 1;
    std::array<long double, kMaxRows> ascale{};
    ascale.fill(1);
    for (size_t c = 0; c < k; ++c) {
      oscale = std::max(oscale, static_cast<long double>(Abs(obj_[c])));
      for (size_t r = 0; r < nr; ++r) ascale[r] = std::max(ascale[r], static_cast<long double>(Abs(RowA(r, c))));
      tscale = std::max(tscale, static_cast<long double>(m_.cands[c].tp));
    }
    std::vector<int> ind{0};
    std::vector<double> size{0};
    for (size_t c = 0; c < k; ++c) {
      int j = static_cast<int>(c) + 1;
      glp_set_col_bnds(lp, j, lo_[c] == hi_[c] ? GLP_FX : GLP_DB, static_cast<double>(lo_[c]),
                       static_cast<double>(hi_[c]));
      glp_set_obj_coef(lp, j, static_cast<double>(static_cast<long double>(obj_[c]) / oscale));
      ind.push_back(j);
      size.push_back(m_.cards > 0 ? 1.0 : static_cast<double>(m_.cands[c].tp / tscale));
    }
    int size_row = glp_add_rows(lp, 1);
    if (m_.cards > 0)
      glp_set_row_bnds(lp, size_row, m_.CardsLo() == m_.cards ? GLP_FX : GLP_DB, static_cast<double>(m_.CardsLo()),
                       static_cast<double>(m_.cards));
    else
      glp_set_row_bnds(lp, size_row, GLP_LO, static_cast<double>(m_.target / tscale), 0.0);
    glp_set_mat_row(lp, size_row, static_cast<int>(k), ind.data(), size.data());
    std::array<int, kMaxRows> row_ix{};
    for (size_t r = 0; r < nr; ++r) {
      std::vector<double> val{0};
      for (size_t c = 0; c < k; ++c)
        val.push_back(static_cast<double>(static_cast<long double>(RowA(r, c)) / ascale[r]));
      row_ix[r] = glp_add_rows(lp, 1);
      glp_set_row_bnds(lp, row_ix[r], GLP_LO, static_cast<double>(static_cast<long double>(rows_[r]->b) / ascale[r]),
                       0.0);
      glp_set_mat_row(lp, row_ix[r], static_cast<int>(k), ind.data(), val.data());
    }
    glp_smcp parm;
    glp_init_smcp(&parm);
    parm.msg_lev = GLP_MSG_OFF;
    basic_.assign(k, false);
    reduced_.assign(k, 0);
    if (glp_simplex(lp, &parm) == 0 && glp_get_status(lp) == GLP_OPT) {
      for (size_t c = 0; c < k; ++c) {
        basic_[c] = glp_get_col_stat(lp, static_cast<int>(c) + 1) == GLP_BS;
        reduced_[c] = std::abs(static_cast<long double>(glp_get_col_dual(lp, static_cast<int>(c) + 1))) *
                      static_cast<long double>(hi_[c] - lo_[c]);
      }
      for (size_t r = 0; r < nr; ++r)
        lambda[r] = std::max(0.0L, static_cast<long double>(glp_get_row_dual(lp, row_ix[r])) * oscale / ascale[r]);
      if (m_.target > 0)
        mu = std::max(0.0L, static_cast<long double>(glp_get_row_dual(lp, size_row)) * oscale / tscale);
    }
    glp_delete_prob(lp);
    // q = 2^s so that the largest multiplier keeps ~30 significant bits, while q*obj*x stays far from 2^127.
    long double big = mu;
    for (size_t r = 0; r < nr; ++r) big = std::max(big, lambda[r]);
    if (big > 0) {
      int s = 30 - std::ilogb(big);
      long double omax = 1, xmax = 1, tmax = 1;
      for (size_t c = 0; c < k; ++c) {
        omax = std::max(omax, static_cast<long double>(Abs(obj_[c])));
        xmax += static_cast<long double>(hi_[c]);
        tmax = std::max(tmax, static_cast<long double>(m_.cands[c].tp));
      }
      int room = 100 - std::ilogb(omax * xmax) - 1;
      s = std::max(0, std::min(s, room));
      long double qd = std::ldexp(1.0L, s);
      // Only when every product stays below 2^110 (else: no multipliers, a weaker but valid bound).
      bool fits = s <= room;
      std::array<long double, kMaxRows> lq{};
      for (size_t r = 0; r < nr; ++r) {
        lq[r] = std::round(lambda[r] * qd);
        long double bmax = 1 + std::abs(static_cast<long double>(rows_[r]->b));
        fits = fits && lq[r] < 0x1p62L && lq[r] * (ascale[r] * xmax + bmax) < 0x1p110L;
      }
      long double mq = std::round(mu * qd);
      fits = fits && mq < 0x1p62L && mq * (tmax * xmax + static_cast<long double>(m_.target) + 1) < 0x1p110L;
      if (fits) {
        q_ = static_cast<i128>(static_cast<int64_t>(1) << s);
        for (size_t r = 0; r < nr; ++r) lambda_q_[r] = static_cast<i128>(static_cast<int64_t>(lq[r]));
        mu_q_ = static_cast<i128>(static_cast<int64_t>(mq));
      }
    }
    lag_.assign(k, 0);
    for (size_t c = 0; c < k; ++c) {
      lag_[c] = q_ * obj_[c] - mu_q_ * m_.cands[c].tp;
      for (size_t r = 0; r < nr; ++r) lag_[c] -= lambda_q_[r] * RowA(r, c);
    }
  }

  // Fills the remaining types i.. greedily in the order `order` (best coefficient first) from their minima:
  // `need` more cards at least, up to `room` more, taking beyond `need` only while `take_more(j)` holds.
  // Calls add(j, cards) for each type it adds cards of. It is the exact optimum of the linear relaxation
  // "box and a card count in [lo, hi]" (integral, since the count's coefficients are all 1).
  template <typename More, typename Add>
  void Greedy(size_t i, int64_t n, const std::vector<size_t>& order, More take_more, Add add) const {
    const int64_t need = std::max<int64_t>(0, m_.CardsLo() - n - static_cast<int64_t>(sum_lo_[i]));
    const int64_t room = m_.cards - n - static_cast<int64_t>(sum_lo_[i]);
    int64_t taken = 0;
    for (size_t j : order) {
      bool more = take_more(j);
      if (taken >= need && !more) break;
      int64_t t = hi_[j] - lo_[j];
      if (!more) t = std::min(t, need - taken);
      t = std::min(t, room - taken);
      if (t <= 0) continue;
      add(j, t);
      taken += t;
    }
  }

  // The most the remaining types can add to row r's left-hand side.
  i128 RowMax(size_t r, size_t i, int64_t n) const {
    if (m_.cards == 0) return row_max_[r][i];
    i128 v = row_lo_[r][i];
    Greedy(
        i, n, by_row_[r][i], [&](size_t j) { return A(r, j) > 0; }, [&](size_t j, int64_t t) { v += A(r, j) * t; });
    return v;
  }

  // Where to start type i's count: the value the bound's relaxation gives it.
  int64_t Start(size_t i, int64_t n) const {
    if (m_.cards == 0) return lag_[i] >= 0 ? lo_[i] : hi_[i];
    int64_t v = lo_[i];
    Greedy(
        i, n, by_lag_[i], [&](size_t j) { return lag_[j] < 0; },
        [&](size_t j, int64_t t) {
          if (j == i) v += t;
        });
    return v;
  }

  // q times a lower bound on the objective of every completion of a node with `n` cards, throughput `tp`, row
  // left-hand sides `fa` and objective `ob` so far (types i.. still free).
  i128 Bound(size_t i, int64_t n, i128 tp, const Partial& fa, i128 ob) const {
    i128 v = q_ * ob - mu_q_ * (tp - m_.target);
    for (size_t r = 0; r < rows_.size(); ++r) v -= lambda_q_[r] * (fa[r] - rows_[r]->b);
    if (m_.cards == 0) return v + lag_box_[i];
    v += lag_lo_[i];
    Greedy(
        i, n, by_lag_[i], [&](size_t j) { return lag_[j] < 0; }, [&](size_t j, int64_t t) { v += lag_[j] * t; });
    return v;
  }

  // With a throughput target, a row and the throughput still missing (beyond the minima) together: for
  // theta = -a_j / tp_j of each type j the row counts against, sum (a + theta*tp)·y >= rest + theta*need must be
  // reachable by some y in [0, hi - lo] (a surrogate of both rows, scaled by tp_j to stay in integers).
  bool SurrogateInfeasible(size_t i, i128 tp, const Partial& fa) const {
    const size_t k = m_.cands.size();
    const i128 need = m_.target - tp - tp_lo_[i];
    if (need <= 0) return false;
    for (size_t r = 0; r < rows_.size(); ++r) {
      const i128 rest = rows_[r]->b - fa[r] - row_lo_[r][i];
      for (size_t j = i; j < k; ++j) {
        if (A(r, j) >= 0 || hi_[j] == lo_[j]) continue;
        const i128 num = -A(r, j), den = dtp_[j];
        i128 most = 0;
        for (size_t c = i; c < k; ++c) most += std::max<i128>(0, den * A(r, c) + num * dtp_[c]) * (hi_[c] - lo_[c]);
        if (most < den * rest + num * need) return true;
      }
    }
    return false;
  }

  bool Pruned(size_t i, int64_t n, i128 tp, const Partial& fa, i128 ob) const {
    if (m_.cards > 0 && (n + sum_lo_[i] > m_.cards || n + sum_hi_[i] < m_.CardsLo())) return true;
    if (m_.target > 0 && tp + tp_hi_[i] < m_.target) return true;
    for (size_t r = 0; r < rows_.size(); ++r)
      if (fa[r] + RowMax(r, i, n) < rows_[r]->b) return true;
    if (m_.target > 0 && SurrogateInfeasible(i, tp, fa)) return true;
    return have_ && Bound(i, n, tp, fa, ob) >= q_ * best_value_;
  }

  void Dfs(size_t i, int64_t n, i128 tp, const Partial& fa, i128 ob) {
    if (i == 0 && ++nodes_ > node_limit_) return;
    if (i == 0 && Pruned(i, n, tp, fa, ob)) return;  // deeper levels are tested before the call
    const size_t k = m_.cands.size();
    const i128 ctp = dtp_[i], o = dobj_[i];
    i128 lo = lo_[i], hi = hi_[i];
    if (m_.cards > 0) {
      lo = std::max<i128>(lo, m_.CardsLo() - n - sum_hi_[i + 1]);
      hi = std::min<i128>(hi, m_.cards - n - sum_lo_[i + 1]);
    }
    if (i + 1 == k) {  // the last type: its best count in closed form
      if (m_.target > 0 && tp < m_.target) lo = std::max(lo, CeilDiv128(m_.target - tp, ctp));
      for (size_t r = 0; r < rows_.size(); ++r) {
        const i128 a = A(r, i), rest = rows_[r]->b - fa[r];
        if (a > 0) lo = std::max(lo, CeilDiv128(rest, a));
        if (a < 0) hi = std::min(hi, FloorDiv(rest, a));
        if (a == 0 && rest > 0) return;
      }
      if (lo > hi) return;
      i128 v = o >= 0 ? lo : hi;
      i128 val = ob + o * v;
      if (n + v <= 0 || (have_ && val >= best_value_)) return;
      x_[i] = static_cast<int64_t>(v);
      have_ = true;
      best_value_ = val;
      best_.zone = zone_;
      best_.x.assign(k, 0);
      for (size_t d = 0; d < k; ++d) best_.x[ord_[d]] = x_[d];
      return;
    }
    // The counts of type i that survive Pruned() form an interval (each test is a linear, concave or convex
    // function of the count, compared with a constant). Walk it outwards from the relaxation's value; when that
    // value is outside, scan from the low end and stop on leaving the interval.
    auto visit = [&](i128 v) {  // counts as a node: Pruned() is most of a node's work
      if (++nodes_ > node_limit_) return false;
      const int64_t n2 = n + static_cast<int64_t>(v);
      const i128 tp2 = tp + ctp * v, ob2 = ob + o * v;
      Partial fa2 = fa;
      for (size_t r = 0; r < rows_.size(); ++r) fa2[r] += A(r, i) * v;
      if (Pruned(i + 1, n2, tp2, fa2, ob2)) return false;
      x_[i] = static_cast<int64_t>(v);
      Dfs(i + 1, n2, tp2, fa2, ob2);
      return true;
    };
    const i128 start = std::clamp<i128>(Start(i, n), lo, hi);
    if (visit(start)) {
      for (i128 v = start + 1; v <= hi && visit(v);) ++v;
      for (i128 v = start - 1; v >= lo && visit(v);) --v;
    } else {
      bool inside = false;
      for (i128 v = lo; v <= hi && nodes_ <= node_limit_; ++v) {
        if (v == start) continue;
        bool in = visit(v);
        if (inside && !in) break;
        inside = inside || in;
      }
    }
  }

  const Model& m_;
  std::vector<const FloorRow*> rows_;  // Σ a·x >= b, each: the floor, then the extra rows
  const std::vector<i128>& obj_;
  int zone_ = -1;
  std::vector<int64_t> lo_, hi_, x_;
  std::vector<i128> sum_lo_, sum_hi_, tp_hi_, tp_lo_;
  std::array<std::vector<i128>, kMaxRows> row_max_, row_lo_;  // per row: suffix box maxima, suffix at minima
  i128 q_ = 1, mu_q_ = 0;                                     // multipliers lambda_q / q (rows), mu_q / q
  std::array<i128, kMaxRows> lambda_q_{};                     // (throughput)
  std::vector<i128> lag_, lag_box_, lag_lo_;  // q*obj - Σ lambda_q*a - mu_q*tp per type; its suffix minima
  std::vector<std::vector<size_t>> by_lag_;
  std::array<std::vector<std::vector<size_t>>, kMaxRows> by_row_;
  std::vector<size_t> ord_;                     // type at each depth
  std::vector<bool> basic_;                     // per type: basic in the zone's LP relaxation
  std::vector<long double> reduced_;            // per type: |reduced cost| x range there
  std::vector<i128> dtp_, dobj_;                // per depth: throughput, objective coefficient
  std::array<std::vector<i128>, kMaxRows> da_;  // per row, per depth: coefficient
  std::vector<i128> zone_cost_;
  int64_t node_limit_ = kNodeLimit;
  int64_t nodes_ = 0;
  bool have_ = false;
  i128 best_value_ = 0;
  Alloc best_;
};

std::atomic<bool> g_force_exact{false};
std::atomic<int64_t> g_exact_searches{0};

std::mutex& GlpkMutex() {
  static std::mutex mu;
  return mu;
}

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
      return ExactSearch(m_, row_, obj_).Run();
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
    return ExactSearch(m_, row_, obj_).Run();
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

// Among the placements as good as `best` (same cost per unit of work for a card count, same cost per hour
// for a throughput target), the one with the most domestic share units, then the lowest cost per hour, then
// in the zone listed first in the fleet; remaining ties go to the first found by the exact search. One exact
// search over the optimal face {x : the objective's exact row "no worse than best"}, seeded with `best` so it
// only looks for strictly preferred placements. It stops after kTieBreakNodes nodes (large fleets where many
// placements lie close to the optimum) and then keeps the best placement found so far, `best` at worst. Call
// with GlpkMutex() held (the search asks GLPK for LP multipliers).
constexpr int64_t kTieBreakNodes = 200'000;

Alloc TieBreak(const Model& m, const Alloc& best) {
  const size_t nc = m.cands.size(), nz = m.zones.size();
  FloorRow face;  // Σ a·x >= b  <=>  the objective is no worse than best's
  face.active = true;
  face.a.resize(nc);
  const i128 P = best.Cost(m), T = best.Work(m);
  for (size_t c = 0; c < nc; ++c)
    face.a[c] = m.cards > 0 ? -(T * m.cands[c].price - P * m.cands[c].tp) : -static_cast<i128>(m.cands[c].price);
  face.b = m.cards > 0 ? 0 : -P;
  // Key, lower is better: (-K*domestic + cost) * zones + zone index, with K above any cost in the model.
  i128 k = 1;
  for (size_t c = 0; c < nc; ++c) {
    int64_t most = 0;
    for (size_t z = 0; z < nz; ++z) most = std::max(most, m.Upper(z, c));
    k += static_cast<i128>(m.cands[c].price) * most;
  }
  std::vector<i128> key(nc);
  std::vector<i128> zone(nz);
  for (size_t c = 0; c < nc; ++c)
    key[c] = ((m.cands[c].domestic ? -k * m.cands[c].weight : 0) + static_cast<i128>(m.cands[c].price)) *
             static_cast<i128>(nz);
  for (size_t z = 0; z < nz; ++z) zone[z] = static_cast<i128>(z);
  i128 seed = zone[best.zone];
  for (size_t c = 0; c < nc; ++c) seed += key[c] * best.x[c];
  const FloorRow floor = ExactFloorRow(m);
  const std::vector<FloorRow> extra{face};  // outlives the search, which keeps pointers to its rows
  ExactSearch search(m, floor, key, extra);
  search.SetZoneCost(zone);
  search.Seed(best, seed);
  search.SetNodeLimit(kTieBreakNodes);
  auto r = search.Run();
  // Past the node limit Run() reports an error; the best found so far is still a valid optimum.
  std::optional<Alloc> found = r.ok() ? *r : search.Best();
  if (!found || !Satisfies(m, *found)) return best;
  if (m.cards > 0 ? found->Cost(m) * T != P * found->Work(m) : found->Cost(m) != P) return best;
  return *found;
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

std::string Join(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : ", ") + x;
  return s;
}

[[maybe_unused]] int64_t CeilDiv(i128 a, i128 b) {  // b > 0
  if (a <= 0) return static_cast<int64_t>(a / b);
  return static_cast<int64_t>((a + b - 1) / b);
}

[[maybe_unused]] std::string Units(ShareUnit u, i128 v) {
  if (u == ShareUnit::kCards) return fmt::format("{} domestic cards", static_cast<int64_t>(v));
  return fmt::format("{} domestic throughput-weighted units", FormatThroughput(static_cast<int64_t>(v)));
}

#ifdef TESSERA_HAVE_GLPK
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
    int64_t lo = 1, hi = m.target - 1, found = -1;
    while (lo <= hi) {
      int64_t mid = lo + (hi - lo) / 2;
      t.target = mid;
      TSR_ASSIGN_OR_RETURN(bool fits, Feasible(t));
      if (fits) {
        found = mid;
        lo = mid + 1;
      } else {
        hi = mid - 1;
      }
    }
    if (found > 0)
      fixes.push_back(fmt::format("would fit with a throughput target of at most {}", FormatThroughput(found)));
  }
  if (m.floor > 0) {
    // A lower floor admits every placement a higher one does: monotone, so bisection is exact.
    Model t = m;
    t.floor = 0;
    TSR_ASSIGN_OR_RETURN(bool fits_without, Feasible(t));
    if (fits_without) {
      Ppm lo = 0, hi = m.floor - 1, found = 0;
      while (lo <= hi) {
        Ppm mid = lo + (hi - lo) / 2;
        t.floor = mid;
        TSR_ASSIGN_OR_RETURN(bool fits, Feasible(t));
        if (fits) {
          found = mid;
          lo = mid + 1;
        } else {
          hi = mid - 1;
        }
      }
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
#endif

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
  TSR_ASSIGN_OR_RETURN(std::optional<Alloc> best, Optimise(m, &rounds));
  if (!best) {
    TSR_ASSIGN_OR_RETURN(out.infeasible, Diagnose(m, job, policy.unit));
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
    std::vector<std::pair<int64_t, size_t>> nodes;
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
  out.placement = std::move(p);
  return out;
#endif
}

}  // namespace tessera::sched

namespace tessera::sched::internal {

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
