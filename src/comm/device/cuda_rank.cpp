// comm/device/cuda_rank: the CUDA device backend of a rank (see device.hpp), in two modes:
//
//  * World of one CUDA island: every collective on device memory is one call into the island's CCL
//    (NCCL) on the caller's stream — nothing else happens on the way, so the cost over calling NCCL
//    directly is the argument checks.
//  * Hybrid world (several islands): collectives on device memory cross the GPU<->host bridge, in one of
//    two ways; either way the call returns at once and the work is ordered on the caller's stream.
//    - Pinned staging (every collective; allreduce unless the device bridge applies). The CALLER's thread
//      queues everything the GPU does on the caller's stream: per part (allreduce: the chunks every rank
//      of a hybrid world uses, Comm::BridgeChunks; other collectives: one part) the copies to pinned
//      memory and a write of the part's ticket to a host-mapped "input ready" flag (cuStreamWriteValue32);
//      then, per part, a wait for the "done" flag (cuStreamWaitValue32) and the copies back. The worker
//      thread only watches host memory: it waits for a part's input flag, runs the host algorithm on the
//      pinned buffers, and raises the done flag. It makes no CUDA call, so nothing the application's
//      threads do in CUDA meanwhile can stall it (a synchronous copy on torch's legacy default stream,
//      issued while a collective was in flight, did: the worker's next CUDA call waited for it, and it
//      waited for the collective). Chunks pipeline: the GPU copies chunk i+1 down while the host reduces
//      chunk i, and copies chunk i back as soon as it is done.
//    - The device bridge (allreduce of floating types, island of one rank, shm bridge: see
//      Comm::DeviceBridgeEligible): the worker drives copy engines straight into the shm rings and folds
//      on the GPU, so it does make CUDA calls (an event recorded on the caller's stream at submission
//      orders its copies).
//    A failure is recorded, announced to the other ranks through the store (the communicator's Guard),
//    the done flag is still raised so the caller's stream never hangs, and the error is returned by the
//    next call on this communicator. Jobs run in submission order; one queued on another stream than the
//    one before first waits for that one's end (they share the staging buffers).
//    Host-memory calls (stream NULL) go through the same worker queue, in order, and wait.
// Streams, events and the flags are created in Attach, once per communicator. Staging grows on the caller's
// thread when a larger call comes and is kept; no buffer is freed before the communicator is (cudaFreeHost
// would synchronize the device against a stream waiting for the bridge).
#include <fmt/format.h>

#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <future>
#include <mutex>
#include <thread>

#include "comm/ccl/ccl.hpp"
#include "comm/comm.hpp"
#include "comm/device/cuda.hpp"
#include "comm/device/device.hpp"
#include "comm/device/ring_ops.hpp"
#include "comm/reduce.hpp"
#include "common/env.hpp"
#include "common/log.hpp"

namespace tessera::comm {

class CudaRank final : public DeviceRank {
 public:
  explicit CudaRank(std::unique_ptr<cuda::Device> dev) : dev_(std::move(dev)) {}
  ~CudaRank() override;
  Status Attach(Comm* comm) override;
  std::string Describe() const override;
  void* CclHandle() const override { return ccl_ ? ccl_->handle() : nullptr; }
  DirectAllReduce* DirectPath() override { return ccl_ ? &direct_ : nullptr; }

  Status AllReduce(const void* send, void* recv, size_t count, tsrDataType_t type, tsrRedOp_t op,
                   tsrStream_t stream) override;
  Status ReduceScatter(const void* send, void* recv, size_t recvcount, tsrDataType_t type, tsrRedOp_t op,
                       tsrStream_t stream) override;
  Status AllGather(const void* send, void* recv, size_t sendcount, tsrDataType_t type, tsrStream_t stream) override;
  Status Broadcast(const void* send, void* recv, size_t count, tsrDataType_t type, int root,
                   tsrStream_t stream) override;
  Status Send(const void* send, size_t count, tsrDataType_t type, int peer, tsrStream_t stream) override;
  Status Recv(void* recv, size_t count, tsrDataType_t type, int peer, tsrStream_t stream) override;
  Status Barrier() override;
  Status Group(const std::vector<P2POp>& ops) override;
  Status AllToAllv(const void* send, const size_t* sendcounts, const size_t* sdispls, void* recv,
                   const size_t* recvcounts, const size_t* rdispls, tsrDataType_t type, tsrStream_t stream) override;
  void Abort() override;
  Status AsyncError() override;

 private:
  static constexpr int kInEvents = 64;  // queued device jobs before a caller waits
  static constexpr int kInFlags = 64;   // "input ready" flags, used round-robin by ticket

  struct Job {
    std::function<Status(cudaEvent_t)> run;
    cudaEvent_t in = nullptr;                      // recorded on the caller's stream (device-bridge jobs)
    uint32_t ticket = 0;                           // flag value that releases the caller's stream
    bool copy_streams = false;                     // the job used d2h_/h2d_ (device bridge)
    std::shared_ptr<std::promise<Status>> result;  // host jobs: the caller waits on it
  };
  // One part of a staged job: device -> pinned copies, the host algorithm, pinned -> device copies.
  struct Copy {
    void* dst;
    const void* src;
    size_t bytes;
  };
  struct Part {
    std::vector<Copy> down;
    std::function<Status()> host;
    std::vector<Copy> up;
  };

  // Validates buffers for a call on `stream`: device memory of this GPU when a stream is given, host
  // memory when it is NULL.
  Status CheckBuffers(const char* what, const void* send, size_t send_bytes, const void* recv, size_t recv_bytes,
                      tsrStream_t stream);  // adds what it validates to direct_.allocs
  // Hybrid: queues a device-bridge job or a staged job (both return at once) or a host job (waits for it).
  Status SubmitDevice(const char* what, tsrStream_t stream, std::function<Status(cudaEvent_t)> run);
  Status SubmitStaged(const char* what, tsrStream_t stream, std::vector<Part> parts);
  // The common staged call: `send_bytes` from send down, host_call(staged in, staged out), `recv_bytes` up.
  Status StagedCall(const char* what, tsrStream_t stream, const void* send, size_t send_bytes, void* recv,
                    size_t recv_bytes, std::function<Status(const void*, void*)> host_call);
  // Under mu_: a job queued on `s` after one queued on another stream waits for that one's end.
  Status OrderAfterPrevious(cudaStream_t s);
  void RecordTail(cudaStream_t s);
  // Worker: waits (host memory only) until the GPU has raised the input flag of `ticket`.
  Status WaitInput(uint32_t ticket, const char* what);
  Status SubmitHost(std::function<Status()> run);
  // Runs a host-path call: on the worker (in order with device jobs) in a hybrid world, else right here.
  Status Host(std::function<Status()> run) { return hybrid_ ? SubmitHost(std::move(run)) : run(); }
  void WorkerLoop();
  // The device bridge's allreduce (worker). `acc`: accumulator scratch reserved by the caller thread.
  Status BridgeAllReduce(cudaEvent_t in, const std::byte* send, std::byte* recv, size_t count, DType dt, RedOp op,
                         void* acc, size_t acc_bytes);
  // On the caller thread, before the job is queued: pinned buffers for a staged job.
  Status StagingFor(size_t send_bytes, size_t recv_bytes, std::byte** hin, std::byte** hout);
  Status Fail(const char* what, Status s);  // records s through the communicator's Guard
  Status CclCall(const char* what, int r);
  Status Direct() const;
  Status WarmUp();  // world of one island: the CCL's first collective, at init (see its definition)

  std::unique_ptr<cuda::Device> dev_;
  Comm* comm_ = nullptr;
  bool hybrid_ = false;
  std::unique_ptr<CclComm> ccl_;  // world of one island
  // The lean allreduce path of a world of one island (set up in Attach; its `call` stays null otherwise),
  // and every rank's cache of validated device allocations.
  DirectAllReduce direct_;
  // The device bridge (copy engines straight into the shm rings), when this island qualifies.
  std::unique_ptr<CudaRingOps> ring_ops_;
  // Hybrid resources (created in Attach).
  cudaStream_t d2h_ = nullptr, h2d_ = nullptr;  // the device bridge's copy streams
  cudaEvent_t in_ev_[kInEvents] = {};
  cudaEvent_t tail_ev_ = nullptr;  // recorded at the end of the last job queued on a stream
  cudaStream_t tail_stream_ = nullptr;
  bool tail_set_ = false;
  cuda::MappedFlags in_flags_;
  std::atomic<bool> aborted_{false};
  cuda::PinnedBuffer whole_in_, whole_out_;
  std::thread worker_;
  std::mutex mu_;
  std::condition_variable cv_, done_cv_;
  std::deque<Job> queue_;
  bool stop_ = false;
  uint32_t submitted_ = 0, completed_ = 0;
  Status async_error_;
};

Result<std::unique_ptr<DeviceRank>> OpenDeviceRank(const std::string& device) {
  TSR_ASSIGN_OR_RETURN(auto dev, cuda::Device::Open(device));
  return std::unique_ptr<DeviceRank>(new CudaRank(std::move(dev)));
}

bool IsDevicePointer(const void* p) { return cuda::IsDeviceMemory(p); }

Status CudaRank::Attach(Comm* comm) {
  comm_ = comm;
  hybrid_ = comm->islands_.size() > 1;
  if (!hybrid_) {
    // World of one island: the island's CCL, on the caller's stream.
    TSR_ASSIGN_OR_RETURN(auto lib, CclLibrary::LoadFromEnv());
    const Island& I = comm->islands_[comm->my_island_];
    auto c = CclComm::Create(lib, comm->store_.get(), fmt::format("ccl/island{}/id", I.index),
                             static_cast<int>(I.ranks.size()), comm->local_, comm->timeout_);
    if (!c.ok())
      return c.status().WithContext(
          fmt::format("rank {}: creating island {}'s {} communicator", comm->rank_, I.index, lib->name()));
    ccl_ = std::move(c).value();
    direct_.call = ccl_->lib().AllReduce;
    direct_.handle = ccl_->handle();
    for (int t = 0; t < static_cast<int>(DType::kCount); ++t) {
      direct_.ccl_type[t] = static_cast<int8_t>(CclDataType(static_cast<DType>(t)));
      direct_.esz[t] = direct_.ccl_type[t] < 0 ? 0 : static_cast<uint8_t>(DTypeSize(static_cast<DType>(t)));
    }
    for (int o = 0; o < static_cast<int>(RedOp::kCount); ++o)
      direct_.ccl_op[o] = static_cast<int8_t>(ccl_->Op(static_cast<RedOp>(o)));
    direct_.owner = this;
    direct_.report = [](void* self, int r) { return static_cast<CudaRank*>(self)->CclCall("AllReduce", r); };
    return WarmUp();
  }
  TSR_RETURN_IF_ERROR(cuda::Check(cudaStreamCreateWithFlags(&d2h_, cudaStreamNonBlocking), "cudaStreamCreate"));
  TSR_RETURN_IF_ERROR(cuda::Check(cudaStreamCreateWithFlags(&h2d_, cudaStreamNonBlocking), "cudaStreamCreate"));
  TSR_RETURN_IF_ERROR(cuda::Check(cudaEventCreateWithFlags(&tail_ev_, cudaEventDisableTiming), "cudaEventCreate"));
  TSR_RETURN_IF_ERROR(in_flags_.Allocate(kInFlags));
  for (auto& e : in_ev_)
    TSR_RETURN_IF_ERROR(cuda::Check(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "cudaEventCreate"));
  if (comm->DeviceBridgeEligible(comm->islands_[comm->my_island_], DType::kFloat32)) {
    std::vector<const ShmInbox*> peers;
    for (const auto& box : comm->peer_inboxes_) peers.push_back(box.get());
    std::vector<int> bridge_peers;
    for (int p = 0; p < comm->size_; ++p)
      if (comm->infos_[p].island != comm->my_island_) bridge_peers.push_back(p);
    TSR_ASSIGN_OR_RETURN(uint64_t piece, env::Bytes("TESSERA_CUDA_PIECE"));
    if (piece < 4096 || piece % 8 != 0)
      return InvalidArgument(fmt::format("TESSERA_CUDA_PIECE={} must be at least 4096 and a multiple of 8", piece));
    auto ops =
        CudaRingOps::Create(d2h_, h2d_, comm->rank_, comm->inbox_.get(), peers, bridge_peers, comm->timeout_, piece);
    if (!ops.ok()) return ops.status().WithContext(fmt::format("rank {}: setting up the device bridge", comm->rank_));
    ring_ops_ = std::move(ops).value();
  }
  worker_ = std::thread([this] { WorkerLoop(); });
  return Status::Ok();
}

CudaRank::~CudaRank() {
  if (worker_.joinable()) {
    {
      std::lock_guard<std::mutex> l(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    worker_.join();
  }
  if (d2h_) (void)cudaStreamSynchronize(d2h_);
  if (h2d_) (void)cudaStreamSynchronize(h2d_);
  ring_ops_.reset();  // unregisters the rings while they are still mapped
  if (tail_ev_) (void)cudaEventDestroy(tail_ev_);
  for (auto e : in_ev_)
    if (e) (void)cudaEventDestroy(e);
  if (d2h_) (void)cudaStreamDestroy(d2h_);
  if (h2d_) (void)cudaStreamDestroy(h2d_);
  if (ccl_ && comm_ && !comm_->failed_.ok()) ccl_->MarkFailed();
  ccl_.reset();
}

std::string CudaRank::Describe() const {
  if (ccl_)
    return fmt::format("cuda:{} ({}), {} {} on the caller's stream", dev_->index(), dev_->name(), ccl_->lib().name(),
                       ccl_->lib().version());
  return fmt::format(
      "cuda:{} ({}), GPU<->host bridge: {}, stream wait: {}", dev_->index(), dev_->name(),
      ring_ops_ ? "copy engines straight into the shm rings, folds on the GPU (floating types)" : "pinned staging",
      dev_->wait_mode());
}

Status CudaRank::CheckBuffers(const char* what, const void* send, size_t send_bytes, const void* recv,
                              size_t recv_bytes, tsrStream_t stream) {
  if (stream == nullptr) {
    TSR_RETURN_IF_ERROR(dev_->CheckHostPtr(what, "sendbuf", send));
    return dev_->CheckHostPtr(what, "recvbuf", recv);
  }
  if (send != nullptr || send_bytes > 0)
    TSR_RETURN_IF_ERROR(dev_->CheckDevicePtr(what, "sendbuf", send, send_bytes, direct_.allocs));
  if (recv != nullptr || recv_bytes > 0)
    TSR_RETURN_IF_ERROR(dev_->CheckDevicePtr(what, "recvbuf", recv, recv_bytes, direct_.allocs));
  return Status::Ok();
}

// NCCL's first collective on a communicator does not return until the caller's stream has drained: on
// two H200s (NCCL 2.28.3, bench/gpu/first_call.cu) the first allreduce queued behind a 300 ms kernel
// returned after 307-313 ms, with NCCL_RUNTIME_CONNECT=0 or CUDA_MODULE_LOADING=EAGER alike; after one
// allreduce of one element, every later call of any type and size returned in 0.1 ms. So the communicator
// makes that first call itself, on a stream of its own, before the application can queue work.
Status CudaRank::WarmUp() {
  cudaStream_t s = nullptr;
  cudaEvent_t done = nullptr;
  void* one = nullptr;
  Status st = cuda::Check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreate (CCL warm-up)");
  if (st.ok()) st = cuda::Check(cudaEventCreateWithFlags(&done, cudaEventDisableTiming), "cudaEventCreate");
  if (st.ok()) st = cuda::Check(cudaMalloc(&one, sizeof(float)), "cudaMalloc (CCL warm-up)");
  if (st.ok()) st = cuda::Check(cudaMemsetAsync(one, 0, sizeof(float), s), "cudaMemsetAsync (CCL warm-up)");
  if (st.ok())
    st = ccl_->lib().Check(
        ccl_->lib().AllReduce(one, one, 1, CclDataType(DType::kFloat32), CclRedOp(RedOp::kSum), ccl_->handle(), s),
        "AllReduce (warm-up at init)");
  if (st.ok()) st = cuda::Check(cudaEventRecord(done, s), "cudaEventRecord (CCL warm-up)");
  // Bounded: a peer that died since init must not hang this one.
  if (st.ok()) st = dev_->WaitEvent(done, comm_->timeout_, "the CCL's warm-up allreduce at init");
  if (st.ok()) {
    (void)cudaFree(one);
    (void)cudaEventDestroy(done);
    (void)cudaStreamDestroy(s);
    return Status::Ok();
  }
  ccl_->MarkFailed();  // abort, not destroy; what a stuck call may still use is left alone
  return st.WithContext(fmt::format("rank {}: warming up island {}'s {} communicator", comm_->rank_,
                                    comm_->islands_[comm_->my_island_].index, ccl_->lib().name()));
}

Status CudaRank::Direct() const {
  if (comm_->failed_.ok() && comm_->async_failed_.load(std::memory_order_acquire))
    return comm_->GuardFn("call", [] { return Status::Ok(); });  // makes the async error the failure
  if (!comm_->failed_.ok())
    return Status(comm_->failed_.code(), "communicator failed earlier: " + comm_->failed_.message());
  return Status::Ok();
}

Status CudaRank::CclCall(const char* what, int r) {
  Status s = ccl_->lib().Check(r, what);
  // The CCL's asynchronous error (a peer gone, a kernel fault) is polled every 128th call — at the
  // ~4 µs NCCL's own enqueue takes, about every half millisecond — so a steady loop does not pay for it
  // and an error still surfaces within a step.
  if (s.ok() && (++direct_.calls & 127) == 0) s = ccl_->AsyncError();
  if (!s.ok()) {
    ccl_->MarkFailed();
    return comm_->GuardFn(what, [&] { return s; });
  }
  return s;
}

Status CudaRank::Fail(const char* what, Status s) {
  if (s.ok()) return s;
  // The communicator's state belongs to the worker thread while one runs.
  if (worker_.joinable() && std::this_thread::get_id() != worker_.get_id())
    return SubmitHost([&] { return comm_->GuardFn(what, [&] { return s; }); });
  return comm_->GuardFn(what, [&] { return s; });
}

// ---- hybrid: the worker queue ----

Status CudaRank::SubmitDevice(const char* what, tsrStream_t stream, std::function<Status(cudaEvent_t)> run) {
  auto user = static_cast<cudaStream_t>(stream);
  std::unique_lock<std::mutex> l(mu_);
  if (!async_error_.ok())
    return Status(async_error_.code(),
                  fmt::format("{}: an earlier collective on this GPU rank failed: {}", what, async_error_.message()));
  // Back-pressure: at most kInEvents device jobs in flight (each owns one input event).
  if (!done_cv_.wait_for(l, comm_->timeout_,
                         [&] { return submitted_ - completed_ < kInEvents || !async_error_.ok(); })) {
    l.unlock();
    return Fail(what, Timeout(fmt::format("{}: {} collectives queued on the GPU bridge did not finish within "
                                          "TESSERA_TIMEOUT",
                                          what, kInEvents)));
  }
  if (!async_error_.ok())
    return Status(async_error_.code(),
                  fmt::format("{}: an earlier collective on this GPU rank failed: {}", what, async_error_.message()));
  uint32_t ticket = ++submitted_;
  Job job;
  job.in = in_ev_[ticket % kInEvents];
  job.ticket = ticket;
  job.copy_streams = true;
  job.run = std::move(run);
  Status s = OrderAfterPrevious(user);
  if (s.ok()) s = cuda::Check(cudaEventRecord(job.in, user), "cudaEventRecord on the caller's stream");
  if (s.ok()) s = dev_->EnqueueWaitFlag(user, ticket);
  if (s.ok()) RecordTail(user);
  if (!s.ok()) {
    // Keep the ticket sequence whole: the worker runs a job that records this failure (through the
    // communicator's Guard, so the other ranks hear of it) and raises the flag.
    job.run = [this, s, what](cudaEvent_t) { return Fail(what, s); };
  }
  queue_.push_back(std::move(job));
  l.unlock();
  cv_.notify_all();
  return s;
}

Status CudaRank::OrderAfterPrevious(cudaStream_t s) {
  if (!tail_set_ || tail_stream_ == s) return Status::Ok();
  return cuda::Check(cudaStreamWaitEvent(s, tail_ev_, 0), "cudaStreamWaitEvent (the previous collective's stream)");
}

void CudaRank::RecordTail(cudaStream_t s) {
  if (cudaEventRecord(tail_ev_, s) == cudaSuccess) {
    tail_stream_ = s;
    tail_set_ = true;
  } else {
    (void)cudaGetLastError();
    tail_set_ = false;  // the next job on another stream then orders after nothing: record the failure
  }
}

Status CudaRank::SubmitStaged(const char* what, tsrStream_t stream, std::vector<Part> parts) {
  auto user = static_cast<cudaStream_t>(stream);
  std::unique_lock<std::mutex> l(mu_);
  auto earlier = [&] {
    return Status(async_error_.code(),
                  fmt::format("{}: an earlier collective on this GPU rank failed: {}", what, async_error_.message()));
  };
  if (!async_error_.ok()) return earlier();
  if (!done_cv_.wait_for(l, comm_->timeout_,
                         [&] { return submitted_ - completed_ < kInEvents || !async_error_.ok(); })) {
    l.unlock();
    return Fail(what, Timeout(fmt::format("{}: collectives queued on the GPU bridge did not finish within "
                                          "TESSERA_TIMEOUT",
                                          what)));
  }
  if (!async_error_.ok()) return earlier();
  const auto n = static_cast<uint32_t>(parts.size());
  const uint32_t first = submitted_ + 1;
  submitted_ += n;
  const uint32_t last = submitted_;
  // Everything the GPU does for this job, queued here on the caller's stream (see the file comment).
  Status s = OrderAfterPrevious(user);
  for (uint32_t i = 0; i < n && s.ok(); ++i) {
    for (const Copy& c : parts[i].down)
      if (s.ok() && c.bytes > 0)
        s = cuda::Check(cudaMemcpyAsync(c.dst, c.src, c.bytes, cudaMemcpyDeviceToHost, user),
                        "cudaMemcpyAsync (device to pinned staging)");
    if (s.ok()) s = dev_->EnqueueWriteFlag(user, in_flags_.dev((first + i) % kInFlags), first + i);
  }
  for (uint32_t i = 0; i < n && s.ok(); ++i) {
    s = dev_->EnqueueWaitFlag(user, first + i);
    for (const Copy& c : parts[i].up)
      if (s.ok() && c.bytes > 0)
        s = cuda::Check(cudaMemcpyAsync(c.dst, c.src, c.bytes, cudaMemcpyHostToDevice, user),
                        "cudaMemcpyAsync (pinned staging to device)");
  }
  if (s.ok()) RecordTail(user);
  Job job;
  job.ticket = last;
  if (!s.ok()) {
    // Keep the ticket sequence whole: the worker records the failure and raises the done flag past it.
    job.run = [this, s, what](cudaEvent_t) { return Fail(what, s); };
  } else {
    job.run = [this, what, first, last, parts = std::move(parts)](cudaEvent_t) -> Status {
      for (uint32_t i = 0; i < parts.size(); ++i) {
        const uint32_t t = first + i;
        TSR_RETURN_IF_ERROR(WaitInput(t, what));
        TSR_RETURN_IF_ERROR(parts[i].host());
        if (t != last) dev_->SetFlag(t);  // this part's copies back may start; the loop raises the last
      }
      return Status::Ok();
    };
  }
  queue_.push_back(std::move(job));
  l.unlock();
  cv_.notify_all();
  return s;
}

Status CudaRank::WaitInput(uint32_t ticket, const char* what) {
  const uint32_t* flag = in_flags_.host(ticket % kInFlags);
  const auto t0 = std::chrono::steady_clock::now();
  for (int spin = 0;; ++spin) {
    // The slot's values only grow (tickets are written in submission order), so "at least" is enough.
    if (static_cast<int32_t>(__atomic_load_n(flag, __ATOMIC_ACQUIRE) - ticket) >= 0) return Status::Ok();
    if (aborted_.load(std::memory_order_relaxed))
      return Fail(what, RemoteError(fmt::format("{}: the communicator was aborted (tsrCommAbort)", what)));
    if (spin < 2000) {
      std::this_thread::yield();
      continue;
    }
    if (std::chrono::steady_clock::now() - t0 > comm_->timeout_)
      return Fail(what, Timeout(fmt::format("{}: the GPU (cuda:{}) did not copy the input to the host within "
                                            "TESSERA_TIMEOUT ({} ms): the stream the call was queued on is "
                                            "blocked (waiting for an event or a kernel that never ends?)",
                                            what, dev_->index(), comm_->timeout_.count())));
    std::this_thread::sleep_for(std::chrono::microseconds(20));
  }
}

Status CudaRank::StagedCall(const char* what, tsrStream_t stream, const void* send, size_t send_bytes, void* recv,
                            size_t recv_bytes, std::function<Status(const void*, void*)> host_call) {
  std::byte *hin, *hout;
  TSR_RETURN_IF_ERROR(Fail(what, StagingFor(send_bytes, recv_bytes, &hin, &hout)));
  std::vector<Part> parts(1);
  if (send_bytes > 0) parts[0].down.push_back({hin, send, send_bytes});
  if (recv_bytes > 0) parts[0].up.push_back({recv, hout, recv_bytes});
  parts[0].host = [hin, hout, host_call = std::move(host_call)] { return host_call(hin, hout); };
  return SubmitStaged(what, stream, std::move(parts));
}

Status CudaRank::SubmitHost(std::function<Status()> run) {
  auto p = std::make_shared<std::promise<Status>>();
  auto f = p->get_future();
  {
    std::lock_guard<std::mutex> l(mu_);
    Job job;
    job.result = p;
    job.run = [run = std::move(run)](cudaEvent_t) { return run(); };
    queue_.push_back(std::move(job));
  }
  cv_.notify_all();
  return f.get();
}

void CudaRank::WorkerLoop() {
  Status cur = dev_->MakeCurrent();
  for (;;) {
    Job job;
    {
      std::unique_lock<std::mutex> l(mu_);
      cv_.wait(l, [&] { return stop_ || !queue_.empty(); });
      if (queue_.empty()) return;
      job = std::move(queue_.front());
      queue_.pop_front();
    }
    Status s = cur;
    if (s.ok()) {
      std::lock_guard<std::mutex> l(mu_);
      if (job.result == nullptr && !async_error_.ok()) s = async_error_;  // device jobs after a failure: skip
    }
    if (s.ok()) s = job.run(job.in);
    if (job.result) {
      job.result->set_value(s);
      continue;
    }
    // Device job: (device bridge) make sure no copy of it is still in flight, then release the caller's stream.
    if (job.copy_streams) {
      (void)cudaStreamSynchronize(d2h_);
      (void)cudaStreamSynchronize(h2d_);
    }
    {
      std::lock_guard<std::mutex> l(mu_);
      if (!s.ok() && async_error_.ok()) async_error_ = s;
      completed_ = job.ticket;
    }
    dev_->SetFlag(job.ticket);
    done_cv_.notify_all();
  }
}

Status CudaRank::BridgeAllReduce(cudaEvent_t in, const std::byte* send, std::byte* recv, size_t count, DType dt,
                                 RedOp op, void* acc, size_t acc_bytes) {
  return comm_->GuardFn("allreduce", [&]() -> Status {
    ring_ops_->Use(acc, acc_bytes);
    TSR_RETURN_IF_ERROR(cuda::Check(cudaStreamWaitEvent(d2h_, in, 0), "cudaStreamWaitEvent (input)"));
    TSR_RETURN_IF_ERROR(cuda::Check(cudaStreamWaitEvent(h2d_, in, 0), "cudaStreamWaitEvent (input)"));
    Status st = comm_->Hierarchical(CollKind::kAllReduce, send, recv, count, dt, op, 0, ring_ops_.get());
    ++comm_->seq_;
    return st;
  });
}

Status CudaRank::StagingFor(size_t send_bytes, size_t recv_bytes, std::byte** hin, std::byte** hout) {
  TSR_ASSIGN_OR_RETURN(*hin, whole_in_.Get(send_bytes));
  TSR_ASSIGN_OR_RETURN(*hout, whole_out_.Get(recv_bytes));
  return Status::Ok();
}

// ---- collectives ----

Status CudaRank::AllReduce(const void* send, void* recv, size_t count, tsrDataType_t type, tsrRedOp_t op,
                           tsrStream_t stream) {
  auto dt = static_cast<DType>(type);
  auto rop = static_cast<RedOp>(op);
  if (!IsValid(dt))
    return Host(
        [=, this] { return comm_->HostAllReduce(send, recv, count, type, op, nullptr); });  // names the bad type
  size_t bytes = count * DTypeSize(dt);
  TSR_RETURN_IF_ERROR(Fail("allreduce", CheckBuffers("allreduce", send, bytes, recv, bytes, stream)));
  if (stream == nullptr) return Host([=, this] { return comm_->HostAllReduce(send, recv, count, type, op, nullptr); });
  if (!IsValid(rop))
    return Fail("allreduce", InvalidArgument(fmt::format("allreduce: op {} is not a tsrRedOp_t", int(op))));
  if (!hybrid_) {
    TSR_RETURN_IF_ERROR(Direct());
    return CclCall("AllReduce",
                   ccl_->lib().AllReduce(send, recv, count, CclDataType(dt), ccl_->Op(rop), ccl_->handle(), stream));
  }
  if (!ring_ops_ || !comm_->DeviceBridgeEligible(comm_->islands_[comm_->my_island_], dt)) {
    // Pinned staging, in place, one part per bridge chunk (the chunks every rank of the world uses).
    const size_t esz = DTypeSize(dt);
    std::byte *hin, *hout;
    TSR_RETURN_IF_ERROR(Fail("allreduce", StagingFor(bytes, 0, &hin, &hout)));
    const auto* src = static_cast<const std::byte*>(send);
    auto* dst = static_cast<std::byte*>(recv);
    std::vector<Part> parts;
    for (const Range& c : comm_->BridgeChunks(count, dt)) {
      std::byte* h = hin + c.lo * esz;
      const size_t n = c.len();
      parts.push_back(Part{{Copy{h, src + c.lo * esz, n * esz}},
                           [this, h, n, dt, rop] {
                             return comm_->GuardFn("allreduce", [&]() -> Status {
                               Status st = comm_->Hierarchical(CollKind::kAllReduce, h, h, n, dt, rop, 0);
                               ++comm_->seq_;
                               return st;
                             });
                           },
                           {Copy{dst + c.lo * esz, h, n * esz}}});
    }
    return SubmitStaged("allreduce", stream, std::move(parts));
  }
  // The device bridge. My parts of the segments: at most count/k elements plus one per segment.
  const size_t k = comm_->islands_.size();
  const size_t acc_bytes = (count / k + comm_->size_ + 1) * DTypeSize(AccumType(dt));
  auto grown = ring_ops_->Grow(acc_bytes);
  if (!grown.ok()) return Fail("allreduce", grown.status());
  void* acc = *grown;
  return SubmitDevice("allreduce", stream, [=, this](cudaEvent_t in) {
    return BridgeAllReduce(in, static_cast<const std::byte*>(send), static_cast<std::byte*>(recv), count, dt, rop, acc,
                           acc_bytes);
  });
}

Status CudaRank::ReduceScatter(const void* send, void* recv, size_t recvcount, tsrDataType_t type, tsrRedOp_t op,
                               tsrStream_t stream) {
  auto dt = static_cast<DType>(type);
  if (!IsValid(dt))
    return Host([=, this] { return comm_->HostReduceScatter(send, recv, recvcount, type, op, nullptr); });
  size_t rb = recvcount * DTypeSize(dt), sb = rb * comm_->size_;
  TSR_RETURN_IF_ERROR(Fail("reduce_scatter", CheckBuffers("reduce_scatter", send, sb, recv, rb, stream)));
  if (stream == nullptr)
    return Host([=, this] { return comm_->HostReduceScatter(send, recv, recvcount, type, op, nullptr); });
  if (!hybrid_) {
    TSR_RETURN_IF_ERROR(Direct());
    if (!IsValid(static_cast<RedOp>(op)))
      return Fail("reduce_scatter", InvalidArgument(fmt::format("reduce_scatter: op {} is not a tsrRedOp_t", int(op))));
    return CclCall("ReduceScatter",
                   ccl_->lib().ReduceScatter(send, recv, recvcount, CclDataType(dt), ccl_->Op(static_cast<RedOp>(op)),
                                             ccl_->handle(), stream));
  }
  return StagedCall("reduce_scatter", stream, send, sb, recv, rb, [=, this](const void* hs, void* hr) {
    return comm_->HostReduceScatter(hs, hr, recvcount, type, op, nullptr);
  });
}

Status CudaRank::AllGather(const void* send, void* recv, size_t sendcount, tsrDataType_t type, tsrStream_t stream) {
  auto dt = static_cast<DType>(type);
  if (!IsValid(dt)) return Host([=, this] { return comm_->HostAllGather(send, recv, sendcount, type, nullptr); });
  size_t sb = sendcount * DTypeSize(dt), rb = sb * comm_->size_;
  TSR_RETURN_IF_ERROR(Fail("allgather", CheckBuffers("allgather", send, sb, recv, rb, stream)));
  if (stream == nullptr) return Host([=, this] { return comm_->HostAllGather(send, recv, sendcount, type, nullptr); });
  if (!hybrid_) {
    TSR_RETURN_IF_ERROR(Direct());
    return CclCall("AllGather", ccl_->lib().AllGather(send, recv, sendcount, CclDataType(dt), ccl_->handle(), stream));
  }
  return StagedCall("allgather", stream, send, sb, recv, rb, [=, this](const void* hs, void* hr) {
    return comm_->HostAllGather(hs, hr, sendcount, type, nullptr);
  });
}

Status CudaRank::Broadcast(const void* send, void* recv, size_t count, tsrDataType_t type, int root,
                           tsrStream_t stream) {
  auto dt = static_cast<DType>(type);
  if (!IsValid(dt) || root < 0 || root >= comm_->size_)
    return Host(
        [=, this] { return comm_->HostBroadcast(send, recv, count, type, root, nullptr); });  // names the bad argument
  bool is_root = root == comm_->rank_;
  size_t b = count * DTypeSize(dt);
  TSR_RETURN_IF_ERROR(
      Fail("broadcast", CheckBuffers("broadcast", is_root ? send : nullptr, is_root ? b : 0, recv, b, stream)));
  if (stream == nullptr)
    return Host([=, this] { return comm_->HostBroadcast(send, recv, count, type, root, nullptr); });
  if (!hybrid_) {
    TSR_RETURN_IF_ERROR(Direct());
    return CclCall("Broadcast", ccl_->lib().Broadcast(is_root ? send : recv, recv, count, CclDataType(dt), root,
                                                      ccl_->handle(), stream));
  }
  return StagedCall("broadcast", stream, is_root ? send : nullptr, is_root ? b : 0, recv, b,
                    [=, this](const void* hs, void* hr) {
                      return comm_->HostBroadcast(is_root ? hs : hr, hr, count, type, root, nullptr);
                    });
}

Status CudaRank::Send(const void* send, size_t count, tsrDataType_t type, int peer, tsrStream_t stream) {
  auto dt = static_cast<DType>(type);
  if (!IsValid(dt) || peer < 0 || peer >= comm_->size_ || peer == comm_->rank_)
    return Host([=, this] { return comm_->HostSend(send, count, type, peer, nullptr); });
  size_t b = count * DTypeSize(dt);
  TSR_RETURN_IF_ERROR(Fail("send", CheckBuffers("send", send, b, nullptr, 0, stream)));
  if (stream == nullptr) return Host([=, this] { return comm_->HostSend(send, count, type, peer, nullptr); });
  if (!hybrid_) {
    TSR_RETURN_IF_ERROR(Direct());
    return CclCall("Send", ccl_->lib().Send(send, count, CclDataType(dt), peer, ccl_->handle(), stream));
  }
  return StagedCall("send", stream, send, b, nullptr, 0,
                    [=, this](const void* hs, void*) { return comm_->HostSend(hs, count, type, peer, nullptr); });
}

Status CudaRank::Recv(void* recv, size_t count, tsrDataType_t type, int peer, tsrStream_t stream) {
  auto dt = static_cast<DType>(type);
  if (!IsValid(dt) || peer < 0 || peer >= comm_->size_ || peer == comm_->rank_)
    return Host([=, this] { return comm_->HostRecv(recv, count, type, peer, nullptr); });
  size_t b = count * DTypeSize(dt);
  TSR_RETURN_IF_ERROR(Fail("recv", CheckBuffers("recv", nullptr, 0, recv, b, stream)));
  if (stream == nullptr) return Host([=, this] { return comm_->HostRecv(recv, count, type, peer, nullptr); });
  if (!hybrid_) {
    TSR_RETURN_IF_ERROR(Direct());
    return CclCall("Recv", ccl_->lib().Recv(recv, count, CclDataType(dt), peer, ccl_->handle(), stream));
  }
  return StagedCall("recv", stream, nullptr, 0, recv, b,
                    [=, this](const void*, void* hr) { return comm_->HostRecv(hr, count, type, peer, nullptr); });
}

Status CudaRank::Barrier() {
  return Host([this] { return comm_->HostBarrier(); });
}

void CudaRank::Abort() {
  if (ccl_) ccl_->Abort();
  aborted_.store(true, std::memory_order_relaxed);  // a worker waiting for a staged input gives up
  {
    std::lock_guard<std::mutex> l(mu_);
    // Device jobs still queued are skipped (their streams released at once); waits for room end.
    if (async_error_.ok()) async_error_ = RemoteError("the communicator was aborted (tsrCommAbort)");
  }
  cv_.notify_all();
  done_cv_.notify_all();
}

Status CudaRank::AsyncError() {
  {
    std::lock_guard<std::mutex> l(mu_);
    if (!async_error_.ok()) return async_error_;
  }
  if (ccl_) return ccl_->AsyncError();
  return Status::Ok();
}

Status CudaRank::Group(const std::vector<P2POp>& ops) {
  if (ops.empty()) return Status::Ok();
  const tsrStream_t stream = ops.front().stream;
  std::vector<size_t> bytes(ops.size());
  bool bad = false;
  for (size_t i = 0; i < ops.size(); ++i) {
    const P2POp& op = ops[i];
    auto dt = static_cast<DType>(op.type);
    if (!IsValid(dt) || op.peer < 0 || op.peer >= comm_->size_) bad = true;  // the host path names it
    if (op.stream != stream)
      return Fail("group", InvalidArgument(fmt::format("group: {} #{} is on stream {} but the group's first call on "
                                                       "this communicator is on stream {}: use one stream",
                                                       op.is_send ? "send" : "recv", i, op.stream, stream)));
  }
  if (bad) return Host([ops, this] { return comm_->HostGroup(ops); });  // names the bad argument
  if (stream == nullptr) {
    for (const P2POp& op : ops)
      TSR_RETURN_IF_ERROR(Fail("group", CheckBuffers("group", op.is_send ? op.send : nullptr, 0,
                                                     op.is_send ? nullptr : op.recv, 0, nullptr)));
    return Host([ops, this] { return comm_->HostGroup(ops); });
  }
  size_t sb = 0, rb = 0;
  for (size_t i = 0; i < ops.size(); ++i) {
    const P2POp& op = ops[i];
    bytes[i] = op.count * DTypeSize(static_cast<DType>(op.type));
    TSR_RETURN_IF_ERROR(Fail("group", CheckBuffers(op.is_send ? "send (group)" : "recv (group)",
                                                   op.is_send ? op.send : nullptr, op.is_send ? bytes[i] : 0,
                                                   op.is_send ? nullptr : op.recv, op.is_send ? 0 : bytes[i], stream)));
    (op.is_send ? sb : rb) += bytes[i];
  }
  if (!hybrid_) {
    // A world of one CUDA island: the CCL's own group, on the caller's stream.
    TSR_RETURN_IF_ERROR(Direct());
    CclLibrary& lib = ccl_->lib();
    Status s = lib.Check(lib.GroupStart(), "GroupStart");
    if (!s.ok()) {
      ccl_->MarkFailed();
      return comm_->GuardFn("group", [&] { return s; });
    }
    for (const P2POp& op : ops) {
      const int t = CclDataType(static_cast<DType>(op.type));
      const int r = op.is_send ? lib.Send(op.send, op.count, t, op.peer, ccl_->handle(), stream)
                               : lib.Recv(op.recv, op.count, t, op.peer, ccl_->handle(), stream);
      if (s.ok()) s = lib.Check(r, op.is_send ? "Send (group)" : "Recv (group)");
    }
    const int end = lib.GroupEnd();  // always closes the CCL's group, even after an error inside it
    if (!s.ok()) {
      ccl_->MarkFailed();
      return comm_->GuardFn("group", [&] { return s; });
    }
    return CclCall("GroupEnd", end);
  }
  std::byte *hin, *hout;
  TSR_RETURN_IF_ERROR(Fail("group", StagingFor(sb, rb, &hin, &hout)));
  // Every send buffer down, the host group on staged copies, every receive back up.
  std::vector<Part> parts(1);
  std::vector<P2POp> host = ops;
  size_t so = 0, ro = 0;
  for (size_t i = 0; i < ops.size(); ++i) {
    host[i].stream = nullptr;
    if (ops[i].is_send) {
      host[i].send = hin + so;
      parts[0].down.push_back({hin + so, ops[i].send, bytes[i]});
      so += bytes[i];
    } else {
      host[i].recv = hout + ro;
      parts[0].up.push_back({ops[i].recv, hout + ro, bytes[i]});
      ro += bytes[i];
    }
  }
  parts[0].host = [this, host = std::move(host)] { return comm_->HostGroup(host); };  // records its failures
  return SubmitStaged("group", stream, std::move(parts));
}

Status CudaRank::AllToAllv(const void* send, const size_t* sendcounts, const size_t* sdispls, void* recv,
                           const size_t* recvcounts, const size_t* rdispls, tsrDataType_t type, tsrStream_t stream) {
  auto dt = static_cast<DType>(type);
  const int W = comm_->size_;
  if (!IsValid(dt) || sendcounts == nullptr || sdispls == nullptr || recvcounts == nullptr || rdispls == nullptr)
    return Host([=, this] {  // names the bad argument
      return comm_->HostAllToAllv(send, sendcounts, sdispls, recv, recvcounts, rdispls, type);
    });
  const std::vector<size_t> sc(sendcounts, sendcounts + W), sd(sdispls, sdispls + W), rc(recvcounts, recvcounts + W),
      rd(rdispls, rdispls + W);
  const size_t esz = DTypeSize(dt);
  size_t sext = 0, rext = 0;
  for (int p = 0; p < W; ++p) {
    if (sd[p] > SIZE_MAX / esz || rd[p] > SIZE_MAX / esz || sc[p] > SIZE_MAX / esz - sd[p] ||
        rc[p] > SIZE_MAX / esz - rd[p])
      return Fail("alltoall", InvalidArgument(fmt::format("alltoallv: count + displacement of rank {} overflows", p)));
    if (sc[p] > 0) sext = std::max(sext, sd[p] + sc[p]);
    if (rc[p] > 0) rext = std::max(rext, rd[p] + rc[p]);
  }
  TSR_RETURN_IF_ERROR(Fail("alltoall", CheckBuffers("alltoallv", sext > 0 ? send : nullptr, sext * esz,
                                                    rext > 0 ? recv : nullptr, rext * esz, stream)));
  auto host_call = [=, this](const void* hs, void* hr) {
    return comm_->HostAllToAllv(hs, sc.data(), sd.data(), hr, rc.data(), rd.data(), type);
  };
  if (stream == nullptr) return Host([=] { return host_call(send, recv); });
  if (!hybrid_) {
    TSR_RETURN_IF_ERROR(Direct());
    if (sc[comm_->rank_] != rc[comm_->rank_])
      return Fail("alltoall", InvalidArgument(fmt::format("alltoallv: rank {} sends {} element(s) to itself but "
                                                          "receives {}",
                                                          comm_->rank_, sc[comm_->rank_], rc[comm_->rank_])));
    CclLibrary& lib = ccl_->lib();
    const int t = CclDataType(dt);
    Status s = lib.Check(lib.GroupStart(), "GroupStart");
    if (!s.ok()) {
      ccl_->MarkFailed();
      return comm_->GuardFn("alltoall", [&] { return s; });
    }
    for (int p = 0; p < W; ++p) {
      const auto* sp = static_cast<const std::byte*>(send) + sd[p] * esz;
      auto* rp = static_cast<std::byte*>(recv) + rd[p] * esz;
      if (s.ok() && sc[p] > 0) s = lib.Check(lib.Send(sp, sc[p], t, p, ccl_->handle(), stream), "Send (alltoall)");
      if (s.ok() && rc[p] > 0) s = lib.Check(lib.Recv(rp, rc[p], t, p, ccl_->handle(), stream), "Recv (alltoall)");
    }
    const int end = lib.GroupEnd();
    if (!s.ok()) {
      ccl_->MarkFailed();
      return comm_->GuardFn("alltoall", [&] { return s; });
    }
    return CclCall("GroupEnd (alltoall)", end);
  }
  std::byte *hin, *hout;
  TSR_RETURN_IF_ERROR(Fail("alltoall", StagingFor(sext * esz, rext * esz, &hin, &hout)));
  // The receive extent goes down too, so that the gaps between the blocks keep their bytes when the whole
  // extent goes back up.
  std::vector<Part> parts(1);
  parts[0].down = {{hin, send, sext * esz}, {hout, recv, rext * esz}};
  parts[0].up = {{recv, hout, rext * esz}};
  parts[0].host = [hin, hout, host_call] { return host_call(hin, hout); };
  return SubmitStaged("alltoall", stream, std::move(parts));
}

}  // namespace tessera::comm
