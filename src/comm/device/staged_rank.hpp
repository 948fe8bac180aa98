// comm/device/staged_rank.hpp — the StagedRank class (the staged rank: the DeviceRank of every device
// family whose runtime row lacks the device bridge), shared by staged_rank.cpp (set-up, the collectives' entry points;
// its first lines describe the design) and staged_rank_hybrid.cpp (the island's library in a hybrid world, and the
// executor of staged plans, staged_plan.hpp, on the caller's thread).
#pragma once

#include <fmt/format.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "comm/ccl/ccl.hpp"
#include "comm/comm.hpp"
#include "comm/device/device.hpp"
#include "comm/device/island_ccl.hpp"
#include "comm/device/ring_ops.hpp"
#include "comm/device/staged_plan.hpp"
#include "comm/runtime/runtime.hpp"
#include "common/vendor.hpp"

namespace tessera::comm {

class StagedRank final : public DeviceRank, private StagedExecutor {
 public:
  StagedRank(std::shared_ptr<DeviceRuntime> rt, DeviceName name) : rt_(std::move(rt)), name_(name) {}
  ~StagedRank() override;
  Status Attach(Comm* comm) override;
  std::string Describe() const override;
  void* CclHandle() const override { return ccl_ ? ccl_->handle() : nullptr; }

  Status AllReduce(const void* send, void* recv, size_t count, tsrDataType_t type, tsrRedOp_t op,
                   tsrStream_t stream) override;
  Status ReduceScatter(const void* send, void* recv, size_t recvcount, tsrDataType_t type, tsrRedOp_t op,
                       tsrStream_t stream) override;
  Status AllGather(const void* send, void* recv, size_t sendcount, tsrDataType_t type, tsrStream_t stream) override;
  Status Broadcast(const void* send, void* recv, size_t count, tsrDataType_t type, int root,
                   tsrStream_t stream) override;
  Status Send(const void* send, size_t count, tsrDataType_t type, int peer, tsrStream_t stream) override;
  Status Recv(void* recv, size_t count, tsrDataType_t type, int peer, tsrStream_t stream) override;
  Status Barrier() override { return host_->HostBarrier(); }
  Status Group(const std::vector<P2POp>& ops) override;
  Status AllToAllv(const void* send, const size_t* sendcounts, const size_t* sdispls, void* recv,
                   const size_t* recvcounts, const size_t* rdispls, tsrDataType_t type, tsrStream_t stream) override;
  void Abort() override {
    if (ccl_) ccl_->Abort();
  }
  Status AsyncError() override { return ccl_ && !ccl_->aborted() ? ccl_->AsyncError() : Status::Ok(); }
  std::string TraceLine() const override {
    return fmt::format(
        "device {} down {} up {} library_calls {} island_calls {} staged_calls {} copy_bridge_calls {} "
        "copy_bridge_sync_copies {}",
        name_.ToString(), down_bytes_, up_bytes_, ccl_calls_ + (plan_ ? plan_->library_calls() : 0), island_calls_,
        staged_calls_, copy_calls_, copy_ops_ ? copy_ops_->sync_copies() : 0);
  }

 private:
  // A device range and where it sits in the pinned staging (offset into the input or the output buffer).
  struct Span {
    const void* dev;
    size_t host_off;
    size_t bytes;
  };
  // Device memory of this rank's device when a stream is given, not device memory when it is NULL. Failures are
  // recorded (Guarded), so the other ranks fail too.
  Status CheckBuffers(const char* what, const void* send, size_t send_bytes, const void* recv, size_t recv_bytes,
                      tsrStream_t stream);
  Status CheckOne(const char* which, const void* p, size_t bytes, tsrStream_t stream);
  // One staged call (see the top of the file): `down` into the input staging, `host` on (input, output) staging,
  // `up` from the output staging. `in_bytes` / `out_bytes`: the staging each side needs.
  Status Staged(const char* what, tsrStream_t stream, const std::vector<Span>& down, size_t in_bytes,
                const std::vector<Span>& up, size_t out_bytes,
                const std::function<Status(std::byte* in, std::byte* out)>& host);
  // A copy on `stream`: asynchronous where both addresses meet the row's alignment (DeviceRuntime::AsyncCopyAligned),
  // else synchronous after the stream has drained (*drained says whether it has).
  Status CopyOn(DeviceRuntime::Stream stream, void* dst, const void* src, size_t bytes, CopyKind kind, bool* drained);
  Status Grow(std::byte** buf, size_t* cap, size_t bytes);
  // Whether a world-of-one-island call goes to the CCL: a reduction of (dt, op), or a data movement of dt.
  bool CclTakes(DType dt) const { return ccl_ && ccl_->lib().Supports(dt).ok(); }
  bool CclTakes(DType dt, RedOp op) const { return ccl_ && ccl_->lib().SupportsReduce(dt, op).ok(); }
  Status OnCcl(const char* what, const char* call, const std::function<int()>& run);

  // ---- hybrid world: the staged plan (staged_plan.hpp), run here on the caller's thread ----
  // The island's library in a hybrid world: every rank of the island loads it or none uses it.
  Status AttachIslandLibrary();
  // Whether a hybrid call of `kind` on (dt, op) runs its island phases on the library; logs once why not.
  bool IslandTakes(CollKind kind, DType dt, RedOp op);
  Status OnIsland(const std::function<Status()>& run);  // one island call (the staged plan's Island*), counted
  // StagedExecutor, where the runtime has only events: the parts double-buffered on the caller's thread (part k's
  // `pre` and copies down queued on the caller's stream, their end recorded in down_ev_[k % 2], for parts 0 and 1
  // first; then per part: its copies down waited for, its host step, its copies up and `post` queued, and part
  // k + 2's device work queued), so part k + 1 goes down while part k crosses the bridge. Returns with the last
  // copies up in flight; the next call that reuses the staging waits for them (up_done_).
  Status Staging(const char* what, size_t in_bytes, size_t out_bytes, std::byte** in, std::byte** out) override;
  Result<std::byte*> Scratch(const char* what, size_t bytes) override;
  Status CopyOnStream(DeviceRuntime::Stream s, void* dst, const void* src, size_t bytes) override;
  Status Run(const char* what, tsrStream_t stream, std::vector<StagedPart> parts) override;
  // Waits for the previous staged call's copies up (the staging is about to be reused), and grows the staging.
  Status ReuseStaging(size_t in_bytes, size_t out_bytes);
  // The copies up of a call are queued on `s`: the next call that reuses the staging waits for them (up_done_).
  Status MarkUp(DeviceRuntime::Stream s);
  Status Ccl(const char* call, int result);

  // ---- hybrid world: the copy bridge (Island::copy_only, TESSERA_COPY_BRIDGE=on), staged_rank_hybrid.cpp ----
  // Registers the rings of every link to another island with the runtime (RuntimeRingOps without kernels).
  Status AttachCopyBridge();
  // Drains and frees what AttachCopyBridge made (all of it, or what it made before it failed); unregisters the rings.
  void ReleaseCopyBridge();
  // Whether a call of `kind` on `dt` takes the copy bridge: a reduction of a floating type (the world gives this
  // island no folds then), or a data movement (allgather, broadcast: nothing to fold).
  bool CopyBridgeTakes(CollKind kind, DType dt) const;
  // One call on device memory over the copy bridge: once the caller's stream has reached it, the hierarchical algorithm
  // with its bridge steps on copy_ops_, on this thread (an allreduce as one collective per chunk of the world's cut);
  // returns when its copies are done (host-synchronous, as the staged calls). `send` is the root's input for broadcast
  // (recv elsewhere), `count` the per-rank count of reduce-scatter and allgather.
  Status CopyBridgeCall(CollKind kind, const char* what, const void* send, void* recv, size_t count, DType dt, RedOp op,
                        int root, tsrStream_t stream);

  std::shared_ptr<DeviceRuntime> rt_;
  DeviceName name_;
  HostPath* host_ = nullptr;
  HostPath::Shape shape_;
  std::unique_ptr<CclComm> ccl_;  // world of one island
  std::mutex mu_;                 // one staged call at a time (they share the staging)
  std::byte *in_ = nullptr, *out_ = nullptr;
  size_t in_cap_ = 0, out_cap_ = 0;
  DeviceRuntime::Event up_done_ = nullptr;  // recorded after the last staged call's up-copies
  bool up_pending_ = false;
  bool island_lib_ = false;   // hybrid world: ccl_ runs the island phases
  std::byte* dev_ = nullptr;  // device scratch of island calls
  size_t dev_cap_ = 0;
  DeviceRuntime::Event down_ev_[2] = {};  // part k's copies down recorded in down_ev_[k % 2]
  IslandHalf half_ = IslandHalf::kWiden;  // how the island's library reduces 16-bit data (AgreeIslandHalf)
  std::unique_ptr<StagedPlan> plan_;      // hybrid world's staged calls, run by this rank (Run)
  IslandCclGate gate_;                    // hybrid world: which calls take the island's library
  // TESSERA_LINK_TRACE: bytes staged each way, calls to the library, island calls, staged calls.
  uint64_t down_bytes_ = 0, up_bytes_ = 0, ccl_calls_ = 0, island_calls_ = 0, staged_calls_ = 0;
  // TESSERA_DEVICE_TRACE: one row per part of a staged plan run here (Run); runs_ numbers the runs.
  DeviceTrace trace_;
  uint64_t runs_ = 0;
  // The copy bridge: the ring copies, their two queues (device to the rings, the rings to the device), the event the
  // caller's stream records at a call, its calls (TESSERA_LINK_TRACE) and how many of its links are relayed.
  std::unique_ptr<RuntimeRingOps> copy_ops_;
  DeviceRuntime::Stream copy_q_[2] = {};
  DeviceRuntime::Event copy_in_ = nullptr;
  uint64_t copy_calls_ = 0;
  int relayed_links_ = 0;
};

}  // namespace tessera::comm
