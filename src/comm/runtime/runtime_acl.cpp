// comm/runtime/runtime_acl: the ACL row's DeviceRuntime (Huawei Ascend, libascendcl.so), over function pointers
// declared here from the public API. Source of every name, value and signature, unless a line says otherwise:
// acl_base.h / acl_rt.h as CANN publishes them and Ascend/pytorch vendored them as third_party/acl/inc/acl up to
// commit c4840e3c095952083edcaa4a92f2ae7139bd7c51 ("base:N" = acl_base.h line N, "rt:N" = acl_rt.h line N, the
// citations of tests/shims/acl_abi.h). Rules honoured: aclInit once per process before any other call
// (rt:2293-2294: repeated calls only count), aclrtSetDevice on each thread before resources, and aclrtMemcpy /
// aclrtMemset take the destination's capacity (destMax / maxCount) before the count.
#include <fmt/format.h>

#include <cstdint>
#include <map>
#include <mutex>
#include <set>
#include <vector>

#include "comm/runtime/aclnn.hpp"
#include "comm/runtime/runtime.hpp"

namespace tessera::comm::internal {
namespace {

using aclError = int;                               // base:55
using aclrtStream = void*;                          // base:48
using aclrtEvent = void*;                           // base:49
constexpr aclError kAclSuccess = 0;                 // ACL_SUCCESS, base:66
constexpr aclError kAclRepeatInitialize = 100002;   // ACL_ERROR_REPEAT_INITIALIZE, base:70
constexpr int kAclMemcpyHostToDevice = 1;           // aclrtMemcpyKind ACL_MEMCPY_HOST_TO_DEVICE, rt:115-124
constexpr int kAclMemcpyDeviceToHost = 2;           // ACL_MEMCPY_DEVICE_TO_HOST, rt:115-124
constexpr int kAclMemcpyDeviceToDevice = 3;         // ACL_MEMCPY_DEVICE_TO_DEVICE, rt:115-124
constexpr int kAclMemMallocHugeFirst = 0;           // aclrtMemMallocPolicy ACL_MEM_MALLOC_HUGE_FIRST, rt:126-138
constexpr int kAclEventRecordedStatusComplete = 1;  // aclrtEventRecordedStatus COMPLETE, rt:93-96
constexpr uint32_t kAclMemLocationTypeHost = 0;     // aclrtMemLocationType HOST, rt:226-230
constexpr uint32_t kAclMemLocationTypeDevice = 1;   // ... DEVICE, rt:226-230
// CANN 9.0.0, newer than the vendored headers: aclrtHostRegisterV2's flag ACL_HOST_REG_PINNED ("register
// non-page-locked host memory as page-locked"; runtime API reference,
// canncommercial/900/API/runtimeapi/aclcppdevg_03_2128).
constexpr uint32_t kAclHostRegPinned = 0x10000000u;
struct AclPtrAttributes {  // aclrtPtrAttributes, rt:232-241
  uint32_t location_id;    // aclrtMemLocation.id
  uint32_t location_type;  // aclrtMemLocation.type (an enum: int-sized)
  uint32_t page_size;
  uint32_t rsv[4];
};

struct AclApi {
  aclError (*Init)(const char*) = nullptr;                                             // aclInit, rt:2302
  const char* (*GetRecentErrMsg)() = nullptr;                                          // aclGetRecentErrMsg, rt:2353
  aclError (*GetDeviceCount)(uint32_t*) = nullptr;                                     // rt:916
  aclError (*SetDevice)(int32_t) = nullptr;                                            // rt:824
  aclError (*Malloc)(void**, size_t, int policy) = nullptr;                            // rt:1112
  aclError (*Free)(void*) = nullptr;                                                   // rt:1230
  aclError (*MallocHost)(void**, size_t) = nullptr;                                    // rt:1250
  aclError (*FreeHost)(void*) = nullptr;                                               // rt:1281
  aclError (*PointerGetAttributes)(const void*, AclPtrAttributes*) = nullptr;          // rt:1176
  aclError (*CreateStream)(aclrtStream*) = nullptr;                                    // rt:1669
  aclError (*DestroyStream)(aclrtStream) = nullptr;                                    // rt:1706
  aclError (*SynchronizeStream)(aclrtStream) = nullptr;                                // rt:1734
  aclError (*StreamWaitEvent)(aclrtStream, aclrtEvent) = nullptr;                      // rt:1774
  aclError (*CreateEvent)(aclrtEvent*) = nullptr;                                      // rt:927
  aclError (*DestroyEvent)(aclrtEvent) = nullptr;                                      // rt:971
  aclError (*RecordEvent)(aclrtEvent, aclrtStream) = nullptr;                          // rt:983
  aclError (*QueryEventStatus)(aclrtEvent, int*) = nullptr;                            // rt:1024
  aclError (*SynchronizeEvent)(aclrtEvent) = nullptr;                                  // rt:1071
  aclError (*Memcpy)(void*, size_t destMax, const void*, size_t, int kind) = nullptr;  // rt:1296
  aclError (*MemcpyAsync)(void*, size_t destMax, const void*, size_t, int kind, aclrtStream) = nullptr;  // rt:1346
  aclError (*Memset)(void*, size_t maxCount, int32_t, size_t) = nullptr;                                 // rt:1319
  aclError (*MemsetAsync)(void*, size_t maxCount, int32_t, size_t, aclrtStream) = nullptr;               // rt:1551
  // Optional (CANN 9.0.0: aclcppdevg_03_2128, aclcppdevg_03_1805); null where the file lacks them.
  aclError (*HostRegisterV2)(void*, uint64_t, uint32_t flag) = nullptr;
  aclError (*HostUnregister)(void*) = nullptr;
};

int AclKind(CopyKind k) {
  switch (k) {
    case CopyKind::kHostToDevice:
      return kAclMemcpyHostToDevice;
    case CopyKind::kDeviceToHost:
      return kAclMemcpyDeviceToHost;
    case CopyKind::kDeviceToDevice:
      return kAclMemcpyDeviceToDevice;
  }
  return -1;
}

class AclRuntime final : public DeviceRuntime {
 public:
  AclRuntime(const RuntimeRow& row, const std::string& path, const AclApi& api) : DeviceRuntime(row, path), a_(api) {}

  // "acl error 107001 in aclrtSetDevice(99): <aclGetRecentErrMsg>".
  Status Check(aclError r, const std::string& what) const {
    if (r == kAclSuccess) return Status::Ok();
    const char* m = a_.GetRecentErrMsg();
    return SystemError(fmt::format("{} error {} in {}: {}", name_, r, what, m ? m : "(no recent error message)"));
  }

  Result<int> DeviceCount() override {
    uint32_t n = 0;
    TSR_RETURN_IF_ERROR(Check(a_.GetDeviceCount(&n), "aclrtGetDeviceCount"));
    return static_cast<int>(n);
  }
  Status SetDevice(int device) override {
    TSR_ASSIGN_OR_RETURN(int n, DeviceCount());
    if (device < 0 || device >= n)
      return InvalidArgument(fmt::format("{}: device index {} is not in [0, {})", name_, device, n));
    return Check(a_.SetDevice(device), fmt::format("aclrtSetDevice({})", device));
  }
  Result<void*> Malloc(size_t bytes) override {
    void* p = nullptr;
    TSR_RETURN_IF_ERROR(Check(a_.Malloc(&p, bytes, kAclMemMallocHugeFirst), fmt::format("aclrtMalloc({})", bytes)));
    return p;
  }
  Status Free(void* dev) override { return Check(a_.Free(dev), "aclrtFree"); }
  Result<void*> MallocHost(size_t bytes) override {
    void* p = nullptr;
    TSR_RETURN_IF_ERROR(Check(a_.MallocHost(&p, bytes), fmt::format("aclrtMallocHost({})", bytes)));
    return p;
  }
  Status FreeHost(void* host) override { return Check(a_.FreeHost(host), "aclrtFreeHost"); }
  // Page-locks existing host memory (a shared-memory ring) for the copies: aclrtHostRegisterV2 with
  // ACL_HOST_REG_PINNED, which takes memory that is not page-locked yet, 4 KiB-aligned.
  Status HostRegister(void* host, size_t bytes) override {
    if (a_.HostRegisterV2 == nullptr || a_.HostUnregister == nullptr)
      return Lacks("host memory registration (aclrtHostRegisterV2 and aclrtHostUnregister: CANN 9.0.0 or newer)");
    return Check(a_.HostRegisterV2(host, bytes, kAclHostRegPinned),
                 fmt::format("aclrtHostRegisterV2({}, {}, ACL_HOST_REG_PINNED)", host, bytes));
  }
  Status HostUnregister(void* host) override {
    if (a_.HostUnregister == nullptr) return Lacks("host memory registration (aclrtHostUnregister)");
    return Check(a_.HostUnregister(host), "aclrtHostUnregister");
  }
  Result<PointerInfo> GetPointerInfo(const void* p) override {
    AclPtrAttributes at{};
    TSR_RETURN_IF_ERROR(Check(a_.PointerGetAttributes(p, &at), "aclrtPointerGetAttributes"));
    PointerInfo info;
    if (at.location_type == kAclMemLocationTypeDevice) {
      info.type = MemoryType::kDevice;
      info.device = static_cast<int>(at.location_id);
    } else if (at.location_type == kAclMemLocationTypeHost) {
      info.type = MemoryType::kPinnedHost;
    }
    return info;
  }

  Result<Stream> StreamCreate() override {
    aclrtStream s = nullptr;
    TSR_RETURN_IF_ERROR(Check(a_.CreateStream(&s), "aclrtCreateStream"));
    return s;
  }
  Status StreamDestroy(Stream s) override { return Check(a_.DestroyStream(s), "aclrtDestroyStream"); }
  Status StreamSynchronize(Stream s) override { return Check(a_.SynchronizeStream(s), "aclrtSynchronizeStream"); }

  Result<Event> EventCreate() override {
    aclrtEvent e = nullptr;
    TSR_RETURN_IF_ERROR(Check(a_.CreateEvent(&e), "aclrtCreateEvent"));
    return e;
  }
  Status EventDestroy(Event e) override { return Check(a_.DestroyEvent(e), "aclrtDestroyEvent"); }
  Status EventRecord(Event e, Stream s) override { return Check(a_.RecordEvent(e, s), "aclrtRecordEvent"); }
  Result<bool> EventQuery(Event e) override {
    int st = 0;
    TSR_RETURN_IF_ERROR(Check(a_.QueryEventStatus(e, &st), "aclrtQueryEventStatus"));
    return st == kAclEventRecordedStatusComplete;
  }
  Status EventSynchronize(Event e) override { return Check(a_.SynchronizeEvent(e), "aclrtSynchronizeEvent"); }
  Status StreamWaitEvent(Stream s, Event e) override { return Check(a_.StreamWaitEvent(s, e), "aclrtStreamWaitEvent"); }

  Status Memcpy(void* dst, size_t dst_bytes, const void* src, size_t bytes, CopyKind kind) override {
    return Check(a_.Memcpy(dst, dst_bytes, src, bytes, AclKind(kind)),
                 fmt::format("aclrtMemcpy ({}, {} bytes)", CopyKindName(kind), bytes));
  }
  Status MemcpyAsync(void* dst, size_t dst_bytes, const void* src, size_t bytes, CopyKind kind, Stream s) override {
    return Check(a_.MemcpyAsync(dst, dst_bytes, src, bytes, AclKind(kind), s),
                 fmt::format("aclrtMemcpyAsync ({}, {} bytes)", CopyKindName(kind), bytes));
  }
  Status Memset(void* dev, size_t dst_bytes, int value, size_t bytes) override {
    return Check(a_.Memset(dev, dst_bytes, value, bytes), fmt::format("aclrtMemset ({} bytes)", bytes));
  }
  Status MemsetAsync(void* dev, size_t dst_bytes, int value, size_t bytes, Stream s) override {
    return Check(a_.MemsetAsync(dev, dst_bytes, value, bytes, s), fmt::format("aclrtMemsetAsync ({} bytes)", bytes));
  }

  // Widening through CANN's operator API (aclnn.hpp): this row has no Tessera kernels.
  Status WidenSupport() override { return AclnnOps::Get().Support(); }
  Status Widen(void* dst, const void* src, size_t n, DType src_type, Stream s) override {
    return AclnnOps::Get().Widen(dst, src, n, src_type, s, &AclRuntime::Workspace, this);
  }

 protected:
  Status CheckCode(int code, const std::string& what) const override { return Check(code, what); }

 private:
  // An operator's workspace: device memory per stream, grown as needed and used in that stream's order. A smaller
  // buffer replaced while work queued earlier may still use it is kept: like the runtime, they live as long as the
  // process (freeing device memory at exit, after the runtime's own teardown, is not safe).
  static Result<void*> Workspace(void* self, size_t bytes, void* stream) {
    auto* rt = static_cast<AclRuntime*>(self);
    std::lock_guard<std::mutex> lock(rt->ws_mu_);
    Buffer& w = rt->workspace_[stream];
    if (w.bytes >= bytes) return w.p;
    if (w.p != nullptr) rt->retired_.push_back(w.p);
    w = Buffer{};
    TSR_ASSIGN_OR_RETURN(void* p, rt->Malloc(bytes));
    w = Buffer{p, bytes};
    return p;
  }
  struct Buffer {
    void* p = nullptr;
    size_t bytes = 0;
  };
  AclApi a_;
  std::mutex ws_mu_;
  std::map<void*, Buffer> workspace_;
  std::vector<void*> retired_;
};

}  // namespace

Result<std::shared_ptr<DeviceRuntime>> BindAcl(const RuntimeRow& row, const dl::Library& lib) {
  AclApi a;
  auto bind = [&](auto& fn, const char* sym) { return lib.Bind(fn, sym); };
  TSR_RETURN_IF_ERROR(bind(a.Init, "aclInit"));
  TSR_RETURN_IF_ERROR(bind(a.GetRecentErrMsg, "aclGetRecentErrMsg"));
  TSR_RETURN_IF_ERROR(bind(a.GetDeviceCount, "aclrtGetDeviceCount"));
  TSR_RETURN_IF_ERROR(bind(a.SetDevice, "aclrtSetDevice"));
  TSR_RETURN_IF_ERROR(bind(a.Malloc, "aclrtMalloc"));
  TSR_RETURN_IF_ERROR(bind(a.Free, "aclrtFree"));
  TSR_RETURN_IF_ERROR(bind(a.MallocHost, "aclrtMallocHost"));
  TSR_RETURN_IF_ERROR(bind(a.FreeHost, "aclrtFreeHost"));
  TSR_RETURN_IF_ERROR(bind(a.PointerGetAttributes, "aclrtPointerGetAttributes"));
  TSR_RETURN_IF_ERROR(bind(a.CreateStream, "aclrtCreateStream"));
  TSR_RETURN_IF_ERROR(bind(a.DestroyStream, "aclrtDestroyStream"));
  TSR_RETURN_IF_ERROR(bind(a.SynchronizeStream, "aclrtSynchronizeStream"));
  TSR_RETURN_IF_ERROR(bind(a.StreamWaitEvent, "aclrtStreamWaitEvent"));
  TSR_RETURN_IF_ERROR(bind(a.CreateEvent, "aclrtCreateEvent"));
  TSR_RETURN_IF_ERROR(bind(a.DestroyEvent, "aclrtDestroyEvent"));
  TSR_RETURN_IF_ERROR(bind(a.RecordEvent, "aclrtRecordEvent"));
  TSR_RETURN_IF_ERROR(bind(a.QueryEventStatus, "aclrtQueryEventStatus"));
  TSR_RETURN_IF_ERROR(bind(a.SynchronizeEvent, "aclrtSynchronizeEvent"));
  TSR_RETURN_IF_ERROR(bind(a.Memcpy, "aclrtMemcpy"));
  TSR_RETURN_IF_ERROR(bind(a.MemcpyAsync, "aclrtMemcpyAsync"));
  TSR_RETURN_IF_ERROR(bind(a.Memset, "aclrtMemset"));
  TSR_RETURN_IF_ERROR(bind(a.MemsetAsync, "aclrtMemsetAsync"));
  lib.BindOptional(a.HostRegisterV2, "aclrtHostRegisterV2");
  lib.BindOptional(a.HostUnregister, "aclrtHostUnregister");
  auto rt = std::make_shared<AclRuntime>(row, lib.file(), a);
  // aclInit once per process (for each file loaded: dlopen of the same file gives the same handle); a repeated
  // call would only count (rt:2293-2294) or be ACL_ERROR_REPEAT_INITIALIZE, accepted too.
  static std::mutex mu;
  static std::set<void*> initialized;
  std::lock_guard<std::mutex> lock(mu);
  if (initialized.count(lib.handle()) == 0) {
    const aclError r = a.Init(nullptr);
    if (r != kAclRepeatInitialize) {
      TSR_RETURN_IF_ERROR(rt->Check(r, "aclInit"));
    }
    initialized.insert(lib.handle());
  }
  return std::shared_ptr<DeviceRuntime>(rt);
}

}  // namespace tessera::comm::internal
