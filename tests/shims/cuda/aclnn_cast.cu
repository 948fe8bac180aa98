// tests/shims/cuda/aclnn_cast: the CUDA kernel behind the CUDA-backed libopapi.so (opapi_cuda_shim.cpp): one
// elementwise pass that converts between f32, f16 and bf16 (aclnnCast) or scales f32 data (aclnnInplaceMuls).
// 16-bit -> f32 is exact (__half2float, __bfloat162float); f32 -> 16-bit rounds to nearest even (__float2half_rn,
// __float2bfloat16_rn). Built without fast-math or flush-to-zero flags: subnormals are kept.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace {

// The aclDataType numbers of ../aclnn_abi.h: ACL_FLOAT 0, ACL_FLOAT16 1, ACL_BF16 27.
constexpr int kF32 = 0, kF16 = 1;

__device__ float LoadF(int t, const void* p, size_t i) {
  if (t == kF32) return static_cast<const float*>(p)[i];
  if (t == kF16) return __half2float(static_cast<const __half*>(p)[i]);
  return __bfloat162float(static_cast<const __nv_bfloat16*>(p)[i]);
}

__device__ void StoreF(int t, void* p, size_t i, float v) {
  if (t == kF32)
    static_cast<float*>(p)[i] = v;
  else if (t == kF16)
    static_cast<__half*>(p)[i] = __float2half_rn(v);
  else
    static_cast<__nv_bfloat16*>(p)[i] = __float2bfloat16_rn(v);
}

__global__ void CastKernel(int in_t, const void* in, int out_t, void* out, size_t n, int scaled, float scale) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    const float v = LoadF(in_t, in, i);
    StoreF(out_t, out, i, scaled ? v * scale : v);
  }
}

}  // namespace

// Queues the conversion of n elements on `stream` (in == out for an in-place scale); the workspace, when there is
// one, is overwritten first, as the host shim does. cudaSuccess or the launch's error.
cudaError_t TesseraAclnnCudaLaunch(int in_t, const void* in, int out_t, void* out, size_t n, bool scaled, float scale,
                                   void* workspace, size_t workspace_bytes, cudaStream_t stream) {
  if (workspace_bytes)
    if (cudaError_t e = cudaMemsetAsync(workspace, 0xa5, workspace_bytes, stream)) return e;
  if (n == 0) return cudaSuccess;
  const unsigned threads = 256;
  const size_t want = (n + threads - 1) / threads;
  const unsigned blocks = static_cast<unsigned>(want < 4096 ? want : 4096);
  CastKernel<<<blocks, threads, 0, stream>>>(in_t, in, out_t, out, n, scaled ? 1 : 0, scale);
  return cudaGetLastError();
}
