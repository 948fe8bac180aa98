// tests/shims/cuda/opapi_cuda_shim: libopapi.so on CUDA, a test-only ABI shim of CANN's operator library for the
// GPU machine (declarations and their sources: ../aclnn_abi.h). Same exports, signatures, values, rules and codes
// as the host shim (../opapi_shim.cpp, whose header cites the rules as [two-phase], [align], [cast], [codes]; the
// phases themselves are ../aclnn_shim.hpp's, shared); tensors and executors are libnnopbase.so's (one source,
// ../nnopbase_shim.cpp, built beside this library). Only the work is real here:
//   phase 2       the operator is a kernel (aclnn_cast.cu) on the ACL stream, which is a cudaStream_t of the
//                 CUDA-backed libascendcl.so (NULL: the legacy default stream), launched on that stream's device
//   device memory aclrtMalloc memory of that libascendcl.so (tesseraAclCudaShimLookup), with its ACL device and
//                 bounds
//   arithmetic    16-bit -> f32 exact; f32 -> 16-bit __float2half_rn / __float2bfloat16_rn (nearest even);
//                 InplaceMuls one f32 multiply
// Not kept on CUDA: memory freed before the stream reaches the operator is not detected (the host shim fails the
// stream with ACL_ERROR_RT_AICORE_EXCEPTION; here it is CUDA's fault); a launch error is ACLNN_ERR_RUNTIME_ERROR
// at the phase-2 call. Messages: aclGetRecentErrMsg of that libascendcl.so (tesseraAclShimSetError), and stderr
// with TESSERA_SHIM_VERBOSE=1.
#include <cuda_runtime_api.h>

#include <cstdio>

#include "../aclnn_abi.h"
#include "../aclnn_shim.hpp"
#include "../shim_runtime.hpp"

using tshim::Fmt;
using tshim::aclnn::Executor;

extern "C" {
void tesseraAclShimSetError(const char* msg);                             // libascendcl.so (CUDA)
int tesseraAclCudaShimLookup(const void* p, int* device, size_t* avail);  // libascendcl.so (CUDA)
int tesseraAclCudaShimStream(aclrtStream s, void** cuda_stream, int* device, int* cuda_device);  // libascendcl.so
const tshim::aclnn::NnopbaseHooks* tesseraNnopbaseShimHooks();                                   // libnnopbase.so
}
cudaError_t TesseraAclnnCudaLaunch(int in_t, const void* in, int out_t, void* out, size_t n, bool scaled, float scale,
                                   void* workspace, size_t workspace_bytes, cudaStream_t stream);  // aclnn_cast.cu

namespace {

struct CudaShim {
  static const tshim::aclnn::NnopbaseHooks* Nn() {
    static const tshim::aclnn::NnopbaseHooks* h = tesseraNnopbaseShimHooks();
    return h;
  }
  static tshim::aclnn::Mem Lookup(const void* p) {
    tshim::aclnn::Mem m;
    m.device = tesseraAclCudaShimLookup(p, &m.dev, &m.avail) == 1;
    return m;
  }
  static aclnnStatus Fail(aclnnStatus code, const std::string& msg) {
    const std::string m = Fmt("%s (aclnnStatus %d)", msg.c_str(), code);
    tesseraAclShimSetError(m.c_str());
    if (tshim::EnvU64("TESSERA_SHIM_VERBOSE", 0)) std::fprintf(stderr, "[opapi cuda shim] %s\n", m.c_str());
    return code;
  }
  static bool Stream(aclrtStream s, int* device) {
    void* cs = nullptr;
    int cuda = -1;
    return tesseraAclCudaShimStream(s, &cs, device, &cuda) == 0;
  }
  static aclnnStatus Launch(const Executor& e, void* ws, aclrtStream s) {
    void* cs = nullptr;
    int dev = -1, cuda = -1;
    if (tesseraAclCudaShimStream(s, &cs, &dev, &cuda) != 0)
      return Fail(ACLNN_ERR_RUNTIME_ERROR, Fmt("%s: stream %p is not a live ACL stream", e.name(), s));
    cudaError_t err = cudaSetDevice(cuda);
    const tshim::aclnn::Tensor &in = e.in[0], &out = e.out[0];
    if (err == cudaSuccess)
      err = TesseraAclnnCudaLaunch(in.dtype, tshim::aclnn::Addr(in), out.dtype,
                                   const_cast<char*>(tshim::aclnn::Addr(out)),
                                   static_cast<size_t>(tshim::aclnn::Numel(in)), e.op == Executor::Op::kInplaceMuls,
                                   e.scale, ws, e.workspace, static_cast<cudaStream_t>(cs));
    if (err != cudaSuccess) {
      (void)cudaGetLastError();
      return Fail(ACLNN_ERR_RUNTIME_ERROR, Fmt("%s: the kernel launch failed: %s: %s", e.name(), cudaGetErrorName(err),
                                               cudaGetErrorString(err)));
    }
    return ACLNN_SUCCESS;
  }
};

}  // namespace

extern "C" {

ACL_ABI_EXPORT aclnnStatus aclnnCastGetWorkspaceSize(const aclTensor* self, const aclDataType dtype, aclTensor* out,
                                                     uint64_t* workspaceSize, aclOpExecutor** executor) {
  return tshim::aclnn::CastPhase1<CudaShim>(self, dtype, out, workspaceSize, executor);
}

ACL_ABI_EXPORT aclnnStatus aclnnCast(void* workspace, uint64_t workspaceSize, aclOpExecutor* executor,
                                     aclrtStream stream) {
  return tshim::aclnn::Phase2<CudaShim>("aclnnCast", Executor::Op::kCast, workspace, workspaceSize, executor, stream);
}

ACL_ABI_EXPORT aclnnStatus aclnnInplaceMulsGetWorkspaceSize(aclTensor* selfRef, const aclScalar* other,
                                                            uint64_t* workspaceSize, aclOpExecutor** executor) {
  return tshim::aclnn::InplaceMulsPhase1<CudaShim>(selfRef, other, workspaceSize, executor);
}

ACL_ABI_EXPORT aclnnStatus aclnnInplaceMuls(void* workspace, uint64_t workspaceSize, aclOpExecutor* executor,
                                            aclrtStream stream) {
  return tshim::aclnn::Phase2<CudaShim>("aclnnInplaceMuls", Executor::Op::kInplaceMuls, workspace, workspaceSize,
                                        executor, stream);
}

}  // extern "C"
