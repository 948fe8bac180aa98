// comm/runtime/aclnn: CANN's operator API for the ACL row's widening (aclnn.hpp). Source of every name, value and
// signature, unless a line says otherwise:
//   [OB] hicann/opbase, include/nnopbase/aclnn/acl_meta.h (aclCreateTensor, aclDestroyTensor, aclnnStatus) and
//        src/nnopbase/CMakeLists.txt (the library is libnnopbase.so);
//   [OM] hicann/ops-math, math/cast/op_api/aclnn_cast.h (aclnnCastGetWorkspaceSize, aclnnCast),
//        docs/zh/context/two_phase_api.md (the two-phase call: phase 2 once per executor, asynchronous on the stream;
//        a non-repeatable executor is freed by phase 2), docs/zh/context/aclnn_return_code.md (status codes),
//        docs/zh/op_api_list.md (CANN 9 moves the ops from libopapi.so to libopapi_math.so);
//   [RT] hicann/runtime, include/external/acl/acl_base_rt.h (aclDataType: FLOAT 0, FLOAT16 1, BF16 27; aclFormat:
//        ACL_FORMAT_ND 2) — not HCCL's type numbers;
//   [OP] Ascend/op-plugin, op_plugin/utils/op_api_common.{h,cpp}: dlopen + dlsym of the tensor calls and the ops
//        (libopapi.so, then the per-repository libraries), and the tensors destroyed once phase 2 is queued.
// Rules honoured: tensor data 32-byte aligned ([OB] docs/zh/api/nnopbase/aclnn/aclCreateTensor.md: "该地址必须32字节
// 对齐"; an unaligned buffer is described by an aligned storage address and an element offset); the workspace is
// device memory used in stream order; each executor used once.
#include "comm/runtime/aclnn.hpp"

#include <fmt/format.h>

#include <cstdint>
#include <mutex>
#include <vector>

#include "common/dl.hpp"
#include "common/env.hpp"

namespace tessera::comm::internal {

namespace {
using aclnnStatus = int32_t;                    // [OB] acl_meta.h
struct aclTensor;                               // opaque, [OB]
struct aclOpExecutor;                           // opaque, [OB]
constexpr aclnnStatus kAclnnSuccess = 0;        // OK, [OB]
constexpr int kAclFloat = 0;                    // ACL_FLOAT, [RT] acl_base_rt.h
constexpr int kAclFloat16 = 1;                  // ACL_FLOAT16, [RT]
constexpr int kAclBf16 = 27;                    // ACL_BF16, [RT]
constexpr int kAclFormatNd = 2;                 // ACL_FORMAT_ND, [RT]
constexpr uintptr_t kTensorDataAlignment = 32;  // [OB] aclCreateTensor.md
}  // namespace

struct AclnnOps::Api {
  // [OB] acl_meta.h. aclDataType and aclFormat are C enums: int-sized.
  aclTensor* (*CreateTensor)(const int64_t* viewDims, uint64_t viewDimsNum, int dataType, const int64_t* stride,
                             int64_t offset, int format, const int64_t* storageDims, uint64_t storageDimsNum,
                             void* tensorData) = nullptr;
  aclnnStatus (*DestroyTensor)(const aclTensor* tensor) = nullptr;
  // [OM] aclnn_cast.h.
  aclnnStatus (*CastGetWorkspaceSize)(const aclTensor* self, const int dtype, aclTensor* out, uint64_t* workspaceSize,
                                      aclOpExecutor** executor) = nullptr;
  aclnnStatus (*Cast)(void* workspace, uint64_t workspaceSize, aclOpExecutor* executor, void* stream) = nullptr;
  std::string nnopbase, opapi;  // the files loaded
};

int AclDataType(DType dt) {
  switch (dt) {
    case DType::kFloat32:
      return kAclFloat;
    case DType::kFloat16:
      return kAclFloat16;
    case DType::kBfloat16:
      return kAclBf16;
    default:
      return -1;
  }
}

std::string AclnnStatusName(int status) {
  // [OM] docs/zh/context/aclnn_return_code.md
  const char* name = nullptr;
  switch (status) {
    case 0:
      name = "ACLNN_SUCCESS";
      break;
    case 161001:
      name = "ACLNN_ERR_PARAM_NULLPTR";
      break;
    case 161002:
      name = "ACLNN_ERR_PARAM_INVALID";
      break;
    case 361001:
      name = "ACLNN_ERR_RUNTIME_ERROR";
      break;
    case 561000:
      name = "ACLNN_ERR_INNER";
      break;
    case 561002:
      name = "ACLNN_ERR_INNER_TILING_ERROR";
      break;
    case 561003:
      name = "ACLNN_ERR_INNER_FIND_KERNEL_ERROR (the operator binary package may not be installed)";
      break;
    case 561103:
      name = "ACLNN_ERR_INNER_NULLPTR";
      break;
    case 561112:
      name = "ACLNN_ERR_INNER_OPP_KERNEL_PKG_NOT_FOUND";
      break;
    default:
      return fmt::format("aclnn status {}", status);
  }
  return fmt::format("{} ({})", name, status);
}

AclnnOps& AclnnOps::Get() {
  static AclnnOps* ops = new AclnnOps();  // never destroyed: the libraries stay loaded for the process
  return *ops;
}

AclnnOps::AclnnOps() : api_(std::make_unique<Api>()) {
  Api& a = *api_;
  std::vector<std::string> tried;  // why each file tried does not serve
  // The tensor calls.
  const std::string base_file = dl::FileFrom("TESSERA_ACL_NNOPBASE_LIBRARY", "libnnopbase.so");
  // Both calls from `lib`, or why not.
  auto bind2 = [](const Result<dl::Library>& lib, auto& f1, const char* s1, auto& f2, const char* s2) -> Status {
    if (!lib.ok()) return lib.status();
    TSR_RETURN_IF_ERROR(lib->Bind(f1, s1));
    return lib->Bind(f2, s2);
  };
  const Status base_bound = bind2(dl::Library::Open(base_file, {.what = "CANN's tensor library",
                                                                .env_var = "TESSERA_ACL_NNOPBASE_LIBRARY",
                                                                .mismatch = "not CANN's libnnopbase.so"}),
                                  a.CreateTensor, "aclCreateTensor", a.DestroyTensor, "aclDestroyTensor");
  const bool base = base_bound.ok();
  if (base)
    a.nnopbase = base_file;
  else
    tried.push_back(base_bound.message());
  // The ops: the file the variable names, else libopapi.so, then CANN 9's libopapi_math.so ([OP] searches the same
  // way: the all-in-one library, then the per-repository ones).
  std::vector<std::string> op_files;
  if (auto v = env::Get("TESSERA_ACL_OPAPI_LIBRARY"))
    op_files.push_back(*v);
  else
    op_files = {"libopapi.so", "libopapi_math.so"};
  for (const std::string& f : op_files) {
    if (!base) break;
    const Status s = bind2(dl::Library::Open(f, {.what = "CANN's operator library",
                                                 .env_var = "TESSERA_ACL_OPAPI_LIBRARY",
                                                 .mismatch = "not CANN's operator library"}),
                           a.CastGetWorkspaceSize, "aclnnCastGetWorkspaceSize", a.Cast, "aclnnCast");
    if (s.ok()) {
      a.opapi = f;
      break;
    }
    tried.push_back(s.message());
  }
  if (base && !a.opapi.empty()) {
    loaded_ = Status::Ok();
    return;
  }
  std::string list;
  for (const std::string& t : tried) list += (list.empty() ? "" : "; ") + t;
  loaded_ = Unsupported(
      fmt::format("CANN's operator library is not loaded ({}): install CANN's opp and ops packages, or point "
                  "TESSERA_ACL_NNOPBASE_LIBRARY / TESSERA_ACL_OPAPI_LIBRARY at libnnopbase.so / libopapi.so",
                  list));
}

Status AclnnOps::Support() { return loaded_; }

const std::string& AclnnOps::op_library() const { return api_->opapi; }

namespace {
// A one-dimensional ND tensor of n elements at `p`: storage from the 32-byte-aligned address at or below p, the view
// at the element offset of p from it.
Result<aclTensor*> Tensor(const AclnnOps::Api& a, const void* p, size_t n, DType dt) {
  const size_t esz = DTypeSize(dt);
  const auto at = reinterpret_cast<uintptr_t>(p);
  const uintptr_t base = at / kTensorDataAlignment * kTensorDataAlignment;
  if ((at - base) % esz != 0) return InvalidArgument(fmt::format("{} is not aligned to its {}-byte elements", p, esz));
  const int64_t offset = static_cast<int64_t>((at - base) / esz);
  const int64_t view[1] = {static_cast<int64_t>(n)}, stride[1] = {1}, storage[1] = {offset + static_cast<int64_t>(n)};
  aclTensor* t =
      a.CreateTensor(view, 1, AclDataType(dt), stride, offset, kAclFormatNd, storage, 1, reinterpret_cast<void*>(base));
  if (t == nullptr)
    return SystemError(fmt::format("aclCreateTensor of {} {} elements at {} failed", n, DTypeName(dt), p));
  return t;
}
}  // namespace

Status AclnnOps::Widen(void* dst, const void* src, size_t n, DType src_type, void* stream, Workspace workspace,
                       void* ctx) {
  TSR_RETURN_IF_ERROR(loaded_);
  if (!IsHalf(src_type))
    return InvalidArgument(fmt::format("aclnnCast widens f16 and bf16 to f32, not {}", DTypeName(src_type)));
  if (n == 0) return Status::Ok();
  const Api& a = *api_;
  TSR_ASSIGN_OR_RETURN(aclTensor * in, Tensor(a, src, n, src_type));
  auto out = Tensor(a, dst, n, DType::kFloat32);
  if (!out.ok()) {
    (void)a.DestroyTensor(in);
    return out.status();
  }
  uint64_t ws_bytes = 0;
  aclOpExecutor* ex = nullptr;
  Status s;
  aclnnStatus r = a.CastGetWorkspaceSize(in, kAclFloat, *out, &ws_bytes, &ex);
  if (r != kAclnnSuccess) {
    s = SystemError(fmt::format("aclnnCastGetWorkspaceSize ({} -> f32, {} elements) in '{}': {}", DTypeName(src_type),
                                n, a.opapi, AclnnStatusName(r)));
  } else {
    void* ws = nullptr;
    if (ws_bytes > 0) {
      auto w = workspace(ctx, ws_bytes, stream);
      if (w.ok())
        ws = *w;
      else
        s = w.status().WithContext("aclnnCast's workspace");
    }
    if (s.ok()) {
      r = a.Cast(ws, ws_bytes, ex, stream);  // frees the executor ([OM] two_phase_api.md)
      if (r != kAclnnSuccess)
        s = SystemError(fmt::format("aclnnCast ({} -> f32, {} elements) in '{}': {}", DTypeName(src_type), n, a.opapi,
                                    AclnnStatusName(r)));
    }
  }
  // The executor holds what it needs once queued: the tensors go now ([OP] releases them after the launch).
  (void)a.DestroyTensor(in);
  (void)a.DestroyTensor(*out);
  return s;
}

}  // namespace tessera::comm::internal
