// python/csrc/device.hpp — the device half of the tessera backend: this rank's
// accelerator, the backend's own communication stream on it, and how a call on
// device tensors is queued there and completed (work.hpp's contract):
//   * the communication stream first waits for the caller's current stream (an
//   event), so the collective sees
//     every write the caller queued before it;
//   * the tensors are recorded on the communication stream with the caching
//   allocator, so their memory
//     is not reused before the collective has finished with it;
//   * the call runs with the communication stream current (temporaries and
//   copies it makes run there), and gets
//     that stream's native handle as its tsrStream_t;
//   * an end event recorded after it decides the Work: STREAM WAIT or HOST WAIT
//   (the Completer).
#pragma once

#include <ATen/ATen.h>
#include <tessera/tessera.h>

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <torch/csrc/distributed/c10d/Work.hpp>
#include <vector>

#include "work.hpp"

#ifdef TESSERA_TORCH_CUDA
#include <c10/cuda/CUDAStream.h>

#include "completer.hpp"
#endif

namespace tessera_torch {

class DeviceQueue {
public:
  // `device`: Tessera's name of this rank's device ("cuda:N"); `hybrid`: the
  // group has ranks in several islands (HOST WAIT); `timeout_ms`: the group's
  // timeout; `rank`: this rank in the group (Works and trace file names).
  DeviceQueue(const std::string &device, bool hybrid, int rank,
              int64_t timeout_ms, std::shared_ptr<CommRef> ref);
  ~DeviceQueue();

  // Checks that `dev` is this rank's device (an error naming both, from
  // `title`).
  void CheckDevice(const at::Device &dev, const char *title) const;
  // Queues `body(stream)` on the communication stream after the caller's
  // current stream; the Work of the call.
  c10::intrusive_ptr<c10d::Work>
  Run(c10d::OpType type, const char *title,
      const std::vector<at::Tensor> &inputs,
      const std::vector<at::Tensor> &outputs,
      const std::function<void(tsrStream_t)> &body);
  // A Work that completes when everything queued so far on the communication
  // stream has.
  c10::intrusive_ptr<c10d::Work> Marker(c10d::OpType type, const char *title);
  // Stops the completion thread (shutdown).
  void Stop();

private:
#ifdef TESSERA_TORCH_CUDA
  c10::intrusive_ptr<c10d::Work>
  Finish(c10d::OpType type, const char *title, std::vector<at::Tensor> outputs,
         std::shared_ptr<at::cuda::CUDAEvent> end);
  c10::DeviceIndex index_ = 0;
  // Made in the constructor of a device rank only: a default of
  // getDefaultCUDAStream() here initialised CUDA in every rank, and so failed
  // on a host rank of a machine without a GPU ("no CUDA-capable device").
  std::optional<c10::cuda::CUDAStream> stream_;
  std::unique_ptr<Completer> completer_;
#endif
  std::string device_;
  bool hybrid_;
  int rank_;
  std::shared_ptr<CommRef> ref_;
};

} // namespace tessera_torch
