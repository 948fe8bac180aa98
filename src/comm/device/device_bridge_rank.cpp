// comm/device/device_bridge_rank: the device rank of a rank whose runtime row has the device bridge (see device.hpp;
// comm/runtime HasDeviceBridge: mapped host memory and registration, stream write / wait value and Tessera's
// kernels — the cuda row today). Every device call goes through the row's DeviceRuntime; no vendor header. Modes:
//
//  * World of one device island: every collective on device memory is one call into the island's CCL
//    (NCCL) on the caller's stream — nothing else happens on the way, so the cost over calling NCCL
//    directly is the argument checks.
//  * Hybrid world (several islands): collectives on device memory cross the bridge, in one of
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
//      chunk i, and copies chunk i back as soon as it is done. The parts of the island phases and of a staged
//      allreduce are the staged plan's (staged_plan.hpp), which StagedRank runs on the caller's thread where the
//      runtime has only events; this rank is that plan's executor where it has stream memory operations.
//    - The device bridge (allreduce of floating types, island of one rank, bridge on shm: see
//      Comm::DeviceBridgeEligible): the worker drives copy engines straight into the shm rings and folds
//      on the GPU, so it does make CUDA calls (an event recorded on the caller's stream at submission
//      orders its copies).
//    A failure is recorded, announced to the other ranks through the store (the communicator's Guard),
//    the done flag is still raised so the caller's stream never hangs, and the error is returned by the
//    next call on this communicator. Jobs run in submission order; one queued on another stream than the
//    one before first waits for that one's end (they share the staging buffers).
//    Host-memory calls (stream NULL) go through the same worker queue, in order, and wait.
// Streams, events and the flags are created in Attach, once per communicator. Staging grows on the caller's
// thread when a larger call comes and is kept; no buffer is freed before the communicator is (freeing pinned memory
// would synchronize the device against a stream waiting for the bridge).
#include "comm/device/device_bridge_rank.hpp"

#include <fmt/format.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "comm/device/island_ccl.hpp"
#include "comm/reduce/reduce.hpp"
#include "common/env.hpp"
#include "common/log.hpp"

namespace tessera::comm {

Result<std::unique_ptr<DeviceRank>> OpenDeviceBridgeRank(const DeviceName& device) {
  TSR_ASSIGN_OR_RETURN(auto dev, device_bridge::Device::Open(device));
  return std::unique_ptr<DeviceRank>(new DeviceBridgeRank(std::move(dev)));
}

Status DeviceBridgeRank::Attach(Comm* comm) {
  host_ = &comm->host_path();
  shape_ = host_->WorldShape();
  hybrid_ = shape_.islands > 1;
  if (!hybrid_) {
    // World of one island: the island's CCL, on the caller's stream.
    TSR_ASSIGN_OR_RETURN(ccl_, OpenWorldCcl(host_->Store(), shape_, dev_->device()));
    if (const NcclCalls* raw = ccl_->lib().nccl()) {  // the lean path: an NCCL-shaped library's own AllReduce
      const CclLibrary& lib = ccl_->lib();
      direct_.call = raw->AllReduce;
      direct_.handle = ccl_->handle();
      for (int t = 0; t < static_cast<int>(DType::kCount); ++t) {
        direct_.ccl_type[t] = static_cast<int8_t>(lib.DataType(static_cast<DType>(t)));
        direct_.esz[t] = direct_.ccl_type[t] < 0 ? 0 : static_cast<uint8_t>(DTypeSize(static_cast<DType>(t)));
      }
      for (int o = 0; o < static_cast<int>(RedOp::kCount); ++o)
        direct_.ccl_op[o] = static_cast<int8_t>(lib.Op(ccl_->Op(static_cast<RedOp>(o))));
    }
    direct_.owner = this;
    direct_.report = [](void* self, int r) { return static_cast<DeviceBridgeRank*>(self)->CclCall("AllReduce", r); };
    return WarmUp();
  }
  trace_.Open(shape_.rank,
              "ticket submitted_us started_us ran_us copied_us send_ops send_mean_us fold_ops fold_mean_us");
  DeviceRuntime& rt = dev_->rt();
  TSR_ASSIGN_OR_RETURN(d2h_, rt.StreamCreate());
  TSR_ASSIGN_OR_RETURN(h2d_, rt.StreamCreate());
  TSR_ASSIGN_OR_RETURN(tail_ev_, rt.EventCreate());
  for (auto& e : copies_ev_) {
    TSR_ASSIGN_OR_RETURN(e, rt.EventCreate());
  }
  TSR_RETURN_IF_ERROR(in_flags_.Allocate(rt, kInFlags));
  for (auto& e : in_ev_) {
    TSR_ASSIGN_OR_RETURN(e, rt.EventCreate());
  }
  if (host_->DeviceBridgeFor(DType::kFloat32)) {
    // The host rings of every link to another island: shm inboxes on this host, a TcpRelay's otherwise.
    TSR_ASSIGN_OR_RETURN(std::vector<HostPath::BridgeRings> links, host_->DeviceBridgeRings());
    for (const auto& l : links) {
      relayed_links_ += l.relayed ? 1 : 0;
      direct_links_ += l.direct ? 1 : 0;
    }
    TSR_ASSIGN_OR_RETURN(size_t piece, DevicePieceBytes());
    auto ops = RuntimeRingOps::Create(rt, d2h_, h2d_, links, shape_.timeout, piece);
    if (!ops.ok()) return ops.status().WithContext(fmt::format("rank {}: setting up the device bridge", shape_.rank));
    ring_ops_ = std::move(ops).value();
    ring_ops_->Trace(trace_.on());
  }
  plan_ = std::make_unique<StagedPlan>(rt, host_, shape_, static_cast<StagedExecutor*>(this));
  if (shape_.island_size > 1) {
    const DeviceFamily& family = *dev_->device().family;
    TSR_ASSIGN_OR_RETURN(island_ccl_, OpenIslandCcl(host_->Store(), shape_, family.ccl, family.label));
    if (island_ccl_) {
      const Status widen = rt.WidenSupport();
      TSR_ASSIGN_OR_RETURN(half_,
                           AgreeIslandHalf(host_->Store(), shape_, widen.ok() ? "" : widen.message(), family.label));
      plan_->SetIsland(island_ccl_.get(), half_);
    }
  }
  worker_ = std::thread([this] { WorkerLoop(); });
  return Status::Ok();
}

DeviceBridgeRank::~DeviceBridgeRank() {
  if (worker_.joinable()) {
    {
      std::lock_guard<std::mutex> l(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    worker_.join();
  }
  DeviceRuntime& rt = dev_->rt();
  if (d2h_) (void)rt.StreamSynchronize(d2h_);
  if (h2d_) (void)rt.StreamSynchronize(h2d_);
  trace_.Write();
  ring_ops_.reset();  // unregisters the rings while they are still mapped
  if (tail_ev_) (void)rt.EventDestroy(tail_ev_);
  for (auto e : copies_ev_)
    if (e) (void)rt.EventDestroy(e);
  for (auto e : in_ev_)
    if (e) (void)rt.EventDestroy(e);
  if (d2h_) (void)rt.StreamDestroy(d2h_);
  if (h2d_) (void)rt.StreamDestroy(h2d_);
  if (ccl_ && host_ && host_->HasFailed()) ccl_->MarkFailed();
  ccl_.reset();
  if (island_ccl_ && host_ && host_->HasFailed()) island_ccl_->MarkFailed();
  island_ccl_.reset();
  if (island_dev_) (void)rt.Free(island_dev_);
  for (void* p : retired_dev_) (void)rt.Free(p);
}

std::string DeviceBridgeRank::Describe() const {
  if (ccl_)
    return fmt::format("{} ({}), {} {} on the caller's stream", dev_->spec(), dev_->name(), ccl_->lib().name(),
                       ccl_->lib().version());
  std::string bridge = "pinned staging";
  if (ring_ops_)
    bridge = fmt::format(
        "copy engines straight into the shm rings{}{}, folds on the device (floating types)",
        relayed_links_ > 0
            ? fmt::format(" ({} link{} relayed through host rings)", relayed_links_, relayed_links_ == 1 ? "" : "s")
            : std::string(),
        direct_links_ > 0 ? fmt::format(" ({} link{} sending from and receiving into {} memory, no ring)",
                                        direct_links_, direct_links_ == 1 ? "" : "s", dev_->rt().name())
                          : std::string());
  const std::string island = island_ccl_ ? fmt::format("; {} {} runs the island phases, only shards cross the bridge",
                                                       island_ccl_->lib().name(), island_ccl_->lib().version())
                                         : std::string();
  return fmt::format("{} ({}), path to the bridge: {}, stream wait: {}{}", dev_->spec(), dev_->name(), bridge,
                     dev_->wait_mode(), island);
}

Status DeviceBridgeRank::CheckBuffers(const char* what, const void* send, size_t send_bytes, const void* recv,
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

// NCCL's first collective on a communicator does not return until the caller's stream has drained, while
// every later call returns at once (bench/gpu/first_call.cu; figures in
// bench/results/log/2026-11-29-gpu-runs-evening.md). So the communicator
// makes that first call itself, on a stream of its own, before the application can queue work.
Status DeviceBridgeRank::WarmUp() {
  DeviceRuntime& rt = dev_->rt();
  device_bridge::Stream s = nullptr;
  device_bridge::Event done = nullptr;
  void* one = nullptr;
  auto made = [](auto& out, auto r) -> Status {
    if (!r.ok()) return r.status().WithContext("the CCL's warm-up");
    out = *r;
    return Status::Ok();
  };
  Status st = made(s, rt.StreamCreate());
  if (st.ok()) st = made(done, rt.EventCreate());
  if (st.ok()) st = made(one, rt.Malloc(sizeof(float)));
  if (st.ok()) st = rt.MemsetAsync(one, sizeof(float), 0, sizeof(float), s);
  if (st.ok())
    st = ccl_->lib().Check(ccl_->lib().AllReduce(one, one, 1, DType::kFloat32, RedOp::kSum, ccl_->handle(), s),
                           "AllReduce (warm-up at init)");
  if (st.ok()) st = rt.EventRecord(done, s);
  // Bounded: a peer that died since init must not hang this one.
  if (st.ok()) st = dev_->WaitEvent(done, shape_.timeout, "the CCL's warm-up allreduce at init");
  if (st.ok()) {
    (void)rt.Free(one);
    (void)rt.EventDestroy(done);
    (void)rt.StreamDestroy(s);
    return Status::Ok();
  }
  ccl_->MarkFailed();  // abort, not destroy; what a stuck call may still use is left alone
  return st.WithContext(
      fmt::format("rank {}: warming up island {}'s {} communicator", shape_.rank, shape_.island, ccl_->lib().name()));
}

Status DeviceBridgeRank::Direct() const { return host_->Health(); }

Status DeviceBridgeRank::CclCall(const char* what, int r) {
  Status s = ccl_->lib().Check(r, what);
  // The CCL's asynchronous error (a peer gone, a kernel fault) is polled every 128th call — at the
  // ~4 µs NCCL's own enqueue takes, about every half millisecond — so a steady loop does not pay for it
  // and an error still surfaces within a step.
  if (s.ok() && (++direct_.calls & 127) == 0) s = ccl_->AsyncError();
  if (!s.ok()) {
    ccl_->MarkFailed();
    return host_->Guarded(what, [&] { return s; });
  }
  return s;
}

Status DeviceBridgeRank::Fail(const char* what, Status s) {
  if (s.ok()) return s;
  // The communicator's state belongs to the worker thread while one runs.
  if (worker_.joinable() && std::this_thread::get_id() != worker_.get_id())
    return SubmitHost([&] { return host_->Guarded(what, [&] { return s; }); });
  return host_->Guarded(what, [&] { return s; });
}

// ---- hybrid: the worker queue ----

Status DeviceBridgeRank::SubmitDevice(const char* what, tsrStream_t stream,
                                      std::function<Status(device_bridge::Event)> run) {
  auto user = static_cast<device_bridge::Stream>(stream);
  std::unique_lock<std::mutex> l(mu_);
  if (!async_error_.ok())
    return Status(async_error_.code(),
                  fmt::format("{}: an earlier collective on this GPU rank failed: {}", what, async_error_.message()));
  // Back-pressure: at most kInEvents device jobs in flight (each owns one input event).
  if (!done_cv_.wait_for(l, shape_.timeout,
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
  if (trace_.on()) job.submitted_us = DeviceTrace::NowUs();
  job.in = in_ev_[ticket % kInEvents];
  job.ticket = ticket;
  job.copy_streams = true;
  job.run = std::move(run);
  Status s = OrderAfterPrevious(user);
  if (s.ok()) s = dev_->rt().EventRecord(job.in, user).WithContext("on the caller's stream");
  if (s.ok()) s = dev_->EnqueueWaitFlag(user, ticket);
  if (s.ok()) RecordTail(user);
  if (!s.ok()) {
    // Keep the ticket sequence whole: the worker runs a job that records this failure (through the
    // communicator's Guard, so the other ranks hear of it) and raises the flag.
    job.run = [this, s, what](device_bridge::Event) { return Fail(what, s); };
  }
  queue_.push_back(std::move(job));
  l.unlock();
  cv_.notify_all();
  return s;
}

Status DeviceBridgeRank::OrderAfterPrevious(device_bridge::Stream s) {
  if (!tail_set_ || tail_stream_ == s) return Status::Ok();
  return dev_->rt().StreamWaitEvent(s, tail_ev_).WithContext("waiting for the previous collective's stream");
}

void DeviceBridgeRank::RecordTail(device_bridge::Stream s) {
  if (dev_->rt().EventRecord(tail_ev_, s).ok()) {
    tail_stream_ = s;
    tail_set_ = true;
  } else {
    tail_set_ = false;  // the next job on another stream then orders after nothing: record the failure
  }
}

Status DeviceBridgeRank::SubmitStaged(const char* what, tsrStream_t stream, std::vector<Part> parts) {
  auto user = static_cast<device_bridge::Stream>(stream);
  std::unique_lock<std::mutex> l(mu_);
  auto earlier = [&] {
    return Status(async_error_.code(),
                  fmt::format("{}: an earlier collective on this GPU rank failed: {}", what, async_error_.message()));
  };
  if (!async_error_.ok()) return earlier();
  if (!done_cv_.wait_for(l, shape_.timeout,
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
    if (parts[i].pre) s = parts[i].pre(user);
    for (const Copy& c : parts[i].down)
      if (s.ok() && c.bytes > 0)
        s = dev_->rt()
                .MemcpyAsync(c.dst, c.bytes, c.src, c.bytes, CopyKind::kDeviceToHost, user)
                .WithContext("device to pinned staging");
    if (s.ok()) s = dev_->EnqueueWriteFlag(user, in_flags_.dev((first + i) % kInFlags), first + i);
  }
  for (uint32_t i = 0; i < n && s.ok(); ++i) {
    s = dev_->EnqueueWaitFlag(user, first + i);
    for (const Copy& c : parts[i].up)
      if (s.ok() && c.bytes > 0)
        s = dev_->rt()
                .MemcpyAsync(c.dst, c.bytes, c.src, c.bytes, CopyKind::kHostToDevice, user)
                .WithContext("pinned staging to device");
    if (s.ok() && parts[i].post) s = parts[i].post(user);
  }
  if (s.ok()) RecordTail(user);
  Job job;
  job.ticket = last;
  if (trace_.on()) job.submitted_us = DeviceTrace::NowUs();
  if (!s.ok()) {
    // Keep the ticket sequence whole: the worker records the failure and raises the done flag past it.
    job.run = [this, s, what](device_bridge::Event) { return Fail(what, s); };
  } else {
    job.run = [this, what, first, last, parts = std::move(parts)](device_bridge::Event) -> Status {
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

Status DeviceBridgeRank::WaitInput(uint32_t ticket, const char* what) {
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
    if (std::chrono::steady_clock::now() - t0 > shape_.timeout)
      return Fail(what, Timeout(fmt::format("{}: the device ({}) did not copy the input to the host within "
                                            "TESSERA_TIMEOUT ({} ms): the stream the call was queued on is "
                                            "blocked (waiting for an event or a kernel that never ends?)",
                                            what, dev_->spec(), shape_.timeout.count())));
    std::this_thread::sleep_for(std::chrono::microseconds(20));
  }
}

Status DeviceBridgeRank::StagedCall(const char* what, tsrStream_t stream, const void* send, size_t send_bytes,
                                    void* recv, size_t recv_bytes,
                                    std::function<Status(const void*, void*)> host_call) {
  std::byte *hin, *hout;
  TSR_RETURN_IF_ERROR(Fail(what, StagingFor(send_bytes, recv_bytes, &hin, &hout)));
  std::vector<Part> parts(1);
  if (send_bytes > 0) parts[0].down.push_back({hin, send, send_bytes});
  if (recv_bytes > 0) parts[0].up.push_back({recv, hout, recv_bytes});
  parts[0].host = [hin, hout, host_call = std::move(host_call)] { return host_call(hin, hout); };
  return SubmitStaged(what, stream, std::move(parts));
}

Status DeviceBridgeRank::SubmitHost(std::function<Status()> run) {
  auto p = std::make_shared<std::promise<Status>>();
  auto f = p->get_future();
  {
    std::lock_guard<std::mutex> l(mu_);
    Job job;
    job.result = p;
    job.run = [run = std::move(run)](device_bridge::Event) { return run(); };
    queue_.push_back(std::move(job));
  }
  cv_.notify_all();
  return f.get();
}

void DeviceBridgeRank::WorkerLoop() {
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
    const double started = trace_.on() ? DeviceTrace::NowUs() : 0;
    if (s.ok()) s = job.run(job.in);
    if (job.result) {
      job.result->set_value(s);
      continue;
    }
    const double ran = trace_.on() ? DeviceTrace::NowUs() : 0;
    // Device job: (device bridge) make sure no copy of it is still in flight, then release the caller's stream.
    if (job.copy_streams) {
      Status c = CopiesDone();
      if (s.ok() && !c.ok()) s = host_->Guarded("the device bridge", [&] { return c; });  // the peers hear of it
    }
    if (trace_.on()) {
      // The job's device operations per queue (copies to the rings; copies from them and folds), and their mean time
      // from being queued to being seen done.
      auto [send, fold] = ring_ops_ ? ring_ops_->TakeStats()
                                    : std::make_pair(RuntimeRingOps::QueueStats{}, RuntimeRingOps::QueueStats{});
      const auto mean = [](const RuntimeRingOps::QueueStats& q) { return q.ops == 0 ? 0.0 : q.sum_us / q.ops; };
      trace_.Add(fmt::format("{} {:.1f} {:.1f} {:.1f} {:.1f} {} {:.1f} {} {:.1f}", job.ticket, job.submitted_us,
                             started, ran, DeviceTrace::NowUs(), send.ops, mean(send), fold.ops, mean(fold)));
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

// Bounded, unlike a stream synchronize, which waited forever when the copies could not run: under NVIDIA MPS
// the bridge's streams shared a hardware work queue with the caller's stream, which waits (cuStreamWaitValue32)
// for this very job (the hybrid LM hung so on the H200). Raising the flag after the timeout releases that
// stream, so the copies behind it drain before the communicator is destroyed.
Status DeviceBridgeRank::CopiesDone() {
  device_bridge::Stream streams[2] = {d2h_, h2d_};
  for (int i = 0; i < 2; ++i) {
    TSR_RETURN_IF_ERROR(dev_->rt().EventRecord(copies_ev_[i], streams[i]).WithContext("the bridge's copies"));
    Status w = dev_->WaitEvent(copies_ev_[i], shape_.timeout, "the device bridge's copies");
    if (!w.ok() && w.code() != Code::kTimeout) return w;  // a CUDA error: its own message
    if (!w.ok())
      return Timeout(fmt::format(
          "{}; a copy stream that does not move while its collective waits may share a hardware work queue with "
          "the stream waiting for it: under NVIDIA MPS give each process more queues with "
          "CUDA_DEVICE_MAX_CONNECTIONS=32 before CUDA starts (tessera run does so for --sm-share islands), or "
          "use TESSERA_DEVICE_BRIDGE=staged",
          w.message()));
  }
  return Status::Ok();
}

Status DeviceBridgeRank::BridgeCall(device_bridge::Event in, CollKind kind, const char* what, const std::byte* send,
                                    std::byte* recv, size_t count, DType dt, RedOp op, int root, void* scratch,
                                    size_t scratch_bytes) {
  return host_->Guarded(what, [&]() -> Status {
    ring_ops_->Use(scratch, scratch_bytes);
    TSR_RETURN_IF_ERROR(dev_->rt().StreamWaitEvent(d2h_, in).WithContext("the bridge's input"));
    TSR_RETURN_IF_ERROR(dev_->rt().StreamWaitEvent(h2d_, in).WithContext("the bridge's input"));
    return host_->DeviceBridgeCollective(kind, send, recv, count, dt, op, root, ring_ops_.get());
  });
}

Result<void*> DeviceBridgeRank::ReduceScratch(const char* what, CollKind kind, size_t count, DType dt, size_t* bytes) {
  *bytes = host_->DeviceScratchBytes(kind, count, dt);
  auto grown = ring_ops_->Grow(*bytes);
  if (!grown.ok()) return Fail(what, grown.status());
  return grown;
}

Status DeviceBridgeRank::StagingFor(size_t send_bytes, size_t recv_bytes, std::byte** hin, std::byte** hout) {
  TSR_ASSIGN_OR_RETURN(*hin, whole_in_.Get(dev_->rt(), send_bytes));
  TSR_ASSIGN_OR_RETURN(*hout, whole_out_.Get(dev_->rt(), recv_bytes));
  return Status::Ok();
}

}  // namespace tessera::comm
