// tests/shims/mccl_shim: libmccl.so.2, a test-only host shim of Moore Threads' MCCL (declarations and the status of
// their sources: mccl_abi.h -- NCCL's API under the prefix "mccl", numbers corroborated by a public port, the
// rest ASSUMED to be NCCL's). Communicators are shim_coll's shared-memory engine among processes; operations run
// on the MUSA shim's streams (libmusart.so, through tesseraMusaShimHooks). Behaviour as NCCL documents it:
// collectives are enqueued and return; every type for every operation, ops sum, prod, max, min, avg; in place
// when sendbuff == recvbuff (reduce-scatter: recvbuff == sendbuff + rank * recvcount); broadcast's sendbuff is
// used on the root only; sends and receives of a group progress together. A failed operation does not fail the
// MUSA stream (NCCL's kernels do not): mcclCommGetAsyncError reports it, as mcclRemoteError when a peer died,
// failed or made no progress within TESSERA_SHIM_TIMEOUT_MS, mcclInvalidUsage when the ranks disagree, and
// mcclSystemError after mcclCommAbort (torch_musa's MCCLUtils.cpp:152 sets that code after an abort). Bad
// arguments return mcclInvalidArgument at the call, a buffer that is not device memory of the communicator's
// device included (code: the shim's choice; NCCL does not check memory kinds).
#include <cstdio>
#include <cstring>

#include "mccl_abi.h"
#include "musa_abi.h"
#include "shim_ccl.hpp"

extern "C" const tshim::RuntimeHooks* tesseraMusaShimHooks();  // libmusart.so

using tshim::Fmt;
using tshim::ccl::Buf;
using tshim::ccl::Pending;
namespace coll = tshim::coll;

namespace {

struct CommObj {
  std::shared_ptr<coll::Comm> comm;
};
tshim::Handles<CommObj> g_comms;
thread_local std::string t_last;

const tshim::RuntimeHooks* Musa() {
  static const tshim::RuntimeHooks* h = tesseraMusaShimHooks();
  return h;
}

mcclResult_t Fail(mcclResult_t code, const std::string& msg) {
  t_last = msg;
  if (tshim::EnvU64("TESSERA_SHIM_VERBOSE", 0)) std::fprintf(stderr, "[mccl shim] %s (%d)\n", msg.c_str(), code);
  return code;
}

mcclResult_t ToMccl(coll::Err e) {
  switch (e) {
    case coll::Err::kOk:
      return mcclSuccess;
    case coll::Err::kInvalid:
      return mcclInvalidUsage;
    case coll::Err::kTimeout:
    case coll::Err::kPeerDead:
    case coll::Err::kRemoteAbort:
      return mcclRemoteError;
    case coll::Err::kAborted:
    case coll::Err::kSystem:
      return mcclSystemError;
  }
  return mcclInternalError;
}

int StreamCode(coll::Err) { return 0; }  // the stream completes; the error stays in the communicator

bool MapType(int t, coll::DType* out) {
  static const coll::DType kMap[] = {coll::DType::kI8,  coll::DType::kU8,  coll::DType::kI32, coll::DType::kU32,
                                     coll::DType::kI64, coll::DType::kU64, coll::DType::kF16, coll::DType::kF32,
                                     coll::DType::kF64, coll::DType::kBF16};  // mcclInt8 = 0 ... mcclBfloat16 = 9
  if (t < 0 || t >= mcclNumTypes) return false;
  *out = kMap[t];
  return true;
}

struct Checked {
  std::shared_ptr<coll::Comm> comm;
  std::shared_ptr<tshim::Stream> stream;
  coll::DType type = coll::DType::kI8;
  coll::Op op = coll::Op::kSum;
};

mcclResult_t Check(const char* fn, mcclComm_t comm, musaStream_t stream, int t, const int* op, Checked* out) {
  auto obj = comm ? g_comms.Get(comm) : nullptr;
  if (!obj) return Fail(mcclInvalidArgument, Fmt("%s: comm %p is not a live communicator", fn, (void*)comm));
  out->comm = obj->comm;
  out->stream = Musa()->stream(stream);
  if (!out->stream) return Fail(mcclInvalidArgument, Fmt("%s: stream %p is not a live MUSA stream", fn, (void*)stream));
  if (!MapType(t, &out->type)) return Fail(mcclInvalidArgument, Fmt("%s: datatype %d is not an mcclDataType_t", fn, t));
  if (op) {
    if (*op < 0 || *op >= mcclNumOps) return Fail(mcclInvalidArgument, Fmt("%s: op %d is not an mcclRedOp_t", fn, *op));
    static const coll::Op kOps[] = {coll::Op::kSum, coll::Op::kProd, coll::Op::kMax, coll::Op::kMin, coll::Op::kAvg};
    out->op = kOps[*op];
  }
  return mcclSuccess;
}

mcclResult_t CheckBufs(const char* fn, const Checked& c, std::initializer_list<std::pair<const char*, Buf>> bufs) {
  for (const auto& [name, b] : bufs) {
    if (!b.p && b.bytes) return Fail(mcclInvalidArgument, Fmt("%s: %s is NULL", fn, name));
    std::string why = tshim::ccl::CheckBuf(Musa(), fn, name, b, c.comm->device());
    if (!why.empty()) return Fail(mcclInvalidArgument, why);
  }
  return mcclSuccess;
}

template <typename F>
void SubmitCollective(const Checked& c, Buf in, Buf out, F f) {
  Pending p;
  p.comm = c.comm;
  p.stream = c.stream;
  p.body = [in, out, f](coll::Comm& m) {
    char *i = nullptr, *o = nullptr;
    coll::Result r = tshim::ccl::Resolve(Musa(), in, &i);
    if (r.ok()) r = tshim::ccl::Resolve(Musa(), out, &o);
    return r.ok() ? f(m, i, o) : r;
  };
  tshim::ccl::Submit(Musa(), std::move(p), StreamCode, "MCCL");
}

mcclResult_t PointToPoint(const char* fn, bool send, const void* buf, size_t count, int t, int peer, mcclComm_t comm,
                          musaStream_t stream) {
  Checked c;
  if (mcclResult_t e = Check(fn, comm, stream, t, nullptr, &c)) return e;
  if (peer < 0 || peer >= c.comm->nranks())
    return Fail(mcclInvalidArgument, Fmt("%s: peer %d is not in [0, %d)", fn, peer, c.comm->nranks()));
  const size_t bytes = count * coll::Size(c.type);
  if (mcclResult_t e = CheckBufs(fn, c, {{send ? "sendbuff" : "recvbuff", {buf, bytes}}})) return e;
  Pending p;
  p.comm = c.comm;
  p.stream = c.stream;
  p.p2p = true;
  p.send = send;
  p.buf = {buf, bytes};
  p.peer = peer;
  tshim::ccl::Submit(Musa(), std::move(p), StreamCode, "MCCL");
  return mcclSuccess;
}

}  // namespace

extern "C" {

MCCL_ABI_EXPORT mcclResult_t mcclGetVersion(int* version) {
  if (!version) return Fail(mcclInvalidArgument, "mcclGetVersion: version is NULL");
  // NCCL's encoding (major*10000 + minor*100 + patch), which torch_musa's MCCLUtils.cpp:211-224 decodes. The
  // number is the shim's (2.11.4: above the 2.10 that torch_musa requires for bf16 and avg).
  *version = static_cast<int>(tshim::EnvU64("TESSERA_SHIM_MCCL_VERSION", 21104));
  return mcclSuccess;
}

MCCL_ABI_EXPORT mcclResult_t mcclGetUniqueId(mcclUniqueId* uniqueId) {
  if (!uniqueId) return Fail(mcclInvalidArgument, "mcclGetUniqueId: uniqueId is NULL");
  coll::MakeId(uniqueId->internal, sizeof uniqueId->internal);
  return mcclSuccess;
}

MCCL_ABI_EXPORT mcclResult_t mcclCommInitRank(mcclComm_t* comm, int nranks, mcclUniqueId commId, int rank) {
  if (!comm) return Fail(mcclInvalidArgument, "mcclCommInitRank: comm is NULL");
  if (nranks < 1 || rank < 0 || rank >= nranks)
    return Fail(mcclInvalidArgument, Fmt("mcclCommInitRank: rank %d is not in [0, nranks %d)", rank, nranks));
  std::shared_ptr<coll::Comm> c;
  coll::Result r = coll::Comm::Create(commId.internal, nranks, rank, Musa()->current_device(), &c);
  if (!r.ok())
    return Fail(r.err == coll::Err::kInvalid ? mcclInvalidArgument : ToMccl(r.err), "mcclCommInitRank: " + r.msg);
  *comm = static_cast<mcclComm_t>(g_comms.Add(std::make_shared<CommObj>(CommObj{std::move(c)})));
  return mcclSuccess;
}

MCCL_ABI_EXPORT mcclResult_t mcclCommDestroy(mcclComm_t comm) {
  auto obj = comm ? g_comms.Remove(comm) : nullptr;
  if (!obj) return Fail(mcclInvalidArgument, Fmt("mcclCommDestroy: %p is not a live communicator", (void*)comm));
  if (!obj->comm->Drain()) {
    obj->comm->Abort();
    return Fail(mcclInternalError, "mcclCommDestroy: queued operations did not finish; the communicator was aborted");
  }
  return mcclSuccess;
}

MCCL_ABI_EXPORT mcclResult_t mcclCommAbort(mcclComm_t comm) {
  auto obj = comm ? g_comms.Remove(comm) : nullptr;
  if (!obj) return Fail(mcclInvalidArgument, Fmt("mcclCommAbort: %p is not a live communicator", (void*)comm));
  obj->comm->Abort();  // queued operations fail at once and release their streams
  return mcclSuccess;
}

MCCL_ABI_EXPORT mcclResult_t mcclCommGetAsyncError(mcclComm_t comm, mcclResult_t* asyncError) {
  auto obj = comm ? g_comms.Get(comm) : nullptr;
  if (!obj || !asyncError) return Fail(mcclInvalidArgument, "mcclCommGetAsyncError: bad comm or asyncError");
  const coll::Result r = obj->comm->async_error();
  if (!r.ok()) t_last = r.msg;
  *asyncError = ToMccl(r.err);
  return mcclSuccess;
}

MCCL_ABI_EXPORT mcclResult_t mcclCommCount(const mcclComm_t comm, int* count) {
  auto obj = comm ? g_comms.Get(comm) : nullptr;
  if (!obj || !count) return Fail(mcclInvalidArgument, "mcclCommCount: bad comm or count");
  *count = obj->comm->nranks();
  return mcclSuccess;
}

MCCL_ABI_EXPORT mcclResult_t mcclCommUserRank(const mcclComm_t comm, int* rank) {
  auto obj = comm ? g_comms.Get(comm) : nullptr;
  if (!obj || !rank) return Fail(mcclInvalidArgument, "mcclCommUserRank: bad comm or rank");
  *rank = obj->comm->rank();
  return mcclSuccess;
}

MCCL_ABI_EXPORT const char* mcclGetErrorString(mcclResult_t result) {
  switch (result) {  // NCCL's strings for the same codes, "cuda" read as "musa"
    case mcclSuccess:
      return "no error";
    case mcclUnhandledMusaError:
      return "unhandled musa error";
    case mcclSystemError:
      return "unhandled system error";
    case mcclInternalError:
      return "internal error";
    case mcclInvalidArgument:
      return "invalid argument";
    case mcclInvalidUsage:
      return "invalid usage";
    case mcclRemoteError:
      return "remote process exited or there was a network error";
    case mcclInProgress:
      return "MCCL operation in progress";
    default:
      return "unknown result code";
  }
}

MCCL_ABI_EXPORT const char* mcclGetLastError(mcclComm_t) { return t_last.c_str(); }  // ASSUMPTION: ncclGetLastError

MCCL_ABI_EXPORT mcclResult_t mcclAllReduce(const void* sendbuff, void* recvbuff, size_t count, mcclDataType_t datatype,
                                           mcclRedOp_t op, mcclComm_t comm, musaStream_t stream) {
  Checked c;
  const int o = static_cast<int>(op);
  if (mcclResult_t e = Check("mcclAllReduce", comm, stream, datatype, &o, &c)) return e;
  const size_t bytes = count * coll::Size(c.type);
  if (mcclResult_t e =
          CheckBufs("mcclAllReduce", c, {{"sendbuff", {sendbuff, bytes}}, {"recvbuff", {recvbuff, bytes}}}))
    return e;
  const coll::DType t = c.type;
  const coll::Op rop = c.op;
  SubmitCollective(c, {sendbuff, bytes}, {recvbuff, bytes},
                   [count, t, rop](coll::Comm& m, char* i, char* out) { return m.AllReduce(i, out, count, t, rop); });
  return mcclSuccess;
}

MCCL_ABI_EXPORT mcclResult_t mcclReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount,
                                               mcclDataType_t datatype, mcclRedOp_t op, mcclComm_t comm,
                                               musaStream_t stream) {
  Checked c;
  const int o = static_cast<int>(op);
  if (mcclResult_t e = Check("mcclReduceScatter", comm, stream, datatype, &o, &c)) return e;
  const size_t bytes = recvcount * coll::Size(c.type), n = static_cast<size_t>(c.comm->nranks());
  if (mcclResult_t e =
          CheckBufs("mcclReduceScatter", c, {{"sendbuff", {sendbuff, bytes * n}}, {"recvbuff", {recvbuff, bytes}}}))
    return e;
  const coll::DType t = c.type;
  const coll::Op rop = c.op;
  SubmitCollective(c, {sendbuff, bytes * n}, {recvbuff, bytes}, [recvcount, t, rop](coll::Comm& m, char* i, char* out) {
    return m.ReduceScatter(i, out, recvcount, t, rop);
  });
  return mcclSuccess;
}

MCCL_ABI_EXPORT mcclResult_t mcclAllGather(const void* sendbuff, void* recvbuff, size_t sendcount,
                                           mcclDataType_t datatype, mcclComm_t comm, musaStream_t stream) {
  Checked c;
  if (mcclResult_t e = Check("mcclAllGather", comm, stream, datatype, nullptr, &c)) return e;
  const size_t bytes = sendcount * coll::Size(c.type), n = static_cast<size_t>(c.comm->nranks());
  if (mcclResult_t e =
          CheckBufs("mcclAllGather", c, {{"sendbuff", {sendbuff, bytes}}, {"recvbuff", {recvbuff, bytes * n}}}))
    return e;
  const coll::DType t = c.type;
  SubmitCollective(c, {sendbuff, bytes}, {recvbuff, bytes * n},
                   [sendcount, t](coll::Comm& m, char* i, char* out) { return m.AllGather(i, out, sendcount, t); });
  return mcclSuccess;
}

MCCL_ABI_EXPORT mcclResult_t mcclBroadcast(const void* sendbuff, void* recvbuff, size_t count, mcclDataType_t datatype,
                                           int root, mcclComm_t comm, musaStream_t stream) {
  Checked c;
  if (mcclResult_t e = Check("mcclBroadcast", comm, stream, datatype, nullptr, &c)) return e;
  if (root < 0 || root >= c.comm->nranks())
    return Fail(mcclInvalidArgument, Fmt("mcclBroadcast: root %d is not in [0, %d)", root, c.comm->nranks()));
  const size_t bytes = count * coll::Size(c.type);
  const Buf in = c.comm->rank() == root ? Buf{sendbuff, bytes} : Buf{};  // sendbuff: root only
  if (mcclResult_t e = CheckBufs("mcclBroadcast", c, {{"sendbuff", in}, {"recvbuff", {recvbuff, bytes}}})) return e;
  const coll::DType t = c.type;
  SubmitCollective(c, in, {recvbuff, bytes}, [count, t, root](coll::Comm& m, char* i, char* out) {
    return m.Broadcast(i ? i : out, out, count, t, root);
  });
  return mcclSuccess;
}

MCCL_ABI_EXPORT mcclResult_t mcclSend(const void* sendbuff, size_t count, mcclDataType_t datatype, int peer,
                                      mcclComm_t comm, musaStream_t stream) {
  return PointToPoint("mcclSend", true, sendbuff, count, datatype, peer, comm, stream);
}

MCCL_ABI_EXPORT mcclResult_t mcclRecv(void* recvbuff, size_t count, mcclDataType_t datatype, int peer, mcclComm_t comm,
                                      musaStream_t stream) {
  return PointToPoint("mcclRecv", false, recvbuff, count, datatype, peer, comm, stream);
}

MCCL_ABI_EXPORT mcclResult_t mcclGroupStart() {
  ++tshim::ccl::Group().depth;
  return mcclSuccess;
}

MCCL_ABI_EXPORT mcclResult_t mcclGroupEnd() {
  auto& g = tshim::ccl::Group();
  if (g.depth == 0) return Fail(mcclInvalidUsage, "mcclGroupEnd: no mcclGroupStart is open on this thread");
  if (--g.depth > 0) return mcclSuccess;
  const std::string why = tshim::ccl::EndGroup(Musa(), StreamCode, "MCCL");
  return why.empty() ? mcclSuccess : Fail(mcclInvalidUsage, "mcclGroupEnd: " + why);
}

}  // extern "C"
