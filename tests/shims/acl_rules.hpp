// tests/shims/acl_rules: the ACL rules that the host shim (acl_shim.cpp) and the CUDA-backed one
// (cuda/acl_cuda_shim.cpp) enforce alike: the argument checks of the copies and memsets, aclInit / aclFinalize's
// reference count, aclGetRecentErrMsg, aclrtGetSocName and the attributes of a pointer. The rules and their
// sources ([memcpy], [async], [init], [event], [host]) are cited in acl_shim.cpp's header. The checks are templates
// on the shim, a type `Shim` with
//   using Ptr = ...;                           its pointer info: kind (an enum with kUnregistered, kDevice and
//                                              kPinnedHost), device, base, size, avail
//   static Ptr Lookup(const void* p);          what the shim knows of `p`
//   static bool Tracked(const Ptr& p);         `p` lies in one of the shim's own allocations (bounds apply)
//   static bool StrictKind();                  TESSERA_SHIM_ACL_STRICT_KIND as the shim reads it
//   static aclError Fail(aclError, const std::string& msg);  the shim's failure (message, code)
#pragma once

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>

#include "acl_abi.h"
#include "shim_runtime.hpp"

namespace tshim::acl {

// [init]: `fn` fails with ACL_ERROR_UNINITIALIZE until aclInit (the shim's Initialized() and Fail).
#define ACL_REQUIRE_INIT(fn) \
  if (!Initialized()) return Fail(ACL_ERROR_UNINITIALIZE, fn ": aclInit has not been called")

inline bool Initialized(std::mutex& mu, const int& refs) {
  std::lock_guard<std::mutex> l(mu);
  return refs > 0;
}

// rt:1090: "real alloc size is aligned to 32 bytes and padded with 32 bytes".
inline size_t MallocBytes(size_t size) { return (size + 31) / 32 * 32 + 32; }

template <typename Shim>
aclError CheckMalloc(void** devPtr, size_t size, aclrtMemMallocPolicy policy) {
  if (!devPtr || size == 0)
    return Shim::Fail(ACL_ERROR_INVALID_PARAM, Fmt("aclrtMalloc: devPtr %p, size %zu", devPtr, size));
  const unsigned base = static_cast<unsigned>(policy) & 0xffu;
  if (base > ACL_MEM_MALLOC_HUGE1G_ONLY_P2P)
    return Shim::Fail(ACL_ERROR_INVALID_PARAM, Fmt("aclrtMalloc: policy 0x%x is not an aclrtMemMallocPolicy", policy));
  return ACL_SUCCESS;
}

template <typename Shim>
aclError CheckMallocHost(void** hostPtr, size_t size) {
  if (!hostPtr || size == 0)  // [host]
    return Shim::Fail(ACL_ERROR_INVALID_PARAM, Fmt("aclrtMallocHost: hostPtr %p, size %zu", hostPtr, size));
  return ACL_SUCCESS;
}

// aclrtQueryEvent, deprecated (rt:1011): what `query` (aclrtQueryEventStatus) says, as an aclrtEventStatus.
inline aclError QueryEvent(aclrtEvent event, aclrtEventStatus* status,
                           aclError (*query)(aclrtEvent, aclrtEventRecordedStatus*)) {
  aclrtEventRecordedStatus r;
  if (aclError err = query(event, &r)) return err;
  *status = r == ACL_EVENT_RECORDED_STATUS_COMPLETE ? ACL_EVENT_STATUS_COMPLETE : ACL_EVENT_STATUS_NOT_READY;
  return ACL_SUCCESS;
}

inline const char* KindName(int k) {
  static const char* const kNames[] = {
      "HOST_TO_HOST", "HOST_TO_DEVICE",        "DEVICE_TO_HOST",         "DEVICE_TO_DEVICE",
      "DEFAULT",      "HOST_TO_BUF_TO_DEVICE", "INNER_DEVICE_TO_DEVICE", "INTER_DEVICE_TO_DEVICE"};
  return k >= 0 && k <= 7 ? kNames[k] : "?";
}

template <typename P>
const char* What(const P& p) {
  using K = decltype(p.kind);
  return p.kind == K::kDevice ? "device memory" : p.kind == K::kPinnedHost ? "aclrtMallocHost memory" : "host memory";
}

template <typename P>
struct CopyPlan {
  P dst, src;
  bool pageable = false;  // an H2D/D2H copy touches host memory that aclrtMallocHost did not allocate
};

template <typename Shim>
aclError CheckCopy(const char* fn, void* dst, size_t destMax, const void* src, size_t count, aclrtMemcpyKind kind,
                   bool async, CopyPlan<typename Shim::Ptr>* plan) {
  using P = typename Shim::Ptr;
  using K = decltype(P::kind);
  if (!dst || !src) return Shim::Fail(ACL_ERROR_INVALID_PARAM, Fmt("%s: dst %p or src %p is NULL", fn, dst, src));
  if (count > destMax)  // code: shim's choice (the docs say only "failure")
    return Shim::Fail(ACL_ERROR_INVALID_PARAM, Fmt("%s: count %zu exceeds destMax %zu", fn, count, destMax));
  const int k = static_cast<int>(kind);
  if (k < 0 || k > 7) return Shim::Fail(ACL_ERROR_INVALID_PARAM, Fmt("%s: kind %d is not an aclrtMemcpyKind", fn, k));
  plan->dst = Shim::Lookup(dst);
  plan->src = Shim::Lookup(src);
  for (const P* p : {&plan->dst, &plan->src}) {
    if (Shim::Tracked(*p) && count > p->avail)
      return Shim::Fail(ACL_ERROR_INVALID_PARAM, Fmt("%s: count %zu runs past the end of the %zu-byte %s at %p", fn,
                                                     count, p->size, What(*p), p->base));
  }
  const bool dd = plan->dst.kind == K::kDevice, sd = plan->src.kind == K::kDevice;
  bool want_dd = dd, want_sd = sd;  // what `kind` says (rt:115-124)
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
  const bool check_kind = async || Shim::StrictKind();
  if (check_kind && (want_dd != dd || want_sd != sd))  // code: shim's choice ("invalid memory type")
    return Shim::Fail(ACL_ERROR_RT_INVALID_MEMORY_TYPE,
                      Fmt("%s: kind ACL_MEMCPY_%s does not match the pointers: dst %p is %s, src %p is %s", fn,
                          KindName(k), dst, What(plan->dst), src, What(plan->src)));
  if (check_kind && dd && sd && kind == ACL_MEMCPY_INNER_DEVICE_TO_DEVICE && plan->dst.device != plan->src.device)
    return Shim::Fail(ACL_ERROR_RT_INVALID_MEMORY_TYPE, Fmt("%s: INNER_DEVICE_TO_DEVICE between devices %d and %d", fn,
                                                            plan->src.device, plan->dst.device));
  if (check_kind && dd && sd && kind == ACL_MEMCPY_INTER_DEVICE_TO_DEVICE && plan->dst.device == plan->src.device)
    return Shim::Fail(ACL_ERROR_RT_INVALID_MEMORY_TYPE,
                      Fmt("%s: INTER_DEVICE_TO_DEVICE within device %d", fn, plan->src.device));
  if (!async) return ACL_SUCCESS;
  if (!dd && !sd)  // [async]
    return Shim::Fail(ACL_ERROR_RT_FEATURE_NOT_SUPPORT,
                      Fmt("%s: asynchronous host-to-host copies are not supported (dst %p, src %p)", fn, dst, src));
  if (reinterpret_cast<uintptr_t>(dst) % 64 || reinterpret_cast<uintptr_t>(src) % 64)  // [async]; code: shim's
    return Shim::Fail(ACL_ERROR_RT_ADDR_UNALIGNED,
                      Fmt("%s: src %p and dst %p must both be 64-byte aligned", fn, src, dst));
  plan->pageable = kind != ACL_MEMCPY_HOST_TO_BUF_TO_DEVICE &&
                   ((!dd && plan->dst.kind == K::kUnregistered) || (!sd && plan->src.kind == K::kUnregistered));
  return ACL_SUCCESS;
}

template <typename Shim>
aclError CheckMemset(const char* fn, void* devPtr, size_t maxCount, size_t count, typename Shim::Ptr* p) {
  if (!devPtr) return Shim::Fail(ACL_ERROR_INVALID_PARAM, Fmt("%s: devPtr is NULL", fn));
  if (count > maxCount)  // code: shim's choice
    return Shim::Fail(ACL_ERROR_INVALID_PARAM, Fmt("%s: count %zu exceeds maxCount %zu", fn, count, maxCount));
  *p = Shim::Lookup(devPtr);  // rt:1307-1309: host or device memory, judged from the address
  if (Shim::Tracked(*p) && count > p->avail)
    return Shim::Fail(ACL_ERROR_INVALID_PARAM, Fmt("%s: count %zu runs past the end of the %zu-byte %s at %p", fn,
                                                   count, p->size, What(*p), p->base));
  return ACL_SUCCESS;
}

// [register] aclrtHostRegisterV2 (acl_abi.h cites the page): ptr 4 KiB-aligned ("Host内存地址需4K页对齐"), flag one
// or more of the ACL_HOST_REG_* macros, IOMEMORY and READONLY "reserved, not supported now"; PINNED only for host
// memory that is not already page-locked (cann/runtime issue 388's correction: "memory the user allocated that is not
// page-locked"). Codes: shim's choice (the page says only "other values: failure"); a second registration of a range
// is refused by the shim (Register), as cudaHostRegister refuses it.
template <typename Shim>
aclError CheckHostRegister(void* ptr, uint64_t size, uint32_t flag) {
  if (!ptr || size == 0)
    return Shim::Fail(ACL_ERROR_INVALID_PARAM,
                      Fmt("aclrtHostRegisterV2: ptr %p, size %llu", ptr, static_cast<unsigned long long>(size)));
  if (reinterpret_cast<uintptr_t>(ptr) % 4096 != 0)
    return Shim::Fail(ACL_ERROR_RT_ADDR_UNALIGNED,
                      Fmt("aclrtHostRegisterV2: ptr %p is not 4 KiB-aligned (the page requires it)", ptr));
  const uint32_t known = ACL_HOST_REG_MAPPED | ACL_HOST_REG_IOMEMORY | ACL_HOST_REG_READONLY | ACL_HOST_REG_PINNED;
  if (flag == 0 || (flag & ~known) != 0)
    return Shim::Fail(ACL_ERROR_INVALID_PARAM,
                      Fmt("aclrtHostRegisterV2: flag 0x%x is not a set of ACL_HOST_REG_*", flag));
  if (flag & (ACL_HOST_REG_IOMEMORY | ACL_HOST_REG_READONLY))
    return Shim::Fail(ACL_ERROR_RT_FEATURE_NOT_SUPPORT,
                      Fmt("aclrtHostRegisterV2: flag 0x%x asks for IOMEMORY or READONLY, reserved options", flag));
  if ((flag & ACL_HOST_REG_PINNED) && Shim::Lookup(ptr).kind != decltype(Shim::Lookup(ptr).kind)::kUnregistered)
    return Shim::Fail(ACL_ERROR_INVALID_PARAM,
                      Fmt("aclrtHostRegisterV2: %p is already page-locked or the device's (ACL_HOST_REG_PINNED takes "
                          "only memory that is not)",
                          ptr));
  return ACL_SUCCESS;
}

// [register]: the failures of a range registered twice, and of an unregister of memory not registered (codes: shim's).
template <typename Shim>
aclError RegisteredTwice(void* ptr, uint64_t size) {
  return Shim::Fail(ACL_ERROR_INVALID_PARAM, Fmt("aclrtHostRegisterV2: %p (%llu bytes) overlaps a registered range",
                                                 ptr, static_cast<unsigned long long>(size)));
}
template <typename Shim>
aclError NotRegistered(void* ptr) {
  return Shim::Fail(ACL_ERROR_INVALID_PARAM,
                    Fmt("aclrtHostUnregister: %p is not the start of a registered range", ptr));
}

// [async], CANN 8.5.0: TESSERA_SHIM_ACL_PAGEABLE=sync copies pageable memory synchronously.
inline bool PageableSync() {
  const char* v = std::getenv("TESSERA_SHIM_ACL_PAGEABLE");
  return v && std::strcmp(v, "sync") == 0;
}

// aclrtPointerGetAttributes of `p` (`policy`: the aclrtMalloc policy of device memory).
// ASSUMPTION (undocumented mapping): aclrtMallocHost memory reports HOST, anything else not ours UNREGISTERED;
// pageSize 2 MiB for huge-page policies (HUGE_FIRST only above 1 MiB), else 4 KiB.
template <typename Shim>
void PointerAttributes(const typename Shim::Ptr& p, unsigned policy, aclrtPtrAttributes* attributes) {
  using K = decltype(p.kind);
  std::memset(attributes, 0, sizeof *attributes);
  if (p.kind == K::kDevice) {
    attributes->location = {static_cast<uint32_t>(p.device), ACL_MEM_LOCATION_TYPE_DEVICE};
    const unsigned pol = policy & 0xffu;
    const bool huge =
        Shim::Tracked(p) &&
        (pol == ACL_MEM_MALLOC_HUGE_ONLY || pol == ACL_MEM_MALLOC_HUGE_ONLY_P2P ||
         ((pol == ACL_MEM_MALLOC_HUGE_FIRST || pol == ACL_MEM_MALLOC_HUGE_FIRST_P2P) && p.size > (1u << 20)));
    attributes->pageSize = huge ? (2u << 20) : 4096u;
  } else {
    attributes->location = {0,
                            p.kind == K::kPinnedHost ? ACL_MEM_LOCATION_TYPE_HOST : ACL_MEM_LOCATION_TYPE_UNREGISTERED};
    attributes->pageSize = 4096;
  }
}

inline aclError Init(std::mutex& mu, int& refs) {
  std::lock_guard<std::mutex> l(mu);
  ++refs;  // rt:2293-2294: "can be called multiple times ... the reference count will increase by 1"
  return ACL_SUCCESS;
}

template <typename Shim>
aclError Finalize(std::mutex& mu, int& refs) {
  std::lock_guard<std::mutex> l(mu);
  if (refs == 0) return Shim::Fail(ACL_ERROR_UNINITIALIZE, "aclFinalize: aclInit has not been called");
  refs = 0;  // rt:2310-2311: "the internal reference count is reset to 0"
  return ACL_SUCCESS;
}

// rt:2348-2353 ("get recent error message; null for failed"). The shim returns this thread's last failure
// message `err` once (NULL when there was none since the previous call), kept in `out` until the next.
inline const char* RecentErrMsg(std::string& err, std::string& out) {
  if (err.empty()) return nullptr;
  out = std::move(err);
  err.clear();
  return out.c_str();
}

inline const char* SocName() {
  static const std::string name = [] {
    const char* v = std::getenv("TESSERA_SHIM_SOC_NAME");
    return std::string(v && *v ? v : "Ascend910B1");  // an Atlas A2 training part: the rules modelled
  }();
  return name.c_str();
}

}  // namespace tshim::acl
