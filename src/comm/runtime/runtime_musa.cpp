// comm/runtime/runtime_musa: the MUSA row's DeviceRuntime (Moore Threads, libmusart.so), over function pointers
// declared here. MUSA's headers are not published; the NAMES come from MooreThreads/torch_musa's mapping
// torch_musa/utils/mapping/general.json at commit 8b583b3f2fd0d9d3d9e7 ("map:N" = line N), the soname from
// torch_musa/csrc/core/musart.cpp:14. Every VALUE and SIGNATURE below is an ASSUMPTION: CUDA's, from NVIDIA's
// public CUDA 13.0 headers ("drv:N" = driver_types.h line N, "api:N" = cuda_runtime_api.h line N), which
// torch_musa's 1:1 renaming implies but does not prove (the citations of tests/shims/musa_abi.h).
#include <dlfcn.h>
#include <fmt/format.h>

#include "comm/runtime/runtime.hpp"

namespace tessera::comm::internal {
namespace {

using musaError_t = int;                           // map:8487; ASSUMPTION: an int-sized enum as cudaError_t
using musaStream_t = void*;                        // map:9745; ASSUMPTION: an opaque pointer as cudaStream_t (drv:2998)
using musaEvent_t = void*;                         // map:8528; ASSUMPTION: as cudaEvent_t (drv:3003)
constexpr musaError_t kMusaSuccess = 0;            // musaSuccess, map:9746, drv:199
constexpr musaError_t kMusaNotReady = 600;         // musaErrorNotReady, map:8445, drv:767
constexpr int kMusaMemcpyHostToDevice = 1;         // musaMemcpyKind, map:9371, drv:1247-1251
constexpr int kMusaMemcpyDeviceToHost = 2;         // map:9346
constexpr int kMusaMemcpyDeviceToDevice = 3;       // map:9345
constexpr int kMusaMemoryTypeHost = 1;             // musaMemoryType, map:9412, drv:1236-1239
constexpr int kMusaMemoryTypeDevice = 2;           // map:9411
constexpr unsigned kMusaStreamNonBlocking = 0x01;  // map:9711, drv:101
constexpr unsigned kMusaEventDisableTiming = 0x02;  // map:8500, drv:125
// musaPointerAttributes (map:9521): the four leading fields of cudaPointerAttributes (drv:1618-1650), then room
// for CUDA 13's `long reserved[8]` (drv:1655), so a runtime that writes the longer struct stays inside ours.
struct MusaPointerAttributes {
  int type;  // enum musaMemoryType
  int device;
  void* device_pointer;
  void* host_pointer;
  long reserved[8];
};

struct MusaApi {
  const char* (*GetErrorString)(musaError_t) = nullptr;                                      // map:8670, api:1248
  musaError_t (*GetLastError)() = nullptr;                                                   // map:8677, api:1165
  musaError_t (*GetDeviceCount)(int*) = nullptr;                                             // map:8649, api:1277
  musaError_t (*SetDevice)(int) = nullptr;                                                   // map:9582, api:1659
  musaError_t (*Malloc)(void**, size_t) = nullptr;                                           // map:9131, api:4581
  musaError_t (*Free)(void*) = nullptr;                                                      // map:8583, api:4752
  musaError_t (*MallocHost)(void**, size_t) = nullptr;                                       // map:9153, api:4618
  musaError_t (*FreeHost)(void*) = nullptr;                                                  // map:8593, api:4775
  musaError_t (*PointerGetAttributes)(MusaPointerAttributes*, const void*) = nullptr;        // map:9522, api:8446
  musaError_t (*StreamCreateWithFlags)(musaStream_t*, unsigned) = nullptr;                   // map:9656
  musaError_t (*StreamDestroy)(musaStream_t) = nullptr;                                      // map:9665, api:2190
  musaError_t (*StreamSynchronize)(musaStream_t) = nullptr;                                  // map:9726, api:2320
  musaError_t (*StreamWaitEvent)(musaStream_t, musaEvent_t, unsigned) = nullptr;             // map:9739, api:2221
  musaError_t (*EventCreateWithFlags)(musaEvent_t*, unsigned) = nullptr;                     // map:8491
  musaError_t (*EventDestroy)(musaEvent_t) = nullptr;                                        // map:8497, api:2981
  musaError_t (*EventRecord)(musaEvent_t, musaStream_t) = nullptr;                           // map:8509, api:2839
  musaError_t (*EventQuery)(musaEvent_t) = nullptr;                                          // map:8506, api:2920
  musaError_t (*EventSynchronize)(musaEvent_t) = nullptr;                                    // map:8523, api:2951
  musaError_t (*Memcpy)(void*, const void*, size_t, int kind) = nullptr;                     // map:9263, api:5957
  musaError_t (*MemcpyAsync)(void*, const void*, size_t, int kind, musaStream_t) = nullptr;  // map:9338, api:6332
  musaError_t (*Memset)(void*, int, size_t) = nullptr;                                       // map:9415, api:6807
  musaError_t (*MemsetAsync)(void*, int, size_t, musaStream_t) = nullptr;                    // map:9440, api:6923
};

int MusaKind(CopyKind k) {
  switch (k) {
    case CopyKind::kHostToDevice:
      return kMusaMemcpyHostToDevice;
    case CopyKind::kDeviceToHost:
      return kMusaMemcpyDeviceToHost;
    case CopyKind::kDeviceToDevice:
      return kMusaMemcpyDeviceToDevice;
  }
  return -1;
}

class MusaRuntime final : public DeviceRuntime {
 public:
  MusaRuntime(const RuntimeRow& row, const std::string& path, const MusaApi& api) : DeviceRuntime(row, path), a_(api) {}

  // "musa error 'invalid device ordinal' (101) in musaSetDevice(99)". Clears the thread's last error (CUDA's
  // rule: a failed call leaves it set until musaGetLastError).
  Status Check(musaError_t r, const std::string& what) const {
    if (r == kMusaSuccess) return Status::Ok();
    (void)a_.GetLastError();
    const char* s = a_.GetErrorString(r);
    return SystemError(fmt::format("{} error '{}' ({}) in {}", name_, s ? s : "?", r, what));
  }

  Result<int> DeviceCount() override {
    int n = 0;
    TSR_RETURN_IF_ERROR(Check(a_.GetDeviceCount(&n), "musaGetDeviceCount"));
    return n;
  }
  Status SetDevice(int device) override {
    TSR_ASSIGN_OR_RETURN(int n, DeviceCount());
    if (device < 0 || device >= n)
      return InvalidArgument(fmt::format("{}: device index {} is not in [0, {})", name_, device, n));
    return Check(a_.SetDevice(device), fmt::format("musaSetDevice({})", device));
  }
  Result<void*> Malloc(size_t bytes) override {
    void* p = nullptr;
    TSR_RETURN_IF_ERROR(Check(a_.Malloc(&p, bytes), fmt::format("musaMalloc({})", bytes)));
    return p;
  }
  Status Free(void* dev) override { return Check(a_.Free(dev), "musaFree"); }
  Result<void*> MallocHost(size_t bytes) override {
    void* p = nullptr;
    TSR_RETURN_IF_ERROR(Check(a_.MallocHost(&p, bytes), fmt::format("musaMallocHost({})", bytes)));
    return p;
  }
  Status FreeHost(void* host) override { return Check(a_.FreeHost(host), "musaFreeHost"); }
  Result<PointerInfo> GetPointerInfo(const void* p) override {
    MusaPointerAttributes at{};
    TSR_RETURN_IF_ERROR(Check(a_.PointerGetAttributes(&at, p), "musaPointerGetAttributes"));
    PointerInfo info;
    if (at.type == kMusaMemoryTypeDevice) {
      info.type = MemoryType::kDevice;
      info.device = at.device;
    } else if (at.type == kMusaMemoryTypeHost) {
      info.type = MemoryType::kPinnedHost;
      info.device = at.device;
    }
    return info;
  }

  Result<Stream> StreamCreate() override {
    musaStream_t s = nullptr;
    TSR_RETURN_IF_ERROR(Check(a_.StreamCreateWithFlags(&s, kMusaStreamNonBlocking), "musaStreamCreateWithFlags"));
    return s;
  }
  Status StreamDestroy(Stream s) override { return Check(a_.StreamDestroy(s), "musaStreamDestroy"); }
  Status StreamSynchronize(Stream s) override { return Check(a_.StreamSynchronize(s), "musaStreamSynchronize"); }

  Result<Event> EventCreate() override {
    musaEvent_t e = nullptr;
    TSR_RETURN_IF_ERROR(Check(a_.EventCreateWithFlags(&e, kMusaEventDisableTiming), "musaEventCreateWithFlags"));
    return e;
  }
  Status EventDestroy(Event e) override { return Check(a_.EventDestroy(e), "musaEventDestroy"); }
  Status EventRecord(Event e, Stream s) override { return Check(a_.EventRecord(e, s), "musaEventRecord"); }
  Result<bool> EventQuery(Event e) override {
    const musaError_t r = a_.EventQuery(e);
    if (r == kMusaNotReady) return false;  // a status, not an error
    TSR_RETURN_IF_ERROR(Check(r, "musaEventQuery"));
    return true;
  }
  Status EventSynchronize(Event e) override { return Check(a_.EventSynchronize(e), "musaEventSynchronize"); }
  Status StreamWaitEvent(Stream s, Event e) override {
    return Check(a_.StreamWaitEvent(s, e, 0), "musaStreamWaitEvent");
  }

  // MUSA's copies and memsets have no destination capacity: it is checked here instead.
  Status Memcpy(void* dst, size_t dst_bytes, const void* src, size_t bytes, CopyKind kind) override {
    TSR_RETURN_IF_ERROR(Room(dst_bytes, bytes, "musaMemcpy"));
    return Check(a_.Memcpy(dst, src, bytes, MusaKind(kind)),
                 fmt::format("musaMemcpy ({}, {} bytes)", CopyKindName(kind), bytes));
  }
  Status MemcpyAsync(void* dst, size_t dst_bytes, const void* src, size_t bytes, CopyKind kind, Stream s) override {
    TSR_RETURN_IF_ERROR(Room(dst_bytes, bytes, "musaMemcpyAsync"));
    return Check(a_.MemcpyAsync(dst, src, bytes, MusaKind(kind), s),
                 fmt::format("musaMemcpyAsync ({}, {} bytes)", CopyKindName(kind), bytes));
  }
  Status Memset(void* dev, size_t dst_bytes, int value, size_t bytes) override {
    TSR_RETURN_IF_ERROR(Room(dst_bytes, bytes, "musaMemset"));
    return Check(a_.Memset(dev, value, bytes), fmt::format("musaMemset ({} bytes)", bytes));
  }
  Status MemsetAsync(void* dev, size_t dst_bytes, int value, size_t bytes, Stream s) override {
    TSR_RETURN_IF_ERROR(Room(dst_bytes, bytes, "musaMemsetAsync"));
    return Check(a_.MemsetAsync(dev, value, bytes, s), fmt::format("musaMemsetAsync ({} bytes)", bytes));
  }

 private:
  Status Room(size_t dst_bytes, size_t bytes, const char* what) const {
    if (bytes <= dst_bytes) return Status::Ok();
    return InvalidArgument(
        fmt::format("{}: {} of {} bytes into a destination of {} bytes", name_, what, bytes, dst_bytes));
  }
  MusaApi a_;
};

}  // namespace

Result<std::shared_ptr<DeviceRuntime>> BindMusa(const RuntimeRow& row, const std::string& path, void* handle) {
  MusaApi a;
  auto bind = [&](auto& fn, const char* sym) -> Status {
    void* p = dlsym(handle, sym);
    if (p == nullptr) return MissingRuntimeSymbol(row, path, sym);
    fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(p);
    return Status::Ok();
  };
  TSR_RETURN_IF_ERROR(bind(a.GetErrorString, "musaGetErrorString"));
  TSR_RETURN_IF_ERROR(bind(a.GetLastError, "musaGetLastError"));
  TSR_RETURN_IF_ERROR(bind(a.GetDeviceCount, "musaGetDeviceCount"));
  TSR_RETURN_IF_ERROR(bind(a.SetDevice, "musaSetDevice"));
  TSR_RETURN_IF_ERROR(bind(a.Malloc, "musaMalloc"));
  TSR_RETURN_IF_ERROR(bind(a.Free, "musaFree"));
  TSR_RETURN_IF_ERROR(bind(a.MallocHost, "musaMallocHost"));
  TSR_RETURN_IF_ERROR(bind(a.FreeHost, "musaFreeHost"));
  TSR_RETURN_IF_ERROR(bind(a.PointerGetAttributes, "musaPointerGetAttributes"));
  TSR_RETURN_IF_ERROR(bind(a.StreamCreateWithFlags, "musaStreamCreateWithFlags"));
  TSR_RETURN_IF_ERROR(bind(a.StreamDestroy, "musaStreamDestroy"));
  TSR_RETURN_IF_ERROR(bind(a.StreamSynchronize, "musaStreamSynchronize"));
  TSR_RETURN_IF_ERROR(bind(a.StreamWaitEvent, "musaStreamWaitEvent"));
  TSR_RETURN_IF_ERROR(bind(a.EventCreateWithFlags, "musaEventCreateWithFlags"));
  TSR_RETURN_IF_ERROR(bind(a.EventDestroy, "musaEventDestroy"));
  TSR_RETURN_IF_ERROR(bind(a.EventRecord, "musaEventRecord"));
  TSR_RETURN_IF_ERROR(bind(a.EventQuery, "musaEventQuery"));
  TSR_RETURN_IF_ERROR(bind(a.EventSynchronize, "musaEventSynchronize"));
  TSR_RETURN_IF_ERROR(bind(a.Memcpy, "musaMemcpy"));
  TSR_RETURN_IF_ERROR(bind(a.MemcpyAsync, "musaMemcpyAsync"));
  TSR_RETURN_IF_ERROR(bind(a.Memset, "musaMemset"));
  TSR_RETURN_IF_ERROR(bind(a.MemsetAsync, "musaMemsetAsync"));
  return std::shared_ptr<DeviceRuntime>(std::make_shared<MusaRuntime>(row, path, a));
}

}  // namespace tessera::comm::internal
