// tests/ckpt/fault_test: a full disk (injected ENOSPC), a kill in the middle of a save (forked child,
// SIGKILL at named points), and that nothing committed is lost and errors name the step and file.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>

#include "ckpt/format.hpp"
#include "ckpt/test_util.hpp"
#include "tessera/ckpt.hpp"

namespace tessera::ckpt {
namespace {

using test::Fill;
using test::TempDir;

Status SaveStep(CheckpointWriter& w, int64_t step, std::vector<float>& v) {
  v = Fill(static_cast<uint64_t>(step), 0, v.size());
  TSR_RETURN_IF_ERROR(w.Save(step, {{"v", DType::kFloat32, {static_cast<int64_t>(v.size())}, v.data()}}));
  return w.Wait();
}

void ExpectRestorable(const std::string& root, int64_t step, size_t n) {
  std::vector<float> out(n);
  Status s = Restore(root, step, {{"v", out.data(), out.size() * 4}});
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(out, Fill(static_cast<uint64_t>(step), 0, n));
}

TEST(Faults, FullDiskFailsTheStepNamingTheFileAndKeepsOlderSteps) {
  TempDir d;
  auto w = CheckpointWriter::Open(d.path(), 0, 1);
  ASSERT_TRUE(w.ok());
  std::vector<float> v(3 << 20);  // 12 MiB: several parallel write ranges
  ASSERT_TRUE(SaveStep(**w, 1, v).ok());
  testing::SetWriteHook([](const std::string& path, uint64_t off, size_t) {
    return path.find("step-0000000002") != std::string::npos && off > 0 ? ENOSPC : 0;
  });
  Status s = SaveStep(**w, 2, v);
  testing::SetWriteHook(nullptr);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), Code::kSystemError);
  EXPECT_NE(s.message().find("step 2"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("rank-00000-of-00001.safetensors"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("No space left"), std::string::npos) << s.message();
  EXPECT_EQ(*ListSteps(d.path()), std::vector<int64_t>{1});
  EXPECT_EQ(Latest(d.path())->step, 1);
  ExpectRestorable(d.path(), 1, v.size());
  // Once space is back, the same writer saves again.
  ASSERT_TRUE(SaveStep(**w, 2, v).ok());
  ExpectRestorable(d.path(), 2, v.size());
}

TEST(Faults, FullDiskWhileCommittingTheManifest) {
  TempDir d;
  auto w = CheckpointWriter::Open(d.path(), 0, 1);
  std::vector<float> v(1000);
  ASSERT_TRUE(SaveStep(**w, 1, v).ok());
  testing::SetWriteHook([](const std::string& path, uint64_t, size_t) {
    return path.find("manifest.json") != std::string::npos ? ENOSPC : 0;
  });
  Status s = SaveStep(**w, 2, v);
  testing::SetWriteHook(nullptr);
  EXPECT_NE(s.message().find("manifest.json"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("step 2"), std::string::npos) << s.message();
  EXPECT_EQ(Latest(d.path())->step, 1);
}

// A child process saves step 1 (committed), then step 2 and is SIGKILLed at `point` while saving it.
class KillMidSave : public ::testing::TestWithParam<const char*> {};

TEST_P(KillMidSave, CommittedStepsSurvive) {
  TempDir d;
  std::string point = GetParam();
  const size_t n = 1 << 20;
  pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    auto w = CheckpointWriter::Open(d.path(), 0, 1);
    std::vector<float> v(n);
    if (!w.ok() || !SaveStep(**w, 1, v).ok()) ::_exit(3);
    testing::SetCrashHook([&](const char* p) {
      if (point == p) ::kill(::getpid(), SIGKILL);
    });
    if (point == "mid-write") {
      testing::SetWriteHook([](const std::string& path, uint64_t off, size_t) {
        if (path.find("step-0000000002") != std::string::npos && off > 0) ::kill(::getpid(), SIGKILL);
        return 0;
      });
    }
    (void)SaveStep(**w, 2, v);
    ::_exit(point == "never" ? 0 : 4);  // the kill point was not reached
  }
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  if (std::string(point) == "never") {
    ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  } else {
    ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << "child exit status " << status;
  }
  auto l = Latest(d.path());
  ASSERT_TRUE(l.ok()) << l.status().ToString();
  bool committed = std::string(point) == "save:committed" || std::string(point) == "never";
  EXPECT_EQ(l->step, committed ? 2 : 1);
  ExpectRestorable(d.path(), 1, n);
  if (committed) ExpectRestorable(d.path(), 2, n);
  // A new writer (the restarted job) can save step 2 again when it was not committed.
  auto w = CheckpointWriter::Open(d.path(), 0, 1);
  std::vector<float> v(n);
  if (!committed) {
    ASSERT_TRUE(SaveStep(**w, 2, v).ok());
    ExpectRestorable(d.path(), 2, n);
  }
}
INSTANTIATE_TEST_SUITE_P(Points, KillMidSave,
                         ::testing::Values("mid-write", "save:shard-written", "save:before-manifest", "save:committed",
                                           "never"),
                         [](const auto& info) {
                           std::string s = info.param;
                           for (auto& c : s)
                             if (!isalnum(static_cast<unsigned char>(c))) c = '_';
                           return s;
                         });

}  // namespace
}  // namespace tessera::ckpt
