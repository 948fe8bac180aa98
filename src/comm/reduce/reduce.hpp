// comm/reduce/reduce: the element-wise kernels of the CPU path — fold a contribution into an accumulator and
// finalize the accumulator into the output type.
//
// Accumulators are float32 for float16/bfloat16 (the lossless rule: sum in f32, round once at the end)
// and the element type itself otherwise. Integer sums and products wrap (computed unsigned, no UB).
// `avg` folds as a sum and divides by the world size once, in Finalize. The CUDA kernels implement the
// same rules so GPU and CPU ranks produce the same bits.
//
// The 16-bit folds (f16/bf16 to and from f32 accumulators) run on the CPU's vector instructions where it
// has them (AVX-512, else AVX2+F16C), picked once at run time, with the same bits as the portable C++
// code for every input; `TESSERA_CPU_FOLDS` forces a path (reduce/simd.hpp, docs/architecture.md).
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

// out[i] = Finalize(Fold2(a[i], b[i])): a job of two contributors in one pass, with the same bits as Fold2
// into an accumulator then Finalize, but the accumulator never reaches memory (registers on the vector
// paths, a block in L1 otherwise; for f16/bf16 it is f32, twice the bytes of the data, which would go to
// memory and back). `out` may be a or b when that one has the element type.
void Fold2Finalize(void* out, const void* a, DType a_type, const void* b, DType b_type, size_t n, DType dtype, RedOp op,
                   int divisor);

// out[i] = convert(acc[i] (/ divisor when op == avg)) to `dtype`, rounding to nearest even once.
void Finalize(void* out, const void* acc, size_t n, DType dtype, RedOp op, int divisor);

// out[i] = convert(src[i]) from `src_type` to `dst_type` (both must be dtype or AccumType(dtype)).
void Convert(void* out, DType dst_type, const void* src, DType src_type, size_t n);

// The implementation of the 16-bit folds, Finalize and Convert (other types always run the portable code).
enum class FoldPath : int { kPortable = 0, kAvx2, kAvx512, kCount };
const char* FoldPathName(FoldPath p);  // "portable", "avx2", "avx512"
// Whether this build and this CPU can run `p` (kPortable always).
bool FoldPathSupported(FoldPath p);
// The path in use: chosen on first use from TESSERA_CPU_FOLDS (auto|portable|avx2|avx512, default auto:
// the best this CPU supports). A forced path the CPU lacks, or a bad value, gives a warning and the best
// supported path below it.
FoldPath ActiveFoldPath();
// Re-reads TESSERA_CPU_FOLDS and the CPU and switches to that path; returns it. For tests and benchmarks
// (call it while no fold runs).
FoldPath SelectFoldPathFromEnv();
// Uses `p`, or the best supported path below it; returns the path now in use. For tests and benchmarks.
FoldPath SetFoldPath(FoldPath p);

}  // namespace tessera::comm
