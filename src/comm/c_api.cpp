// comm/c_api: the C ABI of tessera.h over the C++ communicator. No exception crosses it; each call
// records a readable message retrievable with tsrGetLastError.
#include <exception>
#include <string>

#include "comm/comm.hpp"
#include "tessera/tessera.h"

struct tsrComm {
  std::unique_ptr<tessera::Communicator> impl;
  std::string last_error;
  std::string description;
  // A world of one device island: the lean allreduce path (comm/device/device.hpp), called from here
  // directly so that a taken call reads no more than this handle and that path's data.
  tessera::comm::DirectAllReduce* direct = nullptr;
};

namespace {
thread_local std::string g_init_error;

tsrResult_t ToResult(const tessera::Status& s) {
  using tessera::Code;
  switch (s.code()) {
    case Code::kOk: return tsrSuccess;
    case Code::kInvalidArgument: case Code::kNotFound: return tsrInvalidArgument;
    case Code::kSystemError: case Code::kCorrupt: return tsrSystemError;
    case Code::kRemoteError: return tsrRemoteError;
    case Code::kTimeout: return tsrTimeout;
    case Code::kUnsupported: return tsrUnsupported;
    default: return tsrInternalError;
  }
}

template <typename F>
tsrResult_t Call(tsrComm_t comm, F&& f) {
  if (comm == nullptr || !comm->impl) {
    g_init_error = "NULL or destroyed communicator";
    return tsrInvalidArgument;
  }
  try {
    tessera::Status s = f(*comm->impl);
    if (!s.ok()) comm->last_error = s.message();
    return ToResult(s);
  } catch (const std::exception& e) {
    comm->last_error = std::string("internal error: ") + e.what();
    return tsrInternalError;
  }
}
}  // namespace

tessera::Communicator* tessera::comm::Unwrap(tsrComm_t comm) { return comm != nullptr ? comm->impl.get() : nullptr; }

extern "C" {

tsrResult_t tsrCommInitFromEnv(tsrComm_t* comm) {
  if (comm == nullptr) {
    g_init_error = "tsrCommInitFromEnv: comm is NULL";
    return tsrInvalidArgument;
  }
  *comm = nullptr;
  try {
    auto c = tessera::Communicator::FromEnv();
    if (!c.ok()) {
      g_init_error = c.status().message();
      return ToResult(c.status());
    }
    *comm = new tsrComm{std::move(c).value(), {}, {}};
    if (auto* cc = dynamic_cast<tessera::comm::Comm*>((*comm)->impl.get())) (*comm)->direct = cc->direct();
    return tsrSuccess;
  } catch (const std::exception& e) {
    g_init_error = std::string("internal error: ") + e.what();
    return tsrInternalError;
  }
}

tsrResult_t tsrCommDestroy(tsrComm_t comm) {
  delete comm;
  return tsrSuccess;
}

tsrResult_t tsrCommRank(tsrComm_t comm, int* rank) {
  if (rank == nullptr) return tsrInvalidArgument;
  return Call(comm, [&](tessera::Communicator& c) { *rank = c.rank(); return tessera::Status::Ok(); });
}

tsrResult_t tsrCommSize(tsrComm_t comm, int* size) {
  if (size == nullptr) return tsrInvalidArgument;
  return Call(comm, [&](tessera::Communicator& c) { *size = c.size(); return tessera::Status::Ok(); });
}

tsrResult_t tsrCommIsland(tsrComm_t comm, int* island) {
  if (island == nullptr) return tsrInvalidArgument;
  return Call(comm, [&](tessera::Communicator& c) { *island = c.island(); return tessera::Status::Ok(); });
}

tsrResult_t tsrAllReduce(const void* sendbuf, void* recvbuf, size_t count, tsrDataType_t datatype, tsrRedOp_t op,
                         tsrComm_t comm, tsrStream_t stream) {
  if (comm != nullptr && comm->direct != nullptr) {
    const int r = comm->direct->TryCall(sendbuf, recvbuf, count, datatype, op, stream);
    if (r == 0) return tsrSuccess;
    if (r != tessera::comm::DirectAllReduce::kNotTaken)
      return Call(comm, [&](tessera::Communicator&) { return comm->direct->report(comm->direct->owner, r); });
  }
  return Call(comm, [&](tessera::Communicator& c) { return c.AllReduce(sendbuf, recvbuf, count, datatype, op, stream); });
}

tsrResult_t tsrReduceScatter(const void* sendbuf, void* recvbuf, size_t recvcount, tsrDataType_t datatype,
                             tsrRedOp_t op, tsrComm_t comm, tsrStream_t stream) {
  return Call(comm, [&](tessera::Communicator& c) {
    return c.ReduceScatter(sendbuf, recvbuf, recvcount, datatype, op, stream);
  });
}

tsrResult_t tsrAllGather(const void* sendbuf, void* recvbuf, size_t sendcount, tsrDataType_t datatype, tsrComm_t comm,
                         tsrStream_t stream) {
  return Call(comm, [&](tessera::Communicator& c) { return c.AllGather(sendbuf, recvbuf, sendcount, datatype, stream); });
}

tsrResult_t tsrBroadcast(const void* sendbuf, void* recvbuf, size_t count, tsrDataType_t datatype, int root,
                         tsrComm_t comm, tsrStream_t stream) {
  return Call(comm, [&](tessera::Communicator& c) { return c.Broadcast(sendbuf, recvbuf, count, datatype, root, stream); });
}

tsrResult_t tsrSend(const void* sendbuf, size_t count, tsrDataType_t datatype, int peer, tsrComm_t comm,
                    tsrStream_t stream) {
  return Call(comm, [&](tessera::Communicator& c) { return c.Send(sendbuf, count, datatype, peer, stream); });
}

tsrResult_t tsrRecv(void* recvbuf, size_t count, tsrDataType_t datatype, int peer, tsrComm_t comm,
                    tsrStream_t stream) {
  return Call(comm, [&](tessera::Communicator& c) { return c.Recv(recvbuf, count, datatype, peer, stream); });
}

tsrResult_t tsrBarrier(tsrComm_t comm) {
  return Call(comm, [&](tessera::Communicator& c) { return c.Barrier(); });
}

const char* tsrCommDescribe(tsrComm_t comm) {
  if (comm == nullptr || !comm->impl) return "";
  try {
    comm->description = comm->impl->Describe();
  } catch (const std::exception&) {
    comm->description.clear();
  }
  return comm->description.c_str();
}

const char* tsrGetErrorString(tsrResult_t result) {
  switch (result) {
    case tsrSuccess: return "success";
    case tsrInvalidArgument: return "invalid argument";
    case tsrSystemError: return "system error";
    case tsrRemoteError: return "remote error (a peer rank failed or went away)";
    case tsrTimeout: return "timeout (TESSERA_TIMEOUT ran out)";
    case tsrInternalError: return "internal error";
    case tsrUnsupported: return "unsupported";
  }
  return "unknown tsrResult_t";
}

const char* tsrGetLastError(tsrComm_t comm) {
  if (comm == nullptr) return g_init_error.c_str();
  return comm->last_error.c_str();
}

}  // extern "C"
