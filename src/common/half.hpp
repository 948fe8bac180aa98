// common/half: the bit-exact float16 / bfloat16 <-> float32 conversion rules, one source for the host and the
// device. The host folds (comm/reduce, through common/dtype.hpp), the CUDA kernels (comm/kernels/reduce.cu,
// nvcc) and the same kernels built for MUSA (mcc, CUDA's dialect) all call these functions, so a rank on any of
// them rounds the same f32 to the same 16 bits:
//   - widening is exact (every 16-bit value is an f32);
//   - narrowing rounds to nearest, ties to even, on the integer bits (no floating-point arithmetic, so no
//     compiler flag or flush-to-zero mode can change a result: subnormals are kept);
//   - a NaN stays a NaN (quieted: bf16 sets its quiet bit, f16 becomes 0x7e00 with the sign kept).
// Plain C++ with <cstdint> and <cstring> only: compiled by nvcc / mcc the functions are __host__ __device__.
#pragma once

#include <cstdint>
#include <cstring>

#if defined(__CUDACC__) || defined(__MUSACC__)
#define TSR_HOST_DEVICE __host__ __device__ __forceinline__
#else
#define TSR_HOST_DEVICE inline
#endif

namespace tessera {

TSR_HOST_DEVICE uint32_t F32Bits(float f) {
#if defined(__CUDA_ARCH__) || defined(__MUSA_ARCH__)
  return __float_as_uint(f);
#else
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
#endif
}
TSR_HOST_DEVICE float BitsF32(uint32_t u) {
#if defined(__CUDA_ARCH__) || defined(__MUSA_ARCH__)
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, 4);
  return f;
#endif
}

TSR_HOST_DEVICE float Bf16ToF32(uint16_t h) { return BitsF32(static_cast<uint32_t>(h) << 16); }
TSR_HOST_DEVICE uint16_t F32ToBf16(float f) {
  uint32_t u = F32Bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40);  // quiet NaN
  u += 0x7fffu + ((u >> 16) & 1u);                                                      // round to nearest even
  return static_cast<uint16_t>(u >> 16);
}

TSR_HOST_DEVICE float F16ToF32(uint16_t h) {
  uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t man = h & 0x3ffu;
  if (exp == 0) {
    if (man == 0) return BitsF32(sign);
    // subnormal: normalise
    int e = -1;
    do {
      ++e;
      man <<= 1;
    } while ((man & 0x400u) == 0);
    man &= 0x3ffu;
    return BitsF32(sign | (static_cast<uint32_t>(112 - e) << 23) | (man << 13));
  }
  if (exp == 31) return BitsF32(sign | 0x7f800000u | (man << 13));
  return BitsF32(sign | ((exp + 112) << 23) | (man << 13));
}

TSR_HOST_DEVICE uint16_t F32ToF16(float f) {
  uint32_t u = F32Bits(f);
  uint32_t sign = (u >> 16) & 0x8000u;
  uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u);   // NaN
  if (a >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // overflow (incl. rounding) -> inf
  if (a >= 0x38800000u) {                                              // normal in f16
    uint32_t r = a - 0x38000000u;                                      // rebias exponent (127-15) << 23
    r += 0xfffu + ((r >> 13) & 1u);
    return static_cast<uint16_t>(sign | (r >> 13));
  }
  if (a < 0x33000000u) return static_cast<uint16_t>(sign);  // below half the smallest subnormal
  // subnormal result: shift mantissa with implicit 1, round to nearest even
  uint32_t exp = a >> 23;
  uint32_t man = (a & 0x7fffffu) | 0x800000u;
  uint32_t shift = 126 - exp;  // value = man * 2^(exp-150); the f16 subnormal unit is 2^-24
  uint32_t q = man >> shift;
  uint32_t rem = man & ((1u << shift) - 1);
  uint32_t half = 1u << (shift - 1);
  if (rem > half || (rem == half && (q & 1u))) ++q;
  return static_cast<uint16_t>(sign | q);
}

}  // namespace tessera
