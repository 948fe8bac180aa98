// comm/engine: the non-blocking progress loop behind every collective; see engine.hpp.
#include "comm/engine.hpp"

#include <algorithm>
#include <fmt/format.h>
#include <sched.h>

#include "comm/reduce.hpp"

namespace tessera::comm {
namespace {
constexpr size_t kStep = 256 << 10;  // bytes moved per channel per turn: keeps chunks in cache
const std::byte kZeros[kChannelAlign] = {};
}  // namespace

void ReduceJob::FoldRange(int c, const void* src, size_t count) {
  size_t at = done[c];
  size_t asz = DTypeSize(AccumType(dtype));
  std::byte* a = static_cast<std::byte*>(acc) + at * asz;
  bool last = c + 1 == static_cast<int>(done.size());
  if (!(c == 0 && src == a)) Fold(a, src, count, dtype, src_type[c], op, c == 0);
  if (last && dst != nullptr) {
    std::byte* d = static_cast<std::byte*>(dst) + at * DTypeSize(dtype);
    if (!(d == a && op != RedOp::kAvg)) Finalize(d, a, count, dtype, op, divisor);
  }
  done[c] += count;
}

void Engine::Send(int peer, const void* data, size_t bytes) {
  if (bytes == 0) return;
  if (sends_.size() <= static_cast<size_t>(peer)) sends_.resize(peer + 1);
  sends_[peer].push_back({static_cast<const std::byte*>(data), bytes, PadToChannel(bytes), 0});
  ++pending_;
}

void Engine::RecvCopy(int peer, void* dst, size_t bytes) {
  if (bytes == 0) return;
  if (recvs_.size() <= static_cast<size_t>(peer)) recvs_.resize(peer + 1);
  recvs_[peer].push_back({static_cast<std::byte*>(dst), nullptr, 0, bytes, PadToChannel(bytes), 0});
  ++pending_;
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

Status Engine::Run(const std::string& what) {
  using Clock = std::chrono::steady_clock;
  auto last_progress = Clock::now();
  auto last_check = last_progress;
  const auto timeout = links_->timeout();
  uint64_t idle = 0;
  while (pending_ > 0) {
    bool progress = false;
    // Sends: push as much as each channel takes (bounded per turn so every channel gets its turn).
    for (size_t p = 0; p < sends_.size(); ++p) {
      auto& q = sends_[p];
      if (q.empty()) continue;
      SendChannel* ch = links_->send(static_cast<int>(p));
      SendOp& op = q.front();
      size_t budget = kStep;
      while (budget > 0 && op.off < op.padded) {
        const std::byte* src = op.off < op.bytes ? op.data + op.off : kZeros;
        size_t want = op.off < op.bytes ? std::min(op.bytes - op.off, budget) : op.padded - op.off;
        TSR_ASSIGN_OR_RETURN(size_t n, ch->TrySend(src, want));
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
      RecvChannel* ch = links_->recv(static_cast<int>(p));
      RecvOp& op = q.front();
      TSR_ASSIGN_OR_RETURN(auto region, ch->Peek());
      auto [ptr, avail] = region;
      if (avail == 0) continue;
      size_t take;
      if (op.off >= op.bytes) {  // padding
        take = std::min(avail, op.padded - op.off);
      } else if (op.dst != nullptr) {
        take = std::min({avail, op.bytes - op.off, kStep});
        std::memcpy(op.dst + op.off, ptr, take);
      } else {
        size_t esz = DTypeSize(op.job->src_type[op.contributor]);
        size_t elems = std::min({avail, op.bytes - op.off, kStep}) / esz;
        elems = std::min(elems, op.job->Allowed(op.contributor));
        if (elems == 0) continue;
        op.job->FoldRange(op.contributor, ptr, elems);
        take = elems * esz;
      }
      ch->Consume(take);
      op.off += take;
      progress = true;
      if (op.off == op.padded) {
        q.pop_front();
        --pending_;
      }
    }
    // Local contributors.
    for (auto it = locals_.begin(); it != locals_.end();) {
      ReduceJob* job = it->job;
      size_t elems = std::min(job->Allowed(it->contributor), kStep / 4);
      if (elems > 0) {
        size_t esz = DTypeSize(job->src_type[it->contributor]);
        job->FoldRange(it->contributor, it->src + job->done[it->contributor] * esz, elems);
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
    // Idle: spin briefly, then yield the core (ranks may outnumber cores), and check health.
    if (++idle > 64) sched_yield();
    if ((idle & 255) == 0) {
      auto now = Clock::now();
      if (now - last_check > std::chrono::milliseconds(50)) {
        last_check = now;
        std::vector<int> owed;
        for (size_t p = 0; p < sends_.size(); ++p) if (!sends_[p].empty()) owed.push_back(static_cast<int>(p));
        for (size_t p = 0; p < recvs_.size(); ++p)
          if (!recvs_[p].empty() && std::find(owed.begin(), owed.end(), static_cast<int>(p)) == owed.end())
            owed.push_back(static_cast<int>(p));
        TSR_RETURN_IF_ERROR(links_->CheckHealth(owed));
        if (now - last_progress > timeout) {
          std::string names;
          for (int p : owed) names += (names.empty() ? "" : ", ") + links_->PeerName(p);
          return Timeout(fmt::format("{}: no progress for {} ms (TESSERA_TIMEOUT) waiting on {}", what,
                                     timeout.count(), names.empty() ? "local work" : names));
        }
      }
    }
  }
  sends_.clear();
  recvs_.clear();
  return Status::Ok();
}

}  // namespace tessera::comm
