// tests/shims/musa_shim: libmusart.so, a test-only host shim of Moore Threads' MUSA runtime (declarations and the
// status of their sources: musa_abi.h -- names public, values and signatures ASSUMED to be CUDA's). Device
// memory, streams and events are shim_runtime's. The behaviour modelled is the CUDA runtime's, which MUSA mirrors
// name for name; where CUDA documents it (cuda_runtime_api.h of CUDA 13.0, "api:N"):
//   - a call that fails sets this thread's last error: musaGetLastError returns and clears it, musaPeekAtLastError
//     returns it (api:1140-1216); errors of queued work come back from the next synchronising call;
//   - musaMalloc(size 0) succeeds with NULL; musaFree(NULL) and musaFreeHost(NULL) do nothing; musaFree waits for
//     the device's streams first (CUDA's implicit synchronisation);
//   - musaEventQuery on an event never recorded returns musaSuccess (api:2895-2920 and CUDA's rule);
//   - musaPointerGetAttributes on host memory the runtime does not know returns success with
//     musaMemoryTypeUnregistered (api:8389-8390);
//   - musaMemcpyAsync with pageable host memory: host-to-device stages the bytes at the call, device-to-host
//     returns only when the copy is done (CUDA's "API synchronization behavior"); with pinned memory (musaMallocHost,
//     musaHostAlloc) both are fully asynchronous, so reading the destination before synchronising is a bug the
//     TESSERA_SHIM_STREAM_DELAY_US knob exposes.
// Stricter than CUDA on purpose: a `kind` that does not match the pointers (undefined behaviour in CUDA) is an
// error, musaErrorInvalidValue (code: the shim's choice). The NULL stream is an ordinary per-device stream; the
// legacy default stream's implicit synchronisation with other streams is not modelled.
#include <pthread.h>

#include <cstdio>
#include <cstring>
#include <mutex>
#include <vector>

#include "musa_abi.h"
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
std::vector<std::shared_ptr<tshim::Stream>> g_default;
thread_local int t_device = 0;
thread_local musaError_t t_last = musaSuccess;
thread_local std::string t_msg;

#ifndef TSHIM_VISIBLE_ENV  // corex_abi.h builds this file as CoreX's runtime, with its own variable
#define TSHIM_VISIBLE_ENV "MUSA_VISIBLE_DEVICES"
#endif
int DeviceCount() { return tshim::DeviceCount(TSHIM_VISIBLE_ENV); }
uint64_t Delay() { return tshim::EnvU64("TESSERA_SHIM_STREAM_DELAY_US", 0); }

musaError_t Fail(musaError_t code, const std::string& msg) {
  t_last = code;
  t_msg = msg;
  if (tshim::EnvU64("TESSERA_SHIM_VERBOSE", 0)) std::fprintf(stderr, "[musa shim] %s (%d)\n", msg.c_str(), code);
  return code;
}

std::shared_ptr<tshim::Stream> DefaultStream(int device) {
  std::lock_guard<std::mutex> l(g_mu);
  if (g_default.size() < static_cast<size_t>(DeviceCount())) g_default.resize(static_cast<size_t>(DeviceCount()));
  auto& s = g_default[static_cast<size_t>(device)];
  if (!s) s = std::make_shared<tshim::Stream>(device, Delay());
  return s;
}

std::shared_ptr<tshim::Stream> Resolve(musaStream_t s) { return s ? g_streams.Get(s) : DefaultStream(t_device); }

const char* What(const PtrInfo& p) {
  return p.kind == MemKind::kDevice       ? "device memory"
         : p.kind == MemKind::kPinnedHost ? "pinned host memory"
                                          : "pageable host memory";
}

musaError_t CheckCopy(const char* fn, void* dst, const void* src, size_t count, musaMemcpyKind kind, PtrInfo* d,
                      PtrInfo* s) {
  if (!dst || !src) return Fail(musaErrorInvalidValue, Fmt("%s: dst %p or src %p is NULL", fn, dst, src));
  if (static_cast<int>(kind) < 0 || kind > musaMemcpyDefault)
    return Fail(musaErrorInvalidMemcpyDirection, Fmt("%s: kind %d is not a musaMemcpyKind", fn, kind));
  *d = g_mem.Lookup(dst);
  *s = g_mem.Lookup(src);
  for (const PtrInfo* p : {d, s})
    if (p->kind != MemKind::kUnregistered && count > p->avail)
      return Fail(musaErrorInvalidValue, Fmt("%s: count %zu runs past the end of the %zu-byte %s at %p", fn, count,
                                             p->size, What(*p), p->base));
  if (kind == musaMemcpyDefault) return musaSuccess;
  const bool want_dd = kind == musaMemcpyHostToDevice || kind == musaMemcpyDeviceToDevice;
  const bool want_sd = kind == musaMemcpyDeviceToHost || kind == musaMemcpyDeviceToDevice;
  if (want_dd != (d->kind == MemKind::kDevice) || want_sd != (s->kind == MemKind::kDevice))
    return Fail(musaErrorInvalidValue, Fmt("%s: kind %d does not match the pointers: dst %p is %s, src %p is %s", fn,
                                           kind, dst, What(*d), src, What(*s)));
  return musaSuccess;
}

tshim::Task CopyTask(void* dst, const void* src, size_t count, MemKind dk, MemKind sk) {
  return [=] {
    const PtrInfo d = g_mem.Lookup(dst), s = g_mem.Lookup(src);
    if (d.kind != dk || s.kind != sk)
      return Status{musaErrorIllegalAddress, Fmt("memcpy: dst %p or src %p was freed before the copy ran", dst, src)};
    std::memmove(d.Translate(dst), s.Translate(src), count);
    return Status::Ok();
  };
}

musaError_t FromStatus(const char* fn, const Status& st) {
  return st.code ? Fail(static_cast<musaError_t>(st.code), Fmt("%s: %s", fn, st.msg.c_str())) : musaSuccess;
}

void ForgetStreamsInChild() { tshim::ForgetRuntimeAfterFork(g_mu, g_default, g_streams, g_events, g_mem); }
[[maybe_unused]] const int g_atfork = pthread_atfork(nullptr, nullptr, ForgetStreamsInChild);
}  // namespace

namespace {
musaError_t MemsetOn(const char* fn, void* devPtr, int value, size_t count, const std::shared_ptr<tshim::Stream>& st,
                     bool wait) {
  const PtrInfo p = g_mem.Lookup(devPtr);
  if (!devPtr || p.kind != MemKind::kDevice)
    return Fail(musaErrorInvalidValue, Fmt("%s: %p is not device memory", fn, devPtr));
  if (count > p.avail)
    return Fail(musaErrorInvalidValue,
                Fmt("%s: count %zu runs past the end of the %zu-byte allocation at %p", fn, count, p.size, p.base));
  tshim::Task t = [devPtr, value, count] {
    const PtrInfo q = g_mem.Lookup(devPtr);
    if (q.kind != MemKind::kDevice) return Status{musaErrorIllegalAddress, Fmt("memset: %p was freed first", devPtr)};
    std::memset(q.Translate(devPtr), value, count);
    return Status::Ok();
  };
  if (wait) return FromStatus(fn, st->RunAndWait(std::move(t)));
  st->Enqueue(std::move(t));
  return musaSuccess;
}
}  // namespace

extern "C" {

MUSA_ABI_EXPORT musaError_t musaGetDeviceCount(int* count) {
  if (!count) return Fail(musaErrorInvalidValue, "musaGetDeviceCount: count is NULL");
  *count = DeviceCount();
  return musaSuccess;
}

MUSA_ABI_EXPORT musaError_t musaSetDevice(int device) {
  if (device < 0 || device >= DeviceCount())
    return Fail(musaErrorInvalidDevice, Fmt("musaSetDevice: device %d is not in [0, %d)", device, DeviceCount()));
  t_device = device;
  return musaSuccess;
}

MUSA_ABI_EXPORT musaError_t musaGetDevice(int* device) {
  if (!device) return Fail(musaErrorInvalidValue, "musaGetDevice: device is NULL");
  *device = t_device;
  return musaSuccess;
}

MUSA_ABI_EXPORT musaError_t musaDeviceSynchronize() {
  std::vector<std::shared_ptr<tshim::Stream>> all = g_streams.All();
  all.push_back(DefaultStream(t_device));
  Status first;
  for (auto& s : all) {
    if (s->device() != t_device) continue;
    Status st = s->Synchronize();
    if (st.code && !first.code) first = st;
  }
  return FromStatus("musaDeviceSynchronize", first);
}

MUSA_ABI_EXPORT musaError_t musaGetLastError() {
  const musaError_t e = t_last;
  t_last = musaSuccess;
  return e;
}

MUSA_ABI_EXPORT musaError_t musaPeekAtLastError() { return t_last; }

MUSA_ABI_EXPORT const char* musaGetErrorString(musaError_t error) {
  switch (error) {  // CUDA's descriptions of the same codes
    case musaSuccess:
      return "no error";
    case musaErrorInvalidValue:
      return "invalid argument";
    case musaErrorMemoryAllocation:
      return "out of memory";
    case musaErrorInitializationError:
      return "initialization error";
    case musaErrorInvalidDevicePointer:
      return "invalid device pointer";
    case musaErrorInvalidMemcpyDirection:
      return "invalid copy direction for memcpy";
    case musaErrorNoDevice:
      return "no MUSA-capable device is detected";
    case musaErrorInvalidDevice:
      return "invalid device ordinal";
    case musaErrorInvalidResourceHandle:
      return "invalid resource handle";
    case musaErrorNotReady:
      return "device not ready";
    case musaErrorIllegalAddress:
      return "an illegal memory access was encountered";
    case musaErrorMisalignedAddress:
      return "misaligned address";
    case musaErrorUnknown:
      return "unknown error";
  }
  return "unrecognized error code";
}

MUSA_ABI_EXPORT musaError_t musaMalloc(void** devPtr, size_t size) {
  if (!devPtr) return Fail(musaErrorInvalidValue, "musaMalloc: devPtr is NULL");
  if (size == 0) return *devPtr = nullptr, musaSuccess;
  *devPtr = g_mem.Alloc(size, MemKind::kDevice, t_device, 0);
  return *devPtr ? musaSuccess : Fail(musaErrorMemoryAllocation, Fmt("musaMalloc: out of memory for %zu bytes", size));
}

MUSA_ABI_EXPORT musaError_t musaFree(void* devPtr) {
  if (!devPtr) return musaSuccess;
  const PtrInfo p = g_mem.Lookup(devPtr);
  if (p.kind == MemKind::kDevice) {
    const int saved = t_device;
    t_device = p.device;
    (void)musaDeviceSynchronize();
    t_device = saved;
  }
  if (!g_mem.Free(devPtr, MemKind::kDevice))
    return Fail(musaErrorInvalidValue, Fmt("musaFree: %p is not the start of a musaMalloc allocation", devPtr));
  return musaSuccess;
}

MUSA_ABI_EXPORT musaError_t musaHostAlloc(void** pHost, size_t size, unsigned int flags) {
  if (!pHost || (flags & ~0x0fu))
    return Fail(musaErrorInvalidValue, Fmt("musaHostAlloc: pHost %p, flags 0x%x", pHost, flags));
  if (size == 0) return *pHost = nullptr, musaSuccess;
  *pHost = g_mem.Alloc(size, MemKind::kPinnedHost, t_device, flags);
  return *pHost ? musaSuccess : Fail(musaErrorMemoryAllocation, Fmt("musaHostAlloc: out of memory for %zu", size));
}

MUSA_ABI_EXPORT musaError_t musaMallocHost(void** ptr, size_t size) {
  return musaHostAlloc(ptr, size, musaHostAllocDefault);
}

MUSA_ABI_EXPORT musaError_t musaFreeHost(void* ptr) {
  if (!ptr) return musaSuccess;
  if (!g_mem.Free(ptr, MemKind::kPinnedHost))
    return Fail(musaErrorInvalidValue, Fmt("musaFreeHost: %p is not the start of a pinned allocation", ptr));
  return musaSuccess;
}

MUSA_ABI_EXPORT musaError_t musaMemcpy(void* dst, const void* src, size_t count, enum musaMemcpyKind kind) {
  PtrInfo d, s;
  if (musaError_t e = CheckCopy("musaMemcpy", dst, src, count, kind, &d, &s)) return e;
  // Synchronous, and ordered after the work queued on the current device's NULL stream.
  return FromStatus("musaMemcpy", DefaultStream(t_device)->RunAndWait(CopyTask(dst, src, count, d.kind, s.kind)));
}

MUSA_ABI_EXPORT musaError_t musaMemcpyAsync(void* dst, const void* src, size_t count, enum musaMemcpyKind kind,
                                            musaStream_t stream) {
  auto st = Resolve(stream);
  if (!st) return Fail(musaErrorInvalidResourceHandle, Fmt("musaMemcpyAsync: stream %p is not a live stream", stream));
  PtrInfo d, s;
  if (musaError_t e = CheckCopy("musaMemcpyAsync", dst, src, count, kind, &d, &s)) return e;
  if (s.kind == MemKind::kUnregistered) {  // pageable source: the bytes are taken at the call
    auto staged =
        std::make_shared<std::vector<char>>(static_cast<const char*>(src), static_cast<const char*>(src) + count);
    const MemKind dk = d.kind;
    tshim::Task t = [dst, staged, dk] {
      const PtrInfo q = g_mem.Lookup(dst);
      if (q.kind != dk)
        return Status{musaErrorIllegalAddress, Fmt("memcpy: dst %p was freed before the copy ran", dst)};
      std::memcpy(q.Translate(dst), staged->data(), staged->size());
      return Status::Ok();
    };
    if (d.kind == MemKind::kUnregistered) return FromStatus("musaMemcpyAsync", st->RunAndWait(std::move(t)));
    st->Enqueue(std::move(t));
    return musaSuccess;
  }
  if (d.kind == MemKind::kUnregistered)  // pageable destination: returns when the copy is done
    return FromStatus("musaMemcpyAsync", st->RunAndWait(CopyTask(dst, src, count, d.kind, s.kind)));
  st->Enqueue(CopyTask(dst, src, count, d.kind, s.kind));
  return musaSuccess;
}

MUSA_ABI_EXPORT musaError_t musaMemset(void* devPtr, int value, size_t count) {
  return MemsetOn("musaMemset", devPtr, value, count, DefaultStream(t_device), true);
}

MUSA_ABI_EXPORT musaError_t musaMemsetAsync(void* devPtr, int value, size_t count, musaStream_t stream) {
  auto st = Resolve(stream);
  if (!st) return Fail(musaErrorInvalidResourceHandle, Fmt("musaMemsetAsync: stream %p is not a live stream", stream));
  return MemsetOn("musaMemsetAsync", devPtr, value, count, st, false);
}

MUSA_ABI_EXPORT musaError_t musaStreamCreateWithFlags(musaStream_t* pStream, unsigned int flags) {
  if (!pStream || flags > musaStreamNonBlocking)
    return Fail(musaErrorInvalidValue, Fmt("musaStreamCreateWithFlags: pStream %p, flags 0x%x", pStream, flags));
  *pStream = static_cast<musaStream_t>(g_streams.Add(std::make_shared<tshim::Stream>(t_device, Delay())));
  return musaSuccess;
}

MUSA_ABI_EXPORT musaError_t musaStreamCreate(musaStream_t* pStream) {
  return musaStreamCreateWithFlags(pStream, musaStreamDefault);
}

MUSA_ABI_EXPORT musaError_t musaStreamDestroy(musaStream_t stream) {
  if (!stream || !g_streams.Remove(stream))  // returns after the stream's queued work has run
    return Fail(musaErrorInvalidResourceHandle, Fmt("musaStreamDestroy: %p is not a live stream", stream));
  return musaSuccess;
}

MUSA_ABI_EXPORT musaError_t musaStreamSynchronize(musaStream_t stream) {
  auto st = Resolve(stream);
  if (!st) return Fail(musaErrorInvalidResourceHandle, Fmt("musaStreamSynchronize: %p is not a live stream", stream));
  return FromStatus("musaStreamSynchronize", st->Synchronize());
}

MUSA_ABI_EXPORT musaError_t musaStreamQuery(musaStream_t stream) {
  auto st = Resolve(stream);
  if (!st) return Fail(musaErrorInvalidResourceHandle, Fmt("musaStreamQuery: %p is not a live stream", stream));
  return st->Idle() ? musaSuccess : musaErrorNotReady;  // not-ready is a status, not an error: t_last untouched
}

MUSA_ABI_EXPORT musaError_t musaStreamWaitEvent(musaStream_t stream, musaEvent_t event, unsigned int flags) {
  auto st = Resolve(stream);
  auto e = event ? g_events.Get(event) : nullptr;
  if (!st || !e) return Fail(musaErrorInvalidResourceHandle, "musaStreamWaitEvent: bad stream or event");
  if (flags > 1) return Fail(musaErrorInvalidValue, Fmt("musaStreamWaitEvent: flags 0x%x", flags));
  const uint64_t gen = e->generation(), ms = tshim::EnvU64("TESSERA_SHIM_EVENT_TIMEOUT_MS", 60000);
  st->Enqueue([e, gen, ms] {
    if (e->WaitFor(gen, ms)) return Status::Ok();
    return Status{musaErrorUnknown, Fmt("musaStreamWaitEvent: the event was not reached within %llu ms",
                                        static_cast<unsigned long long>(ms))};
  });
  return musaSuccess;
}

MUSA_ABI_EXPORT musaError_t musaEventCreateWithFlags(musaEvent_t* event, unsigned int flags) {
  if (!event || flags > (musaEventBlockingSync | musaEventDisableTiming))
    return Fail(musaErrorInvalidValue, Fmt("musaEventCreateWithFlags: event %p, flags 0x%x", event, flags));
  *event = static_cast<musaEvent_t>(g_events.Add(std::make_shared<tshim::Event>()));
  return musaSuccess;
}

MUSA_ABI_EXPORT musaError_t musaEventRecord(musaEvent_t event, musaStream_t stream) {
  auto st = Resolve(stream);
  auto e = event ? g_events.Get(event) : nullptr;
  if (!st || !e) return Fail(musaErrorInvalidResourceHandle, "musaEventRecord: bad stream or event");
  e->Record(*st, e);
  return musaSuccess;
}

MUSA_ABI_EXPORT musaError_t musaEventQuery(musaEvent_t event) {
  auto e = event ? g_events.Get(event) : nullptr;
  if (!e) return Fail(musaErrorInvalidResourceHandle, Fmt("musaEventQuery: %p is not a live event", event));
  return e->Complete() ? musaSuccess : musaErrorNotReady;
}

MUSA_ABI_EXPORT musaError_t musaEventSynchronize(musaEvent_t event) {
  auto e = event ? g_events.Get(event) : nullptr;
  if (!e) return Fail(musaErrorInvalidResourceHandle, Fmt("musaEventSynchronize: %p is not a live event", event));
  e->Wait(e->generation());
  return musaSuccess;
}

MUSA_ABI_EXPORT musaError_t musaEventDestroy(musaEvent_t event) {
  if (!event || !g_events.Remove(event))
    return Fail(musaErrorInvalidResourceHandle, Fmt("musaEventDestroy: %p is not a live event", event));
  return musaSuccess;
}

MUSA_ABI_EXPORT musaError_t musaPointerGetAttributes(struct musaPointerAttributes* attributes, const void* ptr) {
  if (!attributes || !ptr) return Fail(musaErrorInvalidValue, "musaPointerGetAttributes: NULL argument");
  const PtrInfo p = g_mem.Lookup(ptr);
  void* vp = const_cast<void*>(ptr);
  if (p.kind == MemKind::kDevice) {
    *attributes = {musaMemoryTypeDevice, p.device, vp, nullptr};
  } else if (p.kind == MemKind::kPinnedHost) {
    *attributes = {musaMemoryTypeHost, p.device, vp, vp};  // mapped at the same address (unified addressing)
  } else {
    *attributes = {musaMemoryTypeUnregistered, -2, nullptr, nullptr};  // device -2: ASSUMPTION (CUDA's observed value)
  }
  return musaSuccess;
}

// Not a MUSA API: what libmccl.so (the MCCL shim) uses to reach this runtime's streams and memory.
MUSA_ABI_EXPORT const tshim::RuntimeHooks* tesseraMusaShimHooks() {
  static const tshim::RuntimeHooks hooks = {
      tshim::kHooksVersion,
      [](void* h) { return Resolve(static_cast<musaStream_t>(h)); },
      [](const void* p) { return g_mem.Lookup(p); },
      [] { return t_device; },
      [](const std::string& msg) { t_msg = msg; },
  };
  return &hooks;
}

}  // extern "C"
