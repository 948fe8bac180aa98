// comm/kernels/reduce.cu: element kernels of the device path — fold, finalize (f16/bf16 <-> f32 with
// round-to-nearest-even, bit-for-bit as common/dtype.hpp) and the stream spin-wait. See kernels.hpp.
#include <cuda_runtime.h>

#include "comm/kernels/kernels.hpp"

namespace tessera::comm::kernels {
namespace {

// ---- conversions: the integer recipes of common/dtype.hpp, on the device ----
__device__ __forceinline__ float Bf16ToF32(uint16_t h) { return __uint_as_float(static_cast<uint32_t>(h) << 16); }
__device__ __forceinline__ uint16_t F32ToBf16(float f) {
  uint32_t u = __float_as_uint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}
__device__ __forceinline__ float F16ToF32(uint16_t h) {
  uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t man = h & 0x3ffu;
  if (exp == 0) {
    if (man == 0) return __uint_as_float(sign);
    int e = -1;
    do {
      ++e;
      man <<= 1;
    } while ((man & 0x400u) == 0);
    man &= 0x3ffu;
    return __uint_as_float(sign | (static_cast<uint32_t>(112 - e) << 23) | (man << 13));
  }
  if (exp == 31) return __uint_as_float(sign | 0x7f800000u | (man << 13));
  return __uint_as_float(sign | ((exp + 112) << 23) | (man << 13));
}
__device__ __forceinline__ uint16_t F32ToF16(float f) {
  uint32_t u = __float_as_uint(f);
  uint32_t sign = (u >> 16) & 0x8000u;
  uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u);
  if (a >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);
  if (a >= 0x38800000u) {
    uint32_t r = a - 0x38000000u;
    r += 0xfffu + ((r >> 13) & 1u);
    return static_cast<uint16_t>(sign | (r >> 13));
  }
  if (a < 0x33000000u) return static_cast<uint16_t>(sign);
  uint32_t exp = a >> 23;
  uint32_t man = (a & 0x7fffffu) | 0x800000u;
  uint32_t shift = 126 - exp;
  uint32_t q = man >> shift;
  uint32_t rem = man & ((1u << shift) - 1);
  uint32_t half = 1u << (shift - 1);
  if (rem > half || (rem == half && (q & 1u))) ++q;
  return static_cast<uint16_t>(sign | q);
}

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

cudaError_t Fold(void* acc, const void* src, size_t n, DType dtype, DType src_type, RedOp op, bool first,
                 cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
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
    return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
}

cudaError_t Finalize(void* out, const void* acc, size_t n, DType dtype, RedOp op, int divisor, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
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
    return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
}

cudaError_t Preload() {
  cudaFuncAttributes a;
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
    cudaError_t e = cudaFuncGetAttributes(&a, f);
    if (e != cudaSuccess) return e;
  }
  return cudaSuccess;
}

cudaError_t SpinWait(const volatile uint32_t* flag_dev, uint32_t value, cudaStream_t stream) {
  SpinWaitKernel<<<1, 1, 0, stream>>>(flag_dev, value);
  return cudaGetLastError();
}

cudaError_t WriteFlag(uint32_t* flag_dev, uint32_t value, cudaStream_t stream) {
  WriteFlagKernel<<<1, 1, 0, stream>>>(flag_dev, value);
  return cudaGetLastError();
}

}  // namespace tessera::comm::kernels
