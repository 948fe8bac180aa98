// comm/world: how a rank joins a communicator and how it learns that the job is failing. Joining: the
// parameters (TESSERA_* or tsrCommInitRank's), the store (served by rank 0 when no launcher does), every
// rank's record (island, vendor, device, host identity, pid, address, transport entries: channels.cpp), the
// islands and their validation, then the channels (channels.cpp); tsrCommSplit's sub-communicators. Failing: the health
// check while waiting (a posted abort, a dead same-host peer), the explanation of a timeout (the chain of
// stuck ranks), tsrCommAbort and tsrCommGetAsyncError; names of peers and hosts for error messages.
#include <fmt/format.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <thread>

#include "comm/comm.hpp"
#include "comm/runtime/runtime.hpp"
#include "common/env.hpp"
#include "common/log.hpp"
#include "common/process.hpp"
#include "common/text.hpp"
#include "common/vendor.hpp"

namespace tessera::comm {
Result<std::unique_ptr<Comm>> Comm::Create(const InitParams& params) {
  log::Init();
  std::unique_ptr<Comm> c(new Comm());
  TSR_RETURN_IF_ERROR(c->Init(params));
  return c;
}

Comm::~Comm() {
  // TESSERA_LINK_TRACE: what this communicator sent over each link (before any member goes away).
  const std::string prefix = env::Get("TESSERA_LINK_TRACE").value_or("");
  if (prefix.empty() || islands_.empty() || send_.empty()) return;
  const std::string path = fmt::format("{}.rank{}", prefix, rank_);
  std::FILE* f = std::fopen(path.c_str(), "a");
  if (f == nullptr) {
    TSR_LOG_WARN("TESSERA_LINK_TRACE: cannot write {}: {}", path, std::strerror(errno));
    return;
  }
  std::fprintf(f, "comm rank %d of %d island %d (%s) islands %zu calls %llu\n", rank_, size_,
               islands_[my_island_].index, islands_[my_island_].vendor.c_str(), islands_.size(),
               static_cast<unsigned long long>(seq_));
  std::vector<int> island_of(size_, 0);
  for (const Island& isl : islands_)
    for (int r : isl.ranks) island_of[r] = isl.index;
  for (int p = 0; p < size_; ++p)
    if (p != rank_)
      std::fprintf(f, "peer %d island %d %s sent %llu\n", p, island_of[p], transport_[p].c_str(),
                   static_cast<unsigned long long>(SentTo(p)));
  if (device_) {
    const std::string line = device_->TraceLine();
    if (!line.empty()) std::fprintf(f, "%s\n", line.c_str());
  }
  std::fclose(f);
}

Result<InitParams> Comm::ParamsFromEnv() {
  InitParams p;
  TSR_ASSIGN_OR_RETURN(int64_t world, env::RequireInt("TESSERA_WORLD_SIZE", 1, 1 << 20));
  TSR_ASSIGN_OR_RETURN(int64_t rank, env::RequireInt("TESSERA_RANK", 0, world - 1));
  TSR_ASSIGN_OR_RETURN(int64_t island, env::Int("TESSERA_ISLAND", 0, world - 1));
  TSR_ASSIGN_OR_RETURN(p.timeout, env::Duration("TESSERA_TIMEOUT"));
  p.world = static_cast<int>(world);
  p.rank = static_cast<int>(rank);
  p.island = static_cast<int>(island);
  p.vendor = env::Get("TESSERA_ISLAND_VENDOR").value_or("");
  p.device = env::GetOrDefault("TESSERA_DEVICE");  // checked with the store address by Init, for every path
  TSR_ASSIGN_OR_RETURN(p.store_addr, env::Require("TESSERA_STORE"));
  TSR_ASSIGN_OR_RETURN(p.token, env::Require("TESSERA_TOKEN"));
  p.serve_store = true;
  return p;
}

Status Comm::Init(const InitParams& p) {
  if (p.world < 1 || p.world > (1 << 20))
    return InvalidArgument(fmt::format("world size {} is not in [1, {}]", p.world, 1 << 20));
  if (p.rank < 0 || p.rank >= p.world)
    return InvalidArgument(fmt::format("rank {} is not in [0, {}) (world size {})", p.rank, p.world, p.world));
  if (p.island < 0 || p.island >= p.world)
    return InvalidArgument(fmt::format("rank {}: island index {} is not in [0, {})", p.rank, p.island, p.world));
  if (p.timeout <= std::chrono::milliseconds::zero())
    return InvalidArgument(fmt::format("rank {}: timeout {} ms is not positive", p.rank, p.timeout.count()));
  if (p.vendor.find('|') != std::string::npos || p.device.find('|') != std::string::npos)
    return InvalidArgument(
        fmt::format("rank {}: vendor '{}' / device '{}' must not contain '|'", p.rank, p.vendor, p.device));
  if (p.token.empty()) return InvalidArgument(fmt::format("rank {}: the job token is empty", p.rank));
  const int island = p.island;
  timeout_ = p.timeout;
  ns_ = p.ns;
  if (p.island_reduce.empty()) {
    TSR_ASSIGN_OR_RETURN(island_reduce_, env::Choice("TESSERA_ISLAND_REDUCE", {"f32", "native"}));
  } else if (p.island_reduce == "f32" || p.island_reduce == "native") {
    island_reduce_ = p.island_reduce;
  } else {
    return InvalidArgument(
        fmt::format("rank {}: island_reduce '{}' is not \"f32\" or \"native\"", p.rank, p.island_reduce));
  }
  std::string vendor = p.vendor.empty() ? "island" + std::to_string(island) : p.vendor;
  std::string device = p.device.empty() ? env::DeclaredString("TESSERA_DEVICE") : p.device;
  auto name = ParseDeviceName(device, "TESSERA_DEVICE");  // common/vendor: the one parser of device strings
  if (!name.ok()) return name.status().WithContext(fmt::format("rank {}", p.rank));
  if (!name->host()) {
    // The family's runtime row decides: the device bridge where the row has it (DeviceBridgeRank), else pinned staging
    // (StagedRank).
    auto dev = OpenDeviceRank(*name);
    if (!dev.ok()) return dev.status().WithContext(fmt::format("rank {}", p.rank));
    device_ = std::move(dev).value();
  }
  rank_ = p.rank;
  size_ = p.world;
  my_island_ = island;

  const std::string& store_addr = p.store_addr;
  store_addr_ = store_addr;
  auto colon = store_addr.rfind(':');
  if (colon == std::string::npos || colon == 0)
    return InvalidArgument(fmt::format("store address TESSERA_STORE='{}' is not host:port", store_addr));
  std::string store_host = store_addr.substr(0, colon);
  TSR_ASSIGN_OR_RETURN(int64_t store_port, env::ParseInt("port of the store address '" + store_addr + "'",
                                                         store_addr.substr(colon + 1), 1, 65535));
  token_ = p.token;
  if (p.serve_store && rank_ == 0 && (store_host == "127.0.0.1" || store_host == "localhost")) {
    // Rank 0 serves the store when no launcher does (the port is free); otherwise it is a client.
    auto server = StoreServer::Start(store_host, static_cast<int>(store_port), token_);
    if (server.ok()) store_server_ = std::move(server).value();
  }
  auto store = StoreClient::Connect(store_addr, token_, timeout_, p.token_mismatch);
  if (!store.ok()) return store.status().WithContext("rank " + std::to_string(rank_) + " joining the job");
  store_ = PrefixedStore(std::move(store).value(), ns_.empty() ? "" : "ns/" + ns_ + "/");

  TSR_RETURN_IF_ERROR(PublishRecords(island, vendor, device, store_host));
  // Islands: indices 0..k-1, one vendor and one family each.
  std::map<int, Island> by_index;
  for (const auto& ri : infos_) {
    Island& isl = by_index[ri.island];
    std::string family = ri.device.substr(0, ri.device.find(':'));
    if (isl.ranks.empty()) {
      isl.index = ri.island;
      isl.vendor = ri.vendor;
      isl.family = family;
    } else if (isl.vendor != ri.vendor || isl.family != family) {
      return InvalidArgument(
          fmt::format("island {} mixes vendor/device '{}/{}' (rank {}) and '{}/{}' (rank {}): "
                      "check TESSERA_ISLAND_VENDOR and TESSERA_DEVICE",
                      ri.island, isl.vendor, isl.family, isl.ranks.front(), ri.vendor, family, ri.rank));
    }
    isl.ranks.push_back(ri.rank);
  }
  int expect = 0;
  for (auto& [idx, isl] : by_index) {
    if (idx != expect)
      return InvalidArgument(
          fmt::format("TESSERA_ISLAND values must be 0..k-1 without gaps; island {} has no ranks", expect));
    ++expect;
    islands_.push_back(isl);
  }
  for (const auto& isl : islands_) island_ranks_.push_back(isl.ranks);
  const auto& mine = islands_[my_island_].ranks;
  local_ = static_cast<int>(std::find(mine.begin(), mine.end(), rank_) - mine.begin());
  // Device islands on the device bridge: decided once, from the world and the environment, so every rank
  // reaches the same answer (see Island::device_bridge).
  // `auto`: where every link is on a row with host rings (shm); `device`: also over TCP (the rank's TCP links then go
  // through a TcpRelay, whose host rings its copy engines use).
  TSR_ASSIGN_OR_RETURN(std::string device_bridge_mode,
                       env::Choice("TESSERA_DEVICE_BRIDGE", {"auto", "staged", "device"}));
  TSR_ASSIGN_OR_RETURN(std::string copy_bridge, env::Choice("TESSERA_COPY_BRIDGE", {"auto", "on", "off"}));
  for (auto& isl : islands_) {
    const int r0 = isl.ranks.front();
    const bool all_shm = std::all_of(infos_.begin(), infos_.end(),
                                     [&](const RankInfo& ri) { return ri.rank == r0 || PairOnRings(r0, ri.rank); });
    const DeviceFamily* row = FindDeviceFamily(isl.family);
    const bool here = row != nullptr && isl.ranks.size() == 1 &&
                      (device_bridge_mode == "device" || (device_bridge_mode == "auto" && all_shm));
    isl.device_bridge = here && HasDeviceBridge(*row);
    isl.copy_only = here && copy_bridge != "off" && HasCopyBridge(*row);
  }
  // A copy bridge folds nothing: it is taken only where another island folds, and by default (`auto`) only where an
  // island on the device bridge folds on its device: beside host islands alone, whose host engines would then fold
  // the whole bridge, pinned staging is faster (docs/devices.md, "The copy bridge").
  const bool device_folds =
      std::any_of(islands_.begin(), islands_.end(), [](const Island& isl) { return isl.device_bridge; });
  if (std::all_of(islands_.begin(), islands_.end(), [](const Island& isl) { return isl.copy_only; }) ||
      (copy_bridge == "auto" && !device_folds))
    for (auto& isl : islands_) isl.copy_only = false;
  for (auto& isl : islands_) isl.device_bridge |= isl.copy_only;
  // Each island decides alone: a CUDA island keeps the device bridge beside staged islands. What every rank must
  // agree on is how an allreduce is cut into collectives (BridgeChunks, a world constant computed from the islands
  // alone), and the device-bridge ranks follow it too (DeviceBridgeRank cuts its device-bridge allreduce into the same
  // chunks).
  TSR_RETURN_IF_ERROR(SetUpChannels());
  p2p_sent_.assign(size_, 0);
  p2p_recvd_.assign(size_, 0);
  bool any_device = false;
  for (const auto& isl : islands_) any_device |= isl.on_device();
  if (any_device && islands_.size() > 1) {
    const std::string chunk = env::GetOrDefault("TESSERA_DEVICE_CHUNK");
    bridge_chunk_auto_ = chunk == "auto";
    if (!bridge_chunk_auto_) {
      auto bytes = env::ParseBytes("TESSERA_DEVICE_CHUNK", chunk);
      if (!bytes.ok() || *bytes < 4096 || *bytes % kChannelAlign != 0)
        return InvalidArgument(fmt::format(
            "TESSERA_DEVICE_CHUNK='{}' must be `auto` or a size of at least 4096 bytes, a multiple of {} (4M, 16M)",
            chunk, kChannelAlign));
      bridge_chunk_bytes_ = *bytes;
    }
  }
  if (device_) {
    TSR_RETURN_IF_ERROR(device_->Attach(this));
    direct_ = device_->DirectPath();
  }
  TSR_RETURN_IF_ERROR(store_->Barrier("init-done", size_, timeout_));
  TSR_LOG_INFO("rank {}: joined — {}", rank_, Describe());
  return Status::Ok();
}

Result<std::vector<HostPath::BridgeRings>> Comm::DeviceBridgeRings() const {
  std::vector<BridgeRings> links;
  for (int p = 0; p < size_; ++p) {
    if (infos_[p].island == my_island_) continue;
    if (const TcpRelay* r = relay(p)) {
      links.push_back({r->ring(TcpRelay::kIn), r->ring_bytes(TcpRelay::kIn), r->ring(TcpRelay::kOut),
                       r->ring_bytes(TcpRelay::kOut), true});
    } else if (recv_[p]->dma() && send_[p]->dma()) {  // a row with rings (TransportCaps::rings)
      auto [in, in_bytes] = recv_[p]->ring_memory();
      auto [out, out_bytes] = send_[p]->ring_memory();
      links.push_back({in, in_bytes, out, out_bytes, false});
    } else if (TakesDeviceMemory(p, device_memory_)) {  // no rings: a landing buffer for what it folds
      links.push_back({nullptr, device_ring_bytes_, nullptr, 0, false, true, p});
    } else {
      return InternalError(fmt::format("device bridge: no host ring on the link to rank {}", p));
    }
  }
  return links;
}

HostPath::Shape Comm::WorldShape() const {
  const Island& mine = islands_[my_island_];
  return {.rank = rank_,
          .size = size_,
          .islands = static_cast<int>(islands_.size()),
          .island = mine.index,
          .island_size = static_cast<int>(mine.ranks.size()),
          .island_rank = local_,
          .island_ranks = mine.ranks,
          .timeout = timeout_,
          .native_island_reduce = island_reduce_ == "native"};
}

std::string Comm::Describe() const {
  std::string out = fmt::format("world of {} rank{} in {} island{}:", size_, size_ == 1 ? "" : "s", islands_.size(),
                                islands_.size() == 1 ? "" : "s");
  for (const auto& isl : islands_)
    out += fmt::format(" [{}: {} × {}, ranks {}..{}]", isl.index, isl.vendor, isl.ranks.size(), isl.ranks.front(),
                       isl.ranks.back());
  std::set<std::string> bridges, inside;
  for (int p = 0; p < size_; ++p) {
    if (p == rank_) continue;
    (infos_[p].island == my_island_ ? inside : bridges).insert(transport_[p]);
  }
  auto join = [](const std::set<std::string>& s) {
    std::string r;
    for (const auto& x : s) r += (r.empty() ? "" : "+") + x;
    return r.empty() ? std::string("none") : r;
  };
  out += fmt::format("; island library: host ({}); bridge: {}", join(inside),
                     islands_.size() == 1 ? "none (single island: direct path)" : join(bridges));
  if (device_) out += "; device: " + device_->Describe();
  return out;
}

std::string Comm::PeerName(int peer) const {
  if (peer < 0 || peer >= size_) return "rank " + std::to_string(peer);
  if (infos_[peer].host_id == infos_[rank_].host_id) return fmt::format("rank {} ({})", peer, infos_[peer].vendor);
  // On another host: name it (its hostname and the address its bridge listens on).
  const std::string& id = infos_[peer].host_id;
  return fmt::format("rank {} ({}) on host {} ({})", peer, infos_[peer].vendor, id.substr(0, id.find('/')),
                     infos_[peer].addr);
}

Status Comm::CheckHealth(const std::vector<int>& waiting_on) {
  if (abort_requested_.load(std::memory_order_acquire))
    return RemoteError(fmt::format("rank {}: the communicator was aborted (tsrCommAbort)", rank_));
  auto abort = store_->Get("abort", std::chrono::milliseconds(0));  // an absent key: answered at once
  if (abort.ok()) {
    aborted_by_peer_ = true;
    return RemoteError("another rank failed — " + *abort);
  }
  for (int p : waiting_on) {
    if (infos_[p].host_id == infos_[rank_].host_id && infos_[p].pid > 0 &&
        !ProcessAlive(infos_[p].pid))  // same host: shm or tcp
      return RemoteError(fmt::format("{} (pid {}) exited", PeerName(p), infos_[p].pid));
  }
  return Status::Ok();
}

std::string Comm::StoreSilence(const Status& why) const {
  // The store is gone too: its host (node 0's) is the likely one that disappeared. Name it.
  const std::string store_host = store_addr_.substr(0, store_addr_.rfind(':'));
  std::string where;
  for (const auto& ri : infos_) {
    if (ri.host_id != infos_[rank_].host_id && ri.addr == store_host) {
      where = fmt::format(", on host {} ({}),", ri.host_id.substr(0, ri.host_id.find('/')), store_host);
      break;
    }
  }
  return fmt::format("; the job's store at {}{} does not answer either ({})", store_addr_, where, why.message());
}

Status Comm::ExplainTimeout(const std::vector<int>& owed, Status timeout) {
  // Say that this rank is stuck and on whom ("stuck/R" = "p,q|message"), then give the peers it waits on
  // a moment (they time out within milliseconds of it when they are stuck themselves) and follow the chain
  // of stuck ranks to one whose peers are not stuck: its message names the rank (and host) that stopped.
  std::string list;
  for (int p : owed) list += (list.empty() ? "" : ",") + std::to_string(p);
  const std::string mine = fmt::format("rank {}: {}", rank_, timeout.message());
  const Status posted = store_->Set("stuck/" + std::to_string(rank_), list + "|" + mine);
  if (!posted.ok()) return Timeout(timeout.message() + StoreSilence(posted));
  auto stuck = [&](int p) -> std::optional<std::string> {
    auto v = store_->Get("stuck/" + std::to_string(p), std::chrono::milliseconds(1));
    if (!v.ok()) return std::nullopt;
    return *v;
  };
  const auto grace = std::min<std::chrono::milliseconds>(timeout_ / 4, std::chrono::seconds(1));
  const std::optional<std::string> root =
      FollowStuckRanks(rank_, size_, owed, stuck, std::chrono::steady_clock::now() + grace);
  if (!root) return timeout;
  return Timeout(fmt::format("{}; they wait themselves — {}", timeout.message(), root->substr(root->find('|') + 1)));
}

std::optional<std::string> FollowStuckRanks(int self, int world, const std::vector<int>& owed,
                                            const std::function<std::optional<std::string>(int)>& stuck,
                                            std::chrono::steady_clock::time_point end) {
  std::set<int> seen = {self};
  std::vector<int> next = owed;
  std::optional<std::string> root;
  for (int hops = 0; hops < world; ++hops) {
    // Every hop gives the ranks it waits on until `end` to say they are stuck: one that times out a moment after
    // this rank (it waited on the same failure) would otherwise be taken for a rank that is not stuck, and the
    // chain would end one hop short, naming a rank that only waited.
    std::optional<std::string> found;
    for (;;) {
      for (int p : next) {
        if (seen.count(p) != 0 || !(found = stuck(p))) continue;
        seen.insert(p);
        break;
      }
      if (found || std::chrono::steady_clock::now() >= end) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    if (!found) break;
    root = found;
    next.clear();
    for (const auto& q : SplitAt(root->substr(0, root->find('|')), ',')) {
      auto r = env::ParseInt("stuck rank", q, 0, world - 1);
      if (r.ok()) next.push_back(static_cast<int>(*r));
    }
  }
  return root;
}

void Comm::SetAsyncError(const Status& s) {
  if (s.ok()) return;
  std::lock_guard<std::mutex> l(async_mu_);
  if (!async_error_.ok()) return;
  async_error_ = s;
  async_failed_.store(true, std::memory_order_release);
}

void Comm::Abort() {
  if (abort_requested_.exchange(true)) return;
  const Status s = RemoteError(fmt::format("rank {}: the communicator was aborted (tsrCommAbort)", rank_));
  SetAsyncError(s);
  if (direct_ != nullptr) direct_->failed.store(true, std::memory_order_relaxed);
  if (device_) device_->Abort();
  // Tell the other ranks at once. On a connection of its own, so that a call of this communicator that
  // holds the store's connection cannot delay it; bounded, and best effort.
  if (!aborted_by_peer_.load()) {
    auto c = StoreClient::Connect(store_addr_, token_,
                                  std::min<std::chrono::milliseconds>(timeout_, std::chrono::seconds(2)));
    if (c.ok()) {
      auto st = PrefixedStore(std::move(c).value(), ns_.empty() ? "" : "ns/" + ns_ + "/");
      (void)st->Set("abort", s.message());
    }
  }
  TSR_LOG_INFO("rank {}: communicator aborted", rank_);
}

Status Comm::AsyncError() {
  {
    std::lock_guard<std::mutex> l(async_mu_);
    if (!async_error_.ok()) return async_error_;
  }
  // Healthy so far: look for what a blocked call would notice (CheckHealth on every peer: a posted
  // failure, a dead same-host peer), then an asynchronous CCL error. None of them waits. The first costs a
  // store round trip and a look at each peer, so one caller at most every kHealthInterval makes it and the
  // others go by its answer: torch's backend asks at the end of every collective (twice), and when every
  // call asked the store, a 64 MiB all_reduce took measurably longer than its bridge work
  // (bench/results/log/2026-12-01-torch-64mib-gap.md).
  Status s;
  {
    std::unique_lock<std::mutex> check(health_mu_, std::try_to_lock);
    const auto now = std::chrono::steady_clock::now();
    if (check.owns_lock() && now - health_checked_ >= kHealthInterval) {
      health_checked_ = now;
      std::vector<int> peers;
      for (int p = 0; p < size_; ++p)
        if (p != rank_) peers.push_back(p);
      s = CheckHealth(peers).WithContext(fmt::format("rank {}", rank_));
    }
  }
  if (s.ok() && device_) s = device_->AsyncError();
  SetAsyncError(s);
  return s;
}

Result<std::unique_ptr<Comm>> Comm::Split(int color, int key, const std::string& device,
                                          std::chrono::milliseconds timeout, const Status& local_error) {
  constexpr int64_t kInvalid = INT64_MIN;  // this rank's call was invalid
  const int64_t mine[2] = {local_error.ok() ? color : kInvalid, key};
  std::vector<int64_t> all(2 * static_cast<size_t>(size_));
  TSR_RETURN_IF_ERROR(AllGather(mine, all.data(), 2, tsrInt64, nullptr));
  const uint64_t seq = split_seq_++;
  if (!local_error.ok()) return local_error;
  for (int r = 0; r < size_; ++r)
    if (all[2 * r] == kInvalid)
      return InvalidArgument(fmt::format("tsrCommSplit: rank {}'s call was invalid (its own error says why)", r));
  for (int r = 0; r < size_; ++r)
    if (all[2 * r] < 0 && all[2 * r] != TSR_SPLIT_NOCOLOR)
      return InvalidArgument(
          fmt::format("tsrCommSplit: rank {} passed color {} (a color is >= 0 or "
                      "TSR_SPLIT_NOCOLOR)",
                      r, all[2 * r]));
  if (color == TSR_SPLIT_NOCOLOR) return std::unique_ptr<Comm>();
  std::vector<int> members;
  for (int r = 0; r < size_; ++r)
    if (all[2 * r] == color) members.push_back(r);
  std::stable_sort(members.begin(), members.end(), [&](int a, int b) { return all[2 * a + 1] < all[2 * b + 1]; });
  std::set<int> old_islands;
  for (int r : members) old_islands.insert(infos_[r].island);
  InitParams p;
  p.rank = static_cast<int>(std::find(members.begin(), members.end(), rank_) - members.begin());
  p.world = static_cast<int>(members.size());
  p.island = static_cast<int>(std::distance(old_islands.begin(), old_islands.find(my_island_)));
  p.vendor = infos_[rank_].vendor;
  p.device = device.empty() ? infos_[rank_].device : device;
  p.store_addr = store_addr_;
  p.token = token_;
  p.island_reduce = island_reduce_;
  p.timeout = timeout > std::chrono::milliseconds::zero() ? timeout : timeout_;
  p.ns = (ns_.empty() ? "" : ns_ + ".") + fmt::format("s{}.{}", seq, color);
  auto c = Create(p);
  if (!c.ok())
    return c.status().WithContext(
        fmt::format("tsrCommSplit: rank {} joining color {} as rank {} of {}", rank_, color, p.rank, p.world));
  return c;
}

Result<std::unique_ptr<DeviceRank>> OpenDeviceRank(const DeviceName& device) {
  return HasDeviceBridge(*device.family) ? OpenDeviceBridgeRank(device) : OpenStagedRank(device);
}

}  // namespace tessera::comm
