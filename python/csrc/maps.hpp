// python/csrc/maps.hpp — tessera._C's maps from torch to Tessera's C API: a tensor's dtype to a tsrDataType_t and
// c10d's reduce op to a tsrRedOp_t, each refusing what Tessera cannot do with a message naming the operation and
// the value. Self-contained (torch's headers and tessera.h only), so tests/torch/maps_test.py checks it alone
// through the bindings `_C._type_of` and `_C._redop_of`.
#pragma once

#include <ATen/ATen.h>
#include <tessera/tessera.h>

#include <torch/csrc/distributed/c10d/Types.hpp>

namespace tessera_torch {

// c10d's name of a reduce op ("SUM", ...; "UNKNOWN" for a value outside the enum).
const char* OpName(c10d::ReduceOp::RedOpType op);

// The Tessera type of a tensor of `dtype`, or an error naming the operation `what` and the dtype. bool travels as
// one byte (uint8, 0 or 1).
tsrDataType_t TypeOf(at::ScalarType dtype, const char* what);
inline tsrDataType_t TypeOf(const at::Tensor& t, const char* what) { return TypeOf(t.scalar_type(), what); }

// Tessera's reduce op for `op` on tensors of `dtype`. bool follows ProcessGroupNCCL: SUM is logical or (max),
// PRODUCT is logical and (min), AVG is refused. PREMUL_SUM is a SUM after the caller scaled its input.
tsrRedOp_t RedOpOf(c10d::ReduceOp::RedOpType op, at::ScalarType dtype, const char* what);
inline tsrRedOp_t RedOpOf(const c10d::ReduceOp& op, const at::Tensor& t, const char* what) {
  return RedOpOf(op.op_, t.scalar_type(), what);
}

}  // namespace tessera_torch
