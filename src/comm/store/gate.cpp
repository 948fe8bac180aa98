// comm/store/gate: the store's accept loop and its limits on connections that have not authenticated;
// see gate.hpp. StoreLimits::FromEnv lives here too.
#include "comm/store/gate.hpp"

#include <fmt/format.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <thread>
#include <vector>

#include "comm/store/wire.hpp"
#include "common/env.hpp"
#include "common/log.hpp"
#include "common/net.hpp"

namespace tessera::comm {
namespace {

using namespace store_wire;

class StoreGate {
 public:
  // A connection that has not authenticated yet: its handshake is read without blocking.
  struct Pending {
    int fd = -1;
    Clock::time_point deadline;
    std::string buf;  // bytes of the handshake frame so far (length prefix included)
    std::string peer;
  };

  StoreGate(int listen_fd, int wake_fd, const std::string& token, const StoreLimits& limits,
            const StoreGateHooks& hooks)
      : listen_fd_(listen_fd), wake_fd_(wake_fd), token_(token), limits_(limits), hooks_(hooks) {}

  void Run() {
    std::vector<pollfd> pfds;
    for (;;) {
      pfds.assign({{listen_fd_, POLLIN, 0}, {wake_fd_, POLLIN, 0}});
      Clock::time_point next = Clock::time_point::max();
      for (const Pending& p : pending_) {
        pfds.push_back({p.fd, POLLIN, 0});
        next = std::min(next, p.deadline);
      }
      const int n = ::poll(pfds.data(), pfds.size(), net::PollMs(next));
      if (n < 0 && errno != EINTR) {
        TSR_LOG_ERROR("store: poll on the listening socket failed: {}", std::strerror(errno));
        break;
      }
      if (n > 0 && (pfds[1].revents & POLLIN)) break;
      // Handshakes in progress (pfds[2 + i] is pending_[i]), then the ones out of time.
      std::vector<Pending> keep;
      const auto now = Clock::now();
      for (size_t i = 0; i < pending_.size(); ++i) {
        Pending& p = pending_[i];
        const bool ready = n > 0 && pfds[2 + i].revents != 0;
        if (ready && !ReadHandshake(p)) continue;  // done with it: served, refused or dropped
        if (ready && p.fd < 0) continue;
        if (now >= p.deadline) {
          TSR_LOG_WARN(
              "store: dropped a connection from {} that sent no valid handshake within {} "
              "(TESSERA_TIMEOUT)",
              p.peer, FormatDuration(limits_.handshake_timeout));
          ::close(p.fd);
          continue;
        }
        keep.push_back(std::move(p));
      }
      pending_ = std::move(keep);
      if (n > 0 && (pfds[0].revents & POLLIN)) AcceptNew();
    }
    for (Pending& p : pending_) ::close(p.fd);
    pending_.clear();
  }

 private:
  void AcceptNew() {
    (void)hooks_.open_connections();  // joins the threads of connections that have ended
    for (;;) {
      const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
      if (fd < 0) {
        if (errno == EINTR || errno == ECONNABORTED) continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK) return;
        TSR_LOG_WARN("store: accept failed: {}", std::strerror(errno));
        // EMFILE and friends: back off instead of spinning.
        std::this_thread::sleep_for(milliseconds(10));
        return;
      }
      net::SetNoDelay(fd);
      if (static_cast<int>(pending_.size()) >= StoreLimits::kMaxPending) {
        // Many connections that do not authenticate: drop the oldest, which is the likeliest stray.
        TSR_LOG_WARN(
            "store: dropped a connection from {} that had not authenticated: {} connections are "
            "waiting to authenticate (the limit)",
            pending_.front().peer, StoreLimits::kMaxPending);
        ::close(pending_.front().fd);
        pending_.erase(pending_.begin());
      }
      pending_.push_back({fd, net::DeadlineAfter(limits_.handshake_timeout), {}, net::PeerName(fd)});
    }
  }

  // Reads what a pending connection has sent; false when it is finished with (authenticated and handed
  // to a thread of its own, refused, or dropped), true while its handshake is incomplete.
  bool ReadHandshake(Pending& p) {
    char buf[512];
    for (;;) {
      const size_t want = p.buf.size() < 4 ? 4 - p.buf.size() : 4 + FrameLen(p.buf) - p.buf.size();
      if (want == 0) break;
      const ssize_t r = ::recv(p.fd, buf, std::min(want, sizeof(buf)), MSG_DONTWAIT);
      if (r > 0) {
        p.buf.append(buf, static_cast<size_t>(r));
        if (p.buf.size() == 4 && FrameLen(p.buf) > kMaxHandshake) {
          TSR_LOG_WARN(
              "store: refused a connection from {}: its handshake announces {} bytes (at most {}); not "
              "a Tessera store client",
              p.peer, FrameLen(p.buf), kMaxHandshake);
          ::close(p.fd);
          return false;
        }
        continue;
      }
      if (r < 0 && errno == EINTR) continue;
      if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return true;
      TSR_LOG_INFO("store: a connection from {} closed before authenticating", p.peer);
      ::close(p.fd);
      return false;
    }
    const std::string msg = p.buf.substr(4);
    Reader hr(msg);
    const uint32_t magic = hr.U32();
    const std::string token = hr.Str();
    int err = 0;
    if (!hr.ok() || magic != kMagic) {
      TSR_LOG_WARN("store: dropped a connection from {}: not a Tessera store client", p.peer);
      ::close(p.fd);
      return false;
    }
    if (token != token_) {
      TSR_LOG_WARN("store: refused a connection from {}: wrong job token (TESSERA_TOKEN)", p.peer);
      Writer w;
      w.U8(static_cast<uint8_t>(Reply::kRefused));
      (void)WriteFrame(p.fd, w.Frame(), Clock::now() + milliseconds(1000), wake_fd_, &err);
      ::close(p.fd);
      if (hooks_.refused) hooks_.refused(p.peer);
      return false;
    }
    if (hooks_.open_connections() >= limits_.max_connections) {
      const std::string why =
          fmt::format("{} connections are open, the limit (TESSERA_STORE_MAX_CONNS)", limits_.max_connections);
      TSR_LOG_WARN("store: refused a connection from {}: {}", p.peer, why);
      Writer w;
      w.U8(static_cast<uint8_t>(Reply::kBusy)).Str(why);
      (void)WriteFrame(p.fd, w.Frame(), Clock::now() + milliseconds(1000), wake_fd_, &err);
      ::close(p.fd);
      return false;
    }
    hooks_.admit(p.fd);
    p.fd = -1;
    return false;
  }

  const int listen_fd_, wake_fd_;
  const std::string& token_;
  const StoreLimits& limits_;
  const StoreGateHooks& hooks_;
  std::vector<Pending> pending_;
};

}  // namespace

void RunStoreGate(int listen_fd, int wake_fd, const std::string& token, const StoreLimits& limits,
                  const StoreGateHooks& hooks) {
  StoreGate(listen_fd, wake_fd, token, limits, hooks).Run();
}

StoreLimits StoreLimits::FromEnv() {
  StoreLimits l;
  auto t = env::Duration("TESSERA_TIMEOUT");
  if (t.ok())
    l.handshake_timeout = *t;
  else
    TSR_LOG_WARN("store: {}; the handshake bound stays {}", t.status().message(), FormatDuration(l.handshake_timeout));
  auto m = env::Int("TESSERA_STORE_MAX_CONNS", 1, 1 << 20);
  if (m.ok())
    l.max_connections = static_cast<int>(*m);
  else
    TSR_LOG_WARN("store: {}; the limit stays {}", m.status().message(), l.max_connections);
  return l;
}

}  // namespace tessera::comm
