// common/process: liveness and identity of processes (the daemon's shims, a same-host peer rank).
#include "common/process.hpp"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <thread>

namespace tessera {
namespace {

// Waits up to 10 s for `pred`.
template <typename P>
bool Eventually(P pred) {
  for (int i = 0; i < 1000; ++i) {
    if (pred()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return pred();
}

TEST(Process, ThisProcessIsAliveWithAStableStartTime) {
  EXPECT_TRUE(ProcessAlive(::getpid()));
  const int64_t t = ProcessStartTicks(::getpid());
  EXPECT_GT(t, 0);
  EXPECT_EQ(ProcessStartTicks(::getpid()), t);
  auto st = ReadProcStat(::getpid());
  ASSERT_TRUE(st.has_value());
  EXPECT_EQ(st->session, ::getsid(0));
  EXPECT_EQ(st->start_ticks, t);
}

TEST(Process, NoPidIsNotAlive) {
  EXPECT_FALSE(ProcessAlive(0));
  EXPECT_FALSE(ProcessAlive(-1));
  EXPECT_EQ(ProcessStartTicks(0), -1);
  EXPECT_FALSE(ReadProcStat(-5).has_value());
}

TEST(Process, AZombieIsNotAliveAndAReapedChildIsGone) {
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    // A name with spaces and parentheses: the fields of /proc/PID/stat start after the last ')'.
    ::prctl(PR_SET_NAME, "a) b (c", 0, 0, 0);
    ::setsid();
    ::pause();
    ::_exit(0);
  }
  ASSERT_TRUE(Eventually([&] {
    auto st = ReadProcStat(child);
    return st && st->session == child;  // after its setsid
  }));
  EXPECT_TRUE(ProcessAlive(child));
  const int64_t start = ProcessStartTicks(child);
  EXPECT_GE(start, ProcessStartTicks(::getpid()));
  ASSERT_EQ(::kill(child, SIGKILL), 0);
  // Killed, not yet reaped: a zombie, which is not alive.
  EXPECT_TRUE(Eventually([&] {
    auto st = ReadProcStat(child);
    return st && st->state == 'Z';
  }));
  EXPECT_FALSE(ProcessAlive(child));
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  EXPECT_FALSE(ProcessAlive(child));
  EXPECT_EQ(ProcessStartTicks(child), -1);
  EXPECT_FALSE(ReadProcStat(child).has_value());
}

}  // namespace
}  // namespace tessera
