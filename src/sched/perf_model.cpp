// sched/perf_model: the step model of a hybrid data-parallel job (see perf_model.hpp, docs/model.md): the
// sampler's split, every phase's bytes per link from comm/schedule, each island's path (its library or the host
// engine, per collective and type), link times, staging, overlap, the optimizer.
#include "sched/perf_model.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <queue>
#include <tuple>

#include "common/vendor.hpp"

namespace tessera::sched::perf {
namespace {

using comm::Range;

constexpr double kGB = 1e9;

bool Positive(double v) { return std::isfinite(v) && v > 0; }

// Accumulates one phase's sends by link.
class PhaseBuilder {
 public:
  PhaseBuilder(const World& w, std::string name) : w_(w), messages_(w.host.size(), 0) {
    p_.name = std::move(name);
    p_.local_out.assign(w.host.size(), 0);
    p_.local_in.assign(w.host.size(), 0);
    p_.net_out.assign(w.hosts, 0);
    p_.net_in.assign(w.hosts, 0);
    p_.sent.assign(w.host.size(), 0);
  }
  void Send(int from, int to, double bytes) {
    if (bytes <= 0 || from == to) return;
    ++messages_[from];
    p_.total_bytes += bytes;
    p_.sent[from] += bytes;
    if (w_.Link(from, to) == LinkKind::kNet) {
      p_.net_out[w_.host[from]] += bytes;
      p_.net_in[w_.host[to]] += bytes;
    } else {
      p_.local_out[from] += bytes;
      p_.local_in[to] += bytes;
    }
  }
  PhaseLoad Done() {
    p_.max_messages = messages_.empty() ? 0 : *std::max_element(messages_.begin(), messages_.end());
    p_.messages = messages_;
    return std::move(p_);
  }

 private:
  const World& w_;
  PhaseLoad p_;
  std::vector<int64_t> messages_;
};

// Island phase of every island with more than one member: member i sends `bytes(n, i, j)` to member j.
template <typename Bytes>
void IslandAllToAll(const World& w, PhaseBuilder& b, Bytes bytes) {
  for (const auto& isl : w.islands) {
    const size_t n = isl.size();
    if (n < 2) continue;
    for (size_t i = 0; i < n; ++i)
      for (size_t j = 0; j < n; ++j)
        if (i != j) b.Send(isl[i], isl[j], bytes(n, i, j));
  }
}

// An island phase on the island's vendor library instead of the host path, for the islands `on_library`: a
// ring that moves, per rank, what the schedule has the rank send in that phase (for a world of one island,
// exactly a ring's (n-1)/n of the buffer) times the island's `scale` (2 for a 16-bit reduction widened to
// f32 on the device), at the slower of the island fabric and — when the island spans hosts — the
// host's network (one ring per NIC: the host's rings share its network bandwidth, and each carries its
// piece once through every host boundary). Latency: n-1 ring steps. `ring_bytes` (per island): the most
// one rank sends.
Result<CollectiveCost::Phase> VendorPhase(const Scenario& s, const World& w, const PhaseLoad& p,
                                          const std::vector<bool>& on_library, const std::vector<double>& scale,
                                          std::vector<double>* ring_bytes) {
  CollectiveCost::Phase ph{p.name + " (vendor ring)", 0, "latency"};
  for (size_t i = 0; i < s.islands.size(); ++i) {
    const IslandSpec& is = s.islands[i];
    if (is.cards < 2 || !on_library[i]) continue;
    double most = 0;
    for (int r : w.islands[i]) most = std::max(most, p.sent[r] * scale[i]);
    if (most <= 0) continue;
    (*ring_bytes)[i] = std::max((*ring_bytes)[i], most);
    const bool spans = !s.one_host && is.cards > is.cards_per_node;
    if (!Positive(is.fabric_gbs))
      return InvalidArgument(
          fmt::format("island {} ({}): its vendor library's {} needs the island fabric's bandwidth, got {}", i, is.type,
                      p.name, is.fabric_gbs));
    if (spans && !Positive(s.links.net_gbs))
      return InvalidArgument(fmt::format("island {} ({}) spans hosts: its {} needs the network bandwidth, got {}", i,
                                         is.type, p.name, s.links.net_gbs));
    double bw = is.fabric_gbs;
    std::string bound = fmt::format("fabric (island {})", i);
    if (spans && s.links.net_gbs < bw) {
      bw = s.links.net_gbs;
      bound = fmt::format("net (island {}'s ring between hosts)", i);
    }
    const double t = most / (bw * kGB) + static_cast<double>(is.cards - 1) * s.links.latency_s;
    if (t > ph.seconds) {
      ph.seconds = t;
      ph.bound = bound;
    }
  }
  return ph;
}

}  // namespace

const char* CollName(Coll c) {
  switch (c) {
    case Coll::kAllReduce:
      return "allreduce";
    case Coll::kReduceScatter:
      return "reduce_scatter";
    case Coll::kAllGather:
      return "allgather";
  }
  return "?";
}

const char* IslandPathName(IslandPath p) {
  switch (p) {
    case IslandPath::kAsBuilt:
      return "as built";
    case IslandPath::kLibrary:
      return "library";
    case IslandPath::kHost:
      return "host";
  }
  return "?";
}

// comm/device: BridgeRank widens 16-bit inputs on the GPU (IslandCclRefusal(..., widens=true) in
// bridge_collectives.cpp); AccelRank, the backend of every runtime row (ACL, MUSA), has no such kernel (widens=false
// in accel_rank.cpp).
bool WidensOnDevice(const std::string& family) { return family == "cuda"; }

std::string FamilyOfVendor(const std::string& vendor) {
  const DeviceFamily* f = FindFamilyOfVendor(vendor);  // common/vendor: the one registry
  return f ? f->prefix : "";
}

const char* LinkName(LinkKind k) {
  switch (k) {
    case LinkKind::kShm:
      return "shm";
    case LinkKind::kNet:
      return "net";
    case LinkKind::kDevice:
      return "device";
  }
  return "?";
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

LinkKind World::Link(int a, int b) const {
  if (host[a] != host[b]) return LinkKind::kNet;
  return device_bridge[a] && device_bridge[b] ? LinkKind::kDevice : LinkKind::kShm;
}

std::vector<PhaseLoad> CollectiveLoad(const World& w, Coll kind, size_t count, size_t esz, size_t asz) {
  const size_t W = w.host.size();
  const int k = static_cast<int>(w.islands.size());
  const size_t C = kind == Coll::kAllReduce ? count : count * W;  // what the schedule cuts (hierarchical.cpp)
  const std::vector<comm::Segment> segs = comm::Segments(w.islands, C);
  const auto shard = [C](size_t n, size_t j) { return comm::Shard(n, j, C); };
  std::vector<PhaseLoad> out;
  if (kind == Coll::kAllGather) {
    const auto contrib = [&](int r) { return comm::Contribution(true, r, 0, count, C); };
    PhaseBuilder gather(w, "island gather");  // IslandGather: my contribution's piece of each member's shard
    for (const auto& isl : w.islands)
      for (size_t i = 0; i < isl.size(); ++i)
        for (size_t j = 0; j < isl.size(); ++j)
          if (i != j)
            gather.Send(isl[i], isl[j],
                        static_cast<double>(contrib(isl[i]).Intersect(shard(isl.size(), j)).len() * esz));
    out.push_back(gather.Done());
    if (k > 1) {  // BridgeSwap: each segment's owners swap what their islands contributed to it
      PhaseBuilder swap(w, "bridge");
      for (const auto& sg : segs)
        for (int me = 0; me < k; ++me) {
          double mine = 0;
          for (int r : w.islands[me]) mine += static_cast<double>(contrib(r).Intersect(sg.r).len() * esz);
          for (int J = 0; J < k; ++J)
            if (J != me) swap.Send(sg.owner[me], sg.owner[J], mine);
        }
      out.push_back(swap.Done());
    }
  } else {
    PhaseBuilder rs(w, "island reduce-scatter");  // IslandReduceScatter: member j's shard of my input
    IslandAllToAll(w, rs, [&](size_t n, size_t, size_t j) { return static_cast<double>(shard(n, j).len() * esz); });
    out.push_back(rs.Done());
    if (k > 1) {  // BridgeReduce: parts to their reducers (partial sums), then (allreduce) the results
      PhaseBuilder br(w, kind == Coll::kAllReduce ? "bridge" : "bridge reduce");
      for (const auto& sg : segs)
        for (int J = 0; J < k; ++J) {
          const size_t psz = w.islands[J].size() == 1 ? esz : asz;
          for (int q = 0; q < k; ++q) {
            if (q == J) continue;
            br.Send(sg.owner[J], sg.owner[q], static_cast<double>(comm::Part(sg.r, q, k).len() * psz));
            if (kind == Coll::kAllReduce)
              br.Send(sg.owner[J], sg.owner[q], static_cast<double>(comm::Part(sg.r, J, k).len() * esz));
          }
        }
      out.push_back(br.Done());
    }
    if (kind == Coll::kReduceScatter) {  // ScatterToBlocks: every reduced part to its block's rank
      PhaseBuilder sc(w, "scatter");
      for (const auto& sg : segs)
        for (int q = 0; q < k; ++q) {
          const Range p = comm::Part(sg.r, q, k);
          if (p.len() == 0) continue;
          const Range blocks = comm::BlocksOf(p, count, W);
          for (size_t b = blocks.lo; b < blocks.hi; ++b)
            sc.Send(sg.owner[q], static_cast<int>(b),
                    static_cast<double>(p.Intersect({count * b, count * (b + 1)}).len() * esz));
        }
      out.push_back(sc.Done());
      return out;
    }
  }
  PhaseBuilder ag(w, "island allgather");  // IslandAllGather: my shard to every member
  IslandAllToAll(w, ag, [&](size_t n, size_t i, size_t) { return static_cast<double>(shard(n, i).len() * esz); });
  out.push_back(ag.Done());
  return out;
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
      w.device_bridge.push_back(is.device && is.cards == 1 && hybrid && s.device_bridge);
    }
    if (!s.one_host) next_host += static_cast<int>((is.cards + is.cards_per_node - 1) / is.cards_per_node);
    w.islands.push_back(std::move(ranks));
  }
  w.hosts = s.one_host ? 1 : next_host;
  return w;
}

namespace {

// Seconds of one phase on the scenario's links, and what bounds it: of the ranks in `only` (per rank; null:
// every rank) and the hosts they are on (islands on nodes of their own: an island phase's network traffic is
// its island's).
Result<CollectiveCost::Phase> PhaseTime(const PhaseLoad& p, const World& w, const Links& l,
                                        const std::vector<bool>* only = nullptr) {
  const auto in = [&](size_t r) { return only == nullptr || (*only)[r]; };
  std::vector<bool> host_in(w.hosts, only == nullptr);
  for (size_t r = 0; r < w.host.size(); ++r)
    if (in(r)) host_in[w.host[r]] = true;
  std::vector<int64_t> host_ranks(w.hosts, 0);  // host (not device-bridge) ranks per host
  for (size_t r = 0; r < w.host.size(); ++r)
    if (!w.device_bridge[r]) ++host_ranks[w.host[r]];
  CollectiveCost::Phase ph{p.name, 0, "latency"};
  auto consider = [&](double bytes, double gbs, const char* link, const std::string& where) -> Status {
    if (bytes <= 0) return Status::Ok();
    if (!Positive(gbs))
      return InvalidArgument(fmt::format("the {} phase moves {:.0f} bytes on {} ({}) but that link's bandwidth is {}",
                                         p.name, bytes, link, where, gbs));
    const double t = bytes / (gbs * kGB);
    if (t > ph.seconds) {
      ph.seconds = t;
      ph.bound = fmt::format("{} ({})", link, where);
    }
    return Status::Ok();
  };
  for (size_t h = 0; h < p.net_out.size(); ++h) {
    if (!host_in[h]) continue;
    TSR_RETURN_IF_ERROR(consider(std::max(p.net_out[h], p.net_in[h]), l.net_gbs, "net",
                                 fmt::format("host {} {}", h, p.net_out[h] >= p.net_in[h] ? "out" : "in")));
  }
  int64_t messages = 0;
  for (size_t r = 0; r < p.local_out.size(); ++r) {
    if (!in(r)) continue;
    messages = std::max(messages, p.messages[r]);
    const double bytes = std::max(p.local_out[r], p.local_in[r]);
    if (w.device_bridge[r]) {
      TSR_RETURN_IF_ERROR(consider(bytes, l.device_gbs, "device", fmt::format("rank {}", r)));
    } else {
      const double share = l.cores_per_host > 0 && host_ranks[w.host[r]] > l.cores_per_host
                               ? static_cast<double>(l.cores_per_host) / static_cast<double>(host_ranks[w.host[r]])
                               : 1.0;
      TSR_RETURN_IF_ERROR(consider(bytes, l.shm_gbs * share, "shm", fmt::format("rank {}", r)));
    }
  }
  ph.seconds += static_cast<double>(messages) * l.latency_s;
  return ph;
}

// One call of a collective of `count` elements (per rank for reduce-scatter and allgather).
Result<CollectiveCost> CostOf(const Scenario& s, const World& w, const std::string& name, Coll kind, size_t count,
                              size_t esz, int64_t calls) {
  CollectiveCost c;
  c.name = name;
  c.kind = kind;
  c.calls = calls;
  const size_t W = w.host.size();
  const size_t C = kind == Coll::kAllReduce ? count : count * W;  // what the schedule cuts
  const double total = static_cast<double>(C) * static_cast<double>(esz);
  c.bytes = total;
  const Links& l = s.links;
  const size_t k = s.islands.size();
  const bool one_island = k == 1;
  const bool reduction = kind != Coll::kAllGather;
  const size_t asz = esz == 2 ? 4 : esz;  // 16-bit partial sums are f32 (inside an island and across the bridge)

  // Each island's path (docs/architecture.md, "Islands of several devices"). A world of one device island goes
  // straight to its vendor library (Tessera passes it through); a host island always runs the schedule on the
  // host engine. In a hybrid world a device island of several ranks runs its island phases on its library,
  // stages only each rank's shard, and a 16-bit reduction is widened to f32 on the device first, except where the
  // family's backend cannot widen (as built: every family but cuda), where the whole buffer is staged and the
  // island phases run on the host engine; a one-rank device island is on the device bridge or stages the buffer.
  std::vector<bool> on_library(k, false), host_ranks(W, false);
  std::vector<double> scale(k, 1.0), ring(k, 0.0);
  c.islands.resize(k);
  for (size_t i = 0; i < k; ++i) {
    const IslandSpec& is = s.islands[i];
    CollectiveCost::Island& ci = c.islands[i];
    const size_t n = w.islands[i].size();
    if (one_island) {
      on_library[i] = is.device || n == 1;
      ci.path = "one island";
    } else if (!is.device) {
      ci.path = "host";
    } else if (n == 1) {
      ci.path = "one rank";
      if (!w.device_bridge[w.islands[i][0]]) ci.staged_bytes = total;  // its shard is the buffer
    } else if (s.island_path == IslandPath::kHost) {
      ci.path = "host";
      ci.why = "what-if: the host path of every island (the code before 4d8e064)";
    } else if (reduction && esz == 2 && s.island_path == IslandPath::kAsBuilt && !WidensOnDevice(is.family)) {
      ci.path = "host";
      ci.why = fmt::format("16-bit reduction: the {} backend has no kernel to widen it to f32 on the device",
                           is.family.empty() ? std::string("unnamed family's") : is.family);
    } else {
      ci.path = "library";
      ci.widened = reduction && esz == 2;
      if (ci.widened) scale[i] = static_cast<double>(asz) / static_cast<double>(esz);
      on_library[i] = true;
      // What each rank copies over PCIe, down and up: its shard (partial sums in the accumulator type for a
      // reduction); for reduce-scatter its output block comes up; for allgather the island's contributions to its
      // shard go down and the other islands' come up.
      for (size_t j = 0; j < n; ++j) {
        const Range sh = comm::Shard(n, j, C);
        double down = 0, up = 0;
        if (kind == Coll::kAllReduce) {
          down = static_cast<double>(sh.len() * asz);
          up = static_cast<double>(sh.len() * esz);
        } else if (kind == Coll::kReduceScatter) {
          down = static_cast<double>(sh.len() * asz);
          up = static_cast<double>(count * esz);
        } else {
          size_t mine = 0;
          for (int r : w.islands[i]) mine += comm::Contribution(true, r, 0, count, C).Intersect(sh).len();
          down = static_cast<double>(mine * esz);
          up = static_cast<double>((sh.len() - mine) * esz);
        }
        ci.staged_bytes = std::max(ci.staged_bytes, std::max(down, up));
      }
    }
    if (ci.path == "host" && is.device) ci.staged_bytes = total;  // the whole buffer, the larger of in and out
    if (!on_library[i])
      for (int r : w.islands[i]) host_ranks[r] = true;
  }

  for (const PhaseLoad& p : CollectiveLoad(w, kind, count, esz, asz)) {
    if (p.name.rfind("island", 0) != 0) {  // the bridge and the scatter: the host path, every rank
      TSR_ASSIGN_OR_RETURN(auto ph, PhaseTime(p, w, l));
      c.phases.push_back(ph);
      continue;
    }
    // An island phase: the islands on their library as rings (a widened reduce-scatter moves f32), the others on
    // the host engine, all at once; the slower binds.
    const bool rs = p.name == "island reduce-scatter";
    std::vector<double> sc(k, 1.0);
    if (rs) sc = scale;
    bool lib_sends = false, host_sends = false;
    for (size_t i = 0; i < k; ++i)
      for (int r : w.islands[i]) (on_library[i] ? lib_sends : host_sends) |= p.sent[r] > 0;
    TSR_ASSIGN_OR_RETURN(auto lib, VendorPhase(s, w, p, on_library, sc, &ring));
    TSR_ASSIGN_OR_RETURN(auto host, PhaseTime(p, w, l, &host_ranks));
    CollectiveCost::Phase ph = lib.seconds >= host.seconds ? lib : host;
    ph.name = p.name + (lib_sends && host_sends ? " (vendor ring + host path)" : lib_sends ? " (vendor ring)" : "");
    c.phases.push_back(ph);
  }
  for (size_t i = 0; i < k; ++i) c.islands[i].ring_bytes = ring[i];

  // A staged device rank copies through pinned host memory, chunk by chunk, its copies overlapping the host
  // path: the call takes the longer of the two.
  double staged = 0;
  for (const auto& ci : c.islands) staged = std::max(staged, ci.staged_bytes);
  if (staged > 0) {
    if (!Positive(l.pcie_gbs))
      return InvalidArgument(
          fmt::format("the {} stages device ranks through host memory but the PCIe bandwidth is {}", name, l.pcie_gbs));
    c.staging_s = staged / (l.pcie_gbs * kGB);
  }
  double host_path = 0;
  for (const auto& ph : c.phases) host_path += ph.seconds;
  c.seconds = std::max(host_path, c.staging_s);
  return c;
}

}  // namespace

Result<CollectiveCost> CallCost(const Scenario& s, Coll kind, size_t count, size_t esz) {
  if (s.islands.empty()) return InvalidArgument("no islands: give at least one");
  TSR_ASSIGN_OR_RETURN(World w, WorldOf(s));
  return CostOf(s, w, CollName(kind), kind, count, esz, 1);
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
  std::vector<std::tuple<std::string, Coll, size_t, size_t, int64_t>> calls;
  if (W > 1) {
    if (m.zero <= 1) calls.emplace_back("gradient allreduce", Coll::kAllReduce, P, m.grad_bytes, 1);
    if (m.zero == 1) calls.emplace_back("parameter allgather", Coll::kAllGather, per_rank, m.param_bytes, 1);
    if (m.zero >= 2)
      calls.emplace_back("gradient reduce-scatter", Coll::kReduceScatter, per_rank, m.grad_bytes, m.accum);
    if (m.zero == 2) calls.emplace_back("parameter allgather", Coll::kAllGather, per_rank, m.param_bytes, 1);
    if (m.zero == 3)
      calls.emplace_back("parameter allgather (forward and backward)", Coll::kAllGather, per_rank, m.param_bytes,
                         2 * m.accum);
  }
  for (const auto& [name, kind, count, esz, n] : calls) {
    TSR_ASSIGN_OR_RETURN(auto c, CostOf(s, w, name, kind, count, esz, n));
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
  s.device_bridge = false;  // every island on nodes of its own: a hybrid world's device ranks stage through the host
  s.model.host_adam_gbs = h.host_adam_gbs;
  s.links.net_gbs = h.net_gbps / 8;
  s.links.pcie_gbs = h.pcie_gbs;
  s.links.shm_gbs = h.shm_gbs;
  s.links.latency_s = h.latency_us * 1e-6;
  return s;
}

}  // namespace tessera::sched::perf
