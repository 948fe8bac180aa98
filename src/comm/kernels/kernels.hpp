// comm/kernels: CUDA kernels of the device path, with the SAME element rules as the CPU kernels in
// comm/reduce/reduce.cpp and the conversions in common/dtype.hpp, so that a GPU rank and a CPU rank that fold
// the same contributions in the same order produce the same bits:
//   - float16/bfloat16 widen to float32 exactly; float32 narrows with round-to-nearest-even, NaN kept NaN;
//   - Fold: acc = first ? widen(src) : op(acc, widen(src)), max/min propagate NaN like the CPU path;
//   - Finalize: out = narrow(acc / divisor when op == avg, else acc), rounded once.
// Device arithmetic is compiled without fused multiply-add contraction (no FMA in these kernels anyway:
// one add, one divide, IEEE round-to-nearest on both sides).
// All launchers are asynchronous on `stream` and return the launch error, if any.
//
// One source for two vendors: nvcc builds these kernels for CUDA (namespace `kernels`, CUDA's runtime types), and
// Moore Threads' mcc, which compiles CUDA's dialect, builds the same files for MUSA with TESSERA_KERNELS_MUSA defined
// (namespace `musa_kernels`, MUSA's runtime types: torch_musa's mapping renames cudaX to musaX one to one). The
// conversions are common/half.hpp's, the host folds' own functions. No flush-to-zero flag on either compiler.
#pragma once

#if defined(TESSERA_KERNELS_MUSA)
#include <musa_runtime_api.h>
#define TSR_GPU(name) musa##name  // TSR_GPU(Stream_t) -> musaStream_t
#define TSR_KERNELS_NS musa_kernels
#define TSR_KERNELS_ROW "musa"
#else
#include <cuda_runtime_api.h>
#define TSR_GPU(name) cuda##name  // TSR_GPU(Stream_t) -> cudaStream_t
#define TSR_KERNELS_NS kernels
#define TSR_KERNELS_ROW "cuda"
#endif

#include <cstddef>
#include <cstdint>

#include "common/dtype.hpp"

namespace tessera::comm::TSR_KERNELS_NS {

using GpuError = TSR_GPU(Error_t);  // cudaError_t / musaError_t
using GpuStream = TSR_GPU(Stream_t);

// acc (AccumType(dtype)) = first ? convert(src) : op(acc, convert(src)); src has type `src_type`, which is
// dtype or AccumType(dtype). Floating types only (float16, bfloat16, float32, float64).
GpuError Fold(void* acc, const void* src, size_t n, DType dtype, DType src_type, RedOp op, bool first,
              GpuStream stream);
// out (dtype) = narrow(acc (AccumType(dtype)) [/ divisor for avg]). Floating types only.
GpuError Finalize(void* out, const void* acc, size_t n, DType dtype, RedOp op, int divisor, GpuStream stream);
// Loads every kernel of this file now. Under CUDA's lazy module loading (the default) a kernel's first
// launch loads it under a context-wide lock; if the application's thread sits in a synchronizing call
// (cudaMemcpy, cudaFree) on a stream that waits for our collective, that first launch from the bridge's
// worker would wait forever (seen on the H200). Called once per communicator, before any collective.
GpuError Preload();
// Blocks `stream` until the host-mapped word *flag reaches `value` (wrap-around compare, like
// CU_STREAM_WAIT_VALUE_GEQ). The fallback when the driver's stream memory operations are unavailable.
GpuError SpinWait(const volatile uint32_t* flag_dev, uint32_t value, GpuStream stream);
// Writes `value` to *flag_dev (host-mapped memory) after a system-wide fence, as one thread on `stream`.
GpuError WriteFlag(uint32_t* flag_dev, uint32_t value, GpuStream stream);

}  // namespace tessera::comm::TSR_KERNELS_NS
