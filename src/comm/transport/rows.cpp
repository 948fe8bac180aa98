// comm/transport/rows: the shm and tcp rows; see rows.hpp.
//
// shm: every rank creates an inbox with one ring per sender (sizes from TransportSetup::ring_bytes, which
// every rank computes alike), maps its peers' inboxes, then unlinks its own name; two barriers in the store
// order the steps. tcp: TESSERA_TCP_STREAMS connections per pair: lower ranks connect to higher ones with a
// hello carrying the job token, and every connection is acknowledged before use.
#include "comm/transport/rows.hpp"

#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>

#include "comm/store/store.hpp"
#include "comm/transport/shm.hpp"
#include "comm/transport/tcp.hpp"
#include "common/env.hpp"
#include "common/log.hpp"

namespace tessera::comm {
namespace {

using Clock = std::chrono::steady_clock;

std::chrono::milliseconds Left(Clock::time_point deadline) {
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
  return std::max(left, std::chrono::milliseconds(1));
}

class ShmTransport final : public Transport {
 public:
  const char* name() const override { return "shm"; }
  TransportCaps caps() const override { return {.host_local = true, .rings = true, .rdma = false}; }
  Status Viable() const override { return Status::Ok(); }
  std::string Domain() const override { return HostId(); }
  Result<std::string> Listen(const TransportSetup&) override { return std::string(); }  // names come from the prefix
  Result<std::vector<Link>> Connect(const TransportSetup& s, const std::vector<int>& peers,
                                    Clock::time_point deadline) override {
    auto layout = [&](int owner) {
      std::vector<size_t> sizes(s.size);
      for (int p = 0; p < s.size; ++p) sizes[p] = s.ring_bytes(p, owner);
      return sizes;
    };
    if (!peers.empty()) {
      TSR_ASSIGN_OR_RETURN(inbox_, ShmInbox::Create(s.name_prefix + std::to_string(s.rank), layout(s.rank)));
    }
    TSR_RETURN_IF_ERROR(s.store->Barrier("shm-created", s.size, Left(deadline)));
    std::vector<Link> links;
    for (int p : peers) {
      TSR_ASSIGN_OR_RETURN(auto theirs, ShmInbox::Open(s.name_prefix + std::to_string(p), layout(p)));
      links.push_back({p, theirs->Writer(s.rank), inbox_->Reader(p)});
      peer_inboxes_.push_back(std::move(theirs));
    }
    TSR_RETURN_IF_ERROR(s.store->Barrier("shm-mapped", s.size, Left(deadline)));
    if (inbox_) inbox_->Unlink();
    for (auto& pi : peer_inboxes_) pi->Unlink();
    return links;
  }

 private:
  std::unique_ptr<ShmInbox> inbox_;  // outlive the channels (Comm destroys its links before its rows)
  std::vector<std::unique_ptr<ShmInbox>> peer_inboxes_;
};

class TcpTransport final : public Transport {
 public:
  const char* name() const override { return "tcp"; }
  TransportCaps caps() const override { return {}; }
  Status Viable() const override { return Status::Ok(); }
  std::string Domain() const override { return "ip"; }
  Result<std::string> Listen(const TransportSetup& s) override {
    // The TCP transport listens on the address it advertises, not on every interface, unless
    // TESSERA_BRIDGE_LISTEN says otherwise (e.g. 0.0.0.0 behind NAT).
    std::string listen_host = env::Get("TESSERA_BRIDGE_LISTEN").value_or(s.host_addr);
    if (!env::Get("TESSERA_BRIDGE_LISTEN") && !env::Get("TESSERA_BRIDGE_ADDR") && !s.loopback_store &&
        ResolvesToLoopback(s.host_addr)) {
      // The host name resolves to a loopback address here (Debian's 127.0.1.1), which ranks on other
      // hosts cannot reach: listen everywhere, as before, and say how to narrow it.
      TSR_LOG_WARN(
          "rank {}: this host's name '{}' resolves to a loopback address; the TCP transport listens on "
          "0.0.0.0 (set TESSERA_BRIDGE_ADDR to this host's address to listen there only)",
          s.rank, s.host_addr);
      listen_host = "0.0.0.0";
    }
    auto l = TcpListener::Listen(listen_host);
    if (!l.ok()) return l.status().WithContext(fmt::format("rank {}: TESSERA_BRIDGE_LISTEN/ADDR", s.rank));
    listener_ = std::move(l).value();
    return fmt::format("{}:{}", s.host_addr, listener_->port());
  }
  Result<std::vector<Link>> Connect(const TransportSetup& s, const std::vector<int>& peers,
                                    Clock::time_point deadline) override {
    TSR_ASSIGN_OR_RETURN(int64_t streams, env::Int("TESSERA_TCP_STREAMS", 1, 64));
    TSR_ASSIGN_OR_RETURN(uint64_t chunk, env::Bytes("TESSERA_TCP_CHUNK"));
    if (chunk < 4096) return InvalidArgument(fmt::format("TESSERA_TCP_CHUNK={} must be at least 4096", chunk));
    std::vector<int> lower, higher;
    for (int p : peers) (p < s.rank ? lower : higher).push_back(p);
    // Connect to higher ranks, accept from lower ones, then acknowledge.
    std::vector<std::vector<int>> fds(s.size, std::vector<int>(streams, -1));
    auto close_all = [&] {
      for (auto& v : fds)
        for (int& fd : v)
          if (fd >= 0) ::close(fd), fd = -1;
    };
    auto fail = [&](Status st) {
      close_all();
      return st;
    };
    for (int p : higher) {
      for (int i = 0; i < streams; ++i) {
        auto fd = TcpConnect(s.blobs[p], s.rank, i, s.token, Left(deadline));
        if (!fd.ok()) return fail(fd.status().WithContext(fmt::format("bridge to {}", s.peer_name(p))));
        fds[p][i] = *fd;
      }
    }
    if (!lower.empty()) {
      if (!listener_) return fail(InternalError(fmt::format("rank {}: the tcp row has no listener", s.rank)));
      auto incoming = listener_->AcceptHellos(static_cast<int>(lower.size() * streams), s.token, Left(deadline));
      if (!incoming.ok()) return fail(incoming.status());
      for (auto& in : *incoming) {
        const bool expected = std::binary_search(lower.begin(), lower.end(), in.from_rank);
        if (!expected || in.stream < 0 || in.stream >= streams || fds[in.from_rank][in.stream] != -1) {
          ::close(in.fd);
          return fail(RemoteError(
              fmt::format("bridge: unexpected connection from rank {} stream {}", in.from_rank, in.stream)));
        }
        fds[in.from_rank][in.stream] = in.fd;
        if (Status st = TcpSendAck(in.fd); !st.ok()) return fail(st);
      }
    }
    for (int p : higher)
      for (int i = 0; i < streams; ++i)
        if (Status st = TcpAwaitAck(fds[p][i], s.blobs[p], Left(deadline)); !st.ok()) return fail(st);
    std::vector<Link> links;
    for (int p : peers) {
      auto conns = std::make_shared<TcpConnections>();
      for (int& fd : fds[p]) {
        conns->fds.push_back(fd);  // owned by conns from here on
        const int mine = fd;
        fd = -1;
        if (Status st = TcpTune(mine); !st.ok()) return fail(st);
      }
      links.push_back({p, MakeTcpSender(conns, chunk), MakeTcpReceiver(conns, chunk)});
    }
    listener_.reset();
    return links;
  }

 private:
  std::unique_ptr<TcpListener> listener_;
};

}  // namespace

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

std::unique_ptr<Transport> MakeShmTransport() { return std::make_unique<ShmTransport>(); }
std::unique_ptr<Transport> MakeTcpTransport() { return std::make_unique<TcpTransport>(); }

}  // namespace tessera::comm
