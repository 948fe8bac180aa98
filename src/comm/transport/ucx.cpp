// comm/transport/ucx: the ucx row — channels over UCX's UCP stream API, for links with RDMA lanes (RoCE,
// InfiniBand), loaded at run time (dlopen of libucp.so.0), so a Tessera without UCX runs as before and says why
// the row is not viable.
//
// One UCP context per process (features STREAM and WAKEUP; with UCX's shared-memory transports' peer error
// handling switched on unless the user set it, since a peer-error-handling endpoint refuses them otherwise), one
// worker per communicator (its address is the row's blob), one endpoint per peer in peer error-handling mode.
// Each direction of a link is a ring of host memory registered with ucp_mem_map: TrySend copies into the send
// ring and posts a stream send of those bytes; the receiver keeps one stream receive posted into the free part
// of its receive ring and Peek hands out what has landed. UCX reports a crashed peer (its error handler), but
// never a stopped peer or a downed link: the engine's own deadline (TESSERA_TIMEOUT) ends those waits, and an
// endpoint is closed with force when its link goes (after a bounded flush). Connect ends with a hello carrying
// the job token both ways, by its deadline.
//
// TESSERA_UCX_DEVICES: the NIC of each local rank, rail-aligned (docs/architecture.md, "Transports").
#include "comm/transport/ucx.hpp"

#include <fmt/format.h>

#if TESSERA_HAVE_UCX_HEADERS
#include <dlfcn.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <ucp/api/ucp.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <filesystem>
#include <functional>
#include <mutex>
#include <thread>

#include "common/env.hpp"
#include "common/log.hpp"

namespace tessera::comm {
namespace {

using Clock = std::chrono::steady_clock;

// The UCP calls the row makes, looked up in libucp at run time.
struct UcpApi {
  decltype(&ucp_config_read) config_read;
  decltype(&ucp_config_modify) config_modify;
  decltype(&ucp_config_release) config_release;
  decltype(&ucp_init_version) init_version;
  decltype(&ucp_context_print_info) context_print_info;
  decltype(&ucp_context_query) context_query;
  decltype(&ucp_worker_create) worker_create;
  decltype(&ucp_worker_destroy) worker_destroy;
  decltype(&ucp_worker_get_address) worker_get_address;
  decltype(&ucp_worker_release_address) worker_release_address;
  decltype(&ucp_worker_progress) worker_progress;
  decltype(&ucp_worker_get_efd) worker_get_efd;
  decltype(&ucp_worker_arm) worker_arm;
  decltype(&ucp_ep_create) ep_create;
  decltype(&ucp_ep_close_nbx) ep_close_nbx;
  decltype(&ucp_ep_flush_nbx) ep_flush_nbx;
  decltype(&ucp_stream_send_nbx) stream_send_nbx;
  decltype(&ucp_tag_send_nbx) tag_send_nbx;
  decltype(&ucp_tag_recv_nbx) tag_recv_nbx;
  decltype(&ucp_stream_recv_nbx) stream_recv_nbx;
  decltype(&ucp_stream_recv_request_test) stream_recv_request_test;
  decltype(&ucp_request_check_status) request_check_status;
  decltype(&ucp_request_cancel) request_cancel;
  decltype(&ucp_request_free) request_free;
  decltype(&ucp_mem_map) mem_map;
  decltype(&ucp_mem_unmap) mem_unmap;
  decltype(&ucs_status_string) status_string;
};

// The process's UCX: the library, and one context (or why there is none).
struct Ucx {
  UcpApi api{};
  ucp_context_h context = nullptr;
  bool rdma = false;
  std::string transports;                     // what UCX found, for messages
  uint64_t memory_types = kUcxMemoryHostBit;  // what it registers (ucp_context_query)
  Status status;
};

template <typename F>
bool Lookup(void* lib, const char* name, F* f, std::string* missing) {
  *f = reinterpret_cast<F>(dlsym(lib, name));
  if (*f == nullptr) *missing += std::string(missing->empty() ? "" : ", ") + name;
  return *f != nullptr;
}

// Whether UCX's context info names an RDMA transport (rc, dc, ud: InfiniBand and RoCE), and the transports.
void ReadTransports(Ucx& u) {
  char* text = nullptr;
  size_t len = 0;
  std::FILE* f = open_memstream(&text, &len);
  if (f == nullptr) return;
  u.api.context_print_info(u.context, f);
  std::fclose(f);
  const std::string info(text, len);
  std::free(text);
  for (const char* tl : {"rc_verbs", "rc_mlx5", "dc_mlx5", "ud_verbs", "ud_mlx5", "rc_x", "dc_x", "ud_x"})
    if (info.find(tl) != std::string::npos) {
      u.rdma = true;
      u.transports += std::string(u.transports.empty() ? "" : ",") + tl;
    }
  if (u.transports.empty()) u.transports = "no RDMA transport";
}

Ucx* LoadUcx() {
  static Ucx* ucx = [] {
    auto* u = new Ucx();
    const std::string path = env::GetOrDefault("TESSERA_UCX_LIBRARY");
    void* lib = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (lib == nullptr) {
      u->status = Unsupported(
          fmt::format("cannot load UCX '{}': {} (install libucx0, or set TESSERA_UCX_LIBRARY)", path, dlerror()));
      return u;
    }
    std::string missing;
    UcpApi& a = u->api;
    Lookup(lib, "ucp_config_read", &a.config_read, &missing);
    Lookup(lib, "ucp_config_modify", &a.config_modify, &missing);
    Lookup(lib, "ucp_config_release", &a.config_release, &missing);
    Lookup(lib, "ucp_init_version", &a.init_version, &missing);
    Lookup(lib, "ucp_context_print_info", &a.context_print_info, &missing);
    Lookup(lib, "ucp_context_query", &a.context_query, &missing);
    Lookup(lib, "ucp_worker_create", &a.worker_create, &missing);
    Lookup(lib, "ucp_worker_destroy", &a.worker_destroy, &missing);
    Lookup(lib, "ucp_worker_get_address", &a.worker_get_address, &missing);
    Lookup(lib, "ucp_worker_release_address", &a.worker_release_address, &missing);
    Lookup(lib, "ucp_worker_progress", &a.worker_progress, &missing);
    Lookup(lib, "ucp_worker_get_efd", &a.worker_get_efd, &missing);
    Lookup(lib, "ucp_worker_arm", &a.worker_arm, &missing);
    Lookup(lib, "ucp_ep_create", &a.ep_create, &missing);
    Lookup(lib, "ucp_ep_close_nbx", &a.ep_close_nbx, &missing);
    Lookup(lib, "ucp_ep_flush_nbx", &a.ep_flush_nbx, &missing);
    Lookup(lib, "ucp_stream_send_nbx", &a.stream_send_nbx, &missing);
    Lookup(lib, "ucp_tag_send_nbx", &a.tag_send_nbx, &missing);
    Lookup(lib, "ucp_tag_recv_nbx", &a.tag_recv_nbx, &missing);
    Lookup(lib, "ucp_stream_recv_nbx", &a.stream_recv_nbx, &missing);
    Lookup(lib, "ucp_stream_recv_request_test", &a.stream_recv_request_test, &missing);
    Lookup(lib, "ucp_request_check_status", &a.request_check_status, &missing);
    Lookup(lib, "ucp_request_cancel", &a.request_cancel, &missing);
    Lookup(lib, "ucp_request_free", &a.request_free, &missing);
    Lookup(lib, "ucp_mem_map", &a.mem_map, &missing);
    Lookup(lib, "ucp_mem_unmap", &a.mem_unmap, &missing);
    Lookup(lib, "ucs_status_string", &a.status_string, &missing);
    if (!missing.empty()) {
      u->status = Unsupported(fmt::format("UCX '{}' lacks {} (UCX 1.13 or newer is needed)", path, missing));
      return u;
    }
    // Peer error handling refuses UCX's shared-memory transports unless they handle errors themselves (read from
    // the environment by the transports, not by the UCP configuration): on, unless the user says otherwise.
    if (std::getenv("UCX_POSIX_ERROR_HANDLING") == nullptr && std::getenv("UCX_SYSV_ERROR_HANDLING") == nullptr) {
      setenv("UCX_POSIX_ERROR_HANDLING", "y", 0);
      setenv("UCX_SYSV_ERROR_HANDLING", "y", 0);
      setenv("UCX_WARN_UNUSED_ENV_VARS", "n", 0);  // they are unused where UCX_TLS leaves shared memory out
    }
    ucp_config_t* cfg = nullptr;
    if (ucs_status_t st = a.config_read(nullptr, nullptr, &cfg); st != UCS_OK) {
      u->status = Unsupported(fmt::format("UCX configuration: {}", a.status_string(st)));
      return u;
    }
    // Rail alignment: this local rank's own NIC.
    if (auto devices = UcxDeviceForLocalRank(); !devices.empty())
      (void)a.config_modify(cfg, "NET_DEVICES", devices.c_str());
    ucp_params_t params{};
    params.field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_MT_WORKERS_SHARED;
    params.features = UCP_FEATURE_STREAM | UCP_FEATURE_TAG | UCP_FEATURE_WAKEUP;
    params.mt_workers_shared = 1;
    ucs_status_t st = a.init_version(UCP_API_MAJOR, UCP_API_MINOR, &params, cfg, &u->context);
    a.config_release(cfg);
    if (st != UCS_OK) {
      u->status = Unsupported(fmt::format("UCX context: {}", a.status_string(st)));
      return u;
    }
    ReadTransports(*u);
    ucp_context_attr_t attr{};
    attr.field_mask = UCP_ATTR_FIELD_MEMORY_TYPES;
    if (a.context_query(u->context, &attr) == UCS_OK) u->memory_types = attr.memory_types;
    return u;
  }();
  return ucx;
}

bool HasRdmaDevice() {
  std::error_code ec;
  auto it = std::filesystem::directory_iterator("/sys/class/infiniband", ec);
  return !ec && it != std::filesystem::directory_iterator();
}

std::string Err(const Ucx& u, ucs_status_t st) { return u.api.status_string(st); }

// A worker of the row, kept alive by every endpoint on it. Its progress thread sleeps on the worker's event fd and
// progresses it when UCX has work (bytes queued behind a full socket, arrivals), so a rank's last sends leave even
// while its engine waits elsewhere; the channels progress it too, on every call.
struct Worker {
  Ucx* ucx;
  ucp_worker_h w = nullptr;
  int efd = -1;   // UCP_FEATURE_WAKEUP's event fd (owned by the worker)
  std::mutex mu;  // the progress thread, the engine and a relay's pump drive one worker
  // Written by the progress thread whenever it moved something: the wait fd the channels hand the engine (the
  // worker's own event fd is the thread's to consume).
  int notify = -1;
  std::atomic<bool> stop{false};
  std::thread progress;
  ~Worker() {
    stop = true;
    if (progress.joinable()) progress.join();
    if (w) ucx->api.worker_destroy(w);
    if (notify >= 0) ::close(notify);
  }
  void Progress() {
    std::lock_guard<std::mutex> l(mu);
    while (ucx->api.worker_progress(w) != 0) {
    }
  }
  void Start() {
    if (efd < 0) return;
    notify = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    progress = std::thread([this] {
      while (!stop.load(std::memory_order_relaxed)) {
        ucs_status_t armed;
        unsigned moved = 0;
        {
          std::lock_guard<std::mutex> l(mu);
          for (unsigned n; (n = ucx->api.worker_progress(w)) != 0;) moved += n;
          armed = ucx->api.worker_arm(w);
        }
        if (moved > 0 && notify >= 0) {
          const uint64_t one = 1;
          (void)!::write(notify, &one, sizeof(one));
        }
        if (armed == UCS_ERR_BUSY) {
          std::this_thread::yield();
          continue;
        }
        pollfd p{efd, POLLIN, 0};
        (void)::poll(&p, 1, 20);
      }
    });
  }
};

// One registered ring of host memory.
struct Ring {
  Worker* worker = nullptr;
  std::byte* data = nullptr;
  size_t bytes = 0;
  ucp_mem_h memh = nullptr;
};

// One peer: its endpoint, both rings, and the error its handler saw. Closed (flushed, then with force) when both
// channels are gone.
// Control messages between the two ends of a link, tagged kControl | sender's rank: a receiver's credit (the
// bytes it has consumed: a sender keeps at most one ring of bytes beyond it, so UCX never buffers more than that at
// the receiver) and the closing notice (the bytes sent in all: the receiver reports the close after them).
constexpr uint64_t kControl = uint64_t{0x7e55} << 48;
struct Control {
  uint64_t kind;  // kCredit or kBye
  uint64_t value;
};
constexpr uint64_t kCredit = 1, kBye = 2;

struct Endpoint {
  std::shared_ptr<Worker> worker;
  ucp_ep_h ep = nullptr;
  std::string peer;
  int my_rank = 0, peer_rank = 0;
  std::atomic<int> error{UCS_OK};
  Ring send_ring, recv_ring;
  std::deque<std::pair<void*, uint64_t>> sends;  // posted sends (null: done at once) and the stream end each reaches
  uint64_t sent = 0;                             // bytes posted in all (UcxSend)
  uint64_t credited = 0;                         // the peer's last credit: bytes it consumed
  uint64_t bye_at = UINT64_MAX;                  // the peer closed after sending this many bytes
  Control in{}, out{};
  void* in_req = nullptr;    // the posted control receive
  void* out_req = nullptr;   // the control send in flight
  void* stream_req[2] = {};  // the stream receives posted when the receiving channel went (ring, direct)
  ~Endpoint();
  // Takes in what control messages came, and keeps one control receive posted. Under worker->mu.
  void PollControl() {
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
          a.tag_recv_nbx(worker->w, &in, sizeof(in), kControl | static_cast<uint64_t>(peer_rank), ~uint64_t{0}, &p);
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
  void Take() {
    if (in.kind == kCredit) credited = std::max(credited, in.value);
    if (in.kind == kBye) bye_at = in.value;
  }
  // Sends a control message unless one is still in flight (then false: try again later). Under worker->mu.
  bool SendControl(uint64_t kind, uint64_t value) {
    UcpApi& a = worker->ucx->api;
    if (out_req != nullptr) {
      if (a.request_check_status(out_req) == UCS_INPROGRESS) return false;
      a.request_free(out_req);
      out_req = nullptr;
    }
    out = {kind, value};
    ucp_request_param_t p{};
    void* req = a.tag_send_nbx(ep, &out, sizeof(out), kControl | static_cast<uint64_t>(my_rank), &p);
    if (UCS_PTR_IS_ERR(req)) {
      error.store(UCS_PTR_STATUS(req), std::memory_order_release);
      return true;
    }
    out_req = req;
    return true;
  }
  Status Failure() const {
    const auto st = static_cast<ucs_status_t>(error.load(std::memory_order_acquire));
    if (st == UCS_OK) return RemoteError(fmt::format("ucx link to {}: the peer closed it", peer));
    return RemoteError(fmt::format("ucx link to {}: {}", peer, Err(*worker->ucx, st)));
  }
  bool failed() const { return error.load(std::memory_order_acquire) != UCS_OK; }
};

void OnError(void* arg, ucp_ep_h, ucs_status_t status) {
  static_cast<Endpoint*>(arg)->error.store(status, std::memory_order_release);
}

static_assert(kUcxMemoryHostBit == UCS_BIT(UCS_MEMORY_TYPE_HOST) && kUcxMemoryCudaBit == UCS_BIT(UCS_MEMORY_TYPE_CUDA));

// Registers `bytes` at `p` with UCX as the memory UcxMemoryFor chose for it (never for memory it stages).
Status MapMemory(Ucx& u, void* p, size_t bytes, UcxMemoryUse use, ucp_mem_h* memh) {
  if (use == UcxMemoryUse::kStage) return InternalError("ucx: memory to be staged is never registered with UCX");
  ucp_mem_map_params_t mp{};
  mp.field_mask =
      UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH | UCP_MEM_MAP_PARAM_FIELD_MEMORY_TYPE;
  mp.address = p;
  mp.length = bytes;
  mp.memory_type = use == UcxMemoryUse::kCuda ? UCS_MEMORY_TYPE_CUDA : UCS_MEMORY_TYPE_HOST;
  if (ucs_status_t st = u.api.mem_map(u.context, &mp, memh); st != UCS_OK) {
    *memh = nullptr;
    return Unsupported(fmt::format("ucx: registering {} bytes of {} memory: {}", bytes,
                                   use == UcxMemoryUse::kCuda ? "CUDA" : "host", Err(u, st)));
  }
  return Status::Ok();
}

// A ring: plain mmap memory (never a device runtime's pinned allocation), registered as host memory.
Status MapRing(Ucx& u, Worker* w, size_t bytes, Ring* r) {
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return SystemError(fmt::format("ucx: a ring of {} bytes: {}", bytes, std::strerror(errno)));
  r->worker = w;
  r->data = static_cast<std::byte*>(p);
  r->bytes = bytes;
  return MapMemory(u, p, bytes, UcxMemoryFor("host", u.memory_types).use, &r->memh)
      .WithContext(fmt::format("the ring of {} bytes", bytes));
}

void UnmapRing(Ucx& u, Ring* r) {
  if (r->memh) u.api.mem_unmap(u.context, r->memh);
  if (r->data) munmap(r->data, r->bytes);
  r->memh = nullptr;
  r->data = nullptr;
}

// Waits for `req` (progressing the worker) until `deadline`; false when it did not complete by then.
bool WaitRequest(Worker& w, void* req, Clock::time_point deadline) {
  for (;;) {
    {
      std::lock_guard<std::mutex> l(w.mu);  // no UCX call while the progress thread makes one
      if (w.ucx->api.request_check_status(req) != UCS_INPROGRESS) return true;
    }
    if (Clock::now() > deadline) return false;
    w.Progress();
    std::this_thread::yield();
  }
}

Endpoint::~Endpoint() {
  Ucx& u = *worker->ucx;
  const auto deadline = Clock::now() + std::chrono::seconds(2);
  // Let posted sends finish (the last bytes of a collective), then close: flushed, else with force.
  for (auto& [req, end] : sends)
    if (req) {
      if (!failed()) WaitRequest(*worker, req, deadline);
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
          posted = SendControl(kBye, sent);
        }
        if (!posted) worker->Progress();
      }
      void* req;
      {
        std::lock_guard<std::mutex> l(worker->mu);
        req = u.api.ep_flush_nbx(ep, &p);
      }
      if (UCS_PTR_IS_PTR(req)) {
        WaitRequest(*worker, req, deadline);
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
      WaitRequest(*worker, req, Clock::now() + std::chrono::seconds(1));
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
    WaitRequest(*worker, req, Clock::now() + std::chrono::seconds(1));
    std::lock_guard<std::mutex> l(worker->mu);
    u.api.request_free(req);
  }
  UnmapRing(u, &send_ring);
  UnmapRing(u, &recv_ring);
}

class UcxSend final : public SendChannel {
 public:
  explicit UcxSend(std::shared_ptr<Endpoint> e) : e_(std::move(e)) {}
  Result<size_t> TrySend(const void* src, size_t bytes) override {
    Endpoint& e = *e_;
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
    const Ring& r = e.send_ring;
    const size_t at = head_ % r.bytes;
    // At most one ring of bytes beyond what the receiver has consumed (its credit), and the room in ours.
    const size_t window = r.bytes - static_cast<size_t>(std::min<uint64_t>(head_ - e.credited, r.bytes));
    const size_t n = std::min({bytes, r.bytes - static_cast<size_t>(head_ - done_), r.bytes - at, kMaxSend, window});
    if (n == 0) return size_t{0};
    std::memcpy(r.data + at, src, n);
    ucp_request_param_t p{};
    p.op_attr_mask = UCP_OP_ATTR_FIELD_MEMORY_TYPE | UCP_OP_ATTR_FIELD_MEMH;
    p.memory_type = UCS_MEMORY_TYPE_HOST;
    p.memh = r.memh;
    void* req;
    {
      std::lock_guard<std::mutex> l(e.worker->mu);
      req = u.api.stream_send_nbx(e.ep, r.data + at, n, &p);
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
  const char* transport() const override { return "ucx"; }
  Status Health() const override { return e_->failed() ? e_->Failure() : Status::Ok(); }
  // A sender that receives nothing meanwhile (a broadcast's root) hands over half a ring per turn: sends of
  // kMaxSend, not of the engine's step.
  size_t Lookahead() const override { return e_->send_ring.bytes / 2; }

 private:
  static constexpr size_t kMaxSend = 1 << 20;  // several sends in flight per ring
  std::shared_ptr<Endpoint> e_;
  uint64_t head_ = 0, done_ = 0;
};

// Stream positions: got_ bytes have arrived (into the ring or straight into a caller's buffer), used_ of them
// are consumed (the credit the sender is told); the ring holds the arrived, unconsumed bytes between its own
// positions rtail_ and rhead_ (equal to the stream's modulo kChannelAlign: elements never straddle the wrap). A copy
// receive (RecvInto) takes what the ring holds first, then posts a stream receive into the destination itself: the
// bytes UCX delivers are copied once, not twice.
class UcxRecv final : public RecvChannel {
 public:
  explicit UcxRecv(std::shared_ptr<Endpoint> e) : e_(std::move(e)) {}
  // A stream receive cannot be cancelled: the endpoint's forced close completes it, after which it is freed.
  ~UcxRecv() override {
    e_->stream_req[0] = req_;
    e_->stream_req[1] = direct_req_;
  }
  Result<std::pair<const std::byte*, size_t>> Peek() override {
    Endpoint& e = *e_;
    Ucx& u = *e.worker->ucx;
    Drive();
    const Ring& r = e.recv_ring;
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
    Endpoint& e = *e_;
    Ucx& u = *e.worker->ucx;
    Drive();
    std::unique_lock<std::mutex> lock(e.worker->mu);
    // Bytes the ring holds come first, then those of a ring receive still posted (it takes the next to come).
    if (rhead_ == rtail_ && direct_req_ == nullptr && !TestRing()) return size_t{0};
    if (rhead_ > rtail_) {
      lock.unlock();
      const Ring& r = e.recv_ring;
      const size_t at = rtail_ % r.bytes;
      const size_t n = std::min({static_cast<size_t>(rhead_ - rtail_), r.bytes - at, bytes});
      std::memcpy(dst, r.data + at, n);
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
      void* req = u.api.stream_recv_nbx(e.ep, dst, bytes, &len, &Params(nullptr));
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
  const char* transport() const override { return "ucx"; }
  // The worker's notice fd: the engine sleeps in poll() on it until the progress thread has moved something; -1
  // (no sleep) where the posted receive has already completed.
  int WaitFd() const override {
    Worker& w = *e_->worker;
    if (w.notify < 0) return -1;
    uint64_t drained;
    (void)!::read(w.notify, &drained, sizeof(drained));
    void* req = direct_req_ != nullptr ? direct_req_ : req_;
    if (req == nullptr || e_->failed() || e_->bye_at != UINT64_MAX) return -1;
    std::lock_guard<std::mutex> l(w.mu);
    return w.ucx->api.request_check_status(req) == UCS_INPROGRESS ? w.notify : -1;
  }
  Status Health() const override {
    return (e_->failed() || got_ >= e_->bye_at) && rhead_ == rtail_ ? e_->Failure() : Status::Ok();
  }

 private:
  // Progresses the worker, takes in control messages, and credits the sender.
  void Drive() {
    e_->worker->Progress();
    std::lock_guard<std::mutex> l(e_->worker->mu);
    e_->PollControl();
    Credit();
  }
  ucp_request_param_t& Params(ucp_mem_h memh) {
    params_ = {};
    params_.op_attr_mask = UCP_OP_ATTR_FIELD_MEMORY_TYPE | (memh != nullptr ? UCP_OP_ATTR_FIELD_MEMH : 0);
    params_.memory_type = UCS_MEMORY_TYPE_HOST;
    params_.memh = memh;
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
  // Tells the sender what was consumed, once a quarter ring has been since the last credit. Under the worker's mu.
  void Credit() {
    if (used_ - credit_ >= e_->recv_ring.bytes / 4 && e_->SendControl(kCredit, used_)) credit_ = used_;
  }
  std::shared_ptr<Endpoint> e_;
  uint64_t got_ = 0, used_ = 0, credit_ = 0;  // stream positions
  uint64_t rhead_ = 0, rtail_ = 0;            // ring positions
  void* req_ = nullptr;                       // the receive posted into the ring
  void* direct_req_ = nullptr;                // the receive posted into a caller's buffer (RecvInto)
  void* direct_dst_ = nullptr;
  ucp_request_param_t params_{};
};

class UcxTransport final : public Transport {
 public:
  const char* name() const override { return "ucx"; }
  // RDMA only where the kernel has an RDMA device and UCX found a transport on it: without a device UCX is not
  // even loaded (the default order asks every communicator).
  TransportCaps caps() const override {
    const bool rdma = HasRdmaDevice() && LoadUcx()->status.ok() && LoadUcx()->rdma;
    return {.host_local = false, .rings = false, .rdma = rdma, .default_needs_rdma = true};
  }
  Status Viable() const override { return LoadUcx()->status; }
  std::string Domain() const override { return "ucx"; }
  Result<std::string> Listen(const TransportSetup& s) override {
    Ucx* u = LoadUcx();
    TSR_RETURN_IF_ERROR(u->status);
    TSR_ASSIGN_OR_RETURN(ring_bytes_, env::Bytes("TESSERA_UCX_RING"));
    if (ring_bytes_ < (64 << 10) || ring_bytes_ % 4096 != 0)
      return InvalidArgument(fmt::format("TESSERA_UCX_RING={} must be at least 64K and a multiple of 4K", ring_bytes_));
    worker_ = std::make_shared<Worker>();
    worker_->ucx = u;
    ucp_worker_params_t wp{};
    wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
    wp.thread_mode = UCS_THREAD_MODE_SERIALIZED;  // Worker::mu serializes the calls
    if (ucs_status_t st = u->api.worker_create(u->context, &wp, &worker_->w); st != UCS_OK) {
      worker_->w = nullptr;
      return Unsupported(fmt::format("rank {}: ucx worker: {}", s.rank, Err(*u, st)));
    }
    if (u->api.worker_get_efd(worker_->w, &worker_->efd) != UCS_OK) worker_->efd = -1;  // then no sleeping
    worker_->Start();
    ucp_address_t* addr = nullptr;
    size_t len = 0;
    if (ucs_status_t st = u->api.worker_get_address(worker_->w, &addr, &len); st != UCS_OK)
      return Unsupported(fmt::format("rank {}: ucx worker address: {}", s.rank, Err(*u, st)));
    std::string blob(reinterpret_cast<const char*>(addr), len);
    u->api.worker_release_address(worker_->w, addr);
    return blob;
  }
  Result<std::vector<Link>> Connect(const TransportSetup& s, const std::vector<int>& peers,
                                    Clock::time_point deadline) override {
    std::vector<Link> links;
    if (peers.empty()) return links;
    if (!worker_) return InternalError(fmt::format("rank {}: the ucx row has no worker", s.rank));
    Ucx& u = *worker_->ucx;
    std::vector<std::shared_ptr<Endpoint>> eps;
    for (int p : peers) {
      auto e = std::make_shared<Endpoint>();
      e->worker = worker_;
      e->peer = s.peer_name(p);
      TSR_RETURN_IF_ERROR(MapRing(u, worker_.get(), ring_bytes_, &e->send_ring));
      TSR_RETURN_IF_ERROR(MapRing(u, worker_.get(), ring_bytes_, &e->recv_ring));
      ucp_ep_params_t ep{};
      ep.field_mask =
          UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE | UCP_EP_PARAM_FIELD_ERR_HANDLER;
      ep.address = reinterpret_cast<const ucp_address_t*>(s.blobs[p].data());
      ep.err_mode = UCP_ERR_HANDLING_MODE_PEER;
      ep.err_handler.cb = &OnError;
      ep.err_handler.arg = e.get();
      e->my_rank = s.rank;
      e->peer_rank = p;
      ucs_status_t st;
      {
        std::lock_guard<std::mutex> l(worker_->mu);
        st = u.api.ep_create(worker_->w, &ep, &e->ep);
      }
      if (st != UCS_OK) {
        e->ep = nullptr;
        return RemoteError(fmt::format("ucx: an endpoint to {}: {}", e->peer, Err(u, st)));
      }
      eps.push_back(e);
      links.push_back({p, std::make_unique<UcxSend>(e), std::make_unique<UcxRecv>(e)});
    }
    // The hello: the job token both ways on every link, by the deadline.
    const std::string hello = fmt::format("{:016x}", std::hash<std::string>{}("tessera-ucx|" + s.token));
    const std::string padded(PadToChannel(hello.size()) - hello.size(), '\0');
    const std::string out = hello + padded;
    std::vector<size_t> sent(links.size(), 0), got(links.size(), 0);
    std::vector<std::string> in(links.size());
    for (;;) {
      bool done = true;
      for (size_t i = 0; i < links.size(); ++i) {
        if (sent[i] < out.size()) {
          auto n = links[i].send->TrySend(out.data() + sent[i], out.size() - sent[i]);
          if (!n.ok()) return n.status().WithContext("ucx hello");
          sent[i] += *n;
        }
        while (got[i] < out.size()) {
          auto pk = links[i].recv->Peek();
          if (!pk.ok()) return pk.status().WithContext("ucx hello");
          const size_t take = std::min(pk->second, out.size() - got[i]);
          if (take == 0) break;
          in[i].append(reinterpret_cast<const char*>(pk->first), take);
          links[i].recv->Consume(take);
          got[i] += take;
        }
        if (got[i] == out.size() && in[i] != out)
          return RemoteError(fmt::format("ucx: {} answered with another job's token", eps[i]->peer));
        done &= sent[i] == out.size() && got[i] == out.size();
      }
      if (done) break;
      if (Clock::now() > deadline) {
        for (size_t i = 0; i < links.size(); ++i)
          if (got[i] < out.size())
            return Timeout(fmt::format("ucx: no hello from {} within the deadline", eps[i]->peer));
      }
      std::this_thread::sleep_for(std::chrono::microseconds(100));  // peers that join later: no spinning
    }
    return links;
  }

 private:
  std::shared_ptr<Worker> worker_;
  uint64_t ring_bytes_ = 0;
};

}  // namespace

std::string UcxDeviceForLocalRank() {
  const std::string list = env::Get("TESSERA_UCX_DEVICES").value_or("");
  if (list.empty()) return "";
  std::vector<std::string> rails;
  size_t start = 0;
  for (size_t i = 0; i <= list.size(); ++i)
    if (i == list.size() || list[i] == ';') {
      rails.push_back(list.substr(start, i - start));
      start = i + 1;
    }
  const int64_t local = std::max<int64_t>(0, std::atoll(env::Get("TESSERA_LOCAL_RANK").value_or("0").c_str()));
  return rails[static_cast<size_t>(local) % rails.size()];
}

std::unique_ptr<Transport> MakeUcxTransport() { return std::make_unique<UcxTransport>(); }

Result<uint64_t> UcxMemoryTypes() {
  Ucx* u = LoadUcx();
  TSR_RETURN_IF_ERROR(u->status);
  return u->memory_types;
}

}  // namespace tessera::comm

#else  // !TESSERA_HAVE_UCX_HEADERS

namespace tessera::comm {
Result<uint64_t> UcxMemoryTypes() { return Unsupported("this build has no ucx row (UCX's headers were not found)"); }
}  // namespace tessera::comm

#endif  // TESSERA_HAVE_UCX_HEADERS

namespace tessera::comm {

UcxMemoryChoice UcxMemoryFor(std::string_view memory, uint64_t ucx_memory_types) {
  if (memory == "host") {
    if (ucx_memory_types & kUcxMemoryHostBit) return {UcxMemoryUse::kHost, "host memory, registered as host memory"};
    return {UcxMemoryUse::kStage, "this UCX reports no host memory type"};  // not seen; kept safe
  }
  if (memory == "cuda") {
    if (ucx_memory_types & kUcxMemoryCudaBit)
      return {UcxMemoryUse::kCuda, "CUDA memory, registered as CUDA memory (this UCX has CUDA support)"};
    return {UcxMemoryUse::kStage, "CUDA memory, staged through host memory: this UCX has no CUDA support"};
  }
  if (memory == "npu")
    return {UcxMemoryUse::kStage, "NPU memory, staged through host memory: a third-party NIC cannot address it"};
  return {UcxMemoryUse::kStage, fmt::format("{} memory, staged through host memory", memory)};
}

}  // namespace tessera::comm
