// tests/comm/direct_path_test: DirectAllReduce, tsrAllReduce's lean path for a world of one device island
// (src/comm/device/device.hpp), against a recording fake CCL — no GPU needed. It must take a call only when
// everything the full path would check is known good, and hand everything else to the full path untouched.
#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <limits>

#include "comm/device/device.hpp"

namespace tessera::comm {
namespace {

struct Seen {
  int calls = 0;
  const void* send = nullptr;
  void* recv = nullptr;
  size_t count = 0;
  int type = -1, op = -1;
  void* handle = nullptr;
  void* stream = nullptr;
  int result = 0;  // what the fake CCL returns
} g_seen;

int FakeAllReduce(const void* send, void* recv, size_t count, int type, int op, void* handle, void* stream) {
  g_seen.calls++;
  g_seen.send = send;
  g_seen.recv = recv;
  g_seen.count = count;
  g_seen.type = type;
  g_seen.op = op;
  g_seen.handle = handle;
  g_seen.stream = stream;
  return g_seen.result;
}

class DirectPath : public ::testing::Test {
 protected:
  void SetUp() override {
    g_seen = {};
    p.call = FakeAllReduce;
    p.handle = &handle_;
    for (int t = 0; t < static_cast<int>(DType::kCount); ++t) {
      p.esz[t] = static_cast<uint8_t>(DTypeSize(static_cast<DType>(t)));
      p.ccl_type[t] = static_cast<int8_t>(10 + t);
    }
    p.esz[static_cast<int>(DType::kFloat64)] = 0;  // as if the CCL had no f64
    for (int o = 0; o < static_cast<int>(RedOp::kCount); ++o) p.ccl_op[o] = static_cast<int8_t>(20 + o);
    p.allocs.Add(kBase, kSize);
  }
  static constexpr uintptr_t kBase = 0x10000000;
  static constexpr size_t kSize = 1 << 20;
  const void* At(size_t off) const { return reinterpret_cast<const void*>(kBase + off); }
  void* AtMut(size_t off) const { return reinterpret_cast<void*>(kBase + off); }
  int Try(const void* send, void* recv, size_t count, tsrDataType_t t = tsrFloat32, tsrRedOp_t op = tsrSum,
          tsrStream_t stream = reinterpret_cast<tsrStream_t>(0x5)) {
    return p.TryCall(send, recv, count, t, op, stream);
  }
  int handle_ = 0;
  DirectAllReduce p;
  uint32_t& calls = p.calls;
};

TEST_F(DirectPath, TakesAValidCallAndMapsTypeAndOp) {
  EXPECT_EQ(Try(At(0), AtMut(4096), 1000, tsrBfloat16, tsrMax), 0);
  EXPECT_EQ(g_seen.calls, 1);
  EXPECT_EQ(g_seen.send, At(0));
  EXPECT_EQ(g_seen.recv, AtMut(4096));
  EXPECT_EQ(g_seen.count, 1000u);
  EXPECT_EQ(g_seen.type, 10 + static_cast<int>(DType::kBfloat16));
  EXPECT_EQ(g_seen.op, 20 + static_cast<int>(RedOp::kMax));
  EXPECT_EQ(g_seen.handle, &handle_);
  EXPECT_EQ(g_seen.stream, reinterpret_cast<void*>(0x5));
  EXPECT_EQ(calls, 1u);
}

TEST(DirectPathUnset, TakesNothing) {
  DirectAllReduce p;  // a rank that is not a world of one device island: `call` stays null
  p.allocs.Add(0x1000, 4096);
  EXPECT_EQ(p.TryCall(reinterpret_cast<const void*>(0x1000), reinterpret_cast<void*>(0x1000), 4, tsrFloat32, tsrSum,
                      reinterpret_cast<tsrStream_t>(0x5)),
            DirectAllReduce::kNotTaken);
}

// The struct's first cache line holds all a taken call reads besides the allocation cache.
static_assert(offsetof(DirectAllReduce, allocs) <= 64, "the lean path's fields outgrew one cache line");
static_assert(alignof(DirectAllReduce) == 64);

TEST_F(DirectPath, ReturnsTheCclsErrorForTheFullPathToReport) {
  g_seen.result = 3;
  EXPECT_EQ(Try(At(0), AtMut(0), 16), 3);
  EXPECT_EQ(g_seen.calls, 1);
}

TEST_F(DirectPath, LeavesEverythingElseToTheFullPathUntouched) {
  const int kNot = DirectAllReduce::kNotTaken;
  EXPECT_EQ(Try(At(0), AtMut(0), 16, tsrFloat32, tsrSum, nullptr), kNot) << "no stream: a host-memory call";
  EXPECT_EQ(Try(At(0), AtMut(0), 0), kNot) << "count 0";
  EXPECT_EQ(Try(At(0), AtMut(0), 16, static_cast<tsrDataType_t>(99)), kNot) << "not a type";
  EXPECT_EQ(Try(At(0), AtMut(0), 16, static_cast<tsrDataType_t>(-1)), kNot) << "negative type";
  EXPECT_EQ(Try(At(0), AtMut(0), 16, tsrFloat64), kNot) << "a type the CCL lacks";
  EXPECT_EQ(Try(At(0), AtMut(0), 16, tsrFloat32, static_cast<tsrRedOp_t>(7)), kNot) << "not an op";
  EXPECT_EQ(Try(At(0), AtMut(0), kSize / 4 + 1), kNot) << "one element past the allocation";
  EXPECT_EQ(Try(At(kSize - 4), AtMut(0), 2), kNot) << "send runs past the allocation";
  EXPECT_EQ(Try(At(0), reinterpret_cast<void*>(kBase + kSize), 1), kNot) << "recv just past the allocation";
  EXPECT_EQ(Try(reinterpret_cast<const void*>(0x20000000), AtMut(0), 1), kNot) << "send in no known allocation";
  EXPECT_EQ(Try(At(0), AtMut(0), std::numeric_limits<size_t>::max() / 2 + 1), kNot) << "count * size overflows";
  EXPECT_EQ(g_seen.calls, 0);
  EXPECT_EQ(calls, 0u) << "a call not taken is not counted (the full path counts it)";
  EXPECT_EQ(Try(At(0), AtMut(0), kSize / 4), 0) << "exactly the whole allocation";
  EXPECT_EQ(g_seen.calls, 1);
}

TEST_F(DirectPath, AFailedCommunicatorGoesTheFullPath) {
  p.failed = true;
  EXPECT_EQ(Try(At(0), AtMut(0), 16), DirectAllReduce::kNotTaken);
  EXPECT_EQ(g_seen.calls, 0);
}

// The full path polls the CCL's asynchronous error on every 128th call; the lean path leaves exactly those
// calls to it, so the poll keeps its rate.
TEST_F(DirectPath, EveryHundredAndTwentyEighthCallIsLeftForTheErrorPoll) {
  int not_taken = 0;
  for (int i = 0; i < 1000; ++i) {
    if (Try(At(0), AtMut(0), 16) == DirectAllReduce::kNotTaken) {
      ++not_taken;
      EXPECT_EQ((calls + 1) & 127, 0u) << "call " << i;
      ++calls;  // what the full path's CclCall does
    }
  }
  EXPECT_EQ(not_taken, 1000 / 128);
  EXPECT_EQ(g_seen.calls, 1000 - 1000 / 128);
}

TEST(AllocCache, KeepsTheEightMostRecentAllocations) {
  AllocCache c;
  for (uintptr_t i = 1; i <= 9; ++i) c.Add(i << 20, 4096);
  EXPECT_FALSE(c.Contains(reinterpret_cast<const void*>(uintptr_t{1} << 20), 1)) << "the oldest is dropped";
  for (uintptr_t i = 2; i <= 9; ++i) EXPECT_TRUE(c.Contains(reinterpret_cast<const void*>(i << 20), 4096)) << i;
  EXPECT_FALSE(c.Contains(reinterpret_cast<const void*>((uintptr_t{9} << 20) + 1), 4096)) << "runs one byte past";
}

}  // namespace
}  // namespace tessera::comm
