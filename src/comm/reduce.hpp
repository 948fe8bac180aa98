// comm/reduce: the element-wise kernels of the CPU path — fold a contribution into an accumulator and
// finalize the accumulator into the output type.
//
// Accumulators are float32 for float16/bfloat16 (the lossless rule: sum in f32, round once at the end)
// and the element type itself otherwise. Integer sums and products wrap (computed unsigned, no UB).
// `avg` folds as a sum and divides by the world size once, in Finalize. The CUDA kernels implement the
// same rules so GPU and CPU ranks produce the same bits.
#pragma once

#include <cstddef>

#include "common/dtype.hpp"

namespace tessera::comm {

// The accumulator type of `t`: float32 for 16-bit floats, else `t`.
inline DType AccumType(DType t) { return IsHalf(t) ? DType::kFloat32 : t; }

// acc[i] = first ? src[i] : op(acc[i], src[i]) for i < n, where src has type `src_type` (either the
// element type or its accumulator type) and acc has AccumType(dtype).
void Fold(void* acc, const void* src, size_t n, DType dtype, DType src_type, RedOp op, bool first);

// acc[i] = op(convert(a[i]), convert(b[i])): the first two contributions folded in one pass, with the same
// bits as Fold(acc, a, .., first=true) then Fold(acc, b, ..). a or b may be acc itself.
void Fold2(void* acc, const void* a, DType a_type, const void* b, DType b_type, size_t n, DType dtype, RedOp op);

// out[i] = convert(acc[i] (/ divisor when op == avg)) to `dtype`, rounding to nearest even once.
void Finalize(void* out, const void* acc, size_t n, DType dtype, RedOp op, int divisor);

// out[i] = convert(src[i]) from `src_type` to `dst_type` (both must be dtype or AccumType(dtype)).
void Convert(void* out, DType dst_type, const void* src, DType src_type, size_t n);

}  // namespace tessera::comm
