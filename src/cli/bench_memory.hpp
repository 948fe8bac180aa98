// cli/bench_memory: where `tessera bench` keeps one rank's buffers. A rank of a device island
// (TESSERA_DEVICE=cuda:N, npu:N, musa:N) uses device memory of its device and a stream of its own, as nccl-tests
// does, through the family's device-runtime row (comm/runtime). Host
// ranks, and device ranks given --host-memory, use host memory and stream NULL. The benchmark fills and reads
// its buffers only through Upload/Download, so the same code drives all three.
//
// Device memory: the stream is made on device N (SetDevice(N) first, on the calling thread) and is
// non-blocking, so it is ordered with nothing but itself; Upload, Download and Zero are queued on it and
// wait for it, so they are ordered after every collective queued there before (a hybrid collective's
// stream waits for the bridge) and before every one queued after.
#pragma once

#include <cstddef>
#include <memory>
#include <string>

#include "tessera/status.hpp"
#include "tessera/tessera.h"

namespace tessera::comm {
class DeviceRuntime;
}

namespace tessera::cli {

class BenchMemory {
 public:
  // `device` is the rank's TESSERA_DEVICE ("host", "cuda:N", "npu:N"). Host memory unless it names a device
  // and `host_memory` is false. A runtime that cannot be loaded is Unsupported, naming its file.
  static Result<std::unique_ptr<BenchMemory>> Open(const std::string& device, bool host_memory);
  ~BenchMemory();
  BenchMemory(const BenchMemory&) = delete;
  BenchMemory& operator=(const BenchMemory&) = delete;

  bool on_device() const { return gpu_ >= 0; }
  const char* kind() const { return on_device() ? "device" : "host"; }  // for the output
  tsrStream_t stream() const { return stream_; }                        // NULL on host memory

  // Frees with the memory it came from.
  struct Free {
    int gpu = -1;                             // -1: host memory
    std::shared_ptr<comm::DeviceRuntime> rt;  // set: memory of that runtime row (kept loaded while it lives)
    void operator()(std::byte* p) const;
  };
  using Buffer = std::unique_ptr<std::byte, Free>;

  // At least `bytes` (rounded up to 4 KiB, never null), zeroed, resident before any timing.
  Result<Buffer> Allocate(size_t bytes);
  // Copies between host memory and a buffer of this memory; both wait until the copy is done.
  Status Upload(std::byte* dst, const void* src, size_t bytes);
  Status Download(void* dst, const std::byte* src, size_t bytes);
  // Waits for everything queued on the stream (nothing to wait for on host memory).
  Status Synchronize();

 private:
  Status Copy(void* dst, const void* src, size_t bytes, bool to_device);  // Upload and Download
  BenchMemory() = default;
  int gpu_ = -1;
  tsrStream_t stream_ = nullptr;
  std::shared_ptr<comm::DeviceRuntime> rt_;  // device memory: the family's runtime row
  void* pinned_ = nullptr;                   // staging of Upload / Download (runtime pinned memory)
  size_t pinned_bytes_ = 0;
};

}  // namespace tessera::cli
