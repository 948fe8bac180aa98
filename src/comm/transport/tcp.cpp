// comm/transport/tcp: parallel-stream TCP channels; see tcp.hpp.
#include "comm/transport/tcp.hpp"

#include <arpa/inet.h>
#include <fmt/format.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "common/log.hpp"
#include "common/net.hpp"

namespace tessera::comm {
namespace {

constexpr uint32_t kHelloMagic = 0x54535242;  // "TSRB"

struct Hello {
  uint32_t magic;
  int32_t rank;
  int32_t stream;
  uint32_t token_len;
};

using net::Clock;

// Blocking full read/write with a deadline, on a socket that may be non-blocking.
Status IoFull(int fd, void* buf, size_t len, bool write, Clock::time_point deadline, const std::string& what) {
  int err = 0;
  const net::Io io =
      write ? net::WriteFull(fd, buf, len, deadline, -1, &err) : net::ReadFull(fd, buf, len, deadline, -1, &err);
  return net::IoStatus(io, err, what);
}

class TcpSender final : public SendChannel {
 public:
  TcpSender(std::shared_ptr<TcpConnections> c, size_t chunk) : c_(std::move(c)), chunk_(chunk), left_(chunk) {}
  Result<size_t> TrySend(const void* src, size_t bytes) override {
    size_t n = std::min(bytes, left_);
    ssize_t r = ::send(c_->fds[cur_], src, n, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (r < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) return size_t{0};
      return RemoteError(fmt::format("tcp send failed: {} (the peer closed its connection)", std::strerror(errno)));
    }
    left_ -= static_cast<size_t>(r);
    if (left_ == 0) {
      left_ = chunk_;
      cur_ = (cur_ + 1) % c_->fds.size();
    }
    return static_cast<size_t>(r);
  }
  const char* transport() const override { return "tcp"; }
  int WaitFd() const override { return c_->fds[cur_]; }

 private:
  std::shared_ptr<TcpConnections> c_;
  size_t chunk_;
  size_t left_;
  size_t cur_ = 0;
};

class TcpReceiver final : public RecvChannel {
 public:
  TcpReceiver(std::shared_ptr<TcpConnections> c, size_t chunk)
      : c_(std::move(c)),
        chunk_(chunk),
        left_(chunk),
        buf_(new std::byte[chunk + kChannelAlign]),
        cap_(chunk + kChannelAlign) {}
  // buf_[i] always holds a byte whose stream offset is i modulo kChannelAlign, so a message (which starts
  // at a multiple of kChannelAlign on the stream) is handed out at an aligned address, also after
  // RecvInto took an odd number of bytes straight from the socket.
  Result<std::pair<const std::byte*, size_t>> Peek() override {
    if (consumed_ == len_) consumed_ = len_ = static_cast<size_t>(taken_ % kChannelAlign);
    if (len_ == cap_ && consumed_ >= kChannelAlign) {  // keep a partial element: move it to the front
      const size_t to = consumed_ % kChannelAlign;
      std::memmove(buf_.get() + to, buf_.get() + consumed_, len_ - consumed_);
      len_ = to + (len_ - consumed_);
      consumed_ = to;
    }
    if (len_ < cap_) {
      size_t want = std::min(cap_ - len_, left_);
      ssize_t r = ::recv(c_->fds[cur_], buf_.get() + len_, want, MSG_DONTWAIT);
      if (r == 0) {
        // The peer closed after sending: hand out what is buffered first, fail only when it is gone.
        if (len_ > consumed_) return std::pair<const std::byte*, size_t>(buf_.get() + consumed_, len_ - consumed_);
        return RemoteError("tcp connection closed by the peer (did the peer rank exit?)");
      }
      if (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
        return RemoteError(fmt::format("tcp receive failed: {}", std::strerror(errno)));
      if (r > 0) {
        len_ += static_cast<size_t>(r);
        taken_ += static_cast<uint64_t>(r);
        left_ -= static_cast<size_t>(r);
        if (left_ == 0) {
          left_ = chunk_;
          cur_ = (cur_ + 1) % c_->fds.size();
        }
      }
    }
    return std::pair<const std::byte*, size_t>(buf_.get() + consumed_, len_ - consumed_);
  }
  void Consume(size_t bytes) override { consumed_ += bytes; }
  const char* transport() const override { return "tcp"; }
  bool direct() const override { return true; }
  Result<size_t> RecvInto(void* dst, size_t bytes) override {
    if (len_ > consumed_) {  // what Peek buffered comes first
      const size_t n = std::min(bytes, len_ - consumed_);
      std::memcpy(dst, buf_.get() + consumed_, n);
      consumed_ += n;
      return n;
    }
    consumed_ = len_ = 0;  // Peek realigns from taken_
    const ssize_t r = ::recv(c_->fds[cur_], dst, std::min(bytes, left_), MSG_DONTWAIT);
    if (r == 0) return RemoteError("tcp connection closed by the peer (did the peer rank exit?)");
    if (r < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) return size_t{0};
      return RemoteError(fmt::format("tcp receive failed: {}", std::strerror(errno)));
    }
    taken_ += static_cast<uint64_t>(r);
    left_ -= static_cast<size_t>(r);
    if (left_ == 0) {
      left_ = chunk_;
      cur_ = (cur_ + 1) % c_->fds.size();
    }
    return static_cast<size_t>(r);
  }
  // With bytes still buffered the engine is waiting on something else: no fd to sleep on then.
  int WaitFd() const override { return len_ > consumed_ ? -1 : c_->fds[cur_]; }

 private:
  std::shared_ptr<TcpConnections> c_;
  size_t chunk_;
  size_t left_;
  size_t cur_ = 0;
  std::unique_ptr<std::byte[]> buf_;
  size_t cap_;
  size_t len_ = 0;
  size_t consumed_ = 0;
  uint64_t taken_ = 0;  // bytes taken from the streams so far
};

}  // namespace

TcpConnections::~TcpConnections() {
  for (int fd : fds) ::close(fd);
}

Status TcpTune(int fd) {
  net::SetNoDelay(fd);
  int buf = 4 << 20;
  setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &buf, sizeof(buf));
  setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &buf, sizeof(buf));
  if (!net::SetNonBlocking(fd, true)) return ErrnoError("fcntl O_NONBLOCK", errno);
  return Status::Ok();
}

Result<std::unique_ptr<TcpListener>> TcpListener::Listen(const std::string& host) {
  int port = 0;
  net::SocketError e;
  const int fd = net::Listen(host, 0, AF_INET, &port, &e);
  if (fd < 0 && e.gai != 0)
    return InvalidArgument(fmt::format("bridge: cannot resolve the listen address '{}': {}", host, e.Describe()));
  if (fd < 0) return ErrnoError(fmt::format("bridge listen on '{}'", host), e.err);
  return std::unique_ptr<TcpListener>(new TcpListener(fd, port));
}

TcpListener::~TcpListener() { ::close(fd_); }

bool ResolvesToLoopback(const std::string& host) {
  addrinfo hints{}, *res = nullptr;
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  if (getaddrinfo(host.c_str(), nullptr, &hints, &res) != 0) return false;
  const bool loop = (ntohl(reinterpret_cast<const sockaddr_in*>(res->ai_addr)->sin_addr.s_addr) >> 24) == 127;
  freeaddrinfo(res);
  return loop;
}

Result<std::vector<TcpListener::Incoming>> TcpListener::AcceptHellos(int count, const std::string& token,
                                                                     std::chrono::milliseconds timeout) {
  struct Pending {
    int fd;
    Clock::time_point deadline;
    std::string buf;  // the hello so far: Hello, then token_len bytes of token
    std::string peer;
  };
  std::vector<Incoming> out;
  std::vector<Pending> pending;
  const auto deadline = Clock::now() + timeout;
  const auto hello_bound = std::min<std::chrono::milliseconds>(timeout, kHelloTimeout);
  auto drop = [&](Pending& p, const std::string& why) {
    TSR_LOG_WARN("bridge: dropped a connection from {}: {}", p.peer, why);
    ::close(p.fd);
    p.fd = -1;
  };
  auto cleanup = [&] {
    for (auto& p : pending)
      if (p.fd >= 0) drop(p, "no hello by the end of the bridge's start-up");
  };
  while (static_cast<int>(out.size()) < count) {
    const auto now = Clock::now();
    if (now >= deadline) {
      cleanup();
      for (auto& in : out) ::close(in.fd);
      return Timeout(
          fmt::format("bridge: {} of {} peer connections arrived within {} ms", out.size(), count, timeout.count()));
    }
    std::vector<pollfd> pfds{{fd_, POLLIN, 0}};
    auto next = deadline;
    for (auto& p : pending) {
      pfds.push_back({p.fd, POLLIN, 0});
      next = std::min(next, p.deadline);
    }
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(next - now).count();
    const int n = ::poll(pfds.data(), pfds.size(), static_cast<int>(std::clamp<int64_t>(left + 1, 0, 100)));
    for (size_t i = 0; i < pending.size() && n > 0; ++i) {
      Pending& p = pending[i];
      if (pfds[1 + i].revents == 0) continue;
      for (;;) {
        size_t want = sizeof(Hello) - std::min(sizeof(Hello), p.buf.size());
        if (want == 0) {
          Hello h;
          std::memcpy(&h, p.buf.data(), sizeof(h));
          if (h.magic != kHelloMagic || h.token_len > 4096) {
            drop(p, "not a Tessera bridge hello");
            break;
          }
          want = sizeof(Hello) + h.token_len - p.buf.size();
          if (want == 0) {
            if (p.buf.compare(sizeof(Hello), std::string::npos, token) != 0) {
              drop(p, "wrong job token (TESSERA_TOKEN)");
              break;
            }
            out.push_back({h.rank, h.stream, p.fd});
            p.fd = -1;
            break;
          }
        }
        char buf[512];
        const ssize_t r = ::recv(p.fd, buf, std::min(want, sizeof(buf)), MSG_DONTWAIT);
        if (r > 0) {
          p.buf.append(buf, static_cast<size_t>(r));
          continue;
        }
        if (r < 0 && errno == EINTR) continue;
        if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
        drop(p, "closed before its hello");
        break;
      }
    }
    const auto after = Clock::now();
    for (auto& p : pending)
      if (p.fd >= 0 && after >= p.deadline)
        drop(p, fmt::format("no valid hello within {} ms (a stray or a port scanner?)", hello_bound.count()));
    std::erase_if(pending, [](const Pending& p) { return p.fd < 0; });
    if (n > 0 && (pfds[0].revents & POLLIN)) {
      for (;;) {
        int fd = ::accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
        if (fd < 0) break;
        if (static_cast<int>(pending.size()) >= kMaxPending)
          drop(pending.front(), "too many connections without a hello");
        std::erase_if(pending, [](const Pending& p) { return p.fd < 0; });
        pending.push_back({fd, after + hello_bound, {}, net::PeerName(fd)});
      }
    }
  }
  cleanup();
  // The accepted sockets were non-blocking for the hello; the set-up that follows expects blocking ones
  // until TcpTune.
  for (auto& in : out) (void)net::SetNonBlocking(in.fd, false);
  return out;
}

Result<int> TcpConnect(const std::string& address, int my_rank, int stream, const std::string& token,
                       std::chrono::milliseconds timeout) {
  const auto hp = net::SplitHostPort(address);
  if (!hp) return InvalidArgument("bridge address '" + address + "' is not host:port");
  const auto deadline = Clock::now() + timeout;
  // The peer's listener exists before its address is published: a refusal is rare, retried every 20 ms.
  const net::ConnectRetry retry{AF_INET, std::chrono::milliseconds(20), std::chrono::milliseconds(20), false};
  net::SocketError last;
  const int fd = net::ConnectWithRetry(hp->host, hp->port, retry, deadline, &last);
  if (fd < 0 && last.gai != 0)
    return InvalidArgument(fmt::format("cannot resolve bridge peer '{}': {}", address, last.Describe()));
  if (fd < 0)
    return Timeout(ErrnoError("connect to bridge peer " + address, last.err).message() + " (gave up after " +
                   std::to_string(timeout.count()) + " ms)");
  Hello h{kHelloMagic, my_rank, stream, static_cast<uint32_t>(token.size())};
  Status s = IoFull(fd, &h, sizeof(h), true, deadline, "bridge hello to " + address);
  if (s.ok())
    s = IoFull(fd, const_cast<char*>(token.data()), token.size(), true, deadline, "bridge hello to " + address);
  if (s.ok()) return fd;
  ::close(fd);
  return s;
}

Status TcpSendAck(int fd) {
  char ok = 'K';
  return IoFull(fd, &ok, 1, true, Clock::now() + std::chrono::seconds(10), "bridge acknowledgement");
}

Status TcpAwaitAck(int fd, const std::string& address, std::chrono::milliseconds timeout) {
  char ok = 0;
  Status s = IoFull(fd, &ok, 1, false, Clock::now() + timeout, "bridge acknowledgement from " + address);
  if (!s.ok()) return RemoteError(s.message() + " (the peer refused the job token, or exited)");
  return Status::Ok();
}

std::unique_ptr<SendChannel> MakeTcpSender(std::shared_ptr<TcpConnections> conns, size_t chunk) {
  return std::make_unique<TcpSender>(std::move(conns), chunk);
}
std::unique_ptr<RecvChannel> MakeTcpReceiver(std::shared_ptr<TcpConnections> conns, size_t chunk) {
  return std::make_unique<TcpReceiver>(std::move(conns), chunk);
}

}  // namespace tessera::comm
