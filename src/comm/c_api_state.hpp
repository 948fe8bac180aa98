// comm/c_api_state: what the files of the C ABI share (c_api.cpp: communicators, collectives and errors;
// c_api_group.cpp: tsrGroupStart/End) — the handle behind tsrComm_t, each thread's init error and last errors,
// the call wrapper that turns a Status or an exception into a tsrResult_t, and each thread's group depth.
#pragma once

#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <exception>
#include <memory>
#include <string>

#include "comm/api_args.hpp"
#include "comm/comm.hpp"
#include "common/c_result.hpp"
#include "tessera/tessera.h"

namespace tessera::comm::capi {
inline uint64_t NextCommId() {
  static std::atomic<uint64_t> next{1};
  return next.fetch_add(1, std::memory_order_relaxed);
}
// The fork()s between the process that loaded libtessera and this one: a child's pthread_atfork handler adds one
// (c_api.cpp). A communicator belongs to the process that made it (tsrComm::generation): a child made by fork()
// has the handle but not the communicator's threads, and its channels and store connection are the parent's, so
// a call on it in the child would take the parent's bytes out of shared rings or speak for the parent's rank.
inline std::atomic<uint32_t> g_fork_generation{0};
}  // namespace tessera::comm::capi

struct tsrComm {
  std::unique_ptr<tessera::comm::Comm> impl;
  // Names this communicator in each thread's table of last errors (never reused, unlike its address).
  const uint64_t id = tessera::comm::capi::NextCommId();
  std::string description;
  // A world of one device island: the lean allreduce path (comm/device/device.hpp), called from here
  // directly so that a taken call reads no more than this handle and that path's data.
  tessera::comm::DirectAllReduce* direct = nullptr;
  // What the argument checks need (rank, size, host or device, vendor): fixed for the communicator's life.
  tessera::comm::api::Shape shape;
  // g_fork_generation when it was made: another value means this process is a fork() child of its owner.
  const uint32_t generation = tessera::comm::capi::g_fork_generation.load(std::memory_order_relaxed);
  const pid_t owner = ::getpid();
  bool Inherited() const {
    return generation != tessera::comm::capi::g_fork_generation.load(std::memory_order_relaxed);
  }
};

namespace tessera::comm::capi {

// This thread's message of its last failure without a communicator (tsrGetLastError(NULL)).
inline thread_local std::string g_init_error;
// The nesting depth of this thread's tsrGroupStart/End (constant-initialised: the lean allreduce path reads it
// without a call).
inline thread_local int g_group_depth = 0;
// What a call that a group does not allow says after its name.
inline constexpr const char* kInGroup =
    "is not allowed between tsrGroupStart and tsrGroupEnd (only tsrSend and tsrRecv are)";

// Records `message` as this thread's last error on `comm` (tsrGetLastError(comm)).
void SetLastError(tsrComm_t comm, std::string message);

// A call on a communicator this process inherited through fork(): refused, touching nothing of it.
tsrResult_t RefuseInherited(const char* name, tsrComm_t comm);

// Runs f(*comm->impl): a refused or failed Status becomes the comm's last error, an exception an internal error.
template <typename F>
tsrResult_t Call(const char* name, tsrComm_t comm, F&& f) {
  if (comm == nullptr || !comm->impl) {
    g_init_error = std::string(name) + ": comm is NULL (or destroyed)";
    return tsrInvalidArgument;
  }
  if (comm->Inherited()) return RefuseInherited(name, comm);
  try {
    Status s = f(*comm->impl);
    if (!s.ok()) SetLastError(comm, s.message());
    return ToResult(s);
  } catch (const std::exception& e) {
    SetLastError(comm, std::string("internal error: ") + e.what());
    return tsrInternalError;
  }
}

// tsrSend/tsrRecv between tsrGroupStart and tsrGroupEnd: queued on this thread for tsrGroupEnd (c_api_group.cpp).
tsrResult_t QueueGroupOp(const char* what, tsrComm_t comm, bool is_send, const void* sendbuf, void* recvbuf,
                         size_t count, tsrDataType_t datatype, int peer, tsrStream_t stream);
// Drops this thread's queued sends and receives on `comm` (it is being destroyed).
void DropGroupOps(tsrComm_t comm);

}  // namespace tessera::comm::capi
