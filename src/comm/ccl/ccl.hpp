// comm/ccl: the vendor collective library (CCL) adapter of device islands, loaded at run time.
//
// A CCL is loaded with dlopen, never linked, so libtessera and the tessera binary run on machines without
// it. Each library is ONE row of kCclTable below (CclRow), and the row carries what differs between
// libraries: file, symbol prefix, unique-id size, call shape (NCCL's, or HCCL's root info by pointer,
// uint64 counts and one-buffer broadcast), its data-type and reduce-op numbers, what it lacks (HCCL: avg)
// and where its group calls live. TESSERA_CCL picks a row by name; TESSERA_CCL_LIB / TESSERA_CCL_PREFIX
// point a row at another file / prefix without a rebuild.
//
// Tessera calls every library through ONE interface on its own types (CclLibrary: DType / RedOp in), one object
// per loaded library: the object of the row's shape (NCCL's in ccl.cpp, HCCL's in ccl_hccl.cpp) holds the
// library's symbols and translates types, ops, counts, ids and broadcast into its calls. Result codes stay the
// library's own (Check prints the library's string). No vendor header is needed to build.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "common/dl.hpp"
#include "common/dtype.hpp"
#include "tessera/status.hpp"

namespace tessera::comm {

class StoreClient;

inline constexpr int kCclTypes = static_cast<int>(DType::kCount);  // rows of a row's type table
inline constexpr int kCclOps = static_cast<int>(RedOp::kCount);    // rows of a row's op table
using CclTypeTable = std::array<int, kCclTypes>;                   // indexed by DType; -1: the library has none
using CclOpTable = std::array<int, kCclOps>;                       // indexed by RedOp; -1: the library has none

// NCCL's ncclDataType_t values (nccl.h, NCCL 2.28.9 as installed with CUDA 13.0 here: ncclInt8 0, ncclUint8 1,
// ncclInt32 2, ncclInt64 4, ncclFloat16 6, ncclFloat32 7, ncclFloat64 8, ncclBfloat16 9), in DType's order
// (int8, uint8, int32, int64, float16, bfloat16, float32, float64).
inline constexpr CclTypeTable kNcclTypes = {0, 1, 2, 4, 6, 9, 7, 8};
// NCCL's ncclRedOp_t values (nccl.h: ncclSum 0, ncclProd 1, ncclMax 2, ncclMin 3, ncclAvg 4), in RedOp's order.
inline constexpr CclOpTable kNcclOps = {0, 1, 2, 3, 4};
inline constexpr uint32_t TypeBit(DType t) { return 1u << static_cast<int>(t); }
inline constexpr uint32_t kAllCclTypes = (1u << kCclTypes) - 1;

// How a library is called.
enum class CclShape {
  kNccl,  // NCCL's calls under `prefix`: unique id by value (GetUniqueId / CommInitRank), size_t counts
  kHccl,  // HCCL's (hccl.h): HcclGetRootInfo / HcclCommInitRootInfo(nranks, const HcclRootInfo*, rank, &comm),
          // uint64_t counts, HcclBroadcast(buf, ...) in place, no abort, no version call; its object: ccl_hccl.cpp
};

// One collective library. The defaults are NCCL's, so {"name", "file", "prefix"} is an NCCL-shaped row.
struct CclRow {
  const char* name;    // what TESSERA_CCL selects, e.g. "nccl"
  const char* soname;  // what dlopen loads, e.g. "libnccl.so.2" (may be a path)
  const char* prefix;  // symbol prefix, e.g. "nccl" -> ncclAllReduce
  CclShape shape = CclShape::kNccl;
  size_t id_bytes = 128;                 // unique id / root info bytes (NCCL_UNIQUE_ID_BYTES, nccl.h)
  CclTypeTable types = kNcclTypes;       // the library's number of each DType, -1: none
  CclOpTable ops = kNcclOps;             // the library's number of each RedOp, -1: none (then: Unsupported)
  uint32_t reduce_types = kAllCclTypes;  // TypeBit(t) of the types its reductions take
  uint32_t prod_types = kAllCclTypes;    // ... and of those that prod takes
  bool broadcast_in_place_only = false;  // the library's broadcast has one buffer (the adapter copies first)
  bool has_groups = true;                // GroupStart / GroupEnd exist
  const char* group_soname = nullptr;    // the file that has them when not `soname` (looked up beside it first)
  int in_progress = 7;                   // CommGetAsyncError's "still running" value (ncclInProgress), -1: none
  bool has_avg() const { return ops[static_cast<int>(RedOp::kAvg)] >= 0; }
};

// The libraries this build knows. Only nccl has run on hardware (see docs/devices.md, "Vendors"); hccl and mccl
// are proven against the host ABI shims of tests/shims (tests/ccl).
inline constexpr CclRow kCclTable[] = {
    // NCCL: every value from nccl.h; run on an H200: see docs/benchmarks.md.
    {"nccl", "libnccl.so.2", "nccl"},
    // MCCL (Moore Threads): NCCL's API under the prefix "mccl" (torch_musa calls it with NCCL's argument order).
    // Soname: a public vLLM launch script sets VLLM_NCCL_SO_PATH=/usr/local/musa/lib/libmccl.so.2. Type and op
    // numbers: vllm_musa's pymccl.py (a port of pynccl that kept NCCL's numbers: corroborated, not proven);
    // 128-byte id: pymccl (c_byte * 128). mccl.h is not published: result codes, ncclInProgress = 7 and the
    // rest are ASSUMED to be NCCL's (tests/shims/mccl_abi.h marks each). bf16: torch_musa guards it with
    // MCCL_BF16_SUPPORTED (kept: the library is asked, and fails if it lacks it).
    {"mccl", "libmccl.so.2", "mccl"},
    // IXCCL (Iluvatar CoreX): NCCL's API under NCCL's own names (FlagOpen/FlagCX commit 6e336e33:
    // flagcx/adaptor/ixnccl_adaptor.cc includes nccl.h, calls ncclAllReduce, ncclGroupStart, ncclCommAbort, ... and
    // casts its types and ops to ncclDataType_t / ncclRedOp_t: NCCL's numbers). File: FlagCX's Makefile (commit
    // 0f337f76) links -lnccl from $(CCL_HOME)/lib, CCL_HOME /usr/local/corex. Id size, result codes and
    // ncclInProgress ASSUMED to be NCCL's, as its header is nccl.h.
    {"ixccl", "/usr/local/corex/lib/libnccl.so", "nccl"},
    // HCCL (Huawei Ascend): hccl_types.h / hccl.h as vendored by Ascend/pytorch third_party/hccl/inc/hccl
    // (commit c4840e3c, tests/shims/hccl_abi.h cites lines). Root info: HCCL_ROOT_INFO_BYTES = 4108 (types:104).
    // HcclDataType: INT8 0, INT32 2, FP16 3, FP32 4, INT64 5, UINT8 7, FP64 10, BFP16 11 (types:71-90).
    // HcclReduceOp: SUM 0, PROD 1, MAX 2, MIN 3, no avg (types:60-66): Tessera reduces with sum and scales
    // once (one rounding). Reductions take int8, int16, int32, int64, fp16, fp32, bfp16 and prod not bfp16
    // (CANN 8.5 HcclAllReduce / HcclReduceScatter pages, hiascend.com hcclcpp_07_0020 / _0024). Group calls:
    // torch_npu (HcclCompile.h) loads HcclGroupStart / HcclGroupEnd from libhcomm.so, the rest from libhccl.so.
    {.name = "hccl",
     .soname = "libhccl.so",
     .prefix = "Hccl",
     .shape = CclShape::kHccl,
     .id_bytes = 4108,
     .types = {0, 7, 2, 5, 3, 11, 4, 10},
     .ops = {0, 1, 2, 3, -1},
     .reduce_types = kAllCclTypes & ~TypeBit(DType::kUint8) & ~TypeBit(DType::kFloat64),
     .prod_types = kAllCclTypes & ~TypeBit(DType::kUint8) & ~TypeBit(DType::kFloat64) & ~TypeBit(DType::kBfloat16),
     .broadcast_in_place_only = true,
     .group_soname = "libhcomm.so",
     .in_progress = -1},  // HcclGetCommAsyncError has no "in progress" value (HcclResult, types:23-49)
};

// The row named `name` ("nccl", "mccl", "ixccl", "hccl"), or null. DeviceFamily::ccl (common/vendor.hpp) names one.
const CclRow* FindCclRow(std::string_view name);
// "nccl, mccl, ixccl, hccl": for messages.
std::string CclRowNames();

// NCCL's entry points as an NCCL-shaped library exports them (nccl.h's signatures, handles opaque, enums as int
// holding the row's numbers). The lean single-island allreduce path calls AllReduce through this pointer, and a
// benchmark may drive the library directly; everything else goes through CclLibrary's calls.
struct NcclCalls {
  struct UniqueId {  // ncclUniqueId: NCCL_UNIQUE_ID_BYTES (128) by value
    char internal[128];
  };
  int (*GetVersion)(int*) = nullptr;
  int (*GetUniqueId)(UniqueId*) = nullptr;
  int (*CommInitRank)(void** comm, int nranks, UniqueId id, int rank) = nullptr;
  int (*CommDestroy)(void* comm) = nullptr;
  int (*CommAbort)(void* comm) = nullptr;
  int (*CommGetAsyncError)(void* comm, int* err) = nullptr;
  int (*AllReduce)(const void*, void*, size_t, int dtype, int op, void* comm, void* stream) = nullptr;
  int (*ReduceScatter)(const void*, void*, size_t, int dtype, int op, void* comm, void* stream) = nullptr;
  int (*AllGather)(const void*, void*, size_t, int dtype, void* comm, void* stream) = nullptr;
  int (*Broadcast)(const void*, void*, size_t, int dtype, int root, void* comm, void* stream) = nullptr;
  int (*Send)(const void*, size_t, int dtype, int peer, void* comm, void* stream) = nullptr;
  int (*Recv)(void*, size_t, int dtype, int peer, void* comm, void* stream) = nullptr;
  int (*GroupStart)() = nullptr;
  int (*GroupEnd)() = nullptr;
  const char* (*GetErrorString)(int) = nullptr;
};

// One loaded collective library: an interface on Tessera's own types, as DeviceRuntime is for runtimes. Calls take
// DType / RedOp; the row's numbers, id size and call shape stay inside the object of its shape (ccl.cpp: NCCL's,
// for nccl and mccl; ccl_hccl.cpp: HCCL's). Each object holds its own symbols, so any number of libraries (or
// copies of one) can be loaded in a process. Every call returns the library's own result code (0: success), which
// Check turns into a Status naming the library's symbol.
class CclLibrary {
 public:
  using Result_ = int;                   // the library's own result type (ncclResult_t, HcclResult)
  using UniqueId = NcclCalls::UniqueId;  // NCCL's; rows whose id is larger (HCCL) use NewId / InitRank alone
  // Loads `row` (soname may be a path). Unsupported when the library or a symbol is missing.
  static Result<std::shared_ptr<CclLibrary>> Load(const CclRow& row);
  // The table row picked by TESSERA_CCL (when unset: `default_row`, the device family's DeviceFamily::ccl),
  // with TESSERA_CCL_LIB / TESSERA_CCL_PREFIX overriding its file and prefix.
  static Result<std::shared_ptr<CclLibrary>> LoadFromEnv(std::string_view default_row = "nccl");
  virtual ~CclLibrary();
  CclLibrary(const CclLibrary&) = delete;
  CclLibrary& operator=(const CclLibrary&) = delete;

  const std::string& name() const { return name_; }
  const std::string& prefix() const { return prefix_; }  // of its symbols: "nccl"
  const std::string& path() const { return soname_; }    // what was loaded
  const CclRow& row() const { return row_; }             // its soname/prefix point into this object
  int version() const { return version_; }
  size_t id_bytes() const { return row_.id_bytes; }
  // "nccl error 'unhandled cuda error' (1) in ncclAllReduce": `what` names the call (NCCL's name; the
  // message gives the library's symbol, e.g. HcclGetRootInfo for GetUniqueId).
  Status Check(Result_ r, const char* what) const;
  // The library's symbol for the call `what` ("AllReduce" -> "ncclAllReduce", "GetUniqueId" -> "HcclGetRootInfo").
  virtual std::string Symbol(const char* what) const = 0;

  // The library's own number of a type / op (the row's), or -1 when it has none.
  int DataType(DType t) const;
  int Op(RedOp op) const;
  bool has_avg() const { return row_.has_avg(); }
  // Ok, or Unsupported naming the library and the type (and op: a reduction) it lacks. Avg where the row
  // has none: "reduce with sum and scale once" (Tessera's avg rounds once).
  Status Supports(DType t) const;
  Status SupportsReduce(DType t, RedOp op) const;

  // A new unique id / root info (id_bytes() bytes), and a communicator from one.
  virtual Status NewId(std::string* id) const = 0;
  virtual Status InitRank(void** comm, int nranks, const std::string& id, int rank) const = 0;
  // Ends a communicator whose work is done (Destroy) or after a failure / tsrCommAbort (Abort). A library without
  // an abort (HCCL) first waits up to `timeout` for what is queued on the communicator, then destroys it, which
  // ends what still runs (see ccl_hccl.cpp). Ok when it was destroyed with nothing left running; else an error
  // naming the library and what happened (operations it ended, or that it could not be destroyed).
  virtual Status CommDestroy(void* comm, std::chrono::milliseconds timeout) const = 0;
  virtual Status CommAbort(void* comm, std::chrono::milliseconds timeout) const = 0;
  virtual Result_ CommGetAsyncError(void* comm, Result_* err) const = 0;

  // The calls, asynchronous on `stream`. A type or op the row lacks is the library's error (check Supports /
  // SupportsReduce first); HCCL's object refuses it without calling the library.
  virtual Result_ AllReduce(const void* send, void* recv, size_t count, DType t, RedOp op, void* comm,
                            void* stream) const = 0;
  virtual Result_ ReduceScatter(const void* send, void* recv, size_t recvcount, DType t, RedOp op, void* comm,
                                void* stream) const = 0;
  virtual Result_ AllGather(const void* send, void* recv, size_t sendcount, DType t, void* comm,
                            void* stream) const = 0;
  // NCCL's broadcast: `send` read on the root only; in place when send == recv.
  virtual Result_ Broadcast(const void* send, void* recv, size_t count, DType t, int root, void* comm,
                            void* stream) const = 0;
  virtual Result_ Send(const void* send, size_t count, DType t, int peer, void* comm, void* stream) const = 0;
  virtual Result_ Recv(void* recv, size_t count, DType t, int peer, void* comm, void* stream) const = 0;
  virtual Result_ GroupStart() const = 0;
  virtual Result_ GroupEnd() const = 0;

  // An NCCL-shaped library's own entry points (the lean path's raw pointer), or null for another shape.
  virtual const NcclCalls* nccl() const { return nullptr; }

  // The files a loader opened for a row, handed to the object of its shape.
  struct Files {
    dl::Library lib;    // the library
    dl::Library group;  // the file of its group calls (may be `lib`)
  };

 protected:
  CclLibrary(const CclRow& row, const Files& files);
  virtual const char* ErrorString(Result_ r) const = 0;
  // Binds `fn` to the symbol prefix + `name` of `lib` (the library or its group file), or Unsupported naming the
  // symbol, the file and TESSERA_CCL_LIB (common/dl).
  template <typename F>
  Status Bind(F& fn, const char* name, const dl::Library& lib) const {
    return lib.Bind(fn, prefix_ + name);
  }
  const Files& files() const { return files_; }
  int version_ = 0;

 private:
  std::string name_, soname_, prefix_;
  CclRow row_{};
  Files files_;
};

// One communicator of the CCL over the ranks of one island. Created collectively by the island's
// members: member 0 makes the unique id (root info: id_bytes of its row) and publishes it in the store under `key`.
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
  // some counts (NVIDIA/nccl#1950; bench/gpu/one_rank_avg's cases and findings:
  // bench/results/log/2026-11-29-gpu-runs-late.md).
  // Use this for every reduction's op (the library refuses an op its row lacks, HCCL's avg: check
  // lib().SupportsReduce first).
  RedOp Op(RedOp op) const { return op == RedOp::kAvg && nranks_ == 1 ? RedOp::kSum : op; }
  // An error when the CCL reported an asynchronous failure (a peer died, a kernel faulted).
  Status AsyncError();
  // Abandons the communicator (after a failure): the destructor then aborts instead of destroying.
  void MarkFailed() { failed_ = true; }
  // tsrCommAbort, from any thread: aborts the CCL communicator now (once; ends the CCL's pending work, or for a
  // library without an abort waits for it within the communicator's timeout, then destroys it:
  // CclLibrary::CommAbort). Returns within about that timeout. Nothing may call the CCL with it afterwards: Comm's
  // abort flag stops calls before they reach it. Abort logs a warning when the end was not clean; AbortAndReport
  // returns it: Ok, or an error naming the library, the island's communicator (its store key) and what happened.
  void Abort() { (void)AbortAndReport(); }
  Status AbortAndReport();
  bool aborted() const { return aborted_.load(); }

 private:
  CclComm() = default;
  std::shared_ptr<CclLibrary> lib_;
  void* comm_ = nullptr;
  int nranks_ = 0;
  std::chrono::milliseconds timeout_{0};  // the world's: bounds the wait of a library without an abort
  std::string key_;                       // the store key of its unique id: names the island in messages
  // "the LIB communicator of store key KEY", for the messages of its end.
  std::string Which() const;
  std::atomic<bool> failed_{false};   // AsyncError may run on another thread (tsrCommGetAsyncError)
  std::atomic<bool> aborted_{false};  // Abort ran: the handle is gone
};

}  // namespace tessera::comm
