// comm/device/accel_rank: the generic accelerator rank — the DeviceRank of every device family whose runtime is a
// row of the device-runtime table (comm/runtime: Ascend's ACL, Moore Threads' MUSA), written on DeviceRuntime and
// the CCL table alone, so a new vendor is a runtime row and a CCL row (and a family row in common/vendor), with no
// code here. It reaches its communicator only through HostPath (device.hpp).
//
//  * World of one island: allreduce, reduce-scatter, allgather and broadcast go to the island's collective library
//    (the family's CCL row, DeviceFamily::ccl: hccl, mccl; TESSERA_CCL / TESSERA_CCL_LIB override it) on the
//    caller's stream, for every type and op the row has. What the row lacks (HCCL's avg, HCCL's uint8 and f64
//    reductions, MCCL's bf16 where it has none) and send/recv, groups and alltoall are staged as below: every rank
//    decides from (call, type, op) alone, so all ranks of the island take the same path.
//  * Hybrid world, and what the CCL does not take: pinned staging through the runtime's MallocHost memory, which
//    every row has (ACL has neither mapped host registration nor stream memory operations, so CudaRank's
//    GPU-written "input ready" flags are not available). On the CALLER's thread: the inputs are copied down to
//    pinned memory on the caller's stream (so after whatever produced them) and waited for; the host path runs on
//    the pinned buffers; the results are queued back up on the caller's stream, and the call returns with those
//    copies in flight. The next staged call waits for them (an event recorded after them) before it reuses the
//    staging. So a staged call returns once its host part is done: host-synchronous, stream-ordered.
//  * Hybrid world, island of several ranks: the island's library runs the island phases of allreduce,
//    reduce-scatter, allgather and broadcast on the device (docs/architecture.md, "Islands of several devices"):
//    it reduce-scatters the island's inputs (or gathers its contributions), only this rank's shard (1/n of the
//    buffer) goes down to pinned memory, crosses the bridge (HostPath::HostBridge: from outside the island its
//    ranks send and receive what they would have otherwise) and comes back up, and the library allgathers the
//    shards. Shards are the schedule's (Shard: uneven when n does not divide the count); the library's equal
//    blocks are padded on the device. Where the island cannot do its part exactly — a 16-bit reduction (Tessera
//    reduces it in f32 inside the island, and these runtime rows have no widening kernel), a type or op the row
//    lacks, the library missing on any rank of the island — the call is staged as below; one log line says why.
//  * Host memory (stream NULL): the host path directly.
// A copy whose device address is not 64-byte aligned (ACL's rule for asynchronous copies) is made synchronously,
// after the caller's stream has drained. A failure of any step fails the communicator and is announced to the
// other ranks (HostPath::Guarded), as a failure inside a host collective is.
// Threads: ACL binds a device to a thread, so every entry point selects this rank's device first.
#include <fmt/format.h>

#include <algorithm>
#include <mutex>
#include <set>
#include <string>

#include "comm/ccl/ccl.hpp"
#include "comm/comm.hpp"
#include "comm/device/device.hpp"
#include "comm/device/island_ccl.hpp"
#include "comm/runtime/runtime.hpp"
#include "comm/schedule.hpp"
#include "common/env.hpp"
#include "common/log.hpp"
#include "common/vendor.hpp"

namespace tessera::comm {
namespace {

class AccelRank final : public DeviceRank {
 public:
  AccelRank(std::shared_ptr<DeviceRuntime> rt, DeviceName name) : rt_(std::move(rt)), name_(name) {}
  ~AccelRank() override;
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
    return fmt::format("device {} down {} up {} library_calls {} island_calls {} staged_calls {}", name_.ToString(),
                       down_bytes_, up_bytes_, ccl_calls_, island_calls_, staged_calls_);
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
  // A copy on `stream`: asynchronous where both addresses are 64-byte aligned, else synchronous after the stream
  // has drained (*drained says whether it has).
  Status CopyOn(DeviceRuntime::Stream stream, void* dst, const void* src, size_t bytes, CopyKind kind, bool* drained);
  Status Grow(std::byte** buf, size_t* cap, size_t bytes);
  // Whether a world-of-one-island call goes to the CCL: a reduction of (dt, op), or a data movement of dt.
  bool CclTakes(DType dt) const { return ccl_ && ccl_->lib().Supports(dt).ok(); }
  bool CclTakes(DType dt, RedOp op) const { return ccl_ && ccl_->lib().SupportsReduce(dt, op).ok(); }
  Status OnCcl(const char* what, const char* call, const std::function<int()>& run);

  // ---- hybrid world, island of several ranks: the island's library does the island phases ----
  // The island's library in a hybrid world: every rank of the island loads it or none uses it.
  Status AttachIslandLibrary();
  // Whether a hybrid call of `kind` on (dt, op) runs its island phases on the library; logs once why not.
  bool IslandTakes(CollKind kind, DType dt, RedOp op);
  Status IslandAllReduce(const std::byte* send, std::byte* recv, size_t count, DType dt, RedOp op, tsrStream_t stream);
  Status IslandReduceScatter(const std::byte* send, std::byte* recv, size_t recvcount, DType dt, RedOp op,
                             tsrStream_t stream);
  Status IslandAllGather(const std::byte* send, std::byte* recv, size_t sendcount, DType dt, tsrStream_t stream);
  Status IslandBroadcast(const std::byte* send, std::byte* recv, size_t count, DType dt, int root, tsrStream_t stream);
  // The device steps of an island call (each a step of a collective, guarded): the library's reduce-scatter of
  // buf[0, L) into this rank's shard (its block of the library's padded blocks), and the copy of that shard into
  // host[S]; the copy up of host[S] and the library's allgather of the shards into buf[0, L).
  Status ShardDown(const char* what, const std::byte* buf, size_t L, DType dt, RedOp op, std::byte* host,
                   DeviceRuntime::Stream s);
  Status ShardUp(const char* what, const std::byte* host, size_t L, DType dt, std::byte* buf, DeviceRuntime::Stream s);
  // Device scratch: the shard (one block of q elements, 256-byte rounded), then the padded blocks (n x q), then
  // `extra` bytes.
  Status GrowDevice(size_t q_bytes, size_t extra);
  std::byte* DevShard() const { return dev_; }
  std::byte* DevPad(size_t q_bytes) const { return dev_ + RoundUp(q_bytes); }
  static size_t RoundUp(size_t b) { return (b + 255) / 256 * 256; }
  // Waits for the previous staged call's copies up (the staging is about to be reused), and grows the staging.
  Status ReuseStaging(size_t in_bytes, size_t out_bytes);
  // The copies up of a call are queued on `s`: the next call that reuses the staging waits for them (up_done_);
  // UpQueued as a guarded step of `what`.
  Status MarkUp(DeviceRuntime::Stream s);
  Status UpQueued(const char* what, DeviceRuntime::Stream s);
  Status Ccl(const char* call, int result);

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
  std::set<std::string> said_;  // reasons already logged
  // TESSERA_LINK_TRACE: bytes staged each way, calls to the library, island calls, staged calls.
  uint64_t down_bytes_ = 0, up_bytes_ = 0, ccl_calls_ = 0, island_calls_ = 0, staged_calls_ = 0;
};

Result<std::unique_ptr<DeviceRank>> Open(const DeviceName& name) {
  const DeviceFamily& f = *name.family;
  TSR_ASSIGN_OR_RETURN(auto rt, LoadRuntime(f.runtime));
  auto n = rt->DeviceCount();
  if (!n.ok()) return n.status().WithContext(fmt::format("TESSERA_DEVICE='{}'", name.ToString()));
  if (name.index >= *n) {
    const std::string visible = env::Get(f.visible_env).value_or("");
    return InvalidArgument(fmt::format(
        "TESSERA_DEVICE='{}': the {} runtime ('{}') sees {} device{} ({}{}): use an index below {} (tessera run "
        "gives each rank its own device as {}:0)",
        name.ToString(), rt->name(), rt->path(), *n, *n == 1 ? "" : "s", f.visible_env,
        visible.empty() ? " unset" : "='" + visible + "'", *n, f.prefix));
  }
  TSR_RETURN_IF_ERROR(rt->SetDevice(name.index).WithContext(fmt::format("TESSERA_DEVICE='{}'", name.ToString())));
  return std::unique_ptr<DeviceRank>(new AccelRank(std::move(rt), name));
}

bool Aligned(const void* p) { return reinterpret_cast<uintptr_t>(p) % 64 == 0; }
constexpr size_t AlignUp(size_t n) { return (n + 63) / 64 * 64; }

Status AccelRank::Attach(Comm* comm) {
  host_ = &comm->host_path();
  shape_ = host_->WorldShape();
  TSR_RETURN_IF_ERROR(rt_->SetDevice(name_.index));
  TSR_ASSIGN_OR_RETURN(up_done_, rt_->EventCreate());
  if (shape_.islands > 1) return shape_.island_size > 1 ? AttachIslandLibrary() : Status::Ok();
  // World of one island: the island's own library.
  TSR_ASSIGN_OR_RETURN(auto lib, CclLibrary::LoadFromEnv(name_.family->ccl));
  auto c = CclComm::Create(lib, host_->Store(), fmt::format("ccl/island{}/id", shape_.island), shape_.island_size,
                           shape_.island_rank, shape_.timeout);
  if (!c.ok())
    return c.status().WithContext(
        fmt::format("rank {}: creating island {}'s {} communicator", shape_.rank, shape_.island, lib->name()));
  ccl_ = std::move(c).value();
  return Status::Ok();
}

Status AccelRank::AttachIslandLibrary() {
  TSR_ASSIGN_OR_RETURN(ccl_, OpenIslandCcl(host_->Store(), shape_, name_.family->ccl, name_.family->label));
  island_lib_ = ccl_ != nullptr;
  return Status::Ok();
}

AccelRank::~AccelRank() {
  (void)rt_->SetDevice(name_.index);
  if (up_pending_) (void)rt_->EventSynchronize(up_done_);
  if (up_done_) (void)rt_->EventDestroy(up_done_);
  if (dev_) (void)rt_->Free(dev_);
  if (in_) (void)rt_->FreeHost(in_);
  if (out_) (void)rt_->FreeHost(out_);
  ccl_.reset();
}

std::string AccelRank::Describe() const {
  const std::string how =
      !ccl_ ? "staged through pinned host memory"
      : island_lib_
          ? fmt::format("{} ('{}') runs the island phases, shards cross the bridge through pinned host memory",
                        ccl_->lib().name(), ccl_->lib().path())
          : fmt::format("{} ('{}') inside the island, the rest staged", ccl_->lib().name(), ccl_->lib().path());
  return fmt::format("{} ({} runtime '{}'), {}", name_.ToString(), rt_->name(), rt_->path(), how);
}

Status AccelRank::CheckOne(const char* which, const void* p, size_t bytes, tsrStream_t stream) {
  if (p == nullptr) {
    if (bytes == 0) return Status::Ok();
    return InvalidArgument(fmt::format("{} is NULL with {} bytes to move", which, bytes));
  }
  TSR_ASSIGN_OR_RETURN(PointerInfo info, rt_->GetPointerInfo(p));
  if (stream == nullptr) {
    if (info.type != MemoryType::kDevice) return Status::Ok();
    return InvalidArgument(
        fmt::format("{} = {} is {} device memory, but the stream is NULL, which means host memory: pass the stream the "
                    "buffers are used on",
                    which, p, name_.family->label));
  }
  if (info.type != MemoryType::kDevice)
    return InvalidArgument(
        fmt::format("{} = {} is not device memory of {} ({} says {}), but a stream was passed: pass {} memory with its "
                    "stream, or host memory with stream NULL",
                    which, p, name_.ToString(), rt_->name(),
                    info.type == MemoryType::kPinnedHost ? "pinned host memory" : "not its memory", name_.ToString()));
  if (info.device != name_.index)
    return InvalidArgument(fmt::format("{} = {} is memory of {}:{}, not of this rank's {}", which, p,
                                       name_.family->prefix, info.device, name_.ToString()));
  return Status::Ok();
}

Status AccelRank::CheckBuffers(const char* what, const void* send, size_t send_bytes, const void* recv,
                               size_t recv_bytes, tsrStream_t stream) {
  return host_->Guarded(what, [&]() -> Status {
    TSR_RETURN_IF_ERROR(rt_->SetDevice(name_.index));
    TSR_RETURN_IF_ERROR(CheckOne("sendbuf", send, send_bytes, stream));
    return CheckOne("recvbuf", recv, recv_bytes, stream);
  });
}

Status AccelRank::Grow(std::byte** buf, size_t* cap, size_t bytes) {
  if (bytes <= *cap) return Status::Ok();
  if (*buf) TSR_RETURN_IF_ERROR(rt_->FreeHost(*buf));
  *buf = nullptr;
  *cap = 0;
  const size_t want = std::max<size_t>(AlignUp(bytes), 1 << 20);
  TSR_ASSIGN_OR_RETURN(void* p, rt_->MallocHost(want));
  *buf = static_cast<std::byte*>(p);
  *cap = want;
  return Status::Ok();
}

Status AccelRank::CopyOn(DeviceRuntime::Stream stream, void* dst, const void* src, size_t bytes, CopyKind kind,
                         bool* drained) {
  if (bytes == 0) return Status::Ok();
  if (Aligned(dst) && Aligned(src)) {
    *drained = false;
    return rt_->MemcpyAsync(dst, bytes, src, bytes, kind, stream);
  }
  if (!*drained) {
    TSR_RETURN_IF_ERROR(rt_->StreamSynchronize(stream));
    *drained = true;
  }
  return rt_->Memcpy(dst, bytes, src, bytes, kind);
}

Status AccelRank::Staged(const char* what, tsrStream_t stream, const std::vector<Span>& down, size_t in_bytes,
                         const std::vector<Span>& up, size_t out_bytes,
                         const std::function<Status(std::byte* in, std::byte* out)>& host) {
  std::lock_guard<std::mutex> lock(mu_);
  auto* s = static_cast<DeviceRuntime::Stream>(stream);
  ++staged_calls_;
  TSR_RETURN_IF_ERROR(host_->Guarded(what, [&]() -> Status {
    TSR_RETURN_IF_ERROR(ReuseStaging(in_bytes, out_bytes));
    bool drained = false;
    for (const Span& d : down) {
      TSR_RETURN_IF_ERROR(CopyOn(s, in_ + d.host_off, d.dev, d.bytes, CopyKind::kDeviceToHost, &drained));
      down_bytes_ += d.bytes;
    }
    return rt_->StreamSynchronize(s);  // the inputs are in the staging; the stream has drained
  }));
  TSR_RETURN_IF_ERROR(host(in_, out_));  // a host collective: guarded by itself
  return host_->Guarded(what, [&]() -> Status {
    bool drained = true;  // nothing of ours was queued after the synchronisation above
    for (const Span& u : up) {
      TSR_RETURN_IF_ERROR(
          CopyOn(s, const_cast<void*>(u.dev), out_ + u.host_off, u.bytes, CopyKind::kHostToDevice, &drained));
      up_bytes_ += u.bytes;
    }
    return MarkUp(s);
  });
}

Status AccelRank::ReuseStaging(size_t in_bytes, size_t out_bytes) {
  TSR_RETURN_IF_ERROR(rt_->SetDevice(name_.index));
  if (up_pending_) {  // the previous call's results are still going up from the staging
    up_pending_ = false;
    TSR_RETURN_IF_ERROR(rt_->EventSynchronize(up_done_).WithContext("the previous call's copies to the device"));
  }
  TSR_RETURN_IF_ERROR(Grow(&in_, &in_cap_, in_bytes));
  return Grow(&out_, &out_cap_, out_bytes);
}

Status AccelRank::MarkUp(DeviceRuntime::Stream s) {
  TSR_RETURN_IF_ERROR(rt_->EventRecord(up_done_, s));
  up_pending_ = true;
  return Status::Ok();
}

Status AccelRank::UpQueued(const char* what, DeviceRuntime::Stream s) {
  return host_->Guarded(what, [&] { return MarkUp(s); });
}

Status AccelRank::Ccl(const char* call, int result) {
  ++ccl_calls_;
  Status s = ccl_->lib().Check(result, call);
  if (!s.ok()) ccl_->MarkFailed();
  return s;
}

Status AccelRank::OnCcl(const char* what, const char* call, const std::function<int()>& run) {
  return host_->Guarded(what, [&]() -> Status {
    TSR_RETURN_IF_ERROR(rt_->SetDevice(name_.index));
    return Ccl(call, run());
  });
}

// ---- hybrid world, island of several ranks ----

bool AccelRank::IslandTakes(CollKind kind, DType dt, RedOp op) {
  if (!island_lib_) return false;
  const std::string why = IslandCclRefusal(kind, dt, op, ccl_->lib(), rt_->name(), /*widens=*/false);
  if (why.empty()) return true;
  if (said_.insert(why).second && shape_.island_rank == 0)
    TSR_LOG_INFO("island {} ({}): {} staged through pinned memory, not on its {}: {}", shape_.island,
                 name_.family->label, CollName(kind), ccl_->lib().name(), why);
  return false;
}

Status AccelRank::GrowDevice(size_t q_bytes, size_t extra) {
  const int n = shape_.island_size;
  const size_t need = RoundUp(q_bytes) + RoundUp(q_bytes * n) + extra;
  if (need <= dev_cap_) return Status::Ok();
  if (dev_) TSR_RETURN_IF_ERROR(rt_->Free(dev_));
  dev_ = nullptr;
  dev_cap_ = 0;
  const size_t want = std::max<size_t>(need, 1 << 20);
  TSR_ASSIGN_OR_RETURN(void* p, rt_->Malloc(want));
  dev_ = static_cast<std::byte*>(p);
  dev_cap_ = want;
  return Status::Ok();
}

Status AccelRank::ShardDown(const char* what, const std::byte* buf, size_t L, DType dt, RedOp op, std::byte* host,
                            DeviceRuntime::Stream s) {
  return host_->Guarded(what, [&]() -> Status {
    const PaddedBlocks b(shape_.island_size, L);
    const size_t esz = DTypeSize(dt), qb = b.q * esz;
    TSR_RETURN_IF_ERROR(GrowDevice(qb, 0));
    bool drained = false;
    const std::byte* in = buf;
    if (b.padded()) {  // the schedule's uneven shards into the library's equal blocks
      for (size_t j = 0; j < b.n; ++j) {
        const Range sj = b.shard(j);
        TSR_RETURN_IF_ERROR(
            CopyOn(s, DevPad(qb) + j * qb, buf + sj.lo * esz, sj.len() * esz, CopyKind::kDeviceToDevice, &drained));
      }
      in = DevPad(qb);
    }
    const int cop = ccl_->Op(op == RedOp::kAvg ? RedOp::kSum : op);  // avg: the bridge divides once
    TSR_RETURN_IF_ERROR(
        Ccl("ReduceScatter", ccl_->lib().ReduceScatter(in, DevShard(), b.q, CclDataType(dt), cop, ccl_->handle(), s)));
    drained = false;
    const Range S = b.shard(shape_.island_rank);
    TSR_RETURN_IF_ERROR(CopyOn(s, host + S.lo * esz, DevShard(), S.len() * esz, CopyKind::kDeviceToHost, &drained));
    down_bytes_ += S.len() * esz;
    return rt_->StreamSynchronize(s);
  });
}

Status AccelRank::ShardUp(const char* what, const std::byte* host, size_t L, DType dt, std::byte* buf,
                          DeviceRuntime::Stream s) {
  return host_->Guarded(what, [&]() -> Status {
    const PaddedBlocks b(shape_.island_size, L);
    const size_t esz = DTypeSize(dt), qb = b.q * esz;
    TSR_RETURN_IF_ERROR(GrowDevice(qb, 0));
    bool drained = false;
    const Range S = b.shard(shape_.island_rank);
    TSR_RETURN_IF_ERROR(CopyOn(s, DevShard(), host + S.lo * esz, S.len() * esz, CopyKind::kHostToDevice, &drained));
    up_bytes_ += S.len() * esz;
    std::byte* out = b.padded() ? DevPad(qb) : buf;
    TSR_RETURN_IF_ERROR(
        Ccl("AllGather", ccl_->lib().AllGather(DevShard(), out, b.q, CclDataType(dt), ccl_->handle(), s)));
    drained = false;
    if (b.padded())
      for (size_t j = 0; j < b.n; ++j) {
        const Range sj = b.shard(j);
        TSR_RETURN_IF_ERROR(
            CopyOn(s, buf + sj.lo * esz, DevPad(qb) + j * qb, sj.len() * esz, CopyKind::kDeviceToDevice, &drained));
      }
    return Status::Ok();
  });
}

Status AccelRank::IslandAllReduce(const std::byte* send, std::byte* recv, size_t count, DType dt, RedOp op,
                                  tsrStream_t stream) {
  std::lock_guard<std::mutex> lock(mu_);
  auto* s = static_cast<DeviceRuntime::Stream>(stream);
  const size_t esz = DTypeSize(dt);
  ++island_calls_;
  TSR_RETURN_IF_ERROR(host_->Guarded("allreduce", [&] { return ReuseStaging(count * esz, 0); }));
  // Piece by piece, as every other rank cuts it; each piece in place in its own part of the staging, so a piece's
  // copy up may still run while the next one crosses the bridge.
  for (const Range& c : host_->AllReduceChunks(count, dt)) {
    std::byte* host = in_ + c.lo * esz;
    TSR_RETURN_IF_ERROR(ShardDown("allreduce", send + c.lo * esz, c.len(), dt, op, host, s));
    TSR_RETURN_IF_ERROR(host_->HostBridge(CollKind::kAllReduce, host, host, c.len(), dt, op, 0));
    TSR_RETURN_IF_ERROR(ShardUp("allreduce", host, c.len(), dt, recv + c.lo * esz, s));
  }
  return UpQueued("allreduce", s);
}

Status AccelRank::IslandReduceScatter(const std::byte* send, std::byte* recv, size_t recvcount, DType dt, RedOp op,
                                      tsrStream_t stream) {
  std::lock_guard<std::mutex> lock(mu_);
  auto* s = static_cast<DeviceRuntime::Stream>(stream);
  const size_t esz = DTypeSize(dt), C = recvcount * shape_.size;
  ++island_calls_;
  TSR_RETURN_IF_ERROR(host_->Guarded("reduce_scatter", [&] { return ReuseStaging(C * esz, recvcount * esz); }));
  TSR_RETURN_IF_ERROR(ShardDown("reduce_scatter", send, C, dt, op, in_, s));
  TSR_RETURN_IF_ERROR(host_->HostBridge(CollKind::kReduceScatter, in_, out_, recvcount, dt, op, 0));
  return host_->Guarded("reduce_scatter", [&]() -> Status {
    bool drained = true;
    TSR_RETURN_IF_ERROR(CopyOn(s, recv, out_, recvcount * esz, CopyKind::kHostToDevice, &drained));
    up_bytes_ += recvcount * esz;
    return MarkUp(s);
  });
}

Status AccelRank::IslandAllGather(const std::byte* send, std::byte* recv, size_t sendcount, DType dt,
                                  tsrStream_t stream) {
  std::lock_guard<std::mutex> lock(mu_);
  auto* s = static_cast<DeviceRuntime::Stream>(stream);
  const int n = shape_.island_size;
  const size_t esz = DTypeSize(dt), C = sendcount * shape_.size;
  const Range S = Shard(n, shape_.island_rank, C);
  ++island_calls_;
  // The island's contributions, gathered on the device in island order; those inside my shard go down to their
  // places in the staging.
  TSR_RETURN_IF_ERROR(host_->Guarded("allgather", [&]() -> Status {
    TSR_RETURN_IF_ERROR(ReuseStaging(C * esz, 0));
    const size_t q_bytes = (C + n - 1) / n * esz;
    TSR_RETURN_IF_ERROR(GrowDevice(q_bytes, n * sendcount * esz));
    std::byte* gathered = DevPad(q_bytes) + RoundUp(q_bytes * n);
    TSR_RETURN_IF_ERROR(
        Ccl("AllGather", ccl_->lib().AllGather(send, gathered, sendcount, CclDataType(dt), ccl_->handle(), s)));
    bool drained = false;
    for (int j = 0; j < n; ++j) {
      const size_t lo = static_cast<size_t>(shape_.island_ranks[j]) * sendcount;
      const Range x = Range{lo, lo + sendcount}.Intersect(S);
      if (x.len() == 0) continue;
      TSR_RETURN_IF_ERROR(CopyOn(s, in_ + x.lo * esz, gathered + (j * sendcount + x.lo - lo) * esz, x.len() * esz,
                                 CopyKind::kDeviceToHost, &drained));
      down_bytes_ += x.len() * esz;
    }
    return rt_->StreamSynchronize(s);
  }));
  TSR_RETURN_IF_ERROR(
      host_->HostBridge(CollKind::kAllGather, in_ + shape_.rank * sendcount * esz, in_, sendcount, dt, RedOp::kSum, 0));
  TSR_RETURN_IF_ERROR(ShardUp("allgather", in_, C, dt, recv, s));
  return UpQueued("allgather", s);
}

Status AccelRank::IslandBroadcast(const std::byte* send, std::byte* recv, size_t count, DType dt, int root,
                                  tsrStream_t stream) {
  std::lock_guard<std::mutex> lock(mu_);
  auto* s = static_cast<DeviceRuntime::Stream>(stream);
  const int n = shape_.island_size;
  const size_t esz = DTypeSize(dt);
  const Range S = Shard(n, shape_.island_rank, count);
  const auto at = std::find(shape_.island_ranks.begin(), shape_.island_ranks.end(), root);
  ++island_calls_;
  TSR_RETURN_IF_ERROR(host_->Guarded("broadcast", [&] { return ReuseStaging(count * esz, 0); }));
  if (at == shape_.island_ranks.end()) {  // the root is in another island: my shard comes over the bridge
    TSR_RETURN_IF_ERROR(host_->HostBridge(CollKind::kBroadcast, in_, in_, count, dt, RedOp::kSum, root));
    TSR_RETURN_IF_ERROR(ShardUp("broadcast", in_, count, dt, recv, s));
    return UpQueued("broadcast", s);
  }
  // The root's island: the library broadcasts inside it, and each rank sends its shard on over the bridge.
  TSR_RETURN_IF_ERROR(host_->Guarded("broadcast", [&]() -> Status {
    const int iroot = static_cast<int>(at - shape_.island_ranks.begin());
    TSR_RETURN_IF_ERROR(
        Ccl("Broadcast", ccl_->lib().Broadcast(send, recv, count, CclDataType(dt), iroot, ccl_->handle(), s)));
    bool drained = false;
    TSR_RETURN_IF_ERROR(
        CopyOn(s, in_ + S.lo * esz, recv + S.lo * esz, S.len() * esz, CopyKind::kDeviceToHost, &drained));
    down_bytes_ += S.len() * esz;
    return rt_->StreamSynchronize(s);
  }));
  return host_->HostBridge(CollKind::kBroadcast, in_, in_, count, dt, RedOp::kSum, root);
}

Status AccelRank::AllReduce(const void* send, void* recv, size_t count, tsrDataType_t type, tsrRedOp_t op,
                            tsrStream_t stream) {
  const auto dt = static_cast<DType>(type);
  const auto rop = static_cast<RedOp>(op);
  if (!IsValid(dt)) return host_->HostAllReduce(send, recv, count, type, op, nullptr);  // names the bad type
  const size_t bytes = count * DTypeSize(dt);
  TSR_RETURN_IF_ERROR(CheckBuffers("allreduce", send, bytes, recv, bytes, stream));
  if (stream == nullptr || !IsValid(rop)) return host_->HostAllReduce(send, recv, count, type, op, nullptr);
  if (island_lib_ && count > 0 && IslandTakes(CollKind::kAllReduce, dt, rop))
    return IslandAllReduce(static_cast<const std::byte*>(send), static_cast<std::byte*>(recv), count, dt, rop, stream);
  if (!island_lib_ && CclTakes(dt, rop))
    return OnCcl("allreduce", "AllReduce", [&] {
      return ccl_->lib().AllReduce(send, recv, count, CclDataType(dt), ccl_->Op(rop), ccl_->handle(), stream);
    });
  return Staged("allreduce", stream, {{send, 0, bytes}}, bytes, {{recv, 0, bytes}}, bytes,
                [&](std::byte* in, std::byte* out) { return host_->HostAllReduce(in, out, count, type, op, nullptr); });
}

Status AccelRank::ReduceScatter(const void* send, void* recv, size_t recvcount, tsrDataType_t type, tsrRedOp_t op,
                                tsrStream_t stream) {
  const auto dt = static_cast<DType>(type);
  const auto rop = static_cast<RedOp>(op);
  if (!IsValid(dt)) return host_->HostReduceScatter(send, recv, recvcount, type, op, nullptr);
  const size_t rb = recvcount * DTypeSize(dt), sb = rb * shape_.size;
  TSR_RETURN_IF_ERROR(CheckBuffers("reduce_scatter", send, sb, recv, rb, stream));
  if (stream == nullptr || !IsValid(rop)) return host_->HostReduceScatter(send, recv, recvcount, type, op, nullptr);
  if (island_lib_ && recvcount > 0 && IslandTakes(CollKind::kReduceScatter, dt, rop))
    return IslandReduceScatter(static_cast<const std::byte*>(send), static_cast<std::byte*>(recv), recvcount, dt, rop,
                               stream);
  if (!island_lib_ && CclTakes(dt, rop))
    return OnCcl("reduce_scatter", "ReduceScatter", [&] {
      return ccl_->lib().ReduceScatter(send, recv, recvcount, CclDataType(dt), ccl_->Op(rop), ccl_->handle(), stream);
    });
  return Staged("reduce_scatter", stream, {{send, 0, sb}}, sb, {{recv, 0, rb}}, rb, [&](std::byte* in, std::byte* out) {
    return host_->HostReduceScatter(in, out, recvcount, type, op, nullptr);
  });
}

Status AccelRank::AllGather(const void* send, void* recv, size_t sendcount, tsrDataType_t type, tsrStream_t stream) {
  const auto dt = static_cast<DType>(type);
  if (!IsValid(dt)) return host_->HostAllGather(send, recv, sendcount, type, nullptr);
  const size_t sb = sendcount * DTypeSize(dt), rb = sb * shape_.size;
  TSR_RETURN_IF_ERROR(CheckBuffers("allgather", send, sb, recv, rb, stream));
  if (stream == nullptr) return host_->HostAllGather(send, recv, sendcount, type, nullptr);
  if (island_lib_ && sendcount > 0 && IslandTakes(CollKind::kAllGather, dt, RedOp::kSum))
    return IslandAllGather(static_cast<const std::byte*>(send), static_cast<std::byte*>(recv), sendcount, dt, stream);
  if (!island_lib_ && CclTakes(dt))
    return OnCcl("allgather", "AllGather",
                 [&] { return ccl_->lib().AllGather(send, recv, sendcount, CclDataType(dt), ccl_->handle(), stream); });
  return Staged("allgather", stream, {{send, 0, sb}}, sb, {{recv, 0, rb}}, rb,
                [&](std::byte* in, std::byte* out) { return host_->HostAllGather(in, out, sendcount, type, nullptr); });
}

Status AccelRank::Broadcast(const void* send, void* recv, size_t count, tsrDataType_t type, int root,
                            tsrStream_t stream) {
  const auto dt = static_cast<DType>(type);
  if (!IsValid(dt) || root < 0 || root >= shape_.size)
    return host_->HostBroadcast(send, recv, count, type, root, nullptr);  // names the bad argument
  const size_t bytes = count * DTypeSize(dt);
  const bool is_root = root == shape_.rank;
  TSR_RETURN_IF_ERROR(CheckBuffers("broadcast", is_root ? send : nullptr, is_root ? bytes : 0, recv, bytes, stream));
  if (stream == nullptr) return host_->HostBroadcast(send, recv, count, type, root, nullptr);
  if (island_lib_ && count > 0 && IslandTakes(CollKind::kBroadcast, dt, RedOp::kSum))
    return IslandBroadcast(static_cast<const std::byte*>(send), static_cast<std::byte*>(recv), count, dt, root, stream);
  if (!island_lib_ && CclTakes(dt))
    return OnCcl("broadcast", "Broadcast", [&] {
      return ccl_->lib().Broadcast(send, recv, count, CclDataType(dt), root, ccl_->handle(), stream);
    });
  std::vector<Span> down;
  if (is_root) down.push_back({send, 0, bytes});
  return Staged("broadcast", stream, down, bytes, {{recv, 0, bytes}}, bytes, [&](std::byte* in, std::byte* out) {
    return host_->HostBroadcast(in, out, count, type, root, nullptr);
  });
}

Status AccelRank::Send(const void* send, size_t count, tsrDataType_t type, int peer, tsrStream_t stream) {
  const auto dt = static_cast<DType>(type);
  if (!IsValid(dt) || stream == nullptr) {
    if (IsValid(dt)) TSR_RETURN_IF_ERROR(CheckBuffers("send", send, 0, nullptr, 0, nullptr));
    return host_->HostSend(send, count, type, peer, nullptr);
  }
  const size_t bytes = count * DTypeSize(dt);
  TSR_RETURN_IF_ERROR(CheckBuffers("send", send, bytes, nullptr, 0, stream));
  return Staged("send", stream, {{send, 0, bytes}}, bytes, {}, 0,
                [&](std::byte* in, std::byte*) { return host_->HostSend(in, count, type, peer, nullptr); });
}

Status AccelRank::Recv(void* recv, size_t count, tsrDataType_t type, int peer, tsrStream_t stream) {
  const auto dt = static_cast<DType>(type);
  if (!IsValid(dt) || stream == nullptr) {
    if (IsValid(dt)) TSR_RETURN_IF_ERROR(CheckBuffers("recv", nullptr, 0, recv, 0, nullptr));
    return host_->HostRecv(recv, count, type, peer, nullptr);
  }
  const size_t bytes = count * DTypeSize(dt);
  TSR_RETURN_IF_ERROR(CheckBuffers("recv", nullptr, 0, recv, bytes, stream));
  return Staged("recv", stream, {}, 0, {{recv, 0, bytes}}, bytes,
                [&](std::byte*, std::byte* out) { return host_->HostRecv(out, count, type, peer, nullptr); });
}

Status AccelRank::Group(const std::vector<P2POp>& ops) {
  if (ops.empty()) return Status::Ok();
  const tsrStream_t stream = ops.front().stream;
  for (size_t i = 0; i < ops.size(); ++i) {
    const P2POp& op = ops[i];
    if (!IsValid(static_cast<DType>(op.type)) || op.peer < 0 || op.peer >= shape_.size)
      return host_->HostGroup(ops);  // names the bad argument
    if (op.stream != stream)
      return host_->Guarded("group", [&] {
        return InvalidArgument(
            fmt::format("{} #{} is on stream {} but the group's first call is on stream {}: "
                        "use one stream",
                        op.is_send ? "send" : "recv", i, op.stream, stream));
      });
  }
  // Each operation's buffer at its own 64-byte-aligned place in the staging.
  std::vector<P2POp> staged = ops;
  std::vector<Span> down, up;
  size_t in_bytes = 0, out_bytes = 0;
  for (P2POp& op : staged) {
    const size_t bytes = op.count * DTypeSize(static_cast<DType>(op.type));
    const char* what = op.is_send ? "send (group)" : "recv (group)";
    TSR_RETURN_IF_ERROR(CheckBuffers(what, op.is_send ? op.send : nullptr, op.is_send ? bytes : 0,
                                     op.is_send ? nullptr : op.recv, op.is_send ? 0 : bytes, stream));
    if (stream == nullptr) continue;
    if (op.is_send) {
      down.push_back({op.send, in_bytes, bytes});
      in_bytes += AlignUp(bytes);
    } else {
      up.push_back({op.recv, out_bytes, bytes});
      out_bytes += AlignUp(bytes);
    }
    op.stream = nullptr;
  }
  if (stream == nullptr) return host_->HostGroup(ops);
  return Staged("group", stream, down, in_bytes, up, out_bytes, [&](std::byte* in, std::byte* out) {
    size_t d = 0, u = 0;
    for (P2POp& op : staged) {
      if (op.is_send)
        op.send = in + down[d++].host_off;
      else
        op.recv = out + up[u++].host_off;
    }
    return host_->HostGroup(staged);
  });
}

Status AccelRank::AllToAllv(const void* send, const size_t* sendcounts, const size_t* sdispls, void* recv,
                            const size_t* recvcounts, const size_t* rdispls, tsrDataType_t type, tsrStream_t stream) {
  const auto dt = static_cast<DType>(type);
  auto host_call = [&](const void* s, void* r) {
    return host_->HostAllToAllv(s, sendcounts, sdispls, r, recvcounts, rdispls, type);
  };
  if (!IsValid(dt) || sendcounts == nullptr || sdispls == nullptr || recvcounts == nullptr || rdispls == nullptr)
    return host_call(send, recv);  // names the bad argument
  const size_t esz = DTypeSize(dt);
  size_t s_end = 0, r_end = 0;  // elements: the extent each buffer must have
  for (int p = 0; p < shape_.size; ++p) {
    if (sendcounts[p] > 0) s_end = std::max(s_end, sdispls[p] + sendcounts[p]);
    if (recvcounts[p] > 0) r_end = std::max(r_end, rdispls[p] + recvcounts[p]);
    if (sdispls[p] + sendcounts[p] < sdispls[p] || rdispls[p] + recvcounts[p] < rdispls[p])
      return host_call(send, recv);  // the host path names the overflow
  }
  TSR_RETURN_IF_ERROR(CheckBuffers("alltoall", send, s_end * esz, recv, r_end * esz, stream));
  if (stream == nullptr) return host_call(send, recv);
  // The whole send extent goes down; each received block comes back up to its place (gaps stay untouched).
  std::vector<Span> up;
  for (int p = 0; p < shape_.size; ++p)
    if (recvcounts[p] > 0)
      up.push_back({static_cast<const std::byte*>(recv) + rdispls[p] * esz, rdispls[p] * esz, recvcounts[p] * esz});
  return Staged("alltoall", stream, {{send, 0, s_end * esz}}, s_end * esz, up, r_end * esz,
                [&](std::byte* in, std::byte* out) { return host_call(in, out); });
}

}  // namespace

Result<std::unique_ptr<DeviceRank>> OpenAccelRank(const DeviceName& device) { return Open(device); }

}  // namespace tessera::comm
