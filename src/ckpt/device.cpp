// ckpt/device: host/device copies for snapshots and restores through the device-runtime table; see device.hpp.
#include "ckpt/device.hpp"

#include <fmt/format.h>

#include <cstring>

#include "comm/runtime/runtime.hpp"

namespace tessera::ckpt {
namespace {

Status DeviceCopy(const comm::DeviceMemoryOwnerInfo& owner, void* dst, const void* src, size_t n, comm::CopyKind kind,
                  bool bind_thread) {
  comm::DeviceRuntime& rt = *owner.rt;
  const auto what = [&] {
    return fmt::format("copying {} bytes {} {} device memory ({} {})", n,
                       kind == comm::CopyKind::kDeviceToHost ? "out of" : "into", rt.name(), rt.name(),
                       owner.info.device);
  };
  if (bind_thread && owner.info.device >= 0) {
    Status s = rt.SetDevice(owner.info.device);
    if (!s.ok()) return s.WithContext(what());
  }
  Status s = rt.Memcpy(dst, n, src, n, kind);
  return s.ok() ? s : s.WithContext(what());
}

}  // namespace

Status CopyToHost(void* dst, const void* src, size_t n, bool bind_thread) {
  if (n == 0) return Status::Ok();
  const comm::DeviceMemoryOwnerInfo owner = comm::DeviceMemoryOwner(src);
  if (owner.rt != nullptr) return DeviceCopy(owner, dst, src, n, comm::CopyKind::kDeviceToHost, bind_thread);
  std::memcpy(dst, src, n);
  return Status::Ok();
}

Status CopyFromHost(void* dst, const void* src, size_t n, bool bind_thread) {
  if (n == 0) return Status::Ok();
  const comm::DeviceMemoryOwnerInfo owner = comm::DeviceMemoryOwner(dst);
  if (owner.rt != nullptr) return DeviceCopy(owner, dst, src, n, comm::CopyKind::kHostToDevice, bind_thread);
  std::memcpy(dst, src, n);
  return Status::Ok();
}

}  // namespace tessera::ckpt
