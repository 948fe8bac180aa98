// cli/bench_check: the inputs of `tessera bench` and their f64 reference; see bench_check.hpp.
#include "cli/bench_check.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace tessera::cli::bench {
namespace {

// One step of the reference reduction: acc (starting at 0 for sums, 1 for products) folds in x.
template <typename T>
void FoldInto(T& acc, T x, RedOp op, bool first) {
  if (first && (op == RedOp::kMax || op == RedOp::kMin))
    acc = x;
  else if (op == RedOp::kSum || op == RedOp::kAvg)
    acc += x;
  else if (op == RedOp::kProd)
    acc *= x;
  else if (op == RedOp::kMax)
    acc = std::max(acc, x);
  else
    acc = std::min(acc, x);
}

bool IsSigned(DType t) { return t == DType::kInt8 || t == DType::kInt32 || t == DType::kInt64; }

int64_t TypeMax(DType t) {
  switch (t) {
    case DType::kInt8:
      return 127;
    case DType::kUint8:
      return 255;
    case DType::kInt32:
      return INT32_MAX;
    default:
      return INT64_MAX;
  }
}

// Half a unit in the last place of the output type at magnitude a: the error of one final rounding.
double HalfUlp(DType t, double a) {
  switch (t) {
    case DType::kFloat16:
      return std::max(a * 0x1p-11, 0x1p-25);
    case DType::kBfloat16:
      return std::max(a * 0x1p-8, 0x1p-134);
    case DType::kFloat32:
      return std::max(a * 0x1p-24, 0x1p-150);
    default:
      return a * 0x1p-53;
  }
}

}  // namespace

Generator::Generator(uint64_t seed, DType t, RedOp op, int n) : seed_(Mix(seed)), t_(t), op_(op) {
  if (IsFloat(t)) return;
  const int64_t max = TypeMax(t);
  if (op == RedOp::kProd) {
    bool twos = n < 62 && (int64_t{1} << n) <= max;
    choices_ = IsSigned(t) ? (twos ? std::vector<int64_t>{-2, -1, 1, 2} : std::vector<int64_t>{-1, 1})
                           : (twos ? std::vector<int64_t>{1, 2} : std::vector<int64_t>{1});
  } else {
    int64_t lim =
        op == RedOp::kMax || op == RedOp::kMin ? std::min<int64_t>(max, 1000000) : std::min<int64_t>(max / n, 1000);
    lo_ = IsSigned(t) ? -lim : 0;
    hi_ = lim;
  }
}

int64_t CheckReduction(const Generator& gen, DType t, RedOp op, int n, const void* out, uint64_t first,
                       uint64_t count) {
  const double acc_eps = t == DType::kFloat64 ? 0x1p-53 : 0x1p-24;
  int64_t wrong = 0;
  for (uint64_t j = 0; j < count; ++j) {
    const uint64_t i = first + j;
    const double got = LoadElement(out, j, t);
    if (!IsFloat(t)) {
      int64_t acc = op == RedOp::kProd ? 1 : 0;
      for (int r = 0; r < n; ++r) {
        FoldInto(acc, static_cast<int64_t>(gen.Value(r, i)), op, r == 0);
      }
      if (op == RedOp::kAvg) acc /= n;
      wrong += got != static_cast<double>(acc);
      continue;
    }
    double acc = op == RedOp::kProd ? 1.0 : 0.0, abs_sum = 0;
    for (int r = 0; r < n; ++r) {
      double x = gen.Value(r, i);
      FoldInto(acc, x, op, r == 0);
      abs_sum += std::fabs(x);
    }
    double bound = 0;  // max and min are exact: inputs are representable
    if (op == RedOp::kSum) bound = HalfUlp(t, std::fabs(acc)) + n * acc_eps * abs_sum;
    if (op == RedOp::kAvg) acc /= n, bound = HalfUlp(t, std::fabs(acc)) + acc_eps * abs_sum + acc_eps * std::fabs(acc);
    if (op == RedOp::kProd) bound = HalfUlp(t, std::fabs(acc)) + n * acc_eps * std::fabs(acc);
    if (!(std::fabs(got - acc) <= bound)) ++wrong;  // NaN counts as wrong
  }
  return wrong;
}

uint64_t HashBytes(const void* data, size_t len) {
  const auto* p = static_cast<const unsigned char*>(data);
  uint64_t h = 0x243f6a8885a308d3ull ^ len;
  size_t i = 0;
  for (; i + 8 <= len; i += 8) {
    uint64_t w;
    std::memcpy(&w, p + i, 8);
    h = (h ^ Mix(w)) * 0x9fb21c651e98df25ull;
  }
  uint64_t tail = 0;
  std::memcpy(&tail, p + i, len - i);
  return Mix(h ^ tail);
}

}  // namespace tessera::cli::bench
