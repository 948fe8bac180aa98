// comm/channels: Comm::SetUpChannels — one send and one receive channel to every other rank: a ring in
// shared memory for a peer on this host (each rank creates an inbox with one ring per sender, maps its
// peers' inboxes, then unlinks its own name), TESSERA_TCP_STREAMS TCP connections for a peer on another
// host (or across islands with TESSERA_BRIDGE=tcp): lower ranks connect to higher ones with a hello
// carrying the job token, and every connection is acknowledged before use. A device-bridge GPU rank's TCP
// links to other islands go through a TcpRelay (transport/relay.hpp), whose host rings its copy engines use.
// First, the rank's host thread pool (comm/host_pool.hpp), sized from the ranks of the communicator on this host.
#include <fmt/format.h>

#include <algorithm>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "comm/comm.hpp"
#include "common/env.hpp"

namespace tessera::comm {

Status Comm::SetUpChannels() {
  TSR_ASSIGN_OR_RETURN(std::string bridge, env::Choice("TESSERA_BRIDGE", {"auto", "shm", "tcp"}));
  TSR_ASSIGN_OR_RETURN(uint64_t ring, env::Bytes("TESSERA_SHM_RING"));
  TSR_ASSIGN_OR_RETURN(uint64_t cuda_ring, env::Bytes("TESSERA_DEVICE_RING"));
  TSR_ASSIGN_OR_RETURN(int64_t streams, env::Int("TESSERA_TCP_STREAMS", 1, 64));
  TSR_ASSIGN_OR_RETURN(uint64_t chunk, env::Bytes("TESSERA_TCP_CHUNK"));
  if (ring < (64 << 10) || ring % 4096 != 0)
    return InvalidArgument(fmt::format("TESSERA_SHM_RING={} must be at least 64K and a multiple of 4K", ring));
  if (cuda_ring < (64 << 10) || cuda_ring % 4096 != 0)
    return InvalidArgument(fmt::format("TESSERA_DEVICE_RING={} must be at least 64K and a multiple of 4K", cuda_ring));
  if (chunk < 4096) return InvalidArgument(fmt::format("TESSERA_TCP_CHUNK={} must be at least 4096", chunk));
  transport_.assign(size_, "");
  InitLinkCounters(size_);
  send_.resize(size_);
  recv_.resize(size_);
  bool any_shm = false;
  std::vector<int> tcp_lower, tcp_higher;
  const RankInfo& me = infos_[rank_];
  // The rank's host threads for large copies and folds (TESSERA_HOST_THREADS; one: none, all inline).
  int local_ranks = 0;
  for (const RankInfo& r : infos_) local_ranks += r.host_id == me.host_id;
  TSR_ASSIGN_OR_RETURN(int threads, HostThreadsFromEnv(local_ranks));
  if (threads > 1 && host_pool() == nullptr) set_host_pool(std::make_unique<HostPool>(threads));
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
  // Rings between a device-bridge rank and its bridge peers are TESSERA_DEVICE_RING bytes, so that the
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
  // A device-bridge rank's copy engines need ring ends on its links to other islands.
  if (device_rank(rank_)) TSR_RETURN_IF_ERROR(RelayBridgeLinks(cuda_ring).status());
  return Status::Ok();
}

Result<int> Comm::RelayBridgeLinks(size_t ring_bytes) {
  relays_.resize(size_);
  int n = 0;
  for (int p = 0; p < size_; ++p) {
    if (transport_[p] != "tcp" || infos_[p].island == infos_[rank_].island) continue;
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
