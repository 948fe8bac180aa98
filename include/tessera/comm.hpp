// tessera/comm.hpp — a header-only C++ wrapper over the C API of tessera.h: nothing here is compiled into
// libtessera, so the collectives' ABI is the C API alone (libtessera also exports the C++ Status and
// checkpoint API of status.hpp and ckpt.hpp: tests/structure/public_symbols.txt).
//
// tessera::Communicator owns one tsrComm_t (destroyed with the object; move-only) and turns every
// tsrResult_t into a tessera::Status carrying tsrGetLastError's message, so C++ callers write
//   auto comm = tessera::Communicator::FromEnv();
//   if (!comm.ok()) { ...comm.status().message()... }
//   Status s = comm->AllReduce(send, recv, n, tsrFloat32, tsrSum);
// The rules are the C API's (tessera.h): every rank issues the same collectives in the same order; calls
// on one communicator must not run concurrently; a bad argument (kInvalidArgument naming the call, the argument
// and its value) leaves the communicator usable, any other error fails it: destroy it.
#pragma once

#include <cstddef>
#include <string>
#include <utility>

#include "tessera/status.hpp"
#include "tessera/tessera.h"

namespace tessera {

class Communicator {
 public:
  // Joins the job that `tessera run` describes in the TESSERA_* environment (tsrCommInitFromEnv).
  static Result<Communicator> FromEnv() {
    tsrComm_t c = nullptr;
    const tsrResult_t r = tsrCommInitFromEnv(&c);
    return Made(r, c, "tsrCommInitFromEnv");
  }
  // Rank `rank` of `nranks` that share `id` (from tsrGetUniqueId on one rank); config may be null.
  static Result<Communicator> InitRank(int nranks, const tsrUniqueId& id, int rank, tsrConfig_t* config = nullptr) {
    tsrComm_t c = nullptr;
    const tsrResult_t r = tsrCommInitRank(&c, nranks, id, rank, config);
    return Made(r, c, "tsrCommInitRank");
  }
  static Result<tsrUniqueId> UniqueId() {
    tsrUniqueId id{};
    const tsrResult_t r = tsrGetUniqueId(&id);
    if (r != tsrSuccess) return Status(static_cast<Code>(r), std::string("tsrGetUniqueId: ") + tsrGetErrorString(r));
    return id;
  }

  Communicator(Communicator&& o) noexcept : comm_(std::exchange(o.comm_, nullptr)) {}
  Communicator& operator=(Communicator&& o) noexcept {
    if (this != &o) {
      Reset();
      comm_ = std::exchange(o.comm_, nullptr);
    }
    return *this;
  }
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;
  ~Communicator() { Reset(); }

  tsrComm_t get() const { return comm_; }  // for calls of the C API this wrapper does not name
  int rank() const { return Query(tsrCommRank); }
  int size() const { return Query(tsrCommSize); }
  int island() const { return Query(tsrCommIsland); }  // index of this rank's island
  std::string Describe() const { return tsrCommDescribe(comm_); }

  Status AllReduce(const void* send, void* recv, size_t count, tsrDataType_t type, tsrRedOp_t op,
                   tsrStream_t stream = nullptr) {
    return Check(tsrAllReduce(send, recv, count, type, op, comm_, stream));
  }
  Status ReduceScatter(const void* send, void* recv, size_t recvcount, tsrDataType_t type, tsrRedOp_t op,
                       tsrStream_t stream = nullptr) {
    return Check(tsrReduceScatter(send, recv, recvcount, type, op, comm_, stream));
  }
  Status AllGather(const void* send, void* recv, size_t sendcount, tsrDataType_t type, tsrStream_t stream = nullptr) {
    return Check(tsrAllGather(send, recv, sendcount, type, comm_, stream));
  }
  Status Broadcast(const void* send, void* recv, size_t count, tsrDataType_t type, int root,
                   tsrStream_t stream = nullptr) {
    return Check(tsrBroadcast(send, recv, count, type, root, comm_, stream));
  }
  Status Send(const void* send, size_t count, tsrDataType_t type, int peer, tsrStream_t stream = nullptr) {
    return Check(tsrSend(send, count, type, peer, comm_, stream));
  }
  Status Recv(void* recv, size_t count, tsrDataType_t type, int peer, tsrStream_t stream = nullptr) {
    return Check(tsrRecv(recv, count, type, peer, comm_, stream));
  }
  Status AllToAll(const void* send, void* recv, size_t count, tsrDataType_t type, tsrStream_t stream = nullptr) {
    return Check(tsrAllToAll(send, recv, count, type, comm_, stream));
  }
  Status Barrier() { return Check(tsrBarrier(comm_)); }
  // color TSR_SPLIT_NOCOLOR: this rank joins no new communicator (the result's get() is null).
  Result<Communicator> Split(int color, int key, const tsrConfig_t* config = nullptr) {
    tsrComm_t c = nullptr;
    const tsrResult_t r = tsrCommSplit(comm_, color, key, &c, config);
    if (r != tsrSuccess) return Check(r);
    return Communicator(c);
  }
  // Fails the communicator on this rank and wakes every blocked call (tsrCommAbort); the object stays
  // to be destroyed.
  Status Abort() { return Check(tsrCommAbort(comm_)); }

 private:
  explicit Communicator(tsrComm_t c) : comm_(c) {}
  static Result<Communicator> Made(tsrResult_t r, tsrComm_t c, const char* what) {
    if (r == tsrSuccess) return Communicator(c);
    // A failed init leaves no communicator to ask: the thread's last error (tsrGetLastError(NULL)).
    return Status(static_cast<Code>(r), std::string(what) + ": " + tsrGetLastError(nullptr));
  }
  Status Check(tsrResult_t r) const {
    if (r == tsrSuccess) return Status();
    return Status(static_cast<Code>(r), tsrGetLastError(comm_));
  }
  int Query(tsrResult_t (*f)(tsrComm_t, int*)) const {
    int v = -1;
    return f(comm_, &v) == tsrSuccess ? v : -1;
  }
  void Reset() {
    if (comm_ != nullptr) (void)tsrCommDestroy(comm_);
    comm_ = nullptr;
  }
  tsrComm_t comm_ = nullptr;
};

}  // namespace tessera
