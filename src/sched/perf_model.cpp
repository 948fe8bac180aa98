// sched/perf_model: the step model of a hybrid data-parallel job (see perf_model.hpp, docs/model.md): the
// sampler's split, the world (hosts, NICs, the device bridge per island), compute, the step's collectives (their
// load and time: perf_collective.cpp), overlap, the optimizer, cost and the sum of the parts; the planner's
// scenarios of a card mix.
#include "sched/perf_model.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <queue>
#include <tuple>

#include "common/vendor.hpp"

namespace tessera::sched::perf {
namespace {

constexpr double kGB = 1e9;

bool Positive(double v) { return std::isfinite(v) && v > 0; }

}  // namespace

std::string FamilyOfVendor(const std::string& vendor) {
  const DeviceFamily* f = FindFamilyOfVendor(vendor);  // common/vendor: the one registry
  return f ? f->prefix : "";
}

Result<std::vector<int64_t>> Apportion(int64_t total, const std::vector<double>& weights) {
  if (weights.empty()) return InvalidArgument("no ranks to split the global batch over (empty speed list)");
  for (size_t r = 0; r < weights.size(); ++r)
    if (!Positive(weights[r]))
      return InvalidArgument(fmt::format("speeds must be positive numbers, got {} for rank {}", weights[r], r));
  if (total < static_cast<int64_t>(weights.size()))
    return InvalidArgument(
        fmt::format("a global batch of {} cannot give each of {} ranks a sample", total, weights.size()));
  std::vector<int64_t> parts(weights.size(), 1);
  using Key = std::tuple<double, double, size_t>;  // (n+1)/w, n/w, rank: Python's heap tuples
  std::priority_queue<Key, std::vector<Key>, std::greater<Key>> heap;
  for (size_t r = 0; r < weights.size(); ++r) heap.emplace(2 / weights[r], 1 / weights[r], r);
  for (int64_t s = static_cast<int64_t>(weights.size()); s < total; ++s) {
    const size_t r = std::get<2>(heap.top());
    heap.pop();
    ++parts[r];
    heap.emplace(static_cast<double>(parts[r] + 1) / weights[r], static_cast<double>(parts[r]) / weights[r], r);
  }
  return parts;
}

Status Check(const Scenario& s) {
  if (s.islands.empty()) return InvalidArgument("no islands: give at least one (--island TYPE=CARDS)");
  for (size_t i = 0; i < s.islands.size(); ++i) {
    const IslandSpec& is = s.islands[i];
    const std::string f = fmt::format("island {} ({})", i, is.type);
    if (is.cards < 1) return InvalidArgument(fmt::format("{}: cards {} is not a positive count", f, is.cards));
    if (is.cards_per_node < 1)
      return InvalidArgument(fmt::format("{}: cards per node {} is not a positive count", f, is.cards_per_node));
    if (is.split_weight < 0 || !std::isfinite(is.split_weight))
      return InvalidArgument(fmt::format("{}: split weight {} is not a positive number", f, is.split_weight));
    if (is.tokens_per_s != 0 && !Positive(is.tokens_per_s))
      return InvalidArgument(fmt::format("{}: tokens/s per card {} is not a positive number", f, is.tokens_per_s));
    if (is.tokens_per_s == 0) {
      if (!Positive(is.tflops))
        return InvalidArgument(fmt::format("{}: needs tokens/s per card or TFLOP/s (got tflops {})", f, is.tflops));
      if (!Positive(is.mfu) || is.mfu > 1)
        return InvalidArgument(fmt::format("{}: utilisation {} is not in (0, 1]", f, is.mfu));
    }
    if (!is.family.empty() && FindDeviceFamily(is.family) == nullptr) {
      std::string known;
      for (const DeviceFamily& d : kDeviceFamilies) known += fmt::format("{}{}", known.empty() ? "" : ", ", d.prefix);
      return InvalidArgument(fmt::format("{}: device family '{}' is not one of {}", f, is.family, known));
    }
    if (is.fabric_gbs < 0 || is.hbm_gbs < 0 || !std::isfinite(is.fabric_gbs) || !std::isfinite(is.hbm_gbs))
      return InvalidArgument(
          fmt::format("{}: bandwidths must be non-negative (fabric {}, hbm {})", f, is.fabric_gbs, is.hbm_gbs));
  }
  const ModelSpec& m = s.model;
  if (!Positive(m.params)) return InvalidArgument(fmt::format("params {} is not a positive number", m.params));
  if (m.grad_bytes != 2 && m.grad_bytes != 4)
    return InvalidArgument(fmt::format("gradient bytes {} is neither 2 (bf16/f16) nor 4 (f32)", m.grad_bytes));
  if (m.param_bytes != 2 && m.param_bytes != 4)
    return InvalidArgument(fmt::format("parameter bytes {} is neither 2 nor 4", m.param_bytes));
  if (m.zero < 0 || m.zero > 3) return InvalidArgument(fmt::format("ZeRO stage {} is not 0, 1, 2 or 3", m.zero));
  if (m.seq < 1) return InvalidArgument(fmt::format("sequence length {} is not a positive count", m.seq));
  if (m.accum < 1) return InvalidArgument(fmt::format("micro-batches per step {} is not a positive count", m.accum));
  if (!(m.overlap >= 0 && m.overlap <= 1))
    return InvalidArgument(fmt::format("overlap {} is not in [0, 1]", m.overlap));
  if (!(m.backward_share > 0 && m.backward_share <= 1))
    return InvalidArgument(fmt::format("backward share {} is not in (0, 1]", m.backward_share));
  if (m.offload && !Positive(m.host_adam_gbs))
    return InvalidArgument(fmt::format("offload needs the host's optimizer bandwidth, got {} GB/s", m.host_adam_gbs));
  int64_t cards = 0;
  for (const auto& is : s.islands) cards += is.cards;
  if (m.batch < cards)
    return InvalidArgument(
        fmt::format("a micro-batch of {} sequences cannot give each of {} cards one", m.batch, cards));
  for (double v : {s.links.shm_gbs, s.links.net_gbs, s.links.device_gbs, s.links.pcie_gbs, s.links.latency_s})
    if (!(v >= 0) || !std::isfinite(v))
      return InvalidArgument(fmt::format("link figure {} is not a non-negative number", v));
  if (s.links.nics_per_node < 1)
    return InvalidArgument(fmt::format("NICs per node {} is not a positive count", s.links.nics_per_node));
  return Status::Ok();
}

Result<World> WorldOf(const Scenario& s) {
  World w;
  int rank = 0, next_host = 0;
  const bool hybrid = s.islands.size() > 1;
  for (const auto& is : s.islands) {
    std::vector<int> ranks;
    for (int64_t c = 0; c < is.cards; ++c) {
      ranks.push_back(rank++);
      w.host.push_back(s.one_host ? 0 : next_host + static_cast<int>(c / is.cards_per_node));
      // Each island decides alone (comm/world.cpp, TESSERA_DEVICE_BRIDGE=auto): a one-card island of a family with
      // the device bridge uses it where every rank of the world is on one host (every bridge channel a shm ring its
      // copy engines reach), whatever the other islands do; across hosts it stages.
      w.device_bridge.push_back(is.device && is.cards == 1 && hybrid && s.device_bridge && s.one_host &&
                                HasDeviceBridge(is.family));
    }
    if (!s.one_host) next_host += static_cast<int>((is.cards + is.cards_per_node - 1) / is.cards_per_node);
    w.islands.push_back(std::move(ranks));
  }
  bool any_bridge = false;
  for (bool b : w.device_bridge) any_bridge |= b;
  for (size_t i = 0; i < s.islands.size(); ++i)
    w.fold_weights.push_back(
        any_bridge && s.islands[i].device && !w.islands[i].empty() && !w.device_bridge[w.islands[i][0]] ? 0 : 1);
  w.hosts = s.one_host ? 1 : next_host;
  std::vector<int> on_host(w.hosts, 0);
  for (int h : w.host) w.local.push_back(on_host[h]++);
  return w;
}

namespace {

double RateOf(const IslandSpec& is, const ModelSpec& m) {
  if (is.tokens_per_s > 0) return is.tokens_per_s;
  return is.tflops * 1e12 * is.mfu / (6 * m.params);
}

}  // namespace

Result<Prediction> Predict(const Scenario& s) {
  TSR_RETURN_IF_ERROR(Check(s));
  TSR_ASSIGN_OR_RETURN(World w, WorldOf(s));
  const ModelSpec& m = s.model;
  Prediction p;
  const size_t W = w.host.size();
  std::vector<double> rate(W), weight(W);
  std::vector<size_t> island_of(W);
  for (size_t i = 0; i < s.islands.size(); ++i)
    for (int r : w.islands[i]) {
      rate[r] = RateOf(s.islands[i], m);
      weight[r] = s.islands[i].split_weight > 0 ? s.islands[i].split_weight : rate[r];
      island_of[r] = i;
    }
  TSR_ASSIGN_OR_RETURN(p.rank_split, Apportion(m.batch, weight));
  p.split.assign(s.islands.size(), 0);
  for (size_t r = 0; r < W; ++r) {
    p.split[island_of[r]] += p.rank_split[r];
    const double t = static_cast<double>(p.rank_split[r] * m.accum * m.seq) / rate[r];
    if (t > p.compute_s) {
      p.compute_s = t;
      p.slowest_island = static_cast<int>(island_of[r]);
    }
  }

  // The step's collectives (per ZeRO stage) and their time.
  const size_t P = static_cast<size_t>(std::ceil(m.params));
  const size_t per_rank = (P + W - 1) / W;  // a padded partition, as DeepSpeed pads
  std::vector<std::tuple<std::string, CollKind, size_t, size_t, int64_t>> calls;
  if (W > 1) {
    if (m.zero <= 1) calls.emplace_back("gradient allreduce", CollKind::kAllReduce, P, m.grad_bytes, 1);
    if (m.zero == 1) calls.emplace_back("parameter allgather", CollKind::kAllGather, per_rank, m.param_bytes, 1);
    if (m.zero >= 2)
      calls.emplace_back("gradient reduce-scatter", CollKind::kReduceScatter, per_rank, m.grad_bytes, m.accum);
    if (m.zero == 2) calls.emplace_back("parameter allgather", CollKind::kAllGather, per_rank, m.param_bytes, 1);
    if (m.zero == 3)
      calls.emplace_back("parameter allgather (forward and backward)", CollKind::kAllGather, per_rank, m.param_bytes,
                         2 * m.accum);
  }
  for (const auto& [name, kind, count, esz, n] : calls) {
    TSR_ASSIGN_OR_RETURN(auto c, CallCost(s, w, name, kind, count, esz, n));
    p.comm_s += c.seconds * static_cast<double>(c.calls);
    p.collectives.push_back(std::move(c));
  }
  const double window = m.zero <= 1 ? m.backward_share * p.compute_s / static_cast<double>(m.accum) : p.compute_s;
  p.hidden_s = std::min(m.overlap * p.comm_s, window);
  p.exposed_comm_s = p.comm_s - p.hidden_s;

  // The optimizer: each rank's (partition of the) parameters, on the card or on its host.
  const double params_per_rank = m.zero >= 1 ? static_cast<double>(per_rank) : m.params;
  if (m.offload) {
    std::vector<double> on_host(w.hosts, 0);
    for (size_t r = 0; r < W; ++r) on_host[w.host[r]] += params_per_rank;
    const double host_s =
        *std::max_element(on_host.begin(), on_host.end()) * m.host_bytes_per_param / (m.host_adam_gbs * kGB);
    if (!Positive(s.links.pcie_gbs))
      return InvalidArgument(
          fmt::format("offload moves gradients and parameters over PCIe, whose bandwidth is {}", s.links.pcie_gbs));
    const double pcie_s = params_per_rank * (m.grad_bytes + m.param_bytes) / (s.links.pcie_gbs * kGB);
    p.optimizer_s = host_s + pcie_s;
  } else {
    for (const auto& is : s.islands) {
      if (!Positive(is.hbm_gbs))
        return InvalidArgument(fmt::format("island {}: the optimizer on the card needs its memory bandwidth, got {}",
                                           is.type, is.hbm_gbs));
      p.optimizer_s = std::max(p.optimizer_s, params_per_rank * m.optimizer_bytes_per_param / (is.hbm_gbs * kGB));
    }
  }
  p.step_s = p.compute_s + p.exposed_comm_s + p.optimizer_s;
  p.tokens_per_step = static_cast<double>(m.batch * m.accum * m.seq);
  p.tokens_per_s = p.tokens_per_step / p.step_s;
  for (size_t i = 0; i < s.islands.size(); ++i)
    p.island_tokens_per_s.push_back(static_cast<double>(p.split[i] * m.accum * m.seq) / p.step_s);

  // What binds: the longest of compute, communication (all of it: with overlap the step is about the longer
  // of the two) and the optimizer; and where.
  p.binding = "compute";
  p.binding_detail =
      fmt::format("the slowest rank is in island {} ({})", p.slowest_island, s.islands[p.slowest_island].type);
  if (p.comm_s > p.compute_s && p.comm_s >= p.optimizer_s) {
    p.binding = "communication";
    const CollectiveCost* worst = nullptr;
    for (const auto& c : p.collectives)
      if (!worst || c.seconds * c.calls > worst->seconds * worst->calls) worst = &c;
    const CollectiveCost::Phase* ph = nullptr;
    for (const auto& x : worst->phases)
      if (!ph || x.seconds > ph->seconds) ph = &x;
    p.binding_detail = worst->staging_s >= worst->seconds ? fmt::format("{}: staging over PCIe", worst->name)
                                                          : fmt::format("{}: {} phase, bound by {}", worst->name,
                                                                        ph ? ph->name : "-", ph ? ph->bound : "-");
  } else if (p.optimizer_s > p.compute_s && p.optimizer_s > p.comm_s) {
    p.binding = "optimizer";
    p.binding_detail = m.offload ? "the optimizer step on the host (offload)" : "the optimizer step on the card";
  }

  // Cost and share.
  int64_t cards = 0, domestic = 0;
  double rate_all = 0, rate_dom = 0;
  for (const auto& is : s.islands) {
    cards += is.cards;
    p.cost_per_hour += is.price_per_card_hour * is.cards;
    const double r = RateOf(is, m) * static_cast<double>(is.cards);
    rate_all += r;
    if (is.domestic) {
      domestic += is.cards;
      rate_dom += r;
    }
  }
  p.domestic_card_share = static_cast<double>(domestic) / static_cast<double>(cards);
  p.domestic_compute_share = rate_dom / rate_all;
  p.cost_per_million_tokens =
      static_cast<double>(p.cost_per_hour) / static_cast<double>(kMoneyScale) / (p.tokens_per_s * 3600) * 1e6;

  // The sum of the parts: each island a job of its own, on its share of the batch.
  if (!s.sum_of_parts) return p;
  if (s.islands.size() == 1) {
    p.sum_of_parts_tokens_per_s = p.tokens_per_s;
  } else {
    for (size_t i = 0; i < s.islands.size(); ++i) {
      Scenario alone = s;
      alone.islands = {s.islands[i]};
      alone.model.batch = p.split[i];
      TSR_ASSIGN_OR_RETURN(auto part, Predict(alone));
      p.sum_of_parts_tokens_per_s += part.tokens_per_s;
    }
  }
  p.hybrid_over_parts = p.tokens_per_s / p.sum_of_parts_tokens_per_s;
  return p;
}

Status FillFromCatalog(const Catalog& catalog, Scenario* s) {
  for (auto& is : s->islands) {
    const AcceleratorType* t = catalog.Find(is.type);
    if (t == nullptr) return NotFound(fmt::format("type '{}' is not in the catalog {}", is.type, catalog.source));
    is.price_per_card_hour = t->price_per_card_hour;
    is.domestic = t->domestic;
    if (is.family.empty()) is.family = FamilyOfVendor(t->vendor);
  }
  return Status::Ok();
}

Result<double> ParseQuantity(const std::string& what, const std::string& text) {
  double scale = 1;
  std::string t = text;
  if (!t.empty()) {
    const char u = t.back();
    if (u == 'K' || u == 'k') scale = 1e3;
    if (u == 'M') scale = 1e6;
    if (u == 'B' || u == 'G') scale = 1e9;
    if (scale != 1) t.pop_back();
  }
  char* end = nullptr;
  const double v = t.empty() ? NAN : std::strtod(t.c_str(), &end);
  if (t.empty() || end != t.c_str() + t.size() || !std::isfinite(v) || v < 0)
    return InvalidArgument(fmt::format("{}: '{}' is not a non-negative number", what, text));
  return v * scale;
}

const std::vector<ModelClass>& ModelClasses() {
  // 2,048-token sequences, 4 per card per micro-batch, 8 micro-batches a step (docs/model.md's extrapolation).
  // Overlap: none for one allreduce after the backward pass (what the LM runs measured), all of it for
  // ZeRO-2/3 (bucketed reduce-scatters and prefetched allgathers over the whole step).
  static const std::vector<ModelClass> classes = {
      {"dp", 0, false, 0, 2048, 4, 8},    {"zero1", 1, false, 0, 2048, 4, 8},        {"zero2", 2, false, 1, 2048, 4, 8},
      {"zero3", 3, false, 1, 2048, 4, 8}, {"zero3-offload", 3, true, 1, 2048, 4, 8},
  };
  return classes;
}

Result<ModelClass> FindModelClass(const std::string& name) {
  std::string known;
  for (const auto& c : ModelClasses()) {
    if (name == c.name) return c;
    known += (known.empty() ? "" : ", ") + std::string(c.name);
  }
  return InvalidArgument(fmt::format("'{}' is not a model class (one of: {})", name, known));
}

Result<Scenario> MixScenario(const Catalog& catalog, const JobModel& model,
                             const std::vector<const AcceleratorType*>& types, const std::vector<int64_t>& cards) {
  TSR_ASSIGN_OR_RETURN(ModelClass mc, FindModelClass(model.model_class));
  if (!Positive(model.params))
    return InvalidArgument(fmt::format("model size {} is not a positive number of parameters", model.params));
  if (!catalog.model)
    return InvalidArgument(fmt::format(
        "the catalog {} has no host figures (model: net_gbps, pcie_gbs, shm_gbs, host_adam_gbs) for the job's model",
        catalog.source));
  Scenario s;
  int64_t total = 0;
  for (size_t i = 0; i < types.size(); ++i) {
    if (cards[i] == 0) continue;
    const AcceleratorType& t = *types[i];
    if (!t.model)
      return InvalidArgument(
          fmt::format("type '{}' has no model figures in the catalog {} (model: tflops, mfu, fabric_gbs, hbm_gbs)",
                      t.name, catalog.source));
    IslandSpec is;
    is.type = t.name;
    is.cards = cards[i];
    is.cards_per_node = t.model->cards_per_node;
    is.tflops = t.model->tflops;
    is.mfu = t.model->mfu;
    is.fabric_gbs = t.model->fabric_gbs;
    is.hbm_gbs = t.model->hbm_gbs;
    is.price_per_card_hour = t.price_per_card_hour;
    is.domestic = t.domestic;
    is.family = FamilyOfVendor(t.vendor);
    s.islands.push_back(is);
    total += cards[i];
  }
  s.model.params = model.params;
  s.model.zero = mc.zero;
  s.model.offload = mc.offload;
  s.model.overlap = mc.overlap;
  s.model.seq = mc.seq;
  s.model.batch = mc.seqs_per_card * total;
  s.model.accum = mc.accum;
  const HostFigures& h = *catalog.model;
  if (mc.offload && !Positive(h.host_adam_gbs))
    return InvalidArgument(
        fmt::format("model class '{}' offloads the optimizer to the host: the catalog {} needs model.host_adam_gbs",
                    mc.name, catalog.source));
  s.model.host_adam_gbs = h.host_adam_gbs;
  s.links.net_gbs = h.net_gbps / 8;
  s.links.pcie_gbs = h.pcie_gbs;
  s.links.shm_gbs = h.shm_gbs;
  s.links.latency_s = h.latency_us * 1e-6;
  return s;
}

}  // namespace tessera::sched::perf
