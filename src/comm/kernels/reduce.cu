// comm/kernels/reduce.cu: element kernels of the device path — fold, finalize (f16/bf16 <-> f32 with
// round-to-nearest-even, the functions of common/half.hpp, which the host folds call too) and the stream
// spin-wait. See kernels.hpp.
#include "comm/kernels/kernels.hpp"
#include "common/half.hpp"

namespace tessera::comm::TSR_KERNELS_NS {
namespace {

// Conversions: common/half.hpp's, compiled for the device (the host folds call the same functions).

// Operations: the CPU's Apply() for floating types. __fadd_rn/__dadd_rn forbid contraction.
__device__ __forceinline__ float Op(float a, float b, RedOp op) {
  switch (op) {
    case RedOp::kSum:
    case RedOp::kAvg:
      return __fadd_rn(a, b);
    case RedOp::kProd:
      return __fmul_rn(a, b);
    case RedOp::kMax:
      return (a != a || a > b) ? a : b;
    case RedOp::kMin:
      return (a != a || a < b) ? a : b;
    default:
      return a;
  }
}
__device__ __forceinline__ double Op(double a, double b, RedOp op) {
  switch (op) {
    case RedOp::kSum:
    case RedOp::kAvg:
      return __dadd_rn(a, b);
    case RedOp::kProd:
      return __dmul_rn(a, b);
    case RedOp::kMax:
      return (a != a || a > b) ? a : b;
    case RedOp::kMin:
      return (a != a || a < b) ? a : b;
    default:
      return a;
  }
}

template <typename Src>
__device__ __forceinline__ float Widen(Src v, DType t);
template <>
__device__ __forceinline__ float Widen<uint16_t>(uint16_t v, DType t) {
  return t == DType::kFloat16 ? F16ToF32(v) : Bf16ToF32(v);
}
template <>
__device__ __forceinline__ float Widen<float>(float v, DType) {
  return v;
}

template <typename Acc, typename Src>
__global__ void FoldKernel(Acc* __restrict__ acc, const Src* __restrict__ src, size_t n, DType half, RedOp op,
                           bool first) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    Acc v;
    if constexpr (sizeof(Acc) == 8)
      v = src[i];
    else
      v = Widen<Src>(src[i], half);
    acc[i] = first ? v : Op(acc[i], v, op);
  }
}

template <typename T>
__global__ void FinalizeKernel(T* __restrict__ out, const T* __restrict__ acc, size_t n, bool avg, int divisor) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    if constexpr (sizeof(T) == 8)
      out[i] = avg ? __ddiv_rn(acc[i], static_cast<double>(divisor)) : acc[i];
    else
      out[i] = avg ? __fdiv_rn(acc[i], static_cast<float>(divisor)) : acc[i];
  }
}

__global__ void FinalizeHalfKernel(uint16_t* __restrict__ out, const float* __restrict__ acc, size_t n, bool f16,
                                   bool avg, int divisor) {
  const float d = static_cast<float>(divisor);
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    float v = avg ? __fdiv_rn(acc[i], d) : acc[i];
    out[i] = f16 ? F32ToF16(v) : F32ToBf16(v);
  }
}

__global__ void SpinWaitKernel(const volatile uint32_t* flag, uint32_t value) {
  while (static_cast<int32_t>(*flag - value) < 0) __nanosleep(2000);
}

__global__ void WriteFlagKernel(volatile uint32_t* flag, uint32_t value) {
  __threadfence_system();
  *flag = value;
  __threadfence_system();
}

dim3 Grid(size_t n) {
  size_t blocks = (n + 255) / 256;
  if (blocks > 4096) blocks = 4096;
  if (blocks == 0) blocks = 1;
  return dim3(static_cast<unsigned>(blocks));
}

}  // namespace

GpuError Fold(void* acc, const void* src, size_t n, DType dtype, DType src_type, RedOp op, bool first,
              GpuStream stream) {
  if (n == 0) return TSR_GPU(Success);
  if (IsHalf(dtype)) {
    if (src_type == DType::kFloat32)
      FoldKernel<float, float>
          <<<Grid(n), 256, 0, stream>>>(static_cast<float*>(acc), static_cast<const float*>(src), n, dtype, op, first);
    else
      FoldKernel<float, uint16_t><<<Grid(n), 256, 0, stream>>>(static_cast<float*>(acc),
                                                               static_cast<const uint16_t*>(src), n, dtype, op, first);
  } else if (dtype == DType::kFloat32) {
    FoldKernel<float, float>
        <<<Grid(n), 256, 0, stream>>>(static_cast<float*>(acc), static_cast<const float*>(src), n, dtype, op, first);
  } else if (dtype == DType::kFloat64) {
    FoldKernel<double, double>
        <<<Grid(n), 256, 0, stream>>>(static_cast<double*>(acc), static_cast<const double*>(src), n, dtype, op, first);
  } else {
    return TSR_GPU(ErrorInvalidValue);
  }
  return TSR_GPU(GetLastError)();
}

GpuError Finalize(void* out, const void* acc, size_t n, DType dtype, RedOp op, int divisor, GpuStream stream) {
  if (n == 0) return TSR_GPU(Success);
  const bool avg = op == RedOp::kAvg;
  if (IsHalf(dtype)) {
    FinalizeHalfKernel<<<Grid(n), 256, 0, stream>>>(static_cast<uint16_t*>(out), static_cast<const float*>(acc), n,
                                                    dtype == DType::kFloat16, avg, divisor);
  } else if (dtype == DType::kFloat32) {
    FinalizeKernel<float>
        <<<Grid(n), 256, 0, stream>>>(static_cast<float*>(out), static_cast<const float*>(acc), n, avg, divisor);
  } else if (dtype == DType::kFloat64) {
    FinalizeKernel<double>
        <<<Grid(n), 256, 0, stream>>>(static_cast<double*>(out), static_cast<const double*>(acc), n, avg, divisor);
  } else {
    return TSR_GPU(ErrorInvalidValue);
  }
  return TSR_GPU(GetLastError)();
}

GpuError Preload() {
  TSR_GPU(FuncAttributes) a;
  const void* fns[] = {
      reinterpret_cast<const void*>(&FoldKernel<float, float>),
      reinterpret_cast<const void*>(&FoldKernel<float, uint16_t>),
      reinterpret_cast<const void*>(&FoldKernel<double, double>),
      reinterpret_cast<const void*>(&FinalizeKernel<float>),
      reinterpret_cast<const void*>(&FinalizeKernel<double>),
      reinterpret_cast<const void*>(&FinalizeHalfKernel),
      reinterpret_cast<const void*>(&SpinWaitKernel),
      reinterpret_cast<const void*>(&WriteFlagKernel),
  };
  for (const void* f : fns) {
    GpuError e = TSR_GPU(FuncGetAttributes)(&a, f);
    if (e != TSR_GPU(Success)) return e;
  }
  return TSR_GPU(Success);
}

GpuError SpinWait(const volatile uint32_t* flag_dev, uint32_t value, GpuStream stream) {
  SpinWaitKernel<<<1, 1, 0, stream>>>(flag_dev, value);
  return TSR_GPU(GetLastError)();
}

GpuError WriteFlag(uint32_t* flag_dev, uint32_t value, GpuStream stream) {
  WriteFlagKernel<<<1, 1, 0, stream>>>(flag_dev, value);
  return TSR_GPU(GetLastError)();
}

}  // namespace tessera::comm::TSR_KERNELS_NS
