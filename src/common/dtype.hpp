// common/dtype: element types, their sizes and names, and element access through the exact f16/bf16 <-> f32
// conversions of common/half.hpp (the one source of those rules for the host folds and the device kernels).
// Values match tsrDataType_t.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "common/half.hpp"

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
