// tessera/comm.hpp — the C++ API of Tessera's collectives (the C API in tessera.h wraps the same core).
//
// A Communicator joins the job described by the TESSERA_* environment (see README) and runs NCCL-shaped
// collectives over islands joined by a bridge. Every rank must issue the same collectives in the same
// order with matching count, type and op; a mismatch is reported on every rank, naming it. Calls on one
// Communicator must not run concurrently. After any error the communicator is failed: destroy it.
#pragma once

#include <memory>
#include <string>

#include "tessera/status.hpp"
#include "tessera/tessera.h"

namespace tessera {

class TESSERA_API Communicator {
 public:
  static Result<std::unique_ptr<Communicator>> FromEnv();
  virtual ~Communicator() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual int island() const = 0;  // index of this rank's island
  virtual int num_islands() const = 0;
  virtual std::string Describe() const = 0;  // islands, ranks, devices and bridge transports, for humans

  virtual Status AllReduce(const void* send, void* recv, size_t count, tsrDataType_t type, tsrRedOp_t op,
                           tsrStream_t stream = nullptr) = 0;
  virtual Status ReduceScatter(const void* send, void* recv, size_t recvcount, tsrDataType_t type, tsrRedOp_t op,
                               tsrStream_t stream = nullptr) = 0;
  virtual Status AllGather(const void* send, void* recv, size_t sendcount, tsrDataType_t type,
                           tsrStream_t stream = nullptr) = 0;
  virtual Status Broadcast(const void* send, void* recv, size_t count, tsrDataType_t type, int root,
                           tsrStream_t stream = nullptr) = 0;
  virtual Status Send(const void* send, size_t count, tsrDataType_t type, int peer, tsrStream_t stream = nullptr) = 0;
  virtual Status Recv(void* recv, size_t count, tsrDataType_t type, int peer, tsrStream_t stream = nullptr) = 0;
  virtual Status Barrier() = 0;
};

}  // namespace tessera
