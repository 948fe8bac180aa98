// comm/engine_direct: the engine's device mode on a link whose channels take device memory themselves
// (DeviceOps::memory; SendChannel::sends_from, RecvChannel::receives_into: the ucx row where UCX registers the
// device's memory) — no ring between the device and the channel; see engine.hpp.
//
// A send is posted straight from device memory once the device has finished writing it: the host waits for a
// fold-queue ticket taken when the bytes became ready (the fold queue waits for the caller's input, and runs the folds
// a result comes from), since UCX reads device memory outside the device's streams; a receive waits likewise before
// anything lands (UCX writes device memory outside them too). A send's op ends when the channel says
// every byte has left the buffer (SentFromDone). A copy receive lands in its destination; a fold receive lands in the
// link's landing buffer (device memory), where a kernel folds whole elements as they come; landing space is reused
// once their folds have completed, and the op ends when its last fold has. Padding goes through host memory.
#include <fmt/format.h>

#include <algorithm>

#include "comm/engine.hpp"

namespace tessera::comm {
namespace {
const std::byte kPadding[kChannelAlign] = {};
}  // namespace

Result<bool> Engine::StepDirectSend(int peer, std::deque<SendOp>& q, SendChannel* ch) {
  SendOp& op = q.front();
  DevQueues& dq = devq_[peer];
  bool progress = false;
  if (dq.gate_ticket != 0) {
    TSR_ASSIGN_OR_RETURN(bool done, dev_->Done(DeviceOps::kFoldQueue, dq.gate_ticket));
    if (done) {
      dq.gate_ready = dq.gate_next;
      dq.gate_ticket = 0;
    }
  }
  if (const size_t ready = op.Ready(); dq.gate_ticket == 0 && ready > dq.gate_ready) {
    TSR_ASSIGN_OR_RETURN(dq.gate_ticket, dev_->Mark(DeviceOps::kFoldQueue));
    dq.gate_next = ready;
  }
  while (op.off < op.padded) {
    Result<size_t> n = size_t{0};
    if (op.off < op.bytes) {
      if (op.off >= dq.gate_ready) break;  // not written yet
      n = ch->TrySendFrom(op.data + op.off, dq.gate_ready - op.off, dev_->memory());
    } else {
      n = ch->TrySend(kPadding, op.padded - op.off);
    }
    if (!n.ok()) return n.status().WithContext("sending to " + links_->PeerName(peer));
    if (*n == 0) break;
    op.off += *n;
    progress = true;
  }
  if (op.off < op.padded) {
    if (!progress) TSR_RETURN_IF_ERROR(ch->Health());
    return progress;
  }
  TSR_ASSIGN_OR_RETURN(bool left, ch->SentFromDone());
  if (!left) return progress;
  dq.gate_ready = dq.gate_next = 0;
  dq.gate_ticket = 0;
  q.pop_front();
  --pending_;
  return true;
}

Result<bool> Engine::StepDirectRecv(int peer, std::deque<RecvOp>& q, RecvChannel* ch) {
  RecvOp& op = q.front();
  DevQueues& dq = devq_[peer];
  const std::string_view memory = dev_->memory();
  const RecvChannel::CopyIn copy_in = [this](void* d, const void* s, size_t n) { return dev_->CopyIn(d, s, n); };
  auto failed = [&](const Status& s) { return s.WithContext("receiving from " + links_->PeerName(peer)); };
  bool progress = false;
  // Landing space whose folds have completed.
  while (!dq.recvd.empty()) {
    TSR_ASSIGN_OR_RETURN(bool done, dev_->Done(DeviceOps::kFoldQueue, dq.recvd.front().ticket));
    if (!done) break;
    dq.land_tail += dq.recvd.front().bytes;
    dq.recvd.pop_front();
    progress = true;
  }
  // Nothing lands before the device has done what was issued before this op (the fold queue waits for the caller's
  // input: a destination the caller's stream still writes is not written under it).
  if (!dq.recv_gated) {
    if (dq.recv_ticket == 0) {
      TSR_ASSIGN_OR_RETURN(dq.recv_ticket, dev_->Mark(DeviceOps::kFoldQueue));
    }
    TSR_ASSIGN_OR_RETURN(dq.recv_gated, dev_->Done(DeviceOps::kFoldQueue, dq.recv_ticket));
    if (!dq.recv_gated) return progress;
  }
  if (op.dst != nullptr) {
    while (op.off < op.bytes) {
      auto n = ch->RecvIntoMemory(op.dst + op.off, op.bytes - op.off, memory, copy_in);
      if (!n.ok()) return failed(n.status());
      if (*n == 0) break;
      op.off += *n;
      progress = true;
    }
  } else {
    auto [land, land_bytes] = dev_->Landing(peer);
    if (land == nullptr)
      return InternalError(fmt::format("device bridge: the link to {} has no landing buffer", links_->PeerName(peer)));
    const size_t unit = DTypeSize(op.job->src_type[op.contributor]);
    for (bool moved = true; moved;) {
      moved = false;
      // One receive posted at a time, into the landing buffer's contiguous room (at most one buffer ahead of the
      // folds that completed); it keeps its place and size until it completes.
      if (dq.land_dst == nullptr && op.off < op.bytes) {
        const size_t at = dq.land_head % land_bytes;
        const size_t room = std::min({op.bytes - op.off, land_bytes - at, land_bytes - (dq.land_head - dq.land_tail)});
        if (room > 0) {
          dq.land_dst = land + at;
          dq.land_want = room;
        }
      }
      if (dq.land_dst != nullptr) {
        auto n = ch->RecvIntoMemory(dq.land_dst, dq.land_want, memory, copy_in);
        if (!n.ok()) return failed(n.status());
        if (*n > 0) {
          dq.land_head += *n;
          op.off += *n;
          dq.land_dst = nullptr;
          moved = true;
        }
      }
      // Whole elements that landed, as far as the contributor order allows and up to the buffer's end (its size is a
      // multiple of every element's, so none straddles it).
      const size_t at = dq.land_fold % land_bytes;
      const size_t k =
          std::min({(dq.land_head - dq.land_fold) / unit, (land_bytes - at) / unit, op.job->Allowed(op.contributor)});
      if (k > 0) {
        TSR_RETURN_IF_ERROR(op.job->FoldRange(op.contributor, land + at, k));
        TSR_ASSIGN_OR_RETURN(DeviceOps::Ticket t, dev_->Mark(DeviceOps::kFoldQueue));
        dq.recvd.push_back({t, k * unit});
        dq.land_fold += k * unit;
        moved = true;
      }
      progress |= moved;
    }
  }
  // The padding, through host memory (the same place until it completes).
  if (op.off >= op.bytes && op.off < op.padded) {
    auto n = ch->RecvInto(dq.pad + (op.off - op.bytes), op.padded - op.off);
    if (!n.ok()) return failed(n.status());
    op.off += *n;
    progress |= *n > 0;
  }
  const bool folded = op.dst != nullptr || (dq.land_fold == op.bytes && dq.recvd.empty());
  if (op.off < op.padded || !folded) {
    if (!progress) TSR_RETURN_IF_ERROR(ch->Health());  // Ok while bytes that arrived before a failure remain
    return progress;
  }
  dq.land_head = dq.land_fold = dq.land_tail = 0;
  dq.recv_ticket = 0;
  dq.recv_gated = false;
  q.pop_front();
  --pending_;
  return true;
}

}  // namespace tessera::comm
