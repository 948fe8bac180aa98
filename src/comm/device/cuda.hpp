// comm/device/cuda: the CUDA device backend of one rank — picks the GPU named by TESSERA_DEVICE=cuda:N,
// classifies pointers (device memory vs host memory, with the allocation's extent when the driver tells
// it), and owns the per-communicator CUDA resources: streams, events, pinned staging buffers and the
// host-mapped completion flag. All of them are created ONCE, when the communicator is made (staging for
// whole-buffer copies grows on demand and is kept); no collective creates a stream, event or buffer.
#pragma once

#include <cuda_runtime_api.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "comm/device/device.hpp"
#include "tessera/status.hpp"

namespace tessera::comm::cuda {

// "CUDA error 'an illegal memory access was encountered' (700) in cudaMemcpyAsync"
Status Check(cudaError_t e, const char* what);

// True when `p` is CUDA device (or managed) memory. Asks CUDA only when this process already uses it
// (libcuda is loaded), so host-only ranks never create a CUDA context.
bool IsDeviceMemory(const void* p);

class Device {
 public:
  // Parses "cuda:N", checks N against the visible GPUs and makes it current. Errors name the value.
  static Result<std::unique_ptr<Device>> Open(const std::string& spec);
  ~Device();

  int index() const { return index_; }
  const std::string& name() const { return name_; }
  // Makes this rank's GPU current on the calling thread (the worker thread calls it once).
  Status MakeCurrent() const;

  // `what` and `arg` name the call and the argument ("allreduce", "sendbuf"); messages are built only on
  // failure. Device memory of this rank's GPU (or managed memory), holding `bytes` from p when the driver
  // reports the allocation's extent. An allocation in `seen` passes at once; one validated here is added.
  Status CheckDevicePtr(const char* what, const char* arg, const void* p, size_t bytes, AllocCache& seen) const;
  // Host memory (pageable or pinned), not device memory.
  Status CheckHostPtr(const char* what, const char* arg, const void* p) const;

  // Makes `stream` wait until the host-mapped flag reaches `value` (never blocks the caller).
  Status EnqueueWaitFlag(cudaStream_t stream, uint32_t value);
  // Publishes `value` in the flag (host side, release order).
  void SetFlag(uint32_t value);
  // Queues on `stream` a write of `value` to `flag_dev` (a device pointer of host-mapped memory), ordered
  // after the stream's earlier work and its memory writes (cuStreamWriteValue32, or a one-thread kernel).
  Status EnqueueWriteFlag(cudaStream_t stream, uint32_t* flag_dev, uint32_t value);
  // "stream-wait-value" (driver stream memory operation) or "spin-kernel" (fallback).
  const char* wait_mode() const { return wait_mode_; }

  // Waits for `ev` without blocking forever: Timeout after `timeout`, or the CUDA error it ended with.
  Status WaitEvent(cudaEvent_t ev, std::chrono::milliseconds timeout, const char* what) const;

 private:
  Device() = default;
  int index_ = 0;
  std::string name_;
  uint32_t* flag_host_ = nullptr;  // cudaHostAllocMapped
  uint32_t* flag_dev_ = nullptr;
  void* wait_value_ = nullptr;   // cuStreamWaitValue32, when the driver offers it
  void* write_value_ = nullptr;  // cuStreamWriteValue32, when the driver offers it
  void* mem_range_ = nullptr;    // cuMemGetAddressRange
  const char* wait_mode_ = "spin-kernel";
  bool wait_value_failed_ = false;
};

// A page-locked host buffer that grows on demand and keeps its size. Growing never frees the smaller
// buffer (cudaFreeHost synchronizes the device, which would deadlock against a caller's stream that waits
// for the collective in progress): every buffer is freed with the communicator.
class PinnedBuffer {
 public:
  PinnedBuffer() = default;
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;
  ~PinnedBuffer();
  Result<std::byte*> Get(size_t bytes);
  std::byte* data() const { return p_; }
  size_t size() const { return size_; }

 private:
  std::byte* p_ = nullptr;
  size_t size_ = 0;
  std::vector<std::byte*> retired_;
};

// Host-mapped 32-bit flags the GPU writes from a stream and the host reads (cudaHostAllocMapped).
class MappedFlags {
 public:
  MappedFlags() = default;
  MappedFlags(const MappedFlags&) = delete;
  MappedFlags& operator=(const MappedFlags&) = delete;
  ~MappedFlags();
  Status Allocate(size_t n);  // all zero
  uint32_t* host(size_t i) const { return host_ + i; }
  uint32_t* dev(size_t i) const { return dev_ + i; }

 private:
  uint32_t* host_ = nullptr;
  uint32_t* dev_ = nullptr;
};

}  // namespace tessera::comm::cuda
