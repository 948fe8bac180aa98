// comm/engine: the non-blocking progress loop behind every collective; see engine.hpp.
#include "comm/engine.hpp"

#include <fmt/format.h>
#include <poll.h>
#include <sched.h>

#include <algorithm>
#include <cstring>

#include "comm/reduce/reduce.hpp"

namespace tessera::comm {
namespace {
constexpr size_t kStep = 256 << 10;  // bytes moved per channel per turn: keeps chunks in cache
const std::byte kZeros[kChannelAlign] = {};
// Device mode: at most kMaxInFlight copy-engine transfers (of DeviceOps::piece() bytes) per channel and
// direction.
constexpr size_t kMaxInFlight = 8;
// Host mode with a pool of several threads: a copy or fold of at least two kPiece is split, and a channel's
// turn moves threads × kPiece bytes, between kStep and kMaxStep (half of the default 2 MiB ring, so the peer
// fills one half while this rank drains the other).
constexpr size_t kPiece = 128 << 10;
constexpr size_t kMaxStep = 1 << 20;
// A split copy or fold is cut into kPartsPerThread parts per thread, of at least kMinPart bytes; the pool's
// threads claim them one at a time, so a thread slowed by the memory system takes fewer and the join waits
// for one small part at most. With one equal part per thread the threads were busy 69% of each join on
// a 16-core H200 host (the parts finished up to 25 us apart); four parts of 32 KiB a thread made 1+1 host
// ranks 26% / 21% faster at 64 / 256 MiB (bench/results/log/2026-12-03-host-thread-parts.md).
constexpr size_t kPartsPerThread = 4;
constexpr size_t kMinPart = 32 << 10;

// Runs f(begin, count) over [0, n) elements of `esz` bytes: inline when the pool is null or the work is
// under two pieces, else cut into parts of whole multiples of 64 elements that the pool's threads claim.
template <typename F>
void Pieces(HostPool* pool, size_t n, size_t esz, F&& f) {
  if (pool == nullptr || std::min<size_t>(pool->threads(), n * esz / kPiece) <= 1) {
    f(size_t{0}, n);
    return;
  }
  const size_t parts = std::min<size_t>(pool->threads() * kPartsPerThread, n * esz / kMinPart);
  const size_t per = ((n + parts - 1) / parts + 63) / 64 * 64;
  pool->ParallelFor(static_cast<int>((n + per - 1) / per), [&](int i) {
    const size_t b = static_cast<size_t>(i) * per;
    f(b, std::min(per, n - b));
  });
}
}  // namespace

void ReduceJob::HostFold(int c, size_t at, const std::byte* src, size_t count) const {
  const size_t asz = DTypeSize(AccumType(dtype));
  std::byte* a = static_cast<std::byte*>(acc) + at * asz;
  std::byte* d = dst == nullptr ? nullptr : static_cast<std::byte*>(dst) + at * DTypeSize(dtype);
  // The result needs a Finalize into dst, unless dst is the accumulator and the op leaves it as it is.
  const bool finalize = d != nullptr && !(d == a && op != RedOp::kAvg);
  bool last = c + 1 == static_cast<int>(done.size());
  if (fused_c >= 0 && c == 1 - fused_c) {  // the received one of the fused pair: fold both now
    const std::byte* l = fused + at * DTypeSize(src_type[fused_c]);
    if (done.size() == 2 && finalize) {
      // Two contributors: straight into dst, the accumulator never reaches memory (same bits: the same Fold2 and
      // Finalize, on a block on the stack). For a 16-bit type it is f32; for the others it is a scratch buffer as
      // large as the result where dst is the rank's in-place input folded second (hierarchical.cpp), whose lines
      // the fold would read for ownership from memory and write back, or dst itself, which an avg divides in a
      // second pass. Only a sum into dst itself is left to Fold2 alone.
      if (fused_c == 0)
        Fold2Finalize(d, l, src_type[0], src, src_type[1], count, dtype, op, divisor);
      else
        Fold2Finalize(d, src, src_type[0], l, src_type[1], count, dtype, op, divisor);
      return;
    }
    if (fused_c == 0)
      Fold2(a, l, src_type[0], src, src_type[1], count, dtype, op);
    else
      Fold2(a, src, src_type[0], l, src_type[1], count, dtype, op);
    last = done.size() == 2;
  } else if (!(c == 0 && src == a)) {
    Fold(a, src, count, dtype, src_type[c], op, c == 0);
  }
  if (last && finalize) Finalize(d, a, count, dtype, op, divisor);
}

void Engine::Copy(void* dst, const void* src, size_t bytes) const {
  auto* d = static_cast<std::byte*>(dst);
  const auto* s = static_cast<const std::byte*>(src);
  Pieces(pool_, bytes, 1, [&](size_t b, size_t k) { std::memcpy(d + b, s + b, k); });
}

Status ReduceJob::FoldRange(int c, const void* src, size_t count, HostPool* pool) {
  if (device == nullptr) {
    const size_t at = done[c];
    const size_t ssz = DTypeSize(src_type[c]);
    const auto* s = static_cast<const std::byte*>(src);
    Pieces(pool, count, DTypeSize(AccumType(dtype)), [&](size_t b, size_t k) { HostFold(c, at + b, s + b * ssz, k); });
    if (fused_c >= 0 && c == 1 - fused_c) done[fused_c] += count;  // the fused pair: both are folded
    done[c] += count;
    return Status::Ok();
  }
  // A device: issue the kernels on its fold queue (device jobs are never fused: FuseLocalPairs).
  const size_t at = done[c];
  std::byte* a = static_cast<std::byte*>(acc) + at * DTypeSize(AccumType(dtype));
  if (!(c == 0 && src == a)) TSR_RETURN_IF_ERROR(device->Fold(a, src, count, dtype, src_type[c], op, c == 0));
  if (c + 1 == static_cast<int>(done.size()) && dst != nullptr) {
    std::byte* d = static_cast<std::byte*>(dst) + at * DTypeSize(dtype);
    if (!(d == a && op != RedOp::kAvg)) TSR_RETURN_IF_ERROR(device->Finalize(d, a, count, dtype, op, divisor));
  }
  done[c] += count;
  return Status::Ok();
}

void Engine::Send(int peer, const void* data, size_t bytes) {
  if (bytes == 0) return;
  if (sends_.size() <= static_cast<size_t>(peer)) sends_.resize(peer + 1);
  sends_[peer].push_back({static_cast<const std::byte*>(data), bytes, PadToChannel(bytes), 0, nullptr});
  ++pending_;
  links_->CountSent(peer, bytes);
}

void Engine::SendResult(int peer, const ReduceJob* job) {
  size_t bytes = job->n * DTypeSize(job->dtype);
  if (bytes == 0) return;
  if (sends_.size() <= static_cast<size_t>(peer)) sends_.resize(peer + 1);
  sends_[peer].push_back({static_cast<const std::byte*>(job->dst), bytes, PadToChannel(bytes), 0, job});
  ++pending_;
  links_->CountSent(peer, bytes);
}

void Engine::RecvCopy(int peer, void* dst, size_t bytes) {
  if (bytes == 0) return;
  if (recvs_.size() <= static_cast<size_t>(peer)) recvs_.resize(peer + 1);
  recvs_[peer].push_back({static_cast<std::byte*>(dst), nullptr, 0, bytes, PadToChannel(bytes), 0});
  ++pending_;
}

void Engine::RecvCheck(int peer, void* dst, size_t bytes, std::function<Status()> check) {
  if (bytes == 0) return;
  RecvCopy(peer, dst, bytes);
  recvs_[peer].back().check = static_cast<int>(checks_.size());
  checks_.push_back(std::move(check));
}

void Engine::RecvFold(int peer, ReduceJob* job, int contributor) {
  size_t bytes = job->n * DTypeSize(job->src_type[contributor]);
  if (bytes == 0) return;
  if (recvs_.size() <= static_cast<size_t>(peer)) recvs_.resize(peer + 1);
  recvs_[peer].push_back({nullptr, job, contributor, bytes, PadToChannel(bytes), 0});
  ++pending_;
}

void Engine::LocalFold(ReduceJob* job, int contributor, const void* src) {
  if (job->n == 0) return;
  locals_.push_back({job, contributor, static_cast<const std::byte*>(src)});
  ++pending_;
}

bool Engine::WaitOnSockets() {
  if (dev_ != nullptr || !locals_.empty()) return false;
  std::vector<pollfd> fds;
  for (size_t p = 0; p < sends_.size(); ++p) {
    if (sends_[p].empty()) continue;
    const int fd = links_->send(static_cast<int>(p))->WaitFd();
    if (fd < 0) return false;
    fds.push_back({fd, POLLOUT, 0});
  }
  for (size_t p = 0; p < recvs_.size(); ++p) {
    if (recvs_[p].empty()) continue;
    const int fd = links_->recv(static_cast<int>(p))->WaitFd();
    if (fd < 0) return false;
    fds.push_back({fd, POLLIN, 0});
  }
  if (fds.empty()) return false;
  (void)::poll(fds.data(), fds.size(), 2);
  return true;
}

Status Engine::Run(const std::string& what) {
  using Clock = std::chrono::steady_clock;
  auto last_progress = Clock::now();
  auto last_check = last_progress;
  const auto timeout = links_->timeout();
  uint64_t idle = 0;
  if (dev_ != nullptr) devq_.resize(std::max(sends_.size(), recvs_.size()));
  HostPool* pool = links_->host_pool();
  pool_ = dev_ == nullptr && pool != nullptr && pool->threads() > 1 ? pool : nullptr;
  step_ = pool_ == nullptr ? kStep : std::clamp(pool_->threads() * kPiece, kStep, kMaxStep);
  FuseLocalPairs();
  while (pending_ > 0) {
    bool progress = false;
    // Sends: push as much as each channel takes (bounded per turn so every channel gets its turn). A rank
    // that receives nothing meanwhile (a broadcast's root) hands a channel up to its Lookahead() at once:
    // on TCP that lets the streams after a full one send ahead (a broadcast between hosts gains from it);
    // while receiving, the step stays small so that folds keep up (an allreduce loses with the larger
    // step). Figures: bench/results/log/2026-12-01-tcp-sender-writes-stream-with-room.md.
    bool receiving = false;
    for (const auto& q : recvs_) receiving |= !q.empty();
    for (size_t p = 0; p < sends_.size(); ++p) {
      auto& q = sends_[p];
      if (q.empty()) continue;
      if (dev_ != nullptr) {
        TSR_ASSIGN_OR_RETURN(bool moved, StepDeviceSend(static_cast<int>(p), q));
        progress |= moved;
        continue;
      }
      SendChannel* ch = links_->send(static_cast<int>(p));
      SendOp& op = q.front();
      size_t budget = receiving ? step_ : std::max(step_, ch->Lookahead());
      // With a pool, a large piece of a ring in the peer's memory is written in place by its threads (Reserve,
      // then Publish).
      const bool split = pool_ != nullptr && ch->writes_peer_memory();
      // A channel that sends from the caller's host memory (the ucx row) is handed it without a copy into its
      // ring; the op then ends once every byte has left it (SentFromDone).
      const bool from_host = !split && ch->sends_from("host");
      const size_t ready = op.Ready();
      while (budget > 0 && op.off < op.padded && (op.off < ready || op.off >= op.bytes)) {
        const std::byte* src = op.off < op.bytes ? op.data + op.off : kZeros;
        size_t want = op.off < op.bytes ? std::min(ready - op.off, budget) : op.padded - op.off;
        size_t n;
        if (split && op.off < op.bytes && want >= 2 * kPiece) {
          auto [ptr, room] = ch->Reserve(want);
          if (room > 0) {
            Copy(ptr, src, room);
            ch->Publish(room);
          }
          n = room;
        } else if (from_host && op.off < op.bytes) {
          auto sent = ch->TrySendFrom(src, want, "host");
          if (!sent.ok()) return sent.status().WithContext("sending to " + links_->PeerName(static_cast<int>(p)));
          n = *sent;
        } else {
          auto sent = ch->TrySend(src, want);
          if (!sent.ok()) return sent.status().WithContext("sending to " + links_->PeerName(static_cast<int>(p)));
          n = *sent;
        }
        if (n == 0) break;
        op.off += n;
        budget -= std::min(budget, n);
        progress = true;
      }
      if (op.off == op.padded) {
        if (from_host) {
          TSR_ASSIGN_OR_RETURN(bool left, ch->SentFromDone());
          if (!left) continue;
        }
        q.pop_front();
        --pending_;
      }
    }
    // Receives: copy, or fold as far as the contributor order allows.
    for (size_t p = 0; p < recvs_.size(); ++p) {
      auto& q = recvs_[p];
      if (q.empty()) continue;
      if (dev_ != nullptr) {
        TSR_ASSIGN_OR_RETURN(bool moved, StepDeviceRecv(static_cast<int>(p), q));
        progress |= moved;
        continue;
      }
      RecvChannel* ch = links_->recv(static_cast<int>(p));
      RecvOp& op = q.front();
      if (op.dst != nullptr && op.off < op.bytes && ch->direct()) {  // a copy: straight from the socket
        auto got = ch->RecvInto(op.dst + op.off, op.bytes - op.off);
        if (!got.ok()) return got.status().WithContext("receiving from " + links_->PeerName(static_cast<int>(p)));
        if (*got == 0) continue;
        op.off += *got;
        progress = true;
        if (op.off < op.padded) continue;  // more data, or the padding (below, next turn)
        if (op.check >= 0) TSR_RETURN_IF_ERROR(checks_[op.check]());
        q.pop_front();
        --pending_;
        continue;
      }
      auto peeked = ch->Peek();
      if (!peeked.ok()) return peeked.status().WithContext("receiving from " + links_->PeerName(static_cast<int>(p)));
      auto [ptr, avail] = *peeked;
      if (avail == 0) continue;
      size_t take;
      if (op.off >= op.bytes) {  // padding
        take = std::min(avail, op.padded - op.off);
      } else if (op.dst != nullptr) {
        take = std::min({avail, op.bytes - op.off, step_});
        Copy(op.dst + op.off, ptr, take);
      } else {
        size_t esz = DTypeSize(op.job->src_type[op.contributor]);
        size_t elems = std::min({avail, op.bytes - op.off, step_}) / esz;
        elems = std::min(elems, op.job->Allowed(op.contributor));
        if (elems == 0) continue;
        TSR_RETURN_IF_ERROR(op.job->FoldRange(op.contributor, ptr, elems, pool_));
        take = elems * esz;
      }
      ch->Consume(take);
      op.off += take;
      progress = true;
      if (op.off == op.padded) {
        if (op.check >= 0) TSR_RETURN_IF_ERROR(checks_[op.check]());
        q.pop_front();
        --pending_;
      }
    }
    // Local contributors.
    for (auto it = locals_.begin(); it != locals_.end();) {
      ReduceJob* job = it->job;
      // (On a device a fold is only issued, so it takes whatever the contributor order allows.)
      size_t elems = std::min(job->Allowed(it->contributor), dev_ != nullptr ? job->n : step_ / 4);
      if (elems > 0) {
        size_t esz = DTypeSize(job->src_type[it->contributor]);
        TSR_RETURN_IF_ERROR(job->FoldRange(it->contributor, it->src + job->done[it->contributor] * esz, elems, pool_));
        progress = true;
      }
      if (job->done[it->contributor] == job->n) {
        it = locals_.erase(it);
        --pending_;
      } else {
        ++it;
      }
    }
    if (progress) {
      idle = 0;
      last_progress = Clock::now();
      continue;
    }
    // Idle: spin briefly, then yield the core (ranks may outnumber cores), and check health. When only
    // TCP channels are pending, sleep in poll() on them instead (a few ms at most, so the health checks
    // below keep their pace): spinning would take the CPU the kernel's network stack needs.
    bool slept = false;
    if (++idle > 64) {
      slept = idle > 1024 && WaitOnSockets();
      if (!slept) sched_yield();
    }
    if (slept || (idle & 255) == 0) {
      auto now = Clock::now();
      if (now - last_check > std::chrono::milliseconds(50)) {
        last_check = now;
        std::vector<int> owed;
        for (size_t p = 0; p < sends_.size(); ++p)
          if (!sends_[p].empty()) owed.push_back(static_cast<int>(p));
        for (size_t p = 0; p < recvs_.size(); ++p)
          if (!recvs_[p].empty() && std::find(owed.begin(), owed.end(), static_cast<int>(p)) == owed.end())
            owed.push_back(static_cast<int>(p));
        TSR_RETURN_IF_ERROR(links_->CheckHealth(owed));
        if (now - last_progress > timeout) {
          std::string names;
          for (int p : owed) names += (names.empty() ? "" : ", ") + links_->PeerName(p);
          return links_->ExplainTimeout(
              owed, Timeout(fmt::format("{}: no progress for {} ms (TESSERA_TIMEOUT) waiting on {}", what,
                                        timeout.count(), names.empty() ? "local work" : names)));
        }
      }
    }
  }
  sends_.clear();
  recvs_.clear();
  checks_.clear();
  if (dev_ != nullptr) {
    // Folds and finalizes of local contributions may still be running: the step's results are
    // complete only when the fold queue has drained.
    TSR_ASSIGN_OR_RETURN(DeviceOps::Ticket t, dev_->Mark(DeviceOps::kFoldQueue));
    for (;;) {
      TSR_ASSIGN_OR_RETURN(bool done, dev_->Done(DeviceOps::kFoldQueue, t));
      if (done) break;
      if (Clock::now() - last_progress > timeout)
        return Timeout(
            fmt::format("{}: the device's folds did not finish within {} ms (TESSERA_TIMEOUT)", what, timeout.count()));
      sched_yield();
    }
  }
  return Status::Ok();
}

void Engine::FuseLocalPairs() {
  for (auto it = locals_.begin(); it != locals_.end();) {
    ReduceJob* job = it->job;
    const int c = it->contributor;
    bool fuse = false;
    if (job->device == nullptr && job->fused_c < 0 && c <= 1 && job->done.size() >= 2 && job->done[0] == 0 &&
        job->done[1] == 0)
      for (const auto& q : recvs_)
        for (const auto& r : q) fuse |= r.job == job && r.contributor == 1 - c;
    if (!fuse) {
      ++it;
      continue;
    }
    job->fused = it->src;
    job->fused_c = c;
    it = locals_.erase(it);
    --pending_;
  }
}

template <typename Release>
Result<bool> Engine::Retire(DeviceOps::Queue queue, std::deque<InFlight>& inflight, size_t* released, Release release) {
  bool progress = false;
  while (!inflight.empty()) {
    TSR_ASSIGN_OR_RETURN(bool done, dev_->Done(queue, inflight.front().ticket));
    if (!done) break;
    release(inflight.front().bytes);
    *released += inflight.front().bytes;
    inflight.pop_front();
    progress = true;
  }
  return progress;
}

Result<bool> Engine::StepDeviceSend(int peer, std::deque<SendOp>& q) {
  SendOp& op = q.front();
  DevQueues& dq = devq_[peer];
  SendChannel* ch = links_->send(peer);
  if (!dev_->memory().empty() && ch->sends_from(dev_->memory())) return StepDirectSend(peer, q, ch);
  if (!ch->dma())
    return InternalError(fmt::format("device bridge: the {} channel to {} cannot take device copies", ch->transport(),
                                     links_->PeerName(peer)));
  // Publish what the copy engine has written.
  TSR_ASSIGN_OR_RETURN(bool progress,
                       Retire(DeviceOps::kSendQueue, dq.sent, &dq.send_done, [ch](size_t b) { ch->Publish(b); }));
  const size_t ready = op.Ready();
  while (op.off < op.padded && dq.sent.size() < kMaxInFlight) {
    bool data = op.off < op.bytes;
    if (data && op.off >= ready) break;  // a result not finished yet
    // Copy whole pieces of a result unless the job is done: fewer, larger copies.
    if (data && op.gate != nullptr && ready < op.bytes && ready - op.off < dev_->piece()) break;
    auto [ptr, n] = ch->Reserve(data ? std::min(ready - op.off, dev_->piece()) : op.padded - op.off);
    if (n == 0) break;
    DeviceOps::Ticket t = 0;  // padding: nothing to write (ticket 0 is always done)
    if (data) {
      if (op.gate != nullptr) TSR_RETURN_IF_ERROR(dev_->SendAfterFolds());
      TSR_RETURN_IF_ERROR(dev_->ToHost(ptr, op.data + op.off, n));
      TSR_ASSIGN_OR_RETURN(t, dev_->Mark(DeviceOps::kSendQueue));
    }
    dq.sent.push_back({t, n});
    op.off += n;
    progress = true;
  }
  // A relayed TCP link's failure, seen by its pump thread: only when this send is stuck on it.
  if (!progress && op.off < op.padded) TSR_RETURN_IF_ERROR(ch->Health());
  if (dq.send_done == op.padded) {
    dq.send_done = 0;
    q.pop_front();
    --pending_;
  }
  return progress;
}

Result<bool> Engine::StepDeviceRecv(int peer, std::deque<RecvOp>& q) {
  RecvOp& op = q.front();
  DevQueues& dq = devq_[peer];
  RecvChannel* ch = links_->recv(peer);
  if (!dev_->memory().empty() && ch->receives_into(dev_->memory())) return StepDirectRecv(peer, q, ch);
  if (!ch->dma())
    return InternalError(fmt::format("device bridge: the {} channel from {} cannot take device copies", ch->transport(),
                                     links_->PeerName(peer)));
  // Release the ring bytes the device has finished reading.
  TSR_ASSIGN_OR_RETURN(bool progress,
                       Retire(DeviceOps::kFoldQueue, dq.recvd, &dq.recv_done, [ch](size_t b) { ch->Consume(b); }));
  while (op.off < op.padded && dq.recvd.size() < kMaxInFlight) {
    if (op.off >= op.bytes) {  // padding
      auto [ptr, n] = ch->Claim(op.padded - op.off, 1);
      if (n == 0) break;
      dq.recvd.push_back({0, n});
      op.off += n;
      progress = true;
      continue;
    }
    size_t want = std::min(op.bytes - op.off, dev_->piece()), unit = 1;
    if (op.dst == nullptr) {
      unit = DTypeSize(op.job->src_type[op.contributor]);
      want = std::min(want / unit, op.job->Allowed(op.contributor)) * unit;
      if (want == 0) break;
    }
    auto [ptr, n] = ch->Claim(want, unit);
    if (n == 0) break;
    if (op.dst != nullptr) {
      TSR_RETURN_IF_ERROR(dev_->FromHost(op.dst + op.off, ptr, n));
    } else {
      TSR_ASSIGN_OR_RETURN(void* mirror, dev_->Mirror(ptr, n));
      TSR_RETURN_IF_ERROR(dev_->FromHost(mirror, ptr, n));
      TSR_RETURN_IF_ERROR(op.job->FoldRange(op.contributor, mirror, n / unit));
    }
    TSR_ASSIGN_OR_RETURN(DeviceOps::Ticket t, dev_->Mark(DeviceOps::kFoldQueue));
    dq.recvd.push_back({t, n});
    op.off += n;
    progress = true;
  }
  if (!progress) TSR_RETURN_IF_ERROR(ch->Health());  // Ok while bytes that arrived before a failure remain
  if (dq.recv_done == op.padded) {
    dq.recv_done = 0;
    q.pop_front();
    --pending_;
  }
  return progress;
}

}  // namespace tessera::comm
