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
#include <dlfcn.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <filesystem>

#include "comm/transport/ucx_ucp.hpp"

namespace tessera::comm::internal {

namespace {

using Clock = std::chrono::steady_clock;

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

}  // namespace

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

std::string UcxErr(const Ucx& u, ucs_status_t st) { return u.api.status_string(st); }

UcxWorker::~UcxWorker() {
  stop = true;
  if (progress.joinable()) progress.join();
  if (w) ucx->api.worker_destroy(w);
  if (notify >= 0) ::close(notify);
}

void UcxWorker::Progress() {
  std::lock_guard<std::mutex> l(mu);
  while (ucx->api.worker_progress(w) != 0) {
  }
}

void UcxWorker::Start() {
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
  return UcxMapMemory(u, p, bytes, UcxMemoryFor("host", u.memory_types).use, &r->memh)
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

Result<uint64_t> UcxMemoryTypes() {
  internal::Ucx* u = internal::LoadUcx();
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
