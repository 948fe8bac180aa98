// tests/shims/opapi_shim: libopapi.so, a test-only host shim of CANN's operator library (declarations and their
// sources: aclnn_abi.h): aclnnCast and aclnnInplaceMuls in two phases, run on the ACL host shim's streams
// (libascendcl.so, tesseraAclShimHooks) over its device memory, with tensors and executors from libnnopbase.so
// (tesseraNnopbaseShimHooks). Documented rules it keeps:
//   [two-phase]  hicann/ops-math docs/zh/context/two_phase_api.md: phase 1 (...GetWorkspaceSize) checks the
//                arguments and returns the workspace size and an executor; the caller allocates the workspace on
//                the device (aclrtMalloc) when the size is not 0; phase 2 runs asynchronously on the stream.
//   [align]      aclCreateTensor (hicann/opbase docs/zh/api/nnopbase/aclnn/aclCreateTensor.md): tensorData "must be
//                32-byte aligned".
//   [cast]       aclnnCast (ops-math math/cast/docs/aclnnCast.md): out's type is `dtype`, self and out have one
//                shape; deterministic. The shim casts between ACL_FLOAT, ACL_FLOAT16 and ACL_BF16 only.
//   [codes]      ops-math docs/zh/context/aclnn_return_code.md: 161001 a NULL argument, 161002 an invalid one.
// The shim's own choices, marked where they are made: every violation of a data rule is ACLNN_ERR_PARAM_INVALID
// at the call that sees it (tensor data and workspace must be aclrtMalloc memory of the stream's device, checked at
// both phases because an address can be rebound); an unknown stream is ACLNN_ERR_RUNTIME_ERROR; memory freed
// before the stream reaches the operator fails the stream with ACL_ERROR_RT_AICORE_EXCEPTION (what a faulting
// operator reports), so aclrtSynchronizeStream returns it. Phase 1 asks for TESSERA_SHIM_ACLNN_WORKSPACE bytes
// (default 512; CANN does not publish Cast's) and the operator overwrites them when it runs.
// Arithmetic: 16-bit -> f32 is exact; f32 -> 16-bit rounds to nearest even (common/dtype.hpp). How CANN's Cast
// rounds f32 -> bf16 on a 910B is not published (only the Ascend 950 kernel is open source: CAST_ROUND_MODE_RINT),
// so Tessera must not narrow on an Ascend device and rely on the bits; the shim's narrowing is for completeness.
// InplaceMuls multiplies f32 data by the scalar converted to f32, one f32 rounding per element.
#include <cstdio>
#include <cstring>

#include "aclnn_abi.h"
#include "aclnn_shim.hpp"
#include "common/dtype.hpp"
#include "shim_runtime.hpp"

using tshim::Fmt;
using tshim::MemKind;
using tshim::PtrInfo;
using tshim::Status;
using tshim::aclnn::Executor;
using tshim::aclnn::Tensor;

extern "C" const tshim::RuntimeHooks* tesseraAclShimHooks();               // libascendcl.so
extern "C" const tshim::aclnn::NnopbaseHooks* tesseraNnopbaseShimHooks();  // libnnopbase.so

namespace {

const tshim::RuntimeHooks* Acl() {
  static const tshim::RuntimeHooks* h = tesseraAclShimHooks();
  return h;
}
const tshim::aclnn::NnopbaseHooks* Nn() {
  static const tshim::aclnn::NnopbaseHooks* h = tesseraNnopbaseShimHooks();
  return h;
}

Status Run(const Executor& e, void* ws);

struct HostShim {
  static const tshim::aclnn::NnopbaseHooks* Nn() { return ::Nn(); }
  static bool Stream(aclrtStream s, int* device) {
    auto st = Acl()->stream(s);
    if (st) *device = st->device();
    return st != nullptr;
  }
  static aclnnStatus Launch(const Executor& e, void* ws, aclrtStream s) {
    auto st = Acl()->stream(s);
    if (!st) return Fail(ACLNN_ERR_RUNTIME_ERROR, Fmt("%s: stream %p is not a live ACL stream", e.name(), s));
    st->Enqueue([run = e, ws] { return Run(run, ws); });  // the tensors as they are bound now
    return ACLNN_SUCCESS;
  }
  static tshim::aclnn::Mem Lookup(const void* p) {
    const PtrInfo i = Acl()->lookup(p);
    return {i.kind == MemKind::kDevice, i.device, i.avail};
  }
  static aclnnStatus Fail(aclnnStatus code, const std::string& msg) {
    const std::string m = Fmt("%s (aclnnStatus %d)", msg.c_str(), code);
    Acl()->set_error(m);
    if (tshim::EnvU64("TESSERA_SHIM_VERBOSE", 0)) std::fprintf(stderr, "[opapi shim] %s\n", m.c_str());
    return code;
  }
};

float Load(aclDataType t, const char* p, size_t i) {
  uint16_t h;
  float f;
  switch (t) {
    case ACL_FLOAT:
      std::memcpy(&f, p + i * 4, 4);
      return f;
    case ACL_FLOAT16:
      std::memcpy(&h, p + i * 2, 2);
      return tessera::F16ToF32(h);
    default:  // ACL_BF16
      std::memcpy(&h, p + i * 2, 2);
      return tessera::Bf16ToF32(h);
  }
}
void Store(aclDataType t, char* p, size_t i, float f) {
  if (t == ACL_FLOAT) return std::memcpy(p + i * 4, &f, 4), void();
  const uint16_t h = t == ACL_FLOAT16 ? tessera::F32ToF16(f) : tessera::F32ToBf16(f);
  std::memcpy(p + i * 2, &h, 2);
}

// The shim's address of `n` bytes at `p`, or nullptr when they are no longer device memory.
char* Resolve(const void* p, size_t n) {
  const PtrInfo i = Acl()->lookup(p);
  return i.kind == MemKind::kDevice && i.avail >= n ? i.Translate(p) : nullptr;
}

// The operator, on the stream's worker.
Status Run(const Executor& e, void* ws) {
  const Tensor &in = e.in[0], &out = e.out[0];
  const size_t n = static_cast<size_t>(tshim::aclnn::Numel(in));
  if (n == 0) return Status::Ok();
  char* w = e.workspace ? Resolve(ws, e.workspace) : nullptr;
  const char* src = Resolve(tshim::aclnn::Addr(in), tshim::aclnn::Bytes(in));
  char* dst = Resolve(tshim::aclnn::Addr(out), tshim::aclnn::Bytes(out));
  if (!src || !dst || (e.workspace && !w))
    return {ACL_ERROR_RT_AICORE_EXCEPTION,
            Fmt("%s: its tensor data or workspace was freed before the stream ran it", e.name())};
  if (w) std::memset(w, 0xa5, e.workspace);  // the workspace is the operator's while it runs
  for (size_t i = 0; i < n; ++i) {
    const float v = Load(in.dtype, src, i);
    Store(out.dtype, dst, i, e.op == Executor::Op::kCast ? v : v * e.scale);
  }
  return Status::Ok();
}

}  // namespace

extern "C" {

ACL_ABI_EXPORT aclnnStatus aclnnCastGetWorkspaceSize(const aclTensor* self, const aclDataType dtype, aclTensor* out,
                                                     uint64_t* workspaceSize, aclOpExecutor** executor) {
  return tshim::aclnn::CastPhase1<HostShim>(self, dtype, out, workspaceSize, executor);
}

ACL_ABI_EXPORT aclnnStatus aclnnCast(void* workspace, uint64_t workspaceSize, aclOpExecutor* executor,
                                     aclrtStream stream) {
  return tshim::aclnn::Phase2<HostShim>("aclnnCast", Executor::Op::kCast, workspace, workspaceSize, executor, stream);
}

ACL_ABI_EXPORT aclnnStatus aclnnInplaceMulsGetWorkspaceSize(aclTensor* selfRef, const aclScalar* other,
                                                            uint64_t* workspaceSize, aclOpExecutor** executor) {
  return tshim::aclnn::InplaceMulsPhase1<HostShim>(selfRef, other, workspaceSize, executor);
}

ACL_ABI_EXPORT aclnnStatus aclnnInplaceMuls(void* workspace, uint64_t workspaceSize, aclOpExecutor* executor,
                                            aclrtStream stream) {
  return tshim::aclnn::Phase2<HostShim>("aclnnInplaceMuls", Executor::Op::kInplaceMuls, workspace, workspaceSize,
                                        executor, stream);
}

}  // extern "C"
