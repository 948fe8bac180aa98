// python/csrc/device.cpp — the device half of the tessera backend (device.hpp).
#include "device.hpp"

#ifdef TESSERA_TORCH_CUDA
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAGuard.h>
#endif

#include <cstdlib>

#include "check.hpp"

namespace tessera_torch {

DeviceQueue::DeviceQueue(const std::string &device, bool hybrid, int rank,
                         int64_t timeout_ms, std::shared_ptr<CommRef> ref)
    : device_(device), hybrid_(hybrid), rank_(rank), ref_(std::move(ref)) {
#ifdef TESSERA_TORCH_CUDA
  TSR_CHECK(device_.rfind("cuda:", 0) == 0, "tessera: device ", device_,
            " is not cuda:N");
  index_ = static_cast<c10::DeviceIndex>(std::stoi(device_.substr(5)));
  c10::cuda::CUDAGuard guard(index_);
  // A stream of our own, not one of torch's pool (which hands its streams out
  // round-robin, so a future's callback could run on it and chain onto later
  // collectives).
  cudaStream_t comm_stream = nullptr;
  TSR_CHECK(cudaStreamCreateWithFlags(&comm_stream, cudaStreamNonBlocking) ==
                cudaSuccess,
            "tessera: cudaStreamCreate for the communication stream failed on ",
            device_);
  stream_ = c10::cuda::getStreamFromExternal(comm_stream, index_);
  // The bridge writes PREFIX.rankN, this PREFIX.completer.rankN;
  // TESSERA_CUDA_TRACE is the variable's old name.
  const char *trace = std::getenv("TESSERA_DEVICE_TRACE");
  if (trace == nullptr || *trace == '\0')
    trace = std::getenv("TESSERA_CUDA_TRACE");
  completer_ = std::make_unique<Completer>(
      index_, std::chrono::milliseconds(timeout_ms), ref_,
      trace != nullptr && *trace != '\0'
          ? std::string(trace) + ".completer.rank" + std::to_string(rank)
          : "");
#else
  (void)timeout_ms;
  TSR_CHECK(false, "tessera: device ", device_,
            " needs a CUDA build of torch and of tessera._C");
#endif
}

DeviceQueue::~DeviceQueue() { Stop(); }

void DeviceQueue::Stop() {
#ifdef TESSERA_TORCH_CUDA
  if (completer_)
    completer_->Stop();
#endif
}

void DeviceQueue::CheckDevice(const at::Device &dev, const char *title) const {
  TSR_CHECK(dev.is_cuda(), "tessera: ", title, " does not support tensors on ",
            dev, " (cpu and cuda only)");
#ifdef TESSERA_TORCH_CUDA
  TSR_CHECK(dev.index() == index_, "tessera: ", title, " got a tensor on ", dev,
            " but this rank's device is ", device_);
#endif
}

c10::intrusive_ptr<c10d::Work>
DeviceQueue::Run(c10d::OpType type, const char *title,
                 const std::vector<at::Tensor> &inputs,
                 const std::vector<at::Tensor> &outputs,
                 const std::function<void(tsrStream_t)> &body) {
#ifdef TESSERA_TORCH_CUDA
  c10::cuda::CUDAGuard guard(index_);
  at::cuda::CUDAEvent ready;
  ready.record(at::cuda::getCurrentCUDAStream(index_));
  ready.block(*stream_);
  for (const auto *list : {&inputs, &outputs})
    for (const auto &t : *list)
      c10::cuda::CUDACachingAllocator::recordStream(t.storage().data_ptr(),
                                                    *stream_);
  {
    c10::cuda::CUDAStreamGuard on_comm(
        *stream_); // temporaries and copies in `body` run on the comm stream
    body(static_cast<tsrStream_t>(stream_->stream()));
  }
  auto end = std::make_shared<at::cuda::CUDAEvent>();
  end->record(*stream_);
  return Finish(type, title, outputs, std::move(end));
#else
  (void)type, (void)inputs, (void)outputs, (void)body;
  TSR_CHECK(false, "tessera: ", title,
            " got a CUDA tensor, but tessera._C was built without CUDA");
#endif
}

c10::intrusive_ptr<c10d::Work> DeviceQueue::Marker(c10d::OpType type,
                                                   const char *title) {
#ifdef TESSERA_TORCH_CUDA
  c10::cuda::CUDAGuard guard(index_);
  auto end = std::make_shared<at::cuda::CUDAEvent>();
  end->record(*stream_);
  return Finish(type, title, {}, std::move(end));
#else
  (void)type;
  TSR_CHECK(false, "tessera: ", title,
            " on a device, but tessera._C was built without CUDA");
#endif
}

#ifdef TESSERA_TORCH_CUDA
// The Work of a call queued on the communication stream up to `end` (work.hpp):
// HOST WAIT in a group of several islands, STREAM WAIT in a group of one (with
// the host-side wait, DDP on one GPU took about 3x NCCL's step: docs/torch.md,
// Status, "DDP on one GPU took 3× NCCL's step").
c10::intrusive_ptr<c10d::Work>
DeviceQueue::Finish(c10d::OpType type, const char *title,
                    std::vector<at::Tensor> outputs,
                    std::shared_ptr<at::cuda::CUDAEvent> end) {
  auto fut = c10::make_intrusive<c10::ivalue::Future>(
      c10::ListType::create(c10::TensorType::get()),
      std::vector<c10::Device>{c10::Device(c10::kCUDA, index_)});
  if (hybrid_) {
    completer_->Add(end, fut, c10::IValue(outputs), title);
  } else {
    c10::cuda::CUDAStreamGuard on_comm(
        *stream_); // the future's events are recorded on the comm stream
    fut->markCompleted(c10::IValue(outputs));
  }
  auto w = c10::make_intrusive<Work>(rank_, type, title, std::move(outputs),
                                     std::move(fut), ref_);
  w->end_ = std::move(end);
  w->device_index_ = index_;
  w->host_wait_ = hybrid_;
  return w;
}
#endif

} // namespace tessera_torch
