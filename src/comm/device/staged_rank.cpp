// comm/device/staged_rank: the staged rank — the DeviceRank of every device family whose runtime is a
// row of the device-runtime table (comm/runtime: Ascend's ACL, Moore Threads' MUSA), written on DeviceRuntime and
// the CCL table alone, so a new vendor is a runtime row and a CCL row (and a family row in common/vendor), with no
// code here. It reaches its communicator only through HostPath (device.hpp).
//
//  * World of one island: allreduce, reduce-scatter, allgather and broadcast go to the island's collective library
//    (the family's CCL row, DeviceFamily::ccl: hccl, mccl; TESSERA_CCL / TESSERA_CCL_LIB override it) on the
//    caller's stream, for every type and op the row has. What the row lacks (HCCL's avg, HCCL's uint8 and f64
//    reductions, MCCL's bf16 where it has none) and send/recv, groups and alltoall are staged as below: every rank
//    decides from (call, type, op) alone, so all ranks of the island take the same path.
//  * Hybrid world, and what the CCL does not take: the staged plan (staged_plan.hpp, the same parts DeviceBridgeRank
//    runs), through the runtime's MallocHost memory, which every row has. This rank is its executor where the runtime
//    has only events (no stream memory operations, so no device-written "input ready" flags for a worker to watch):
//    on the CALLER's thread, parts double-buffered (staged_rank_hybrid.cpp): part k + 1's device work and copies down
//    are queued on the caller's stream (so after whatever produced the inputs) before part k's host step runs, and each
//    part's results are queued back up as soon as its host step is done. The call returns with the last copies up
//    in flight; the next staged call waits for them (an event recorded after them) before it reuses the staging.
//    So a staged call returns once its host steps are done: host-synchronous, stream-ordered.
//  * Hybrid world, island of several ranks: the island's library runs the island phases of allreduce,
//    reduce-scatter, allgather and broadcast on the device (the staged plan's Island* calls; docs/architecture.md,
//    "Islands of several devices"): it reduce-scatters the island's inputs (16-bit data widened to f32 on the
//    device, DeviceRuntime::Widen, unless the island is native) or gathers its contributions, only this rank's shard
//    (1/n of the buffer) goes down to pinned memory, crosses the bridge (HostPath::HostBridge) and comes back up,
//    and the library allgathers the shards. Where the island cannot do its part exactly — a 16-bit reduction where a
//    rank cannot widen on its device, a type or op the row lacks, the library missing on any rank of the island —
//    the call is staged whole; one log line says why.
//  * Hybrid world, the copy bridge (TESSERA_COPY_BRIDGE=on, an island of this one rank: Island::copy_only): the rings
//    of its links to the other islands are page-locked with the runtime (HostRegister), and allreduce and
//    reduce-scatter of floating types, allgather and broadcast run the hierarchical algorithm with its bridge steps on
//    the runtime's copies (RuntimeRingOps without kernels), as the device bridge runs those four: the rank's bytes go
//    from device memory straight into the peers' rings and the results straight back, no pinned staging and no CPU
//    copy. It folds nothing (FoldWeights gives it 0): the other islands fold. On this thread, after the caller's
//    stream has reached the call; it returns once its copies are done (staged_rank_hybrid.cpp). Every other call is
//    staged as above.
//  * Host memory (stream NULL): the host path directly.
// A copy whose addresses are not 64-byte aligned (ACL's rule for asynchronous copies, the row's async_copy_align)
// is made synchronously, after the caller's stream has drained. A failure of any step fails the communicator and is
// announced to the other ranks (HostPath::Guarded), as a failure inside a host collective is. Threads: ACL binds a
// device to a thread, so every entry point selects this rank's device first.
#include "comm/device/staged_rank.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <mutex>
#include <set>
#include <string>

#include "comm/ccl/ccl.hpp"
#include "comm/comm.hpp"
#include "comm/runtime/runtime.hpp"
#include "comm/schedule.hpp"
#include "common/log.hpp"
#include "common/vendor.hpp"

namespace tessera::comm {
namespace {

Result<std::unique_ptr<DeviceRank>> Open(const DeviceName& name) {
  TSR_ASSIGN_OR_RETURN(auto rt, OpenDevice(name));
  return std::unique_ptr<DeviceRank>(new StagedRank(std::move(rt), name));
}

constexpr size_t AlignUp(size_t n) { return (n + 63) / 64 * 64; }

}  // namespace

Status StagedRank::Attach(Comm* comm) {
  host_ = &comm->host_path();
  shape_ = host_->WorldShape();
  TSR_RETURN_IF_ERROR(rt_->SetDevice(name_.index));
  TSR_ASSIGN_OR_RETURN(up_done_, rt_->EventCreate());
  for (auto& e : down_ev_) {
    TSR_ASSIGN_OR_RETURN(e, rt_->EventCreate());
  }
  plan_ = std::make_unique<StagedPlan>(*rt_, host_, shape_, static_cast<StagedExecutor*>(this));
  if (shape_.islands > 1) {
    trace_.Open(shape_.rank, "call run part bytes queued_us wait_us down_us host_us up_us");
    if (host_->DeviceBridgeFor(DType::kFloat32)) {
      // The copy bridge, or, where the runtime cannot register the rings, pinned staging (the same protocol on the
      // wire: the other ranks see no difference).
      const Status c = AttachCopyBridge();
      if (!c.ok()) {
        TSR_LOG_WARN("{}; its collectives stage through pinned memory instead", c.message());
        ReleaseCopyBridge();
      }
    }
    return shape_.island_size > 1 ? AttachIslandLibrary() : Status::Ok();
  }
  // World of one island: the island's own library.
  TSR_ASSIGN_OR_RETURN(ccl_, OpenWorldCcl(host_->Store(), shape_, name_));
  return Status::Ok();
}

StagedRank::~StagedRank() {
  (void)rt_->SetDevice(name_.index);
  if (up_pending_) (void)rt_->EventSynchronize(up_done_);
  trace_.Write();
  ReleaseCopyBridge();
  if (up_done_) (void)rt_->EventDestroy(up_done_);
  for (auto& e : down_ev_)
    if (e) (void)rt_->EventDestroy(e);
  if (dev_) (void)rt_->Free(dev_);
  if (in_) (void)rt_->FreeHost(in_);
  if (out_) (void)rt_->FreeHost(out_);
  ccl_.reset();
}

std::string StagedRank::Describe() const {
  auto size = [](size_t b) {
    return b % (1 << 20) == 0 ? fmt::format("{} MiB", b >> 20)
           : b % 1024 == 0    ? fmt::format("{} KiB", b >> 10)
                              : fmt::format("{} bytes", b);
  };
  const std::string how =
      copy_ops_ ? fmt::format(
                      "copy engines straight into the shm rings{}, folds nothing (the copy bridge: allreduce and "
                      "reduce-scatter of floating types, allgather, broadcast; {} a copy); the rest staged through "
                      "pinned host memory",
                      relayed_links_ > 0 ? fmt::format(" ({} link{} relayed through host rings)", relayed_links_,
                                                       relayed_links_ == 1 ? "" : "s")
                                         : std::string(),
                      size(copy_ops_->piece()))
      : !ccl_ ? "staged through pinned host memory"
      : island_lib_
          ? fmt::format("{} ('{}') runs the island phases, shards cross the bridge through pinned host memory",
                        ccl_->lib().name(), ccl_->lib().path())
          : fmt::format("{} ('{}') inside the island, the rest staged", ccl_->lib().name(), ccl_->lib().path());
  return fmt::format("{} ({} runtime '{}'), {}", name_.ToString(), rt_->name(), rt_->path(), how);
}

Status StagedRank::CheckOne(const char* which, const void* p, size_t bytes, tsrStream_t stream) {
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

Status StagedRank::CheckBuffers(const char* what, const void* send, size_t send_bytes, const void* recv,
                                size_t recv_bytes, tsrStream_t stream) {
  return host_->Guarded(what, [&]() -> Status {
    TSR_RETURN_IF_ERROR(rt_->SetDevice(name_.index));
    TSR_RETURN_IF_ERROR(CheckOne("sendbuf", send, send_bytes, stream));
    return CheckOne("recvbuf", recv, recv_bytes, stream);
  });
}

Status StagedRank::Grow(std::byte** buf, size_t* cap, size_t bytes) {
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

Status StagedRank::CopyOn(DeviceRuntime::Stream stream, void* dst, const void* src, size_t bytes, CopyKind kind,
                          bool* drained) {
  if (bytes == 0) return Status::Ok();
  if (rt_->AsyncCopyAligned(dst, src)) {
    *drained = false;
    return rt_->MemcpyAsync(dst, bytes, src, bytes, kind, stream);
  }
  if (!*drained) {
    TSR_RETURN_IF_ERROR(rt_->StreamSynchronize(stream));
    *drained = true;
  }
  return rt_->Memcpy(dst, bytes, src, bytes, kind);
}

Status StagedRank::Staged(const char* what, tsrStream_t stream, const std::vector<Span>& down, size_t in_bytes,
                          const std::vector<Span>& up, size_t out_bytes,
                          const std::function<Status(std::byte* in, std::byte* out)>& host) {
  std::lock_guard<std::mutex> lock(mu_);
  ++staged_calls_;
  std::byte *in, *out;
  TSR_RETURN_IF_ERROR(Staging(what, in_bytes, out_bytes, &in, &out));
  std::vector<StagedPart> parts(1);
  for (const Span& d : down) parts[0].down.push_back({in + d.host_off, d.dev, d.bytes});
  for (const Span& u : up) parts[0].up.push_back({const_cast<void*>(u.dev), out + u.host_off, u.bytes});
  parts[0].host = [&, in, out] { return host(in, out); };
  return Run(what, stream, std::move(parts));
}

Status StagedRank::OnIsland(const std::function<Status()>& run) {
  std::lock_guard<std::mutex> lock(mu_);
  ++island_calls_;
  return run();
}

Status StagedRank::Ccl(const char* call, int result) {
  ++ccl_calls_;
  Status s = ccl_->lib().Check(result, call);
  if (!s.ok()) ccl_->MarkFailed();
  return s;
}

Status StagedRank::OnCcl(const char* what, const char* call, const std::function<int()>& run) {
  return host_->Guarded(what, [&]() -> Status {
    TSR_RETURN_IF_ERROR(rt_->SetDevice(name_.index));
    return Ccl(call, run());
  });
}

Status StagedRank::AllReduce(const void* send, void* recv, size_t count, tsrDataType_t type, tsrRedOp_t op,
                             tsrStream_t stream) {
  const auto dt = static_cast<DType>(type);
  const auto rop = static_cast<RedOp>(op);
  if (!IsValid(dt)) return host_->HostAllReduce(send, recv, count, type, op, nullptr);  // names the bad type
  const size_t bytes = count * DTypeSize(dt);
  TSR_RETURN_IF_ERROR(CheckBuffers("allreduce", send, bytes, recv, bytes, stream));
  if (stream == nullptr || !IsValid(rop)) return host_->HostAllReduce(send, recv, count, type, op, nullptr);
  if (island_lib_ && count > 0 && IslandTakes(CollKind::kAllReduce, dt, rop))
    return OnIsland([&] { return plan_->IslandAllReduce(send, recv, count, dt, rop, stream); });
  if (!island_lib_ && CclTakes(dt, rop))
    return OnCcl("allreduce", "AllReduce",
                 [&] { return ccl_->lib().AllReduce(send, recv, count, dt, ccl_->Op(rop), ccl_->handle(), stream); });
  if (CopyBridgeTakes(CollKind::kAllReduce, dt))
    return CopyBridgeCall(CollKind::kAllReduce, "allreduce", send, recv, count, dt, rop, 0, stream);
  std::lock_guard<std::mutex> lock(mu_);
  ++staged_calls_;
  return plan_->AllReduce(send, recv, count, dt, rop, stream);
}

Status StagedRank::ReduceScatter(const void* send, void* recv, size_t recvcount, tsrDataType_t type, tsrRedOp_t op,
                                 tsrStream_t stream) {
  const auto dt = static_cast<DType>(type);
  const auto rop = static_cast<RedOp>(op);
  if (!IsValid(dt)) return host_->HostReduceScatter(send, recv, recvcount, type, op, nullptr);
  const size_t rb = recvcount * DTypeSize(dt), sb = rb * shape_.size;
  TSR_RETURN_IF_ERROR(CheckBuffers("reduce_scatter", send, sb, recv, rb, stream));
  if (stream == nullptr || !IsValid(rop)) return host_->HostReduceScatter(send, recv, recvcount, type, op, nullptr);
  if (island_lib_ && recvcount > 0 && IslandTakes(CollKind::kReduceScatter, dt, rop))
    return OnIsland([&] { return plan_->IslandReduceScatter(send, recv, recvcount, dt, rop, stream); });
  if (!island_lib_ && CclTakes(dt, rop))
    return OnCcl("reduce_scatter", "ReduceScatter", [&] {
      return ccl_->lib().ReduceScatter(send, recv, recvcount, dt, ccl_->Op(rop), ccl_->handle(), stream);
    });
  if (CopyBridgeTakes(CollKind::kReduceScatter, dt))
    return CopyBridgeCall(CollKind::kReduceScatter, "reduce_scatter", send, recv, recvcount, dt, rop, 0, stream);
  return Staged("reduce_scatter", stream, {{send, 0, sb}}, sb, {{recv, 0, rb}}, rb, [&](std::byte* in, std::byte* out) {
    return host_->HostReduceScatter(in, out, recvcount, type, op, nullptr);
  });
}

Status StagedRank::AllGather(const void* send, void* recv, size_t sendcount, tsrDataType_t type, tsrStream_t stream) {
  const auto dt = static_cast<DType>(type);
  if (!IsValid(dt)) return host_->HostAllGather(send, recv, sendcount, type, nullptr);
  const size_t sb = sendcount * DTypeSize(dt), rb = sb * shape_.size;
  TSR_RETURN_IF_ERROR(CheckBuffers("allgather", send, sb, recv, rb, stream));
  if (stream == nullptr) return host_->HostAllGather(send, recv, sendcount, type, nullptr);
  if (island_lib_ && sendcount > 0 && IslandTakes(CollKind::kAllGather, dt, RedOp::kSum))
    return OnIsland([&] { return plan_->IslandAllGather(send, recv, sendcount, dt, stream); });
  if (!island_lib_ && CclTakes(dt))
    return OnCcl("allgather", "AllGather",
                 [&] { return ccl_->lib().AllGather(send, recv, sendcount, dt, ccl_->handle(), stream); });
  if (CopyBridgeTakes(CollKind::kAllGather, dt))
    return CopyBridgeCall(CollKind::kAllGather, "allgather", send, recv, sendcount, dt, RedOp::kSum, 0, stream);
  return Staged("allgather", stream, {{send, 0, sb}}, sb, {{recv, 0, rb}}, rb,
                [&](std::byte* in, std::byte* out) { return host_->HostAllGather(in, out, sendcount, type, nullptr); });
}

Status StagedRank::Broadcast(const void* send, void* recv, size_t count, tsrDataType_t type, int root,
                             tsrStream_t stream) {
  const auto dt = static_cast<DType>(type);
  if (!IsValid(dt) || root < 0 || root >= shape_.size)
    return host_->HostBroadcast(send, recv, count, type, root, nullptr);  // names the bad argument
  const size_t bytes = count * DTypeSize(dt);
  const bool is_root = root == shape_.rank;
  TSR_RETURN_IF_ERROR(CheckBuffers("broadcast", is_root ? send : nullptr, is_root ? bytes : 0, recv, bytes, stream));
  if (stream == nullptr) return host_->HostBroadcast(send, recv, count, type, root, nullptr);
  if (island_lib_ && count > 0 && IslandTakes(CollKind::kBroadcast, dt, RedOp::kSum))
    return OnIsland([&] { return plan_->IslandBroadcast(send, recv, count, dt, root, stream); });
  if (!island_lib_ && CclTakes(dt))
    return OnCcl("broadcast", "Broadcast",
                 [&] { return ccl_->lib().Broadcast(send, recv, count, dt, root, ccl_->handle(), stream); });
  if (CopyBridgeTakes(CollKind::kBroadcast, dt))
    return CopyBridgeCall(CollKind::kBroadcast, "broadcast", is_root ? send : recv, recv, count, dt, RedOp::kSum, root,
                          stream);
  std::vector<Span> down;
  if (is_root) down.push_back({send, 0, bytes});
  return Staged("broadcast", stream, down, bytes, {{recv, 0, bytes}}, bytes, [&](std::byte* in, std::byte* out) {
    return host_->HostBroadcast(in, out, count, type, root, nullptr);
  });
}

Status StagedRank::Send(const void* send, size_t count, tsrDataType_t type, int peer, tsrStream_t stream) {
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

Status StagedRank::Recv(void* recv, size_t count, tsrDataType_t type, int peer, tsrStream_t stream) {
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

Status StagedRank::Group(const std::vector<P2POp>& ops) {
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

Status StagedRank::AllToAllv(const void* send, const size_t* sendcounts, const size_t* sdispls, void* recv,
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

Result<std::unique_ptr<DeviceRank>> OpenStagedRank(const DeviceName& device) { return Open(device); }

}  // namespace tessera::comm
