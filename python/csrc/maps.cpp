// python/csrc/maps.cpp — the dtype and reduce-op maps of tessera._C (maps.hpp).
#include "maps.hpp"

#include "check.hpp"

namespace tessera_torch {

const char* OpName(c10d::ReduceOp::RedOpType op) {
  switch (op) {
    case c10d::ReduceOp::SUM:
      return "SUM";
    case c10d::ReduceOp::AVG:
      return "AVG";
    case c10d::ReduceOp::PRODUCT:
      return "PRODUCT";
    case c10d::ReduceOp::MIN:
      return "MIN";
    case c10d::ReduceOp::MAX:
      return "MAX";
    case c10d::ReduceOp::BAND:
      return "BAND";
    case c10d::ReduceOp::BOR:
      return "BOR";
    case c10d::ReduceOp::BXOR:
      return "BXOR";
    case c10d::ReduceOp::PREMUL_SUM:
      return "PREMUL_SUM";
    default:
      return "UNKNOWN";
  }
}

tsrDataType_t TypeOf(at::ScalarType dtype, const char* what) {
  switch (dtype) {
    case at::kFloat:
      return tsrFloat32;
    case at::kHalf:
      return tsrFloat16;
    case at::kBFloat16:
      return tsrBfloat16;
    case at::kDouble:
      return tsrFloat64;
    case at::kChar:
      return tsrInt8;
    case at::kByte:
      return tsrUint8;
    case at::kBool:
      return tsrUint8;  // one byte, 0 or 1
    case at::kInt:
      return tsrInt32;
    case at::kLong:
      return tsrInt64;
    default:
      break;
  }
  TSR_CHECK(false, "tessera: ", what, " does not support dtype ", dtype,
            " (supported: float32, float16, bfloat16, float64, int8, uint8, int32, int64, bool)");
}

tsrRedOp_t RedOpOf(c10d::ReduceOp::RedOpType op, at::ScalarType dtype, const char* what) {
  const bool is_bool = dtype == at::kBool;
  switch (op) {
    case c10d::ReduceOp::SUM:
      return is_bool ? tsrMax : tsrSum;
    case c10d::ReduceOp::PREMUL_SUM:
      return tsrSum;
    case c10d::ReduceOp::AVG:
      TSR_CHECK(!is_bool, "tessera: ", what, " AVG is not defined for bool tensors");
      return tsrAvg;
    case c10d::ReduceOp::PRODUCT:
      return is_bool ? tsrMin : tsrProd;
    case c10d::ReduceOp::MIN:
      return tsrMin;
    case c10d::ReduceOp::MAX:
      return tsrMax;
    default:
      break;
  }
  TSR_CHECK(false, "tessera: ", what, " does not support reduce op ", OpName(op),
            " (supported: SUM, AVG, PRODUCT, MIN, MAX, PREMUL_SUM)");
}

}  // namespace tessera_torch
