// tests/gpu/delay.cu: a kernel that keeps a stream busy for a given time, so tests can show that a
// collective enqueued behind it returns to the caller at once and still runs after it (stream order).
#include <cuda_runtime.h>

#include <cstdint>

namespace {
__global__ void Delay(uint64_t ns, int* touched) {
  uint64_t t0, t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
  do {
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  } while (t - t0 < ns);
  if (touched) *touched = 1;
}
}  // namespace

cudaError_t LaunchDelay(cudaStream_t s, double ms) {
  Delay<<<1, 1, 0, s>>>(static_cast<uint64_t>(ms * 1e6), nullptr);
  return cudaGetLastError();
}
