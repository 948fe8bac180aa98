// The 16-bit folds' vector paths (comm/reduce/simd) against the portable path, bit for bit: every f16 and
// bf16 value widened, f32 values around every 16-bit value (and NaN payloads, denormals, overflow) narrowed,
// and randomized Fold/Fold2/Finalize sequences over every RedOp, odd lengths and unaligned offsets. Both
// paths run in this process: TESSERA_CPU_FOLDS=portable (read by SelectFoldPathFromEnv) or SetFoldPath.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <random>
#include <vector>

#include "comm/reduce/reduce.hpp"
#include "common/dtype.hpp"

namespace tessera::comm {
namespace {

using Bytes = std::vector<uint8_t>;

std::vector<FoldPath> VectorPaths() {
  std::vector<FoldPath> v;
  for (FoldPath p : {FoldPath::kAvx2, FoldPath::kAvx512})
    if (FoldPathSupported(p)) v.push_back(p);
  return v;
}

// Restores the environment's choice after each test.
class FoldPaths : public ::testing::Test {
 protected:
  void SetUp() override {
    paths_ = VectorPaths();
    if (paths_.empty()) GTEST_SKIP() << "this CPU has neither AVX2+F16C nor AVX-512: only the portable path exists";
  }
  void TearDown() override { SelectFoldPathFromEnv(); }
  // Runs `f` on `path` and returns what it wrote.
  static Bytes On(FoldPath path, const std::function<Bytes()>& f) {
    EXPECT_EQ(SetFoldPath(path), path);
    return f();
  }
  std::vector<FoldPath> paths_;
};

// The first index where two buffers differ, as a message naming both values.
std::string FirstDiff(const Bytes& a, const Bytes& b, size_t esz) {
  if (a.size() != b.size()) return "sizes differ";
  for (size_t i = 0; i < a.size(); i += esz) {
    if (std::memcmp(&a[i], &b[i], esz) != 0) {
      uint32_t x = 0, y = 0;
      std::memcpy(&x, &a[i], esz);
      std::memcpy(&y, &b[i], esz);
      char buf[96];
      std::snprintf(buf, sizeof buf, "element %zu: portable 0x%x, vector 0x%x", i / esz, x, y);
      return buf;
    }
  }
  return "";
}

TEST(FoldPathSelection, EnvOverrideForcesPortable) {
  const char* old = getenv("TESSERA_CPU_FOLDS");
  std::string saved = old ? old : "";
  setenv("TESSERA_CPU_FOLDS", "portable", 1);
  EXPECT_EQ(SelectFoldPathFromEnv(), FoldPath::kPortable);
  EXPECT_EQ(ActiveFoldPath(), FoldPath::kPortable);
  FoldPath best = FoldPath::kPortable;
  for (FoldPath p : VectorPaths()) best = p;
  setenv("TESSERA_CPU_FOLDS", "auto", 1);
  EXPECT_EQ(SelectFoldPathFromEnv(), best);
  setenv("TESSERA_CPU_FOLDS", "avx9000", 1);  // a bad value: warning, auto
  EXPECT_EQ(SelectFoldPathFromEnv(), best);
  setenv("TESSERA_CPU_FOLDS", "avx2", 1);
  EXPECT_EQ(SelectFoldPathFromEnv(), FoldPathSupported(FoldPath::kAvx2) ? FoldPath::kAvx2 : FoldPath::kPortable);
  unsetenv("TESSERA_CPU_FOLDS");
  EXPECT_EQ(SelectFoldPathFromEnv(), best);
  if (old) setenv("TESSERA_CPU_FOLDS", saved.c_str(), 1);
  SelectFoldPathFromEnv();
  std::printf("fold paths here: portable%s%s; in use: %s\n", FoldPathSupported(FoldPath::kAvx2) ? " avx2" : "",
              FoldPathSupported(FoldPath::kAvx512) ? " avx512" : "", FoldPathName(ActiveFoldPath()));
}

TEST(FoldPathSelection, SetFoldPathClampsToSupported) {
  EXPECT_EQ(SetFoldPath(FoldPath::kPortable), FoldPath::kPortable);
  FoldPath p = SetFoldPath(FoldPath::kAvx512);
  EXPECT_TRUE(FoldPathSupported(p));
  EXPECT_EQ(ActiveFoldPath(), p);
  EXPECT_STREQ(FoldPathName(FoldPath::kAvx512), "avx512");
  SelectFoldPathFromEnv();
}

// Every 16-bit value, widened by Convert and by Fold(first) at every start offset 0..16 (so every value
// passes through each vector lane and through the scalar tail), equals the portable path and the scalar
// conversion of common/dtype.
TEST_F(FoldPaths, WidenAll65536F16AndBf16) {
  std::vector<uint16_t> all(65536 + 16);
  for (size_t i = 0; i < all.size(); ++i) all[i] = static_cast<uint16_t>(i);
  for (DType t : {DType::kFloat16, DType::kBfloat16}) {
    for (size_t off = 0; off <= 16; off += (off < 3 ? 1 : 13)) {
      size_t n = 65536;
      auto widen = [&] {
        Bytes out(n * 4);
        Convert(out.data(), DType::kFloat32, all.data() + off, t, n);
        Bytes f(n * 4);
        Fold(f.data(), all.data() + off, n, t, t, RedOp::kMax, /*first=*/true);
        EXPECT_EQ(f, out);
        return out;
      };
      Bytes ref = On(FoldPath::kPortable, widen);
      for (size_t i = 0; i < n; ++i) {
        uint16_t h = all[off + i];
        uint32_t want = F32Bits(t == DType::kFloat16 ? F16ToF32(h) : Bf16ToF32(h)), got;
        std::memcpy(&got, &ref[i * 4], 4);
        ASSERT_EQ(got, want) << DTypeName(t) << " h=" << h;
      }
      for (FoldPath p : paths_) {
        Bytes v = On(p, widen);
        EXPECT_EQ(FirstDiff(ref, v, 4), "") << DTypeName(t) << " " << FoldPathName(p) << " offset " << off;
      }
    }
  }
}

// f32 bit patterns that decide rounding: each 16-bit value's exact f32, the halfway points between
// neighbours (ties to even), one and two ulps either side of both, NaNs of every kind (signalling, quiet,
// both signs, payload bits in the kept and the dropped half), infinities, f32 denormals, and the f16
// overflow and underflow thresholds; then random patterns.
std::vector<uint32_t> NarrowingInputs(DType t) {
  std::vector<uint32_t> v;
  auto around = [&](uint32_t u) {
    for (int d = -2; d <= 2; ++d) v.push_back(u + static_cast<uint32_t>(d));
  };
  for (uint32_t h = 0; h < 0x10000; ++h) {
    uint32_t u =
        F32Bits(t == DType::kFloat16 ? F16ToF32(static_cast<uint16_t>(h)) : Bf16ToF32(static_cast<uint16_t>(h)));
    uint32_t next = F32Bits(t == DType::kFloat16 ? F16ToF32(static_cast<uint16_t>(h + 1))
                                                 : Bf16ToF32(static_cast<uint16_t>(h + 1)));
    around(u);
    if ((h & 0x7fff) != 0x7fff && (h & 0x7fff) < (t == DType::kFloat16 ? 0x7c00u : 0x7f80u))
      around(u + (next - u) / 2);  // the tie between h and h+1 (same sign, finite)
  }
  for (uint32_t s : {0u, 0x80000000u}) {
    for (uint32_t m : {1u, 2u, 0x1fffu, 0x2000u, 0xffffu, 0x10000u, 0x3fffffu, 0x400000u, 0x400001u, 0x7fffffu})
      v.push_back(s | 0x7f800000u | m);  // NaNs
    v.push_back(s | 0x7f800000u);        // inf
    for (uint32_t d : {1u, 2u, 0x7fffu, 0x8000u, 0x8001u, 0x18000u, 0x400000u, 0x7fffffu}) v.push_back(s | d);
    for (uint32_t edge : {0x477ff000u, 0x477fe000u, 0x38800000u, 0x33000000u, 0x33800000u, 0x7f7fffffu})
      for (int d = -3; d <= 3; ++d) v.push_back(s | (edge + static_cast<uint32_t>(d)));
  }
  std::mt19937 rng(19);
  for (int i = 0; i < (1 << 20); ++i) v.push_back(static_cast<uint32_t>(rng()));
  return v;
}

TEST_F(FoldPaths, NarrowMatchesPortable) {
  for (DType t : {DType::kFloat16, DType::kBfloat16}) {
    std::vector<uint32_t> in = NarrowingInputs(t);
    for (RedOp op : {RedOp::kSum, RedOp::kAvg}) {
      for (int divisor : {1, 3}) {
        if (op == RedOp::kSum && divisor != 1) continue;
        for (size_t off : {size_t{0}, size_t{1}, size_t{7}}) {
          size_t n = in.size() - off;
          auto narrow = [&] {
            Bytes out(n * 2);
            Finalize(out.data(), in.data() + off, n, t, op, divisor);
            if (op == RedOp::kSum) {
              Bytes c(n * 2);
              Convert(c.data(), t, in.data() + off, DType::kFloat32, n);
              EXPECT_EQ(c, out);
            }
            return out;
          };
          Bytes ref = On(FoldPath::kPortable, narrow);
          for (FoldPath p : paths_) {
            Bytes v = On(p, narrow);
            EXPECT_EQ(FirstDiff(ref, v, 2), "") << DTypeName(t) << " " << FoldPathName(p) << " " << RedOpName(op) << "/"
                                                << divisor << " offset " << off;
          }
        }
      }
    }
  }
}

// Narrowing in place (out == acc), as Finalize may be asked to do.
TEST_F(FoldPaths, FinalizeInPlaceMatchesPortable) {
  std::mt19937 rng(7);
  for (DType t : {DType::kFloat16, DType::kBfloat16}) {
    for (size_t n : {size_t{1}, size_t{15}, size_t{16}, size_t{17}, size_t{255}, size_t{4099}}) {
      std::vector<float> acc(n);
      for (auto& x : acc)
        x = std::ldexp(static_cast<float>(rng() % 100000) - 50000.0f, static_cast<int>(rng() % 40) - 30);
      auto run = [&] {
        std::vector<float> a = acc;
        Finalize(a.data(), a.data(), n, t, RedOp::kAvg, 3);
        Bytes out(n * 2);
        std::memcpy(out.data(), a.data(), n * 2);
        return out;
      };
      Bytes ref = On(FoldPath::kPortable, run);
      for (FoldPath p : paths_) EXPECT_EQ(FirstDiff(ref, On(p, run), 2), "") << FoldPathName(p) << " n=" << n;
    }
  }
}

// 16-bit values that exercise everything: normals over a wide exponent range, denormals, ±0, ±inf, NaNs
// with random payloads (quiet and signalling), values whose sums overflow.
std::vector<uint16_t> RandomHalves(DType t, size_t n, std::mt19937& rng) {
  std::vector<uint16_t> v(n);
  bool f16 = t == DType::kFloat16;
  for (auto& h : v) {
    uint32_t r = rng(), kind = r % 64;
    uint16_t sign = (r >> 8) & 1 ? 0x8000 : 0;
    uint16_t man = static_cast<uint16_t>((r >> 9) & (f16 ? 0x3ff : 0x7f));
    uint16_t expmask = f16 ? 0x7c00 : 0x7f80;
    if (kind == 0)
      h = sign;  // ±0
    else if (kind == 1)
      h = sign | expmask;  // ±inf
    else if (kind == 2)
      h = sign | expmask | (man ? man : 1);  // NaN, any payload
    else if (kind < 6)
      h = sign | man;  // denormal
    else if (kind < 8)
      h = sign | static_cast<uint16_t>(expmask - (f16 ? 0x400 : 0x80)) | man;  // huge
    else {                                                                     // normal, exponent near 1
      int e = f16 ? 15 + static_cast<int>((r >> 20) % 13) - 6 : 127 + static_cast<int>((r >> 20) % 13) - 6;
      h = sign | static_cast<uint16_t>(e << (f16 ? 10 : 7)) | man;
    }
  }
  return v;
}

std::vector<float> RandomPartials(size_t n, std::mt19937& rng) {
  std::vector<float> v(n);
  for (auto& x : v) {
    uint32_t r = rng();
    switch (r % 32) {
      case 0:
        x = BitsF32((r & 0x80000000u) | 0x7f800000u | (((r >> 5) & 0x7fffffu) | 1u));
        break;  // NaN
      case 1:
        x = (r & 64) ? -INFINITY : INFINITY;
        break;
      case 2:
        x = BitsF32(r & 0x807fffffu);
        break;  // f32 denormal or ±0
      default:
        x = std::ldexp(static_cast<float>(static_cast<int32_t>(r >> 8) % 100000), static_cast<int>(r % 30) - 20);
    }
  }
  return v;
}

// A fold sequence as an island's owner runs it: first contribution, more folded in, Fold2 of every operand
// combination (16-bit or f32 partials, acc aliasing an f32 operand), then Finalize; every RedOp, lengths
// around the vector widths, element offsets 0..3 into each buffer.
TEST_F(FoldPaths, RandomFoldsMatchPortable) {
  std::mt19937 rng(2026);
  const size_t lengths[] = {0, 1, 2, 7, 8, 9, 15, 16, 17, 31, 33, 63, 100, 257, 1023, 4097};
  for (DType t : {DType::kFloat16, DType::kBfloat16}) {
    for (int o = 0; o < static_cast<int>(RedOp::kCount); ++o) {
      RedOp op = static_cast<RedOp>(o);
      for (size_t n : lengths) {
        for (size_t off = 0; off < 4; ++off) {
          std::vector<uint16_t> x = RandomHalves(t, n + 4, rng), y = RandomHalves(t, n + 4, rng),
                                z = RandomHalves(t, n + 4, rng);
          std::vector<float> pa = RandomPartials(n + 4, rng), pb = RandomPartials(n + 4, rng);
          auto run = [&] {
            Bytes all;
            auto keep = [&](const void* p, size_t bytes) {
              const uint8_t* b = static_cast<const uint8_t*>(p);
              all.insert(all.end(), b, b + bytes);
            };
            std::vector<float> acc(n + 4, 0.0f);
            float* a = acc.data() + off;
            Fold(a, x.data() + off, n, t, t, op, true);
            Fold(a, y.data() + (3 - off), n, t, t, op, false);
            Fold(a, z.data() + 1, n, t, t, op, false);
            keep(a, n * 4);
            std::vector<uint16_t> out(n + 4);
            Finalize(out.data() + (3 - off), a, n, t, op, 3);
            keep(out.data() + (3 - off), n * 2);
            std::vector<float> acc2(n + 4);
            float* b = acc2.data() + (3 - off);
            Fold2(b, x.data() + off, t, y.data() + 1, t, n, t, op);
            keep(b, n * 4);
            Fold2(b, pa.data() + off, DType::kFloat32, z.data() + (3 - off), t, n, t, op);
            keep(b, n * 4);
            Fold2(b, z.data() + off, t, pb.data() + 2, DType::kFloat32, n, t, op);
            keep(b, n * 4);
            Fold2(b, pa.data() + 1, DType::kFloat32, pb.data() + off, DType::kFloat32, n, t, op);
            keep(b, n * 4);
            Fold2(b, b, DType::kFloat32, x.data() + off, t, n, t, op);  // acc is a
            keep(b, n * 4);
            Fold2(b, y.data() + 2, t, b, DType::kFloat32, n, t, op);  // acc is b
            keep(b, n * 4);
            Finalize(out.data() + off, b, n, t, op, 2);
            keep(out.data() + off, n * 2);
            return all;
          };
          Bytes ref = On(FoldPath::kPortable, run);
          for (FoldPath p : paths_) {
            Bytes v = On(p, run);
            ASSERT_EQ(FirstDiff(ref, v, 2), "")
                << DTypeName(t) << " " << RedOpName(op) << " " << FoldPathName(p) << " n=" << n << " off=" << off;
          }
        }
      }
    }
  }
}

// Fold2Finalize (the engine's two-contributor 16-bit jobs) equals Fold2 into an accumulator then Finalize, on
// every path and dtype, across its internal blocks, with operands of either type and out aliasing a.
TEST(FoldTwoAndFinalize, SameBitsAsFold2ThenFinalize) {
  std::mt19937 rng(11);
  std::vector<FoldPath> paths = {FoldPath::kPortable};
  for (FoldPath p : VectorPaths()) paths.push_back(p);
  for (FoldPath p : paths) {
    SetFoldPath(p);
    for (DType t : {DType::kFloat16, DType::kBfloat16, DType::kFloat32, DType::kInt32}) {
      const size_t esz = DTypeSize(t);
      for (int o = 0; o < static_cast<int>(RedOp::kCount); ++o) {
        RedOp op = static_cast<RedOp>(o);
        for (size_t n : {size_t{1}, size_t{17}, size_t{2048}, size_t{2049}, size_t{5003}}) {
          for (int mix = 0; mix < 4; ++mix) {  // bit 0: a is f32, bit 1: b is f32 (16-bit types only)
            if (mix != 0 && !IsHalf(t)) continue;
            DType at = mix & 1 ? DType::kFloat32 : t, bt = mix & 2 ? DType::kFloat32 : t;
            Bytes a(n * DTypeSize(at)), b(n * DTypeSize(bt));
            auto fill = [&](Bytes& v, DType vt) {
              if (vt == DType::kFloat32 && IsHalf(t)) {
                auto f = RandomPartials(n, rng);
                std::memcpy(v.data(), f.data(), n * 4);
              } else if (IsHalf(t)) {
                auto h = RandomHalves(t, n, rng);
                std::memcpy(v.data(), h.data(), n * 2);
              } else {
                for (auto& c : v) c = static_cast<uint8_t>(rng());
              }
            };
            fill(a, at);
            fill(b, bt);
            std::vector<uint8_t> acc(n * DTypeSize(AccumType(t))), want(n * esz), got(n * esz);
            Fold2(acc.data(), a.data(), at, b.data(), bt, n, t, op);
            Finalize(want.data(), acc.data(), n, t, op, 3);
            Fold2Finalize(got.data(), a.data(), at, b.data(), bt, n, t, op, 3);
            ASSERT_EQ(FirstDiff(want, got, esz), "")
                << FoldPathName(p) << " " << DTypeName(t) << " " << RedOpName(op) << " n=" << n << " mix=" << mix;
            if (at == t) {  // in place: out is a
              Fold2Finalize(a.data(), a.data(), at, b.data(), bt, n, t, op, 3);
              ASSERT_EQ(FirstDiff(want, a, esz), "") << FoldPathName(p) << " in place (a) " << DTypeName(t);
            } else if (bt == t) {  // in place: out is b
              Fold2Finalize(b.data(), a.data(), at, b.data(), bt, n, t, op, 3);
              ASSERT_EQ(FirstDiff(want, b, esz), "") << FoldPathName(p) << " in place (b) " << DTypeName(t);
            }
          }
        }
      }
    }
  }
  SelectFoldPathFromEnv();
}

// The rule for a sum or product of two NaNs (comm/reduce/simd.hpp): the first operand's NaN, quieted, in every
// path and loop (the scalar loops before it left the choice to the compiler, and it differed between them).
TEST(FoldNan, TwoNansGiveTheFirstQuieted) {
  const uint32_t kAcc = 0x7f812345u;  // signalling, in the accumulator / a
  for (FoldPath p : {FoldPath::kPortable, FoldPath::kAvx2, FoldPath::kAvx512}) {
    if (!FoldPathSupported(p)) continue;
    SetFoldPath(p);
    for (DType t : {DType::kFloat16, DType::kBfloat16}) {
      uint16_t nan16 = t == DType::kFloat16 ? 0xfd55 : 0xffd5;
      for (RedOp op : {RedOp::kSum, RedOp::kProd, RedOp::kAvg}) {
        for (size_t n : {size_t{1}, size_t{8}, size_t{16}, size_t{37}}) {
          std::vector<float> acc(n, BitsF32(kAcc)), f(n, BitsF32(0xffc7c453u)), out(n);
          std::vector<uint16_t> h(n, nan16);
          Fold(acc.data(), h.data(), n, t, t, op, false);
          Fold2(out.data(), f.data(), DType::kFloat32, h.data(), t, n, t, op);
          for (size_t i = 0; i < n; ++i) {
            EXPECT_EQ(F32Bits(acc[i]), kAcc | 0x00400000u) << FoldPathName(p) << " " << DTypeName(t) << " n=" << n;
            EXPECT_EQ(F32Bits(out[i]), 0xffc7c453u) << FoldPathName(p) << " " << DTypeName(t) << " n=" << n;
          }
          Fold2(out.data(), h.data(), t, f.data(), DType::kFloat32, n, t, op);
          uint32_t want = F32Bits(t == DType::kFloat16 ? F16ToF32(nan16) : Bf16ToF32(nan16)) | 0x00400000u;
          for (size_t i = 0; i < n; ++i) EXPECT_EQ(F32Bits(out[i]), want) << FoldPathName(p) << " " << DTypeName(t);
        }
      }
    }
  }
  SelectFoldPathFromEnv();
}

// Every f32 bit pattern narrowed to f16 and bf16 (4·2^32 conversions: tens of seconds, so not in the
// default run): --gtest_also_run_disabled_tests --gtest_filter='*NarrowAllF32*'.
TEST_F(FoldPaths, DISABLED_NarrowAllF32) {
  constexpr size_t kChunk = 1 << 20;
  std::vector<uint32_t> in(kChunk);
  Bytes ref(kChunk * 2), got(kChunk * 2);
  for (DType t : {DType::kFloat16, DType::kBfloat16}) {
    for (uint64_t base = 0; base < (uint64_t{1} << 32); base += kChunk) {
      for (size_t i = 0; i < kChunk; ++i) in[i] = static_cast<uint32_t>(base + i);
      SetFoldPath(FoldPath::kPortable);
      Finalize(ref.data(), in.data(), kChunk, t, RedOp::kSum, 1);
      for (FoldPath p : paths_) {
        SetFoldPath(p);
        Finalize(got.data(), in.data(), kChunk, t, RedOp::kSum, 1);
        ASSERT_EQ(FirstDiff(ref, got, 2), "") << DTypeName(t) << " " << FoldPathName(p) << " chunk at " << base;
      }
    }
  }
}

}  // namespace
}  // namespace tessera::comm
