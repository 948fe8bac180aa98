// comm/store/server: the rendezvous store's server (StoreServer, declared in store.hpp).
//
// Wire protocol (wire.hpp): every message is a frame `u32 length (big-endian) | payload`. The
// first frame a client sends is the handshake `u32 magic | str token`; the server answers `u8 kOk`,
// `u8 kRefused` (a wrong token) or `u8 kBusy | str why` (TESSERA_STORE_MAX_CONNS reached), and closes on
// anything but kOk. Afterwards each request frame `u8 op | fields` gets exactly one reply frame
// `u8 reply | fields`. Strings are `u32 length | bytes`; integers are big-endian. Frames are at most
// StoreLimits::kMaxFrame bytes and read into memory as they arrive. The accept thread reads every
// handshake without blocking (comm/store/gate: no thread for a connection until it has authenticated);
// then the server runs one thread per connection; blocking requests (Get, Wait, Barrier) carry their
// timeout and the server answers kTimeout when it runs out, so that the client (comm/store/client) can
// name what was missing; a kTimeout reply ends with `str note`, empty unless the store has refused connections
// for a wrong job token (how many, and the last one's address: the rank waited for may be that one).
#include <fcntl.h>
#include <fmt/format.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <list>
#include <memory>
#include <mutex>
#include <thread>
#include <unordered_map>

#include "comm/store/gate.hpp"
#include "comm/store/store.hpp"
#include "comm/store/wire.hpp"
#include "common/env.hpp"
#include "common/log.hpp"
#include "common/net.hpp"

namespace tessera::comm {
namespace {

using namespace store_wire;

class TcpStoreServer final : public StoreServer {
 public:
  TcpStoreServer(int listen_fd, int wake_read, int wake_write, int port, std::string token, StoreLimits limits)
      : listen_fd_(listen_fd),
        wake_read_(wake_read),
        wake_write_(wake_write),
        port_(port),
        token_(std::move(token)),
        limits_(limits) {
    gate_hooks_.open_connections = [this] {
      ReapFinished();
      return static_cast<int>(conns_.size());
    };
    gate_hooks_.admit = [this](int fd) { Admit(fd); };
    gate_hooks_.refused = [this](const std::string& peer) {
      std::lock_guard<std::mutex> lock(mu_);
      ++refused_;
      last_refused_ = peer;
    };
    accept_thread_ = std::thread([this] { RunStoreGate(listen_fd_, wake_read_, token_, limits_, gate_hooks_); });
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

  struct Barrier {
    int64_t arrived = 0;
    int world_size = 0;
  };

  // An authenticated connection (from the gate, in the accept thread): a thread of its own serves it.
  void Admit(int fd) {
    auto conn = std::make_unique<Conn>();
    conn->fd = fd;
    Conn* raw = conn.get();
    conns_.push_back(std::move(conn));
    raw->thread = std::thread([this, raw] {
      Serve(raw->fd);
      ::close(raw->fd);
      raw->done.store(true, std::memory_order_release);
    });
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
      if (WriteFrame(fd, w.Frame(), Clock::now() + kClientWriteTimeout, wake_read_, &err) != Io::kOk) return;
    }
    for (;;) {
      uint32_t announced = 0;
      const Io r = ReadFrame(fd, &msg, kMaxFrame, Clock::time_point::max(), wake_read_, &err, &announced);
      if (r != Io::kOk) {
        if (r == Io::kError && err == EMSGSIZE)
          TSR_LOG_WARN(
              "store: dropped {}: it announced a frame of {} bytes, more than the store's limit of {} "
              "bytes",
              net::PeerName(fd), announced, kMaxFrame);
        else if (r == Io::kError)
          TSR_LOG_WARN("store: dropped {}: {}", net::PeerName(fd), std::strerror(err));
        return;
      }
      Writer reply;
      if (!Handle(fd, msg, &reply)) return;
      // A client that stops reading is dropped once it has not read for as long as a handshake may take.
      if (WriteFrame(fd, reply.Frame(), Clock::now() + kClientWriteTimeout, wake_read_, &err) != Io::kOk) return;
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
    return net::DeadlineAfter(milliseconds(std::max<int64_t>(timeout_ms, 0)));
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
        reply->U8(static_cast<uint8_t>(Reply::kTimeout)).Str(RefusedNote());
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
        reply->Str(RefusedNote());
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
        reply->U8(static_cast<uint8_t>(Reply::kTimeout)).I64(b.arrived).Str(RefusedNote());
        return true;
      }
    }
    TSR_LOG_WARN("store: dropped {}: malformed request (op {})", net::PeerName(fd), static_cast<int>(op));
    return false;
  }

  const int listen_fd_, wake_read_, wake_write_, port_;
  const std::string token_;
  const StoreLimits limits_;
  std::thread accept_thread_;
  std::list<std::unique_ptr<Conn>> conns_;  // touched by the accept thread, then by the destructor
  StoreGateHooks gate_hooks_;               // the accept thread's view of conns_

  std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;
  std::unordered_map<std::string, std::string> data_;
  std::unordered_map<std::string, Barrier> barriers_;
  int64_t refused_ = 0;  // connections refused for a wrong job token, and the last one's address
  std::string last_refused_;

  // What a caller that timed out should know: a rank that may be the one it waited for was turned away for its
  // token. Empty when none was. Called with mu_ held.
  std::string RefusedNote() const {
    if (refused_ == 0) return "";
    return fmt::format(
        "the store refused {} connection{} with another job token (the last from {}): a rank started "
        "with a different TESSERA_TOKEN cannot join",
        refused_, refused_ == 1 ? "" : "s", last_refused_);
  }
};

}  // namespace

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
  int bound = 0, err = 0;
  net::SocketError e;
  const int fd = net::Listen(host, port, AF_UNSPEC, &bound, &e);
  if (fd < 0 && e.gai != 0)
    return InvalidArgument(fmt::format("cannot resolve store address {}: {}", where, e.Describe()));
  if (fd < 0) return ErrnoError(fmt::format("cannot listen on {} for the store", where), e.err);
  int wake[2];
  if (::pipe2(wake, O_CLOEXEC | O_NONBLOCK) != 0) {
    err = errno;
    ::close(fd);
    return ErrnoError("pipe for the store", err);
  }
  TSR_LOG_DEBUG("store: listening on {}:{}", host, bound);
  return std::unique_ptr<StoreServer>(new TcpStoreServer(fd, wake[0], wake[1], bound, token, limits));
}

}  // namespace tessera::comm
