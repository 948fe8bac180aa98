// tests/common/beneath_test: common/beneath resolves paths beneath a directory descriptor without following a
// link at any depth and without leaving the directory, with openat2 (where the kernel has it) and with the
// openat(O_NOFOLLOW) walk; RemoveTreeAt removes a link, never its target.
#include "common/beneath.hpp"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace tessera {
namespace {

namespace fs = std::filesystem;

struct Tmp {
  Tmp() {
    std::string t = (fs::temp_directory_path() / "tsr-beneath-XXXXXX").string();
    path = ::mkdtemp(t.data());
  }
  ~Tmp() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  std::string path;
};

// Both ways of resolving: openat2 when this kernel has it, and the walk.
class Beneath : public ::testing::TestWithParam<bool> {
 protected:
  void SetUp() override {
    if (GetParam() && !testing::KernelHasOpenat2()) GTEST_SKIP() << "this kernel has no openat2 (ENOSYS)";
    testing::SetUseOpenat2(GetParam());
  }
  void TearDown() override { testing::SetUseOpenat2(true); }
};

TEST_P(Beneath, OpensPlainPathsAndRefusesALinkAtEveryDepth) {
  Tmp root, outside;
  const std::vector<std::string> parts = {"a", "b", "c", "d"};
  std::string rel;
  for (const auto& p : parts) rel += (rel.empty() ? "" : "/") + p;
  fs::create_directories(root.path + "/" + rel);
  fs::create_directories(outside.path + "/" + rel);
  std::ofstream(root.path + "/" + rel + "/file") << "inside";
  std::ofstream(outside.path + "/" + rel + "/file") << "outside";
  auto dir = OpenDir(root.path);
  ASSERT_TRUE(dir.ok()) << dir.status().ToString();
  {
    auto f = OpenRegularFileBeneath(dir->get(), rel + "/file", "the file");
    ASSERT_TRUE(f.ok()) << f.status().ToString();
    char buf[16] = {};
    ASSERT_EQ(::read(f->get(), buf, sizeof buf), 6);
    EXPECT_EQ(std::string(buf), "inside");
  }
  // Each component in turn (and the file itself) swapped for a link to the same place outside.
  std::string prefix;
  for (size_t k = 0; k <= parts.size(); ++k) {
    const std::string comp = k < parts.size() ? parts[k] : "file";
    const std::string here = root.path + "/" + prefix + comp, there = outside.path + "/" + prefix + comp;
    const std::string aside = root.path + "/" + prefix + "aside";
    ASSERT_EQ(::rename(here.c_str(), aside.c_str()), 0) << here;
    ASSERT_EQ(::symlink(there.c_str(), here.c_str()), 0) << here;
    auto f = OpenRegularFileBeneath(dir->get(), rel + "/file", "the file");
    ASSERT_FALSE(f.ok()) << "followed a link at depth " << k;
    EXPECT_EQ(f.status().code(), Code::kCorrupt) << f.status().ToString();
    EXPECT_NE(f.status().message().find("symbolic link"), std::string::npos) << f.status().ToString();
    ASSERT_EQ(::unlink(here.c_str()), 0);
    ASSERT_EQ(::rename(aside.c_str(), here.c_str()), 0);
    prefix += comp + "/";
  }
  // A component that is a file, a missing one, and paths that could leave the directory.
  auto nd = OpenBeneath(dir->get(), rel + "/file/x", O_RDONLY, "x");
  EXPECT_EQ(nd.status().code(), Code::kCorrupt) << nd.status().ToString();
  EXPECT_EQ(OpenBeneath(dir->get(), "a/missing", O_RDONLY, "m").status().code(), Code::kNotFound);
  for (const char* bad : {"../x", "a/../../x", "/etc/passwd", "a//b", "./a", ""})
    EXPECT_EQ(OpenBeneath(dir->get(), bad, O_RDONLY, bad).status().code(), Code::kInvalidArgument) << bad;
  // A FIFO is refused without blocking.
  ASSERT_EQ(::mkfifo((root.path + "/a/fifo").c_str(), 0600), 0);
  auto fifo = OpenRegularFileBeneath(dir->get(), "a/fifo", "the fifo");
  EXPECT_EQ(fifo.status().code(), Code::kCorrupt);
  EXPECT_NE(fifo.status().message().find("FIFO"), std::string::npos) << fifo.status().ToString();
}

TEST_P(Beneath, MakeDirBeneathRefusesALinkAlreadyThere) {
  Tmp root, outside;
  auto dir = OpenDir(root.path);
  ASSERT_TRUE(dir.ok());
  auto made = MakeDirBeneath(dir->get(), "new", "new");
  ASSERT_TRUE(made.ok()) << made.status().ToString();
  ASSERT_EQ(::symlink(outside.path.c_str(), (root.path + "/planted").c_str()), 0);
  auto planted = MakeDirBeneath(dir->get(), "planted", "planted");
  EXPECT_EQ(planted.status().code(), Code::kCorrupt) << planted.status().ToString();
}

INSTANTIATE_TEST_SUITE_P(Resolve, Beneath, ::testing::Values(true, false),
                         [](const ::testing::TestParamInfo<bool>& i) { return i.param ? "Openat2" : "Walk"; });

TEST(BeneathRemove, RemovesATreeAndOnlyTheLinksInItNeverTheirTargets) {
  Tmp root, outside;
  fs::create_directories(root.path + "/t/a/b");
  std::ofstream(root.path + "/t/a/b/f") << "x";
  std::ofstream(outside.path + "/keep") << "precious";
  ASSERT_EQ(::symlink(outside.path.c_str(), (root.path + "/t/a/link-dir").c_str()), 0);
  ASSERT_EQ(::symlink((outside.path + "/keep").c_str(), (root.path + "/t/link-file").c_str()), 0);
  ASSERT_EQ(::mkfifo((root.path + "/t/fifo").c_str(), 0600), 0);
  auto dir = OpenDir(root.path);
  ASSERT_TRUE(dir.ok());
  ASSERT_TRUE(RemoveTreeAt(dir->get(), "t", "t").ok());
  EXPECT_FALSE(fs::exists(root.path + "/t"));
  EXPECT_TRUE(fs::exists(outside.path + "/keep"));
  // The tree's top itself a link: the link goes, its target stays.
  ASSERT_EQ(::symlink(outside.path.c_str(), (root.path + "/t").c_str()), 0);
  ASSERT_TRUE(RemoveTreeAt(dir->get(), "t", "t").ok());
  EXPECT_FALSE(fs::exists(fs::symlink_status(root.path + "/t")));
  EXPECT_TRUE(fs::exists(outside.path + "/keep"));
  EXPECT_TRUE(RemoveTreeAt(dir->get(), "absent", "absent").ok());
  EXPECT_EQ(RemoveTreeAt(dir->get(), "..", "..").code(), Code::kInvalidArgument);
}

}  // namespace
}  // namespace tessera
