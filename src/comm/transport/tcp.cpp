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
#include <new>
#include <vector>

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

// The round-robin dealing both ends share: chunk k of the byte stream (bytes [k*chunk, (k+1)*chunk))
// travels on stream k % streams. next_[s] is the stream offset of stream s's next byte (sent, or
// arrived); pos_ is the end's own position in the byte stream (the first byte not yet sent, or not yet
// handed out).
class DealtStreams {
 protected:
  DealtStreams(std::shared_ptr<TcpConnections> c, size_t chunk)
      : c_(std::move(c)), chunk_(chunk), streams_(c_->fds.size()), next_(streams_) {
    for (size_t s = 0; s < streams_; ++s) next_[s] = s * chunk_;
  }
  uint64_t ChunkEnd(uint64_t g) const { return (g / chunk_ + 1) * chunk_; }
  size_t StreamOf(uint64_t g) const { return static_cast<size_t>((g / chunk_) % streams_); }
  size_t Holder() const { return StreamOf(pos_); }  // the stream of pos_
  void Advance(size_t s, size_t n) {                // n bytes of stream s went (never past the end of its chunk)
    next_[s] += n;
    if (next_[s] % chunk_ == 0) next_[s] += (streams_ - 1) * chunk_;  // its next chunk
  }

  std::shared_ptr<TcpConnections> c_;
  size_t chunk_;
  size_t streams_;
  std::vector<uint64_t> next_;
  uint64_t pos_ = 0;
};

// Sends the round-robin byte stream (chunk k on stream k % streams, as TcpReceiver reads it) on whichever
// stream has room. next_[s] is the stream offset of stream s's next byte; pos_, the first byte not yet
// sent, is the least of them. TrySend(src, bytes) is handed bytes [pos_, pos_ + bytes): a stream whose
// socket is full does not hold up the others, which send their chunks of that range ahead, up to
// streams * chunk bytes past pos_ (the receiver's read-ahead window); the call returns how far pos_ moved.
// Bytes sent ahead are the same bytes the next call is handed again (the engine passes the stream in
// order), so they are skipped then.
class TcpSender final : public SendChannel, private DealtStreams {
 public:
  TcpSender(std::shared_ptr<TcpConnections> c, size_t chunk) : DealtStreams(std::move(c), chunk) {}
  Result<size_t> TrySend(const void* src, size_t bytes) override {
    const auto* base = static_cast<const std::byte*>(src);
    const uint64_t end = pos_ + std::min<uint64_t>(bytes, streams_ * chunk_);
    // The holder of pos_ first, then the others in stream order.
    const size_t first = Holder();
    for (size_t i = 0; i < streams_; ++i) {
      const size_t st = (first + i) % streams_;
      while (next_[st] < end) {
        const uint64_t g = next_[st];
        const size_t n = static_cast<size_t>(std::min<uint64_t>(ChunkEnd(g), end) - g);
        ssize_t r = ::send(c_->fds[st], base + (g - pos_), n, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (r < 0) {
          if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) break;
          return RemoteError(fmt::format("tcp send failed: {} (the peer closed its connection)", std::strerror(errno)));
        }
        Advance(st, static_cast<size_t>(r));
        if (static_cast<size_t>(r) < n) break;  // its socket is full
      }
    }
    const uint64_t before = pos_;
    pos_ = *std::min_element(next_.begin(), next_.end());
    return static_cast<size_t>(pos_ - before);
  }
  const char* transport() const override { return "tcp"; }
  // Beyond the engine's step: the streams after a full one can only send ahead within what they are handed.
  size_t Lookahead() const override { return streams_ * chunk_; }
  int WaitFd() const override { return c_->fds[Holder()]; }  // the stream that holds pos_ up
};

// Receives the round-robin byte stream from whichever stream has data, not one stream at a time.
//
// Chunk k of the byte stream (bytes [k*chunk, (k+1)*chunk)) travels on stream k % streams, so each
// stream knows where its next bytes belong: next_[s]. pos_ is the stream offset of the next byte handed
// out. Bytes read ahead of pos_ wait in a window of window_ bytes, the byte at stream offset g at
// win_[g % window_] (window_ a multiple of kChannelAlign, so a message, which starts at a multiple of
// kChannelAlign on the stream, is handed out aligned, also after RecvInto took an odd number of bytes).
// A stream may read ahead as long as its bytes fall in [pos_, pos_ + window_): with window_ = streams *
// chunk (at most kMaxWindow, at least one chunk), every other stream can take its next chunk while the
// stream that holds pos_ is late.
// Peek reads every stream that poll() says is ready (one poll for all of them, timeout 0) into the window
// and hands out the contiguous bytes at pos_. RecvInto copies what the window holds at pos_ first, then
// reads the stream that holds pos_ straight into the destination (no extra copy while that stream keeps
// up), and only when that stream has nothing reads the other ready streams ahead, so a late stream does
// not leave the others' data in the kernel (their windows closing) while the receiver waits.
// A stream that ended (EOF or an error) is no longer read; the error is returned when the bytes at pos_
// are needed from it, after everything read before it was handed out (as before).
class TcpReceiver final : public RecvChannel, private DealtStreams {
 public:
  TcpReceiver(std::shared_ptr<TcpConnections> c, size_t chunk)
      : DealtStreams(std::move(c), chunk),
        window_(PadToChannel(std::max(chunk, std::min(chunk * streams_, kMaxWindow)))),
        ended_(streams_, 0) {}
  Result<std::pair<const std::byte*, size_t>> Peek() override {
    TSR_RETURN_IF_ERROR(ReadReady());
    const uint64_t end = ReadyEnd();
    if (end == pos_) {
      TSR_RETURN_IF_ERROR(EndedError(Holder()));
      return std::pair<const std::byte*, size_t>(nullptr, 0);
    }
    const size_t at = pos_ % window_;
    return std::pair<const std::byte*, size_t>(win_.get() + at, std::min<uint64_t>(end - pos_, window_ - at));
  }
  void Consume(size_t bytes) override { pos_ += bytes; }
  const char* transport() const override { return "tcp"; }
  bool direct() const override { return true; }
  Result<size_t> RecvInto(void* dst, size_t bytes) override {
    if (bytes == 0) return size_t{0};
    const uint64_t end = ReadyEnd();
    if (end > pos_) {  // what was read ahead comes first
      const size_t at = pos_ % window_;
      const size_t n = std::min<uint64_t>({bytes, end - pos_, window_ - at});
      std::memcpy(dst, win_.get() + at, n);
      pos_ += n;
      return n;
    }
    const size_t s = Holder();  // nothing read ahead at pos_, so next_[s] == pos_
    TSR_RETURN_IF_ERROR(EndedError(s));
    const ssize_t r = ::recv(c_->fds[s], dst, std::min<uint64_t>(bytes, ChunkEnd(pos_) - pos_), MSG_DONTWAIT);
    if (r > 0) {
      pos_ += static_cast<uint64_t>(r);
      Advance(s, static_cast<size_t>(r));
      return static_cast<size_t>(r);
    }
    if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
      TSR_RETURN_IF_ERROR(ReadReady());  // the stream it needs is late: read ahead on the others
      return size_t{0};
    }
    ended_[s] = r == 0 ? kClosed : errno;
    return EndedError(s);
  }
  // With bytes at pos_ already read the engine is waiting on something else: no fd to sleep on then.
  // Otherwise the stream that holds pos_ (the others can only run ahead).
  int WaitFd() const override { return ReadyEnd() > pos_ ? -1 : c_->fds[Holder()]; }

 private:
  static constexpr size_t kMaxWindow = 8 << 20;
  static constexpr int kClosed = -1;  // ended_[s]: 0 open, kClosed at EOF, else the errno of a failed recv

  // The end of the contiguous bytes from pos_ on that are in the window.
  uint64_t ReadyEnd() const {
    uint64_t g = pos_;
    for (;;) {
      const uint64_t n = next_[StreamOf(g)];
      if (n <= g) return g;  // the byte at g has not arrived
      const uint64_t e = ChunkEnd(g);
      if (n < e) return n;  // partway through g's chunk
      g = e;
    }
  }
  Status EndedError(size_t s) const {
    if (ended_[s] == 0) return Status::Ok();
    if (ended_[s] == kClosed) return RemoteError("tcp connection closed by the peer (did the peer rank exit?)");
    return RemoteError(fmt::format("tcp receive failed: {}", std::strerror(ended_[s])));
  }
  // One recv on stream s into the window, as far as its chunk and the window allow; records its end.
  void ReadAhead(size_t s) {
    const uint64_t g = next_[s];
    const size_t at = g % window_;
    const size_t want = std::min<uint64_t>({ChunkEnd(g) - g, pos_ + window_ - g, window_ - at});
    if (!win_) win_.reset(new (std::align_val_t{kChannelAlign}) std::byte[window_]);
    const ssize_t r = ::recv(c_->fds[s], win_.get() + at, want, MSG_DONTWAIT);
    if (r > 0) {
      Advance(s, static_cast<size_t>(r));
    } else if (r == 0) {
      ended_[s] = kClosed;
    } else if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
      ended_[s] = errno;
    }
  }
  // Reads ahead every open stream with room in the window that has data now: one poll() for them all
  // (none when only one stream could read), without blocking.
  Status ReadReady() {
    pfds_.clear();
    ids_.clear();
    for (size_t s = 0; s < streams_; ++s) {
      if (ended_[s] != 0 || next_[s] >= pos_ + window_) continue;
      pfds_.push_back({c_->fds[s], POLLIN, 0});
      ids_.push_back(s);
    }
    if (ids_.size() == 1) {
      ReadAhead(ids_[0]);
      return Status::Ok();
    }
    if (ids_.empty()) return Status::Ok();
    const int n = ::poll(pfds_.data(), pfds_.size(), 0);
    if (n < 0 && errno != EINTR) return ErrnoError("poll on the tcp streams", errno);
    for (size_t i = 0; i < ids_.size() && n > 0; ++i)
      if (pfds_[i].revents != 0) ReadAhead(ids_[i]);
    return Status::Ok();
  }

  size_t window_;
  struct AlignedDelete {
    void operator()(std::byte* p) const { ::operator delete[](p, std::align_val_t{kChannelAlign}); }
  };
  std::unique_ptr<std::byte[], AlignedDelete> win_;  // allocated on the first read ahead, kChannelAlign-aligned
  std::vector<int> ended_;
  std::vector<pollfd> pfds_;
  std::vector<size_t> ids_;
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
