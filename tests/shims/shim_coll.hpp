// tests/shims/shim_coll: the multi-process collective engine behind the HCCL and MCCL host shims. The ranks of
// one communicator (separate processes, forked or exec'd) meet in a POSIX shared-memory segment named in the
// root info / unique id, and run allreduce, reduce-scatter, allgather, broadcast, barrier and send/recv there,
// chunk by chunk. Reductions are deterministic, so every rank gets the same bits: 16-bit floats are reduced in
// their own type at every hop, in ring order (see Fold), everything else in rank order. Vendor-neutral: the vendor
// files map its types, operations and errors.
//
// Nothing waits forever: a wait without progress for TESSERA_SHIM_TIMEOUT_MS (default 5000; init:
// TESSERA_SHIM_INIT_TIMEOUT_MS, default 60000) fails, a peer whose process has exited is noticed within ~20 ms,
// and a rank that fails announces it in the segment so its peers fail at once instead of timing out.
// Segment sizes: TESSERA_SHIM_SLOT_BYTES per rank (default 1 MiB) and TESSERA_SHIM_CHANNEL_BYTES per ordered
// pair of ranks for send/recv (default 256 KiB); the root's values travel in the id.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace tshim::coll {

enum class DType { kI8, kU8, kI16, kU16, kI32, kU32, kI64, kU64, kF16, kBF16, kF32, kF64 };
enum class Op { kSum, kProd, kMax, kMin, kAvg };
size_t Size(DType t);
const char* Name(DType t);
const char* Name(Op op);
// out[i] = src[0][i] op src[1][i] op ... op src[n-1][i] (shim_reduce.cpp); out may alias any src. 16-bit floats
// are folded as a ring reduces them (NCCL's ring kernels; HCCL accumulates in the native type too): from rank
// `first` round the ring, rounded to the 16-bit type after every step, avg as a pre-multiplied sum; other types
// ignore `first` and fold in rank order.
void Fold(DType t, Op op, const char* const* src, int n, int first, char* out, size_t count);
// The rank a ring starts element `i` of a reduction of `count` elements at: the one after the rank that finalises
// it. A reduce-scatter's block r is finalised by rank r; an allreduce splits its buffer into n parts of
// ceil(count / n) elements (the last ones shorter or empty), part p finalised by rank p (NCCL's ring allreduce:
// step 0 sends chunk ringIx - 1, the last step reduces chunk ringIx).
inline int RingFirst(int owner, int n) { return (owner + 1) % n; }
inline int AllReduceOwner(size_t i, size_t count, int n) {
  const size_t part = (count + static_cast<size_t>(n) - 1) / static_cast<size_t>(n);
  return static_cast<int>(i / part);
}

enum class Err {
  kOk,
  kInvalid,      // the ranks disagree (count, type, op, root, message size) or a bad argument
  kTimeout,      // no progress within the timeout
  kPeerDead,     // a peer's process is gone
  kRemoteAbort,  // a peer failed or aborted and said so
  kAborted,      // this communicator was aborted locally
  kSystem,       // a system call failed
};
struct Result {
  Err err = Err::kOk;
  std::string msg;
  bool ok() const { return err == Err::kOk; }
};

// The id that carries a communicator's meeting place; the first kIdBytes bytes of an HcclRootInfo or
// mcclUniqueId, the rest zero.
inline constexpr size_t kIdBytes = 128;
void MakeId(void* out, size_t out_bytes);
bool ParseId(const void* in, size_t in_bytes, std::string* why);

struct P2POp {
  bool send;
  char* buf;  // shim-side address
  size_t bytes;
  int peer;
};

class Comm {
 public:
  // Joins (creating if first) the segment of `id`. Waits until all `nranks` ranks have joined.
  static Result Create(const void* id, int nranks, int rank, int device, std::shared_ptr<Comm>* out);
  ~Comm();
  int rank() const { return rank_; }
  int nranks() const { return nranks_; }
  int device() const { return device_; }

  // Operations run one at a time per communicator, in the order the application issued them: take a ticket
  // on the calling thread, then Run() it on the stream's worker.
  uint64_t TakeTicket();
  Result Run(uint64_t ticket, const std::function<Result()>& body);
  // Waits (up to the timeout) until every ticket taken has run.
  bool Drain();
  // Operations taken but not finished: queued on a stream or running.
  uint64_t InFlight();

  // The operations (shim-side addresses; in may equal out).
  Result AllReduce(const char* in, char* out, size_t count, DType t, Op op);
  Result ReduceScatter(const char* in, char* out, size_t recvcount, DType t, Op op);
  Result AllGather(const char* in, char* out, size_t sendcount, DType t);
  Result Broadcast(const char* in, char* out, size_t count, DType t, int root);
  Result Barrier();
  Result P2P(const std::vector<P2POp>& ops);  // progressed together, as a group

  void Abort();  // local: pending and future operations fail at once; peers are told
  // The first asynchronous failure (kOk when none).
  Result async_error();

 private:
  struct Header;
  struct RankSlot;
  struct Chan;
  Comm() = default;
  Result Fail(Result r);          // records r as the async error and announces it
  Result Sync(const char* what);  // one barrier phase
  Result Collective(uint32_t kind, DType t, size_t count, int op, int root, size_t nchunks,
                    const std::function<void(size_t)>& produce, const std::function<void(size_t)>& consume);
  // Polls `ready` (which lists the peers it still waits for) until it returns true, failing on abort, on a
  // peer's announced failure, on a listed peer's death, or after the timeout.
  Result WaitFor(const std::function<bool(std::vector<int>*)>& ready, const char* what);
  RankSlot* SlotMeta(int r) const;
  char* Slot(int r) const;
  Chan* Channel(int src, int dst) const;
  char* ChannelData(int src, int dst) const;

  int rank_ = 0, nranks_ = 0, device_ = -1;
  uint64_t timeout_ms_ = 5000;
  void* map_ = nullptr;
  size_t map_bytes_ = 0;
  Header* hdr_ = nullptr;
  uint64_t phase_ = 0;
  uint64_t op_seq_ = 0;
  std::vector<uint64_t> send_seq_, recv_seq_;
  std::vector<pid_t> pids_;

  std::mutex mu_;
  std::condition_variable cv_;
  uint64_t next_ticket_ = 0, serving_ = 0;
  std::atomic<bool> aborted_{false};
  Result async_;
};

}  // namespace tshim::coll
