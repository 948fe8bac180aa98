// tests/daemon/tenant_reads_test: the daemon's reads of a job's directories are bounded in time and never follow
// a link the job swapped in. A read that blocks — stalled through the test hook, and for real on a FUSE mount
// whose server never answers (as a hung network or FUSE filesystem does) — returns Timeout within its bound, and a
// second read of that directory fails at once instead of stacking up threads; a job start's read (AsyncReads) is
// picked up by a later call and never started twice; OpenJobDir refuses a link at any component below the tenant's
// area.
#include "daemon/tenant_reads.hpp"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <future>
#include <string>
#include <thread>
#include <vector>

#include "tessera/ckpt.hpp"

namespace tessera::daemon {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

struct Tmp {
  Tmp() {
    std::string t = (fs::temp_directory_path() / "tsr-reads-XXXXXX").string();
    path = ::mkdtemp(t.data());
  }
  ~Tmp() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  std::string path;
};

Result<std::vector<int64_t>> List(const std::string& dir, int64_t limit_ms) {
  return BoundedRead<std::vector<int64_t>>(
      dir, [dir] { return ckpt::ListSteps(dir); }, limit_ms);
}

TEST(TenantReads, AStalledReadTimesOutAndIsNotStartedAgainUntilItReturns) {
  Tmp a, b;
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  std::atomic<int> stalled{0};
  testing::SetTenantReadHook([&, released](const std::string& dir) {
    if (dir == a.path) {
      ++stalled;
      released.wait();
    }
  });
  auto t0 = Clock::now();
  auto r = List(a.path, 200);
  EXPECT_LT(Clock::now() - t0, std::chrono::seconds(5));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kTimeout) << r.status().ToString();
  EXPECT_NE(r.status().message().find(a.path), std::string::npos) << r.status().ToString();
  // Refused at once while the first read waits: no second thread for the same directory.
  r = List(a.path, 200);
  EXPECT_EQ(r.status().code(), Code::kTimeout);
  EXPECT_NE(r.status().message().find("still waiting"), std::string::npos) << r.status().ToString();
  EXPECT_EQ(stalled.load(), 1);
  // Another directory is read as usual.
  auto other = List(b.path, 2000);
  EXPECT_TRUE(other.ok()) << other.status().ToString();
  // Once the stalled read returns, the directory is read again.
  release.set_value();
  bool again = false;
  for (int i = 0; i < 500 && !again; ++i) {
    again = List(a.path, 2000).ok();
    if (!again) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_TRUE(again);
  testing::SetTenantReadHook(nullptr);
}

// A directory on a FUSE filesystem whose server never answers: every read there blocks in the kernel (not
// interruptible), as on a hung NFS or FUSE mount. Needs /dev/fuse and the right to mount (root).
TEST(TenantReads, AReadOfAHungFuseMountTimesOut) {
  Tmp mnt;
  const int fuse = ::open("/dev/fuse", O_RDWR | O_CLOEXEC);
  if (fuse < 0) GTEST_SKIP() << "no /dev/fuse here: " << std::strerror(errno);
  const std::string opts = "fd=" + std::to_string(fuse) + ",rootmode=40000,user_id=0,group_id=0";
  if (::mount("tessera-stalled", mnt.path.c_str(), "fuse", MS_NOSUID | MS_NODEV, opts.c_str()) != 0) {
    const int e = errno;
    ::close(fuse);
    GTEST_SKIP() << "cannot mount a FUSE filesystem here (" << std::strerror(e) << ")";
  }
  auto t0 = Clock::now();
  auto r = List(mnt.path + "/ckpt", 300);
  const auto took = Clock::now() - t0;
  // The server is never started: its end is closed and the mount detached, which fails the blocked read.
  ::umount2(mnt.path.c_str(), MNT_DETACH);
  ::close(fuse);
  EXPECT_LT(took, std::chrono::seconds(5));
  ASSERT_FALSE(r.ok()) << "the read of a hung mount returned";
  EXPECT_EQ(r.status().code(), Code::kTimeout) << r.status().ToString();
}

// A job's start is prepared by AsyncReads: a read not done within the wait is left running and its answer picked up
// by a later call, which does not wait meanwhile and starts no second read; an answer is given once, and one older
// than its freshness is read again.
TEST(TenantReads, AnAsyncReadIsPickedUpLaterAndNeverStartedTwice) {
  AsyncReads<int> reads;
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  std::atomic<int> reads_started{0};
  testing::SetTenantReadHook([&, released](const std::string& key) {
    if (reads_started++ == 0 && key == "7/2") released.wait();  // every read counted; the first one stalls
  });
  auto read = [] { return Result<int>(42); };
  auto t0 = Clock::now();
  int64_t running_ms = -1;
  auto r = reads.Get("7/2", read, 200, 60'000, &running_ms);
  EXPECT_FALSE(r.has_value());
  EXPECT_GE(running_ms, 0);
  r = reads.Get("7/2", read, 60'000, 60'000);  // does not wait for the running read
  EXPECT_FALSE(r.has_value());
  EXPECT_LT(Clock::now() - t0, std::chrono::seconds(30));
  EXPECT_EQ(reads_started.load(), 1);
  release.set_value();
  bool got = false;
  for (int i = 0; i < 500 && !got; ++i) {
    r = reads.Get("7/2", read, 0, 60'000);
    got = r.has_value();
    if (!got) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_TRUE(got);
  ASSERT_TRUE(r->ok());
  EXPECT_EQ(**r, 42);
  EXPECT_EQ(reads_started.load(), 1);
  // Given once: the next Get reads again (a new answer, read now).
  r = reads.Get("7/2", read, 5000, 60'000);
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(reads_started.load(), 2);
  // An answer older than its freshness (0 ms here) is not given when it was left waiting: it is read again.
  (void)reads.Get("7/3", read, 0, 0);  // read 3 (its answer, if it came at once, is given and read 4 follows)
  got = false;
  for (int i = 0; i < 500 && !got; ++i) {
    got = reads.Get("7/3", read, 1000, 0).has_value();
    if (!got) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_TRUE(got);
  EXPECT_EQ(reads_started.load(), 4);
  testing::SetTenantReadHook(nullptr);
}

TEST(TenantReads, OpenJobDirRefusesALinkSwappedInBelowTheArea) {
  Tmp area, other;
  fs::create_directories(area.path + "/1/ckpt");
  fs::create_directories(other.path + "/ckpt");
  auto ok = OpenJobDir(area.path, area.path + "/1/ckpt");
  EXPECT_TRUE(ok.ok()) << ok.status().ToString();
  // The job (which owns area/1) swaps its checkpoint directory, or its own directory, for a link elsewhere.
  fs::rename(area.path + "/1/ckpt", area.path + "/1/aside");
  fs::create_directory_symlink(other.path + "/ckpt", area.path + "/1/ckpt");
  auto link = OpenJobDir(area.path, area.path + "/1/ckpt");
  EXPECT_EQ(link.status().code(), Code::kCorrupt) << link.status().ToString();
  fs::remove(area.path + "/1/ckpt");
  fs::rename(area.path + "/1", area.path + "/2");
  fs::create_directory_symlink(area.path + "/2", area.path + "/1");
  link = OpenJobDir(area.path, area.path + "/1/aside");
  EXPECT_EQ(link.status().code(), Code::kCorrupt) << link.status().ToString();
  EXPECT_EQ(OpenJobDir(area.path, other.path + "/ckpt").status().code(), Code::kInvalidArgument);
  // And a bounded read through it: the retention of a swapped directory never reaches the other one.
  auto r = BoundedJobRead<std::vector<int64_t>>(area.path, area.path + "/1/aside",
                                                [](const std::string& root) { return ckpt::ListSteps(root); });
  EXPECT_FALSE(r.ok());
}

}  // namespace
}  // namespace tessera::daemon
