// comm/collectives: the communicator's public calls. Dispatch: a rank of a device island goes through
// its device rank (a world of one device island first tries the lean CCL path), every other rank to the
// host implementations here — argument checks (CheckArgs), failure bookkeeping (Guard: a failed
// communicator stays failed, the first rank to fail posts its cause to the store, and an echo of that
// failure is reported as its cause), the collectives (one Hierarchical call each, allreduce in bridge
// chunks), and the point-to-point calls: send/recv, groups and alltoall(v), each message preceded by a
// header (comm/call_header).
#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "comm/call_header.hpp"
#include "comm/comm.hpp"
#include "comm/runtime/runtime.hpp"
#include "comm/schedule.hpp"

namespace tessera::comm {

void* Comm::Scratch(int which, size_t bytes) {
  if (scratch_size_[which] < bytes) {
    scratch_[which].reset(new std::byte[bytes]);
    scratch_size_[which] = bytes;
  }
  return scratch_[which].get();
}

Status Comm::CheckArgs(const char* what, const void* send, const void* recv, size_t count, tsrDataType_t type,
                       tsrStream_t stream, DType* dt) {
  auto t = static_cast<DType>(type);
  if (!IsValid(t))
    return InvalidArgument(fmt::format("rank {}: {}: datatype {} is not a tsrDataType_t", rank_, what, int(type)));
  if (count > 0 && (send == nullptr || recv == nullptr))
    return InvalidArgument(fmt::format("rank {}: {}: NULL buffer with count {}", rank_, what, count));
  if (count > SIZE_MAX / DTypeSize(t))
    return InvalidArgument(fmt::format("rank {}: {}: count {} of {} overflows", rank_, what, count, DTypeName(t)));
  if (stream != nullptr)
    return InvalidArgument(
        fmt::format("rank {}: {}: a stream was passed, but its island ({}) uses host memory: pass NULL", rank_, what,
                    islands_[my_island_].vendor));
  if (!device_ && count > 0) {
    const bool send_dev = IsDeviceMemory(send);
    if (send_dev || IsDeviceMemory(recv))
      return InvalidArgument(fmt::format("rank {}: {}: {} = {} is device memory, but its island ({}) uses host memory",
                                         rank_, what, send_dev ? "sendbuf" : "recvbuf", send_dev ? send : recv,
                                         islands_[my_island_].vendor));
  }
  *dt = t;
  return Status::Ok();
}

template <typename F>
Status Comm::Guard(const std::string& what, F&& body) {
  if (failed_.ok() && async_failed_.load(std::memory_order_acquire)) {
    // Failed between calls: aborted, or a failure AsyncError found.
    std::lock_guard<std::mutex> l(async_mu_);
    failed_ = async_error_;
    if (direct_ != nullptr) direct_->failed.store(true, std::memory_order_relaxed);
  }
  if (!failed_.ok()) return Status(failed_.code(), "communicator failed earlier: " + failed_.message());
  Status s = body();
  if (!s.ok() && s.code() == Code::kRemoteError && !aborted_by_peer_) {
    // A connection lost to a peer is often the echo of a failure elsewhere: the first rank to fail posts
    // its cause before it exits (and closes its connections). Report that cause, not the echo — across
    // hosts the echo would name the wrong host.
    const auto wait = std::min<std::chrono::milliseconds>(timeout_, std::chrono::milliseconds(250));
    const auto t0 = std::chrono::steady_clock::now();
    auto abort = store_->Get("abort", wait);
    if (abort.ok()) {
      aborted_by_peer_ = true;
      s = RemoteError("another rank failed — " + *abort);
    } else if (abort.status().code() != Code::kTimeout ||
               std::chrono::steady_clock::now() - t0 > wait + std::chrono::milliseconds(500)) {
      s = RemoteError(s.message() + StoreSilence(abort.status()));  // the store did not answer at all
    }
  }
  if (!s.ok()) {
    s = s.WithContext(fmt::format("rank {}: {}", rank_, what));
    failed_ = s;
    SetAsyncError(s);
    if (direct_ != nullptr) direct_->failed.store(true, std::memory_order_relaxed);  // read by the lean path
    // Tell the other ranks at once, so they fail with this message instead of waiting for a timeout.
    if (!aborted_by_peer_) (void)store_->Set("abort", s.message());
  }
  return s;
}

Status Comm::GuardFn(const std::string& what, const std::function<Status()>& body) { return Guard(what, body); }

Status Comm::HostAllReduce(const void* send, void* recv, size_t count, tsrDataType_t type, tsrRedOp_t op,
                           tsrStream_t stream) {
  // The checks come before Guard: a bad argument is this rank's alone, found before any traffic, and leaves the
  // communicator usable.
  DType dt;
  auto r = static_cast<RedOp>(op);
  TSR_RETURN_IF_ERROR(CheckArgs("allreduce", send, recv, count, type, stream, &dt));
  if (!IsValid(r)) return InvalidArgument(fmt::format("rank {}: allreduce: op {} is not a tsrRedOp_t", rank_, int(op)));
  return Guard("allreduce", [&]() -> Status {
    const size_t esz = DTypeSize(dt);
    for (const Range& c : BridgeChunks(count, dt)) {
      Status s = Hierarchical(CollKind::kAllReduce, static_cast<const std::byte*>(send) + c.lo * esz,
                              static_cast<std::byte*>(recv) + c.lo * esz, c.len(), dt, r, 0);
      ++seq_;
      TSR_RETURN_IF_ERROR(s);
    }
    return Status::Ok();
  });
}

Status Comm::HostAllReducePiece(const void* send, void* recv, size_t count, DType dt, RedOp op) {
  return Guard("allreduce", [&]() -> Status {
    Status s = Hierarchical(CollKind::kAllReduce, send, recv, count, dt, op, 0);
    ++seq_;
    return s;
  });
}

Status Comm::HostReduceScatter(const void* send, void* recv, size_t recvcount, tsrDataType_t type, tsrRedOp_t op,
                               tsrStream_t stream) {
  DType dt;
  auto r = static_cast<RedOp>(op);
  TSR_RETURN_IF_ERROR(CheckArgs("reduce_scatter", send, recv, recvcount, type, stream, &dt));
  if (!IsValid(r))
    return InvalidArgument(fmt::format("rank {}: reduce_scatter: op {} is not a tsrRedOp_t", rank_, int(op)));
  return Guard("reduce_scatter", [&]() -> Status {
    Status s = Hierarchical(CollKind::kReduceScatter, send, recv, recvcount, dt, r, 0);
    ++seq_;
    return s;
  });
}

Status Comm::HostAllGather(const void* send, void* recv, size_t sendcount, tsrDataType_t type, tsrStream_t stream) {
  DType dt;
  TSR_RETURN_IF_ERROR(CheckArgs("allgather", send, recv, sendcount, type, stream, &dt));
  return Guard("allgather", [&]() -> Status {
    Status s = Hierarchical(CollKind::kAllGather, send, recv, sendcount, dt, RedOp::kSum, 0);
    ++seq_;
    return s;
  });
}

Status Comm::HostBroadcast(const void* send, void* recv, size_t count, tsrDataType_t type, int root,
                           tsrStream_t stream) {
  DType dt;
  if (root < 0 || root >= size_)
    return InvalidArgument(
        fmt::format("rank {}: broadcast: root {} is not a rank of this world of {}", rank_, root, size_));
  TSR_RETURN_IF_ERROR(CheckArgs("broadcast", rank_ == root ? send : recv, recv, count, type, stream, &dt));
  return Guard("broadcast", [&]() -> Status {
    Status s = Hierarchical(CollKind::kBroadcast, send, recv, count, dt, RedOp::kSum, root);
    ++seq_;
    return s;
  });
}

Status Comm::HostBarrier() {
  return Guard("barrier", [&]() -> Status {
    int32_t one = 1, out = 0;
    Status s = Hierarchical(CollKind::kBarrier, &one, &out, 1, DType::kInt32, RedOp::kSum, 0);
    ++seq_;
    return s;
  });
}

Status Comm::HostBridge(CollKind kind, const void* send, void* recv, size_t count, DType dt, RedOp op, int root) {
  return Guard(CollName(kind), [&]() -> Status {
    Status s = Hierarchical(kind, send, recv, count, dt, op, root, nullptr, IslandPhases::kDone);
    ++seq_;
    return s;
  });
}

Status Comm::DeviceBridgeCollective(CollKind kind, const void* send, void* recv, size_t count, DType dt, RedOp op,
                                    int root, DeviceOps* ops) {
  Status s = Hierarchical(kind, send, recv, count, dt, op, root, ops);
  ++seq_;
  return s;
}

Status Comm::Health() {
  if (failed_.ok() && async_failed_.load(std::memory_order_acquire))
    return GuardFn("call", [] { return Status::Ok(); });  // makes the async error the failure
  if (!failed_.ok()) return Status(failed_.code(), "communicator failed earlier: " + failed_.message());
  return Status::Ok();
}

Status Comm::HostSend(const void* send, size_t count, tsrDataType_t type, int peer, tsrStream_t stream) {
  DType dt;
  TSR_RETURN_IF_ERROR(CheckArgs("send", send, send, count, type, stream, &dt));
  if (peer < 0 || peer >= size_ || peer == rank_)
    return InvalidArgument(
        fmt::format("rank {}: send: peer {} is not another rank of this world of {}", rank_, peer, size_));
  return Guard("send", [&]() -> Status {
    Header h{kHeaderMagic,
             static_cast<uint32_t>(CollKind::kSend),
             p2p_sent_[peer]++,
             count,
             static_cast<int32_t>(dt),
             0,
             rank_,
             rank_,
             {}};
    Engine e(this);
    e.Send(peer, &h, sizeof(h));
    e.Send(peer, send, count * DTypeSize(dt));
    return e.Run(fmt::format("send to {}", PeerName(peer)));
  });
}

Status Comm::HostRecv(void* recv, size_t count, tsrDataType_t type, int peer, tsrStream_t stream) {
  DType dt;
  TSR_RETURN_IF_ERROR(CheckArgs("recv", recv, recv, count, type, stream, &dt));
  if (peer < 0 || peer >= size_ || peer == rank_)
    return InvalidArgument(
        fmt::format("rank {}: recv: peer {} is not another rank of this world of {}", rank_, peer, size_));
  return Guard("recv", [&]() -> Status {
    Header h{};
    Engine e(this);
    e.RecvCopy(peer, &h, sizeof(h));
    std::string what = fmt::format("recv from {}", PeerName(peer));
    TSR_RETURN_IF_ERROR(e.Run(what));
    if (h.magic != kHeaderMagic || h.kind != static_cast<uint32_t>(CollKind::kSend) || h.seq != p2p_recvd_[peer])
      return InternalError(what + ": stream out of step");
    ++p2p_recvd_[peer];
    if (h.count != count || h.dtype != static_cast<int32_t>(dt))
      return InvalidArgument(fmt::format("{}: rank {} expects {} × {} but {} sent {} × {}", what, rank_, count,
                                         DTypeName(dt), PeerName(peer), h.count,
                                         DTypeName(static_cast<DType>(h.dtype))));
    e.RecvCopy(peer, recv, count * DTypeSize(dt));
    return e.Run(what);
  });
}

Status Comm::HostGroup(const std::vector<P2POp>& ops) {
  // This rank's own checks first, outside Guard (see HostAllReduce).
  std::vector<DType> dts(ops.size());
  for (size_t i = 0; i < ops.size(); ++i) {
    const P2POp& op = ops[i];
    const std::string what = fmt::format("{} #{} of the group", op.is_send ? "send" : "recv", i);
    const void* buf = op.is_send ? op.send : op.recv;
    if (op.peer < 0 || op.peer >= size_)
      return InvalidArgument(
          fmt::format("rank {}: {}: peer {} is not a rank of this world of {}", rank_, what, op.peer, size_));
    TSR_RETURN_IF_ERROR(CheckArgs(what.c_str(), buf, buf, op.count, op.type, op.stream, &dts[i]));
  }
  // To itself: the k-th send to self goes to the k-th receive from self.
  std::vector<size_t> self_sends, self_recvs;
  for (size_t i = 0; i < ops.size(); ++i)
    if (ops[i].peer == rank_) (ops[i].is_send ? self_sends : self_recvs).push_back(i);
  if (self_sends.size() != self_recvs.size())
    return InvalidArgument(fmt::format("rank {}: the group has {} send(s) to itself but {} recv(s) from it", rank_,
                                       self_sends.size(), self_recvs.size()));
  for (size_t k = 0; k < self_sends.size(); ++k) {
    const P2POp &s_op = ops[self_sends[k]], &r_op = ops[self_recvs[k]];
    if (s_op.count != r_op.count || dts[self_sends[k]] != dts[self_recvs[k]])
      return InvalidArgument(fmt::format("rank {}: group: sends {} × {} to itself but receives {} × {}", rank_,
                                         s_op.count, DTypeName(dts[self_sends[k]]), r_op.count,
                                         DTypeName(dts[self_recvs[k]])));
  }
  return Guard("group", [&]() -> Status {
    for (size_t k = 0; k < self_sends.size(); ++k) {
      const P2POp &s_op = ops[self_sends[k]], &r_op = ops[self_recvs[k]];
      if (s_op.count > 0) std::memmove(r_op.recv, s_op.send, s_op.count * DTypeSize(dts[self_sends[k]]));
    }
    // Every other send is a header and the data, every receive the same (the wire format of Send/Recv);
    // all progress together in one engine run, so any order of matching pairs completes.
    std::vector<Header> hdr(ops.size());
    Engine e(this);
    for (size_t i = 0; i < ops.size(); ++i) {
      const P2POp& op = ops[i];
      if (op.peer == rank_) continue;
      const size_t bytes = op.count * DTypeSize(dts[i]);
      if (op.is_send) {
        hdr[i] = Header{kHeaderMagic,
                        static_cast<uint32_t>(CollKind::kSend),
                        p2p_sent_[op.peer]++,
                        op.count,
                        static_cast<int32_t>(dts[i]),
                        0,
                        rank_,
                        rank_,
                        {}};
        e.Send(op.peer, &hdr[i], sizeof(Header));
        e.Send(op.peer, op.send, bytes);
        continue;
      }
      const uint64_t seq = p2p_recvd_[op.peer]++;
      const Header* h = &hdr[i];
      const DType dt = dts[i];
      const size_t count = op.count;
      const int peer = op.peer;
      e.RecvCheck(peer, &hdr[i], sizeof(Header), [=, this]() -> Status {
        if (h->magic != kHeaderMagic || h->kind != static_cast<uint32_t>(CollKind::kSend) || h->seq != seq)
          return InternalError(fmt::format("recv from {}: stream out of step", PeerName(peer)));
        if (h->count != count || h->dtype != static_cast<int32_t>(dt))
          return InvalidArgument(fmt::format("recv from {}: rank {} expects {} × {} but {} sent {} × {}",
                                             PeerName(peer), rank_, count, DTypeName(dt), PeerName(peer), h->count,
                                             DTypeName(static_cast<DType>(h->dtype))));
        return Status::Ok();
      });
      e.RecvCopy(peer, op.recv, bytes);
    }
    return e.Run(fmt::format("group of {} send(s)/recv(s)", ops.size()));
  });
}

Status Comm::HostAllToAllv(const void* send_v, const size_t* sendcounts, const size_t* sdispls, void* recv_v,
                           const size_t* recvcounts, const size_t* rdispls, tsrDataType_t type) {
  // This rank's own checks first, outside Guard (see HostAllReduce).
  DType dt;
  if (sendcounts == nullptr || sdispls == nullptr || recvcounts == nullptr || rdispls == nullptr)
    return InvalidArgument(fmt::format("rank {}: alltoallv: NULL counts or displacements", rank_));
  // Extents, checked for overflow: the highest element touched + 1 in each buffer.
  size_t sext = 0, rext = 0;
  for (int p = 0; p < size_; ++p) {
    if (sendcounts[p] > SIZE_MAX - sdispls[p] || recvcounts[p] > SIZE_MAX - rdispls[p])
      return InvalidArgument(fmt::format("rank {}: alltoallv: count + displacement of rank {} overflows", rank_, p));
    if (sendcounts[p] > 0) sext = std::max(sext, sdispls[p] + sendcounts[p]);
    if (recvcounts[p] > 0) rext = std::max(rext, rdispls[p] + recvcounts[p]);
  }
  TSR_RETURN_IF_ERROR(CheckArgs("alltoallv", sext > 0 ? send_v : recv_v, rext > 0 ? recv_v : send_v,
                                std::max(sext, rext), type, nullptr, &dt));
  const size_t esz = DTypeSize(dt);
  const auto* send = static_cast<const std::byte*>(send_v);
  auto* recv = static_cast<std::byte*>(recv_v);
  if (sext > 0 && rext > 0 && send < recv + rext * esz && recv < send + sext * esz)
    return InvalidArgument(
        fmt::format("rank {}: alltoallv: sendbuf {} ({} elements) and recvbuf {} ({} elements) overlap", rank_, send_v,
                    sext, recv_v, rext));
  if (sendcounts[rank_] != recvcounts[rank_])
    return InvalidArgument(fmt::format("rank {}: alltoallv: sends {} element(s) to itself but receives {}", rank_,
                                       sendcounts[rank_], recvcounts[rank_]));
  return Guard("alltoall", [&]() -> Status {
    const uint64_t seq = seq_++;
    if (sendcounts[rank_] > 0)
      std::memcpy(recv + rdispls[rank_] * esz, send + sdispls[rank_] * esz, sendcounts[rank_] * esz);
    std::vector<Header> mine(size_), theirs(size_);
    Engine e(this);
    for (int i = 1; i < size_; ++i) {
      const int p = (rank_ + i) % size_;  // a rotation, so the ranks do not all start with rank 0
      mine[p] = Header{kHeaderMagic,
                       static_cast<uint32_t>(CollKind::kAllToAll),
                       seq,
                       sendcounts[p],
                       static_cast<int32_t>(dt),
                       0,
                       0,
                       rank_,
                       {}};
      e.Send(p, &mine[p], sizeof(Header));
      e.Send(p, send + sdispls[p] * esz, sendcounts[p] * esz);
      const Header* h = &theirs[p];
      const size_t want = recvcounts[p];
      e.RecvCheck(p, &theirs[p], sizeof(Header), [=, this]() -> Status {
        if (h->magic != kHeaderMagic) return InternalError(fmt::format("corrupt header from {}", PeerName(p)));
        if (h->kind != static_cast<uint32_t>(CollKind::kAllToAll) || h->seq != seq ||
            h->dtype != static_cast<int32_t>(dt) || h->count != want)
          return InvalidArgument(fmt::format(
              "mismatched collectives: rank {} called alltoallv(recvcount from rank {} = {}, {}) as its call #{}, "
              "but {} called {} as its call #{}",
              rank_, p, want, DTypeName(dt), seq, PeerName(p),
              h->kind == static_cast<uint32_t>(CollKind::kAllToAll)
                  ? fmt::format("alltoallv(sendcount to rank {} = {}, {})", rank_, h->count,
                                DTypeName(static_cast<DType>(h->dtype)))
                  : DescribeCall(static_cast<CollKind>(h->kind), h->count, static_cast<DType>(h->dtype),
                                 static_cast<RedOp>(h->op), h->root),
              h->seq));
        return Status::Ok();
      });
      e.RecvCopy(p, recv + rdispls[p] * esz, recvcounts[p] * esz);
    }
    return e.Run(fmt::format("alltoall #{}", seq));
  });
}

std::vector<Range> Comm::BridgeChunks(size_t count, DType dt) const {
  // Device islands on the device bridge pipeline through the rings themselves: no chunks needed.
  bool staged = false;
  for (const auto& isl : islands_) staged |= StagedDeviceIsland(isl, dt);
  if (!staged) return {Range{0, count}};
  return Chunks(count, bridge_chunk_auto_ ? AutoChunk(count, DTypeSize(dt)) : bridge_chunk_bytes_ / DTypeSize(dt));
}

// ---- dispatch: a device island's rank goes through its device rank ----
Status Comm::AllReduce(const void* send, void* recv, size_t count, tsrDataType_t type, tsrRedOp_t op,
                       tsrStream_t stream) {
  if (direct_ != nullptr) {  // a world of one device island: known-good calls go straight to the CCL
    const int r = direct_->TryCall(send, recv, count, type, op, stream);
    if (r == 0) return Status::Ok();
    if (r != DirectAllReduce::kNotTaken) return direct_->report(direct_->owner, r);
  }
  return device_ ? device_->AllReduce(send, recv, count, type, op, stream)
                 : HostAllReduce(send, recv, count, type, op, stream);
}
Status Comm::ReduceScatter(const void* send, void* recv, size_t recvcount, tsrDataType_t type, tsrRedOp_t op,
                           tsrStream_t stream) {
  return device_ ? device_->ReduceScatter(send, recv, recvcount, type, op, stream)
                 : HostReduceScatter(send, recv, recvcount, type, op, stream);
}
Status Comm::AllGather(const void* send, void* recv, size_t sendcount, tsrDataType_t type, tsrStream_t stream) {
  return device_ ? device_->AllGather(send, recv, sendcount, type, stream)
                 : HostAllGather(send, recv, sendcount, type, stream);
}
Status Comm::Broadcast(const void* send, void* recv, size_t count, tsrDataType_t type, int root, tsrStream_t stream) {
  return device_ ? device_->Broadcast(send, recv, count, type, root, stream)
                 : HostBroadcast(send, recv, count, type, root, stream);
}
Status Comm::Send(const void* send, size_t count, tsrDataType_t type, int peer, tsrStream_t stream) {
  return device_ ? device_->Send(send, count, type, peer, stream) : HostSend(send, count, type, peer, stream);
}
Status Comm::Recv(void* recv, size_t count, tsrDataType_t type, int peer, tsrStream_t stream) {
  return device_ ? device_->Recv(recv, count, type, peer, stream) : HostRecv(recv, count, type, peer, stream);
}
Status Comm::Barrier() { return device_ ? device_->Barrier() : HostBarrier(); }
Status Comm::Group(const std::vector<P2POp>& ops) { return device_ ? device_->Group(ops) : HostGroup(ops); }
Status Comm::AllToAllv(const void* send, const size_t* sendcounts, const size_t* sdispls, void* recv,
                       const size_t* recvcounts, const size_t* rdispls, tsrDataType_t type, tsrStream_t stream) {
  if (device_) return device_->AllToAllv(send, sendcounts, sdispls, recv, recvcounts, rdispls, type, stream);
  if (stream != nullptr)
    return InvalidArgument(
        fmt::format("rank {}: alltoallv: a stream was passed, but its island ({}) uses host memory: "
                    "pass NULL",
                    rank_, islands_[my_island_].vendor));
  return HostAllToAllv(send, sendcounts, sdispls, recv, recvcounts, rdispls, type);
}

}  // namespace tessera::comm
