// comm/comm: the communicator — world discovery through the store, channel set-up (shm rings within a
// host, parallel TCP across hosts), and the three-phase hierarchical algorithm (docs/architecture.md, "How a
// collective flows", step 4) that serves every collective:
//   1. inside each island, reduce-scatter so island member i owns shard i;
//   2. across islands, the owners of each segment (intersection of the islands' shards) reduce it in
//      island order, each owner computing one part, and share the parts;
//   3. inside each island, allgather the shards.
// Allgather and broadcast use the same shape with "select" in place of "reduce"; reduce-scatter routes
// the reduced parts to the ranks owning each output block in place of phase 3. A world of one island
// is phases 1 and 3 alone: for one CUDA island the island's own library (NCCL), nothing on top; in a
// hybrid world an island of several devices runs its phases on its library (device/island_ccl, docs/devices.md,
// "Where NCCL runs"), an island of host ranks on this host algorithm.
//
// The class is implemented in several files, one concern each: world.cpp (joining: parameters, the
// store, the islands; health, timeouts, abort), channels.cpp (the records in the store and the channels to every
// peer, each pair on its transport row: transport/transport.hpp),
// schedule.{hpp,cpp} (the algorithm's pure arithmetic: shards, segments, owners, peers),
// hierarchical.cpp (the algorithm's steps) and collectives.cpp (the public calls: dispatch to the device
// rank or the host path, argument checks, failure bookkeeping; send/recv, groups, alltoall).
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "comm/channel.hpp"
#include "comm/coll_kind.hpp"
#include "comm/device/device.hpp"
#include "comm/engine.hpp"
#include "comm/schedule.hpp"
#include "comm/store/store.hpp"
#include "comm/transport/relay.hpp"
#include "comm/transport/shm.hpp"
#include "comm/transport/tcp.hpp"
#include "comm/transport/transport.hpp"
#include "common/dtype.hpp"
#include "common/env.hpp"
#include "tessera/status.hpp"
#include "tessera/tessera.h"

namespace tessera::comm {

struct RankInfo {
  int rank = 0;
  int island = 0;
  std::string vendor;   // e.g. "ascend"
  std::string device;   // "host" or "cuda:N"
  std::string host_id;  // HostId(): UTS hostname/boot id/net ns/IPC ns; equal means same host (shm reaches it)
  int pid = 0;
  std::string addr;             // the address other hosts reach it at (TESSERA_BRIDGE_ADDR, else its host name)
  std::string order;            // its transport orders, TransportOrder::Encode (equal on every rank)
  std::vector<RowRecord> rows;  // per transport row (registry order): viable, domain, connection blob
};

struct Island {
  int index = 0;
  std::string vendor;
  std::string family;      // "host" or a device family's prefix (common/vendor.hpp: "cuda", "npu", ...)
  std::vector<int> ranks;  // sorted
  // A device island of one rank whose floating-point allreduce crosses the bridge on the GPU's copy
  // engines. TESSERA_DEVICE_BRIDGE=auto: where the row joining it to every other rank has host rings
  // (TransportCaps::rings: shm, so every rank on its host) that the copy engines reach; =device: also over
  // TCP (its links without rings relayed through host rings, transport/relay.hpp); =staged: never. Decided per
  // island: staged islands beside it change only how an allreduce is cut (BridgeChunks, which the device bridge
  // follows). Set in Comm::Init.
  bool device_bridge = false;
  // On the device bridge as a copy bridge (TESSERA_COPY_BRIDGE=on, HasCopyBridge): the rank copies between device
  // memory and the rings on its runtime's copy engines but has no kernels, so it folds nothing (FoldWeights: 0) and
  // is set only where another island folds.
  bool copy_only = false;
  bool on_device() const { return family != "host"; }  // a device island (not host ranks)
};

// Where the hierarchical algorithm's island phases run: here (the host engine), or already done by the island's own
// library (HostPath::HostBridge).
enum class IslandPhases { kHere, kDone };

// Everything a rank needs to join a communicator (Comm::Create). FromEnv fills it from TESSERA_*;
// tsrCommInitRank from its arguments and tsrConfig_t; Comm::Split from the parent. The bridge's tuning
// variables (TESSERA_BRIDGE, TESSERA_SHM_RING, TESSERA_TCP_*, TESSERA_DEVICE_*) are still read from the
// environment, with their defaults. The defaults of island, device and timeout are the declared ones of
// TESSERA_ISLAND, TESSERA_DEVICE and TESSERA_TIMEOUT (common/env_vars.inc).
struct InitParams {
  int rank = 0;
  int world = 1;
  int island = static_cast<int>(env::DeclaredInt("TESSERA_ISLAND"));
  std::string vendor;                                          // empty: "island<N>"
  std::string device = env::DeclaredString("TESSERA_DEVICE");  // "host" or "cuda:N"
  std::string store_addr;                                      // host:port of the rendezvous store
  std::string token;                                           // job token
  // Whose token differs from whose when the store refuses `token` (the launcher's store: TESSERA_TOKEN).
  std::string token_mismatch = kLauncherTokenMismatch;
  std::chrono::milliseconds timeout = env::DeclaredDuration("TESSERA_TIMEOUT");
  // How an island of several device ranks reduces 16-bit data ("f32" or "native", tsrConfig_t::island_reduce);
  // empty: TESSERA_ISLAND_REDUCE.
  std::string island_reduce;
  // Key namespace of this communicator: its store keys, shm segment names and CCL ids are distinct from
  // every other communicator of the job. "" for the job's first communicator; Split makes
  // "<parent>.s<seq>.<color>".
  std::string ns;
  bool serve_store = false;  // FromEnv: rank 0 serves the store when TESSERA_STORE is a loopback address
};

// One send or receive of a group (tsrGroupStart/End).
struct P2POp {
  bool is_send = false;
  const void* send = nullptr;
  void* recv = nullptr;
  size_t count = 0;
  tsrDataType_t type = tsrFloat32;
  int peer = 0;
  tsrStream_t stream = nullptr;
};

// The chain of stuck ranks that Comm::ExplainTimeout follows when a wait times out: from the ranks `owed` that rank
// `self` waits on, the record ("p,q|message": whom it waits on, and its own timeout) of the last stuck rank reached
// through the ranks each stuck rank waits on, `stuck(r)` being rank r's record when it has posted one. A rank that
// has not posted yet is given until `end` at every hop. None stuck by then: nullopt.
std::optional<std::string> FollowStuckRanks(int self, int world, const std::vector<int>& owed,
                                            const std::function<std::optional<std::string>(int)>& stuck,
                                            std::chrono::steady_clock::time_point end);

class Comm final : public Links, private HostPath {
 public:
  static Result<std::unique_ptr<Comm>> Create(const InitParams& params);
  // The parameters FromEnv joins with (TESSERA_RANK, TESSERA_WORLD_SIZE, TESSERA_STORE, ...).
  static Result<InitParams> ParamsFromEnv();
  ~Comm() override;

  // Collective over this communicator (see tsrCommSplit): null for TSR_SPLIT_NOCOLOR. `device` empty and
  // `timeout` zero inherit this communicator's.
  // `local_error`: this rank's call was invalid (a bad config): it still takes part, so that every rank
  // fails at once instead of waiting for it, and returns that error.
  Result<std::unique_ptr<Comm>> Split(int color, int key, const std::string& device, std::chrono::milliseconds timeout,
                                      const Status& local_error = Status::Ok());
  // The sends and receives of one group, progressing together (tsrGroupEnd).
  Status Group(const std::vector<P2POp>& ops);
  // Counts and displacements in elements, one per rank (tsrAllToAllv).
  Status AllToAllv(const void* send, const size_t* sendcounts, const size_t* sdispls, void* recv,
                   const size_t* recvcounts, const size_t* rdispls, tsrDataType_t type, tsrStream_t stream);
  // Thread-safe (tsrCommAbort): pending and future calls fail promptly, the peers are told.
  void Abort();
  // Thread-safe (tsrCommGetAsyncError): OK while healthy, else the error that failed (or will fail) it.
  // Cheap enough to ask after every call: the store and the same-host peers are looked at once every
  // kHealthInterval at most, so a failure they show is seen up to that much later.
  Status AsyncError();

  int rank() const { return rank_; }
  int size() const { return size_; }
  int island() const { return my_island_; }
  int num_islands() const { return static_cast<int>(islands_.size()); }
  std::string Describe() const;
  // This rank's device rank (null for a host rank); for benchmarks and diagnostics.
  DeviceRank* device() const { return device_.get(); }
  // The narrow interface a staged device rank (StagedRank) drives this communicator through.
  HostPath& host_path() { return *this; }
  // A world of one device island: AllReduce's lean path (null otherwise); the C API calls it directly.
  DirectAllReduce* direct() const { return direct_; }
  const std::vector<Island>& islands() const { return islands_; }

  Status AllReduce(const void* send, void* recv, size_t count, tsrDataType_t type, tsrRedOp_t op, tsrStream_t stream);
  Status ReduceScatter(const void* send, void* recv, size_t recvcount, tsrDataType_t type, tsrRedOp_t op,
                       tsrStream_t stream);
  Status AllGather(const void* send, void* recv, size_t sendcount, tsrDataType_t type, tsrStream_t stream);
  Status Broadcast(const void* send, void* recv, size_t count, tsrDataType_t type, int root, tsrStream_t stream);
  Status Send(const void* send, size_t count, tsrDataType_t type, int peer, tsrStream_t stream);
  Status Recv(void* recv, size_t count, tsrDataType_t type, int peer, tsrStream_t stream);
  Status Barrier();

  // Links
  SendChannel* send(int peer) override { return send_[peer].get(); }
  RecvChannel* recv(int peer) override { return recv_[peer].get(); }
  Status CheckHealth(const std::vector<int>& waiting_on) override;
  Status ExplainTimeout(const std::vector<int>& owed, Status timeout) override;
  // "; the job's store at HOST:PORT, on host h0 (HOST), does not answer either (why)": for failures
  // whose root cause a store that went away hides.
  std::string StoreSilence(const Status& why) const;
  std::string PeerName(int peer) const override;
  std::chrono::milliseconds timeout() const override { return timeout_; }

 private:
  friend struct CommTestAccess;  // tests/comm/device_emu_worker: the device bridge on an emulated device
  Comm() = default;
  Status Init(const InitParams& p);
  // Records `s` as the communicator's error for AsyncError and the next call (first error wins).
  void SetAsyncError(const Status& s);
  // HostPath (device.hpp): what a staged device rank may call.
  Shape WorldShape() const override;
  StoreClient* Store() const override { return store_.get(); }
  Status Guarded(const std::string& what, const std::function<Status()>& body) override { return GuardFn(what, body); }
  // The host-memory implementations of the group and of alltoallv (a device rank stages into them).
  Status HostGroup(const std::vector<P2POp>& ops) override;
  Status HostAllToAllv(const void* send, const size_t* sendcounts, const size_t* sdispls, void* recv,
                       const size_t* recvcounts, const size_t* rdispls, tsrDataType_t type) override;
  // The host-memory implementations of the collectives. A rank of a device island (device_) reaches them
  // through its DeviceRank, which handles device memory and streams first.
  Status HostAllReduce(const void* send, void* recv, size_t count, tsrDataType_t type, tsrRedOp_t op,
                       tsrStream_t stream) override;
  Status HostReduceScatter(const void* send, void* recv, size_t recvcount, tsrDataType_t type, tsrRedOp_t op,
                           tsrStream_t stream) override;
  Status HostAllGather(const void* send, void* recv, size_t sendcount, tsrDataType_t type, tsrStream_t stream) override;
  Status HostBroadcast(const void* send, void* recv, size_t count, tsrDataType_t type, int root,
                       tsrStream_t stream) override;
  Status HostSend(const void* send, size_t count, tsrDataType_t type, int peer, tsrStream_t stream) override;
  Status HostRecv(void* recv, size_t count, tsrDataType_t type, int peer, tsrStream_t stream) override;
  Status HostBarrier() override;
  Status HostBridge(CollKind kind, const void* send, void* recv, size_t count, DType dt, RedOp op, int root) override;
  std::vector<Range> AllReduceChunks(size_t count, DType dt) const override { return BridgeChunks(count, dt); }
  Status HostAllReducePiece(const void* send, void* recv, size_t count, DType dt, RedOp op) override;
  Status Health() override;
  bool HasFailed() const override { return !failed_.ok(); }
  bool DeviceBridgeFor(DType dt) const override { return DeviceBridgeEligible(islands_[my_island_], dt); }
  Result<std::vector<BridgeRings>> DeviceBridgeRings() const override;
  Status DeviceBridgeCollective(CollKind kind, const void* send, void* recv, size_t count, DType dt, RedOp op, int root,
                                DeviceOps* ops) override;
  // In a world with a device island that stages through pinned memory (not DeviceBridgeEligible) and
  // more than one island, allreduce runs as consecutive collectives over chunks of TESSERA_DEVICE_CHUNK
  // bytes (`auto`: AutoChunk, from the call's size) on EVERY rank, so that the staged rank can pipeline its
  // device-host copies with the bridge; otherwise one chunk. Deterministic from count and type.
  std::vector<Range> BridgeChunks(size_t count, DType dt) const;
  // Builds the transport rows, publishes this rank's record (its rows' entries: transport/transport.hpp) and
  // reads every rank's into infos_ (channels.cpp).
  Status PublishRecords(int island, const std::string& vendor, const std::string& device,
                        const std::string& store_host);
  std::vector<std::string> RowNames() const;
  TransportSetup Setup() const;
  // The row (index in rows_) that joins ranks a and b; the same answer on every rank (ChooseRow).
  Result<int> PairRow(int a, int b) const;
  // Whether ranks a and b are joined by a row whose channels are host rings (TransportCaps::rings).
  bool PairOnRings(int a, int b) const;
  Status SetUpChannels();
  // Puts every link of this rank to another island whose row has no rings behind a TcpRelay (host rings of
  // `ring_bytes` per direction), so that a device bridge can copy into and out of them; returns how many there are.
  // A link whose channels take `device_memory` themselves (TakesDeviceMemory) stays as it is. Done by SetUpChannels
  // for a device-bridge rank, and by tests/comm/device_emu_worker. Buffered bytes are kept.
  Result<int> RelayBridgeLinks(size_t ring_bytes, std::string_view device_memory = "");
  // Whether both channels of the link to `peer` send from and receive into `memory` (a device runtime row's name:
  // "cuda") themselves: the ucx row where UCX registers it (SendChannel::sends_from, RecvChannel::receives_into).
  bool TakesDeviceMemory(int peer, std::string_view memory) const;
  // The relay of the link to `peer`, if it has one.
  const TcpRelay* relay(int peer) const { return relays_.empty() ? nullptr : relays_[peer].get(); }
  // Validates arguments common to all collectives; `what` names the call.
  Status CheckArgs(const char* what, const void* send, const void* recv, size_t count, tsrDataType_t type,
                   tsrStream_t stream, DType* dt);
  // Runs `body` as collective number seq_, recording failure: a failed communicator stays failed, and
  // the first rank to fail tells the others through the store.
  template <typename F>
  Status Guard(const std::string& what, F&& body);
  Status GuardFn(const std::string& what, const std::function<Status()>& body);  // Guard for other files
  // With `dev`, send and recv are device memory of this rank's GPU and the bridge steps run on its copy
  // engines and kernels (allreduce, broadcast, allgather; island of one rank, every bridge channel shm: see
  // DeviceBridgeEligible).
  Status Hierarchical(CollKind kind, const void* send, void* recv, size_t count, DType dt, RedOp op, int root,
                      DeviceOps* dev = nullptr, IslandPhases phases = IslandPhases::kHere);
  class Collective;  // one call of Hierarchical, step by step (hierarchical.cpp)
  // Whether island `isl`'s allreduce of `dt` runs on the device bridge (Island::device_bridge, floating
  // types). The same answer on every rank.
  bool DeviceBridgeEligible(const Island& isl, DType dt) const { return isl.device_bridge && IsFloat(dt); }
  // A device island whose data of type dt crosses the bridge through pinned staging (not the device bridge).
  bool StagedDeviceIsland(const Island& isl, DType dt) const {
    return isl.on_device() && !DeviceBridgeEligible(isl, dt);
  }
  // Each island's share of the bridge's folds of a reduction of `dt` (schedule.hpp, Part): equal, except that where
  // the world has an island on the device bridge for `dt`, a device island that stages through pinned memory folds
  // nothing (0): its rank sends its partial sums to the other islands' owners and receives the results, and the
  // folds run on the devices (and the host islands) instead of its host engine. The same on every rank; the bits do
  // not change (every part is folded in island order, whoever owns it).
  std::vector<int> FoldWeights(DType dt) const;
  Status ExchangeHeaders(CollKind kind, size_t count, DType dt, RedOp op, int root, const std::vector<int>& peers);
  void* Scratch(int which, size_t bytes);
  // Device bridge (hierarchical.cpp): the device scratch one call of `kind` needs — for reduce-scatter its
  // reduced shard (the whole buffer, on an island of one rank) and then the accumulators of this rank's parts,
  // for allreduce the accumulators, nothing for broadcast/allgather. The caller reserves it at submission.
  size_t DeviceScratchBytes(CollKind kind, size_t count, DType dt) const override;

  int rank_ = 0, size_ = 1, my_island_ = 0, local_ = 0;
  std::chrono::milliseconds timeout_ = env::DeclaredDuration("TESSERA_TIMEOUT");  // Init: the params'
  std::string token_;
  std::string island_reduce_ = env::DeclaredString("TESSERA_ISLAND_REDUCE");  // "f32" or "native"
  std::string store_addr_;
  std::string ns_;
  uint64_t split_seq_ = 0;
  std::vector<RankInfo> infos_;
  std::vector<Island> islands_;
  IslandRanks island_ranks_;            // islands_' ranks: what the schedule (comm/schedule) is computed from
  std::vector<std::string> transport_;  // per peer: its row's name, "" for self
  std::unique_ptr<StoreServer> store_server_;
  std::unique_ptr<StoreClient> store_;
  TransportOrder order_;
  std::vector<std::unique_ptr<Transport>> rows_;   // registry order; outlive the channels and relays, which use them
  std::vector<int> row_of_;                        // per peer: index in rows_, -1 for self
  std::vector<std::unique_ptr<TcpRelay>> relays_;  // per peer, or null; outlives send_/recv_, which use it
  std::string device_memory_;     // a device-bridge rank's: its runtime row's name (links that take it skip the relay)
  size_t device_ring_bytes_ = 0;  // TESSERA_DEVICE_RING: also a landing buffer's size
  std::vector<std::unique_ptr<SendChannel>> send_;
  std::vector<std::unique_ptr<RecvChannel>> recv_;
  std::vector<std::unique_ptr<std::byte[]>> scratch_{3};
  std::vector<size_t> scratch_size_ = std::vector<size_t>(3, 0);
  uint64_t seq_ = 0;
  std::vector<uint64_t> p2p_sent_, p2p_recvd_;
  Status failed_;
  std::atomic<bool> aborted_by_peer_{false};
  std::atomic<bool> abort_requested_{false};  // tsrCommAbort (any thread)
  std::atomic<bool> async_failed_{false};     // async_error_ is set
  std::mutex async_mu_;
  Status async_error_;  // guarded by async_mu_
  // AsyncError's look at the store and the peers: at most one every kHealthInterval (under health_mu_).
  static constexpr std::chrono::milliseconds kHealthInterval{50};
  std::mutex health_mu_;
  std::chrono::steady_clock::time_point health_checked_{};
  size_t bridge_chunk_bytes_ = 0;   // see BridgeChunks; 0 = no chunking
  bool bridge_chunk_auto_ = false;  // TESSERA_DEVICE_CHUNK=auto: AutoChunk (schedule.hpp)
  // This rank's device rank (TESSERA_DEVICE=cuda:N, npu:N, musa:N), null for host ranks. Last member: destroyed
  // first, so its worker thread stops before the channels and the store go away.
  std::unique_ptr<DeviceRank> device_;
  // A world of one device island: AllReduce's lean path (owned by device_; see DirectAllReduce). Guard
  // sets its `failed` flag with failed_.
  DirectAllReduce* direct_ = nullptr;
};

// The communicator behind a C handle (null for a null or destroyed one); for benchmarks and tests that
// need the C++ side of a communicator made through the C API. Defined in c_api.cpp.
Comm* Unwrap(tsrComm_t comm);

}  // namespace tessera::comm
