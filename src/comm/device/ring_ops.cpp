// comm/device/ring_ops: the device bridge of a device rank, on its runtime row; see ring_ops.hpp.
#include "comm/device/ring_ops.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <thread>

#include "common/env.hpp"

namespace tessera::comm {

// Every message starts kChannelAlign-aligned in a ring (channel.hpp), so that a rank's copies between its memory and
// the rings stay asynchronous: a row whose asynchronous copies needed more (AsyncCopyAligned) would make them
// synchronously after the first message of an odd size.
static_assert(std::ranges::all_of(kRuntimeTable,
                                  [](const RuntimeRow& r) { return kChannelAlign % r.async_copy_align == 0; }),
              "a runtime row's async_copy_align must divide kChannelAlign");

Result<std::unique_ptr<RuntimeRingOps>> RuntimeRingOps::Create(DeviceRuntime& rt, device_bridge::Stream send,
                                                               device_bridge::Stream fold,
                                                               const std::vector<Rings>& links,
                                                               std::chrono::milliseconds timeout, size_t piece,
                                                               bool folds) {
  if (folds) TSR_RETURN_IF_ERROR(rt.PreloadKernels());
  std::unique_ptr<RuntimeRingOps> ops(new RuntimeRingOps(rt));
  ops->stream_[kSendQueue] = send;
  ops->stream_[kFoldQueue] = fold;
  ops->timeout_ = timeout;
  ops->piece_ = piece;
  for (auto& m : ops->marked_us_) m.resize(kEvents);
  for (auto& pool : ops->events_) {
    pool.resize(kEvents);
    for (auto& e : pool) {
      TSR_ASSIGN_OR_RETURN(e, rt.EventCreate());
    }
  }
  auto reg = [&](std::byte* p, size_t bytes) -> Status {
    TSR_RETURN_IF_ERROR(rt.HostRegister(p, bytes).WithContext("registering a bridge ring"));
    ops->registered_.push_back(p);
    return Status::Ok();
  };
  for (const Rings& l : links) {
    if (l.direct) {
      auto m = rt.Malloc(l.in_bytes);
      if (!m.ok()) return m.status().WithContext(fmt::format("a link's landing buffer ({} bytes)", l.in_bytes));
      ops->landings_.push_back({l.peer, static_cast<std::byte*>(*m), l.in_bytes});
      ops->memory_ = rt.name();
      continue;
    }
    TSR_RETURN_IF_ERROR(reg(l.in, l.in_bytes));
    TSR_RETURN_IF_ERROR(reg(l.out, l.out_bytes));
    if (!folds) continue;
    auto m = rt.Malloc(l.in_bytes);
    if (!m.ok()) return m.status().WithContext(fmt::format("a ring's device mirror ({} bytes)", l.in_bytes));
    ops->mirrors_.push_back({l.in, l.in_bytes, static_cast<std::byte*>(*m)});
  }
  return ops;
}

RuntimeRingOps::~RuntimeRingOps() {
  for (device_bridge::Stream s : stream_)
    if (s != nullptr) (void)rt_.StreamSynchronize(s);
  for (void* p : registered_) (void)rt_.HostUnregister(p);
  for (auto& m : mirrors_) (void)rt_.Free(m.mirror);
  for (auto& l : landings_) (void)rt_.Free(l.data);
  if (scratch_ != nullptr) (void)rt_.Free(scratch_);
  for (void* p : retired_) (void)rt_.Free(p);
  for (auto& pool : events_)
    for (auto e : pool)
      if (e != nullptr) (void)rt_.EventDestroy(e);
}

Status RuntimeRingOps::CopyOnQueue(Queue q, void* dst, const void* src, size_t bytes, CopyKind kind, const char* what) {
  if (!rt_.AsyncCopyAligned(dst, src)) {
    ++sync_copies_;
    TSR_RETURN_IF_ERROR(rt_.StreamSynchronize(stream_[q]).WithContext(what));
    return rt_.Memcpy(dst, bytes, src, bytes, kind).WithContext(what);
  }
  return rt_.MemcpyAsync(dst, bytes, src, bytes, kind, stream_[q]).WithContext(what);
}

Status RuntimeRingOps::ToHost(void* host_dst, const void* dev_src, size_t bytes) {
  return CopyOnQueue(kSendQueue, host_dst, dev_src, bytes, CopyKind::kDeviceToHost, "device to a peer's ring");
}

Status RuntimeRingOps::FromHost(void* dev_dst, const void* host_src, size_t bytes) {
  return CopyOnQueue(kFoldQueue, dev_dst, host_src, bytes, CopyKind::kHostToDevice, "this rank's ring to the device");
}

Result<void*> RuntimeRingOps::Mirror(const void* inbox_byte, size_t bytes) {
  auto* b = static_cast<const std::byte*>(inbox_byte);
  for (const auto& m : mirrors_)
    if (b >= m.ring && b + bytes <= m.ring + m.bytes) return static_cast<void*>(m.mirror + (b - m.ring));
  return InternalError("device bridge: received bytes outside the registered rings");
}

std::pair<std::byte*, size_t> RuntimeRingOps::Landing(int peer) const {
  for (const auto& l : landings_)
    if (l.peer == peer) return {l.data, l.bytes};
  return {nullptr, 0};
}

Status RuntimeRingOps::CopyIn(void* dev_dst, const void* host_src, size_t bytes) {
  TSR_RETURN_IF_ERROR(rt_.MemcpyAsync(dev_dst, bytes, host_src, bytes, CopyKind::kHostToDevice, stream_[kFoldQueue])
                          .WithContext("bytes a link held in host memory to the device"));
  return rt_.StreamSynchronize(stream_[kFoldQueue]).WithContext("bytes a link held in host memory to the device");
}

Status RuntimeRingOps::Fold(void* acc, const void* src, size_t n, DType dtype, DType src_type, RedOp op, bool first) {
  return rt_.Fold(acc, src, n, dtype, src_type, op, first, stream_[kFoldQueue]);
}

Status RuntimeRingOps::Finalize(void* out, const void* acc, size_t n, DType dtype, RedOp op, int divisor) {
  return rt_.Finalize(out, acc, n, dtype, op, divisor, stream_[kFoldQueue]);
}

Status RuntimeRingOps::Copy(void* dev_dst, const void* dev_src, size_t bytes) {
  return CopyOnQueue(kFoldQueue, dev_dst, dev_src, bytes, CopyKind::kDeviceToDevice,
                     "this rank's own contribution into its output");
}

Result<DeviceOps::Ticket> RuntimeRingOps::Mark(Queue q) {
  if (issued_[q] - done_[q] == kEvents) {  // every event in use: wait for the oldest
    auto t0 = std::chrono::steady_clock::now();
    for (;;) {
      TSR_ASSIGN_OR_RETURN(bool d, Done(q, done_[q] + 1));
      if (d) break;
      if (std::chrono::steady_clock::now() - t0 > timeout_)
        return Timeout(
            fmt::format("device bridge: a copy did not finish within TESSERA_TIMEOUT ({} ms)", timeout_.count()));
      std::this_thread::yield();
    }
  }
  TSR_RETURN_IF_ERROR(rt_.EventRecord(events_[q][issued_[q] % kEvents], stream_[q]));
  if (trace_) marked_us_[q][issued_[q] % kEvents] = DeviceTrace::NowUs();
  return ++issued_[q];
}

Result<bool> RuntimeRingOps::Done(Queue q, Ticket t) {
  while (done_[q] < t) {
    auto e = rt_.EventQuery(events_[q][done_[q] % kEvents]);
    if (!e.ok())
      return e.status().WithContext(q == kSendQueue ? "the device bridge's copies to the rings"
                                                    : "the device bridge's copies from the ring and folds");
    if (!*e) return false;
    if (trace_) {
      ++stats_[q].ops;
      stats_[q].sum_us += DeviceTrace::NowUs() - marked_us_[q][done_[q] % kEvents];
    }
    ++done_[q];
  }
  return true;
}

Status RuntimeRingOps::SendAfterFolds() {
  TSR_ASSIGN_OR_RETURN(Ticket t, Mark(kFoldQueue));
  // The wait takes the event as recorded now; the pool may re-record it later without affecting it.
  return rt_.StreamWaitEvent(stream_[kSendQueue], events_[kFoldQueue][(t - 1) % kEvents])
      .WithContext("a result's copy after its folds");
}

Result<void*> RuntimeRingOps::Scratch(size_t bytes) {
  if (bytes > use_bytes_)
    return InternalError(
        fmt::format("device bridge: {} bytes of accumulator needed, {} reserved at submission", bytes, use_bytes_));
  return use_;
}

Result<void*> RuntimeRingOps::Grow(size_t bytes) {
  if (bytes <= scratch_bytes_) return scratch_;
  auto grown = rt_.Malloc(bytes);
  if (!grown.ok()) return grown.status().WithContext(fmt::format("{} bytes of accumulator", bytes));
  void* p = *grown;
  if (scratch_ != nullptr) retired_.push_back(scratch_);  // a queued job may still use it
  scratch_ = p;
  scratch_bytes_ = bytes;
  return scratch_;
}

Result<size_t> DevicePieceBytes(size_t fallback) {
  uint64_t piece = fallback;  // the caller's own default applies only where the variable is not set
  if (fallback == 0 || env::Get("TESSERA_DEVICE_PIECE")) {
    TSR_ASSIGN_OR_RETURN(piece, env::Bytes("TESSERA_DEVICE_PIECE"));
  }
  if (piece < 4096 || piece % kChannelAlign != 0)
    return InvalidArgument(
        fmt::format("TESSERA_DEVICE_PIECE={} must be at least 4096 and a multiple of {}", piece, kChannelAlign));
  return static_cast<size_t>(piece);
}

}  // namespace tessera::comm
