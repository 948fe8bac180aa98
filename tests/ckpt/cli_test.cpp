// tests/ckpt/cli_test: `tessera ckpt ls|show|verify|restore|rm|tier|cost` on checkpoints made with the library:
// tables carry the right steps, tiers and states; a corrupt step makes verify fail naming the file.
// `import`: safetensors files in, a committed step out (restored and compared), its errors, and its
// progress bar (drawn on a terminal, absent on a pipe).
#include <gtest/gtest.h>

#include <array>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>

#include "ckpt/format.hpp"
#include "ckpt/test_util.hpp"
#include "tessera/ckpt.hpp"

namespace tessera::ckpt {
namespace {

using test::TempDir;

using test::Tessera;

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
  // Without --verify too: `ls` called step 30 "ok (latest)" while Latest() (a resuming job) skipped it.
  r = Tessera("--root " + d.path() + " ls");
  EXPECT_NE(r.out.find("CORRUPT"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("ok (latest)"), r.out.rfind("ok (latest)")) << r.out;
  EXPECT_NE(r.out.find("ok (latest)"), std::string::npos) << r.out;
  EXPECT_EQ(Latest(d.path())->step, 20);
  EXPECT_LT(r.out.find("ok (latest)"), r.out.find("\n30 ")) << "step 20 is the latest: " << r.out;
  r = Tessera("--root " + d.path() + " rm 30");
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_EQ(*ListSteps(d.path()), (std::vector<int64_t>{10, 20}));
  r = Tessera("--root " + d.path() + " show 99");
  EXPECT_EQ(r.rc, 3);  // not found (src/cli/exit_code.hpp)
  EXPECT_NE(r.out.find("step 99"), std::string::npos) << r.out;
}

// At the command line: a manifest edited after its commit (`"row_offset": 0` → `1`) fails
// `verify` naming the manifest, and `ls` moves "latest" to the previous step. A manifest of the previous
// format (no digest) verifies, flagged as unprotected.
TEST(Cli, VerifyRejectsAnEditedManifestAndFlagsAnUnprotectedOne) {
  TempDir d;
  for (int64_t s : {10, 20}) Save(d.path(), s);
  std::string m10 = d / "step-0000000010/manifest.json", m20 = d / "step-0000000020/manifest.json";
  test::ToLegacyManifest(m10);
  std::string text = test::ReadText(m20);
  size_t at = text.find("\"row_offset\": 0");
  ASSERT_NE(at, std::string::npos) << text;
  text[at + 14] = '1';
  std::ofstream(m20, std::ios::trunc) << text;

  auto r = Tessera("--root " + d.path() + " verify 10");
  EXPECT_EQ(r.rc, 0) << r.out;
  EXPECT_NE(r.out.find("ok, unprotected manifest"), std::string::npos) << r.out;
  r = Tessera("--root " + d.path() + " verify 20");
  EXPECT_EQ(r.rc, 1) << r.out;
  EXPECT_NE(r.out.find(m20), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("fails its checksum"), std::string::npos) << r.out;
  r = Tessera("--root " + d.path() + " ls");
  EXPECT_NE(r.out.find("CORRUPT"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("ok (unprotected manifest) (latest)"), std::string::npos) << r.out;
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
  EXPECT_EQ(r.rc, 3);  // not found
  EXPECT_NE(r.out.find("/nonexistent.yaml"), std::string::npos) << r.out;
}

using test::Bytes;
using test::WriteSafetensors;

TEST(Cli, ImportSafetensorsAsAStep) {
  TempDir root, model;
  auto embed = test::Fill(1, 0, 3 << 20);  // 12 MiB: several write chunks
  std::vector<uint16_t> norm(64, 0x3f80);  // bf16 1.0
  std::vector<int64_t> pos{7};
  WriteSafetensors(
      model / "model-00001-of-00002.safetensors",
      {{"embed.weight", "F32", {3 << 10, 1 << 10}, Bytes(embed)}, {"norm.weight", "BF16", {64}, Bytes(norm)}});
  WriteSafetensors(model / "model-00002-of-00002.safetensors", {{"position", "I64", {}, Bytes(pos)}});
  std::ofstream(model / "config.json") << "{}";  // not a safetensors file: ignored
  auto r = Tessera("--root " + root.path() + " import 7 " + model.path());
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_NE(r.out.find("step 7 committed"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("3 tensors"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("2 files"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find('\r'), std::string::npos) << "no progress bar when stderr is not a terminal";
  EXPECT_EQ(r.out.find("\033["), std::string::npos);
  ASSERT_TRUE(Verify(root.path(), 7).ok());
  std::vector<float> e(embed.size());
  std::vector<uint16_t> n(64);
  int64_t p = 0;
  Status s = Restore(root.path(), 7,
                     {{"embed.weight", e.data(), e.size() * 4}, {"norm.weight", n.data(), 128}, {"position", &p, 8}});
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_TRUE(e == embed);
  EXPECT_TRUE(n == norm);
  EXPECT_EQ(p, 7);
  r = Tessera("--root " + root.path() + " show 7");
  EXPECT_NE(r.out.find("[3072, 1024]"), std::string::npos) << r.out;

  // The same step again: refused, naming the step.
  r = Tessera("--root " + root.path() + " import 7 " + model.path());
  EXPECT_EQ(r.rc, 2);  // bad input
  EXPECT_NE(r.out.find("step 7 is already committed"), std::string::npos) << r.out;
  // A dtype checkpoints do not store, a name in two files, a file that is not safetensors: each names the file.
  WriteSafetensors(root / "bool.safetensors", {{"mask", "BOOL", {4}, "\1\0\1\1"}});
  r = Tessera("--root " + root.path() + " import 8 " + root.path() + "/bool.safetensors");
  EXPECT_EQ(r.rc, 2);
  EXPECT_NE(r.out.find(root / "bool.safetensors"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("bool.safetensors: tensor 'mask' has dtype BOOL"), std::string::npos) << r.out;
  WriteSafetensors(root / "dup.safetensors", {{"position", "I64", {}, Bytes(pos)}});
  r = Tessera("--root " + root.path() + " import 8 " + model.path() + " " + root.path() + "/dup.safetensors");
  EXPECT_EQ(r.rc, 2);
  EXPECT_NE(
      r.out.find("dup.safetensors: tensor 'position' is also in " + model.path() + "/model-00002-of-00002.safetensors"),
      std::string::npos)
      << r.out;
  r = Tessera("--root " + root.path() + " import 8 " + model.path() + "/config.json");
  EXPECT_EQ(r.rc, 2);
  EXPECT_NE(r.out.find("config.json"), std::string::npos) << r.out;
  EXPECT_EQ(*ListSteps(root.path()), std::vector<int64_t>{7}) << "failed imports commit nothing";

  // On a terminal (script(1) gives the command a pty) the bar is drawn, reaches 100%, then is cleared.
  if (std::system("command -v script >/dev/null 2>&1") != 0) GTEST_SKIP() << "no script(1) (util-linux) for a pty";
  std::string cmd = "script -qec '" + test::TesseraBin() + " ckpt --root " + root.path() + " import 9 " + model.path() +
                    "' /dev/null";
  FILE* pipe = ::popen(cmd.c_str(), "r");
  std::string tty;
  std::array<char, 4096> buf;
  for (size_t k; (k = fread(buf.data(), 1, buf.size(), pipe)) > 0;) tty.append(buf.data(), k);
  EXPECT_EQ(::pclose(pipe), 0) << tty;
  EXPECT_NE(tty.find("\rsave step 9 ["), std::string::npos) << tty;
  EXPECT_NE(tty.find("100%"), std::string::npos) << tty;
  EXPECT_NE(tty.find("\r\033[K"), std::string::npos) << "the bar is cleared before the summary: " << tty;
  EXPECT_NE(tty.find("step 9 committed"), std::string::npos) << tty;
}

}  // namespace
}  // namespace tessera::ckpt
