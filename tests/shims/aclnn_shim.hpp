// tests/shims/aclnn_shim: what the aclnn shims share -- libnnopbase.so (nnopbase_shim.cpp: tensors, scalars and
// executors, one source for the host and the CUDA-backed sets) and the two libopapi.so (opapi_shim.cpp on the
// host shim's streams, cuda/opapi_cuda_shim.cu on CUDA): the objects behind the opaque handles, the hooks
// libopapi.so reaches libnnopbase.so's registry through (not a CANN API), and the operators' argument checks,
// templated on the shim as acl_rules.hpp's are. The rules and their sources are cited in opapi_shim.cpp's header.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "aclnn_abi.h"
#include "shim_runtime.hpp"

namespace tshim::aclnn {

// What aclCreateTensor was given (the view must be contiguous row-major for the shim's operators).
struct Tensor {
  std::vector<int64_t> view, stride, storage;
  int64_t offset = 0;
  aclDataType dtype = ACL_DT_UNDEFINED;
  aclFormat format = ACL_FORMAT_UNDEFINED;
  void* data = nullptr;
};

struct Scalar {
  aclDataType dtype = ACL_DT_UNDEFINED;
  double value = 0;
};

// One operator's executor from its phase-1 call; phase 2 runs it.
struct Executor {
  enum class Op { kCast, kInplaceMuls } op = Op::kCast;
  uint64_t workspace = 0;       // what phase 1 asked for
  bool repeatable = false;      // aclSetAclOpExecutorRepeatable was called
  std::vector<Tensor> in, out;  // Cast: self / out; InplaceMuls: selfRef / selfRef (addresses rebindable)
  float scale = 1;              // InplaceMuls
  const char* name() const { return op == Op::kCast ? "aclnnCast" : "aclnnInplaceMuls"; }
};

// libnnopbase.so's registry, for libopapi.so (tesseraNnopbaseShimHooks; not a CANN API).
struct NnopbaseHooks {
  int version;                                            // kNnopbaseHooksVersion
  std::shared_ptr<Tensor> (*tensor)(const aclTensor* t);  // nullptr: not a live tensor
  std::shared_ptr<Scalar> (*scalar)(const aclScalar* s);  // nullptr: not a live scalar
  aclOpExecutor* (*add_executor)(std::shared_ptr<Executor> e);
  // The executor for `fn` (a phase-2 call): nullptr, the status and why when `h` is NULL or not a live executor
  // (also: one that already ran and was not repeatable).
  std::shared_ptr<Executor> (*executor)(aclOpExecutor* h, const char* fn, aclnnStatus* code, std::string* why);
  // After a phase-2 call queued the operator: an executor that is not repeatable is freed (and remembered as
  // spent, so a second use is refused instead of reading freed memory).
  void (*ran)(aclOpExecutor* h);
};
inline constexpr int kNnopbaseHooksVersion = 1;

inline size_t ElemSize(aclDataType t) {
  switch (t) {
    case ACL_FLOAT:
    case ACL_INT32:
    case ACL_UINT32:
      return 4;
    case ACL_FLOAT16:
    case ACL_BF16:
    case ACL_INT16:
    case ACL_UINT16:
      return 2;
    case ACL_INT8:
    case ACL_UINT8:
    case ACL_BOOL:
      return 1;
    case ACL_INT64:
    case ACL_UINT64:
    case ACL_DOUBLE:
      return 8;
    default:
      return 0;  // not a type the shims move
  }
}

// The floating types the shims' Cast converts between (both ways): f32, f16 and bf16.
inline bool CastType(aclDataType t) { return t == ACL_FLOAT || t == ACL_FLOAT16 || t == ACL_BF16; }

inline int64_t Numel(const Tensor& t) {
  int64_t n = 1;
  for (int64_t d : t.view) n *= d;
  return n;
}
inline size_t Bytes(const Tensor& t) { return static_cast<size_t>(Numel(t)) * ElemSize(t.dtype); }
inline const char* Addr(const Tensor& t) {
  return static_cast<const char*>(t.data) + t.offset * static_cast<int64_t>(ElemSize(t.dtype));
}

// What a shim knows of an address: device memory of one of its devices, with `avail` bytes to its end.
struct Mem {
  bool device = false;
  int dev = -1;
  size_t avail = 0;
};

// The checks of a tensor an operator reads or writes, at both phases (an address can be rebound in between):
// format ND, contiguous, in its storage, data 32-byte aligned, device memory of `device` (-1: any) of the shim.
// `Shim`: static Mem Lookup(const void*); static aclnnStatus Fail(aclnnStatus, const std::string&).
template <typename Shim>
aclnnStatus CheckTensor(const char* fn, const char* arg, const Tensor& t, int device) {
  if (t.format != ACL_FORMAT_ND)  // the shim's operators take ND only
    return Shim::Fail(ACLNN_ERR_PARAM_INVALID, Fmt("%s: %s has format %d, the shim takes ACL_FORMAT_ND (2) only", fn,
                                                   arg, static_cast<int>(t.format)));
  int64_t want = 1;
  for (size_t i = t.view.size(); i-- > 0;) {
    if (t.view[i] != 1 && t.stride[i] != want)
      return Shim::Fail(ACLNN_ERR_PARAM_INVALID,
                        Fmt("%s: %s is not contiguous (dim %zu: stride %lld, want %lld)", fn, arg, i,
                            static_cast<long long>(t.stride[i]), static_cast<long long>(want)));
    want *= t.view[i];
  }
  int64_t storage = 1;
  for (int64_t d : t.storage) storage *= d;
  if (t.offset < 0 || t.offset + Numel(t) > storage)
    return Shim::Fail(ACLNN_ERR_PARAM_INVALID, Fmt("%s: %s's view (offset %lld, %lld elements) leaves its storage of "
                                                   "%lld elements",
                                                   fn, arg, static_cast<long long>(t.offset),
                                                   static_cast<long long>(Numel(t)), static_cast<long long>(storage)));
  if (Numel(t) == 0) return ACLNN_SUCCESS;
  const char* a = Addr(t);
  if (!t.data) return Shim::Fail(ACLNN_ERR_PARAM_INVALID, Fmt("%s: %s has no data address", fn, arg));
  if (reinterpret_cast<uintptr_t>(a) % 32)  // aclCreateTensor: "the address must be 32-byte aligned"
    return Shim::Fail(ACLNN_ERR_PARAM_INVALID,
                      Fmt("%s: %s's data %p is not 32-byte aligned", fn, arg, static_cast<const void*>(a)));
  const Mem m = Shim::Lookup(a);
  if (!m.device)
    return Shim::Fail(ACLNN_ERR_PARAM_INVALID,
                      Fmt("%s: %s's data %p is not device memory (aclrtMalloc)", fn, arg, static_cast<const void*>(a)));
  if (device >= 0 && m.dev != device)
    return Shim::Fail(ACLNN_ERR_PARAM_INVALID, Fmt("%s: %s's data %p is memory of device %d, the stream's is %d", fn,
                                                   arg, static_cast<const void*>(a), m.dev, device));
  if (m.avail < Bytes(t))
    return Shim::Fail(ACLNN_ERR_PARAM_INVALID, Fmt("%s: %s needs %zu bytes at %p, its allocation has %zu left", fn, arg,
                                                   Bytes(t), static_cast<const void*>(a), m.avail));
  return ACLNN_SUCCESS;
}

// The workspace of a phase-2 call: at least what phase 1 asked for, device memory of the stream's device.
template <typename Shim>
aclnnStatus CheckWorkspace(const char* fn, const Executor& e, const void* ws, uint64_t size, int device) {
  if (e.workspace == 0) return ACLNN_SUCCESS;
  if (!ws || size < e.workspace)
    return Shim::Fail(ACLNN_ERR_PARAM_INVALID,
                      Fmt("%s: workspace %p of %llu bytes, phase 1 asked for %llu", fn, ws,
                          static_cast<unsigned long long>(size), static_cast<unsigned long long>(e.workspace)));
  const Mem m = Shim::Lookup(ws);
  if (!m.device || (device >= 0 && m.dev != device) || m.avail < e.workspace)
    return Shim::Fail(ACLNN_ERR_PARAM_INVALID,
                      Fmt("%s: workspace %p is not %llu bytes of device memory (aclrtMalloc) of device %d", fn, ws,
                          static_cast<unsigned long long>(e.workspace), device));
  return ACLNN_SUCCESS;
}

// aclnnCastGetWorkspaceSize's argument checks; fills `e` (its workspace left to the caller).
template <typename Shim>
aclnnStatus CheckCast(const Tensor* self, aclDataType dtype, const Tensor* out, Executor* e) {
  const char* fn = "aclnnCastGetWorkspaceSize";
  if (!CastType(self->dtype) || !CastType(out->dtype))
    return Shim::Fail(ACLNN_ERR_PARAM_INVALID,
                      Fmt("%s: cast from type %d to %d: the shim casts between ACL_FLOAT (0), ACL_FLOAT16 (1) and "
                          "ACL_BF16 (27) only",
                          fn, static_cast<int>(self->dtype), static_cast<int>(out->dtype)));
  if (out->dtype != dtype)
    return Shim::Fail(ACLNN_ERR_PARAM_INVALID, Fmt("%s: dtype %d differs from out's type %d", fn,
                                                   static_cast<int>(dtype), static_cast<int>(out->dtype)));
  if (self->view != out->view)
    return Shim::Fail(ACLNN_ERR_PARAM_INVALID, Fmt("%s: self has %lld elements in %zu dims, out %lld in %zu", fn,
                                                   static_cast<long long>(Numel(*self)), self->view.size(),
                                                   static_cast<long long>(Numel(*out)), out->view.size()));
  if (aclnnStatus s = CheckTensor<Shim>(fn, "self", *self, -1)) return s;
  if (aclnnStatus s = CheckTensor<Shim>(fn, "out", *out, -1)) return s;
  e->op = Executor::Op::kCast;
  e->in = {*self};
  e->out = {*out};
  return ACLNN_SUCCESS;
}

// aclnnInplaceMulsGetWorkspaceSize's argument checks: selfRef ACL_FLOAT (the shim's scale is for f32 data).
template <typename Shim>
aclnnStatus CheckInplaceMuls(const Tensor* self, const Scalar* other, Executor* e) {
  const char* fn = "aclnnInplaceMulsGetWorkspaceSize";
  if (self->dtype != ACL_FLOAT)
    return Shim::Fail(ACLNN_ERR_PARAM_INVALID, Fmt("%s: selfRef has type %d, the shim scales ACL_FLOAT (0) only", fn,
                                                   static_cast<int>(self->dtype)));
  if (aclnnStatus s = CheckTensor<Shim>(fn, "selfRef", *self, -1)) return s;
  e->op = Executor::Op::kInplaceMuls;
  e->in = {*self};
  e->out = {*self};
  e->scale = static_cast<float>(other->value);
  return ACLNN_SUCCESS;
}

// The two phases of the shims' operators, on a `Shim` that also has
//   static const NnopbaseHooks* Nn();                          libnnopbase.so's registry
//   static bool Stream(aclrtStream s, int* device);            a live stream of the ACL shim, and its device
//   static aclnnStatus Launch(const Executor& e, void* ws, aclrtStream s);  queues the operator on `s`
// [two-phase]: phase 1 checks the arguments and returns the workspace size and an executor; phase 2 checks the
// executor, stream, workspace and the tensors as bound now, and queues the operator.
// The workspace phase 1 asks for: TESSERA_SHIM_ACLNN_WORKSPACE bytes (default 512). CANN does not publish what
// Cast asks for; a non-zero default makes a caller's workspace path run, and the operator writes to it.
inline uint64_t WorkspaceBytes() { return EnvU64("TESSERA_SHIM_ACLNN_WORKSPACE", 512); }

template <typename Shim>
aclnnStatus Phase1(std::shared_ptr<Executor> e, uint64_t* workspaceSize, aclOpExecutor** executor) {
  e->workspace = WorkspaceBytes();
  *workspaceSize = e->workspace;
  *executor = Shim::Nn()->add_executor(std::move(e));
  return ACLNN_SUCCESS;
}

template <typename Shim>
aclnnStatus CastPhase1(const aclTensor* self, aclDataType dtype, aclTensor* out, uint64_t* workspaceSize,
                       aclOpExecutor** executor) {
  const char* fn = "aclnnCastGetWorkspaceSize";
  if (!self || !out || !workspaceSize || !executor)
    return Shim::Fail(ACLNN_ERR_PARAM_NULLPTR, Fmt("%s: self, out, workspaceSize or executor is NULL", fn));
  auto ts = Shim::Nn()->tensor(self), to = Shim::Nn()->tensor(out);
  if (!ts || !to)
    return Shim::Fail(ACLNN_ERR_PARAM_INVALID, Fmt("%s: self %p or out %p is not a live tensor", fn,
                                                   static_cast<const void*>(self), static_cast<void*>(out)));
  auto e = std::make_shared<Executor>();
  if (aclnnStatus st = CheckCast<Shim>(ts.get(), dtype, to.get(), e.get())) return st;
  return Phase1<Shim>(std::move(e), workspaceSize, executor);
}

template <typename Shim>
aclnnStatus InplaceMulsPhase1(aclTensor* selfRef, const aclScalar* other, uint64_t* workspaceSize,
                              aclOpExecutor** executor) {
  const char* fn = "aclnnInplaceMulsGetWorkspaceSize";
  if (!selfRef || !other || !workspaceSize || !executor)
    return Shim::Fail(ACLNN_ERR_PARAM_NULLPTR, Fmt("%s: selfRef, other, workspaceSize or executor is NULL", fn));
  auto t = Shim::Nn()->tensor(selfRef);
  auto sc = Shim::Nn()->scalar(other);
  if (!t || !sc)
    return Shim::Fail(ACLNN_ERR_PARAM_INVALID, Fmt("%s: selfRef %p or other %p is not a live object", fn,
                                                   static_cast<void*>(selfRef), static_cast<const void*>(other)));
  auto e = std::make_shared<Executor>();
  if (aclnnStatus st = CheckInplaceMuls<Shim>(t.get(), sc.get(), e.get())) return st;
  return Phase1<Shim>(std::move(e), workspaceSize, executor);
}

template <typename Shim>
aclnnStatus Phase2(const char* fn, Executor::Op op, void* workspace, uint64_t workspaceSize, aclOpExecutor* executor,
                   aclrtStream stream) {
  aclnnStatus code = 0;
  std::string why;
  auto e = Shim::Nn()->executor(executor, fn, &code, &why);
  if (!e) return Shim::Fail(code, why);
  if (e->op != op)
    return Shim::Fail(ACLNN_ERR_PARAM_INVALID,
                      Fmt("%s: executor %p is %s's", fn, static_cast<void*>(executor), e->name()));
  int dev = -1;
  if (!Shim::Stream(stream, &dev))  // code: shim's choice (a failed runtime call)
    return Shim::Fail(ACLNN_ERR_RUNTIME_ERROR, Fmt("%s: stream %p is not a live ACL stream", fn, stream));
  if (aclnnStatus st = CheckWorkspace<Shim>(fn, *e, workspace, workspaceSize, dev)) return st;
  if (aclnnStatus st = CheckTensor<Shim>(fn, "input", e->in[0], dev)) return st;
  if (aclnnStatus st = CheckTensor<Shim>(fn, "output", e->out[0], dev)) return st;
  if (aclnnStatus st = Shim::Launch(*e, workspace, stream)) return st;
  Shim::Nn()->ran(executor);
  return ACLNN_SUCCESS;
}

}  // namespace tshim::aclnn
