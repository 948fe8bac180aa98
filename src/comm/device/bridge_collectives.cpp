// comm/device/bridge_collectives: the bridge rank's collectives — argument checks, then a world of one island
// straight to its CCL on the caller's stream, or in a hybrid world a staged job or the device bridge
// (bridge_rank.cpp; allreduce, reduce-scatter, broadcast and allgather). Host-memory calls (stream NULL) run
// through the worker queue in order.
#include <fmt/format.h>

#include <algorithm>

#include "comm/device/bridge_rank.hpp"
#include "comm/device/island_ccl.hpp"
#include "comm/reduce/reduce.hpp"
#include "common/env.hpp"
#include "common/log.hpp"

namespace tessera::comm {

Status BridgeRank::AllReduce(const void* send, void* recv, size_t count, tsrDataType_t type, tsrRedOp_t op,
                             tsrStream_t stream) {
  auto dt = static_cast<DType>(type);
  auto rop = static_cast<RedOp>(op);
  if (!IsValid(dt))
    return Host(
        [=, this] { return host_->HostAllReduce(send, recv, count, type, op, nullptr); });  // names the bad type
  size_t bytes = count * DTypeSize(dt);
  TSR_RETURN_IF_ERROR(Fail("allreduce", CheckBuffers("allreduce", send, bytes, recv, bytes, stream)));
  if (stream == nullptr) return Host([=, this] { return host_->HostAllReduce(send, recv, count, type, op, nullptr); });
  if (!IsValid(rop))
    return Fail("allreduce", InvalidArgument(fmt::format("allreduce: op {} is not a tsrRedOp_t", int(op))));
  if (!hybrid_) {
    TSR_RETURN_IF_ERROR(Direct());
    return CclCall("AllReduce",
                   ccl_->lib().AllReduce(send, recv, count, CclDataType(dt), ccl_->Op(rop), ccl_->handle(), stream));
  }
  if (island_ccl_ && count > 0 && IslandTakes(CollKind::kAllReduce, dt, rop))
    return IslandAllReduce(send, recv, count, dt, rop, stream);
  if (!ring_ops_ || !host_->DeviceBridgeFor(dt)) {
    // Pinned staging, in place, one part per bridge chunk (the chunks every rank of the world uses).
    const size_t esz = DTypeSize(dt);
    std::byte *hin, *hout;
    TSR_RETURN_IF_ERROR(Fail("allreduce", StagingFor(bytes, 0, &hin, &hout)));
    const auto* src = static_cast<const std::byte*>(send);
    auto* dst = static_cast<std::byte*>(recv);
    std::vector<Part> parts;
    for (const Range& c : host_->AllReduceChunks(count, dt)) {
      std::byte* h = hin + c.lo * esz;
      const size_t n = c.len();
      parts.push_back(Part{{Copy{h, src + c.lo * esz, n * esz}},
                           // One chunk: the host path's allreduce cuts it no further (the same chunks).
                           [this, h, n, dt, rop] {
                             return host_->HostAllReduce(h, h, n, static_cast<tsrDataType_t>(dt),
                                                         static_cast<tsrRedOp_t>(rop), nullptr);
                           },
                           {Copy{dst + c.lo * esz, h, n * esz}}});
    }
    return SubmitStaged("allreduce", stream, std::move(parts));
  }
  // The device bridge: one collective per chunk that every rank of the world cuts the call into (one chunk unless a
  // staged device island shares the world), in one job of the worker.
  std::vector<Range> chunks = host_->AllReduceChunks(count, dt);
  size_t largest = 0;
  for (const Range& c : chunks) largest = std::max(largest, c.len());
  size_t acc_bytes = 0;
  auto acc = ReduceScratch("allreduce", CollKind::kAllReduce, largest, dt, &acc_bytes);
  if (!acc.ok()) return acc.status();
  return SubmitDevice("allreduce", stream, [=, this, scratch = *acc, chunks = std::move(chunks)](bridge::Event in) {
    const size_t esz = DTypeSize(dt);
    for (const Range& c : chunks)
      TSR_RETURN_IF_ERROR(
          BridgeCall(in, CollKind::kAllReduce, "allreduce", static_cast<const std::byte*>(send) + c.lo * esz,
                     static_cast<std::byte*>(recv) + c.lo * esz, c.len(), dt, rop, 0, scratch, acc_bytes));
    return Status::Ok();
  });
}

// ---- hybrid world, island of several GPUs: the island's library does the island phases ----

bool BridgeRank::IslandTakes(CollKind kind, DType dt, RedOp op) {
  return gate_.Takes(kind, dt, op, island_ccl_->lib(), dev_->rt().name(), half_, shape_.island,
                     dev_->device().family->label, shape_.island_rank == 0);
}

Status BridgeRank::IslandCall(const char* what, int r) {
  Status s = island_ccl_->lib().Check(r, what);
  if (!s.ok()) island_ccl_->MarkFailed();
  return s;
}

Result<std::byte*> BridgeRank::IslandScratch(size_t bytes) {
  if (bytes <= island_dev_cap_) return island_dev_;
  if (island_dev_) retired_dev_.push_back(island_dev_);  // work queued earlier may still use it
  island_dev_ = nullptr;
  island_dev_cap_ = 0;
  const size_t want = std::max<size_t>(bytes, 1 << 20);
  auto p = dev_->rt().Malloc(want);
  if (!p.ok()) return p.status().WithContext("the island library's scratch");
  island_dev_ = static_cast<std::byte*>(*p);
  island_dev_cap_ = want;
  return island_dev_;
}

namespace {
size_t Round256(size_t b) { return (b + 255) / 256 * 256; }
}  // namespace

Status BridgeRank::IslandReduceScatterOn(bridge::Stream st, const std::byte* in, size_t L, DType dt, RedOp op,
                                         std::byte* pad, std::byte* shard) {
  const PaddedBlocks b(static_cast<size_t>(shape_.island_size), L);
  const DType rt = IslandReduceType(dt, half_);  // 16-bit data in f32 (widened here) unless native
  const size_t esz = DTypeSize(dt), rsz = DTypeSize(rt);
  const std::byte* from = in;
  if (b.padded() || rt != dt) {  // the schedule's shards into the library's equal blocks (widened)
    for (size_t j = 0; j < b.n; ++j) {
      const Range sj = b.shard(j);
      if (sj.len() == 0) continue;
      if (rt != dt)
        TSR_RETURN_IF_ERROR(dev_->rt()
                                .Widen(pad + j * b.q * rsz, in + sj.lo * esz, sj.len(), dt, st)
                                .WithContext("widening the island's 16-bit inputs to f32"));
      else
        TSR_RETURN_IF_ERROR(dev_->rt()
                                .MemcpyAsync(pad + j * b.q * rsz, sj.len() * esz, in + sj.lo * esz, sj.len() * esz,
                                             CopyKind::kDeviceToDevice, st)
                                .WithContext("into the library's blocks"));
    }
    from = pad;
  }
  const int cop = island_ccl_->Op(op == RedOp::kAvg ? RedOp::kSum : op);  // avg: the bridge divides once
  return IslandCall("ReduceScatter", island_ccl_->lib().ReduceScatter(from, shard, b.q, CclDataType(rt), cop,
                                                                      island_ccl_->handle(), st));
}

Status BridgeRank::IslandAllGatherOn(bridge::Stream st, std::byte* shard, size_t L, DType dt, std::byte* pad,
                                     std::byte* out) {
  const PaddedBlocks b(static_cast<size_t>(shape_.island_size), L);
  const size_t esz = DTypeSize(dt);
  TSR_RETURN_IF_ERROR(IslandCall(
      "AllGather",
      island_ccl_->lib().AllGather(shard, b.padded() ? pad : out, b.q, CclDataType(dt), island_ccl_->handle(), st)));
  if (b.padded())
    for (size_t j = 0; j < b.n; ++j) {
      const Range sj = b.shard(j);
      if (sj.len() > 0)
        TSR_RETURN_IF_ERROR(dev_->rt()
                                .MemcpyAsync(out + sj.lo * esz, sj.len() * esz, pad + j * b.q * esz, sj.len() * esz,
                                             CopyKind::kDeviceToDevice, st)
                                .WithContext("out of the library's blocks"));
    }
  return Status::Ok();
}

std::function<Status()> BridgeRank::IslandBridge(CollKind kind, const std::byte* send, std::byte* recv, size_t count,
                                                 DType dt, RedOp op, int root, Range widen, const std::byte* native) {
  if (widen.len() == 0) return [=, this] { return host_->HostBridge(kind, send, recv, count, dt, op, root); };
  // A native island's shard came down in the data's type (at `native`): widened here into send[widen], exactly.
  return [=, this] {
    Convert(const_cast<std::byte*>(send) + widen.lo * DTypeSize(AccumType(dt)), AccumType(dt), native, dt, widen.len());
    return host_->HostBridge(kind, send, recv, count, dt, op, root);
  };
}

Status BridgeRank::IslandAllReduce(const void* send, void* recv, size_t count, DType dt, RedOp op, tsrStream_t stream) {
  const size_t n = static_cast<size_t>(shape_.island_size), esz = DTypeSize(dt);
  const size_t rsz = DTypeSize(AccumType(dt));  // the island's partial sums on the host: f32 for 16-bit data
  const size_t dsz = DTypeSize(IslandReduceType(dt, half_));  // ... on the device: dt where the island is native
  const bool native = dsz != rsz;
  const std::vector<Range> chunks = host_->AllReduceChunks(count, dt);
  // Device scratch: each chunk's shard (every chunk's reduce-scatter is queued before the first allgather; the
  // shard's partial sums go down, its final values come back into the same place), then one buffer of n equal
  // blocks, used by each chunk's steps in turn (stream order).
  size_t shards = 0, pad = 0;
  for (const Range& c : chunks) {
    const PaddedBlocks b(n, c.len());
    shards += Round256(b.q * dsz);
    pad = std::max(pad, b.n * b.q * dsz);
  }
  auto scratch = IslandScratch(shards + Round256(pad));
  if (!scratch.ok()) return Fail("allreduce", scratch.status());
  std::byte *hin, *hout;  // partial sums (AccumType) in, final values (dt) out
  TSR_RETURN_IF_ERROR(Fail("allreduce", StagingFor(count * rsz, count * esz, &hin, &hout)));
  std::byte* padbuf = *scratch + shards;
  const int me = shape_.island_rank;
  std::vector<Part> parts;
  size_t off = 0;
  for (const Range& c : chunks) {
    const PaddedBlocks b(n, c.len());
    const Range S = b.shard(me);
    std::byte* shard = *scratch + off;
    off += Round256(b.q * dsz);
    const std::byte* in = static_cast<const std::byte*>(send) + c.lo * esz;
    std::byte* out = static_cast<std::byte*>(recv) + c.lo * esz;
    std::byte* hp = hin + c.lo * rsz;
    std::byte* hr = hout + c.lo * esz;
    const size_t L = c.len();
    Part p;
    p.pre = [=, this](bridge::Stream st) { return IslandReduceScatterOn(st, in, L, dt, op, padbuf, shard); };
    // Native: the shard comes down in dt into its place in the results, and is widened there on the host.
    p.down = {native ? Copy{hr + S.lo * esz, shard, S.len() * esz} : Copy{hp + S.lo * rsz, shard, S.len() * rsz}};
    p.host = IslandBridge(CollKind::kAllReduce, hp, hr, L, dt, op, 0, native ? S : Range{0, 0}, hr + S.lo * esz);
    p.up = {Copy{shard, hr + S.lo * esz, S.len() * esz}};
    p.post = [=, this](bridge::Stream st) { return IslandAllGatherOn(st, shard, L, dt, padbuf, out); };
    parts.push_back(std::move(p));
  }
  return SubmitStaged("allreduce", stream, std::move(parts));
}

Status BridgeRank::IslandReduceScatter(const void* send, void* recv, size_t recvcount, DType dt, RedOp op,
                                       tsrStream_t stream) {
  const size_t n = static_cast<size_t>(shape_.island_size), esz = DTypeSize(dt);
  const size_t rsz = DTypeSize(AccumType(dt)), C = recvcount * shape_.size;
  const size_t dsz = DTypeSize(IslandReduceType(dt, half_));
  const bool native = dsz != rsz;
  const PaddedBlocks b(n, C);
  const Range S = b.shard(shape_.island_rank);
  auto scratch = IslandScratch(Round256(b.q * dsz) + Round256(b.n * b.q * dsz));
  if (!scratch.ok()) return Fail("reduce_scatter", scratch.status());
  std::byte *hin, *hout;
  // Native: the shard comes down in dt after the partial sums' region, and is widened into it on the host.
  TSR_RETURN_IF_ERROR(
      Fail("reduce_scatter", StagingFor(C * rsz + (native ? S.len() * esz : 0), recvcount * esz, &hin, &hout)));
  std::byte* shard = *scratch;
  std::byte* padbuf = *scratch + Round256(b.q * dsz);
  std::byte* hnative = hin + C * rsz;
  const auto* in = static_cast<const std::byte*>(send);
  std::vector<Part> parts(1);
  parts[0].pre = [=, this](bridge::Stream st) { return IslandReduceScatterOn(st, in, C, dt, op, padbuf, shard); };
  parts[0].down = {native ? Copy{hnative, shard, S.len() * esz} : Copy{hin + S.lo * rsz, shard, S.len() * rsz}};
  parts[0].host =
      IslandBridge(CollKind::kReduceScatter, hin, hout, recvcount, dt, op, 0, native ? S : Range{0, 0}, hnative);
  parts[0].up = {Copy{recv, hout, recvcount * esz}};
  return SubmitStaged("reduce_scatter", stream, std::move(parts));
}

Status BridgeRank::IslandAllGather(const void* send, void* recv, size_t sendcount, DType dt, tsrStream_t stream) {
  const std::vector<int>& island = shape_.island_ranks;
  const size_t n = island.size(), esz = DTypeSize(dt), C = sendcount * shape_.size;
  const PaddedBlocks b(n, C);
  const Range S = b.shard(shape_.island_rank);
  auto scratch = IslandScratch(Round256(b.q * esz) + Round256(b.n * b.q * esz) + n * sendcount * esz);
  if (!scratch.ok()) return Fail("allgather", scratch.status());
  std::byte *hin, *hout;
  TSR_RETURN_IF_ERROR(Fail("allgather", StagingFor(C * esz, 0, &hin, &hout)));
  std::byte* shard = *scratch;
  std::byte* padbuf = shard + Round256(b.q * esz);
  std::byte* gathered = padbuf + Round256(b.n * b.q * esz);
  std::vector<Part> parts(1);
  // The island's contributions, gathered on the GPUs in island order; those inside my shard go down to their
  // places in the staging, cross the bridge, and my shard comes back to be allgathered.
  parts[0].pre = [=, this](bridge::Stream st) {
    return IslandCall("AllGather", island_ccl_->lib().AllGather(send, gathered, sendcount, CclDataType(dt),
                                                                island_ccl_->handle(), st));
  };
  for (size_t j = 0; j < n; ++j) {
    const size_t lo = static_cast<size_t>(island[j]) * sendcount;
    const Range x = Range{lo, lo + sendcount}.Intersect(S);
    if (x.len() > 0)
      parts[0].down.push_back(Copy{hin + x.lo * esz, gathered + (j * sendcount + x.lo - lo) * esz, x.len() * esz});
  }
  parts[0].host =
      IslandBridge(CollKind::kAllGather, hin + shape_.rank * sendcount * esz, hin, sendcount, dt, RedOp::kSum, 0);
  parts[0].up = {Copy{shard, hin + S.lo * esz, S.len() * esz}};
  auto* out = static_cast<std::byte*>(recv);
  parts[0].post = [=, this](bridge::Stream st) { return IslandAllGatherOn(st, shard, C, dt, padbuf, out); };
  return SubmitStaged("allgather", stream, std::move(parts));
}

Status BridgeRank::IslandBroadcast(const void* send, void* recv, size_t count, DType dt, int root, tsrStream_t stream) {
  const std::vector<int>& island = shape_.island_ranks;
  const size_t n = island.size(), esz = DTypeSize(dt);
  const PaddedBlocks b(n, count);
  const Range S = b.shard(shape_.island_rank);
  auto scratch = IslandScratch(Round256(b.q * esz) + Round256(b.n * b.q * esz));
  if (!scratch.ok()) return Fail("broadcast", scratch.status());
  std::byte *hin, *hout;
  TSR_RETURN_IF_ERROR(Fail("broadcast", StagingFor(count * esz, 0, &hin, &hout)));
  std::byte* shard = *scratch;
  std::byte* padbuf = shard + Round256(b.q * esz);
  auto* out = static_cast<std::byte*>(recv);
  std::vector<Part> parts(1);
  parts[0].host = IslandBridge(CollKind::kBroadcast, hin, hin, count, dt, RedOp::kSum, root);
  const auto at = std::find(island.begin(), island.end(), root);
  if (at == island.end()) {  // the root is in another island: my shard comes over the bridge, NCCL spreads it
    parts[0].up = {Copy{shard, hin + S.lo * esz, S.len() * esz}};
    parts[0].post = [=, this](bridge::Stream st) { return IslandAllGatherOn(st, shard, count, dt, padbuf, out); };
  } else {  // the root's island: NCCL broadcasts inside it, each rank sends its shard on over the bridge
    const int iroot = static_cast<int>(at - island.begin());
    const void* from = shape_.rank == root ? send : recv;
    parts[0].pre = [=, this](bridge::Stream st) {
      return IslandCall("Broadcast", island_ccl_->lib().Broadcast(from, recv, count, CclDataType(dt), iroot,
                                                                  island_ccl_->handle(), st));
    };
    parts[0].down = {Copy{hin + S.lo * esz, out + S.lo * esz, S.len() * esz}};
  }
  return SubmitStaged("broadcast", stream, std::move(parts));
}

Status BridgeRank::ReduceScatter(const void* send, void* recv, size_t recvcount, tsrDataType_t type, tsrRedOp_t op,
                                 tsrStream_t stream) {
  auto dt = static_cast<DType>(type);
  if (!IsValid(dt))
    return Host([=, this] { return host_->HostReduceScatter(send, recv, recvcount, type, op, nullptr); });
  size_t rb = recvcount * DTypeSize(dt), sb = rb * shape_.size;
  TSR_RETURN_IF_ERROR(Fail("reduce_scatter", CheckBuffers("reduce_scatter", send, sb, recv, rb, stream)));
  if (stream == nullptr)
    return Host([=, this] { return host_->HostReduceScatter(send, recv, recvcount, type, op, nullptr); });
  if (!hybrid_) {
    TSR_RETURN_IF_ERROR(Direct());
    if (!IsValid(static_cast<RedOp>(op)))
      return Fail("reduce_scatter", InvalidArgument(fmt::format("reduce_scatter: op {} is not a tsrRedOp_t", int(op))));
    return CclCall("ReduceScatter",
                   ccl_->lib().ReduceScatter(send, recv, recvcount, CclDataType(dt), ccl_->Op(static_cast<RedOp>(op)),
                                             ccl_->handle(), stream));
  }
  if (island_ccl_ && recvcount > 0 && IsValid(static_cast<RedOp>(op)) &&
      IslandTakes(CollKind::kReduceScatter, dt, static_cast<RedOp>(op)))
    return IslandReduceScatter(send, recv, recvcount, dt, static_cast<RedOp>(op), stream);
  if (ring_ops_ && host_->DeviceBridgeFor(dt) && IsValid(static_cast<RedOp>(op))) {
    // The device bridge: the whole reduced buffer is staged in device scratch (it is my shard), then routed.
    size_t scratch_bytes = 0;
    auto scratch = ReduceScratch("reduce_scatter", CollKind::kReduceScatter, recvcount, dt, &scratch_bytes);
    if (!scratch.ok()) return scratch.status();
    return SubmitDevice("reduce_scatter", stream, [=, this, p = *scratch](bridge::Event in) {
      return BridgeCall(in, CollKind::kReduceScatter, "reduce_scatter", static_cast<const std::byte*>(send),
                        static_cast<std::byte*>(recv), recvcount, dt, static_cast<RedOp>(op), 0, p, scratch_bytes);
    });
  }
  return StagedCall("reduce_scatter", stream, send, sb, recv, rb, [=, this](const void* hs, void* hr) {
    return host_->HostReduceScatter(hs, hr, recvcount, type, op, nullptr);
  });
}

Status BridgeRank::AllGather(const void* send, void* recv, size_t sendcount, tsrDataType_t type, tsrStream_t stream) {
  auto dt = static_cast<DType>(type);
  if (!IsValid(dt)) return Host([=, this] { return host_->HostAllGather(send, recv, sendcount, type, nullptr); });
  size_t sb = sendcount * DTypeSize(dt), rb = sb * shape_.size;
  TSR_RETURN_IF_ERROR(Fail("allgather", CheckBuffers("allgather", send, sb, recv, rb, stream)));
  if (stream == nullptr) return Host([=, this] { return host_->HostAllGather(send, recv, sendcount, type, nullptr); });
  if (!hybrid_) {
    TSR_RETURN_IF_ERROR(Direct());
    return CclCall("AllGather", ccl_->lib().AllGather(send, recv, sendcount, CclDataType(dt), ccl_->handle(), stream));
  }
  if (island_ccl_ && sendcount > 0 && IslandTakes(CollKind::kAllGather, dt, RedOp::kSum))
    return IslandAllGather(send, recv, sendcount, dt, stream);
  if (SelectOnDevice())
    return SubmitDevice("allgather", stream, [=, this](bridge::Event in) {
      return BridgeCall(in, CollKind::kAllGather, "allgather", static_cast<const std::byte*>(send),
                        static_cast<std::byte*>(recv), sendcount, dt, RedOp::kSum, 0, nullptr, 0);
    });
  return StagedCall("allgather", stream, send, sb, recv, rb, [=, this](const void* hs, void* hr) {
    return host_->HostAllGather(hs, hr, sendcount, type, nullptr);
  });
}

Status BridgeRank::Broadcast(const void* send, void* recv, size_t count, tsrDataType_t type, int root,
                             tsrStream_t stream) {
  auto dt = static_cast<DType>(type);
  if (!IsValid(dt) || root < 0 || root >= shape_.size)
    return Host(
        [=, this] { return host_->HostBroadcast(send, recv, count, type, root, nullptr); });  // names the bad argument
  bool is_root = root == shape_.rank;
  size_t b = count * DTypeSize(dt);
  TSR_RETURN_IF_ERROR(
      Fail("broadcast", CheckBuffers("broadcast", is_root ? send : nullptr, is_root ? b : 0, recv, b, stream)));
  if (stream == nullptr)
    return Host([=, this] { return host_->HostBroadcast(send, recv, count, type, root, nullptr); });
  if (!hybrid_) {
    TSR_RETURN_IF_ERROR(Direct());
    return CclCall("Broadcast", ccl_->lib().Broadcast(is_root ? send : recv, recv, count, CclDataType(dt), root,
                                                      ccl_->handle(), stream));
  }
  if (island_ccl_ && count > 0 && IslandTakes(CollKind::kBroadcast, dt, RedOp::kSum))
    return IslandBroadcast(send, recv, count, dt, root, stream);
  if (SelectOnDevice())
    return SubmitDevice("broadcast", stream, [=, this](bridge::Event in) {
      return BridgeCall(in, CollKind::kBroadcast, "broadcast", static_cast<const std::byte*>(is_root ? send : recv),
                        static_cast<std::byte*>(recv), count, dt, RedOp::kSum, root, nullptr, 0);
    });
  return StagedCall("broadcast", stream, is_root ? send : nullptr, is_root ? b : 0, recv, b,
                    [=, this](const void* hs, void* hr) {
                      return host_->HostBroadcast(is_root ? hs : hr, hr, count, type, root, nullptr);
                    });
}

Status BridgeRank::Send(const void* send, size_t count, tsrDataType_t type, int peer, tsrStream_t stream) {
  auto dt = static_cast<DType>(type);
  if (!IsValid(dt) || peer < 0 || peer >= shape_.size || peer == shape_.rank)
    return Host([=, this] { return host_->HostSend(send, count, type, peer, nullptr); });
  size_t b = count * DTypeSize(dt);
  TSR_RETURN_IF_ERROR(Fail("send", CheckBuffers("send", send, b, nullptr, 0, stream)));
  if (stream == nullptr) return Host([=, this] { return host_->HostSend(send, count, type, peer, nullptr); });
  if (!hybrid_) {
    TSR_RETURN_IF_ERROR(Direct());
    return CclCall("Send", ccl_->lib().Send(send, count, CclDataType(dt), peer, ccl_->handle(), stream));
  }
  return StagedCall("send", stream, send, b, nullptr, 0,
                    [=, this](const void* hs, void*) { return host_->HostSend(hs, count, type, peer, nullptr); });
}

Status BridgeRank::Recv(void* recv, size_t count, tsrDataType_t type, int peer, tsrStream_t stream) {
  auto dt = static_cast<DType>(type);
  if (!IsValid(dt) || peer < 0 || peer >= shape_.size || peer == shape_.rank)
    return Host([=, this] { return host_->HostRecv(recv, count, type, peer, nullptr); });
  size_t b = count * DTypeSize(dt);
  TSR_RETURN_IF_ERROR(Fail("recv", CheckBuffers("recv", nullptr, 0, recv, b, stream)));
  if (stream == nullptr) return Host([=, this] { return host_->HostRecv(recv, count, type, peer, nullptr); });
  if (!hybrid_) {
    TSR_RETURN_IF_ERROR(Direct());
    return CclCall("Recv", ccl_->lib().Recv(recv, count, CclDataType(dt), peer, ccl_->handle(), stream));
  }
  return StagedCall("recv", stream, nullptr, 0, recv, b,
                    [=, this](const void*, void* hr) { return host_->HostRecv(hr, count, type, peer, nullptr); });
}

Status BridgeRank::Barrier() {
  return Host([this] { return host_->HostBarrier(); });
}

void BridgeRank::Abort() {
  if (ccl_) ccl_->Abort();
  if (island_ccl_) island_ccl_->Abort();
  aborted_.store(true, std::memory_order_relaxed);  // a worker waiting for a staged input gives up
  {
    std::lock_guard<std::mutex> l(mu_);
    // Device jobs still queued are skipped (their streams released at once); waits for room end.
    if (async_error_.ok()) async_error_ = RemoteError("the communicator was aborted (tsrCommAbort)");
  }
  cv_.notify_all();
  done_cv_.notify_all();
}

Status BridgeRank::AsyncError() {
  {
    std::lock_guard<std::mutex> l(mu_);
    if (!async_error_.ok()) return async_error_;
  }
  if (ccl_) return ccl_->AsyncError();
  if (island_ccl_ && !island_ccl_->aborted()) return island_ccl_->AsyncError();
  return Status::Ok();
}

Status BridgeRank::Group(const std::vector<P2POp>& ops) {
  if (ops.empty()) return Status::Ok();
  const tsrStream_t stream = ops.front().stream;
  std::vector<size_t> bytes(ops.size());
  bool bad = false;
  for (size_t i = 0; i < ops.size(); ++i) {
    const P2POp& op = ops[i];
    auto dt = static_cast<DType>(op.type);
    if (!IsValid(dt) || op.peer < 0 || op.peer >= shape_.size) bad = true;  // the host path names it
    if (op.stream != stream)
      return Fail("group", InvalidArgument(fmt::format("group: {} #{} is on stream {} but the group's first call on "
                                                       "this communicator is on stream {}: use one stream",
                                                       op.is_send ? "send" : "recv", i, op.stream, stream)));
  }
  if (bad) return Host([ops, this] { return host_->HostGroup(ops); });  // names the bad argument
  if (stream == nullptr) {
    for (const P2POp& op : ops)
      TSR_RETURN_IF_ERROR(Fail("group", CheckBuffers("group", op.is_send ? op.send : nullptr, 0,
                                                     op.is_send ? nullptr : op.recv, 0, nullptr)));
    return Host([ops, this] { return host_->HostGroup(ops); });
  }
  size_t sb = 0, rb = 0;
  for (size_t i = 0; i < ops.size(); ++i) {
    const P2POp& op = ops[i];
    bytes[i] = op.count * DTypeSize(static_cast<DType>(op.type));
    TSR_RETURN_IF_ERROR(Fail("group", CheckBuffers(op.is_send ? "send (group)" : "recv (group)",
                                                   op.is_send ? op.send : nullptr, op.is_send ? bytes[i] : 0,
                                                   op.is_send ? nullptr : op.recv, op.is_send ? 0 : bytes[i], stream)));
    (op.is_send ? sb : rb) += bytes[i];
  }
  if (!hybrid_) {
    // A world of one CUDA island: the CCL's own group, on the caller's stream.
    TSR_RETURN_IF_ERROR(Direct());
    CclLibrary& lib = ccl_->lib();
    Status s = lib.Check(lib.GroupStart(), "GroupStart");
    if (!s.ok()) {
      ccl_->MarkFailed();
      return host_->Guarded("group", [&] { return s; });
    }
    for (const P2POp& op : ops) {
      const int t = CclDataType(static_cast<DType>(op.type));
      const int r = op.is_send ? lib.Send(op.send, op.count, t, op.peer, ccl_->handle(), stream)
                               : lib.Recv(op.recv, op.count, t, op.peer, ccl_->handle(), stream);
      if (s.ok()) s = lib.Check(r, op.is_send ? "Send (group)" : "Recv (group)");
    }
    const int end = lib.GroupEnd();  // always closes the CCL's group, even after an error inside it
    if (!s.ok()) {
      ccl_->MarkFailed();
      return host_->Guarded("group", [&] { return s; });
    }
    return CclCall("GroupEnd", end);
  }
  std::byte *hin, *hout;
  TSR_RETURN_IF_ERROR(Fail("group", StagingFor(sb, rb, &hin, &hout)));
  // Every send buffer down, the host group on staged copies, every receive back up.
  std::vector<Part> parts(1);
  std::vector<P2POp> host = ops;
  size_t so = 0, ro = 0;
  for (size_t i = 0; i < ops.size(); ++i) {
    host[i].stream = nullptr;
    if (ops[i].is_send) {
      host[i].send = hin + so;
      parts[0].down.push_back({hin + so, ops[i].send, bytes[i]});
      so += bytes[i];
    } else {
      host[i].recv = hout + ro;
      parts[0].up.push_back({ops[i].recv, hout + ro, bytes[i]});
      ro += bytes[i];
    }
  }
  parts[0].host = [this, host = std::move(host)] { return host_->HostGroup(host); };  // records its failures
  return SubmitStaged("group", stream, std::move(parts));
}

Status BridgeRank::AllToAllv(const void* send, const size_t* sendcounts, const size_t* sdispls, void* recv,
                             const size_t* recvcounts, const size_t* rdispls, tsrDataType_t type, tsrStream_t stream) {
  auto dt = static_cast<DType>(type);
  const int W = shape_.size;
  if (!IsValid(dt) || sendcounts == nullptr || sdispls == nullptr || recvcounts == nullptr || rdispls == nullptr)
    return Host([=, this] {  // names the bad argument
      return host_->HostAllToAllv(send, sendcounts, sdispls, recv, recvcounts, rdispls, type);
    });
  const std::vector<size_t> sc(sendcounts, sendcounts + W), sd(sdispls, sdispls + W), rc(recvcounts, recvcounts + W),
      rd(rdispls, rdispls + W);
  const size_t esz = DTypeSize(dt);
  size_t sext = 0, rext = 0;
  for (int p = 0; p < W; ++p) {
    if (sd[p] > SIZE_MAX / esz || rd[p] > SIZE_MAX / esz || sc[p] > SIZE_MAX / esz - sd[p] ||
        rc[p] > SIZE_MAX / esz - rd[p])
      return Fail("alltoall", InvalidArgument(fmt::format("alltoallv: count + displacement of rank {} overflows", p)));
    if (sc[p] > 0) sext = std::max(sext, sd[p] + sc[p]);
    if (rc[p] > 0) rext = std::max(rext, rd[p] + rc[p]);
  }
  TSR_RETURN_IF_ERROR(Fail("alltoall", CheckBuffers("alltoallv", sext > 0 ? send : nullptr, sext * esz,
                                                    rext > 0 ? recv : nullptr, rext * esz, stream)));
  auto host_call = [=, this](const void* hs, void* hr) {
    return host_->HostAllToAllv(hs, sc.data(), sd.data(), hr, rc.data(), rd.data(), type);
  };
  if (stream == nullptr) return Host([=] { return host_call(send, recv); });
  if (!hybrid_) {
    TSR_RETURN_IF_ERROR(Direct());
    if (sc[shape_.rank] != rc[shape_.rank])
      return Fail("alltoall", InvalidArgument(fmt::format("alltoallv: rank {} sends {} element(s) to itself but "
                                                          "receives {}",
                                                          shape_.rank, sc[shape_.rank], rc[shape_.rank])));
    CclLibrary& lib = ccl_->lib();
    const int t = CclDataType(dt);
    Status s = lib.Check(lib.GroupStart(), "GroupStart");
    if (!s.ok()) {
      ccl_->MarkFailed();
      return host_->Guarded("alltoall", [&] { return s; });
    }
    for (int p = 0; p < W; ++p) {
      const auto* sp = static_cast<const std::byte*>(send) + sd[p] * esz;
      auto* rp = static_cast<std::byte*>(recv) + rd[p] * esz;
      if (s.ok() && sc[p] > 0) s = lib.Check(lib.Send(sp, sc[p], t, p, ccl_->handle(), stream), "Send (alltoall)");
      if (s.ok() && rc[p] > 0) s = lib.Check(lib.Recv(rp, rc[p], t, p, ccl_->handle(), stream), "Recv (alltoall)");
    }
    const int end = lib.GroupEnd();
    if (!s.ok()) {
      ccl_->MarkFailed();
      return host_->Guarded("alltoall", [&] { return s; });
    }
    return CclCall("GroupEnd (alltoall)", end);
  }
  std::byte *hin, *hout;
  TSR_RETURN_IF_ERROR(Fail("alltoall", StagingFor(sext * esz, rext * esz, &hin, &hout)));
  // The receive extent goes down too, so that the gaps between the blocks keep their bytes when the whole
  // extent goes back up.
  std::vector<Part> parts(1);
  parts[0].down = {{hin, send, sext * esz}, {hout, recv, rext * esz}};
  parts[0].up = {{recv, hout, rext * esz}};
  parts[0].host = [hin, hout, host_call] { return host_call(hin, hout); };
  return SubmitStaged("alltoall", stream, std::move(parts));
}

}  // namespace tessera::comm
