// comm/device/device_bridge_collectives: the device-bridge rank's collectives — argument checks, then a world of one
// island straight to its CCL on the caller's stream, or in a hybrid world a staged job or the device bridge
// (device_bridge_rank.cpp; allreduce, reduce-scatter, broadcast and allgather). Host-memory calls (stream NULL) run
// through the worker queue in order.
#include <fmt/format.h>

#include <algorithm>

#include "comm/device/device_bridge_rank.hpp"
#include "comm/device/island_ccl.hpp"
#include "comm/reduce/reduce.hpp"
#include "common/env.hpp"
#include "common/log.hpp"

namespace tessera::comm {

Status DeviceBridgeRank::AllReduce(const void* send, void* recv, size_t count, tsrDataType_t type, tsrRedOp_t op,
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
    return CclCall("AllReduce", ccl_->lib().AllReduce(send, recv, count, dt, ccl_->Op(rop), ccl_->handle(), stream));
  }
  if (island_ccl_ && count > 0 && IslandTakes(CollKind::kAllReduce, dt, rop))
    return plan_->IslandAllReduce(send, recv, count, dt, rop, stream);
  // Pinned staging, in place, one part per bridge chunk (the chunks every rank of the world uses).
  if (!ring_ops_ || !host_->DeviceBridgeFor(dt)) return plan_->AllReduce(send, recv, count, dt, rop, stream);
  // The device bridge: one collective per chunk that every rank of the world cuts the call into (one chunk unless a
  // staged device island shares the world), in one job of the worker.
  std::vector<Range> chunks = host_->AllReduceChunks(count, dt);
  size_t largest = 0;
  for (const Range& c : chunks) largest = std::max(largest, c.len());
  size_t acc_bytes = 0;
  auto acc = ReduceScratch("allreduce", CollKind::kAllReduce, largest, dt, &acc_bytes);
  if (!acc.ok()) return acc.status();
  return SubmitDevice(
      "allreduce", stream, [=, this, scratch = *acc, chunks = std::move(chunks)](device_bridge::Event in) {
        const size_t esz = DTypeSize(dt);
        for (const Range& c : chunks)
          TSR_RETURN_IF_ERROR(
              BridgeCall(in, CollKind::kAllReduce, "allreduce", static_cast<const std::byte*>(send) + c.lo * esz,
                         static_cast<std::byte*>(recv) + c.lo * esz, c.len(), dt, rop, 0, scratch, acc_bytes));
        return Status::Ok();
      });
}

// ---- hybrid world, island of several GPUs: the island's library does the island phases ----

bool DeviceBridgeRank::IslandTakes(CollKind kind, DType dt, RedOp op) {
  return gate_.Takes(kind, dt, op, island_ccl_->lib(), dev_->rt().name(), half_, shape_.island,
                     dev_->device().family->label, shape_.island_rank == 0);
}

Result<std::byte*> DeviceBridgeRank::Scratch(const char* what, size_t bytes) {
  if (bytes <= island_dev_cap_) return island_dev_;
  if (island_dev_) retired_dev_.push_back(island_dev_);  // work queued earlier may still use it
  island_dev_ = nullptr;
  island_dev_cap_ = 0;
  const size_t want = std::max<size_t>(bytes, 1 << 20);
  auto p = dev_->rt().Malloc(want);
  if (!p.ok()) return Fail(what, p.status().WithContext("the staged plan's device scratch"));
  island_dev_ = static_cast<std::byte*>(*p);
  island_dev_cap_ = want;
  return island_dev_;
}

Status DeviceBridgeRank::CopyOnStream(DeviceRuntime::Stream s, void* dst, const void* src, size_t bytes) {
  if (bytes == 0) return Status::Ok();
  return dev_->rt().MemcpyAsync(dst, bytes, src, bytes, CopyKind::kDeviceToDevice, s).WithContext("on the device");
}

Status DeviceBridgeRank::ReduceScatter(const void* send, void* recv, size_t recvcount, tsrDataType_t type,
                                       tsrRedOp_t op, tsrStream_t stream) {
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
    return CclCall(
        "ReduceScatter",
        ccl_->lib().ReduceScatter(send, recv, recvcount, dt, ccl_->Op(static_cast<RedOp>(op)), ccl_->handle(), stream));
  }
  if (island_ccl_ && recvcount > 0 && IsValid(static_cast<RedOp>(op)) &&
      IslandTakes(CollKind::kReduceScatter, dt, static_cast<RedOp>(op)))
    return plan_->IslandReduceScatter(send, recv, recvcount, dt, static_cast<RedOp>(op), stream);
  if (ring_ops_ && host_->DeviceBridgeFor(dt) && IsValid(static_cast<RedOp>(op))) {
    // The device bridge: the whole reduced buffer is staged in device scratch (it is my shard), then routed.
    size_t scratch_bytes = 0;
    auto scratch = ReduceScratch("reduce_scatter", CollKind::kReduceScatter, recvcount, dt, &scratch_bytes);
    if (!scratch.ok()) return scratch.status();
    return SubmitDevice("reduce_scatter", stream, [=, this, p = *scratch](device_bridge::Event in) {
      return BridgeCall(in, CollKind::kReduceScatter, "reduce_scatter", static_cast<const std::byte*>(send),
                        static_cast<std::byte*>(recv), recvcount, dt, static_cast<RedOp>(op), 0, p, scratch_bytes);
    });
  }
  return StagedCall("reduce_scatter", stream, send, sb, recv, rb, [=, this](const void* hs, void* hr) {
    return host_->HostReduceScatter(hs, hr, recvcount, type, op, nullptr);
  });
}

Status DeviceBridgeRank::AllGather(const void* send, void* recv, size_t sendcount, tsrDataType_t type,
                                   tsrStream_t stream) {
  auto dt = static_cast<DType>(type);
  if (!IsValid(dt)) return Host([=, this] { return host_->HostAllGather(send, recv, sendcount, type, nullptr); });
  size_t sb = sendcount * DTypeSize(dt), rb = sb * shape_.size;
  TSR_RETURN_IF_ERROR(Fail("allgather", CheckBuffers("allgather", send, sb, recv, rb, stream)));
  if (stream == nullptr) return Host([=, this] { return host_->HostAllGather(send, recv, sendcount, type, nullptr); });
  if (!hybrid_) {
    TSR_RETURN_IF_ERROR(Direct());
    return CclCall("AllGather", ccl_->lib().AllGather(send, recv, sendcount, dt, ccl_->handle(), stream));
  }
  if (island_ccl_ && sendcount > 0 && IslandTakes(CollKind::kAllGather, dt, RedOp::kSum))
    return plan_->IslandAllGather(send, recv, sendcount, dt, stream);
  if (SelectOnDevice())
    return SubmitDevice("allgather", stream, [=, this](device_bridge::Event in) {
      return BridgeCall(in, CollKind::kAllGather, "allgather", static_cast<const std::byte*>(send),
                        static_cast<std::byte*>(recv), sendcount, dt, RedOp::kSum, 0, nullptr, 0);
    });
  return StagedCall("allgather", stream, send, sb, recv, rb, [=, this](const void* hs, void* hr) {
    return host_->HostAllGather(hs, hr, sendcount, type, nullptr);
  });
}

Status DeviceBridgeRank::Broadcast(const void* send, void* recv, size_t count, tsrDataType_t type, int root,
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
    return CclCall("Broadcast",
                   ccl_->lib().Broadcast(is_root ? send : recv, recv, count, dt, root, ccl_->handle(), stream));
  }
  if (island_ccl_ && count > 0 && IslandTakes(CollKind::kBroadcast, dt, RedOp::kSum))
    return plan_->IslandBroadcast(send, recv, count, dt, root, stream);
  if (SelectOnDevice())
    return SubmitDevice("broadcast", stream, [=, this](device_bridge::Event in) {
      return BridgeCall(in, CollKind::kBroadcast, "broadcast", static_cast<const std::byte*>(is_root ? send : recv),
                        static_cast<std::byte*>(recv), count, dt, RedOp::kSum, root, nullptr, 0);
    });
  return StagedCall("broadcast", stream, is_root ? send : nullptr, is_root ? b : 0, recv, b,
                    [=, this](const void* hs, void* hr) {
                      return host_->HostBroadcast(is_root ? hs : hr, hr, count, type, root, nullptr);
                    });
}

Status DeviceBridgeRank::Send(const void* send, size_t count, tsrDataType_t type, int peer, tsrStream_t stream) {
  auto dt = static_cast<DType>(type);
  if (!IsValid(dt) || peer < 0 || peer >= shape_.size || peer == shape_.rank)
    return Host([=, this] { return host_->HostSend(send, count, type, peer, nullptr); });
  size_t b = count * DTypeSize(dt);
  TSR_RETURN_IF_ERROR(Fail("send", CheckBuffers("send", send, b, nullptr, 0, stream)));
  if (stream == nullptr) return Host([=, this] { return host_->HostSend(send, count, type, peer, nullptr); });
  if (!hybrid_) {
    TSR_RETURN_IF_ERROR(Direct());
    return CclCall("Send", ccl_->lib().Send(send, count, dt, peer, ccl_->handle(), stream));
  }
  return StagedCall("send", stream, send, b, nullptr, 0,
                    [=, this](const void* hs, void*) { return host_->HostSend(hs, count, type, peer, nullptr); });
}

Status DeviceBridgeRank::Recv(void* recv, size_t count, tsrDataType_t type, int peer, tsrStream_t stream) {
  auto dt = static_cast<DType>(type);
  if (!IsValid(dt) || peer < 0 || peer >= shape_.size || peer == shape_.rank)
    return Host([=, this] { return host_->HostRecv(recv, count, type, peer, nullptr); });
  size_t b = count * DTypeSize(dt);
  TSR_RETURN_IF_ERROR(Fail("recv", CheckBuffers("recv", nullptr, 0, recv, b, stream)));
  if (stream == nullptr) return Host([=, this] { return host_->HostRecv(recv, count, type, peer, nullptr); });
  if (!hybrid_) {
    TSR_RETURN_IF_ERROR(Direct());
    return CclCall("Recv", ccl_->lib().Recv(recv, count, dt, peer, ccl_->handle(), stream));
  }
  return StagedCall("recv", stream, nullptr, 0, recv, b,
                    [=, this](const void*, void* hr) { return host_->HostRecv(hr, count, type, peer, nullptr); });
}

Status DeviceBridgeRank::Barrier() {
  return Host([this] { return host_->HostBarrier(); });
}

void DeviceBridgeRank::Abort() {
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

Status DeviceBridgeRank::AsyncError() {
  {
    std::lock_guard<std::mutex> l(mu_);
    if (!async_error_.ok()) return async_error_;
  }
  if (ccl_) return ccl_->AsyncError();
  if (island_ccl_ && !island_ccl_->aborted()) return island_ccl_->AsyncError();
  return Status::Ok();
}

Status DeviceBridgeRank::Group(const std::vector<P2POp>& ops) {
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
      const DType t = static_cast<DType>(op.type);
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

Status DeviceBridgeRank::AllToAllv(const void* send, const size_t* sendcounts, const size_t* sdispls, void* recv,
                                   const size_t* recvcounts, const size_t* rdispls, tsrDataType_t type,
                                   tsrStream_t stream) {
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
    const DType t = dt;
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
