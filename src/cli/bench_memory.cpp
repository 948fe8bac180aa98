// cli/bench_memory: host or device buffers of one `tessera bench` rank; see bench_memory.hpp.
#include "cli/bench_memory.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "comm/runtime/runtime.hpp"
#include "common/env.hpp"
#include "common/vendor.hpp"

namespace tessera::cli {
namespace {

size_t Rounded(size_t bytes) { return std::max<size_t>(4096, (bytes + 4095) / 4096 * 4096); }

}  // namespace

void BenchMemory::Free::operator()(std::byte* p) const {
  if (p == nullptr) return;
  if (rt != nullptr) {
    (void)rt->SetDevice(gpu);
    (void)rt->Free(p);  // the benchmark has synchronized its stream before a buffer goes
    return;
  }
  std::free(p);
}

Result<std::unique_ptr<BenchMemory>> BenchMemory::Open(const std::string& device, bool host_memory) {
  std::unique_ptr<BenchMemory> m(new BenchMemory());
  TSR_ASSIGN_OR_RETURN(DeviceName name, ParseDeviceName(device, "TESSERA_DEVICE"));
  if (host_memory || name.host()) return m;
  // The family's runtime row; the communicator has already opened it, checked the index and made the device
  // current on this thread: say so again, explicitly, before anything is made on it.
  TSR_ASSIGN_OR_RETURN(m->rt_, comm::LoadRuntime(name.family->runtime));
  TSR_RETURN_IF_ERROR(m->rt_->SetDevice(name.index));
  auto s = m->rt_->StreamCreate();
  if (!s.ok()) return s.status().WithContext(fmt::format("{}: the benchmark's stream", device));
  m->gpu_ = name.index;
  m->stream_ = *s;
  return m;
}

BenchMemory::~BenchMemory() {
  if (rt_ == nullptr) return;
  (void)rt_->SetDevice(gpu_);
  (void)rt_->StreamSynchronize(stream_);
  (void)rt_->StreamDestroy(stream_);
  if (pinned_ != nullptr) (void)rt_->FreeHost(pinned_);
}

Result<BenchMemory::Buffer> BenchMemory::Allocate(size_t bytes) {
  const size_t n = Rounded(bytes);
  if (!on_device()) {
    auto* p = static_cast<std::byte*>(std::aligned_alloc(4096, n));
    if (p == nullptr) return SystemError(fmt::format("cannot allocate {} bytes of host memory", n));
    std::memset(p, 0, n);  // fault the pages in before timing
    return Buffer(p, Free{-1});
  }
  TSR_RETURN_IF_ERROR(rt_->SetDevice(gpu_));
  TSR_ASSIGN_OR_RETURN(void* p, rt_->Malloc(n));
  Buffer b(static_cast<std::byte*>(p), Free{gpu_, rt_});
  TSR_RETURN_IF_ERROR(rt_->MemsetAsync(p, n, 0, n, stream_));
  TSR_RETURN_IF_ERROR(Synchronize());
  return b;
}

Status BenchMemory::Copy(void* dst, const void* src, size_t bytes, bool to_device) {
  if (bytes == 0) return Status::Ok();
  if (!on_device()) {
    std::memcpy(dst, src, bytes);
    return Status::Ok();
  }
  // Through pinned memory of the runtime, on the benchmark's stream, then waited for: every row copies
  // asynchronously from host memory it allocated (ACL only from such memory), and a synchronous copy from pageable
  // memory may return before its DMA is done, unordered with the benchmark's non-blocking stream.
  if (bytes > pinned_bytes_) {
    TSR_RETURN_IF_ERROR(Synchronize());
    if (pinned_ != nullptr) (void)rt_->FreeHost(pinned_);
    pinned_ = nullptr;
    pinned_bytes_ = 0;
    TSR_ASSIGN_OR_RETURN(pinned_, rt_->MallocHost(bytes));
    pinned_bytes_ = bytes;
  }
  TSR_RETURN_IF_ERROR(rt_->SetDevice(gpu_));
  if (to_device) {
    TSR_RETURN_IF_ERROR(Synchronize());  // the staging may still feed an earlier upload
    std::memcpy(pinned_, src, bytes);
    TSR_RETURN_IF_ERROR(
        rt_->MemcpyAsync(dst, bytes, pinned_, bytes, comm::CopyKind::kHostToDevice, stream_).WithContext("input"));
    return Synchronize();
  }
  TSR_RETURN_IF_ERROR(
      rt_->MemcpyAsync(pinned_, bytes, src, bytes, comm::CopyKind::kDeviceToHost, stream_).WithContext("result"));
  TSR_RETURN_IF_ERROR(Synchronize());
  std::memcpy(dst, pinned_, bytes);
  return Status::Ok();
}

Status BenchMemory::Upload(std::byte* dst, const void* src, size_t bytes) { return Copy(dst, src, bytes, true); }

Status BenchMemory::Download(void* dst, const std::byte* src, size_t bytes) { return Copy(dst, src, bytes, false); }

Status BenchMemory::Synchronize() {
  if (!on_device()) return Status::Ok();
  TSR_RETURN_IF_ERROR(rt_->SetDevice(gpu_));
  return rt_->StreamSynchronize(stream_);
}

}  // namespace tessera::cli
