// comm/transport/relay: TCP relayed through host rings for the device bridge; see relay.hpp.
#include "comm/transport/relay.hpp"

#include <fmt/format.h>
#include <poll.h>

#include <algorithm>
#include <vector>

namespace tessera::comm {
namespace {

// The engine's ends: the rings' own, plus the link's health.
class RelaySend final : public SendChannel {
 public:
  RelaySend(std::unique_ptr<SendChannel> ring, const TcpRelay* relay) : ring_(std::move(ring)), relay_(relay) {}
  Result<size_t> TrySend(const void* src, size_t bytes) override {
    TSR_RETURN_IF_ERROR(relay_->Health());
    return ring_->TrySend(src, bytes);
  }
  const char* transport() const override { return relay_->transport(); }
  bool dma() const override { return true; }
  std::pair<std::byte*, size_t> Reserve(size_t max) override { return ring_->Reserve(max); }
  void Publish(size_t bytes) override { ring_->Publish(bytes); }
  Status Health() const override { return relay_->Health(); }

 private:
  std::unique_ptr<SendChannel> ring_;
  const TcpRelay* relay_;
};

class RelayRecv final : public RecvChannel {
 public:
  RelayRecv(std::unique_ptr<RecvChannel> ring, const TcpRelay* relay) : ring_(std::move(ring)), relay_(relay) {}
  Result<std::pair<const std::byte*, size_t>> Peek() override {
    TSR_ASSIGN_OR_RETURN(auto got, ring_->Peek());
    if (got.second == 0) TSR_RETURN_IF_ERROR(Health());
    return got;
  }
  void Consume(size_t bytes) override {
    ring_->Consume(bytes);
    consumed_ += bytes;
    taken_ = std::max(taken_, consumed_);
  }
  const char* transport() const override { return relay_->transport(); }
  bool dma() const override { return true; }
  std::pair<const std::byte*, size_t> Claim(size_t max, size_t unit) override {
    auto got = ring_->Claim(max, unit);
    taken_ += got.second;
    return got;
  }
  // The link's failure once every byte that arrived before it has been taken (Peek'd and consumed, or
  // claimed): the failed flag is read before the count, and the pump counts before it fails.
  Status Health() const override {
    Status s = relay_->Health();
    if (s.ok() || taken_ < relay_->delivered()) return Status::Ok();
    return s;
  }

 private:
  std::unique_ptr<RecvChannel> ring_;
  const TcpRelay* relay_;
  uint64_t consumed_ = 0, taken_ = 0;  // as the ring reader's tail and claimed counts
};

}  // namespace

Result<std::unique_ptr<TcpRelay>> TcpRelay::Create(std::unique_ptr<SendChannel> tcp_send,
                                                   std::unique_ptr<RecvChannel> tcp_recv, size_t ring_bytes,
                                                   std::string peer, std::chrono::milliseconds drain) {
  if (ring_bytes < 4096 || ring_bytes % 4096 != 0)
    return InvalidArgument(
        fmt::format("relay to {}: ring of {} bytes is not a positive multiple of 4096", peer, ring_bytes));
  std::unique_ptr<TcpRelay> r(new TcpRelay());
  r->tcp_send_ = std::move(tcp_send);
  r->tcp_recv_ = std::move(tcp_recv);
  r->peer_ = std::move(peer);
  r->link_ = r->tcp_send_->transport();
  r->transport_ = r->link_ + " (relayed through host rings)";
  r->drain_ = drain;
  TSR_ASSIGN_OR_RETURN(r->rings_, ShmInbox::CreatePrivate({ring_bytes, ring_bytes}));
  r->out_reader_ = r->rings_->Reader(kOut);
  r->in_writer_ = r->rings_->Writer(kIn);
  r->pump_ = std::thread([p = r.get()] { p->Pump(); });
  return r;
}

TcpRelay::~TcpRelay() {
  // Whatever the engine published is owed to the peer: the pump hands it to TCP, then returns (it alone
  // reads the outbound ring; this thread only waits, up to `drain_`, and then makes it give up).
  stop_.store(true, std::memory_order_release);
  auto until = std::chrono::steady_clock::now() + drain_;
  while (!done_.load(std::memory_order_acquire) && std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  abandon_.store(true, std::memory_order_release);
  if (pump_.joinable()) pump_.join();
}

std::unique_ptr<SendChannel> TcpRelay::Writer() { return std::make_unique<RelaySend>(rings_->Writer(kOut), this); }
std::unique_ptr<RecvChannel> TcpRelay::Reader() { return std::make_unique<RelayRecv>(rings_->Reader(kIn), this); }

Status TcpRelay::Health() const {
  if (!failed_.load(std::memory_order_acquire)) return Status::Ok();
  std::lock_guard<std::mutex> l(mu_);
  return error_;
}

void TcpRelay::Fail(const Status& s) {
  {
    std::lock_guard<std::mutex> l(mu_);
    error_ = s.WithContext(fmt::format("the link to {} ({}, relayed for the device bridge)", peer_, link_));
  }
  failed_.store(true, std::memory_order_release);
}

void TcpRelay::Pump() {
  struct Done {
    std::atomic<bool>* flag;
    ~Done() { flag->store(true, std::memory_order_release); }
  } done{&done_};
  int idle = 0;
  while (!abandon_.load(std::memory_order_acquire)) {
    bool progress = false;
    // Outbound: what the engine (its copy engine) published, into the TCP streams.
    auto out = out_reader_->Peek();
    size_t pending_out = out.ok() ? out->second : 0;
    if (pending_out == 0 && stop_.load(std::memory_order_acquire)) return;  // drained
    if (pending_out > 0) {
      auto n = tcp_send_->TrySend(out->first, out->second);
      if (!n.ok()) return Fail(n.status());
      if (*n > 0) {
        out_reader_->Consume(*n);
        progress = true;
      }
    }
    // Inbound: what TCP has read ahead, into the ring the engine reads.
    auto in = tcp_recv_->Peek();
    if (!in.ok()) return Fail(in.status());
    if (in->second > 0) {
      auto n = in_writer_->TrySend(in->first, in->second);
      if (!n.ok()) return Fail(n.status());
      if (*n > 0) {
        tcp_recv_->Consume(*n);
        delivered_.fetch_add(*n, std::memory_order_release);
        progress = true;
      }
    }
    if (progress) {
      idle = 0;
      continue;
    }
    // Idle: yield for a while (a collective in progress publishes again within microseconds), then sleep
    // in poll() on the sockets this side is waiting for, at most 1 ms (the engine's publishing has no fd).
    if (++idle < 2000) {
      std::this_thread::yield();
      continue;
    }
    std::vector<pollfd> fds;
    if (int fd = tcp_recv_->WaitFd(); fd >= 0) fds.push_back({fd, POLLIN, 0});
    if (int fd = tcp_send_->WaitFd(); fd >= 0 && pending_out > 0) fds.push_back({fd, POLLOUT, 0});
    (void)::poll(fds.data(), fds.size(), 1);
  }
}

}  // namespace tessera::comm
