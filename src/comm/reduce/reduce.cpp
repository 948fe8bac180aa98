// comm/reduce/reduce: CPU fold/finalize kernels, templated per element type; see reduce.hpp for the rules. The
// 16-bit kernels here are the portable path; the vector ones are in simd.cpp, and the table in use
// is picked at the end of this file.
#include "comm/reduce/reduce.hpp"

#include <atomic>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <type_traits>

#include "comm/reduce/simd.hpp"
#include "common/env.hpp"
#include "common/log.hpp"

namespace tessera::comm {

namespace {

template <typename T>
inline T Apply(T a, T b, RedOp op) {
  if constexpr (std::is_integral_v<T>) {
    using U = std::make_unsigned_t<T>;
    switch (op) {
      case RedOp::kSum:
      case RedOp::kAvg:
        return static_cast<T>(static_cast<U>(a) + static_cast<U>(b));
      case RedOp::kProd:
        return static_cast<T>(static_cast<U>(static_cast<U>(a) * static_cast<U>(b)));
      case RedOp::kMax:
        return a > b ? a : b;
      case RedOp::kMin:
        return a < b ? a : b;
      default:
        return a;
    }
  } else {
    // NaN-propagating like NCCL's fmax? NCCL uses fmaxf semantics on most paths; we propagate NaN so
    // a bad gradient is never hidden.
    return detail::ApplyFloat(a, b, op);
  }
}

template <typename T>
void FoldT(T* __restrict acc, const T* __restrict src, size_t n, RedOp op, bool first) {
  if (first) {
    std::memcpy(acc, src, n * sizeof(T));
    return;
  }
  switch (op) {  // hoist the switch so the loops vectorise
    case RedOp::kSum:
    case RedOp::kAvg:
      if constexpr (std::is_integral_v<T>) {
        using U = std::make_unsigned_t<T>;
        for (size_t i = 0; i < n; ++i) acc[i] = static_cast<T>(static_cast<U>(acc[i]) + static_cast<U>(src[i]));
      } else {
        for (size_t i = 0; i < n; ++i) acc[i] += src[i];
      }
      return;
    default:
      for (size_t i = 0; i < n; ++i) acc[i] = Apply(acc[i], src[i], op);
  }
}

template <float (*ToF32)(uint16_t)>
void FoldHalf(float* __restrict acc, const uint16_t* __restrict src, size_t n, RedOp op, bool first) {
  if (first) {
    for (size_t i = 0; i < n; ++i) acc[i] = ToF32(src[i]);
  } else if (op == RedOp::kSum || op == RedOp::kAvg) {
    for (size_t i = 0; i < n; ++i) acc[i] = detail::NanFirst(acc[i], acc[i] + ToF32(src[i]));
  } else {
    for (size_t i = 0; i < n; ++i) acc[i] = detail::HalfApply(acc[i], ToF32(src[i]), op);
  }
}

template <typename T>
void Fold2T(T* acc, const T* a, const T* b, size_t n, RedOp op) {
  if (op == RedOp::kSum || op == RedOp::kAvg) {
    if constexpr (std::is_integral_v<T>) {
      using U = std::make_unsigned_t<T>;
      for (size_t i = 0; i < n; ++i) acc[i] = static_cast<T>(static_cast<U>(a[i]) + static_cast<U>(b[i]));
    } else {
      for (size_t i = 0; i < n; ++i) acc[i] = a[i] + b[i];
    }
  } else {
    for (size_t i = 0; i < n; ++i) acc[i] = Apply(a[i], b[i], op);
  }
}

// 16-bit element types: each operand is the element type or f32 (a partial from a multi-rank island).
template <float (*ToF32)(uint16_t), typename A, typename B>
void Fold2Half(float* acc, const A* a, const B* b, size_t n, RedOp op) {
  auto wa = [](A v) {
    if constexpr (sizeof(A) == 2)
      return ToF32(v);
    else
      return v;
  };
  auto wb = [](B v) {
    if constexpr (sizeof(B) == 2)
      return ToF32(v);
    else
      return v;
  };
  if (op == RedOp::kSum || op == RedOp::kAvg) {
    for (size_t i = 0; i < n; ++i) {
      float x = wa(a[i]);
      acc[i] = detail::NanFirst(x, x + wb(b[i]));
    }
  } else {
    for (size_t i = 0; i < n; ++i) acc[i] = detail::HalfApply(wa(a[i]), wb(b[i]), op);
  }
}

template <float (*ToF32)(uint16_t)>
void Fold2HalfAny(float* acc, const void* a, bool a32, const void* b, bool b32, size_t n, RedOp op) {
  using H = uint16_t;
  if (a32 && b32)
    Fold2Half<ToF32>(acc, static_cast<const float*>(a), static_cast<const float*>(b), n, op);
  else if (a32)
    Fold2Half<ToF32>(acc, static_cast<const float*>(a), static_cast<const H*>(b), n, op);
  else if (b32)
    Fold2Half<ToF32>(acc, static_cast<const H*>(a), static_cast<const float*>(b), n, op);
  else
    Fold2Half<ToF32>(acc, static_cast<const H*>(a), static_cast<const H*>(b), n, op);
}

template <typename T>
void FinalizeT(T* out, const T* acc, size_t n, RedOp op, int divisor) {
  if (op != RedOp::kAvg) {
    if (out != acc) std::memcpy(out, acc, n * sizeof(T));
    return;
  }
  for (size_t i = 0; i < n; ++i) out[i] = static_cast<T>(acc[i] / static_cast<T>(divisor));
}

template <uint16_t (*FromF32)(float)>
void FinalizeHalf(uint16_t* out, const float* acc, size_t n, RedOp op, int divisor) {
  if (op == RedOp::kAvg) {
    float d = static_cast<float>(divisor);
    for (size_t i = 0; i < n; ++i) out[i] = FromF32(acc[i] / d);
  } else {
    for (size_t i = 0; i < n; ++i) out[i] = FromF32(acc[i]);
  }
}

// Fold2 then Finalize through an f32 block on the stack (stays in L1): the same kernels, so the same bits.
template <float (*ToF32)(uint16_t), uint16_t (*FromF32)(float)>
void Fold2FinalizeHalf(uint16_t* out, const void* a, bool a32, const void* b, bool b32, size_t n, RedOp op,
                       int divisor) {
  constexpr size_t kBlock = 2048;
  alignas(64) float acc[kBlock];
  auto* x = static_cast<const std::byte*>(a);
  auto* y = static_cast<const std::byte*>(b);
  const size_t asz = a32 ? 4 : 2, bsz = b32 ? 4 : 2;
  for (size_t i = 0; i < n; i += kBlock) {
    size_t m = n - i < kBlock ? n - i : kBlock;
    Fold2HalfAny<ToF32>(acc, x + i * asz, a32, y + i * bsz, b32, m, op);
    FinalizeHalf<FromF32>(out + i, acc, m, op, divisor);
  }
}
}  // namespace

namespace detail {
const FoldKernels kPortableKernels = {
    "portable",
    {FoldHalf<F16ToF32>, Fold2HalfAny<F16ToF32>, FinalizeHalf<F32ToF16>, Fold2FinalizeHalf<F16ToF32, F32ToF16>},
    {FoldHalf<Bf16ToF32>, Fold2HalfAny<Bf16ToF32>, FinalizeHalf<F32ToBf16>, Fold2FinalizeHalf<Bf16ToF32, F32ToBf16>}};
}  // namespace detail

namespace {
using detail::FoldKernels;

std::atomic<const FoldKernels*> g_kernels{nullptr};
std::atomic<int> g_path{static_cast<int>(FoldPath::kPortable)};
std::mutex g_select_mu;

const FoldKernels* KernelsOf(FoldPath p) {
  switch (p) {
    case FoldPath::kAvx2:
      return detail::kAvx2Kernels;
    case FoldPath::kAvx512:
      return detail::kAvx512Kernels;
    default:
      return &detail::kPortableKernels;
  }
}

// The best supported path at or below `p`.
FoldPath Clamp(FoldPath p) {
  int i = static_cast<int>(p);
  if (i < 0 || i >= static_cast<int>(FoldPath::kCount)) i = static_cast<int>(FoldPath::kCount) - 1;
  while (i > 0 && !FoldPathSupported(static_cast<FoldPath>(i))) --i;
  return static_cast<FoldPath>(i);
}

FoldPath Install(FoldPath p) {
  g_path.store(static_cast<int>(p), std::memory_order_relaxed);
  g_kernels.store(KernelsOf(p), std::memory_order_release);
  return p;
}

FoldPath SelectLocked() {
  FoldPath want = FoldPath::kCount;  // auto: the best there is
  auto choice = env::Choice("TESSERA_CPU_FOLDS", {"auto", "portable", "avx2", "avx512"});
  if (!choice.ok()) {
    TSR_LOG_WARN("{}; using auto", choice.status().ToString());
  } else if (*choice != "auto") {
    for (int i = 0; i < static_cast<int>(FoldPath::kCount); ++i)
      if (*choice == FoldPathName(static_cast<FoldPath>(i))) want = static_cast<FoldPath>(i);
  }
  FoldPath got = Clamp(want);
  if (want != FoldPath::kCount && got != want)
    TSR_LOG_WARN("TESSERA_CPU_FOLDS='{}': this CPU or build lacks it; 16-bit folds use '{}'", FoldPathName(want),
                 FoldPathName(got));
  TSR_LOG_DEBUG("16-bit folds: {}", FoldPathName(got));
  return Install(got);
}

const FoldKernels& Kernels() {
  const FoldKernels* k = g_kernels.load(std::memory_order_acquire);
  if (k != nullptr) return *k;
  std::lock_guard<std::mutex> lock(g_select_mu);
  k = g_kernels.load(std::memory_order_acquire);
  if (k == nullptr) k = KernelsOf(SelectLocked());
  return *k;
}

const detail::HalfKernels& HalfOf(DType t) { return t == DType::kFloat16 ? Kernels().f16 : Kernels().bf16; }
}  // namespace

const char* FoldPathName(FoldPath p) {
  switch (p) {
    case FoldPath::kPortable:
      return "portable";
    case FoldPath::kAvx2:
      return "avx2";
    case FoldPath::kAvx512:
      return "avx512";
    default:
      return "invalid";
  }
}

bool FoldPathSupported(FoldPath p) {
  switch (p) {
    case FoldPath::kPortable:
      return true;
    case FoldPath::kAvx2:
      return detail::kAvx2Kernels != nullptr && detail::CpuHasAvx2F16c();
    case FoldPath::kAvx512:
      return detail::kAvx512Kernels != nullptr && detail::CpuHasAvx512();
    default:
      return false;
  }
}

FoldPath ActiveFoldPath() {
  Kernels();
  return static_cast<FoldPath>(g_path.load(std::memory_order_relaxed));
}

FoldPath SelectFoldPathFromEnv() {
  std::lock_guard<std::mutex> lock(g_select_mu);
  return SelectLocked();
}

FoldPath SetFoldPath(FoldPath p) {
  std::lock_guard<std::mutex> lock(g_select_mu);
  return Install(Clamp(p));
}

void Fold(void* acc, const void* src, size_t n, DType dtype, DType src_type, RedOp op, bool first) {
  if (n == 0) return;
  if (IsHalf(dtype) && src_type != DType::kFloat32) {
    HalfOf(dtype).fold(static_cast<float*>(acc), static_cast<const uint16_t*>(src), n, op, first);
    return;
  }
  switch (AccumType(dtype)) {
    case DType::kInt8:
      FoldT(static_cast<int8_t*>(acc), static_cast<const int8_t*>(src), n, op, first);
      break;
    case DType::kUint8:
      FoldT(static_cast<uint8_t*>(acc), static_cast<const uint8_t*>(src), n, op, first);
      break;
    case DType::kInt32:
      FoldT(static_cast<int32_t*>(acc), static_cast<const int32_t*>(src), n, op, first);
      break;
    case DType::kInt64:
      FoldT(static_cast<int64_t*>(acc), static_cast<const int64_t*>(src), n, op, first);
      break;
    case DType::kFloat32:
      FoldT(static_cast<float*>(acc), static_cast<const float*>(src), n, op, first);
      break;
    case DType::kFloat64:
      FoldT(static_cast<double*>(acc), static_cast<const double*>(src), n, op, first);
      break;
    default:
      break;
  }
}

void Fold2(void* acc, const void* a, DType a_type, const void* b, DType b_type, size_t n, DType dtype, RedOp op) {
  if (n == 0) return;
  if (IsHalf(dtype)) {
    bool a32 = a_type == DType::kFloat32, b32 = b_type == DType::kFloat32;
    HalfOf(dtype).fold2(static_cast<float*>(acc), a, a32, b, b32, n, op);
    return;
  }
  switch (dtype) {
#define TSR_FOLD2(D, T)                                                                      \
  case D:                                                                                    \
    Fold2T(static_cast<T*>(acc), static_cast<const T*>(a), static_cast<const T*>(b), n, op); \
    break;
    TSR_FOLD2(DType::kInt8, int8_t)
    TSR_FOLD2(DType::kUint8, uint8_t)
    TSR_FOLD2(DType::kInt32, int32_t)
    TSR_FOLD2(DType::kInt64, int64_t)
    TSR_FOLD2(DType::kFloat32, float)
    TSR_FOLD2(DType::kFloat64, double)
#undef TSR_FOLD2
    default:
      break;
  }
}

void Finalize(void* out, const void* acc, size_t n, DType dtype, RedOp op, int divisor) {
  if (n == 0) return;
  switch (dtype) {
    case DType::kFloat16:
    case DType::kBfloat16:
      HalfOf(dtype).finalize(static_cast<uint16_t*>(out), static_cast<const float*>(acc), n, op, divisor);
      break;
    case DType::kInt8:
      FinalizeT(static_cast<int8_t*>(out), static_cast<const int8_t*>(acc), n, op, divisor);
      break;
    case DType::kUint8:
      FinalizeT(static_cast<uint8_t*>(out), static_cast<const uint8_t*>(acc), n, op, divisor);
      break;
    case DType::kInt32:
      FinalizeT(static_cast<int32_t*>(out), static_cast<const int32_t*>(acc), n, op, divisor);
      break;
    case DType::kInt64:
      FinalizeT(static_cast<int64_t*>(out), static_cast<const int64_t*>(acc), n, op, divisor);
      break;
    case DType::kFloat32:
      FinalizeT(static_cast<float*>(out), static_cast<const float*>(acc), n, op, divisor);
      break;
    case DType::kFloat64:
      FinalizeT(static_cast<double*>(out), static_cast<const double*>(acc), n, op, divisor);
      break;
    default:
      break;
  }
}

void Fold2Finalize(void* out, const void* a, DType a_type, const void* b, DType b_type, size_t n, DType dtype, RedOp op,
                   int divisor) {
  if (n == 0) return;
  if (IsHalf(dtype)) {
    HalfOf(dtype).fold2_finalize(static_cast<uint16_t*>(out), a, a_type == DType::kFloat32, b,
                                 b_type == DType::kFloat32, n, op, divisor);
    return;
  }
  constexpr size_t kBlock = 2048;  // 8 KiB of f32 (16 KiB of f64)
  alignas(64) std::byte acc[kBlock * 8];
  const size_t asz = DTypeSize(a_type), bsz = DTypeSize(b_type), esz = DTypeSize(dtype);
  auto* o = static_cast<std::byte*>(out);
  auto* x = static_cast<const std::byte*>(a);
  auto* y = static_cast<const std::byte*>(b);
  for (size_t i = 0; i < n; i += kBlock) {
    size_t m = n - i < kBlock ? n - i : kBlock;
    Fold2(acc, x + i * asz, a_type, y + i * bsz, b_type, m, dtype, op);
    Finalize(o + i * esz, acc, m, dtype, op, divisor);
  }
}

void Convert(void* out, DType dst_type, const void* src, DType src_type, size_t n) {
  if (dst_type == src_type) {
    if (out != src) std::memmove(out, src, n * DTypeSize(dst_type));
    return;
  }
  if (dst_type == DType::kFloat32) {  // half -> f32
    Fold(out, src, n, src_type, src_type, RedOp::kSum, true);
  } else {  // f32 -> half
    Finalize(out, src, n, dst_type, RedOp::kSum, 1);
  }
}

}  // namespace tessera::comm
