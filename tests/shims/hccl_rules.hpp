// tests/shims/hccl_rules: the HCCL rules that the host shim (hccl_shim.cpp) and the NCCL-backed one
// (cuda/hccl_nccl_shim.cpp) enforce alike: the codes of unsupported data types, the reduction-op checks, the
// rank checks and HcclGetErrorString's names. The rules and their sources ([types], [same], [root]) are cited in
// hccl_shim.cpp's header. `fail` is the shim's failure: HcclResult fail(HcclResult code, const std::string& msg).
#pragma once

#include <cstdint>
#include <string>

#include "hccl_abi.h"
#include "shim_runtime.hpp"

namespace tshim::hccl {

// The code of a data type a call does not take: HCCL_E_NOT_SUPPORT for a type HCCL numbers, else HCCL_E_PARA.
inline HcclResult TypeCode(int t) {
  return (t >= HCCL_DATA_TYPE_INT8 && t <= HCCL_DATA_TYPE_FP8E8M0 && t != 13) ? HCCL_E_NOT_SUPPORT : HCCL_E_PARA;
}

// A reduction's op: HCCL's 0..3 (sum, prod, max, min); prod of int16 or bfp16 is not supported [types].
template <typename F>
HcclResult CheckOp(const char* fn, HcclDataType t, int op, F fail) {
  if (op < 0 || op > HCCL_REDUCE_MIN) return fail(HCCL_E_PARA, Fmt("%s: op %d is not an HcclReduceOp", fn, op));
  if (op == HCCL_REDUCE_PROD && (t == HCCL_DATA_TYPE_INT16 || t == HCCL_DATA_TYPE_BFP16))
    return fail(HCCL_E_NOT_SUPPORT, Fmt("%s: prod does not support %s on Atlas A2 [types]", fn,
                                        t == HCCL_DATA_TYPE_INT16 ? "int16" : "bfp16"));
  return HCCL_SUCCESS;
}

// A rank argument (`what`: "root", "peer") of a communicator of `nranks`.
template <typename F>
HcclResult CheckRank(const char* fn, const char* what, uint32_t rank, int nranks, F fail) {
  if (rank >= static_cast<uint32_t>(nranks))
    return fail(HCCL_E_PARA, Fmt("%s: %s %u is not in [0, %d)", fn, what, rank, nranks));
  return HCCL_SUCCESS;
}

inline const char* ErrorName(HcclResult r) {
  static const char* const kNames[] = {"success",
                                       "parameter error",
                                       "empty pointer",
                                       "memory error",
                                       "internal error",
                                       "not support feature",
                                       "not found specific resource",
                                       "resource unavailable",
                                       "call system interface error",
                                       "timeout",
                                       "open file fail",
                                       "tcp connect fail",
                                       "roce connect fail",
                                       "tcp transfer fail",
                                       "roce transfer fail",
                                       "call runtime api fail",
                                       "call driver api fail",
                                       "call profiling api fail",
                                       "call cce api fail",
                                       "call network api fail",
                                       "try again",
                                       "error cqe",
                                       "error communicator suspending",
                                       "retry constraint",
                                       "out of memory"};  // the comments of types:24-48
  const int i = static_cast<int>(r);
  return i >= 0 && i < static_cast<int>(sizeof kNames / sizeof *kNames) ? kNames[i] : "unknown HcclResult";
}

}  // namespace tshim::hccl
