// ckpt/crc32c: CRC-32C with a hardware (SSE4.2) path, a slicing table fallback, and zlib-style combine.
#include "ckpt/crc32c.hpp"

#include <fmt/format.h>

#include <cstring>

#if defined(__x86_64__)
#include <cpuid.h>
#include <nmmintrin.h>
#endif

namespace tessera::ckpt {
namespace {
constexpr uint32_t kPoly = 0x82F63B78u;  // reflected Castagnoli polynomial

struct Table {
  uint32_t t[8][256];
  Table() {
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ kPoly : c >> 1;
      t[0][i] = c;
    }
    for (uint32_t i = 0; i < 256; ++i)
      for (int s = 1; s < 8; ++s) t[s][i] = (t[s - 1][i] >> 8) ^ t[0][t[s - 1][i] & 0xff];
  }
};
const Table& Tab() {
  static const Table table;
  return table;
}

uint32_t SoftCrc(const uint8_t* p, size_t n, uint32_t c) {
  const auto& t = Tab().t;
  while (n >= 8) {
    uint64_t v;
    std::memcpy(&v, p, 8);
    v ^= c;
    c = t[7][v & 0xff] ^ t[6][(v >> 8) & 0xff] ^ t[5][(v >> 16) & 0xff] ^ t[4][(v >> 24) & 0xff] ^
        t[3][(v >> 32) & 0xff] ^ t[2][(v >> 40) & 0xff] ^ t[1][(v >> 48) & 0xff] ^ t[0][v >> 56];
    p += 8;
    n -= 8;
  }
  while (n--) c = (c >> 8) ^ t[0][(c ^ *p++) & 0xff];
  return c;
}

uint32_t Gf2Times(const uint32_t* mat, uint32_t vec);
#if defined(__x86_64__)
constexpr size_t kBlock = 8192;
// Multiplies a raw CRC register by x^(8*kBlock): the shift that Combine applies, precomputed.
uint32_t ShiftBlock(uint32_t c) {
  static const auto* mat = [] {
    auto* m = new uint32_t[32];
    for (int i = 0; i < 32; ++i) m[i] = Crc32cCombine(1u << i, 0, kBlock);
    return m;
  }();
  return Gf2Times(mat, c);
}
__attribute__((target("sse4.2"))) uint32_t HwCrc(const uint8_t* p, size_t n, uint32_t c) {
  uint64_t c64 = c;
  // Three independent streams hide the instruction's 3-cycle latency; joined with the block shift.
  while (n >= 3 * kBlock) {
    uint64_t c1 = 0, c2 = 0;
    const uint8_t* p1 = p + kBlock;
    const uint8_t* p2 = p + 2 * kBlock;
    for (size_t i = 0; i < kBlock; i += 8) {
      uint64_t a, b, d;
      std::memcpy(&a, p + i, 8);
      std::memcpy(&b, p1 + i, 8);
      std::memcpy(&d, p2 + i, 8);
      c64 = _mm_crc32_u64(c64, a);
      c1 = _mm_crc32_u64(c1, b);
      c2 = _mm_crc32_u64(c2, d);
    }
    uint32_t r = ShiftBlock(static_cast<uint32_t>(c64)) ^ static_cast<uint32_t>(c1);
    c64 = ShiftBlock(r) ^ static_cast<uint32_t>(c2);
    p += 3 * kBlock;
    n -= 3 * kBlock;
  }
  while (n >= 8) {
    uint64_t v;
    std::memcpy(&v, p, 8);
    c64 = _mm_crc32_u64(c64, v);
    p += 8;
    n -= 8;
  }
  uint32_t c32 = static_cast<uint32_t>(c64);
  while (n--) c32 = _mm_crc32_u8(c32, *p++);
  return c32;
}
bool HaveSse42() {
  unsigned a, b, c, d;
  if (!__get_cpuid(1, &a, &b, &c, &d)) return false;
  return (c & bit_SSE4_2) != 0;
}
#endif

// GF(2) matrix helpers for Combine (as in zlib's crc32_combine).
uint32_t Gf2Times(const uint32_t* mat, uint32_t vec) {
  uint32_t sum = 0;
  while (vec) {
    if (vec & 1) sum ^= *mat;
    vec >>= 1;
    ++mat;
  }
  return sum;
}
void Gf2Square(uint32_t* square, const uint32_t* mat) {
  for (int n = 0; n < 32; ++n) square[n] = Gf2Times(mat, mat[n]);
}
}  // namespace

uint32_t Crc32c(const void* data, size_t n, uint32_t crc) {
  const auto* p = static_cast<const uint8_t*>(data);
  uint32_t c = ~crc;
#if defined(__x86_64__)
  static const bool hw = HaveSse42();
  c = hw ? HwCrc(p, n, c) : SoftCrc(p, n, c);
#else
  c = SoftCrc(p, n, c);
#endif
  return ~c;
}

uint32_t Crc32cCombine(uint32_t crc1, uint32_t crc2, uint64_t len2) {
  if (len2 == 0) return crc1;
  uint32_t even[32], odd[32];
  odd[0] = kPoly;
  uint32_t row = 1;
  for (int n = 1; n < 32; ++n) {
    odd[n] = row;
    row <<= 1;
  }
  Gf2Square(even, odd);
  Gf2Square(odd, even);
  do {
    Gf2Square(even, odd);
    if (len2 & 1) crc1 = Gf2Times(even, crc1);
    len2 >>= 1;
    if (len2 == 0) break;
    Gf2Square(odd, even);
    if (len2 & 1) crc1 = Gf2Times(odd, crc1);
    len2 >>= 1;
  } while (len2 != 0);
  return crc1 ^ crc2;
}

std::string CrcHex(uint32_t crc) { return fmt::format("{:08x}", crc); }

bool ParseCrcHex(const std::string& s, uint32_t* crc) {
  if (s.size() != 8) return false;
  uint32_t v = 0;
  for (char ch : s) {
    v <<= 4;
    if (ch >= '0' && ch <= '9')
      v |= static_cast<uint32_t>(ch - '0');
    else if (ch >= 'a' && ch <= 'f')
      v |= static_cast<uint32_t>(ch - 'a' + 10);
    else
      return false;
  }
  *crc = v;
  return true;
}

}  // namespace tessera::ckpt
