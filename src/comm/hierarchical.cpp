// comm/hierarchical: the three-phase algorithm (docs/architecture.md, "How a collective flows", step 4) that serves
// every collective of host memory (and a one-rank device island's allreduce, reduce-scatter, broadcast and allgather on
// the device bridge), as named steps of one call (Comm::Collective) over the schedule that comm/schedule computes:
//   headers       every rank exchanges its call's header with the peers of its schedule;
//   select        (allgather, broadcast) IslandGather, then BridgeSwap between segment owners;
//   reduce        (allreduce, reduce-scatter, barrier) IslandReduceScatter into an accumulator, then
//                 BridgeReduce (each owner folds its part in island order and shares it as it finishes),
//                 or FinishOwnShard in a world of one island;
//   then          ScatterToBlocks (reduce-scatter) or IslandAllGather (everything else).
// With IslandPhases::kDone the caller's island has run its island phases on its own library (a device island of
// several ranks, comm/device/staged_rank): the call starts at the bridge from the island's partial sums (or
// gathered contributions) of this rank's shard and ends when that shard holds its final values; the island's
// library then spreads the shards. From outside the island nothing differs: its ranks send and receive exactly
// what ranks that ran the island phases here would.
// Also the header exchange itself (Comm::ExchangeHeaders).
#include <fmt/format.h>

#include <chrono>
#include <cstring>
#include <thread>

#include "comm/call_header.hpp"
#include "comm/comm.hpp"
#include "comm/reduce/reduce.hpp"
#include "comm/schedule.hpp"

namespace tessera::comm {

Status Comm::ExchangeHeaders(CollKind kind, size_t count, DType dt, RedOp op, int root, const std::vector<int>& peers) {
  Header mine{kHeaderMagic,
              static_cast<uint32_t>(kind),
              seq_,
              count,
              static_cast<int32_t>(dt),
              static_cast<int32_t>(op),
              root,
              rank_,
              {}};
  std::vector<Header> theirs(peers.size());
  Engine e(this);
  for (size_t i = 0; i < peers.size(); ++i) {
    e.Send(peers[i], &mine, sizeof(Header));
    e.RecvCopy(peers[i], &theirs[i], sizeof(Header));
  }
  TSR_RETURN_IF_ERROR(e.Run(fmt::format("{} #{}", CollName(kind), seq_)));
  for (size_t i = 0; i < peers.size(); ++i) {
    const Header& h = theirs[i];
    if (h.magic != kHeaderMagic) return InternalError(fmt::format("corrupt header from {}", PeerName(peers[i])));
    if (h.seq != seq_ || h.kind != mine.kind || h.count != count || h.dtype != mine.dtype ||
        (h.op != mine.op && (kind == CollKind::kAllReduce || kind == CollKind::kReduceScatter)) ||
        (h.root != root && kind == CollKind::kBroadcast)) {
      return InvalidArgument(
          fmt::format("mismatched collectives: rank {} called {} as its call #{}, but {} called {} as its call #{}",
                      rank_, DescribeCall(kind, count, dt, op, root), seq_, PeerName(peers[i]),
                      DescribeCall(static_cast<CollKind>(h.kind), h.count, static_cast<DType>(h.dtype),
                                   static_cast<RedOp>(h.op), h.root),
                      h.seq));
    }
  }
  return Status::Ok();
}

namespace {
// The reduced shard's bytes at the start of the device scratch, rounded so the accumulators after it align.
size_t DeviceOutputBytes(size_t bytes) { return (bytes + 255) / 256 * 256; }
}  // namespace

// One call of the hierarchical algorithm: its arguments, its schedule, and what one step leaves for the
// next (the island's partial sums, where final values go).
class Comm::Collective {
 public:
  Collective(Comm& c, CollKind kind, const void* send, void* recv, size_t count, DType dt, RedOp op, int root,
             DeviceOps* dev, IslandPhases phases)
      : c_(c),
        kind_(kind),
        send_(static_cast<const std::byte*>(send)),
        recv_(static_cast<std::byte*>(recv)),
        count_(count),
        dt_(dt),
        op_(op),
        root_(root),
        dev_(dev),
        island_done_(phases == IslandPhases::kDone),
        reduce_(kind == CollKind::kAllReduce || kind == CollKind::kReduceScatter || kind == CollKind::kBarrier),
        W_(static_cast<size_t>(c.size_)),
        C_((kind == CollKind::kReduceScatter || kind == CollKind::kAllGather) ? count * W_ : count),
        esz_(DTypeSize(dt)),
        asz_(DTypeSize(AccumType(dt))),
        k_(static_cast<int>(c.island_ranks_.size())),
        me_(c.my_island_),
        local_(c.local_),
        ranks_(c.island_ranks_[c.my_island_]),
        n_(static_cast<int>(ranks_.size())),
        S_(Shard(ranks_.size(), static_cast<size_t>(local_), C_)),
        weights_(c.FoldWeights(dt)),
        what_(fmt::format("{} #{}", CollName(kind), c.seq_)) {}

  Status Run() {
    const bool bridged = kind_ == CollKind::kAllReduce || kind_ == CollKind::kReduceScatter ||
                         kind_ == CollKind::kAllGather || kind_ == CollKind::kBroadcast;
    if (dev_ != nullptr && (!bridged || n_ != 1 || k_ < 2))
      return InternalError(fmt::format(
          "{}: the device bridge serves allreduce, reduce-scatter, broadcast and allgather from an island of one rank",
          what_));
    if (island_done_ && (!bridged || dev_ != nullptr || n_ < 2 || k_ < 2))
      return InternalError(fmt::format(
          "{}: island phases run elsewhere only for allreduce, reduce-scatter, broadcast and allgather, from an "
          "island of several ranks in a world of several islands",
          what_));
    segs_ = Segments(c_.island_ranks_, C_);
    TSR_RETURN_IF_ERROR(ExchangeHeaders());
    if (C_ == 0) return Status::Ok();
    if (!reduce_) {
      if (!island_done_) TSR_RETURN_IF_ERROR(IslandGather());
      if (k_ > 1) TSR_RETURN_IF_ERROR(BridgeSwap());
      if (island_done_) return Status::Ok();  // the island's library spreads the shards
      TSR_RETURN_IF_ERROR(CopyOwn());
    } else {
      TSR_RETURN_IF_ERROR(IslandReduceScatter());
      TSR_RETURN_IF_ERROR(PlaceOutput());
      if (k_ > 1)
        TSR_RETURN_IF_ERROR(BridgeReduce());
      else
        FinishOwnShard();
      if (kind_ == CollKind::kReduceScatter) return ScatterToBlocks();
      if (island_done_) return Status::Ok();
    }
    return IslandAllGather();
  }

 private:
  Range ShardOf(int member) const { return Shard(ranks_.size(), static_cast<size_t>(member), C_); }
  Range PartOf(const Segment& sg, int q) const { return Part(sg.r, q, weights_); }
  Range Contrib(int rank) const { return Contribution(kind_ == CollKind::kAllGather, rank, root_, count_, C_); }

  // Header exchange with every peer of this rank's schedule (schedule.hpp: HeaderPeers).
  Status ExchangeHeaders() {
    return c_.ExchangeHeaders(
        kind_, count_, dt_, op_, root_,
        HeaderPeers(c_.island_ranks_, segs_, c_.rank_, kind_ == CollKind::kReduceScatter, count_, weights_));
  }

  // ---- select: allgather / broadcast. Each element has exactly one contributing rank. ----

  // Where the elements `x` of rank r's contribution are sent from: my own leave straight from the send
  // buffer (CopyOwn puts them into recv after the exchanges), the others' from where they were received.
  const std::byte* Source(int r, const Range& x) const {
    return r == c_.rank_ ? send_ + (x.lo - Contrib(r).lo) * esz_ : recv_ + x.lo * esz_;
  }

  // Out of place, my own contribution's copy into recv: made last, so that it does not delay the first
  // byte on the wire (a broadcast root on a TCP link copies while the peer drains its socket buffers).
  // On the device bridge the copy runs on the device (its fold queue) and this waits for it.
  Status CopyOwn() {
    const Range own = Contrib(c_.rank_);
    if (own.len() == 0 || send_ == recv_ + own.lo * esz_) return Status::Ok();
    TSR_RETURN_IF_ERROR(CopyLocal(recv_ + own.lo * esz_, send_, own.len() * esz_));
    return dev_ != nullptr ? WaitForFolds() : Status::Ok();
  }

  // A copy within this rank's buffers: on the device's fold queue on the device bridge (WaitForFolds then
  // waits for it), else right here.
  Status CopyLocal(std::byte* dst, const std::byte* src, size_t bytes) {
    if (dev_ != nullptr) return dev_->Copy(dst, src, bytes);
    std::memmove(dst, src, bytes);
    return Status::Ok();
  }

  // Device bridge: waits (bounded by TESSERA_TIMEOUT) for everything issued so far on the fold queue — the
  // device-to-device copies of this rank's own part, which no engine run tracks.
  Status WaitForFolds() {
    TSR_ASSIGN_OR_RETURN(DeviceOps::Ticket t, dev_->Mark(DeviceOps::kFoldQueue));
    const auto deadline = std::chrono::steady_clock::now() + c_.timeout_;
    for (;;) {
      TSR_ASSIGN_OR_RETURN(bool done, dev_->Done(DeviceOps::kFoldQueue, t));
      if (done) return Status::Ok();
      if (std::chrono::steady_clock::now() > deadline)
        return Timeout(
            fmt::format("{}: the device's copy of this rank's own part did not finish within "
                        "TESSERA_TIMEOUT ({} ms)",
                        what_, c_.timeout_.count()));
      std::this_thread::yield();
    }
  }

  // Phase 1: gather my shard's contributions from my island (and give them mine).
  Status IslandGather() {
    const Range own = Contrib(c_.rank_);
    Engine e(&c_);
    for (int j = 0; j < n_; ++j) {
      if (j == local_) continue;
      const int peer = ranks_[j];
      const Range x = own.Intersect(ShardOf(j));
      e.Send(peer, Source(c_.rank_, x), x.len() * esz_);
      const Range y = Contrib(peer).Intersect(S_);
      e.RecvCopy(peer, recv_ + y.lo * esz_, y.len() * esz_);
    }
    return e.Run(what_ + " (island gather)");
  }

  // Phase 2: the owners of each segment swap what their islands contributed to it (on the device bridge,
  // straight between device memory and the peers' rings).
  Status BridgeSwap() {
    Engine e(&c_, dev_);
    for (const auto& sg : segs_) {
      if (sg.owner[me_] != c_.rank_) continue;
      for (int J = 0; J < k_; ++J) {
        if (J == me_) continue;
        for (int r : ranks_) {
          const Range x = Contrib(r).Intersect(sg.r);
          e.Send(sg.owner[J], Source(r, x), x.len() * esz_);
        }
        for (int r : c_.island_ranks_[J]) {
          const Range y = Contrib(r).Intersect(sg.r);
          e.RecvCopy(sg.owner[J], recv_ + y.lo * esz_, y.len() * esz_);
        }
      }
    }
    return e.Run(what_ + " (bridge)");
  }

  // ---- reduce: allreduce / reduce-scatter / barrier ----

  // Phase 1: island reduce-scatter, in island rank order, into an accumulator (f32 for 16-bit types).
  // Leaves partial_ (of ptype_; element pbase_ at partial_[0]); an island of one leaves its input.
  Status IslandReduceScatter() {
    island_ptype_.resize(k_);
    for (int J = 0; J < k_; ++J) island_ptype_[J] = c_.island_ranks_[J].size() == 1 ? dt_ : AccumType(dt_);
    if (n_ == 1 || island_done_) {  // my input, or my island's partial sums of my shard (in its accumulator type)
      partial_ = send_;
      ptype_ = island_done_ ? AccumType(dt_) : dt_;
      pbase_ = 0;
      return Status::Ok();
    }
    // A single island reducing a type that is its own accumulator folds straight into the output,
    // unless in-place input would be overwritten before its turn in the rank order.
    const bool direct =
        k_ == 1 && kind_ == CollKind::kAllReduce && AccumType(dt_) == dt_ && !(send_ == recv_ && local_ != 0);
    auto* acc = direct ? recv_ + S_.lo * esz_ : static_cast<std::byte*>(c_.Scratch(0, S_.len() * asz_));
    ReduceJob job;
    job.acc = acc;
    job.n = S_.len();
    job.dtype = dt_;
    job.op = op_;
    job.Init(n_);
    Engine e(&c_);
    for (int j = 0; j < n_; ++j) {
      if (j == local_) {
        e.LocalFold(&job, j, send_ + S_.lo * esz_);
        continue;
      }
      const Range sj = ShardOf(j);
      e.Send(ranks_[j], send_ + sj.lo * esz_, sj.len() * esz_);
      e.RecvFold(ranks_[j], &job, j);
    }
    TSR_RETURN_IF_ERROR(e.Run(what_ + " (island reduce-scatter)"));
    partial_ = acc;
    ptype_ = AccumType(dt_);
    pbase_ = S_.lo;
    return Status::Ok();
  }

  // Where final values of my shard go: recv for allreduce, a staging buffer for reduce-scatter (on the
  // device bridge, at the start of the device scratch; the accumulators follow it).
  Status PlaceOutput() {
    if (kind_ != CollKind::kReduceScatter) {
      out_ = recv_;
      obase_ = 0;
      return Status::Ok();
    }
    obase_ = S_.lo;
    if (dev_ == nullptr) {
      out_ = static_cast<std::byte*>(c_.Scratch(1, S_.len() * esz_));
      return Status::Ok();
    }
    dev_used_ = DeviceOutputBytes(S_.len() * esz_);
    TSR_ASSIGN_OR_RETURN(void* d, dev_->Scratch(dev_used_));
    out_ = static_cast<std::byte*>(d);
    return Status::Ok();
  }

  // Phase 2: for each of my segments, send the other islands' parts, reduce mine in island order
  // (2a) and, in the same run, share the reduced parts among the segment's owners as their folds
  // finish (2b; not for reduce-scatter, whose parts are routed by ScatterToBlocks).
  Status BridgeReduce() {
    const size_t psz = DTypeSize(ptype_);
    const int divisor = c_.size_;
    std::vector<ReduceJob> jobs;
    jobs.reserve(segs_.size());
    Engine e(&c_, dev_);
    for (const auto& sg : segs_) {
      if (sg.owner[me_] != c_.rank_) continue;
      for (int q = 0; q < k_; ++q) {
        const Range p = PartOf(sg, q);
        if (q != me_) {
          e.Send(sg.owner[q], partial_ + (p.lo - pbase_) * psz, p.len() * psz);
          continue;
        }
        if (p.len() == 0) continue;
        jobs.emplace_back();
        ReduceJob& job = jobs.back();
        job.n = p.len();
        job.dtype = dt_;
        job.op = op_;
        job.divisor = divisor;
        job.device = dev_;
        job.Init(k_);
        for (int J = 0; J < k_; ++J) job.src_type[J] = island_ptype_[J];
        std::byte* dst = out_ + (p.lo - obase_) * esz_;
        const bool alias = partial_ + (p.lo - pbase_) * psz == dst;  // in place, island of one
        // Accumulate straight into the output when types allow, unless that would overwrite my own
        // in-place input before it is folded (it is folded at position me_, not first).
        job.acc = (AccumType(dt_) == dt_ && !(alias && me_ != 0)) ? dst : nullptr;
        job.dst = dst;
      }
    }
    TSR_RETURN_IF_ERROR(PlaceAccumulators(jobs));
    size_t ji = 0;
    std::vector<ReduceJob*> seg_job(segs_.size(), nullptr);  // my part's job, per segment I own
    for (size_t si = 0; si < segs_.size(); ++si) {
      const Segment& sg = segs_[si];
      if (sg.owner[me_] != c_.rank_) continue;
      const Range p = PartOf(sg, me_);
      if (p.len() == 0) continue;
      ReduceJob& job = jobs[ji++];
      seg_job[si] = &job;
      for (int J = 0; J < k_; ++J) {
        if (J == me_)
          e.LocalFold(&job, J, partial_ + (p.lo - pbase_) * psz);
        else
          e.RecvFold(sg.owner[J], &job, J);
      }
    }
    if (kind_ != CollKind::kReduceScatter) {
      // Each part leaves as its folds finish, so the bridge's two phases overlap instead of draining in
      // between.
      for (size_t si = 0; si < segs_.size(); ++si) {
        const Segment& sg = segs_[si];
        if (sg.owner[me_] != c_.rank_) continue;
        for (int q = 0; q < k_; ++q) {
          if (q == me_) continue;
          const Range p = PartOf(sg, q);
          if (seg_job[si] != nullptr) e.SendResult(sg.owner[q], seg_job[si]);
          e.RecvCopy(sg.owner[q], out_ + (p.lo - obase_) * esz_, p.len() * esz_);
        }
      }
    }
    return e.Run(what_ + (kind_ == CollKind::kReduceScatter ? " (bridge reduce)" : " (bridge)"));
  }

  // Accumulators that cannot live in the output: one scratch block (on the device with dev_), carved
  // per job.
  Status PlaceAccumulators(std::vector<ReduceJob>& jobs) {
    size_t need = 0;
    for (auto& job : jobs)
      if (job.acc == nullptr) need += job.n * asz_;
    std::byte* accs;
    if (dev_ != nullptr) {
      TSR_ASSIGN_OR_RETURN(void* d, dev_->Scratch(dev_used_ + need));
      accs = static_cast<std::byte*>(d) + dev_used_;
    } else {
      accs = static_cast<std::byte*>(c_.Scratch(2, need));
    }
    for (auto& job : jobs)
      if (job.acc == nullptr) {
        job.acc = accs;
        accs += job.n * asz_;
      }
    return Status::Ok();
  }

  // A world of one island: my shard's final values from the island's sums (or, a world of one rank,
  // from the input).
  void FinishOwnShard() {
    const int divisor = c_.size_;
    if (n_ > 1) {
      Finalize(out_ + (S_.lo - obase_) * esz_, partial_, S_.len(), dt_, op_, divisor);
    } else if (out_ + (S_.lo - obase_) * esz_ != send_ + S_.lo * esz_) {
      std::memmove(out_ + (S_.lo - obase_) * esz_, send_ + S_.lo * esz_, S_.len() * esz_);  // world of one
    }
  }

  // Phase 3 (reduce-scatter): route every reduced part to the rank whose output block holds it.
  Status ScatterToBlocks() {
    Engine e(&c_, dev_);
    const int rank = c_.rank_;
    const Range block{count_ * rank, count_ * (rank + 1)};
    for (const auto& sg : segs_) {
      for (int q = 0; q < k_; ++q) {
        const Range p = PartOf(sg, q);
        if (p.len() == 0) continue;
        if (sg.owner[q] == rank) {
          const Range blocks = BlocksOf(p, count_, W_);
          for (size_t b = blocks.lo; b < blocks.hi; ++b) {
            const Range x = p.Intersect({count_ * b, count_ * (b + 1)});
            if (x.len() == 0) continue;
            const std::byte* src = out_ + (x.lo - obase_) * esz_;
            if (static_cast<int>(b) == rank)
              TSR_RETURN_IF_ERROR(CopyLocal(recv_ + (x.lo - block.lo) * esz_, src, x.len() * esz_));
            else
              e.Send(static_cast<int>(b), src, x.len() * esz_);
          }
        } else {
          const Range x = p.Intersect(block);
          e.RecvCopy(sg.owner[q], recv_ + (x.lo - block.lo) * esz_, x.len() * esz_);
        }
      }
    }
    TSR_RETURN_IF_ERROR(e.Run(what_ + " (scatter)"));
    return dev_ != nullptr ? WaitForFolds() : Status::Ok();
  }

  // Phase 3: island allgather of the shards.
  Status IslandAllGather() {
    if (n_ == 1) return Status::Ok();
    Engine e(&c_);
    for (int j = 0; j < n_; ++j) {
      if (j == local_) continue;
      const Range sj = ShardOf(j);
      e.Send(ranks_[j], recv_ + S_.lo * esz_, S_.len() * esz_);
      e.RecvCopy(ranks_[j], recv_ + sj.lo * esz_, sj.len() * esz_);
    }
    return e.Run(what_ + " (island allgather)");
  }

  Comm& c_;
  const CollKind kind_;
  const std::byte* const send_;
  std::byte* const recv_;
  const size_t count_;
  const DType dt_;
  const RedOp op_;
  const int root_;
  DeviceOps* const dev_;
  const bool island_done_;  // IslandPhases::kDone
  const bool reduce_;
  const size_t W_;                  // ranks of the world
  const size_t C_;                  // elements of the whole buffer the schedule cuts
  const size_t esz_, asz_;          // bytes per element of dt_ and of its accumulator
  const int k_;                     // islands
  const int me_;                    // my island
  const int local_;                 // my index in it
  const std::vector<int>& ranks_;   // my island's ranks
  const int n_;                     // ... and how many
  const Range S_;                   // my shard
  const std::vector<int> weights_;  // each island's share of a segment's bridge folds (FoldWeights)
  const std::string what_;          // "allreduce #7", for errors
  std::vector<Segment> segs_;
  // Reduce: the island's partial sums of my shard (IslandReduceScatter), where final values go (PlaceOutput).
  std::vector<DType> island_ptype_;  // the type of each island's partial sums
  const std::byte* partial_ = nullptr;
  DType ptype_ = DType::kFloat32;
  size_t pbase_ = 0;  // element index that partial_[0] stands for
  std::byte* out_ = nullptr;
  size_t obase_ = 0;
  size_t dev_used_ = 0;  // device bridge: bytes at the start of the device scratch taken by out_
};

size_t Comm::DeviceScratchBytes(CollKind kind, size_t count, DType dt) const {
  if (kind != CollKind::kAllReduce && kind != CollKind::kReduceScatter) return 0;
  const size_t elements = kind == CollKind::kReduceScatter ? count * static_cast<size_t>(size_) : count;
  const size_t out = kind == CollKind::kReduceScatter ? DeviceOutputBytes(elements * DTypeSize(dt)) : 0;
  // My parts of the segments (BridgeReduce): at most my island's share of the elements plus one per segment.
  const std::vector<int> w = FoldWeights(dt);
  size_t total = 0;
  for (int x : w) total += static_cast<size_t>(x);
  const size_t share = elements * static_cast<size_t>(w[static_cast<size_t>(my_island_)]) / total;
  return out + (share + size_ + 1) * DTypeSize(AccumType(dt));
}

std::vector<int> Comm::FoldWeights(DType dt) const {
  std::vector<int> w(islands_.size(), 1);
  bool device = false, staged = false;
  for (const Island& isl : islands_) {
    device |= DeviceBridgeEligible(isl, dt);
    staged |= StagedDeviceIsland(isl, dt);
  }
  for (size_t i = 0; i < islands_.size(); ++i)
    if ((device && staged && StagedDeviceIsland(islands_[i], dt)) ||
        (islands_[i].copy_only && DeviceBridgeEligible(islands_[i], dt)))
      w[i] = 0;
  return w;
}

Status Comm::Hierarchical(CollKind kind, const void* send, void* recv, size_t count, DType dt, RedOp op, int root,
                          DeviceOps* dev, IslandPhases phases) {
  return Collective(*this, kind, send, recv, count, dt, op, root, dev, phases).Run();
}

}  // namespace tessera::comm
