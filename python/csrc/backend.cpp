// python/csrc/backend.cpp — `tessera._C`: the torch.distributed backend "tessera", a c10d::Backend over
// Tessera's C API (include/tessera/tessera.h).
//
// One backend object serves the whole process group on this rank, whatever its device: CPU tensors go to
// Tessera with a NULL stream (host memory, the call returns when done), CUDA tensors on this rank's GPU
// with a communication stream of the backend's own, as ProcessGroupNCCL does:
//   * the communication stream first waits for the caller's current stream (an event), so the collective
//     sees every write the caller queued before it;
//   * the tensors are recorded on the communication stream with the caching allocator, so their memory
//     is not reused before the collective has finished with it;
//   * CUDA's legacy default stream (torch's default stream) is never made to wait for a collective that
//     has not finished (see Completer): Work::getFuture() is a CUDA-aware future completed on the host
//     once the call's end event has happened; Work::wait() blocks the host until then, on any stream (a
//     side stream made to wait instead could be waited for by the legacy stream later: FSDP2 does this
//     with its all-gather and reduce-scatter streams, and hung the device bridge so: docs/torch.md, Status).
//     This holds for groups of several islands, where a worker thread of Tessera's makes CUDA calls while
//     a collective runs; a group of one island completes as ProcessGroupNCCL does (CudaWork).
// Everything a call needs besides the tensors (island, device, token, timeout, unique id) comes from
// python/tessera/torch/_backend.py, which does the rendezvous through the process group's store.
// Errors: every failed Tessera call raises RuntimeError with Tessera's message (it names the rank, peer or
// value at fault); a dead peer gives it within the timeout given to init_process_group.
#include <ATen/ATen.h>
#include <c10/util/Exception.h>
#include <torch/csrc/utils/pybind.h>
#include <torch/extension.h>

#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>

#ifdef TESSERA_TORCH_CUDA
#include <ATen/cuda/CUDAContext.h>
#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#endif

#include <dlfcn.h>
#include <execinfo.h>
#include <signal.h>
#include <tessera/tessera.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "check.hpp"

namespace tessera_torch {

namespace {

const char* OpName(c10d::ReduceOp::RedOpType op) {
  switch (op) {
    case c10d::ReduceOp::SUM:
      return "SUM";
    case c10d::ReduceOp::AVG:
      return "AVG";
    case c10d::ReduceOp::PRODUCT:
      return "PRODUCT";
    case c10d::ReduceOp::MIN:
      return "MIN";
    case c10d::ReduceOp::MAX:
      return "MAX";
    case c10d::ReduceOp::BAND:
      return "BAND";
    case c10d::ReduceOp::BOR:
      return "BOR";
    case c10d::ReduceOp::BXOR:
      return "BXOR";
    case c10d::ReduceOp::PREMUL_SUM:
      return "PREMUL_SUM";
    default:
      return "UNKNOWN";
  }
}

// The Tessera type of a tensor, or an error naming the operation and the type.
tsrDataType_t TypeOf(const at::Tensor& t, const char* what) {
  switch (t.scalar_type()) {
    case at::kFloat:
      return tsrFloat32;
    case at::kHalf:
      return tsrFloat16;
    case at::kBFloat16:
      return tsrBfloat16;
    case at::kDouble:
      return tsrFloat64;
    case at::kChar:
      return tsrInt8;
    case at::kByte:
      return tsrUint8;
    case at::kBool:
      return tsrUint8;  // one byte, 0 or 1
    case at::kInt:
      return tsrInt32;
    case at::kLong:
      return tsrInt64;
    default:
      break;
  }
  TSR_CHECK(false, "tessera: ", what, " does not support dtype ", t.scalar_type(),
            " (supported: float32, float16, bfloat16, float64, int8, uint8, int32, int64, bool)");
}

// Tessera's reduce op for a torch one. Bool follows ProcessGroupNCCL: SUM is logical or (max), PRODUCT is
// logical and (min). PREMUL_SUM is a SUM after the caller scaled its input (Backend::PreMul).
tsrRedOp_t RedOpOf(const c10d::ReduceOp& op, const at::Tensor& t, const char* what) {
  const bool is_bool = t.scalar_type() == at::kBool;
  switch (op.op_) {
    case c10d::ReduceOp::SUM:
      return is_bool ? tsrMax : tsrSum;
    case c10d::ReduceOp::PREMUL_SUM:
      return tsrSum;
    case c10d::ReduceOp::AVG:
      TSR_CHECK(!is_bool, "tessera: ", what, " AVG is not defined for bool tensors");
      return tsrAvg;
    case c10d::ReduceOp::PRODUCT:
      return is_bool ? tsrMin : tsrProd;
    case c10d::ReduceOp::MIN:
      return tsrMin;
    case c10d::ReduceOp::MAX:
      return tsrMax;
    default:
      break;
  }
  TSR_CHECK(false, "tessera: ", what, " does not support reduce op ", OpName(op.op_),
            " (supported: SUM, AVG, PRODUCT, MIN, MAX, PREMUL_SUM)");
}

size_t Count(const at::Tensor& t) { return static_cast<size_t>(t.numel()); }

void CheckDense(const at::Tensor& t, const char* what) {
  TSR_CHECK(t.layout() == at::kStrided, "tessera: ", what, " needs dense tensors, got layout ", t.layout());
  TSR_CHECK(t.is_contiguous(), "tessera: ", what, " needs contiguous tensors (call .contiguous() first)");
}

void CheckOne(const std::vector<at::Tensor>& ts, const char* what) {
  TSR_CHECK(ts.size() == 1, "tessera: ", what, " takes one tensor per rank, got ", ts.size());
  CheckDense(ts[0], what);
}

// A flat, contiguous copy of `parts` (same dtype and device), for the list forms of the collectives.
at::Tensor Flatten(const std::vector<at::Tensor>& parts) {
  std::vector<at::Tensor> flat;
  flat.reserve(parts.size());
  for (const auto& p : parts) flat.push_back(p.reshape({-1}));
  return at::cat(flat);
}

}  // namespace

class Backend;

// TESSERA_TORCH_CRASH_TRACE (see InstallCrashTrace at the end of this file).
bool CrashTraceOn() {
  static const bool on = [] {
    const char* v = std::getenv("TESSERA_TORCH_CRASH_TRACE");
    return v != nullptr && *v != '\0' && std::strcmp(v, "0") != 0;
  }();
  return on;
}

// The communicator as Works see it: a Work may outlive its process group (DDP and futures keep them), so
// it reaches the communicator only through this, which shutdown() empties before destroying it.
struct CommRef {
  std::mutex mu;
  tsrComm_t comm = nullptr;
  // tsrSuccess, or the communicator's asynchronous error with its message (empty after shutdown).
  std::pair<tsrResult_t, std::string> Error() {
    std::lock_guard<std::mutex> l(mu);
    if (comm == nullptr) return {tsrSuccess, ""};
    tsrResult_t err = tsrSuccess;
    if (tsrCommGetAsyncError(comm, &err) != tsrSuccess) return {tsrInvalidArgument, "tsrCommGetAsyncError failed"};
    if (err == tsrSuccess) return {err, ""};
    std::string last = tsrGetLastError(comm);
    return {err,
            last.empty() ? "the collective failed in the background (its ranks' own messages name the cause)" : last};
  }
  void Destroy() {
    std::lock_guard<std::mutex> l(mu);
    if (comm != nullptr) tsrCommDestroy(comm);
    comm = nullptr;
  }
};

#ifdef TESSERA_TORCH_CUDA
// Completes the futures of CUDA calls on the host, once a call's end event has happened, and so keeps
// CUDA's legacy default stream (torch's default stream) from ever waiting for a collective still running.
// Why: a copy to pageable memory on the legacy stream (`t.cpu()`, `.item()`) holds up every other
// thread's kernel launches, copies and event records for as long as it waits (bench/gpu/
// stream_lock_probe.cu, measured on the H200; copies on other streams, to pinned memory, and
// cudaStreamSynchronize/cudaDeviceSynchronize hold nothing). If that copy waited for a collective, the
// device bridge's worker, which queues the collective's copies as the peers' rings free up, would wait
// for the copy: a deadlock. This thread makes no call but cudaEventQuery (never held) and, when it
// completes a future, the future's own event record on a stream that holds no work, so those events have
// happened when they are recorded. A call that fails (the communicator's asynchronous error) completes
// its future with that error; one whose end does not come within the group's timeout (twice, plus 5 s:
// Tessera's own timeout raises first) with a timeout error.
class Completer {
 public:
  // `trace`: a file for TESSERA_DEVICE_TRACE's rows of this rank's completions (empty: none).
  Completer(c10::DeviceIndex device, std::chrono::milliseconds timeout, std::shared_ptr<CommRef> comm,
            const std::string& trace)
      : state_(std::make_shared<State>()) {
    state_->device = device;
    if (!trace.empty() && (state_->trace = std::fopen(trace.c_str(), "a")) != nullptr)
      std::fprintf(state_->trace, "call end_seen_us completed_us\n");
    state_->timeout = timeout * 2 + std::chrono::seconds(5);
    state_->comm = std::move(comm);
    cudaStream_t idle = nullptr;
    TSR_CHECK(cudaStreamCreateWithFlags(&idle, cudaStreamNonBlocking) == cudaSuccess,
              "tessera: cudaStreamCreate for the completion stream failed");
    state_->idle = c10::cuda::getStreamFromExternal(idle, device);
    // Detached, owning its state: shutdown never waits for it (it may be running a Python callback that
    // needs the GIL the caller holds); it drains what was queued and ends.
    std::thread([st = state_] { Loop(*st); }).detach();
  }
  ~Completer() { Stop(); }

  void Add(std::shared_ptr<at::cuda::CUDAEvent> end, c10::intrusive_ptr<c10::ivalue::Future> fut, c10::IValue value,
           std::string title) {
    {
      std::lock_guard<std::mutex> l(state_->mu);
      state_->queue.push_back({std::move(end), std::move(fut), std::move(value), std::move(title),
                               std::chrono::steady_clock::now() + state_->timeout});
    }
    state_->cv.notify_one();
  }
  void Stop() {
    {
      std::lock_guard<std::mutex> l(state_->mu);
      state_->stop = true;
    }
    state_->cv.notify_one();
  }

 private:
  struct Item {
    std::shared_ptr<at::cuda::CUDAEvent> end;
    c10::intrusive_ptr<c10::ivalue::Future> fut;
    c10::IValue value;
    std::string title;
    std::chrono::steady_clock::time_point deadline;
  };
  struct State {
    std::mutex mu;
    std::condition_variable cv;
    std::deque<Item> queue;
    bool stop = false;
    c10::DeviceIndex device = 0;
    std::chrono::milliseconds timeout{0};
    std::shared_ptr<CommRef> comm;
    std::optional<c10::cuda::CUDAStream> idle;
    FILE* trace = nullptr;  // TESSERA_DEVICE_TRACE: when each end was seen and its future completed
    ~State() {
      if (trace != nullptr) std::fclose(trace);
    }
  };
  static double MonotonicUs() {  // the clock of the bridge's own trace rows and of Python's perf_counter
    return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now().time_since_epoch()).count();
  }
  static void Fail(Item& it, const std::string& why) {
    try {
      it.fut->setError(std::make_exception_ptr(std::runtime_error("tessera: " + it.title + " failed: " + why)));
    } catch (...) {
    }
  }
  static void Loop(State& st) {
    try {
      c10::cuda::CUDAGuard guard(st.device);
      for (;;) {
        Item it;
        {
          std::unique_lock<std::mutex> l(st.mu);
          st.cv.wait(l, [&] { return st.stop || !st.queue.empty(); });
          if (st.queue.empty()) return;
          it = std::move(st.queue.front());
          st.queue.pop_front();
        }
        bool happened = false;
        try {
          for (int spins = 0; !(happened = it.end->query()); ++spins) {
            if (std::chrono::steady_clock::now() > it.deadline) break;
            if (spins < 200)
              std::this_thread::yield();
            else
              std::this_thread::sleep_for(std::chrono::microseconds(50));
          }
        } catch (const std::exception& e) {
          Fail(it, e.what());
          continue;
        }
        if (!happened) {
          Fail(it, "its end on the GPU did not come within the process group's timeout");
          continue;
        }
        const auto [err, message] = st.comm->Error();
        if (err != tsrSuccess) {
          Fail(it, std::string(tsrGetErrorString(err)) + ": " + message);
          continue;
        }
        const double seen_us = st.trace != nullptr ? MonotonicUs() : 0;
        try {
          c10::cuda::CUDAStreamGuard on_idle(*st.idle);
          it.fut->markCompleted(std::move(it.value));
        } catch (const std::exception& e) {
          Fail(it, e.what());
        }
        if (st.trace != nullptr) {
          std::fprintf(st.trace, "%s %.1f %.1f\n", it.title.c_str(), seen_us, MonotonicUs());
          std::fflush(st.trace);
        }
      }
    } catch (...) {
      // the process is going down (the CUDA context with it)
    }
  }
  std::shared_ptr<State> state_;
};
#endif

// The Work of one call. CPU calls are complete when the Work is made; CUDA calls complete when `end_`
// (recorded on the communication stream after the call) has.
class Work : public c10d::Work {
 public:
  Work(int rank, c10d::OpType type, const char* title, std::vector<at::Tensor> outputs,
       c10::intrusive_ptr<c10::ivalue::Future> future, std::shared_ptr<CommRef> comm)
      : c10d::Work(rank, type, title),
        outputs_(std::move(outputs)),
        future_(std::move(future)),
        comm_(std::move(comm)) {}

  bool isCompleted() override {
#ifdef TESSERA_TORCH_CUDA
    if (end_ && !end_->query()) return false;
#endif
    return true;
  }
  bool isSuccess() const override { return comm_->Error().first == tsrSuccess; }
  std::vector<at::Tensor> result() override { return outputs_; }
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override { return future_; }
  void synchronize() override { (void)wait(std::chrono::milliseconds(0)); }
  bool wait(std::chrono::milliseconds /*timeout: every Tessera wait is bounded by the group's timeout*/) override {
#ifdef TESSERA_TORCH_CUDA
    if (end_ && !end_->query()) {
      if (host_wait_) {
        // On every stream, not only the legacy one: a stream made to wait here could later be waited for
        // by the legacy stream (FSDP2 waits on its all-gather stream, then the default stream waits for
        // that stream's event), and a pageable copy there would then wait for a running collective.
        future_->wait();  // completed on the host once the end event has happened (Completer)
        TSR_CHECK(!future_->hasError(), future_->tryRetrieveErrorMessage());
      }
      end_->block(at::cuda::getCurrentCUDAStream(device_index_));  // one island: the stream waits, as NCCL's
    }
#endif
    const auto [err, message] = comm_->Error();
    TSR_CHECK(err == tsrSuccess, "tessera: ", profiling_title_, " failed: ", tsrGetErrorString(err), ": ", message);
    return true;
  }

#ifdef TESSERA_TORCH_CUDA
  std::shared_ptr<at::cuda::CUDAEvent> end_;
  c10::DeviceIndex device_index_ = 0;
  bool host_wait_ = true;  // wait() blocks the host (a group of several islands: see the file comment)
#endif
  std::string profiling_title_;

 private:
  std::vector<at::Tensor> outputs_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;
  std::shared_ptr<CommRef> comm_;
};

class Backend : public c10d::Backend {
 public:
  // `unique_id`: the bytes of group rank 0's tsrGetUniqueId; `device`: "host" or "cuda:N" (this process's
  // numbering); `island`/`vendor`: this rank's island in this group (0..k-1); `hybrid`: the group has
  // ranks in more than one island (decides how CUDA calls complete: CudaWork).
  Backend(const std::string& unique_id, int rank, int size, int island, const std::string& vendor,
          const std::string& device, int64_t timeout_ms, bool hybrid)
      : c10d::Backend(rank, size), device_(device) {
    TSR_CHECK(unique_id.size() == sizeof(tsrUniqueId), "tessera: the unique id has ", unique_id.size(),
              " bytes, expected ", sizeof(tsrUniqueId), " (was it made by the same Tessera version?)");
    tsrUniqueId id;
    std::memcpy(id.internal, unique_id.data(), sizeof(id.internal));
    tsrConfig_t config = TSR_CONFIG_INITIALIZER;
    config.island = island;
    config.vendor = vendor.c_str();
    config.device = device_.c_str();
    config.timeout_ms = static_cast<int>(std::min<int64_t>(timeout_ms, INT32_MAX));
    if (device_.rfind("cuda:", 0) == 0) {
#ifdef TESSERA_TORCH_CUDA
      cuda_ = true;
      hybrid_ = hybrid;
      device_index_ = static_cast<c10::DeviceIndex>(std::stoi(device_.substr(5)));
      c10::cuda::CUDAGuard guard(device_index_);
      // A stream of our own, not one of torch's pool (which hands its streams out round-robin, so a
      // future's callback could run on it and chain onto later collectives).
      cudaStream_t comm_stream = nullptr;
      TSR_CHECK(cudaStreamCreateWithFlags(&comm_stream, cudaStreamNonBlocking) == cudaSuccess,
                "tessera: cudaStreamCreate for the communication stream failed on ", device_);
      stream_ = c10::cuda::getStreamFromExternal(comm_stream, device_index_);
      // The bridge writes PREFIX.rankN, this PREFIX.completer.rankN; TESSERA_CUDA_TRACE is the variable's old name.
      const char* trace = std::getenv("TESSERA_DEVICE_TRACE");
      if (trace == nullptr || *trace == '\0') trace = std::getenv("TESSERA_CUDA_TRACE");
      completer_ = std::make_unique<Completer>(
          device_index_, std::chrono::milliseconds(timeout_ms), ref_,
          trace != nullptr && *trace != '\0' ? std::string(trace) + ".completer.rank" + std::to_string(rank) : "");
#else
      TSR_CHECK(false, "tessera: device ", device_, " needs a CUDA build of torch and of tessera._C");
#endif
    }
    const tsrResult_t r = tsrCommInitRank(&comm_, size, id, rank, &config);
    TSR_CHECK(r == tsrSuccess, "tessera: joining the group as rank ", rank, " of ", size, " (island ", island, " '",
              vendor, "', device ", device_, ") failed: ", tsrGetLastError(nullptr));
    ref_->comm = comm_;
    init();
  }

  ~Backend() override { shutdown(); }

  const std::string getBackendName() const override { return "tessera"; }
  bool supportsCoalescing() const override { return true; }
  std::string describe() const { return comm_ ? tsrCommDescribe(comm_) : "(shut down)"; }
  const std::string& device() const { return device_; }

  // c10d's sequence number of the group (torch checks it across ranks to spot desynchronised calls): the
  // number of calls this backend has run. Every rank's backend starts at 0, so setting the group's
  // initial number needs no exchange; the counts agree while the ranks make the same calls.
  void setSequenceNumberForGroup() override { sequence_ = 0; }
  uint64_t getSequenceNumberForGroup() override { return sequence_; }

  void abort() override {
    if (comm_ != nullptr) (void)tsrCommAbort(comm_);
  }
  void shutdown() override {
#ifdef TESSERA_TORCH_CUDA
    if (completer_) completer_->Stop();
#endif
    ref_->Destroy();
    comm_ = nullptr;
  }

  // ---- collectives --------------------------------------------------------------------------------

  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor>& tensors,
                                           const c10d::AllreduceOptions& opts) override {
    CheckOne(tensors, "allreduce");
    at::Tensor t = tensors[0];
    return Run(c10d::OpType::ALLREDUCE, "allreduce", {t}, {t}, [&](tsrStream_t s) {
      PreMul(t, opts.reduceOp);
      Check(tsrAllReduce(t.data_ptr(), t.data_ptr(), Count(t), TypeOf(t, "allreduce"),
                         RedOpOf(opts.reduceOp, t, "allreduce"), comm_, s),
            "allreduce");
    });
  }

  c10::intrusive_ptr<c10d::Work> allreduce_coalesced(std::vector<at::Tensor>& tensors,
                                                     const c10d::AllreduceCoalescedOptions& opts) override {
    TSR_CHECK(!tensors.empty(), "tessera: allreduce_coalesced needs at least one tensor");
    for (const auto& t : tensors) {
      CheckDense(t, "allreduce_coalesced");
      TSR_CHECK(t.scalar_type() == tensors[0].scalar_type() && t.device() == tensors[0].device(),
                "tessera: allreduce_coalesced needs tensors of one dtype and device");
    }
    return Run(c10d::OpType::ALLREDUCE_COALESCED, "allreduce_coalesced", tensors, tensors, [&](tsrStream_t s) {
      at::Tensor flat = Flatten(tensors);
      PreMul(flat, opts.reduceOp);
      Check(tsrAllReduce(flat.data_ptr(), flat.data_ptr(), Count(flat), TypeOf(flat, "allreduce_coalesced"),
                         RedOpOf(opts.reduceOp, flat, "allreduce_coalesced"), comm_, s),
            "allreduce_coalesced");
      int64_t off = 0;
      for (auto& t : tensors) {
        t.copy_(flat.narrow(0, off, t.numel()).view_as(t));
        off += t.numel();
      }
    });
  }

  c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor>& tensors,
                                           const c10d::BroadcastOptions& opts) override {
    CheckOne(tensors, "broadcast");
    CheckRoot(opts.rootRank, "broadcast");
    at::Tensor t = tensors[0];
    return Run(c10d::OpType::BROADCAST, "broadcast", {t}, {t}, [&](tsrStream_t s) {
      Check(tsrBroadcast(t.data_ptr(), t.data_ptr(), Count(t), TypeOf(t, "broadcast"), static_cast<int>(opts.rootRank),
                         comm_, s),
            "broadcast");
    });
  }

  c10::intrusive_ptr<c10d::Work> reduce(std::vector<at::Tensor>& tensors, const c10d::ReduceOptions& opts) override {
    CheckOne(tensors, "reduce");
    CheckRoot(opts.rootRank, "reduce");
    at::Tensor t = tensors[0];
    return Run(c10d::OpType::REDUCE, "reduce", {t}, {t}, [&](tsrStream_t s) {
      at::Tensor tmp = t.clone();
      PreMul(tmp, opts.reduceOp);
      Check(tsrAllReduce(tmp.data_ptr(), tmp.data_ptr(), Count(tmp), TypeOf(t, "reduce"),
                         RedOpOf(opts.reduceOp, t, "reduce"), comm_, s),
            "reduce");
      if (rank_ == opts.rootRank) t.copy_(tmp);
    });
  }

  c10::intrusive_ptr<c10d::Work> allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                           std::vector<at::Tensor>& inputs,
                                           const c10d::AllgatherOptions& /*opts*/) override {
    CheckOne(inputs, "allgather");
    TSR_CHECK(outputs.size() == 1 && static_cast<int>(outputs[0].size()) == size_,
              "tessera: allgather needs one list of ", size_, " output tensors");
    at::Tensor in = inputs[0];
    for (const auto& o : outputs[0])
      TSR_CHECK(o.numel() == in.numel() && o.scalar_type() == in.scalar_type(),
                "tessera: allgather outputs must match the input's size and dtype");
    return Run(c10d::OpType::ALLGATHER, "allgather", {in}, outputs[0], [&](tsrStream_t s) {
      at::Tensor flat = at::empty({in.numel() * size_}, in.options());
      Check(tsrAllGather(in.data_ptr(), flat.data_ptr(), Count(in), TypeOf(in, "allgather"), comm_, s), "allgather");
      for (int r = 0; r < size_; ++r)
        outputs[0][r].copy_(flat.narrow(0, r * in.numel(), in.numel()).view_as(outputs[0][r]));
    });
  }

  c10::intrusive_ptr<c10d::Work> _allgather_base(at::Tensor& out, at::Tensor& in,
                                                 const c10d::AllgatherOptions& /*opts*/) override {
    CheckDense(in, "all_gather_into_tensor");
    CheckDense(out, "all_gather_into_tensor");
    CheckGathered(out, in, "all_gather_into_tensor");
    return Run(c10d::OpType::_ALLGATHER_BASE, "all_gather_into_tensor", {in}, {out}, [&](tsrStream_t s) {
      Check(tsrAllGather(in.data_ptr(), out.data_ptr(), Count(in), TypeOf(in, "all_gather_into_tensor"), comm_, s),
            "all_gather_into_tensor");
    });
  }

  c10::intrusive_ptr<c10d::Work> allgather_into_tensor_coalesced(std::vector<at::Tensor>& outs,
                                                                 std::vector<at::Tensor>& ins,
                                                                 const c10d::AllgatherOptions& /*opts*/) override {
    TSR_CHECK(outs.size() == ins.size() && !ins.empty(),
              "tessera: allgather_into_tensor_coalesced needs as many outputs as inputs");
    for (size_t i = 0; i < ins.size(); ++i) {
      CheckDense(ins[i], "allgather_into_tensor_coalesced");
      CheckDense(outs[i], "allgather_into_tensor_coalesced");
      CheckGathered(outs[i], ins[i], "allgather_into_tensor_coalesced");
    }
    return Run(c10d::OpType::COALESCED, "allgather_into_tensor_coalesced", ins, outs, [&](tsrStream_t s) {
      for (size_t i = 0; i < ins.size(); ++i)
        Check(tsrAllGather(ins[i].data_ptr(), outs[i].data_ptr(), Count(ins[i]),
                           TypeOf(ins[i], "allgather_into_tensor_coalesced"), comm_, s),
              "allgather_into_tensor_coalesced");
    });
  }

  // outputs[r][i] receives rank r's inputs[i] (c10d's layout, as ProcessGroupGloo::allgather_coalesced).
  c10::intrusive_ptr<c10d::Work> allgather_coalesced(std::vector<std::vector<at::Tensor>>& outputs,
                                                     std::vector<at::Tensor>& inputs,
                                                     const c10d::AllgatherOptions& /*opts*/) override {
    TSR_CHECK(static_cast<int>(outputs.size()) == size_, "tessera: allgather_coalesced needs ", size_,
              " output lists (one per rank), got ", outputs.size());
    std::vector<at::Tensor> all_out;
    for (const auto& in : inputs) CheckDense(in, "allgather_coalesced");
    for (int r = 0; r < size_; ++r) {
      TSR_CHECK(outputs[r].size() == inputs.size(), "tessera: allgather_coalesced: output list ", r, " has ",
                outputs[r].size(), " tensors, expected one per input (", inputs.size(), ")");
      for (size_t i = 0; i < inputs.size(); ++i) {
        TSR_CHECK(outputs[r][i].numel() == inputs[i].numel() && outputs[r][i].scalar_type() == inputs[i].scalar_type(),
                  "tessera: allgather_coalesced: output [", r, "][", i, "] does not match input ", i,
                  " in size or dtype");
        all_out.push_back(outputs[r][i]);
      }
    }
    return Run(c10d::OpType::ALLGATHER_COALESCED, "allgather_coalesced", inputs, all_out, [&](tsrStream_t s) {
      for (size_t i = 0; i < inputs.size(); ++i) {
        const at::Tensor in = inputs[i].contiguous();
        at::Tensor flat = at::empty({in.numel() * size_}, in.options());
        Check(tsrAllGather(in.data_ptr(), flat.data_ptr(), Count(in), TypeOf(in, "allgather_coalesced"), comm_, s),
              "allgather_coalesced");
        for (int r = 0; r < size_; ++r)
          outputs[r][i].copy_(flat.narrow(0, r * in.numel(), in.numel()).view_as(outputs[r][i]));
      }
    });
  }

  c10::intrusive_ptr<c10d::Work> gather(std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
                                        const c10d::GatherOptions& opts) override {
    CheckOne(inputs, "gather");
    CheckRoot(opts.rootRank, "gather");
    at::Tensor in = inputs[0];
    const bool root = rank_ == opts.rootRank;
    if (root)
      TSR_CHECK(outputs.size() == 1 && static_cast<int>(outputs[0].size()) == size_,
                "tessera: gather needs one list of ", size_, " outputs on the root");
    std::vector<at::Tensor> outs = root ? outputs[0] : std::vector<at::Tensor>{};
    // Group send/recv: every rank sends its input to the root, the root receives one tensor from each.
    return Run(c10d::OpType::GATHER, "gather", {in}, outs, [&](tsrStream_t s) {
      std::vector<at::Tensor> bufs;
      Check(tsrGroupStart(), "gather");
      tsrResult_t r = tsrSuccess;
      if (root) {
        for (int p = 0; p < size_ && r == tsrSuccess; ++p) {
          if (p == rank_) continue;
          bufs.push_back(at::empty_like(in));
          r = tsrRecv(bufs.back().data_ptr(), Count(in), TypeOf(in, "gather"), p, comm_, s);
        }
      } else {
        r = tsrSend(in.data_ptr(), Count(in), TypeOf(in, "gather"), static_cast<int>(opts.rootRank), comm_, s);
      }
      const tsrResult_t e = tsrGroupEnd();
      Check(r != tsrSuccess ? r : e, "gather");
      if (root) {
        size_t k = 0;
        for (int p = 0; p < size_; ++p) outs[p].copy_((p == rank_ ? in : bufs[k++]).view_as(outs[p]));
      }
    });
  }

  c10::intrusive_ptr<c10d::Work> scatter(std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
                                         const c10d::ScatterOptions& opts) override {
    CheckOne(outputs, "scatter");
    CheckRoot(opts.rootRank, "scatter");
    at::Tensor out = outputs[0];
    const bool root = rank_ == opts.rootRank;
    if (root)
      TSR_CHECK(inputs.size() == 1 && static_cast<int>(inputs[0].size()) == size_,
                "tessera: scatter needs one list of ", size_, " inputs on the root");
    std::vector<at::Tensor> ins = root ? inputs[0] : std::vector<at::Tensor>{};
    return Run(c10d::OpType::SCATTER, "scatter", ins, {out}, [&](tsrStream_t s) {
      std::vector<at::Tensor> bufs;
      Check(tsrGroupStart(), "scatter");
      tsrResult_t r = tsrSuccess;
      if (root) {
        for (int p = 0; p < size_ && r == tsrSuccess; ++p) {
          if (p == rank_) continue;
          bufs.push_back(ins[p].contiguous());
          r = tsrSend(bufs.back().data_ptr(), Count(out), TypeOf(out, "scatter"), p, comm_, s);
        }
      } else {
        r = tsrRecv(out.data_ptr(), Count(out), TypeOf(out, "scatter"), static_cast<int>(opts.rootRank), comm_, s);
      }
      const tsrResult_t e = tsrGroupEnd();
      Check(r != tsrSuccess ? r : e, "scatter");
      if (root) out.copy_(ins[rank_].view_as(out));
    });
  }

  c10::intrusive_ptr<c10d::Work> reduce_scatter(std::vector<at::Tensor>& outputs,
                                                std::vector<std::vector<at::Tensor>>& inputs,
                                                const c10d::ReduceScatterOptions& opts) override {
    CheckOne(outputs, "reduce_scatter");
    TSR_CHECK(inputs.size() == 1 && static_cast<int>(inputs[0].size()) == size_,
              "tessera: reduce_scatter needs one list of ", size_, " inputs");
    at::Tensor out = outputs[0];
    for (const auto& i : inputs[0])
      TSR_CHECK(i.numel() == out.numel() && i.scalar_type() == out.scalar_type(),
                "tessera: reduce_scatter inputs must match the output's size and dtype");
    return Run(c10d::OpType::REDUCE_SCATTER, "reduce_scatter", inputs[0], {out}, [&](tsrStream_t s) {
      at::Tensor flat = Flatten(inputs[0]);
      PreMul(flat, opts.reduceOp);
      Check(tsrReduceScatter(flat.data_ptr(), out.data_ptr(), Count(out), TypeOf(out, "reduce_scatter"),
                             RedOpOf(opts.reduceOp, out, "reduce_scatter"), comm_, s),
            "reduce_scatter");
    });
  }

  c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(at::Tensor& out, at::Tensor& in,
                                                      const c10d::ReduceScatterOptions& opts) override {
    CheckDense(in, "reduce_scatter_tensor");
    CheckDense(out, "reduce_scatter_tensor");
    CheckGathered(in, out, "reduce_scatter_tensor");
    return Run(c10d::OpType::_REDUCE_SCATTER_BASE, "reduce_scatter_tensor", {in}, {out}, [&](tsrStream_t s) {
      at::Tensor src = in;
      if (opts.reduceOp.op_ == c10d::ReduceOp::PREMUL_SUM) {
        src = in.clone();
        PreMul(src, opts.reduceOp);
      }
      Check(tsrReduceScatter(src.data_ptr(), out.data_ptr(), Count(out), TypeOf(out, "reduce_scatter_tensor"),
                             RedOpOf(opts.reduceOp, out, "reduce_scatter_tensor"), comm_, s),
            "reduce_scatter_tensor");
    });
  }

  c10::intrusive_ptr<c10d::Work> reduce_scatter_tensor_coalesced(std::vector<at::Tensor>& outs,
                                                                 std::vector<at::Tensor>& ins,
                                                                 const c10d::ReduceScatterOptions& opts) override {
    TSR_CHECK(outs.size() == ins.size() && !ins.empty(),
              "tessera: reduce_scatter_tensor_coalesced needs as many outputs as inputs");
    for (size_t i = 0; i < ins.size(); ++i) {
      CheckDense(ins[i], "reduce_scatter_tensor_coalesced");
      CheckDense(outs[i], "reduce_scatter_tensor_coalesced");
      CheckGathered(ins[i], outs[i], "reduce_scatter_tensor_coalesced");
    }
    return Run(c10d::OpType::COALESCED, "reduce_scatter_tensor_coalesced", ins, outs, [&](tsrStream_t s) {
      for (size_t i = 0; i < ins.size(); ++i) {
        at::Tensor src = ins[i];
        if (opts.reduceOp.op_ == c10d::ReduceOp::PREMUL_SUM) {
          src = ins[i].clone();
          PreMul(src, opts.reduceOp);
        }
        Check(tsrReduceScatter(src.data_ptr(), outs[i].data_ptr(), Count(outs[i]),
                               TypeOf(outs[i], "reduce_scatter_tensor_coalesced"),
                               RedOpOf(opts.reduceOp, outs[i], "reduce_scatter_tensor_coalesced"), comm_, s),
              "reduce_scatter_tensor_coalesced");
      }
    });
  }

  c10::intrusive_ptr<c10d::Work> alltoall_base(at::Tensor& out, at::Tensor& in, std::vector<int64_t>& out_splits,
                                               std::vector<int64_t>& in_splits,
                                               const c10d::AllToAllOptions& /*opts*/) override {
    CheckDense(in, "all_to_all_single");
    CheckDense(out, "all_to_all_single");
    TSR_CHECK(in.scalar_type() == out.scalar_type(), "tessera: all_to_all_single needs one dtype");
    const tsrDataType_t dt = TypeOf(in, "all_to_all_single");
    if (out_splits.empty() && in_splits.empty()) {
      TSR_CHECK(in.numel() % size_ == 0 && out.numel() == in.numel(),
                "tessera: all_to_all_single without splits "
                "needs input and output of one size divisible by the world size ",
                size_, " (got ", in.numel(), " and ", out.numel(), ")");
      return Run(c10d::OpType::ALLTOALL_BASE, "all_to_all_single", {in}, {out}, [&](tsrStream_t s) {
        Check(tsrAllToAll(in.data_ptr(), out.data_ptr(), Count(in) / size_, dt, comm_, s), "all_to_all_single");
      });
    }
    std::vector<size_t> sc, sd, rc, rd;
    SplitsToCounts(in, in_splits, "input", &sc, &sd);
    SplitsToCounts(out, out_splits, "output", &rc, &rd);
    return Run(c10d::OpType::ALLTOALL_BASE, "all_to_all_single", {in}, {out}, [&](tsrStream_t s) {
      Check(tsrAllToAllv(in.data_ptr(), sc.data(), sd.data(), out.data_ptr(), rc.data(), rd.data(), dt, comm_, s),
            "all_to_all_single");
    });
  }

  c10::intrusive_ptr<c10d::Work> alltoall(std::vector<at::Tensor>& outs, std::vector<at::Tensor>& ins,
                                          const c10d::AllToAllOptions& /*opts*/) override {
    TSR_CHECK(static_cast<int>(outs.size()) == size_ && static_cast<int>(ins.size()) == size_,
              "tessera: all_to_all needs ", size_, " input and ", size_, " output tensors");
    const tsrDataType_t dt = TypeOf(ins[0], "all_to_all");
    std::vector<size_t> sc(size_), sd(size_), rc(size_), rd(size_);
    size_t so = 0, ro = 0;
    for (int p = 0; p < size_; ++p) {
      TSR_CHECK(ins[p].scalar_type() == ins[0].scalar_type() && outs[p].scalar_type() == ins[0].scalar_type(),
                "tessera: all_to_all needs one dtype");
      sc[p] = Count(ins[p]);
      sd[p] = so;
      so += sc[p];
      rc[p] = Count(outs[p]);
      rd[p] = ro;
      ro += rc[p];
    }
    return Run(c10d::OpType::ALLTOALL, "all_to_all", ins, outs, [&](tsrStream_t s) {
      at::Tensor send = Flatten(ins);
      at::Tensor recv = at::empty({static_cast<int64_t>(ro)}, outs[0].options());
      Check(tsrAllToAllv(send.data_ptr(), sc.data(), sd.data(), recv.data_ptr(), rc.data(), rd.data(), dt, comm_, s),
            "all_to_all");
      for (int p = 0; p < size_; ++p)
        outs[p].copy_(recv.narrow(0, static_cast<int64_t>(rd[p]), static_cast<int64_t>(rc[p])).view_as(outs[p]));
    });
  }

  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions& /*opts*/) override {
    TSR_CHECK(pending_.empty(), "tessera: barrier after send/recv inside a coalescing block is not supported");
    Check(tsrBarrier(comm_), "barrier");
    return Done(c10d::OpType::BARRIER, "barrier", {});
  }

  // ---- point to point (tags are not supported: as with NCCL, matching is by order per peer) ---------

  c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor>& tensors, int dst, int /*tag*/) override {
    CheckOne(tensors, "send");
    CheckPeer(dst, "send");
    at::Tensor t = tensors[0];
    if (coalescing_) {
      pending_.push_back({true, t, dst});
      return Done(c10d::OpType::SEND, "send", {});
    }
    return Run(c10d::OpType::SEND, "send", {t}, {}, [&](tsrStream_t s) {
      Check(tsrSend(t.data_ptr(), Count(t), TypeOf(t, "send"), dst, comm_, s), "send");
    });
  }

  c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor>& tensors, int src, int /*tag*/) override {
    CheckOne(tensors, "recv");
    CheckPeer(src, "recv");
    at::Tensor t = tensors[0];
    if (coalescing_) {
      pending_.push_back({false, t, src});
      return Done(c10d::OpType::RECV, "recv", {});
    }
    return Run(c10d::OpType::RECV, "recv", {t}, {t}, [&](tsrStream_t s) {
      Check(tsrRecv(t.data_ptr(), Count(t), TypeOf(t, "recv"), src, comm_, s), "recv");
    });
  }

  c10::intrusive_ptr<c10d::Work> recvAnysource(std::vector<at::Tensor>& /*tensors*/, int /*tag*/) override {
    TSR_CHECK(false, "tessera: recv from any source is not supported (name the peer)");
  }

  // batch_isend_irecv: the sends and receives between start and end run as one Tessera group, so they
  // progress together whatever the order of matching pairs.
  void startCoalescing() override {
    TSR_CHECK(!coalescing_, "tessera: startCoalescing while already coalescing");
    coalescing_ = true;
    pending_.clear();
  }

  c10::intrusive_ptr<c10d::Work> endCoalescing() override {
    TSR_CHECK(coalescing_, "tessera: endCoalescing without startCoalescing");
    coalescing_ = false;
    std::vector<P2P> ops = std::move(pending_);
    pending_.clear();
    if (ops.empty()) return Marker("coalesced");  // covers the collectives the block ran on the comm stream
    std::vector<at::Tensor> ins, outs;
    for (const auto& op : ops) (op.send ? ins : outs).push_back(op.t);
    return Run(c10d::OpType::COALESCED, "batch_isend_irecv", ins, outs, [&](tsrStream_t s) {
      Check(tsrGroupStart(), "batch_isend_irecv");
      tsrResult_t r = tsrSuccess;
      for (const auto& op : ops) {
        if (r != tsrSuccess) break;
        r = op.send ? tsrSend(op.t.data_ptr(), Count(op.t), TypeOf(op.t, "isend"), op.peer, comm_, s)
                    : tsrRecv(op.t.data_ptr(), Count(op.t), TypeOf(op.t, "irecv"), op.peer, comm_, s);
      }
      const tsrResult_t e = tsrGroupEnd();
      Check(r != tsrSuccess ? r : e, "batch_isend_irecv");
    });
  }

 private:
  struct P2P {
    bool send;
    at::Tensor t;
    int peer;
  };

  void Check(tsrResult_t r, const char* what) const {
    if (r == tsrSuccess) return;
    const char* kind = tsrGetErrorString(r);
    const char* detail = comm_ != nullptr ? tsrGetLastError(comm_) : tsrGetLastError(nullptr);
    std::string msg = std::string("tessera: ") + what + " failed on rank " + std::to_string(rank_) + ": " +
                      (kind != nullptr ? kind : "?") + ": " + (detail != nullptr ? detail : "");
    if (CrashTraceOn()) std::fprintf(stderr, "%s\n", msg.c_str());  // seen even if raising fails
    TSR_CHECK(false, msg);
  }
  void CheckRoot(int64_t root, const char* what) const {
    TSR_CHECK(root >= 0 && root < size_, "tessera: ", what, " root ", root, " is not a rank of this group (0..",
              size_ - 1, ")");
  }
  void CheckPeer(int peer, const char* what) const {
    TSR_CHECK(peer >= 0 && peer < size_ && peer != rank_, "tessera: ", what, " peer ", peer,
              " is not another rank of this group (0..", size_ - 1, ", this is ", rank_, ")");
  }
  // `big` holds size_ blocks of `small`'s size (allgather output, reduce-scatter input).
  void CheckGathered(const at::Tensor& big, const at::Tensor& small, const char* what) const {
    TSR_CHECK(big.numel() == small.numel() * size_ && big.scalar_type() == small.scalar_type(), "tessera: ", what,
              " needs a tensor of world size (", size_, ") x ", small.numel(), " elements of ", small.scalar_type(),
              ", got ", big.numel(), " of ", big.scalar_type());
  }
  // all_to_all_single splits (rows of dim 0) -> per-peer element counts and displacements.
  void SplitsToCounts(const at::Tensor& t, const std::vector<int64_t>& splits, const char* which,
                      std::vector<size_t>* counts, std::vector<size_t>* displs) const {
    const int64_t rows = t.dim() == 0 ? 1 : t.size(0);
    const int64_t row = rows == 0 ? 0 : t.numel() / rows;
    counts->assign(size_, 0);
    displs->assign(size_, 0);
    std::vector<int64_t> s = splits;
    if (s.empty()) {
      TSR_CHECK(rows % size_ == 0, "tessera: all_to_all_single ", which, " of ", rows,
                " rows is not divisible by the world size ", size_, "; give split sizes");
      s.assign(size_, rows / size_);
    }
    TSR_CHECK(static_cast<int>(s.size()) == size_, "tessera: all_to_all_single ", which, " split sizes have ", s.size(),
              " entries, expected ", size_);
    int64_t off = 0;
    for (int p = 0; p < size_; ++p) {
      TSR_CHECK(s[p] >= 0, "tessera: all_to_all_single ", which, " split size ", s[p], " for rank ", p, " is negative");
      (*counts)[p] = static_cast<size_t>(s[p] * row);
      (*displs)[p] = static_cast<size_t>(off * row);
      off += s[p];
    }
    TSR_CHECK(off == rows, "tessera: all_to_all_single ", which, " split sizes sum to ", off, ", but the tensor has ",
              rows, " rows");
  }
  // PREMUL_SUM: scale the (private) input by the factor before the sum, as NCCL's premul does.
  static void PreMul(at::Tensor& t, const c10d::ReduceOp& op) {
    if (op.op_ != c10d::ReduceOp::PREMUL_SUM) return;
    auto* sup = dynamic_cast<c10d::NCCLPreMulSumSupplement*>(op.supplement_.get());
    TSR_CHECK(sup != nullptr, "tessera: PREMUL_SUM without a factor");
    if (sup->tensor_factor.defined())
      t.mul_(sup->tensor_factor.to(t.device()));
    else
      t.mul_(sup->double_factor);
  }

  // A Work that completes when everything queued so far on the communication stream has (CPU: complete).
  c10::intrusive_ptr<c10d::Work> Marker(const char* title) {
#ifdef TESSERA_TORCH_CUDA
    if (cuda_) {
      c10::cuda::CUDAGuard guard(device_index_);
      auto end = std::make_shared<at::cuda::CUDAEvent>();
      end->record(*stream_);
      return CudaWork(c10d::OpType::COALESCED, title, {}, std::move(end), c10::Device(c10::kCUDA, device_index_));
    }
#endif
    return Done(c10d::OpType::COALESCED, title, {});
  }

#ifdef TESSERA_TORCH_CUDA
  // The Work of a call queued on the communication stream up to `end`. A group of several islands: its
  // future is completed on the host once `end` has happened (Completer) and wait() blocks the host (see
  // the file comment). A group of one island (the island's CCL on the communication stream: no worker
  // thread makes CUDA calls): as ProcessGroupNCCL, the future is complete at once with the comm stream's
  // events and wait() makes the caller's stream wait, so the host runs ahead (with the host-side wait DDP on
  // one GPU took about 3x NCCL's step: docs/torch.md, Status, "DDP on one GPU took 3× NCCL's step").
  c10::intrusive_ptr<c10d::Work> CudaWork(c10d::OpType type, const char* title, std::vector<at::Tensor> outputs,
                                          std::shared_ptr<at::cuda::CUDAEvent> end, c10::Device dev) {
    auto fut = c10::make_intrusive<c10::ivalue::Future>(c10::ListType::create(c10::TensorType::get()),
                                                        std::vector<c10::Device>{dev});
    if (hybrid_) {
      completer_->Add(end, fut, c10::IValue(outputs), title);
    } else {
      c10::cuda::CUDAStreamGuard on_comm(*stream_);  // the future's events are recorded on the comm stream
      fut->markCompleted(c10::IValue(outputs));
    }
    auto w = c10::make_intrusive<Work>(rank_, type, title, std::move(outputs), std::move(fut), ref_);
    w->end_ = std::move(end);
    w->device_index_ = device_index_;
    w->host_wait_ = hybrid_;
    w->profiling_title_ = title;
    return w;
  }
#endif

  // A Work already complete (CPU, or nothing to wait for).
  c10::intrusive_ptr<c10d::Work> Done(c10d::OpType type, const char* title, std::vector<at::Tensor> outputs) {
    auto fut = c10::make_intrusive<c10::ivalue::Future>(c10::ListType::create(c10::TensorType::get()));
    fut->markCompleted(c10::IValue(outputs));
    auto w = c10::make_intrusive<Work>(rank_, type, title, std::move(outputs), std::move(fut), ref_);
    w->profiling_title_ = title;
    return w;
  }

  // Runs `body(stream)` for tensors on one device: a CPU call completes inside; a CUDA call is queued on
  // the communication stream after the caller's current stream (see the file comment).
  template <typename F>
  c10::intrusive_ptr<c10d::Work> Run(c10d::OpType type, const char* title, const std::vector<at::Tensor>& inputs,
                                     const std::vector<at::Tensor>& outputs, F&& body) {
    TSR_CHECK(comm_ != nullptr, "tessera: ", title, " on a process group that was shut down");
    ++sequence_;
    // Inside a coalescing block a collective runs at once (torch's fast path hands whole coalesced calls
    // here); only after queued sends/receives would it be out of order, so that is refused.
    TSR_CHECK(!coalescing_ || type == c10d::OpType::COALESCED || pending_.empty(), "tessera: ", title,
              " after send/recv inside one coalescing block is not supported (only send/recv are grouped)");
    std::optional<at::Device> dev;
    for (const auto* list : {&inputs, &outputs})
      for (const auto& t : *list) {
        if (!dev) dev = t.device();
        TSR_CHECK(t.device() == *dev, "tessera: ", title, " needs all tensors on one device, got ", *dev, " and ",
                  t.device());
      }
    const bool on_cuda = dev && dev->is_cuda();
    if (!on_cuda) {
      TSR_CHECK(!dev || dev->is_cpu(), "tessera: ", title, " does not support tensors on ", *dev,
                " (cpu and cuda only)");
      body(nullptr);
      return Done(type, title, outputs);
    }
#ifdef TESSERA_TORCH_CUDA
    TSR_CHECK(cuda_, "tessera: ", title, " got a CUDA tensor (", *dev, ") on a rank whose device is ", device_,
              " (set TESSERA_DEVICE or the backend's device for this rank)");
    TSR_CHECK(dev->index() == device_index_, "tessera: ", title, " got a tensor on ", *dev,
              " but this rank's device is ", device_);
    c10::cuda::CUDAGuard guard(device_index_);
    at::cuda::CUDAEvent ready;
    ready.record(at::cuda::getCurrentCUDAStream(device_index_));
    ready.block(*stream_);
    for (const auto* list : {&inputs, &outputs})
      for (const auto& t : *list) c10::cuda::CUDACachingAllocator::recordStream(t.storage().data_ptr(), *stream_);
    {
      c10::cuda::CUDAStreamGuard on_comm(*stream_);  // temporaries and copies in `body` run on the comm stream
      body(static_cast<tsrStream_t>(stream_->stream()));
    }
    auto end = std::make_shared<at::cuda::CUDAEvent>();
    end->record(*stream_);
    return CudaWork(type, title, outputs, std::move(end), *dev);
#else
    TSR_CHECK(false, "tessera: ", title, " got a CUDA tensor, but tessera._C was built without CUDA");
#endif
  }

  tsrComm_t comm_ = nullptr;  // null after shutdown()
  std::shared_ptr<CommRef> ref_ = std::make_shared<CommRef>();
  std::string device_;
  bool coalescing_ = false;
  std::vector<P2P> pending_;
  std::atomic<uint64_t> sequence_{0};  // calls run (getSequenceNumberForGroup)
#ifdef TESSERA_TORCH_CUDA
  bool cuda_ = false;
  bool hybrid_ = true;  // the group has ranks in several islands
  c10::DeviceIndex device_index_ = 0;
  // Made in the constructor for a CUDA rank only: a default of getDefaultCUDAStream() here initialised CUDA
  // in every rank, and so failed on a host rank of a machine without a GPU ("no CUDA-capable device").
  std::optional<c10::cuda::CUDAStream> stream_;
  std::unique_ptr<Completer> completer_;
#endif
};

}  // namespace tessera_torch

namespace tessera_torch {
void BindCheckpoint(pybind11::module& m);  // ckpt.cpp

// TESSERA_TORCH_CRASH_TRACE=1: on SIGSEGV/SIGBUS/SIGFPE/SIGILL/SIGABRT, write this thread's native stack to
// stderr (module+offset per frame; scripts/torch-check.sh resolves them with addr2line), then hand the
// signal to the handler that was there before (Python's faulthandler prints the Python stacks when
// PYTHONFAULTHANDLER=1). Off by default: a library does not take over a host program's signals.
namespace {
constexpr int kCrashSignals[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT};
struct sigaction g_previous[sizeof(kCrashSignals) / sizeof(kCrashSignals[0])];

void CrashTrace(int sig, siginfo_t* info, void* ctx) {
  static const char head[] = "tessera._C: fatal signal, native stack of the faulting thread:\n";
  (void)!write(2, head, sizeof(head) - 1);
  void* frames[64];
  const int n = backtrace(frames, 64);
  backtrace_symbols_fd(frames, n, 2);
  // The same frames as module(+offset), for addr2line (the names above are only the nearest exported ones).
  for (int i = 0; i < n; ++i) {
    Dl_info di{};
    if (dladdr(frames[i], &di) == 0 || di.dli_fname == nullptr) continue;
    char line[512];
    const int len = std::snprintf(
        line, sizeof(line), "frame %d: %s(+0x%lx)\n", i, di.dli_fname,
        static_cast<unsigned long>(reinterpret_cast<uintptr_t>(frames[i]) - reinterpret_cast<uintptr_t>(di.dli_fbase)));
    if (len > 0) (void)!write(2, line, static_cast<size_t>(std::min(len, static_cast<int>(sizeof(line)) - 1)));
  }
  for (size_t i = 0; i < sizeof(kCrashSignals) / sizeof(kCrashSignals[0]); ++i) {
    if (kCrashSignals[i] != sig) continue;
    const struct sigaction& prev = g_previous[i];
    if ((prev.sa_flags & SA_SIGINFO) && prev.sa_sigaction != nullptr) {
      prev.sa_sigaction(sig, info, ctx);
      return;
    }
    if (prev.sa_handler != SIG_DFL && prev.sa_handler != SIG_IGN && prev.sa_handler != nullptr) {
      prev.sa_handler(sig);
      return;
    }
  }
  signal(sig, SIG_DFL);
  raise(sig);
}

void InstallCrashTrace() {
  if (!CrashTraceOn()) return;
  void* warm[1];
  (void)backtrace(warm, 1);  // loads libgcc's unwinder now, not inside the signal handler
  for (size_t i = 0; i < sizeof(kCrashSignals) / sizeof(kCrashSignals[0]); ++i) {
    struct sigaction sa {};
    sa.sa_sigaction = CrashTrace;
    sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
    sigemptyset(&sa.sa_mask);
    sigaction(kCrashSignals[i], &sa, &g_previous[i]);
  }
}
}  // namespace
}  // namespace tessera_torch

PYBIND11_MODULE(_C, m) {
  m.doc() = "Tessera's torch.distributed backend (see tessera.torch)";
  py::module::import("torch.distributed");
  py::class_<tessera_torch::Backend, c10d::Backend, c10::intrusive_ptr<tessera_torch::Backend>>(m, "Backend")
      .def(py::init<const std::string&, int, int, int, const std::string&, const std::string&, int64_t, bool>(),
           py::arg("unique_id"), py::arg("rank"), py::arg("size"), py::arg("island"), py::arg("vendor"),
           py::arg("device"), py::arg("timeout_ms"), py::arg("hybrid") = true, py::call_guard<py::gil_scoped_release>())
      .def("describe", &tessera_torch::Backend::describe)
      .def_property_readonly("device", &tessera_torch::Backend::device);
  m.def("unique_id", []() {
    tsrUniqueId id;
    const tsrResult_t r = tsrGetUniqueId(&id);
    TSR_CHECK(r == tsrSuccess, "tessera: tsrGetUniqueId failed: ", tsrGetLastError(nullptr));
    return py::bytes(id.internal, sizeof(id.internal));
  });
#ifdef TESSERA_TORCH_CUDA
  m.attr("cuda_build") = true;  // this tessera._C serves CUDA tensors (the setup found torch's CUDA and nvcc)
#else
  m.attr("cuda_build") = false;
#endif
  tessera_torch::BindCheckpoint(m);
  tessera_torch::InstallCrashTrace();
  m.def("version", []() {
    int v = 0;
    tsrGetVersion(&v);
    return v;
  });
}
