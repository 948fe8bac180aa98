// tests/fuzz/ckpt_header_fuzz_test: a seeded property test of the checkpoint reader's parsers of what a job or a
// tenant's file controls — safetensors files as `tessera ckpt import` reads them, the safetensors header of a
// checkpoint shard as every reader checks it against its manifest (ShardCheck), and manifests. Each input is a
// corpus entry (valid files, and the inputs that once crashed, hung or fooled a reader: a header nested 100,000
// deep, a key given twice, a dimension 4.5, a shape whose byte size wraps to the size of its data_offsets, a header
// length past the end) mutated by a seeded generator, in its header text, its 8-byte length or its size. Each
// parser answers OK or an error; what it accepts lies inside the file: every accepted tensor's bytes are read
// (so that ASan, in an ASan+UBSan tree, sees a read past the buffer, allocated at the file's exact size).
//
// `make test` runs FUZZ_ITERS=3000 (default) of seed FUZZ_SEED=1, in the plain tree and in the ASan+UBSan tree of
// scripts/test-sanitize.sh; longer by hand: FUZZ_ITERS=200000 FUZZ_SEED=<any number>
// build-asan/tests/fuzz/fuzz_ckpt_header_test (docs/ckpt.md, "Tests").
#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "ckpt/crc32c.hpp"
#include "ckpt/format.hpp"
#include "ckpt/import.hpp"
#include "ckpt/internal.hpp"
#include "fuzz/mutate.hpp"

namespace tessera::ckpt {
namespace {

using json = nlohmann::json;
using fuzz::EnvOr;
using fuzz::Head;
using fuzz::Mutate;

std::string Le64(uint64_t v) {
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[static_cast<size_t>(i)] = static_cast<char>((v >> (8 * i)) & 0xff);
  return out;
}
// A safetensors file: the 8-byte length of `header` (padded to 8 bytes), the header, then `data`.
std::string File(std::string header, const std::string& data) {
  while (header.size() % 8) header += ' ';
  return Le64(header.size()) + header + data;
}

const std::string kDeep = std::string(100000, '[') + std::string(100000, ']');

// Header texts (their files are header + 64 data bytes, enough for every valid entry).
std::vector<std::string> ImportHeaders() {
  return {
      R"({"__metadata__":{"format":"pt"},"a":{"dtype":"F32","shape":[2,4],"data_offsets":[0,32]},)"
      R"("b":{"dtype":"BF16","shape":[4,4],"data_offsets":[32,64]}})",
      R"({"a":{"dtype":"F32","shape":[],"data_offsets":[0,4]}})",
      R"({"a":{"dtype":"F32","shape":[2,4],"data_offsets":[0,32]},"a":{"dtype":"F32","shape":[1],"data_offsets":[32,36]}})",
      R"({"a":{"dtype":"F32","shape":[4.5],"data_offsets":[0,16]}})",
      // 2^62 x 4 F32 elements: the byte size wraps to 0, which data_offsets [0, 0] would match.
      R"({"a":{"dtype":"F32","shape":[4611686018427387904,4],"data_offsets":[0,0]}})",
      R"({"a":{"dtype":"F32","shape":[8],"data_offsets":[32,64]},"__metadata__":)" + kDeep + "}",
      R"({"a":{"dtype":"I64","shape":[-1],"data_offsets":[0,8]}})",
  };
}

// The whole file of one import case: header + data, or a raw file whose length field lies.
std::string ImportFile(const std::string& header, std::mt19937_64& rng, bool mutate) {
  const std::string data(64, '\x5a');
  std::string h = mutate ? Mutate(header, rng) : header;
  std::string f = File(h, data);
  if (mutate) {
    switch (rng() % 5) {
      case 0:  // the length field: off by a little, past the end, huge
        std::memcpy(f.data(), Le64(h.size() + (rng() % 17) - 8).data(), 8);
        break;
      case 1:
        std::memcpy(f.data(), Le64(f.size() - 8 + rng() % 3).data(), 8);
        break;
      case 2:
        f.resize(rng() % (f.size() + 1));  // truncated, maybe inside the length field
        break;
      default:
        break;
    }
  }
  return f;
}

// Reads every byte of [p, p + n) (ASan reports a read outside the allocation).
uint32_t Touch(const void* p, uint64_t n) { return n ? Crc32c(p, static_cast<size_t>(n)) : 0; }

TEST(CkptHeaderFuzz, ImportAcceptsOnlyTensorsInsideTheFile) {
  const uint64_t seed = EnvOr("FUZZ_SEED", 1), iters = EnvOr("FUZZ_ITERS", 3000);
  std::mt19937_64 rng(seed);
  const auto headers = ImportHeaders();
  int accepted = 0;
  for (uint64_t i = 0; i < iters; ++i) {
    const bool keep = i < headers.size();  // the corpus entries themselves first, unmutated
    const std::string file = ImportFile(headers[i % headers.size()], rng, !keep);
    const std::string where = "seed " + std::to_string(seed) + ", iteration " + std::to_string(i) + ": ";
    // Exactly the file's size on the heap, no slack: a read past it is out of bounds.
    std::unique_ptr<char[]> buf(new char[file.size() ? file.size() : 1]);
    std::memcpy(buf.get(), file.data(), file.size());
    std::vector<TensorView> views;
    std::map<std::string, std::string> owner;
    Status s = ParseSafetensors(buf.get(), file.size(), "f.safetensors", &views, &owner);
    if (!s.ok()) {
      ASSERT_FALSE(s.message().empty()) << where << Head(file.substr(8));
      continue;
    }
    ++accepted;
    const char *begin = buf.get(), *end = buf.get() + file.size();
    for (const auto& v : views) {
      uint64_t n = DTypeSize(v.dtype);
      for (int64_t d : v.shape) {
        ASSERT_GE(d, 0) << where << v.name;
        ASSERT_TRUE(CheckedMul(n, static_cast<uint64_t>(d), &n)) << where << v.name << " overflows";
      }
      const char* p = static_cast<const char*>(v.data);
      ASSERT_TRUE(p >= begin + 8 && p <= end && n <= static_cast<uint64_t>(end - p))
          << where << "tensor '" << v.name << "' lies outside the file: " << Head(file.substr(8));
      (void)Touch(p, n);
    }
  }
  EXPECT_GT(accepted, 0);
}

// A checkpoint of one shard file: its manifest and the shard's bytes.
struct Shard {
  Manifest m;
  std::string bytes;
};
Shard MakeShard() {
  Shard s;
  json h = json::object();
  h["__metadata__"] = {{"tessera.step", "5"}, {"tessera.rank", "0"}, {"tessera.world", "1"}};
  h["w"] = {{"dtype", "F32"}, {"shape", {4, 2}}, {"data_offsets", {0, 32}}};
  h["b"] = {{"dtype", "I64"}, {"shape", {2}}, {"data_offsets", {32, 48}}};
  std::string text = h.dump();
  while (text.size() % 8) text += ' ';
  const uint64_t start = 8 + text.size();
  s.bytes = Le64(text.size()) + text + std::string(48, '\x11');
  s.m.step = 5;
  s.m.world = 1;
  s.m.files = {{0, ShardFileName(0, 1), s.bytes.size(), Crc32c(s.bytes.data(), s.bytes.size())}};
  s.m.tensors.push_back({"w",
                         DType::kFloat32,
                         {4, 2},
                         Sharding::kReplicated,
                         {{0, 0, 4, start, start + 32, Crc32c(s.bytes.data() + start, 32)}}});
  s.m.tensors.push_back({"b",
                         DType::kInt64,
                         {2},
                         Sharding::kReplicated,
                         {{0, 0, 2, start + 32, start + 48, Crc32c(s.bytes.data() + start + 32, 16)}}});
  return s;
}

TEST(CkptHeaderFuzz, ShardHeaderCheckAnswersEveryMutatedHeader) {
  const uint64_t seed = EnvOr("FUZZ_SEED", 1), iters = EnvOr("FUZZ_ITERS", 3000);
  std::mt19937_64 rng(seed);
  const Shard good = MakeShard();
  ASSERT_TRUE(ValidateManifest(good.m, "fuzz").ok());
  const uint64_t hlen = SafetensorsHeaderLength(good.bytes.data());
  const std::string header = good.bytes.substr(8, hlen);
  int accepted = 0;
  for (uint64_t i = 0; i < iters; ++i) {
    const std::string where = "seed " + std::to_string(seed) + ", iteration " + std::to_string(i) + ": ";
    std::string h = i == 0 ? header : i == 1 ? kDeep : Mutate(header, rng);
    std::string first = Le64(h.size()) + h;
    if (i > 1 && rng() % 4 == 0) std::memcpy(first.data(), Le64(h.size() + (rng() % 17) - 8).data(), 8);
    if (i > 1 && rng() % 8 == 0) first.resize(rng() % (first.size() + 1));
    // As a reader gets them: the first 8 + length bytes of the file, at their exact size.
    std::unique_ptr<char[]> buf(new char[first.size() ? first.size() : 1]);
    std::memcpy(buf.get(), first.data(), first.size());
    ShardCheck check(good.m, 0, "file fuzz.safetensors");
    Status s = first.size() >= 8 ? check.HeaderLength(buf.get()).status() : Status::Ok();
    if (s.ok()) s = check.Header(std::string(buf.get(), first.size()));
    if (s.ok()) {
      ++accepted;
    } else {
      ASSERT_EQ(s.code(), Code::kCorrupt) << where << s.ToString();
    }
  }
  EXPECT_GT(accepted, 0);
}

TEST(CkptHeaderFuzz, ManifestsReadBackAsTheyWereAccepted) {
  const uint64_t seed = EnvOr("FUZZ_SEED", 1), iters = EnvOr("FUZZ_ITERS", 3000);
  std::mt19937_64 rng(seed);
  const std::string good = ManifestToJson(MakeShard().m);
  const std::vector<std::string> corpus = {good, "{\"format\":" + kDeep + "}",
                                           "{\"format\":\"tessera-ckpt/2\",\"step\":"};
  int accepted = 0;
  for (uint64_t i = 0; i < iters; ++i) {
    std::string t = corpus[i % corpus.size()];
    if (i >= corpus.size()) t = Mutate(t, rng);
    const std::string where = "seed " + std::to_string(seed) + ", iteration " + std::to_string(i) + ": ";
    auto m = ManifestFromJson(t, "manifest.json");
    if (!m.ok()) {
      ASSERT_EQ(m.status().code(), Code::kCorrupt) << where << m.status().ToString();
      continue;
    }
    ++accepted;
    auto back = ManifestFromJson(ManifestToJson(*m), "written back");
    ASSERT_TRUE(back.ok()) << where << back.status().ToString() << "\n" << Head(t);
    EXPECT_EQ(back->TotalBytes(), m->TotalBytes());
  }
  EXPECT_GT(accepted, 0);
}

}  // namespace
}  // namespace tessera::ckpt
