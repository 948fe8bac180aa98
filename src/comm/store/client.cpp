// comm/store/client: the rendezvous store's client (StoreClient::Connect, PrefixedStore; declared in
// store.hpp). It speaks the protocol of server.cpp (frames of wire.hpp): one
// request, one reply, under a mutex, so one client may be used from several threads. The client bounds
// every read by the request's own timeout plus a margin, and a connection that saw an I/O error or a late
// answer is closed for good (RemoteError), since requests and replies may no longer be in step.
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "comm/store/store.hpp"
#include "comm/store/wire.hpp"
#include "common/net.hpp"

namespace tessera::comm {

std::string FormatDuration(std::chrono::milliseconds d) {
  const int64_t ms = d.count();
  if (ms % 1000 == 0) return fmt::format("{}s", ms / 1000);
  return fmt::format("{}ms", ms);
}

namespace {

using namespace store_wire;

std::string QuoteList(const std::vector<std::string>& keys, size_t max_shown) {
  std::string out;
  for (size_t i = 0; i < keys.size() && i < max_shown; ++i) out += fmt::format("{}'{}'", i ? ", " : "", keys[i]);
  if (keys.size() > max_shown) out += fmt::format(" and {} more", keys.size() - max_shown);
  return out;
}

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
      return Timeout(fmt::format("timed out after {} waiting for key '{}' at the store {}{}", FormatDuration(timeout),
                                 key, address_, RefusedNote(r)));
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
      return Timeout(fmt::format("timed out after {} waiting for {} of {} keys at the store {}: missing {}{}",
                                 FormatDuration(timeout), missing.size(), keys.size(), address_, QuoteList(missing, 8),
                                 RefusedNote(r)));
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
      return Timeout(fmt::format("barrier '{}' timed out after {} at the store {}: {} of {} callers arrived{}", name,
                                 FormatDuration(timeout), address_, arrived, world_size, RefusedNote(r)));
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
    const auto deadline = net::DeadlineAfter(timeout);
    int err = 0;
    Io io = WriteFrame(fd_, request.Frame(), deadline, -1, &err);
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
  // The note a kTimeout reply ends with ("" when none: a server that has refused no connection, or one from
  // before the note), as a clause to append to the timeout's message.
  static std::string RefusedNote(Reader& r) {
    if (r.AtEnd()) return "";
    std::string note = r.Str();
    return r.ok() && !note.empty() ? "; " + note : "";
  }

  std::mutex mu_;
  int fd_;
  std::string broken_;
  const std::string address_;
  const milliseconds io_timeout_;
};

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

Result<std::unique_ptr<StoreClient>> StoreClient::Connect(const std::string& address, const std::string& token,
                                                          milliseconds timeout, const std::string& mismatch) {
  const auto hp = net::SplitHostPort(address);
  if (!hp) return InvalidArgument(fmt::format("TESSERA_STORE='{}' is not HOST:PORT (e.g. 127.0.0.1:29500)", address));
  if (token.empty()) return InvalidArgument("TESSERA_TOKEN is empty: the store needs the job token");
  if (token.size() > kMaxHandshake - 16)
    return InvalidArgument(fmt::format("TESSERA_TOKEN is {} bytes long; at most {}", token.size(), kMaxHandshake - 16));
  const auto start = Clock::now();
  const auto deadline = net::DeadlineAfter(timeout);
  net::SocketError last;
  const int fd = net::ConnectWithRetry(hp->host, hp->port, net::ConnectRetry{}, deadline, &last);
  if (fd < 0)
    return Timeout(fmt::format("cannot reach the store at TESSERA_STORE='{}' within {}: {}", address,
                               FormatDuration(timeout), last.Describe()));
  net::SetNoDelay(fd);
  // The handshake gets at least a few seconds even when connecting used up most of the timeout.
  const auto hs_deadline = std::max(deadline, Clock::now() + milliseconds(5000));
  Writer hello;
  hello.U32(kMagic).Str(token);
  int err = 0;
  std::string reply;
  Io io = WriteFrame(fd, hello.Frame(), hs_deadline, -1, &err);
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
    return InvalidArgument(fmt::format("store at {} refused the job token: {}", address, mismatch));
  }
  // Requests without a timeout of their own (Set, Add) are bounded by the connect timeout, at least 30 s.
  return std::unique_ptr<StoreClient>(new TcpStoreClient(fd, address, std::max(timeout, milliseconds(30000))));
}

}  // namespace tessera::comm
