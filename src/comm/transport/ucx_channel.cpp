// comm/transport/ucx_channel: the ucx row's channels; see ucx_channel.hpp.
//
// Each direction of a link is a ring of host memory registered with ucp_mem_map: TrySend copies into the send
// ring and posts a stream send of those bytes (TrySendFrom posts the caller's memory itself); the receiver keeps one
// stream receive posted into the free part of its receive ring and Peek hands out what has landed. UCX reports a
// crashed peer (its error handler), but never a stopped peer or a downed link: the engine's own deadline
// (TESSERA_TIMEOUT) ends those waits, and an endpoint is closed with force when its link goes (after a bounded flush).
#include "comm/transport/ucx.hpp"  // TESSERA_HAVE_UCX_HEADERS

#if TESSERA_HAVE_UCX_HEADERS
#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <mutex>

#include "comm/transport/ucx_channel.hpp"

namespace tessera::comm::internal {

namespace {
using Clock = std::chrono::steady_clock;
}  // namespace

void UcxEndpoint::PollControl() {
  UcpApi& a = worker->ucx->api;
  for (int i = 0; i < 64; ++i) {
    if (in_req != nullptr) {
      if (a.request_check_status(in_req) == UCS_INPROGRESS) return;
      a.request_free(in_req);
      in_req = nullptr;
      Take();
    }
    if (bye_at != UINT64_MAX || failed()) return;
    ucp_request_param_t p{};
    void* req =
        a.tag_recv_nbx(worker->w, &in, sizeof(in), kUcxControlTag | static_cast<uint64_t>(peer_rank), ~uint64_t{0}, &p);
    if (UCS_PTR_IS_ERR(req)) {
      error.store(UCS_PTR_STATUS(req), std::memory_order_release);
      return;
    }
    if (req == nullptr) {
      Take();
      continue;
    }
    in_req = req;
    return;
  }
}

void UcxEndpoint::Take() {
  if (in.kind == kUcxCredit) credited = std::max(credited, in.value);
  if (in.kind == kUcxBye) bye_at = in.value;
}

bool UcxEndpoint::SendControl(uint64_t kind, uint64_t value) {
  UcpApi& a = worker->ucx->api;
  if (out_req != nullptr) {
    if (a.request_check_status(out_req) == UCS_INPROGRESS) return false;
    a.request_free(out_req);
    out_req = nullptr;
  }
  out = {kind, value};
  ucp_request_param_t p{};
  void* req = a.tag_send_nbx(ep, &out, sizeof(out), kUcxControlTag | static_cast<uint64_t>(my_rank), &p);
  if (UCS_PTR_IS_ERR(req)) {
    error.store(UCS_PTR_STATUS(req), std::memory_order_release);
    return true;
  }
  out_req = req;
  return true;
}

Status UcxEndpoint::Failure() const {
  const auto st = static_cast<ucs_status_t>(error.load(std::memory_order_acquire));
  if (st == UCS_OK) return RemoteError(fmt::format("ucx link to {}: the peer closed it", peer));
  return RemoteError(fmt::format("ucx link to {}: {}", peer, UcxErr(*worker->ucx, st)));
}

void OnUcxEndpointError(void* arg, ucp_ep_h, ucs_status_t status) {
  static_cast<UcxEndpoint*>(arg)->error.store(status, std::memory_order_release);
}

UcxEndpoint::~UcxEndpoint() {
  Ucx& u = *worker->ucx;
  const auto deadline = Clock::now() + std::chrono::seconds(2);
  // Let posted sends finish (the last bytes of a collective), then close: flushed, else with force.
  for (auto& [req, end] : sends)
    if (req) {
      if (!failed()) WaitUcxRequest(*worker, req, deadline);
      (void)end;
    }
  if (ep) {
    // The closing notice, flushed with what UCX still holds, then closed with force: a graceful close would wait
    // for the peer to progress, and a stopped peer or a downed link never does.
    ucp_request_param_t p{};
    if (!failed()) {
      bool posted = false;
      while (!posted && Clock::now() < deadline) {
        {
          std::lock_guard<std::mutex> l(worker->mu);
          posted = SendControl(kUcxBye, sent);
        }
        if (!posted) worker->Progress();
      }
      void* req;
      {
        std::lock_guard<std::mutex> l(worker->mu);
        req = u.api.ep_flush_nbx(ep, &p);
      }
      if (UCS_PTR_IS_PTR(req)) {
        WaitUcxRequest(*worker, req, deadline);
        std::lock_guard<std::mutex> l(worker->mu);
        u.api.request_free(req);
      }
    }
    p.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
    p.flags = UCP_EP_CLOSE_FLAG_FORCE;
    void* req;
    {
      std::lock_guard<std::mutex> l(worker->mu);
      req = u.api.ep_close_nbx(ep, &p);
    }
    if (UCS_PTR_IS_PTR(req)) {
      WaitUcxRequest(*worker, req, Clock::now() + std::chrono::seconds(1));
      std::lock_guard<std::mutex> l(worker->mu);
      u.api.request_free(req);
    }
  }
  {
    std::lock_guard<std::mutex> l(worker->mu);
    for (auto& [req, end] : sends)
      if (req) u.api.request_free(req);
  }
  for (void* req : {in_req, out_req, stream_req[0], stream_req[1]}) {
    if (req == nullptr) continue;
    {
      std::lock_guard<std::mutex> l(worker->mu);
      u.api.request_cancel(worker->w, req);
    }
    WaitUcxRequest(*worker, req, Clock::now() + std::chrono::seconds(1));
    std::lock_guard<std::mutex> l(worker->mu);
    u.api.request_free(req);
  }
  UnmapUcxRing(u, &send_ring);
  UnmapUcxRing(u, &recv_ring);
}

namespace {

// TrySend copies into the send ring and posts a stream send of those bytes; TrySendFrom posts a stream send of the
// caller's memory itself, as the memory type UcxMemoryFor gives its kind (UCX reads CUDA memory through its own
// CUDA transports). Both keep to the receiver's window, so the stream keeps its order whichever way a byte leaves.
class UcxSend final : public SendChannel {
 public:
  explicit UcxSend(std::shared_ptr<UcxEndpoint> e) : e_(std::move(e)) {}
  Result<size_t> TrySend(const void* src, size_t bytes) override {
    TSR_RETURN_IF_ERROR(Reap());
    UcxEndpoint& e = *e_;
    const UcxRing& r = e.send_ring;
    const size_t at = head_ % r.bytes;
    // The room in our ring: bytes between done_ and head_ may still be read by UCX (sends from the caller's memory
    // count too, a little early), and no ring write straddles its end.
    const size_t used = static_cast<size_t>(std::min<uint64_t>(head_ - done_, r.bytes));
    const size_t n = std::min({bytes, r.bytes - used, r.bytes - at, kMaxSend, Window()});
    if (n == 0) return size_t{0};
    std::memcpy(r.data + at, src, n);
    return Post(r.data + at, n, UCS_MEMORY_TYPE_HOST, r.memh);
  }
  bool sends_from(std::string_view memory) const override {
    return UcxMemoryUseFor(memory, e_->worker->ucx->facts) != UcxMemoryUse::kStage;
  }
  Result<size_t> TrySendFrom(const void* src, size_t bytes, std::string_view memory) override {
    const UcxMemoryUse use = UcxMemoryUseFor(memory, e_->worker->ucx->facts);
    if (use == UcxMemoryUse::kStage)
      return InvalidArgument(fmt::format("ucx link to {}: cannot send straight from {} memory ({})", e_->peer,
                                         memory.empty() ? "''" : memory,
                                         UcxMemoryFor(memory, e_->worker->ucx->facts).why));
    TSR_RETURN_IF_ERROR(Reap());
    const size_t n = std::min({bytes, kMaxSend, Window()});
    if (n == 0) return size_t{0};
    TSR_ASSIGN_OR_RETURN(size_t posted,
                         Post(src, n, use == UcxMemoryUse::kCuda ? UCS_MEMORY_TYPE_CUDA : UCS_MEMORY_TYPE_HOST,
                              nullptr));  // no handle: UCX registers it through its own cache
    from_end_ = head_;
    return posted;
  }
  Result<bool> SentFromDone() override {
    TSR_RETURN_IF_ERROR(Reap());
    return done_ >= from_end_;
  }
  const char* transport() const override { return "ucx"; }
  Status Health() const override { return e_->failed() ? e_->Failure() : Status::Ok(); }
  // A sender that receives nothing meanwhile (a broadcast's root) hands over half a ring per turn: sends of
  // kMaxSend, not of the engine's step.
  size_t Lookahead() const override { return e_->send_ring.bytes / 2; }

 private:
  // Progresses the worker, takes in control messages and retires the sends that completed (in order); the link's
  // failure, or the peer's closing notice, as an error.
  Status Reap() {
    UcxEndpoint& e = *e_;
    Ucx& u = *e.worker->ucx;
    e.worker->Progress();
    {
      std::lock_guard<std::mutex> l(e.worker->mu);
      e.PollControl();
      while (!e.sends.empty()) {
        auto [req, end] = e.sends.front();
        if (req) {
          const ucs_status_t st = u.api.request_check_status(req);
          if (st == UCS_INPROGRESS) break;
          u.api.request_free(req);
          if (st != UCS_OK) e.error.store(st, std::memory_order_release);
        }
        done_ = end;
        e.sends.pop_front();
      }
    }
    if (e.failed() || e.bye_at != UINT64_MAX) return e.Failure();
    return Status::Ok();
  }
  // At most one ring of bytes beyond the receiver's credit: what it consumed, or beyond that the end of a receive
  // it posted into a caller's buffer, which takes those bytes as they come.
  size_t Window() const {
    const uint64_t limit = e_->credited + e_->send_ring.bytes;
    return limit > head_ ? static_cast<size_t>(limit - head_) : 0;
  }
  // Posts a stream send of `n` bytes at p.
  Result<size_t> Post(const void* p, size_t n, ucs_memory_type_t type, ucp_mem_h memh) {
    UcxEndpoint& e = *e_;
    ucp_request_param_t params{};
    params.op_attr_mask = UCP_OP_ATTR_FIELD_MEMORY_TYPE | (memh != nullptr ? UCP_OP_ATTR_FIELD_MEMH : 0);
    params.memory_type = type;
    params.memh = memh;
    void* req;
    {
      std::lock_guard<std::mutex> l(e.worker->mu);
      req = e.worker->ucx->api.stream_send_nbx(e.ep, p, n, &params);
    }
    if (UCS_PTR_IS_ERR(req)) {
      e.error.store(UCS_PTR_STATUS(req), std::memory_order_release);
      return e.Failure();
    }
    head_ += n;
    e.sent = head_;
    e.sends.emplace_back(req, head_);
    return n;
  }
  static constexpr size_t kMaxSend = 1 << 20;  // several sends in flight per ring
  std::shared_ptr<UcxEndpoint> e_;
  uint64_t head_ = 0, done_ = 0;  // stream positions: bytes posted, bytes whose sends completed
  uint64_t from_end_ = 0;         // the stream position after the last send from the caller's memory
};

// Stream positions: got_ bytes have arrived (into the ring or straight into a caller's buffer), used_ of them
// are consumed (the credit the sender is told); the ring holds the arrived, unconsumed bytes between its own
// positions rtail_ and rhead_ (equal to the stream's modulo kChannelAlign: elements never straddle the wrap). A copy
// receive (RecvInto) takes what the ring holds first, then posts a stream receive into the destination itself: the
// bytes UCX delivers are copied once, not twice.
class UcxRecv final : public RecvChannel {
 public:
  explicit UcxRecv(std::shared_ptr<UcxEndpoint> e) : e_(std::move(e)) {}
  // A stream receive cannot be cancelled: the endpoint's forced close completes it, after which it is freed.
  ~UcxRecv() override {
    e_->stream_req[0] = req_;
    e_->stream_req[1] = direct_req_;
  }
  Result<std::pair<const std::byte*, size_t>> Peek() override {
    UcxEndpoint& e = *e_;
    Ucx& u = *e.worker->ucx;
    Drive();
    const UcxRing& r = e.recv_ring;
    std::unique_lock<std::mutex> lock(e.worker->mu);
    for (int round = 0; round < 2 && direct_req_ == nullptr; ++round) {
      if (!TestRing()) break;
      if (rhead_ == rtail_) Realign();
      const size_t at = rhead_ % r.bytes;
      const size_t room = std::min(r.bytes - static_cast<size_t>(rhead_ - rtail_), r.bytes - at);
      if (room == 0 || e.failed()) break;
      size_t len = 0;
      void* req = u.api.stream_recv_nbx(e.ep, r.data + at, room, &len, &Params(r.memh));
      if (UCS_PTR_IS_ERR(req)) {
        e.error.store(UCS_PTR_STATUS(req), std::memory_order_release);
        break;
      }
      if (req == nullptr) {
        Arrived(len, true);  // there already
      } else {
        req_ = req;
      }
    }
    lock.unlock();
    const size_t at = rtail_ % r.bytes;
    const size_t avail = std::min(static_cast<size_t>(rhead_ - rtail_), r.bytes - at);
    if (avail == 0 && (e.failed() || got_ >= e.bye_at)) return e.Failure();  // its bytes first, then its error
    return std::pair<const std::byte*, size_t>(r.data + at, avail);
  }
  void Consume(size_t bytes) override {
    rtail_ += bytes;
    used_ += bytes;
    std::lock_guard<std::mutex> l(e_->worker->mu);
    Credit();
  }
  bool direct() const override { return true; }
  // The caller hands the same dst (and at most as many bytes) until a receive posted into it has completed.
  Result<size_t> RecvInto(void* dst, size_t bytes) override {
    return Receive(dst, bytes, UCS_MEMORY_TYPE_HOST, nullptr);
  }
  bool receives_into(std::string_view memory) const override {
    return UcxMemoryUseFor(memory, e_->worker->ucx->facts) != UcxMemoryUse::kStage;
  }
  // As RecvInto, the receive posted as the memory type UcxMemoryFor gives the kind; what the ring holds goes through
  // copy_in.
  Result<size_t> RecvIntoMemory(void* dst, size_t bytes, std::string_view memory, const CopyIn& copy_in) override {
    const UcxMemoryUse use = UcxMemoryUseFor(memory, e_->worker->ucx->facts);
    if (use == UcxMemoryUse::kStage)
      return InvalidArgument(fmt::format("ucx link from {}: cannot receive straight into {} memory ({})", e_->peer,
                                         memory.empty() ? "''" : memory,
                                         UcxMemoryFor(memory, e_->worker->ucx->facts).why));
    if (!copy_in)
      return InvalidArgument(fmt::format("ucx link from {}: a receive into {} memory needs a copy for the ring's bytes",
                                         e_->peer, memory));
    return Receive(dst, bytes, use == UcxMemoryUse::kCuda ? UCS_MEMORY_TYPE_CUDA : UCS_MEMORY_TYPE_HOST, &copy_in);
  }
  const char* transport() const override { return "ucx"; }
  // The worker's notice fd: the engine sleeps in poll() on it until the progress thread has moved something; -1
  // (no sleep) where the posted receive has already completed.
  int WaitFd() const override {
    UcxWorker& w = *e_->worker;
    if (w.notify < 0) return -1;
    uint64_t drained;
    (void)!::read(w.notify, &drained, sizeof(drained));
    void* req = direct_req_ != nullptr ? direct_req_ : req_;
    if (req == nullptr || e_->failed() || e_->bye_at != UINT64_MAX) return -1;
    {
      std::lock_guard<std::mutex> l(w.mu);
      if (w.ucx->api.request_check_status(req) != UCS_INPROGRESS) return -1;
    }
    w.Handoff();
    return w.notify;
  }
  Status Health() const override {
    return (e_->failed() || got_ >= e_->bye_at) && rhead_ == rtail_ ? e_->Failure() : Status::Ok();
  }

 private:
  // A copy receive into dst (memory of `type`): the ring's bytes first (through copy_in, else memcpy), then a stream
  // receive posted into dst itself.
  Result<size_t> Receive(void* dst, size_t bytes, ucs_memory_type_t type, const CopyIn* copy_in) {
    UcxEndpoint& e = *e_;
    Ucx& u = *e.worker->ucx;
    Drive();
    std::unique_lock<std::mutex> lock(e.worker->mu);
    // Bytes the ring holds come first, then those of a ring receive still posted (it takes the next to come).
    if (rhead_ == rtail_ && direct_req_ == nullptr && !TestRing()) return size_t{0};
    if (rhead_ > rtail_) {
      lock.unlock();
      const UcxRing& r = e.recv_ring;
      const size_t at = rtail_ % r.bytes;
      const size_t n = std::min({static_cast<size_t>(rhead_ - rtail_), r.bytes - at, bytes});
      if (copy_in != nullptr) {
        TSR_RETURN_IF_ERROR((*copy_in)(dst, r.data + at, n).WithContext(fmt::format("ucx link from {}", e.peer)));
      } else {
        std::memcpy(dst, r.data + at, n);
      }
      Consume(n);
      return n;
    }
    size_t len = 0;
    if (direct_req_ != nullptr) {
      if (dst != direct_dst_)
        return InternalError(fmt::format("ucx link to {}: a copy receive moved while one was posted", e.peer));
      const ucs_status_t st = u.api.stream_recv_request_test(direct_req_, &len);
      if (st == UCS_INPROGRESS) return size_t{0};
      u.api.request_free(direct_req_);
      direct_req_ = nullptr;
      if (st != UCS_OK) e.error.store(st, std::memory_order_release);
    } else {
      if (e.failed() || got_ >= e.bye_at) return e.Failure();
      // One receive of all of it (UCP_STREAM_RECV_FLAG_WAITALL), at most kUcxMaxDirectRecv: UCX copies each segment
      // into dst as it lands, where a receive that completed with the first bytes to come ended at every segment and
      // left the next ones queued in UCX until the engine posted again.
      const size_t n = std::min(bytes, kUcxMaxDirectRecv);
      // The caller takes these bytes whatever comes (it hands the rest again until all have come), so the sender
      // may run a ring ahead of their end rather than of what was consumed: credit them now.
      promised_ = std::max<uint64_t>(promised_, got_ + n);
      Credit();
      void* req = u.api.stream_recv_nbx(e.ep, dst, n, &len, &Params(nullptr, type, UCP_STREAM_RECV_FLAG_WAITALL));
      if (UCS_PTR_IS_ERR(req)) {
        e.error.store(UCS_PTR_STATUS(req), std::memory_order_release);
        return e.Failure();
      }
      if (req != nullptr) {
        direct_req_ = req;
        direct_dst_ = dst;
        return size_t{0};
      }
    }
    Arrived(len, false);
    used_ += len;
    Credit();
    if (len == 0 && e.failed()) return e.Failure();
    return len;
  }
  // Progresses the worker, takes in control messages, and credits the sender.
  void Drive() {
    e_->worker->Progress();
    std::lock_guard<std::mutex> l(e_->worker->mu);
    e_->PollControl();
    Credit();
  }
  ucp_request_param_t& Params(ucp_mem_h memh, ucs_memory_type_t type = UCS_MEMORY_TYPE_HOST, uint32_t flags = 0) {
    params_ = {};
    params_.op_attr_mask = UCP_OP_ATTR_FIELD_MEMORY_TYPE | (memh != nullptr ? UCP_OP_ATTR_FIELD_MEMH : 0) |
                           (flags != 0 ? UCP_OP_ATTR_FIELD_FLAGS : 0);
    params_.memory_type = type;
    params_.memh = memh;
    params_.flags = flags;
    return params_;
  }
  // Takes in the ring receive if it completed; false while it is still posted. Under the worker's mu.
  bool TestRing() {
    if (req_ == nullptr) return true;
    size_t len = 0;
    const ucs_status_t st = e_->worker->ucx->api.stream_recv_request_test(req_, &len);
    if (st == UCS_INPROGRESS) return false;
    e_->worker->ucx->api.request_free(req_);
    req_ = nullptr;
    if (st != UCS_OK) e_->error.store(st, std::memory_order_release);
    Arrived(len, true);
    return true;
  }
  // An empty ring starts again where its offset is the stream's modulo kChannelAlign (copy receives of odd sizes
  // moved the stream past the ring), so that what it hands out stays aligned and no element straddles its wrap.
  void Realign() { rhead_ = rtail_ = rhead_ - rhead_ % kChannelAlign + got_ % kChannelAlign; }
  void Arrived(size_t len, bool ring) {
    got_ += len;
    if (ring) rhead_ += len;
  }
  // Tells the sender what was consumed, or the end of a receive posted into a caller's buffer where that is further,
  // once a quarter ring more than the last credit. Under the worker's mu.
  void Credit() {
    const uint64_t at = std::max(used_, promised_);
    if (at - credit_ >= e_->recv_ring.bytes / 4 && e_->SendControl(kUcxCredit, at)) credit_ = at;
  }
  std::shared_ptr<UcxEndpoint> e_;
  uint64_t got_ = 0, used_ = 0, credit_ = 0;  // stream positions
  uint64_t promised_ = 0;                     // the end of the last receive posted into a caller's buffer
  uint64_t rhead_ = 0, rtail_ = 0;            // ring positions
  void* req_ = nullptr;                       // the receive posted into the ring
  void* direct_req_ = nullptr;                // the receive posted into a caller's buffer (RecvInto)
  void* direct_dst_ = nullptr;
  ucp_request_param_t params_{};
};

}  // namespace

std::unique_ptr<SendChannel> MakeUcxSend(std::shared_ptr<UcxEndpoint> e) {
  return std::make_unique<UcxSend>(std::move(e));
}
std::unique_ptr<RecvChannel> MakeUcxRecv(std::shared_ptr<UcxEndpoint> e) {
  return std::make_unique<UcxRecv>(std::move(e));
}

}  // namespace tessera::comm::internal

#endif  // TESSERA_HAVE_UCX_HEADERS
