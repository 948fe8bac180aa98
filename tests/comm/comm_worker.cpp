// tests/comm/comm_worker: one rank of the multi-process collective tests, run under `tessera run`.
//
//   comm_worker check [--sizes 0,1,7,...] [--seed S]   every collective × type × op, checked against an
//       f64 reference computed locally for all ranks, plus bit-identity across ranks (hash allgather);
//   comm_worker mismatch                                ranks disagree on count: everyone must get an error;
//   comm_worker die RANK                                RANK exits mid-job; the others must get
//       tsrRemoteError/tsrTimeout within TESSERA_TIMEOUT;
//   comm_worker until-failure [LIMIT_S]                 allreduces until one fails (a fault injected from
//       outside); prints "ERROR rank R after Xs: ..." with the failing call's duration;
//   comm_worker p2p                                     send/recv around a ring.
// Prints "OK <summary>" on success, "FAIL <why>" and exits 1 otherwise.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "common/dtype.hpp"
#include "reference.hpp"
#include "tessera/tessera.h"

using tessera::DType;

namespace {

using namespace tessera::check;  // Value, Store, Load, Reference, WithinBound, Hash

tsrComm_t g_comm;
int g_rank, g_size;

[[noreturn]] void Fail(const std::string& why) {
  std::printf("FAIL rank %d: %s\n", g_rank, why.c_str());
  std::fflush(stdout);
  std::exit(1);
}

void Check(tsrResult_t r, const char* what) {
  if (r != tsrSuccess) Fail(std::string(what) + ": " + tsrGetErrorString(r) + ": " + tsrGetLastError(g_comm));
}

void AllSame(const void* buf, size_t bytes, const std::string& what) {
  uint64_t h = Hash(buf, bytes);
  std::vector<uint64_t> all(g_size);
  Check(tsrAllGather(&h, all.data(), 1, tsrInt64, g_comm, nullptr), "allgather of hashes");
  for (int r = 0; r < g_size; ++r)
    if (all[r] != all[0]) Fail(what + ": result bits differ between rank 0 and rank " + std::to_string(r));
}

std::vector<size_t> ParseSizes(const char* s) {
  std::vector<size_t> out;
  std::string str(s);
  size_t pos = 0;
  while (pos <= str.size()) {
    size_t c = str.find(',', pos);
    out.push_back(std::stoull(str.substr(pos, c - pos)));
    if (c == std::string::npos) break;
    pos = c + 1;
  }
  return out;
}

int RunCheck(std::vector<size_t> sizes, uint64_t seed, const std::vector<DType>& types) {
  const tsrRedOp_t ops[] = {tsrSum, tsrProd, tsrMax, tsrMin, tsrAvg};
  size_t checked = 0;
  for (size_t count : sizes) {
    for (DType t : types) {
      size_t esz = tessera::DTypeSize(t);
      auto tt = static_cast<tsrDataType_t>(t);
      for (tsrRedOp_t op : ops) {
        for (int inplace = 0; inplace < 2; ++inplace) {
          ++seed;
          // allreduce
          std::vector<unsigned char> in(count * esz + 1), out(count * esz + 1, 0xAB);
          for (size_t i = 0; i < count; ++i) StoreElement(in.data(), i, t, Value(seed, g_rank, i, t, op));
          void* dst = inplace ? in.data() : out.data();
          Check(tsrAllReduce(in.data(), dst, count, tt, op, g_comm, nullptr), "allreduce");
          for (size_t i = 0; i < count; ++i) {
            double abs_sum, ref = Reference(seed, i, t, op, g_size, &abs_sum);
            double got = LoadElement(dst, i, t);
            if (!tessera::IsFloat(t)) {  // compare modulo the type's wrap-around
              unsigned char scratch[8];
              StoreElement(scratch, 0, t, std::fmod(ref, 18446744073709551616.0));
              ref = LoadElement(scratch, 0, t);
            }
            if (!WithinBound(got, ref, abs_sum, t, g_size))
              Fail("allreduce " + std::string(tessera::DTypeName(t)) + " " + std::to_string(op) + " count " +
                   std::to_string(count) + (inplace ? " in-place" : "") + ": element " + std::to_string(i) + " = " +
                   std::to_string(got) + ", f64 reference " + std::to_string(ref));
          }
          AllSame(dst, count * esz, "allreduce");
          ++checked;
          if (op != tsrSum && op != tsrMax) continue;  // other collectives: two ops are enough
          // reduce-scatter: each rank gets block `rank` of the reduction of W*count elements
          std::vector<unsigned char> rin(count * g_size * esz + 1), rout(count * esz + 1, 0xCD);
          for (size_t i = 0; i < count * g_size; ++i) StoreElement(rin.data(), i, t, Value(seed, g_rank, i, t, op));
          void* rdst = inplace ? rin.data() + g_rank * count * esz : rout.data();
          Check(tsrReduceScatter(rin.data(), rdst, count, tt, op, g_comm, nullptr), "reduce_scatter");
          for (size_t i = 0; i < count; ++i) {
            double abs_sum, ref = Reference(seed, g_rank * count + i, t, op, g_size, &abs_sum);
            if (!tessera::IsFloat(t)) {
              unsigned char scratch[8];
              StoreElement(scratch, 0, t, std::fmod(ref, 18446744073709551616.0));
              ref = LoadElement(scratch, 0, t);
            }
            if (!WithinBound(LoadElement(rdst, i, t), ref, abs_sum, t, g_size))
              Fail("reduce_scatter " + std::string(tessera::DTypeName(t)) + " count " + std::to_string(count) +
                   ": element " + std::to_string(i) + " = " + std::to_string(LoadElement(rdst, i, t)) + ", reference " +
                   std::to_string(ref));
          }
          // allgather
          std::vector<unsigned char> gin(count * esz + 1), gout(count * g_size * esz + 1, 0xEF);
          for (size_t i = 0; i < count; ++i) StoreElement(gin.data(), i, t, Value(seed, g_rank, i, t, tsrSum));
          if (inplace) std::memcpy(gout.data() + g_rank * count * esz, gin.data(), count * esz);
          const void* gsrc = inplace ? gout.data() + g_rank * count * esz : gin.data();
          Check(tsrAllGather(gsrc, gout.data(), count, tt, g_comm, nullptr), "allgather");
          for (int r = 0; r < g_size; ++r)
            for (size_t i = 0; i < count; ++i)
              if (LoadElement(gout.data(), r * count + i, t) != Value(seed, r, i, t, tsrSum))
                Fail("allgather " + std::string(tessera::DTypeName(t)) + " count " + std::to_string(count) +
                     ": block " + std::to_string(r) + " element " + std::to_string(i) + " wrong");
          // broadcast from a root that moves with the seed
          int root = static_cast<int>(seed % g_size);
          std::vector<unsigned char> bbuf(count * esz + 1, 0x11), bout(count * esz + 1, 0x22);
          for (size_t i = 0; i < count; ++i) StoreElement(bbuf.data(), i, t, Value(seed, root, i, t, tsrSum));
          void* bdst = inplace ? bbuf.data() : bout.data();
          Check(tsrBroadcast(bbuf.data(), bdst, count, tt, root, g_comm, nullptr), "broadcast");
          for (size_t i = 0; i < count; ++i)
            if (LoadElement(bdst, i, t) != Value(seed, root, i, t, tsrSum))
              Fail("broadcast root " + std::to_string(root) + " count " + std::to_string(count) + ": element " +
                   std::to_string(i) + " wrong");
        }
      }
    }
  }
  Check(tsrBarrier(g_comm), "barrier");
  std::printf("OK rank %d: %zu allreduce cases plus reduce_scatter/allgather/broadcast checked\n", g_rank, checked);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  setvbuf(stdout, nullptr, _IOLBF, 0);
  if (argc < 2) {
    std::fprintf(stderr, "usage: comm_worker check|mismatch|die RANK|p2p [options]\n");
    return 2;
  }
  std::string mode = argv[1];
  tsrResult_t r = tsrCommInitFromEnv(&g_comm);
  if (r != tsrSuccess) {
    std::printf("INITFAIL %s: %s\n", tsrGetErrorString(r), tsrGetLastError(nullptr));
    return 3;
  }
  tsrCommRank(g_comm, &g_rank);
  tsrCommSize(g_comm, &g_size);
  int rc = 0;
  if (mode == "check") {
    std::vector<size_t> sizes = {0, 1, 2, 7, 13, 97, 1000, 4099};
    uint64_t seed = 1;
    std::vector<DType> types;
    for (int t = 0; t < static_cast<int>(DType::kCount); ++t) types.push_back(static_cast<DType>(t));
    for (int i = 2; i + 1 < argc; i += 2) {
      if (!std::strcmp(argv[i], "--sizes")) sizes = ParseSizes(argv[i + 1]);
      if (!std::strcmp(argv[i], "--seed")) seed = std::stoull(argv[i + 1]);
      if (!std::strcmp(argv[i], "--dtype")) types = {*tessera::ParseDType(argv[i + 1])};
    }
    rc = RunCheck(sizes, seed, types);
  } else if (mode == "mismatch") {
    std::vector<float> buf(64, 1.0f);
    size_t count = g_rank == g_size - 1 ? 48 : 64;  // the last rank disagrees
    auto t0 = std::chrono::steady_clock::now();
    r = tsrAllReduce(buf.data(), buf.data(), count, tsrFloat32, tsrSum, g_comm, nullptr);
    double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (r == tsrSuccess) Fail("a mismatched allreduce succeeded");
    std::printf("ERROR rank %d after %.2fs: %s: %s\n", g_rank, secs, tsrGetErrorString(r), tsrGetLastError(g_comm));
  } else if (mode == "die") {
    int victim = argc > 2 ? std::atoi(argv[2]) : 0;
    std::vector<float> buf(1 << 20, 1.0f);
    Check(tsrAllReduce(buf.data(), buf.data(), buf.size(), tsrFloat32, tsrSum, g_comm, nullptr), "first allreduce");
    if (g_rank == victim) {
      std::printf("DYING rank %d\n", g_rank);
      std::fflush(stdout);
      _exit(7);
    }
    auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < 100 && r == tsrSuccess; ++i)
      r = tsrAllReduce(buf.data(), buf.data(), buf.size(), tsrFloat32, tsrSum, g_comm, nullptr);
    double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (r == tsrSuccess) Fail("allreduce with a dead peer succeeded");
    std::printf("ERROR rank %d after %.2fs: %s: %s\n", g_rank, secs, tsrGetErrorString(r), tsrGetLastError(g_comm));
    rc = (r == tsrRemoteError || r == tsrTimeout) ? 0 : 1;
  } else if (mode == "stall") {
    int victim = argc > 2 ? std::atoi(argv[2]) : 0;
    std::vector<float> buf(1024, 1.0f);
    Check(tsrAllReduce(buf.data(), buf.data(), buf.size(), tsrFloat32, tsrSum, g_comm, nullptr), "first allreduce");
    if (g_rank == victim) {
      std::printf("STALLING rank %d\n", g_rank);
      std::fflush(stdout);
      pause();  // alive but silent: the others must time out, and the launcher must stop us
    }
    auto t0 = std::chrono::steady_clock::now();
    r = tsrAllReduce(buf.data(), buf.data(), buf.size(), tsrFloat32, tsrSum, g_comm, nullptr);
    double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (r == tsrSuccess) Fail("allreduce with a stalled peer succeeded");
    std::printf("ERROR rank %d after %.2fs: %s: %s\n", g_rank, secs, tsrGetErrorString(r), tsrGetLastError(g_comm));
    rc = 1;  // a failed rank: the launcher must then stop the stalled one
  } else if (mode == "until-failure") {
    // Allreduces (checked) until one fails or `limit` seconds pass: for faults injected from outside (a
    // host cut off or killed). Prints how long the failing call took: bounded by TESSERA_TIMEOUT.
    const double limit = argc > 2 ? std::atof(argv[2]) : 120;
    std::vector<float> buf(1 << 16);
    const auto start = std::chrono::steady_clock::now();
    int iter = 0;
    for (;; ++iter) {
      std::fill(buf.begin(), buf.end(), 1.0f);
      const auto t0 = std::chrono::steady_clock::now();
      r = tsrAllReduce(buf.data(), buf.data(), buf.size(), tsrFloat32, tsrSum, g_comm, nullptr);
      const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      if (r != tsrSuccess) {
        std::printf("ERROR rank %d after %.2fs: %s: %s\n", g_rank, secs, tsrGetErrorString(r), tsrGetLastError(g_comm));
        rc = 1;
        break;
      }
      if (buf[0] != static_cast<float>(g_size) || buf.back() != static_cast<float>(g_size)) Fail("allreduce wrong");
      if (iter == 0) std::printf("RUNNING rank %d\n", g_rank);
      if (std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() > limit)
        Fail("no failure within " + std::to_string(limit) + "s");
    }
  } else if (mode == "p2p") {
    std::vector<int64_t> out(1001), in(1001);
    for (size_t i = 0; i < out.size(); ++i) out[i] = g_rank * 100000 + static_cast<int64_t>(i);
    int next = (g_rank + 1) % g_size, prev = (g_rank + g_size - 1) % g_size;
    if (g_rank % 2 == 0) {
      Check(tsrSend(out.data(), out.size(), tsrInt64, next, g_comm, nullptr), "send");
      Check(tsrRecv(in.data(), in.size(), tsrInt64, prev, g_comm, nullptr), "recv");
    } else {
      Check(tsrRecv(in.data(), in.size(), tsrInt64, prev, g_comm, nullptr), "recv");
      Check(tsrSend(out.data(), out.size(), tsrInt64, next, g_comm, nullptr), "send");
    }
    for (size_t i = 0; i < in.size(); ++i)
      if (in[i] != prev * 100000 + static_cast<int64_t>(i)) Fail("p2p data wrong");
    std::printf("OK rank %d: p2p ring\n", g_rank);
  } else {
    Fail("unknown mode " + mode);
  }
  tsrCommDestroy(g_comm);
  return rc;
}
