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
//   [register] aclrtHostRegisterV2 / aclrtHostUnregister (CANN 9.0.0; acl_abi.h cites the pages, acl_rules.hpp the
//              rules): a 4 KiB-aligned range registered ACL_HOST_REG_PINNED is page-locked memory for [async].
// Which code a violated rule returns is not documented where a rule says only "failure"; those choices are the
// shim's and are marked "code: shim's choice". Stricter than CANN on purpose: aclrtMemcpy checks `kind` against
// the pointers like the async call does (TESSERA_SHIM_ACL_STRICT_KIND=0 ignores it, as documented).
#include <pthread.h>

#include <cstdio>
#include <cstring>
#include <mutex>
#include <vector>

#include "acl_abi.h"
#include "acl_rules.hpp"
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

bool Initialized() { return tshim::acl::Initialized(g_mu, g_init_refs); }

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

// What acl_rules.hpp's checks ask of this shim.
struct HostShim {
  using Ptr = PtrInfo;
  static PtrInfo Lookup(const void* p) { return g_mem.Lookup(p); }
  static bool Tracked(const PtrInfo& p) { return p.kind != MemKind::kUnregistered; }
  static bool StrictKind() { return tshim::EnvU64("TESSERA_SHIM_ACL_STRICT_KIND", 1) != 0; }
  static aclError Fail(aclError code, const std::string& msg) { return ::Fail(code, msg); }
};
using CopyPlan = tshim::acl::CopyPlan<PtrInfo>;

void ForgetStreamsInChild() { tshim::ForgetRuntimeAfterFork(g_mu, g_default, g_streams, g_events, g_mem); }
[[maybe_unused]] const int g_atfork = pthread_atfork(nullptr, nullptr, ForgetStreamsInChild);
}  // namespace

extern "C" {

ACL_ABI_EXPORT aclError aclInit(const char*) { return tshim::acl::Init(g_mu, g_init_refs); }

ACL_ABI_EXPORT aclError aclFinalize() { return tshim::acl::Finalize<HostShim>(g_mu, g_init_refs); }

ACL_ABI_EXPORT const char* aclGetRecentErrMsg() { return tshim::acl::RecentErrMsg(t_err, t_err_out); }

ACL_ABI_EXPORT const char* aclrtGetSocName() { return tshim::acl::SocName(); }

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
  if (aclError e = tshim::acl::CheckMalloc<HostShim>(devPtr, size, policy)) return e;
  *devPtr = g_mem.Alloc(tshim::acl::MallocBytes(size), MemKind::kDevice, t_device, static_cast<unsigned>(policy));
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
  if (aclError e = tshim::acl::CheckMallocHost<HostShim>(hostPtr, size)) return e;
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

// [register]: a registered range becomes page-locked host memory for the copies ([async] takes it as aclrtMallocHost
// memory); aclrtHostUnregister takes the start of a registered range only (code: shim's choice).
ACL_ABI_EXPORT aclError aclrtHostRegisterV2(void* ptr, uint64_t size, uint32_t flag) {
  ACL_REQUIRE_INIT("aclrtHostRegisterV2");
  ACL_REQUIRE_DEVICE("aclrtHostRegisterV2");
  if (aclError e = tshim::acl::CheckHostRegister<HostShim>(ptr, size, flag)) return e;
  if (tshim::EnvU64("TESSERA_SHIM_ACL_REGISTER_FAILS", 0))  // a test's hook: a driver that refuses (shim's code)
    return Fail(ACL_ERROR_RT_FEATURE_NOT_SUPPORT, "aclrtHostRegisterV2: refused (TESSERA_SHIM_ACL_REGISTER_FAILS)");
  if (!g_mem.Register(ptr, size, t_device)) return tshim::acl::RegisteredTwice<HostShim>(ptr, size);
  return ACL_SUCCESS;
}

ACL_ABI_EXPORT aclError aclrtHostUnregister(void* ptr) {
  ACL_REQUIRE_INIT("aclrtHostUnregister");
  if (!ptr) return Fail(ACL_ERROR_INVALID_PARAM, "aclrtHostUnregister: ptr is NULL");
  if (!g_mem.Unregister(ptr)) return tshim::acl::NotRegistered<HostShim>(ptr);
  return ACL_SUCCESS;
}

ACL_ABI_EXPORT aclError aclrtPointerGetAttributes(const void* ptr, aclrtPtrAttributes* attributes) {
  ACL_REQUIRE_INIT("aclrtPointerGetAttributes");
  if (!ptr || !attributes) return Fail(ACL_ERROR_INVALID_PARAM, "aclrtPointerGetAttributes: NULL argument");
  const PtrInfo p = g_mem.Lookup(ptr);
  tshim::acl::PointerAttributes<HostShim>(p, p.flags, attributes);
  return ACL_SUCCESS;
}

ACL_ABI_EXPORT aclError aclrtMemcpy(void* dst, size_t destMax, const void* src, size_t count, aclrtMemcpyKind kind) {
  ACL_REQUIRE_INIT("aclrtMemcpy");
  CopyPlan plan;
  if (aclError e = tshim::acl::CheckCopy<HostShim>("aclrtMemcpy", dst, destMax, src, count, kind, false, &plan))
    return e;
  std::memmove(plan.dst.Translate(dst), plan.src.Translate(src), count);  // [memcpy]: at once, no stream sync
  return ACL_SUCCESS;
}

ACL_ABI_EXPORT aclError aclrtMemcpyAsync(void* dst, size_t destMax, const void* src, size_t count, aclrtMemcpyKind kind,
                                         aclrtStream stream) {
  ACL_REQUIRE_INIT("aclrtMemcpyAsync");
  auto s = Resolve(stream);
  if (!s) return Fail(ACL_ERROR_INVALID_PARAM, Fmt("aclrtMemcpyAsync: stream %p is not a live stream", stream));
  CopyPlan plan;
  if (aclError e = tshim::acl::CheckCopy<HostShim>("aclrtMemcpyAsync", dst, destMax, src, count, kind, true, &plan))
    return e;
  if (plan.pageable && !tshim::acl::PageableSync()) {
    // [async]: accepted, then the task fails (code: shim's choice for CANN's "unpredictable error").
    const std::string msg =
        Fmt("aclrtMemcpyAsync: %s copy with host memory not allocated by aclrtMallocHost "
            "(dst %p, src %p); nothing was copied",
            tshim::acl::KindName(kind), dst, src);
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
  if (aclError e = tshim::acl::CheckMemset<HostShim>("aclrtMemset", devPtr, maxCount, count, &p)) return e;
  std::memset(p.Translate(devPtr), value, count);
  return ACL_SUCCESS;
}

ACL_ABI_EXPORT aclError aclrtMemsetAsync(void* devPtr, size_t maxCount, int32_t value, size_t count,
                                         aclrtStream stream) {
  ACL_REQUIRE_INIT("aclrtMemsetAsync");
  auto s = Resolve(stream);
  if (!s) return Fail(ACL_ERROR_INVALID_PARAM, Fmt("aclrtMemsetAsync: stream %p is not a live stream", stream));
  PtrInfo p;
  if (aclError e = tshim::acl::CheckMemset<HostShim>("aclrtMemsetAsync", devPtr, maxCount, count, &p)) return e;
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

ACL_ABI_EXPORT aclError aclrtQueryEvent(aclrtEvent event, aclrtEventStatus* status) {
  return tshim::acl::QueryEvent(event, status, aclrtQueryEventStatus);
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

// Not an ACL API: where libnnopbase.so (the aclnn shim) leaves its messages for aclGetRecentErrMsg.
ACL_ABI_EXPORT void tesseraAclShimSetError(const char* msg) { t_err = msg ? msg : ""; }

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
