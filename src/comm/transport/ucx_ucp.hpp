// comm/transport/ucx_ucp: the ucx row's binding to UCX's UCP — the library loaded at run time (dlopen of
// libucp.so.0), the process's one UCP context, a communicator's worker with its progress thread, and registered
// memory; see ucx.cpp for the row. Included only where UCX's headers are (TESSERA_HAVE_UCX_HEADERS).
#pragma once

#include <ucp/api/ucp.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>

#include "comm/transport/ucx.hpp"
#include "tessera/status.hpp"

namespace tessera::comm::internal {

// The UCP calls the row makes, looked up in libucp at run time.
struct UcpApi {
  decltype(&ucp_config_read) config_read;
  decltype(&ucp_config_modify) config_modify;
  decltype(&ucp_config_release) config_release;
  decltype(&ucp_init_version) init_version;
  decltype(&ucp_get_version) get_version;
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
  std::string transports;                             // what UCX found, for messages
  UcxFacts facts{.memory_types = kUcxMemoryHostBit};  // what it registers (ucp_context_query), its release
  Status status;
};

// The process's UCX, loaded and initialised on first use; never null (its status says why there is none).
Ucx* LoadUcx();

// Whether the kernel has an RDMA device (/sys/class/infiniband).
bool HasRdmaDevice();

std::string UcxErr(const Ucx& u, ucs_status_t st);

// A worker of the row, kept alive by every endpoint on it. Its progress thread sleeps on the worker's event fd and
// progresses it when UCX has work (bytes queued behind a full socket, arrivals), so a rank's last sends leave even
// while its engine waits elsewhere; the channels progress it too, on every call.
struct UcxWorker {
  Ucx* ucx;
  ucp_worker_h w = nullptr;
  int efd = -1;   // UCP_FEATURE_WAKEUP's event fd (owned by the worker)
  std::mutex mu;  // the progress thread, the engine and a relay's pump drive one worker
  // Written by the progress thread whenever it moved something: the wait fd the channels hand the engine (the
  // worker's own event fd is the thread's to consume).
  int notify = -1;
  std::atomic<bool> stop{false};
  // When a channel (the engine) last progressed the worker, in steady-clock ns; 0 once it sleeps (Handoff). The
  // progress thread stays out while it is recent.
  std::atomic<int64_t> driven{0};
  static int64_t DrivenNow();  // the clock of `driven`: steady-clock ns
  int wake = -1;               // written by Handoff: the progress thread takes over at once
  static constexpr std::chrono::nanoseconds kDrivenLapse{200'000};
  std::thread progress;
  ~UcxWorker();
  // Progresses the worker until it has nothing left to do (a channel's call: the engine drives it).
  void Progress();
  // The engine is about to sleep on `notify`: the progress thread takes over now.
  void Handoff();
  // Starts the progress thread (where the worker has an event fd).
  void Start();
};

// One registered ring of host memory.
struct UcxRing {
  UcxWorker* worker = nullptr;
  std::byte* data = nullptr;
  size_t bytes = 0;
  ucp_mem_h memh = nullptr;
};

// Registers `bytes` at `p` with UCX as the memory UcxMemoryFor chose for it (never for memory it stages).
Status UcxMapMemory(Ucx& u, void* p, size_t bytes, UcxMemoryUse use, ucp_mem_h* memh);

// A ring: plain mmap memory (never a device runtime's pinned allocation), registered as host memory.
Status MapUcxRing(Ucx& u, UcxWorker* w, size_t bytes, UcxRing* r);
void UnmapUcxRing(Ucx& u, UcxRing* r);

// Waits for `req` (progressing the worker) until `deadline`; false when it did not complete by then.
bool WaitUcxRequest(UcxWorker& w, void* req, std::chrono::steady_clock::time_point deadline);

}  // namespace tessera::comm::internal
