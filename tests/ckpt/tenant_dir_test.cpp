// tests/ckpt/tenant_dir_test: a checkpoint root is the job's, and what a job puts in it cannot hurt a reader
// of it (the daemon reads job roots as root): a FIFO under a checkpoint file's name is refused at once instead
// of hanging `ls`, `verify`, `restore` and Latest; a manifest nested 100,000 deep is corrupt, not a crash;
// symbolic links never lead `rm`, demotion or `restore --to` outside their root; of two imports of one step
// started together exactly one commits.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <future>
#include <thread>

#include "ckpt/format.hpp"
#include "ckpt/import.hpp"
#include "ckpt/internal.hpp"
#include "ckpt/test_util.hpp"
#include "ckpt/tiers.hpp"
#include "tessera/ckpt.hpp"

namespace tessera::ckpt {
namespace {

using test::TempDir;
using test::Tessera;
using namespace std::chrono_literals;

void Save(const std::string& root, int64_t step) {
  auto w = CheckpointWriter::Open(root, 0, 1);
  ASSERT_TRUE(w.ok());
  auto v = test::Fill(static_cast<uint64_t>(step), 0, 4096);
  ASSERT_TRUE((*w)->Save(step, {{"layer.weight", dtype::kFloat32, {64, 64}, v.data()}}).ok());
  ASSERT_TRUE((*w)->Wait().ok());
}

std::string StepDir(const std::string& root, int64_t step) { return root + "/" + StepDirName(step); }
std::string Shard(const std::string& root, int64_t step) {
  return StepDir(root, step) + "/rank-00000-of-00001.safetensors";
}
bool Exists(const std::string& p) {
  struct stat st {};
  return ::lstat(p.c_str(), &st) == 0;
}

// A FIFO named manifest.json in one step directory hung every reader of the root (open blocks until a writer
// comes). If a call below does hang, the FIFO is opened for writing and closed, so the test fails, not hangs.
TEST(TenantDir, FifoUnderACheckpointNameIsRefusedNotWaitedOn) {
  TempDir d;
  Save(d.path(), 10);
  Save(d.path(), 20);
  ASSERT_EQ(::mkdir(StepDir(d.path(), 30).c_str(), 0755), 0);
  const std::string fifo = StepDir(d.path(), 30) + "/" + kManifestName;
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0644), 0);
  auto latest = std::async(std::launch::async, [&] { return Latest(d.path()); });
  if (latest.wait_for(20s) != std::future_status::ready) {
    ::close(::open(fifo.c_str(), O_WRONLY | O_NONBLOCK));
    FAIL() << "Latest() blocked on the FIFO";
  }
  auto l = latest.get();
  ASSERT_TRUE(l.ok()) << l.status().ToString();
  EXPECT_EQ(l->step, 20);
  ASSERT_EQ(l->warnings.size(), 1u);
  EXPECT_NE(l->warnings[0].find(fifo + " is a FIFO, not a regular file"), std::string::npos) << l->warnings[0];
  // The same at the command line: each ends (timeout(1) would give 124) and names the FIFO where it reports it.
  auto r = Tessera("--root " + d.path() + " ls", 20);
  EXPECT_EQ(r.rc, 0) << r.out;
  EXPECT_NE(r.out.find("CORRUPT"), std::string::npos) << r.out;
  r = Tessera("--root " + d.path() + " verify 30", 20);
  EXPECT_EQ(r.rc, 1) << r.out;
  EXPECT_NE(r.out.find("is a FIFO"), std::string::npos) << r.out;
  r = Tessera("--root " + d.path() + " verify", 20);
  EXPECT_EQ(r.rc, 1) << r.out;
  TempDir to;
  r = Tessera("--root " + d.path() + " restore 20 --to " + to.path(), 20);
  EXPECT_EQ(r.rc, 0) << r.out;
  EXPECT_TRUE(Verify(to.path(), 20).ok());
  // A FIFO in place of a shard: verify names it instead of reading from it.
  Save(d.path(), 40);
  ASSERT_EQ(::unlink(Shard(d.path(), 40).c_str()), 0);
  ASSERT_EQ(::mkfifo(Shard(d.path(), 40).c_str(), 0644), 0);
  r = Tessera("--root " + d.path() + " verify 40", 20);
  EXPECT_EQ(r.rc, 1) << r.out;
  EXPECT_NE(r.out.find(Shard(d.path(), 40) + " is a FIFO"), std::string::npos) << r.out;
}

// A manifest of 100,000 nested arrays overflowed the stack of whatever quoted it in an error.
TEST(TenantDir, DeeplyNestedManifestIsCorruptNotACrash) {
  TempDir d;
  Save(d.path(), 10);
  ASSERT_EQ(::mkdir(StepDir(d.path(), 20).c_str(), 0755), 0);
  std::ofstream(StepDir(d.path(), 20) + "/" + kManifestName)
      << "{\"format\":" << std::string(100000, '[') << std::string(100000, ']') << "}";
  auto m = LoadManifest(d.path(), 20);
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), Code::kCorrupt);
  EXPECT_NE(m.status().message().find("nests deeper than 64 levels"), std::string::npos) << m.status().message();
  auto r = Tessera("--root " + d.path() + " ls");
  EXPECT_EQ(r.rc, 0) << r.out;
  EXPECT_NE(r.out.find("CORRUPT"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("\n20 "), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find(" days"), std::string::npos) << "a manifest that does not read has no age: " << r.out;
  r = Tessera("--root " + d.path() + " show 20");
  EXPECT_EQ(r.rc, 1) << r.out;
  EXPECT_NE(r.out.find("nests deeper"), std::string::npos) << r.out;
  // Restoring it names the corruption (it said "committed in no tier").
  TempDir to;
  for (const std::string& args : {std::string(" restore 20"), " restore 20 --to " + to.path()}) {
    r = Tessera("--root " + d.path() + args);
    EXPECT_EQ(r.rc, 1) << args << ": " << r.out;
    EXPECT_NE(r.out.find("nests deeper"), std::string::npos) << args << ": " << r.out;
  }
}

// `ckpt rm` followed a symlinked step directory and deleted the manifest of a checkpoint outside the root.
TEST(TenantDir, RmNeverFollowsALinkedStepDirectoryOutOfItsRoot) {
  TempDir d, outside;
  Save(outside.path(), 10);
  ASSERT_EQ(::symlink(StepDir(outside.path(), 10).c_str(), StepDir(d.path(), 10).c_str()), 0);
  auto r = Tessera("--root " + d.path() + " rm 10");
  EXPECT_NE(r.rc, 0) << r.out;
  EXPECT_NE(r.out.find("symbolic link"), std::string::npos) << r.out;
  Status s = Remove(d.path(), 10);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("symbolic link"), std::string::npos) << s.ToString();
  EXPECT_TRUE(Exists(StepDir(outside.path(), 10) + "/" + kManifestName)) << "the checkpoint outside was uncommitted";
  EXPECT_TRUE(Verify(outside.path(), 10).ok());
}

// Tier demotion with delete_source did the same through the hot copy's step directory.
TEST(TenantDir, DemotionNeverFollowsALinkedStepDirectoryOutOfItsRoot) {
  TempDir d, outside, cold;
  Save(outside.path(), 10);
  ASSERT_EQ(::symlink(StepDir(outside.path(), 10).c_str(), StepDir(d.path(), 10).c_str()), 0);
  TierConfig t;
  t.hot = d.path();
  t.cold = cold.path();
  Status s = Demote(t, 10, Tier::kCold, /*delete_source=*/true, {});
  if (s.code() == Code::kUnsupported) GTEST_SKIP() << s.message();
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("symbolic link"), std::string::npos) << s.ToString();
  EXPECT_TRUE(Exists(StepDir(outside.path(), 10) + "/" + kManifestName)) << "the checkpoint outside was uncommitted";
}

// `restore STEP --to DIR` wrote through a link already at the shard's path, overwrote its target outside DIR,
// and said "ready". DIR is one another user can write (world-writable); as root the planted links belong to
// nobody, as the other user's would.
TEST(TenantDir, RestoreToADirectoryNeverWritesThroughAPlantedLink) {
  TempDir d, to, outside;
  Save(d.path(), 10);
  ASSERT_EQ(::chmod(to.path().c_str(), 0777), 0);
  const std::string victim = outside / "victim";
  std::ofstream(victim) << "precious";
  ASSERT_EQ(::mkdir(StepDir(to.path(), 10).c_str(), 0777), 0);
  ASSERT_EQ(::symlink(victim.c_str(), Shard(to.path(), 10).c_str()), 0);
  if (::geteuid() == 0) {
    ASSERT_EQ(::lchown(Shard(to.path(), 10).c_str(), 65534, 65534), 0);
  }
  auto r = Tessera("--root " + d.path() + " restore 10 --to " + to.path());
  EXPECT_EQ(r.rc, 0) << r.out;
  EXPECT_EQ(test::ReadText(victim), "precious") << "the restore wrote through the link";
  struct stat st {};
  ASSERT_EQ(::lstat(Shard(to.path(), 10).c_str(), &st), 0);
  EXPECT_TRUE(S_ISREG(st.st_mode)) << "the link was not replaced by the restored file";
  EXPECT_TRUE(Verify(to.path(), 10).ok());

  // The step directory itself a link to a directory outside: refused, nothing written there.
  TempDir to2, out2;
  ASSERT_EQ(::chmod(to2.path().c_str(), 0777), 0);
  ASSERT_EQ(::symlink(out2.path().c_str(), StepDir(to2.path(), 10).c_str()), 0);
  if (::geteuid() == 0) {
    ASSERT_EQ(::lchown(StepDir(to2.path(), 10).c_str(), 65534, 65534), 0);
  }
  r = Tessera("--root " + d.path() + " restore 10 --to " + to2.path());
  EXPECT_NE(r.rc, 0) << r.out;
  EXPECT_NE(r.out.find("symbolic link"), std::string::npos) << r.out;
  EXPECT_FALSE(Exists(out2 / "rank-00000-of-00001.safetensors")) << "the restore wrote outside " << to2.path();
  EXPECT_FALSE(Exists(out2 / kManifestName));
}

// A step directory checked and then used by path could be swapped for a link in between (the root is the job's,
// or a `restore --to` directory others can write). Each command opens the step directory once and works beneath
// that descriptor: here the directory is swapped for a link to a directory outside right after that open (the
// crash hooks), and nothing is written, committed or removed outside.
TEST(TenantDir, AStepDirectorySwappedForALinkMidCommandIsNeverFollowed) {
  TempDir d, to, outside;
  Save(d.path(), 10);
  Save(outside.path(), 10);  // a committed checkpoint outside, which a followed link would overwrite or remove
  const std::string out_step = StepDir(outside.path(), 10), out_manifest = out_step + "/" + kManifestName;
  const std::string out_manifest_text = test::ReadText(out_manifest);
  auto swap_at = [&](const std::string& point, const std::string& root) {
    testing::SetCrashHook([point, root, out_step](const char* p) {
      if (point != p) return;
      ASSERT_EQ(::rename(StepDir(root, 10).c_str(), (root + "/aside").c_str()), 0);
      ASSERT_EQ(::symlink(out_step.c_str(), StepDir(root, 10).c_str()), 0);
    });
  };
  auto unswap = [&](const std::string& root) {
    testing::SetCrashHook(nullptr);
    ASSERT_EQ(::unlink(StepDir(root, 10).c_str()), 0);
    ASSERT_EQ(::rename((root + "/aside").c_str(), StepDir(root, 10).c_str()), 0);
  };
  auto m = LoadManifest(d.path(), 10);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  auto out = MakeHotStore(to.path());

  // restore --to: the shard is written into the directory opened, not through the link.
  const std::string out_shard_text = test::ReadText(Shard(outside.path(), 10));
  ASSERT_EQ(::truncate(Shard(outside.path(), 10).c_str(), 0), 0);  // what a write through the link would fill
  swap_at("hot-put:opened", to.path());
  Status s = out->Put(*m, StepDir(d.path(), 10), {});
  EXPECT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(test::ReadText(Shard(outside.path(), 10)), "") << "the copy wrote through the swapped-in link";
  EXPECT_EQ(test::ReadText(to / "aside/rank-00000-of-00001.safetensors"), test::ReadText(Shard(d.path(), 10)));
  s = out->Commit(*m);  // the link is still there: refused
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("symbolic link"), std::string::npos) << s.ToString();
  unswap(to.path());
  std::ofstream(Shard(outside.path(), 10), std::ios::binary) << out_shard_text;

  // The commit: the manifest lands in the directory opened.
  ASSERT_TRUE(::unlink(out_manifest.c_str()) == 0);
  swap_at("hot-commit:opened", to.path());
  s = out->Commit(*m);
  EXPECT_TRUE(s.ok()) << s.ToString();
  EXPECT_FALSE(Exists(out_manifest)) << "the commit wrote a manifest through the swapped-in link";
  EXPECT_TRUE(Exists(to / "aside/manifest.json"));
  unswap(to.path());
  std::ofstream(out_manifest, std::ios::binary) << out_manifest_text;
  EXPECT_TRUE(Verify(to.path(), 10).ok());
  ASSERT_TRUE(Verify(outside.path(), 10).ok());

  // rm: the manifest is unlinked in the directory opened and the tree removed without following the link.
  swap_at("remove:opened", d.path());
  s = Remove(d.path(), 10);
  testing::SetCrashHook(nullptr);
  EXPECT_TRUE(s.ok()) << s.ToString();
  EXPECT_TRUE(Exists(out_manifest)) << "rm uncommitted the checkpoint outside through the swapped-in link";
  EXPECT_TRUE(Verify(outside.path(), 10).ok());
  EXPECT_FALSE(Exists(StepDir(d.path(), 10))) << "the link was not removed";
  EXPECT_FALSE(Exists(d / "aside/manifest.json")) << "the step opened was not uncommitted";
}

// Two imports of one step started together both said "committed" (one's data replaced the other's, or the
// result mixed one's manifest with the other's shard). Exactly one commits; the other is refused naming the step.
TEST(TenantDir, OfTwoConcurrentImportsOfAStepExactlyOneCommits) {
  TempDir root, a, b;
  auto va = test::Fill(1, 0, 2 << 20), vb = test::Fill(2, 0, 2 << 20);  // 8 MiB each: the imports overlap
  test::WriteSafetensors(a / "a.safetensors", {{"w", "F32", {2 << 10, 1 << 10}, test::Bytes(va)}});
  test::WriteSafetensors(b / "b.safetensors", {{"w", "F32", {2 << 10, 1 << 10}, test::Bytes(vb)}});
  for (int round = 0; round < 3; ++round) {
    const int64_t step = 100 + round;
    std::promise<void> go;
    std::shared_future<void> start = go.get_future().share();
    auto run = [&](const std::string& dir) {
      start.wait();
      return ImportSafetensors(root.path(), step, {dir}, {});
    };
    auto fa = std::async(std::launch::async, run, a.path());
    auto fb = std::async(std::launch::async, run, b.path());
    go.set_value();
    auto ra = fa.get();
    auto rb = fb.get();
    ASSERT_NE(ra.ok(), rb.ok()) << "round " << round << ": " << (ra.ok() ? "ok" : ra.status().ToString()) << " / "
                                << (rb.ok() ? "ok" : rb.status().ToString());
    const Status& lost = ra.ok() ? rb.status() : ra.status();
    EXPECT_NE(lost.message().find("step " + std::to_string(step)), std::string::npos) << lost.ToString();
    // The winner's data, whole.
    std::vector<float> got(va.size());
    ASSERT_TRUE(Restore(root.path(), step, {{"w", got.data(), got.size() * 4}}).ok());
    EXPECT_TRUE(got == (ra.ok() ? va : vb)) << "round " << round;
  }
}

// import stored a dimension 4.5 as 4 and took the last of a tensor key given twice; both are refused, naming
// the file and the tensor, as the manifest validator refuses them.
TEST(TenantDir, ImportRefusesFractionalDimensionsAndKeysGivenTwice) {
  TempDir root, in;
  auto raw = [&](const std::string& name, const std::string& header, size_t data_bytes) {
    std::string h = header;
    while (h.size() % 8) h += ' ';
    std::string len(8, '\0');
    for (int i = 0; i < 8; ++i) len[i] = static_cast<char>((h.size() >> (8 * i)) & 0xff);
    std::ofstream(in / name, std::ios::binary) << len << h << std::string(data_bytes, '\0');
    return in / name;
  };
  auto frac = ImportSafetensors(
      root.path(), 1, {raw("frac.safetensors", R"({"w":{"dtype":"F32","shape":[4.5],"data_offsets":[0,16]}})", 16)},
      {});
  ASSERT_FALSE(frac.ok());
  EXPECT_NE(frac.status().message().find("frac.safetensors: tensor 'w' has a dimension 4.5, not an integer"),
            std::string::npos)
      << frac.status().ToString();
  auto dup = ImportSafetensors(root.path(), 1,
                               {raw("dup.safetensors",
                                    R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                                    R"("w":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})",
                                    16)},
                               {});
  ASSERT_FALSE(dup.ok());
  EXPECT_NE(dup.status().message().find("dup.safetensors: tensor 'w' is given twice in its header"), std::string::npos)
      << dup.status().ToString();
  EXPECT_TRUE(ListSteps(root.path())->empty()) << "a refused import commits nothing";
}

}  // namespace
}  // namespace tessera::ckpt
