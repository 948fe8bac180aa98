// comm/transport/ucx_ucp: the ucx row's binding to UCP; see ucx_ucp.hpp. Also the row's functions that need no
// UCX (the rail of a local rank, the memory choice), built in every build.
//
// One UCP context per process (features STREAM, TAG and WAKEUP; with UCX's shared-memory transports' peer error
// handling switched on unless the user set it, since a peer-error-handling endpoint refuses them otherwise).
#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <string>
#include <vector>

#include "comm/transport/ucx.hpp"
#include "common/env.hpp"

#if TESSERA_HAVE_UCX_HEADERS
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <filesystem>

#include "comm/transport/ucx_ucp.hpp"
#include "common/dl.hpp"

namespace tessera::comm::internal {

namespace {

using Clock = std::chrono::steady_clock;

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

}  // namespace

Ucx* LoadUcx() {
  static Ucx* ucx = [] {
    auto* u = new Ucx();
    // Peer error handling refuses UCX's shared-memory transports unless they handle errors themselves (read from
    // the environment by the transports, not by the UCP configuration): on, unless the user says otherwise. Set
    // before UCX is loaded: the switch that keeps UCX from warning of them as unused where UCX_TLS leaves shared
    // memory out is one of UCX's global options, read once when its library is loaded.
    if (std::getenv("UCX_POSIX_ERROR_HANDLING") == nullptr && std::getenv("UCX_SYSV_ERROR_HANDLING") == nullptr) {
      setenv("UCX_POSIX_ERROR_HANDLING", "y", 0);
      setenv("UCX_SYSV_ERROR_HANDLING", "y", 0);
      setenv("UCX_WARN_UNUSED_ENV_VARS", "n", 0);
    }
    const std::string path = env::GetOrDefault("TESSERA_UCX_LIBRARY");
    auto lib = dl::Library::Open(path, {.what = "UCX",
                                        .env_var = "TESSERA_UCX_LIBRARY",
                                        .mismatch = "UCX 1.13 or newer is needed",
                                        .install = "install libucx0, or set TESSERA_UCX_LIBRARY to its path"});
    if (!lib.ok()) {
      u->status = lib.status();
      return u;
    }
    UcpApi& a = u->api;
    u->status = [&]() -> Status {
      TSR_RETURN_IF_ERROR(lib->Bind(a.config_read, "ucp_config_read"));
      TSR_RETURN_IF_ERROR(lib->Bind(a.config_modify, "ucp_config_modify"));
      TSR_RETURN_IF_ERROR(lib->Bind(a.config_release, "ucp_config_release"));
      TSR_RETURN_IF_ERROR(lib->Bind(a.init_version, "ucp_init_version"));
      TSR_RETURN_IF_ERROR(lib->Bind(a.get_version, "ucp_get_version"));
      TSR_RETURN_IF_ERROR(lib->Bind(a.context_print_info, "ucp_context_print_info"));
      TSR_RETURN_IF_ERROR(lib->Bind(a.context_query, "ucp_context_query"));
      TSR_RETURN_IF_ERROR(lib->Bind(a.worker_create, "ucp_worker_create"));
      TSR_RETURN_IF_ERROR(lib->Bind(a.worker_destroy, "ucp_worker_destroy"));
      TSR_RETURN_IF_ERROR(lib->Bind(a.worker_get_address, "ucp_worker_get_address"));
      TSR_RETURN_IF_ERROR(lib->Bind(a.worker_release_address, "ucp_worker_release_address"));
      TSR_RETURN_IF_ERROR(lib->Bind(a.worker_progress, "ucp_worker_progress"));
      TSR_RETURN_IF_ERROR(lib->Bind(a.worker_get_efd, "ucp_worker_get_efd"));
      TSR_RETURN_IF_ERROR(lib->Bind(a.worker_arm, "ucp_worker_arm"));
      TSR_RETURN_IF_ERROR(lib->Bind(a.ep_create, "ucp_ep_create"));
      TSR_RETURN_IF_ERROR(lib->Bind(a.ep_close_nbx, "ucp_ep_close_nbx"));
      TSR_RETURN_IF_ERROR(lib->Bind(a.ep_flush_nbx, "ucp_ep_flush_nbx"));
      TSR_RETURN_IF_ERROR(lib->Bind(a.stream_send_nbx, "ucp_stream_send_nbx"));
      TSR_RETURN_IF_ERROR(lib->Bind(a.tag_send_nbx, "ucp_tag_send_nbx"));
      TSR_RETURN_IF_ERROR(lib->Bind(a.tag_recv_nbx, "ucp_tag_recv_nbx"));
      TSR_RETURN_IF_ERROR(lib->Bind(a.stream_recv_nbx, "ucp_stream_recv_nbx"));
      TSR_RETURN_IF_ERROR(lib->Bind(a.stream_recv_request_test, "ucp_stream_recv_request_test"));
      TSR_RETURN_IF_ERROR(lib->Bind(a.request_check_status, "ucp_request_check_status"));
      TSR_RETURN_IF_ERROR(lib->Bind(a.request_cancel, "ucp_request_cancel"));
      TSR_RETURN_IF_ERROR(lib->Bind(a.request_free, "ucp_request_free"));
      TSR_RETURN_IF_ERROR(lib->Bind(a.mem_map, "ucp_mem_map"));
      TSR_RETURN_IF_ERROR(lib->Bind(a.mem_unmap, "ucp_mem_unmap"));
      TSR_RETURN_IF_ERROR(lib->Bind(a.status_string, "ucs_status_string"));
      return Status::Ok();
    }();
    if (!u->status.ok()) return u;
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
    if (a.context_query(u->context, &attr) == UCS_OK) u->facts.memory_types = attr.memory_types;
    unsigned major = 0, minor = 0, release = 0;
    a.get_version(&major, &minor, &release);
    u->facts.version = UcxVersion(major, minor);
    return u;
  }();
  return ucx;
}

bool HasRdmaDevice() {
  std::error_code ec;
  auto it = std::filesystem::directory_iterator("/sys/class/infiniband", ec);
  return !ec && it != std::filesystem::directory_iterator();
}

std::string UcxErr(const Ucx& u, ucs_status_t st) { return u.api.status_string(st); }

UcxWorker::~UcxWorker() {
  stop = true;
  if (progress.joinable()) progress.join();
  if (w) ucx->api.worker_destroy(w);
  if (notify >= 0) ::close(notify);
  if (wake >= 0) ::close(wake);
}

int64_t UcxWorker::DrivenNow() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch()).count();
}

void UcxWorker::Handoff() {
  driven.store(0, std::memory_order_relaxed);
  if (wake >= 0) {
    const uint64_t one = 1;
    (void)!::write(wake, &one, sizeof(one));
  }
}

void UcxWorker::Progress() {
  driven.store(DrivenNow(), std::memory_order_relaxed);
  std::lock_guard<std::mutex> l(mu);
  while (ucx->api.worker_progress(w) != 0) {
  }
}

void UcxWorker::Start() {
  if (efd < 0) return;
  notify = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  wake = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  progress = std::thread([this] {
    while (!stop.load(std::memory_order_relaxed)) {
      // While the engine drives the worker itself, stay out of its way (the mutex and the sockets): two threads
      // progressing one worker on a small box cost the ranks CPU the kernel's network stack needs (between two hosts
      // on 2 cores: bench/results/log/2026-12-05-ucx-row-sends-from-host-memory.md). Back within kDrivenLapse of its
      // last call, or at once when it says it sleeps (Handoff).
      const int64_t last = driven.load(std::memory_order_relaxed);
      if (last != 0 && DrivenNow() - last < kDrivenLapse.count()) {
        pollfd p{wake, POLLIN, 0};
        const timespec lapse{0, kDrivenLapse.count()};
        if (::ppoll(&p, 1, &lapse, nullptr) > 0) {
          uint64_t drained;
          (void)!::read(wake, &drained, sizeof(drained));
        }
        continue;
      }
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

static_assert(kUcxMemoryHostBit == UCS_BIT(UCS_MEMORY_TYPE_HOST) && kUcxMemoryCudaBit == UCS_BIT(UCS_MEMORY_TYPE_CUDA));

// Registers `bytes` at `p` with UCX as the memory UcxMemoryFor chose for it (never for memory it stages).
Status UcxMapMemory(Ucx& u, void* p, size_t bytes, UcxMemoryUse use, ucp_mem_h* memh) {
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
                                   use == UcxMemoryUse::kCuda ? "CUDA" : "host", UcxErr(u, st)));
  }
  return Status::Ok();
}

// A ring: plain mmap memory (never a device runtime's pinned allocation), registered as host memory.
Status MapUcxRing(Ucx& u, UcxWorker* w, size_t bytes, UcxRing* r) {
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return SystemError(fmt::format("ucx: a ring of {} bytes: {}", bytes, std::strerror(errno)));
  r->worker = w;
  r->data = static_cast<std::byte*>(p);
  r->bytes = bytes;
  return UcxMapMemory(u, p, bytes, UcxMemoryUseFor("host", u.facts), &r->memh)
      .WithContext(fmt::format("the ring of {} bytes", bytes));
}

void UnmapUcxRing(Ucx& u, UcxRing* r) {
  if (r->memh) u.api.mem_unmap(u.context, r->memh);
  if (r->data) munmap(r->data, r->bytes);
  r->memh = nullptr;
  r->data = nullptr;
}

// Waits for `req` (progressing the worker) until `deadline`; false when it did not complete by then.
bool WaitUcxRequest(UcxWorker& w, void* req, Clock::time_point deadline) {
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

}  // namespace tessera::comm::internal

namespace tessera::comm {

Result<UcxFacts> LoadedUcxFacts() {
  internal::Ucx* u = internal::LoadUcx();
  TSR_RETURN_IF_ERROR(u->status);
  return u->facts;
}

}  // namespace tessera::comm

#else  // !TESSERA_HAVE_UCX_HEADERS

namespace tessera::comm {
Result<UcxFacts> LoadedUcxFacts() { return Unsupported("this build has no ucx row (UCX's headers were not found)"); }
}  // namespace tessera::comm

#endif  // TESSERA_HAVE_UCX_HEADERS

namespace tessera::comm {

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

namespace {

// The one rule behind UcxMemoryUseFor and UcxMemoryFor; `why` (when not null) gets the reason in words.
UcxMemoryUse ChooseUcxMemory(std::string_view memory, const UcxFacts& ucx, std::string* why) {
  const auto say = [why](UcxMemoryUse use, std::string_view reason) {
    if (why != nullptr) *why = reason;
    return use;
  };
  if (memory == "emu") memory = "host";  // the emulated device (comm/runtime/runtime_emu) keeps its memory there
  if (memory == "host") {
    if (ucx.memory_types & kUcxMemoryHostBit) return say(UcxMemoryUse::kHost, "host memory, registered as host memory");
    return say(UcxMemoryUse::kStage, "this UCX reports no host memory type");  // not seen; kept safe
  }
  if (memory == "cuda") {
    if ((ucx.memory_types & kUcxMemoryCudaBit) == 0)
      return say(UcxMemoryUse::kStage, "CUDA memory, staged through host memory: this UCX has no CUDA support");
    if (ucx.version < kUcxCudaSafeFrom) {
      if (why != nullptr)
        *why = fmt::format(
            "CUDA memory, staged through host memory: UCX {}.{} sets CU_CTX_SYNC_MEMOPS on every detection of CUDA "
            "memory, which can deadlock a link against a kernel launch (fixed after UCX 1.22; {}.{} or newer takes "
            "CUDA memory)",
            ucx.version >> 16, ucx.version & 0xffff, kUcxCudaSafeFrom >> 16, kUcxCudaSafeFrom & 0xffff);
      return UcxMemoryUse::kStage;
    }
    return say(UcxMemoryUse::kCuda, "CUDA memory, registered as CUDA memory (this UCX has CUDA support)");
  }
  if (memory == "npu")
    return say(UcxMemoryUse::kStage, "NPU memory, staged through host memory: a third-party NIC cannot address it");
  if (why != nullptr) *why = fmt::format("{} memory, staged through host memory", memory);
  return UcxMemoryUse::kStage;
}

}  // namespace

UcxMemoryUse UcxMemoryUseFor(std::string_view memory, const UcxFacts& ucx) {
  return ChooseUcxMemory(memory, ucx, nullptr);
}

UcxMemoryChoice UcxMemoryFor(std::string_view memory, const UcxFacts& ucx) {
  UcxMemoryChoice c;
  c.use = ChooseUcxMemory(memory, ucx, &c.why);
  return c;
}

}  // namespace tessera::comm
