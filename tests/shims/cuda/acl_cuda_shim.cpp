// tests/shims/cuda/acl_cuda_shim: libascendcl.so on the CUDA runtime, a test-only ABI shim of Huawei's ACL for the
// GPU machine (declarations and their sources: ../acl_abi.h). Same exports, signatures, values, rules and codes as
// the host shim (../acl_shim.cpp, whose header cites the documented rules as [memcpy], [async], [init], [event],
// [host]); only the work is real here: device memory is cudaMalloc's, streams are CUDA streams, events CUDA events.
//   ACL device i      CUDA device V[i], V = ASCEND_RT_VISIBLE_DEVICES (read once; entries up to the first that is
//                     not a CUDA device below cudaGetDeviceCount, as tshim::DeviceCount reads it), else V[i] = i
//   aclrtMalloc       cudaMalloc of (size + 31) / 32 * 32 + 32 bytes (rt:1090), tracked with device and policy
//   aclrtMallocHost   cudaMallocHost (page-aligned, so 64-byte aligned [host]); Free / FreeHost: cudaFree(Host),
//                     only of the start of such an allocation (rt:1221, rt:1272), else ACL_ERROR_RT_MEMORY_FREE
//   pointer kinds     cudaPointerGetAttributes: Device (and Managed) = DEVICE, id the ACL device; Host (pinned) =
//                     HOST, id 0; Unregistered = UNREGISTERED; pageSize as acl_shim.cpp. Bounds checks ("runs past
//                     the end") apply to the shim's own allocations, as in the host shim.
//   aclrtHostRegisterV2  cudaHostRegister (Portable, and Mapped with ACL_HOST_REG_MAPPED) after the host shim's
//                     checks [register]; aclrtHostUnregister: cudaHostUnregister
//   aclrtStream       a cudaStream_t (cudaStreamCreateWithFlags NonBlocking); NULL is CUDA's legacy default stream
//                     of the current device; aclrtEvent a cudaEvent_t (cudaEventCreateWithFlags DisableTiming)
//   aclrtMemcpy       cudaMemcpy(Default) then cudaStreamSynchronize(NULL): done on return, no wait for the
//                     non-blocking streams [memcpy]; aclrtMemset: cudaMemset likewise, host memory memset at once
//   aclrtMemcpyAsync  cudaMemcpyAsync(Default) after the host shim's checks; HOST_TO_BUF_TO_DEVICE copies the host
//                     bytes at the call (freed by a host function after the copy); a pageable H2D/D2H copy is
//                     accepted and fails on the stream (below), or with TESSERA_SHIM_ACL_PAGEABLE=sync is copied
//                     and the stream synchronised before the call returns; aclrtMemsetAsync on host memory is a
//                     host function in stream order
//   task failures     a host function (cudaLaunchHostFunc) marks the stream failed when the stream reaches it; the
//                     next aclrtSynchronizeStream / aclrtSynchronizeDevice returns that code, as the host shim's
//                     streams do; events after it still complete
// CUDA error -> aclError (code: shim's choice; the message carries cudaGetErrorName and cudaGetErrorString):
// cudaErrorMemoryAllocation -> ACL_ERROR_RT_MEMORY_ALLOCATION, cudaErrorInvalidValue -> ACL_ERROR_RT_PARAM_INVALID,
// cudaErrorInvalidDevice / NoDevice -> ACL_ERROR_RT_INVALID_DEVICEID, cudaErrorInvalidResourceHandle ->
// ACL_ERROR_RT_INVALID_HANDLE, cudaErrorNotSupported -> ACL_ERROR_RT_FEATURE_NOT_SUPPORT, cudaErrorLaunchTimeout ->
// ACL_ERROR_RT_TASK_TIMEOUT, anything else -> ACL_ERROR_RT_INTERNAL_ERROR.
// Not kept on CUDA: a copy or memset whose memory is freed before the stream runs it is not detected (the host
// shim fails the task; here it is CUDA's fault); aclrtStreamWaitEvent waits without TESSERA_SHIM_EVENT_TIMEOUT_MS;
// aclrtResetDevice synchronises the default stream and forgets the thread's device but does not cudaDeviceReset
// (NCCL and the process's other CUDA users share the primary context); a forked child cannot use CUDA, so the
// host shim's fork rule has no counterpart. Exports the API of acl_abi.h (libhccl.so uses that API too) and, for
// the aclnn shims beside it, three calls of its own (tesseraAclShimSetError, tesseraAclCudaShimLookup,
// tesseraAclCudaShimStream).
#include <cuda_runtime_api.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "../acl_abi.h"
#include "../acl_rules.hpp"
#include "../shim_runtime.hpp"

using tshim::Fmt;

namespace {

bool EnvOn(const char* name, bool dflt) {
  const char* v = std::getenv(name);
  return v && *v ? std::strcmp(v, "0") != 0 : dflt;
}

thread_local int t_device = -1;  // the ACL device of aclrtSetDevice on this thread
thread_local std::string t_err;
thread_local std::string t_err_out;

aclError Fail(aclError code, const std::string& msg) {
  t_err = Fmt("%s (aclError %d)", msg.c_str(), code);
  if (EnvOn("TESSERA_SHIM_VERBOSE", false)) std::fprintf(stderr, "[acl cuda shim] %s\n", t_err.c_str());
  return code;
}

aclError AclCode(cudaError_t e) {  // the mapping of the header
  switch (e) {
    case cudaErrorMemoryAllocation:
      return ACL_ERROR_RT_MEMORY_ALLOCATION;
    case cudaErrorInvalidValue:
      return ACL_ERROR_RT_PARAM_INVALID;
    case cudaErrorInvalidDevice:
    case cudaErrorNoDevice:
      return ACL_ERROR_RT_INVALID_DEVICEID;
    case cudaErrorInvalidResourceHandle:
      return ACL_ERROR_RT_INVALID_HANDLE;
    case cudaErrorNotSupported:
      return ACL_ERROR_RT_FEATURE_NOT_SUPPORT;
    case cudaErrorLaunchTimeout:
      return ACL_ERROR_RT_TASK_TIMEOUT;
    default:
      return ACL_ERROR_RT_INTERNAL_ERROR;
  }
}

aclError FailCuda(const char* fn, const char* call, cudaError_t e) {
  (void)cudaGetLastError();  // consumed here (a sticky error stays)
  return Fail(AclCode(e), Fmt("%s: %s: %s: %s", fn, call, cudaGetErrorName(e), cudaGetErrorString(e)));
}
#define CU(fn, call) \
  if (const cudaError_t e_ = (call); e_ != cudaSuccess) return FailCuda(fn, #call, e_)

// The CUDA devices the process sees as ACL devices 0..n-1 (the header's V).
struct Devices {
  cudaError_t err = cudaSuccess;
  std::vector<int> cuda;
};
const Devices& Devs() {
  static const Devices d = [] {
    Devices r;
    int all = 0;
    if ((r.err = cudaGetDeviceCount(&all)) != cudaSuccess) return (void)cudaGetLastError(), r;
    const char* v = std::getenv("ASCEND_RT_VISIBLE_DEVICES");
    if (!v) {
      for (int i = 0; i < all; ++i) r.cuda.push_back(i);
      return r;
    }
    for (const char* p = v; *p;) {
      char* end = nullptr;
      const long id = std::strtol(p, &end, 10);
      if (end == p || id < 0 || id >= all || (*end && *end != ',')) break;
      r.cuda.push_back(static_cast<int>(id));
      p = *end == ',' ? end + 1 : end;
    }
    return r;
  }();
  return d;
}
int AclDevice(int cuda) {  // -1 when the CUDA device is not one of the process's ACL devices
  const std::vector<int>& v = Devs().cuda;
  for (size_t i = 0; i < v.size(); ++i)
    if (v[i] == cuda) return static_cast<int>(i);
  return -1;
}

// A stream's failed task (see "task failures"): the first since the last synchronisation.
struct StreamState {
  cudaStream_t handle = nullptr;
  int device = -1;
  std::mutex mu;
  aclError code = ACL_SUCCESS;
  std::string msg;
};
struct EventState {
  bool recorded = false;
};
struct Block {
  size_t size;  // bytes allocated (aclrtMalloc: padded as rt:1090 says)
  bool device;
  int acl_device;
  unsigned policy;
};

std::mutex g_mu;  // everything below
int g_init_refs = 0;
std::unordered_map<void*, std::shared_ptr<StreamState>> g_streams;
std::vector<std::shared_ptr<StreamState>> g_default;  // per ACL device, made on first use
std::unordered_map<void*, EventState> g_events;
std::map<uintptr_t, Block> g_blocks;

bool Initialized() { return tshim::acl::Initialized(g_mu, g_init_refs); }

#define ACL_REQUIRE_DEVICE(fn)                                                                          \
  if (t_device < 0) return Fail(ACL_ERROR_RT_CONTEXT_NULL, fn ": no device set (call aclrtSetDevice)"); \
  CU(fn, cudaSetDevice(Devs().cuda[static_cast<size_t>(t_device)]))  // [init]; the CUDA device to match

// NULL is the current device's default stream (aclrtStreamWaitEvent: "If using the default Stream, set NULL").
std::shared_ptr<StreamState> Resolve(aclrtStream s) {
  std::lock_guard<std::mutex> l(g_mu);
  if (!s) {
    if (t_device < 0) return nullptr;
    if (g_default.size() <= static_cast<size_t>(t_device)) g_default.resize(static_cast<size_t>(t_device) + 1);
    auto& d = g_default[static_cast<size_t>(t_device)];
    if (!d) {
      d = std::make_shared<StreamState>();
      d->device = t_device;
    }
    return d;
  }
  auto it = g_streams.find(s);
  return it == g_streams.end() ? nullptr : it->second;
}

bool LiveEvent(aclrtEvent e) {
  std::lock_guard<std::mutex> l(g_mu);
  return e && g_events.count(e);
}

// Fails `s` when the stream reaches this point (cudaLaunchHostFunc).
struct Failure {
  std::shared_ptr<StreamState> stream;
  aclError code;
  std::string msg;
};
void CUDART_CB RaiseOnStream(void* arg) {
  std::unique_ptr<Failure> f(static_cast<Failure*>(arg));
  std::lock_guard<std::mutex> l(f->stream->mu);
  if (f->stream->code == ACL_SUCCESS) f->stream->code = f->code, f->stream->msg = f->msg;
}
aclError Raise(const char* fn, const std::shared_ptr<StreamState>& s, aclError code, const std::string& msg) {
  auto* f = new Failure{s, code, msg};
  if (const cudaError_t e = cudaLaunchHostFunc(s->handle, RaiseOnStream, f); e != cudaSuccess) {
    delete f;
    return FailCuda(fn, "cudaLaunchHostFunc", e);
  }
  return ACL_SUCCESS;
}
aclError TakeError(const char* fn, StreamState& s) {
  std::lock_guard<std::mutex> l(s.mu);
  if (s.code == ACL_SUCCESS) return ACL_SUCCESS;
  const aclError code = s.code;
  s.code = ACL_SUCCESS;
  return Fail(code, Fmt("%s: a task failed: %s", fn, s.msg.c_str()));
}

enum class Kind { kUnregistered, kDevice, kPinnedHost };
struct PtrInfo {
  Kind kind = Kind::kUnregistered;
  int device = -1;             // ACL device of device memory
  const void* base = nullptr;  // the shim's allocation holding the pointer, or null
  size_t size = 0, avail = 0;  // its size, and the bytes from the pointer to its end
  unsigned policy = 0;
};
PtrInfo Lookup(const void* p) {
  PtrInfo r;
  cudaPointerAttributes a{};
  if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
    (void)cudaGetLastError();
    a.type = cudaMemoryTypeUnregistered;
  }
  if (a.type == cudaMemoryTypeDevice || a.type == cudaMemoryTypeManaged) {
    r.kind = Kind::kDevice;
    r.device = AclDevice(a.device);
  } else if (a.type == cudaMemoryTypeHost) {
    r.kind = Kind::kPinnedHost;
  }
  const auto u = reinterpret_cast<uintptr_t>(p);
  std::lock_guard<std::mutex> l(g_mu);
  auto it = g_blocks.upper_bound(u);
  if (it == g_blocks.begin()) return r;
  --it;
  const Block& b = it->second;
  if (u >= it->first + b.size || b.device != (r.kind == Kind::kDevice)) return r;
  r.base = reinterpret_cast<const void*>(it->first);
  r.size = b.size;
  r.avail = it->first + b.size - u;
  r.policy = b.policy;
  if (b.device) r.device = b.acl_device;
  return r;
}

bool Forget(void* p, bool device) {  // false when `p` is not the start of a live allocation of that kind
  std::lock_guard<std::mutex> l(g_mu);
  auto it = g_blocks.find(reinterpret_cast<uintptr_t>(p));
  if (it == g_blocks.end() || it->second.device != device) return false;
  g_blocks.erase(it);
  return true;
}

// What ../acl_rules.hpp's checks ask of this shim: CUDA's view of the pointers.
struct CudaShim {
  using Ptr = PtrInfo;
  static PtrInfo Lookup(const void* p) { return ::Lookup(p); }
  static bool Tracked(const PtrInfo& p) { return p.base != nullptr; }
  static bool StrictKind() { return EnvOn("TESSERA_SHIM_ACL_STRICT_KIND", true); }
  static aclError Fail(aclError code, const std::string& msg) { return ::Fail(code, msg); }
};
using CopyPlan = tshim::acl::CopyPlan<PtrInfo>;

aclError CheckDevice(const char* fn, int32_t id) {
  if (Devs().err != cudaSuccess) return FailCuda(fn, "cudaGetDeviceCount", Devs().err);
  const int n = static_cast<int>(Devs().cuda.size());
  if (id < 0 || id >= n) return Fail(ACL_ERROR_RT_INVALID_DEVICEID, Fmt("%s: device %d is not in [0, %d)", fn, id, n));
  return ACL_SUCCESS;
}

}  // namespace

extern "C" {

ACL_ABI_EXPORT aclError aclInit(const char*) { return tshim::acl::Init(g_mu, g_init_refs); }

ACL_ABI_EXPORT aclError aclFinalize() { return tshim::acl::Finalize<CudaShim>(g_mu, g_init_refs); }

ACL_ABI_EXPORT const char* aclGetRecentErrMsg() { return tshim::acl::RecentErrMsg(t_err, t_err_out); }

ACL_ABI_EXPORT const char* aclrtGetSocName() { return tshim::acl::SocName(); }

ACL_ABI_EXPORT aclError aclrtGetDeviceCount(uint32_t* count) {
  ACL_REQUIRE_INIT("aclrtGetDeviceCount");
  if (!count) return Fail(ACL_ERROR_INVALID_PARAM, "aclrtGetDeviceCount: count is NULL");
  if (Devs().err != cudaSuccess) return FailCuda("aclrtGetDeviceCount", "cudaGetDeviceCount", Devs().err);
  *count = static_cast<uint32_t>(Devs().cuda.size());
  return ACL_SUCCESS;
}

ACL_ABI_EXPORT aclError aclrtSetDevice(int32_t deviceId) {
  ACL_REQUIRE_INIT("aclrtSetDevice");
  if (aclError e = CheckDevice("aclrtSetDevice", deviceId)) return e;
  CU("aclrtSetDevice", cudaSetDevice(Devs().cuda[static_cast<size_t>(deviceId)]));
  t_device = deviceId;
  return ACL_SUCCESS;
}

ACL_ABI_EXPORT aclError aclrtResetDevice(int32_t deviceId) {
  ACL_REQUIRE_INIT("aclrtResetDevice");
  if (aclError e = CheckDevice("aclrtResetDevice", deviceId)) return e;
  CU("aclrtResetDevice", cudaSetDevice(Devs().cuda[static_cast<size_t>(deviceId)]));
  CU("aclrtResetDevice", cudaStreamSynchronize(nullptr));  // rt:832-833: waits for the default stream's tasks
  if (t_device == deviceId) t_device = -1;
  if (t_device >= 0) CU("aclrtResetDevice", cudaSetDevice(Devs().cuda[static_cast<size_t>(t_device)]));
  return ACL_SUCCESS;
}

ACL_ABI_EXPORT aclError aclrtGetDevice(int32_t* deviceId) {
  ACL_REQUIRE_INIT("aclrtGetDevice");
  if (!deviceId) return Fail(ACL_ERROR_INVALID_PARAM, "aclrtGetDevice: deviceId is NULL");
  if (t_device < 0) return Fail(ACL_ERROR_RT_CONTEXT_NULL, "aclrtGetDevice: no device set (call aclrtSetDevice)");
  *deviceId = t_device;
  return ACL_SUCCESS;
}

ACL_ABI_EXPORT aclError aclrtMalloc(void** devPtr, size_t size, aclrtMemMallocPolicy policy) {
  ACL_REQUIRE_INIT("aclrtMalloc");
  ACL_REQUIRE_DEVICE("aclrtMalloc");
  if (aclError e = tshim::acl::CheckMalloc<CudaShim>(devPtr, size, policy)) return e;
  const size_t bytes = tshim::acl::MallocBytes(size);
  if (const cudaError_t e = cudaMalloc(devPtr, bytes); e != cudaSuccess) {
    *devPtr = nullptr;
    (void)cudaGetLastError();
    return Fail(ACL_ERROR_RT_MEMORY_ALLOCATION, Fmt("aclrtMalloc: cudaMalloc(%zu): %s", bytes, cudaGetErrorString(e)));
  }
  std::lock_guard<std::mutex> l(g_mu);
  g_blocks[reinterpret_cast<uintptr_t>(*devPtr)] = {bytes, true, t_device, static_cast<unsigned>(policy)};
  return ACL_SUCCESS;
}

ACL_ABI_EXPORT aclError aclrtFree(void* devPtr) {
  ACL_REQUIRE_INIT("aclrtFree");
  if (!devPtr) return Fail(ACL_ERROR_INVALID_PARAM, "aclrtFree: devPtr is NULL");
  if (!Forget(devPtr, true))  // rt:1221: "can only free memory allocated through aclrtMalloc"
    return Fail(ACL_ERROR_RT_MEMORY_FREE, Fmt("aclrtFree: %p is not the start of an aclrtMalloc allocation", devPtr));
  CU("aclrtFree", cudaFree(devPtr));
  return ACL_SUCCESS;
}

ACL_ABI_EXPORT aclError aclrtMallocHost(void** hostPtr, size_t size) {
  ACL_REQUIRE_INIT("aclrtMallocHost");
  ACL_REQUIRE_DEVICE("aclrtMallocHost");
  if (aclError e = tshim::acl::CheckMallocHost<CudaShim>(hostPtr, size)) return e;
  if (const cudaError_t e = cudaMallocHost(hostPtr, size); e != cudaSuccess) {  // page-aligned [host]
    *hostPtr = nullptr;
    (void)cudaGetLastError();
    return Fail(ACL_ERROR_RT_MEMORY_ALLOCATION,
                Fmt("aclrtMallocHost: cudaMallocHost(%zu): %s", size, cudaGetErrorString(e)));
  }
  std::lock_guard<std::mutex> l(g_mu);
  g_blocks[reinterpret_cast<uintptr_t>(*hostPtr)] = {size, false, -1, 0};
  return ACL_SUCCESS;
}

ACL_ABI_EXPORT aclError aclrtFreeHost(void* hostPtr) {
  ACL_REQUIRE_INIT("aclrtFreeHost");
  if (!hostPtr) return Fail(ACL_ERROR_INVALID_PARAM, "aclrtFreeHost: hostPtr is NULL");
  if (!Forget(hostPtr, false))  // rt:1272
    return Fail(ACL_ERROR_RT_MEMORY_FREE,
                Fmt("aclrtFreeHost: %p is not the start of an aclrtMallocHost allocation", hostPtr));
  CU("aclrtFreeHost", cudaFreeHost(hostPtr));
  return ACL_SUCCESS;
}

// [register] (../acl_rules.hpp): cudaHostRegister of the range (Portable; Mapped with ACL_HOST_REG_MAPPED), so the
// copies take it as page-locked memory, as CUDA's own registered memory; a range CUDA has registered already, or
// an unregister of memory CUDA never registered, fails as in the host shim.
ACL_ABI_EXPORT aclError aclrtHostRegisterV2(void* ptr, uint64_t size, uint32_t flag) {
  ACL_REQUIRE_INIT("aclrtHostRegisterV2");
  ACL_REQUIRE_DEVICE("aclrtHostRegisterV2");
  if (aclError e = tshim::acl::CheckHostRegister<CudaShim>(ptr, size, flag)) return e;
  const unsigned how = cudaHostRegisterPortable | ((flag & ACL_HOST_REG_MAPPED) ? cudaHostRegisterMapped : 0u);
  if (const cudaError_t e = cudaHostRegister(ptr, size, how); e != cudaSuccess) {
    if (e != cudaErrorHostMemoryAlreadyRegistered) return FailCuda("aclrtHostRegisterV2", "cudaHostRegister", e);
    (void)cudaGetLastError();
    return tshim::acl::RegisteredTwice<CudaShim>(ptr, size);
  }
  return ACL_SUCCESS;
}

ACL_ABI_EXPORT aclError aclrtHostUnregister(void* ptr) {
  ACL_REQUIRE_INIT("aclrtHostUnregister");
  if (!ptr) return Fail(ACL_ERROR_INVALID_PARAM, "aclrtHostUnregister: ptr is NULL");
  if (const cudaError_t e = cudaHostUnregister(ptr); e != cudaSuccess) {
    if (e != cudaErrorHostMemoryNotRegistered) return FailCuda("aclrtHostUnregister", "cudaHostUnregister", e);
    (void)cudaGetLastError();
    return tshim::acl::NotRegistered<CudaShim>(ptr);
  }
  return ACL_SUCCESS;
}

ACL_ABI_EXPORT aclError aclrtPointerGetAttributes(const void* ptr, aclrtPtrAttributes* attributes) {
  ACL_REQUIRE_INIT("aclrtPointerGetAttributes");
  if (!ptr || !attributes) return Fail(ACL_ERROR_INVALID_PARAM, "aclrtPointerGetAttributes: NULL argument");
  const PtrInfo p = Lookup(ptr);
  tshim::acl::PointerAttributes<CudaShim>(p, p.policy, attributes);  // as acl_shim.cpp
  return ACL_SUCCESS;
}

ACL_ABI_EXPORT aclError aclrtMemcpy(void* dst, size_t destMax, const void* src, size_t count, aclrtMemcpyKind kind) {
  ACL_REQUIRE_INIT("aclrtMemcpy");
  CopyPlan plan;
  if (aclError e = tshim::acl::CheckCopy<CudaShim>("aclrtMemcpy", dst, destMax, src, count, kind, false, &plan))
    return e;
  if (count == 0) return ACL_SUCCESS;
  if (plan.dst.kind != Kind::kDevice && plan.src.kind != Kind::kDevice)  // host to host, as acl_shim.cpp
    return std::memmove(dst, src, count), ACL_SUCCESS;
  CU("aclrtMemcpy", cudaMemcpy(dst, src, count, cudaMemcpyDefault));  // [memcpy]: at once, no stream sync
  CU("aclrtMemcpy", cudaStreamSynchronize(nullptr));                  // a device-to-device cudaMemcpy may not be done
  return ACL_SUCCESS;
}

ACL_ABI_EXPORT aclError aclrtMemcpyAsync(void* dst, size_t destMax, const void* src, size_t count, aclrtMemcpyKind kind,
                                         aclrtStream stream) {
  ACL_REQUIRE_INIT("aclrtMemcpyAsync");
  auto s = Resolve(stream);
  if (!s) return Fail(ACL_ERROR_INVALID_PARAM, Fmt("aclrtMemcpyAsync: stream %p is not a live stream", stream));
  CopyPlan plan;
  if (aclError e = tshim::acl::CheckCopy<CudaShim>("aclrtMemcpyAsync", dst, destMax, src, count, kind, true, &plan))
    return e;
  if (plan.pageable &&
      !tshim::acl::PageableSync())  // [async]: accepted, then the task fails (code: the host shim's choice)
    return Raise("aclrtMemcpyAsync", s, ACL_ERROR_RT_COPY_DATA,
                 Fmt("aclrtMemcpyAsync: %s copy with host memory not allocated by aclrtMallocHost (dst %p, src %p); "
                     "nothing was copied",
                     tshim::acl::KindName(kind), dst, src));
  if (kind == ACL_MEMCPY_HOST_TO_BUF_TO_DEVICE) {  // the runtime buffers the host bytes at the call
    auto staged =
        std::make_unique<std::vector<char>>(static_cast<const char*>(src), static_cast<const char*>(src) + count);
    CU("aclrtMemcpyAsync", cudaMemcpyAsync(dst, staged->data(), count, cudaMemcpyHostToDevice, s->handle));
    const cudaError_t e = cudaLaunchHostFunc(
        s->handle, [](void* v) { delete static_cast<std::vector<char>*>(v); }, staged.get());
    if (e != cudaSuccess) {  // the copy may still read the staging: let it finish before the buffer goes
      (void)cudaStreamSynchronize(s->handle);
      return FailCuda("aclrtMemcpyAsync", "cudaLaunchHostFunc", e);
    }
    staged.release();  // the host function frees it once the copy has run
    return ACL_SUCCESS;
  }
  CU("aclrtMemcpyAsync", cudaMemcpyAsync(dst, src, count, cudaMemcpyDefault, s->handle));
  if (plan.pageable) {  // TESSERA_SHIM_ACL_PAGEABLE=sync: CANN 8.5's rule, returns once the copy is done
    CU("aclrtMemcpyAsync", cudaStreamSynchronize(s->handle));
    return TakeError("aclrtMemcpyAsync", *s);
  }
  return ACL_SUCCESS;
}

ACL_ABI_EXPORT aclError aclrtMemset(void* devPtr, size_t maxCount, int32_t value, size_t count) {
  ACL_REQUIRE_INIT("aclrtMemset");
  PtrInfo p;
  if (aclError e = tshim::acl::CheckMemset<CudaShim>("aclrtMemset", devPtr, maxCount, count, &p)) return e;
  if (p.kind != Kind::kDevice) return std::memset(devPtr, value, count), ACL_SUCCESS;
  CU("aclrtMemset", cudaMemset(devPtr, value, count));
  CU("aclrtMemset", cudaStreamSynchronize(nullptr));  // cudaMemset of device memory may return before it is done
  return ACL_SUCCESS;
}

ACL_ABI_EXPORT aclError aclrtMemsetAsync(void* devPtr, size_t maxCount, int32_t value, size_t count,
                                         aclrtStream stream) {
  ACL_REQUIRE_INIT("aclrtMemsetAsync");
  auto s = Resolve(stream);
  if (!s) return Fail(ACL_ERROR_INVALID_PARAM, Fmt("aclrtMemsetAsync: stream %p is not a live stream", stream));
  PtrInfo p;
  if (aclError e = tshim::acl::CheckMemset<CudaShim>("aclrtMemsetAsync", devPtr, maxCount, count, &p)) return e;
  if (p.kind == Kind::kDevice) {
    CU("aclrtMemsetAsync", cudaMemsetAsync(devPtr, value, count, s->handle));
    return ACL_SUCCESS;
  }
  struct HostSet {  // host memory: set in stream order, as the host shim's task does
    void* p;
    int value;
    size_t count;
  };
  auto set = std::make_unique<HostSet>(HostSet{devPtr, value, count});
  CU("aclrtMemsetAsync", cudaLaunchHostFunc(
                             s->handle,
                             [](void* v) {
                               std::unique_ptr<HostSet> h(static_cast<HostSet*>(v));
                               std::memset(h->p, h->value, h->count);
                             },
                             set.get()));
  set.release();
  return ACL_SUCCESS;
}

ACL_ABI_EXPORT aclError aclrtCreateStream(aclrtStream* stream) {
  ACL_REQUIRE_INIT("aclrtCreateStream");
  ACL_REQUIRE_DEVICE("aclrtCreateStream");
  if (!stream) return Fail(ACL_ERROR_INVALID_PARAM, "aclrtCreateStream: stream is NULL");
  auto st = std::make_shared<StreamState>();
  CU("aclrtCreateStream", cudaStreamCreateWithFlags(&st->handle, cudaStreamNonBlocking));
  st->device = t_device;
  std::lock_guard<std::mutex> l(g_mu);
  g_streams[st->handle] = st;
  *stream = st->handle;
  return ACL_SUCCESS;
}

ACL_ABI_EXPORT aclError aclrtDestroyStream(aclrtStream stream) {
  ACL_REQUIRE_INIT("aclrtDestroyStream");
  {
    std::lock_guard<std::mutex> l(g_mu);
    if (!stream || !g_streams.erase(stream))
      return Fail(ACL_ERROR_INVALID_PARAM, Fmt("aclrtDestroyStream: %p is not a live stream", stream));
  }
  CU("aclrtDestroyStream", cudaStreamDestroy(static_cast<cudaStream_t>(stream)));  // queued work still runs
  return ACL_SUCCESS;
}

ACL_ABI_EXPORT aclError aclrtSynchronizeStream(aclrtStream stream) {
  ACL_REQUIRE_INIT("aclrtSynchronizeStream");
  auto s = Resolve(stream);
  if (!s) return Fail(ACL_ERROR_INVALID_PARAM, Fmt("aclrtSynchronizeStream: stream %p is not a live stream", stream));
  CU("aclrtSynchronizeStream", cudaStreamSynchronize(s->handle));
  return TakeError("aclrtSynchronizeStream", *s);
}

ACL_ABI_EXPORT aclError aclrtSynchronizeDevice() {
  ACL_REQUIRE_INIT("aclrtSynchronizeDevice");
  ACL_REQUIRE_DEVICE("aclrtSynchronizeDevice");
  CU("aclrtSynchronizeDevice", cudaDeviceSynchronize());
  std::vector<std::shared_ptr<StreamState>> mine = {Resolve(nullptr)};
  {
    std::lock_guard<std::mutex> l(g_mu);
    for (auto& [h, s] : g_streams)
      if (s->device == t_device) mine.push_back(s);
  }
  aclError first = ACL_SUCCESS;
  for (auto& s : mine) {
    const aclError e = TakeError("aclrtSynchronizeDevice", *s);
    if (!first) first = e;
  }
  return first;
}

ACL_ABI_EXPORT aclError aclrtCreateEvent(aclrtEvent* event) {
  ACL_REQUIRE_INIT("aclrtCreateEvent");
  ACL_REQUIRE_DEVICE("aclrtCreateEvent");
  if (!event) return Fail(ACL_ERROR_INVALID_PARAM, "aclrtCreateEvent: event is NULL");
  cudaEvent_t e = nullptr;
  CU("aclrtCreateEvent", cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  std::lock_guard<std::mutex> l(g_mu);
  g_events[e] = {};
  *event = e;
  return ACL_SUCCESS;
}

ACL_ABI_EXPORT aclError aclrtDestroyEvent(aclrtEvent event) {
  ACL_REQUIRE_INIT("aclrtDestroyEvent");
  {
    std::lock_guard<std::mutex> l(g_mu);
    if (!event || !g_events.erase(event))
      return Fail(ACL_ERROR_INVALID_PARAM, Fmt("aclrtDestroyEvent: %p is not a live event", event));
  }
  CU("aclrtDestroyEvent", cudaEventDestroy(static_cast<cudaEvent_t>(event)));
  return ACL_SUCCESS;
}

ACL_ABI_EXPORT aclError aclrtRecordEvent(aclrtEvent event, aclrtStream stream) {
  ACL_REQUIRE_INIT("aclrtRecordEvent");
  if (!LiveEvent(event)) return Fail(ACL_ERROR_INVALID_PARAM, Fmt("aclrtRecordEvent: %p is not a live event", event));
  auto s = Resolve(stream);
  if (!s) return Fail(ACL_ERROR_INVALID_PARAM, Fmt("aclrtRecordEvent: stream %p is not a live stream", stream));
  CU("aclrtRecordEvent", cudaEventRecord(static_cast<cudaEvent_t>(event), s->handle));
  std::lock_guard<std::mutex> l(g_mu);
  if (auto it = g_events.find(event); it != g_events.end()) it->second.recorded = true;
  return ACL_SUCCESS;
}

ACL_ABI_EXPORT aclError aclrtQueryEventStatus(aclrtEvent event, aclrtEventRecordedStatus* status) {
  ACL_REQUIRE_INIT("aclrtQueryEventStatus");
  bool recorded = false;
  {
    std::lock_guard<std::mutex> l(g_mu);
    auto it = event ? g_events.find(event) : g_events.end();
    if (it == g_events.end() || !status)
      return Fail(ACL_ERROR_INVALID_PARAM, Fmt("aclrtQueryEventStatus: event %p", event));
    recorded = it->second.recorded;
  }
  *status = ACL_EVENT_RECORDED_STATUS_NOT_READY;  // [event]: never recorded is NOT_READY (CUDA would say complete)
  if (!recorded) return ACL_SUCCESS;
  const cudaError_t e = cudaEventQuery(static_cast<cudaEvent_t>(event));
  if (e == cudaSuccess) *status = ACL_EVENT_RECORDED_STATUS_COMPLETE;
  if (e == cudaSuccess || e == cudaErrorNotReady) return (void)cudaGetLastError(), ACL_SUCCESS;
  return FailCuda("aclrtQueryEventStatus", "cudaEventQuery", e);
}

ACL_ABI_EXPORT aclError aclrtQueryEvent(aclrtEvent event, aclrtEventStatus* status) {
  return tshim::acl::QueryEvent(event, status, aclrtQueryEventStatus);
}

ACL_ABI_EXPORT aclError aclrtSynchronizeEvent(aclrtEvent event) {
  ACL_REQUIRE_INIT("aclrtSynchronizeEvent");
  if (!LiveEvent(event))
    return Fail(ACL_ERROR_INVALID_PARAM, Fmt("aclrtSynchronizeEvent: %p is not a live event", event));
  CU("aclrtSynchronizeEvent", cudaEventSynchronize(static_cast<cudaEvent_t>(event)));  // never recorded: at once
  return ACL_SUCCESS;
}

ACL_ABI_EXPORT aclError aclrtStreamWaitEvent(aclrtStream stream, aclrtEvent event) {
  ACL_REQUIRE_INIT("aclrtStreamWaitEvent");
  if (!LiveEvent(event))
    return Fail(ACL_ERROR_INVALID_PARAM, Fmt("aclrtStreamWaitEvent: %p is not a live event", event));
  auto s = Resolve(stream);
  if (!s) return Fail(ACL_ERROR_INVALID_PARAM, Fmt("aclrtStreamWaitEvent: stream %p is not a live stream", stream));
  CU("aclrtStreamWaitEvent", cudaStreamWaitEvent(s->handle, static_cast<cudaEvent_t>(event), 0));  // the latest record
  return ACL_SUCCESS;
}

// Not ACL APIs: what the aclnn shims (libnnopbase.so, cuda/opapi_cuda_shim.cu's libopapi.so) use. Messages for
// aclGetRecentErrMsg; device memory this shim allocated (1, with its ACL device and the bytes left to its end, or
// 0); a live stream (0, with the cudaStream_t, its ACL device and that device's CUDA number, or -1).
ACL_ABI_EXPORT void tesseraAclShimSetError(const char* msg) { t_err = msg ? msg : ""; }

ACL_ABI_EXPORT int tesseraAclCudaShimLookup(const void* p, int* device, size_t* avail) {
  const PtrInfo i = Lookup(p);
  if (i.kind != Kind::kDevice || !i.base) return 0;
  *device = i.device;
  *avail = i.avail;
  return 1;
}

ACL_ABI_EXPORT int tesseraAclCudaShimStream(aclrtStream stream, void** cuda_stream, int* device, int* cuda_device) {
  if (!Initialized()) return -1;
  auto s = Resolve(stream);
  if (!s || s->device < 0 || static_cast<size_t>(s->device) >= Devs().cuda.size()) return -1;
  *cuda_stream = s->handle;
  *device = s->device;
  *cuda_device = Devs().cuda[static_cast<size_t>(s->device)];
  return 0;
}

}  // extern "C"
