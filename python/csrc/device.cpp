// python/csrc/device.cpp — the device half of the tessera backend (device.hpp).
#include "device.hpp"

#include <c10/core/DeviceGuard.h>
#include <c10/core/Event.h>
#include <c10/core/StreamGuard.h>

#ifdef TESSERA_TORCH_CUDA
#include <c10/cuda/CUDAStream.h>
#endif

#include <cstdlib>

#include "check.hpp"

namespace tessera_torch {

namespace {

// A stream of this rank's device that is the backend's alone. CUDA: one made with cudaStreamCreate, not one of
// torch's pool (getNewStream hands the pool's streams out round-robin, so a future's callback could run on the
// communication stream and chain onto later collectives). Other types: the type's getNewStream.
c10::Stream OwnStream(const c10::impl::VirtualGuardImpl& impl, const c10::Device& device, const std::string& name,
                      const char* what) {
#ifdef TESSERA_TORCH_CUDA
  if (device.is_cuda()) {
    cudaStream_t s = nullptr;
    TSR_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) == cudaSuccess, "tessera: cudaStreamCreate for ",
              what, " failed on ", name);
    return c10::cuda::getStreamFromExternal(s, device.index()).unwrap();
  }
#endif
  try {
    return impl.getNewStream(device);
  } catch (const std::exception& e) {
    TSR_CHECK(false, "tessera: device ", name, ": torch's ", c10::DeviceTypeName(device.type(), true),
              " backend cannot make a new stream (", what, "): ", e.what());
  }
}

}  // namespace

c10::Device TorchDevice(const std::string& device) {
  std::optional<c10::Device> dev;
  try {
    dev = c10::Device(device);
  } catch (const std::exception&) {
  }
  TSR_CHECK(dev.has_value() && dev->has_index() && !dev->is_cpu(), "tessera: device '", device,
            "' is not a device of this process's torch (cuda:N, or npu:N / musa:N with torch's PrivateUse1 backend "
            "renamed so: import torch_npu / torch_musa first; this process's PrivateUse1 backend is '",
            c10::get_privateuse1_backend(), "')");
  TSR_CHECK(c10::impl::hasDeviceGuardImpl(dev->type()), "tessera: device ", device,
            ": no DeviceGuardImpl is registered for its type (is its torch backend loaded?)");
  return *dev;
}

DeviceQueue::DeviceQueue(const std::string& device, bool hybrid, int rank, int64_t timeout_ms,
                         std::shared_ptr<CommRef> ref)
    : name_(device),
      device_(TorchDevice(device)),
      impl_(device_.type()),
      hybrid_(hybrid),
      rank_(rank),
      ref_(std::move(ref)) {
  c10::DeviceGuard guard(device_);
  stream_ = OwnStream(impl_, device_, name_, "the communication stream");
  // The bridge writes PREFIX.rankN, this PREFIX.completer.rankN; TESSERA_CUDA_TRACE is the variable's old name.
  const char* trace = std::getenv("TESSERA_DEVICE_TRACE");
  if (trace == nullptr || *trace == '\0') trace = std::getenv("TESSERA_CUDA_TRACE");
  completer_ = std::make_unique<Completer>(
      OwnStream(impl_, device_, name_, "the completion stream"), std::chrono::milliseconds(timeout_ms), ref_,
      trace != nullptr && *trace != '\0' ? std::string(trace) + ".completer.rank" + std::to_string(rank) : "");
}

DeviceQueue::~DeviceQueue() { Stop(); }

void DeviceQueue::Stop() {
  if (completer_) completer_->Stop();
}

void DeviceQueue::CheckDevice(const at::Device& dev, const char* title) const {
  TSR_CHECK(dev == device_, "tessera: ", title, " got a tensor on ", dev, " but this rank's device is ", name_,
            " (torch ", device_, ")");
}

c10::intrusive_ptr<c10d::Work> DeviceQueue::Run(c10d::OpType type, const char* title,
                                                const std::vector<at::Tensor>& inputs,
                                                const std::vector<at::Tensor>& outputs,
                                                const std::function<void(tsrStream_t)>& body) {
  c10::DeviceGuard guard(device_);
  c10::Event ready(device_.type());
  ready.record(impl_.getStream(device_));
  ready.block(*stream_);
  for (const auto* list : {&inputs, &outputs})
    for (const auto& t : *list) impl_.recordDataPtrOnStream(t.storage().data_ptr(), *stream_);
  {
    c10::StreamGuard on_comm(*stream_);  // temporaries and copies in `body` run on the comm stream
    body(static_cast<tsrStream_t>(impl_.getStreamNativeHandle(*stream_)));
  }
  auto end = std::make_shared<c10::Event>(device_.type());
  end->record(*stream_);
  return Finish(type, title, outputs, std::move(end));
}

c10::intrusive_ptr<c10d::Work> DeviceQueue::Marker(c10d::OpType type, const char* title) {
  c10::DeviceGuard guard(device_);
  auto end = std::make_shared<c10::Event>(device_.type());
  end->record(*stream_);
  return Finish(type, title, {}, std::move(end));
}

// The Work of a call queued on the communication stream up to `end` (work.hpp): HOST WAIT in a group of several
// islands, STREAM WAIT in a group of one (with the host-side wait, DDP on one GPU took about 3x NCCL's step:
// bench/results/log/2026-12-01-torch-backend-what-ran.md).
c10::intrusive_ptr<c10d::Work> DeviceQueue::Finish(c10d::OpType type, const char* title,
                                                   std::vector<at::Tensor> outputs, std::shared_ptr<c10::Event> end) {
  auto fut = c10::make_intrusive<c10::ivalue::Future>(c10::ListType::create(c10::TensorType::get()),
                                                      std::vector<c10::Device>{device_});
  if (hybrid_) {
    completer_->Add(end, fut, c10::IValue(outputs), title);
  } else {
    c10::StreamGuard on_comm(*stream_);  // the future's events are recorded on the comm stream
    fut->markCompleted(c10::IValue(outputs));
  }
  auto w = c10::make_intrusive<Work>(rank_, type, title, std::move(outputs), std::move(fut), ref_);
  w->end_ = std::move(end);
  w->device_ = device_;
  w->host_wait_ = hybrid_;
  return w;
}

}  // namespace tessera_torch
