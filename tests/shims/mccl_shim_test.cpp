// tests/shims/mccl_shim_test: the MCCL host shim (libmccl.so.2 over libmusart.so) through dlopen and the
// signatures of mccl_abi.h: every symbol src/comm/ccl/ccl.hpp's CclLibrary resolves, and communicators of 2, 3 and
// 4 forked ranks (unique id passed in a file): allreduce of every type and op (avg included) against a reference,
// reduce-scatter in place, allgather, broadcast, an all-to-all of grouped sends and receives, ranks that disagree,
// a dead rank, mcclCommAbort releasing a stream, and bad arguments.
#include <chrono>
#include <thread>

#include "mccl_abi.h"
#include "musa_abi.h"
#include "shim_test_ref.hpp"
#include "shim_test_util.hpp"

namespace {

using shimtest::R;
using shimtest::T;

struct Mccl {
  shimtest::Lib musa{TESSERA_SHIM_MUSA}, mccl{TESSERA_SHIM_MCCL};
  decltype(&::musaSetDevice) musaSetDevice;
  decltype(&::musaMalloc) musaMalloc;
  decltype(&::musaMemcpy) musaMemcpy;
  decltype(&::musaStreamCreate) musaStreamCreate;
  decltype(&::musaStreamSynchronize) musaStreamSynchronize;
  decltype(&::mcclGetVersion) mcclGetVersion;
  decltype(&::mcclGetUniqueId) mcclGetUniqueId;
  decltype(&::mcclCommInitRank) mcclCommInitRank;
  decltype(&::mcclCommDestroy) mcclCommDestroy;
  decltype(&::mcclCommAbort) mcclCommAbort;
  decltype(&::mcclCommGetAsyncError) mcclCommGetAsyncError;
  decltype(&::mcclCommCount) mcclCommCount;
  decltype(&::mcclCommUserRank) mcclCommUserRank;
  decltype(&::mcclGetErrorString) mcclGetErrorString;
  decltype(&::mcclGetLastError) mcclGetLastError;
  decltype(&::mcclAllReduce) mcclAllReduce;
  decltype(&::mcclReduceScatter) mcclReduceScatter;
  decltype(&::mcclAllGather) mcclAllGather;
  decltype(&::mcclBroadcast) mcclBroadcast;
  decltype(&::mcclSend) mcclSend;
  decltype(&::mcclRecv) mcclRecv;
  decltype(&::mcclGroupStart) mcclGroupStart;
  decltype(&::mcclGroupEnd) mcclGroupEnd;
  Mccl() {
    SHIM_SYM(musa, musaSetDevice), SHIM_SYM(musa, musaMalloc), SHIM_SYM(musa, musaMemcpy);
    SHIM_SYM(musa, musaStreamCreate), SHIM_SYM(musa, musaStreamSynchronize);
    SHIM_SYM(mccl, mcclGetVersion), SHIM_SYM(mccl, mcclGetUniqueId), SHIM_SYM(mccl, mcclCommInitRank);
    SHIM_SYM(mccl, mcclCommDestroy), SHIM_SYM(mccl, mcclCommAbort), SHIM_SYM(mccl, mcclCommGetAsyncError);
    SHIM_SYM(mccl, mcclCommCount), SHIM_SYM(mccl, mcclCommUserRank), SHIM_SYM(mccl, mcclGetErrorString);
    SHIM_SYM(mccl, mcclGetLastError), SHIM_SYM(mccl, mcclAllReduce), SHIM_SYM(mccl, mcclReduceScatter);
    SHIM_SYM(mccl, mcclAllGather), SHIM_SYM(mccl, mcclBroadcast), SHIM_SYM(mccl, mcclSend);
    SHIM_SYM(mccl, mcclRecv), SHIM_SYM(mccl, mcclGroupStart), SHIM_SYM(mccl, mcclGroupEnd);
  }
};
Mccl& C() {
  static Mccl c;
  return c;
}

struct Rank {
  int rank = 0, n = 0;
  mcclComm_t comm = nullptr;
  musaStream_t stream = nullptr;
};

std::string Join(const std::string& file, int rank, int n, Rank* r) {
  auto& c = C();
  r->rank = rank, r->n = n;
  RANK_CHECK(c.musaSetDevice(rank % 8) == musaSuccess && c.musaStreamCreate(&r->stream) == musaSuccess, "MUSA");
  mcclUniqueId id{};
  if (rank == 0) {
    RANK_CHECK(c.mcclGetUniqueId(&id) == mcclSuccess && shimtest::PublishId(file, &id, sizeof id), "unique id");
  } else {
    RANK_CHECK(shimtest::ReadId(file, &id, sizeof id), "no unique id in %s", file.c_str());
  }
  const mcclResult_t e = c.mcclCommInitRank(&r->comm, n, id, rank);
  RANK_CHECK(e == mcclSuccess, "mcclCommInitRank: %d %s", e, c.mcclGetLastError(nullptr));
  return "";
}
void* Upload(const std::vector<char>& v) {
  void* d = nullptr;
  if (C().musaMalloc(&d, v.size() + 64) != musaSuccess) return nullptr;
  C().musaMemcpy(d, v.data(), v.size(), musaMemcpyHostToDevice);
  return d;
}
std::vector<char> Download(const void* d, size_t bytes) {
  std::vector<char> v(bytes);
  C().musaMemcpy(v.data(), d, bytes, musaMemcpyDeviceToHost);
  return v;
}
// Synchronises and checks the communicator: MCCL's errors do not fail the stream.
std::string Sync(const Rank& r, const char* what) {
  RANK_CHECK(C().musaStreamSynchronize(r.stream) == musaSuccess, "%s: musaStreamSynchronize", what);
  mcclResult_t async = mcclInternalError;
  RANK_CHECK(C().mcclCommGetAsyncError(r.comm, &async) == mcclSuccess && async == mcclSuccess, "%s: async %d: %s", what,
             async, C().mcclGetLastError(r.comm));
  return "";
}
#define RANK_OK(expr)           \
  do {                          \
    std::string m_ = (expr);    \
    if (!m_.empty()) return m_; \
  } while (0)

const std::pair<mcclDataType_t, T> kTypes[] = {
    {mcclInt8, T::i8},    {mcclUint8, T::u8},    {mcclInt32, T::i32},   {mcclUint32, T::u32},  {mcclInt64, T::i64},
    {mcclUint64, T::u64}, {mcclFloat16, T::f16}, {mcclFloat32, T::f32}, {mcclFloat64, T::f64}, {mcclBfloat16, T::bf16}};
const std::pair<mcclRedOp_t, R> kOps[] = {
    {mcclSum, R::sum}, {mcclProd, R::prod}, {mcclMax, R::max}, {mcclMin, R::min}, {mcclAvg, R::avg}};

class MccBase : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(C().musa.ok() && C().mccl.ok()) << C().musa.error() << C().mccl.error();
    ASSERT_EQ(C().musa.missing() + C().mccl.missing(), "");
  }
  shimtest::TempDir dir_;
};
class McclShim : public MccBase, public ::testing::WithParamInterface<int> {};
class McclShimFailures : public MccBase {};

TEST_F(McclShimFailures, ExportsEverySymbolTheCclLoaderResolves) {
  // src/comm/ccl/ccl.hpp, class CclLibrary: prefix + each of these names.
  for (const char* name :
       {"GetVersion", "GetUniqueId", "CommInitRank", "CommDestroy", "CommAbort", "CommGetAsyncError", "AllReduce",
        "ReduceScatter", "AllGather", "Broadcast", "Send", "Recv", "GroupStart", "GroupEnd", "GetErrorString"})
    EXPECT_NE(dlsym(C().mccl.handle(), (std::string("mccl") + name).c_str()), nullptr) << "mccl" << name;
  int v = 0;
  EXPECT_EQ(C().mcclGetVersion(&v), mcclSuccess);
  EXPECT_EQ(v, 21104);  // NCCL's encoding: 2.11.4
  EXPECT_STREQ(C().mcclGetErrorString(mcclRemoteError), "remote process exited or there was a network error");
  EXPECT_EQ(sizeof(mcclUniqueId), 128u);
}

TEST_P(McclShim, AllReduceOfEveryTypeAndOpMatchesTheReference) {
  const int n = GetParam();
  const std::string file = dir_.File("id");
  auto res = shimtest::RunRanks(n, [&](int rank) -> std::string {
    setenv("TESSERA_SHIM_SLOT_BYTES", "4096", 1);
    Rank r;
    RANK_OK(Join(file, rank, n, &r));
    const size_t count = 1001;
    for (const auto& [mt, t] : kTypes) {
      for (const auto& [mop, op] : kOps) {
        std::vector<char> in = shimtest::Inputs(t, op, rank, count);
        void *ds = Upload(in), *dr = Upload(std::vector<char>(in.size()));
        RANK_CHECK(C().mcclAllReduce(ds, dr, count, mt, mop, r.comm, r.stream) == mcclSuccess, "type %d op %d", mt,
                   mop);
        RANK_OK(Sync(r, "allreduce"));
        const std::vector<char> want = shimtest::Expected(t, op, n, count), got = Download(dr, in.size());
        const long i = shimtest::FirstDiff(t, got, want);
        RANK_CHECK(i < 0, "type %d op %d element %ld: got %.9g want %.9g", mt, mop, i,
                   shimtest::Get(t, got.data(), static_cast<size_t>(i)),
                   shimtest::Get(t, want.data(), static_cast<size_t>(i)));
      }
    }
    RANK_CHECK(C().mcclCommDestroy(r.comm) == mcclSuccess, "destroy");
    return "";
  });
  shimtest::ExpectAllPassed(res);
}

TEST_P(McclShim, ReduceScatterAllGatherBroadcastAndAllToAll) {
  const int n = GetParam();
  const std::string file = dir_.File("id");
  auto res = shimtest::RunRanks(n, [&](int rank) -> std::string {
    setenv("TESSERA_SHIM_SLOT_BYTES", "4096", 1);
    setenv("TESSERA_SHIM_CHANNEL_BYTES", "1024", 1);
    Rank r;
    RANK_OK(Join(file, rank, n, &r));
    auto& c = C();
    int cnt = 0, me = -1;
    RANK_CHECK(c.mcclCommCount(r.comm, &cnt) == mcclSuccess && cnt == n, "count");
    RANK_CHECK(c.mcclCommUserRank(r.comm, &me) == mcclSuccess && me == rank, "user rank");
    const size_t nn = static_cast<size_t>(n), rc = 613;
    // Reduce-scatter in place: recvbuff = sendbuff + rank * recvcount.
    char* ds = static_cast<char*>(Upload(shimtest::Inputs(T::bf16, R::sum, rank, nn * rc)));
    char* dr = ds + static_cast<size_t>(rank) * rc * 2;
    RANK_CHECK(c.mcclReduceScatter(ds, dr, rc, mcclBfloat16, mcclSum, r.comm, r.stream) == mcclSuccess, "rs");
    RANK_OK(Sync(r, "reduce-scatter"));
    const std::vector<char> all = shimtest::ExpectedReduceScatter(T::bf16, R::sum, n, rc);
    RANK_CHECK(Download(dr, rc * 2) == std::vector<char>(all.begin() + static_cast<long>(rank * rc * 2),
                                                         all.begin() + static_cast<long>((rank + 1) * rc * 2)),
               "reduce-scatter result");
    const size_t sc = 555;
    void *gs = Upload(shimtest::Inputs(T::f64, R::sum, rank, sc)), *gr = Upload(std::vector<char>(nn * sc * 8));
    RANK_CHECK(c.mcclAllGather(gs, gr, sc, mcclFloat64, r.comm, r.stream) == mcclSuccess, "allgather");
    RANK_OK(Sync(r, "allgather"));
    std::vector<char> want;
    for (int q = 0; q < n; ++q) {
      std::vector<char> part = shimtest::Inputs(T::f64, R::sum, q, sc);
      want.insert(want.end(), part.begin(), part.end());
    }
    RANK_CHECK(Download(gr, nn * sc * 8) == want, "allgather result");
    const int root = n / 2;
    const size_t bc = 999;
    const std::vector<char> data = shimtest::Inputs(T::i32, R::sum, 77, bc);
    void* bs = rank == root ? Upload(data) : nullptr;  // sendbuff matters on the root only
    void* br = Upload(std::vector<char>(bc * 4));
    RANK_CHECK(c.mcclBroadcast(bs, br, bc, mcclInt32, root, r.comm, r.stream) == mcclSuccess, "broadcast");
    RANK_OK(Sync(r, "broadcast"));
    RANK_CHECK(Download(br, bc * 4) == data, "broadcast result");
    // All-to-all as torch_musa does it: one group of a send and a receive per peer, itself included.
    const size_t pc = 700;
    std::vector<char> sendv;
    for (int q = 0; q < n; ++q) {
      std::vector<char> part = shimtest::Inputs(T::f32, R::sum, rank * 10 + q, pc);
      sendv.insert(sendv.end(), part.begin(), part.end());
    }
    char *as = static_cast<char*>(Upload(sendv)), *arv = static_cast<char*>(Upload(std::vector<char>(sendv.size())));
    RANK_CHECK(c.mcclGroupStart() == mcclSuccess, "group start");
    for (int q = 0; q < n; ++q) {
      RANK_CHECK(c.mcclSend(as + static_cast<size_t>(q) * pc * 4, pc, mcclFloat32, q, r.comm, r.stream) == 0, "send");
      RANK_CHECK(c.mcclRecv(arv + static_cast<size_t>(q) * pc * 4, pc, mcclFloat32, q, r.comm, r.stream) == 0, "recv");
    }
    RANK_CHECK(c.mcclGroupEnd() == mcclSuccess, "group end");
    RANK_OK(Sync(r, "all-to-all"));
    const std::vector<char> got = Download(arv, sendv.size());
    for (int q = 0; q < n; ++q) {
      const std::vector<char> part = shimtest::Inputs(T::f32, R::sum, q * 10 + rank, pc);
      RANK_CHECK(std::memcmp(got.data() + static_cast<size_t>(q) * pc * 4, part.data(), part.size()) == 0,
                 "block from rank %d", q);
    }
    RANK_CHECK(c.mcclCommDestroy(r.comm) == mcclSuccess, "destroy");
    return "";
  });
  shimtest::ExpectAllPassed(res);
}

INSTANTIATE_TEST_SUITE_P(Ranks, McclShim, ::testing::Values(2, 3, 4));

TEST_F(McclShimFailures, RanksThatDisagreeGetInvalidUsage) {
  const std::string file = dir_.File("id");
  auto res = shimtest::RunRanks(3, [&](int rank) -> std::string {
    Rank r;
    RANK_OK(Join(file, rank, 3, &r));
    void* d = Upload(std::vector<char>(512));
    const mcclRedOp_t op = rank == 1 ? mcclMax : mcclSum;  // rank 1 reduces with another op
    RANK_CHECK(C().mcclAllReduce(d, d, 64, mcclFloat32, op, r.comm, r.stream) == mcclSuccess, "enqueue");
    RANK_CHECK(C().musaStreamSynchronize(r.stream) == musaSuccess, "the stream completes");
    mcclResult_t async = mcclSuccess;
    RANK_CHECK(C().mcclCommGetAsyncError(r.comm, &async) == mcclSuccess && async == mcclInvalidUsage, "async %d",
               async);
    RANK_CHECK(std::string(C().mcclGetLastError(r.comm)).find("disagree") != std::string::npos, "message");
    return "";
  });
  shimtest::ExpectAllPassed(res);
}

TEST_F(McclShimFailures, ADeadRankGivesRemoteErrorWithinTheTimeout) {
  const std::string file = dir_.File("id");
  auto res = shimtest::RunRanks(4, [&](int rank) -> std::string {
    setenv("TESSERA_SHIM_TIMEOUT_MS", "3000", 1);
    Rank r;
    RANK_OK(Join(file, rank, 4, &r));
    if (rank == 3) _exit(0);
    void* d = Upload(std::vector<char>(4096));
    const auto t0 = std::chrono::steady_clock::now();
    RANK_CHECK(C().mcclAllReduce(d, d, 1024, mcclFloat32, mcclSum, r.comm, r.stream) == mcclSuccess, "enqueue");
    RANK_CHECK(C().musaStreamSynchronize(r.stream) == musaSuccess, "the stream is released");
    const auto ms =
        std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0).count();
    mcclResult_t async = mcclSuccess;
    RANK_CHECK(C().mcclCommGetAsyncError(r.comm, &async) == mcclSuccess && async == mcclRemoteError, "async %d", async);
    RANK_CHECK(ms < 3000, "after %lld ms", static_cast<long long>(ms));
    return "";
  });
  shimtest::ExpectAllPassed(res, {3});
}

TEST_F(McclShimFailures, AbortReleasesAStreamWaitingForAPeer) {
  const std::string file = dir_.File("id");
  auto res = shimtest::RunRanks(2, [&](int rank) -> std::string {
    setenv("TESSERA_SHIM_TIMEOUT_MS", "20000", 1);  // so that only the abort can end the wait
    Rank r;
    RANK_OK(Join(file, rank, 2, &r));
    if (rank == 1) {
      std::this_thread::sleep_for(std::chrono::seconds(2));  // never sends
      return "";
    }
    void* d = Upload(std::vector<char>(64));
    RANK_CHECK(C().mcclRecv(d, 16, mcclFloat32, 1, r.comm, r.stream) == mcclSuccess, "recv");
    const auto t0 = std::chrono::steady_clock::now();
    std::thread aborter([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
      C().mcclCommAbort(r.comm);
    });
    const musaError_t e = C().musaStreamSynchronize(r.stream);
    aborter.join();
    const auto ms =
        std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0).count();
    RANK_CHECK(e == musaSuccess && ms >= 250 && ms < 5000, "sync %d after %lld ms", e, static_cast<long long>(ms));
    mcclResult_t async;
    RANK_CHECK(C().mcclCommGetAsyncError(r.comm, &async) == mcclInvalidArgument, "the handle is gone after abort");
    return "";
  });
  shimtest::ExpectAllPassed(res);
}

TEST_F(McclShimFailures, BadArgumentsAreRefusedAtTheCall) {
  const std::string file = dir_.File("id");
  auto res = shimtest::RunRanks(1, [&](int) -> std::string {
    Rank r;
    RANK_OK(Join(file, 0, 1, &r));
    auto& c = C();
    void* d = Upload(std::vector<char>(256));
    std::vector<char> host(256);
    RANK_CHECK(c.mcclAllReduce(host.data(), d, 8, mcclFloat32, mcclSum, r.comm, r.stream) == mcclInvalidArgument,
               "host memory");
    RANK_CHECK(std::string(c.mcclGetLastError(r.comm)).find("not device memory") != std::string::npos, "message");
    RANK_CHECK(
        c.mcclAllReduce(d, d, 8, static_cast<mcclDataType_t>(10), mcclSum, r.comm, r.stream) == mcclInvalidArgument,
        "type 10");
    RANK_CHECK(
        c.mcclAllReduce(d, d, 8, mcclFloat32, static_cast<mcclRedOp_t>(5), r.comm, r.stream) == mcclInvalidArgument,
        "op 5");
    RANK_CHECK(c.mcclAllReduce(d, d, 1000, mcclFloat32, mcclSum, r.comm, r.stream) == mcclInvalidArgument, "overrun");
    RANK_CHECK(c.mcclSend(d, 8, mcclInt8, 1, r.comm, r.stream) == mcclInvalidArgument, "peer 1 of 1");
    RANK_CHECK(c.mcclBroadcast(d, d, 8, mcclInt8, -1, r.comm, r.stream) == mcclInvalidArgument, "root -1");
    RANK_CHECK(c.mcclGroupEnd() == mcclInvalidUsage, "GroupEnd without GroupStart");
    mcclComm_t other = nullptr;
    mcclUniqueId junk{};
    RANK_CHECK(c.mcclCommInitRank(&other, 1, junk, 0) == mcclInvalidArgument, "an id mcclGetUniqueId did not make");
    RANK_CHECK(c.mcclCommInitRank(&other, 2, junk, 2) == mcclInvalidArgument, "rank 2 of 2");
    // A one-rank communicator works on its own.
    RANK_CHECK(c.mcclAllReduce(d, d, 8, mcclFloat32, mcclAvg, r.comm, r.stream) == mcclSuccess, "one-rank allreduce");
    RANK_OK(Sync(r, "one-rank allreduce"));
    RANK_CHECK(c.mcclCommDestroy(r.comm) == mcclSuccess, "destroy");
    RANK_CHECK(c.mcclCommDestroy(r.comm) == mcclInvalidArgument, "destroy twice");
    return "";
  });
  shimtest::ExpectAllPassed(res);
}

}  // namespace
