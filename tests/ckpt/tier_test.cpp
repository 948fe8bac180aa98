// tests/ckpt/tier_test: the cold tier (zstd archives + index), staging back, the retention policy (YAML and
// its decisions at given times), and crash safety of demotion: a child SIGKILLed at each point of a
// demotion leaves every step restorable from some tier, and a rerun finishes the work.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "ckpt/format.hpp"
#include "ckpt/test_util.hpp"
#include "ckpt/tiers.hpp"
#include "tessera/ckpt.hpp"

namespace tessera::ckpt {
namespace {

using test::ReadText;
using test::TempDir;
constexpr int64_t kRows = 512;

void SaveSteps(const std::string& root, std::vector<int64_t> steps, int world = 2) {
  for (int64_t step : steps) {
    std::vector<std::unique_ptr<CheckpointWriter>> ws;
    std::vector<std::vector<float>> data(static_cast<size_t>(world));
    for (int r = 0; r < world; ++r) {
      auto w = CheckpointWriter::Open(root, r, world);
      ASSERT_TRUE(w.ok());
      auto [b, n] = EvenRows(kRows, r, world);
      data[r] = test::Fill(static_cast<uint64_t>(step), static_cast<uint64_t>(b * 256), static_cast<uint64_t>(n * 256));
      ASSERT_TRUE(
          (*w)->Save(step, {{"w", DType::kFloat32, {n, 256}, data[r].data(), Sharding::kRowSharded, b, kRows}}).ok());
      ws.push_back(std::move(*w));
    }
    for (int r = world - 1; r >= 0; --r) ASSERT_TRUE(ws[r]->Wait().ok());
  }
}

// Stages the step into hot if needed and checks every value.
void ExpectRestorable(const TierConfig& t, int64_t step) {
  Status s = Stage(t, step);
  ASSERT_TRUE(s.ok()) << s.ToString();
  std::vector<float> out(kRows * 256);
  s = Restore(t.hot, step, {{"w", out.data(), out.size() * 4}});
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(out, test::Fill(static_cast<uint64_t>(step), 0, out.size())) << "step " << step;
}

std::vector<Tier> TiersOf(const TierConfig& t, int64_t step) {
  auto all = ListAll(t);
  if (!all.ok()) return {};
  std::vector<StepLocation> v = std::move(all).value();
  for (const auto& l : v)
    if (l.step == step) return l.tiers;
  return {};
}

TEST(ColdTier, DemoteStageAndCompression) {
#ifndef TESSERA_HAVE_ZSTD
  GTEST_SKIP() << "built without zstd";
#endif
  TempDir hot, cold;
  TierConfig t{hot.path(), "", cold.path()};
  SaveSteps(hot.path(), {1, 2});
  ASSERT_TRUE(Demote(t, 1, Tier::kCold, true).ok());
  EXPECT_EQ(TiersOf(t, 1), std::vector<Tier>{Tier::kCold});
  EXPECT_TRUE(std::filesystem::exists(cold / "step-0000000001.index.json"));
  // Values are small integers × 0.5: zstd must shrink them.
  EXPECT_LT(std::filesystem::file_size(cold / "step-0000000001.tsa"), kRows * 256 * 4);
  // Reading from cold needs the explicit staging step.
  std::vector<float> out(kRows * 256);
  EXPECT_EQ(Restore(hot.path(), 1, {{"w", out.data(), out.size() * 4}}).code(), Code::kNotFound);
  ExpectRestorable(t, 1);
  EXPECT_EQ(TiersOf(t, 1), (std::vector<Tier>{Tier::kHot, Tier::kCold}));
}

TEST(ColdTier, CorruptArchiveIsDetectedNamingTheArchive) {
#ifndef TESSERA_HAVE_ZSTD
  GTEST_SKIP() << "built without zstd";
#endif
  TempDir hot, cold;
  TierConfig t{hot.path(), "", cold.path()};
  SaveSteps(hot.path(), {5});
  ASSERT_TRUE(Demote(t, 5, Tier::kCold, true).ok());
  std::string arch = cold / "step-0000000005.tsa";
  {
    std::fstream f(arch, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(std::filesystem::file_size(arch) / 2));
    f.put('\x55');
  }
  Status s = Stage(t, 5);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find(arch), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("step 5"), std::string::npos) << s.message();
  EXPECT_FALSE(std::filesystem::exists(hot / "step-0000000005/manifest.json"));
}

// The manifest's digest travels into the cold tier's index (which embeds the manifest as a JSON object)
// and back, and is checked there: a row_offset changed in the index is refused when staging, naming the
// index. A manifest of the previous format (no digest) stays in that format through the tier.
TEST(ColdTier, ManifestDigestTravelsAndIsChecked) {
#ifndef TESSERA_HAVE_ZSTD
  GTEST_SKIP() << "built without zstd";
#endif
  using json = nlohmann::json;
  TempDir hot, cold;
  TierConfig t{hot.path(), "", cold.path()};
  SaveSteps(hot.path(), {6, 7});
  const std::string manifest6 = ReadText(hot / "step-0000000006/manifest.json");
  ASSERT_TRUE(json::parse(manifest6).contains("manifest_crc32c"));
  ASSERT_TRUE(Demote(t, 6, Tier::kCold, true).ok());
  const std::string index = cold / "step-0000000006.index.json";
  json j = json::parse(ReadText(index));
  EXPECT_EQ(j["manifest"]["manifest_crc32c"], json::parse(manifest6)["manifest_crc32c"]);
  ExpectRestorable(t, 6);
  EXPECT_EQ(ReadText(hot / "step-0000000006/manifest.json"), manifest6) << "staged back byte for byte";

  ASSERT_TRUE(Remove(hot.path(), 6).ok());
  j["manifest"]["tensors"][0]["pieces"][1]["row_offset"] = kRows / 2 - 1;
  std::ofstream(index, std::ios::trunc) << j.dump(1);
  Status s = Stage(t, 6);
  EXPECT_EQ(s.code(), Code::kCorrupt) << s.ToString();
  EXPECT_NE(s.message().find(index), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("fails its checksum"), std::string::npos) << s.message();
  EXPECT_FALSE(std::filesystem::exists(hot / "step-0000000006/manifest.json"));

  test::ToLegacyManifest(hot / "step-0000000007/manifest.json");
  ASSERT_TRUE(Demote(t, 7, Tier::kCold, true).ok());
  EXPECT_EQ(json::parse(ReadText(cold / "step-0000000007.index.json"))["manifest"]["format"], "tessera-ckpt/1");
  ExpectRestorable(t, 7);
  auto d = Describe(hot.path(), 7);
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_FALSE(d->manifest_protected);
}

// Verifying a cold copy applies the hot tier's checks (the shard header and every piece's CRC32C, not only
// the file's): with a manifest of the previous format (no digest to catch the edit), a piece's CRC32C
// changed in the index is reported by VerifyCopy naming the member and the tensor, as staging would.
TEST(ColdTier, VerifyOfACopyChecksEveryPiece) {
#ifndef TESSERA_HAVE_ZSTD
  GTEST_SKIP() << "built without zstd";
#endif
  using json = nlohmann::json;
  TempDir hot, cold;
  TierConfig t{hot.path(), "", cold.path()};
  SaveSteps(hot.path(), {8});
  test::ToLegacyManifest(hot / "step-0000000008/manifest.json");
  ASSERT_TRUE(Demote(t, 8, Tier::kCold, true).ok());
  const std::string index = cold / "step-0000000008.index.json";
  json j = json::parse(ReadText(index));
  j["manifest"]["tensors"][0]["pieces"][1]["crc32c"] = "00000000";
  std::ofstream(index, std::ios::trunc) << j.dump(1);
  auto store = MakeColdStore(cold.path());
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  auto m = (*store)->ReadManifest(8);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  Status v = (*store)->VerifyCopy(*m, {});
  EXPECT_EQ(v.code(), Code::kCorrupt) << v.ToString();
  EXPECT_NE(v.message().find("member rank-00001-of-00002.safetensors holds tensor 'w'"), std::string::npos)
      << v.message();
  EXPECT_FALSE(Stage(t, 8).ok());
}

TEST(ColdTier, HotCorruptionIsNotPropagated) {
#ifndef TESSERA_HAVE_ZSTD
  GTEST_SKIP() << "built without zstd";
#endif
  TempDir hot, cold;
  TierConfig t{hot.path(), "", cold.path()};
  SaveSteps(hot.path(), {3});
  std::string f = hot / "step-0000000003/rank-00000-of-00002.safetensors";
  std::filesystem::resize_file(f, std::filesystem::file_size(f) - 1);
  Status s = Demote(t, 3, Tier::kCold, true);
  EXPECT_EQ(s.code(), Code::kCorrupt);
  EXPECT_NE(s.message().find(f), std::string::npos) << s.message();
  EXPECT_TRUE(TiersOf(t, 3) == std::vector<Tier>{Tier::kHot}) << "the source is kept";
}

TEST(Retention, PolicyFileAndErrors) {
  TempDir d;
  std::ofstream(d / "p.yaml")
      << "keep_hot: 3\ndemote_to_warm_after: 2h\ndemote_to_cold_after: 7d\nexpire_after: 30d\nkeep_every: 1000\n";
  auto p = RetentionPolicy::Load(d / "p.yaml");
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_EQ(p->keep_hot, 3);
  EXPECT_EQ(p->demote_to_warm_after, 7200);
  EXPECT_EQ(p->demote_to_cold_after, 7 * 86400);
  EXPECT_EQ(p->expire_after, 30 * 86400);
  EXPECT_EQ(p->keep_every, 1000);
  std::ofstream(d / "bad.yaml") << "keep_hot: 3\nexpire_after: soon\n";
  auto bad = RetentionPolicy::Load(d / "bad.yaml");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("expire_after"), std::string::npos) << bad.status().message();
  EXPECT_NE(bad.status().message().find("bad.yaml"), std::string::npos);
  std::ofstream(d / "typo.yaml") << "keep_hott: 3\n";
  EXPECT_NE(RetentionPolicy::Load(d / "typo.yaml").status().message().find("keep_hott"), std::string::npos);
}

TEST(Retention, DemotesExpiresAndKeepsEvery) {
#ifndef TESSERA_HAVE_ZSTD
  GTEST_SKIP() << "built without zstd";
#endif
  TempDir hot, cold;
  TierConfig t{hot.path(), "", cold.path()};
  SaveSteps(hot.path(), {100, 200, 300, 400, 500});
  auto listed = ListAll(t);
  ASSERT_TRUE(listed.ok());
  int64_t created = listed.value().front().created_unix;
  RetentionPolicy p;
  p.keep_hot = 2;
  p.demote_to_cold_after = 3600;
  p.expire_after = 10 * 86400;
  p.keep_every = 200;
  // One hour and a bit later: everything but the newest two goes cold.
  auto a = ApplyRetention(t, p, created + 3700);
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  EXPECT_EQ(a->size(), 3u);
  for (const auto& act : *a) EXPECT_TRUE(act.status.ok()) << act.status.ToString();
  for (int64_t s : {100, 200, 300}) EXPECT_EQ(TiersOf(t, s), std::vector<Tier>{Tier::kCold}) << s;
  for (int64_t s : {400, 500}) EXPECT_EQ(TiersOf(t, s), std::vector<Tier>{Tier::kHot}) << s;
  // Rerun: nothing left to do.
  EXPECT_TRUE(ApplyRetention(t, p, created + 3700)->empty());
  // Eleven days later: 100 and 300 expire; 200 is a multiple of keep_every; the newest two stay.
  auto dry = ApplyRetention(t, p, created + 11 * 86400, /*dry_run=*/true);
  EXPECT_EQ(dry->size(), 2u);
  EXPECT_EQ(TiersOf(t, 100), std::vector<Tier>{Tier::kCold}) << "a dry run changes nothing";
  a = ApplyRetention(t, p, created + 11 * 86400);
  std::vector<int64_t> left;
  auto all = ListAll(t);
  ASSERT_TRUE(all.ok());
  std::vector<StepLocation> v = std::move(all).value();
  for (const auto& l : v) left.push_back(l.step);
  EXPECT_EQ(left, (std::vector<int64_t>{200, 400, 500}));
  ExpectRestorable(t, 200);
}

// A child demotes steps 1..3 to cold and is SIGKILLed at `point` (during the demotion of step 2).
class KillMidDemotion : public ::testing::TestWithParam<const char*> {};

TEST_P(KillMidDemotion, EveryStepStaysRestorable) {
#ifndef TESSERA_HAVE_ZSTD
  GTEST_SKIP() << "built without zstd";
#endif
  TempDir hot, cold;
  TierConfig t{hot.path(), "", cold.path()};
  SaveSteps(hot.path(), {1, 2, 3});
  std::string point = GetParam();
  pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    int64_t current = 0;
    testing::SetCrashHook([&](const char* p) {
      if (current == 2 && point == p) ::kill(::getpid(), SIGKILL);
    });
    if (point == "mid-archive")
      testing::SetWriteHook([&](const std::string& path, uint64_t off, size_t) {
        if (path.find("step-0000000002.tsa") != std::string::npos && off > 0) ::kill(::getpid(), SIGKILL);
        return 0;
      });
    for (current = 1; current <= 3; ++current)
      if (!Demote(t, current, Tier::kCold, true).ok()) ::_exit(3);
    ::_exit(4);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << "the kill point was not reached: " << status;
  for (int64_t s = 1; s <= 3; ++s) EXPECT_FALSE(TiersOf(t, s).empty()) << "step " << s << " is in no tier";
  // Rerunning finishes the moves (idempotent), and everything restores.
  for (int64_t s = 1; s <= 3; ++s) {
    Status st = Demote(t, s, Tier::kCold, true);
    ASSERT_TRUE(st.ok()) << st.ToString();
    EXPECT_EQ(TiersOf(t, s), std::vector<Tier>{Tier::kCold});
  }
  for (int64_t s = 1; s <= 3; ++s) ExpectRestorable(t, s);
}
INSTANTIATE_TEST_SUITE_P(Points, KillMidDemotion,
                         ::testing::Values("mid-archive", "demote:copied", "demote:verified", "demote:marked",
                                           "demote:deleted"),
                         [](const auto& info) {
                           std::string s = info.param;
                           for (auto& c : s)
                             if (!isalnum(static_cast<unsigned char>(c))) c = '_';
                           return s;
                         });

}  // namespace
}  // namespace tessera::ckpt
