// tests/ckpt/cli_test: `tessera ckpt ls|show|verify|restore|rm|tier|cost` on checkpoints made with the library:
// tables carry the right steps, tiers and states; a corrupt step makes verify fail naming the file.
#include <gtest/gtest.h>

#include <array>
#include <cstdio>
#include <fstream>

#include "ckpt/test_util.hpp"
#include "tessera/ckpt.hpp"

namespace tessera::ckpt {
namespace {

using test::TempDir;

struct Run {
  int rc;
  std::string out;
};
Run Tessera(const std::string& args) {
  std::string cmd = test::TesseraBin() + " ckpt " + args + " 2>&1";
  FILE* p = ::popen(cmd.c_str(), "r");
  std::string out;
  std::array<char, 4096> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) out.append(buf.data(), n);
  int st = ::pclose(p);
  return {WEXITSTATUS(st), out};
}

void Save(const std::string& root, int64_t step) {
  auto w = CheckpointWriter::Open(root, 0, 1);
  ASSERT_TRUE(w.ok());
  auto v = test::Fill(static_cast<uint64_t>(step), 0, 4096);
  ASSERT_TRUE((*w)->Save(step, {{"layer.weight", dtype::kBfloat16, {64, 128}, v.data()}}).ok());
  ASSERT_TRUE((*w)->Wait().ok());
}

TEST(Cli, LsShowVerifyRm) {
  TempDir d;
  for (int64_t s : {10, 20, 30}) Save(d.path(), s);
  auto r = Tessera("--root " + d.path() + " ls");
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_NE(r.out.find("STEP"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("30 "), std::string::npos);
  EXPECT_NE(r.out.find("ok (latest)"), std::string::npos) << r.out;
  r = Tessera("--root " + d.path() + " show 20");
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_NE(r.out.find("layer.weight"), std::string::npos);
  EXPECT_NE(r.out.find("bfloat16"), std::string::npos);
  EXPECT_NE(r.out.find("[64, 128]"), std::string::npos) << r.out;
  EXPECT_EQ(Tessera("--root " + d.path() + " verify").rc, 0);
  // Corrupt step 30: verify fails naming the file; ls marks it and "latest" moves to 20.
  std::string f = d / "step-0000000030/rank-00000-of-00001.safetensors";
  {
    std::fstream s(f, std::ios::in | std::ios::out | std::ios::binary);
    s.seekp(-3, std::ios::end);
    s.put('\x7f');
  }
  r = Tessera("--root " + d.path() + " verify 30");
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.out.find(f), std::string::npos) << r.out;
  r = Tessera("--root " + d.path() + " ls --verify");
  EXPECT_NE(r.out.find("CORRUPT"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("verified (latest)"), std::string::npos) << r.out;
  r = Tessera("--root " + d.path() + " rm 30");
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_EQ(*ListSteps(d.path()), (std::vector<int64_t>{10, 20}));
  r = Tessera("--root " + d.path() + " show 99");
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.out.find("step 99"), std::string::npos) << r.out;
}

TEST(Cli, TierRestoreAndCost) {
#ifndef TESSERA_HAVE_ZSTD
  GTEST_SKIP() << "built without zstd";
#endif
  TempDir d, cold, other;
  for (int64_t s : {1, 2, 3}) Save(d.path(), s);
  std::ofstream(d / "policy.yaml") << "keep_hot: 1\ndemote_to_cold_after: 0s\n";
  std::string tiers = "--root " + d.path() + " --cold " + cold.path();
  auto r = Tessera(tiers + " tier --policy " + d.path() + "/policy.yaml --now 9999999999");
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_NE(r.out.find("demote hot→cold"), std::string::npos) << r.out;
  r = Tessera(tiers + " ls");
  EXPECT_NE(r.out.find("archived"), std::string::npos) << r.out;
  r = Tessera(tiers + " restore 1 --to " + other.path());
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_TRUE(Verify(other.path(), 1).ok());
  std::ofstream(d / "prices.yaml") << "currency: USD\nhot: {per_gib_month: 0.10}\nwarm: {per_gib_month: 0.02}\n"
                                      "cold: {per_gib_month: 0.001, min_days: 180}\n";
  r = Tessera(tiers + " cost --prices " + d.path() + "/prices.yaml --months 12");
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_NE(r.out.find("baseline: all hot"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("38%"), std::string::npos) << r.out;
  r = Tessera(tiers + " tier --policy /nonexistent.yaml");
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.out.find("/nonexistent.yaml"), std::string::npos) << r.out;
}

}  // namespace
}  // namespace tessera::ckpt
