// tests/ckpt/format_test: CRC32C known answers and combine, names, manifest round trip and rejection.
#include "ckpt/format.hpp"

#include <gtest/gtest.h>

#include <random>

#include "ckpt/crc32c.hpp"

namespace tessera::ckpt {

TEST(Crc32c, KnownAnswers) {
  // RFC 3720 (iSCSI) appendix B.4 and the common "123456789" check value.
  EXPECT_EQ(Crc32c("123456789", 9), 0xE3069283u);
  std::vector<uint8_t> zeros(32, 0), ones(32, 0xff), inc(32);
  for (int i = 0; i < 32; ++i) inc[i] = static_cast<uint8_t>(i);
  EXPECT_EQ(Crc32c(zeros.data(), 32), 0x8A9136AAu);
  EXPECT_EQ(Crc32c(ones.data(), 32), 0x62A8AB43u);
  EXPECT_EQ(Crc32c(inc.data(), 32), 0x46DD794Eu);
}

TEST(Crc32c, LargeBuffersMatchBytewiseAndCombine) {
  std::mt19937_64 rng(7);
  std::vector<uint8_t> data(200000 + 13);
  for (auto& b : data) b = static_cast<uint8_t>(rng());
  // Incremental byte-at-a-time CRC (exercises the tail path only) equals the one-shot CRC (block path).
  uint32_t inc = 0;
  for (size_t i = 0; i < data.size(); i += 1000)
    inc = Crc32c(data.data() + i, std::min<size_t>(1000, data.size() - i), inc);
  uint32_t whole = Crc32c(data.data(), data.size());
  EXPECT_EQ(inc, whole);
  for (size_t split : {size_t{0}, size_t{1}, size_t{8191}, size_t{24576}, size_t{100001}, data.size()}) {
    uint32_t a = Crc32c(data.data(), split), b = Crc32c(data.data() + split, data.size() - split);
    EXPECT_EQ(Crc32cCombine(a, b, data.size() - split), whole) << "split " << split;
  }
  data[12345] ^= 1;
  EXPECT_NE(Crc32c(data.data(), data.size()), whole);
}

TEST(Format, Names) {
  EXPECT_EQ(StepDirName(42), "step-0000000042");
  int64_t s = 0;
  EXPECT_TRUE(ParseStepDirName("step-0000000042", &s));
  EXPECT_EQ(s, 42);
  EXPECT_FALSE(ParseStepDirName("step-42", &s));
  EXPECT_FALSE(ParseStepDirName("step-00000000x2", &s));
  EXPECT_EQ(ShardFileName(3, 16), "rank-00003-of-00016.safetensors");
  DType t;
  EXPECT_TRUE(ParseSafetensorsDType("BF16", &t));
  EXPECT_EQ(t, DType::kBfloat16);
  EXPECT_FALSE(ParseSafetensorsDType("F8", &t));
}

TEST(Format, ManifestRoundTripAndRejects) {
  Manifest m;
  m.step = 9;
  m.world = 2;
  m.created_unix = 1700000000;
  m.files = {{0, ShardFileName(0, 2), 1000, 0xdeadbeef}, {1, ShardFileName(1, 2), 900, 0x01020304}};
  m.tensors.push_back({"w",
                       DType::kBfloat16,
                       {10, 4},
                       Sharding::kRowSharded,
                       {{0, 0, 5, 100, 140, 0x11111111}, {1, 5, 5, 96, 136, 0x22222222}}});
  auto back = ManifestFromJson(ManifestToJson(m), "test");
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->step, 9);
  EXPECT_EQ(back->TotalBytes(), 1900u);
  ASSERT_EQ(back->tensors.size(), 1u);
  EXPECT_EQ(back->tensors[0].dtype, DType::kBfloat16);
  EXPECT_EQ(back->tensors[0].pieces[1].crc, 0x22222222u);
  EXPECT_EQ(back->tensors[0].pieces[1].begin, 96u);

  auto bad = ManifestFromJson("{\"format\":\"tessera-ckpt/1\",\"step\":", "step 9: /x/manifest.json");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), Code::kCorrupt);
  EXPECT_NE(bad.status().message().find("/x/manifest.json"), std::string::npos);
  std::string evil = ManifestToJson(m);
  evil.replace(evil.find("rank-00001"), 10, "../../etc/");
  EXPECT_FALSE(ManifestFromJson(evil, "t").ok());
}

}  // namespace tessera::ckpt
