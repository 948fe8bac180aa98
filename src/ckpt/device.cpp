// ckpt/device: host/device copies for snapshots and restores through the device-runtime table; see device.hpp.
#include "ckpt/device.hpp"

#include <fmt/format.h>

#include <cstring>

#include "comm/runtime/runtime.hpp"

namespace tessera::ckpt {
namespace {

// Copies n bytes from src to dst, one of which is host memory; `device_side` is the other one, copied by its own
// runtime when it is device memory (`kind` names the direction then), else with memcpy.
Status Copy(void* dst, const void* src, size_t n, const void* device_side, comm::CopyKind kind, bool bind_thread) {
  if (n == 0) return Status::Ok();
  const comm::DeviceMemoryOwnerInfo owner = comm::DeviceMemoryOwner(device_side);
  if (owner.rt == nullptr) {
    std::memcpy(dst, src, n);
    return Status::Ok();
  }
  comm::DeviceRuntime& rt = *owner.rt;
  const auto what = [&] {
    return fmt::format("copying {} bytes {} {} device memory (device {})", n,
                       kind == comm::CopyKind::kDeviceToHost ? "out of" : "into", rt.name(), owner.info.device);
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
  return Copy(dst, src, n, src, comm::CopyKind::kDeviceToHost, bind_thread);
}

Status CopyFromHost(void* dst, const void* src, size_t n, bool bind_thread) {
  return Copy(dst, src, n, dst, comm::CopyKind::kHostToDevice, bind_thread);
}

}  // namespace tessera::ckpt
