// tests/comm/api_args_test: the C API on bad arguments. Every call of tessera.h on worlds of one and two host
// ranks (threads of this process, tsrCommInitRank) with arguments drawn at random, most good, some bad — datatypes
// and ops outside their enums, NULL buffers with a count, counts whose byte size overflows (alone or × the world
// size), buffers past the highest address, roots and peers that are not ranks, streams on host ranks, alltoallv's
// NULL arrays, overflowing displacements and a self count that differs, groups whose sends to self do not match
// their receives, collectives inside a group, queries with a NULL output. The property: no crash, no sanitizer
// report (the test is labelled comm, so `make test` runs it under ASan+UBSan and TSan too), a call with a bad
// argument returns tsrInvalidArgument with a message that starts with the call's name and names one of the bad
// arguments, a call with good ones succeeds, and after every round an allreduce succeeds with the right sum (a
// refused call leaves the communicator usable and in step). The draws come from a fixed seed; run longer by hand:
//   API_FUZZ_SEED=7 API_FUZZ_ROUNDS=20000 build/tests/comm/comm_api_args_test --gtest_filter='*Drawn*'
// Also: the overflowing allreduce that crashed a 3-rank world, a local error that no longer fails the
// communicator, the C++ wrapper's status, and the communicator's own checks (Comm::AllReduce) behind the C API.
#include <gtest/gtest.h>

#include <climits>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include "comm/comm.hpp"
#include "tessera/comm.hpp"
#include "tessera/tessera.h"

namespace {

// A C caller may pass any int as a tsrDataType_t or tsrRedOp_t, and so may a C++ caller that casts one: in C++ an
// int outside the values of an enum without a fixed underlying type is undefined behaviour (0 ... 7 for both here),
// which UBSan's enum check reports where the compiler has it (clang). tessera.h fixes their underlying type as
// int in C++, so that every int is a value of the type, and the draws below pass out-of-range values (-1, 8, 99,
// INT_MIN, INT_MAX, 1000) in every tree, the ASan+UBSan one included.
static_assert(std::is_same_v<std::underlying_type_t<tsrDataType_t>, int>, "tsrDataType_t: any int is a value");
static_assert(std::is_same_v<std::underlying_type_t<tsrRedOp_t>, int>, "tsrRedOp_t: any int is a value");
constexpr tsrDataType_t kNinetyNine = static_cast<tsrDataType_t>(99);  // a constant expression only when defined
constexpr tsrRedOp_t kMinusOne = static_cast<tsrRedOp_t>(-1);
static_assert(static_cast<int>(kNinetyNine) == 99 && static_cast<int>(kMinusOne) == -1);

// Runs fn(rank, comm) on one thread per rank of a new world of `n` host ranks, then destroys the communicators.
void WithWorld(int n, const std::function<void(int, tsrComm_t)>& fn) {
  tsrUniqueId id{};
  ASSERT_EQ(tsrGetUniqueId(&id), tsrSuccess) << tsrGetLastError(nullptr);
  std::vector<tsrComm_t> comms(n, nullptr);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r)
    threads.emplace_back([&, r] {
      tsrConfig_t cfg = TSR_CONFIG_INITIALIZER;
      cfg.island = 0;
      cfg.device = "host";
      cfg.timeout_ms = 30000;
      if (tsrCommInitRank(&comms[r], n, id, r, &cfg) != tsrSuccess) {
        ADD_FAILURE() << "rank " << r << ": " << tsrGetLastError(nullptr);
        return;
      }
      fn(r, comms[r]);
    });
  for (auto& t : threads) t.join();
  for (tsrComm_t c : comms) tsrCommDestroy(c);
}

// Every rank's allreduce of rank + 1 gives n(n+1)/2: the communicator is usable and its ranks in step.
void ExpectUsable(int me, int n, tsrComm_t c, const std::string& after) {
  int64_t v = me + 1, sum = -1;
  ASSERT_EQ(tsrAllReduce(&v, &sum, 1, tsrInt64, tsrSum, c, nullptr), tsrSuccess)
      << "rank " << me << " after " << after << ": " << tsrGetLastError(c);
  EXPECT_EQ(sum, int64_t{n} * (n + 1) / 2) << "after " << after;
}

uint64_t EnvNumber(const char* name, uint64_t fallback) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? std::strtoull(v, nullptr, 10) : fallback;
}

TEST(ApiArgs, OverflowingAllReduceCountIsRefusedOnEveryRankAndTheCommunicatorStaysUsable) {
  // SIZE_MAX / 2 floats: rank 0 died of SIGSEGV, the others got "internal error: std::bad_alloc".
  WithWorld(3, [](int me, tsrComm_t c) {
    std::vector<float> buf(16, 1.0f);
    ASSERT_EQ(tsrAllReduce(buf.data(), buf.data(), SIZE_MAX / 2, tsrFloat32, tsrSum, c, nullptr), tsrInvalidArgument);
    const std::string m = tsrGetLastError(c);
    EXPECT_EQ(m.rfind("tsrAllReduce: count 9223372036854775807 × 4 bytes (float32)", 0), 0u) << m;
    ExpectUsable(me, 3, c, "the overflowing count");
  });
}

TEST(ApiArgs, ALocalErrorLeavesTheCommunicatorUsableAndIsNamedOnce) {
  WithWorld(2, [](int me, tsrComm_t c) {
    float x = 1, y = 0;
    ASSERT_EQ(tsrAllReduce(&x, &y, 1, kNinetyNine, tsrSum, c, nullptr), tsrInvalidArgument);
    EXPECT_STREQ(tsrGetLastError(c),
                 "tsrAllReduce: datatype 99 is not a tsrDataType_t (tsrInt8 = 0 ... tsrFloat64 = 7)");
    ASSERT_EQ(tsrAllReduce(&x, &y, 1, tsrFloat32, static_cast<tsrRedOp_t>(6), c, nullptr), tsrInvalidArgument);
    EXPECT_STREQ(tsrGetLastError(c), "tsrAllReduce: op 6 is not a tsrRedOp_t (tsrSum = 0 ... tsrAvg = 4)");
    ASSERT_EQ(tsrAllReduce(&x, &y, 1, tsrFloat32, kMinusOne, c, nullptr), tsrInvalidArgument);
    EXPECT_STREQ(tsrGetLastError(c), "tsrAllReduce: op -1 is not a tsrRedOp_t (tsrSum = 0 ... tsrAvg = 4)");
    ASSERT_EQ(tsrBroadcast(&x, &y, 1, tsrFloat32, 2, c, nullptr), tsrInvalidArgument);
    EXPECT_STREQ(tsrGetLastError(c), "tsrBroadcast: root 2 is not a rank of this communicator of 2 (0 ... 1)");
    ASSERT_EQ(tsrAllReduce(nullptr, &y, 3, tsrFloat32, tsrSum, c, nullptr), tsrInvalidArgument);
    EXPECT_STREQ(tsrGetLastError(c), "tsrAllReduce: sendbuf is NULL with count 3");
    tsrResult_t async = tsrInternalError;
    ASSERT_EQ(tsrCommGetAsyncError(c, &async), tsrSuccess);
    EXPECT_EQ(async, tsrSuccess) << "a refused call failed the communicator: " << tsrGetLastError(c);
    ExpectUsable(me, 2, c, "the refused calls");
  });
}

TEST(ApiArgs, TheCppWrapperCarriesTheMessageAndKeepsTheCommunicator) {
  auto id = tessera::Communicator::UniqueId();
  ASSERT_TRUE(id.ok()) << id.status().message();
  tsrConfig_t cfg = TSR_CONFIG_INITIALIZER;
  cfg.island = 0;
  cfg.device = "host";
  auto comm = tessera::Communicator::InitRank(1, *id, 0, &cfg);
  ASSERT_TRUE(comm.ok()) << comm.status().message();
  int v = 1, out = 0;
  const tessera::Status bad = comm->AllGather(&v, &out, 1, tsrInt32, reinterpret_cast<tsrStream_t>(0x10));
  EXPECT_EQ(bad.code(), tessera::Code::kInvalidArgument);
  EXPECT_EQ(bad.message().rfind("tsrAllGather: stream 0x10 was passed, but rank 0 is a host rank", 0), 0u)
      << bad.message();
  EXPECT_TRUE(comm->AllGather(&v, &out, 1, tsrInt32).ok());
  EXPECT_EQ(out, 1);
}

TEST(ApiArgs, TheCommunicatorsOwnChecksDoNotFailIt) {
  // Behind the C API, Comm's own checks (for callers inside the library) refuse before any traffic too.
  WithWorld(2, [](int me, tsrComm_t c) {
    tessera::comm::Comm* impl = tessera::comm::Unwrap(c);
    ASSERT_NE(impl, nullptr);
    int v = 1, out = 0;
    const tessera::Status s = impl->AllReduce(&v, &out, 1, tsrInt32, static_cast<tsrRedOp_t>(6), nullptr);
    EXPECT_EQ(s.code(), tessera::Code::kInvalidArgument);
    EXPECT_EQ(s.message(), "rank " + std::to_string(me) + ": allreduce: op 6 is not a tsrRedOp_t");
    const tessera::Status b = impl->Broadcast(&v, &out, 1, tsrInt32, -1, nullptr);
    EXPECT_EQ(b.code(), tessera::Code::kInvalidArgument) << b.message();
    ExpectUsable(me, 2, c, "Comm's refusals");
  });
}

// ---- the drawn calls ---------------------------------------------------------------------------------

class Draw {
 public:
  explicit Draw(uint64_t seed) : g_(seed) {}
  uint64_t Below(uint64_t n) { return g_() % n; }
  bool Chance(int percent) { return Below(100) < static_cast<uint64_t>(percent); }
  template <typename T>
  T Pick(const std::vector<T>& v) {
    return v[Below(v.size())];
  }

 private:
  std::mt19937_64 g_;
};

constexpr size_t kMaxCount = 64;
// A buffer past the highest address a process can map.
void* const kFar = reinterpret_cast<void*>(uintptr_t{1} << 60);
void* const kStream = reinterpret_cast<void*>(uintptr_t{0x40});

size_t TypeSize(tsrDataType_t t) {
  static const size_t sizes[] = {1, 1, 4, 8, 2, 2, 4, 8};
  return sizes[t];
}

// One rank's view of one drawn call: its arguments and the names of the bad ones.
struct Args {
  tsrDataType_t type = tsrFloat32;
  tsrRedOp_t op = tsrSum;
  size_t count = 0;
  const void* send = nullptr;
  void* recv = nullptr;
  int rank_arg = 0;  // root or peer
  tsrStream_t stream = nullptr;
  std::vector<std::string> bad;
};

class Fuzzer {
 public:
  Fuzzer(int me, int n, tsrComm_t c) : me_(me), n_(n), c_(c), sbuf_(Bytes()), rbuf_(Bytes()) {}

  // Round `round` of `seed`: every rank draws the same call and the same arguments, so that a call is bad on
  // every rank or on none (what the C API assumes: the ranks check the same arguments the same way).
  void Round(uint64_t seed, uint64_t round) {
    Draw d(seed * 1000003 + round);
    const int kind = static_cast<int>(d.Below(12));
    const bool gathers = kind == 1 || kind == 2 || kind == 5;  // one buffer holds a block per rank
    Args a = Common(d, gathers ? static_cast<size_t>(n_) : 1);
    std::string call;
    tsrResult_t r = tsrSuccess;
    switch (kind) {
      case 0:
      case 11:
        call = "tsrAllReduce";
        r = tsrAllReduce(a.send, a.recv, a.count, a.type, a.op, c_, a.stream);
        break;
      case 1:
        call = "tsrReduceScatter";
        r = tsrReduceScatter(a.send, a.recv, a.count, a.type, a.op, c_, a.stream);
        break;
      case 2:
        call = "tsrAllGather";
        r = tsrAllGather(a.send, a.recv, a.count, a.type, c_, a.stream);
        break;
      case 3:
        call = "tsrBroadcast";
        a.rank_arg = RankArg(d, &a, "root", /*self_ok=*/true);
        r = tsrBroadcast(a.send, a.recv, a.count, a.type, a.rank_arg, c_, a.stream);
        break;
      case 4:  // rank 0 sends to rank 1; in a world of one every peer is bad (itself, or not a rank)
        call = me_ == 0 ? "tsrSend" : "tsrRecv";
        a.rank_arg = RankArg(d, &a, "peer", /*self_ok=*/false);
        r = me_ == 0 ? tsrSend(a.send, a.count, a.type, a.rank_arg, c_, a.stream)
                     : tsrRecv(a.recv, a.count, a.type, a.rank_arg, c_, a.stream);
        break;
      case 5:
        call = "tsrAllToAll";
        if (a.count > 0 && a.send == sbuf_.data() && a.recv == rbuf_.data() && d.Chance(10)) {
          a.recv = sbuf_.data();
          a.bad.push_back("overlap");
        }
        r = tsrAllToAll(a.send, a.recv, a.count, a.type, c_, a.stream);
        break;
      case 6:
        call = "tsrAllToAllv";
        r = AllToAllv(d, &a);
        break;
      case 7:
        call = "tsrGroupEnd";
        r = Group(d, &a);
        break;
      case 8: {
        const int q = static_cast<int>(d.Below(4));
        const char* names[] = {"tsrCommRank", "tsrCommSize", "tsrCommIsland", "tsrCommGetAsyncError"};
        call = names[q];
        a.bad = {"NULL"};
        r = q == 0   ? tsrCommRank(c_, nullptr)
            : q == 1 ? tsrCommSize(c_, nullptr)
            : q == 2 ? tsrCommIsland(c_, nullptr)
                     : tsrCommGetAsyncError(c_, nullptr);
        break;
      }
      case 9:  // a collective inside a group is refused; the empty group then ends cleanly
        call = "tsrAllReduce";
        a.bad = {"between tsrGroupStart and tsrGroupEnd"};
        EXPECT_EQ(tsrGroupStart(), tsrSuccess);
        r = tsrAllReduce(sbuf_.data(), rbuf_.data(), 1, tsrInt32, tsrSum, c_, nullptr);
        EXPECT_EQ(tsrGroupEnd(), tsrSuccess) << tsrGetLastError(c_);
        break;
      default:
        call = "tsrBarrier";
        a.bad.clear();
        r = tsrBarrier(c_);
        break;
    }
    if (kind != 0 && kind != 11 && kind != 1) std::erase(a.bad, std::string("op"));  // no op argument
    Expect(call, a, r, round);
    if (!::testing::Test::HasFatalFailure()) ExpectUsable(me_, n_, c_, call + " of round " + std::to_string(round));
  }

 private:
  size_t Bytes() const { return kMaxCount * 8 * static_cast<size_t>(n_) * 2; }

  // The arguments most calls share; `blocks`: how many count-sized blocks the larger buffer holds. The buffers
  // hold zeros, so that no fold overflows a signed integer.
  Args Common(Draw& d, size_t blocks) {
    Args a;
    if (d.Chance(8)) {
      a.type = static_cast<tsrDataType_t>(d.Pick<int>({-1, 8, 99, INT_MIN, INT_MAX}));
      a.bad.push_back("datatype");
    } else {
      a.type = static_cast<tsrDataType_t>(d.Below(8));
    }
    if (d.Chance(6)) {
      a.op = static_cast<tsrRedOp_t>(d.Pick<int>({-1, 5, 7, 1000, INT_MIN}));
      a.bad.push_back("op");
    } else {
      a.op = static_cast<tsrRedOp_t>(d.Below(5));
    }
    // (With a bad datatype the count is never looked at.)
    const size_t esz = a.bad.empty() || a.bad.front() != "datatype" ? TypeSize(a.type) : 1;
    if (d.Chance(10)) {
      // Too large in every buffer of every call: the bytes alone, or times the world, end past what a process
      // can map or overflow.
      const size_t by_world = blocks > 1 ? SIZE_MAX / esz / blocks + 1 : (uintptr_t{1} << 57) / esz + 1;
      a.count = d.Pick<size_t>({SIZE_MAX, SIZE_MAX / 2, (uintptr_t{1} << 58) / esz, by_world});
      a.bad.push_back("count");
    } else {
      a.count = d.Below(kMaxCount + 1);
    }
    a.send = sbuf_.data();
    a.recv = rbuf_.data();
    // A bad buffer is bad on both sides (sendbuf and recvbuf): then every rank's call reads a bad one, whichever
    // buffer its role reads (a broadcast's non-root, a receiver).
    if (a.count > 0 && d.Chance(6)) {
      a.send = a.recv = nullptr;
      a.bad.push_back("NULL");
    } else if (a.count > 0 && d.Chance(4)) {
      a.send = a.recv = kFar;
      a.bad.push_back("past the highest address");
    }
    if (d.Chance(6)) {
      a.stream = kStream;
      a.bad.push_back("stream");
    }
    return a;
  }

  // A root or peer: the same draw on every rank; a good peer of a send or receive is the other rank.
  int RankArg(Draw& d, Args* a, const char* what, bool self_ok) {
    const int v = d.Chance(10) ? d.Pick<int>({-1, n_, INT_MAX, INT_MIN}) : static_cast<int>(d.Below(n_));
    if (v < 0 || v >= n_ || (!self_ok && n_ == 1)) {
      a->bad.push_back(what);
      return v;
    }
    return self_ok ? v : 1 - me_;
  }

  tsrResult_t AllToAllv(Draw& d, Args* a) {
    // Equal blocks of the drawn count; a bad (huge) count makes each buffer's extent bad.
    const size_t each = a->count;
    const bool huge = each > kMaxCount;
    std::vector<size_t> sc(n_, each), sd(n_), rc(n_, each), rd(n_);
    for (int p = 0; p < n_; ++p) sd[p] = rd[p] = huge ? 0 : static_cast<size_t>(p) * each;
    for (auto& b : a->bad)
      if (b == "count") b = "extent";
    const size_t* arrays[4] = {sc.data(), sd.data(), rc.data(), rd.data()};
    const int twist = static_cast<int>(d.Below(10));
    if (twist == 0) {
      arrays[d.Below(4)] = nullptr;
      a->bad.push_back("is NULL");
    } else if (twist == 1 && each > 0) {
      sd[d.Below(n_)] = SIZE_MAX;  // displacement + count overflows
      a->bad.push_back("overflows");
    } else if (twist == 2 && !huge) {
      rc[me_] = each + 1;  // every rank receives one more element from itself than it sends
      a->bad.push_back("differs");
    }
    return tsrAllToAllv(a->send, arrays[0], arrays[1], a->recv, arrays[2], arrays[3], a->type, c_, a->stream);
  }

  tsrResult_t Group(Draw& d, Args* a) {
    // Each rank sends the count to the next rank and receives it from the previous one (itself, in a world of one).
    int to = (me_ + 1) % n_, from = (me_ + n_ - 1) % n_;
    size_t recv_count = a->count;
    if (d.Chance(8)) {
      to = from = d.Pick<int>({-1, n_, INT_MIN});
      a->bad.push_back("peer");
    } else if (n_ == 1 && a->count <= kMaxCount && d.Chance(15)) {
      recv_count = a->count + 1;  // to itself: the receive does not match the send
      a->bad.push_back("itself");
    }
    EXPECT_EQ(tsrGroupStart(), tsrSuccess);
    EXPECT_EQ(tsrSend(a->send, a->count, a->type, to, c_, a->stream), tsrSuccess);  // queued: checked at the end
    EXPECT_EQ(tsrRecv(a->recv, recv_count, a->type, from, c_, a->stream), tsrSuccess);
    return tsrGroupEnd();
  }

  void Expect(const std::string& call, const Args& a, tsrResult_t r, uint64_t round) {
    const std::string m = tsrGetLastError(c_);
    const std::string where = "rank " + std::to_string(me_) + " of " + std::to_string(n_) + ", round " +
                              std::to_string(round) + ", " + call + ": \"" + m + "\"";
    ASSERT_NE(r, tsrInternalError) << where;
    if (a.bad.empty()) {
      ASSERT_EQ(r, tsrSuccess) << where;
      return;
    }
    ASSERT_EQ(r, tsrInvalidArgument) << where << " (bad: " << a.bad.front() << ")";
    EXPECT_EQ(m.rfind(call, 0), 0u) << "the message does not start with the call's name: " << where;
    bool named = false;
    for (const auto& b : a.bad) named |= m.find(b) != std::string::npos;
    EXPECT_TRUE(named) << "the message names none of the bad arguments (" << a.bad.front() << "...): " << where;
  }

  const int me_, n_;
  tsrComm_t c_;
  std::vector<unsigned char> sbuf_, rbuf_;
};

class ApiArgsDrawn : public ::testing::TestWithParam<int> {};

TEST_P(ApiArgsDrawn, EveryCallRefusesBadArgumentsByNameAndKeepsTheCommunicator) {
  const int n = GetParam();
  const uint64_t seed = EnvNumber("API_FUZZ_SEED", 51), rounds = EnvNumber("API_FUZZ_ROUNDS", 300);
  WithWorld(n, [&](int me, tsrComm_t c) {
    Fuzzer f(me, n, c);
    for (uint64_t i = 0; i < rounds && !::testing::Test::HasFatalFailure(); ++i) f.Round(seed, i);
  });
}

INSTANTIATE_TEST_SUITE_P(Worlds, ApiArgsDrawn, ::testing::Values(1, 2),
                         [](const auto& info) { return std::to_string(info.param) + "_ranks"; });

}  // namespace
