// comm/device/staged_rank_hybrid: StagedRank's staged calls in a hybrid world (staged_rank.hpp): the island's library,
// which the island agrees on (OpenIslandCcl) and which then runs the island phases of the staged plan
// (staged_plan.hpp), and the executor that runs a plan's parts on the caller's thread, double-buffered with events, for
// runtimes without stream memory operations. docs/architecture.md, "Staged device ranks".
#include <fmt/format.h>

#include <algorithm>
#include <string>
#include <utility>

#include "comm/device/island_ccl.hpp"
#include "comm/device/staged_rank.hpp"
#include "common/log.hpp"

namespace tessera::comm {

Status StagedRank::AttachIslandLibrary() {
  TSR_ASSIGN_OR_RETURN(ccl_, OpenIslandCcl(host_->Store(), shape_, name_.family->ccl, name_.family->label));
  island_lib_ = ccl_ != nullptr;
  if (!island_lib_) return Status::Ok();
  const Status widen = rt_->WidenSupport();
  TSR_ASSIGN_OR_RETURN(half_,
                       AgreeIslandHalf(host_->Store(), shape_, widen.ok() ? "" : widen.message(), name_.family->label));
  plan_->SetIsland(ccl_.get(), half_);
  return Status::Ok();
}

bool StagedRank::IslandTakes(CollKind kind, DType dt, RedOp op) {
  return island_lib_ && gate_.Takes(kind, dt, op, ccl_->lib(), rt_->name(), half_, shape_.island, name_.family->label,
                                    shape_.island_rank == 0);
}

Status StagedRank::ReuseStaging(size_t in_bytes, size_t out_bytes) {
  TSR_RETURN_IF_ERROR(rt_->SetDevice(name_.index));
  if (up_pending_) {  // the previous call's results are still going up from the staging
    up_pending_ = false;
    TSR_RETURN_IF_ERROR(rt_->EventSynchronize(up_done_).WithContext("the previous call's copies to the device"));
  }
  TSR_RETURN_IF_ERROR(Grow(&in_, &in_cap_, in_bytes));
  return Grow(&out_, &out_cap_, out_bytes);
}

Status StagedRank::MarkUp(DeviceRuntime::Stream s) {
  TSR_RETURN_IF_ERROR(rt_->EventRecord(up_done_, s));
  up_pending_ = true;
  return Status::Ok();
}

Status StagedRank::Staging(const char* what, size_t in_bytes, size_t out_bytes, std::byte** in, std::byte** out) {
  return host_->Guarded(what, [&]() -> Status {
    TSR_RETURN_IF_ERROR(ReuseStaging(in_bytes, out_bytes));
    *in = in_;
    *out = out_;
    return Status::Ok();
  });
}

Result<std::byte*> StagedRank::Scratch(const char* what, size_t bytes) {
  TSR_RETURN_IF_ERROR(host_->Guarded(what, [&]() -> Status {
    if (bytes <= dev_cap_) return Status::Ok();
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
    const size_t want = std::max<size_t>(bytes, 1 << 20);
    TSR_ASSIGN_OR_RETURN(void* p, rt_->Malloc(want));
    dev_ = static_cast<std::byte*>(p);
    dev_cap_ = want;
    return Status::Ok();
  }));
  return dev_;
}

Status StagedRank::CopyOnStream(DeviceRuntime::Stream s, void* dst, const void* src, size_t bytes) {
  bool drained = false;
  return CopyOn(s, dst, src, bytes, CopyKind::kDeviceToDevice, &drained);
}

Status StagedRank::Run(const char* what, tsrStream_t stream, std::vector<StagedPart> parts) {
  auto* s = static_cast<DeviceRuntime::Stream>(stream);
  const size_t n = parts.size();
  const uint64_t run = ++runs_;
  std::vector<double> queued(trace_.on() ? n : 0);  // TESSERA_DEVICE_TRACE: when each part's copies down were queued
  auto queue = [&](size_t k) {
    return host_->Guarded(what, [&]() -> Status {
      const StagedPart& p = parts[k];
      if (p.pre) TSR_RETURN_IF_ERROR(p.pre(s));
      bool drained = false;
      for (const StagedCopy& c : p.down) {
        TSR_RETURN_IF_ERROR(CopyOn(s, c.dst, c.src, c.bytes, CopyKind::kDeviceToHost, &drained));
        down_bytes_ += c.bytes;
      }
      TSR_RETURN_IF_ERROR(rt_->EventRecord(down_ev_[k % 2], s));
      if (trace_.on()) queued[k] = DeviceTrace::NowUs();
      return Status::Ok();
    });
  };
  for (size_t k = 0; k < std::min<size_t>(2, n); ++k) TSR_RETURN_IF_ERROR(queue(k));
  for (size_t k = 0; k < n; ++k) {
    const StagedPart& p = parts[k];
    const double wait = trace_.on() ? DeviceTrace::NowUs() : 0;
    TSR_RETURN_IF_ERROR(host_->Guarded(
        what, [&] { return rt_->EventSynchronize(down_ev_[k % 2]).WithContext("the copies down to the host"); }));
    const double down = trace_.on() ? DeviceTrace::NowUs() : 0;
    if (p.host) TSR_RETURN_IF_ERROR(p.host());  // a host collective: guarded by itself
    const double hosted = trace_.on() ? DeviceTrace::NowUs() : 0;
    TSR_RETURN_IF_ERROR(host_->Guarded(what, [&]() -> Status {
      bool drained = false;
      for (const StagedCopy& c : p.up) {
        TSR_RETURN_IF_ERROR(CopyOn(s, c.dst, c.src, c.bytes, CopyKind::kHostToDevice, &drained));
        up_bytes_ += c.bytes;
      }
      return p.post ? p.post(s) : Status::Ok();
    }));
    if (trace_.on()) {
      size_t bytes = 0;  // down and up
      for (const auto* copies : {&p.down, &p.up})
        for (const StagedCopy& c : *copies) bytes += c.bytes;
      trace_.Add(fmt::format("{} {} {} {} {:.1f} {:.1f} {:.1f} {:.1f} {:.1f}", what, run, k, bytes, queued[k], wait,
                             down, hosted, DeviceTrace::NowUs()));
    }
    if (k + 2 < n) TSR_RETURN_IF_ERROR(queue(k + 2));
  }
  return host_->Guarded(what, [&] { return MarkUp(s); });
}

Status StagedRank::AttachCopyBridge() {
  TSR_ASSIGN_OR_RETURN(std::vector<HostPath::BridgeRings> links, host_->DeviceBridgeRings());
  for (const auto& l : links) relayed_links_ += l.relayed ? 1 : 0;
  TSR_ASSIGN_OR_RETURN(size_t piece, DevicePieceBytes(kCopyBridgePiece));
  for (auto& q : copy_q_) {
    TSR_ASSIGN_OR_RETURN(q, rt_->StreamCreate());
  }
  TSR_ASSIGN_OR_RETURN(copy_in_, rt_->EventCreate());
  auto ops = RuntimeRingOps::Create(*rt_, copy_q_[DeviceOps::kSendQueue], copy_q_[DeviceOps::kFoldQueue], links,
                                    shape_.timeout, piece, /*folds=*/false);
  if (!ops.ok())
    return ops.status().WithContext(
        fmt::format("rank {}: setting up the copy bridge (TESSERA_COPY_BRIDGE=on; =off stages through pinned memory)",
                    shape_.rank));
  copy_ops_ = std::move(ops).value();
  return Status::Ok();
}

void StagedRank::ReleaseCopyBridge() {
  for (DeviceRuntime::Stream q : copy_q_)
    if (q) (void)rt_->StreamSynchronize(q);
  copy_ops_.reset();  // unregisters the rings while they are still mapped
  for (DeviceRuntime::Stream& q : copy_q_)
    if (q) (void)rt_->StreamDestroy(std::exchange(q, nullptr));
  if (copy_in_) (void)rt_->EventDestroy(std::exchange(copy_in_, nullptr));
  relayed_links_ = 0;
}

bool StagedRank::CopyBridgeTakes(CollKind kind, DType dt) const {
  if (!copy_ops_) return false;
  if (kind == CollKind::kAllReduce || kind == CollKind::kReduceScatter) return host_->DeviceBridgeFor(dt);
  return kind == CollKind::kAllGather || kind == CollKind::kBroadcast;
}

Status StagedRank::CopyBridgeCall(CollKind kind, const char* what, const void* send, void* recv, size_t count, DType dt,
                                  RedOp op, int root, tsrStream_t stream) {
  std::lock_guard<std::mutex> lock(mu_);
  ++copy_calls_;
  return host_->Guarded(what, [&]() -> Status {
    TSR_RETURN_IF_ERROR(rt_->SetDevice(name_.index));
    // The inputs are ready once the caller's stream reaches the call (what produced them is queued before it).
    TSR_RETURN_IF_ERROR(rt_->EventRecord(copy_in_, static_cast<DeviceRuntime::Stream>(stream)));
    TSR_RETURN_IF_ERROR(rt_->EventSynchronize(copy_in_).WithContext("the caller's stream before the call"));
    const std::vector<Range> chunks =
        kind == CollKind::kAllReduce ? host_->AllReduceChunks(count, dt) : std::vector<Range>{Range{0, count}};
    size_t largest = 0;
    for (const Range& c : chunks) largest = std::max(largest, c.len());
    const size_t scratch_bytes = host_->DeviceScratchBytes(kind, largest, dt);  // 0 for allgather and broadcast
    if (scratch_bytes > 0) {
      TSR_ASSIGN_OR_RETURN(void* scratch, copy_ops_->Grow(scratch_bytes));
      copy_ops_->Use(scratch, scratch_bytes);
    }
    const size_t esz = DTypeSize(dt);
    for (const Range& c : chunks)
      TSR_RETURN_IF_ERROR(host_->DeviceBridgeCollective(kind, static_cast<const std::byte*>(send) + c.lo * esz,
                                                        static_cast<std::byte*>(recv) + c.lo * esz, c.len(), dt, op,
                                                        root, copy_ops_.get()));
    for (DeviceRuntime::Stream q : copy_q_)
      TSR_RETURN_IF_ERROR(rt_->StreamSynchronize(q).WithContext("the copy bridge's last copies"));
    return Status::Ok();
  });
}

}  // namespace tessera::comm
