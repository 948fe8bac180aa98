// comm/kernels/device_kernels: Tessera's kernels (reduce.cu) as a runtime row's DeviceKernels
// (comm/runtime/runtime.hpp), so that a rank reaches them through its runtime row like every other device call.
// One source for both dialects (kernels.hpp): built with the CUDA kernels it is the `cuda` row's entry
// (kCudaKernels), built with TESSERA_KERNELS_MUSA beside the mcc-built kernels the `musa` row's (kMusaKernels).
// The registry (FindKernels, runtime.cpp) lists the ones the build has.
#include "comm/kernels/kernels.hpp"
#include "comm/runtime/runtime.hpp"

namespace tessera::comm::internal {
namespace {
namespace k = TSR_KERNELS_NS;
k::GpuStream S(void* s) { return static_cast<k::GpuStream>(s); }
int Preload() { return k::Preload(); }
int Fold(void* acc, const void* src, size_t n, DType dtype, DType src_type, RedOp op, bool first, void* s) {
  return k::Fold(acc, src, n, dtype, src_type, op, first, S(s));
}
int Finalize(void* out, const void* acc, size_t n, DType dtype, RedOp op, int divisor, void* s) {
  return k::Finalize(out, acc, n, dtype, op, divisor, S(s));
}
int SpinWait(const volatile uint32_t* flag_dev, uint32_t value, void* s) { return k::SpinWait(flag_dev, value, S(s)); }
int WriteFlag(uint32_t* flag_dev, uint32_t value, void* s) { return k::WriteFlag(flag_dev, value, S(s)); }
}  // namespace

#if defined(TESSERA_KERNELS_MUSA)
extern const DeviceKernels kMusaKernels;
const DeviceKernels kMusaKernels = {TSR_KERNELS_ROW, Preload, Fold, Finalize, SpinWait, WriteFlag};
#else
extern const DeviceKernels kCudaKernels;
const DeviceKernels kCudaKernels = {TSR_KERNELS_ROW, Preload, Fold, Finalize, SpinWait, WriteFlag};
#endif

}  // namespace tessera::comm::internal
