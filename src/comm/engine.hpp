// comm/engine: drives one step of a collective — a set of messages to and from peers — to completion
// without blocking on any single peer, so sends and receives on all channels progress together and no
// schedule can deadlock.
//
// Messages on one channel are matched in the order they are queued on both ends. A receive either
// copies into a buffer or folds into a ReduceJob. A ReduceJob folds its contributors strictly in their
// index order (element by element, pipelined in chunks): that fixed order is what makes results
// bit-identical on every rank. Waits are bounded: no progress for the timeout gives Timeout naming the
// peers still owed; the Links' health check turns a dead peer or another rank's abort into an error.
#pragma once

#include <chrono>
#include <deque>
#include <functional>
#include <string>
#include <vector>

#include "comm/channel.hpp"
#include "common/dtype.hpp"
#include "tessera/status.hpp"

namespace tessera::comm {

class Links {
 public:
  virtual ~Links() = default;
  virtual SendChannel* send(int peer) = 0;
  virtual RecvChannel* recv(int peer) = 0;
  // Called while waiting (about every 50 ms): an error if another rank aborted or a peer died.
  virtual Status CheckHealth(const std::vector<int>& waiting_on) = 0;
  virtual std::string PeerName(int peer) const = 0;  // "rank 3 (nvidia)"
  virtual std::chrono::milliseconds timeout() const = 0;
};

// Folds contributors 0..k-1 into `acc` (AccumType(dtype)) in index order; when `dst` is set, each range
// folded by the last contributor is finalized into dst (dtype, with `divisor` for avg) right away.
struct ReduceJob {
  void* acc = nullptr;
  size_t n = 0;
  DType dtype = DType::kFloat32;
  RedOp op = RedOp::kSum;
  void* dst = nullptr;
  int divisor = 1;
  std::vector<DType> src_type;   // per contributor
  std::vector<size_t> done;      // elements folded, per contributor
  void Init(int contributors) {
    src_type.assign(contributors, dtype);
    done.assign(contributors, 0);
  }
  // Folds elements [done[c], done[c]+count) of contributor c from src; returns false if out of order.
  void FoldRange(int c, const void* src, size_t count);
  size_t Allowed(int c) const { return (c == 0 ? n : done[c - 1]) - done[c]; }
};

class Engine {
 public:
  explicit Engine(Links* links) : links_(links) {}
  void Send(int peer, const void* data, size_t bytes);
  void RecvCopy(int peer, void* dst, size_t bytes);
  void RecvFold(int peer, ReduceJob* job, int contributor);
  void LocalFold(ReduceJob* job, int contributor, const void* src);
  // Runs all queued messages to completion. `what` describes the step for errors ("allreduce #7").
  Status Run(const std::string& what);

 private:
  struct SendOp {
    const std::byte* data;
    size_t bytes, padded, off;
  };
  struct RecvOp {
    std::byte* dst;  // copy target, or null when folding
    ReduceJob* job;
    int contributor;
    size_t bytes, padded, off;
  };
  struct LocalOp {
    ReduceJob* job;
    int contributor;
    const std::byte* src;
  };
  Links* links_;
  std::vector<std::deque<SendOp>> sends_;  // by peer
  std::vector<std::deque<RecvOp>> recvs_;  // by peer
  std::vector<LocalOp> locals_;
  size_t pending_ = 0;
};

}  // namespace tessera::comm
