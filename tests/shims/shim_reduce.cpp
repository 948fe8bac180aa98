// tests/shims/shim_reduce: the element-wise folds of the host collective engine (shim_coll). 16-bit floats are
// reduced as the vendors' libraries reduce them, in their own type at every hop: the ranks in ring order from
// `first` (first, first+1, ..., n-1, 0, ..., first-1), each step computed in f32 and rounded to the 16-bit type
// (round to nearest even, common/dtype.hpp's conversions) -- what NCCL's ring kernels do with __hadd2 (an f32
// add of two 16-bit values rounded once is the correctly rounded 16-bit add: f32 has more than 2p+2 bits) and
// what HCCL's public kernels do (native-type accumulation); avg is NCCL's PreMulSum: each input times 1/n
// rounded to the type, then a sum. f32 folds in f32 and f64 in f64, in rank order; integers wrap (two's
// complement) and avg divides the sum, truncating, as integer division does.
#include <cstring>
#include <type_traits>

#include "common/dtype.hpp"
#include "shim_coll.hpp"

namespace tshim::coll {

namespace {

template <typename T>
T Load(const char* p, size_t i) {
  T v;
  std::memcpy(&v, p + i * sizeof(T), sizeof(T));
  return v;
}
template <typename T>
void Store(char* p, size_t i, T v) {
  std::memcpy(p + i * sizeof(T), &v, sizeof(T));
}

template <typename T>
T IntApply(Op op, T a, T b) {
  using U = std::make_unsigned_t<T>;
  using W = std::conditional_t<(sizeof(T) < 8), uint64_t, U>;  // no int promotion overflow in products
  switch (op) {
    case Op::kSum:
    case Op::kAvg:
      return static_cast<T>(static_cast<W>(static_cast<U>(a)) + static_cast<W>(static_cast<U>(b)));
    case Op::kProd:
      return static_cast<T>(static_cast<W>(static_cast<U>(a)) * static_cast<W>(static_cast<U>(b)));
    case Op::kMax:
      return a > b ? a : b;
    case Op::kMin:
      return a < b ? a : b;
  }
  return a;
}

template <typename A>
A FloatApply(Op op, A a, A b) {
  switch (op) {
    case Op::kSum:
    case Op::kAvg:
      return a + b;
    case Op::kProd:
      return a * b;
    case Op::kMax:
      return a > b ? a : b;
    case Op::kMin:
      return a < b ? a : b;
  }
  return a;
}

template <typename T>
void FoldInt(Op op, const char* const* src, int n, char* out, size_t count) {
  for (size_t i = 0; i < count; ++i) {
    T acc = Load<T>(src[0], i);
    for (int q = 1; q < n; ++q) acc = IntApply<T>(op, acc, Load<T>(src[q], i));
    if (op == Op::kAvg) acc = static_cast<T>(acc / static_cast<T>(n));
    Store<T>(out, i, acc);
  }
}

template <typename T>
void FoldFloat(Op op, const char* const* src, int n, char* out, size_t count) {
  for (size_t i = 0; i < count; ++i) {
    T acc = Load<T>(src[0], i);
    for (int q = 1; q < n; ++q) acc = FloatApply<T>(op, acc, Load<T>(src[q], i));
    if (op == Op::kAvg) acc = acc / static_cast<T>(n);
    Store<T>(out, i, acc);
  }
}

template <float (*ToF32)(uint16_t), uint16_t (*FromF32)(float)>
void FoldHalf(Op op, const char* const* src, int n, int first, char* out, size_t count) {
  // NCCL (src/enqueue.cc, hostToDevRedOp): ncclAvg of a 16-bit float is ncclDevPreMulSum with the scalar
  // __float2bfloat16 / __float2half(float(1.0 / nRanks)).
  const float scale = ToF32(FromF32(static_cast<float>(1.0 / n)));
  auto in = [&](int q, size_t i) {
    const float v = ToF32(Load<uint16_t>(src[q], i));
    return op == Op::kAvg ? ToF32(FromF32(v * scale)) : v;
  };
  const Op step = op == Op::kAvg ? Op::kSum : op;
  for (size_t i = 0; i < count; ++i) {
    float acc = in(first, i);
    for (int k = 1; k < n; ++k) acc = ToF32(FromF32(FloatApply<float>(step, acc, in((first + k) % n, i))));
    Store<uint16_t>(out, i, FromF32(acc));
  }
}

}  // namespace

void Fold(DType t, Op op, const char* const* src, int n, int first, char* out, size_t count) {
  switch (t) {
    case DType::kI8:
      return FoldInt<int8_t>(op, src, n, out, count);
    case DType::kU8:
      return FoldInt<uint8_t>(op, src, n, out, count);
    case DType::kI16:
      return FoldInt<int16_t>(op, src, n, out, count);
    case DType::kU16:
      return FoldInt<uint16_t>(op, src, n, out, count);
    case DType::kI32:
      return FoldInt<int32_t>(op, src, n, out, count);
    case DType::kU32:
      return FoldInt<uint32_t>(op, src, n, out, count);
    case DType::kI64:
      return FoldInt<int64_t>(op, src, n, out, count);
    case DType::kU64:
      return FoldInt<uint64_t>(op, src, n, out, count);
    case DType::kF16:
      return FoldHalf<tessera::F16ToF32, tessera::F32ToF16>(op, src, n, first, out, count);
    case DType::kBF16:
      return FoldHalf<tessera::Bf16ToF32, tessera::F32ToBf16>(op, src, n, first, out, count);
    case DType::kF32:
      return FoldFloat<float>(op, src, n, out, count);
    case DType::kF64:
      return FoldFloat<double>(op, src, n, out, count);
  }
}

size_t Size(DType t) {
  switch (t) {
    case DType::kI8:
    case DType::kU8:
      return 1;
    case DType::kI16:
    case DType::kU16:
    case DType::kF16:
    case DType::kBF16:
      return 2;
    case DType::kI32:
    case DType::kU32:
    case DType::kF32:
      return 4;
    case DType::kI64:
    case DType::kU64:
    case DType::kF64:
      return 8;
  }
  return 1;
}

const char* Name(DType t) {
  static const char* const kNames[] = {"int8",  "uint8",  "int16",   "uint16",   "int32",   "uint32",
                                       "int64", "uint64", "float16", "bfloat16", "float32", "float64"};
  return kNames[static_cast<int>(t)];
}

const char* Name(Op op) {
  static const char* const kNames[] = {"sum", "prod", "max", "min", "avg"};
  return kNames[static_cast<int>(op)];
}

}  // namespace tshim::coll
