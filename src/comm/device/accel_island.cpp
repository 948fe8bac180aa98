// comm/device/accel_island: AccelRank in a hybrid world whose island has several ranks (accel_rank.hpp): the island
// agrees on its library (OpenIslandCcl), which then runs the island phases of allreduce, reduce-scatter, allgather
// and broadcast on the device; only each rank's shard is staged and crosses the bridge (HostPath::HostBridge).
// docs/architecture.md, "Islands of several devices".
#include <fmt/format.h>

#include <algorithm>
#include <string>

#include "comm/device/accel_rank.hpp"
#include "comm/device/island_ccl.hpp"
#include "comm/reduce/reduce.hpp"
#include "comm/schedule.hpp"
#include "common/log.hpp"

namespace tessera::comm {

Status AccelRank::AttachIslandLibrary() {
  TSR_ASSIGN_OR_RETURN(ccl_, OpenIslandCcl(host_->Store(), shape_, name_.family->ccl, name_.family->label));
  island_lib_ = ccl_ != nullptr;
  if (!island_lib_) return Status::Ok();
  const Status widen = rt_->WidenSupport();
  TSR_ASSIGN_OR_RETURN(half_,
                       AgreeIslandHalf(host_->Store(), shape_, widen.ok() ? "" : widen.message(), name_.family->label));
  return Status::Ok();
}

// ---- hybrid world, island of several ranks ----

bool AccelRank::IslandTakes(CollKind kind, DType dt, RedOp op) {
  return island_lib_ && gate_.Takes(kind, dt, op, ccl_->lib(), rt_->name(), half_, shape_.island, name_.family->label,
                                    shape_.island_rank == 0);
}

Status AccelRank::GrowDevice(size_t q_bytes, size_t extra) {
  const int n = shape_.island_size;
  const size_t need = 2 * RoundUp(q_bytes) + RoundUp(q_bytes * n) + extra;
  dev_q_ = q_bytes;  // the layout of this call (DevShard, DevPad, DevExtra)
  if (need <= dev_cap_) return Status::Ok();
  if (dev_) {
    // Work queued earlier on the caller's stream may still use it.
    if (up_pending_) {
      up_pending_ = false;
      TSR_RETURN_IF_ERROR(rt_->EventSynchronize(up_done_));
    }
    TSR_RETURN_IF_ERROR(rt_->Free(dev_));
  }
  dev_ = nullptr;
  dev_cap_ = 0;
  const size_t want = std::max<size_t>(need, 1 << 20);
  TSR_ASSIGN_OR_RETURN(void* p, rt_->Malloc(want));
  dev_ = static_cast<std::byte*>(p);
  dev_cap_ = want;
  return Status::Ok();
}

Status AccelRank::QueueReduceScatter(const std::byte* buf, size_t L, DType dt, RedOp op, std::byte* shard,
                                     DeviceRuntime::Stream s) {
  const PaddedBlocks b(shape_.island_size, L);
  const DType rt = IslandReduceType(dt, half_);  // f32 for 16-bit data unless the island is native
  const size_t esz = DTypeSize(dt), rsz = DTypeSize(rt);
  const std::byte* in = buf;
  bool drained = false;
  if (rt != dt) {
    // Widened whole, from and into 32-byte-aligned device memory (CANN's rule for tensor data; an unaligned input is
    // first copied to the scratch after the padded blocks), then laid into the library's blocks where they differ.
    const std::byte* from = buf;
    std::byte* wide = b.padded() ? DevExtra() : DevPad();
    if (reinterpret_cast<uintptr_t>(buf) % 32 != 0) {
      std::byte* aligned = DevExtra() + RoundUp(L * rsz);
      TSR_RETURN_IF_ERROR(CopyOn(s, aligned, buf, L * esz, CopyKind::kDeviceToDevice, &drained));
      from = aligned;
    }
    TSR_RETURN_IF_ERROR(
        rt_->Widen(wide, from, L, dt, s).WithContext("widening the island's 16-bit inputs to f32 on the device"));
    if (b.padded())
      for (size_t j = 0; j < b.n; ++j) {
        const Range sj = b.shard(j);
        TSR_RETURN_IF_ERROR(CopyOn(s, DevPad() + j * b.q * rsz, wide + sj.lo * rsz, sj.len() * rsz,
                                   CopyKind::kDeviceToDevice, &drained));
      }
    in = DevPad();
  } else if (b.padded()) {  // the schedule's uneven shards into the library's equal blocks
    for (size_t j = 0; j < b.n; ++j) {
      const Range sj = b.shard(j);
      TSR_RETURN_IF_ERROR(
          CopyOn(s, DevPad() + j * b.q * esz, buf + sj.lo * esz, sj.len() * esz, CopyKind::kDeviceToDevice, &drained));
    }
    in = DevPad();
  }
  const int cop = ccl_->Op(op == RedOp::kAvg ? RedOp::kSum : op);  // avg: the bridge divides once
  return Ccl("ReduceScatter", ccl_->lib().ReduceScatter(in, shard, b.q, CclDataType(rt), cop, ccl_->handle(), s));
}

// The device scratch a widening reduce-scatter of up to L elements needs after the padded blocks (QueueReduceScatter).
size_t AccelRank::WidenExtra(size_t L, DType dt) const {
  if (IslandReduceType(dt, half_) == dt) return 0;
  return RoundUp(L * DTypeSize(AccumType(dt))) + RoundUp(L * DTypeSize(dt));
}

Status AccelRank::QueueAllGather(const std::byte* shard, size_t L, DType dt, std::byte* buf, DeviceRuntime::Stream s) {
  const PaddedBlocks b(shape_.island_size, L);
  const size_t esz = DTypeSize(dt), qb = b.q * esz;
  std::byte* out = b.padded() ? DevPad() : buf;
  TSR_RETURN_IF_ERROR(Ccl("AllGather", ccl_->lib().AllGather(shard, out, b.q, CclDataType(dt), ccl_->handle(), s)));
  bool drained = false;
  if (b.padded())
    for (size_t j = 0; j < b.n; ++j) {
      const Range sj = b.shard(j);
      TSR_RETURN_IF_ERROR(
          CopyOn(s, buf + sj.lo * esz, DevPad() + j * qb, sj.len() * esz, CopyKind::kDeviceToDevice, &drained));
    }
  return Status::Ok();
}

Status AccelRank::ShardUp(const char* what, const std::byte* host, size_t L, DType dt, std::byte* buf,
                          DeviceRuntime::Stream s) {
  return host_->Guarded(what, [&]() -> Status {
    const PaddedBlocks b(shape_.island_size, L);
    const size_t esz = DTypeSize(dt), qb = b.q * esz;
    TSR_RETURN_IF_ERROR(GrowDevice(qb, 0));
    bool drained = false;
    const Range S = b.shard(shape_.island_rank);
    TSR_RETURN_IF_ERROR(CopyOn(s, DevShard(0), host + S.lo * esz, S.len() * esz, CopyKind::kHostToDevice, &drained));
    up_bytes_ += S.len() * esz;
    return QueueAllGather(DevShard(0), L, dt, buf, s);
  });
}

// Chunk by chunk, as every other rank cuts the call, double-buffered on the caller's thread: chunk k+1's reduce-scatter
// and copy down are queued before chunk k crosses the bridge, so the device works while the host bridges. The island's
// partial sums come down in the accumulator type (f32 for 16-bit data, widened on the device; a native island's come
// down in the data's type and are widened here), each chunk in its own place in the staging (partial sums in in_,
// results in out_), so no chunk waits for another's copies.
Status AccelRank::IslandAllReduce(const std::byte* send, std::byte* recv, size_t count, DType dt, RedOp op,
                                  tsrStream_t stream) {
  std::lock_guard<std::mutex> lock(mu_);
  auto* s = static_cast<DeviceRuntime::Stream>(stream);
  const size_t n = shape_.island_size, me = shape_.island_rank;
  const size_t esz = DTypeSize(dt), rsz = DTypeSize(AccumType(dt)), dsz = DTypeSize(IslandReduceType(dt, half_));
  const bool native = dsz != rsz;
  const std::vector<Range> chunks = host_->AllReduceChunks(count, dt);
  size_t q_bytes = 0, largest = 0;
  for (const Range& c : chunks) {
    q_bytes = std::max(q_bytes, PaddedBlocks(n, c.len()).q * dsz);
    largest = std::max(largest, c.len());
  }
  ++island_calls_;
  TSR_RETURN_IF_ERROR(host_->Guarded("allreduce", [&]() -> Status {
    TSR_RETURN_IF_ERROR(ReuseStaging(count * rsz, count * esz));
    return GrowDevice(q_bytes, WidenExtra(largest, dt));
  }));
  auto shard_of = [&](size_t k) { return PaddedBlocks(n, chunks[k].len()).shard(me); };
  auto down = [&](size_t k) -> Status {
    const Range c = chunks[k], S = shard_of(k);
    std::byte* shard = DevShard(k % 2);
    TSR_RETURN_IF_ERROR(QueueReduceScatter(send + c.lo * esz, c.len(), dt, op, shard, s));
    std::byte* to = native ? out_ + (c.lo + S.lo) * esz : in_ + (c.lo + S.lo) * rsz;
    bool drained = false;
    TSR_RETURN_IF_ERROR(CopyOn(s, to, shard, S.len() * dsz, CopyKind::kDeviceToHost, &drained));
    down_bytes_ += S.len() * dsz;
    return Status::Ok();
  };
  auto cross = [&](size_t k) -> Status {
    const Range c = chunks[k], S = shard_of(k);
    if (native)  // the library's 16-bit result, widened exactly for the bridge's f32 fold
      Convert(in_ + (c.lo + S.lo) * rsz, AccumType(dt), out_ + (c.lo + S.lo) * esz, dt, S.len());
    TSR_RETURN_IF_ERROR(
        host_->HostBridge(CollKind::kAllReduce, in_ + c.lo * rsz, out_ + c.lo * esz, c.len(), dt, op, 0));
    return host_->Guarded("allreduce", [&]() -> Status {
      std::byte* shard = DevShard(k % 2);
      bool drained = false;
      TSR_RETURN_IF_ERROR(
          CopyOn(s, shard, out_ + (c.lo + S.lo) * esz, S.len() * esz, CopyKind::kHostToDevice, &drained));
      up_bytes_ += S.len() * esz;
      return QueueAllGather(shard, c.len(), dt, recv + c.lo * esz, s);
    });
  };
  TSR_RETURN_IF_ERROR(DoubleBuffered("allreduce", s, chunks.size(), "the island's shard coming down", down, cross));
  return UpQueued("allreduce", s);
}

Status AccelRank::IslandReduceScatter(const std::byte* send, std::byte* recv, size_t recvcount, DType dt, RedOp op,
                                      tsrStream_t stream) {
  std::lock_guard<std::mutex> lock(mu_);
  auto* s = static_cast<DeviceRuntime::Stream>(stream);
  const size_t esz = DTypeSize(dt), rsz = DTypeSize(AccumType(dt)), dsz = DTypeSize(IslandReduceType(dt, half_));
  const size_t C = recvcount * shape_.size;
  const bool native = dsz != rsz;
  const PaddedBlocks b(shape_.island_size, C);
  const Range S = b.shard(shape_.island_rank);
  ++island_calls_;
  // Partial sums (accumulator type) in in_[0, C); a native island's shard comes down after them, in dt.
  TSR_RETURN_IF_ERROR(host_->Guarded("reduce_scatter", [&]() -> Status {
    TSR_RETURN_IF_ERROR(ReuseStaging(C * rsz + (native ? S.len() * esz : 0), recvcount * esz));
    TSR_RETURN_IF_ERROR(GrowDevice(b.q * dsz, WidenExtra(C, dt)));
    std::byte* shard = DevShard(0);
    TSR_RETURN_IF_ERROR(QueueReduceScatter(send, C, dt, op, shard, s));
    bool drained = false;
    TSR_RETURN_IF_ERROR(
        CopyOn(s, native ? in_ + C * rsz : in_ + S.lo * rsz, shard, S.len() * dsz, CopyKind::kDeviceToHost, &drained));
    down_bytes_ += S.len() * dsz;
    TSR_RETURN_IF_ERROR(rt_->StreamSynchronize(s));
    if (native) Convert(in_ + S.lo * rsz, AccumType(dt), in_ + C * rsz, dt, S.len());
    return Status::Ok();
  }));
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
    std::byte* gathered = DevExtra();
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
