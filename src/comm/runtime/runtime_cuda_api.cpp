// comm/runtime/runtime_cuda_api: the DeviceRuntime of every row whose shape is CUDA's runtime API under a prefix
// (RuntimeShape::kCudaApi): the `cuda` row (NVIDIA, libcudart.so.13: prefix "cuda") and the `musa` row (Moore
// Threads, libmusart.so: prefix "musa"), over function pointers declared here; no vendor header is needed to build.
//
// Sources. Every VALUE and SIGNATURE is CUDA's, from NVIDIA's public CUDA 13.0 headers ("drv:N" = driver_types.h
// line N, "api:N" = cuda_runtime_api.h line N, "cu:N" = cuda.h line N): for the cuda row that is the ABI itself.
// For the musa row the NAMES come from MooreThreads/torch_musa's mapping torch_musa/utils/mapping/general.json at
// commit 8b583b3f2fd0d9d3d9e7 ("map:N" = line N), the soname from torch_musa/csrc/core/musart.cpp:14; MUSA's
// headers are not published, so its values and signatures are an ASSUMPTION (CUDA's, which torch_musa's 1:1
// renaming implies but does not prove; tests/shims/musa_abi.h marks each).
//
// The device bridge's calls (mapped host memory, registration, the driver's stream memory operations) are bound
// only for a row whose flags claim them (the musa row claims none), and the driver's entry points are optional:
// a driver without cuStreamWaitValue32 leaves the rank on Tessera's spin-wait kernel.
#include <fmt/format.h>

#include <mutex>

#include "comm/runtime/runtime.hpp"

namespace tessera::comm::internal {
namespace {

using ApiError = int;                             // cudaError_t, an int-sized enum (drv:199); musaError_t map:8487
using ApiStream = void*;                          // cudaStream_t, an opaque pointer (drv:2998); musaStream_t map:9745
using ApiEvent = void*;                           // cudaEvent_t (drv:3003); musaEvent_t map:8528
constexpr ApiError kSuccess = 0;                  // cudaSuccess, drv:199; musaSuccess map:9746
constexpr ApiError kNotReady = 600;               // cudaErrorNotReady, drv:767; musaErrorNotReady map:8445
constexpr int kMemcpyHostToDevice = 1;            // cudaMemcpyKind, drv:1247-1251; musaMemcpyHostToDevice map:9371
constexpr int kMemcpyDeviceToHost = 2;            // map:9346
constexpr int kMemcpyDeviceToDevice = 3;          // map:9345
constexpr int kMemoryTypeHost = 1;                // cudaMemoryType, drv:1236-1239; musaMemoryTypeHost map:9412
constexpr int kMemoryTypeDevice = 2;              // map:9411
constexpr int kMemoryTypeManaged = 3;             // cudaMemoryTypeManaged, drv:1239
constexpr unsigned kStreamNonBlocking = 0x01;     // cudaStreamNonBlocking, drv:101; map:9711
constexpr unsigned kEventDisableTiming = 0x02;    // cudaEventDisableTiming, drv:125; map:8500
constexpr unsigned kHostAllocMapped = 0x02;       // cudaHostAllocMapped, drv:89; musaHostAllocMapped map:9035
constexpr unsigned kHostRegisterDefault = 0x00;   // cudaHostRegisterDefault, drv:92
constexpr unsigned long long kEnableDefault = 0;  // cudaEnableDefault, drv:3660
constexpr int kEntryPointSuccess = 0;             // cudaDriverEntryPointSuccess, drv:3669
constexpr unsigned kDriverVersion = 12000;        // the driver ABI version asked for (the _v2 stream memory ops)
// The driver's (cuda.h): CUresult is an int-sized enum with CUDA_SUCCESS 0 (cu:2517); CUdeviceptr unsigned long long
// (cu:274); CUdevice int (cu:280); CU_STREAM_WAIT_VALUE_GEQ 0x0 (cu:486); CU_STREAM_WRITE_VALUE_DEFAULT 0x0 (cu:509).
using CuResult = int;
using CuDevicePtr = unsigned long long;
constexpr unsigned kWaitValueGeq = 0x0, kWriteValueDefault = 0x0;

// cudaPointerAttributes (drv:1618-1650): the four leading fields, then room for CUDA 13's `long reserved[8]`
// (drv:1655), so a runtime that writes the longer struct stays inside ours. musaPointerAttributes map:9521.
struct PointerAttributes {
  int type;  // enum cudaMemoryType
  int device;
  void* device_pointer;
  void* host_pointer;
  long reserved[8];
};

struct Api {
  const char* (*GetErrorString)(ApiError) = nullptr;                                   // api:1248; map:8670
  ApiError (*GetLastError)() = nullptr;                                                // api:1165; map:8677
  ApiError (*GetDeviceCount)(int*) = nullptr;                                          // api:1277; map:8649
  ApiError (*SetDevice)(int) = nullptr;                                                // api:1659; map:9582
  ApiError (*Malloc)(void**, size_t) = nullptr;                                        // api:4581; map:9131
  ApiError (*Free)(void*) = nullptr;                                                   // api:4752; map:8583
  ApiError (*MallocHost)(void**, size_t) = nullptr;                                    // api:4618; map:9153
  ApiError (*FreeHost)(void*) = nullptr;                                               // api:4775; map:8593
  ApiError (*PointerGetAttributes)(PointerAttributes*, const void*) = nullptr;         // api:8446; map:9522
  ApiError (*StreamCreateWithFlags)(ApiStream*, unsigned) = nullptr;                   // api:1907; map:9656
  ApiError (*StreamDestroy)(ApiStream) = nullptr;                                      // api:2190; map:9665
  ApiError (*StreamSynchronize)(ApiStream) = nullptr;                                  // api:2320; map:9726
  ApiError (*StreamWaitEvent)(ApiStream, ApiEvent, unsigned) = nullptr;                // api:2221; map:9739
  ApiError (*EventCreateWithFlags)(ApiEvent*, unsigned) = nullptr;                     // api:2798; map:8491
  ApiError (*EventDestroy)(ApiEvent) = nullptr;                                        // api:2981; map:8497
  ApiError (*EventRecord)(ApiEvent, ApiStream) = nullptr;                              // api:2839; map:8509
  ApiError (*EventQuery)(ApiEvent) = nullptr;                                          // api:2920; map:8506
  ApiError (*EventSynchronize)(ApiEvent) = nullptr;                                    // api:2951; map:8523
  ApiError (*Memcpy)(void*, const void*, size_t, int kind) = nullptr;                  // api:5957; map:9263
  ApiError (*MemcpyAsync)(void*, const void*, size_t, int kind, ApiStream) = nullptr;  // api:6332; map:9338
  ApiError (*Memset)(void*, int, size_t) = nullptr;                                    // api:6807; map:9415
  ApiError (*MemsetAsync)(void*, int, size_t, ApiStream) = nullptr;                    // api:6923; map:9440
  // The device bridge's (rows with host_register / stream_memops only).
  ApiError (*HostAlloc)(void**, size_t, unsigned) = nullptr;            // api:4887
  ApiError (*HostGetDevicePointer)(void**, void*, unsigned) = nullptr;  // api:5052
  ApiError (*HostRegister)(void*, size_t, unsigned) = nullptr;          // api:4984
  ApiError (*HostUnregister)(void*) = nullptr;                          // api:5007
  ApiError (*GetDriverEntryPointByVersion)(const char*, void**, unsigned, unsigned long long,
                                           int*) = nullptr;  // api:13178 (optional)
};

// The driver's entry points, found through GetDriverEntryPointByVersion (each optional).
struct DriverApi {
  CuResult (*StreamWaitValue32)(void*, CuDevicePtr, unsigned, unsigned) = nullptr;   // cu:16936
  CuResult (*StreamWriteValue32)(void*, CuDevicePtr, unsigned, unsigned) = nullptr;  // cu:17008
  CuResult (*MemGetAddressRange)(CuDevicePtr*, size_t*, CuDevicePtr) = nullptr;      // cu:8742
  CuResult (*DeviceGet)(int*, int) = nullptr;                                        // cu:5288
  CuResult (*DeviceGetName)(char*, int, int) = nullptr;                              // cu:5349
};

int ApiKind(CopyKind k) {
  switch (k) {
    case CopyKind::kHostToDevice:
      return kMemcpyHostToDevice;
    case CopyKind::kDeviceToHost:
      return kMemcpyDeviceToHost;
    case CopyKind::kDeviceToDevice:
      return kMemcpyDeviceToDevice;
  }
  return -1;
}

class CudaApiRuntime final : public DeviceRuntime {
 public:
  CudaApiRuntime(const RuntimeRow& row, const std::string& path, const Api& api) : DeviceRuntime(row, path), a_(api) {}

  // "cuda error 'invalid device ordinal' (101) in cudaSetDevice(99)". Clears the thread's last error (CUDA's
  // rule: a failed call leaves it set until cudaGetLastError).
  Status Check(ApiError r, const std::string& what) const {
    if (r == kSuccess) return Status::Ok();
    (void)a_.GetLastError();
    const char* s = a_.GetErrorString(r);
    return SystemError(fmt::format("{} error '{}' ({}) in {}", name_, s ? s : "?", r, what));
  }
  std::string Call(const char* suffix) const { return prefix_ + suffix; }  // "cuda" + "Malloc"

  Result<int> DeviceCount() override {
    int n = 0;
    TSR_RETURN_IF_ERROR(Check(a_.GetDeviceCount(&n), Call("GetDeviceCount")));
    return n;
  }
  Status SetDevice(int device) override {
    TSR_ASSIGN_OR_RETURN(int n, DeviceCount());
    if (device < 0 || device >= n)
      return InvalidArgument(fmt::format("{}: device index {} is not in [0, {})", name_, device, n));
    return Check(a_.SetDevice(device), fmt::format("{}({})", Call("SetDevice"), device));
  }
  Result<std::string> DeviceName(int device) override {
    const DriverApi& d = Driver();
    int dev = 0;
    char name[256] = {};
    if (d.DeviceGet == nullptr || d.DeviceGetName == nullptr || d.DeviceGet(&dev, device) != 0 ||
        d.DeviceGetName(name, sizeof(name) - 1, dev) != 0)
      return DeviceRuntime::DeviceName(device);
    return std::string(name);
  }
  Result<void*> Malloc(size_t bytes) override {
    void* p = nullptr;
    TSR_RETURN_IF_ERROR(Check(a_.Malloc(&p, bytes), fmt::format("{}({})", Call("Malloc"), bytes)));
    return p;
  }
  Status Free(void* dev) override { return Check(a_.Free(dev), Call("Free")); }
  Result<void*> MallocHost(size_t bytes) override {
    void* p = nullptr;
    TSR_RETURN_IF_ERROR(Check(a_.MallocHost(&p, bytes), fmt::format("{}({})", Call("MallocHost"), bytes)));
    return p;
  }
  Status FreeHost(void* host) override { return Check(a_.FreeHost(host), Call("FreeHost")); }
  Result<PointerInfo> GetPointerInfo(const void* p) override {
    PointerAttributes at{};
    TSR_RETURN_IF_ERROR(Check(a_.PointerGetAttributes(&at, p), Call("PointerGetAttributes")));
    PointerInfo info;
    if (at.type == kMemoryTypeDevice || at.type == kMemoryTypeManaged) {
      info.type = at.type == kMemoryTypeDevice ? MemoryType::kDevice : MemoryType::kManaged;
      info.device = at.device;
      const DriverApi& d = Driver();
      CuDevicePtr base = 0;
      size_t size = 0;
      if (d.MemGetAddressRange != nullptr &&
          d.MemGetAddressRange(&base, &size, reinterpret_cast<CuDevicePtr>(p)) == 0) {
        info.base = static_cast<uintptr_t>(base);
        info.extent = size;
      }
    } else if (at.type == kMemoryTypeHost) {
      info.type = MemoryType::kPinnedHost;
      info.device = at.device;
    }
    return info;
  }

  Result<Stream> StreamCreate() override {
    ApiStream s = nullptr;
    TSR_RETURN_IF_ERROR(Check(a_.StreamCreateWithFlags(&s, kStreamNonBlocking), Call("StreamCreateWithFlags")));
    return s;
  }
  Status StreamDestroy(Stream s) override { return Check(a_.StreamDestroy(s), Call("StreamDestroy")); }
  Status StreamSynchronize(Stream s) override { return Check(a_.StreamSynchronize(s), Call("StreamSynchronize")); }

  Result<Event> EventCreate() override {
    ApiEvent e = nullptr;
    TSR_RETURN_IF_ERROR(Check(a_.EventCreateWithFlags(&e, kEventDisableTiming), Call("EventCreateWithFlags")));
    return e;
  }
  Status EventDestroy(Event e) override { return Check(a_.EventDestroy(e), Call("EventDestroy")); }
  Status EventRecord(Event e, Stream s) override { return Check(a_.EventRecord(e, s), Call("EventRecord")); }
  Result<bool> EventQuery(Event e) override {
    const ApiError r = a_.EventQuery(e);
    if (r == kNotReady) return false;  // a status, not an error
    TSR_RETURN_IF_ERROR(Check(r, Call("EventQuery")));
    return true;
  }
  Status EventSynchronize(Event e) override { return Check(a_.EventSynchronize(e), Call("EventSynchronize")); }
  Status StreamWaitEvent(Stream s, Event e) override {
    return Check(a_.StreamWaitEvent(s, e, 0), Call("StreamWaitEvent"));
  }

  // CUDA's copies and memsets have no destination capacity: it is checked here instead.
  Status Memcpy(void* dst, size_t dst_bytes, const void* src, size_t bytes, CopyKind kind) override {
    TSR_RETURN_IF_ERROR(Room(dst_bytes, bytes, "Memcpy"));
    return Check(a_.Memcpy(dst, src, bytes, ApiKind(kind)),
                 fmt::format("{} ({}, {} bytes)", Call("Memcpy"), CopyKindName(kind), bytes));
  }
  Status MemcpyAsync(void* dst, size_t dst_bytes, const void* src, size_t bytes, CopyKind kind, Stream s) override {
    TSR_RETURN_IF_ERROR(Room(dst_bytes, bytes, "MemcpyAsync"));
    return Check(a_.MemcpyAsync(dst, src, bytes, ApiKind(kind), s),
                 fmt::format("{} ({}, {} bytes)", Call("MemcpyAsync"), CopyKindName(kind), bytes));
  }
  Status Memset(void* dev, size_t dst_bytes, int value, size_t bytes) override {
    TSR_RETURN_IF_ERROR(Room(dst_bytes, bytes, "Memset"));
    return Check(a_.Memset(dev, value, bytes), fmt::format("{} ({} bytes)", Call("Memset"), bytes));
  }
  Status MemsetAsync(void* dev, size_t dst_bytes, int value, size_t bytes, Stream s) override {
    TSR_RETURN_IF_ERROR(Room(dst_bytes, bytes, "MemsetAsync"));
    return Check(a_.MemsetAsync(dev, value, bytes, s), fmt::format("{} ({} bytes)", Call("MemsetAsync"), bytes));
  }

  Result<MappedHost> HostAllocMapped(size_t bytes) override {
    if (a_.HostAlloc == nullptr || a_.HostGetDevicePointer == nullptr) return Lacks("mapped host allocation");
    MappedHost m;
    TSR_RETURN_IF_ERROR(
        Check(a_.HostAlloc(&m.host, bytes, kHostAllocMapped), fmt::format("{}({}, mapped)", Call("HostAlloc"), bytes)));
    Status s = Check(a_.HostGetDevicePointer(&m.dev, m.host, 0), Call("HostGetDevicePointer"));
    if (!s.ok()) {
      (void)a_.FreeHost(m.host);
      return s;
    }
    return m;
  }
  Status HostRegister(void* host, size_t bytes) override {
    if (a_.HostRegister == nullptr) return Lacks("host memory registration");
    return Check(a_.HostRegister(host, bytes, kHostRegisterDefault),
                 fmt::format("{} ({} bytes)", Call("HostRegister"), bytes));
  }
  Status HostUnregister(void* host) override {
    if (a_.HostUnregister == nullptr) return Lacks("host memory registration");
    return Check(a_.HostUnregister(host), Call("HostUnregister"));
  }
  Status StreamWriteValue32(Stream s, uint32_t* dev_addr, uint32_t value) override {
    const DriverApi& d = Driver();
    if (d.StreamWriteValue32 == nullptr) return Lacks("stream write-value (cuStreamWriteValue32)");
    // Default flags: the write is preceded by a memory fence, so earlier copies are visible first.
    const CuResult r = d.StreamWriteValue32(s, reinterpret_cast<CuDevicePtr>(dev_addr), value, kWriteValueDefault);
    if (r != 0) return SystemError(fmt::format("{}: cuStreamWriteValue32 failed ({})", name_, r));
    return Status::Ok();
  }
  Status StreamWaitValue32(Stream s, uint32_t* dev_addr, uint32_t value) override {
    const DriverApi& d = Driver();
    if (d.StreamWaitValue32 == nullptr) return Lacks("stream wait-value (cuStreamWaitValue32)");
    const CuResult r = d.StreamWaitValue32(s, reinterpret_cast<CuDevicePtr>(dev_addr), value, kWaitValueGeq);
    if (r != 0) return SystemError(fmt::format("{}: cuStreamWaitValue32 failed ({})", name_, r));
    return Status::Ok();
  }

 protected:
  Status CheckCode(int code, const std::string& what) const override { return Check(code, what); }

 private:
  Status Room(size_t dst_bytes, size_t bytes, const char* what) const {
    if (bytes <= dst_bytes) return Status::Ok();
    return InvalidArgument(
        fmt::format("{}: {} of {} bytes into a destination of {} bytes", name_, Call(what), bytes, dst_bytes));
  }
  // The driver's entry points, looked up once (the first call creates no context: the lookup is a table query).
  const DriverApi& Driver() {
    std::call_once(driver_once_, [this] {
      if (a_.GetDriverEntryPointByVersion == nullptr) return;
      auto get = [&](auto& fn, const char* sym, bool bridge) {
        if (bridge && !row_.stream_memops) return;
        void* p = nullptr;
        int q = -1;
        if (a_.GetDriverEntryPointByVersion(sym, &p, kDriverVersion, kEnableDefault, &q) == kSuccess &&
            q == kEntryPointSuccess)
          fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(p);
        else
          (void)a_.GetLastError();
      };
      get(driver_.StreamWaitValue32, "cuStreamWaitValue32", true);
      get(driver_.StreamWriteValue32, "cuStreamWriteValue32", true);
      get(driver_.MemGetAddressRange, "cuMemGetAddressRange", false);
      get(driver_.DeviceGet, "cuDeviceGet", false);
      get(driver_.DeviceGetName, "cuDeviceGetName", false);
    });
    return driver_;
  }
  Api a_;
  std::once_flag driver_once_;
  DriverApi driver_;
};

}  // namespace

Result<std::shared_ptr<DeviceRuntime>> BindCudaApi(const RuntimeRow& row, const dl::Library& lib) {
  Api a;
  const std::string prefix = row.prefix ? row.prefix : "";
  auto bind = [&](auto& fn, const char* suffix) { return lib.Bind(fn, prefix + suffix); };
  TSR_RETURN_IF_ERROR(bind(a.GetErrorString, "GetErrorString"));
  TSR_RETURN_IF_ERROR(bind(a.GetLastError, "GetLastError"));
  TSR_RETURN_IF_ERROR(bind(a.GetDeviceCount, "GetDeviceCount"));
  TSR_RETURN_IF_ERROR(bind(a.SetDevice, "SetDevice"));
  TSR_RETURN_IF_ERROR(bind(a.Malloc, "Malloc"));
  TSR_RETURN_IF_ERROR(bind(a.Free, "Free"));
  TSR_RETURN_IF_ERROR(bind(a.MallocHost, "MallocHost"));
  TSR_RETURN_IF_ERROR(bind(a.FreeHost, "FreeHost"));
  TSR_RETURN_IF_ERROR(bind(a.PointerGetAttributes, "PointerGetAttributes"));
  TSR_RETURN_IF_ERROR(bind(a.StreamCreateWithFlags, "StreamCreateWithFlags"));
  TSR_RETURN_IF_ERROR(bind(a.StreamDestroy, "StreamDestroy"));
  TSR_RETURN_IF_ERROR(bind(a.StreamSynchronize, "StreamSynchronize"));
  TSR_RETURN_IF_ERROR(bind(a.StreamWaitEvent, "StreamWaitEvent"));
  TSR_RETURN_IF_ERROR(bind(a.EventCreateWithFlags, "EventCreateWithFlags"));
  TSR_RETURN_IF_ERROR(bind(a.EventDestroy, "EventDestroy"));
  TSR_RETURN_IF_ERROR(bind(a.EventRecord, "EventRecord"));
  TSR_RETURN_IF_ERROR(bind(a.EventQuery, "EventQuery"));
  TSR_RETURN_IF_ERROR(bind(a.EventSynchronize, "EventSynchronize"));
  TSR_RETURN_IF_ERROR(bind(a.Memcpy, "Memcpy"));
  TSR_RETURN_IF_ERROR(bind(a.MemcpyAsync, "MemcpyAsync"));
  TSR_RETURN_IF_ERROR(bind(a.Memset, "Memset"));
  TSR_RETURN_IF_ERROR(bind(a.MemsetAsync, "MemsetAsync"));
  if (row.host_register) {  // the bridge's calls: required where the row claims them
    TSR_RETURN_IF_ERROR(bind(a.HostAlloc, "HostAlloc"));
    TSR_RETURN_IF_ERROR(bind(a.HostGetDevicePointer, "HostGetDevicePointer"));
    TSR_RETURN_IF_ERROR(bind(a.HostRegister, "HostRegister"));
    TSR_RETURN_IF_ERROR(bind(a.HostUnregister, "HostUnregister"));
  }
  // Optional: the driver's entry points (stream memory operations, allocation extents, device names).
  lib.BindOptional(a.GetDriverEntryPointByVersion, prefix + "GetDriverEntryPointByVersion");
  return std::shared_ptr<DeviceRuntime>(std::make_shared<CudaApiRuntime>(row, lib.file(), a));
}

}  // namespace tessera::comm::internal
