// comm/device/ring_ops: the device bridge of a GPU rank; see ring_ops.hpp.
#include "comm/device/ring_ops.hpp"

#include <fmt/format.h>

#include <thread>

#include "comm/kernels/kernels.hpp"

namespace tessera::comm {

using cuda::Check;

Result<std::unique_ptr<CudaRingOps>> CudaRingOps::Create(cudaStream_t send, cudaStream_t fold,
                                                         const std::vector<Rings>& links,
                                                         std::chrono::milliseconds timeout, size_t piece) {
  TSR_RETURN_IF_ERROR(Check(kernels::Preload(), "loading the fold kernels"));
  std::unique_ptr<CudaRingOps> ops(new CudaRingOps());
  ops->stream_[kSendQueue] = send;
  ops->stream_[kFoldQueue] = fold;
  ops->timeout_ = timeout;
  ops->piece_ = piece;
  for (auto& pool : ops->events_) {
    pool.resize(kEvents);
    for (auto& e : pool)
      TSR_RETURN_IF_ERROR(Check(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "cudaEventCreate"));
  }
  auto reg = [&](std::byte* p, size_t bytes) -> Status {
    TSR_RETURN_IF_ERROR(Check(cudaHostRegister(p, bytes, cudaHostRegisterDefault),
                              fmt::format("cudaHostRegister of a bridge ring ({} bytes)", bytes).c_str()));
    ops->registered_.push_back(p);
    return Status::Ok();
  };
  for (const Rings& l : links) {
    TSR_RETURN_IF_ERROR(reg(l.in, l.in_bytes));
    TSR_RETURN_IF_ERROR(reg(l.out, l.out_bytes));
    void* m = nullptr;
    TSR_RETURN_IF_ERROR(
        Check(cudaMalloc(&m, l.in_bytes), fmt::format("cudaMalloc of a ring's mirror ({} bytes)", l.in_bytes).c_str()));
    ops->mirrors_.push_back({l.in, l.in_bytes, static_cast<std::byte*>(m)});
  }
  return ops;
}

CudaRingOps::~CudaRingOps() {
  for (cudaStream_t s : stream_)
    if (s != nullptr) (void)cudaStreamSynchronize(s);
  for (void* p : registered_) (void)cudaHostUnregister(p);
  for (auto& m : mirrors_) (void)cudaFree(m.mirror);
  if (scratch_ != nullptr) (void)cudaFree(scratch_);
  for (void* p : retired_) (void)cudaFree(p);
  for (auto& pool : events_)
    for (auto e : pool)
      if (e != nullptr) (void)cudaEventDestroy(e);
}

Status CudaRingOps::ToHost(void* host_dst, const void* dev_src, size_t bytes) {
  return Check(cudaMemcpyAsync(host_dst, dev_src, bytes, cudaMemcpyDeviceToHost, stream_[kSendQueue]),
               "cudaMemcpyAsync (device to a peer's ring)");
}

Status CudaRingOps::FromHost(void* dev_dst, const void* host_src, size_t bytes) {
  return Check(cudaMemcpyAsync(dev_dst, host_src, bytes, cudaMemcpyHostToDevice, stream_[kFoldQueue]),
               "cudaMemcpyAsync (this rank's ring to the device)");
}

Result<void*> CudaRingOps::Mirror(const void* inbox_byte, size_t bytes) {
  auto* b = static_cast<const std::byte*>(inbox_byte);
  for (const auto& m : mirrors_)
    if (b >= m.ring && b + bytes <= m.ring + m.bytes) return static_cast<void*>(m.mirror + (b - m.ring));
  return InternalError("device bridge: received bytes outside the registered rings");
}

Status CudaRingOps::Fold(void* acc, const void* src, size_t n, DType dtype, DType src_type, RedOp op, bool first) {
  return Check(kernels::Fold(acc, src, n, dtype, src_type, op, first, stream_[kFoldQueue]), "the fold kernel");
}

Status CudaRingOps::Finalize(void* out, const void* acc, size_t n, DType dtype, RedOp op, int divisor) {
  return Check(kernels::Finalize(out, acc, n, dtype, op, divisor, stream_[kFoldQueue]), "the finalize kernel");
}

Status CudaRingOps::Copy(void* dev_dst, const void* dev_src, size_t bytes) {
  return Check(cudaMemcpyAsync(dev_dst, dev_src, bytes, cudaMemcpyDeviceToDevice, stream_[kFoldQueue]),
               "cudaMemcpyAsync (device to device: this rank's own contribution into its output)");
}

Result<DeviceOps::Ticket> CudaRingOps::Mark(Queue q) {
  if (issued_[q] - done_[q] == kEvents) {  // every event in use: wait for the oldest
    auto t0 = std::chrono::steady_clock::now();
    for (;;) {
      TSR_ASSIGN_OR_RETURN(bool d, Done(q, done_[q] + 1));
      if (d) break;
      if (std::chrono::steady_clock::now() - t0 > timeout_)
        return Timeout(
            fmt::format("device bridge: a copy did not finish within TESSERA_TIMEOUT ({} ms)", timeout_.count()));
      std::this_thread::yield();
    }
  }
  TSR_RETURN_IF_ERROR(Check(cudaEventRecord(events_[q][issued_[q] % kEvents], stream_[q]), "cudaEventRecord"));
  return ++issued_[q];
}

Result<bool> CudaRingOps::Done(Queue q, Ticket t) {
  while (done_[q] < t) {
    cudaError_t e = cudaEventQuery(events_[q][done_[q] % kEvents]);
    if (e == cudaErrorNotReady) return false;
    TSR_RETURN_IF_ERROR(Check(e, q == kSendQueue ? "the device bridge's copies to the rings"
                                                 : "the device bridge's copies from the ring and folds"));
    ++done_[q];
  }
  return true;
}

Status CudaRingOps::SendAfterFolds() {
  TSR_ASSIGN_OR_RETURN(Ticket t, Mark(kFoldQueue));
  // The wait takes the event as recorded now; the pool may re-record it later without affecting it.
  return Check(cudaStreamWaitEvent(stream_[kSendQueue], events_[kFoldQueue][(t - 1) % kEvents], 0),
               "cudaStreamWaitEvent (a result's copy after its folds)");
}

Result<void*> CudaRingOps::Scratch(size_t bytes) {
  if (bytes > use_bytes_)
    return InternalError(
        fmt::format("device bridge: {} bytes of accumulator needed, {} reserved at submission", bytes, use_bytes_));
  return use_;
}

Result<void*> CudaRingOps::Grow(size_t bytes) {
  if (bytes <= scratch_bytes_) return scratch_;
  void* p = nullptr;
  TSR_RETURN_IF_ERROR(
      Check(cudaMalloc(&p, bytes), fmt::format("cudaMalloc of {} bytes of accumulator", bytes).c_str()));
  if (scratch_ != nullptr) retired_.push_back(scratch_);  // a queued job may still use it
  scratch_ = p;
  scratch_bytes_ = bytes;
  return scratch_;
}

}  // namespace tessera::comm
