// comm/reduce/simd: vector f16/bf16 fold/finalize kernels (AVX2+F16C and AVX-512), picked at run time by
// comm/reduce; see simd.hpp. Each function carries its own target attribute (no -m flags), so the
// library runs on any x86-64 and calls these only where the CPU has the instructions.
//
// Same bits as the portable path (common/dtype's scalar conversions; simd.hpp's NanFirst for a sum
// or product of two NaNs), which the instructions alone do not give in three places, each fixed here:
//   - f16 -> f32: VCVTPH2PS quiets a signalling NaN (0x7c01 -> 0x7fc02000); the portable conversion keeps
//     the payload as is (0x7f802000). NaN lanes are rebuilt from the bits.
//   - f32 -> f16: VCVTPS2PH (imm 0: round to nearest even, MXCSR not consulted) keeps a NaN's payload;
//     the portable conversion gives sign | 0x7e00. NaN lanes are replaced. Finite values, denormals and
//     overflow to infinity match IEEE rounding, which the portable code implements.
//   - f32 -> bf16: VCVTNEPS2BF16 (AVX512_BF16) flushes f32 denormals to zero (0x00400000 -> 0x0000, the
//     portable code gives 0x0040), so it is not used: the rounding is the portable code's integer
//     arithmetic (u + 0x7fff + lsb, NaN -> (u >> 16) | 0x40) on 16 or 8 lanes.
#include "comm/reduce/simd.hpp"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define TSR_HAVE_X86_SIMD 1
#include <immintrin.h>
#if defined(__GNUC__) && !defined(__clang__)
// GCC 12's AVX-512 intrinsics start from _mm512_undefined_epi32(), written `__m512i __Y = __Y;`, which
// -Wmaybe-uninitialized reports (a false positive) wherever they are inlined.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#endif

namespace tessera::comm::detail {

#if TSR_HAVE_X86_SIMD

namespace avx2 {
#define TSR_SIMD __attribute__((target("avx2,f16c"), always_inline)) inline
#define TSR_SIMD_FN __attribute__((target("avx2,f16c")))

struct V {
  using F = __m256;
  static constexpr size_t kLanes = 8;
  static TSR_SIMD __m256i I(int32_t v) { return _mm256_set1_epi32(v); }
  static TSR_SIMD F Load(const float* p) { return _mm256_loadu_ps(p); }
  static TSR_SIMD void Store(float* p, F v) { _mm256_storeu_ps(p, v); }
  static TSR_SIMD F Set1(float f) { return _mm256_set1_ps(f); }
  static TSR_SIMD F Add(F a, F b) { return _mm256_add_ps(a, b); }
  static TSR_SIMD F Mul(F a, F b) { return _mm256_mul_ps(a, b); }
  static TSR_SIMD F Div(F a, F b) { return _mm256_div_ps(a, b); }
  static TSR_SIMD F NanFirst(F a, F r) {
    F q = _mm256_or_ps(a, _mm256_castsi256_ps(I(0x00400000)));
    return _mm256_blendv_ps(r, q, _mm256_cmp_ps(a, a, _CMP_UNORD_Q));
  }
  // (a != a || a > b) ? a : b, and the same with <.
  static TSR_SIMD F Max(F a, F b) {
    return _mm256_blendv_ps(b, a, _mm256_or_ps(_mm256_cmp_ps(a, a, _CMP_UNORD_Q), _mm256_cmp_ps(a, b, _CMP_GT_OQ)));
  }
  static TSR_SIMD F Min(F a, F b) {
    return _mm256_blendv_ps(b, a, _mm256_or_ps(_mm256_cmp_ps(a, a, _CMP_UNORD_Q), _mm256_cmp_ps(a, b, _CMP_LT_OQ)));
  }
  static TSR_SIMD __m128i Load8(const uint16_t* p) { return _mm_loadu_si128(reinterpret_cast<const __m128i*>(p)); }
  // Eight 32-bit lanes, each <= 0xffff, to eight 16-bit values.
  static TSR_SIMD void Store8(uint16_t* p, __m256i r) {
    __m128i h = _mm_packus_epi32(_mm256_castsi256_si128(r), _mm256_extracti128_si256(r, 1));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(p), h);
  }
  static TSR_SIMD F WidenF16(const uint16_t* p) {
    __m128i h = Load8(p);
    F f = _mm256_cvtph_ps(h);
    __m128i nan16 = _mm_cmpgt_epi16(_mm_and_si128(h, _mm_set1_epi16(0x7fff)), _mm_set1_epi16(0x7c00));
    if (_mm_testz_si128(nan16, nan16)) return f;  // no NaN among the 8: the common case
    __m256i w = _mm256_cvtepu16_epi32(h);
    __m256i nan = _mm256_cvtepi16_epi32(nan16);
    __m256i bits =
        _mm256_or_si256(_mm256_slli_epi32(_mm256_and_si256(w, I(0x8000)), 16),
                        _mm256_or_si256(I(0x7f800000), _mm256_slli_epi32(_mm256_and_si256(w, I(0x3ff)), 13)));
    return _mm256_blendv_ps(f, _mm256_castsi256_ps(bits), _mm256_castsi256_ps(nan));
  }
  static TSR_SIMD F WidenBf16(const uint16_t* p) {
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(Load8(p)), 16));
  }
  static TSR_SIMD void StoreF16(uint16_t* p, F v) {
    __m128i h = _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT);
    F nan = _mm256_cmp_ps(v, v, _CMP_UNORD_Q);
    if (_mm256_movemask_ps(nan) == 0) {  // no NaN among the 8: the common case
      _mm_storeu_si128(reinterpret_cast<__m128i*>(p), h);
      return;
    }
    __m256i q = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi32(_mm256_castps_si256(v), 16), I(0x8000)), I(0x7e00));
    Store8(p, _mm256_blendv_epi8(_mm256_cvtepu16_epi32(h), q, _mm256_castps_si256(nan)));
  }
  static TSR_SIMD void StoreBf16(uint16_t* p, F v) {
    __m256i u = _mm256_castps_si256(v);
    __m256i hi = _mm256_srli_epi32(u, 16);
    __m256i r = _mm256_srli_epi32(_mm256_add_epi32(_mm256_add_epi32(u, I(0x7fff)), _mm256_and_si256(hi, I(1))), 16);
    __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, I(0x7fffffff)), I(0x7f800000));  // both >= 0
    Store8(p, _mm256_blendv_epi8(r, _mm256_or_si256(hi, I(0x40)), nan));
  }
};

#include "comm/reduce/simd_kernels.inc"

const FoldKernels kKernels = {"avx2",
                              {FoldHalf<false>, Fold2Half<false>, FinalizeHalf<false>, Fold2FinalizeHalf<false>},
                              {FoldHalf<true>, Fold2Half<true>, FinalizeHalf<true>, Fold2FinalizeHalf<true>}};
#undef TSR_SIMD
#undef TSR_SIMD_FN
}  // namespace avx2

namespace avx512 {
#define TSR_SIMD __attribute__((target("avx512f,avx512bw,avx512vl"), always_inline)) inline
#define TSR_SIMD_FN __attribute__((target("avx512f,avx512bw,avx512vl")))

struct V {
  using F = __m512;
  static constexpr size_t kLanes = 16;
  static TSR_SIMD __m512i I(int32_t v) { return _mm512_set1_epi32(v); }
  static TSR_SIMD F Load(const float* p) { return _mm512_loadu_ps(p); }
  static TSR_SIMD void Store(float* p, F v) { _mm512_storeu_ps(p, v); }
  static TSR_SIMD F Set1(float f) { return _mm512_set1_ps(f); }
  static TSR_SIMD F Add(F a, F b) { return _mm512_add_ps(a, b); }
  static TSR_SIMD F Mul(F a, F b) { return _mm512_mul_ps(a, b); }
  static TSR_SIMD F Div(F a, F b) { return _mm512_div_ps(a, b); }
  static TSR_SIMD F NanFirst(F a, F r) {
    __m512i q = _mm512_or_si512(_mm512_castps_si512(a), I(0x00400000));
    return _mm512_mask_mov_ps(r, _mm512_cmp_ps_mask(a, a, _CMP_UNORD_Q), _mm512_castsi512_ps(q));
  }
  static TSR_SIMD F Max(F a, F b) {
    return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(a, a, _CMP_UNORD_Q) | _mm512_cmp_ps_mask(a, b, _CMP_GT_OQ), b, a);
  }
  static TSR_SIMD F Min(F a, F b) {
    return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(a, a, _CMP_UNORD_Q) | _mm512_cmp_ps_mask(a, b, _CMP_LT_OQ), b, a);
  }
  static TSR_SIMD __m256i Load16(const uint16_t* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); }
  static TSR_SIMD void Store16(uint16_t* p, __m256i h) { _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), h); }
  static TSR_SIMD F WidenF16(const uint16_t* p) {
    __m256i h = Load16(p);
    F f = _mm512_cvtph_ps(h);
    __mmask16 nan = _mm256_cmpgt_epi16_mask(_mm256_and_si256(h, _mm256_set1_epi16(0x7fff)), _mm256_set1_epi16(0x7c00));
    if (nan == 0) return f;  // no NaN among the 16: the common case
    __m512i w = _mm512_cvtepu16_epi32(h);
    __m512i bits =
        _mm512_or_si512(_mm512_slli_epi32(_mm512_and_si512(w, I(0x8000)), 16),
                        _mm512_or_si512(I(0x7f800000), _mm512_slli_epi32(_mm512_and_si512(w, I(0x3ff)), 13)));
    return _mm512_mask_mov_ps(f, nan, _mm512_castsi512_ps(bits));
  }
  static TSR_SIMD F WidenBf16(const uint16_t* p) {
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(Load16(p)), 16));
  }
  static TSR_SIMD void StoreF16(uint16_t* p, F v) {
    __m256i h = _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __mmask16 nan = _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
    if (nan != 0) {
      __m512i q =
          _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi32(_mm512_castps_si512(v), 16), I(0x8000)), I(0x7e00));
      h = _mm256_mask_blend_epi16(nan, h, _mm512_cvtepi32_epi16(q));
    }
    Store16(p, h);
  }
  static TSR_SIMD void StoreBf16(uint16_t* p, F v) {
    __m512i u = _mm512_castps_si512(v);
    __m512i hi = _mm512_srli_epi32(u, 16);
    __m512i r = _mm512_srli_epi32(_mm512_add_epi32(_mm512_add_epi32(u, I(0x7fff)), _mm512_and_si512(hi, I(1))), 16);
    __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(u, I(0x7fffffff)), I(0x7f800000));
    if (nan != 0) r = _mm512_mask_mov_epi32(r, nan, _mm512_or_si512(hi, I(0x40)));
    Store16(p, _mm512_cvtepi32_epi16(r));
  }
};

#include "comm/reduce/simd_kernels.inc"

const FoldKernels kKernels = {"avx512",
                              {FoldHalf<false>, Fold2Half<false>, FinalizeHalf<false>, Fold2FinalizeHalf<false>},
                              {FoldHalf<true>, Fold2Half<true>, FinalizeHalf<true>, Fold2FinalizeHalf<true>}};
#undef TSR_SIMD
#undef TSR_SIMD_FN
}  // namespace avx512

const FoldKernels* const kAvx2Kernels = &avx2::kKernels;
const FoldKernels* const kAvx512Kernels = &avx512::kKernels;

// __builtin_cpu_supports also checks that the OS saves the registers (XCR0) for AVX and AVX-512.
bool CpuHasAvx2F16c() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("f16c");
}

bool CpuHasAvx512() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl");
}

#else  // not x86-64 with GCC/Clang: the portable kernels only

const FoldKernels* const kAvx2Kernels = nullptr;
const FoldKernels* const kAvx512Kernels = nullptr;
bool CpuHasAvx2F16c() { return false; }
bool CpuHasAvx512() { return false; }

#endif

}  // namespace tessera::comm::detail
