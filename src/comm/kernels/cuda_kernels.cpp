// comm/kernels/cuda_kernels: Tessera's CUDA kernels (reduce.cu) as the `cuda` runtime row's DeviceKernels
// (comm/runtime/runtime.hpp), so that a rank reaches them through its runtime row like every other device call.
// Built only where the build has CUDA; the registry (FindKernels, runtime.cpp) lists it.
#include "comm/kernels/kernels.hpp"
#include "comm/runtime/runtime.hpp"

namespace tessera::comm::internal {
namespace {
cudaStream_t S(void* s) { return static_cast<cudaStream_t>(s); }
int Preload() { return kernels::Preload(); }
int Fold(void* acc, const void* src, size_t n, DType dtype, DType src_type, RedOp op, bool first, void* s) {
  return kernels::Fold(acc, src, n, dtype, src_type, op, first, S(s));
}
int Finalize(void* out, const void* acc, size_t n, DType dtype, RedOp op, int divisor, void* s) {
  return kernels::Finalize(out, acc, n, dtype, op, divisor, S(s));
}
int SpinWait(const volatile uint32_t* flag_dev, uint32_t value, void* s) {
  return kernels::SpinWait(flag_dev, value, S(s));
}
int WriteFlag(uint32_t* flag_dev, uint32_t value, void* s) { return kernels::WriteFlag(flag_dev, value, S(s)); }
}  // namespace

extern const DeviceKernels kCudaKernels;
const DeviceKernels kCudaKernels = {"cuda", Preload, Fold, Finalize, SpinWait, WriteFlag};

}  // namespace tessera::comm::internal
