// comm/device/device_bridge_device: the device of a rank that runs the device bridge (comm/device/device_bridge_rank),
// on its family's runtime row (comm/runtime: cuda today; any row whose flags give host registration, stream memory
// operations and Tessera's kernels) — opens the device named by TESSERA_DEVICE (cuda:N) through the runtime's
// OpenDevice, classifies pointers (device memory vs host memory, with the allocation's extent when the runtime
// tells it), and owns the rank's host-mapped completion flag. The per-communicator resources (streams, events,
// pinned staging, mapped flags) are created ONCE, when the communicator is made (staging for whole-buffer copies
// grows on demand and is kept); no collective creates a stream, event or buffer. No vendor header: every call goes
// through the DeviceRuntime.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "comm/device/device.hpp"
#include "comm/runtime/runtime.hpp"
#include "common/vendor.hpp"
#include "tessera/status.hpp"

namespace tessera::comm::device_bridge {

using Stream = DeviceRuntime::Stream;
using Event = DeviceRuntime::Event;

class Device {
 public:
  // Opens the device (OpenDevice: the family's runtime row, the index checked, the device made current), then its
  // name and the rank's mapped flag. Errors name the value, the runtime and its file.
  static Result<std::unique_ptr<Device>> Open(const DeviceName& name);
  ~Device();

  DeviceRuntime& rt() const { return *rt_; }
  const DeviceName& device() const { return name_; }
  const std::string& spec() const { return spec_; }  // "cuda:0"
  int index() const { return name_.index; }
  const std::string& name() const { return label_; }  // "NVIDIA H200"
  // Makes this rank's device current on the calling thread (the worker thread calls it once).
  Status MakeCurrent() const;

  // `what` and `arg` name the call and the argument ("allreduce", "sendbuf"); messages are built only on
  // failure. Device memory of this rank's device (or managed memory), holding `bytes` from p when the runtime
  // reports the allocation's extent. An allocation in `seen` passes at once; one validated here is added.
  Status CheckDevicePtr(const char* what, const char* arg, const void* p, size_t bytes, AllocCache& seen) const;
  // Host memory (pageable or pinned), not device memory.
  Status CheckHostPtr(const char* what, const char* arg, const void* p) const;

  // Makes `stream` wait until the host-mapped flag reaches `value` (never blocks the caller).
  Status EnqueueWaitFlag(Stream stream, uint32_t value);
  // Publishes `value` in the flag (host side, release order).
  void SetFlag(uint32_t value);
  // Queues on `stream` a write of `value` to `flag_dev` (a device pointer of host-mapped memory), ordered
  // after the stream's earlier work and its memory writes (the runtime's stream write-value, or a one-thread kernel).
  Status EnqueueWriteFlag(Stream stream, uint32_t* flag_dev, uint32_t value);
  // "stream-wait-value" (the runtime's stream memory operation) or "spin-kernel" (fallback).
  const char* wait_mode() const { return wait_mode_; }

  // Waits for `ev` without blocking forever: Timeout after `timeout`, or the runtime's error it ended with.
  Status WaitEvent(Event ev, std::chrono::milliseconds timeout, const char* what) const;

 private:
  Device() = default;
  std::shared_ptr<DeviceRuntime> rt_;
  DeviceName name_;
  std::string spec_, label_;
  MappedHost flag_;  // the completion flag
  const char* wait_mode_ = "stream-wait-value";
  bool wait_value_failed_ = false, write_value_failed_ = false;
};

// A page-locked host buffer that grows on demand and keeps its size. Growing never frees the smaller
// buffer (freeing pinned memory synchronizes the device, which would deadlock against a caller's stream that
// waits for the collective in progress): every buffer is freed with the communicator.
class PinnedBuffer {
 public:
  PinnedBuffer() = default;
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;
  ~PinnedBuffer();
  Result<std::byte*> Get(DeviceRuntime& rt, size_t bytes);
  std::byte* data() const { return p_; }
  size_t size() const { return size_; }

 private:
  DeviceRuntime* rt_ = nullptr;
  std::byte* p_ = nullptr;
  size_t size_ = 0;
  std::vector<std::byte*> retired_;
};

// Host-mapped 32-bit flags the device writes from a stream and the host reads.
class MappedFlags {
 public:
  MappedFlags() = default;
  MappedFlags(const MappedFlags&) = delete;
  MappedFlags& operator=(const MappedFlags&) = delete;
  ~MappedFlags();
  Status Allocate(DeviceRuntime& rt, size_t n);  // all zero
  uint32_t* host(size_t i) const { return host_ + i; }
  uint32_t* dev(size_t i) const { return dev_ + i; }

 private:
  DeviceRuntime* rt_ = nullptr;
  uint32_t* host_ = nullptr;
  uint32_t* dev_ = nullptr;
};

}  // namespace tessera::comm::device_bridge
