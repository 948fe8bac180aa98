// python/csrc/device.hpp — the device half of the tessera backend: this rank's accelerator (any device type torch
// knows in this process: cuda, or a PrivateUse1 backend such as torch_npu's npu or torch_musa's musa), the
// backend's own communication stream on it, and how a call on device tensors is queued there and completed
// (work.hpp's contract). Written on torch's generic device API — c10::Stream, c10::Event, and
// c10::impl::VirtualGuardImpl for the device type, which reaches that type's registered DeviceGuardImpl:
//   * the communication stream first waits for the caller's current stream (an event), so the collective sees
//     every write the caller queued before it;
//   * the tensors are recorded on the communication stream with that type's caching allocator
//     (DeviceGuardImpl::recordDataPtrOnStream), so their memory is not reused before the collective is done;
//   * the call runs with the communication stream current (temporaries and copies it makes run there), and gets
//     that stream's native handle (DeviceGuardImpl::getStreamNativeHandle: a cudaStream_t, an aclrtStream, a
//     musaStream_t) as its tsrStream_t, which Tessera's runtime row for the device takes as the vendor runtime's
//     stream;
//   * an end event recorded after it decides the Work: STREAM WAIT or HOST WAIT (the Completer).
// The one CUDA-specific piece (with TESSERA_TORCH_CUDA only): a CUDA rank's communication and idle streams are
// streams of the backend's own (cudaStreamCreate), not of torch's pool, which the generic getNewStream hands out.
#pragma once

#include <ATen/ATen.h>
#include <c10/core/Stream.h>
#include <c10/core/impl/VirtualGuardImpl.h>
#include <tessera/tessera.h>

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <torch/csrc/distributed/c10d/Work.hpp>
#include <vector>

#include "completer.hpp"
#include "work.hpp"

namespace tessera_torch {

// The torch device of Tessera's device name "TYPE:N" (cuda:N, npu:N, musa:N), or an error naming the name and
// what is missing (a device type this process's torch does not know: torch_npu / torch_musa not imported).
c10::Device TorchDevice(const std::string& device);

class DeviceQueue {
 public:
  // `device`: Tessera's name of this rank's device ("cuda:N", "npu:N", ...); `hybrid`: the group has ranks in
  // several islands (HOST WAIT); `timeout_ms`: the group's timeout; `rank`: this rank in the group (trace names).
  DeviceQueue(const std::string& device, bool hybrid, int rank, int64_t timeout_ms, std::shared_ptr<CommRef> ref);
  ~DeviceQueue();

  // Checks that `dev` is this rank's device (an error naming both, from `title`).
  void CheckDevice(const at::Device& dev, const char* title) const;
  // Queues `body(stream)` on the communication stream after the caller's current stream; the Work of the call.
  c10::intrusive_ptr<c10d::Work> Run(c10d::OpType type, const char* title, const std::vector<at::Tensor>& inputs,
                                     const std::vector<at::Tensor>& outputs,
                                     const std::function<void(tsrStream_t)>& body);
  // A Work that completes when everything queued so far on the communication stream has.
  c10::intrusive_ptr<c10d::Work> Marker(c10d::OpType type, const char* title);
  // Stops the completion thread (shutdown).
  void Stop();

 private:
  c10::intrusive_ptr<c10d::Work> Finish(c10d::OpType type, const char* title, std::vector<at::Tensor> outputs,
                                        std::shared_ptr<c10::Event> end);
  std::string name_;  // Tessera's name of the device
  c10::Device device_;
  c10::impl::VirtualGuardImpl impl_;
  // Made in the constructor of a device rank only: a default stream made for every rank initialised CUDA in host
  // ranks too, and so failed on a machine without a GPU ("no CUDA-capable device").
  std::optional<c10::Stream> stream_;
  std::unique_ptr<Completer> completer_;
  bool hybrid_;
  int rank_;
  std::shared_ptr<CommRef> ref_;
};

}  // namespace tessera_torch
