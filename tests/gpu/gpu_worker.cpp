// tests/gpu/gpu_worker: one rank of the multi-process GPU tests. Ranks whose TESSERA_DEVICE is cuda:N
// work on device memory with their own stream; host ranks on host memory — in the same job.
//
//   gpu_worker check [--sizes a,b,..]   allreduce (every op, in place and not) for f16/bf16/f32/f64/int32,
//       reduce_scatter, allgather, broadcast: every result against an f64 reference within one final
//       rounding plus f32 accumulation, and bit-identical on all ranks (hashes allgathered in host memory);
//       a GPU rank's first allreduce is queued behind a 300 ms kernel and must return at once;
//   gpu_worker numerics [--count N]       random gradients: error vs f64 for f16/bf16/f32 (JSON on rank 0);
//   gpu_worker wrongmem                    GPU ranks pass host memory with a stream, host ranks pass device
//       memory: the offender gets tsrInvalidArgument, every other rank an error, all within the timeout;
//   gpu_worker badptr                      the GPU rank 0 passes an address that is no allocation;
//   gpu_worker die RANK                    RANK exits after one allreduce; the others must fail in time;
//   gpu_worker repeat                      (a world of one device island) 300 allreduces on the same two
//       buffers, every type and op, each checked — the lean path of repeated calls, past two error polls —
//       then a count past the allocation must be tsrInvalidArgument naming it, and a later call an error.
// Prints "OK ..." on success, "FAIL ..." and exits 1 otherwise.
#include <cuda_runtime.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "../comm/reference.hpp"
#include "common/dtype.hpp"
#include "tessera/tessera.h"

cudaError_t LaunchDelay(cudaStream_t s, double ms);

using tessera::DType;

namespace {

using namespace tessera::check;  // Value, Store, Load, Reference, WithinBound, Hash

tsrComm_t g_comm;
int g_rank, g_size;
bool g_gpu = false;
cudaStream_t g_stream = nullptr;

[[noreturn]] void Fail(const std::string& why) {
  std::printf("FAIL rank %d: %s\n", g_rank, why.c_str());
  std::fflush(stdout);
  std::exit(1);
}
void Check(tsrResult_t r, const char* what) {
  if (r != tsrSuccess) Fail(std::string(what) + ": " + tsrGetErrorString(r) + ": " + tsrGetLastError(g_comm));
}
void Cuda(cudaError_t e, const char* what) {
  if (e != cudaSuccess) Fail(std::string(what) + ": " + cudaGetErrorString(e));
}

// A buffer in this rank's memory kind, with a host mirror.
struct Buf {
  std::vector<unsigned char> host;
  void* dev = nullptr;
  // Device data is written on the rank's stream, as a training step would: the collective that follows
  // on that stream must see it (stream order), with nothing synchronized in between.
  explicit Buf(size_t bytes, unsigned char fill = 0) : host(bytes + 8, fill) {
    if (g_gpu) {
      Cuda(cudaMalloc(&dev, bytes + 8), "cudaMalloc");
      Push();
    }
  }
  ~Buf() {
    if (dev) {
      Cuda(cudaStreamSynchronize(g_stream), "cudaStreamSynchronize");
      cudaFree(dev);
    }
  }
  void* ptr() { return g_gpu ? dev : host.data(); }
  void Push() {
    if (g_gpu) Cuda(cudaMemcpyAsync(dev, host.data(), host.size(), cudaMemcpyHostToDevice, g_stream), "push");
  }
  void Pull() {
    if (g_gpu) {
      Cuda(cudaMemcpyAsync(host.data(), dev, host.size(), cudaMemcpyDeviceToHost, g_stream), "pull");
      Cuda(cudaStreamSynchronize(g_stream), "cudaStreamSynchronize");
    }
  }
};
tsrStream_t S() { return g_gpu ? static_cast<tsrStream_t>(g_stream) : nullptr; }

// Bit-identity: hashes allgathered in host memory (stream NULL) — also on GPU ranks.
bool AllSame(const void* buf, size_t bytes, const std::string& what, bool fail = true) {
  uint64_t h = Hash(buf, bytes);
  std::vector<uint64_t> all(g_size);
  Check(tsrAllGather(&h, all.data(), 1, tsrInt64, g_comm, nullptr), "allgather of hashes");
  for (int r = 0; r < g_size; ++r)
    if (all[r] != all[0]) {
      if (fail) Fail(what + ": result bits differ between rank 0 and rank " + std::to_string(r));
      return false;
    }
  return true;
}

// An allreduce's result (pulled to host) against the f64 reference of Value(seed, ...) over all ranks:
// within one final rounding plus f32 accumulation (exact for integers), and bit-identical on all ranks.
void CheckAllReduced(const unsigned char* got_bytes, size_t count, DType t, tsrRedOp_t op, uint64_t seed,
                     const std::string& what) {
  for (size_t i = 0; i < count; ++i) {
    double abs_sum, ref = Reference(seed, i, t, op, g_size, &abs_sum);
    double got = LoadElement(got_bytes, i, t);
    if (t == DType::kInt32)
      ref = static_cast<double>(static_cast<int32_t>(static_cast<int64_t>(std::fmod(ref, 4294967296.0))));
    if (!WithinBound(got, ref, abs_sum, t, g_size))
      Fail(what + " (" + tessera::DTypeName(t) + ", op " + std::to_string(op) + ", count " + std::to_string(count) +
           "): element " + std::to_string(i) + " = " + std::to_string(got) + ", f64 reference " + std::to_string(ref));
  }
  AllSame(got_bytes, count * tessera::DTypeSize(t), what);
}

int RunCheck(const std::vector<size_t>& sizes) {
  const DType types[] = {DType::kFloat16, DType::kBfloat16, DType::kFloat32, DType::kFloat64, DType::kInt32};
  const tsrRedOp_t ops[] = {tsrSum, tsrProd, tsrMax, tsrMin, tsrAvg};
  uint64_t seed = 11;
  size_t cases = 0;
  bool first = true;
  for (size_t count : sizes)
    for (DType t : types) {
      const size_t esz = tessera::DTypeSize(t);
      const auto tt = static_cast<tsrDataType_t>(t);
      for (tsrRedOp_t op : ops)
        for (int inplace = 0; inplace < 2; ++inplace) {
          ++seed;
          Buf in(count * esz), out(count * esz, 0xAB);
          for (size_t i = 0; i < count; ++i) StoreElement(in.host.data(), i, t, Value(seed, g_rank, i, t, op));
          in.Push();
          Buf& dst = inplace ? in : out;
          if (g_gpu && first && count > 0) {
            // Stream semantics: queued behind 300 ms of other work, the call must return at once.
            Cuda(LaunchDelay(g_stream, 300), "delay kernel");
            auto t0 = std::chrono::steady_clock::now();
            Check(tsrAllReduce(in.ptr(), dst.ptr(), count, tt, op, g_comm, S()), "allreduce");
            double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
            if (ms > 150) Fail("allreduce on a busy stream took " + std::to_string(ms) + " ms to return: it waited");
            std::printf("async: allreduce returned after %.3f ms behind a 300 ms kernel\n", ms);
            first = false;
          } else {
            Check(tsrAllReduce(in.ptr(), dst.ptr(), count, tt, op, g_comm, S()), "allreduce");
          }
          dst.Pull();
          CheckAllReduced(dst.host.data(), count, t, op, seed, inplace ? "allreduce in place" : "allreduce");
          ++cases;
          if (op != tsrSum || inplace) continue;
          // reduce_scatter (sum)
          Buf rin(count * g_size * esz), rout(count * esz, 0xCD);
          for (size_t i = 0; i < count * g_size; ++i)
            StoreElement(rin.host.data(), i, t, Value(seed, g_rank, i, t, op));
          rin.Push();
          Check(tsrReduceScatter(rin.ptr(), rout.ptr(), count, tt, op, g_comm, S()), "reduce_scatter");
          rout.Pull();
          for (size_t i = 0; i < count; ++i) {
            double abs_sum, ref = Reference(seed, g_rank * count + i, t, op, g_size, &abs_sum);
            if (!WithinBound(LoadElement(rout.host.data(), i, t), ref, abs_sum, t, g_size))
              Fail("reduce_scatter " + std::string(tessera::DTypeName(t)) + " count " + std::to_string(count) +
                   " element " + std::to_string(i));
          }
          // allgather
          Buf gin(count * esz), gout(count * g_size * esz, 0xEF);
          for (size_t i = 0; i < count; ++i) StoreElement(gin.host.data(), i, t, Value(seed, g_rank, i, t, tsrSum));
          gin.Push();
          Check(tsrAllGather(gin.ptr(), gout.ptr(), count, tt, g_comm, S()), "allgather");
          gout.Pull();
          for (int r = 0; r < g_size; ++r)
            for (size_t i = 0; i < count; ++i)
              if (LoadElement(gout.host.data(), r * count + i, t) != Value(seed, r, i, t, tsrSum))
                Fail("allgather " + std::string(tessera::DTypeName(t)) + " block " + std::to_string(r) + " wrong");
          // broadcast
          int root = static_cast<int>(seed % g_size);
          Buf bbuf(count * esz, 0x11);
          for (size_t i = 0; i < count; ++i) StoreElement(bbuf.host.data(), i, t, Value(seed, root, i, t, tsrSum));
          if (g_rank != root) std::fill(bbuf.host.begin(), bbuf.host.end(), 0x22);
          bbuf.Push();
          Check(tsrBroadcast(bbuf.ptr(), bbuf.ptr(), count, tt, root, g_comm, S()), "broadcast");
          bbuf.Pull();
          for (size_t i = 0; i < count; ++i)
            if (LoadElement(bbuf.host.data(), i, t) != Value(seed, root, i, t, tsrSum))
              Fail("broadcast root " + std::to_string(root) + " element " + std::to_string(i) + " wrong");
        }
    }
  Check(tsrBarrier(g_comm), "barrier");
  std::printf("OK rank %d (%s): %zu allreduce cases plus reduce_scatter/allgather/broadcast checked\n", g_rank,
              g_gpu ? "gpu" : "host", cases);
  return 0;
}

// Random gradients ~ N(0, 1): the error of the allreduce sum against f64, beside the error of one ideal
// rounding of the f64 sum to the type (the floor no method can beat).
int RunNumerics(size_t count) {
  const DType types[] = {DType::kFloat16, DType::kBfloat16, DType::kFloat32};
  for (DType t : types) {
    const size_t esz = tessera::DTypeSize(t);
    std::vector<std::vector<double>> vals(g_size, std::vector<double>(count));
    for (int r = 0; r < g_size; ++r) {
      std::mt19937_64 gen(1000 + r);
      std::normal_distribution<double> nd(0.0, 1.0);
      for (size_t i = 0; i < count; ++i) {
        double v = nd(gen);
        unsigned char tmp[8];
        StoreElement(tmp, 0, t, v);
        vals[r][i] = LoadElement(tmp, 0, t);  // exactly representable inputs
      }
    }
    Buf in(count * esz);
    for (size_t i = 0; i < count; ++i) StoreElement(in.host.data(), i, t, vals[g_rank][i]);
    in.Push();
    Check(tsrAllReduce(in.ptr(), in.ptr(), count, static_cast<tsrDataType_t>(t), tsrSum, g_comm, S()), "allreduce");
    in.Pull();
    double num = 0, den = 0, floor_num = 0, max_rel = 0;
    size_t beyond = 0;
    for (size_t i = 0; i < count; ++i) {
      double ref = 0, abs_sum = 0;
      for (int r = 0; r < g_size; ++r) {
        ref += vals[r][i];
        abs_sum += std::fabs(vals[r][i]);
      }
      double got = LoadElement(in.host.data(), i, t);
      unsigned char tmp[8];
      StoreElement(tmp, 0, t, ref);
      double ideal = LoadElement(tmp, 0, t);
      num += (got - ref) * (got - ref);
      den += ref * ref;
      floor_num += (ideal - ref) * (ideal - ref);
      if (std::fabs(ref) > 1e-3) max_rel = std::max(max_rel, std::fabs(got - ref) / std::fabs(ref));
      if (!WithinBound(got, ref, abs_sum, t, g_size)) ++beyond;
    }
    bool same = AllSame(in.host.data(), count * esz, "numerics", false);
    char line[512];
    std::snprintf(line, sizeof(line),
                  "{\"bench\":\"numerics\",\"dtype\":\"%s\",\"count\":%zu,\"ranks\":%d,\"rel_err_l2\":%.3e,"
                  "\"one_rounding_rel_err_l2\":%.3e,\"max_rel_err\":%.3e,\"beyond_one_rounding\":%zu,"
                  "\"bit_identical\":%s}",
                  tessera::DTypeName(t), count, g_size, std::sqrt(num / den), std::sqrt(floor_num / den), max_rel,
                  beyond, same ? "true" : "false");
    if (g_rank == 0) std::printf("%s\n", line);
    if (!same || beyond > 0) Fail(std::string("numerics ") + line);
  }
  std::printf("OK rank %d: numerics\n", g_rank);
  return 0;
}

// Every rank of a faulted job must end with an error, named, in bounded time.
// Repeated calls on the same buffers, as a training loop makes them: after the first, the C API's lean
// path (DirectAllReduce) takes them. Each result is checked; then the errors it must leave to the full path.
int RunRepeat() {
  const DType types[] = {DType::kFloat16, DType::kBfloat16, DType::kFloat32, DType::kInt32, DType::kFloat64};
  const tsrRedOp_t ops[] = {tsrSum, tsrProd, tsrMax, tsrMin, tsrAvg};
  const size_t kMax = 5000;  // elements
  Buf in(kMax * 8), out(kMax * 8);
  for (int call = 0; call < 300; ++call) {
    const DType t = types[call % 5];
    const tsrRedOp_t op = ops[(call / 5) % 5];
    const size_t count = kMax - static_cast<size_t>(call);
    const uint64_t seed = 1000 + static_cast<uint64_t>(call);
    for (size_t i = 0; i < count; ++i) StoreElement(in.host.data(), i, t, Value(seed, g_rank, i, t, op));
    in.Push();
    Check(tsrAllReduce(in.ptr(), out.ptr(), count, static_cast<tsrDataType_t>(t), op, g_comm, S()), "allreduce");
    out.Pull();
    CheckAllReduced(out.host.data(), count, t, op, seed, "repeated allreduce " + std::to_string(call));
  }
  // The buffers are known good now; a count past their end must still be refused, naming the size.
  tsrResult_t r = tsrAllReduce(in.ptr(), out.ptr(), kMax * 4, tsrFloat32, tsrSum, g_comm, S());
  std::printf("ERROR past the allocation: %s: %s\n", tsrGetErrorString(r), tsrGetLastError(g_comm));
  if (r != tsrInvalidArgument) Fail("a count past a known allocation should be tsrInvalidArgument");
  if (!std::strstr(tsrGetLastError(g_comm), "but its allocation has")) Fail("the error should name the allocation");
  // The communicator has failed: a later valid call must not slip through the lean path.
  r = tsrAllReduce(in.ptr(), out.ptr(), 16, tsrFloat32, tsrSum, g_comm, S());
  std::printf("ERROR after the failure: %s: %s\n", tsrGetErrorString(r), tsrGetLastError(g_comm));
  if (r == tsrSuccess) Fail("a call after the communicator failed succeeded");
  std::printf("OK rank %d: 300 repeated allreduces checked, errors after them refused\n", g_rank);
  return 0;
}

int ExpectError(tsrResult_t r, double secs, bool offender) {
  std::printf("ERROR rank %d after %.2fs: %s: %s\n", g_rank, secs, tsrGetErrorString(r), tsrGetLastError(g_comm));
  if (r == tsrSuccess) Fail("the faulty collective succeeded");
  if (offender && r != tsrInvalidArgument) Fail("the offending rank should get tsrInvalidArgument");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  setvbuf(stdout, nullptr, _IOLBF, 0);
  if (argc < 2) {
    std::fprintf(stderr, "usage: gpu_worker check|numerics|wrongmem|badptr|repeat|die RANK [options]\n");
    return 2;
  }
  std::string mode = argv[1];
  const char* dev = std::getenv("TESSERA_DEVICE");
  g_gpu = dev && std::strncmp(dev, "cuda:", 5) == 0;
  tsrResult_t r = tsrCommInitFromEnv(&g_comm);  // selects the GPU of TESSERA_DEVICE
  if (r != tsrSuccess) {
    std::printf("INITFAIL %s: %s\n", tsrGetErrorString(r), tsrGetLastError(nullptr));
    return 3;
  }
  if (g_gpu) {
    Cuda(cudaSetDevice(std::atoi(dev + 5)), "cudaSetDevice");
    Cuda(cudaStreamCreateWithFlags(&g_stream, cudaStreamNonBlocking), "cudaStreamCreate");
  }
  tsrCommRank(g_comm, &g_rank);
  tsrCommSize(g_comm, &g_size);
  int rc = 0;
  std::vector<size_t> sizes = {0, 1, 7, 1000, 4099, 300001};
  size_t count = 1 << 22;
  for (int i = 2; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--sizes")) {
      sizes.clear();
      std::string s = argv[i + 1];
      for (size_t p = 0; p <= s.size();) {
        size_t c = s.find(',', p);
        sizes.push_back(std::stoull(s.substr(p, c - p)));
        if (c == std::string::npos) break;
        p = c + 1;
      }
    }
    if (!std::strcmp(argv[i], "--count")) count = std::stoull(argv[i + 1]);
  }
  auto t0 = std::chrono::steady_clock::now();
  auto secs = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(); };
  if (mode == "check") {
    if (g_gpu) {  // which bridge this rank uses: the tests check it ran the path they mean
      const char* desc = tsrCommDescribe(g_comm);
      std::printf("DESCRIBE %s\n", desc ? desc : "(none)");
    }
    rc = RunCheck(sizes);
  } else if (mode == "numerics") {
    rc = RunNumerics(count);
  } else if (mode == "wrongmem") {
    // The offender: rank 0. On a GPU it passes host memory with a stream; on a host rank, device memory.
    std::vector<float> host(1024, 1.0f);
    void* devp = nullptr;
    if (g_rank == 0) {
      Cuda(cudaMalloc(&devp, 4096), "cudaMalloc");
      r = g_gpu ? tsrAllReduce(host.data(), host.data(), 1024, tsrFloat32, tsrSum, g_comm, S())
                : tsrAllReduce(devp, devp, 1024, tsrFloat32, tsrSum, g_comm, nullptr);
      rc = ExpectError(r, secs(), true);
    } else {
      Buf b(4096);
      r = tsrAllReduce(b.ptr(), b.ptr(), 1024, tsrFloat32, tsrSum, g_comm, S());
      if (r == tsrSuccess) {
        b.Pull();
        r = tsrAllReduce(b.ptr(), b.ptr(), 1024, tsrFloat32, tsrSum, g_comm, S());
      }
      rc = ExpectError(r, secs(), false);
    }
  } else if (mode == "badptr") {
    Buf b(4096);
    if (g_rank == 0 && g_gpu) {
      void* bogus = reinterpret_cast<void*>(0x7f00deadbe00ull);
      r = tsrAllReduce(bogus, bogus, 1024, tsrFloat32, tsrSum, g_comm, S());
      rc = ExpectError(r, secs(), true);
    } else {
      r = tsrAllReduce(b.ptr(), b.ptr(), 1024, tsrFloat32, tsrSum, g_comm, S());
      if (r == tsrSuccess) {
        b.Pull();
        r = tsrAllReduce(b.ptr(), b.ptr(), 1024, tsrFloat32, tsrSum, g_comm, S());
      }
      rc = ExpectError(r, secs(), false);
    }
  } else if (mode == "repeat") {
    rc = RunRepeat();
  } else if (mode == "die") {
    int victim = argc > 2 ? std::atoi(argv[2]) : 0;
    Buf b(4 << 20);
    Check(tsrAllReduce(b.ptr(), b.ptr(), 1 << 20, tsrFloat32, tsrSum, g_comm, S()), "first allreduce");
    b.Pull();
    if (g_rank == victim) {
      std::printf("DYING rank %d\n", g_rank);
      std::fflush(stdout);
      _exit(7);
    }
    t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < 100 && r == tsrSuccess; ++i) {
      r = tsrAllReduce(b.ptr(), b.ptr(), 1 << 20, tsrFloat32, tsrSum, g_comm, S());
      if (r == tsrSuccess && g_gpu) r = cudaStreamSynchronize(g_stream) == cudaSuccess ? tsrSuccess : tsrInternalError;
    }
    rc = ExpectError(r, secs(), false);
    if (r != tsrRemoteError && r != tsrTimeout) Fail("expected tsrRemoteError or tsrTimeout");
  } else {
    Fail("unknown mode " + mode);
  }
  tsrCommDestroy(g_comm);
  return rc;
}
