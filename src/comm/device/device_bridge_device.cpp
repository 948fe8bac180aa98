// comm/device/device_bridge_device: the opened device (OpenDevice), pointer classification and the mapped resources of
// a device-bridge rank, on its runtime row; see device_bridge_device.hpp.
#include "comm/device/device_bridge_device.hpp"

#include <fmt/format.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "common/log.hpp"

namespace tessera::comm::device_bridge {

Result<std::unique_ptr<Device>> Device::Open(const DeviceName& name) {
  std::unique_ptr<Device> d(new Device());
  d->name_ = name;
  d->spec_ = name.ToString();
  TSR_ASSIGN_OR_RETURN(d->rt_, OpenDevice(name));
  TSR_ASSIGN_OR_RETURN(d->label_, d->rt_->DeviceName(name.index));
  TSR_ASSIGN_OR_RETURN(d->flag_, d->rt_->HostAllocMapped(64));
  *static_cast<uint32_t*>(d->flag_.host) = 0;
  TSR_LOG_DEBUG("{}: {} on the {} runtime ({})", d->spec_, d->label_, d->rt_->name(), d->rt_->path());
  return d;
}

Device::~Device() {
  if (flag_.host != nullptr) (void)rt_->FreeHost(flag_.host);
}

Status Device::MakeCurrent() const { return rt_->SetDevice(name_.index); }

Status Device::CheckDevicePtr(const char* what, const char* arg, const void* p, size_t bytes, AllocCache& seen) const {
  if (bytes == 0) return Status::Ok();
  if (p == nullptr) return InvalidArgument(fmt::format("{}: {} is NULL", what, arg));
  if (seen.Contains(p, bytes)) return Status::Ok();
  auto info = rt_->GetPointerInfo(p);
  if (!info.ok())
    return InvalidArgument(fmt::format("{}: {} = {} is not memory the {} runtime knows ({})", what, arg, p, rt_->name(),
                                       info.status().message()));
  if (info->type == MemoryType::kUnregistered || info->type == MemoryType::kPinnedHost)
    return InvalidArgument(fmt::format(
        "{}: {} = {} is not device memory ({}), but a stream was passed, so the buffers "
        "must be device memory of {} (pass a NULL stream for host memory)",
        what, arg, p,
        info->type == MemoryType::kPinnedHost ? "pinned host memory" : "host memory or no allocation at all", spec_));
  if (info->type == MemoryType::kDevice && info->device != name_.index)
    return InvalidArgument(fmt::format("{}: {} = {} is memory of {}:{}, but this rank drives {}", what, arg, p,
                                       name_.family->prefix, info->device, spec_));
  if (info->type == MemoryType::kDevice && info->extent > 0) {
    const size_t avail = info->base + info->extent - reinterpret_cast<uintptr_t>(p);
    if (bytes > avail)
      return InvalidArgument(fmt::format("{}: {} = {}: the call needs {} bytes but its allocation has {} from there",
                                         what, arg, p, bytes, avail));
    seen.Add(info->base, info->extent);
  }
  return Status::Ok();
}

Status Device::CheckHostPtr(const char* what, const char* arg, const void* p) const {
  if (p == nullptr) return Status::Ok();
  auto info = rt_->GetPointerInfo(p);
  if (!info.ok()) return Status::Ok();  // not the runtime's: host memory
  if (info->type == MemoryType::kDevice || info->type == MemoryType::kManaged)
    return InvalidArgument(
        fmt::format("{}: {} = {} is device memory of {}:{}, but the stream is NULL, which means host "
                    "memory: pass the stream to run on",
                    what, arg, p, name_.family->prefix, info->device));
  return Status::Ok();
}

Status Device::EnqueueWaitFlag(Stream stream, uint32_t value) {
  auto* flag_dev = static_cast<uint32_t*>(flag_.dev);
  if (!wait_value_failed_) {
    Status s = rt_->StreamWaitValue32(stream, flag_dev, value);
    if (s.ok()) return s;
    TSR_LOG_WARN("{}: {}: falling back to a spin-wait kernel", spec_, s.message());
    wait_value_failed_ = true;
    wait_mode_ = "spin-kernel";
  }
  return rt_->SpinWait(flag_dev, value, stream);
}

Status Device::EnqueueWriteFlag(Stream stream, uint32_t* flag_dev, uint32_t value) {
  if (!write_value_failed_) {
    Status s = rt_->StreamWriteValue32(stream, flag_dev, value);
    if (s.ok()) return s;
    TSR_LOG_WARN("{}: {}: falling back to a flag-write kernel", spec_, s.message());
    write_value_failed_ = true;
  }
  return rt_->WriteFlag(flag_dev, value, stream);
}

void Device::SetFlag(uint32_t value) {
  // Sequentially consistent (a full barrier on x86): every earlier write is visible before the flag (a fence before
  // the store, as it was, is one TSan cannot model).
  __atomic_store_n(static_cast<uint32_t*>(flag_.host), value, __ATOMIC_SEQ_CST);
}

Status Device::WaitEvent(Event ev, std::chrono::milliseconds timeout, const char* what) const {
  auto t0 = std::chrono::steady_clock::now();
  for (int spin = 0;; ++spin) {
    auto done = rt_->EventQuery(ev);
    if (!done.ok()) return done.status().WithContext(what);
    if (*done) return Status::Ok();
    if (spin < 200) {
      std::this_thread::yield();
      continue;
    }
    if (std::chrono::steady_clock::now() - t0 > timeout)
      return Timeout(fmt::format("{}: the device ({}) did not get there within TESSERA_TIMEOUT ({} ms)", what, spec_,
                                 timeout.count()));
    std::this_thread::sleep_for(std::chrono::microseconds(20));
  }
}

MappedFlags::~MappedFlags() {
  if (host_ != nullptr) (void)rt_->FreeHost(host_);
}

Status MappedFlags::Allocate(DeviceRuntime& rt, size_t n) {
  TSR_ASSIGN_OR_RETURN(MappedHost m, rt.HostAllocMapped(n * sizeof(uint32_t)));
  rt_ = &rt;
  host_ = static_cast<uint32_t*>(m.host);
  dev_ = static_cast<uint32_t*>(m.dev);
  for (size_t i = 0; i < n; ++i) host_[i] = 0;
  return Status::Ok();
}

PinnedBuffer::~PinnedBuffer() {
  if (rt_ == nullptr) return;
  if (p_ != nullptr) (void)rt_->FreeHost(p_);
  for (auto* r : retired_) (void)rt_->FreeHost(r);
}

Result<std::byte*> PinnedBuffer::Get(DeviceRuntime& rt, size_t bytes) {
  if (bytes <= size_ && p_ != nullptr) return p_;
  rt_ = &rt;
  if (p_ != nullptr) retired_.push_back(p_);
  p_ = nullptr;
  size_ = 0;
  const size_t want = std::max<size_t>(bytes, 1 << 20);
  auto p = rt.MallocHost(want);
  if (!p.ok()) return p.status().WithContext(fmt::format("{} bytes of pinned staging", want));
  p_ = static_cast<std::byte*>(*p);
  size_ = want;
  return p_;
}

}  // namespace tessera::comm::device_bridge
