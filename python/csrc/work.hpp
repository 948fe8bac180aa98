// python/csrc/work.hpp — the Work of one call of the tessera backend, and the contract it keeps.
//
// Host calls (CPU tensors): Tessera gets a NULL stream and returns when the call is done, so the Work is complete
// when it is made.
//
// Device calls (tensors on this rank's accelerator) are queued on the backend's communication stream after the
// caller's current stream (device.hpp); `end_` is recorded on that stream after the call. Their Work completes in
// one of two ways, chosen per process group:
//   * STREAM WAIT (a group of one island: the island's own library runs on the communication stream, no Tessera
//     thread touches the device while a call runs): as ProcessGroupNCCL, the future is complete at once on the
//     communication stream's events, and wait() makes the caller's current stream wait for `end_` and returns, so
//     the host runs ahead;
//   * HOST WAIT (a group of several islands, where a worker thread of Tessera's queues device copies while a call
//     runs): the future is completed on the host by the Completer once `end_` has happened, and wait() blocks the
//     host until then, on any stream. A stream made to wait instead could later be waited for by CUDA's legacy
//     default stream (FSDP2 waits on its all-gather stream, then the default stream waits for that stream's
//     event), and a pageable copy there then holds up the bridge worker's device calls until the collective ends:
//     a deadlock (completer.hpp; bench/results/log/2026-12-01-torch-backend-what-ran.md).
// Every Work reaches the communicator only through CommRef: a Work may outlive its process group (DDP and futures
// keep them), and shutdown() empties the CommRef before destroying the communicator. Every call of the backend is
// counted in CommRef while it is inside the communicator: destroy_process_group() on another thread aborts those
// calls (they raise, saying the group was destroyed) and frees the communicator only once they have returned.
#pragma once

#include <ATen/ATen.h>
#include <c10/core/Event.h>
#include <tessera/tessera.h>

#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <torch/csrc/distributed/c10d/Work.hpp>
#include <utility>
#include <vector>

namespace tessera_torch {

// The communicator as Works see it (see the file comment).
struct CommRef {
  std::mutex mu;
  std::condition_variable drained;  // in_flight reached 0
  tsrComm_t comm = nullptr;
  int in_flight = 0;     // calls inside the communicator now (Backend::Run)
  bool closing = false;  // Destroy has begun: no new call enters
  // tsrSuccess, or the communicator's asynchronous error with its message (empty after shutdown).
  std::pair<tsrResult_t, std::string> Error();
  // A call enters before it touches comm and leaves when it is done with it; Enter is false once Destroy began.
  bool Enter();
  void Leave();
  bool Closing();
  // Aborts the calls in flight (tsrCommAbort: they return within about 50 ms), waits for them to leave, then
  // destroys the communicator (left allocated, and said so, if one has not left 60 s after the abort).
  void Destroy();
};

class Work : public c10d::Work {
 public:
  Work(int rank, c10d::OpType type, const char* title, std::vector<at::Tensor> outputs,
       c10::intrusive_ptr<c10::ivalue::Future> future, std::shared_ptr<CommRef> comm)
      : c10d::Work(rank, type, title),
        profiling_title_(title),
        outputs_(std::move(outputs)),
        future_(std::move(future)),
        comm_(std::move(comm)) {}

  bool isCompleted() override;
  bool isSuccess() const override { return comm_->Error().first == tsrSuccess; }
  std::vector<at::Tensor> result() override { return outputs_; }
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override { return future_; }
  void synchronize() override { (void)wait(std::chrono::milliseconds(0)); }
  // timeout: unused, every Tessera wait is bounded by the group's timeout.
  bool wait(std::chrono::milliseconds timeout) override;

  std::shared_ptr<c10::Event> end_;  // device calls: recorded on the communication stream after the call
  c10::Device device_{c10::kCPU};    // device calls: the tensors' device
  bool host_wait_ = true;            // HOST WAIT (see the file comment); false: STREAM WAIT
  std::string profiling_title_;

 private:
  std::vector<at::Tensor> outputs_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;
  std::shared_ptr<CommRef> comm_;
};

}  // namespace tessera_torch
