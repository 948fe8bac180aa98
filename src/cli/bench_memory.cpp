// cli/bench_memory: host or device buffers of one `tessera bench` rank; see bench_memory.hpp.
#include "cli/bench_memory.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "comm/runtime/runtime.hpp"
#include "common/env.hpp"
#include "common/vendor.hpp"

#if defined(TESSERA_HAVE_CUDA)
#include <cuda_runtime_api.h>
#endif

namespace tessera::cli {
namespace {

size_t Rounded(size_t bytes) { return std::max<size_t>(4096, (bytes + 4095) / 4096 * 4096); }

#if defined(TESSERA_HAVE_CUDA)
Status CudaCheck(cudaError_t e, int gpu, const std::string& what) {
  if (e == cudaSuccess) return Status::Ok();
  return SystemError(
      fmt::format("cuda:{}: CUDA error '{}' ({}) in {}", gpu, cudaGetErrorString(e), static_cast<int>(e), what));
}
#endif

}  // namespace

void BenchMemory::Free::operator()(std::byte* p) const {
  if (p == nullptr) return;
  if (rt != nullptr) {
    (void)rt->SetDevice(gpu);
    (void)rt->Free(p);
    return;
  }
  if (gpu < 0) {
    std::free(p);
    return;
  }
#if defined(TESSERA_HAVE_CUDA)
  (void)cudaSetDevice(gpu);
  (void)cudaFree(p);  // the benchmark has synchronized its stream before a buffer goes
#endif
}

Result<std::unique_ptr<BenchMemory>> BenchMemory::Open(const std::string& device, bool host_memory) {
  std::unique_ptr<BenchMemory> m(new BenchMemory());
  TSR_ASSIGN_OR_RETURN(DeviceName name, ParseDeviceName(device, "TESSERA_DEVICE"));
  if (host_memory || name.host()) return m;
  if (!comm::HasCudaBackend(*name.family)) {
    // The family's runtime row; the communicator has already opened it and checked the index.
    TSR_ASSIGN_OR_RETURN(m->rt_, comm::LoadRuntime(name.family->runtime));
    TSR_RETURN_IF_ERROR(m->rt_->SetDevice(name.index));
    TSR_ASSIGN_OR_RETURN(void* s, m->rt_->StreamCreate());
    m->gpu_ = name.index;
    m->stream_ = s;
    return m;
  }
  const int64_t gpu = name.index;
#if defined(TESSERA_HAVE_CUDA)
  // The communicator has already made this GPU current on this thread; say so again, explicitly, before
  // anything is made on it.
  TSR_RETURN_IF_ERROR(CudaCheck(cudaSetDevice(static_cast<int>(gpu)), static_cast<int>(gpu), "cudaSetDevice"));
  cudaStream_t s = nullptr;
  TSR_RETURN_IF_ERROR(CudaCheck(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), static_cast<int>(gpu),
                                "cudaStreamCreateWithFlags (the benchmark's stream)"));
  m->gpu_ = static_cast<int>(gpu);
  m->stream_ = s;
  return m;
#else
  (void)gpu;
  return Unsupported(
      fmt::format("TESSERA_DEVICE='{}' asks for device memory, but this build has no CUDA "
                  "(use --host-memory, or build with nvcc present)",
                  device));
#endif
}

BenchMemory::~BenchMemory() {
  if (rt_ != nullptr) {
    (void)rt_->SetDevice(gpu_);
    (void)rt_->StreamSynchronize(stream_);
    (void)rt_->StreamDestroy(stream_);
    return;
  }
#if defined(TESSERA_HAVE_CUDA)
  if (stream_ != nullptr) {
    (void)cudaSetDevice(gpu_);
    (void)cudaStreamSynchronize(static_cast<cudaStream_t>(stream_));
    (void)cudaStreamDestroy(static_cast<cudaStream_t>(stream_));
  }
#endif
}

Result<BenchMemory::Buffer> BenchMemory::Allocate(size_t bytes) {
  const size_t n = Rounded(bytes);
  if (!on_device()) {
    auto* p = static_cast<std::byte*>(std::aligned_alloc(4096, n));
    if (p == nullptr) return SystemError(fmt::format("cannot allocate {} bytes of host memory", n));
    std::memset(p, 0, n);  // fault the pages in before timing
    return Buffer(p, Free{-1});
  }
  if (rt_ != nullptr) {
    TSR_RETURN_IF_ERROR(rt_->SetDevice(gpu_));
    TSR_ASSIGN_OR_RETURN(void* p, rt_->Malloc(n));
    Buffer b(static_cast<std::byte*>(p), Free{gpu_, rt_});
    TSR_RETURN_IF_ERROR(rt_->MemsetAsync(p, n, 0, n, stream_));
    TSR_RETURN_IF_ERROR(Synchronize());
    return b;
  }
#if defined(TESSERA_HAVE_CUDA)
  void* p = nullptr;
  TSR_RETURN_IF_ERROR(CudaCheck(cudaMalloc(&p, n), gpu_, fmt::format("cudaMalloc ({} bytes)", n)));
  Buffer b(static_cast<std::byte*>(p), Free{gpu_});
  auto s = static_cast<cudaStream_t>(stream_);
  TSR_RETURN_IF_ERROR(CudaCheck(cudaMemsetAsync(p, 0, n, s), gpu_, "cudaMemsetAsync"));
  TSR_RETURN_IF_ERROR(Synchronize());
  return b;
#else
  return InternalError("device memory in a build without CUDA");
#endif
}

Status BenchMemory::Copy(void* dst, const void* src, size_t bytes, bool to_device) {
  if (bytes == 0) return Status::Ok();
  if (!on_device()) {
    std::memcpy(dst, src, bytes);
    return Status::Ok();
  }
  if (rt_ != nullptr) {
    // After the stream has drained, a synchronous copy: ACL copies asynchronously only from host memory it
    // allocated, and these host buffers are the benchmark's own.
    TSR_RETURN_IF_ERROR(Synchronize());
    return rt_->Memcpy(dst, bytes, src, bytes,
                       to_device ? comm::CopyKind::kHostToDevice : comm::CopyKind::kDeviceToHost);
  }
#if defined(TESSERA_HAVE_CUDA)
  // On the benchmark's stream, not cudaMemcpy: a copy from pageable memory may return before its DMA
  // is done, and the legacy default stream does not order a non-blocking stream's work.
  TSR_RETURN_IF_ERROR(
      CudaCheck(cudaMemcpyAsync(dst, src, bytes, to_device ? cudaMemcpyHostToDevice : cudaMemcpyDeviceToHost,
                                static_cast<cudaStream_t>(stream_)),
                gpu_,
                fmt::format("cudaMemcpyAsync ({}, {} bytes, {})", to_device ? "input" : "result", bytes,
                            to_device ? "host to device" : "device to host")));
  return Synchronize();
#else
  (void)to_device;
  return InternalError("device memory in a build without CUDA");
#endif
}

Status BenchMemory::Upload(std::byte* dst, const void* src, size_t bytes) { return Copy(dst, src, bytes, true); }

Status BenchMemory::Download(void* dst, const std::byte* src, size_t bytes) { return Copy(dst, src, bytes, false); }

Status BenchMemory::Synchronize() {
  if (!on_device()) return Status::Ok();
  if (rt_ != nullptr) {
    TSR_RETURN_IF_ERROR(rt_->SetDevice(gpu_));
    return rt_->StreamSynchronize(stream_);
  }
#if defined(TESSERA_HAVE_CUDA)
  return CudaCheck(cudaStreamSynchronize(static_cast<cudaStream_t>(stream_)), gpu_, "cudaStreamSynchronize");
#else
  return Status::Ok();
#endif
}

}  // namespace tessera::cli
