// tests/shims/cuda/hccl_nccl_shim: libhccl.so on NCCL, a test-only ABI shim of Huawei's HCCL for a GPU machine
// (declarations and their sources: ../hccl_abi.h). Same exports, signatures and values as the host shim
// (../hccl_shim.cpp, whose header cites the documented rules as [types], [same], [root]); the collectives are
// NCCL's, on the caller's stream: an aclrtStream of the CUDA-backed libascendcl.so is a cudaStream_t (NULL: CUDA's
// legacy default stream). NCCL values are nccl.h's (2.28.9, /usr/local/cuda/include/nccl.h; "nccl:N" = line N).
//   HcclGetRootInfo        ncclGetUniqueId (nccl:157), its 128 bytes at the start of the zeroed 4108-byte root info
//   HcclCommInitRootInfo   ncclCommInitRank (nccl:171) on the thread's ACL device (aclrtGetDevice; none:
//                          HCCL_E_RUNTIME, as the host shim), plus one int of device memory for HcclBarrier
//   HcclAllReduce, HcclReduceScatter, HcclAllGather, HcclBroadcast (in place: ncclBroadcast(buf, buf)), HcclSend,
//   HcclRecv               ncclAllReduce, ncclReduceScatter, ncclAllGather, ncclBroadcast, ncclSend, ncclRecv
//                          (nccl:401-526); HcclBarrier: ncclAllReduce of that int (sum)
//   HcclGetRankSize / Id   ncclCommCount / ncclCommUserRank (nccl:253, 261)
//   HcclGetCommAsyncError  ncclCommGetAsyncError (nccl:249), mapped below (ncclInProgress: HCCL_SUCCESS)
//   HcclCommDestroy        waits up to TESSERA_SHIM_TIMEOUT_MS (5000) for the communicator's queued operations (an
//                          event per stream, recorded after each operation or at the group's end), then
//                          ncclCommDestroy (nccl:192); an asynchronous error: ncclCommAbort (nccl:197) and
//                          HCCL_SUCCESS; the time runs out: ncclCommAbort and HCCL_E_TIMEOUT, as the host shim
//   HcclGroupStart / End   ncclGroupStart / ncclGroupEnd (nccl:558, 568); libhcomm.so forwards to these
// Numbers: HcclDataType (types:71-90) -> ncclDataType_t (nccl:300-312): INT8 0 -> ncclInt8 0, INT32 2 -> ncclInt32
// 2, FP16 3 -> ncclFloat16 6, FP32 4 -> ncclFloat32 7, INT64 5 -> ncclInt64 4, UINT64 6 -> ncclUint64 5, UINT8 7 ->
// ncclUint8 1, UINT32 9 -> ncclUint32 3, FP64 10 -> ncclFloat64 8, BFP16 11 -> ncclBfloat16 9; INT16 1 and UINT16 8
// (NCCL has no 16-bit integers) move as ncclUint8, twice the count. HcclReduceOp (types:60-66) SUM 0, PROD 1, MAX
// 2, MIN 3 -> ncclSum 0, ncclProd 1, ncclMax 2, ncclMin 3 (nccl:282-285). Rejected as hccl_shim.cpp does:
// reductions of uint8/16/32/64 and fp64 and prod of int16/bfp16 (HCCL_E_NOT_SUPPORT), types HCCL numbers but these
// calls do not take (12, 14-17: HCCL_E_NOT_SUPPORT), other numbers (HCCL_E_PARA), ops outside 0..3 (HCCL_E_PARA).
// 16-bit reductions are NCCL's: its ring and tree kernels round to fp16 / bf16 at every add (__hadd2), as HCCL's
// native-type accumulation does and as the host shim models in a fixed ring order; NCCL's order depends on its
// algorithm, protocol and channels, and NVLS accumulates in f32 within a node (NCCL_NVLS_ENABLE=0 keeps per-hop).
// Not kept on NCCL: reductions of int16, which HCCL supports (NCCL cannot: HCCL_E_NOT_SUPPORT); [same] (ranks that
// disagree on count, type or op are not detected: NCCL hangs or reads past the buffer); buffers are checked to be
// device memory of the communicator's device (aclrtPointerGetAttributes) but not for their size; a stream handle
// is not checked to be a live ACL stream; messages go to stderr with TESSERA_SHIM_VERBOSE=1, not to
// aclGetRecentErrMsg (libascendcl.so exports only the ACL API).
// ncclResult_t (nccl:42-50) -> HcclResult (types:23-49): ncclSuccess -> HCCL_SUCCESS, ncclUnhandledCudaError ->
// HCCL_E_RUNTIME, ncclSystemError -> HCCL_E_SYSCALL, ncclInternalError -> HCCL_E_INTERNAL, ncclInvalidArgument and
// ncclInvalidUsage -> HCCL_E_PARA, ncclRemoteError -> HCCL_E_REMOTE, ncclInProgress -> HCCL_E_AGAIN, any other ->
// HCCL_E_INTERNAL.
#include <cuda_runtime_api.h>
#include <nccl.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include "../acl_abi.h"
#include "../hccl_abi.h"
#include "../hccl_rules.hpp"
#include "../shim_runtime.hpp"

using tshim::Fmt;

static_assert(sizeof(ncclUniqueId) <= HCCL_ROOT_INFO_BYTES, "an ncclUniqueId fits in an HcclRootInfo");

namespace {

HcclResult Fail(HcclResult code, const std::string& msg) {
  const char* v = std::getenv("TESSERA_SHIM_VERBOSE");
  if (v && *v && std::strcmp(v, "0") != 0)
    std::fprintf(stderr, "[hccl nccl shim] %s (HcclResult %d)\n", msg.c_str(), code);
  return code;
}

HcclResult ToHccl(ncclResult_t r) {  // the mapping of the header
  switch (r) {
    case ncclSuccess:
      return HCCL_SUCCESS;
    case ncclUnhandledCudaError:
      return HCCL_E_RUNTIME;
    case ncclSystemError:
      return HCCL_E_SYSCALL;
    case ncclInvalidArgument:
    case ncclInvalidUsage:
      return HCCL_E_PARA;
    case ncclRemoteError:
      return HCCL_E_REMOTE;
    case ncclInProgress:
      return HCCL_E_AGAIN;
    default:
      return HCCL_E_INTERNAL;
  }
}

HcclResult FailNccl(const char* fn, const char* call, ncclResult_t r, ncclComm_t comm) {
  const char* last = ncclGetLastError(comm);
  return Fail(ToHccl(r),
              Fmt("%s: %s: %s%s%s", fn, call, ncclGetErrorString(r), last && *last ? ": " : "", last ? last : ""));
}

struct CommObj {
  ncclComm_t nccl = nullptr;
  int nranks = 0;
  int device = -1;         // the ACL device
  int* barrier = nullptr;  // one int of device memory (HcclBarrier)
  std::mutex mu;
  std::unordered_map<cudaStream_t, cudaEvent_t> last;  // per stream: recorded after its latest operation
};
std::mutex g_mu;
std::unordered_map<void*, std::shared_ptr<CommObj>> g_comms;

std::shared_ptr<CommObj> Find(HcclComm comm, bool remove = false) {
  std::lock_guard<std::mutex> l(g_mu);
  auto it = comm ? g_comms.find(comm) : g_comms.end();
  if (it == g_comms.end()) return nullptr;
  auto obj = it->second;
  if (remove) g_comms.erase(it);
  return obj;
}

thread_local int t_group = 0;  // open HcclGroupStart calls on this thread
thread_local std::vector<std::pair<std::shared_ptr<CommObj>, cudaStream_t>> t_grouped;  // their operations

// The stream's event, recorded after the operation just queued (or, in a group, once the group is launched).
void RecordLast(CommObj& c, cudaStream_t s) {
  std::lock_guard<std::mutex> l(c.mu);
  cudaEvent_t& e = c.last[s];
  if ((!e && cudaEventCreateWithFlags(&e, cudaEventDisableTiming) != cudaSuccess) ||
      cudaEventRecord(e, s) != cudaSuccess)
    (void)cudaGetLastError();  // HcclCommDestroy then waits only for what it could record
}

struct Type {
  ncclDataType_t nccl = ncclUint8;
  size_t size = 1;   // bytes of one HCCL element
  size_t scale = 1;  // NCCL elements per HCCL element (2: a 16-bit integer moved as bytes)
};

// HCCL's type numbers -> NCCL's (the table of the header); `reduce` asks for the reduction set [types].
HcclResult MapType(const char* fn, HcclDataType t, bool reduce, Type* out) {
  struct Row {
    int nccl;  // -1: no NCCL type, moved as bytes
    size_t size;
    bool reduce;
  };
  static const Row kRows[] = {
      {ncclInt8, 1, true},    {-1, 2, false},         {ncclInt32, 4, true},    {ncclFloat16, 2, true},
      {ncclFloat32, 4, true}, {ncclInt64, 8, true},   {ncclUint64, 8, false},  {ncclUint8, 1, false},
      {-1, 2, false},         {ncclUint32, 4, false}, {ncclFloat64, 8, false}, {ncclBfloat16, 2, true},
  };  // indexed by HcclDataType 0..11 (types:71-83)
  const int i = static_cast<int>(t);
  if (i >= 0 && i <= HCCL_DATA_TYPE_BFP16 && (!reduce || kRows[i].reduce)) {
    const Row& r = kRows[i];
    *out = r.nccl < 0 ? Type{ncclUint8, r.size, r.size} : Type{static_cast<ncclDataType_t>(r.nccl), r.size, 1};
    return HCCL_SUCCESS;
  }
  return Fail(
      tshim::hccl::TypeCode(i),
      Fmt("%s: data type %d is not supported%s", fn, i,
          reduce ? " by reductions (int8, int32, int64, fp16, fp32, bfp16; int16 is HCCL's but not NCCL's)" : ""));
}

struct Checked {
  std::shared_ptr<CommObj> comm;
  cudaStream_t stream = nullptr;
  Type type;
  ncclRedOp_t op = ncclSum;
};

// hccl_shim.cpp's Check: the communicator, the type, the op, in that order and with its codes.
HcclResult Check(const char* fn, HcclComm comm, aclrtStream stream, HcclDataType t, bool reduce, const int* op,
                 Checked* out) {
  out->comm = Find(comm);
  if (!out->comm) return Fail(comm ? HCCL_E_PARA : HCCL_E_PTR, Fmt("%s: comm %p is not a live communicator", fn, comm));
  out->stream = static_cast<cudaStream_t>(stream);
  if (HcclResult e = MapType(fn, t, reduce, &out->type)) return e;
  if (op) {
    if (HcclResult e = tshim::hccl::CheckOp(fn, t, *op, Fail)) return e;
    out->op = static_cast<ncclRedOp_t>(*op);  // HCCL's 0..3 are NCCL's sum, prod, max, min
  }
  return HCCL_SUCCESS;
}

struct Buf {
  const void* p;
  size_t bytes;
};
HcclResult CheckBufs(const char* fn, const Checked& c, std::initializer_list<std::pair<const char*, Buf>> bufs) {
  for (const auto& [name, b] : bufs) {
    if (!b.p) return Fail(HCCL_E_PTR, Fmt("%s: %s is NULL", fn, name));
    if (b.bytes == 0) continue;
    aclrtPtrAttributes a{};
    if (aclrtPointerGetAttributes(b.p, &a) != ACL_SUCCESS) {
      const char* m = aclGetRecentErrMsg();
      return Fail(HCCL_E_PARA, Fmt("%s: %s %p: %s", fn, name, b.p, m ? m : "aclrtPointerGetAttributes failed"));
    }
    if (a.location.type != ACL_MEM_LOCATION_TYPE_DEVICE)
      return Fail(HCCL_E_PARA,
                  Fmt("%s: %s %p is %s, not device memory", fn, name, b.p,
                      a.location.type == ACL_MEM_LOCATION_TYPE_HOST ? "pinned host memory" : "host memory"));
    if (static_cast<int>(a.location.id) != c.comm->device)
      return Fail(HCCL_E_PARA, Fmt("%s: %s %p is memory of device %u, the communicator's device is %d", fn, name, b.p,
                                   a.location.id, c.comm->device));
  }
  return HCCL_SUCCESS;
}

// After an NCCL call: its error, or the operation remembered for HcclCommDestroy.
HcclResult Queued(const char* fn, const char* call, const Checked& c, ncclResult_t r) {
  if (r != ncclSuccess) return FailNccl(fn, call, r, c.comm->nccl);
  if (t_group > 0)
    t_grouped.emplace_back(c.comm, c.stream);
  else
    RecordLast(*c.comm, c.stream);
  return HCCL_SUCCESS;
}
#define HCCL_QUEUE(fn, c, call) Queued(fn, #call, c, call)

HcclResult PointToPoint(const char* fn, bool send, void* buf, uint64_t count, HcclDataType t, uint32_t peer,
                        HcclComm comm, aclrtStream stream) {
  Checked c;
  if (HcclResult e = Check(fn, comm, stream, t, false, nullptr, &c)) return e;
  if (HcclResult e = tshim::hccl::CheckRank(fn, "peer", peer, c.comm->nranks, Fail)) return e;
  if (HcclResult e = CheckBufs(fn, c, {{send ? "sendBuf" : "recvBuf", {buf, count * c.type.size}}})) return e;
  const size_t n = count * c.type.scale;
  const int p = static_cast<int>(peer);
  return send ? HCCL_QUEUE(fn, c, ncclSend(buf, n, c.type.nccl, p, c.comm->nccl, c.stream))
              : HCCL_QUEUE(fn, c, ncclRecv(buf, n, c.type.nccl, p, c.comm->nccl, c.stream));
}

}  // namespace

extern "C" {

HCCL_ABI_EXPORT HcclResult HcclGetRootInfo(HcclRootInfo* rootInfo) {
  if (!rootInfo) return Fail(HCCL_E_PTR, "HcclGetRootInfo: rootInfo is NULL");
  ncclUniqueId id;
  if (ncclResult_t r = ncclGetUniqueId(&id)) return FailNccl("HcclGetRootInfo", "ncclGetUniqueId", r, nullptr);
  std::memset(rootInfo->internal, 0, sizeof rootInfo->internal);
  std::memcpy(rootInfo->internal, &id, sizeof id);
  return HCCL_SUCCESS;
}

HCCL_ABI_EXPORT HcclResult HcclCommInitRootInfo(uint32_t nRanks, const HcclRootInfo* rootInfo, uint32_t rank,
                                                HcclComm* comm) {
  if (!rootInfo || !comm) return Fail(HCCL_E_PTR, "HcclCommInitRootInfo: rootInfo or comm is NULL");
  if (nRanks == 0 || rank >= nRanks || nRanks > 0x7fffffffu)
    return Fail(HCCL_E_PARA, Fmt("HcclCommInitRootInfo: rank %u is not in [0, nRanks %u)", rank, nRanks));
  auto c = std::make_shared<CommObj>();
  int32_t device = -1;
  if (aclrtGetDevice(&device) != ACL_SUCCESS)  // ASSUMPTION (the host shim's): HCCL needs aclrtSetDevice's context
    return Fail(HCCL_E_RUNTIME, "HcclCommInitRootInfo: no ACL device is set on this thread (aclrtSetDevice)");
  c->device = device;
  c->nranks = static_cast<int>(nRanks);
  if (const cudaError_t e = cudaMalloc(&c->barrier, sizeof(int)); e != cudaSuccess) {
    (void)cudaGetLastError();
    return Fail(HCCL_E_MEMORY, Fmt("HcclCommInitRootInfo: cudaMalloc: %s", cudaGetErrorString(e)));
  }
  ncclUniqueId id;
  std::memcpy(&id, rootInfo->internal, sizeof id);
  if (ncclResult_t r = ncclCommInitRank(&c->nccl, c->nranks, id, static_cast<int>(rank))) {
    (void)cudaFree(c->barrier);
    return FailNccl("HcclCommInitRootInfo", "ncclCommInitRank", r, nullptr);
  }
  std::lock_guard<std::mutex> l(g_mu);
  *comm = c.get();
  g_comms[c.get()] = c;
  return HCCL_SUCCESS;
}

HCCL_ABI_EXPORT HcclResult HcclCommDestroy(HcclComm comm) {
  auto c = Find(comm, true);
  if (!c) return Fail(comm ? HCCL_E_PARA : HCCL_E_PTR, Fmt("HcclCommDestroy: %p is not a live communicator", comm));
  const char* v = std::getenv("TESSERA_SHIM_TIMEOUT_MS");
  const long ms = v && *v ? std::strtol(v, nullptr, 10) : 5000;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
  HcclResult result = HCCL_SUCCESS;
  bool abort = false;
  for (;;) {
    bool pending = false;
    {
      std::lock_guard<std::mutex> l(c->mu);
      for (auto& [s, e] : c->last) {
        const cudaError_t q = cudaEventQuery(e);
        if (q == cudaErrorNotReady) pending = true;
        if (q != cudaSuccess) (void)cudaGetLastError();
      }
    }
    ncclResult_t async = ncclSuccess;
    if (ncclCommGetAsyncError(c->nccl, &async) != ncclSuccess || (async != ncclSuccess && async != ncclInProgress)) {
      abort = true;  // the communicator failed: its operations will not finish
      break;
    }
    if (!pending) break;
    if (std::chrono::steady_clock::now() > deadline) {
      abort = true;
      result = Fail(HCCL_E_TIMEOUT, "HcclCommDestroy: queued operations did not finish; the communicator was aborted");
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  if (ncclResult_t r = abort ? ncclCommAbort(c->nccl) : ncclCommDestroy(c->nccl); r && result == HCCL_SUCCESS)
    result = FailNccl("HcclCommDestroy", abort ? "ncclCommAbort" : "ncclCommDestroy", r, nullptr);
  for (auto& [s, e] : c->last) (void)cudaEventDestroy(e);
  (void)cudaFree(c->barrier);
  (void)cudaGetLastError();
  return result;
}

HCCL_ABI_EXPORT HcclResult HcclGetRankSize(HcclComm comm, uint32_t* rankSize) {
  auto c = Find(comm);
  if (!c || !rankSize) return Fail(HCCL_E_PTR, "HcclGetRankSize: bad comm or rankSize");
  int n = 0;
  if (ncclResult_t r = ncclCommCount(c->nccl, &n)) return FailNccl("HcclGetRankSize", "ncclCommCount", r, c->nccl);
  *rankSize = static_cast<uint32_t>(n);
  return HCCL_SUCCESS;
}

HCCL_ABI_EXPORT HcclResult HcclGetRankId(HcclComm comm, uint32_t* rank) {
  auto c = Find(comm);
  if (!c || !rank) return Fail(HCCL_E_PTR, "HcclGetRankId: bad comm or rank");
  int r = 0;
  if (ncclResult_t e = ncclCommUserRank(c->nccl, &r)) return FailNccl("HcclGetRankId", "ncclCommUserRank", e, c->nccl);
  *rank = static_cast<uint32_t>(r);
  return HCCL_SUCCESS;
}

HCCL_ABI_EXPORT HcclResult HcclGetCommAsyncError(HcclComm comm, HcclResult* asyncError) {
  auto c = Find(comm);
  if (!c || !asyncError) return Fail(HCCL_E_PTR, "HcclGetCommAsyncError: bad comm or asyncError");
  ncclResult_t async = ncclSuccess;
  if (ncclResult_t r = ncclCommGetAsyncError(c->nccl, &async))
    return FailNccl("HcclGetCommAsyncError", "ncclCommGetAsyncError", r, c->nccl);
  *asyncError = async == ncclInProgress ? HCCL_SUCCESS : ToHccl(async);  // HCCL has no "in progress"
  return HCCL_SUCCESS;
}

HCCL_ABI_EXPORT const char* HcclGetErrorString(HcclResult code) { return tshim::hccl::ErrorName(code); }

HCCL_ABI_EXPORT HcclResult HcclAllReduce(void* sendBuf, void* recvBuf, uint64_t count, HcclDataType dataType,
                                         HcclReduceOp op, HcclComm comm, aclrtStream stream) {
  Checked c;
  const int o = static_cast<int>(op);
  if (HcclResult e = Check("HcclAllReduce", comm, stream, dataType, true, &o, &c)) return e;
  const size_t bytes = count * c.type.size;
  if (HcclResult e = CheckBufs("HcclAllReduce", c, {{"sendBuf", {sendBuf, bytes}}, {"recvBuf", {recvBuf, bytes}}}))
    return e;
  return HCCL_QUEUE("HcclAllReduce", c,
                    ncclAllReduce(sendBuf, recvBuf, count, c.type.nccl, c.op, c.comm->nccl, c.stream));
}

HCCL_ABI_EXPORT HcclResult HcclReduceScatter(void* sendBuf, void* recvBuf, uint64_t recvCount, HcclDataType dataType,
                                             HcclReduceOp op, HcclComm comm, aclrtStream stream) {
  Checked c;
  const int o = static_cast<int>(op);
  if (HcclResult e = Check("HcclReduceScatter", comm, stream, dataType, true, &o, &c)) return e;
  const size_t bytes = recvCount * c.type.size, n = static_cast<size_t>(c.comm->nranks);
  if (HcclResult e =
          CheckBufs("HcclReduceScatter", c, {{"sendBuf", {sendBuf, bytes * n}}, {"recvBuf", {recvBuf, bytes}}}))
    return e;
  return HCCL_QUEUE("HcclReduceScatter", c,
                    ncclReduceScatter(sendBuf, recvBuf, recvCount, c.type.nccl, c.op, c.comm->nccl, c.stream));
}

HCCL_ABI_EXPORT HcclResult HcclAllGather(void* sendBuf, void* recvBuf, uint64_t sendCount, HcclDataType dataType,
                                         HcclComm comm, aclrtStream stream) {
  Checked c;
  if (HcclResult e = Check("HcclAllGather", comm, stream, dataType, false, nullptr, &c)) return e;
  const size_t bytes = sendCount * c.type.size, n = static_cast<size_t>(c.comm->nranks);
  if (HcclResult e = CheckBufs("HcclAllGather", c, {{"sendBuf", {sendBuf, bytes}}, {"recvBuf", {recvBuf, bytes * n}}}))
    return e;
  return HCCL_QUEUE("HcclAllGather", c,
                    ncclAllGather(sendBuf, recvBuf, sendCount * c.type.scale, c.type.nccl, c.comm->nccl, c.stream));
}

HCCL_ABI_EXPORT HcclResult HcclBroadcast(void* buf, uint64_t count, HcclDataType dataType, uint32_t root, HcclComm comm,
                                         aclrtStream stream) {
  Checked c;
  if (HcclResult e = Check("HcclBroadcast", comm, stream, dataType, false, nullptr, &c)) return e;
  if (HcclResult e = tshim::hccl::CheckRank("HcclBroadcast", "root", root, c.comm->nranks, Fail)) return e;
  if (HcclResult e = CheckBufs("HcclBroadcast", c, {{"buf", {buf, count * c.type.size}}})) return e;
  return HCCL_QUEUE(
      "HcclBroadcast", c,
      ncclBroadcast(buf, buf, count * c.type.scale, c.type.nccl, static_cast<int>(root), c.comm->nccl, c.stream));
}

HCCL_ABI_EXPORT HcclResult HcclBarrier(HcclComm comm, aclrtStream stream) {
  Checked c;
  if (HcclResult e = Check("HcclBarrier", comm, stream, HCCL_DATA_TYPE_INT8, false, nullptr, &c)) return e;
  return HCCL_QUEUE("HcclBarrier", c,
                    ncclAllReduce(c.comm->barrier, c.comm->barrier, 1, ncclInt32, ncclSum, c.comm->nccl, c.stream));
}

HCCL_ABI_EXPORT HcclResult HcclSend(void* sendBuf, uint64_t count, HcclDataType dataType, uint32_t destRank,
                                    HcclComm comm, aclrtStream stream) {
  return PointToPoint("HcclSend", true, sendBuf, count, dataType, destRank, comm, stream);
}

HCCL_ABI_EXPORT HcclResult HcclRecv(void* recvBuf, uint64_t count, HcclDataType dataType, uint32_t srcRank,
                                    HcclComm comm, aclrtStream stream) {
  return PointToPoint("HcclRecv", false, recvBuf, count, dataType, srcRank, comm, stream);
}

HCCL_ABI_EXPORT HcclResult HcclGroupStart() {
  if (ncclResult_t r = ncclGroupStart()) return FailNccl("HcclGroupStart", "ncclGroupStart", r, nullptr);
  ++t_group;
  return HCCL_SUCCESS;
}

HCCL_ABI_EXPORT HcclResult HcclGroupEnd() {
  if (t_group == 0) return Fail(HCCL_E_PARA, "HcclGroupEnd: no HcclGroupStart is open on this thread");
  --t_group;
  const ncclResult_t r = ncclGroupEnd();
  if (t_group == 0) {  // the group's operations are queued now (or failed)
    if (r == ncclSuccess)
      for (auto& [c, s] : t_grouped) RecordLast(*c, s);
    t_grouped.clear();
  }
  return r ? FailNccl("HcclGroupEnd", "ncclGroupEnd", r, nullptr) : HCCL_SUCCESS;
}

}  // extern "C"
