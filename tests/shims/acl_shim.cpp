// tests/shims/acl_shim: libascendcl.so, a test-only host shim of Ascend's ACL runtime (declarations and their
// sources: acl_abi.h). Device memory, streams and events are shim_runtime's; this file enforces ACL's documented
// rules and returns ACL's codes. The rules modelled are CANN 8.0.0's (the strictest of the versions read):
//   [memcpy]   aclrtMemcpy, https://www.hiascend.com/document/detail/en/canncommercial/800/apiref/appdevgapi/
//              aclcppdevg_03_0105.html: copies at once, no stream synchronisation; `kind` is "reserved": the
//              runtime judges the direction from the pointers.
//   [async]    aclrtMemcpyAsync, .../canncommercial/800/apiref/appdevgapi/aclcppdevg_03_0106.html (all models):
//              src and dst must be 64-byte aligned; ACL_MEMCPY_HOST_TO_HOST returns ACL_ERROR_RT_FEATURE_NOT_SUPPORT;
//              with HOST_TO_DEVICE/DEVICE_TO_HOST and host memory not from aclrtMallocHost "this API does not
//              report an error, but an unpredictable error may occur when the task is executed". (CANN 8.5.0,
//              .../canncommercial/850/API/appdevgapi/aclcppdevg_03_0106.html, instead copies pageable memory
//              synchronously: TESSERA_SHIM_ACL_PAGEABLE=sync selects that.)
//   [init]     aclError table, .../canncommercial/800/apiref/appdevgapi/aclcppdevg_03_1345.html:
//              ACL_ERROR_UNINITIALIZE "check that aclInit has been called ... before any other AscendCL API call";
//              ACL_ERROR_RT_CONTEXT_NULL "check whether aclrtSetCurrentContext or aclrtSetDevice was called".
//   [event]    aclrtEventRecordedStatus, .../canncommercial/800/apiref/appdevgapi/aclcppdevg_03_1388.html:
//              NOT_READY = not recorded, or recorded but not (successfully) executed.
//   [host]     aclrtMallocHost, .../canncommercial/850/API/appdevgapi/aclcppdevg_03_0101.html: 64-byte-aligned
//              start, size must not be 0.
// Which code a violated rule returns is not documented where a rule says only "failure"; those choices are the
// shim's and are marked "code: shim's choice". Stricter than CANN on purpose: aclrtMemcpy checks `kind` against
// the pointers like the async call does (TESSERA_SHIM_ACL_STRICT_KIND=0 ignores it, as documented).
#include <pthread.h>

#include <cstdio>
#include <cstring>
#include <mutex>
#include <vector>

#include "acl_abi.h"
#include "shim_runtime.hpp"

using tshim::Fmt;
using tshim::MemKind;
using tshim::PtrInfo;
using tshim::Status;

namespace {

tshim::Memory g_mem;
tshim::Handles<tshim::Stream> g_streams;
tshim::Handles<tshim::Event> g_events;
std::mutex g_mu;
int g_init_refs = 0;
std::vector<std::shared_ptr<tshim::Stream>> g_default;  // per device, made on first use
thread_local int t_device = -1;
thread_local std::string t_err;
thread_local std::string t_err_out;

int DeviceCount() { return tshim::DeviceCount("ASCEND_RT_VISIBLE_DEVICES"); }

aclError Fail(aclError code, const std::string& msg) {
  t_err = Fmt("%s (aclError %d)", msg.c_str(), code);
  if (tshim::EnvU64("TESSERA_SHIM_VERBOSE", 0)) std::fprintf(stderr, "[acl shim] %s\n", t_err.c_str());
  return code;
}

bool Initialized() {
  std::lock_guard<std::mutex> l(g_mu);
  return g_init_refs > 0;
}

#define ACL_REQUIRE_INIT(fn) \
  if (!Initialized()) return Fail(ACL_ERROR_UNINITIALIZE, fn ": aclInit has not been called")  // [init]
#define ACL_REQUIRE_DEVICE(fn) \
  if (t_device < 0) return Fail(ACL_ERROR_RT_CONTEXT_NULL, fn ": no device set (call aclrtSetDevice)")  // [init]

std::shared_ptr<tshim::Stream> DefaultStream(int device) {
  std::lock_guard<std::mutex> l(g_mu);
  if (g_default.size() < static_cast<size_t>(DeviceCount())) g_default.resize(static_cast<size_t>(DeviceCount()));
  auto& s = g_default[static_cast<size_t>(device)];
  if (!s) s = std::make_shared<tshim::Stream>(device, tshim::EnvU64("TESSERA_SHIM_STREAM_DELAY_US", 0));
  return s;
}

// NULL is the current device's default stream (aclrtStreamWaitEvent: "If using the default Stream, set NULL").
std::shared_ptr<tshim::Stream> Resolve(aclrtStream s) {
  if (!s) return t_device < 0 ? nullptr : DefaultStream(t_device);
  return g_streams.Get(s);
}

const char* KindName(int k) {
  static const char* const kNames[] = {
      "HOST_TO_HOST", "HOST_TO_DEVICE",        "DEVICE_TO_HOST",         "DEVICE_TO_DEVICE",
      "DEFAULT",      "HOST_TO_BUF_TO_DEVICE", "INNER_DEVICE_TO_DEVICE", "INTER_DEVICE_TO_DEVICE"};
  return k >= 0 && k <= 7 ? kNames[k] : "?";
}
const char* What(const PtrInfo& p) {
  return p.kind == MemKind::kDevice       ? "device memory"
         : p.kind == MemKind::kPinnedHost ? "aclrtMallocHost memory"
                                          : "host memory";
}

struct CopyPlan {
  PtrInfo dst, src;
  bool pageable = false;  // an H2D/D2H copy touches host memory that aclrtMallocHost did not allocate
};

aclError CheckCopy(const char* fn, void* dst, size_t destMax, const void* src, size_t count, aclrtMemcpyKind kind,
                   bool async, CopyPlan* plan) {
  if (!dst || !src) return Fail(ACL_ERROR_INVALID_PARAM, Fmt("%s: dst %p or src %p is NULL", fn, dst, src));
  if (count > destMax)  // code: shim's choice (the docs say only "failure")
    return Fail(ACL_ERROR_INVALID_PARAM, Fmt("%s: count %zu exceeds destMax %zu", fn, count, destMax));
  const int k = static_cast<int>(kind);
  if (k < 0 || k > 7) return Fail(ACL_ERROR_INVALID_PARAM, Fmt("%s: kind %d is not an aclrtMemcpyKind", fn, k));
  plan->dst = g_mem.Lookup(dst);
  plan->src = g_mem.Lookup(src);
  for (const PtrInfo* p : {&plan->dst, &plan->src}) {
    if (p->kind != MemKind::kUnregistered && count > p->avail)
      return Fail(ACL_ERROR_INVALID_PARAM, Fmt("%s: count %zu runs past the end of the %zu-byte %s at %p", fn, count,
                                               p->size, What(*p), p->base));
  }
  const bool dd = plan->dst.kind == MemKind::kDevice, sd = plan->src.kind == MemKind::kDevice;
  bool want_dd = dd, want_sd = sd;  // what `kind` says
  switch (kind) {
    case ACL_MEMCPY_HOST_TO_HOST:
      want_dd = want_sd = false;
      break;
    case ACL_MEMCPY_HOST_TO_DEVICE:
    case ACL_MEMCPY_HOST_TO_BUF_TO_DEVICE:
      want_dd = true, want_sd = false;
      break;
    case ACL_MEMCPY_DEVICE_TO_HOST:
      want_dd = false, want_sd = true;
      break;
    case ACL_MEMCPY_DEVICE_TO_DEVICE:
    case ACL_MEMCPY_INNER_DEVICE_TO_DEVICE:
    case ACL_MEMCPY_INTER_DEVICE_TO_DEVICE:
      want_dd = want_sd = true;
      break;
    default:  // ACL_MEMCPY_DEFAULT: the direction comes from the pointers
      break;
  }
  const bool check_kind = async || tshim::EnvU64("TESSERA_SHIM_ACL_STRICT_KIND", 1) != 0;
  if (check_kind && (want_dd != dd || want_sd != sd))  // code: shim's choice ("invalid memory type")
    return Fail(ACL_ERROR_RT_INVALID_MEMORY_TYPE,
                Fmt("%s: kind ACL_MEMCPY_%s does not match the pointers: dst %p is %s, src %p is %s", fn, KindName(k),
                    dst, What(plan->dst), src, What(plan->src)));
  if (check_kind && dd && sd && kind == ACL_MEMCPY_INNER_DEVICE_TO_DEVICE && plan->dst.device != plan->src.device)
    return Fail(ACL_ERROR_RT_INVALID_MEMORY_TYPE,
                Fmt("%s: INNER_DEVICE_TO_DEVICE between devices %d and %d", fn, plan->src.device, plan->dst.device));
  if (check_kind && dd && sd && kind == ACL_MEMCPY_INTER_DEVICE_TO_DEVICE && plan->dst.device == plan->src.device)
    return Fail(ACL_ERROR_RT_INVALID_MEMORY_TYPE,
                Fmt("%s: INTER_DEVICE_TO_DEVICE within device %d", fn, plan->src.device));
  if (!async) return ACL_SUCCESS;
  if (!dd && !sd)  // [async]
    return Fail(ACL_ERROR_RT_FEATURE_NOT_SUPPORT,
                Fmt("%s: asynchronous host-to-host copies are not supported (dst %p, src %p)", fn, dst, src));
  if (reinterpret_cast<uintptr_t>(dst) % 64 || reinterpret_cast<uintptr_t>(src) % 64)  // [async]; code: shim's
    return Fail(ACL_ERROR_RT_ADDR_UNALIGNED, Fmt("%s: src %p and dst %p must both be 64-byte aligned", fn, src, dst));
  plan->pageable = kind != ACL_MEMCPY_HOST_TO_BUF_TO_DEVICE && ((!dd && plan->dst.kind == MemKind::kUnregistered) ||
                                                                (!sd && plan->src.kind == MemKind::kUnregistered));
  return ACL_SUCCESS;
}

bool PageableSync() {
  const char* v = std::getenv("TESSERA_SHIM_ACL_PAGEABLE");
  return v && std::strcmp(v, "sync") == 0;
}

void ForgetStreamsInChild() { tshim::ForgetRuntimeAfterFork(g_mu, g_default, g_streams, g_events, g_mem); }
[[maybe_unused]] const int g_atfork = pthread_atfork(nullptr, nullptr, ForgetStreamsInChild);
}  // namespace

namespace {
aclError CheckMemset(const char* fn, void* devPtr, size_t maxCount, size_t count, PtrInfo* p) {
  if (!devPtr) return Fail(ACL_ERROR_INVALID_PARAM, Fmt("%s: devPtr is NULL", fn));
  if (count > maxCount)  // code: shim's choice
    return Fail(ACL_ERROR_INVALID_PARAM, Fmt("%s: count %zu exceeds maxCount %zu", fn, count, maxCount));
  *p = g_mem.Lookup(devPtr);  // rt:1307-1309: host or device memory, judged from the address
  if (p->kind != MemKind::kUnregistered && count > p->avail)
    return Fail(ACL_ERROR_INVALID_PARAM,
                Fmt("%s: count %zu runs past the end of the %zu-byte %s at %p", fn, count, p->size, What(*p), p->base));
  return ACL_SUCCESS;
}
}  // namespace

extern "C" {

ACL_ABI_EXPORT aclError aclInit(const char*) {
  std::lock_guard<std::mutex> l(g_mu);
  ++g_init_refs;  // rt:2293-2294: "can be called multiple times ... the reference count will increase by 1"
  return ACL_SUCCESS;
}

ACL_ABI_EXPORT aclError aclFinalize() {
  std::lock_guard<std::mutex> l(g_mu);
  if (g_init_refs == 0) return Fail(ACL_ERROR_UNINITIALIZE, "aclFinalize: aclInit has not been called");
  g_init_refs = 0;  // rt:2310-2311: "the internal reference count is reset to 0"
  return ACL_SUCCESS;
}

// rt:2348-2353 ("get recent error message; null for failed"). The shim returns this thread's last failure
// message once (NULL when there was none since the previous call).
ACL_ABI_EXPORT const char* aclGetRecentErrMsg() {
  if (t_err.empty()) return nullptr;
  t_err_out = std::move(t_err);
  t_err.clear();
  return t_err_out.c_str();
}

ACL_ABI_EXPORT const char* aclrtGetSocName() {
  static const std::string name = [] {
    const char* v = std::getenv("TESSERA_SHIM_SOC_NAME");
    return std::string(v && *v ? v : "Ascend910B1");  // an Atlas A2 training part: the rules modelled above
  }();
  return name.c_str();
}

ACL_ABI_EXPORT aclError aclrtGetDeviceCount(uint32_t* count) {
  ACL_REQUIRE_INIT("aclrtGetDeviceCount");
  if (!count) return Fail(ACL_ERROR_INVALID_PARAM, "aclrtGetDeviceCount: count is NULL");
  *count = static_cast<uint32_t>(DeviceCount());
  return ACL_SUCCESS;
}

ACL_ABI_EXPORT aclError aclrtSetDevice(int32_t deviceId) {
  ACL_REQUIRE_INIT("aclrtSetDevice");
  if (deviceId < 0 || deviceId >= DeviceCount())
    return Fail(ACL_ERROR_RT_INVALID_DEVICEID,
                Fmt("aclrtSetDevice: device %d is not in [0, %d)", deviceId, DeviceCount()));
  t_device = deviceId;
  return ACL_SUCCESS;
}

ACL_ABI_EXPORT aclError aclrtResetDevice(int32_t deviceId) {
  ACL_REQUIRE_INIT("aclrtResetDevice");
  if (deviceId < 0 || deviceId >= DeviceCount())
    return Fail(ACL_ERROR_RT_INVALID_DEVICEID,
                Fmt("aclrtResetDevice: device %d is not in [0, %d)", deviceId, DeviceCount()));
  (void)DefaultStream(deviceId)->Synchronize();  // rt:832-833: waits for the default stream's tasks
  if (t_device == deviceId) t_device = -1;
  return ACL_SUCCESS;
}

ACL_ABI_EXPORT aclError aclrtGetDevice(int32_t* deviceId) {
  ACL_REQUIRE_INIT("aclrtGetDevice");
  if (!deviceId) return Fail(ACL_ERROR_INVALID_PARAM, "aclrtGetDevice: deviceId is NULL");
  ACL_REQUIRE_DEVICE("aclrtGetDevice");
  *deviceId = t_device;
  return ACL_SUCCESS;
}

ACL_ABI_EXPORT aclError aclrtMalloc(void** devPtr, size_t size, aclrtMemMallocPolicy policy) {
  ACL_REQUIRE_INIT("aclrtMalloc");
  ACL_REQUIRE_DEVICE("aclrtMalloc");
  if (!devPtr || size == 0) return Fail(ACL_ERROR_INVALID_PARAM, Fmt("aclrtMalloc: devPtr %p, size %zu", devPtr, size));
  const unsigned base = static_cast<unsigned>(policy) & 0xffu;
  if (base > ACL_MEM_MALLOC_HUGE1G_ONLY_P2P)
    return Fail(ACL_ERROR_INVALID_PARAM, Fmt("aclrtMalloc: policy 0x%x is not an aclrtMemMallocPolicy", policy));
  // rt:1090: "real alloc size is aligned to 32 bytes and padded with 32 bytes".
  *devPtr = g_mem.Alloc((size + 31) / 32 * 32 + 32, MemKind::kDevice, t_device, static_cast<unsigned>(policy));
  if (!*devPtr) return Fail(ACL_ERROR_RT_MEMORY_ALLOCATION, Fmt("aclrtMalloc: out of memory for %zu bytes", size));
  return ACL_SUCCESS;
}

ACL_ABI_EXPORT aclError aclrtFree(void* devPtr) {
  ACL_REQUIRE_INIT("aclrtFree");
  if (!devPtr) return Fail(ACL_ERROR_INVALID_PARAM, "aclrtFree: devPtr is NULL");
  if (!g_mem.Free(devPtr, MemKind::kDevice))  // rt:1221: "can only free memory allocated through aclrtMalloc"
    return Fail(ACL_ERROR_RT_MEMORY_FREE, Fmt("aclrtFree: %p is not the start of an aclrtMalloc allocation", devPtr));
  return ACL_SUCCESS;
}

ACL_ABI_EXPORT aclError aclrtMallocHost(void** hostPtr, size_t size) {
  ACL_REQUIRE_INIT("aclrtMallocHost");
  ACL_REQUIRE_DEVICE("aclrtMallocHost");
  if (!hostPtr || size == 0)  // [host]
    return Fail(ACL_ERROR_INVALID_PARAM, Fmt("aclrtMallocHost: hostPtr %p, size %zu", hostPtr, size));
  *hostPtr = g_mem.Alloc(size, MemKind::kPinnedHost, t_device, 0);  // page-aligned, so 64-byte aligned [host]
  if (!*hostPtr) return Fail(ACL_ERROR_RT_MEMORY_ALLOCATION, Fmt("aclrtMallocHost: out of memory for %zu", size));
  return ACL_SUCCESS;
}

ACL_ABI_EXPORT aclError aclrtFreeHost(void* hostPtr) {
  ACL_REQUIRE_INIT("aclrtFreeHost");
  if (!hostPtr) return Fail(ACL_ERROR_INVALID_PARAM, "aclrtFreeHost: hostPtr is NULL");
  if (!g_mem.Free(hostPtr, MemKind::kPinnedHost))  // rt:1272
    return Fail(ACL_ERROR_RT_MEMORY_FREE,
                Fmt("aclrtFreeHost: %p is not the start of an aclrtMallocHost allocation", hostPtr));
  return ACL_SUCCESS;
}

ACL_ABI_EXPORT aclError aclrtPointerGetAttributes(const void* ptr, aclrtPtrAttributes* attributes) {
  ACL_REQUIRE_INIT("aclrtPointerGetAttributes");
  if (!ptr || !attributes) return Fail(ACL_ERROR_INVALID_PARAM, "aclrtPointerGetAttributes: NULL argument");
  const PtrInfo p = g_mem.Lookup(ptr);
  std::memset(attributes, 0, sizeof *attributes);
  // ASSUMPTION (undocumented mapping): aclrtMallocHost memory reports HOST, anything else not ours UNREGISTERED;
  // pageSize 2 MiB for huge-page policies (HUGE_FIRST only above 1 MiB), else 4 KiB.
  if (p.kind == MemKind::kDevice) {
    attributes->location = {static_cast<uint32_t>(p.device), ACL_MEM_LOCATION_TYPE_DEVICE};
    const unsigned pol = p.flags & 0xffu;
    const bool huge =
        pol == ACL_MEM_MALLOC_HUGE_ONLY || pol == ACL_MEM_MALLOC_HUGE_ONLY_P2P ||
        ((pol == ACL_MEM_MALLOC_HUGE_FIRST || pol == ACL_MEM_MALLOC_HUGE_FIRST_P2P) && p.size > (1u << 20));
    attributes->pageSize = huge ? (2u << 20) : 4096u;
  } else {
    attributes->location = {
        0, p.kind == MemKind::kPinnedHost ? ACL_MEM_LOCATION_TYPE_HOST : ACL_MEM_LOCATION_TYPE_UNREGISTERED};
    attributes->pageSize = 4096;
  }
  return ACL_SUCCESS;
}

ACL_ABI_EXPORT aclError aclrtMemcpy(void* dst, size_t destMax, const void* src, size_t count, aclrtMemcpyKind kind) {
  ACL_REQUIRE_INIT("aclrtMemcpy");
  CopyPlan plan;
  if (aclError e = CheckCopy("aclrtMemcpy", dst, destMax, src, count, kind, false, &plan)) return e;
  std::memmove(plan.dst.Translate(dst), plan.src.Translate(src), count);  // [memcpy]: at once, no stream sync
  return ACL_SUCCESS;
}

ACL_ABI_EXPORT aclError aclrtMemcpyAsync(void* dst, size_t destMax, const void* src, size_t count, aclrtMemcpyKind kind,
                                         aclrtStream stream) {
  ACL_REQUIRE_INIT("aclrtMemcpyAsync");
  auto s = Resolve(stream);
  if (!s) return Fail(ACL_ERROR_INVALID_PARAM, Fmt("aclrtMemcpyAsync: stream %p is not a live stream", stream));
  CopyPlan plan;
  if (aclError e = CheckCopy("aclrtMemcpyAsync", dst, destMax, src, count, kind, true, &plan)) return e;
  if (plan.pageable && !PageableSync()) {
    // [async]: accepted, then the task fails (code: shim's choice for CANN's "unpredictable error").
    const std::string msg =
        Fmt("aclrtMemcpyAsync: %s copy with host memory not allocated by aclrtMallocHost "
            "(dst %p, src %p); nothing was copied",
            KindName(kind), dst, src);
    s->Enqueue([msg] { return Status{ACL_ERROR_RT_COPY_DATA, msg}; });
    return ACL_SUCCESS;
  }
  if (kind == ACL_MEMCPY_HOST_TO_BUF_TO_DEVICE) {  // the runtime buffers the host bytes at the call
    auto staged = std::make_shared<std::vector<char>>(plan.src.Translate(src), plan.src.Translate(src) + count);
    s->Enqueue([dst, staged] {
      const PtrInfo d = g_mem.Lookup(dst);
      if (d.kind != MemKind::kDevice) return Status{ACL_ERROR_RT_COPY_DATA, "destination freed before the copy ran"};
      std::memcpy(d.Translate(dst), staged->data(), staged->size());
      return Status::Ok();
    });
    return ACL_SUCCESS;
  }
  const MemKind dk = plan.dst.kind, sk = plan.src.kind;
  tshim::Task task = [dst, src, count, dk, sk] {
    const PtrInfo d = g_mem.Lookup(dst), sp = g_mem.Lookup(src);
    if (d.kind != dk || sp.kind != sk)
      return Status{ACL_ERROR_RT_COPY_DATA, Fmt("aclrtMemcpyAsync: memory at dst %p or src %p was freed before the "
                                                "copy ran",
                                                dst, src)};
    std::memmove(d.Translate(dst), sp.Translate(src), count);
    return Status::Ok();
  };
  if (plan.pageable) {  // TESSERA_SHIM_ACL_PAGEABLE=sync: CANN 8.5's rule, returns once the copy is done
    Status st = s->RunAndWait(std::move(task));
    return st.code ? Fail(st.code, st.msg) : ACL_SUCCESS;
  }
  s->Enqueue(std::move(task));
  return ACL_SUCCESS;
}

ACL_ABI_EXPORT aclError aclrtMemset(void* devPtr, size_t maxCount, int32_t value, size_t count) {
  ACL_REQUIRE_INIT("aclrtMemset");
  PtrInfo p;
  if (aclError e = CheckMemset("aclrtMemset", devPtr, maxCount, count, &p)) return e;
  std::memset(p.Translate(devPtr), value, count);
  return ACL_SUCCESS;
}

ACL_ABI_EXPORT aclError aclrtMemsetAsync(void* devPtr, size_t maxCount, int32_t value, size_t count,
                                         aclrtStream stream) {
  ACL_REQUIRE_INIT("aclrtMemsetAsync");
  auto s = Resolve(stream);
  if (!s) return Fail(ACL_ERROR_INVALID_PARAM, Fmt("aclrtMemsetAsync: stream %p is not a live stream", stream));
  PtrInfo p;
  if (aclError e = CheckMemset("aclrtMemsetAsync", devPtr, maxCount, count, &p)) return e;
  const MemKind k = p.kind;
  s->Enqueue([devPtr, value, count, k] {
    const PtrInfo q = g_mem.Lookup(devPtr);
    if (q.kind != k) return Status{ACL_ERROR_RT_COPY_DATA, Fmt("aclrtMemsetAsync: %p was freed first", devPtr)};
    std::memset(q.Translate(devPtr), value, count);
    return Status::Ok();
  });
  return ACL_SUCCESS;
}

ACL_ABI_EXPORT aclError aclrtCreateStream(aclrtStream* stream) {
  ACL_REQUIRE_INIT("aclrtCreateStream");
  ACL_REQUIRE_DEVICE("aclrtCreateStream");
  if (!stream) return Fail(ACL_ERROR_INVALID_PARAM, "aclrtCreateStream: stream is NULL");
  *stream = g_streams.Add(std::make_shared<tshim::Stream>(t_device, tshim::EnvU64("TESSERA_SHIM_STREAM_DELAY_US", 0)));
  return ACL_SUCCESS;
}

ACL_ABI_EXPORT aclError aclrtDestroyStream(aclrtStream stream) {
  ACL_REQUIRE_INIT("aclrtDestroyStream");
  auto s = stream ? g_streams.Remove(stream) : nullptr;
  if (!s) return Fail(ACL_ERROR_INVALID_PARAM, Fmt("aclrtDestroyStream: %p is not a live stream", stream));
  return ACL_SUCCESS;  // the last reference drains the queue and joins its worker
}

ACL_ABI_EXPORT aclError aclrtSynchronizeStream(aclrtStream stream) {
  ACL_REQUIRE_INIT("aclrtSynchronizeStream");
  auto s = Resolve(stream);
  if (!s) return Fail(ACL_ERROR_INVALID_PARAM, Fmt("aclrtSynchronizeStream: stream %p is not a live stream", stream));
  Status st = s->Synchronize();
  return st.code ? Fail(st.code, "aclrtSynchronizeStream: a task failed: " + st.msg) : ACL_SUCCESS;
}

ACL_ABI_EXPORT aclError aclrtSynchronizeDevice() {
  ACL_REQUIRE_INIT("aclrtSynchronizeDevice");
  ACL_REQUIRE_DEVICE("aclrtSynchronizeDevice");
  std::vector<std::shared_ptr<tshim::Stream>> all = g_streams.All();
  all.push_back(DefaultStream(t_device));
  Status first;
  for (auto& s : all) {
    if (s->device() != t_device) continue;
    Status st = s->Synchronize();
    if (st.code && !first.code) first = st;
  }
  return first.code ? Fail(first.code, "aclrtSynchronizeDevice: a task failed: " + first.msg) : ACL_SUCCESS;
}

ACL_ABI_EXPORT aclError aclrtCreateEvent(aclrtEvent* event) {
  ACL_REQUIRE_INIT("aclrtCreateEvent");
  ACL_REQUIRE_DEVICE("aclrtCreateEvent");
  if (!event) return Fail(ACL_ERROR_INVALID_PARAM, "aclrtCreateEvent: event is NULL");
  *event = g_events.Add(std::make_shared<tshim::Event>());
  return ACL_SUCCESS;
}

ACL_ABI_EXPORT aclError aclrtDestroyEvent(aclrtEvent event) {
  ACL_REQUIRE_INIT("aclrtDestroyEvent");
  if (!event || !g_events.Remove(event))
    return Fail(ACL_ERROR_INVALID_PARAM, Fmt("aclrtDestroyEvent: %p is not a live event", event));
  return ACL_SUCCESS;
}

ACL_ABI_EXPORT aclError aclrtRecordEvent(aclrtEvent event, aclrtStream stream) {
  ACL_REQUIRE_INIT("aclrtRecordEvent");
  auto e = event ? g_events.Get(event) : nullptr;
  if (!e) return Fail(ACL_ERROR_INVALID_PARAM, Fmt("aclrtRecordEvent: %p is not a live event", event));
  auto s = Resolve(stream);
  if (!s) return Fail(ACL_ERROR_INVALID_PARAM, Fmt("aclrtRecordEvent: stream %p is not a live stream", stream));
  e->Record(*s, e);
  return ACL_SUCCESS;
}

ACL_ABI_EXPORT aclError aclrtQueryEventStatus(aclrtEvent event, aclrtEventRecordedStatus* status) {
  ACL_REQUIRE_INIT("aclrtQueryEventStatus");
  auto e = event ? g_events.Get(event) : nullptr;
  if (!e || !status) return Fail(ACL_ERROR_INVALID_PARAM, Fmt("aclrtQueryEventStatus: event %p", event));
  const uint64_t gen = e->generation();  // [event]: never recorded is NOT_READY
  *status = gen && e->Done(gen) ? ACL_EVENT_RECORDED_STATUS_COMPLETE : ACL_EVENT_RECORDED_STATUS_NOT_READY;
  return ACL_SUCCESS;
}

ACL_ABI_EXPORT aclError aclrtQueryEvent(aclrtEvent event, aclrtEventStatus* status) {  // deprecated (rt:1011)
  aclrtEventRecordedStatus r;
  if (aclError err = aclrtQueryEventStatus(event, &r)) return err;
  *status = r == ACL_EVENT_RECORDED_STATUS_COMPLETE ? ACL_EVENT_STATUS_COMPLETE : ACL_EVENT_STATUS_NOT_READY;
  return ACL_SUCCESS;
}

ACL_ABI_EXPORT aclError aclrtSynchronizeEvent(aclrtEvent event) {
  ACL_REQUIRE_INIT("aclrtSynchronizeEvent");
  auto e = event ? g_events.Get(event) : nullptr;
  if (!e) return Fail(ACL_ERROR_INVALID_PARAM, Fmt("aclrtSynchronizeEvent: %p is not a live event", event));
  e->Wait(e->generation());  // never recorded: returns at once (ASSUMPTION: CUDA's rule)
  return ACL_SUCCESS;
}

ACL_ABI_EXPORT aclError aclrtStreamWaitEvent(aclrtStream stream, aclrtEvent event) {
  ACL_REQUIRE_INIT("aclrtStreamWaitEvent");
  auto e = event ? g_events.Get(event) : nullptr;
  if (!e) return Fail(ACL_ERROR_INVALID_PARAM, Fmt("aclrtStreamWaitEvent: %p is not a live event", event));
  auto s = Resolve(stream);
  if (!s) return Fail(ACL_ERROR_INVALID_PARAM, Fmt("aclrtStreamWaitEvent: stream %p is not a live stream", stream));
  const uint64_t gen = e->generation();  // the most recent record at the call (ASSUMPTION: CUDA's rule)
  const uint64_t ms = tshim::EnvU64("TESSERA_SHIM_EVENT_TIMEOUT_MS", 60000);
  s->Enqueue([e, gen, ms] {
    if (e->WaitFor(gen, ms)) return Status::Ok();
    return Status{ACL_ERROR_RT_TASK_TIMEOUT, Fmt("aclrtStreamWaitEvent: the event was not reached within %llu ms",
                                                 static_cast<unsigned long long>(ms))};
  });
  return ACL_SUCCESS;
}

// Not an ACL API: what libhccl.so (the HCCL shim) uses to reach this runtime's streams and memory.
ACL_ABI_EXPORT const tshim::RuntimeHooks* tesseraAclShimHooks() {
  static const tshim::RuntimeHooks hooks = {
      tshim::kHooksVersion,
      [](void* h) { return Initialized() ? Resolve(h) : nullptr; },
      [](const void* p) { return g_mem.Lookup(p); },
      [] { return t_device; },
      [](const std::string& msg) { t_err = msg; },
  };
  return &hooks;
}

}  // extern "C"
