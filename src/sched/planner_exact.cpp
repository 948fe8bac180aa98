// sched/planner_exact: the planner's exact integer search, which decides where GLPK's floating-point answer
// cannot: near the domestic-share floor a placement can miss the floor by less than GLPK's tolerance (~1e-7),
// so the floor is one exact integer row (ExactFloorRow) and, whenever a GLPK solution misses a constraint in
// 128-bit arithmetic, ExactSearch finds the true optimum by depth-first search over the candidate types of
// each zone with exact bounds. TieBreak runs the same search over the optimal face to choose among equal
// optima (most domestic share units, then the lowest cost per hour, then the first zone).
#ifdef TESSERA_HAVE_GLPK
#include <glpk.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <numeric>

#include "sched/planner_model.hpp"

namespace tessera::sched::internal {
namespace {

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

}  // namespace

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

namespace {

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

}  // namespace

Result<std::optional<Alloc>> ExactOptimum(const Model& m, const FloorRow& floor, const std::vector<i128>& obj) {
  return ExactSearch(m, floor, obj).Run();
}

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

}  // namespace tessera::sched::internal

#endif  // TESSERA_HAVE_GLPK
