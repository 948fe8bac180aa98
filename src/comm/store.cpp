// comm/store: the TCP rendezvous key-value store (server and client) declared in comm/store.hpp.
//
// Wire protocol: every message is a frame `u32 length (big-endian) | payload`. The first frame a client
// sends is the handshake `u32 magic | str token`; the server answers `u8 kOk`, `u8 kRefused` (a wrong
// token) or `u8 kBusy | str why` (TESSERA_STORE_MAX_CONNS reached), and closes on anything but kOk.
// Afterwards each request frame `u8 op | fields` gets exactly one reply frame `u8 reply | fields`.
// Strings are `u32 length | bytes`; integers are big-endian. Frames are at most StoreLimits::kMaxFrame
// bytes and read into memory as they arrive. The accept thread reads every handshake without blocking
// (no thread for a connection until it has authenticated); then the server runs one thread per connection;
// blocking requests (Get, Wait, Barrier) carry their timeout and the server answers kTimeout when it runs
// out, so that the client can name what was missing. The client bounds every read by that timeout plus a
// margin, and a connection that saw an I/O error or a late answer is closed for good (RemoteError).
#include "comm/store.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <list>
#include <mutex>
#include <thread>
#include <unordered_map>

#include "common/env.hpp"
#include "common/log.hpp"

namespace tessera::comm {

std::string FormatDuration(std::chrono::milliseconds d) {
  const int64_t ms = d.count();
  if (ms % 1000 == 0) return fmt::format("{}s", ms / 1000);
  return fmt::format("{}ms", ms);
}

namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

constexpr uint32_t kMagic = 0x54535231;                 // "TSR1"
constexpr uint32_t kMaxHandshake = 4096;                // magic + token
constexpr uint32_t kMaxFrame = StoreLimits::kMaxFrame;  // see StoreLimits
constexpr milliseconds kClientWriteTimeout{60000};      // a client that stops reading its replies is dropped
constexpr size_t kFrameGrowth = 64 << 10;               // a frame's buffer grows as its bytes arrive
constexpr milliseconds kReplyMargin{5000};              // how late the server's answer to a wait may be
constexpr milliseconds kWaitSlice{100};                 // how often a waiting server thread checks its client

enum class Op : uint8_t { kSet = 1, kGet = 2, kAdd = 3, kWait = 4, kBarrier = 5 };
enum class Reply : uint8_t { kOk = 0, kTimeout = 1, kError = 2, kRefused = 3, kBusy = 4 };

// ---- encoding ----------------------------------------------------------------------------------------

class Writer {
 public:
  Writer() { buf_.resize(4); }  // room for the frame length
  Writer& U8(uint8_t v) {
    buf_.push_back(static_cast<char>(v));
    return *this;
  }
  Writer& U32(uint32_t v) {
    for (int i = 3; i >= 0; --i) buf_.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
    return *this;
  }
  Writer& I64(int64_t v) {
    const auto u = static_cast<uint64_t>(v);
    for (int i = 7; i >= 0; --i) buf_.push_back(static_cast<char>((u >> (8 * i)) & 0xff));
    return *this;
  }
  Writer& Str(const std::string& s) {
    U32(static_cast<uint32_t>(s.size()));
    buf_.append(s);
    return *this;
  }
  // The finished frame, length prefix filled in.
  const std::string& Frame() {
    const auto n = static_cast<uint32_t>(buf_.size() - 4);
    for (int i = 0; i < 4; ++i) buf_[i] = static_cast<char>((n >> (8 * (3 - i))) & 0xff);
    return buf_;
  }

 private:
  std::string buf_;
};

class Reader {
 public:
  explicit Reader(const std::string& s) : s_(s) {}
  bool ok() const { return ok_; }
  bool AtEnd() const { return pos_ == s_.size(); }
  uint8_t U8() {
    if (!Need(1)) return 0;
    return static_cast<uint8_t>(s_[pos_++]);
  }
  uint32_t U32() {
    if (!Need(4)) return 0;
    uint32_t v = 0;
    for (int i = 0; i < 4; ++i) v = (v << 8) | static_cast<uint8_t>(s_[pos_++]);
    return v;
  }
  int64_t I64() {
    if (!Need(8)) return 0;
    uint64_t v = 0;
    for (int i = 0; i < 8; ++i) v = (v << 8) | static_cast<uint8_t>(s_[pos_++]);
    return static_cast<int64_t>(v);
  }
  std::string Str() {
    const uint32_t n = U32();
    if (!Need(n)) return {};
    std::string v = s_.substr(pos_, n);
    pos_ += n;
    return v;
  }

 private:
  bool Need(size_t n) {
    if (!ok_ || s_.size() - pos_ < n) ok_ = false;
    return ok_;
  }
  const std::string& s_;
  size_t pos_ = 0;
  bool ok_ = true;
};

// ---- socket I/O with deadlines -----------------------------------------------------------------------

enum class Io { kOk, kClosed, kTimeout, kWoken, kError };

// now + d, saturating: huge timeouts mean "no deadline" rather than an overflow.
Clock::time_point DeadlineAfter(std::chrono::milliseconds d) {
  if (d >= std::chrono::hours(24 * 365 * 100)) return Clock::time_point::max();
  return Clock::now() + std::max(d, std::chrono::milliseconds::zero());
}

int PollMs(Clock::time_point deadline) {
  if (deadline == Clock::time_point::max()) return -1;
  const auto left = std::chrono::duration_cast<milliseconds>(deadline - Clock::now()).count();
  return static_cast<int>(std::clamp<int64_t>(left + 1, 0, 1 << 30));
}

// Waits until `fd` is ready for `events`, the deadline passes, or `wake_fd` (if >= 0) becomes readable.
Io WaitFd(int fd, short events, Clock::time_point deadline, int wake_fd, int* err) {
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

Io ReadFull(int fd, char* buf, size_t n, Clock::time_point deadline, int wake_fd, int* err) {
  size_t got = 0;
  while (got < n) {
    const ssize_t r = ::recv(fd, buf + got, n - got, MSG_DONTWAIT);
    if (r > 0) {
      got += static_cast<size_t>(r);
      continue;
    }
    if (r == 0) return Io::kClosed;
    if (errno == EINTR) continue;
    if (errno == ECONNRESET || errno == EPIPE) return Io::kClosed;
    if (errno != EAGAIN && errno != EWOULDBLOCK) {
      *err = errno;
      return Io::kError;
    }
    const Io w = WaitFd(fd, POLLIN, deadline, wake_fd, err);
    if (w != Io::kOk) return w;
  }
  return Io::kOk;
}

Io WriteFull(int fd, const std::string& data, Clock::time_point deadline, int wake_fd, int* err) {
  size_t sent = 0;
  while (sent < data.size()) {
    const ssize_t r = ::send(fd, data.data() + sent, data.size() - sent, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (r > 0) {
      sent += static_cast<size_t>(r);
      continue;
    }
    if (r < 0 && errno == EINTR) continue;
    if (r < 0 && (errno == ECONNRESET || errno == EPIPE)) return Io::kClosed;
    if (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK) {
      *err = errno;
      return Io::kError;
    }
    const Io w = WaitFd(fd, POLLOUT, deadline, wake_fd, err);
    if (w != Io::kOk) return w;
  }
  return Io::kOk;
}

// Reads one frame of at most `max` bytes into *payload, allocating only as its bytes arrive. kError with
// *err == EMSGSIZE for an oversize frame (its announced length in *announced when given).
Io ReadFrame(int fd, std::string* payload, uint32_t max, Clock::time_point deadline, int wake_fd, int* err,
             uint32_t* announced = nullptr) {
  char hdr[4];
  Io r = ReadFull(fd, hdr, 4, deadline, wake_fd, err);
  if (r != Io::kOk) return r;
  uint32_t n = 0;
  for (char c : hdr) n = (n << 8) | static_cast<uint8_t>(c);
  if (announced != nullptr) *announced = n;
  if (n > max) {
    *err = EMSGSIZE;
    return Io::kError;
  }
  payload->clear();
  while (payload->size() < n) {
    const size_t at = payload->size();
    payload->resize(at + std::min<size_t>(n - at, kFrameGrowth));
    r = ReadFull(fd, payload->data() + at, payload->size() - at, deadline, wake_fd, err);
    if (r != Io::kOk) return r;
  }
  return Io::kOk;
}

void SetNoDelay(int fd) {
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
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

// Splits "host:port" / "[v6]:port".
Result<std::pair<std::string, std::string>> SplitAddress(const std::string& address) {
  auto bad = [&] {
    return InvalidArgument(fmt::format("TESSERA_STORE='{}' is not HOST:PORT (e.g. 127.0.0.1:29500)", address));
  };
  const size_t colon = address.rfind(':');
  if (colon == std::string::npos || colon == 0) return bad();
  std::string host = address.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  auto port = env::ParseInt("port", address.substr(colon + 1), 1, 65535);
  if (!port.ok() || host.empty()) return bad();
  return std::make_pair(host, std::to_string(*port));
}

std::string QuoteList(const std::vector<std::string>& keys, size_t max_shown) {
  std::string out;
  for (size_t i = 0; i < keys.size() && i < max_shown; ++i) out += fmt::format("{}'{}'", i ? ", " : "", keys[i]);
  if (keys.size() > max_shown) out += fmt::format(" and {} more", keys.size() - max_shown);
  return out;
}

// ---- server ------------------------------------------------------------------------------------------

class TcpStoreServer final : public StoreServer {
 public:
  TcpStoreServer(int listen_fd, int wake_read, int wake_write, int port, std::string token, StoreLimits limits)
      : listen_fd_(listen_fd),
        wake_read_(wake_read),
        wake_write_(wake_write),
        port_(port),
        token_(std::move(token)),
        limits_(limits) {
    accept_thread_ = std::thread([this] { AcceptLoop(); });
  }

  ~TcpStoreServer() override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stopping_ = true;
    }
    cv_.notify_all();
    char c = 'x';
    while (::write(wake_write_, &c, 1) < 0 && errno == EINTR) {
    }
    accept_thread_.join();
    // The accept thread is gone, so conns_ no longer grows.
    for (auto& conn : conns_) conn->thread.join();
    conns_.clear();
    ::close(listen_fd_);
    ::close(wake_read_);
    ::close(wake_write_);
  }

  int port() const override { return port_; }

 private:
  struct Conn {
    int fd = -1;
    std::thread thread;
    std::atomic<bool> done{false};
  };

  // A connection that has not authenticated yet: the accept thread reads its handshake without blocking.
  struct Pending {
    int fd = -1;
    Clock::time_point deadline;
    std::string buf;  // bytes of the handshake frame so far (length prefix included)
    std::string peer;
  };

  struct Barrier {
    int64_t arrived = 0;
    int world_size = 0;
  };

  void AcceptLoop() {
    std::vector<pollfd> pfds;
    for (;;) {
      pfds.assign({{listen_fd_, POLLIN, 0}, {wake_read_, POLLIN, 0}});
      Clock::time_point next = Clock::time_point::max();
      for (const Pending& p : pending_) {
        pfds.push_back({p.fd, POLLIN, 0});
        next = std::min(next, p.deadline);
      }
      const int n = ::poll(pfds.data(), pfds.size(), PollMs(next));
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

  void AcceptNew() {
    ReapFinished();
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
      SetNoDelay(fd);
      if (static_cast<int>(pending_.size()) >= StoreLimits::kMaxPending) {
        // Many connections that do not authenticate: drop the oldest, which is the likeliest stray.
        TSR_LOG_WARN(
            "store: dropped a connection from {} that had not authenticated: {} connections are "
            "waiting to authenticate (the limit)",
            pending_.front().peer, StoreLimits::kMaxPending);
        ::close(pending_.front().fd);
        pending_.erase(pending_.begin());
      }
      pending_.push_back({fd, DeadlineAfter(limits_.handshake_timeout), {}, PeerName(fd)});
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
      (void)WriteFull(p.fd, w.Frame(), Clock::now() + milliseconds(1000), wake_read_, &err);
      ::close(p.fd);
      return false;
    }
    ReapFinished();
    if (static_cast<int>(conns_.size()) >= limits_.max_connections) {
      const std::string why =
          fmt::format("{} connections are open, the limit (TESSERA_STORE_MAX_CONNS)", limits_.max_connections);
      TSR_LOG_WARN("store: refused a connection from {}: {}", p.peer, why);
      Writer w;
      w.U8(static_cast<uint8_t>(Reply::kBusy)).Str(why);
      (void)WriteFull(p.fd, w.Frame(), Clock::now() + milliseconds(1000), wake_read_, &err);
      ::close(p.fd);
      return false;
    }
    auto conn = std::make_unique<Conn>();
    conn->fd = p.fd;
    Conn* raw = conn.get();
    conns_.push_back(std::move(conn));
    raw->thread = std::thread([this, raw] {
      Serve(raw->fd);
      ::close(raw->fd);
      raw->done.store(true, std::memory_order_release);
    });
    p.fd = -1;
    return false;
  }

  static uint32_t FrameLen(const std::string& b) {
    uint32_t n = 0;
    for (int i = 0; i < 4; ++i) n = (n << 8) | static_cast<uint8_t>(b[i]);
    return n;
  }

  // Joins the threads of connections that have ended (called from the accept thread only).
  void ReapFinished() {
    for (auto it = conns_.begin(); it != conns_.end();) {
      if ((*it)->done.load(std::memory_order_acquire)) {
        (*it)->thread.join();
        it = conns_.erase(it);
      } else {
        ++it;
      }
    }
  }

  // An authenticated connection: acknowledge, then answer requests until it ends.
  void Serve(int fd) {
    int err = 0;
    std::string msg;
    {
      Writer w;
      w.U8(static_cast<uint8_t>(Reply::kOk));
      if (WriteFull(fd, w.Frame(), Clock::now() + kClientWriteTimeout, wake_read_, &err) != Io::kOk) return;
    }
    for (;;) {
      uint32_t announced = 0;
      const Io r = ReadFrame(fd, &msg, kMaxFrame, Clock::time_point::max(), wake_read_, &err, &announced);
      if (r != Io::kOk) {
        if (r == Io::kError && err == EMSGSIZE)
          TSR_LOG_WARN(
              "store: dropped {}: it announced a frame of {} bytes, more than the store's limit of {} "
              "bytes",
              PeerName(fd), announced, kMaxFrame);
        else if (r == Io::kError)
          TSR_LOG_WARN("store: dropped {}: {}", PeerName(fd), std::strerror(err));
        return;
      }
      Writer reply;
      if (!Handle(fd, msg, &reply)) return;
      // A client that stops reading is dropped once it has not read for as long as a handshake may take.
      if (WriteFull(fd, reply.Frame(), Clock::now() + kClientWriteTimeout, wake_read_, &err) != Io::kOk) return;
    }
  }

  // True while the client is still there: no bytes (it sends nothing while waiting), no hang-up.
  static bool ClientAlive(int fd) {
    pollfd p{fd, POLLIN | POLLRDHUP, 0};
    return ::poll(&p, 1, 0) == 0;
  }

  // Waits on cv_ until pred() holds; false on timeout, shutdown or a vanished client.
  template <typename Pred>
  bool WaitFor(std::unique_lock<std::mutex>& lock, int fd, Clock::time_point deadline, Pred pred, bool* gone) {
    for (;;) {
      if (stopping_) {
        *gone = true;
        return false;
      }
      if (pred()) return true;
      const auto now = Clock::now();
      if (now >= deadline) return false;
      cv_.wait_until(lock, std::min(deadline, now + kWaitSlice));
      if (!pred() && !ClientAlive(fd)) {
        *gone = true;
        return false;
      }
    }
  }

  static Clock::time_point DeadlineFrom(int64_t timeout_ms) {
    return DeadlineAfter(milliseconds(std::max<int64_t>(timeout_ms, 0)));
  }

  // Handles one request; false drops the connection (malformed request, shutdown, client gone).
  bool Handle(int fd, const std::string& msg, Writer* reply) {
    Reader r(msg);
    const auto op = static_cast<Op>(r.U8());
    bool gone = false;
    switch (op) {
      case Op::kSet: {
        std::string key = r.Str(), value = r.Str();
        if (!r.ok() || !r.AtEnd()) break;
        {
          std::lock_guard<std::mutex> lock(mu_);
          data_[std::move(key)] = std::move(value);
        }
        cv_.notify_all();
        reply->U8(static_cast<uint8_t>(Reply::kOk));
        return true;
      }
      case Op::kGet: {
        const std::string key = r.Str();
        const int64_t timeout_ms = r.I64();
        if (!r.ok() || !r.AtEnd()) break;
        std::unique_lock<std::mutex> lock(mu_);
        if (WaitFor(
                lock, fd, DeadlineFrom(timeout_ms), [&] { return data_.count(key) > 0; }, &gone)) {
          reply->U8(static_cast<uint8_t>(Reply::kOk)).Str(data_[key]);
          return true;
        }
        if (gone) return false;
        reply->U8(static_cast<uint8_t>(Reply::kTimeout));
        return true;
      }
      case Op::kAdd: {
        const std::string key = r.Str();
        const int64_t delta = r.I64();
        if (!r.ok() || !r.AtEnd()) break;
        std::unique_lock<std::mutex> lock(mu_);
        int64_t value = 0;
        auto it = data_.find(key);
        if (it != data_.end()) {
          auto parsed = env::ParseInt(fmt::format("store key '{}'", key), it->second, INT64_MIN, INT64_MAX);
          if (!parsed.ok()) {
            reply->U8(static_cast<uint8_t>(Reply::kError)).Str(parsed.status().message() + " (Add needs one)");
            return true;
          }
          value = *parsed;
        }
        value = static_cast<int64_t>(static_cast<uint64_t>(value) + static_cast<uint64_t>(delta));
        data_[key] = std::to_string(value);
        lock.unlock();
        cv_.notify_all();
        reply->U8(static_cast<uint8_t>(Reply::kOk)).I64(value);
        return true;
      }
      case Op::kWait: {
        const uint32_t n = r.U32();
        if (!r.ok() || n > msg.size()) break;
        std::vector<std::string> keys(n);
        for (auto& k : keys) k = r.Str();
        const int64_t timeout_ms = r.I64();
        if (!r.ok() || !r.AtEnd()) break;
        std::unique_lock<std::mutex> lock(mu_);
        auto all = [&] {
          return std::all_of(keys.begin(), keys.end(), [&](const std::string& k) { return data_.count(k) > 0; });
        };
        if (WaitFor(lock, fd, DeadlineFrom(timeout_ms), all, &gone)) {
          reply->U8(static_cast<uint8_t>(Reply::kOk));
          return true;
        }
        if (gone) return false;
        std::vector<std::string> missing;
        for (const auto& k : keys)
          if (!data_.count(k)) missing.push_back(k);
        reply->U8(static_cast<uint8_t>(Reply::kTimeout)).U32(static_cast<uint32_t>(missing.size()));
        for (const auto& k : missing) reply->Str(k);
        return true;
      }
      case Op::kBarrier: {
        const std::string name = r.Str();
        const int64_t world_size = r.I64();
        const int64_t timeout_ms = r.I64();
        if (!r.ok() || !r.AtEnd() || world_size < 1 || world_size > INT32_MAX) break;
        std::unique_lock<std::mutex> lock(mu_);
        Barrier& b = barriers_[name];  // references into an unordered_map survive rehashing
        if (b.world_size == 0) b.world_size = static_cast<int>(world_size);
        if (b.world_size != world_size) {
          reply->U8(static_cast<uint8_t>(Reply::kError))
              .Str(fmt::format("barrier '{}' was entered with world size {} here but {} by an earlier caller", name,
                               world_size, b.world_size));
          return true;
        }
        ++b.arrived;
        cv_.notify_all();
        if (WaitFor(
                lock, fd, DeadlineFrom(timeout_ms), [&] { return b.arrived >= b.world_size; }, &gone)) {
          reply->U8(static_cast<uint8_t>(Reply::kOk));
          return true;
        }
        if (gone) return false;
        reply->U8(static_cast<uint8_t>(Reply::kTimeout)).I64(b.arrived);
        return true;
      }
    }
    TSR_LOG_WARN("store: dropped {}: malformed request (op {})", PeerName(fd), static_cast<int>(op));
    return false;
  }

  const int listen_fd_, wake_read_, wake_write_, port_;
  const std::string token_;
  const StoreLimits limits_;
  std::thread accept_thread_;
  std::list<std::unique_ptr<Conn>> conns_;  // touched by the accept thread, then by the destructor
  std::vector<Pending> pending_;            // the accept thread's

  std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;
  std::unordered_map<std::string, std::string> data_;
  std::unordered_map<std::string, Barrier> barriers_;
};

// ---- client ------------------------------------------------------------------------------------------

// How long the client waits for the answer to a request that the server bounds by `timeout`.
milliseconds WithMargin(milliseconds timeout) {
  if (timeout > milliseconds::max() - kReplyMargin) return milliseconds::max();
  return std::max(timeout, milliseconds(0)) + kReplyMargin;
}

class TcpStoreClient final : public StoreClient {
 public:
  TcpStoreClient(int fd, std::string address, milliseconds io_timeout)
      : fd_(fd), address_(std::move(address)), io_timeout_(io_timeout) {}
  ~TcpStoreClient() override {
    if (fd_ >= 0) ::close(fd_);
  }

  Status Set(const std::string& key, const std::string& value) override {
    if (key.size() + value.size() + 16 > kMaxFrame)
      return InvalidArgument(fmt::format("setting key '{}': {} bytes are more than the store's limit of {} bytes", key,
                                         key.size() + value.size(), kMaxFrame));
    Writer w;
    w.U8(static_cast<uint8_t>(Op::kSet)).Str(key).Str(value);
    TSR_ASSIGN_OR_RETURN(std::string reply, Call(w, io_timeout_, fmt::format("setting key '{}'", key)));
    return ExpectOk(reply, fmt::format("setting key '{}'", key));
  }

  Result<std::string> Get(const std::string& key, milliseconds timeout) override {
    Writer w;
    w.U8(static_cast<uint8_t>(Op::kGet)).Str(key).I64(timeout.count());
    const std::string what = fmt::format("waiting for key '{}'", key);
    TSR_ASSIGN_OR_RETURN(std::string reply, Call(w, WithMargin(timeout), what));
    Reader r(reply);
    const auto code = static_cast<Reply>(r.U8());
    if (code == Reply::kOk) {
      std::string value = r.Str();
      if (r.ok() && r.AtEnd()) return value;
    } else if (code == Reply::kTimeout) {
      return Timeout(fmt::format("timed out after {} waiting for key '{}' at the store {}", FormatDuration(timeout),
                                 key, address_));
    } else if (code == Reply::kError) {
      return ServerError(r, what);
    }
    return Garbled(what);
  }

  Result<int64_t> Add(const std::string& key, int64_t delta) override {
    Writer w;
    w.U8(static_cast<uint8_t>(Op::kAdd)).Str(key).I64(delta);
    const std::string what = fmt::format("adding to key '{}'", key);
    TSR_ASSIGN_OR_RETURN(std::string reply, Call(w, io_timeout_, what));
    Reader r(reply);
    const auto code = static_cast<Reply>(r.U8());
    if (code == Reply::kOk) {
      const int64_t v = r.I64();
      if (r.ok() && r.AtEnd()) return v;
    } else if (code == Reply::kError) {
      return ServerError(r, what);
    }
    return Garbled(what);
  }

  Status Wait(const std::vector<std::string>& keys, milliseconds timeout) override {
    Writer w;
    w.U8(static_cast<uint8_t>(Op::kWait)).U32(static_cast<uint32_t>(keys.size()));
    for (const auto& k : keys) w.Str(k);
    w.I64(timeout.count());
    const std::string what = fmt::format("waiting for keys {}", QuoteList(keys, 8));
    TSR_ASSIGN_OR_RETURN(std::string reply, Call(w, WithMargin(timeout), what));
    Reader r(reply);
    const auto code = static_cast<Reply>(r.U8());
    if (code == Reply::kOk && r.ok() && r.AtEnd()) return Status::Ok();
    if (code == Reply::kTimeout) {
      const uint32_t n = r.U32();
      std::vector<std::string> missing;
      for (uint32_t i = 0; r.ok() && i < n; ++i) missing.push_back(r.Str());
      if (!r.ok()) return Garbled(what);
      return Timeout(fmt::format("timed out after {} waiting for {} of {} keys at the store {}: missing {}",
                                 FormatDuration(timeout), missing.size(), keys.size(), address_,
                                 QuoteList(missing, 8)));
    }
    if (code == Reply::kError) return ServerError(r, what);
    return Garbled(what);
  }

  Status Barrier(const std::string& name, int world_size, milliseconds timeout) override {
    if (world_size < 1) return InvalidArgument(fmt::format("barrier '{}': world size {} < 1", name, world_size));
    Writer w;
    w.U8(static_cast<uint8_t>(Op::kBarrier)).Str(name).I64(world_size).I64(timeout.count());
    const std::string what = fmt::format("in barrier '{}'", name);
    TSR_ASSIGN_OR_RETURN(std::string reply, Call(w, WithMargin(timeout), what));
    Reader r(reply);
    const auto code = static_cast<Reply>(r.U8());
    if (code == Reply::kOk && r.ok() && r.AtEnd()) return Status::Ok();
    if (code == Reply::kTimeout) {
      const int64_t arrived = r.I64();
      if (!r.ok()) return Garbled(what);
      return Timeout(fmt::format("barrier '{}' timed out after {} at the store {}: {} of {} callers arrived", name,
                                 FormatDuration(timeout), address_, arrived, world_size));
    }
    if (code == Reply::kError) return ServerError(r, what);
    return Garbled(what);
  }

 private:
  // Sends one request and reads its reply within `timeout`. Any failure closes the connection for good,
  // since the request/reply stream can no longer be trusted to be in step.
  Result<std::string> Call(Writer& request, milliseconds timeout, const std::string& what) {
    std::lock_guard<std::mutex> lock(mu_);
    if (fd_ < 0)
      return RemoteError(
          fmt::format("the connection to the store at {} was closed after an earlier error: {}", address_, broken_));
    const auto deadline = DeadlineAfter(timeout);
    int err = 0;
    Io io = WriteFull(fd_, request.Frame(), deadline, -1, &err);
    std::string reply;
    if (io == Io::kOk) io = ReadFrame(fd_, &reply, kMaxFrame, deadline, -1, &err);
    if (io == Io::kOk) return reply;
    Status s;
    switch (io) {
      case Io::kClosed:
        s =
            RemoteError(fmt::format("lost the connection to the store at {} while {}: the store closed it "
                                    "(did the launcher or rank 0 exit?)",
                                    address_, what));
        break;
      case Io::kTimeout:
        s = Timeout(
            fmt::format("the store at {} did not answer within {} while {}", address_, FormatDuration(timeout), what));
        break;
      default:
        s = RemoteError(fmt::format("I/O error with the store at {} while {}: {}", address_, what,
                                    err == EMSGSIZE ? "oversize reply" : std::strerror(err)));
    }
    broken_ = s.message();
    ::close(fd_);
    fd_ = -1;
    return s;
  }

  Status ExpectOk(const std::string& reply, const std::string& what) {
    Reader r(reply);
    const auto code = static_cast<Reply>(r.U8());
    if (code == Reply::kOk && r.ok() && r.AtEnd()) return Status::Ok();
    if (code == Reply::kError) return ServerError(r, what);
    return Garbled(what);
  }
  Status ServerError(Reader& r, const std::string& what) {
    const std::string msg = r.Str();
    if (!r.ok()) return Garbled(what);
    return InvalidArgument(fmt::format("store at {} while {}: {}", address_, what, msg));
  }
  Status Garbled(const std::string& what) {
    return InternalError(fmt::format("garbled reply from the store at {} while {}", address_, what));
  }

  std::mutex mu_;
  int fd_;
  std::string broken_;
  const std::string address_;
  const milliseconds io_timeout_;
};

// One connection attempt to `ai` within `deadline`: the fd, or -1 with *err set.
int TryConnect(const addrinfo* ai, Clock::time_point deadline, int* err) {
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
  const Io w = WaitFd(fd, POLLOUT, deadline, -1, err);
  if (w == Io::kOk) {
    socklen_t len = sizeof(*err);
    if (::getsockopt(fd, SOL_SOCKET, SO_ERROR, err, &len) == 0 && *err == 0) return fd;
  } else if (w == Io::kTimeout) {
    *err = ETIMEDOUT;
  }
  ::close(fd);
  return -1;
}

}  // namespace

namespace {
class PrefixStore final : public StoreClient {
 public:
  PrefixStore(std::unique_ptr<StoreClient> base, std::string prefix)
      : base_(std::move(base)), prefix_(std::move(prefix)) {}
  Status Set(const std::string& key, const std::string& value) override { return base_->Set(prefix_ + key, value); }
  Result<std::string> Get(const std::string& key, milliseconds timeout) override {
    return base_->Get(prefix_ + key, timeout);
  }
  Result<int64_t> Add(const std::string& key, int64_t delta) override { return base_->Add(prefix_ + key, delta); }
  Status Wait(const std::vector<std::string>& keys, milliseconds timeout) override {
    std::vector<std::string> k;
    k.reserve(keys.size());
    for (const auto& key : keys) k.push_back(prefix_ + key);
    return base_->Wait(k, timeout);
  }
  Status Barrier(const std::string& name, int world_size, milliseconds timeout) override {
    return base_->Barrier(prefix_ + name, world_size, timeout);
  }

 private:
  std::unique_ptr<StoreClient> base_;
  const std::string prefix_;
};
}  // namespace

std::unique_ptr<StoreClient> PrefixedStore(std::unique_ptr<StoreClient> base, const std::string& prefix) {
  if (prefix.empty()) return base;
  return std::make_unique<PrefixStore>(std::move(base), prefix);
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

Result<std::unique_ptr<StoreServer>> StoreServer::Start(const std::string& host, int port, const std::string& token) {
  return Start(host, port, token, StoreLimits::FromEnv());
}

Result<std::unique_ptr<StoreServer>> StoreServer::Start(const std::string& host, int port, const std::string& token,
                                                        const StoreLimits& limits) {
  if (token.empty()) return InvalidArgument("the store needs a non-empty job token (TESSERA_TOKEN)");
  if (token.size() > kMaxHandshake - 16)
    return InvalidArgument(fmt::format("the job token is {} bytes long; at most {}", token.size(), kMaxHandshake - 16));
  if (port < 0 || port > 65535) return InvalidArgument(fmt::format("store port {} is out of range [0, 65535]", port));
  const std::string where = fmt::format("{}:{}", host, port);
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* res = nullptr;
  const int gai = ::getaddrinfo(host.empty() ? nullptr : host.c_str(), std::to_string(port).c_str(), &hints, &res);
  if (gai != 0) return InvalidArgument(fmt::format("cannot resolve store address {}: {}", where, gai_strerror(gai)));
  int fd = -1, err = 0;
  for (addrinfo* ai = res; ai != nullptr && fd < 0; ai = ai->ai_next) {
    fd = ::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, ai->ai_protocol);
    if (fd < 0) {
      err = errno;
      continue;
    }
    int one = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (::bind(fd, ai->ai_addr, ai->ai_addrlen) != 0 || ::listen(fd, 1024) != 0) {
      err = errno;
      ::close(fd);
      fd = -1;
    }
  }
  ::freeaddrinfo(res);
  if (fd < 0) return ErrnoError(fmt::format("cannot listen on {} for the store", where), err);
  sockaddr_storage ss{};
  socklen_t len = sizeof(ss);
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len) != 0) {
    err = errno;
    ::close(fd);
    return ErrnoError("getsockname on the store socket", err);
  }
  const int bound = ntohs(ss.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port
                                                   : reinterpret_cast<sockaddr_in*>(&ss)->sin_port);
  int wake[2];
  if (::pipe2(wake, O_CLOEXEC | O_NONBLOCK) != 0) {
    err = errno;
    ::close(fd);
    return ErrnoError("pipe for the store", err);
  }
  TSR_LOG_DEBUG("store: listening on {}:{}", host, bound);
  return std::unique_ptr<StoreServer>(new TcpStoreServer(fd, wake[0], wake[1], bound, token, limits));
}

Result<std::unique_ptr<StoreClient>> StoreClient::Connect(const std::string& address, const std::string& token,
                                                          milliseconds timeout) {
  TSR_ASSIGN_OR_RETURN(auto hp, SplitAddress(address));
  if (token.empty()) return InvalidArgument("TESSERA_TOKEN is empty: the store needs the job token");
  if (token.size() > kMaxHandshake - 16)
    return InvalidArgument(fmt::format("TESSERA_TOKEN is {} bytes long; at most {}", token.size(), kMaxHandshake - 16));
  const auto start = Clock::now();
  const auto deadline = DeadlineAfter(timeout);
  std::string last_error = "no attempt made";
  milliseconds backoff{10};
  int fd = -1;
  for (;;) {
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_NUMERICSERV;
    addrinfo* res = nullptr;
    const int gai = ::getaddrinfo(hp.first.c_str(), hp.second.c_str(), &hints, &res);
    if (gai != 0) {
      last_error = gai_strerror(gai);
    } else {
      for (addrinfo* ai = res; ai != nullptr && fd < 0; ai = ai->ai_next) {
        int err = 0;
        fd = TryConnect(ai, deadline, &err);
        if (fd < 0) last_error = std::strerror(err);
      }
      ::freeaddrinfo(res);
    }
    if (fd >= 0) break;
    const auto now = Clock::now();
    if (now >= deadline)
      return Timeout(fmt::format("cannot reach the store at TESSERA_STORE='{}' within {}: {}", address,
                                 FormatDuration(timeout), last_error));
    std::this_thread::sleep_for(std::min<Clock::duration>(backoff, deadline - now));
    backoff = std::min(backoff * 2, milliseconds(500));
  }
  SetNoDelay(fd);
  // The handshake gets at least a few seconds even when connecting used up most of the timeout.
  const auto hs_deadline = std::max(deadline, Clock::now() + milliseconds(5000));
  Writer hello;
  hello.U32(kMagic).Str(token);
  int err = 0;
  std::string reply;
  Io io = WriteFull(fd, hello.Frame(), hs_deadline, -1, &err);
  if (io == Io::kOk) io = ReadFrame(fd, &reply, kMaxHandshake, hs_deadline, -1, &err);
  if (io != Io::kOk) {
    ::close(fd);
    if (io == Io::kTimeout)
      return Timeout(fmt::format("the store at {} did not answer the handshake within {}", address,
                                 FormatDuration(std::chrono::duration_cast<milliseconds>(hs_deadline - start))));
    return RemoteError(
        fmt::format("the store at {} closed the connection during the handshake ({}); is it a "
                    "Tessera store of this job?",
                    address, io == Io::kClosed ? "connection closed" : std::strerror(err)));
  }
  Reader r(reply);
  const auto code = static_cast<Reply>(r.U8());
  if (r.ok() && code == Reply::kBusy) {
    const std::string why = r.Str();
    ::close(fd);
    return RemoteError(fmt::format("store at {} refused the connection: {}", address, r.ok() ? why : "busy"));
  }
  if (!r.ok() || !r.AtEnd() || (code != Reply::kOk && code != Reply::kRefused)) {
    ::close(fd);
    return RemoteError(fmt::format("garbled handshake reply from {}; is it a Tessera store?", address));
  }
  if (code == Reply::kRefused) {
    ::close(fd);
    return InvalidArgument(
        fmt::format("store at {} refused the job token: TESSERA_TOKEN differs from the launcher's", address));
  }
  // Requests without a timeout of their own (Set, Add) are bounded by the connect timeout, at least 30 s.
  return std::unique_ptr<StoreClient>(new TcpStoreClient(fd, address, std::max(timeout, milliseconds(30000))));
}

}  // namespace tessera::comm
