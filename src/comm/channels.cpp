// comm/channels: how a rank finds its peers and joins them — Comm::PublishRecords (every rank's record in the
// store: island, vendor, device, host identity, pid, address, transport order, and each transport row's entry:
// viable with its domain and connection blob, or why not) and Comm::SetUpChannels (one send and one receive
// channel to every other rank, on the row the pair chose: transport/transport.hpp). A device-bridge rank's links
// to other islands on a row without rings go through a TcpRelay (transport/relay.hpp), whose host rings its copy
// engines use. First, the rank's host thread pool (comm/host_pool.hpp), sized from the ranks of the communicator
// on this host.
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <functional>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "comm/comm.hpp"
#include "comm/transport/rows.hpp"
#include "common/env.hpp"
#include "common/text.hpp"
#include "common/vendor.hpp"

namespace tessera::comm {
std::vector<std::string> Comm::RowNames() const {
  std::vector<std::string> names;
  for (const auto& r : rows_) names.push_back(r->name());
  return names;
}

TransportSetup Comm::Setup() const {
  TransportSetup s;
  s.rank = rank_;
  s.size = size_;
  s.token = token_;
  // Distinct per job and per communicator of the job (its namespace).
  s.name_prefix = fmt::format("/tsr-{:08x}-", static_cast<uint32_t>(std::hash<std::string>{}(token_ + "|" + ns_)));
  s.store = store_.get();
  s.timeout = timeout_;
  s.peer_name = [this](int p) { return PeerName(p); };
  s.host_addr = infos_.empty() ? std::string() : infos_[rank_].addr;
  return s;
}

Status Comm::PublishRecords(int island, const std::string& vendor, const std::string& device,
                            const std::string& store_host) {
  rows_ = MakeTransports();
  TSR_ASSIGN_OR_RETURN(TransportOrder order, TransportOrderFromEnv(rows_));
  const bool loopback_store = store_host == "127.0.0.1" || store_host == "localhost";
  std::string host_addr = env::Get("TESSERA_BRIDGE_ADDR").value_or("");
  if (host_addr.empty()) {
    char name[256] = {};
    gethostname(name, sizeof(name) - 1);
    host_addr = loopback_store ? "127.0.0.1" : name;
  }
  // Each row named by an order: viable here, and listening, or why not. A world of one rank joins no one.
  std::vector<RowRecord> mine(rows_.size());
  TransportSetup setup = Setup();
  setup.host_addr = host_addr;
  setup.loopback_store = loopback_store;
  for (size_t i = 0; i < rows_.size(); ++i) {
    Transport& row = *rows_[i];
    auto named = [&](const std::vector<std::string>& o) { return std::count(o.begin(), o.end(), row.name()) > 0; };
    RowRecord& r = mine[i];
    if (!named(order.island) && !named(order.bridge)) {
      r.why_not = "not in the transport order";
    } else if (order.automatic && row.caps().default_needs_rdma && !row.caps().rdma) {
      r.why_not =
          fmt::format("offers no RDMA transport here (TESSERA_TRANSPORTS=auto; name {} there to use it)", row.name());
    } else if (Status v = row.Viable(); !v.ok()) {
      r.why_not = v.message();
    } else if (size_ > 1) {
      TSR_ASSIGN_OR_RETURN(r.blob, row.Listen(setup));
      r.domain = row.Domain();
      r.viable = true;
    } else {
      r.why_not = "a world of one rank";
    }
  }
  const std::vector<std::string> names = RowNames();
  std::string me = fmt::format("{}|{}|{}|{}|{}|{}|{}|{}", island, vendor, device, HostId(), getpid(), host_addr,
                               order.Encode(), EncodeRowRecords(names, mine));
  TSR_RETURN_IF_ERROR(store_->Set("rank/" + std::to_string(rank_), me));
  infos_.resize(size_);
  for (int r = 0; r < size_; ++r) {
    auto v = store_->Get("rank/" + std::to_string(r), timeout_);
    if (!v.ok())
      return v.status().WithContext(
          fmt::format("rank {} waiting for rank {} to join (TESSERA_WORLD_SIZE={})", rank_, r, size_));
    auto f = SplitAt(*v, '|');
    if (f.size() != 8) return RemoteError(fmt::format("malformed record of rank {} in the store: '{}'", r, *v));
    RankInfo& ri = infos_[r];
    ri.rank = r;
    auto isl = env::ParseInt(fmt::format("island of rank {}", r), f[0], 0, size_ - 1);
    auto pid = env::ParseInt(fmt::format("pid of rank {}", r), f[4], 0, INT32_MAX);
    if (!isl.ok()) return InvalidArgument(isl.status().message() + " (its record: '" + *v + "')");
    if (!pid.ok()) return RemoteError(pid.status().message() + " (its record: '" + *v + "')");
    ri.island = static_cast<int>(*isl);
    ri.vendor = f[1];
    ri.device = f[2];
    ri.host_id = f[3];
    ri.pid = static_cast<int>(*pid);
    ri.addr = f[5];
    ri.order = f[6];
    auto rows = DecodeRowRecords(names, f[7]);
    if (!rows.ok()) return rows.status().WithContext(fmt::format("the record of rank {}", r));
    ri.rows = std::move(rows).value();
    if (ri.order != infos_[0].order)
      return InvalidArgument(
          fmt::format("rank {} and rank 0 have different transport orders ('{}' and '{}', island/bridge): set "
                      "TESSERA_TRANSPORTS (or TESSERA_BRIDGE) alike on every rank",
                      r, ri.order, infos_[0].order));
  }
  order_ = order;
  return Status::Ok();
}

Result<int> Comm::PairRow(int a, int b) const {
  const std::vector<std::string>& order = infos_[a].island == infos_[b].island ? order_.island : order_.bridge;
  return ChooseRow(RowNames(), order, infos_[a].rows, infos_[b].rows, PeerName(a), PeerName(b));
}

bool Comm::PairOnRings(int a, int b) const {
  auto row = PairRow(a, b);
  return row.ok() && rows_[*row]->caps().rings;
}

Status Comm::SetUpChannels() {
  TSR_ASSIGN_OR_RETURN(uint64_t ring, env::Bytes("TESSERA_SHM_RING"));
  TSR_ASSIGN_OR_RETURN(uint64_t device_ring_bytes, env::Bytes("TESSERA_DEVICE_RING"));
  if (ring < (64 << 10) || ring % 4096 != 0)
    return InvalidArgument(fmt::format("TESSERA_SHM_RING={} must be at least 64K and a multiple of 4K", ring));
  if (device_ring_bytes < (64 << 10) || device_ring_bytes % 4096 != 0)
    return InvalidArgument(
        fmt::format("TESSERA_DEVICE_RING={} must be at least 64K and a multiple of 4K", device_ring_bytes));
  transport_.assign(size_, "");
  row_of_.assign(size_, -1);
  InitLinkCounters(size_);
  send_.resize(size_);
  recv_.resize(size_);
  const RankInfo& me = infos_[rank_];
  // The rank's host threads for large copies and folds (TESSERA_HOST_THREADS; one: none, all inline).
  int local_ranks = 0;
  for (const RankInfo& r : infos_) local_ranks += r.host_id == me.host_id;
  TSR_ASSIGN_OR_RETURN(int threads, HostThreadsFromEnv(local_ranks));
  if (threads > 1 && host_pool() == nullptr) set_host_pool(std::make_unique<HostPool>(threads));
  // Each peer on the first row of the order (the island's, or the bridge's across islands) that joins the two.
  // An island that spans hosts keeps its schedule (the engine does not care what a channel is).
  std::vector<std::vector<int>> peers_of(rows_.size());
  for (int p = 0; p < size_; ++p) {
    if (p == rank_) continue;
    TSR_ASSIGN_OR_RETURN(row_of_[p], PairRow(rank_, p));
    transport_[p] = rows_[row_of_[p]]->name();
    peers_of[row_of_[p]].push_back(p);
  }
  // Rings between a device-bridge rank and its bridge peers are TESSERA_DEVICE_RING bytes, so that the
  // copy engines keep several large transfers in flight; the others TESSERA_SHM_RING. Every rank
  // computes every ring's size from the world, so the owner and its writers agree.
  auto device_rank = [&](int r) {
    const Island& isl = islands_[infos_[r].island];
    return DeviceBridgeEligible(isl, DType::kFloat32);
  };
  TransportSetup setup = Setup();
  setup.ring_bytes = [&](int from, int to) -> size_t {
    return from != to && infos_[from].island != infos_[to].island && (device_rank(from) || device_rank(to))
               ? device_ring_bytes
               : ring;
  };
  for (size_t i = 0; i < rows_.size(); ++i) {
    for (const RankInfo& ri : infos_) setup.blobs.push_back(ri.rows[i].viable ? ri.rows[i].blob : std::string());
    const auto deadline = std::chrono::steady_clock::now() + timeout_;
    TSR_ASSIGN_OR_RETURN(std::vector<Link> links, rows_[i]->Connect(setup, peers_of[i], deadline));
    for (Link& l : links) {
      send_[l.peer] = std::move(l.send);
      recv_[l.peer] = std::move(l.recv);
    }
    setup.blobs.clear();
  }
  // A device-bridge rank's copy engines need ring ends on its links to other islands.
  if (device_rank(rank_)) {
    const DeviceFamily* family = FindDeviceFamily(islands_[my_island_].family);
    device_memory_ = family != nullptr ? family->runtime : "";
    device_ring_bytes_ = device_ring_bytes;
    TSR_RETURN_IF_ERROR(RelayBridgeLinks(device_ring_bytes, device_memory_).status());
  }
  return Status::Ok();
}

bool Comm::TakesDeviceMemory(int p, std::string_view memory) const {
  return !memory.empty() && send_[p] && recv_[p] && send_[p]->sends_from(memory) && recv_[p]->receives_into(memory);
}

Result<int> Comm::RelayBridgeLinks(size_t ring_bytes, std::string_view device_memory) {
  relays_.resize(size_);
  int n = 0;
  for (int p = 0; p < size_; ++p) {
    if (p == rank_ || rows_[row_of_[p]]->caps().rings || infos_[p].island == infos_[rank_].island) continue;
    if (!relays_[p] && TakesDeviceMemory(p, device_memory)) continue;
    ++n;
    if (relays_[p]) continue;
    TSR_ASSIGN_OR_RETURN(relays_[p], TcpRelay::Create(std::move(send_[p]), std::move(recv_[p]), ring_bytes, PeerName(p),
                                                      std::min(timeout_, std::chrono::milliseconds(10000))));
    send_[p] = relays_[p]->Writer();
    recv_[p] = relays_[p]->Reader();
  }
  return n;
}

}  // namespace tessera::comm
