// tests/comm/accel_worker: one rank of the device-rank tests (tests/runtime/staged_rank_test.cpp on the vendors' shims,
// tests/comm/collectives_test.cpp on the emulated device), run under `tessera run`.
// A rank whose TESSERA_DEVICE is npu:N or musa:N works on device memory of that family's runtime row (the host
// shims of tests/shims, found on LD_LIBRARY_PATH) with a stream of its own; a host rank on host memory with stream
// NULL — in the same job. Inputs are pushed to the device on the rank's stream with nothing synchronised before
// the collective (stream order must carry them), results pulled back after it.
//
//   accel_worker check [--sizes a,b,..]  allreduce (every type, every op, in place and not), reduce_scatter,
//       allgather and broadcast (sum and max; every type): each result against an f64 reference within one
//       final rounding plus f32 accumulation (exact for integers, modulo their wrap-around), and bit-identical
//       on all ranks; then send/recv around a ring, a group (ring shift both ways) and alltoallv with gaps
//       that must stay untouched;
//   accel_worker wrongmem                 device ranks pass host memory with a stream: they get
//       tsrInvalidArgument naming the buffer, every other rank an error, all within the timeout;
//   accel_worker die RANK [bf16]           RANK exits after one allreduce (f32, or bf16); the others must fail in
//       time;
//   accel_worker traffic COUNT [bf16|int32] [four]   one f32 (bf16, int32) sum allreduce of COUNT elements (rank r
//       gives r + 1 everywhere), checked exact (with `four`, then a reduce-scatter, an allgather and a broadcast of
//       them, checked too); the test reads what each link carried from TESSERA_LINK_TRACE.
// Prints "OK rank R (npu:0|host): ..." on success, "FAIL rank R: why" and exits 1 otherwise.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "comm/runtime/runtime.hpp"
#include "common/dtype.hpp"
#include "common/vendor.hpp"
#include "reference.hpp"
#include "tessera/tessera.h"

using tessera::DType;
using tessera::comm::CopyKind;
using tessera::comm::DeviceRuntime;

namespace {

using namespace tessera::check;  // Value, Reference, WithinBound, Hash, StoreElement, LoadElement

tsrComm_t g_comm;
int g_rank = -1, g_size = 0;
std::string g_device = "host";
std::shared_ptr<DeviceRuntime> g_rt;  // null on a host rank
DeviceRuntime::Stream g_stream = nullptr;

[[noreturn]] void Fail(const std::string& why) {
  std::printf("FAIL rank %d: %s\n", g_rank, why.c_str());
  std::fflush(stdout);
  std::exit(1);
}
void Check(tsrResult_t r, const std::string& what) {
  if (r != tsrSuccess) Fail(what + ": " + tsrGetErrorString(r) + ": " + tsrGetLastError(g_comm));
}
void Rt(const tessera::Status& s, const std::string& what) {
  if (!s.ok()) Fail(what + ": " + s.message());
}
template <typename T>
T Rt(tessera::Result<T> r, const std::string& what) {
  if (!r.ok()) Fail(what + ": " + r.status().message());
  return std::move(r).value();
}

// A buffer in this rank's memory kind with a host mirror (pinned on a device rank: ACL copies asynchronously only
// from host memory the runtime allocated).
class Buf {
 public:
  explicit Buf(size_t bytes, unsigned char fill = 0) : bytes_(bytes + 64) {
    if (g_rt) {
      host_ = static_cast<unsigned char*>(Rt(g_rt->MallocHost(bytes_), "MallocHost"));
      dev_ = Rt(g_rt->Malloc(bytes_), "Malloc");
    } else {
      own_.resize(bytes_);
      host_ = own_.data();
    }
    std::memset(host_, fill, bytes_);
    Push();
    // The copy reads host_ asynchronously: wait for it before the caller writes host_ (found by TSan on the
    // emulated device, whose stream really runs later: an allgather's output, filled here and then written by the
    // test, was pushed half old, half new).
    if (g_rt) Rt(g_rt->StreamSynchronize(g_stream), "StreamSynchronize");
  }
  ~Buf() {
    if (g_rt) {
      Rt(g_rt->StreamSynchronize(g_stream), "StreamSynchronize");
      (void)g_rt->Free(dev_);
      (void)g_rt->FreeHost(host_);
    }
  }
  Buf(const Buf&) = delete;
  Buf& operator=(const Buf&) = delete;
  unsigned char* host() { return host_; }
  void* ptr(size_t off = 0) { return (g_rt ? static_cast<unsigned char*>(dev_) : host_) + off; }
  void Push() {  // queued on the rank's stream: the collective after it must see it
    if (g_rt) Rt(g_rt->MemcpyAsync(dev_, bytes_, host_, bytes_, CopyKind::kHostToDevice, g_stream), "push");
  }
  void Pull() {
    if (!g_rt) return;
    Rt(g_rt->MemcpyAsync(host_, bytes_, dev_, bytes_, CopyKind::kDeviceToHost, g_stream), "pull");
    Rt(g_rt->StreamSynchronize(g_stream), "StreamSynchronize");
  }

 private:
  size_t bytes_;
  unsigned char* host_ = nullptr;
  void* dev_ = nullptr;
  std::vector<unsigned char> own_;
};
tsrStream_t S() { return g_rt ? static_cast<tsrStream_t>(g_stream) : nullptr; }

void AllSame(const void* buf, size_t bytes, const std::string& what) {
  uint64_t h = Hash(buf, bytes);
  std::vector<uint64_t> all(g_size);
  Check(tsrAllGather(&h, all.data(), 1, tsrInt64, g_comm, nullptr), "allgather of hashes");
  for (int r = 0; r < g_size; ++r)
    if (all[r] != all[0]) Fail(what + ": result bits differ between rank 0 and rank " + std::to_string(r));
}

// The f64 reference of element `i` as the type holds it (integers wrap around).
double Expected(uint64_t seed, size_t i, DType t, tsrRedOp_t op, double* abs_sum) {
  double ref = Reference(seed, i, t, op, g_size, abs_sum);
  if (tessera::IsFloat(t)) return ref;
  unsigned char scratch[8];
  StoreElement(scratch, 0, t, std::fmod(ref, 18446744073709551616.0));
  return LoadElement(scratch, 0, t);
}

void CheckReduced(const unsigned char* got, size_t first, size_t count, DType t, tsrRedOp_t op, uint64_t seed,
                  const std::string& what) {
  for (size_t i = 0; i < count; ++i) {
    double abs_sum, ref = Expected(seed, first + i, t, op, &abs_sum);
    // ACCEL_WORKER_LIBRARY_16BIT=1: 16-bit reductions are the island library's (a world of one device island, or
    // TESSERA_ISLAND_REDUCE=native), rounded at every hop: its bound, not Tessera's single rounding.
    static const bool library16 = std::getenv("ACCEL_WORKER_LIBRARY_16BIT") != nullptr;
    const bool ok = library16 ? WithinLibraryBound(LoadElement(got, i, t), ref, abs_sum, t, g_size)
                              : WithinBound(LoadElement(got, i, t), ref, abs_sum, t, g_size);
    if (!ok)
      Fail(what + " " + tessera::DTypeName(t) + " op " + std::to_string(op) + " count " + std::to_string(count) +
           ": element " + std::to_string(i) + " = " + std::to_string(LoadElement(got, i, t)) + ", f64 reference " +
           std::to_string(ref));
  }
}

size_t RunCollectives(const std::vector<size_t>& sizes) {
  const tsrRedOp_t ops[] = {tsrSum, tsrProd, tsrMax, tsrMin, tsrAvg};
  uint64_t seed = 7;
  size_t cases = 0;
  for (size_t count : sizes)
    for (int ti = 0; ti < static_cast<int>(DType::kCount); ++ti) {
      const auto t = static_cast<DType>(ti);
      const size_t esz = tessera::DTypeSize(t);
      const auto tt = static_cast<tsrDataType_t>(t);
      for (tsrRedOp_t op : ops)
        for (int inplace = 0; inplace < 2; ++inplace) {
          ++seed;
          const std::string how = inplace ? " in place" : "";
          Buf in(count * esz), out(count * esz, 0xAB);
          for (size_t i = 0; i < count; ++i) StoreElement(in.host(), i, t, Value(seed, g_rank, i, t, op));
          in.Push();
          Buf& dst = inplace ? in : out;
          Check(tsrAllReduce(in.ptr(), dst.ptr(), count, tt, op, g_comm, S()), "allreduce" + how);
          dst.Pull();
          CheckReduced(dst.host(), 0, count, t, op, seed, "allreduce" + how);
          AllSame(dst.host(), count * esz, "allreduce" + how);
          ++cases;
          if (op != tsrSum && op != tsrMax) continue;
          // reduce_scatter: block `rank` of the reduction of size*count elements (in place: the block of the input)
          Buf rin(count * g_size * esz), rout(count * esz, 0xCD);
          for (size_t i = 0; i < count * g_size; ++i) StoreElement(rin.host(), i, t, Value(seed, g_rank, i, t, op));
          rin.Push();
          const size_t mine = static_cast<size_t>(g_rank) * count * esz;
          Check(tsrReduceScatter(rin.ptr(), inplace ? rin.ptr(mine) : rout.ptr(), count, tt, op, g_comm, S()),
                "reduce_scatter" + how);
          Buf& rdst = inplace ? rin : rout;
          rdst.Pull();
          CheckReduced(rdst.host() + (inplace ? mine : 0), g_rank * count, count, t, op, seed, "reduce_scatter" + how);
          // allgather (in place: the input is this rank's block of the output)
          Buf gin(count * esz), gout(count * g_size * esz, 0xEF);
          for (size_t i = 0; i < count; ++i) StoreElement(gin.host(), i, t, Value(seed, g_rank, i, t, tsrSum));
          std::memcpy(gout.host() + mine, gin.host(), count * esz);
          gin.Push();
          gout.Push();
          Check(tsrAllGather(inplace ? gout.ptr(mine) : gin.ptr(), gout.ptr(), count, tt, g_comm, S()),
                "allgather" + how);
          gout.Pull();
          for (int r = 0; r < g_size; ++r)
            for (size_t i = 0; i < count; ++i)
              if (LoadElement(gout.host(), r * count + i, t) != Value(seed, r, i, t, tsrSum))
                Fail("allgather" + how + " " + tessera::DTypeName(t) + " count " + std::to_string(count) + ": block " +
                     std::to_string(r) + " element " + std::to_string(i) + " wrong");
          // broadcast from a root that moves with the seed
          const int root = static_cast<int>(seed % g_size);
          Buf bbuf(count * esz, 0x11), bout(count * esz, 0x22);
          for (size_t i = 0; i < count; ++i) StoreElement(bbuf.host(), i, t, Value(seed, root, i, t, tsrSum));
          bbuf.Push();
          Buf& bdst = inplace ? bbuf : bout;
          Check(tsrBroadcast(bbuf.ptr(), bdst.ptr(), count, tt, root, g_comm, S()), "broadcast" + how);
          bdst.Pull();
          for (size_t i = 0; i < count; ++i)
            if (LoadElement(bdst.host(), i, t) != Value(seed, root, i, t, tsrSum))
              Fail("broadcast" + how + " root " + std::to_string(root) + " " + tessera::DTypeName(t) + " count " +
                   std::to_string(count) + ": element " + std::to_string(i) + " wrong");
        }
    }
  return cases;
}

// Element i of what rank `from` sends to rank `to` (int64, distinct everywhere).
int64_t Msg(int from, int to, size_t i) {
  return (int64_t{from} << 40) + (int64_t{to} << 20) + static_cast<int64_t>(i);
}

void RunPointToPoint() {
  const int next = (g_rank + 1) % g_size, prev = (g_rank + g_size - 1) % g_size;
  const size_t n = 1001;
  // send/recv around the ring, even ranks sending first
  {
    Buf out(n * 8), in(n * 8, 0x5A);
    for (size_t i = 0; i < n; ++i) StoreElement(out.host(), i, DType::kInt64, Msg(g_rank, next, i));
    out.Push();
    auto send = [&] { Check(tsrSend(out.ptr(), n, tsrInt64, next, g_comm, S()), "send"); };
    auto recv = [&] { Check(tsrRecv(in.ptr(), n, tsrInt64, prev, g_comm, S()), "recv"); };
    if (g_rank % 2 == 0)
      send(), recv();
    else
      recv(), send();
    in.Pull();
    for (size_t i = 0; i < n; ++i)
      if (LoadElement(in.host(), i, DType::kInt64) != Msg(prev, g_rank, i)) Fail("send/recv ring: element wrong");
  }
  // a group: to both neighbours and from both, receives first
  {
    Buf to_next(n * 8), to_prev(n * 8), from_prev(n * 8, 1), from_next(n * 8, 2);
    for (size_t i = 0; i < n; ++i) {
      StoreElement(to_next.host(), i, DType::kInt64, Msg(g_rank, next, i));
      StoreElement(to_prev.host(), i, DType::kInt64, Msg(g_rank, prev, i) + 7);
    }
    to_next.Push();
    to_prev.Push();
    Check(tsrGroupStart(), "group start");
    Check(tsrRecv(from_prev.ptr(), n, tsrInt64, prev, g_comm, S()), "recv (group)");
    Check(tsrRecv(from_next.ptr(), n, tsrInt64, next, g_comm, S()), "recv (group)");
    Check(tsrSend(to_next.ptr(), n, tsrInt64, next, g_comm, S()), "send (group)");
    Check(tsrSend(to_prev.ptr(), n, tsrInt64, prev, g_comm, S()), "send (group)");
    Check(tsrGroupEnd(), "group end");
    from_prev.Pull();
    from_next.Pull();
    for (size_t i = 0; i < n; ++i)
      if (LoadElement(from_prev.host(), i, DType::kInt64) != Msg(prev, g_rank, i) ||
          LoadElement(from_next.host(), i, DType::kInt64) != Msg(next, g_rank, i) + 7)
        Fail("group ring shift: element " + std::to_string(i) + " wrong");
  }
  // alltoallv: rank r sends r+p+1 elements to p; received blocks sit 3 elements apart, the gaps must stay as set
  {
    std::vector<size_t> sc(g_size), sd(g_size), rc(g_size), rd(g_size);
    size_t s_end = 0, r_end = 0;
    for (int p = 0; p < g_size; ++p) {
      sc[p] = static_cast<size_t>(g_rank + p + 1);
      sd[p] = s_end;
      s_end += sc[p];
      rc[p] = static_cast<size_t>(p + g_rank + 1);
      rd[p] = r_end;
      r_end += rc[p] + 3;
    }
    Buf sbuf(s_end * 8), rbuf(r_end * 8, 0x77);
    for (int p = 0; p < g_size; ++p)
      for (size_t i = 0; i < sc[p]; ++i) StoreElement(sbuf.host(), sd[p] + i, DType::kInt64, Msg(g_rank, p, i));
    sbuf.Push();
    Check(tsrAllToAllv(sbuf.ptr(), sc.data(), sd.data(), rbuf.ptr(), rc.data(), rd.data(), tsrInt64, g_comm, S()),
          "alltoallv");
    rbuf.Pull();
    for (int p = 0; p < g_size; ++p) {
      for (size_t i = 0; i < rc[p]; ++i)
        if (LoadElement(rbuf.host(), rd[p] + i, DType::kInt64) != Msg(p, g_rank, i))
          Fail("alltoallv: block from rank " + std::to_string(p) + " element " + std::to_string(i) + " wrong");
      for (size_t b = (rd[p] + rc[p]) * 8; b < (rd[p] + rc[p] + 3) * 8; ++b)
        if (rbuf.host()[b] != 0x77)
          Fail("alltoallv: a gap after the block from rank " + std::to_string(p) + " was written");
    }
  }
}

std::vector<size_t> ParseSizes(const std::string& s) {
  std::vector<size_t> out;
  for (size_t pos = 0; pos <= s.size();) {
    const size_t c = std::min(s.find(',', pos), s.size());
    out.push_back(std::stoull(s.substr(pos, c - pos)));
    pos = c + 1;
  }
  return out;
}

int ExpectError(tsrResult_t r, double secs, bool offender) {
  if (r == tsrSuccess) Fail("the call succeeded");
  std::printf("ERROR rank %d after %.2fs%s: %s: %s\n", g_rank, secs, offender ? " (offender)" : "",
              tsrGetErrorString(r), tsrGetLastError(g_comm));
  if (offender && r != tsrInvalidArgument) Fail("the offender did not get tsrInvalidArgument");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  setvbuf(stdout, nullptr, _IOLBF, 0);
  if (argc < 2) {
    std::fprintf(
        stderr,
        "usage: accel_worker check [--sizes a,b] | wrongmem | die RANK [bf16] | traffic COUNT [bf16|int32] [four]\n");
    return 2;
  }
  const std::string mode = argv[1];
  if (const char* d = std::getenv("TESSERA_DEVICE")) g_device = d;
  auto name = tessera::ParseDeviceName(g_device, "TESSERA_DEVICE");
  if (!name.ok()) Fail(name.status().message());
  const tsrResult_t init = tsrCommInitFromEnv(&g_comm);
  if (init != tsrSuccess) {
    std::printf("INITFAIL %s: %s\n", tsrGetErrorString(init), tsrGetLastError(nullptr));
    return 3;
  }
  if (!name->host()) {  // this process's runtime: the row the rank's communicator has loaded too
    g_rt = Rt(tessera::comm::LoadRuntime(name->family->runtime), "LoadRuntime");
    Rt(g_rt->SetDevice(name->index), "SetDevice");
    g_stream = Rt(g_rt->StreamCreate(), "StreamCreate");
  }
  tsrCommRank(g_comm, &g_rank);
  tsrCommSize(g_comm, &g_size);
  int rc = 0;
  if (mode == "check") {
    std::vector<size_t> sizes = {0, 1, 7, 97, 4099};
    for (int i = 2; i + 1 < argc; i += 2)
      if (!std::strcmp(argv[i], "--sizes")) sizes = ParseSizes(argv[i + 1]);
    const size_t cases = RunCollectives(sizes);
    if (g_size > 1) RunPointToPoint();  // a rank may not send to itself
    Check(tsrBarrier(g_comm), "barrier");
    std::printf(
        "OK rank %d (%s): %zu allreduce cases plus reduce_scatter/allgather/broadcast, p2p, group and "
        "alltoallv checked\n",
        g_rank, g_device.c_str(), cases);
  } else if (mode == "wrongmem") {
    std::vector<float> host(1024, 1.0f);
    const bool offender = g_rt != nullptr;
    const auto t0 = std::chrono::steady_clock::now();
    // A device rank passes host memory with its stream; a host rank passes host memory correctly.
    const tsrResult_t r = tsrAllReduce(host.data(), host.data(), host.size(), tsrFloat32, tsrSum, g_comm, S());
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    rc = ExpectError(r, secs, offender);
  } else if (mode == "die") {
    const int victim = argc > 2 ? std::atoi(argv[2]) : 0;
    const tsrDataType_t type = argc > 3 && std::string(argv[3]) == "bf16" ? tsrBfloat16 : tsrFloat32;
    Buf buf(1 << 20);
    Check(tsrAllReduce(buf.ptr(), buf.ptr(), 1 << 18, type, tsrSum, g_comm, S()), "first allreduce");
    if (g_rank == victim) {
      std::printf("DYING rank %d\n", g_rank);
      std::fflush(stdout);
      _exit(7);
    }
    const auto t0 = std::chrono::steady_clock::now();
    tsrResult_t r = tsrSuccess;
    for (int i = 0; i < 100 && r == tsrSuccess; ++i) {
      r = tsrAllReduce(buf.ptr(), buf.ptr(), 1 << 18, type, tsrSum, g_comm, S());
      if (r == tsrSuccess && g_rt) r = g_rt->StreamSynchronize(g_stream).ok() ? tsrSuccess : tsrInternalError;
    }
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (r == tsrSuccess) Fail("allreduce with a dead peer succeeded");
    std::printf("ERROR rank %d after %.2fs: %s: %s\n", g_rank, secs, tsrGetErrorString(r), tsrGetLastError(g_comm));
    rc = (r == tsrRemoteError || r == tsrTimeout) ? 0 : 1;
  } else if (mode == "traffic") {
    const size_t count = argc > 2 ? std::stoull(argv[2]) : 0;
    const std::string type = argc > 3 ? argv[3] : "f32";
    const DType t = type == "bf16" ? DType::kBfloat16 : type == "int32" ? DType::kInt32 : DType::kFloat32;
    Buf buf(count * tessera::DTypeSize(t));
    for (size_t i = 0; i < count; ++i) StoreElement(buf.host(), i, t, g_rank + 1);
    buf.Push();
    Check(tsrAllReduce(buf.ptr(), buf.ptr(), count, static_cast<tsrDataType_t>(t), tsrSum, g_comm, S()), "allreduce");
    buf.Pull();
    const double want = g_size * (g_size + 1) / 2.0;
    for (size_t i = 0; i < count; ++i)
      if (LoadElement(buf.host(), i, t) != want)
        Fail("traffic: element " + std::to_string(i) + " = " + std::to_string(LoadElement(buf.host(), i, t)));
    if (argc > 4 && std::string(argv[4]) == "four") {  // then a reduce-scatter, an allgather and a broadcast
      // A barrier before each, as a training step has small calls between large ones: its messages move the links'
      // stream positions by less than a large call's.
      Check(tsrBarrier(g_comm), "barrier");
      const size_t n = count / static_cast<size_t>(g_size);
      const auto tt = static_cast<tsrDataType_t>(t);
      const size_t esz = tessera::DTypeSize(t);
      Buf out(count * esz);
      for (size_t i = 0; i < count; ++i) StoreElement(buf.host(), i, t, g_rank + 1);
      buf.Push();
      Check(tsrReduceScatter(buf.ptr(), out.ptr(), n, tt, tsrSum, g_comm, S()), "reduce_scatter");
      out.Pull();
      for (size_t i = 0; i < n; ++i)
        if (LoadElement(out.host(), i, t) != want) Fail("traffic: reduce_scatter element " + std::to_string(i));
      Check(tsrBarrier(g_comm), "barrier");
      Check(tsrAllGather(buf.ptr(), out.ptr(), n, tt, g_comm, S()), "allgather");  // n elements of g_rank + 1 each
      out.Pull();
      for (size_t i = 0; i < n * static_cast<size_t>(g_size); ++i)
        if (LoadElement(out.host(), i, t) != static_cast<double>(i / n + 1))
          Fail("traffic: allgather element " + std::to_string(i));
      Check(tsrBarrier(g_comm), "barrier");
      Check(tsrBroadcast(buf.ptr(), buf.ptr(), count, tt, 0, g_comm, S()), "broadcast");  // rank 0's: 1 everywhere
      buf.Pull();
      for (size_t i = 0; i < count; ++i)
        if (LoadElement(buf.host(), i, t) != 1) Fail("traffic: broadcast element " + std::to_string(i));
    }
    std::printf("OK rank %d (%s): allreduce of %zu %s\n", g_rank, g_device.c_str(), count, type.c_str());
  } else {
    Fail("unknown mode " + mode);
  }
  tsrCommDestroy(g_comm);
  return rc;
}
