// comm/device/staged_plan: the parts of a hybrid world's staged device calls, built once for both device ranks
// (staged_plan.hpp). docs/architecture.md, "Islands of several devices" and "Staged device ranks".
#include "comm/device/staged_plan.hpp"

#include <algorithm>

#include "comm/reduce/reduce.hpp"
#include "comm/schedule.hpp"

namespace tessera::comm {
namespace {

size_t Round256(size_t b) { return (b + 255) / 256 * 256; }

}  // namespace

Status StagedPlan::Library(const char* call, int result) {
  ++library_calls_;
  Status s = ccl_->lib().Check(result, call);
  if (!s.ok()) ccl_->MarkFailed();
  return s;
}

size_t StagedPlan::WidenExtra(size_t L, DType dt) const {
  if (IslandReduceType(dt, half_) == dt) return 0;
  return Round256(L * DTypeSize(AccumType(dt))) + Round256(L * DTypeSize(dt));
}

Status StagedPlan::ReduceScatterOn(DeviceRuntime::Stream s, const std::byte* in, size_t L, DType dt, RedOp op,
                                   std::byte* pad, std::byte* extra, std::byte* shard) {
  const PaddedBlocks b(static_cast<size_t>(shape_.island_size), L);
  const DType rt = IslandReduceType(dt, half_);  // f32 for 16-bit data unless the island is native
  const size_t esz = DTypeSize(dt), rsz = DTypeSize(rt);
  const std::byte* from = in;
  if (rt != dt) {
    // Widened whole, from and into 32-byte aligned device memory (an unaligned input is first copied after the
    // widened buffer in `extra`), then laid into the library's blocks where they differ.
    const std::byte* src = in;
    std::byte* wide = b.padded() ? extra : pad;
    if (reinterpret_cast<uintptr_t>(in) % 32 != 0) {
      std::byte* aligned = extra + Round256(L * rsz);
      TSR_RETURN_IF_ERROR(exec_->CopyOnStream(s, aligned, in, L * esz));
      src = aligned;
    }
    TSR_RETURN_IF_ERROR(
        rt_.Widen(wide, src, L, dt, s).WithContext("widening the island's 16-bit inputs to f32 on the device"));
    if (b.padded())
      for (size_t j = 0; j < b.n; ++j) {
        const Range sj = b.shard(j);
        TSR_RETURN_IF_ERROR(exec_->CopyOnStream(s, pad + j * b.q * rsz, wide + sj.lo * rsz, sj.len() * rsz));
      }
    from = pad;
  } else if (b.padded()) {  // the schedule's uneven shards into the library's equal blocks
    for (size_t j = 0; j < b.n; ++j) {
      const Range sj = b.shard(j);
      TSR_RETURN_IF_ERROR(exec_->CopyOnStream(s, pad + j * b.q * esz, in + sj.lo * esz, sj.len() * esz));
    }
    from = pad;
  }
  const RedOp cop = ccl_->Op(op == RedOp::kAvg ? RedOp::kSum : op);  // avg: the bridge divides once
  return Library("ReduceScatter", ccl_->lib().ReduceScatter(from, shard, b.q, rt, cop, ccl_->handle(), s));
}

Status StagedPlan::AllGatherOn(DeviceRuntime::Stream s, const std::byte* shard, size_t L, DType dt, std::byte* pad,
                               std::byte* out) {
  const PaddedBlocks b(static_cast<size_t>(shape_.island_size), L);
  const size_t esz = DTypeSize(dt);
  TSR_RETURN_IF_ERROR(
      Library("AllGather", ccl_->lib().AllGather(shard, b.padded() ? pad : out, b.q, dt, ccl_->handle(), s)));
  if (b.padded())
    for (size_t j = 0; j < b.n; ++j) {
      const Range sj = b.shard(j);
      TSR_RETURN_IF_ERROR(exec_->CopyOnStream(s, out + sj.lo * esz, pad + j * b.q * esz, sj.len() * esz));
    }
  return Status::Ok();
}

std::function<Status()> StagedPlan::Bridge(CollKind kind, const std::byte* send, std::byte* recv, size_t count,
                                           DType dt, RedOp op, int root, Range widen, const std::byte* native) {
  HostPath* host = host_;
  if (widen.len() == 0) return [=] { return host->HostBridge(kind, send, recv, count, dt, op, root); };
  // A native island's shard came down in the data's type (at `native`): widened here into send[widen], exactly.
  return [=] {
    Convert(const_cast<std::byte*>(send) + widen.lo * DTypeSize(AccumType(dt)), AccumType(dt), native, dt, widen.len());
    return host->HostBridge(kind, send, recv, count, dt, op, root);
  };
}

Status StagedPlan::AllReduce(const void* send, void* recv, size_t count, DType dt, RedOp op, tsrStream_t stream) {
  const size_t esz = DTypeSize(dt);
  std::byte *hin, *hout;
  TSR_RETURN_IF_ERROR(exec_->Staging("allreduce", count * esz, 0, &hin, &hout));
  const auto* src = static_cast<const std::byte*>(send);
  auto* dst = static_cast<std::byte*>(recv);
  HostPath* host = host_;
  std::vector<StagedPart> parts;
  for (const Range& c : host_->AllReduceChunks(count, dt)) {
    std::byte* h = hin + c.lo * esz;
    const size_t n = c.len();
    StagedPart p;
    p.down = {StagedCopy{h, src + c.lo * esz, n * esz}};
    // One chunk, one collective: the piece every other rank runs too.
    p.host = [host, h, n, dt, op] { return host->HostAllReducePiece(h, h, n, dt, op); };
    p.up = {StagedCopy{dst + c.lo * esz, h, n * esz}};
    parts.push_back(std::move(p));
  }
  return exec_->Run("allreduce", stream, std::move(parts));
}

// Per chunk (the chunks every rank of the world cuts the call into): the island's partial sums come down in the
// accumulator type (f32 for 16-bit data, widened on the device; a native island's come down in the data's type into
// their place among the results, and are widened on the host), each chunk in its own place in the staging (partial
// sums in, results out) and its own shard slot on the device, so no chunk waits for another's copies.
Status StagedPlan::IslandAllReduce(const void* send, void* recv, size_t count, DType dt, RedOp op, tsrStream_t stream) {
  const size_t n = static_cast<size_t>(shape_.island_size), esz = DTypeSize(dt);
  const size_t rsz = DTypeSize(AccumType(dt));                // the island's partial sums on the host
  const size_t dsz = DTypeSize(IslandReduceType(dt, half_));  // ... on the device: dt where the island is native
  const bool native = dsz != rsz;
  const std::vector<Range> chunks = host_->AllReduceChunks(count, dt);
  // Device scratch: each chunk's shard (its partial sums go down from it, its final values come back into it), then
  // one buffer of n equal blocks and the widening's scratch, used by each chunk's steps in turn (stream order).
  size_t shards = 0, pad = 0, extra = 0;
  for (const Range& c : chunks) {
    const PaddedBlocks b(n, c.len());
    shards += Round256(b.q * dsz);
    pad = std::max(pad, b.n * b.q * dsz);
    extra = std::max(extra, WidenExtra(c.len(), dt));
  }
  std::byte *hin, *hout;  // partial sums (AccumType) in, final values (dt) out
  TSR_RETURN_IF_ERROR(exec_->Staging("allreduce", count * rsz, count * esz, &hin, &hout));
  TSR_ASSIGN_OR_RETURN(std::byte * scratch, exec_->Scratch("allreduce", shards + Round256(pad) + extra));
  std::byte* padbuf = scratch + shards;
  std::byte* ext = padbuf + Round256(pad);
  const size_t me = static_cast<size_t>(shape_.island_rank);
  std::vector<StagedPart> parts;
  size_t off = 0;
  for (const Range& c : chunks) {
    const PaddedBlocks b(n, c.len());
    const Range S = b.shard(me);
    std::byte* shard = scratch + off;
    off += Round256(b.q * dsz);
    const std::byte* in = static_cast<const std::byte*>(send) + c.lo * esz;
    std::byte* out = static_cast<std::byte*>(recv) + c.lo * esz;
    std::byte* hp = hin + c.lo * rsz;
    std::byte* hr = hout + c.lo * esz;
    const size_t L = c.len();
    StagedPart p;
    p.pre = [=, this](DeviceRuntime::Stream s) { return ReduceScatterOn(s, in, L, dt, op, padbuf, ext, shard); };
    p.down = {native ? StagedCopy{hr + S.lo * esz, shard, S.len() * esz}
                     : StagedCopy{hp + S.lo * rsz, shard, S.len() * rsz}};
    p.host = Bridge(CollKind::kAllReduce, hp, hr, L, dt, op, 0, native ? S : Range{0, 0}, hr + S.lo * esz);
    p.up = {StagedCopy{shard, hr + S.lo * esz, S.len() * esz}};
    p.post = [=, this](DeviceRuntime::Stream s) { return AllGatherOn(s, shard, L, dt, padbuf, out); };
    parts.push_back(std::move(p));
  }
  return exec_->Run("allreduce", stream, std::move(parts));
}

Status StagedPlan::IslandReduceScatter(const void* send, void* recv, size_t recvcount, DType dt, RedOp op,
                                       tsrStream_t stream) {
  const size_t n = static_cast<size_t>(shape_.island_size), esz = DTypeSize(dt);
  const size_t rsz = DTypeSize(AccumType(dt)), C = recvcount * shape_.size;
  const size_t dsz = DTypeSize(IslandReduceType(dt, half_));
  const bool native = dsz != rsz;
  const PaddedBlocks b(n, C);
  const Range S = b.shard(static_cast<size_t>(shape_.island_rank));
  std::byte *hin, *hout;
  // Partial sums (AccumType) in hin[0, C); a native island's shard comes down after them, in dt, and is widened into
  // them on the host.
  TSR_RETURN_IF_ERROR(
      exec_->Staging("reduce_scatter", C * rsz + (native ? S.len() * esz : 0), recvcount * esz, &hin, &hout));
  TSR_ASSIGN_OR_RETURN(
      std::byte * scratch,
      exec_->Scratch("reduce_scatter", Round256(b.q * dsz) + Round256(b.n * b.q * dsz) + WidenExtra(C, dt)));
  std::byte* shard = scratch;
  std::byte* padbuf = scratch + Round256(b.q * dsz);
  std::byte* ext = padbuf + Round256(b.n * b.q * dsz);
  std::byte* hnative = hin + C * rsz;
  const auto* in = static_cast<const std::byte*>(send);
  std::vector<StagedPart> parts(1);
  parts[0].pre = [=, this](DeviceRuntime::Stream s) { return ReduceScatterOn(s, in, C, dt, op, padbuf, ext, shard); };
  parts[0].down = {native ? StagedCopy{hnative, shard, S.len() * esz}
                          : StagedCopy{hin + S.lo * rsz, shard, S.len() * rsz}};
  parts[0].host = Bridge(CollKind::kReduceScatter, hin, hout, recvcount, dt, op, 0, native ? S : Range{0, 0}, hnative);
  parts[0].up = {StagedCopy{recv, hout, recvcount * esz}};
  return exec_->Run("reduce_scatter", stream, std::move(parts));
}

Status StagedPlan::IslandAllGather(const void* send, void* recv, size_t sendcount, DType dt, tsrStream_t stream) {
  const std::vector<int>& island = shape_.island_ranks;
  const size_t n = island.size(), esz = DTypeSize(dt), C = sendcount * shape_.size;
  const PaddedBlocks b(n, C);
  const Range S = b.shard(static_cast<size_t>(shape_.island_rank));
  std::byte *hin, *hout;
  TSR_RETURN_IF_ERROR(exec_->Staging("allgather", C * esz, 0, &hin, &hout));
  TSR_ASSIGN_OR_RETURN(
      std::byte * scratch,
      exec_->Scratch("allgather", Round256(b.q * esz) + Round256(b.n * b.q * esz) + n * sendcount * esz));
  std::byte* shard = scratch;
  std::byte* padbuf = shard + Round256(b.q * esz);
  std::byte* gathered = padbuf + Round256(b.n * b.q * esz);
  std::vector<StagedPart> parts(1);
  // The island's contributions, gathered on the devices in island order; those inside my shard go down to their
  // places in the staging, cross the bridge, and my shard comes back to be allgathered.
  parts[0].pre = [=, this](DeviceRuntime::Stream s) {
    return Library("AllGather", ccl_->lib().AllGather(send, gathered, sendcount, dt, ccl_->handle(), s));
  };
  for (size_t j = 0; j < n; ++j) {
    const size_t lo = static_cast<size_t>(island[j]) * sendcount;
    const Range x = Range{lo, lo + sendcount}.Intersect(S);
    if (x.len() > 0)
      parts[0].down.push_back(
          StagedCopy{hin + x.lo * esz, gathered + (j * sendcount + x.lo - lo) * esz, x.len() * esz});
  }
  parts[0].host = Bridge(CollKind::kAllGather, hin + shape_.rank * sendcount * esz, hin, sendcount, dt, RedOp::kSum, 0);
  parts[0].up = {StagedCopy{shard, hin + S.lo * esz, S.len() * esz}};
  auto* out = static_cast<std::byte*>(recv);
  parts[0].post = [=, this](DeviceRuntime::Stream s) { return AllGatherOn(s, shard, C, dt, padbuf, out); };
  return exec_->Run("allgather", stream, std::move(parts));
}

Status StagedPlan::IslandBroadcast(const void* send, void* recv, size_t count, DType dt, int root, tsrStream_t stream) {
  const std::vector<int>& island = shape_.island_ranks;
  const size_t n = island.size(), esz = DTypeSize(dt);
  const PaddedBlocks b(n, count);
  const Range S = b.shard(static_cast<size_t>(shape_.island_rank));
  std::byte *hin, *hout;
  TSR_RETURN_IF_ERROR(exec_->Staging("broadcast", count * esz, 0, &hin, &hout));
  TSR_ASSIGN_OR_RETURN(std::byte * scratch,
                       exec_->Scratch("broadcast", Round256(b.q * esz) + Round256(b.n * b.q * esz)));
  std::byte* shard = scratch;
  std::byte* padbuf = shard + Round256(b.q * esz);
  auto* out = static_cast<std::byte*>(recv);
  std::vector<StagedPart> parts(1);
  parts[0].host = Bridge(CollKind::kBroadcast, hin, hin, count, dt, RedOp::kSum, root);
  const auto at = std::find(island.begin(), island.end(), root);
  if (at == island.end()) {  // the root is in another island: my shard comes over the bridge, the library spreads it
    parts[0].up = {StagedCopy{shard, hin + S.lo * esz, S.len() * esz}};
    parts[0].post = [=, this](DeviceRuntime::Stream s) { return AllGatherOn(s, shard, count, dt, padbuf, out); };
  } else {  // the root's island: the library broadcasts inside it, each rank sends its shard on over the bridge
    const int iroot = static_cast<int>(at - island.begin());
    const void* from = shape_.rank == root ? send : recv;
    parts[0].pre = [=, this](DeviceRuntime::Stream s) {
      return Library("Broadcast", ccl_->lib().Broadcast(from, recv, count, dt, iroot, ccl_->handle(), s));
    };
    parts[0].down = {StagedCopy{hin + S.lo * esz, out + S.lo * esz, S.len() * esz}};
  }
  return exec_->Run("broadcast", stream, std::move(parts));
}

}  // namespace tessera::comm
