// tests/comm/framework_worker: one rank of the framework-API tests (framework_test.cpp), started without
// `tessera run` and without any TESSERA_* variable: it joins with tsrCommInitRank and an id read from a
// file, as a framework (PyTorch's c10d) would.
//
//   framework_worker SCENARIO --ids FILE --rank R --layout 2,1,1 [--make-id]
//
// --layout gives the island sizes (ranks 0..a-1 are island 0, and so on); --make-id: rank 0 calls
// tsrGetUniqueId itself and writes FILE (else the test wrote it). Scenarios:
//   basic     two communicators from two ids, alive at once, allreduce checked bit for bit;
//   split     tsrCommSplit into halves (reversed keys, one rank NOCOLOR), nested split, collectives on
//             parent and children interleaved, checked bit for bit against the fixed fold order;
//   group     tsrGroupStart/End: ring shift, all pairs with receives first and in reverse order, messages
//             larger than a ring, sends to self; a collective inside a group is refused;
//   alltoall  tsrAllToAll and tsrAllToAllv (zero and uneven counts, gaps kept) for every type;
//   abort     rank 0 blocks in a recv that nothing matches; another thread aborts: the recv fails with
//             tsrRemoteError (not tsrTimeout), so do later calls; the other ranks hear of it;
//   asyncerr  the last rank exits; the others see tsrCommGetAsyncError turn to tsrRemoteError, and this
//             thread's tsrGetLastError names an exited peer (another thread's stays empty);
//   pairs     two disjoint communicators made at the same moment from two ids of ONE job token (even ranks
//             and odd ranks, as a DeviceMesh's subgroups are), each with its own rank 0: both work.
// Prints "OK rank R: ..." on success, "FAIL rank R: why" and exits 1 otherwise.
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "common/dtype.hpp"
#include "reference.hpp"
#include "tessera/tessera.h"

using tessera::DType;
using namespace tessera::check;  // Value, Hash

namespace {

int g_rank = -1;
std::vector<int> g_layout;  // island sizes
int g_world = 0;

[[noreturn]] void Fail(const std::string& why) {
  std::printf("FAIL rank %d: %s\n", g_rank, why.c_str());
  std::fflush(stdout);
  std::exit(1);
}

void Check(tsrResult_t r, tsrComm_t c, const std::string& what) {
  if (r != tsrSuccess) Fail(what + ": " + tsrGetErrorString(r) + ": " + tsrGetLastError(c));
}

int IslandOf(int rank) {
  int lo = 0;
  for (size_t i = 0; i < g_layout.size(); ++i) {
    if (rank < lo + g_layout[i]) return static_cast<int>(i);
    lo += g_layout[i];
  }
  return -1;
}

std::vector<tsrUniqueId> ReadIds(const std::string& file, size_t want) {
  // The file appears (by rename) once its writer has made the ids; bounded wait.
  for (int i = 0; i < 600; ++i) {
    std::ifstream f(file, std::ios::binary);
    std::string data((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    if (data.size() >= want * sizeof(tsrUniqueId)) {
      std::vector<tsrUniqueId> ids(want);
      std::memcpy(ids.data(), data.data(), want * sizeof(tsrUniqueId));
      return ids;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  Fail("no ids in " + file + " after 30 s");
}

tsrComm_t Join(const tsrUniqueId& id, int timeout_ms = 30000) {
  tsrConfig_t cfg = TSR_CONFIG_INITIALIZER;
  const int island = IslandOf(g_rank);
  const std::string vendor = "vendor" + std::to_string(island);
  cfg.island = island;
  cfg.vendor = vendor.c_str();
  cfg.device = "host";
  cfg.timeout_ms = timeout_ms;
  tsrComm_t c = nullptr;
  tsrResult_t r = tsrCommInitRank(&c, g_world, id, g_rank, &cfg);
  if (r != tsrSuccess) Fail(std::string("tsrCommInitRank: ") + tsrGetErrorString(r) + ": " + tsrGetLastError(nullptr));
  return c;
}

void AllSame(tsrComm_t c, const void* buf, size_t bytes, const std::string& what) {
  int size = 0;
  Check(tsrCommSize(c, &size), c, "size");
  uint64_t h = Hash(buf, bytes);
  std::vector<uint64_t> all(size);
  Check(tsrAllGather(&h, all.data(), 1, tsrInt64, c, nullptr), c, "allgather of hashes");
  for (int r = 0; r < size; ++r)
    if (all[r] != all[0]) Fail(what + ": result bits differ between rank 0 and rank " + std::to_string(r));
}

// The expected bits of a sum allreduce of f32 or bf16 over a communicator whose rank r has island
// island_of[r]: fold in f32, in rank order inside each island, then in island order, rounded once.
std::vector<unsigned char> ExpectedSum(uint64_t seed, size_t count, DType t, const std::vector<int>& island_of) {
  const int k = *std::max_element(island_of.begin(), island_of.end()) + 1;
  const size_t esz = tessera::DTypeSize(t);
  std::vector<unsigned char> out(count * esz);
  for (size_t i = 0; i < count; ++i) {
    float total = 0;
    for (int J = 0; J < k; ++J) {
      float acc = 0;
      bool first = true;
      for (size_t r = 0; r < island_of.size(); ++r) {
        if (island_of[r] != J) continue;
        const float v = static_cast<float>(Value(seed, static_cast<int>(r), i, t, tsrSum));
        acc = first ? v : acc + v;
        first = false;
      }
      total = J == 0 ? acc : total + acc;
    }
    tessera::StoreElement(
        out.data(), i, t,
        t == DType::kBfloat16 ? tessera::Bf16ToF32(tessera::F32ToBf16(total)) : static_cast<double>(total));
  }
  return out;
}

// Allreduce (sum) of f32, bf16 and int32 on `c`, whose rank r is in island island_of[r]; checked against
// the fixed fold order bit for bit (int32 exactly), and across ranks.
void CheckAllReduce(tsrComm_t c, uint64_t seed, const std::vector<int>& island_of, const std::string& what) {
  int rank = 0;
  Check(tsrCommRank(c, &rank), c, "rank");
  for (DType t : {DType::kFloat32, DType::kBfloat16, DType::kInt32}) {
    for (size_t count : {size_t{1}, size_t{7}, size_t{1000}, size_t{70000}}) {
      const size_t esz = tessera::DTypeSize(t);
      std::vector<unsigned char> in(count * esz), out(count * esz, 0xAB);
      for (size_t i = 0; i < count; ++i) tessera::StoreElement(in.data(), i, t, Value(seed, rank, i, t, tsrSum));
      Check(tsrAllReduce(in.data(), out.data(), count, static_cast<tsrDataType_t>(t), tsrSum, c, nullptr), c,
            what + " allreduce");
      std::vector<unsigned char> want;
      if (t == DType::kInt32) {
        want.resize(count * esz);
        for (size_t i = 0; i < count; ++i) {
          int64_t s = 0;
          for (size_t r = 0; r < island_of.size(); ++r) s += static_cast<int64_t>(Value(seed, int(r), i, t, tsrSum));
          tessera::StoreElement(want.data(), i, t, static_cast<double>(s));
        }
      } else {
        want = ExpectedSum(seed, count, t, island_of);
      }
      if (out != want) {
        size_t i = 0;
        while (std::memcmp(out.data() + i * esz, want.data() + i * esz, esz) == 0) ++i;
        Fail(what + " allreduce " + tessera::DTypeName(t) + " count " + std::to_string(count) + ": element " +
             std::to_string(i) + " = " + std::to_string(tessera::LoadElement(out.data(), i, t)) + ", expected " +
             std::to_string(tessera::LoadElement(want.data(), i, t)));
      }
      AllSame(c, out.data(), out.size(), what);
      ++seed;
    }
  }
}

std::vector<int> WorldIslands() {
  std::vector<int> v(g_world);
  for (int r = 0; r < g_world; ++r) v[r] = IslandOf(r);
  return v;
}

int RunBasic(const std::vector<tsrUniqueId>& ids) {
  tsrComm_t a = Join(ids[0]);
  tsrComm_t b = Join(ids[1]);
  int rank = -1, size = -1, island = -1;
  Check(tsrCommRank(a, &rank), a, "rank");
  Check(tsrCommSize(a, &size), a, "size");
  Check(tsrCommIsland(a, &island), a, "island");
  if (rank != g_rank || size != g_world || island != IslandOf(g_rank))
    Fail("rank/size/island " + std::to_string(rank) + "/" + std::to_string(size) + "/" + std::to_string(island));
  tsrResult_t e = tsrInternalError;
  Check(tsrCommGetAsyncError(a, &e), a, "tsrCommGetAsyncError");
  if (e != tsrSuccess) Fail("a healthy communicator reports async error " + std::to_string(e));
  // Interleaved: a, b, a, b — while a watchdog thread polls both for asynchronous errors, as a
  // framework's watchdog does (tsrCommGetAsyncError is safe concurrently with calls).
  std::atomic<bool> stop{false};
  std::atomic<int> polls{0}, bad{0};
  std::thread watchdog([&] {
    while (!stop.load()) {
      tsrResult_t ea = tsrInternalError, eb = tsrInternalError;
      if (tsrCommGetAsyncError(a, &ea) != tsrSuccess || tsrCommGetAsyncError(b, &eb) != tsrSuccess ||
          ea != tsrSuccess || eb != tsrSuccess)
        ++bad;
      ++polls;
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  });
  CheckAllReduce(a, 1, WorldIslands(), "comm A");
  CheckAllReduce(b, 100, WorldIslands(), "comm B");
  CheckAllReduce(a, 200, WorldIslands(), "comm A again");
  stop = true;
  watchdog.join();
  if (bad.load() != 0)
    Fail(std::to_string(bad.load()) + " of " + std::to_string(polls.load()) +
         " watchdog polls saw an error on healthy communicators");
  Check(tsrBarrier(b), b, "barrier B");
  tsrCommDestroy(b);
  Check(tsrBarrier(a), a, "barrier A");
  tsrCommDestroy(a);
  std::printf("OK rank %d: two communicators from tsrCommInitRank, allreduce bit-exact\n", g_rank);
  return 0;
}

int RunPairs(const std::vector<tsrUniqueId>& ids) {
  const int mine = g_rank % 2;
  const int rank = g_rank / 2;
  const int size = (g_world - mine + 1) / 2;
  std::vector<int> island_of(size);
  for (int r = 0; r < size; ++r) island_of[r] = IslandOf(2 * r + mine);
  // Islands renumbered 0..k-1 in this communicator, in world order.
  std::vector<int> order = island_of;
  std::sort(order.begin(), order.end());
  order.erase(std::unique(order.begin(), order.end()), order.end());
  for (int& i : island_of) i = static_cast<int>(std::find(order.begin(), order.end(), i) - order.begin());
  tsrConfig_t cfg = TSR_CONFIG_INITIALIZER;
  const std::string vendor = "vendor" + std::to_string(IslandOf(g_rank));
  cfg.island = island_of[rank];
  cfg.vendor = vendor.c_str();
  cfg.device = "host";
  cfg.timeout_ms = 30000;
  tsrComm_t c = nullptr;
  const tsrResult_t r = tsrCommInitRank(&c, size, ids[mine], rank, &cfg);
  if (r != tsrSuccess)
    Fail(std::string("tsrCommInitRank (pair ") + std::to_string(mine) + "): " + tsrGetErrorString(r) + ": " +
         tsrGetLastError(nullptr));
  CheckAllReduce(c, 300 + mine, island_of, "pair communicator " + std::to_string(mine));
  Check(tsrBarrier(c), c, "barrier");
  tsrCommDestroy(c);
  std::printf("OK rank %d: rank %d of pair communicator %d, made at once with the other\n", g_rank, rank, mine);
  return 0;
}

int RunSplit(const std::vector<tsrUniqueId>& ids) {
  tsrComm_t w = Join(ids[0]);
  // Invalid calls fail on every rank at once (not after the timeout), naming the rank, and leave the
  // parent usable: a color below NOCOLOR on rank 1, then a bad config on rank 0.
  {
    tsrComm_t x = nullptr;
    tsrResult_t r = tsrCommSplit(w, g_rank == 1 ? -7 : 0, 0, &x, nullptr);
    if (r != tsrInvalidArgument || x != nullptr || !std::strstr(tsrGetLastError(w), "rank 1 passed color -7"))
      Fail(std::string("split with a bad color: ") + tsrGetErrorString(r) + ": " + tsrGetLastError(w));
    tsrConfig_t bad = TSR_CONFIG_INITIALIZER;
    bad.magic = 0;
    r = tsrCommSplit(w, 0, 0, &x, g_rank == 0 ? &bad : nullptr);
    const char* want = g_rank == 0 ? "config->magic" : "rank 0's call was invalid";
    if (r != tsrInvalidArgument || x != nullptr || !std::strstr(tsrGetLastError(w), want))
      Fail(std::string("split with a bad config: ") + tsrGetErrorString(r) + ": " + tsrGetLastError(w));
  }
  // The last rank opts out; the others split into even and odd ranks with reversed keys.
  const bool out = g_rank == g_world - 1;
  const int color = out ? TSR_SPLIT_NOCOLOR : g_rank % 2;
  tsrComm_t c = reinterpret_cast<tsrComm_t>(1);
  Check(tsrCommSplit(w, color, -g_rank, &c, nullptr), w, "tsrCommSplit");
  std::vector<int> child_islands;
  if (out) {
    if (c != nullptr) Fail("NOCOLOR gave a communicator");
  } else {
    // Members of my color in the new order: descending old rank.
    std::vector<int> members;
    for (int r = g_world - 2; r >= 0; --r)
      if (r % 2 == color) members.push_back(r);
    std::vector<int> old_islands;
    for (int r : members) old_islands.push_back(IslandOf(r));
    std::vector<int> distinct = old_islands;
    std::sort(distinct.begin(), distinct.end());
    distinct.erase(std::unique(distinct.begin(), distinct.end()), distinct.end());
    std::vector<int> island_of;  // by new rank
    for (int isl : old_islands)
      island_of.push_back(static_cast<int>(std::find(distinct.begin(), distinct.end(), isl) - distinct.begin()));
    const int want_rank = static_cast<int>(std::find(members.begin(), members.end(), g_rank) - members.begin());
    int rank = -1, size = -1, island = -1;
    Check(tsrCommRank(c, &rank), c, "child rank");
    Check(tsrCommSize(c, &size), c, "child size");
    Check(tsrCommIsland(c, &island), c, "child island");
    if (rank != want_rank || size != static_cast<int>(members.size()) || island != island_of[want_rank])
      Fail("child rank/size/island " + std::to_string(rank) + "/" + std::to_string(size) + "/" +
           std::to_string(island) + ", expected " + std::to_string(want_rank) + "/" + std::to_string(members.size()) +
           "/" + std::to_string(island_of[want_rank]));
    child_islands = island_of;
    CheckAllReduce(c, 300 + color, island_of, "child " + std::to_string(color));
    // Nested: split the child again into one communicator of all its ranks, keys in order.
    tsrComm_t g = nullptr;
    Check(tsrCommSplit(c, 7, rank, &g, nullptr), c, "nested tsrCommSplit");
    CheckAllReduce(g, 400 + color, island_of, "grandchild");
    tsrCommDestroy(g);
  }
  // The parent still works, interleaved with the child.
  CheckAllReduce(w, 500, WorldIslands(), "parent after split");
  if (c != nullptr) CheckAllReduce(c, 600 + color, child_islands, "child after the parent");
  tsrCommDestroy(c);
  Check(tsrBarrier(w), w, "barrier");
  tsrCommDestroy(w);
  std::printf("OK rank %d: split (color %d) and nested split checked bit for bit\n", g_rank, color);
  return 0;
}

uint8_t Pattern(int from, int to, size_t i) { return static_cast<uint8_t>(from * 31 + to * 7 + i * 13 + (i >> 9)); }

int RunGroup(const std::vector<tsrUniqueId>& ids) {
  tsrComm_t c = Join(ids[0]);
  const int W = g_world, me = g_rank;
  // 1. Ring shift, odd ranks posting the receive first. Messages of 3 MiB: larger than a 2 MiB ring, so
  // sends that ran one after another would deadlock.
  {
    const size_t n = 3u << 20;
    std::vector<uint8_t> s(n), r(n, 0);
    for (size_t i = 0; i < n; ++i) s[i] = Pattern(me, (me + 1) % W, i);
    Check(tsrGroupStart(), c, "group start");
    if (me % 2) Check(tsrRecv(r.data(), n, tsrUint8, (me + W - 1) % W, c, nullptr), c, "recv");
    Check(tsrSend(s.data(), n, tsrUint8, (me + 1) % W, c, nullptr), c, "send");
    if (me % 2 == 0) Check(tsrRecv(r.data(), n, tsrUint8, (me + W - 1) % W, c, nullptr), c, "recv");
    Check(tsrGroupEnd(), c, "group end (ring)");
    for (size_t i = 0; i < n; ++i)
      if (r[i] != Pattern((me + W - 1) % W, me, i)) Fail("ring: byte " + std::to_string(i) + " wrong");
  }
  // 2. All pairs: every rank sends to every rank (itself included) a message of its own size; receives
  // are queued first, from the highest rank down, then the sends from the lowest up; nested groups.
  {
    auto len = [&](int from, int to) { return static_cast<size_t>((from * 3 + to * 5) % 7) * 500000 + 1; };
    std::vector<std::vector<uint8_t>> s(W), r(W);
    Check(tsrGroupStart(), c, "group start");
    Check(tsrGroupStart(), c, "nested group start");
    for (int p = W - 1; p >= 0; --p) {
      r[p].assign(len(p, me), 0);
      Check(tsrRecv(r[p].data(), r[p].size(), tsrUint8, p, c, nullptr), c, "recv");
    }
    Check(tsrGroupEnd(), c, "nested group end");
    for (int p = 0; p < W; ++p) {
      s[p].resize(len(me, p));
      for (size_t i = 0; i < s[p].size(); ++i) s[p][i] = Pattern(me, p, i);
      Check(tsrSend(s[p].data(), s[p].size(), tsrUint8, p, c, nullptr), c, "send");
    }
    // Inside a group only send and recv are allowed.
    int one = 1, got = 0;
    if (tsrAllReduce(&one, &got, 1, tsrInt32, tsrSum, c, nullptr) != tsrInvalidArgument)
      Fail("allreduce inside a group was not refused");
    Check(tsrGroupEnd(), c, "group end (all pairs)");
    for (int p = 0; p < W; ++p)
      for (size_t i = 0; i < r[p].size(); ++i)
        if (r[p][i] != Pattern(p, me, i))
          Fail("all pairs: from rank " + std::to_string(p) + " byte " + std::to_string(i) + " wrong");
  }
  // 3. Plain send/recv after groups still match (the group uses the same sequence numbers).
  {
    int v = me * 10, got = -1;
    if (me % 2 == 0 && me + 1 < W) {
      Check(tsrSend(&v, 1, tsrInt32, me + 1, c, nullptr), c, "send");
      Check(tsrRecv(&got, 1, tsrInt32, me + 1, c, nullptr), c, "recv");
      if (got != (me + 1) * 10) Fail("plain recv after groups");
    } else if (me % 2 == 1) {
      Check(tsrRecv(&got, 1, tsrInt32, me - 1, c, nullptr), c, "recv");
      Check(tsrSend(&v, 1, tsrInt32, me - 1, c, nullptr), c, "send");
      if (got != (me - 1) * 10) Fail("plain recv after groups");
    }
  }
  if (tsrGroupEnd() != tsrInvalidArgument) Fail("tsrGroupEnd without tsrGroupStart was not refused");
  Check(tsrBarrier(c), c, "barrier");
  // Last (it fails the communicator): rank 1 receives in a group 5 elements that rank 0 sends as 4.
  std::string mismatch;
  if (me < 2) {
    int32_t buf[5] = {};
    Check(tsrGroupStart(), c, "group start");
    if (me == 0)
      Check(tsrSend(buf, 4, tsrInt32, 1, c, nullptr), c, "send");
    else
      Check(tsrRecv(buf, 5, tsrInt32, 0, c, nullptr), c, "recv");
    const tsrResult_t r = tsrGroupEnd();
    if (me == 0 && r != tsrSuccess) Fail(std::string("the sender of a mismatched pair failed: ") + tsrGetLastError(c));
    if (me == 1 && (r != tsrInvalidArgument || !std::strstr(tsrGetLastError(c), "expects 5 × int32 but rank 0")))
      Fail(std::string("mismatched group recv: ") + tsrGetErrorString(r) + ": " + tsrGetLastError(c));
    if (me == 1) mismatch = std::string("; mismatch named: ") + tsrGetLastError(c);
  }
  tsrCommDestroy(c);
  std::printf("OK rank %d: groups (ring, all pairs, self, nested) exact%s\n", me, mismatch.c_str());
  return 0;
}

int RunAllToAll(const std::vector<tsrUniqueId>& ids) {
  tsrComm_t c = Join(ids[0]);
  const int W = g_world, me = g_rank;
  size_t checked = 0;
  for (int ti = 0; ti < static_cast<int>(DType::kCount); ++ti) {
    const DType t = static_cast<DType>(ti);
    const auto tt = static_cast<tsrDataType_t>(ti);
    const size_t esz = tessera::DTypeSize(t);
    // Equal blocks.
    for (size_t count : {size_t{0}, size_t{1}, size_t{33}, size_t{20000}}) {
      std::vector<unsigned char> s(count * W * esz), r(count * W * esz + 1, 0x5A);
      for (int p = 0; p < W; ++p)
        for (size_t i = 0; i < count; ++i)
          tessera::StoreElement(s.data(), p * count + i, t, Value(ti, me * 64 + p, i, t, tsrSum));
      Check(tsrAllToAll(s.data(), r.data(), count, tt, c, nullptr), c, "tsrAllToAll");
      for (int p = 0; p < W; ++p)
        for (size_t i = 0; i < count; ++i)
          if (tessera::LoadElement(r.data(), p * count + i, t) != Value(ti, p * 64 + me, i, t, tsrSum))
            Fail(std::string("alltoall ") + tessera::DTypeName(t) + " count " + std::to_string(count) + ": block " +
                 std::to_string(p) + " element " + std::to_string(i) + " wrong");
      if (r.back() != 0x5A) Fail("alltoall wrote past the end");
      ++checked;
    }
    // Uneven counts, zeros included, blocks in reverse order with gaps of 3 elements that must keep
    // their bytes.
    auto cnt = [&](int from, int to) { return static_cast<size_t>((from * 5 + to * 3 + ti) % 4) * 777; };
    std::vector<size_t> sc(W), sd(W), rc(W), rd(W);
    size_t so = 0, ro = 0;
    for (int p = W - 1; p >= 0; --p) {
      sc[p] = cnt(me, p);
      sd[p] = so + 3;
      so = sd[p] + sc[p];
      rc[p] = cnt(p, me);
      rd[p] = ro + 3;
      ro = rd[p] + rc[p];
    }
    std::vector<unsigned char> s(so * esz + 1), r(ro * esz + 1, 0xC3);
    for (int p = 0; p < W; ++p)
      for (size_t i = 0; i < sc[p]; ++i)
        tessera::StoreElement(s.data(), sd[p] + i, t, Value(ti, me * 64 + p, i, t, tsrSum));
    Check(tsrAllToAllv(s.data(), sc.data(), sd.data(), r.data(), rc.data(), rd.data(), tt, c, nullptr), c,
          "tsrAllToAllv");
    std::vector<bool> covered(ro, false);
    for (int p = 0; p < W; ++p)
      for (size_t i = 0; i < rc[p]; ++i) {
        covered[rd[p] + i] = true;
        if (tessera::LoadElement(r.data(), rd[p] + i, t) != Value(ti, p * 64 + me, i, t, tsrSum))
          Fail(std::string("alltoallv ") + tessera::DTypeName(t) + ": from rank " + std::to_string(p) + " element " +
               std::to_string(i) + " wrong");
      }
    for (size_t e = 0; e < ro; ++e)
      if (!covered[e])
        for (size_t b = 0; b < esz; ++b)
          if (r[e * esz + b] != 0xC3) Fail("alltoallv wrote into a gap at element " + std::to_string(e));
    ++checked;
  }
  // A count mismatch is an error on both sides, naming them.
  if (W >= 2 && me < 2) {
    std::vector<size_t> sc(W, 0), sd(W, 0), rc(W, 0), rd(W, 0);
    std::vector<int32_t> s(8), r(8);
    sc[1 - me] = 4;
    rc[1 - me] = me == 0 ? 5 : 4;  // rank 0 expects 5, rank 1 sends 4
    tsrResult_t res =
        tsrAllToAllv(s.data(), sc.data(), sd.data(), r.data(), rc.data(), rd.data(), tsrInt32, c, nullptr);
    if (me == 0 && (res != tsrInvalidArgument || !std::strstr(tsrGetLastError(c), "recvcount from rank 1 = 5")))
      Fail(std::string("mismatched alltoallv: ") + tsrGetErrorString(res) + ": " + tsrGetLastError(c));
    if (me == 1 && res == tsrSuccess) {
      // Rank 1's own side matched; it hears of rank 0's failure at its next call.
      int one = 1;
      res = tsrAllReduce(&one, &one, 1, tsrInt32, tsrSum, c, nullptr);
    }
    if (res == tsrSuccess) Fail("mismatched alltoallv succeeded");
    std::printf("OK rank %d: %zu alltoall cases exact; mismatch named: %s\n", me, checked, tsrGetLastError(c));
  } else {
    std::printf("OK rank %d: %zu alltoall cases exact\n", me, checked);
  }
  tsrCommDestroy(c);
  return 0;
}

int RunAbort(const std::vector<tsrUniqueId>& ids) {
  // A timeout far beyond the test's: a recv that the abort did not end would fail with tsrTimeout.
  tsrComm_t c = Join(ids[0], 25000);
  Check(tsrBarrier(c), c, "barrier");
  if (g_rank == 0) {
    std::atomic<bool> go{false};
    std::thread t([&] {
      while (!go.load()) std::this_thread::yield();
      std::this_thread::sleep_for(std::chrono::milliseconds(200));  // let the recv block first
      tsrCommAbort(c);
    });
    int v = 0;
    go = true;
    tsrResult_t r = tsrRecv(&v, 1, tsrInt32, 1, c, nullptr);  // rank 1 never sends
    t.join();
    if (r != tsrRemoteError || !std::strstr(tsrGetLastError(c), "abort"))
      Fail(std::string("pending recv after abort: ") + tsrGetErrorString(r) + ": " + tsrGetLastError(c));
    const std::string first = tsrGetLastError(c);
    r = tsrBarrier(c);
    if (r == tsrSuccess) Fail("a call after abort succeeded");
    tsrResult_t e = tsrSuccess;
    Check(tsrCommGetAsyncError(c, &e), c, "tsrCommGetAsyncError");
    if (e != tsrRemoteError) Fail("tsrCommGetAsyncError after abort: " + std::to_string(e));
    if (tsrCommAbort(c) != tsrSuccess) Fail("a second abort failed");
    std::printf("OK rank 0: the pending recv ended: %s\n", first.c_str());
  } else {
    // Waits for rank 0 in a recv that rank 0 never matches: the posted abort ends it.
    int v = 0;
    tsrResult_t r = tsrRecv(&v, 1, tsrInt32, 0, c, nullptr);
    if (r != tsrRemoteError || !std::strstr(tsrGetLastError(c), "aborted"))
      Fail(std::string("peer of an aborted rank: ") + tsrGetErrorString(r) + ": " + tsrGetLastError(c));
    std::printf("OK rank %d: heard of the abort: %s\n", g_rank, tsrGetLastError(c));
  }
  tsrCommDestroy(c);
  return 0;
}

int RunAsyncErr(const std::vector<tsrUniqueId>& ids) {
  tsrComm_t c = Join(ids[0], 25000);
  Check(tsrBarrier(c), c, "barrier");
  if (g_rank == g_world - 1) {
    std::printf("OK rank %d: exiting without a word\n", g_rank);
    std::fflush(stdout);
    _exit(0);
  }
  tsrResult_t e = tsrSuccess;
  for (int i = 0; i < 2000 && e == tsrSuccess; ++i) {  // bounded: 20 s
    Check(tsrCommGetAsyncError(c, &e), c, "tsrCommGetAsyncError");
    if (e == tsrSuccess) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  if (e != tsrRemoteError) Fail("tsrCommGetAsyncError after a peer died: " + std::to_string(e));
  // The cause, on this thread, without a failed call first (a GPU rank's failures arrive this way): a
  // peer that exited — the last rank, or one that saw it first and has already finished.
  const std::string cause = tsrGetLastError(c);
  if (cause.find("exited") == std::string::npos || cause.find("(pid ") == std::string::npos)
    Fail("tsrGetLastError after tsrCommGetAsyncError does not name a peer that exited: '" + cause + "'");
  // Only this thread's: another thread sees none (its own calls have not failed).
  std::string other = "unset";
  std::thread([&] { other = tsrGetLastError(c); }).join();
  if (!other.empty()) Fail("another thread's tsrGetLastError: '" + other + "'");
  int one = 1;
  tsrResult_t r = tsrAllReduce(&one, &one, 1, tsrInt32, tsrSum, c, nullptr);
  if (r != tsrRemoteError) Fail(std::string("the next call: ") + tsrGetErrorString(r));
  std::printf("OK rank %d: async error %d: %s\n", g_rank, e, tsrGetLastError(c));
  tsrCommDestroy(c);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  setvbuf(stdout, nullptr, _IOLBF, 0);
  if (argc < 2) {
    std::fprintf(stderr, "usage: framework_worker SCENARIO --ids FILE --rank R --layout A,B,... [--make-id]\n");
    return 2;
  }
  const std::string scenario = argv[1];
  std::string ids_file;
  bool make = false;
  for (int i = 2; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--ids" && i + 1 < argc)
      ids_file = argv[++i];
    else if (a == "--rank" && i + 1 < argc)
      g_rank = std::atoi(argv[++i]);
    else if (a == "--make-id")
      make = true;
    else if (a == "--layout" && i + 1 < argc) {
      for (const char* p = argv[++i]; *p;) {
        g_layout.push_back(std::atoi(p));
        while (*p && *p != ',') ++p;
        if (*p == ',') ++p;
      }
    }
  }
  for (int n : g_layout) g_world += n;
  // No variable that says who this rank is or where the job meets (the bridge's tuning may be set, and
  // TESSERA_TOKEN when the ids were made in a job: each rank joins them with the job's token).
  for (const char* v : {"TESSERA_RANK", "TESSERA_WORLD_SIZE", "TESSERA_STORE", "TESSERA_ISLAND",
                        "TESSERA_ISLAND_VENDOR", "TESSERA_DEVICE", "TESSERA_TIMEOUT"})
    if (std::getenv(v) != nullptr) Fail(std::string("the test must run without ") + v);
  const size_t nids = scenario == "basic" || scenario == "pairs" ? 2 : 1;
  if (make && g_rank == 0) {
    std::vector<tsrUniqueId> ids(nids);
    for (auto& id : ids)
      if (tsrGetUniqueId(&id) != tsrSuccess) Fail(std::string("tsrGetUniqueId: ") + tsrGetLastError(nullptr));
    const std::string tmp = ids_file + ".tmp";
    std::ofstream(tmp, std::ios::binary).write(reinterpret_cast<const char*>(ids.data()), nids * sizeof(tsrUniqueId));
    std::rename(tmp.c_str(), ids_file.c_str());
  }
  const auto ids = ReadIds(ids_file, nids);
  if (scenario == "basic") return RunBasic(ids);
  if (scenario == "split") return RunSplit(ids);
  if (scenario == "pairs") return RunPairs(ids);
  if (scenario == "group") return RunGroup(ids);
  if (scenario == "alltoall") return RunAllToAll(ids);
  if (scenario == "abort") return RunAbort(ids);
  if (scenario == "asyncerr") return RunAsyncErr(ids);
  Fail("unknown scenario " + scenario);
}
