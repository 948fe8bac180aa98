// comm/device/ring_ops: the device bridge of a device rank — DeviceOps (comm/engine.hpp) on its runtime row
// (comm/runtime: host registration, copies, events, and the row's fold/finalize kernels).
//
// The host rings of this rank's bridge channels (shm: its own inbox, and the inboxes of the peers it
// writes to; TCP: a TcpRelay's two rings, comm/transport/relay.hpp) are registered with the runtime once, when the
// communicator is made, so the GPU's copy engines move bytes straight between device memory and the rings: a message
// leaves device memory with one D2H copy into the peer's ring, and arrives with one H2D copy out of this rank's ring
// (into the destination, or into a device mirror of the ring where a kernel folds it). No CPU copy, no staging. Sends
// go on one stream (copy engine D2H), receives and folds on another (copy engine H2D + kernels), so both directions of
// the PCIe link run at once. Completion is tracked with pools of events. A link whose channels take device memory
// themselves (BridgeRings::direct: ucx where UCX registers the runtime's memory) has no rings: it gets a landing
// buffer in device memory for the bytes it folds (comm/engine_direct.cpp).
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "comm/device/device_bridge_device.hpp"
#include "comm/engine.hpp"

namespace tessera::comm {

class RuntimeRingOps final : public DeviceOps {
 public:
  // The host rings of one bridge link (HostPath::DeviceBridgeRings): `in`, where the peer's bytes arrive (this
  // rank's inbox slot, or a TCP relay's inbound ring), and `out`, where this rank's bytes leave.
  using Rings = HostPath::BridgeRings;

  // `send` and `fold` are the rank's bridge streams. Every ring is registered with the runtime, and each `in`
  // ring gets a device mirror where the rank folds. `piece`: bytes per copy (TESSERA_DEVICE_PIECE). `folds` false:
  // the copy bridge (Island::copy_only), copies only: no kernels, no mirrors (Fold and Finalize are errors).
  static Result<std::unique_ptr<RuntimeRingOps>> Create(DeviceRuntime& rt, device_bridge::Stream send,
                                                        device_bridge::Stream fold, const std::vector<Rings>& links,
                                                        std::chrono::milliseconds timeout, size_t piece,
                                                        bool folds = true);
  ~RuntimeRingOps() override;

  Status ToHost(void* host_dst, const void* dev_src, size_t bytes) override;
  Status FromHost(void* dev_dst, const void* host_src, size_t bytes) override;
  Result<void*> Mirror(const void* inbox_byte, size_t bytes) override;
  Status Fold(void* acc, const void* src, size_t n, DType dtype, DType src_type, RedOp op, bool first) override;
  Status Finalize(void* out, const void* acc, size_t n, DType dtype, RedOp op, int divisor) override;
  Status Copy(void* dev_dst, const void* dev_src, size_t bytes) override;
  Result<Ticket> Mark(Queue q) override;
  Result<bool> Done(Queue q, Ticket t) override;
  Status SendAfterFolds() override;
  Result<void*> Scratch(size_t bytes) override;
  size_t piece() const override { return piece_; }
  std::string_view memory() const override { return memory_; }
  std::pair<std::byte*, size_t> Landing(int peer) const override;
  Status CopyIn(void* dev_dst, const void* host_src, size_t bytes) override;

  // Accumulator scratch is allocated on the CALLER's thread when a call is submitted (Grow), and handed
  // to the worker with the job (Use): no allocation, and so no lock that a synchronizing application
  // thread could hold, happens while a collective runs. Smaller buffers are kept until destruction.
  Result<void*> Grow(size_t bytes);
  void Use(void* p, size_t bytes) {
    use_ = p;
    use_bytes_ = bytes;
  }
  // TESSERA_DEVICE_TRACE: with `on`, each queue counts its device operations (one per Mark) and the time from each
  // Mark to the Done that saw it finish; TakeStats hands over the counts since the last call and resets them.
  struct QueueStats {
    uint64_t ops = 0;
    double sum_us = 0;  // Mark to the Done that saw it finish, summed
  };
  void Trace(bool on) { trace_ = on; }
  // Copies made synchronously because an address missed the row's async_copy_align (CopyOnQueue), in all.
  uint64_t sync_copies() const { return sync_copies_; }
  std::pair<QueueStats, QueueStats> TakeStats() {  // {send queue, fold queue}
    auto got = std::make_pair(stats_[kSendQueue], stats_[kFoldQueue]);
    stats_[kSendQueue] = stats_[kFoldQueue] = {};
    return got;
  }

 private:
  static constexpr size_t kEvents = 64;  // per queue; more tickets in flight wait for the oldest
  explicit RuntimeRingOps(DeviceRuntime& rt) : rt_(rt) {}
  // A copy on queue `q`: asynchronous, or, where the row needs aligned addresses for that (async_copy_align) and
  // these miss it, synchronous after the queue's earlier work (the engine's Mark then sees it done at once).
  Status CopyOnQueue(Queue q, void* dst, const void* src, size_t bytes, CopyKind kind, const char* what);
  DeviceRuntime& rt_;
  device_bridge::Stream stream_[2] = {};
  std::vector<device_bridge::Event> events_[2];
  uint64_t issued_[2] = {0, 0}, done_[2] = {0, 0};
  bool trace_ = false;
  std::vector<double> marked_us_[2];  // when tracing: each event's Mark
  QueueStats stats_[2];
  uint64_t sync_copies_ = 0;
  std::vector<void*> registered_;
  struct Mirrored {
    const std::byte* ring;
    size_t bytes;
    std::byte* mirror;  // device memory, same size
  };
  std::vector<Mirrored> mirrors_;
  struct Landed {
    int peer;
    std::byte* data;  // device memory
    size_t bytes;
  };
  std::vector<Landed> landings_;  // links that take device memory (BridgeRings::direct)
  std::string memory_;            // the runtime row's name where there are such links
  void* scratch_ = nullptr;       // the largest so far (caller thread)
  size_t scratch_bytes_ = 0;
  std::vector<void*> retired_;
  void* use_ = nullptr;  // the current job's (worker thread)
  size_t use_bytes_ = 0;
  std::chrono::milliseconds timeout_{};  // set by Create: the communicator's timeout
  size_t piece_ = 1 << 20;
};

// TESSERA_DEVICE_PIECE, checked (at least 4096, a multiple of kChannelAlign): the bytes of one copy of a bridge rank;
// where it is not set, its declared default, or `fallback` when that is given (the copy bridge's own,
// kCopyBridgePiece).
Result<size_t> DevicePieceBytes(size_t fallback = 0);
// The copy bridge's piece where TESSERA_DEVICE_PIECE is not set: smaller than the device bridge's, which the copy
// bridge moved less with beside a CUDA rank on the CUDA-backed ACL shim, as it did 1 and 2 MiB (docs/devices.md).
inline constexpr size_t kCopyBridgePiece = size_t{4} << 20;

}  // namespace tessera::comm
