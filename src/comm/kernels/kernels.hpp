// comm/kernels: CUDA kernels of the device path, with the SAME element rules as the CPU kernels in
// comm/reduce/reduce.cpp and the conversions in common/dtype.hpp, so that a GPU rank and a CPU rank that fold
// the same contributions in the same order produce the same bits:
//   - float16/bfloat16 widen to float32 exactly; float32 narrows with round-to-nearest-even, NaN kept NaN;
//   - Fold: acc = first ? widen(src) : op(acc, widen(src)), max/min propagate NaN like the CPU path;
//   - Finalize: out = narrow(acc / divisor when op == avg, else acc), rounded once.
// Device arithmetic is compiled without fused multiply-add contraction (no FMA in these kernels anyway:
// one add, one divide, IEEE round-to-nearest on both sides).
// All launchers are asynchronous on `stream` and return the launch error, if any.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "common/dtype.hpp"

namespace tessera::comm::kernels {

// acc (AccumType(dtype)) = first ? convert(src) : op(acc, convert(src)); src has type `src_type`, which is
// dtype or AccumType(dtype). Floating types only (float16, bfloat16, float32, float64).
cudaError_t Fold(void* acc, const void* src, size_t n, DType dtype, DType src_type, RedOp op, bool first,
                 cudaStream_t stream);
// out (dtype) = narrow(acc (AccumType(dtype)) [/ divisor for avg]). Floating types only.
cudaError_t Finalize(void* out, const void* acc, size_t n, DType dtype, RedOp op, int divisor, cudaStream_t stream);
// Loads every kernel of this file now. Under CUDA's lazy module loading (the default) a kernel's first
// launch loads it under a context-wide lock; if the application's thread sits in a synchronizing call
// (cudaMemcpy, cudaFree) on a stream that waits for our collective, that first launch from the bridge's
// worker would wait forever (seen on the H200). Called once per communicator, before any collective.
cudaError_t Preload();
// Blocks `stream` until the host-mapped word *flag reaches `value` (wrap-around compare, like
// CU_STREAM_WAIT_VALUE_GEQ). The fallback when the driver's stream memory operations are unavailable.
cudaError_t SpinWait(const volatile uint32_t* flag_dev, uint32_t value, cudaStream_t stream);
// Writes `value` to *flag_dev (host-mapped memory) after a system-wide fence, as one thread on `stream`.
cudaError_t WriteFlag(uint32_t* flag_dev, uint32_t value, cudaStream_t stream);

}  // namespace tessera::comm::kernels
