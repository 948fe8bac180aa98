// tests/shims/shim_test_ref: test data and reference results for the collective tests of shim_test: one input
// per (type, op, rank, element), and what a reduction must give -- 16-bit floats as a vendor's ring reduces them
// (in their own type, rounded after every hop, from the rank after the one that finalises the element round the
// ring; avg as NCCL's pre-multiplied sum), f32 and f64 in rank order in their type, integers wrapping as their
// type does, integer avg = sum / n truncated.
#pragma once

#include <cstdint>
#include <cstring>
#include <vector>

#include "common/dtype.hpp"

namespace shimtest {

enum class T { i8, u8, i16, u16, i32, u32, i64, u64, f16, bf16, f32, f64 };
enum class R { sum, prod, max, min, avg };

inline size_t Size(T t) {
  switch (t) {
    case T::i8:
    case T::u8:
      return 1;
    case T::i16:
    case T::u16:
    case T::f16:
    case T::bf16:
      return 2;
    case T::i32:
    case T::u32:
    case T::f32:
      return 4;
    default:
      return 8;
  }
}
inline bool IsFloat(T t) { return t == T::f16 || t == T::bf16 || t == T::f32 || t == T::f64; }
inline bool IsUnsigned(T t) { return t == T::u8 || t == T::u16 || t == T::u32 || t == T::u64; }

// Stores v (an integer for integer types; rounded to nearest even for 16-bit floats).
inline void Put(T t, void* buf, size_t i, double v) {
  char* p = static_cast<char*>(buf) + i * Size(t);
  auto put = [p](auto x) { std::memcpy(p, &x, sizeof x); };
  switch (t) {
    case T::i8:
      return put(static_cast<int8_t>(static_cast<int64_t>(v)));
    case T::u8:
      return put(static_cast<uint8_t>(static_cast<int64_t>(v)));
    case T::i16:
      return put(static_cast<int16_t>(static_cast<int64_t>(v)));
    case T::u16:
      return put(static_cast<uint16_t>(static_cast<int64_t>(v)));
    case T::i32:
      return put(static_cast<int32_t>(static_cast<int64_t>(v)));
    case T::u32:
      return put(static_cast<uint32_t>(static_cast<int64_t>(v)));
    case T::i64:
      return put(static_cast<int64_t>(v));
    case T::u64:
      return put(static_cast<uint64_t>(static_cast<int64_t>(v)));
    case T::f16:
      return put(tessera::F32ToF16(static_cast<float>(v)));
    case T::bf16:
      return put(tessera::F32ToBf16(static_cast<float>(v)));
    case T::f32:
      return put(static_cast<float>(v));
    case T::f64:
      return put(v);
  }
}
inline double Get(T t, const void* buf, size_t i) {
  const char* p = static_cast<const char*>(buf) + i * Size(t);
  auto get = [p](auto x) {
    std::memcpy(&x, p, sizeof x);
    return x;
  };
  switch (t) {
    case T::i8:
      return get(int8_t{});
    case T::u8:
      return get(uint8_t{});
    case T::i16:
      return get(int16_t{});
    case T::u16:
      return get(uint16_t{});
    case T::i32:
      return get(int32_t{});
    case T::u32:
      return get(uint32_t{});
    case T::i64:
      return static_cast<double>(get(int64_t{}));
    case T::u64:
      return static_cast<double>(get(uint64_t{}));
    case T::f16:
      return tessera::F16ToF32(get(uint16_t{}));
    case T::bf16:
      return tessera::Bf16ToF32(get(uint16_t{}));
    case T::f32:
      return get(float{});
    case T::f64:
      return get(double{});
  }
  return 0;
}

// Rank `rank`'s element i for a reduction `op`: small integers for integer types (no overflow on 4 ranks),
// values that are not exactly representable for floats (so rounding is exercised).
inline double Input(T t, R op, int rank, size_t i) {
  const long k = static_cast<long>((rank * 7 + static_cast<long>(i) * 3) % 11);
  if (op == R::prod) {
    const long m = (rank + static_cast<long>(i)) % 5;
    if (!IsFloat(t))
      return IsUnsigned(t) ? static_cast<double>(m % 3 + 1) : static_cast<double>(m - 2 == 0 ? 1 : m - 2);
    return 1.0 + static_cast<double>(m) * 0.13 - (m == 4 ? 2.3 : 0.0);
  }
  if (!IsFloat(t)) return IsUnsigned(t) ? static_cast<double>(k) : static_cast<double>(k - 5);
  return static_cast<double>(k - 5) * 0.37 + rank * 0.011 + static_cast<double>(i % 13) * 1e-3;
}

inline std::vector<char> Inputs(T t, R op, int rank, size_t count) {
  std::vector<char> v(count * Size(t));
  for (size_t i = 0; i < count; ++i) Put(t, v.data(), i, Input(t, op, rank, i));
  return v;
}

// The ring order of a 16-bit reduction: element i of a reduce-scatter block r is finalised by rank r; an allreduce
// of `count` splits into n parts of ceil(count / n) elements, part p finalised by rank p. The ring starts at the
// rank after the finaliser and ends with it (NCCL's ring: chunk ringIx is reduced last on rank ringIx).
inline int AllReduceOwner(size_t i, size_t count, int n) {
  return static_cast<int>(i / ((count + static_cast<size_t>(n) - 1) / static_cast<size_t>(n)));
}

// How a 16-bit reduction of element i over ranks [0, n) is folded.
enum class Fold16 {
  ring_per_hop,     // the vendor libraries: ring order from owner + 1, rounded to 16 bits at every step
  rank_order_once,  // Tessera's own rule: rank order in f32, rounded once (for tests that show the difference)
};

// The reduction of element i over ranks [0, n), from the stored inputs; `owner` finalises it (see above).
inline void Expect(T t, R op, int n, size_t i, int owner, void* out, size_t oi, Fold16 how = Fold16::ring_per_hop) {
  auto apply = [op](auto a, auto b) {
    switch (op) {
      case R::prod:
        return a * b;
      case R::max:
        return a > b ? a : b;
      case R::min:
        return a < b ? a : b;
      default:
        return a + b;
    }
  };
  std::vector<char> one(Size(t));
  auto stored = [&](int r) {
    Put(t, one.data(), 0, Input(t, op, r, i));
    return Get(t, one.data(), 0);
  };
  auto round = [&](float v) {  // to the 16-bit type and back
    Put(t, one.data(), 0, v);
    return static_cast<float>(Get(t, one.data(), 0));
  };
  if ((t == T::f16 || t == T::bf16) && how == Fold16::ring_per_hop) {
    const float scale = round(static_cast<float>(1.0 / n));  // NCCL's avg: PreMulSum by 1/n in the type
    auto in = [&](int r) {
      const float v = static_cast<float>(stored(r));
      return op == R::avg ? round(v * scale) : v;
    };
    const int first = (owner + 1) % n;
    float acc = in(first);
    for (int k = 1; k < n; ++k) acc = round(op == R::avg ? acc + in((first + k) % n) : apply(acc, in((first + k) % n)));
    return Put(t, out, oi, acc);
  }
  if (t == T::f16 || t == T::bf16 || t == T::f32) {  // f32 accumulation in rank order, one rounding
    float acc = static_cast<float>(stored(0));
    for (int r = 1; r < n; ++r) acc = apply(acc, static_cast<float>(stored(r)));
    if (op == R::avg) acc = acc / static_cast<float>(n);
    return Put(t, out, oi, acc);
  }
  if (t == T::f64) {
    double acc = stored(0);
    for (int r = 1; r < n; ++r) acc = apply(acc, stored(r));
    if (op == R::avg) acc = acc / n;
    return Put(t, out, oi, acc);
  }
  int64_t acc = static_cast<int64_t>(stored(0));  // the inputs are small: no wrap-around to model
  for (int r = 1; r < n; ++r) acc = apply(acc, static_cast<int64_t>(stored(r)));
  if (op == R::avg) acc = acc / n;
  Put(t, out, oi, static_cast<double>(acc));
}

// What an allreduce of `count` elements gives.
inline std::vector<char> Expected(T t, R op, int n, size_t count, Fold16 how = Fold16::ring_per_hop) {
  std::vector<char> v(count * Size(t));
  for (size_t i = 0; i < count; ++i) Expect(t, op, n, i, AllReduceOwner(i, count, n), v.data(), i, how);
  return v;
}

// What a reduce-scatter of `recvcount` per rank gives, all n blocks (rank r receives block r).
inline std::vector<char> ExpectedReduceScatter(T t, R op, int n, size_t recvcount) {
  std::vector<char> v(static_cast<size_t>(n) * recvcount * Size(t));
  for (size_t i = 0; i < v.size() / Size(t); ++i) Expect(t, op, n, i, static_cast<int>(i / recvcount), v.data(), i);
  return v;
}

// The first element where a and b differ, or -1.
inline long FirstDiff(T t, const std::vector<char>& a, const std::vector<char>& b) {
  for (size_t i = 0; i * Size(t) < a.size() && i * Size(t) < b.size(); ++i)
    if (std::memcmp(a.data() + i * Size(t), b.data() + i * Size(t), Size(t)) != 0) return static_cast<long>(i);
  return a.size() == b.size() ? -1 : 0;
}

}  // namespace shimtest
