// comm/runtime/aclnn: the ACL row's widening on the device through CANN's operator API ("aclnn"): the tensor calls
// of libnnopbase.so and aclnnCast of libopapi.so (CANN 9: libopapi_math.so), loaded at run time with dlopen as
// torch_npu's op-plugin loads them, never linked. Widening bf16/fp16 -> f32 is exact; narrowing is never done on an
// Ascend device (how CANN's Cast rounds f32 -> bf16 is not published: Tessera rounds once on the host).
#pragma once

#include <cstddef>
#include <memory>
#include <string>

#include "common/dtype.hpp"
#include "tessera/status.hpp"

namespace tessera::comm::internal {

// The operator library of one process, loaded once (the first Widen or Support). Thread-safe.
class AclnnOps {
 public:
  // Loads libnnopbase.so and the first op library that has aclnnCast (libopapi.so, then libopapi_math.so), or the
  // files TESSERA_ACL_NNOPBASE_LIBRARY / TESSERA_ACL_OPAPI_LIBRARY name. The process's one instance.
  static AclnnOps& Get();
  // OK when the library is loaded; else Unsupported naming each file tried, dlerror() and the variable to set.
  Status Support();
  // dst (f32) = src (f16 or bf16), n elements, queued on the ACL stream `stream`; `workspace` gives device memory of
  // at least the bytes asked (stream-ordered: reused only by later work on the same stream). Both addresses must
  // be element-aligned; the tensor's storage starts at the 32-byte-aligned address below each (CANN's rule for
  // tensor data), the view at the element offset from it.
  using Workspace = Result<void*> (*)(void* ctx, size_t bytes, void* stream);
  Status Widen(void* dst, const void* src, size_t n, DType src_type, void* stream, Workspace workspace, void* ctx);
  // "libopapi.so": what was loaded, for messages.
  const std::string& op_library() const;

  struct Api;

 private:
  AclnnOps();
  std::unique_ptr<Api> api_;
  Status loaded_;
};

// aclDataType of a Tessera type (acl_base_rt.h: FLOAT 0, FLOAT16 1, BF16 27), -1 where not mapped.
int AclDataType(DType dt);
// "ACLNN_ERR_PARAM_INVALID (161002)": the name of an aclnn status code, for messages.
std::string AclnnStatusName(int status);

}  // namespace tessera::comm::internal
