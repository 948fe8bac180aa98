// bench/gpu/first_call: why a 2-GPU NCCL communicator's first allreduce, queued behind a busy stream,
// returns only when the stream's earlier work is done. One thread per GPU, NCCL called directly (no
// Tessera): each thread inits its rank, optionally warms up with one allreduce of --warm TYPE (then
// synchronizes), queues a 300 ms kernel on its stream, and times how long ncclAllReduce of --first TYPE
// takes to return. Run it under different environments (CUDA_MODULE_LOADING, NCCL_RUNTIME_CONNECT).
//   first_call [--warm none|f32|f16] [--first f32|f16] [--count N]
#include <cuda_runtime.h>
#include <nccl.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

__global__ void Spin(long long cycles) {
  long long t0 = clock64();
  while (clock64() - t0 < cycles) {
  }
}

#define CK(x)                                                                     \
  do {                                                                            \
    auto e_ = (x);                                                                \
    if (e_ != 0) {                                                                \
      std::fprintf(stderr, "%s failed (%d) at line %d\n", #x, int(e_), __LINE__); \
      std::exit(1);                                                               \
    }                                                                             \
  } while (0)

ncclDataType_t Type(const std::string& s) { return s == "f16" ? ncclFloat16 : ncclFloat32; }

int main(int argc, char** argv) {
  std::string warm = "none", first = "f32";
  size_t count = 1 << 20;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--warm")) warm = argv[i + 1];
    if (!std::strcmp(argv[i], "--first")) first = argv[i + 1];
    if (!std::strcmp(argv[i], "--count")) count = std::stoull(argv[i + 1]);
  }
  int n = 0;
  CK(cudaGetDeviceCount(&n));
  if (n < 2) {
    std::printf("first_call: needs 2 GPUs, %d visible\n", n);
    return 0;
  }
  ncclUniqueId id;
  CK(ncclGetUniqueId(&id));
  std::vector<double> ms(2);
  std::vector<std::thread> th;
  for (int r = 0; r < 2; ++r)
    th.emplace_back([&, r] {
      CK(cudaSetDevice(r));
      int clock_khz = 0;
      CK(cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, r));
      ncclComm_t c;
      CK(ncclCommInitRank(&c, 2, id, r));
      cudaStream_t s;
      CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
      void* b;
      CK(cudaMalloc(&b, count * 4));
      CK(cudaMemset(b, 0, count * 4));
      if (warm != "none") {
        CK(ncclAllReduce(b, b, 1, Type(warm), ncclSum, c, s));
        CK(cudaStreamSynchronize(s));
      }
      Spin<<<1, 1, 0, s>>>(300LL * clock_khz);  // about 300 ms
      CK(cudaGetLastError());
      auto t0 = std::chrono::steady_clock::now();
      CK(ncclAllReduce(b, b, count, Type(first), ncclSum, c, s));
      ms[r] = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
      CK(cudaStreamSynchronize(s));
      CK(ncclCommDestroy(c));
    });
  for (auto& t : th) t.join();
  std::printf(
      "first_call warm=%s first=%s count=%zu CUDA_MODULE_LOADING=%s NCCL_RUNTIME_CONNECT=%s: returned after %.1f / "
      "%.1f ms\n",
      warm.c_str(), first.c_str(), count, getenv("CUDA_MODULE_LOADING") ? getenv("CUDA_MODULE_LOADING") : "-",
      getenv("NCCL_RUNTIME_CONNECT") ? getenv("NCCL_RUNTIME_CONNECT") : "-", ms[0], ms[1]);
  return 0;
}
