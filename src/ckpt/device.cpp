// ckpt/device: host/device copies for snapshots and restores (cudaMemcpy when TESSERA_HAVE_CUDA).
#include "ckpt/device.hpp"

#include <fmt/format.h>

#include <cstring>

#ifdef TESSERA_HAVE_CUDA
#include <cuda_runtime.h>
#endif

namespace tessera::ckpt {

int CudaDeviceCount() {
#ifdef TESSERA_HAVE_CUDA
  static const int count = [] {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
      (void)cudaGetLastError();
      return 0;
    }
    return n;
  }();
  return count;
#else
  return 0;
#endif
}

bool IsDevicePointer(const void* p) {
#ifdef TESSERA_HAVE_CUDA
  if (p == nullptr || CudaDeviceCount() == 0) return false;
  cudaPointerAttributes attr{};
  if (cudaPointerGetAttributes(&attr, p) != cudaSuccess) {
    (void)cudaGetLastError();
    return false;
  }
  return attr.type == cudaMemoryTypeDevice || attr.type == cudaMemoryTypeManaged;
#else
  (void)p;
  return false;
#endif
}

Status CopyToHost(void* dst, const void* src, size_t n) {
#ifdef TESSERA_HAVE_CUDA
  if (IsDevicePointer(src)) {
    cudaError_t e = cudaMemcpy(dst, src, n, cudaMemcpyDeviceToHost);
    if (e != cudaSuccess)
      return SystemError(fmt::format("cudaMemcpy device→host of {} bytes: {}", n, cudaGetErrorString(e)));
    return Status::Ok();
  }
#endif
  if (n) std::memcpy(dst, src, n);
  return Status::Ok();
}

Status CopyFromHost(void* dst, const void* src, size_t n) {
#ifdef TESSERA_HAVE_CUDA
  if (IsDevicePointer(dst)) {
    cudaError_t e = cudaMemcpy(dst, src, n, cudaMemcpyHostToDevice);
    if (e != cudaSuccess)
      return SystemError(fmt::format("cudaMemcpy host→device of {} bytes: {}", n, cudaGetErrorString(e)));
    return Status::Ok();
  }
#endif
  if (n) std::memcpy(dst, src, n);
  return Status::Ok();
}

}  // namespace tessera::ckpt
