// tests/comm/stuck_chain_test: FollowStuckRanks, the rule by which a rank whose wait timed out names the rank at the
// end of the chain of stuck ranks (Comm::ExplainTimeout): records that appear over time, as ranks time out a moment
// apart, with a clock of its own per case.
#include <gtest/gtest.h>

#include <chrono>
#include <map>
#include <optional>
#include <string>

#include "comm/comm.hpp"

namespace tessera::comm {
namespace {

using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

// Records by rank, each posted `after` the start of the case.
struct Posted {
  std::map<int, std::pair<std::chrono::milliseconds, std::string>> records;
  Clock::time_point t0 = Clock::now();
  std::optional<std::string> operator()(int r) const {
    auto it = records.find(r);
    if (it == records.end() || Clock::now() - t0 < it->second.first) return std::nullopt;
    return it->second.second;
  }
};

// Rank 0 waits on ranks 1 and 2; rank 2 times out first, waiting on rank 1, and rank 1 (which waits on rank 4, on
// the host that went away) a moment later. The chain must reach rank 1's record, which names the host: taking rank 2's
// record because rank 1 had not posted yet named a rank that only waited (a host-cut test failed on it under load).
TEST(StuckChain, AHopWhoseRankTimesOutAMomentLaterIsWaitedFor) {
  Posted p;
  p.records[2] = {0ms, "1|rank 2: waiting on rank 1 on host h0"};
  p.records[1] = {60ms, "4|rank 1: waiting on rank 4 on host h2"};
  const auto root = FollowStuckRanks(0, 6, {1, 2}, std::cref(p), Clock::now() + 1s);
  ASSERT_TRUE(root.has_value());
  EXPECT_EQ(*root, "4|rank 1: waiting on rank 4 on host h2");
}

// The rank at the end of the chain never posts (it is gone): the last stuck rank's record, once `end` has come.
TEST(StuckChain, TheChainEndsAtTheLastStuckRankByTheDeadline) {
  Posted p;
  p.records[1] = {0ms, "3|rank 1: waiting on rank 3"};
  const auto t0 = Clock::now();
  const auto root = FollowStuckRanks(0, 4, {1}, std::cref(p), t0 + 200ms);
  ASSERT_TRUE(root.has_value());
  EXPECT_EQ(*root, "3|rank 1: waiting on rank 3");
  EXPECT_GE(Clock::now() - t0, 200ms);
  EXPECT_LT(Clock::now() - t0, 5s);
}

// Nobody stuck by the deadline: nullopt. A cycle of stuck ranks ends without looping; bad records are skipped.
TEST(StuckChain, NoneStuckIsNulloptAndCyclesAndBadRecordsEnd) {
  Posted none;
  EXPECT_FALSE(FollowStuckRanks(0, 3, {1, 2}, std::cref(none), Clock::now() + 50ms).has_value());
  Posted cycle;
  cycle.records[1] = {0ms, "2|rank 1: waiting on rank 2"};
  cycle.records[2] = {0ms, "1,0,x,99|rank 2: waiting on rank 1"};
  const auto root = FollowStuckRanks(0, 3, {1}, std::cref(cycle), Clock::now() + 50ms);
  ASSERT_TRUE(root.has_value());
  EXPECT_EQ(*root, "1,0,x,99|rank 2: waiting on rank 1");
}

}  // namespace
}  // namespace tessera::comm
