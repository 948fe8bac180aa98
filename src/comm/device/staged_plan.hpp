// comm/device/staged_plan.hpp — the staged plan of a hybrid world's device call, written once for both device ranks:
// a list of parts, each part's device work before its copies down (`pre`: the island library's reduce-scatter or
// gather, 16-bit data widened to f32 first), its copies down to pinned host memory, its host step (the bridge across
// the islands, or the whole host collective), its copies back up and its device work after them (`post`: the
// island library's allgather). StagedPlan builds the parts (staged_plan.cpp); a StagedExecutor runs them on the
// caller's stream. Two executors exist, chosen by the runtime's capabilities (OpenDeviceRank, HasDeviceBridge):
//   - DeviceBridgeRank's stream worker (device_bridge_rank.cpp), where the runtime has stream memory operations: the
//   caller's
//     thread queues every part's device work, copies and "input ready" / "done" flags on the stream and returns;
//     a worker thread runs the host steps as the flags rise.
//   - StagedRank's caller's thread (staged_rank.cpp), where the runtime has only events: parts double-buffered, part
//     k + 1's device work and copies down queued before part k's host step runs, an event per part.
// Either way the parts run in order, each part's host step after its copies down and before its copies up, and the
// bits of every result are the same (the same folds in the same order on the host).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

#include "comm/ccl/ccl.hpp"
#include "comm/comm.hpp"
#include "comm/device/device.hpp"
#include "comm/device/island_ccl.hpp"
#include "comm/runtime/runtime.hpp"

namespace tessera::comm {

// One copy between device memory and pinned host memory (`down`: device to host; `up`: host to device).
struct StagedCopy {
  void* dst;
  const void* src;
  size_t bytes;
};

// One part of a staged plan (see the top of the file). Every part's `pre` may be queued before any part's `post`
// (the stream worker does so), so parts never share a buffer that one's `post` writes and a later one's `pre` reads.
struct StagedPart {
  std::function<Status(DeviceRuntime::Stream)> pre;
  std::vector<StagedCopy> down;
  std::function<Status()> host;  // a host collective: guarded by itself
  std::vector<StagedCopy> up;
  std::function<Status(DeviceRuntime::Stream)> post;
};

// What a plan needs from the rank that runs it: its staging, its device scratch, its rule for a copy queued on a
// stream, and the executor. Failures of Staging and Scratch are recorded as failures of `what` (the other ranks hear
// of them); Run records its own.
class StagedExecutor {
 public:
  virtual ~StagedExecutor() = default;
  // Pinned staging of at least in_bytes and out_bytes, free for this call (earlier calls' copies no longer use it).
  virtual Status Staging(const char* what, size_t in_bytes, size_t out_bytes, std::byte** in, std::byte** out) = 0;
  // Device scratch of at least `bytes`, 256-byte aligned, free for this call's device work in stream order.
  virtual Result<std::byte*> Scratch(const char* what, size_t bytes) = 0;
  // A device-to-device copy queued on `s` inside a part's `pre` or `post` (not guarded: the executor guards those).
  virtual Status CopyOnStream(DeviceRuntime::Stream s, void* dst, const void* src, size_t bytes) = 0;
  // Runs the parts on the caller's stream, in order.
  virtual Status Run(const char* what, tsrStream_t stream, std::vector<StagedPart> parts) = 0;
};

// Builds the staged plan of a call and hands it to the executor. The island phases (the Island* calls) need the
// island's library (SetIsland); the others do not.
class StagedPlan {
 public:
  StagedPlan(DeviceRuntime& rt, HostPath* host, const HostPath::Shape& shape, StagedExecutor* exec)
      : rt_(rt), host_(host), shape_(shape), exec_(exec) {}
  // The island's library, which runs the island phases, and how it reduces 16-bit data.
  void SetIsland(CclComm* ccl, IslandHalf half) {
    ccl_ = ccl;
    half_ = half;
  }
  IslandHalf half() const { return half_; }
  uint64_t library_calls() const { return library_calls_; }

  // A staged allreduce, one part per chunk every rank of the world cuts it into (HostPath::AllReduceChunks), in place
  // in the staging; each chunk's host step is the host path's allreduce of it.
  Status AllReduce(const void* send, void* recv, size_t count, DType dt, RedOp op, tsrStream_t stream);
  // The island phases on the library (docs/architecture.md, "Islands of several devices"): the island's inputs
  // reduce-scattered (16-bit data widened to f32 on the device unless the island is native) or gathered on the
  // device, only this rank's shard staged down, across the bridge (HostPath::HostBridge) and up, and allgathered.
  // Allreduce: one part per chunk. Shards are the schedule's (Shard); the library's equal blocks are padded on the
  // device (PaddedBlocks).
  Status IslandAllReduce(const void* send, void* recv, size_t count, DType dt, RedOp op, tsrStream_t stream);
  Status IslandReduceScatter(const void* send, void* recv, size_t recvcount, DType dt, RedOp op, tsrStream_t stream);
  Status IslandAllGather(const void* send, void* recv, size_t sendcount, DType dt, tsrStream_t stream);
  Status IslandBroadcast(const void* send, void* recv, size_t count, DType dt, int root, tsrStream_t stream);

 private:
  // Device steps queued on `s`. ReduceScatterOn: the island's `in` (L elements of dt) into the library's equal blocks
  // in `pad` (widened to f32 first unless the island is native or the data is not 16-bit: whole, from and into
  // 32-byte aligned memory, CANN's rule for tensor data; `extra` holds the widened buffer and an aligned copy of an
  // unaligned input, WidenExtra bytes) and reduce-scattered into this rank's block `shard`. AllGatherOn: the
  // library's allgather of the blocks `shard` into `out` (L elements of dt), through `pad` when they are padded.
  Status ReduceScatterOn(DeviceRuntime::Stream s, const std::byte* in, size_t L, DType dt, RedOp op, std::byte* pad,
                         std::byte* extra, std::byte* shard);
  Status AllGatherOn(DeviceRuntime::Stream s, const std::byte* shard, size_t L, DType dt, std::byte* pad,
                     std::byte* out);
  size_t WidenExtra(size_t L, DType dt) const;
  // A part's host step: the bridge of a call whose island phases the library runs (IslandPhases::kDone). A native
  // island's shard (`widen`, non-empty) is first widened on the host from `native` into send[widen], exactly.
  std::function<Status()> Bridge(CollKind kind, const std::byte* send, std::byte* recv, size_t count, DType dt,
                                 RedOp op, int root, Range widen = {0, 0}, const std::byte* native = nullptr);
  Status Library(const char* call, int result);  // counts the call; a failure marks the library failed

  DeviceRuntime& rt_;
  HostPath* host_;
  HostPath::Shape shape_;
  StagedExecutor* exec_;
  CclComm* ccl_ = nullptr;
  IslandHalf half_ = IslandHalf::kWiden;
  uint64_t library_calls_ = 0;
};

}  // namespace tessera::comm
