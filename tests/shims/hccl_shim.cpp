// tests/shims/hccl_shim: libhccl.so, a test-only host shim of Huawei's HCCL (declarations and their sources:
// hccl_abi.h). Communicators are shim_coll's shared-memory engine among processes; operations run on the ACL
// shim's streams (libascendcl.so, reached through tesseraAclShimHooks). The rules modelled are the documented ones
// for the Atlas A2 training series (the SoC the ACL shim reports, Ascend910B1), CANN 8.5.0:
//   [types]  HcclAllReduce https://www.hiascend.com/document/detail/zh/CANNCommunityEdition/850alpha002/API/
//            hcclapiref/hcclcpp_07_0020.html and HcclReduceScatter .../canncommercial/850/API/hcclapiref/
//            hcclcpp_07_0024.html: reductions take int8, int16, int32, int64, float16, float32, bfp16; ops sum,
//            prod, max, min; "prod" does not support int16 and bfp16. HcclBroadcast, HcclAllGather, HcclSend and
//            HcclRecv take the twelve types hccl.h lists for them (hccl:139-140, 205-206, 263-264, 277-278).
//   [same]   "all ranks' count, dataType, op must be the same" (both pages): the shim checks it and fails.
//   [destroy] HcclCommDestroy, .../canncommercial/800/apiref/hcclapiref/hcclcpp_07_0010.html (the same text in
//            CANN 8.5.0 and in the open hcomm repository's docs, gitcode.com/cann/hcomm): it may be called from
//            another thread. While a thread is inside a call on the communicator ("occupied": hcomm's op_base
//            holds the state INUSE for the length of each operation's host call) it returns HCCL_E_AGAIN, logging
//            "[HcclCommDestroy] comm is in use, please try again later", and destroys nothing. Otherwise it
//            destroys the communicator, and "the communication operator that is being executed exits without
//            waiting for the timeout and reports an error" ("Terminating operation due to external request").
//            HCCL has no abort call (hccl.h, hcomm's include/hccl/hccl_comm.h: HcclCommSuspend/HcclCommResume
//            are reserved, for on-chip memory faults, and need aclrtDeviceTaskAbort of the whole device).
//   [root]   HcclCommInitRootInfo, .../canncommercial/800/apiref/hcclapiref/hcclcpp_07_0006.html: nRanks and
//            rootInfo equal on every rank; HcclGetRootInfo (hcclcpp_07_0005) is called on the root rank only.
// Codes for violations the docs do not number are the shim's choice: HCCL_E_PTR for NULL pointers, HCCL_E_PARA
// for other bad arguments and for disagreeing ranks, HCCL_E_NOT_SUPPORT for an unsupported type/op pair,
// HCCL_E_TIMEOUT when peers make no progress within TESSERA_SHIM_TIMEOUT_MS, HCCL_E_REMOTE when a peer's process
// died or a peer failed. A failed operation also fails its ACL stream: aclrtSynchronizeStream returns
// ACL_ERROR_RT_SUSPECT_REMOTE_ERROR (peer dead or failed), ACL_ERROR_RT_TASK_TIMEOUT (timeout) or
// ACL_ERROR_RT_INTERNAL_ERROR, and HcclGetCommAsyncError reports the HCCL code. Messages: aclGetRecentErrMsg.
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <thread>

#include "acl_abi.h"
#include "hccl_abi.h"
#include "hccl_rules.hpp"
#include "shim_ccl.hpp"

extern "C" const tshim::RuntimeHooks* tesseraAclShimHooks();  // libascendcl.so

using tshim::Fmt;
using tshim::ccl::Buf;
using tshim::ccl::Pending;
namespace coll = tshim::coll;

namespace {

struct CommObj {
  std::shared_ptr<coll::Comm> comm;
  std::atomic<int> in_use{0};  // threads inside a call on it ([destroy]: hcomm's state INUSE)
};
tshim::Handles<CommObj> g_comms;

const tshim::RuntimeHooks* Acl() {
  static const tshim::RuntimeHooks* h = tesseraAclShimHooks();
  return h;
}

HcclResult Fail(HcclResult code, const std::string& msg) {
  Acl()->set_error(Fmt("%s (HcclResult %d)", msg.c_str(), code));
  if (tshim::EnvU64("TESSERA_SHIM_VERBOSE", 0)) std::fprintf(stderr, "[hccl shim] %s\n", msg.c_str());
  return code;
}

HcclResult ToHccl(coll::Err e) {
  switch (e) {
    case coll::Err::kOk:
      return HCCL_SUCCESS;
    case coll::Err::kInvalid:
      return HCCL_E_PARA;
    case coll::Err::kTimeout:
      return HCCL_E_TIMEOUT;
    case coll::Err::kPeerDead:
    case coll::Err::kRemoteAbort:
      return HCCL_E_REMOTE;
    case coll::Err::kAborted:
      return HCCL_E_INTERNAL;
    case coll::Err::kSystem:
      return HCCL_E_SYSCALL;
  }
  return HCCL_E_INTERNAL;
}

int StreamCode(coll::Err e) {
  if (e == coll::Err::kPeerDead || e == coll::Err::kRemoteAbort) return ACL_ERROR_RT_SUSPECT_REMOTE_ERROR;
  if (e == coll::Err::kTimeout) return ACL_ERROR_RT_TASK_TIMEOUT;
  return ACL_ERROR_RT_INTERNAL_ERROR;
}

// HCCL's type numbers -> the engine's; `reduce` asks for the reduction set [types].
bool MapType(HcclDataType t, bool reduce, coll::DType* out) {
  switch (t) {
    case HCCL_DATA_TYPE_INT8:
      return *out = coll::DType::kI8, true;
    case HCCL_DATA_TYPE_INT16:
      return *out = coll::DType::kI16, true;
    case HCCL_DATA_TYPE_INT32:
      return *out = coll::DType::kI32, true;
    case HCCL_DATA_TYPE_INT64:
      return *out = coll::DType::kI64, true;
    case HCCL_DATA_TYPE_FP16:
      return *out = coll::DType::kF16, true;
    case HCCL_DATA_TYPE_FP32:
      return *out = coll::DType::kF32, true;
    case HCCL_DATA_TYPE_BFP16:
      return *out = coll::DType::kBF16, true;
    case HCCL_DATA_TYPE_UINT8:
      return *out = coll::DType::kU8, !reduce;
    case HCCL_DATA_TYPE_UINT16:
      return *out = coll::DType::kU16, !reduce;
    case HCCL_DATA_TYPE_UINT32:
      return *out = coll::DType::kU32, !reduce;
    case HCCL_DATA_TYPE_UINT64:
      return *out = coll::DType::kU64, !reduce;
    case HCCL_DATA_TYPE_FP64:
      return *out = coll::DType::kF64, !reduce;
    default:
      return false;
  }
}

// Marks a communicator occupied for the length of an operation's host call ([destroy]).
struct InUse {
  std::shared_ptr<CommObj> obj;
  void Hold(std::shared_ptr<CommObj> o) {
    obj = std::move(o);
    ++obj->in_use;
  }
  InUse() = default;
  InUse(const InUse&) = delete;
  InUse& operator=(const InUse&) = delete;
  ~InUse() {
    if (obj) --obj->in_use;
  }
};

struct Checked {
  InUse in_use;
  std::shared_ptr<coll::Comm> comm;
  std::shared_ptr<tshim::Stream> stream;
  coll::DType type = coll::DType::kI8;
  coll::Op op = coll::Op::kSum;
};

HcclResult Check(const char* fn, HcclComm comm, aclrtStream stream, HcclDataType t, bool reduce, const int* op,
                 Checked* out) {
  auto obj = comm ? g_comms.Get(comm) : nullptr;
  if (!obj) return Fail(comm ? HCCL_E_PARA : HCCL_E_PTR, Fmt("%s: comm %p is not a live communicator", fn, comm));
  out->in_use.Hold(obj);
  // TESSERA_SHIM_HCCL_CALL_MS: each operation's host call keeps its communicator occupied this long (a slow host
  // call, for tests of HcclCommDestroy's HCCL_E_AGAIN).
  if (const uint64_t ms = tshim::EnvU64("TESSERA_SHIM_HCCL_CALL_MS", 0))
    std::this_thread::sleep_for(std::chrono::milliseconds(ms));
  out->comm = obj->comm;
  out->stream = Acl()->stream(stream);
  if (!out->stream) return Fail(HCCL_E_PARA, Fmt("%s: stream %p is not a live ACL stream", fn, stream));
  if (!MapType(t, reduce, &out->type))
    return Fail(tshim::hccl::TypeCode(t),
                Fmt("%s: data type %d is not supported%s", fn, static_cast<int>(t),
                    reduce ? " by reductions (int8, int16, int32, int64, fp16, fp32, bfp16)" : ""));
  if (op) {
    if (HcclResult e = tshim::hccl::CheckOp(fn, t, *op, Fail)) return e;
    out->op = static_cast<coll::Op>(*op);  // HCCL's 0..3 are the engine's sum, prod, max, min
  }
  return HCCL_SUCCESS;
}

HcclResult CheckBufs(const char* fn, const Checked& c, std::initializer_list<std::pair<const char*, Buf>> bufs) {
  for (const auto& [name, b] : bufs) {
    if (!b.p) return Fail(HCCL_E_PTR, Fmt("%s: %s is NULL", fn, name));
    std::string why = tshim::ccl::CheckBuf(Acl(), fn, name, b, c.comm->device());
    if (!why.empty()) return Fail(HCCL_E_PARA, why);
  }
  return HCCL_SUCCESS;
}

void Submit(const Checked& c, Pending p) {
  p.comm = c.comm;
  p.stream = c.stream;
  tshim::ccl::Submit(Acl(), std::move(p), StreamCode, "HCCL");
}

// A collective on resolved buffers.
template <typename F>
Pending Collective(Buf in, Buf out, F f) {
  Pending p;
  p.body = [in, out, f](coll::Comm& c) {
    char *i = nullptr, *o = nullptr;
    coll::Result r = tshim::ccl::Resolve(Acl(), in, &i);
    if (r.ok()) r = tshim::ccl::Resolve(Acl(), out, &o);
    return r.ok() ? f(c, i, o) : r;
  };
  return p;
}

}  // namespace

extern "C" {

HCCL_ABI_EXPORT HcclResult HcclGetRootInfo(HcclRootInfo* rootInfo) {
  if (!rootInfo) return Fail(HCCL_E_PTR, "HcclGetRootInfo: rootInfo is NULL");
  coll::MakeId(rootInfo->internal, sizeof rootInfo->internal);
  return HCCL_SUCCESS;
}

HCCL_ABI_EXPORT HcclResult HcclCommInitRootInfo(uint32_t nRanks, const HcclRootInfo* rootInfo, uint32_t rank,
                                                HcclComm* comm) {
  if (!rootInfo || !comm) return Fail(HCCL_E_PTR, "HcclCommInitRootInfo: rootInfo or comm is NULL");
  if (nRanks == 0 || rank >= nRanks)
    return Fail(HCCL_E_PARA, Fmt("HcclCommInitRootInfo: rank %u is not in [0, nRanks %u)", rank, nRanks));
  const int device = Acl()->current_device();
  if (device < 0)  // ASSUMPTION: HCCL needs the device context of aclrtSetDevice
    return Fail(HCCL_E_RUNTIME, "HcclCommInitRootInfo: no ACL device is set on this thread (aclrtSetDevice)");
  std::shared_ptr<coll::Comm> c;
  coll::Result r = coll::Comm::Create(rootInfo->internal, static_cast<int>(nRanks), static_cast<int>(rank), device, &c);
  if (!r.ok()) return Fail(ToHccl(r.err), "HcclCommInitRootInfo: " + r.msg);
  auto obj = std::make_shared<CommObj>();
  obj->comm = std::move(c);
  *comm = g_comms.Add(std::move(obj));
  return HCCL_SUCCESS;
}

// [destroy] From any thread. Occupied (a thread inside an operation's host call on it): HCCL_E_AGAIN, nothing
// destroyed. Else the communicator is destroyed, and its operations still queued or running on a stream fail at
// once, as HCCL's do ("Terminating operation due to external request"); the shim counts such destroys
// (tesseraHcclShimDestroyedInFlight) and says so on stderr. A communicator whose work has finished is destroyed
// quietly.
static std::atomic<uint64_t> g_destroyed_in_flight{0};

HCCL_ABI_EXPORT HcclResult HcclCommDestroy(HcclComm comm) {
  auto obj = comm ? g_comms.Get(comm) : nullptr;
  if (!obj) return Fail(comm ? HCCL_E_PARA : HCCL_E_PTR, Fmt("HcclCommDestroy: %p is not a live communicator", comm));
  if (obj->in_use.load() > 0) return Fail(HCCL_E_AGAIN, "[HcclCommDestroy] comm is in use, please try again later");
  g_comms.Remove(comm);
  if (const uint64_t n = obj->comm->InFlight(); n > 0) {
    ++g_destroyed_in_flight;
    std::fprintf(stderr,
                 "[hccl shim] HcclCommDestroy: Terminating operation due to external request: communicator %p "
                 "destroyed with %llu operation(s) still queued or running on its streams; they fail now\n",
                 comm, static_cast<unsigned long long>(n));
    obj->comm->Abort();
  }
  return HCCL_SUCCESS;
}

// Not an HCCL API: how many destroys ended operations still queued or running ([destroy]).
HCCL_ABI_EXPORT uint64_t tesseraHcclShimDestroyedInFlight() { return g_destroyed_in_flight.load(); }

HCCL_ABI_EXPORT HcclResult HcclGetRankSize(HcclComm comm, uint32_t* rankSize) {
  auto obj = comm ? g_comms.Get(comm) : nullptr;
  if (!obj || !rankSize) return Fail(HCCL_E_PTR, "HcclGetRankSize: bad comm or rankSize");
  *rankSize = static_cast<uint32_t>(obj->comm->nranks());
  return HCCL_SUCCESS;
}

HCCL_ABI_EXPORT HcclResult HcclGetRankId(HcclComm comm, uint32_t* rank) {
  auto obj = comm ? g_comms.Get(comm) : nullptr;
  if (!obj || !rank) return Fail(HCCL_E_PTR, "HcclGetRankId: bad comm or rank");
  *rank = static_cast<uint32_t>(obj->comm->rank());
  return HCCL_SUCCESS;
}

HCCL_ABI_EXPORT HcclResult HcclGetCommAsyncError(HcclComm comm, HcclResult* asyncError) {
  auto obj = comm ? g_comms.Get(comm) : nullptr;
  if (!obj || !asyncError) return Fail(HCCL_E_PTR, "HcclGetCommAsyncError: bad comm or asyncError");
  *asyncError = ToHccl(obj->comm->async_error().err);
  return HCCL_SUCCESS;
}

HCCL_ABI_EXPORT const char* HcclGetErrorString(HcclResult code) { return tshim::hccl::ErrorName(code); }

HCCL_ABI_EXPORT HcclResult HcclAllReduce(void* sendBuf, void* recvBuf, uint64_t count, HcclDataType dataType,
                                         HcclReduceOp op, HcclComm comm, aclrtStream stream) {
  Checked c;
  const int o = static_cast<int>(op);
  if (HcclResult e = Check("HcclAllReduce", comm, stream, dataType, true, &o, &c)) return e;
  const size_t bytes = count * coll::Size(c.type);
  if (HcclResult e = CheckBufs("HcclAllReduce", c, {{"sendBuf", {sendBuf, bytes}}, {"recvBuf", {recvBuf, bytes}}}))
    return e;
  const coll::DType t = c.type;
  const coll::Op rop = c.op;
  Submit(c, Collective({sendBuf, bytes}, {recvBuf, bytes}, [count, t, rop](coll::Comm& m, char* i, char* out) {
           return m.AllReduce(i, out, count, t, rop);
         }));
  return HCCL_SUCCESS;
}

HCCL_ABI_EXPORT HcclResult HcclReduceScatter(void* sendBuf, void* recvBuf, uint64_t recvCount, HcclDataType dataType,
                                             HcclReduceOp op, HcclComm comm, aclrtStream stream) {
  Checked c;
  const int o = static_cast<int>(op);
  if (HcclResult e = Check("HcclReduceScatter", comm, stream, dataType, true, &o, &c)) return e;
  const size_t bytes = recvCount * coll::Size(c.type), n = static_cast<size_t>(c.comm->nranks());
  if (HcclResult e =
          CheckBufs("HcclReduceScatter", c, {{"sendBuf", {sendBuf, bytes * n}}, {"recvBuf", {recvBuf, bytes}}}))
    return e;
  const coll::DType t = c.type;
  const coll::Op rop = c.op;
  Submit(c, Collective({sendBuf, bytes * n}, {recvBuf, bytes}, [recvCount, t, rop](coll::Comm& m, char* i, char* out) {
           return m.ReduceScatter(i, out, recvCount, t, rop);
         }));
  return HCCL_SUCCESS;
}

HCCL_ABI_EXPORT HcclResult HcclAllGather(void* sendBuf, void* recvBuf, uint64_t sendCount, HcclDataType dataType,
                                         HcclComm comm, aclrtStream stream) {
  Checked c;
  if (HcclResult e = Check("HcclAllGather", comm, stream, dataType, false, nullptr, &c)) return e;
  const size_t bytes = sendCount * coll::Size(c.type), n = static_cast<size_t>(c.comm->nranks());
  if (HcclResult e = CheckBufs("HcclAllGather", c, {{"sendBuf", {sendBuf, bytes}}, {"recvBuf", {recvBuf, bytes * n}}}))
    return e;
  const coll::DType t = c.type;
  Submit(c, Collective({sendBuf, bytes}, {recvBuf, bytes * n}, [sendCount, t](coll::Comm& m, char* i, char* out) {
           return m.AllGather(i, out, sendCount, t);
         }));
  return HCCL_SUCCESS;
}

HCCL_ABI_EXPORT HcclResult HcclBroadcast(void* buf, uint64_t count, HcclDataType dataType, uint32_t root, HcclComm comm,
                                         aclrtStream stream) {
  Checked c;
  if (HcclResult e = Check("HcclBroadcast", comm, stream, dataType, false, nullptr, &c)) return e;
  if (HcclResult e = tshim::hccl::CheckRank("HcclBroadcast", "root", root, c.comm->nranks(), Fail)) return e;
  const size_t bytes = count * coll::Size(c.type);
  if (HcclResult e = CheckBufs("HcclBroadcast", c, {{"buf", {buf, bytes}}})) return e;
  const coll::DType t = c.type;
  const int r = static_cast<int>(root);
  Submit(c, Collective({buf, bytes}, {buf, bytes},
                       [count, t, r](coll::Comm& m, char* i, char* out) { return m.Broadcast(i, out, count, t, r); }));
  return HCCL_SUCCESS;
}

HCCL_ABI_EXPORT HcclResult HcclBarrier(HcclComm comm, aclrtStream stream) {
  Checked c;
  if (HcclResult e = Check("HcclBarrier", comm, stream, HCCL_DATA_TYPE_INT8, false, nullptr, &c)) return e;
  Submit(c, Collective({}, {}, [](coll::Comm& m, char*, char*) { return m.Barrier(); }));
  return HCCL_SUCCESS;
}

namespace {
HcclResult PointToPoint(const char* fn, bool send, void* buf, uint64_t count, HcclDataType t, uint32_t peer,
                        HcclComm comm, aclrtStream stream) {
  Checked c;
  if (HcclResult e = Check(fn, comm, stream, t, false, nullptr, &c)) return e;
  if (HcclResult e = tshim::hccl::CheckRank(fn, "peer", peer, c.comm->nranks(), Fail)) return e;
  const size_t bytes = count * coll::Size(c.type);
  if (HcclResult e = CheckBufs(fn, c, {{send ? "sendBuf" : "recvBuf", {buf, bytes}}})) return e;
  Pending p;
  p.p2p = true;
  p.send = send;
  p.buf = {buf, bytes};
  p.peer = static_cast<int>(peer);
  Submit(c, std::move(p));
  return HCCL_SUCCESS;
}
}  // namespace

HCCL_ABI_EXPORT HcclResult HcclSend(void* sendBuf, uint64_t count, HcclDataType dataType, uint32_t destRank,
                                    HcclComm comm, aclrtStream stream) {
  return PointToPoint("HcclSend", true, sendBuf, count, dataType, destRank, comm, stream);
}

HCCL_ABI_EXPORT HcclResult HcclRecv(void* recvBuf, uint64_t count, HcclDataType dataType, uint32_t srcRank,
                                    HcclComm comm, aclrtStream stream) {
  return PointToPoint("HcclRecv", false, recvBuf, count, dataType, srcRank, comm, stream);
}

// Not an HCCL API: the group calls, for libhcomm.so (which torch_npu loads them from) and for the two below.
HCCL_ABI_EXPORT HcclResult tesseraHcclShimGroup(int start) {
  auto& g = tshim::ccl::Group();
  if (start) {
    ++g.depth;
    return HCCL_SUCCESS;
  }
  if (g.depth == 0) return Fail(HCCL_E_PARA, "HcclGroupEnd: no HcclGroupStart is open on this thread");
  if (--g.depth > 0) return HCCL_SUCCESS;
  const std::string why = tshim::ccl::EndGroup(Acl(), StreamCode, "HCCL");
  return why.empty() ? HCCL_SUCCESS : Fail(HCCL_E_NOT_SUPPORT, "HcclGroupEnd: " + why);
}

HCCL_ABI_EXPORT HcclResult HcclGroupStart() { return tesseraHcclShimGroup(1); }
HCCL_ABI_EXPORT HcclResult HcclGroupEnd() { return tesseraHcclShimGroup(0); }

}  // extern "C"
