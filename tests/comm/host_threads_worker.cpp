// tests/comm/host_threads_worker: one rank of the host-threads test (host_threads_test), under `tessera run`.
//
//   host_threads_worker [--sizes N,...] [--seed S]
// runs every collective × type × op (allreduce: all five ops, sum and max also in place; reduce-scatter: sum
// and max; allgather; broadcast) at sizes large enough that the engine cuts its copies and folds across the
// rank's host threads (TESSERA_HOST_THREADS), checks each allreduce against the f64 reference (every third
// element), and prints one line per collective, "HASH rank R <what> <hash of the result's bits>", so that
// runs with different thread counts can be compared bit for bit. Ends with "OK rank R"; "FAIL ..." and
// exit 1 on a failure.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "common/dtype.hpp"
#include "reference.hpp"
#include "tessera/tessera.h"

using tessera::DType;
using namespace tessera::check;

namespace {

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

void PrintHash(const std::string& what, const void* buf, size_t bytes) {
  std::printf("HASH rank %d %s %016llx\n", g_rank, what.c_str(), static_cast<unsigned long long>(Hash(buf, bytes)));
}

double Wrapped(double ref, DType t) {
  if (tessera::IsFloat(t)) return ref;
  unsigned char scratch[8];
  StoreElement(scratch, 0, t, std::fmod(ref, 18446744073709551616.0));
  return LoadElement(scratch, 0, t);
}

}  // namespace

int main(int argc, char** argv) {
  setvbuf(stdout, nullptr, _IOLBF, 0);
  std::vector<size_t> sizes = {300007, 1048583};
  uint64_t seed = 7;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--sizes")) {
      sizes.clear();
      for (char* s = argv[i + 1]; *s;) {
        sizes.push_back(std::strtoull(s, &s, 10));
        if (*s == ',') ++s;
      }
    }
    if (!std::strcmp(argv[i], "--seed")) seed = std::strtoull(argv[i + 1], nullptr, 10);
  }
  if (tsrCommInitFromEnv(&g_comm) != tsrSuccess) {
    std::printf("INITFAIL %s\n", tsrGetLastError(nullptr));
    return 3;
  }
  tsrCommRank(g_comm, &g_rank);
  tsrCommSize(g_comm, &g_size);
  const tsrRedOp_t ops[] = {tsrSum, tsrProd, tsrMax, tsrMin, tsrAvg};
  for (size_t count : sizes) {
    for (int ti = 0; ti < static_cast<int>(DType::kCount); ++ti) {
      const DType t = static_cast<DType>(ti);
      const size_t esz = tessera::DTypeSize(t);
      const auto tt = static_cast<tsrDataType_t>(t);
      const std::string name = std::string(tessera::DTypeName(t)) + "/" + std::to_string(count);
      for (tsrRedOp_t op : ops) {
        for (int inplace = 0; inplace < (op == tsrSum || op == tsrMax ? 2 : 1); ++inplace) {
          ++seed;
          const std::string what = name + "/op" + std::to_string(op) + (inplace ? "/in-place" : "");
          std::vector<unsigned char> in(count * esz), out(count * esz, 0xAB);
          for (size_t i = 0; i < count; ++i) StoreElement(in.data(), i, t, Value(seed, g_rank, i, t, op));
          void* dst = inplace ? in.data() : out.data();
          Check(tsrAllReduce(in.data(), dst, count, tt, op, g_comm, nullptr), "allreduce");
          for (size_t i = 0; i < count; i += i + 3 < count ? 3 : 1) {  // every third element, and the tail
            double abs_sum, ref = Wrapped(Reference(seed, i, t, op, g_size, &abs_sum), t);
            double got = LoadElement(dst, i, t);
            if (!WithinBound(got, ref, abs_sum, t, g_size))
              Fail("allreduce " + what + ": element " + std::to_string(i) + " = " + std::to_string(got) +
                   ", f64 reference " + std::to_string(ref));
          }
          PrintHash("allreduce/" + what, dst, count * esz);
          if (op != tsrSum && op != tsrMax) continue;
          std::vector<unsigned char> rin(count * g_size * esz), rout(count * esz, 0xCD);
          for (size_t i = 0; i < count * g_size; ++i) StoreElement(rin.data(), i, t, Value(seed, g_rank, i, t, op));
          void* rdst = inplace ? rin.data() + g_rank * count * esz : rout.data();
          Check(tsrReduceScatter(rin.data(), rdst, count, tt, op, g_comm, nullptr), "reduce_scatter");
          PrintHash("reduce_scatter/" + what, rdst, count * esz);
          if (op != tsrSum) continue;
          std::vector<unsigned char> gin(count * esz), gout(count * g_size * esz, 0xEF);
          for (size_t i = 0; i < count; ++i) StoreElement(gin.data(), i, t, Value(seed, g_rank, i, t, tsrSum));
          Check(tsrAllGather(gin.data(), gout.data(), count, tt, g_comm, nullptr), "allgather");
          for (int r = 0; r < g_size; ++r)
            for (size_t i = 0; i < count; ++i)
              if (LoadElement(gout.data(), r * count + i, t) != Value(seed, r, i, t, tsrSum))
                Fail("allgather " + what + ": block " + std::to_string(r) + " element " + std::to_string(i));
          PrintHash("allgather/" + what, gout.data(), gout.size());
          const int root = static_cast<int>(seed % g_size);
          std::vector<unsigned char> bbuf(count * esz, 0x11);
          for (size_t i = 0; i < count; ++i) StoreElement(bbuf.data(), i, t, Value(seed, root, i, t, tsrSum));
          Check(tsrBroadcast(bbuf.data(), bbuf.data(), count, tt, root, g_comm, nullptr), "broadcast");
          PrintHash("broadcast/" + what, bbuf.data(), bbuf.size());
        }
      }
    }
  }
  Check(tsrBarrier(g_comm), "barrier");
  std::printf("OK rank %d\n", g_rank);
  tsrCommDestroy(g_comm);
  return 0;
}
