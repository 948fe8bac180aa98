// comm/engine: drives one step of a collective — a set of messages to and from peers — to completion
// without blocking on any single peer, so sends and receives on all channels progress together and no
// schedule can deadlock.
//
// Messages on one channel are matched in the order they are queued on both ends. A receive either
// copies into a buffer or folds into a ReduceJob. A ReduceJob folds its contributors strictly in their
// index order (element by element, pipelined in chunks): that fixed order is what makes results
// bit-identical on every rank. Waits are bounded: no progress for the timeout gives Timeout naming the
// peers still owed; the Links' health check turns a dead peer or another rank's abort into an error.
//
// Host mode on a rank with a HostPool of several threads (Links::host_pool, TESSERA_HOST_THREADS): each
// turn moves a larger step, and a large copy into or out of a ring, or a large fold, is cut into parts
// (several per thread) that the pool's threads claim one at a time, the engine's thread waiting for all of
// them before it publishes or consumes the ring bytes. Folds are element-wise, so cutting a fold range by element index
// gives the same bits: every element is still folded by the same kernel, with its contributors in the same order (the
// pieces of one FoldRange are disjoint ranges of one contributor's fold; the next contributor's fold of a range starts
// only after FoldRange has returned). Small messages run inline.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "comm/channel.hpp"
#include "comm/host_pool.hpp"
#include "common/dtype.hpp"
#include "tessera/status.hpp"

namespace tessera::comm {

class Links {
 public:
  virtual ~Links() = default;
  virtual SendChannel* send(int peer) = 0;
  virtual RecvChannel* recv(int peer) = 0;
  // Called while waiting (about every 50 ms): an error if another rank aborted or a peer died.
  virtual Status CheckHealth(const std::vector<int>& waiting_on) = 0;
  virtual std::string PeerName(int peer) const = 0;  // "rank 3 (nvidia)"
  virtual std::chrono::milliseconds timeout() const = 0;
  // Called once when the wait on `owed` timed out: the error to report (by default `timeout` itself).
  // Comm looks for the root cause: when the peers it waited on are stuck too (on a rank of a host that
  // disappeared, say), it names that.
  virtual Status ExplainTimeout(const std::vector<int>& owed, Status timeout) {
    (void)owed;
    return timeout;
  }
  // The rank's host threads for large copies and folds (null: the engine's thread alone). Set once, before
  // any Engine runs on these links (Comm::SetUpChannels); joined when the links are destroyed.
  HostPool* host_pool() const { return host_pool_.get(); }
  void set_host_pool(std::unique_ptr<HostPool> pool) { host_pool_ = std::move(pool); }
  // Bytes queued to each peer by the engines on these links (TESSERA_LINK_TRACE): sized once, before any Engine
  // runs (Comm::SetUpChannels); a peer outside it is not counted. Any thread.
  void InitLinkCounters(int peers) {
    sent_ = std::make_unique<std::atomic<uint64_t>[]>(static_cast<size_t>(peers));
    sent_peers_ = peers;
  }
  void CountSent(int peer, size_t bytes) {
    if (peer >= 0 && peer < sent_peers_) sent_[peer].fetch_add(bytes, std::memory_order_relaxed);
  }
  uint64_t SentTo(int peer) const {
    return peer >= 0 && peer < sent_peers_ ? sent_[peer].load(std::memory_order_relaxed) : 0;
  }

 private:
  std::unique_ptr<HostPool> host_pool_;
  std::unique_ptr<std::atomic<uint64_t>[]> sent_;
  int sent_peers_ = 0;
};

// Asynchronous work on a device (a GPU's copy engines and kernels) for an engine whose buffers are device
// memory. Host-side ends of copies lie in shared-memory rings registered with the device. Two queues:
// the send queue (device -> host copies) and the fold queue (host -> device copies, folds, finalizes);
// each runs in issue order, so folds issued in contributor order run in that order. A ticket names the
// work issued so far on a queue; Done says whether the queue has got that far.
class DeviceOps {
 public:
  enum Queue { kSendQueue = 0, kFoldQueue = 1 };
  using Ticket = uint64_t;
  virtual ~DeviceOps() = default;
  virtual Status ToHost(void* host_dst, const void* dev_src, size_t bytes) = 0;    // send queue
  virtual Status FromHost(void* dev_dst, const void* host_src, size_t bytes) = 0;  // fold queue
  // The device mirror of a byte in this rank's own inbox (where received ring bytes are copied to fold).
  virtual Result<void*> Mirror(const void* inbox_byte, size_t bytes) = 0;
  virtual Status Fold(void* acc, const void* src, size_t n, DType dtype, DType src_type, RedOp op, bool first) = 0;
  virtual Status Finalize(void* out, const void* acc, size_t n, DType dtype, RedOp op, int divisor) = 0;
  // Device memory to device memory, on the fold queue (a broadcast root's or an allgather rank's own
  // contribution into its output, out of place).
  virtual Status Copy(void* dev_dst, const void* dev_src, size_t bytes) = 0;
  virtual Result<Ticket> Mark(Queue q) = 0;
  virtual Result<bool> Done(Queue q, Ticket t) = 0;
  // Makes work issued on the send queue from now on wait for all work issued so far on the fold queue
  // (a copy out of a result the folds are still writing).
  virtual Status SendAfterFolds() = 0;
  // Device scratch of at least `bytes` for accumulators.
  virtual Result<void*> Scratch(size_t bytes) = 0;
  // Bytes per copy-engine transfer (TESSERA_DEVICE_PIECE).
  virtual size_t piece() const = 0;

  // Links whose channels take device memory themselves (SendChannel::sends_from / RecvChannel::receives_into
  // this memory: ucx where UCX registers it) carry a device buffer without a ring between: its sends are posted
  // from device memory once the device has written it, and its receives land in device memory — a copy's in its
  // destination, a fold's in the link's landing buffer, where a kernel folds it. `memory` names the kind as the
  // runtime table names its rows ("cuda"); "" where the device has no such links.
  virtual std::string_view memory() const { return ""; }
  // `peer`'s landing buffer (device memory), {nullptr, 0} where there is none.
  virtual std::pair<std::byte*, size_t> Landing(int /*peer*/) const { return {nullptr, 0}; }
  // Host memory into device memory, complete when it returns (bytes such a channel already held in host memory).
  virtual Status CopyIn(void* dev_dst, const void* host_src, size_t bytes) = 0;
};

// Folds contributors 0..k-1 into `acc` (AccumType(dtype)) in index order; when `dst` is set, each range
// folded by the last contributor is finalized into dst (dtype, with `divisor` for avg) right away.
struct ReduceJob {
  void* acc = nullptr;
  size_t n = 0;
  DType dtype = DType::kFloat32;
  RedOp op = RedOp::kSum;
  void* dst = nullptr;
  int divisor = 1;
  std::vector<DType> src_type;  // per contributor
  std::vector<size_t> done;     // elements folded (issued, on a device), per contributor
  DeviceOps* device = nullptr;  // acc, dst and sources are device memory: fold with its kernels
  // Host jobs whose first two contributors are one local buffer and one received stream fold both in
  // one pass as the stream arrives (Fold2: same bits, one pass over acc fewer). Set by Engine::Run.
  const std::byte* fused = nullptr;  // the local contributor's data
  int fused_c = -1;                  // its index, 0 or 1
  void Init(int contributors) {
    src_type.assign(contributors, dtype);
    done.assign(contributors, 0);
  }
  // Folds elements [done[c], done[c]+count) of contributor c from src (on the device's fold queue when
  // `device` is set; on the host, cut by element index across `pool`'s threads when it is large).
  Status FoldRange(int c, const void* src, size_t count, HostPool* pool = nullptr);
  size_t Allowed(int c) const { return (c == 0 || (c == 1 && fused_c == 0) ? n : done[c - 1]) - done[c]; }
  // The host fold of FoldRange for elements [at, at+count) of contributor c (src: its element `at`),
  // without touching `done`: what each thread runs on its piece.
  void HostFold(int c, size_t at, const std::byte* src, size_t count) const;
  // Elements of dst that are final (issued, on a device): every contributor has folded them.
  size_t Finished() const {
    size_t f = n;
    for (size_t d : done) f = std::min(f, d);
    return f;
  }
};

// With a DeviceOps, every buffer handed to Send/RecvCopy/LocalFold is device memory and every channel
// must support dma() or take the device's memory itself (DeviceOps::memory; engine_direct.cpp): bytes move
// between device memory and the shared-memory rings on the device's copy engines, folds run on the device, and a
// ring's bytes are published (sent) or consumed (received) when the device has finished with them. Run returns when
// all of it has completed.
class Engine {
 public:
  explicit Engine(Links* links, DeviceOps* device = nullptr) : links_(links), dev_(device) {}
  void Send(int peer, const void* data, size_t bytes);
  void RecvCopy(int peer, void* dst, size_t bytes);
  // RecvCopy, then `check` as soon as the bytes are in (before later messages): an error ends Run with it.
  // Host mode only (a received header that decides whether the rest of the stream is in step).
  void RecvCheck(int peer, void* dst, size_t bytes, std::function<Status()> check);
  void RecvFold(int peer, ReduceJob* job, int contributor);
  void LocalFold(ReduceJob* job, int contributor, const void* src);
  // Sends job->dst (job->n elements of job->dtype) as the job finishes them, so a result leaves while
  // the rest of it is still being reduced in the same Run (the job must be fed by this engine too).
  void SendResult(int peer, const ReduceJob* job);
  // Runs all queued messages to completion. `what` describes the step for errors ("allreduce #7").
  Status Run(const std::string& what);

 private:
  struct SendOp {
    const std::byte* data;
    size_t bytes, padded, off;
    const ReduceJob* gate;  // SendResult: only bytes the job has finished may go
    size_t Ready() const { return gate == nullptr ? bytes : gate->Finished() * DTypeSize(gate->dtype); }
  };
  struct RecvOp {
    std::byte* dst;  // copy target, or null when folding
    ReduceJob* job;
    int contributor;
    size_t bytes, padded, off;
    int check = -1;  // index into checks_ (RecvCheck), -1 for none
  };
  // Device mode: ring bytes handed to the device, released (published / consumed) when its ticket is done.
  struct InFlight {
    DeviceOps::Ticket ticket;
    size_t bytes;
  };
  struct DevQueues {
    std::deque<InFlight> sent, recvd;
    size_t send_done = 0, recv_done = 0;  // bytes of the front op already released
    // A link that takes device memory (DeviceOps::memory): the front send's bytes whose folds are known complete
    // (a result's) and the fold ticket that will make `gate_next` so; the front fold receive's landing positions
    // (received, folded, released: bytes since the op began) and the receive posted into the landing buffer.
    size_t gate_ready = 0, gate_next = 0;
    DeviceOps::Ticket gate_ticket = 0;
    size_t land_head = 0, land_fold = 0, land_tail = 0;
    std::byte* land_dst = nullptr;
    size_t land_want = 0;
    DeviceOps::Ticket recv_ticket = 0;  // what the front receive waits for before anything lands
    bool recv_gated = false;
    std::byte pad[kChannelAlign] = {};  // where a message's padding is received
  };
  // Hands each job's local contributor among its first two to the received one (ReduceJob::fused).
  void FuseLocalPairs();
  // When every pending send and receive waits on a socket (TCP): poll() them for up to 2 ms and return
  // true; false (nothing waited) when any pending work is elsewhere (shm, local folds, a device).
  bool WaitOnSockets();
  // Device mode: hands the ring bytes of in-flight copies that `queue` has finished back to the channel
  // (`release`: publish or consume), oldest first, adding them to *released; true if any.
  template <typename Release>
  Result<bool> Retire(DeviceOps::Queue queue, std::deque<InFlight>& inflight, size_t* released, Release release);
  // Device mode: move the front op of a peer's queue along (popping it once the device is done with it).
  Result<bool> StepDeviceSend(int peer, std::deque<SendOp>& q);
  Result<bool> StepDeviceRecv(int peer, std::deque<RecvOp>& q);
  // Device mode on a link that takes device memory (engine_direct.cpp).
  Result<bool> StepDirectSend(int peer, std::deque<SendOp>& q, SendChannel* ch);
  Result<bool> StepDirectRecv(int peer, std::deque<RecvOp>& q, RecvChannel* ch);
  struct LocalOp {
    ReduceJob* job;
    int contributor;
    const std::byte* src;
  };
  // Host mode: memcpy, cut across the pool's threads when it is large.
  void Copy(void* dst, const void* src, size_t bytes) const;
  Links* links_;
  DeviceOps* dev_;
  HostPool* pool_ = nullptr;               // links_->host_pool() when it has several threads (host mode)
  size_t step_ = 0;                        // bytes per channel per turn (Run)
  std::vector<DevQueues> devq_;            // by peer, device mode
  std::vector<std::deque<SendOp>> sends_;  // by peer
  std::vector<std::deque<RecvOp>> recvs_;  // by peer
  std::vector<LocalOp> locals_;
  std::vector<std::function<Status()>> checks_;
  size_t pending_ = 0;
};

}  // namespace tessera::comm
