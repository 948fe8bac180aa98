// cli/bench_check: the inputs of `tessera bench` and their f64 reference (--check). Every rank fills its
// input from a deterministic generator of (seed, rank, index), so each rank computes the reference of its
// own result locally, with no data exchanged. An element is wrong when its error exceeds one final rounding
// to the output type plus f32 accumulation (n * 2^-24 * sum|x_i|) for floats, or is not exact for integers.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "common/dtype.hpp"

namespace tessera::cli::bench {

inline uint64_t Mix(uint64_t x) {  // splitmix64 finaliser
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// The value of element `i` of rank `rank`'s input, exactly as stored in the element type. Integer ranges
// are chosen so that no reduction over `n` ranks overflows; float products stay within [2^-n, 2^n].
class Generator {
 public:
  Generator(uint64_t seed, DType t, RedOp op, int n);

  double Value(int rank, uint64_t i) const {
    uint64_t h = Mix(seed_ ^ (static_cast<uint64_t>(rank) * 0xd1b54a32d192ed03ull) ^ Mix(i));
    if (IsFloat(t_)) {
      double u =
          t_ == DType::kFloat64 ? static_cast<double>(h >> 11) * 0x1p-53 : static_cast<double>(h >> 40) * 0x1p-24;
      double v = op_ == RedOp::kProd ? ((h & 1) ? -1.0 : 1.0) * (0.5 + 1.5 * u) : 2.0 * u - 1.0;
      switch (t_) {
        case DType::kFloat16:
          return F16ToF32(F32ToF16(static_cast<float>(v)));
        case DType::kBfloat16:
          return Bf16ToF32(F32ToBf16(static_cast<float>(v)));
        case DType::kFloat32:
          return static_cast<float>(v);
        default:
          return v;
      }
    }
    if (!choices_.empty()) return static_cast<double>(choices_[h % choices_.size()]);
    return static_cast<double>(lo_ + static_cast<int64_t>(h % static_cast<uint64_t>(hi_ - lo_ + 1)));
  }

  // Stores elements [first, first + count) of rank `rank`'s input at `out` (element 0 = `first`).
  void Fill(int rank, uint64_t first, uint64_t count, void* out) const {
    for (uint64_t j = 0; j < count; ++j) StoreElement(out, j, t_, Value(rank, first + j));
  }

 private:
  uint64_t seed_;
  DType t_;
  RedOp op_;
  int64_t lo_ = 0, hi_ = 0;
  std::vector<int64_t> choices_;
};

// Counts the elements of a reduction over `n` ranks (op `op`, type `t`) that are outside the bound. `out`
// (host memory) holds `count` elements whose global indices start at `first` (reduce_scatter: this rank's
// block).
int64_t CheckReduction(const Generator& gen, DType t, RedOp op, int n, const void* out, uint64_t first, uint64_t count);

// A fast 64-bit hash of a buffer (bit-identity across ranks, not security).
uint64_t HashBytes(const void* data, size_t len);

}  // namespace tessera::cli::bench
