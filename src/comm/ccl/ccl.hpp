// comm/ccl: the vendor collective library (CCL) adapter of device islands, loaded at run time.
//
// A CCL is loaded with dlopen, never linked, so libtessera and the tessera binary run on machines without
// it. Libraries that share NCCL's call shapes (NCCL itself, and the NCCL-compatible libraries of other
// vendors) differ only in their file name and symbol prefix ("nccl" + "AllReduce"); each is ONE row of
// kCclTable below, and one loader resolves every symbol as prefix + name. Only rows that have been run
// are in the table (see docs/gpu.md); TESSERA_CCL_LIB / TESSERA_CCL_PREFIX let an operator try another
// library of the same shape without a rebuild.
//
// Enum values (data types, operations, results) and the 128-byte unique id follow NCCL's ABI (nccl.h);
// no vendor header is needed to build.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "common/dtype.hpp"
#include "tessera/status.hpp"

namespace tessera::comm {

class StoreClient;

struct CclVendor {
  const char* name;    // what TESSERA_CCL selects, e.g. "nccl"
  const char* soname;  // what dlopen loads, e.g. "libnccl.so.2"
  const char* prefix;  // symbol prefix, e.g. "nccl" -> ncclAllReduce
};

// The libraries this build knows. Adding an NCCL-shaped library is one row here.
inline constexpr CclVendor kCclTable[] = {
    {"nccl", "libnccl.so.2", "nccl"},  // run on the H200 machine: see docs/benchmarks.md
};

// The symbols every CCL must provide (prefix + name); the loader fails naming the first missing one.
class CclLibrary {
 public:
  using Result_ = int;  // ncclResult_t
  struct UniqueId {
    char internal[128];
  };
  // Loads `v` (soname may be a path). Unsupported when the library or a symbol is missing.
  static Result<std::shared_ptr<CclLibrary>> Load(const CclVendor& v);
  // The table row picked by TESSERA_CCL (default "nccl"), with TESSERA_CCL_LIB / TESSERA_CCL_PREFIX
  // overriding its file and prefix.
  static Result<std::shared_ptr<CclLibrary>> LoadFromEnv();
  ~CclLibrary();

  const std::string& name() const { return name_; }
  const std::string& prefix() const { return prefix_; }  // of its symbols: "nccl"
  int version() const { return version_; }
  // "NCCL error 'unhandled cuda error' (1) in AllReduce": `what` names the call.
  Status Check(Result_ r, const char* what) const;

  // Function pointers, NCCL's signatures with opaque handles.
  Result_ (*GetVersion)(int*) = nullptr;
  Result_ (*GetUniqueId)(UniqueId*) = nullptr;
  Result_ (*CommInitRank)(void** comm, int nranks, UniqueId id, int rank) = nullptr;
  Result_ (*CommDestroy)(void* comm) = nullptr;
  Result_ (*CommAbort)(void* comm) = nullptr;
  Result_ (*CommGetAsyncError)(void* comm, Result_* err) = nullptr;
  Result_ (*AllReduce)(const void*, void*, size_t, int dtype, int op, void* comm, void* stream) = nullptr;
  Result_ (*ReduceScatter)(const void*, void*, size_t, int dtype, int op, void* comm, void* stream) = nullptr;
  Result_ (*AllGather)(const void*, void*, size_t, int dtype, void* comm, void* stream) = nullptr;
  Result_ (*Broadcast)(const void*, void*, size_t, int dtype, int root, void* comm, void* stream) = nullptr;
  Result_ (*Send)(const void*, size_t, int dtype, int peer, void* comm, void* stream) = nullptr;
  Result_ (*Recv)(void*, size_t, int dtype, int peer, void* comm, void* stream) = nullptr;
  Result_ (*GroupStart)() = nullptr;
  Result_ (*GroupEnd)() = nullptr;
  const char* (*GetErrorString)(Result_) = nullptr;

 private:
  CclLibrary() = default;
  void* handle_ = nullptr;
  std::string name_, prefix_;
  int version_ = 0;
};

// NCCL's enum values for our types/operations. -1 when the CCL has no such type.
int CclDataType(DType t);
int CclRedOp(RedOp op);  // avg maps to ncclAvg (calls go through CclComm::Op)

// One communicator of the CCL over the ranks of one island. Created collectively by the island's
// members: member 0 makes the unique id and publishes it in the store under `key`.
class CclComm {
 public:
  static Result<std::unique_ptr<CclComm>> Create(std::shared_ptr<CclLibrary> lib, StoreClient* store,
                                                 const std::string& key, int nranks, int rank,
                                                 std::chrono::milliseconds timeout);
  ~CclComm();
  CclLibrary& lib() { return *lib_; }
  void* handle() { return comm_; }
  int nranks() const { return nranks_; }
  // The CCL's operation for `op` on this communicator. Avg on a communicator of one rank is sent as sum
  // (the same value, exactly): NCCL before 2.29.7 leaves the last elements of a one-rank avg unwritten at
  // some counts (NVIDIA/nccl#1950; bench/gpu/one_rank_avg's cases and findings: docs/benchmarks.md).
  // Use this, not CclRedOp, for every call.
  int Op(RedOp op) const { return CclRedOp(op == RedOp::kAvg && nranks_ == 1 ? RedOp::kSum : op); }
  // An error when the CCL reported an asynchronous failure (a peer died, a kernel faulted).
  Status AsyncError();
  // Abandons the communicator (after a failure): the destructor then aborts instead of destroying.
  void MarkFailed() { failed_ = true; }
  // tsrCommAbort, from any thread: aborts the CCL communicator now (once; ends the CCL's pending work).
  // Nothing may call the CCL with it afterwards: Comm's abort flag stops calls before they reach it.
  void Abort() {
    if (!aborted_.exchange(true)) (void)lib_->CommAbort(comm_);
  }
  bool aborted() const { return aborted_.load(); }

 private:
  CclComm() = default;
  std::shared_ptr<CclLibrary> lib_;
  void* comm_ = nullptr;
  int nranks_ = 0;
  std::atomic<bool> failed_{false};   // AsyncError may run on another thread (tsrCommGetAsyncError)
  std::atomic<bool> aborted_{false};  // Abort ran: the handle is gone
};

}  // namespace tessera::comm
