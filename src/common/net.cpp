// common/net: shared TCP socket helpers (listen, connect with retries, exact reads/writes before a
// deadline, address parsing); see net.hpp.
#include "common/net.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <memory>
#include <thread>

#include "common/env.hpp"

namespace tessera::net {

using std::chrono::milliseconds;

Clock::time_point DeadlineAfter(milliseconds d) {
  if (d >= std::chrono::hours(24 * 365 * 100)) return Clock::time_point::max();
  return Clock::now() + std::max(d, milliseconds::zero());
}

int PollMs(Clock::time_point deadline) {
  if (deadline == Clock::time_point::max()) return -1;
  const auto left = std::chrono::duration_cast<milliseconds>(deadline - Clock::now()).count();
  return static_cast<int>(std::clamp<int64_t>(left + 1, 0, 1 << 30));
}

std::optional<HostPort> SplitHostPort(const std::string& address) {
  const size_t colon = address.rfind(':');
  if (colon == std::string::npos || colon == 0) return std::nullopt;
  std::string host = address.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  auto port = env::ParseInt("port", address.substr(colon + 1), 1, 65535);
  if (!port.ok() || host.empty()) return std::nullopt;
  return HostPort{host, std::to_string(*port)};
}

std::string SocketError::Describe() const { return gai != 0 ? gai_strerror(gai) : std::strerror(err); }

Io WaitReady(int fd, short events, Clock::time_point deadline, int wake_fd, int* err) {
  for (;;) {
    pollfd p[2] = {{fd, events, 0}, {wake_fd, POLLIN, 0}};
    const int n = ::poll(p, wake_fd >= 0 ? 2 : 1, PollMs(deadline));
    if (n < 0) {
      if (errno == EINTR) continue;
      *err = errno;
      return Io::kError;
    }
    if (wake_fd >= 0 && (p[1].revents & POLLIN)) return Io::kWoken;
    if (p[0].revents != 0) return Io::kOk;  // ready, or an error/hang-up the next call reports
    if (Clock::now() >= deadline) return Io::kTimeout;
  }
}

namespace {
// The part ReadFull and WriteFull share: moves `n` bytes with `step` (recv or send without blocking),
// waiting for `events` whenever the socket has nothing to give or take.
template <typename Step>
Io MoveFull(int fd, size_t n, short events, Clock::time_point deadline, int wake_fd, int* err, Step step) {
  size_t done = 0;
  while (done < n) {
    const ssize_t r = step(done);
    if (r > 0) {
      done += static_cast<size_t>(r);
      continue;
    }
    if (r == 0) {
      *err = 0;
      return Io::kClosed;
    }
    if (errno == EINTR) continue;
    if (errno == ECONNRESET || errno == EPIPE) {
      *err = errno;
      return Io::kClosed;
    }
    if (errno != EAGAIN && errno != EWOULDBLOCK) {
      *err = errno;
      return Io::kError;
    }
    const Io w = WaitReady(fd, events, deadline, wake_fd, err);
    if (w != Io::kOk) return w;
  }
  return Io::kOk;
}
}  // namespace

Io ReadFull(int fd, void* buf, size_t n, Clock::time_point deadline, int wake_fd, int* err) {
  auto* p = static_cast<char*>(buf);
  return MoveFull(fd, n, POLLIN, deadline, wake_fd, err,
                  [&](size_t done) { return ::recv(fd, p + done, n - done, MSG_DONTWAIT); });
}

Io WriteFull(int fd, const void* buf, size_t n, Clock::time_point deadline, int wake_fd, int* err) {
  const auto* p = static_cast<const char*>(buf);
  return MoveFull(fd, n, POLLOUT, deadline, wake_fd, err,
                  [&](size_t done) { return ::send(fd, p + done, n - done, MSG_DONTWAIT | MSG_NOSIGNAL); });
}

Status IoStatus(Io io, int err, const std::string& what) {
  switch (io) {
    case Io::kOk:
      return Status::Ok();
    case Io::kClosed:
      if (err == 0) return RemoteError(what + ": connection closed by the peer");
      return ErrnoError(what, err);
    case Io::kTimeout:
      return Timeout(what + ": timed out");
    case Io::kWoken:
      return RemoteError(what + ": interrupted");
    case Io::kError:
      break;
  }
  return ErrnoError(what, err);
}

namespace {
struct AddrInfoFree {
  void operator()(addrinfo* a) const { ::freeaddrinfo(a); }
};
using AddrList = std::unique_ptr<addrinfo, AddrInfoFree>;

// getaddrinfo for TCP with a numeric service; nullptr and *gai on failure.
AddrList Resolve(const std::string& host, const std::string& port, int family, int flags, int* gai) {
  addrinfo hints{};
  hints.ai_family = family;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = flags | AI_NUMERICSERV;
  addrinfo* res = nullptr;
  *gai = ::getaddrinfo(host.empty() ? nullptr : host.c_str(), port.c_str(), &hints, &res);
  if (*gai != 0) return nullptr;
  return AddrList(res);
}
}  // namespace

int Listen(const std::string& host, int port, int family, int* bound_port, SocketError* e) {
  *e = {};
  AddrList res = Resolve(host, std::to_string(port), family, AI_PASSIVE, &e->gai);
  if (!res) return -1;
  int fd = -1;
  for (addrinfo* ai = res.get(); ai != nullptr && fd < 0; ai = ai->ai_next) {
    fd = ::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, ai->ai_protocol);
    if (fd < 0) {
      e->err = errno;
      continue;
    }
    int one = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (::bind(fd, ai->ai_addr, ai->ai_addrlen) != 0 || ::listen(fd, 1024) != 0) {
      e->err = errno;
      ::close(fd);
      fd = -1;
    }
  }
  if (fd < 0) return -1;
  sockaddr_storage ss{};
  socklen_t len = sizeof(ss);
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len) != 0) {
    e->err = errno;
    ::close(fd);
    return -1;
  }
  *bound_port = ntohs(ss.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port
                                               : reinterpret_cast<sockaddr_in*>(&ss)->sin_port);
  return fd;
}

int ConnectOnce(const addrinfo* ai, Clock::time_point deadline, int* err) {
  const int fd = ::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, ai->ai_protocol);
  if (fd < 0) {
    *err = errno;
    return -1;
  }
  if (::connect(fd, ai->ai_addr, ai->ai_addrlen) == 0) return fd;
  if (errno != EINPROGRESS) {
    *err = errno;
    ::close(fd);
    return -1;
  }
  const Io w = WaitReady(fd, POLLOUT, deadline, -1, err);
  if (w == Io::kOk) {
    socklen_t len = sizeof(*err);
    if (::getsockopt(fd, SOL_SOCKET, SO_ERROR, err, &len) == 0 && *err == 0) return fd;
  } else if (w == Io::kTimeout) {
    *err = ETIMEDOUT;
  }
  ::close(fd);
  return -1;
}

int ConnectWithRetry(const std::string& host, const std::string& port, const ConnectRetry& r,
                     Clock::time_point deadline, SocketError* last) {
  *last = {};
  last->err = ETIMEDOUT;
  milliseconds backoff = r.backoff;
  for (;;) {
    int gai = 0;
    AddrList res = Resolve(host, port, r.family, 0, &gai);
    if (!res) {
      *last = {gai, 0};
      if (!r.retry_unresolved) return -1;
    } else {
      for (addrinfo* ai = res.get(); ai != nullptr; ai = ai->ai_next) {
        int err = 0;
        const int fd = ConnectOnce(ai, deadline, &err);
        if (fd >= 0) return fd;
        *last = {0, err};
      }
    }
    const auto now = Clock::now();
    if (now >= deadline) return -1;
    std::this_thread::sleep_for(std::min<Clock::duration>(backoff, deadline - now));
    backoff = std::min(backoff * 2, r.max_backoff);
  }
}

void SetNoDelay(int fd) {
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

bool SetNonBlocking(int fd, bool on) {
  const int fl = ::fcntl(fd, F_GETFL);
  if (fl < 0) return false;
  return ::fcntl(fd, F_SETFL, on ? (fl | O_NONBLOCK) : (fl & ~O_NONBLOCK)) == 0;
}

std::string PeerName(int fd) {
  sockaddr_storage ss{};
  socklen_t len = sizeof(ss);
  if (::getpeername(fd, reinterpret_cast<sockaddr*>(&ss), &len) != 0) return "?";
  char host[NI_MAXHOST], serv[NI_MAXSERV];
  if (::getnameinfo(reinterpret_cast<sockaddr*>(&ss), len, host, sizeof(host), serv, sizeof(serv),
                    NI_NUMERICHOST | NI_NUMERICSERV) != 0)
    return "?";
  return fmt::format("{}:{}", host, serv);
}

}  // namespace tessera::net
