// comm/device/device_bridge_rank.hpp — the DeviceBridgeRank class (the device rank of a rank whose runtime row has the
// device bridge: CUDA today; comm/runtime HasDeviceBridge), written on the runtime row alone and shared by
// device_bridge_rank.cpp (set-up, the worker queue, staged jobs, the device bridge) and device_bridge_collectives.cpp
// (the collectives' entry points). The design is described at the top of device_bridge_rank.cpp.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <future>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "comm/ccl/ccl.hpp"
#include "comm/comm.hpp"
#include "comm/device/device.hpp"
#include "comm/device/device_bridge_device.hpp"
#include "comm/device/island_ccl.hpp"
#include "comm/device/ring_ops.hpp"
#include "comm/device/staged_plan.hpp"

namespace tessera::comm {

class DeviceBridgeRank final : public DeviceRank, private StagedExecutor {
 public:
  explicit DeviceBridgeRank(std::unique_ptr<device_bridge::Device> dev) : dev_(std::move(dev)) {}
  ~DeviceBridgeRank() override;
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
    std::function<Status(device_bridge::Event)> run;
    device_bridge::Event in = nullptr;             // recorded on the caller's stream (device-bridge jobs)
    uint32_t ticket = 0;                           // flag value that releases the caller's stream
    bool copy_streams = false;                     // the job used d2h_/h2d_ (device bridge)
    std::shared_ptr<std::promise<Status>> result;  // host jobs: the caller waits on it
    double submitted_us = 0;                       // TESSERA_DEVICE_TRACE: when the caller queued it
  };
  // One part of a staged job (staged_plan.hpp): device work before, device -> pinned copies, the host step, pinned ->
  // device copies, device work after. Every part's `pre` is queued before any part's `post`.
  using Copy = StagedCopy;
  using Part = StagedPart;

  // Validates buffers for a call on `stream`: device memory of this device when a stream is given, host
  // memory when it is NULL.
  Status CheckBuffers(const char* what, const void* send, size_t send_bytes, const void* recv, size_t recv_bytes,
                      tsrStream_t stream);  // adds what it validates to direct_.allocs
  // Hybrid: queues a device-bridge job or a staged job (both return at once) or a host job (waits for it).
  Status SubmitDevice(const char* what, tsrStream_t stream, std::function<Status(device_bridge::Event)> run);
  Status SubmitStaged(const char* what, tsrStream_t stream, std::vector<Part> parts);
  // The common staged call: `send_bytes` from send down, host_call(staged in, staged out), `recv_bytes` up.
  Status StagedCall(const char* what, tsrStream_t stream, const void* send, size_t send_bytes, void* recv,
                    size_t recv_bytes, std::function<Status(const void*, void*)> host_call);
  // Under mu_: a job queued on `s` after one queued on another stream waits for that one's end.
  Status OrderAfterPrevious(device_bridge::Stream s);
  void RecordTail(device_bridge::Stream s);
  // Worker: waits (host memory only) until the GPU has raised the input flag of `ticket`.
  Status WaitInput(uint32_t ticket, const char* what);
  Status SubmitHost(std::function<Status()> run);
  // Runs a host-path call: on the worker (in order with device jobs) in a hybrid world, else right here.
  Status Host(std::function<Status()> run) { return hybrid_ ? SubmitHost(std::move(run)) : run(); }
  void WorkerLoop();
  // One collective on the device bridge (worker): allreduce, reduce-scatter, broadcast and allgather (run
  // on the H200; the algorithm is also tested on an emulated device, tests/comm/device_emu_worker.cpp).
  // `scratch`: device scratch reserved by the caller thread (accumulators; for reduce-scatter
  // its staged output first), null for broadcast/allgather.
  Status BridgeCall(device_bridge::Event in, CollKind kind, const char* what, const std::byte* send, std::byte* recv,
                    size_t count, DType dt, RedOp op, int root, void* scratch, size_t scratch_bytes);
  // On the caller thread: the device scratch a reducing call of `kind` needs (Comm::DeviceScratchBytes).
  Result<void*> ReduceScratch(const char* what, CollKind kind, size_t count, DType dt, size_t* bytes);
  // Whether broadcast/allgather take the device bridge: the rings are registered (ring_ops_) and this
  // island's bridge channels are all shm (what DeviceBridgeEligible says for floating types).
  bool SelectOnDevice() const { return ring_ops_ && host_->DeviceBridgeFor(DType::kFloat32); }
  // On the caller thread, before the job is queued: pinned buffers for a staged job.
  Status StagingFor(size_t send_bytes, size_t recv_bytes, std::byte** hin, std::byte** hout);
  Status Fail(const char* what, Status s);  // records s through the communicator's Guard
  Status CclCall(const char* what, int r);
  // Hybrid world, island of several devices: the island's library (island_ccl_) runs the island phases of allreduce,
  // reduce-scatter, allgather and broadcast (the staged plan's Island* calls). IslandTakes says whether a call can
  // (logging once why not).
  bool IslandTakes(CollKind kind, DType dt, RedOp op);
  // StagedExecutor, where the runtime has stream memory operations: SubmitStaged on the worker (see the top of
  // device_bridge_rank.cpp); device scratch grown on the caller's thread and never freed before the communicator.
  Status Staging(const char* what, size_t in_bytes, size_t out_bytes, std::byte** in, std::byte** out) override {
    return Fail(what, StagingFor(in_bytes, out_bytes, in, out));
  }
  Result<std::byte*> Scratch(const char* what, size_t bytes) override;
  Status CopyOnStream(DeviceRuntime::Stream s, void* dst, const void* src, size_t bytes) override;
  Status Run(const char* what, tsrStream_t stream, std::vector<StagedPart> parts) override {
    return SubmitStaged(what, stream, std::move(parts));
  }
  Status Direct() const;
  Status WarmUp();      // world of one island: the CCL's first collective, at init (see its definition)
  Status CopiesDone();  // worker: a device-bridge job's copies have finished, or TESSERA_TIMEOUT has passed

  std::unique_ptr<device_bridge::Device> dev_;
  HostPath* host_ = nullptr;  // the communicator, through the narrow interface of device.hpp
  HostPath::Shape shape_;
  bool hybrid_ = false;
  std::unique_ptr<CclComm> ccl_;         // world of one island
  std::unique_ptr<CclComm> island_ccl_;  // hybrid world, island of several GPUs whose ranks all have the library
  std::byte* island_dev_ = nullptr;      // its device scratch (shards, padded blocks)
  size_t island_dev_cap_ = 0;
  std::vector<void*> retired_dev_;        // outgrown scratch, freed with the communicator (freeing synchronizes)
  IslandCclGate gate_;                    // which calls take island_ccl_
  IslandHalf half_ = IslandHalf::kWiden;  // how island_ccl_ reduces 16-bit data (AgreeIslandHalf)
  std::unique_ptr<StagedPlan> plan_;      // hybrid world: the staged calls' parts, run here (Run)
  // The lean allreduce path of a world of one island (set up in Attach; its `call` stays null otherwise),
  // and every rank's cache of validated device allocations.
  DirectAllReduce direct_;
  // The device bridge (copy engines straight into the shm rings), when this island qualifies.
  std::unique_ptr<RuntimeRingOps> ring_ops_;
  int relayed_links_ = 0;  // of ring_ops_'s links, those that are TCP behind a TcpRelay
  int direct_links_ = 0;   // those whose channels take device memory themselves (ucx)
  // Hybrid resources (created in Attach).
  device_bridge::Stream d2h_ = nullptr, h2d_ = nullptr;  // the device bridge's copy streams
  device_bridge::Event in_ev_[kInEvents] = {};
  device_bridge::Event tail_ev_ = nullptr;  // recorded at the end of the last job queued on a stream
  device_bridge::Event copies_ev_[2] = {};  // the end of a device-bridge job's copies on d2h_ and h2d_ (CopiesDone)
  device_bridge::Stream tail_stream_ = nullptr;
  bool tail_set_ = false;
  device_bridge::MappedFlags in_flags_;
  std::atomic<bool> aborted_{false};
  device_bridge::PinnedBuffer whole_in_, whole_out_;
  std::thread worker_;
  std::mutex mu_;
  std::condition_variable cv_, done_cv_;
  std::deque<Job> queue_;
  bool stop_ = false;
  uint32_t submitted_ = 0, completed_ = 0;
  Status async_error_;
  DeviceTrace trace_;  // TESSERA_DEVICE_TRACE: one row per device job, the worker's
};

}  // namespace tessera::comm
