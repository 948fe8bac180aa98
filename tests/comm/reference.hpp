// tests/comm/reference: the f64 reference shared by the multi-process collective workers (comm_worker
// on host ranks, gpu_worker on mixed GPU/host ranks): deterministic inputs of (seed, rank, index) that are
// exact in every element type (stored and loaded with StoreElement/LoadElement of common/dtype.hpp), the
// reduction in f64 over a world, the error bound the product promises (one final rounding to the output
// type plus f32/f64 accumulation) and a result hash.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>

#include "common/dtype.hpp"
#include "tessera/tessera.h"

namespace tessera::check {

// Deterministic input value for (seed, rank, index), exactly representable in type t.
inline double Value(uint64_t seed, int rank, size_t i, DType t, tsrRedOp_t op) {
  uint64_t h = (seed * 0x9E3779B97F4A7C15ull) ^ (static_cast<uint64_t>(rank) * 0xBF58476D1CE4E5B9ull) ^
               (i * 0x94D049BB133111EBull);
  h ^= h >> 31;
  h *= 0xD6E8FEB86659FD93ull;
  h ^= h >> 29;
  switch (t) {
    case DType::kInt8:
    case DType::kUint8:
      return op == tsrProd ? static_cast<double>(h % 2 + 1) : static_cast<double>(h % 5);
    case DType::kInt32:
    case DType::kInt64:
      return op == tsrProd ? static_cast<double>(h % 3 + 1)
                           : static_cast<double>(static_cast<int64_t>(h % 2001) - 1000);
    default: {
      // random value in [-2, 2) rounded to the type; products stay near 1
      double u = static_cast<double>(h >> 11) / 9007199254740992.0;
      double v = op == tsrProd ? 0.9 + 0.2 * u : 4.0 * u - 2.0;
      if (t == DType::kFloat16) return F16ToF32(F32ToF16(static_cast<float>(v)));
      if (t == DType::kBfloat16) return Bf16ToF32(F32ToBf16(static_cast<float>(v)));
      if (t == DType::kFloat32) return static_cast<float>(v);
      return v;
    }
  }
}

// The reduction of element i over `world` ranks in f64 (integers exact; the caller wraps them to the
// type). *abs_sum gets the sum of magnitudes that bounds the accumulation error.
inline double Reference(uint64_t seed, size_t i, DType t, tsrRedOp_t op, int world, double* abs_sum) {
  double acc = 0;
  *abs_sum = 0;
  for (int r = 0; r < world; ++r) {
    double v = Value(seed, r, i, t, op);
    *abs_sum += std::fabs(v);
    if (r == 0) {
      acc = v;
      continue;
    }
    switch (op) {
      case tsrSum:
      case tsrAvg:
        acc += v;
        break;
      case tsrProd:
        acc *= v;
        break;
      case tsrMax:
        acc = std::max(acc, v);
        break;
      case tsrMin:
        acc = std::min(acc, v);
        break;
    }
  }
  if (op == tsrAvg) acc = IsFloat(t) ? acc / world : std::trunc(acc / world);
  if (op == tsrProd) *abs_sum = std::fabs(acc) * world;
  return acc;
}

// Unit roundoff of the output type.
inline double Unit(DType t) {
  return t == DType::kFloat16    ? std::ldexp(1.0, -11)
         : t == DType::kBfloat16 ? std::ldexp(1.0, -8)
         : t == DType::kFloat32  ? std::ldexp(1.0, -24)
                                 : std::ldexp(1.0, -53);
}

// The error bound the product promises: one final rounding to the output type plus f32 (or f64)
// accumulation error over the world's terms. Integers must be exact.
inline bool WithinBound(double got, double ref, double abs_sum, DType t, int world) {
  if (!IsFloat(t)) return got == ref;
  double acc_unit = t == DType::kFloat64 ? std::ldexp(1.0, -53) : std::ldexp(1.0, -24);
  double bound = std::fabs(ref) * Unit(t) + world * acc_unit * abs_sum + 1e-300;
  if (t == DType::kFloat16) bound += std::ldexp(1.0, -25);  // subnormal spacing
  return std::fabs(got - ref) <= bound;
}

// The bound of a 16-bit reduction done by a vendor library that rounds to the 16-bit type at every hop (NCCL's ring
// kernels, HCCL's native-type accumulation; the shims of tests/shims do so): up to world - 1 roundings of partial
// sums no larger than abs_sum, then the last. What a world of one device island, and TESSERA_ISLAND_REDUCE=native,
// promise for 16-bit data; other types as WithinBound.
inline bool WithinLibraryBound(double got, double ref, double abs_sum, DType t, int world) {
  if (!IsHalf(t)) return WithinBound(got, ref, abs_sum, t, world);
  double bound = std::fabs(ref) * Unit(t) + world * Unit(t) * abs_sum + 1e-300;
  if (t == DType::kFloat16) bound += world * std::ldexp(1.0, -25);  // subnormal spacing
  return std::fabs(got - ref) <= bound;
}

inline uint64_t Hash(const void* p, size_t n) {
  uint64_t h = 1469598103934665603ull;
  auto* b = static_cast<const unsigned char*>(p);
  for (size_t i = 0; i < n; ++i) h = (h ^ b[i]) * 1099511628211ull;
  return h;
}

}  // namespace tessera::check
