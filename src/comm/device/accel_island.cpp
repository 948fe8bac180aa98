// comm/device/accel_island: AccelRank in a hybrid world whose island has several ranks (accel_rank.hpp): the island
// agrees on its library (OpenIslandCcl), which then runs the island phases of allreduce, reduce-scatter, allgather
// and broadcast on the device; only each rank's shard is staged and crosses the bridge (HostPath::HostBridge).
// docs/architecture.md, "Islands of several devices".
#include <fmt/format.h>

#include <algorithm>
#include <string>

#include "comm/device/accel_rank.hpp"
#include "comm/device/island_ccl.hpp"
#include "comm/schedule.hpp"
#include "common/log.hpp"

namespace tessera::comm {

Status AccelRank::AttachIslandLibrary() {
  TSR_ASSIGN_OR_RETURN(ccl_, OpenIslandCcl(host_->Store(), shape_, name_.family->ccl, name_.family->label));
  island_lib_ = ccl_ != nullptr;
  return Status::Ok();
}

// ---- hybrid world, island of several ranks ----

bool AccelRank::IslandTakes(CollKind kind, DType dt, RedOp op) {
  return island_lib_ && gate_.Takes(kind, dt, op, ccl_->lib(), rt_->name(), /*widens=*/false, shape_.island,
                                    name_.family->label, shape_.island_rank == 0);
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

}  // namespace tessera::comm
