// comm/device/cuda: device selection, pointer classification and CUDA resources of a rank; see cuda.hpp.
#include "comm/device/cuda.hpp"

#include <cuda.h>
#include <dlfcn.h>
#include <fmt/format.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "comm/kernels/kernels.hpp"
#include "common/log.hpp"

namespace tessera::comm::cuda {
namespace {

using WaitValueFn = CUresult (*)(CUstream, CUdeviceptr, cuuint32_t, unsigned int);
using MemRangeFn = CUresult (*)(CUdeviceptr*, size_t*, CUdeviceptr);

void* DriverSymbol(const char* name, unsigned version) {
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult q{};
  if (cudaGetDriverEntryPointByVersion(name, &fn, version, cudaEnableDefault, &q) != cudaSuccess ||
      q != cudaDriverEntryPointSuccess)
    return nullptr;
  return fn;
}

}  // namespace

Status Check(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return Status::Ok();
  return SystemError(fmt::format("CUDA error '{}' ({}) in {}", cudaGetErrorString(e), static_cast<int>(e), what));
}

bool IsDeviceMemory(const void* p) {
  if (p == nullptr) return false;
  // libcuda is loaded only once something in the process used CUDA; without it no pointer is device memory.
  void* h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
  if (h == nullptr) return false;
  dlclose(h);
  cudaPointerAttributes a{};
  if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
    (void)cudaGetLastError();
    return false;
  }
  return a.type == cudaMemoryTypeDevice || a.type == cudaMemoryTypeManaged;
}

Result<std::unique_ptr<Device>> Device::Open(const std::string& spec) {
  if (spec.rfind("cuda:", 0) != 0) return InvalidArgument(fmt::format("TESSERA_DEVICE='{}' is not cuda:N", spec));
  std::string num = spec.substr(5);
  if (num.empty() || num.size() > 4 || num.find_first_not_of("0123456789") != std::string::npos)
    return InvalidArgument(fmt::format("TESSERA_DEVICE='{}': '{}' is not a GPU index", spec, num));
  std::unique_ptr<Device> d(new Device());
  d->index_ = std::stoi(num);
  int count = 0;
  cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess || count == 0)
    return Unsupported(fmt::format("TESSERA_DEVICE='{}' but this machine has no usable CUDA GPU ({})", spec,
                                   e != cudaSuccess ? cudaGetErrorString(e) : "0 devices"));
  if (d->index_ >= count)
    return InvalidArgument(fmt::format("TESSERA_DEVICE='{}' but only {} CUDA GPU(s) are visible (cuda:0..cuda:{})",
                                       spec, count, count - 1));
  TSR_RETURN_IF_ERROR(Check(cudaSetDevice(d->index_), "cudaSetDevice"));
  cudaDeviceProp prop{};
  TSR_RETURN_IF_ERROR(Check(cudaGetDeviceProperties(&prop, d->index_), "cudaGetDeviceProperties"));
  d->name_ = prop.name;
  void* flag = nullptr;
  TSR_RETURN_IF_ERROR(Check(cudaHostAlloc(&flag, 64, cudaHostAllocMapped), "cudaHostAlloc (completion flag)"));
  d->flag_host_ = static_cast<uint32_t*>(flag);
  *d->flag_host_ = 0;
  void* dev = nullptr;
  TSR_RETURN_IF_ERROR(Check(cudaHostGetDevicePointer(&dev, flag, 0), "cudaHostGetDevicePointer"));
  d->flag_dev_ = static_cast<uint32_t*>(dev);
  d->wait_value_ = DriverSymbol("cuStreamWaitValue32", 12000);
  d->write_value_ = DriverSymbol("cuStreamWriteValue32", 12000);
  d->mem_range_ = DriverSymbol("cuMemGetAddressRange", 12000);
  if (d->wait_value_ != nullptr) d->wait_mode_ = "stream-wait-value";
  TSR_LOG_DEBUG("{}: {} ({}), stream wait: {}", spec, d->name_, d->index_, d->wait_mode_);
  return d;
}

Device::~Device() {
  if (flag_host_ != nullptr) (void)cudaFreeHost(flag_host_);
}

Status Device::MakeCurrent() const { return Check(cudaSetDevice(index_), "cudaSetDevice"); }

Status Device::CheckDevicePtr(const char* what, const char* arg, const void* p, size_t bytes, AllocCache& seen) const {
  if (bytes == 0) return Status::Ok();
  if (p == nullptr) return InvalidArgument(fmt::format("{}: {} is NULL", what, arg));
  if (seen.Contains(p, bytes)) return Status::Ok();
  cudaPointerAttributes a{};
  cudaError_t e = cudaPointerGetAttributes(&a, p);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    return InvalidArgument(
        fmt::format("{}: {} = {} is not memory CUDA knows ({})", what, arg, p, cudaGetErrorString(e)));
  }
  if (a.type == cudaMemoryTypeUnregistered || a.type == cudaMemoryTypeHost)
    return InvalidArgument(fmt::format(
        "{}: {} = {} is not device memory ({}), but a stream was passed, so the buffers "
        "must be device memory of cuda:{} (pass a NULL stream for host memory)",
        what, arg, p, a.type == cudaMemoryTypeHost ? "pinned host memory" : "host memory or no allocation at all",
        index_));
  if (a.type == cudaMemoryTypeDevice && a.device != index_)
    return InvalidArgument(
        fmt::format("{}: {} = {} is memory of cuda:{}, but this rank drives cuda:{}", what, arg, p, a.device, index_));
  if (a.type == cudaMemoryTypeDevice && mem_range_ != nullptr) {
    CUdeviceptr base = 0;
    size_t size = 0;
    auto fn = reinterpret_cast<MemRangeFn>(mem_range_);
    if (fn(&base, &size, reinterpret_cast<CUdeviceptr>(p)) == CUDA_SUCCESS) {
      size_t avail = base + size - reinterpret_cast<CUdeviceptr>(p);
      if (bytes > avail)
        return InvalidArgument(fmt::format("{}: {} = {}: the call needs {} bytes but its allocation has {} from there",
                                           what, arg, p, bytes, avail));
      seen.Add(static_cast<uintptr_t>(base), size);
    }
  }
  return Status::Ok();
}

Status Device::CheckHostPtr(const char* what, const char* arg, const void* p) const {
  if (p == nullptr) return Status::Ok();
  cudaPointerAttributes a{};
  if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
    (void)cudaGetLastError();
    return Status::Ok();
  }
  if (a.type == cudaMemoryTypeDevice || a.type == cudaMemoryTypeManaged)
    return InvalidArgument(
        fmt::format("{}: {} = {} is device memory of cuda:{}, but the stream is NULL, which means host "
                    "memory: pass the cudaStream_t to run on",
                    what, arg, p, a.device));
  return Status::Ok();
}

Status Device::EnqueueWaitFlag(cudaStream_t stream, uint32_t value) {
  if (wait_value_ != nullptr && !wait_value_failed_) {
    auto fn = reinterpret_cast<WaitValueFn>(wait_value_);
    CUresult r = fn(reinterpret_cast<CUstream>(stream), reinterpret_cast<CUdeviceptr>(flag_dev_), value,
                    CU_STREAM_WAIT_VALUE_GEQ);
    if (r == CUDA_SUCCESS) return Status::Ok();
    TSR_LOG_WARN("cuStreamWaitValue32 failed ({}): falling back to a spin-wait kernel", static_cast<int>(r));
    wait_value_failed_ = true;
    wait_mode_ = "spin-kernel";
  }
  return Check(kernels::SpinWait(flag_dev_, value, stream), "spin-wait kernel launch");
}

Status Device::EnqueueWriteFlag(cudaStream_t stream, uint32_t* flag_dev, uint32_t value) {
  if (write_value_ != nullptr) {
    auto fn = reinterpret_cast<WaitValueFn>(write_value_);  // same signature as the wait
    // Default flags: the write is preceded by a memory fence, so earlier copies are visible first.
    CUresult r = fn(reinterpret_cast<CUstream>(stream), reinterpret_cast<CUdeviceptr>(flag_dev), value, 0);
    if (r == CUDA_SUCCESS) return Status::Ok();
    TSR_LOG_WARN("cuStreamWriteValue32 failed ({}): falling back to a flag-write kernel", static_cast<int>(r));
    write_value_ = nullptr;
  }
  return Check(kernels::WriteFlag(flag_dev, value, stream), "flag-write kernel launch");
}

MappedFlags::~MappedFlags() {
  if (host_ != nullptr) (void)cudaFreeHost(host_);
}

Status MappedFlags::Allocate(size_t n) {
  void* p = nullptr;
  TSR_RETURN_IF_ERROR(Check(cudaHostAlloc(&p, n * sizeof(uint32_t), cudaHostAllocMapped), "cudaHostAlloc (flags)"));
  host_ = static_cast<uint32_t*>(p);
  for (size_t i = 0; i < n; ++i) host_[i] = 0;
  void* d = nullptr;
  TSR_RETURN_IF_ERROR(Check(cudaHostGetDevicePointer(&d, p, 0), "cudaHostGetDevicePointer (flags)"));
  dev_ = static_cast<uint32_t*>(d);
  return Status::Ok();
}

void Device::SetFlag(uint32_t value) {
  std::atomic_thread_fence(std::memory_order_seq_cst);
  __atomic_store_n(flag_host_, value, __ATOMIC_RELEASE);
}

Status Device::WaitEvent(cudaEvent_t ev, std::chrono::milliseconds timeout, const char* what) const {
  auto t0 = std::chrono::steady_clock::now();
  for (int spin = 0;; ++spin) {
    cudaError_t e = cudaEventQuery(ev);
    if (e == cudaSuccess) return Status::Ok();
    if (e != cudaErrorNotReady) return Check(e, what);
    if (spin < 200) {
      std::this_thread::yield();
      continue;
    }
    if (std::chrono::steady_clock::now() - t0 > timeout)
      return Timeout(fmt::format("{}: the GPU (cuda:{}) did not get there within TESSERA_TIMEOUT ({} ms)", what, index_,
                                 timeout.count()));
    std::this_thread::sleep_for(std::chrono::microseconds(20));
  }
}

PinnedBuffer::~PinnedBuffer() {
  if (p_ != nullptr) (void)cudaFreeHost(p_);
  for (auto* r : retired_) (void)cudaFreeHost(r);
}

Result<std::byte*> PinnedBuffer::Get(size_t bytes) {
  if (bytes <= size_ && p_ != nullptr) return p_;
  if (p_ != nullptr) retired_.push_back(p_);
  p_ = nullptr;
  size_ = 0;
  void* p = nullptr;
  size_t want = std::max<size_t>(bytes, 1 << 20);
  TSR_RETURN_IF_ERROR(Check(cudaHostAlloc(&p, want, cudaHostAllocDefault),
                            fmt::format("cudaHostAlloc({} bytes of staging)", want).c_str()));
  p_ = static_cast<std::byte*>(p);
  size_ = want;
  return p_;
}

}  // namespace tessera::comm::cuda
