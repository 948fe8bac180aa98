// common/dtype: names and sizes of element types and reduction operations.
#include "common/dtype.hpp"

namespace tessera {

size_t DTypeSize(DType t) {
  switch (t) {
    case DType::kInt8:
    case DType::kUint8:
      return 1;
    case DType::kFloat16:
    case DType::kBfloat16:
      return 2;
    case DType::kInt32:
    case DType::kFloat32:
      return 4;
    case DType::kInt64:
    case DType::kFloat64:
      return 8;
    default:
      return 0;
  }
}

const char* DTypeName(DType t) {
  static const char* kNames[] = {"int8", "uint8", "int32", "int64", "float16", "bfloat16", "float32", "float64"};
  return IsValid(t) ? kNames[static_cast<int>(t)] : "invalid";
}

const char* RedOpName(RedOp op) {
  static const char* kNames[] = {"sum", "prod", "max", "min", "avg"};
  return IsValid(op) ? kNames[static_cast<int>(op)] : "invalid";
}

std::optional<DType> ParseDType(std::string_view n) {
  if (n == "int8" || n == "i8") return DType::kInt8;
  if (n == "uint8" || n == "u8") return DType::kUint8;
  if (n == "int32" || n == "i32" || n == "int") return DType::kInt32;
  if (n == "int64" || n == "i64") return DType::kInt64;
  if (n == "float16" || n == "f16" || n == "half" || n == "fp16") return DType::kFloat16;
  if (n == "bfloat16" || n == "bf16") return DType::kBfloat16;
  if (n == "float32" || n == "f32" || n == "float" || n == "fp32") return DType::kFloat32;
  if (n == "float64" || n == "f64" || n == "double" || n == "fp64") return DType::kFloat64;
  return std::nullopt;
}

std::optional<RedOp> ParseRedOp(std::string_view n) {
  if (n == "sum") return RedOp::kSum;
  if (n == "prod") return RedOp::kProd;
  if (n == "max") return RedOp::kMax;
  if (n == "min") return RedOp::kMin;
  if (n == "avg") return RedOp::kAvg;
  return std::nullopt;
}

}  // namespace tessera
