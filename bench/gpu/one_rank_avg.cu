// bench/gpu/one_rank_avg: does NCCL, called directly on a communicator of one rank, write every element?
// For f16/bf16/f32/f64/int32 × sum/prod/max/min/avg and counts around 5,000 (plus a few others), the
// output is poisoned, one allreduce runs, and the result must equal the input byte for byte (one rank:
// every op is the identity) with nothing written past the end. NCCL before 2.29.7 leaves the last
// elements of a one-rank avg unwritten at some counts (NVIDIA/nccl#1950); Tessera sends avg as sum on a
// one-rank communicator (CclComm::Op), and GpuSingleIsland.* check Tessera's results. No Tessera here.
//   one_rank_avg      prints each wrong case, then "one_rank_avg: NCCL <version>: W of N cases wrong (...)"
#include <cuda_runtime.h>
#include <nccl.h>

#include <cstdint>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#define CK(x)                                                                     \
  do {                                                                            \
    if ((x) != 0) {                                                               \
      std::fprintf(stderr, "one_rank_avg: %s failed at line %d\n", #x, __LINE__); \
      return 1;                                                                   \
    }                                                                             \
  } while (0)

int main() {
  ncclComm_t comm;
  int dev = 0, version = 0;
  CK(ncclCommInitAll(&comm, 1, &dev));
  CK(ncclGetVersion(&version));
  cudaStream_t s;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  const size_t kMax = 400000, kBytes = kMax * 8 + 64;
  void *in, *out;
  CK(cudaMalloc(&in, kBytes));
  CK(cudaMalloc(&out, kBytes));
  // Bytes below 0x40: every f16/bf16/f32/f64 made of them is finite, so the identity is byte-exact.
  std::vector<unsigned char> h(kBytes), r(kBytes);
  for (size_t i = 0; i < h.size(); ++i) h[i] = static_cast<unsigned char>(((i * 2654435761u) >> 13) & 0x3f);
  CK(cudaMemcpy(in, h.data(), h.size(), cudaMemcpyHostToDevice));
  const ncclDataType_t types[] = {ncclFloat16, ncclBfloat16, ncclFloat32, ncclFloat64, ncclInt32};
  const char* tname[] = {"f16", "bf16", "f32", "f64", "int32"};
  const size_t esz[] = {2, 2, 4, 8, 4};
  const ncclRedOp_t ops[] = {ncclSum, ncclProd, ncclMax, ncclMin, ncclAvg};
  const char* oname[] = {"sum", "prod", "max", "min", "avg"};
  std::vector<size_t> counts = {1, 2, 3, 7, 8, 9, 1000, 4099, 300001};
  for (size_t n = 4960; n <= 5000; ++n) counts.push_back(n);
  int wrong = 0, total = 0;
  std::map<std::string, int> by;  // "f64 avg" -> wrong cases
  for (int t = 0; t < 5; ++t)
    for (int o = 0; o < 5; ++o)
      for (size_t n : counts) {
        const size_t nb = n * esz[t];
        CK(cudaMemsetAsync(out, 0xEE, kBytes, s));
        CK(ncclAllReduce(in, out, n, types[t], ops[o], comm, s));
        CK(cudaMemcpyAsync(r.data(), out, nb + 16, cudaMemcpyDeviceToHost, s));
        CK(cudaStreamSynchronize(s));
        ++total;
        size_t first = SIZE_MAX, diffs = 0;
        for (size_t b = 0; b < nb; ++b)
          if (r[b] != h[b]) {
            if (first == SIZE_MAX) first = b;
            ++diffs;
          }
        bool past = false;
        for (size_t b = nb; b < nb + 16; ++b) past |= r[b] != 0xEE;
        if (diffs == 0 && !past) continue;
        ++wrong;
        by[std::string(tname[t]) + " " + oname[o]]++;
        std::printf("wrong: %s %s count %zu: %zu bytes differ, the first at element %zu%s\n", tname[t], oname[o], n,
                    diffs, diffs ? first / esz[t] : 0, past ? "; wrote past the end" : "");
      }
  std::string which;
  for (auto& [k, v] : by) which += (which.empty() ? "" : ", ") + k + ": " + std::to_string(v);
  std::printf("one_rank_avg: NCCL %d: %d of %d cases wrong (%s)\n", version, wrong, total,
              which.empty() ? "none" : which.c_str());
  ncclCommDestroy(comm);
  return 0;
}
