// comm/reduce/simd: the 16-bit (f16/bf16) fold/finalize kernels behind comm/reduce, one table per
// implementation: the portable C++ one (reduce.cpp) and vector ones (simd.cpp: AVX2+F16C, AVX-512)
// compiled with per-function target attributes, so the library still runs on CPUs without them. Every
// table gives the same bits as the portable one for every input (tests/comm/fold_test.cpp); the
// rules themselves are in reduce.hpp.
#pragma once

#include <cstddef>
#include <cstdint>

#include "common/dtype.hpp"
#include "common/half.hpp"  // the conversions, shared with the device kernels

namespace tessera::comm::detail {

// op(a, b) of one element, as every fold applies it (NaN-propagating max/min: a NaN `a` wins, and a NaN
// `b` wins over a number because no comparison with it is true).
template <typename T>
inline T ApplyFloat(T a, T b, RedOp op) {
  switch (op) {
    case RedOp::kSum:
    case RedOp::kAvg:
      return a + b;
    case RedOp::kProd:
      return a * b;
    case RedOp::kMax:
      return (a != a || a > b) ? a : b;
    case RedOp::kMin:
      return (a != a || a < b) ? a : b;
    default:
      return a;
  }
}

// Sum and product in the 16-bit folds' f32 accumulators. When both operands are NaN, x86 returns the
// first source operand's NaN, but which operand comes first is the compiler's choice: the scalar loops
// before the vector paths gave `b`'s NaN in some (f16 Fold sum) and `a`'s in others (prod). So the rule is
// explicit, and the same in every path: a NaN `a` wins, quieted (as the hardware would return it).
inline float NanFirst(float a, float r) { return a != a ? BitsF32(F32Bits(a) | 0x00400000u) : r; }
inline float HalfApply(float a, float b, RedOp op) {
  switch (op) {
    case RedOp::kSum:
    case RedOp::kAvg:
      return NanFirst(a, a + b);
    case RedOp::kProd:
      return NanFirst(a, a * b);
    default:
      return ApplyFloat(a, b, op);
  }
}

// The kernels of one 16-bit format (raw uint16_t bits of f16 or bf16; accumulators are f32).
struct HalfKernels {
  // acc[i] = first ? widen(src[i]) : op(acc[i], widen(src[i])).
  void (*fold)(float* acc, const uint16_t* src, size_t n, RedOp op, bool first);
  // acc[i] = op(wa(a[i]), wb(b[i])), where a (b) holds f32 when a32 (b32), else 16-bit values; a or b may
  // be acc itself.
  void (*fold2)(float* acc, const void* a, bool a32, const void* b, bool b32, size_t n, RedOp op);
  // out[i] = narrow(op == avg ? acc[i] / divisor : acc[i]); out may be acc itself (narrowing in place).
  void (*finalize)(uint16_t* out, const float* acc, size_t n, RedOp op, int divisor);
  // fold2 then finalize without the accumulator in memory; out may be a or b when that one is 16-bit.
  void (*fold2_finalize)(uint16_t* out, const void* a, bool a32, const void* b, bool b32, size_t n, RedOp op,
                         int divisor);
};

struct FoldKernels {
  const char* name;
  HalfKernels f16, bf16;
};

// The portable table (reduce.cpp) and the vector ones (simd.cpp; nullptr where the compiler or
// the architecture cannot build them).
extern const FoldKernels kPortableKernels;
extern const FoldKernels* const kAvx2Kernels;
extern const FoldKernels* const kAvx512Kernels;

// Whether this CPU (and OS) runs kAvx2Kernels / kAvx512Kernels.
bool CpuHasAvx2F16c();
bool CpuHasAvx512();

}  // namespace tessera::comm::detail
