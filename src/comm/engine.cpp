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
// Host mode with a pool of several threads: a copy or fold of at least two kPiece goes to the turn's join
// (Engine::HostTask), and a channel's turn moves threads × kPiece bytes, between kStep and kMaxStep (half of
// the default 2 MiB ring, so the peer fills one half while this rank drains the other).
constexpr size_t kPiece = 128 << 10;
constexpr size_t kMaxStep = 1 << 20;
// The join's parts: guided, each part of a turn's work a 1/(kGuide × threads) share of what is left, down to
// kMinPart bytes, in whole multiples of 64 elements. The threads claim them one at a time, largest first: a
// thread slowed by the memory system takes fewer, and the join waits at the end for one small part at most.
// (Equal parts, one a thread, kept the threads busy 69% of each join on the GPU machine's 16 cores.)
constexpr size_t kGuide = 2;
constexpr size_t kMinPart = 16 << 10;
}  // namespace

void ReduceJob::HostFold(int c, size_t at, const std::byte* src, size_t count) const {
  const size_t asz = DTypeSize(AccumType(dtype));
  std::byte* a = static_cast<std::byte*>(acc) + at * asz;
  bool last = c + 1 == static_cast<int>(done.size());
  if (fused_c >= 0 && c == 1 - fused_c) {  // the received one of the fused pair: fold both now
    const std::byte* l = fused + at * DTypeSize(src_type[fused_c]);
    if (done.size() == 2 && dst != nullptr && IsHalf(dtype)) {
      // Two contributors of a 16-bit type: straight into dst; the f32 accumulator never reaches memory (same bits).
      std::byte* d = static_cast<std::byte*>(dst) + at * DTypeSize(dtype);
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
  if (last && dst != nullptr) {
    std::byte* d = static_cast<std::byte*>(dst) + at * DTypeSize(dtype);
    if (!(d == a && op != RedOp::kAvg)) Finalize(d, a, count, dtype, op, divisor);
  }
}

void ReduceJob::Folded(int c, size_t count) {
  if (fused_c >= 0 && c == 1 - fused_c) done[fused_c] += count;  // the fused pair: both are folded
  done[c] += count;
}

Status ReduceJob::FoldRange(int c, const void* src, size_t count) {
  if (device == nullptr) {
    HostFold(c, done[c], static_cast<const std::byte*>(src), count);
    Folded(c, count);
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

bool Engine::Joined(size_t bytes) const { return pool_ != nullptr && bytes >= 2 * kPiece; }

bool Engine::Fold(ReduceJob* job, int c, const std::byte* src, size_t elems, RecvChannel* ch, size_t bytes) {
  const size_t asz = DTypeSize(AccumType(job->dtype));
  if (!Joined(elems * asz)) {
    job->HostFold(c, job->done[c], src, elems);
    job->Folded(c, elems);
    return false;
  }
  tasks_.push_back({nullptr, src, job, c, job->done[c], elems, asz});
  commits_.push_back({nullptr, ch, bytes, job, c, elems});
  return true;
}

void Engine::RunJoin() {
  if (tasks_.empty()) return;
  size_t left = 0;
  for (const HostTask& t : tasks_) left += t.n * t.esz;
  const size_t threads = static_cast<size_t>(pool_->threads());
  parts_.clear();
  for (uint32_t i = 0; i < tasks_.size(); ++i) {
    const HostTask& t = tasks_[i];
    for (size_t b = 0; b < t.n;) {
      const size_t want = std::max<size_t>(64, std::max(kMinPart, left / (kGuide * threads)) / t.esz / 64 * 64);
      const size_t k = std::min(want, t.n - b);
      parts_.push_back({i, b, k});
      b += k;
      left -= k * t.esz;
    }
  }
  auto run = [this](int i) {
    const Part& p = parts_[static_cast<size_t>(i)];
    const HostTask& t = tasks_[p.task];
    if (t.job == nullptr)
      std::memcpy(t.dst + p.begin, t.src + p.begin, p.n);
    else
      t.job->HostFold(t.contributor, t.at + p.begin, t.src + p.begin * DTypeSize(t.job->src_type[t.contributor]), p.n);
  };
  for (size_t first = 0; first < parts_.size(); first += 65535) {  // (ParallelFor's most parts a job)
    const int n = static_cast<int>(std::min<size_t>(65535, parts_.size() - first));
    pool_->ParallelFor(n, [&](int i) { run(static_cast<int>(first) + i); });
  }
  // In plan order: the ring bytes written are published, those read are released, the folds count.
  for (const Commit& c : commits_) {
    if (c.job != nullptr) c.job->Folded(c.contributor, c.elems);
    if (c.publish != nullptr) c.publish->Publish(c.bytes);
    if (c.consume != nullptr) c.consume->Consume(c.bytes);
  }
  tasks_.clear();
  commits_.clear();
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
  tasks_.clear();
  commits_.clear();
  FuseLocalPairs();
  while (pending_ > 0) {
    bool progress = false;
    // Sends: push as much as each channel takes (bounded per turn so every channel gets its turn). A rank
    // that receives nothing meanwhile (a broadcast's root) hands a channel up to its Lookahead() at once:
    // on TCP that lets the streams after a full one send ahead (a broadcast between hosts gains from it);
    // while receiving, the step stays small so that folds keep up (an allreduce loses with the larger
    // step). Figures: docs/benchmarks.md, "The sender writes whichever stream has room".
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
      // With a pool, a large piece of a shm ring is written in place by its threads in the turn's join
      // (Reserve now, Publish after the join; nothing more on this channel this turn).
      const bool split = pool_ != nullptr && std::strcmp(ch->transport(), "shm") == 0;
      const size_t ready = op.Ready();
      bool reserved = false;
      while (!reserved && budget > 0 && op.off < op.padded && (op.off < ready || op.off >= op.bytes)) {
        const std::byte* src = op.off < op.bytes ? op.data + op.off : kZeros;
        size_t want = op.off < op.bytes ? std::min(ready - op.off, budget) : op.padded - op.off;
        size_t n;
        if (split && op.off < op.bytes && Joined(want)) {
          auto [ptr, room] = ch->Reserve(want);
          if (room > 0) {
            tasks_.push_back({ptr, src, nullptr, 0, 0, room, 1});
            commits_.push_back({ch, nullptr, room, nullptr, 0, 0});
            reserved = true;
          }
          n = room;
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
      bool deferred = false;     // consumed after the turn's join
      if (op.off >= op.bytes) {  // padding
        take = std::min(avail, op.padded - op.off);
      } else if (op.dst != nullptr) {
        take = std::min({avail, op.bytes - op.off, step_});
        if (Joined(take) && op.check < 0) {  // (a checked header is small, and checked as soon as it is in)
          tasks_.push_back({op.dst + op.off, ptr, nullptr, 0, 0, take, 1});
          commits_.push_back({nullptr, ch, take, nullptr, 0, 0});
          deferred = true;
        } else {
          std::memcpy(op.dst + op.off, ptr, take);
        }
      } else {
        size_t esz = DTypeSize(op.job->src_type[op.contributor]);
        size_t elems = std::min({avail, op.bytes - op.off, step_}) / esz;
        elems = std::min(elems, op.job->Allowed(op.contributor));
        if (elems == 0) continue;
        take = elems * esz;
        deferred = Fold(op.job, op.contributor, ptr, elems, ch, take);
      }
      if (!deferred) ch->Consume(take);
      op.off += take;
      progress = true;
      if (op.off == op.padded) {
        if (op.check >= 0) TSR_RETURN_IF_ERROR(checks_[op.check]());
        q.pop_front();
        --pending_;
      }
    }
    // Local contributors.
    for (auto& l : locals_) {
      ReduceJob* job = l.job;
      // (On a device a fold is only issued, so it takes whatever the contributor order allows.)
      size_t elems = std::min(job->Allowed(l.contributor), dev_ != nullptr ? job->n : step_ / 4);
      if (elems > 0) {
        size_t esz = DTypeSize(job->src_type[l.contributor]);
        if (dev_ != nullptr)
          TSR_RETURN_IF_ERROR(job->FoldRange(l.contributor, l.src + job->done[l.contributor] * esz, elems));
        else
          Fold(job, l.contributor, l.src + job->done[l.contributor] * esz, elems, nullptr, 0);
        progress = true;
      }
    }
    RunJoin();
    for (auto it = locals_.begin(); it != locals_.end();) {
      if (it->job->done[it->contributor] == it->job->n) {
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
