// common/dtype: element types, their sizes and names, and exact f16/bf16 <-> f32 conversion.
//
// Conversions to 16-bit round to nearest, ties to even, and keep NaN a NaN, so the CPU path and the
// CUDA kernels (which use the same rules) give the same bits. Values match tsrDataType_t.
#pragma once

#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>

namespace tessera {

enum class DType : int { kInt8 = 0, kUint8, kInt32, kInt64, kFloat16, kBfloat16, kFloat32, kFloat64, kCount };
enum class RedOp : int { kSum = 0, kProd, kMax, kMin, kAvg, kCount };

size_t DTypeSize(DType t);
const char* DTypeName(DType t);   // "float32", "bfloat16", ...
const char* RedOpName(RedOp op);  // "sum", ...
// Accepts the names above plus short forms (f32, bf16, half, int, ...). nullopt when unknown.
std::optional<DType> ParseDType(std::string_view name);
std::optional<RedOp> ParseRedOp(std::string_view name);
inline bool IsValid(DType t) { return static_cast<int>(t) >= 0 && t < DType::kCount; }
inline bool IsValid(RedOp op) { return static_cast<int>(op) >= 0 && op < RedOp::kCount; }
inline bool IsHalf(DType t) { return t == DType::kFloat16 || t == DType::kBfloat16; }
inline bool IsFloat(DType t) { return IsHalf(t) || t == DType::kFloat32 || t == DType::kFloat64; }

inline uint32_t F32Bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
inline float BitsF32(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

inline float Bf16ToF32(uint16_t h) { return BitsF32(static_cast<uint32_t>(h) << 16); }
inline uint16_t F32ToBf16(float f) {
  uint32_t u = F32Bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40);  // quiet NaN
  u += 0x7fffu + ((u >> 16) & 1u);                                                      // round to nearest even
  return static_cast<uint16_t>(u >> 16);
}

inline float F16ToF32(uint16_t h) {
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

inline uint16_t F32ToF16(float f) {
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
  uint32_t shift = 126 - exp;  // 14 + (112 - exp) + ... : value = man * 2^(exp-150); f16 sub unit 2^-24
  uint32_t q = man >> shift;
  uint32_t rem = man & ((1u << shift) - 1);
  uint32_t half = 1u << (shift - 1);
  if (rem > half || (rem == half && (q & 1u))) ++q;
  return static_cast<uint16_t>(sign | q);
}

// Element i of a buffer of type t, to and from double (for references and checks: `v` must be
// representable in t; 16-bit floats round to nearest even).
inline void StoreElement(void* buf, size_t i, DType t, double v) {
  switch (t) {
    case DType::kInt8:
      static_cast<int8_t*>(buf)[i] = static_cast<int8_t>(v);
      break;
    case DType::kUint8:
      static_cast<uint8_t*>(buf)[i] = static_cast<uint8_t>(v);
      break;
    case DType::kInt32:
      static_cast<int32_t*>(buf)[i] = static_cast<int32_t>(v);
      break;
    case DType::kInt64:
      static_cast<int64_t*>(buf)[i] = static_cast<int64_t>(v);
      break;
    case DType::kFloat16:
      static_cast<uint16_t*>(buf)[i] = F32ToF16(static_cast<float>(v));
      break;
    case DType::kBfloat16:
      static_cast<uint16_t*>(buf)[i] = F32ToBf16(static_cast<float>(v));
      break;
    case DType::kFloat32:
      static_cast<float*>(buf)[i] = static_cast<float>(v);
      break;
    case DType::kFloat64:
      static_cast<double*>(buf)[i] = v;
      break;
    default:
      break;
  }
}

inline double LoadElement(const void* buf, size_t i, DType t) {
  switch (t) {
    case DType::kInt8:
      return static_cast<const int8_t*>(buf)[i];
    case DType::kUint8:
      return static_cast<const uint8_t*>(buf)[i];
    case DType::kInt32:
      return static_cast<const int32_t*>(buf)[i];
    case DType::kInt64:
      return static_cast<double>(static_cast<const int64_t*>(buf)[i]);
    case DType::kFloat16:
      return F16ToF32(static_cast<const uint16_t*>(buf)[i]);
    case DType::kBfloat16:
      return Bf16ToF32(static_cast<const uint16_t*>(buf)[i]);
    case DType::kFloat32:
      return static_cast<const float*>(buf)[i];
    case DType::kFloat64:
      return static_cast<const double*>(buf)[i];
    default:
      return 0;
  }
}

}  // namespace tessera
