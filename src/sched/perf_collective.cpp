// sched/perf_collective: the load and the time of one collective call in the step model (perf_model.hpp,
// docs/model.md): every phase's bytes per link from comm/schedule (CollectiveLoad), each island's path (its library
// or the host engine, per collective and type, 16-bit reductions widened or native), the links' times (the host's
// NICs rail-aligned, shm, the device bridge, the vendor rings) and the staging over PCIe (CallCost).
#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "comm/runtime/runtime.hpp"
#include "common/vendor.hpp"
#include "sched/perf_model.hpp"

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
    p_.rank_net_out.assign(w.host.size(), 0);
    p_.rank_net_in.assign(w.host.size(), 0);
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
      p_.rank_net_out[from] += bytes;
      p_.rank_net_in[to] += bytes;
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
// host's network: min(NICs, cards per node) x net_gbs (one ring per NIC: the host's rings share its NICs, and each
// carries its piece once through every host boundary, so a host sends a rank's ring volume in all). Latency: n-1
// ring steps. `ring_bytes` (per island): the most one rank sends.
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
    const double rails = static_cast<double>(std::min(s.links.nics_per_node, is.cards_per_node));
    if (spans && rails * s.links.net_gbs < bw) {
      bw = rails * s.links.net_gbs;
      bound = fmt::format("net (island {}'s ring between hosts, {} NIC{} a node)", i, rails, rails == 1 ? "" : "s");
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

const char* IslandPathName(IslandPath p) {
  switch (p) {
    case IslandPath::kAsBuilt:
      return "as built";
    case IslandPath::kHostReduce:
      return "host reduce";
    case IslandPath::kHost:
      return "host";
  }
  return "?";
}

const char* IslandReduceName(IslandReduce r) { return r == IslandReduce::kNative ? "native" : "f32"; }

// The runtime row's capabilities, as comm/world.cpp and OpenDeviceRank ask them (comm::HasDeviceBridge also needs
// Tessera's kernels in the build that runs: a model of another machine assumes them built).
bool HasDeviceBridge(const std::string& family) {
  if (family.empty()) return true;
  const DeviceFamily* f = FindDeviceFamily(family);
  const comm::RuntimeRow* row = f ? comm::FindRuntimeRow(f->runtime) : nullptr;
  return row != nullptr && row->host_register && row->stream_memops;
}

bool HasCollectiveLibrary(const std::string& family) {
  if (family.empty()) return true;
  const DeviceFamily* f = FindDeviceFamily(family);
  return f != nullptr && f->ccl[0] != '\0';
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

LinkKind World::Link(int a, int b) const {
  if (host[a] != host[b]) return LinkKind::kNet;
  return device_bridge[a] && device_bridge[b] ? LinkKind::kDevice : LinkKind::kShm;
}

std::vector<PhaseLoad> CollectiveLoad(const World& w, CollKind kind, size_t count, size_t esz, size_t asz) {
  const size_t W = w.host.size();
  const int k = static_cast<int>(w.islands.size());
  const size_t C = kind == CollKind::kAllReduce ? count : count * W;  // what the schedule cuts (hierarchical.cpp)
  const std::vector<comm::Segment> segs = comm::Segments(w.islands, C);
  const std::vector<int> fw = w.fold_weights.empty() ? std::vector<int>(static_cast<size_t>(k), 1) : w.fold_weights;
  const auto shard = [C](size_t n, size_t j) { return comm::Shard(n, j, C); };
  std::vector<PhaseLoad> out;
  if (kind == CollKind::kAllGather) {
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
      PhaseBuilder br(w, kind == CollKind::kAllReduce ? "bridge" : "bridge reduce");
      for (const auto& sg : segs)
        for (int J = 0; J < k; ++J) {
          const size_t psz = w.islands[J].size() == 1 ? esz : asz;
          for (int q = 0; q < k; ++q) {
            if (q == J) continue;
            br.Send(sg.owner[J], sg.owner[q], static_cast<double>(comm::Part(sg.r, q, fw).len() * psz));
            if (kind == CollKind::kAllReduce)
              br.Send(sg.owner[J], sg.owner[q], static_cast<double>(comm::Part(sg.r, J, fw).len() * esz));
          }
        }
      out.push_back(br.Done());
    }
    if (kind == CollKind::kReduceScatter) {  // ScatterToBlocks: every reduced part to its block's rank
      PhaseBuilder sc(w, "scatter");
      for (const auto& sg : segs)
        for (int q = 0; q < k; ++q) {
          const Range p = comm::Part(sg.r, q, fw);
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
  // The network, rail-aligned: the rank of local index i on its host's NIC i % nics_per_node; each NIC at net_gbs
  // each way. With one NIC a host's bytes all share it.
  const size_t nics = static_cast<size_t>(std::max<int64_t>(l.nics_per_node, 1));
  std::vector<std::vector<double>> rail_out(w.hosts, std::vector<double>(nics, 0)), rail_in = rail_out;
  for (size_t r = 0; r < w.host.size(); ++r) {
    rail_out[w.host[r]][w.local[r] % nics] += p.rank_net_out[r];
    rail_in[w.host[r]][w.local[r] % nics] += p.rank_net_in[r];
  }
  for (size_t h = 0; h < p.net_out.size(); ++h) {
    if (!host_in[h]) continue;
    for (size_t n = 0; n < nics; ++n) {
      const bool out = rail_out[h][n] >= rail_in[h][n];
      TSR_RETURN_IF_ERROR(consider(std::max(rail_out[h][n], rail_in[h][n]), l.net_gbs, "net",
                                   nics == 1 ? fmt::format("host {} {}", h, out ? "out" : "in")
                                             : fmt::format("host {} NIC {} {}", h, n, out ? "out" : "in")));
    }
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
}  // namespace

Result<CollectiveCost> CallCost(const Scenario& s, const World& w, const std::string& name, CollKind kind, size_t count,
                                size_t esz, int64_t calls) {
  CollectiveCost c;
  c.name = name;
  c.kind = kind;
  c.calls = calls;
  const size_t W = w.host.size();
  const size_t C = kind == CollKind::kAllReduce ? count : count * W;  // what the schedule cuts
  const double total = static_cast<double>(C) * static_cast<double>(esz);
  c.bytes = total;
  const Links& l = s.links;
  const size_t k = s.islands.size();
  const bool one_island = k == 1;
  const bool reduction = kind != CollKind::kAllGather;
  const size_t asz = esz == 2 ? 4 : esz;  // 16-bit partial sums are f32 (inside an island and across the bridge)

  // Each island's path (docs/architecture.md, "Islands of several devices"). A world of one device island goes
  // straight to its vendor library (Tessera passes it through); a host island always runs the schedule on the
  // host engine. In a hybrid world a device island of several ranks runs its island phases on its library and
  // stages only each rank's shard; a 16-bit reduction is widened to f32 on the device first (kF32: the ring carries
  // f32) or reduced by the library in its own type (kNative); the shard crosses the bridge as f32 partial sums. An
  // island whose family has no library (emu) stages the whole buffer and runs its island phases on the host engine;
  // so do the what-ifs. A one-rank device island is on the device bridge or stages the buffer.
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
    } else if (!HasCollectiveLibrary(is.family)) {
      ci.path = "host";
      ci.why = fmt::format("the {} family has no collective library", is.family);
    } else if (reduction && esz == 2 && s.island_path == IslandPath::kHostReduce && !HasDeviceBridge(is.family)) {
      ci.path = "host";
      ci.why = fmt::format(
          "what-if: 16-bit reductions of the {} family's pinned-staging rank on the host engine (no widening on the "
          "device: the code before it, or without the operator library)",
          is.family);
    } else {
      ci.path = "library";
      ci.widened = reduction && esz == 2 && s.island_reduce == IslandReduce::kF32;
      ci.native = reduction && esz == 2 && s.island_reduce == IslandReduce::kNative;
      if (ci.widened) scale[i] = static_cast<double>(asz) / static_cast<double>(esz);
      on_library[i] = true;
      // What each rank copies over PCIe, down and up: its shard (partial sums in the accumulator type for a
      // reduction, widened on the device; a native island's shard comes down in the data's type and is widened on
      // the host); for reduce-scatter its output block comes up; for allgather the island's contributions to its
      // shard go down and the other islands' come up.
      const size_t psz = ci.native ? esz : asz;
      for (size_t j = 0; j < n; ++j) {
        const Range sh = comm::Shard(n, j, C);
        double down = 0, up = 0;
        if (kind == CollKind::kAllReduce) {
          down = static_cast<double>(sh.len() * psz);
          up = static_cast<double>(sh.len() * esz);
        } else if (kind == CollKind::kReduceScatter) {
          down = static_cast<double>(sh.len() * psz);
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

Result<CollectiveCost> CallCost(const Scenario& s, CollKind kind, size_t count, size_t esz) {
  if (s.islands.empty()) return InvalidArgument("no islands: give at least one");
  TSR_ASSIGN_OR_RETURN(World w, WorldOf(s));
  return CallCost(s, w, CollName(kind), kind, count, esz, 1);
}

}  // namespace tessera::sched::perf
