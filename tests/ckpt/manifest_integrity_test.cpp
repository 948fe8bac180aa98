// tests/ckpt/manifest_integrity_test: the manifest is protected and checked before restore trusts it.
// A small three-rank checkpoint (steps 1 and 2) is written, then step 2's
// manifest is damaged — single-bit flips at seeded random positions, value edits with and without a
// recomputed digest, a legacy (digest-less) manifest — and for every damaged manifest Verify, Latest
// and Restore are asked. The guarantee enforced (docs/ckpt.md, "Manifest integrity"): either Restore
// fills every tensor with exactly the bits that were saved, or Verify, Latest (which then returns step
// 1) and Restore all reject the step; never a successful restore of other bits.
#include <gtest/gtest.h>

#include <array>
#include <cstring>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <thread>

#include "ckpt/crc32c.hpp"
#include "ckpt/format.hpp"
#include "ckpt/test_util.hpp"
#include "common/dtype.hpp"
#include "tessera/ckpt.h"
#include "tessera/ckpt.hpp"

namespace tessera::ckpt {
namespace {

using json = nlohmann::json;
using test::ReadText;
using test::TempDir;

constexpr int kWorld = 3;

struct Spec {
  const char* name;
  DType dtype;
  std::vector<int64_t> shape;  // global
  Sharding sharding;
};
// Row-sharded 2-d, 1-d and a tensor with fewer rows than ranks (rank 2 holds 0 rows of "z"); replicated
// 2-d and 0-d. Two tensors of equal element size and different dtype (f32/i32) catch a dtype swap.
const std::vector<Spec>& Specs() {
  static const std::vector<Spec> specs = {
      {"w", DType::kFloat32, {7, 3}, Sharding::kRowSharded},  {"ids", DType::kInt64, {5}, Sharding::kRowSharded},
      {"z", DType::kUint8, {2, 4}, Sharding::kRowSharded},    {"k", DType::kInt32, {4, 2}, Sharding::kRowSharded},
      {"h", DType::kBfloat16, {3, 2}, Sharding::kReplicated}, {"s", DType::kFloat64, {}, Sharding::kReplicated},
  };
  return specs;
}

uint64_t RowSize(const Spec& s) {
  uint64_t n = DTypeSize(s.dtype);
  for (size_t i = 1; i < s.shape.size(); ++i) n *= static_cast<uint64_t>(s.shape[i]);
  return n;
}
int64_t GlobalRows(const Spec& s) { return s.shape.empty() ? 1 : s.shape[0]; }

// The global bytes of tensor `s` at `step`: distinct across tensors, steps and positions.
std::vector<unsigned char> Global(const Spec& s, int64_t step) {
  std::vector<unsigned char> v(RowSize(s) * static_cast<uint64_t>(GlobalRows(s)));
  uint64_t h = static_cast<uint64_t>(step) * 0x9E3779B97F4A7C15ull ^ std::hash<std::string>{}(s.name);
  for (auto& b : v) {
    h = h * 6364136223846793005ull + 1442695040888963407ull;
    b = static_cast<unsigned char>(h >> 56);
  }
  return v;
}

// Saves `step` from kWorld writers (one thread each).
void SaveStep(const std::string& root, int64_t step) {
  std::array<Status, kWorld> st;
  std::vector<std::thread> ts;
  for (int r = 0; r < kWorld; ++r) {
    ts.emplace_back([&, r] {
      WriterOptions wo;
      wo.fsync = false;
      auto w = CheckpointWriter::Open(root, r, kWorld, wo);
      if (!w.ok()) {
        st[r] = w.status();
        return;
      }
      std::vector<std::vector<unsigned char>> keep;
      keep.reserve(Specs().size());  // no reallocation: the views below point into these buffers
      std::vector<TensorView> tv;
      for (const auto& s : Specs()) {
        auto g = Global(s, step);
        if (s.sharding == Sharding::kReplicated) {
          keep.push_back(g);
          tv.push_back({s.name, s.dtype, s.shape, keep.back().data(), Sharding::kReplicated});
          continue;
        }
        auto [b, n] = EvenRows(s.shape[0], r, kWorld);
        const uint64_t rb = RowSize(s);
        keep.emplace_back(g.begin() + static_cast<int64_t>(b * rb), g.begin() + static_cast<int64_t>((b + n) * rb));
        std::vector<int64_t> local = s.shape;
        local[0] = n;
        tv.push_back({s.name, s.dtype, local, keep.back().data(), Sharding::kRowSharded, b, s.shape[0]});
      }
      st[r] = (*w)->Save(step, tv);
      if (st[r].ok()) st[r] = (*w)->Wait();
    });
  }
  for (auto& t : ts) t.join();
  for (auto& s : st) ASSERT_TRUE(s.ok()) << s.ToString();
}

void WriteText(const std::string& path, const std::string& text) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f << text;
}

// Recomputes the manifest digest after an edit, by the rule docs/ckpt.md states (CRC32C of the compact
// JSON serialization of the manifest object without its "manifest_crc32c" member) — what a buggy writer
// would produce. A manifest without a digest is returned as dumped.
std::string Reseal(json j) {
  if (j.contains("manifest_crc32c")) {
    j.erase("manifest_crc32c");
    std::string canon = j.dump();
    j["manifest_crc32c"] = CrcHex(Crc32c(canon.data(), canon.size()));
  }
  return j.dump(1) + "\n";
}

enum class Outcome { kOriginal, kWrongData, kError };

class ManifestIntegrity : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = tmp_.path();
    SaveStep(root_, 1);
    SaveStep(root_, 2);
    path_ = JoinPath(JoinPath(root_, StepDirName(2)), kManifestName);
    original_ = ReadText(path_);
    ASSERT_FALSE(original_.empty());
    auto l = Latest(root_);
    ASSERT_TRUE(l.ok() && l->step == 2) << "the undamaged checkpoint must be latest";
    ASSERT_EQ(RestoreAll(), Outcome::kOriginal) << "the undamaged checkpoint must restore";
  }

  // Restores every tensor of step 2 whole (buffers pre-filled with 0xA5) and compares with what was saved.
  Outcome RestoreAll(Status* status = nullptr) {
    std::vector<std::vector<unsigned char>> bufs;
    std::vector<TensorSlot> slots;
    for (const auto& s : Specs()) bufs.emplace_back(Global(s, 2).size(), 0xA5);
    for (size_t i = 0; i < Specs().size(); ++i) slots.push_back({Specs()[i].name, bufs[i].data(), bufs[i].size()});
    Status st = Restore(root_, 2, slots);
    if (status) *status = st;
    if (!st.ok()) return Outcome::kError;
    for (size_t i = 0; i < Specs().size(); ++i)
      if (bufs[i] != Global(Specs()[i], 2)) return Outcome::kWrongData;
    return Outcome::kOriginal;
  }

  // The guarantee for one damaged manifest (already written to path_). Returns the outcome of Restore.
  Outcome Check(const std::string& what) {
    Status restore;
    Outcome o = RestoreAll(&restore);
    Status v = Verify(root_, 2);
    auto l = Latest(root_);
    EXPECT_TRUE(l.ok()) << what << ": step 1 is intact, Latest must find it: " << l.status().ToString();
    int64_t latest = l.ok() ? l->step : -1;
    EXPECT_NE(o, Outcome::kWrongData) << what << ": Restore reported success with other bits";
    if (o != Outcome::kOriginal) {
      EXPECT_FALSE(v.ok()) << what << ": Restore fails (" << restore.message() << ") but Verify passes";
      EXPECT_EQ(latest, 1) << what << ": Restore fails (" << restore.message() << ") but Latest picks step 2";
    }
    EXPECT_EQ(latest, v.ok() ? 2 : 1) << what << ": Latest disagrees with Verify (" << v.message() << ")";
    return o;
  }

  // The edit must be rejected by all three, whether or not the digest is recomputed.
  void ExpectRejected(const std::string& what, const std::function<void(json&)>& edit) {
    json j = json::parse(original_);
    edit(j);
    for (bool reseal : {false, true}) {
      std::string text = reseal ? Reseal(j) : j.dump(1) + "\n";
      WriteText(path_, text);
      std::string label = what + (reseal ? " (digest recomputed)" : "");
      EXPECT_EQ(Check(label), Outcome::kError) << label << ": must be rejected";
    }
    WriteText(path_, original_);
  }

  json& Piece(json& j, const std::string& tensor, size_t i) {
    for (auto& t : j.at("tensors"))
      if (t.at("name") == tensor) return t.at("pieces").at(i);
    ADD_FAILURE() << "no tensor " << tensor;
    return j;
  }
  json& Tensor(json& j, const std::string& tensor) {
    for (auto& t : j.at("tensors"))
      if (t.at("name") == tensor) return t;
    ADD_FAILURE() << "no tensor " << tensor;
    return j;
  }

  TempDir tmp_;
  std::string root_, path_, original_;
};

// Item 9: `"row_offset": 0` → `1` (as text, the digest left alone) is rejected by Verify, Latest and the
// C API's restore, and restore fails before it copies a byte into the caller's buffer.
TEST_F(ManifestIntegrity, RowOffsetEditIsRejectedBeforeAnyByteIsCopied) {
  std::string text = original_;
  size_t at = text.find("\"row_offset\": 0");
  ASSERT_NE(at, std::string::npos);
  text.replace(at, 15, "\"row_offset\": 1");
  for (bool reseal : {false, true}) {
    WriteText(path_, reseal ? Reseal(json::parse(text)) : text);
    SCOPED_TRACE(reseal ? "digest recomputed" : "digest left alone");
    Status v = Verify(root_, 2);
    EXPECT_FALSE(v.ok());
    EXPECT_NE(v.message().find(path_), std::string::npos) << "the error names the manifest: " << v.message();
    int64_t latest = -1;
    EXPECT_EQ(tsrCkptLatest(root_.c_str(), &latest), tsrSuccess) << tsrCkptGetLastError();
    EXPECT_EQ(latest, 1);
    const Spec& w = Specs()[0];
    std::vector<unsigned char> buf(Global(w, 2).size(), 0xA5);
    tsrCkptSlot_t slot{w.name, buf.data(), buf.size(), 0, -1};
    EXPECT_EQ(tsrCkptRestore(root_.c_str(), 2, &slot, 1), TSR_CKPT_CORRUPT) << tsrCkptGetLastError();
    EXPECT_EQ(buf, std::vector<unsigned char>(buf.size(), 0xA5)) << "restore wrote into the buffer";
  }
}

// Item 10: damage that breaks restore is caught by Verify and Latest too, so a resume falls back to step 1.
TEST_F(ManifestIntegrity, FieldEditsAreRejectedByVerifyLatestAndRestore) {
  ExpectRejected("piece crc32c", [&](json& j) { Piece(j, "w", 1)["crc32c"] = "00000000"; });
  ExpectRejected("piece rows +1", [&](json& j) { Piece(j, "w", 2)["rows"] = 3; });
  ExpectRejected("piece rows -1", [&](json& j) { Piece(j, "ids", 0)["rows"] = 1; });
  ExpectRejected("row_offset 0 -> 1", [&](json& j) { Piece(j, "w", 0)["row_offset"] = 1; });
  ExpectRejected("row_offsets swapped", [&](json& j) {
    Piece(j, "ids", 1)["row_offset"] = 3;  // ids: rows 2+2+1 → [0,2) [2,4) [4,5); give rank 1 and 2's pieces
    Piece(j, "ids", 2)["row_offset"] = 2;  // each other's offsets (same byte size only for equal row counts)
  });
  ExpectRejected("row_offsets of equal pieces swapped", [&](json& j) {
    Piece(j, "w", 1)["row_offset"] = 5;  // w: rows 3+2+2 → rank 1 holds [3,5), rank 2 [5,7): same sizes
    Piece(j, "w", 2)["row_offset"] = 3;
  });
  ExpectRejected("shape 10^15", [&](json& j) { Tensor(j, "w")["shape"][0] = 1000000000000000; });
  ExpectRejected("shape [7, 3] -> [7, 3, 10^15]",
                 [&](json& j) { Tensor(j, "w")["shape"].push_back(1000000000000000); });
  ExpectRejected("shape dim 1", [&](json& j) { Tensor(j, "w")["shape"][1] = 4; });
  ExpectRejected("shape of a 0-d tensor", [&](json& j) { Tensor(j, "s")["shape"] = {1}; });
  ExpectRejected("dtype float32 -> int32", [&](json& j) { Tensor(j, "w")["dtype"] = "int32"; });
  ExpectRejected("dtype int32 -> float32", [&](json& j) { Tensor(j, "k")["dtype"] = "float32"; });
  // (The converse, a replicated tensor relabelled row-sharded, is one piece of all rows: the same bits.)
  ExpectRejected("sharding row -> replicated", [&](json& j) { Tensor(j, "w")["sharding"] = "replicated"; });
  ExpectRejected("sharding 'rom'", [&](json& j) { Tensor(j, "w")["sharding"] = "rom"; });
  ExpectRejected("byte_range shifted", [&](json& j) {
    auto& br = Piece(j, "w", 0)["byte_range"];
    br = {br[0].get<uint64_t>() + 4, br[1].get<uint64_t>() + 4};
  });
  ExpectRejected("piece file", [&](json& j) { Piece(j, "w", 0)["file"] = 1; });
  ExpectRejected("file bytes", [&](json& j) { j["files"][1]["bytes"] = j["files"][1]["bytes"].get<uint64_t>() + 8; });
  ExpectRejected("file rank", [&](json& j) { j["files"][1]["rank"] = 2; });
  ExpectRejected("world", [&](json& j) { j["world"] = 2; });
  ExpectRejected("a piece dropped", [&](json& j) { Tensor(j, "z")["pieces"].erase(2); });
  ExpectRejected("a piece duplicated", [&](json& j) { Tensor(j, "h")["pieces"].push_back(Piece(j, "h", 0)); });
  ExpectRejected("a tensor dropped", [&](json& j) {
    auto& ts = j["tensors"];
    for (size_t i = 0; i < ts.size(); ++i)
      if (ts[i]["name"] == "k") ts.erase(i);
  });
  ExpectRejected("negative rows", [&](json& j) { Piece(j, "z", 2)["rows"] = -1; });
  ExpectRejected("row_offset 2^62", [&](json& j) { Piece(j, "w", 1)["row_offset"] = int64_t{1} << 62; });
  ExpectRejected("bytes 2^64-1", [&](json& j) { j["files"][0]["bytes"] = ~uint64_t{0}; });
  ExpectRejected("step as a string", [&](json& j) { j["step"] = "2"; });
  ExpectRejected("rows as a float", [&](json& j) { Piece(j, "w", 0)["rows"] = 3.5; });
  ExpectRejected("digest removed", [&](json& j) { j.erase("manifest_crc32c"); });
}

// A changed file CRC32C (digest recomputed) cannot make Restore return other bits: it checks every
// piece's own CRC32C. Verify and Latest reject the step (the file does not match its manifest).
TEST_F(ManifestIntegrity, FileChecksumEditFailsVerifyAndLatest) {
  json j = json::parse(original_);
  j["files"][2]["crc32c"] = "00000000";
  WriteText(path_, Reseal(j));
  Check("file crc32c");
  EXPECT_FALSE(Verify(root_, 2).ok());
}

// Item 10's fuzzer: >= 1,000 seeded single-bit flips of the manifest bytes. Each either restores the
// original bits (then Verify and Latest agree with each other) or is rejected by Verify, Latest and Restore.
TEST_F(ManifestIntegrity, SingleBitFlipsEitherRestoreTheOriginalOrAreRejectedByAll) {
  std::mt19937_64 rng(20261201);
  const int kFlips = 1200;
  std::map<Outcome, int> seen;
  for (int i = 0; i < kFlips; ++i) {
    size_t bit = static_cast<size_t>(rng() % (original_.size() * 8));
    std::string text = original_;
    text[bit / 8] = static_cast<char>(text[bit / 8] ^ (1 << (bit % 8)));
    WriteText(path_, text);
    std::string what = "flip of bit " + std::to_string(bit % 8) + " of byte " + std::to_string(bit / 8) + " ('" +
                       original_.substr(bit / 8 > 20 ? bit / 8 - 20 : 0, 40) + "')";
    ++seen[Check(what)];
    if (HasFailure()) break;  // one detailed failure is enough
  }
  WriteText(path_, original_);
  EXPECT_EQ(seen[Outcome::kWrongData], 0);
  EXPECT_GT(seen[Outcome::kError], kFlips / 2) << "most flips change a value the checkpoint depends on";
  std::printf("%d flips: %d restore the original bits, %d rejected by Verify, Latest and Restore\n", kFlips,
              seen[Outcome::kOriginal], seen[Outcome::kError]);
}

// Targeted edits through the fuzzer's loop: every numeric value of the manifest ±1 and ×10^9, digest
// recomputed, so that only the structural checks against the shard headers can catch them.
TEST_F(ManifestIntegrity, EveryNumberEditedWithTheDigestRecomputed) {
  json base = json::parse(original_);
  std::vector<json::json_pointer> numbers;
  std::function<void(const json&, const json::json_pointer&)> walk = [&](const json& j, const json::json_pointer& p) {
    if (j.is_number_integer()) numbers.push_back(p);
    if (j.is_object())
      for (auto it = j.begin(); it != j.end(); ++it) walk(*it, p / it.key());
    if (j.is_array())
      for (size_t i = 0; i < j.size(); ++i) walk(j[i], p / i);
  };
  walk(base, json::json_pointer());
  ASSERT_GT(numbers.size(), 40u);
  int edits = 0;
  for (const auto& p : numbers) {
    if (p.back() == "created_unix") continue;  // informational: any value restores the same bits
    for (int64_t delta : {int64_t{1}, int64_t{-1}, int64_t{1000000000}}) {
      json j = base;
      int64_t v = j[p].get<int64_t>();
      j[p] = delta == 1000000000 ? v * delta + 1 : v + delta;
      WriteText(path_, Reseal(j));
      EXPECT_EQ(Check(p.to_string() + " = " + j[p].dump()), Outcome::kError) << p.to_string() << " edited";
      ++edits;
    }
    if (HasFailure()) break;
  }
  WriteText(path_, original_);
  EXPECT_GE(edits, 120);
}

// A manifest of the previous format (tessera-ckpt/1, no digest) still loads, verifies and restores; the
// structural checks still apply to it (a row_offset edit is rejected), and every single-bit flip of it is
// rejected too or restores the original bits.
TEST_F(ManifestIntegrity, LegacyManifestWithoutDigestStillLoadsAndIsChecked) {
  test::ToLegacyManifest(path_);
  const std::string legacy = ReadText(path_);
  json j = json::parse(legacy);
  EXPECT_TRUE(Verify(root_, 2).ok());
  EXPECT_EQ(Check("legacy manifest"), Outcome::kOriginal);
  auto d = Describe(root_, 2);
  ASSERT_TRUE(d.ok()) << d.status().ToString();

  Piece(j, "w", 0)["row_offset"] = 1;
  WriteText(path_, j.dump(1) + "\n");
  EXPECT_EQ(Check("legacy manifest, row_offset 0 -> 1"), Outcome::kError);

  std::mt19937_64 rng(7);
  std::map<Outcome, int> seen;
  for (int i = 0; i < 1000; ++i) {
    size_t bit = static_cast<size_t>(rng() % (legacy.size() * 8));
    std::string text = legacy;
    text[bit / 8] = static_cast<char>(text[bit / 8] ^ (1 << (bit % 8)));
    WriteText(path_, text);
    ++seen[Check("legacy manifest, flip of bit " + std::to_string(bit % 8) + " of byte " + std::to_string(bit / 8))];
    if (HasFailure()) break;
  }
  EXPECT_EQ(seen[Outcome::kWrongData], 0);
  WriteText(path_, original_);
}

}  // namespace
}  // namespace tessera::ckpt
