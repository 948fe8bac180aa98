// common/file: ReadFile (whole files, NotFound naming the path), WriteFileAtomic (old content kept on any
// failure, nothing left behind, concurrent writers never mix), and the write hook tests inject faults with.
#include "common/file.hpp"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <filesystem>
#include <fstream>
#include <set>
#include <thread>
#include <vector>

namespace tessera {
namespace {

namespace fs = std::filesystem;

class FileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string t = (fs::temp_directory_path() / "tsr-file-XXXXXX").string();
    ASSERT_NE(::mkdtemp(t.data()), nullptr);
    dir_ = t;
  }
  void TearDown() override {
    fault::SetWriteHook(nullptr);
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  std::string Path(const std::string& name) const { return dir_ + "/" + name; }
  // Names in the directory (to see that no temporary file is left).
  std::set<std::string> Entries() const {
    std::set<std::string> out;
    for (const auto& e : fs::directory_iterator(dir_)) out.insert(e.path().filename().string());
    return out;
  }
  static std::string Slurp(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  }
  std::string dir_;
};

TEST_F(FileTest, ReadFileReturnsEveryByte) {
  std::string data;
  for (int i = 0; i < 300000; ++i) data += static_cast<char>((i * 131) % 256);  // NULs too, > one read
  std::ofstream(Path("blob"), std::ios::binary) << data;
  auto r = ReadFile(Path("blob"));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(*r, data);
  std::ofstream(Path("empty"));
  auto e = ReadFile(Path("empty"));
  ASSERT_TRUE(e.ok()) << e.status().ToString();
  EXPECT_EQ(*e, "");
}

TEST_F(FileTest, ReadFileOfAMissingFileIsNotFoundNamingThePath) {
  for (const std::string& p : {Path("missing.json"), Path("no-such-dir/missing.json")}) {
    auto r = ReadFile(p);
    ASSERT_FALSE(r.ok()) << p;
    EXPECT_EQ(r.status().code(), Code::kNotFound) << r.status().ToString();
    EXPECT_NE(r.status().message().find(p), std::string::npos) << r.status().message();
  }
}

TEST_F(FileTest, ReadFileOfADirectoryIsASystemErrorNamingIt) {
  auto r = ReadFile(dir_);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kSystemError) << r.status().ToString();
  EXPECT_NE(r.status().message().find(dir_), std::string::npos) << r.status().message();
}

TEST_F(FileTest, ReadFileReadsFilesWhoseSizeIsUnknown) {
  // /proc files report size 0; the reader goes to the end instead of trusting stat.
  auto r = ReadFile("/proc/self/stat");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->rfind(std::to_string(::getpid()) + " (", 0), 0u) << *r;
}

TEST_F(FileTest, WriteFileAtomicCreatesAndReplaces) {
  const std::string p = Path("state.json");
  ASSERT_TRUE(WriteFileAtomic(p, "first").ok());
  EXPECT_EQ(Slurp(p), "first");
  ASSERT_TRUE(WriteFileAtomic(p, std::string(100000, 'x')).ok());
  EXPECT_EQ(Slurp(p), std::string(100000, 'x'));
  ASSERT_TRUE(WriteFileAtomic(p, "", {.fsync = false}).ok());
  EXPECT_EQ(Slurp(p), "");
  EXPECT_EQ(Entries(), std::set<std::string>{"state.json"}) << "a temporary file was left behind";
}

TEST_F(FileTest, WriteFileAtomicGivesTheFileItsMode) {
  const mode_t old = ::umask(022);
  const std::string p = Path("token");
  Status s = WriteFileAtomic(p, "secret\n", {.mode = 0600});
  ::umask(old);
  ASSERT_TRUE(s.ok()) << s.ToString();
  struct stat st {};
  ASSERT_EQ(::stat(p.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
}

TEST_F(FileTest, AFailedWriteLeavesTheOldContentIntact) {
  const std::string p = Path("manifest.json");
  ASSERT_TRUE(WriteFileAtomic(p, "old content").ok());
  int calls = 0;
  fault::SetWriteHook([&](const std::string& path, uint64_t, size_t) {
    ++calls;
    return path.rfind(p, 0) == 0 ? ENOSPC : 0;  // the disk is full for this file
  });
  Status s = WriteFileAtomic(p, "new content that does not fit");
  fault::SetWriteHook(nullptr);
  ASSERT_FALSE(s.ok());
  EXPECT_GT(calls, 0);
  EXPECT_EQ(s.code(), Code::kSystemError) << s.ToString();
  EXPECT_NE(s.message().find("manifest.json"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("No space left"), std::string::npos) << s.message();
  EXPECT_EQ(Slurp(p), "old content");
  EXPECT_EQ(Entries(), std::set<std::string>{"manifest.json"}) << "the temporary file was not removed";
}

TEST_F(FileTest, AFailedProducerLeavesTheOldContentIntact) {
  const std::string p = Path("shard");
  ASSERT_TRUE(WriteFileAtomic(p, "old").ok());
  Status s = WriteFileAtomicWith(p, {}, [](int fd, const std::string& tmp) {
    EXPECT_EQ(::write(fd, "half", 4), 4);
    return SystemError("producer failed writing " + tmp);
  });
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("producer failed writing " + p + ".tmp"), std::string::npos) << s.message();
  EXPECT_EQ(Slurp(p), "old");
  EXPECT_EQ(Entries(), std::set<std::string>{"shard"});
  // And a producer that succeeds replaces it.
  ASSERT_TRUE(
      WriteFileAtomicWith(p, {}, [](int fd, const std::string& tmp) { return PwriteAll(fd, "new!", 4, 0, tmp); }).ok());
  EXPECT_EQ(Slurp(p), "new!");
}

TEST_F(FileTest, AFailedRenameLeavesTheTargetAndNoTemporaryFile) {
  const std::string p = Path("occupied");
  fs::create_directories(p + "/child");  // rename(file, non-empty directory) fails
  Status s = WriteFileAtomic(p, "data");
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("rename"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find(p), std::string::npos) << s.message();
  EXPECT_TRUE(fs::is_directory(p + "/child"));
  EXPECT_EQ(Entries(), std::set<std::string>{"occupied"});
}

TEST_F(FileTest, WriteIntoAMissingDirectoryNamesThePath) {
  const std::string p = Path("no-such-dir/file");
  Status s = WriteFileAtomic(p, "data");
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find(p), std::string::npos) << s.message();
}

TEST_F(FileTest, ConcurrentWritersOfOnePathNeverMix) {
  // Each writer's content is whole; a reader sees one of them, never a mixture or a partial file.
  const std::string p = Path("shared");
  ASSERT_TRUE(WriteFileAtomic(p, std::string(20000, 'a'), {.fsync = false}).ok());
  std::atomic<bool> done{false};
  std::atomic<int> failures{0}, bad_reads{0}, reads{0};
  std::vector<std::thread> writers;
  for (int w = 0; w < 4; ++w)
    writers.emplace_back([&, w] {
      const std::string content(20000, static_cast<char>('b' + w));
      for (int i = 0; i < 40; ++i)
        if (!WriteFileAtomic(p, content, {.fsync = false}).ok()) ++failures;
    });
  std::thread reader([&] {
    while (!done) {
      auto r = ReadFile(p);
      ++reads;
      if (!r.ok() || r->size() != 20000 || r->find_first_not_of((*r)[0]) != std::string::npos) ++bad_reads;
    }
  });
  for (auto& t : writers) t.join();
  done = true;
  reader.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_GT(reads.load(), 0);
  EXPECT_EQ(bad_reads.load(), 0);
  EXPECT_EQ(Entries(), std::set<std::string>{"shared"});
}

TEST(DirName, OfPaths) {
  EXPECT_EQ(DirName("a/b/c"), "a/b");
  EXPECT_EQ(DirName("/c"), "/");
  EXPECT_EQ(DirName("c"), ".");
}

}  // namespace
}  // namespace tessera
