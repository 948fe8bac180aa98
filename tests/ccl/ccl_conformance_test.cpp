// tests/ccl/ccl_conformance_test: the CCL rows of kCclTable (src/comm/ccl/ccl.hpp) through CclLibrary, as Tessera
// calls them (NCCL's shapes and numbers): a typed conformance suite per row, run against a library that runs here
// -- nccl on the fake NCCL of tests/gpu (one rank), hccl on the HCCL host shim (+ libhcomm's group calls), mccl on
// the MCCL host shim. 1, 2 and 3 forked ranks meet through Tessera's store (CclComm::Create: the unique id or the
// 4,108-byte root info) and run allreduce of every type x op the row supports (avg via sum + one scale where the
// row has none), reduce-scatter, allgather, broadcast in and out of place, and send/recv in a group; unsupported
// types / ops are clear Unsupported errors; missing libraries and symbols are named.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "ccl/ccl_runtime.hpp"
#include "comm/ccl/ccl.hpp"
#include "comm/store/store.hpp"
#include "common/env_vars.hpp"
#include "common/vendor.hpp"

namespace tessera::comm {
namespace {

using ccltest::Runtime;

// A row of kCclTable pointed at a library that runs here, with its runtime.
struct NcclRow {
  static constexpr const char* kName = "nccl";
  static constexpr int kMaxRanks = 1;  // the fake NCCL makes communicators of one rank
  static CclRow Row() {
    CclRow r = *FindCclRow("nccl");
    r.soname = TESSERA_FAKE_CCL;
    r.prefix = "fake";  // the fake exports NCCL's calls as fake*
    return r;
  }
  static std::unique_ptr<Runtime> MakeRuntime() { return std::make_unique<ccltest::HostRuntime>(); }
};
struct HcclRow {
  static constexpr const char* kName = "hccl";
  static constexpr int kMaxRanks = 3;
  static CclRow Row() {
    CclRow r = *FindCclRow("hccl");
    r.soname = TESSERA_SHIM_HCCL;  // libhcomm.so is found beside it
    return r;
  }
  static std::unique_ptr<Runtime> MakeRuntime() { return std::make_unique<ccltest::AclRuntime>(TESSERA_SHIM_ACL); }
};
struct MrowMccl {
  static constexpr const char* kName = "mccl";
  static constexpr int kMaxRanks = 3;
  static CclRow Row() {
    CclRow r = *FindCclRow("mccl");
    r.soname = TESSERA_SHIM_MCCL;
    return r;
  }
  static std::unique_ptr<Runtime> MakeRuntime() { return std::make_unique<ccltest::MusaRuntime>(TESSERA_SHIM_MUSA); }
};

// Values exact in every type: v = n * g with small g (so sum, avg = sum / n, min, max are exact), prod of 1s and 2s.
double Input(DType t, RedOp op, int nranks, int rank, size_t i) {
  if (op == RedOp::kProd) return 1 + static_cast<double>((rank + i) % 2);
  const bool sign = t != DType::kUint8;
  const int g = static_cast<int>((i * 7 + static_cast<size_t>(rank) * 3) % 6) - (sign ? 2 : 0);  // -2..3 or 0..5
  return static_cast<double>(nranks * g);
}

void Put(DType t, void* p, size_t i, double v) {
  switch (t) {
    case DType::kInt8:
      static_cast<int8_t*>(p)[i] = static_cast<int8_t>(v);
      break;
    case DType::kUint8:
      static_cast<uint8_t*>(p)[i] = static_cast<uint8_t>(v);
      break;
    case DType::kInt32:
      static_cast<int32_t*>(p)[i] = static_cast<int32_t>(v);
      break;
    case DType::kInt64:
      static_cast<int64_t*>(p)[i] = static_cast<int64_t>(v);
      break;
    case DType::kFloat16:
      static_cast<uint16_t*>(p)[i] = F32ToF16(static_cast<float>(v));
      break;
    case DType::kBfloat16:
      static_cast<uint16_t*>(p)[i] = F32ToBf16(static_cast<float>(v));
      break;
    case DType::kFloat32:
      static_cast<float*>(p)[i] = static_cast<float>(v);
      break;
    default:
      static_cast<double*>(p)[i] = v;
  }
}

double Get(DType t, const void* p, size_t i) {
  switch (t) {
    case DType::kInt8:
      return static_cast<const int8_t*>(p)[i];
    case DType::kUint8:
      return static_cast<const uint8_t*>(p)[i];
    case DType::kInt32:
      return static_cast<const int32_t*>(p)[i];
    case DType::kInt64:
      return static_cast<double>(static_cast<const int64_t*>(p)[i]);
    case DType::kFloat16:
      return F16ToF32(static_cast<const uint16_t*>(p)[i]);
    case DType::kBfloat16:
      return Bf16ToF32(static_cast<const uint16_t*>(p)[i]);
    case DType::kFloat32:
      return static_cast<const float*>(p)[i];
    default:
      return static_cast<const double*>(p)[i];
  }
}

double Reference(DType t, RedOp op, int nranks, size_t i) {
  double acc = Input(t, op, nranks, 0, i);
  for (int r = 1; r < nranks; ++r) {
    const double v = Input(t, op, nranks, r, i);
    acc = op == RedOp::kProd  ? acc * v
          : op == RedOp::kMax ? std::max(acc, v)
          : op == RedOp::kMin ? std::min(acc, v)
                              : acc + v;
  }
  return op == RedOp::kAvg ? acc / nranks : acc;
}

// One rank's view: its runtime, library, communicator and stream; failures are collected, not thrown.
struct Rank {
  int nranks = 0, rank = 0;
  std::unique_ptr<Runtime> rt;
  std::shared_ptr<CclLibrary> lib;
  std::unique_ptr<CclComm> comm;
  void* stream = nullptr;
  std::vector<std::string> failures;

  void Fail(const std::string& m) { failures.push_back("rank " + std::to_string(rank) + ": " + m); }
  bool Ok(const Status& s, const std::string& what) {
    if (!s.ok()) Fail(what + ": " + s.message());
    return s.ok();
  }
  void* Dev(DType t, const std::vector<double>& v) {
    const size_t es = DTypeSize(t);
    std::vector<char> h(v.size() * es);
    for (size_t i = 0; i < v.size(); ++i) Put(t, h.data(), i, v[i]);
    void* d = rt->Malloc(h.size());
    if (!d || !rt->ToDevice(d, h.data(), h.size())) Fail("device buffer");
    return d;
  }
  std::vector<double> Host(DType t, const void* d, size_t n) {
    std::vector<char> h(n * DTypeSize(t));
    if (!rt->Sync(stream) || !rt->ToHost(h.data(), d, h.size())) Fail("sync / copy back");
    std::vector<double> v(n);
    for (size_t i = 0; i < n; ++i) v[i] = Get(t, h.data(), i);
    return v;
  }
  bool Call(int r, const char* what) { return Ok(lib->Check(r, what), what); }
};

// Runs `body` on `nranks` forked ranks of `Row`; each loads the row through CclLibrary and joins one CclComm
// through the store. Returns the ranks' failures ("" when every rank passed).
template <typename Row>
std::string RunRanks(int nranks, const std::function<void(Rank&)>& body) {
  auto server = StoreServer::Start("127.0.0.1", 0, "tok");
  if (!server.ok()) return server.status().message();
  const std::string addr = "127.0.0.1:" + std::to_string((*server)->port());
  std::vector<pid_t> pids;
  std::vector<int> fds;
  for (int r = 0; r < nranks; ++r) {
    int p[2];
    if (pipe(p) != 0) return "pipe";
    pid_t pid = fork();
    if (pid == 0) {
      close(p[0]);
      Rank k;
      k.nranks = nranks;
      k.rank = r;
      k.rt = Row::MakeRuntime();
      std::string why = k.rt->Init(r);
      if (!why.empty()) k.Fail(why);
      auto lib = CclLibrary::Load(Row::Row());
      auto store = StoreClient::Connect(addr, "tok", std::chrono::seconds(20));
      if (why.empty() && k.Ok(lib.status(), "Load") && k.Ok(store.status(), "store")) {
        k.lib = *lib;
        auto c = CclComm::Create(k.lib, store->get(), "ccl/test/id", nranks, r, std::chrono::seconds(30));
        if (k.Ok(c.status(), "CclComm::Create")) {
          k.comm = std::move(*c);
          k.stream = k.rt->Stream();
          body(k);
          if (!k.rt->Sync(k.stream)) k.Fail("final stream sync");
          k.Ok(k.comm->AsyncError(), "AsyncError");
          k.comm.reset();
        }
      }
      std::string out;
      for (const auto& f : k.failures) out += f + "\n";
      if (write(p[1], out.data(), out.size()) < 0) _exit(3);
      close(p[1]);
      _exit(k.failures.empty() ? 0 : 1);
    }
    close(p[1]);
    pids.push_back(pid);
    fds.push_back(p[0]);
  }
  std::string all;
  for (int r = 0; r < nranks; ++r) {
    char buf[4096];
    ssize_t n;
    while ((n = read(fds[r], buf, sizeof buf)) > 0) all.append(buf, static_cast<size_t>(n));
    close(fds[r]);
    int st = 0;
    waitpid(pids[r], &st, 0);
    if (!WIFEXITED(st) || (WEXITSTATUS(st) != 0 && all.empty()))
      all += "rank " + std::to_string(r) + " ended with status " + std::to_string(st) + "\n";
  }
  return all;
}

constexpr size_t kCount = 37;  // odd: no vector width divides it

// Allreduce of every type x op the row supports; avg through sum and one scale where the row has none.
void AllReduceAll(Rank& k) {
  for (int ti = 0; ti < kCclTypes; ++ti) {
    const DType t = static_cast<DType>(ti);
    for (int oi = 0; oi < kCclOps; ++oi) {
      const RedOp op = static_cast<RedOp>(oi);
      Status sup = k.lib->SupportsReduce(t, op);
      const bool via_sum =
          !sup.ok() && op == RedOp::kAvg && !k.lib->has_avg() && k.lib->SupportsReduce(t, RedOp::kSum).ok();
      if (!sup.ok() && !via_sum) continue;
      if (via_sum && !IsFloat(t)) continue;  // Tessera's avg-by-scale is for floating types
      std::vector<double> in(kCount);
      for (size_t i = 0; i < kCount; ++i) in[i] = Input(t, op, k.nranks, k.rank, i);
      void* s = k.Dev(t, in);
      void* r = k.Dev(t, std::vector<double>(kCount, 0));
      const RedOp cop = via_sum ? k.comm->Op(RedOp::kSum) : k.comm->Op(op);
      const std::string what = std::string("AllReduce ") + DTypeName(t) + " " + RedOpName(op);
      if (k.Call(k.lib->AllReduce(s, r, kCount, t, cop, k.comm->handle(), k.stream), what.c_str())) {
        std::vector<double> got = k.Host(t, r, kCount);
        for (size_t i = 0; i < kCount; ++i) {
          const double want = Reference(t, op, k.nranks, i);
          const double v = via_sum ? got[i] / k.nranks : got[i];  // the one scale, rounded once below
          std::vector<char> a(DTypeSize(t)), b(DTypeSize(t));
          Put(t, a.data(), 0, v);
          Put(t, b.data(), 0, want);
          if (std::memcmp(a.data(), b.data(), a.size()) != 0) {
            k.Fail(what + (via_sum ? " (sum + scale)" : "") + ": [" + std::to_string(i) + "] = " + std::to_string(v) +
                   ", want " + std::to_string(want));
            break;
          }
        }
      }
      // The same buffer in place.
      void* s2 = k.Dev(t, in);
      if (k.Call(k.lib->AllReduce(s2, s2, kCount, t, cop, k.comm->handle(), k.stream), what.c_str())) {
        std::vector<double> got = k.Host(t, s2, kCount);
        const double want0 = via_sum ? Reference(t, RedOp::kSum, k.nranks, 0) : Reference(t, op, k.nranks, 0);
        if (got[0] != want0) k.Fail(what + " in place: " + std::to_string(got[0]) + ", want " + std::to_string(want0));
      }
      k.rt->Free(s);
      k.rt->Free(r);
      k.rt->Free(s2);
    }
  }
}

void ReduceScatterCheck(Rank& k, DType t) {
  const size_t n = 5;
  std::vector<double> in(n * k.nranks);
  for (size_t i = 0; i < in.size(); ++i) in[i] = Input(t, RedOp::kSum, k.nranks, k.rank, i);
  void* s = k.Dev(t, in);
  void* r = k.Dev(t, std::vector<double>(n, 0));
  if (k.Call(k.lib->ReduceScatter(s, r, n, t, k.comm->Op(RedOp::kSum), k.comm->handle(), k.stream), "ReduceScatter")) {
    auto got = k.Host(t, r, n);
    for (size_t i = 0; i < n; ++i)
      if (got[i] != Reference(t, RedOp::kSum, k.nranks, k.rank * n + i)) {
        k.Fail(std::string("ReduceScatter ") + DTypeName(t) + " [" + std::to_string(i) +
               "] = " + std::to_string(got[i]));
        break;
      }
  }
  k.rt->Free(s);
  k.rt->Free(r);
}

void AllGatherCheck(Rank& k, DType t) {
  const size_t n = 7;
  std::vector<double> in(n);
  for (size_t i = 0; i < n; ++i) in[i] = static_cast<double>(k.rank * 10 + static_cast<int>(i));
  void* s = k.Dev(t, in);
  void* r = k.Dev(t, std::vector<double>(n * k.nranks, 0));
  if (k.Call(k.lib->AllGather(s, r, n, t, k.comm->handle(), k.stream), "AllGather")) {
    auto got = k.Host(t, r, n * k.nranks);
    for (size_t i = 0; i < got.size(); ++i)
      if (got[i] != static_cast<double>((i / n) * 10 + i % n)) {
        k.Fail(std::string("AllGather ") + DTypeName(t) + " [" + std::to_string(i) + "] = " + std::to_string(got[i]));
        break;
      }
  }
  k.rt->Free(s);
  k.rt->Free(r);
}

void BroadcastCheck(Rank& k, bool in_place, int root) {
  const DType t = DType::kFloat32;
  const size_t n = 9;
  std::vector<double> mine(n), theirs(n);
  for (size_t i = 0; i < n; ++i) {
    mine[i] = k.rank * 100.0 + static_cast<double>(i);
    theirs[i] = root * 100.0 + static_cast<double>(i);
  }
  void* s = k.Dev(t, mine);
  void* r = in_place ? s : k.Dev(t, std::vector<double>(n, -1));
  const std::string what = in_place ? "Broadcast in place" : "Broadcast out of place";
  if (k.Call(k.lib->Broadcast(s, r, n, t, root, k.comm->handle(), k.stream), what.c_str())) {
    if (k.Host(t, r, n) != theirs) k.Fail(what + " from root " + std::to_string(root) + ": wrong values");
    if (!in_place && k.Host(t, s, n) != mine) k.Fail(what + ": the send buffer changed");
  }
  k.rt->Free(s);
  if (!in_place) k.rt->Free(r);
}

void SendRecvRing(Rank& k) {
  const DType t = DType::kInt32;
  const size_t n = 11;
  const int to = (k.rank + 1) % k.nranks, from = (k.rank + k.nranks - 1) % k.nranks;
  std::vector<double> mine(n), want(n);
  for (size_t i = 0; i < n; ++i) {
    mine[i] = k.rank * 1000.0 + static_cast<double>(i);
    want[i] = from * 1000.0 + static_cast<double>(i);
  }
  void* s = k.Dev(t, mine);
  void* r = k.Dev(t, std::vector<double>(n, 0));
  bool ok = k.Call(k.lib->GroupStart(), "GroupStart");
  ok = ok && k.Call(k.lib->Send(s, n, t, to, k.comm->handle(), k.stream), "Send");
  ok = ok && k.Call(k.lib->Recv(r, n, t, from, k.comm->handle(), k.stream), "Recv");
  ok = k.Call(k.lib->GroupEnd(), "GroupEnd") && ok;
  if (ok && k.Host(t, r, n) != want) k.Fail("Send/Recv ring: wrong values from rank " + std::to_string(from));
  k.rt->Free(s);
  k.rt->Free(r);
}

template <typename Row>
class CclRowConformance : public ::testing::Test {};
// Iluvatar CoreX's NCCL-shaped library under NCCL's names, on the CoreX host shims (tests/shims/corex_abi.h).
struct IxcclRow {
  static constexpr const char* kName = "ixccl";
  static constexpr int kMaxRanks = 3;
  static CclRow Row() {
    CclRow r = *FindCclRow("ixccl");
    r.soname = TESSERA_SHIM_COREX_NCCL;
    return r;
  }
  static std::unique_ptr<Runtime> MakeRuntime() {
    return std::make_unique<ccltest::MusaRuntime>(TESSERA_SHIM_COREX, "cuda");
  }
};
using Rows = ::testing::Types<NcclRow, HcclRow, MrowMccl, IxcclRow>;
class RowName {
 public:
  template <typename T>
  static std::string GetName(int) {
    return T::kName;
  }
};
TYPED_TEST_SUITE(CclRowConformance, Rows, RowName);

TYPED_TEST(CclRowConformance, LoadsAsItsRowSays) {
  auto lib = CclLibrary::Load(TypeParam::Row());
  ASSERT_TRUE(lib.ok()) << lib.status().message();
  const CclRow* row = FindCclRow(TypeParam::kName);
  ASSERT_NE(row, nullptr);
  EXPECT_EQ((*lib)->name(), TypeParam::kName);
  EXPECT_EQ((*lib)->id_bytes(), row->id_bytes);
  EXPECT_EQ((*lib)->has_avg(), row->has_avg());
  for (int t = 0; t < kCclTypes; ++t)
    EXPECT_EQ((*lib)->DataType(static_cast<DType>(t)) >= 0, row->types[t] >= 0) << DTypeName(static_cast<DType>(t));
}

TYPED_TEST(CclRowConformance, AllReduceEveryTypeAndOp) {
  for (int n : {1, 2, 3}) {
    if (n > TypeParam::kMaxRanks) break;
    EXPECT_EQ(RunRanks<TypeParam>(n, AllReduceAll), "") << n << " ranks";
  }
}

TYPED_TEST(CclRowConformance, ReduceScatterAndAllGather) {
  for (int n : {1, 2, 3}) {
    if (n > TypeParam::kMaxRanks) break;
    EXPECT_EQ(RunRanks<TypeParam>(n,
                                  [](Rank& k) {
                                    for (DType t : {DType::kFloat32, DType::kBfloat16, DType::kInt32}) {
                                      ReduceScatterCheck(k, t);
                                      AllGatherCheck(k, t);
                                    }
                                    AllGatherCheck(k, DType::kUint8);
                                  }),
              "")
        << n << " ranks";
  }
}

TYPED_TEST(CclRowConformance, BroadcastInAndOutOfPlace) {
  for (int n : {1, 2, 3}) {
    if (n > TypeParam::kMaxRanks) break;
    EXPECT_EQ(RunRanks<TypeParam>(n,
                                  [](Rank& k) {
                                    BroadcastCheck(k, true, 0);
                                    BroadcastCheck(k, false, k.nranks - 1);
                                    BroadcastCheck(k, false, 0);
                                  }),
              "")
        << n << " ranks";
  }
}

TYPED_TEST(CclRowConformance, SendRecvInAGroup) {
  if (TypeParam::kMaxRanks < 2)
    GTEST_SKIP() << TypeParam::kName << "'s stand-in library makes communicators of one rank";
  for (int n : {2, 3}) EXPECT_EQ(RunRanks<TypeParam>(n, SendRecvRing), "") << n << " ranks";
}

// What the row lacks is Unsupported before a call, and the library's own error if called anyway.
TYPED_TEST(CclRowConformance, UnsupportedIsClear) {
  auto lib = CclLibrary::Load(TypeParam::Row());
  ASSERT_TRUE(lib.ok()) << lib.status().message();
  const CclRow& row = *FindCclRow(TypeParam::kName);
  for (int ti = 0; ti < kCclTypes; ++ti)
    for (int oi = 0; oi < kCclOps; ++oi) {
      const DType t = static_cast<DType>(ti);
      const RedOp op = static_cast<RedOp>(oi);
      Status s = (*lib)->SupportsReduce(t, op);
      const bool want = row.types[ti] >= 0 && row.ops[oi] >= 0 && (row.reduce_types & TypeBit(t)) &&
                        (op != RedOp::kProd || (row.prod_types & TypeBit(t)));
      EXPECT_EQ(s.ok(), want) << DTypeName(t) << " " << RedOpName(op) << ": " << s.message();
      if (!s.ok()) {
        EXPECT_EQ(s.code(), Code::kUnsupported);
        EXPECT_NE(s.message().find(TypeParam::kName), std::string::npos) << s.message();
      }
    }
  if (!row.has_avg()) {
    Status s = (*lib)->SupportsReduce(DType::kFloat32, RedOp::kAvg);
    EXPECT_NE(s.message().find("sum and scale once"), std::string::npos) << s.message();
    EXPECT_EQ((*lib)->Op(RedOp::kAvg), -1);
    // Called anyway with avg: the library's object refuses without calling the library.
    int r = (*lib)->AllReduce(nullptr, nullptr, 1, DType::kFloat32, RedOp::kAvg, nullptr, nullptr);
    Status c = (*lib)->Check(r, "AllReduce");
    EXPECT_EQ(c.code(), Code::kSystemError);
    EXPECT_NE(c.message().find("HcclAllReduce"), std::string::npos) << c.message();
  }
}

// ---- the loader's errors and the table

TEST(CclRows, TableHasTheRowsAndTheirValues) {
  const CclRow* nccl = FindCclRow("nccl");
  const CclRow* mccl = FindCclRow("mccl");
  const CclRow* hccl = FindCclRow("hccl");
  ASSERT_TRUE(nccl && mccl && hccl);
  EXPECT_EQ(FindCclRow("rccl"), nullptr);
  EXPECT_STREQ(nccl->soname, "libnccl.so.2");
  EXPECT_STREQ(mccl->soname, "libmccl.so.2");
  EXPECT_STREQ(mccl->prefix, "mccl");
  EXPECT_STREQ(hccl->soname, "libhccl.so");
  EXPECT_STREQ(hccl->group_soname, "libhcomm.so");
  EXPECT_EQ(nccl->id_bytes, 128u);
  EXPECT_EQ(mccl->id_bytes, 128u);
  EXPECT_EQ(hccl->id_bytes, 4108u);
  EXPECT_EQ(hccl->shape, CclShape::kHccl);
  EXPECT_TRUE(hccl->broadcast_in_place_only);
  EXPECT_FALSE(hccl->has_avg());
  EXPECT_TRUE(nccl->has_avg() && mccl->has_avg());
  // HCCL's numbers (hccl_types.h): FP16 3, FP32 4, BFP16 11, not NCCL's 6, 7, 9.
  EXPECT_EQ(hccl->types[static_cast<int>(DType::kFloat16)], 3);
  EXPECT_EQ(hccl->types[static_cast<int>(DType::kFloat32)], 4);
  EXPECT_EQ(hccl->types[static_cast<int>(DType::kBfloat16)], 11);
  EXPECT_EQ(nccl->types[static_cast<int>(DType::kBfloat16)], 9);
  const CclRow* ixccl = FindCclRow("ixccl");
  ASSERT_NE(ixccl, nullptr);
  EXPECT_STREQ(ixccl->soname, "/usr/local/corex/lib/libnccl.so");
  EXPECT_STREQ(ixccl->prefix, "nccl");
  EXPECT_EQ(ixccl->types, nccl->types);  // NCCL's numbers
  EXPECT_EQ(CclRowNames(), "nccl, mccl, ixccl, hccl");
}

TEST(CclRows, EveryDeviceFamilyNamesARow) {
  for (const auto& f : kDeviceFamilies) {
    if (*f.ccl == 0) {  // a family without a library (the emulated device): none to find
      EXPECT_STREQ(f.prefix, "emu");
      continue;
    }
    EXPECT_NE(FindCclRow(f.ccl), nullptr) << f.prefix << " -> " << f.ccl;
  }
}

// TESSERA_CCL's declaration (common/env_vars.inc, docs/env.md) lists every row it may pick and each family's
// default: a row added to the table, or a family's library, without its mention there fails.
TEST(CclRows, TesseraCclDocNamesEveryRow) {
  const env::Variable* v = env::FindVariable("TESSERA_CCL");
  ASSERT_NE(v, nullptr);
  const std::string doc = v->doc, defaults = v->default_text;
  for (const CclRow& r : kCclTable) EXPECT_NE(doc.find(fmt::format("`{}`", r.name)), std::string::npos) << r.name;
  for (const auto& f : kDeviceFamilies) {
    if (*f.ccl == 0) continue;  // no library (the emulated device)
    EXPECT_NE(defaults.find(fmt::format("`{}` for {}", f.ccl, f.prefix)), std::string::npos)
        << f.prefix << " -> " << f.ccl << " not in TESSERA_CCL's default: " << defaults;
  }
}

TEST(CclRows, MissingLibraryNamesItAndTheVariable) {
  CclRow r = *FindCclRow("hccl");
  r.soname = "/nonexistent/libhccl.so";
  auto lib = CclLibrary::Load(r);
  ASSERT_FALSE(lib.ok());
  EXPECT_EQ(lib.status().code(), Code::kUnsupported);
  EXPECT_NE(lib.status().message().find("/nonexistent/libhccl.so"), std::string::npos) << lib.status().message();
  EXPECT_NE(lib.status().message().find("TESSERA_CCL_LIB"), std::string::npos) << lib.status().message();
}

TEST(CclRows, MissingSymbolNamesItAndTheVariable) {
  CclRow h = *FindCclRow("hccl");
  h.soname = TESSERA_FAKE_CCL;  // NCCL-shaped: no Hccl* symbol
  auto a = CclLibrary::Load(h);
  ASSERT_FALSE(a.ok());
  EXPECT_EQ(a.status().code(), Code::kUnsupported);
  EXPECT_NE(a.status().message().find("HcclGetRootInfo"), std::string::npos) << a.status().message();
  EXPECT_NE(a.status().message().find(TESSERA_FAKE_CCL), std::string::npos) << a.status().message();
  EXPECT_NE(a.status().message().find("TESSERA_CCL_LIB"), std::string::npos) << a.status().message();
  CclRow m = *FindCclRow("mccl");
  m.soname = TESSERA_SHIM_MUSA;  // the runtime, not the CCL
  auto b = CclLibrary::Load(m);
  ASSERT_FALSE(b.ok());
  EXPECT_NE(b.status().message().find("mcclGetVersion"), std::string::npos) << b.status().message();
  EXPECT_NE(b.status().message().find("TESSERA_CCL_LIB"), std::string::npos) << b.status().message();
}

TEST(CclRows, MissingGroupLibraryIsNamed) {
  CclRow h = *FindCclRow("hccl");
  h.soname = TESSERA_SHIM_HCCL;
  h.group_soname = "libtessera-no-such-hcomm.so";
  auto a = CclLibrary::Load(h);
  ASSERT_FALSE(a.ok());
  EXPECT_EQ(a.status().code(), Code::kUnsupported);
  EXPECT_NE(a.status().message().find("libtessera-no-such-hcomm.so"), std::string::npos) << a.status().message();
  EXPECT_NE(a.status().message().find("HcclGroupStart"), std::string::npos) << a.status().message();
}

TEST(CclRows, TesseraCclSelectsARow) {
  setenv("TESSERA_CCL", "hccl", 1);
  setenv("TESSERA_CCL_LIB", TESSERA_SHIM_HCCL, 1);
  auto h = CclLibrary::LoadFromEnv();
  ASSERT_TRUE(h.ok()) << h.status().message();
  EXPECT_EQ((*h)->name(), "hccl");
  EXPECT_EQ((*h)->row().shape, CclShape::kHccl);
  EXPECT_EQ((*h)->id_bytes(), 4108u);
  EXPECT_EQ((*h)->Symbol("GetUniqueId"), "HcclGetRootInfo");
  setenv("TESSERA_CCL", "mccl", 1);
  setenv("TESSERA_CCL_LIB", TESSERA_SHIM_MCCL, 1);
  auto m = CclLibrary::LoadFromEnv();
  ASSERT_TRUE(m.ok()) << m.status().message();
  EXPECT_EQ((*m)->prefix(), "mccl");
  EXPECT_EQ((*m)->version(), 21104);  // the MCCL shim's default TESSERA_SHIM_MCCL_VERSION
  setenv("TESSERA_CCL", "ascend", 1);
  auto bad = CclLibrary::LoadFromEnv();
  // TESSERA_CCL_LIB alone does not make an unknown name a row: TESSERA_CCL_PREFIX is needed too.
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("known: nccl, mccl, ixccl, hccl"), std::string::npos) << bad.status().message();
  unsetenv("TESSERA_CCL");
  unsetenv("TESSERA_CCL_LIB");
}

}  // namespace
}  // namespace tessera::comm
