// comm/comm: communicator set-up and the hierarchical algorithm; see comm.hpp.
#include "comm/comm.hpp"

#include <fmt/format.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <thread>

#include "comm/reduce.hpp"
#include "common/env.hpp"
#include "common/log.hpp"
#include "common/process.hpp"

namespace tessera::comm {
namespace {

constexpr uint32_t kHeaderMagic = 0x54535248;  // "TSRH"

// Sent before every collective to the peers of this rank's schedule; any disagreement fails the call on
// every rank with a message naming both sides.
struct Header {
  uint32_t magic;
  uint32_t kind;
  uint64_t seq;
  uint64_t count;
  int32_t dtype;
  int32_t op;
  int32_t root;
  int32_t rank;
  uint8_t pad[24];
};
static_assert(sizeof(Header) == 64);

// This machine as the ranks compare it: "UTS hostname/boot id/net namespace/IPC namespace". Ranks with
// equal identities share memory (shm channels) and see each other's pids; any difference means another
// host (TCP). Namespaces share the boot id, so the namespace inodes (and the hostname, which `unshare
// --uts` makes per namespace) tell "hosts" made of network/IPC namespaces on one machine apart.
std::string HostId() {
  char name[256] = {};
  gethostname(name, sizeof(name) - 1);
  std::string boot;
  std::ifstream f("/proc/sys/kernel/random/boot_id");
  std::getline(f, boot);
  std::string id = std::string(name) + "/" + boot;
  for (const char* ns : {"net", "ipc"}) {
    struct stat st {};
    const std::string path = std::string("/proc/self/ns/") + ns;
    id += fmt::format("/{}:{}", ns, ::stat(path.c_str(), &st) == 0 ? static_cast<uint64_t>(st.st_ino) : 0);
  }
  return id;
}

std::string Describe(CollKind kind, size_t count, DType dt, RedOp op, int root) {
  switch (kind) {
    case CollKind::kAllReduce:
    case CollKind::kReduceScatter:
      return fmt::format("{}(count={}, {}, {})", CollName(kind), count, DTypeName(dt), RedOpName(op));
    case CollKind::kBroadcast:
      return fmt::format("{}(count={}, {}, root={})", CollName(kind), count, DTypeName(dt), root);
    default:
      return fmt::format("{}(count={}, {})", CollName(kind), count, DTypeName(dt));
  }
}

std::vector<std::string> SplitString(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, sep)) out.push_back(item);
  return out;
}

}  // namespace

const char* CollName(CollKind k) {
  switch (k) {
    case CollKind::kAllReduce:
      return "allreduce";
    case CollKind::kReduceScatter:
      return "reduce_scatter";
    case CollKind::kAllGather:
      return "allgather";
    case CollKind::kBroadcast:
      return "broadcast";
    case CollKind::kBarrier:
      return "barrier";
    case CollKind::kSend:
      return "send";
    case CollKind::kAllToAll:
      return "alltoall";
  }
  return "?";
}

Result<std::unique_ptr<Comm>> Comm::Create(const InitParams& params) {
  log::Init();
  std::unique_ptr<Comm> c(new Comm());
  TSR_RETURN_IF_ERROR(c->Init(params));
  return c;
}

Comm::~Comm() = default;

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
  p.device = env::GetOrDefault("TESSERA_DEVICE");
  if (p.device != "host" && p.device.rfind("cuda:", 0) != 0)
    return InvalidArgument(fmt::format("TESSERA_DEVICE='{}' is not a device (use host or cuda:N)", p.device));
  TSR_ASSIGN_OR_RETURN(p.store_addr, env::Require("TESSERA_STORE"));
  const auto colon = p.store_addr.rfind(':');
  if (colon == std::string::npos || colon == 0)
    return InvalidArgument(fmt::format("TESSERA_STORE='{}' is not host:port", p.store_addr));
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
  TSR_ASSIGN_OR_RETURN(std::string bridge, env::Choice("TESSERA_BRIDGE", {"auto", "shm", "tcp"}));
  std::string vendor = p.vendor.empty() ? "island" + std::to_string(island) : p.vendor;
  std::string device = p.device.empty() ? "host" : p.device;
  if (device != "host") {
    if (device.rfind("cuda:", 0) != 0)
      return InvalidArgument(
          fmt::format("device '{}' of rank {} is not a device (use host or cuda:N)", device, p.rank));
    auto dev = OpenDeviceRank(device);  // selects the GPU; Unsupported in a build without CUDA
    if (!dev.ok()) return dev.status().WithContext(fmt::format("rank {}", p.rank));
    cuda_ = std::move(dev).value();
  }
  rank_ = p.rank;
  size_ = p.world;
  my_island_ = island;

  const std::string& store_addr = p.store_addr;
  store_addr_ = store_addr;
  auto colon = store_addr.rfind(':');
  if (colon == std::string::npos || colon == 0)
    return InvalidArgument(fmt::format("store address '{}' (TESSERA_STORE) is not host:port", store_addr));
  std::string store_host = store_addr.substr(0, colon);
  TSR_ASSIGN_OR_RETURN(int64_t store_port, env::ParseInt("port of the store address '" + store_addr + "'",
                                                         store_addr.substr(colon + 1), 1, 65535));
  token_ = p.token;
  if (p.serve_store && rank_ == 0 && (store_host == "127.0.0.1" || store_host == "localhost")) {
    // Rank 0 serves the store when no launcher does (the port is free); otherwise it is a client.
    auto server = StoreServer::Start(store_host, static_cast<int>(store_port), token_);
    if (server.ok()) store_server_ = std::move(server).value();
  }
  auto store = StoreClient::Connect(store_addr, token_, timeout_);
  if (!store.ok()) return store.status().WithContext("rank " + std::to_string(rank_) + " joining the job");
  store_ = PrefixedStore(std::move(store).value(), ns_.empty() ? "" : "ns/" + ns_ + "/");

  std::string bridge_host = env::Get("TESSERA_BRIDGE_ADDR").value_or("");
  if (bridge_host.empty()) {
    char name[256] = {};
    gethostname(name, sizeof(name) - 1);
    bridge_host = (store_host == "127.0.0.1" || store_host == "localhost") ? "127.0.0.1" : name;
  }
  if (bridge != "shm" && size_ > 1) {
    // The TCP bridge listens on the address it advertises, not on every interface, unless
    // TESSERA_BRIDGE_LISTEN says otherwise (e.g. 0.0.0.0 behind NAT).
    std::string listen_host = env::Get("TESSERA_BRIDGE_LISTEN").value_or(bridge_host);
    const bool loopback_store = store_host == "127.0.0.1" || store_host == "localhost";
    if (!env::Get("TESSERA_BRIDGE_LISTEN") && !env::Get("TESSERA_BRIDGE_ADDR") && !loopback_store &&
        ResolvesToLoopback(bridge_host)) {
      // The host name resolves to a loopback address here (Debian's 127.0.1.1), which ranks on other
      // hosts cannot reach: listen everywhere, as before, and say how to narrow it.
      TSR_LOG_WARN(
          "rank {}: this host's name '{}' resolves to a loopback address; the TCP bridge listens on "
          "0.0.0.0 (set TESSERA_BRIDGE_ADDR to this host's address to listen there only)",
          rank_, bridge_host);
      listen_host = "0.0.0.0";
    }
    auto l = TcpListener::Listen(listen_host);
    if (!l.ok()) return l.status().WithContext(fmt::format("rank {}: TESSERA_BRIDGE_LISTEN/ADDR", rank_));
    listener_ = std::move(l).value();
  }
  std::string me = fmt::format("{}|{}|{}|{}|{}|{}:{}", island, vendor, device, HostId(), getpid(), bridge_host,
                               listener_ ? listener_->port() : 0);
  TSR_RETURN_IF_ERROR(store_->Set("rank/" + std::to_string(rank_), me));
  infos_.resize(size_);
  for (int r = 0; r < size_; ++r) {
    auto v = store_->Get("rank/" + std::to_string(r), timeout_);
    if (!v.ok())
      return v.status().WithContext(
          fmt::format("rank {} waiting for rank {} to join (TESSERA_WORLD_SIZE={})", rank_, r, size_));
    auto f = SplitString(*v, '|');
    if (f.size() != 6) return RemoteError(fmt::format("malformed record of rank {} in the store: '{}'", r, *v));
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
    ri.tcp_addr = f[5];
  }
  // Islands: indices 0..k-1, one vendor and one device backend each.
  std::map<int, Island> by_index;
  for (const auto& ri : infos_) {
    Island& isl = by_index[ri.island];
    std::string backend = ri.device.substr(0, ri.device.find(':'));
    if (isl.ranks.empty()) {
      isl.index = ri.island;
      isl.vendor = ri.vendor;
      isl.backend = backend;
    } else if (isl.vendor != ri.vendor || isl.backend != backend) {
      return InvalidArgument(
          fmt::format("island {} mixes vendor/device '{}/{}' (rank {}) and '{}/{}' (rank {}): "
                      "check TESSERA_ISLAND_VENDOR and TESSERA_DEVICE",
                      ri.island, isl.vendor, isl.backend, isl.ranks.front(), ri.vendor, backend, ri.rank));
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
  const auto& mine = islands_[my_island_].ranks;
  local_ = static_cast<int>(std::find(mine.begin(), mine.end(), rank_) - mine.begin());
  // Device islands on the device bridge: decided once, from the world and the environment, so every rank
  // reaches the same answer (see Island::device_bridge).
  TSR_ASSIGN_OR_RETURN(std::string cuda_bridge, env::Choice("TESSERA_CUDA_BRIDGE", {"auto", "staged"}));
  for (auto& isl : islands_) {
    const std::string& host = infos_[isl.ranks.front()].host_id;
    isl.device_bridge =
        cuda_bridge == "auto" && bridge != "tcp" && isl.backend != "host" && isl.ranks.size() == 1 &&
        std::all_of(infos_.begin(), infos_.end(), [&](const RankInfo& ri) { return ri.host_id == host; });
  }
  TSR_RETURN_IF_ERROR(SetUpChannels());
  p2p_sent_.assign(size_, 0);
  p2p_recvd_.assign(size_, 0);
  bool any_device = false;
  for (const auto& isl : islands_) any_device |= isl.backend != "host";
  if (any_device && islands_.size() > 1) {
    TSR_ASSIGN_OR_RETURN(bridge_chunk_bytes_, env::Bytes("TESSERA_CUDA_CHUNK"));
    if (bridge_chunk_bytes_ < 4096 || bridge_chunk_bytes_ % 8 != 0)
      return InvalidArgument(
          fmt::format("TESSERA_CUDA_CHUNK={} must be at least 4096 and a multiple of 8", bridge_chunk_bytes_));
  }
  if (cuda_) {
    TSR_RETURN_IF_ERROR(cuda_->Attach(this));
    direct_ = cuda_->DirectPath();
  }
  TSR_RETURN_IF_ERROR(store_->Barrier("init-done", size_, timeout_));
  TSR_LOG_INFO("rank {}: joined — {}", rank_, Describe());
  return Status::Ok();
}

Status Comm::SetUpChannels() {
  TSR_ASSIGN_OR_RETURN(std::string bridge, env::Choice("TESSERA_BRIDGE", {"auto", "shm", "tcp"}));
  TSR_ASSIGN_OR_RETURN(uint64_t ring, env::Bytes("TESSERA_SHM_RING"));
  TSR_ASSIGN_OR_RETURN(uint64_t cuda_ring, env::Bytes("TESSERA_CUDA_RING"));
  TSR_ASSIGN_OR_RETURN(int64_t streams, env::Int("TESSERA_TCP_STREAMS", 1, 64));
  TSR_ASSIGN_OR_RETURN(uint64_t chunk, env::Bytes("TESSERA_TCP_CHUNK"));
  if (ring < (64 << 10) || ring % 4096 != 0)
    return InvalidArgument(fmt::format("TESSERA_SHM_RING={} must be at least 64K and a multiple of 4K", ring));
  if (cuda_ring < (64 << 10) || cuda_ring % 4096 != 0)
    return InvalidArgument(fmt::format("TESSERA_CUDA_RING={} must be at least 64K and a multiple of 4K", cuda_ring));
  if (chunk < 4096) return InvalidArgument(fmt::format("TESSERA_TCP_CHUNK={} must be at least 4096", chunk));
  transport_.assign(size_, "");
  send_.resize(size_);
  recv_.resize(size_);
  bool any_shm = false;
  std::vector<int> tcp_lower, tcp_higher;
  const RankInfo& me = infos_[rank_];
  for (int p = 0; p < size_; ++p) {
    if (p == rank_) continue;
    const RankInfo& peer = infos_[p];
    bool same_host = peer.host_id == me.host_id;
    bool same_island = peer.island == me.island;
    // An island that spans hosts keeps its schedule (the engine does not care what a channel is):
    // same-host members talk over shm, members on other hosts over TCP.
    std::string t = (same_host && (same_island || bridge != "tcp")) ? "shm" : "tcp";
    if (!same_host && !same_island && bridge == "shm")
      return InvalidArgument(fmt::format("TESSERA_BRIDGE=shm but rank {} is on another host than rank {}", p, rank_));
    transport_[p] = t;
    if (t == "shm")
      any_shm = true;
    else
      (p < rank_ ? tcp_lower : tcp_higher).push_back(p);
  }
  // Shared memory: everyone creates an inbox, maps the peers', then unlinks its own name.
  // Rings between a device-bridge rank and its bridge peers are TESSERA_CUDA_RING bytes, so that the
  // copy engines keep several large transfers in flight; the others TESSERA_SHM_RING. Every rank
  // computes every inbox's layout from the world, so the owner and its writers agree.
  auto device_rank = [&](int r) {
    const Island& isl = islands_[infos_[r].island];
    return DeviceBridgeEligible(isl, DType::kFloat32);
  };
  auto inbox_rings = [&](int owner) {
    std::vector<size_t> sizes(size_, ring);
    for (int p = 0; p < size_; ++p)
      if (p != owner && infos_[p].island != infos_[owner].island && (device_rank(p) || device_rank(owner)))
        sizes[p] = cuda_ring;
    return sizes;
  };
  // Distinct per job and per communicator of the job (its namespace).
  std::string prefix = fmt::format("/tsr-{:08x}-", static_cast<uint32_t>(std::hash<std::string>{}(token_ + "|" + ns_)));
  if (any_shm) {
    TSR_ASSIGN_OR_RETURN(inbox_, ShmInbox::Create(prefix + std::to_string(rank_), inbox_rings(rank_)));
  }
  TSR_RETURN_IF_ERROR(store_->Barrier("shm-created", size_, timeout_));
  peer_inboxes_.resize(size_);
  for (int p = 0; p < size_; ++p) {
    if (transport_[p] != "shm") continue;
    TSR_ASSIGN_OR_RETURN(peer_inboxes_[p], ShmInbox::Open(prefix + std::to_string(p), inbox_rings(p)));
    send_[p] = peer_inboxes_[p]->Writer(rank_);
    recv_[p] = inbox_->Reader(p);
  }
  TSR_RETURN_IF_ERROR(store_->Barrier("shm-mapped", size_, timeout_));
  if (inbox_) inbox_->Unlink();
  for (auto& pi : peer_inboxes_)
    if (pi) pi->Unlink();
  // TCP: connect to higher ranks, accept from lower ones, then acknowledge.
  std::vector<std::vector<int>> fds(size_, std::vector<int>(streams, -1));
  for (int p : tcp_higher) {
    for (int s = 0; s < streams; ++s) {
      auto fd = TcpConnect(infos_[p].tcp_addr, rank_, s, token_, timeout_);
      if (!fd.ok()) return fd.status().WithContext(fmt::format("bridge to {}", PeerName(p)));
      fds[p][s] = *fd;
    }
  }
  if (!tcp_lower.empty()) {
    TSR_ASSIGN_OR_RETURN(auto incoming,
                         listener_->AcceptHellos(static_cast<int>(tcp_lower.size() * streams), token_, timeout_));
    for (auto& in : incoming) {
      if (in.from_rank < 0 || in.from_rank >= size_ || in.stream < 0 || in.stream >= streams ||
          fds[in.from_rank][in.stream] != -1)
        return RemoteError(
            fmt::format("bridge: unexpected connection from rank {} stream {}", in.from_rank, in.stream));
      fds[in.from_rank][in.stream] = in.fd;
      TSR_RETURN_IF_ERROR(TcpSendAck(in.fd));
    }
  }
  for (int p : tcp_higher)
    for (int s = 0; s < streams; ++s) TSR_RETURN_IF_ERROR(TcpAwaitAck(fds[p][s], infos_[p].tcp_addr, timeout_));
  for (int p = 0; p < size_; ++p) {
    if (transport_[p] != "tcp") continue;
    auto conns = std::make_shared<TcpConnections>();
    for (int fd : fds[p]) {
      TSR_RETURN_IF_ERROR(TcpTune(fd));
      conns->fds.push_back(fd);
    }
    send_[p] = MakeTcpSender(conns, chunk);
    recv_[p] = MakeTcpReceiver(conns, chunk);
  }
  listener_.reset();
  return Status::Ok();
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
  if (cuda_) out += "; device: " + cuda_->Describe();
  return out;
}

std::string Comm::PeerName(int peer) const {
  if (peer < 0 || peer >= size_) return "rank " + std::to_string(peer);
  if (infos_[peer].host_id == infos_[rank_].host_id) return fmt::format("rank {} ({})", peer, infos_[peer].vendor);
  // On another host: name it (its hostname and the address its bridge listens on).
  const std::string& id = infos_[peer].host_id;
  const std::string& addr = infos_[peer].tcp_addr;
  return fmt::format("rank {} ({}) on host {} ({})", peer, infos_[peer].vendor, id.substr(0, id.find('/')),
                     addr.substr(0, addr.rfind(':')));
}

Status Comm::CheckHealth(const std::vector<int>& waiting_on) {
  if (abort_requested_.load(std::memory_order_acquire))
    return RemoteError(fmt::format("rank {}: the communicator was aborted (tsrCommAbort)", rank_));
  auto abort = store_->Get("abort", std::chrono::milliseconds(1));
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
    if (ri.host_id != infos_[rank_].host_id && ri.tcp_addr.substr(0, ri.tcp_addr.rfind(':')) == store_host) {
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
  const auto end = std::chrono::steady_clock::now() + grace;
  std::optional<std::string> next;
  std::set<int> seen = {rank_};
  do {
    for (int p : owed)
      if (!next && (next = stuck(p))) seen.insert(p);
    if (!next) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  } while (!next && std::chrono::steady_clock::now() < end);
  if (!next) return timeout;
  std::string root = *next;
  for (int hops = 0; hops < size_; ++hops) {  // follow it while the next rank is stuck too
    std::optional<std::string> further;
    for (const auto& q : SplitString(root.substr(0, root.find('|')), ',')) {
      auto r = env::ParseInt("stuck rank", q, 0, size_ - 1);
      if (!r.ok() || seen.count(static_cast<int>(*r))) continue;
      if ((further = stuck(static_cast<int>(*r)))) {
        seen.insert(static_cast<int>(*r));
        break;
      }
    }
    if (!further) break;
    root = *further;
  }
  return Timeout(fmt::format("{}; they wait themselves — {}", timeout.message(), root.substr(root.find('|') + 1)));
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
  if (cuda_) cuda_->Abort();
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
  // Healthy so far: look for what a blocked call would notice — a posted failure, a dead same-host peer,
  // an asynchronous CCL error. Each check is non-blocking (the store's answer is bounded by 1 ms).
  Status s;
  auto abort = store_->Get("abort", std::chrono::milliseconds(1));
  if (abort.ok()) {
    aborted_by_peer_ = true;
    s = RemoteError(fmt::format("rank {}: another rank failed — {}", rank_, *abort));
  }
  for (int p = 0; s.ok() && p < size_; ++p)
    if (p != rank_ && infos_[p].host_id == infos_[rank_].host_id && infos_[p].pid > 0 && !ProcessAlive(infos_[p].pid))
      s = RemoteError(fmt::format("rank {}: {} (pid {}) exited", rank_, PeerName(p), infos_[p].pid));
  if (s.ok() && cuda_) s = cuda_->AsyncError();
  SetAsyncError(s);
  return s;
}

void* Comm::Scratch(int which, size_t bytes) {
  if (scratch_size_[which] < bytes) {
    scratch_[which].reset(new std::byte[bytes]);
    scratch_size_[which] = bytes;
  }
  return scratch_[which].get();
}

Status Comm::CheckArgs(const char* what, const void* send, const void* recv, size_t count, tsrDataType_t type,
                       tsrStream_t stream, DType* dt) {
  auto t = static_cast<DType>(type);
  if (!IsValid(t)) return InvalidArgument(fmt::format("{}: datatype {} is not a tsrDataType_t", what, int(type)));
  if (count > 0 && (send == nullptr || recv == nullptr))
    return InvalidArgument(fmt::format("{}: NULL buffer with count {}", what, count));
  if (stream != nullptr)
    return InvalidArgument(
        fmt::format("{}: a stream was passed, but rank {}'s island ({}) uses host memory: pass "
                    "NULL",
                    what, rank_, islands_[my_island_].vendor));
  if (!cuda_ && count > 0) {
    if (IsDevicePointer(send) || IsDevicePointer(recv))
      return InvalidArgument(fmt::format("{}: {} = {} is device memory, but rank {}'s island ({}) uses host memory",
                                         what, IsDevicePointer(send) ? "sendbuf" : "recvbuf",
                                         IsDevicePointer(send) ? send : recv, rank_, islands_[my_island_].vendor));
  }
  *dt = t;
  return Status::Ok();
}

template <typename F>
Status Comm::Guard(const std::string& what, F&& body) {
  if (failed_.ok() && async_failed_.load(std::memory_order_acquire)) {
    // Failed between calls: aborted, or a failure AsyncError found.
    std::lock_guard<std::mutex> l(async_mu_);
    failed_ = async_error_;
    if (direct_ != nullptr) direct_->failed.store(true, std::memory_order_relaxed);
  }
  if (!failed_.ok()) return Status(failed_.code(), "communicator failed earlier: " + failed_.message());
  Status s = body();
  if (!s.ok() && s.code() == Code::kRemoteError && !aborted_by_peer_) {
    // A connection lost to a peer is often the echo of a failure elsewhere: the first rank to fail posts
    // its cause before it exits (and closes its connections). Report that cause, not the echo — across
    // hosts the echo would name the wrong host.
    const auto wait = std::min<std::chrono::milliseconds>(timeout_, std::chrono::milliseconds(250));
    const auto t0 = std::chrono::steady_clock::now();
    auto abort = store_->Get("abort", wait);
    if (abort.ok()) {
      aborted_by_peer_ = true;
      s = RemoteError("another rank failed — " + *abort);
    } else if (abort.status().code() != Code::kTimeout ||
               std::chrono::steady_clock::now() - t0 > wait + std::chrono::milliseconds(500)) {
      s = RemoteError(s.message() + StoreSilence(abort.status()));  // the store did not answer at all
    }
  }
  if (!s.ok()) {
    s = s.WithContext(fmt::format("rank {}: {}", rank_, what));
    failed_ = s;
    SetAsyncError(s);
    if (direct_ != nullptr) direct_->failed.store(true, std::memory_order_relaxed);  // read by the lean path
    // Tell the other ranks at once, so they fail with this message instead of waiting for a timeout.
    if (!aborted_by_peer_) (void)store_->Set("abort", s.message());
  }
  return s;
}

Status Comm::GuardFn(const std::string& what, const std::function<Status()>& body) { return Guard(what, body); }

Range Comm::Shard(const Island& isl, int member, size_t total) const {
  size_t n = isl.ranks.size();
  return Range{total * member / n, total * (member + 1) / n};
}

Status Comm::ExchangeHeaders(CollKind kind, size_t count, DType dt, RedOp op, int root, const std::vector<int>& peers) {
  Header mine{kHeaderMagic,
              static_cast<uint32_t>(kind),
              seq_,
              count,
              static_cast<int32_t>(dt),
              static_cast<int32_t>(op),
              root,
              rank_,
              {}};
  std::vector<Header> theirs(peers.size());
  Engine e(this);
  for (size_t i = 0; i < peers.size(); ++i) {
    e.Send(peers[i], &mine, sizeof(Header));
    e.RecvCopy(peers[i], &theirs[i], sizeof(Header));
  }
  TSR_RETURN_IF_ERROR(e.Run(fmt::format("{} #{}", CollName(kind), seq_)));
  for (size_t i = 0; i < peers.size(); ++i) {
    const Header& h = theirs[i];
    if (h.magic != kHeaderMagic) return InternalError(fmt::format("corrupt header from {}", PeerName(peers[i])));
    if (h.seq != seq_ || h.kind != mine.kind || h.count != count || h.dtype != mine.dtype ||
        (h.op != mine.op && (kind == CollKind::kAllReduce || kind == CollKind::kReduceScatter)) ||
        (h.root != root && kind == CollKind::kBroadcast)) {
      return InvalidArgument(
          fmt::format("mismatched collectives: rank {} called {} as its call #{}, but {} called {} as its call #{}",
                      rank_, comm::Describe(kind, count, dt, op, root), seq_, PeerName(peers[i]),
                      comm::Describe(static_cast<CollKind>(h.kind), h.count, static_cast<DType>(h.dtype),
                                     static_cast<RedOp>(h.op), h.root),
                      h.seq));
    }
  }
  return Status::Ok();
}

Status Comm::Hierarchical(CollKind kind, const void* send_v, void* recv_v, size_t count, DType dt, RedOp op, int root,
                          DeviceOps* dev) {
  const bool reduce = kind == CollKind::kAllReduce || kind == CollKind::kReduceScatter || kind == CollKind::kBarrier;
  const size_t W = static_cast<size_t>(size_);
  const size_t C = (kind == CollKind::kReduceScatter || kind == CollKind::kAllGather) ? count * W : count;
  const size_t esz = DTypeSize(dt), asz = DTypeSize(AccumType(dt));
  const auto* send = static_cast<const std::byte*>(send_v);
  auto* recv = static_cast<std::byte*>(recv_v);
  const int k = static_cast<int>(islands_.size());
  const Island& I = islands_[my_island_];
  const int n = static_cast<int>(I.ranks.size());
  const Range S = Shard(I, local_, C);
  const std::string what = fmt::format("{} #{}", CollName(kind), seq_);
  if (dev != nullptr && (kind != CollKind::kAllReduce || n != 1 || k < 2))
    return InternalError(fmt::format("{}: the device bridge serves allreduce from an island of one rank", what));

  // Segments: the islands' shard boundaries cut [0, C); each segment has one owner per island.
  struct Segment {
    Range r;
    std::vector<int> owner;  // by island
  };
  std::vector<size_t> cuts;
  for (const auto& isl : islands_)
    for (size_t j = 0; j < isl.ranks.size(); ++j) {
      cuts.push_back(Shard(isl, static_cast<int>(j), C).lo);
      cuts.push_back(Shard(isl, static_cast<int>(j), C).hi);
    }
  std::sort(cuts.begin(), cuts.end());
  cuts.erase(std::unique(cuts.begin(), cuts.end()), cuts.end());
  std::vector<Segment> segs;  // all segments of [0, C)
  for (size_t c = 0; c + 1 < cuts.size(); ++c) {
    Segment sg{{cuts[c], cuts[c + 1]}, std::vector<int>(k)};
    for (int J = 0; J < k; ++J) {
      int m = 0;
      while (Shard(islands_[J], m, C).hi <= sg.r.lo) ++m;
      sg.owner[J] = islands_[J].ranks[m];
    }
    segs.push_back(std::move(sg));
  }
  auto part_of = [&](const Range& r, int q) { return Range{r.lo + r.len() * q / k, r.lo + r.len() * (q + 1) / k}; };

  // Header exchange with every peer of this rank's schedule (plus island leaders, so that islands whose
  // schedules differ because of a mismatch still meet someone who notices).
  std::set<int> peers(I.ranks.begin(), I.ranks.end());
  if (local_ == 0)
    for (const auto& isl : islands_) peers.insert(isl.ranks.front());
  for (const auto& sg : segs)
    if (sg.owner[my_island_] == rank_) peers.insert(sg.owner.begin(), sg.owner.end());
  if (kind == CollKind::kReduceScatter)  // the routing step talks to block owners
    for (const auto& sg : segs)
      for (int q = 0; q < k; ++q) {
        Range p = part_of(sg.r, q);
        if (p.len() == 0) continue;
        bool mine_block = p.Intersect({count * rank_, count * (rank_ + 1)}).len() > 0;
        if (sg.owner[q] == rank_)
          for (size_t b = p.lo / count; b < W && b * count < p.hi; ++b) peers.insert(static_cast<int>(b));
        if (mine_block) peers.insert(sg.owner[q]);
      }
  peers.erase(rank_);
  TSR_RETURN_IF_ERROR(ExchangeHeaders(kind == CollKind::kBarrier ? CollKind::kBarrier : kind, count, dt, op, root,
                                      std::vector<int>(peers.begin(), peers.end())));
  if (C == 0) return Status::Ok();

  if (!reduce) {
    // ---- select: allgather / broadcast. Each element has exactly one contributing rank. ----
    auto contrib = [&](int r) -> Range {
      if (kind == CollKind::kAllGather) return {count * r, count * (r + 1)};
      return r == root ? Range{0, C} : Range{0, 0};
    };
    Range own = contrib(rank_);
    if (own.len() > 0 && send != recv + own.lo * esz) std::memmove(recv + own.lo * esz, send, own.len() * esz);
    Engine e(this);
    for (int j = 0; j < n; ++j) {  // phase 1: gather my shard's contributions from my island
      if (j == local_) continue;
      int peer = I.ranks[j];
      Range x = own.Intersect(Shard(I, j, C));
      e.Send(peer, recv + x.lo * esz, x.len() * esz);
      Range y = contrib(peer).Intersect(S);
      e.RecvCopy(peer, recv + y.lo * esz, y.len() * esz);
    }
    TSR_RETURN_IF_ERROR(e.Run(what + " (island gather)"));
    if (k > 1) {  // phase 2: owners of each segment swap what their islands contributed
      for (const auto& sg : segs) {
        if (sg.owner[my_island_] != rank_) continue;
        for (int J = 0; J < k; ++J) {
          if (J == my_island_) continue;
          for (int r : I.ranks) {
            Range x = contrib(r).Intersect(sg.r);
            e.Send(sg.owner[J], recv + x.lo * esz, x.len() * esz);
          }
          for (int r : islands_[J].ranks) {
            Range y = contrib(r).Intersect(sg.r);
            e.RecvCopy(sg.owner[J], recv + y.lo * esz, y.len() * esz);
          }
        }
      }
      TSR_RETURN_IF_ERROR(e.Run(what + " (bridge)"));
    }
  } else {
    // ---- reduce: allreduce / reduce-scatter / barrier ----
    // Phase 1: island reduce-scatter, in island rank order, into an accumulator (f32 for 16-bit types).
    const std::byte* partial;
    DType ptype;
    std::vector<DType> island_ptype(k);
    for (int J = 0; J < k; ++J) island_ptype[J] = islands_[J].ranks.size() == 1 ? dt : AccumType(dt);
    size_t pbase;  // element index that partial[0] stands for
    ReduceJob job1;
    if (n > 1) {
      // A single island reducing a type that is its own accumulator folds straight into the output,
      // unless in-place input would be overwritten before its turn in the rank order.
      bool direct = k == 1 && kind == CollKind::kAllReduce && AccumType(dt) == dt && !(send == recv && local_ != 0);
      auto* acc = direct ? recv + S.lo * esz : static_cast<std::byte*>(Scratch(0, S.len() * asz));
      job1.acc = acc;
      job1.n = S.len();
      job1.dtype = dt;
      job1.op = op;
      job1.Init(n);
      Engine e(this);
      for (int j = 0; j < n; ++j) {
        if (j == local_) {
          e.LocalFold(&job1, j, send + S.lo * esz);
          continue;
        }
        Range sj = Shard(I, j, C);
        e.Send(I.ranks[j], send + sj.lo * esz, sj.len() * esz);
        e.RecvFold(I.ranks[j], &job1, j);
      }
      TSR_RETURN_IF_ERROR(e.Run(what + " (island reduce-scatter)"));
      partial = acc;
      ptype = AccumType(dt);
      pbase = S.lo;
    } else {
      partial = send;
      ptype = dt;
      pbase = 0;
    }
    const size_t psz = DTypeSize(ptype);
    // Where final values of my shard go: recv for allreduce, a staging buffer for reduce-scatter.
    std::byte* out;
    size_t obase;
    if (kind == CollKind::kReduceScatter) {
      out = static_cast<std::byte*>(Scratch(1, S.len() * esz));
      obase = S.lo;
    } else {
      out = recv;
      obase = 0;
    }
    const int divisor = size_;
    if (k > 1) {
      // Phase 2a: for each of my segments, send the other islands' parts, reduce mine in island order.
      std::vector<ReduceJob> jobs;
      jobs.reserve(segs.size());
      Engine e(this, dev);
      for (const auto& sg : segs) {
        if (sg.owner[my_island_] != rank_) continue;
        for (int q = 0; q < k; ++q) {
          Range p = part_of(sg.r, q);
          if (q != my_island_) {
            e.Send(sg.owner[q], partial + (p.lo - pbase) * psz, p.len() * psz);
            continue;
          }
          if (p.len() == 0) continue;
          jobs.emplace_back();
          ReduceJob& job = jobs.back();
          job.n = p.len();
          job.dtype = dt;
          job.op = op;
          job.divisor = divisor;
          job.device = dev;
          job.Init(k);
          for (int J = 0; J < k; ++J) job.src_type[J] = island_ptype[J];
          std::byte* dst = out + (p.lo - obase) * esz;
          bool alias = partial + (p.lo - pbase) * psz == dst;  // in place, island of one
          // Accumulate straight into the output when types allow, unless that would overwrite my own
          // in-place input before it is folded (it is folded at position my_island_, not first).
          job.acc = (AccumType(dt) == dt && !(alias && my_island_ != 0)) ? dst : nullptr;
          job.dst = dst;
        }
      }
      // Accumulators that cannot live in the output: one scratch block, carved per job.
      size_t need = 0;
      for (auto& job : jobs)
        if (job.acc == nullptr) need += job.n * asz;
      std::byte* accs;
      if (dev != nullptr) {
        TSR_ASSIGN_OR_RETURN(void* d, dev->Scratch(need));
        accs = static_cast<std::byte*>(d);
      } else {
        accs = static_cast<std::byte*>(Scratch(2, need));
      }
      for (auto& job : jobs)
        if (job.acc == nullptr) {
          job.acc = accs;
          accs += job.n * asz;
        }
      size_t ji = 0;
      std::vector<ReduceJob*> seg_job(segs.size(), nullptr);  // my part's job, per segment I own
      for (size_t si = 0; si < segs.size(); ++si) {
        const Segment& sg = segs[si];
        if (sg.owner[my_island_] != rank_) continue;
        Range p = part_of(sg.r, my_island_);
        if (p.len() == 0) continue;
        ReduceJob& job = jobs[ji++];
        seg_job[si] = &job;
        for (int J = 0; J < k; ++J) {
          if (J == my_island_)
            e.LocalFold(&job, J, partial + (p.lo - pbase) * psz);
          else
            e.RecvFold(sg.owner[J], &job, J);
        }
      }
      if (kind != CollKind::kReduceScatter) {
        // Phase 2b, in the same run: share the reduced parts among the segment's owners. Each part leaves
        // as its folds finish, so the bridge's two phases overlap instead of draining in between.
        for (size_t si = 0; si < segs.size(); ++si) {
          const Segment& sg = segs[si];
          if (sg.owner[my_island_] != rank_) continue;
          for (int q = 0; q < k; ++q) {
            if (q == my_island_) continue;
            Range p = part_of(sg.r, q);
            if (seg_job[si] != nullptr) e.SendResult(sg.owner[q], seg_job[si]);
            e.RecvCopy(sg.owner[q], out + (p.lo - obase) * esz, p.len() * esz);
          }
        }
      }
      TSR_RETURN_IF_ERROR(e.Run(what + (kind == CollKind::kReduceScatter ? " (bridge reduce)" : " (bridge)")));
    } else if (n > 1) {
      Finalize(out + (S.lo - obase) * esz, partial, S.len(), dt, op, divisor);
    } else if (out + (S.lo - obase) * esz != send + S.lo * esz) {
      std::memmove(out + (S.lo - obase) * esz, send + S.lo * esz, S.len() * esz);  // world of one
    }
    if (kind == CollKind::kReduceScatter) {
      // Phase 3 (reduce-scatter): route every reduced part to the rank whose output block holds it.
      Engine e(this);
      const Range block{count * rank_, count * (rank_ + 1)};
      for (const auto& sg : segs) {
        for (int q = 0; q < k; ++q) {
          Range p = part_of(sg.r, q);
          if (p.len() == 0) continue;
          if (sg.owner[q] == rank_) {
            for (size_t b = p.lo / count; b < W && b * count < p.hi; ++b) {
              Range x = p.Intersect({count * b, count * (b + 1)});
              if (x.len() == 0) continue;
              const std::byte* src = out + (x.lo - obase) * esz;
              if (static_cast<int>(b) == rank_)
                std::memcpy(recv + (x.lo - block.lo) * esz, src, x.len() * esz);
              else
                e.Send(static_cast<int>(b), src, x.len() * esz);
            }
          } else {
            Range x = p.Intersect(block);
            e.RecvCopy(sg.owner[q], recv + (x.lo - block.lo) * esz, x.len() * esz);
          }
        }
      }
      return e.Run(what + " (scatter)");
    }
  }
  // Phase 3: island allgather of the shards.
  if (n > 1) {
    Engine e(this);
    for (int j = 0; j < n; ++j) {
      if (j == local_) continue;
      Range sj = Shard(I, j, C);
      e.Send(I.ranks[j], recv + S.lo * esz, S.len() * esz);
      e.RecvCopy(I.ranks[j], recv + sj.lo * esz, sj.len() * esz);
    }
    TSR_RETURN_IF_ERROR(e.Run(what + " (island allgather)"));
  }
  return Status::Ok();
}

Status Comm::HostAllReduce(const void* send, void* recv, size_t count, tsrDataType_t type, tsrRedOp_t op,
                           tsrStream_t stream) {
  DType dt;
  auto r = static_cast<RedOp>(op);
  return Guard("allreduce", [&]() -> Status {
    TSR_RETURN_IF_ERROR(CheckArgs("allreduce", send, recv, count, type, stream, &dt));
    if (!IsValid(r)) return InvalidArgument(fmt::format("allreduce: op {} is not a tsrRedOp_t", int(op)));
    const size_t esz = DTypeSize(dt);
    for (const Range& c : BridgeChunks(count, dt)) {
      Status s = Hierarchical(CollKind::kAllReduce, static_cast<const std::byte*>(send) + c.lo * esz,
                              static_cast<std::byte*>(recv) + c.lo * esz, c.len(), dt, r, 0);
      ++seq_;
      TSR_RETURN_IF_ERROR(s);
    }
    return Status::Ok();
  });
}

Status Comm::HostReduceScatter(const void* send, void* recv, size_t recvcount, tsrDataType_t type, tsrRedOp_t op,
                               tsrStream_t stream) {
  DType dt;
  auto r = static_cast<RedOp>(op);
  return Guard("reduce_scatter", [&]() -> Status {
    TSR_RETURN_IF_ERROR(CheckArgs("reduce_scatter", send, recv, recvcount, type, stream, &dt));
    if (!IsValid(r)) return InvalidArgument(fmt::format("reduce_scatter: op {} is not a tsrRedOp_t", int(op)));
    Status s = Hierarchical(CollKind::kReduceScatter, send, recv, recvcount, dt, r, 0);
    ++seq_;
    return s;
  });
}

Status Comm::HostAllGather(const void* send, void* recv, size_t sendcount, tsrDataType_t type, tsrStream_t stream) {
  DType dt;
  return Guard("allgather", [&]() -> Status {
    TSR_RETURN_IF_ERROR(CheckArgs("allgather", send, recv, sendcount, type, stream, &dt));
    Status s = Hierarchical(CollKind::kAllGather, send, recv, sendcount, dt, RedOp::kSum, 0);
    ++seq_;
    return s;
  });
}

Status Comm::HostBroadcast(const void* send, void* recv, size_t count, tsrDataType_t type, int root,
                           tsrStream_t stream) {
  DType dt;
  return Guard("broadcast", [&]() -> Status {
    if (root < 0 || root >= size_)
      return InvalidArgument(fmt::format("broadcast: root {} is not a rank of this world of {}", root, size_));
    TSR_RETURN_IF_ERROR(CheckArgs("broadcast", rank_ == root ? send : recv, recv, count, type, stream, &dt));
    Status s = Hierarchical(CollKind::kBroadcast, send, recv, count, dt, RedOp::kSum, root);
    ++seq_;
    return s;
  });
}

Status Comm::HostBarrier() {
  return Guard("barrier", [&]() -> Status {
    int32_t one = 1, out = 0;
    Status s = Hierarchical(CollKind::kBarrier, &one, &out, 1, DType::kInt32, RedOp::kSum, 0);
    ++seq_;
    return s;
  });
}

Status Comm::HostSend(const void* send, size_t count, tsrDataType_t type, int peer, tsrStream_t stream) {
  DType dt;
  return Guard("send", [&]() -> Status {
    TSR_RETURN_IF_ERROR(CheckArgs("send", send, send, count, type, stream, &dt));
    if (peer < 0 || peer >= size_ || peer == rank_)
      return InvalidArgument(fmt::format("send: peer {} is not another rank of this world of {}", peer, size_));
    Header h{kHeaderMagic,
             static_cast<uint32_t>(CollKind::kSend),
             p2p_sent_[peer]++,
             count,
             static_cast<int32_t>(dt),
             0,
             rank_,
             rank_,
             {}};
    Engine e(this);
    e.Send(peer, &h, sizeof(h));
    e.Send(peer, send, count * DTypeSize(dt));
    return e.Run(fmt::format("send to {}", PeerName(peer)));
  });
}

Status Comm::HostRecv(void* recv, size_t count, tsrDataType_t type, int peer, tsrStream_t stream) {
  DType dt;
  return Guard("recv", [&]() -> Status {
    TSR_RETURN_IF_ERROR(CheckArgs("recv", recv, recv, count, type, stream, &dt));
    if (peer < 0 || peer >= size_ || peer == rank_)
      return InvalidArgument(fmt::format("recv: peer {} is not another rank of this world of {}", peer, size_));
    Header h{};
    Engine e(this);
    e.RecvCopy(peer, &h, sizeof(h));
    std::string what = fmt::format("recv from {}", PeerName(peer));
    TSR_RETURN_IF_ERROR(e.Run(what));
    if (h.magic != kHeaderMagic || h.kind != static_cast<uint32_t>(CollKind::kSend) || h.seq != p2p_recvd_[peer])
      return InternalError(what + ": stream out of step");
    ++p2p_recvd_[peer];
    if (h.count != count || h.dtype != static_cast<int32_t>(dt))
      return InvalidArgument(fmt::format("{}: rank {} expects {} × {} but {} sent {} × {}", what, rank_, count,
                                         DTypeName(dt), PeerName(peer), h.count,
                                         DTypeName(static_cast<DType>(h.dtype))));
    e.RecvCopy(peer, recv, count * DTypeSize(dt));
    return e.Run(what);
  });
}

Status Comm::HostGroup(const std::vector<P2POp>& ops) {
  return Guard("group", [&]() -> Status {
    std::vector<DType> dts(ops.size());
    for (size_t i = 0; i < ops.size(); ++i) {
      const P2POp& op = ops[i];
      const std::string what = fmt::format("{} #{} of the group", op.is_send ? "send" : "recv", i);
      const void* buf = op.is_send ? op.send : op.recv;
      if (op.peer < 0 || op.peer >= size_)
        return InvalidArgument(fmt::format("{}: peer {} is not a rank of this world of {}", what, op.peer, size_));
      TSR_RETURN_IF_ERROR(CheckArgs(what.c_str(), buf, buf, op.count, op.type, op.stream, &dts[i]));
    }
    // To itself: the k-th send to self goes to the k-th receive from self.
    std::vector<size_t> self_sends, self_recvs;
    for (size_t i = 0; i < ops.size(); ++i)
      if (ops[i].peer == rank_) (ops[i].is_send ? self_sends : self_recvs).push_back(i);
    if (self_sends.size() != self_recvs.size())
      return InvalidArgument(fmt::format("the group has {} send(s) to rank {} itself but {} recv(s) from it",
                                         self_sends.size(), rank_, self_recvs.size()));
    for (size_t k = 0; k < self_sends.size(); ++k) {
      const P2POp &s_op = ops[self_sends[k]], &r_op = ops[self_recvs[k]];
      if (s_op.count != r_op.count || dts[self_sends[k]] != dts[self_recvs[k]])
        return InvalidArgument(fmt::format("group: rank {} sends {} × {} to itself but receives {} × {}", rank_,
                                           s_op.count, DTypeName(dts[self_sends[k]]), r_op.count,
                                           DTypeName(dts[self_recvs[k]])));
      if (s_op.count > 0) std::memmove(r_op.recv, s_op.send, s_op.count * DTypeSize(dts[self_sends[k]]));
    }
    // Every other send is a header and the data, every receive the same (the wire format of Send/Recv);
    // all progress together in one engine run, so any order of matching pairs completes.
    std::vector<Header> hdr(ops.size());
    Engine e(this);
    for (size_t i = 0; i < ops.size(); ++i) {
      const P2POp& op = ops[i];
      if (op.peer == rank_) continue;
      const size_t bytes = op.count * DTypeSize(dts[i]);
      if (op.is_send) {
        hdr[i] = Header{kHeaderMagic,
                        static_cast<uint32_t>(CollKind::kSend),
                        p2p_sent_[op.peer]++,
                        op.count,
                        static_cast<int32_t>(dts[i]),
                        0,
                        rank_,
                        rank_,
                        {}};
        e.Send(op.peer, &hdr[i], sizeof(Header));
        e.Send(op.peer, op.send, bytes);
        continue;
      }
      const uint64_t seq = p2p_recvd_[op.peer]++;
      const Header* h = &hdr[i];
      const DType dt = dts[i];
      const size_t count = op.count;
      const int peer = op.peer;
      e.RecvCheck(peer, &hdr[i], sizeof(Header), [=, this]() -> Status {
        if (h->magic != kHeaderMagic || h->kind != static_cast<uint32_t>(CollKind::kSend) || h->seq != seq)
          return InternalError(fmt::format("recv from {}: stream out of step", PeerName(peer)));
        if (h->count != count || h->dtype != static_cast<int32_t>(dt))
          return InvalidArgument(fmt::format("recv from {}: rank {} expects {} × {} but {} sent {} × {}",
                                             PeerName(peer), rank_, count, DTypeName(dt), PeerName(peer), h->count,
                                             DTypeName(static_cast<DType>(h->dtype))));
        return Status::Ok();
      });
      e.RecvCopy(peer, op.recv, bytes);
    }
    return e.Run(fmt::format("group of {} send(s)/recv(s)", ops.size()));
  });
}

Status Comm::HostAllToAllv(const void* send_v, const size_t* sendcounts, const size_t* sdispls, void* recv_v,
                           const size_t* recvcounts, const size_t* rdispls, tsrDataType_t type) {
  DType dt;
  return Guard("alltoall", [&]() -> Status {
    if (sendcounts == nullptr || sdispls == nullptr || recvcounts == nullptr || rdispls == nullptr)
      return InvalidArgument("alltoallv: NULL counts or displacements");
    // Extents, checked for overflow: the highest element touched + 1 in each buffer.
    size_t sext = 0, rext = 0;
    for (int p = 0; p < size_; ++p) {
      if (sendcounts[p] > SIZE_MAX - sdispls[p] || recvcounts[p] > SIZE_MAX - rdispls[p])
        return InvalidArgument(fmt::format("alltoallv: count + displacement of rank {} overflows", p));
      if (sendcounts[p] > 0) sext = std::max(sext, sdispls[p] + sendcounts[p]);
      if (recvcounts[p] > 0) rext = std::max(rext, rdispls[p] + recvcounts[p]);
    }
    TSR_RETURN_IF_ERROR(CheckArgs("alltoallv", sext > 0 ? send_v : recv_v, rext > 0 ? recv_v : send_v,
                                  std::max(sext, rext), type, nullptr, &dt));
    const size_t esz = DTypeSize(dt);
    if (sext > SIZE_MAX / esz || rext > SIZE_MAX / esz)
      return InvalidArgument(
          fmt::format("alltoallv: {} elements of {} overflow the address space", std::max(sext, rext), DTypeName(dt)));
    const auto* send = static_cast<const std::byte*>(send_v);
    auto* recv = static_cast<std::byte*>(recv_v);
    if (sext > 0 && rext > 0 && send < recv + rext * esz && recv < send + sext * esz)
      return InvalidArgument(fmt::format("alltoallv: sendbuf {} ({} elements) and recvbuf {} ({} elements) overlap",
                                         send_v, sext, recv_v, rext));
    if (sendcounts[rank_] != recvcounts[rank_])
      return InvalidArgument(fmt::format("alltoallv: rank {} sends {} element(s) to itself but receives {}", rank_,
                                         sendcounts[rank_], recvcounts[rank_]));
    const uint64_t seq = seq_++;
    if (sendcounts[rank_] > 0)
      std::memcpy(recv + rdispls[rank_] * esz, send + sdispls[rank_] * esz, sendcounts[rank_] * esz);
    std::vector<Header> mine(size_), theirs(size_);
    Engine e(this);
    for (int i = 1; i < size_; ++i) {
      const int p = (rank_ + i) % size_;  // a rotation, so the ranks do not all start with rank 0
      mine[p] = Header{kHeaderMagic,
                       static_cast<uint32_t>(CollKind::kAllToAll),
                       seq,
                       sendcounts[p],
                       static_cast<int32_t>(dt),
                       0,
                       0,
                       rank_,
                       {}};
      e.Send(p, &mine[p], sizeof(Header));
      e.Send(p, send + sdispls[p] * esz, sendcounts[p] * esz);
      const Header* h = &theirs[p];
      const size_t want = recvcounts[p];
      e.RecvCheck(p, &theirs[p], sizeof(Header), [=, this]() -> Status {
        if (h->magic != kHeaderMagic) return InternalError(fmt::format("corrupt header from {}", PeerName(p)));
        if (h->kind != static_cast<uint32_t>(CollKind::kAllToAll) || h->seq != seq ||
            h->dtype != static_cast<int32_t>(dt) || h->count != want)
          return InvalidArgument(fmt::format(
              "mismatched collectives: rank {} called alltoallv(recvcount from rank {} = {}, {}) as its call #{}, "
              "but {} called {} as its call #{}",
              rank_, p, want, DTypeName(dt), seq, PeerName(p),
              h->kind == static_cast<uint32_t>(CollKind::kAllToAll)
                  ? fmt::format("alltoallv(sendcount to rank {} = {}, {})", rank_, h->count,
                                DTypeName(static_cast<DType>(h->dtype)))
                  : comm::Describe(static_cast<CollKind>(h->kind), h->count, static_cast<DType>(h->dtype),
                                   static_cast<RedOp>(h->op), h->root),
              h->seq));
        return Status::Ok();
      });
      e.RecvCopy(p, recv + rdispls[p] * esz, recvcounts[p] * esz);
    }
    return e.Run(fmt::format("alltoall #{}", seq));
  });
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
  p.timeout = timeout > std::chrono::milliseconds::zero() ? timeout : timeout_;
  p.ns = (ns_.empty() ? "" : ns_ + ".") + fmt::format("s{}.{}", seq, color);
  auto c = Create(p);
  if (!c.ok())
    return c.status().WithContext(
        fmt::format("tsrCommSplit: rank {} joining color {} as rank {} of {}", rank_, color, p.rank, p.world));
  return c;
}

std::vector<Range> Comm::BridgeChunks(size_t count, DType dt) const {
  // Device islands on the device bridge pipeline through the rings themselves: no chunks needed.
  bool staged = false;
  for (const auto& isl : islands_) staged |= isl.backend != "host" && !DeviceBridgeEligible(isl, dt);
  if (!staged) return {Range{0, count}};
  size_t per = bridge_chunk_bytes_ / DTypeSize(dt);
  if (per == 0 || count <= per) return {Range{0, count}};
  std::vector<Range> out;
  for (size_t lo = 0; lo < count; lo += per) out.push_back({lo, std::min(count, lo + per)});
  return out;
}

// ---- dispatch: a device island's rank goes through its device backend ----
Status Comm::AllReduce(const void* send, void* recv, size_t count, tsrDataType_t type, tsrRedOp_t op,
                       tsrStream_t stream) {
  if (direct_ != nullptr) {  // a world of one device island: known-good calls go straight to the CCL
    const int r = direct_->TryCall(send, recv, count, type, op, stream);
    if (r == 0) return Status::Ok();
    if (r != DirectAllReduce::kNotTaken) return direct_->report(direct_->owner, r);
  }
  return cuda_ ? cuda_->AllReduce(send, recv, count, type, op, stream)
               : HostAllReduce(send, recv, count, type, op, stream);
}
Status Comm::ReduceScatter(const void* send, void* recv, size_t recvcount, tsrDataType_t type, tsrRedOp_t op,
                           tsrStream_t stream) {
  return cuda_ ? cuda_->ReduceScatter(send, recv, recvcount, type, op, stream)
               : HostReduceScatter(send, recv, recvcount, type, op, stream);
}
Status Comm::AllGather(const void* send, void* recv, size_t sendcount, tsrDataType_t type, tsrStream_t stream) {
  return cuda_ ? cuda_->AllGather(send, recv, sendcount, type, stream)
               : HostAllGather(send, recv, sendcount, type, stream);
}
Status Comm::Broadcast(const void* send, void* recv, size_t count, tsrDataType_t type, int root, tsrStream_t stream) {
  return cuda_ ? cuda_->Broadcast(send, recv, count, type, root, stream)
               : HostBroadcast(send, recv, count, type, root, stream);
}
Status Comm::Send(const void* send, size_t count, tsrDataType_t type, int peer, tsrStream_t stream) {
  return cuda_ ? cuda_->Send(send, count, type, peer, stream) : HostSend(send, count, type, peer, stream);
}
Status Comm::Recv(void* recv, size_t count, tsrDataType_t type, int peer, tsrStream_t stream) {
  return cuda_ ? cuda_->Recv(recv, count, type, peer, stream) : HostRecv(recv, count, type, peer, stream);
}
Status Comm::Barrier() { return cuda_ ? cuda_->Barrier() : HostBarrier(); }
Status Comm::Group(const std::vector<P2POp>& ops) { return cuda_ ? cuda_->Group(ops) : HostGroup(ops); }
Status Comm::AllToAllv(const void* send, const size_t* sendcounts, const size_t* sdispls, void* recv,
                       const size_t* recvcounts, const size_t* rdispls, tsrDataType_t type, tsrStream_t stream) {
  if (cuda_) return cuda_->AllToAllv(send, sendcounts, sdispls, recv, recvcounts, rdispls, type, stream);
  if (stream != nullptr)
    return Guard("alltoall", [&] {
      return InvalidArgument(
          fmt::format("alltoallv: a stream was passed, but rank {}'s island ({}) uses host "
                      "memory: pass NULL",
                      rank_, islands_[my_island_].vendor));
    });
  return HostAllToAllv(send, sendcounts, sdispls, recv, recvcounts, rdispls, type);
}

#ifndef TESSERA_HAVE_CUDA
Result<std::unique_ptr<DeviceRank>> OpenDeviceRank(const std::string& device) {
  return Unsupported(
      fmt::format("TESSERA_DEVICE='{}': this build has no CUDA device backend (nvcc was not found "
                  "when it was configured); use TESSERA_DEVICE=host",
                  device));
}
bool IsDevicePointer(const void*) { return false; }
#endif

}  // namespace tessera::comm

namespace tessera {
Result<std::unique_ptr<Communicator>> Communicator::FromEnv() {
  auto params = comm::Comm::ParamsFromEnv();
  if (!params.ok()) return params.status();
  auto c = comm::Comm::Create(*params);
  if (!c.ok()) return c.status();
  return std::unique_ptr<Communicator>(std::move(c).value());
}
}  // namespace tessera
