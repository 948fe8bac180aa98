// comm/device/device: the interface through which the communicator hands collectives of a rank whose
// island is a device island (TESSERA_DEVICE=cuda:N, npu:N, musa:N) to that device rank. The device rank
// decides, per call, between the island's vendor library on the caller's stream (a world of one island),
// the bridge to the other islands (a hybrid world), and the host path (host memory, stream NULL).
//
// Two device ranks, both written on the device-runtime table (comm/runtime) and the CCL table alone: DeviceBridgeRank
// (device_bridge_rank.cpp: a row with the device bridge's calls and Tessera's kernels, HasDeviceBridge: cuda today) and
// StagedRank (staged_rank.cpp: every other row: npu, musa; pinned staging). OpenDeviceRank picks by the row.
// Both reach their communicator only through HostPath below.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "comm/schedule.hpp"
#include "common/dtype.hpp"
#include "common/vendor.hpp"
#include "tessera/status.hpp"
#include "tessera/tessera.h"

namespace tessera::comm {

class Comm;
class DeviceOps;  // comm/engine.hpp
class StoreClient;
struct P2POp;
enum class CollKind : uint32_t;  // comm/coll_kind.hpp

// Device allocations already validated (base, size), most recent first: a pointer inside one skips the
// driver queries. (A freed and re-made allocation at the same base with a smaller size would pass
// unchecked, as it would with NCCL.)
class AllocCache {
 public:
  bool Contains(const void* p, size_t bytes) const {
    const auto at = reinterpret_cast<uintptr_t>(p);
    for (const Alloc& a : seen_)
      if (a.size > 0 && at >= a.base && at - a.base <= a.size && bytes <= a.size - (at - a.base)) return true;
    return false;
  }
  void Add(uintptr_t base, size_t size) {
    for (int i = kSize - 1; i > 0; --i) seen_[i] = seen_[i - 1];
    seen_[0] = {base, size};
  }

 private:
  static constexpr int kSize = 8;
  struct Alloc {
    uintptr_t base = 0;
    size_t size = 0;
  };
  Alloc seen_[kSize];
};

// A world of one device island: what an allreduce needs to go straight to the CCL, packed so that a taken
// call whose buffers are among the five most recent allocations reads two cache lines: the fields below
// (with the most recent allocation) and the next four allocations. It takes a call only when the stream is set, type
// and op are valid, both buffers lie in allocations the full path has validated, the communicator has not failed, and
// the call is not one of the 1 in 128 that poll the CCL's asynchronous error; everything else goes the full path
// (DeviceRank::AllReduce), and a CCL error is reported as there. Its cost against NCCL called directly:
// docs/benchmarks.md, "Current figures".
struct alignas(64) DirectAllReduce {
  static constexpr int kTypes = static_cast<int>(DType::kCount), kOps = static_cast<int>(RedOp::kCount);
  int (*call)(const void*, void*, size_t, int, int, void*, void*) = nullptr;  // the CCL's AllReduce
  void* handle = nullptr;                                                     // its communicator
  uint32_t calls = 0;  // CCL calls made (by either path); the full path polls on every 128th
  // The communicator has failed (set by Comm::Guard, and by tsrCommAbort from any thread: relaxed, a
  // plain byte load on the taken path).
  std::atomic<bool> failed{false};
  uint8_t esz[kTypes] = {};  // 0: not a CCL type
  int8_t ccl_type[kTypes] = {};
  int8_t ccl_op[kOps] = {};
  // Device allocations the full path has validated (Device::CheckDevicePtr adds to it, for every call of
  // this rank, hybrid or not).
  AllocCache allocs;
  // Records a CCL error the way the full path does (the communicator fails, the other ranks hear of it).
  Status (*report)(void* owner, int ccl_result) = nullptr;
  void* owner = nullptr;
  static constexpr int kNotTaken = -1;
  // kNotTaken when the call must go the full path (nothing has been done then); else the CCL's result.
  int TryCall(const void* send, void* recv, size_t count, tsrDataType_t type, tsrRedOp_t op, tsrStream_t stream) {
    const auto t = static_cast<unsigned>(type), o = static_cast<unsigned>(op);
    if (call == nullptr || stream == nullptr || count == 0 || t >= unsigned{kTypes} || esz[t] == 0 ||
        o >= unsigned{kOps} || failed.load(std::memory_order_relaxed) || ((calls + 1) & 127) == 0)
      return kNotTaken;
    const size_t bytes = count * esz[t];
    if (bytes / esz[t] != count || !allocs.Contains(send, bytes) || !allocs.Contains(recv, bytes)) return kNotTaken;
    ++calls;
    return call(send, recv, count, ccl_type[t], ccl_op[o], handle, stream);
  }
};

class DeviceRank {
 public:
  virtual ~DeviceRank() = default;
  // Called once the world is known and the channels are up (before the init barrier).
  virtual Status Attach(Comm* comm) = 0;
  virtual std::string Describe() const = 0;  // "cuda:0 (NVIDIA H200), nccl 22803 direct"

  virtual Status AllReduce(const void* send, void* recv, size_t count, tsrDataType_t type, tsrRedOp_t op,
                           tsrStream_t stream) = 0;
  virtual Status ReduceScatter(const void* send, void* recv, size_t recvcount, tsrDataType_t type, tsrRedOp_t op,
                               tsrStream_t stream) = 0;
  virtual Status AllGather(const void* send, void* recv, size_t sendcount, tsrDataType_t type, tsrStream_t stream) = 0;
  virtual Status Broadcast(const void* send, void* recv, size_t count, tsrDataType_t type, int root,
                           tsrStream_t stream) = 0;
  virtual Status Send(const void* send, size_t count, tsrDataType_t type, int peer, tsrStream_t stream) = 0;
  virtual Status Recv(void* recv, size_t count, tsrDataType_t type, int peer, tsrStream_t stream) = 0;
  virtual Status Barrier() = 0;
  // The sends and receives of one group (tsrGroupEnd), and alltoallv (counts and displacements in
  // elements, one per rank).
  virtual Status Group(const std::vector<P2POp>& ops) = 0;
  virtual Status AllToAllv(const void* send, const size_t* sendcounts, const size_t* sdispls, void* recv,
                           const size_t* recvcounts, const size_t* rdispls, tsrDataType_t type, tsrStream_t stream) = 0;
  // tsrCommAbort, from any thread: aborts the CCL communicator and wakes waits on the device.
  virtual void Abort() {}
  // From any thread: an asynchronous error of the device or its CCL (OK while healthy).
  virtual Status AsyncError() { return Status::Ok(); }
  // The CCL communicator of a world of one device island (ncclComm_t for NCCL), else null. For
  // benchmarks that call the CCL on Tessera's own communicator (bench/gpu/gpu_bench direct).
  virtual void* CclHandle() const { return nullptr; }
  // A world of one device island: the lean allreduce path (see DirectAllReduce), else null.
  virtual DirectAllReduce* DirectPath() { return nullptr; }
  // What TESSERA_LINK_TRACE writes for this rank's device ("device npu:0 down B up B ..."), empty for none.
  virtual std::string TraceLine() const { return {}; }
};

// What a device rank needs of its communicator, and nothing more: the world's shape, the store (for its CCL's
// id), the failure bookkeeping, the host-memory collectives (each one guarded collective of the communicator:
// argument checks, failure recorded and announced), and for the device bridge its rings and its collective. Comm
// implements it; the device ranks get it in Attach (Comm::host_path).
class HostPath {
 public:
  struct Shape {
    int rank = 0, size = 1;                // in the world
    int islands = 1, island = 0;           // how many, and mine (its index)
    int island_size = 1, island_rank = 0;  // my island's ranks, and my place among them
    std::vector<int> island_ranks;         // ... their world ranks, in island order
    std::chrono::milliseconds timeout{0};  // TESSERA_TIMEOUT of this communicator
    // TESSERA_ISLAND_REDUCE=native: an island's library reduces 16-bit data in its own type (not widened to f32).
    bool native_island_reduce = false;
  };
  virtual Shape WorldShape() const = 0;
  virtual StoreClient* Store() const = 0;
  // Runs `body` as a step of a collective: a failure fails the communicator and is announced to the other ranks
  // (as a failure inside a host collective is); a communicator that has failed runs nothing.
  virtual Status Guarded(const std::string& what, const std::function<Status()>& body) = 0;
  virtual Status HostAllReduce(const void* send, void* recv, size_t count, tsrDataType_t type, tsrRedOp_t op,
                               tsrStream_t stream) = 0;
  virtual Status HostReduceScatter(const void* send, void* recv, size_t recvcount, tsrDataType_t type, tsrRedOp_t op,
                                   tsrStream_t stream) = 0;
  virtual Status HostAllGather(const void* send, void* recv, size_t sendcount, tsrDataType_t type,
                               tsrStream_t stream) = 0;
  virtual Status HostBroadcast(const void* send, void* recv, size_t count, tsrDataType_t type, int root,
                               tsrStream_t stream) = 0;
  virtual Status HostSend(const void* send, size_t count, tsrDataType_t type, int peer, tsrStream_t stream) = 0;
  virtual Status HostRecv(void* recv, size_t count, tsrDataType_t type, int peer, tsrStream_t stream) = 0;
  virtual Status HostBarrier() = 0;
  virtual Status HostGroup(const std::vector<P2POp>& ops) = 0;
  virtual Status HostAllToAllv(const void* send, const size_t* sendcounts, const size_t* sdispls, void* recv,
                               const size_t* recvcounts, const size_t* rdispls, tsrDataType_t type) = 0;
  // The bridge part of a collective (allreduce, reduce-scatter, allgather, broadcast; `count` as the call's own)
  // whose island phases this rank's island runs on its own library, as one guarded collective of host memory
  // (hierarchical.cpp, IslandPhases::kDone). With C the elements the call cuts (count, or count x size for
  // reduce-scatter and allgather) and S = Shard(island_size, island_rank, C) this rank's shard of them:
  //   allreduce, reduce-scatter: send[S] holds the island's partial result (its sum for avg) in AccumType(dt) (f32
  //       for 16-bit types: send is indexed in that type); on return recv[S] holds the final values in `dt`
  //       (allreduce) or recv the rank's block;
  //   allgather (in place: send = recv + rank x count), broadcast (root in place: send = recv): recv[S] holds what
  //       the island's ranks contribute to S; on return recv[S] holds all of it.
  virtual Status HostBridge(CollKind kind, const void* send, void* recv, size_t count, DType dt, RedOp op,
                            int root) = 0;
  // The pieces a staged allreduce of `count` elements of `dt` is cut into on every rank (each piece one collective
  // of its own): HostAllReduce's, so that a rank calling HostBridge piece by piece keeps in step with the others.
  virtual std::vector<Range> AllReduceChunks(size_t count, DType dt) const = 0;
  // One of those pieces as one guarded allreduce of host memory, island phases included (HostAllReduce would cut a
  // piece again where the chunk follows the call's size, TESSERA_DEVICE_CHUNK=auto).
  virtual Status HostAllReducePiece(const void* send, void* recv, size_t count, DType dt, RedOp op) = 0;

  // --- What a device-bridge rank (DeviceBridgeRank) needs beyond staging.
  // OK while the communicator is healthy; else its failure ("communicator failed earlier: ..."). An asynchronous
  // error recorded by another thread (AsyncError) becomes the failure here, announced to the other ranks.
  virtual Status Health() = 0;
  virtual bool HasFailed() const = 0;
  // Whether this rank's collectives of `dt` take the device bridge (an island of one device rank whose every
  // bridge link has host rings, decided alike on every rank; floating types).
  virtual bool DeviceBridgeFor(DType dt) const = 0;
  // The host rings of this rank's link to every rank of another island, for the device bridge's copy engines:
  // `in` where the peer's bytes arrive, `out` where this rank's leave (shm inboxes, or a TcpRelay's rings).
  struct BridgeRings {
    std::byte* in;
    size_t in_bytes;
    std::byte* out;
    size_t out_bytes;
    bool relayed;  // a TCP link behind a TcpRelay
    // A link whose channels take the device's memory themselves (no rings: in and out are null): `peer`, and
    // in_bytes of device memory for its landing buffer (DeviceOps::Landing).
    bool direct = false;
    int peer = -1;
  };
  virtual Result<std::vector<BridgeRings>> DeviceBridgeRings() const = 0;
  // The device scratch (accumulators) one device-bridge collective of `kind` needs.
  virtual size_t DeviceScratchBytes(CollKind kind, size_t count, DType dt) const = 0;
  // One collective over the device bridge: the hierarchical algorithm with its bridge steps on `ops` (the rank's
  // copy engines and kernels), as the next collective of the communicator. Not guarded: run it inside Guarded.
  virtual Status DeviceBridgeCollective(CollKind kind, const void* send, void* recv, size_t count, DType dt, RedOp op,
                                        int root, DeviceOps* ops) = 0;

 protected:
  ~HostPath() = default;
};

// TESSERA_DEVICE_TRACE (docs/devices.md): a device rank's timeline, one row of numbers per step under a header line,
// written to PREFIX.rankN when the rank is destroyed. Off, and no clock read, when the variable is unset.
class DeviceTrace {
 public:
  void Open(int rank, std::string header);  // reads TESSERA_DEVICE_TRACE
  bool on() const { return !path_.empty(); }
  // CLOCK_MONOTONIC in µs (steady_clock on Linux): the clock of Python's time.perf_counter, so traces of the ranks
  // and of the torch backend's completer line up.
  static double NowUs();
  void Add(std::string row) { rows_.push_back(std::move(row)); }
  void Write() const;  // a failure to write is a warning naming the file
 private:
  std::string path_, header_;
  std::vector<std::string> rows_;
};

// TESSERA_DEVICE's device (cuda:N, npu:N, musa:N): loads the family's runtime row, checks the index against the
// devices the runtime sees, selects it; DeviceBridgeRank where the row has the device bridge (HasDeviceBridge), else
// StagedRank. Errors name the value, the runtime and its file.
Result<std::unique_ptr<DeviceRank>> OpenDeviceRank(const DeviceName& device);
Result<std::unique_ptr<DeviceRank>> OpenDeviceBridgeRank(const DeviceName& device);
Result<std::unique_ptr<DeviceRank>> OpenStagedRank(const DeviceName& device);

}  // namespace tessera::comm
