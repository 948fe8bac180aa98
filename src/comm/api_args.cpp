// comm/api_args: the C API's argument checks (see api_args.hpp). Messages: "<call>: <argument> <value> <why>".
#include "comm/api_args.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstdint>

#include "comm/comm.hpp"
#include "common/c_result.hpp"
#include "common/dtype.hpp"

namespace tessera::comm::api {
namespace {

// The most bytes one buffer may span: a pointer difference must hold it.
constexpr size_t kMaxBytes = static_cast<size_t>(PTRDIFF_MAX);
// Where the addresses a process can map end: 2^57 on 64-bit Linux (x86-64 with 5-level paging; aarch64 stops at
// 2^52), so a buffer that ends beyond it cannot be real memory.
constexpr int kAddressBits = sizeof(void*) == 8 ? 57 : 32;
constexpr uintptr_t kAddressEnd = sizeof(void*) == 8 ? uintptr_t{1} << (kAddressBits % 64) : UINTPTR_MAX;

Status Type(const char* call, tsrDataType_t type, DType* dt) {
  Status s = FromCDataType(type, dt);
  return s.ok() ? s : s.WithContext(call);
}

// The raw int is checked before it becomes a Tessera enum, as FromCDataType does.
Status Op(const char* call, tsrRedOp_t op) {
  const int v = static_cast<int>(op);
  if (v < 0 || v >= static_cast<int>(RedOp::kCount))
    return InvalidArgument(fmt::format("{}: op {} is not a tsrRedOp_t (tsrSum = 0 ... tsrAvg = {})", call, v,
                                       static_cast<int>(RedOp::kCount) - 1));
  return Status::Ok();
}

Status Stream(const char* call, tsrStream_t stream, const Shape& s) {
  if (stream != nullptr && s.host)
    return InvalidArgument(
        fmt::format("{}: stream {} was passed, but rank {} is a host rank (island {} uses host memory): pass NULL",
                    call, stream, s.rank, s.vendor));
  return Status::Ok();
}

// A buffer `name` of `count` (called `count_name`) × `blocks` elements of `dt`: not NULL when it has elements,
// a byte size that a pointer difference holds, and no wrap around the end of the address space.
Status Buffer(const char* call, const char* name, const void* p, const char* count_name, size_t count, size_t blocks,
              DType dt) {
  if (count == 0 || blocks == 0) return Status::Ok();
  const size_t esz = DTypeSize(dt);
  if (count > kMaxBytes / blocks / esz) {
    const std::string times = blocks > 1 ? fmt::format(" × {} ranks", blocks) : "";
    return InvalidArgument(fmt::format("{}: {} {}{} × {} bytes ({}) for {} is more than the address space holds", call,
                                       count_name, count, times, esz, DTypeName(dt), name));
  }
  if (p == nullptr) return InvalidArgument(fmt::format("{}: {} is NULL with {} {}", call, name, count_name, count));
  const size_t bytes = count * blocks * esz;
  const auto addr = reinterpret_cast<uintptr_t>(p);
  if (addr > kAddressEnd || bytes > kAddressEnd - addr)
    return InvalidArgument(
        fmt::format("{}: {} {} + {} bytes ({} {}) ends past the highest address a process can map (2^{})", call, name,
                    p, bytes, count_name, count, kAddressBits));
  return Status::Ok();
}

Status Rank(const char* call, const char* what, int value, const Shape& s, bool self_allowed) {
  if (value < 0 || value >= s.size)
    return InvalidArgument(fmt::format("{}: {} {} is not a rank of this communicator of {} (0 ... {})", call, what,
                                       value, s.size, s.size - 1));
  if (!self_allowed && value == s.rank)
    return InvalidArgument(
        fmt::format("{}: {} {} is this rank itself (a send to itself needs a matching recv: put both in one group)",
                    call, what, value));
  return Status::Ok();
}

bool Overlap(const void* a, size_t abytes, const void* b, size_t bbytes) {
  const auto x = reinterpret_cast<uintptr_t>(a), y = reinterpret_cast<uintptr_t>(b);
  return abytes > 0 && bbytes > 0 && x < y + bbytes && y < x + abytes;
}

}  // namespace

Status CheckAllReduce(const void* send, const void* recv, size_t count, tsrDataType_t type, tsrRedOp_t op,
                      tsrStream_t stream, const Shape& s) {
  constexpr const char* kCall = "tsrAllReduce";
  DType dt;
  TSR_RETURN_IF_ERROR(Type(kCall, type, &dt));
  TSR_RETURN_IF_ERROR(Op(kCall, op));
  TSR_RETURN_IF_ERROR(Buffer(kCall, "sendbuf", send, "count", count, 1, dt));
  TSR_RETURN_IF_ERROR(Buffer(kCall, "recvbuf", recv, "count", count, 1, dt));
  return Stream(kCall, stream, s);
}

Status CheckReduceScatter(const void* send, const void* recv, size_t recvcount, tsrDataType_t type, tsrRedOp_t op,
                          tsrStream_t stream, const Shape& s) {
  constexpr const char* kCall = "tsrReduceScatter";
  DType dt;
  TSR_RETURN_IF_ERROR(Type(kCall, type, &dt));
  TSR_RETURN_IF_ERROR(Op(kCall, op));
  TSR_RETURN_IF_ERROR(Buffer(kCall, "sendbuf", send, "recvcount", recvcount, static_cast<size_t>(s.size), dt));
  TSR_RETURN_IF_ERROR(Buffer(kCall, "recvbuf", recv, "recvcount", recvcount, 1, dt));
  return Stream(kCall, stream, s);
}

Status CheckAllGather(const void* send, const void* recv, size_t sendcount, tsrDataType_t type, tsrStream_t stream,
                      const Shape& s) {
  constexpr const char* kCall = "tsrAllGather";
  DType dt;
  TSR_RETURN_IF_ERROR(Type(kCall, type, &dt));
  TSR_RETURN_IF_ERROR(Buffer(kCall, "sendbuf", send, "sendcount", sendcount, 1, dt));
  TSR_RETURN_IF_ERROR(Buffer(kCall, "recvbuf", recv, "sendcount", sendcount, static_cast<size_t>(s.size), dt));
  return Stream(kCall, stream, s);
}

Status CheckBroadcast(const void* send, const void* recv, size_t count, tsrDataType_t type, int root,
                      tsrStream_t stream, const Shape& s) {
  constexpr const char* kCall = "tsrBroadcast";
  DType dt;
  TSR_RETURN_IF_ERROR(Type(kCall, type, &dt));
  TSR_RETURN_IF_ERROR(Rank(kCall, "root", root, s, true));
  // Only the root's sendbuf is read.
  if (s.rank == root) TSR_RETURN_IF_ERROR(Buffer(kCall, "sendbuf", send, "count", count, 1, dt));
  TSR_RETURN_IF_ERROR(Buffer(kCall, "recvbuf", recv, "count", count, 1, dt));
  return Stream(kCall, stream, s);
}

Status CheckSendRecv(bool is_send, const void* buf, size_t count, tsrDataType_t type, int peer, tsrStream_t stream,
                     const Shape& s) {
  const char* call = is_send ? "tsrSend" : "tsrRecv";
  DType dt;
  TSR_RETURN_IF_ERROR(Type(call, type, &dt));
  TSR_RETURN_IF_ERROR(Rank(call, "peer", peer, s, false));
  TSR_RETURN_IF_ERROR(Buffer(call, is_send ? "sendbuf" : "recvbuf", buf, "count", count, 1, dt));
  return Stream(call, stream, s);
}

Status CheckGroup(const std::vector<P2POp>& ops, const Shape& s) {
  for (size_t i = 0; i < ops.size(); ++i) {
    const P2POp& op = ops[i];
    const std::string call = fmt::format("tsrGroupEnd: {} #{} of the group", op.is_send ? "tsrSend" : "tsrRecv", i);
    DType dt;
    TSR_RETURN_IF_ERROR(Type(call.c_str(), op.type, &dt));
    TSR_RETURN_IF_ERROR(Rank(call.c_str(), "peer", op.peer, s, true));
    TSR_RETURN_IF_ERROR(Buffer(call.c_str(), op.is_send ? "sendbuf" : "recvbuf", op.is_send ? op.send : op.recv,
                               "count", op.count, 1, dt));
    TSR_RETURN_IF_ERROR(Stream(call.c_str(), op.stream, s));
  }
  // To itself: the k-th send to self goes to the k-th receive from self, of the same count and type.
  std::vector<size_t> sends, recvs;
  for (size_t i = 0; i < ops.size(); ++i)
    if (ops[i].peer == s.rank) (ops[i].is_send ? sends : recvs).push_back(i);
  if (sends.size() != recvs.size())
    return InvalidArgument(fmt::format("tsrGroupEnd: the group has {} send(s) to rank {} itself but {} recv(s) from it",
                                       sends.size(), s.rank, recvs.size()));
  for (size_t k = 0; k < sends.size(); ++k) {
    const P2POp &a = ops[sends[k]], &b = ops[recvs[k]];
    if (a.count != b.count || a.type != b.type)
      return InvalidArgument(
          fmt::format("tsrGroupEnd: rank {} sends {} × {} to itself (tsrSend #{}) but receives {} × {} (tsrRecv #{})",
                      s.rank, a.count, DTypeName(static_cast<DType>(a.type)), sends[k], b.count,
                      DTypeName(static_cast<DType>(b.type)), recvs[k]));
  }
  return Status::Ok();
}

Status CheckAllToAll(const void* send, const void* recv, size_t count, tsrDataType_t type, tsrStream_t stream,
                     const Shape& s) {
  constexpr const char* kCall = "tsrAllToAll";
  DType dt;
  TSR_RETURN_IF_ERROR(Type(kCall, type, &dt));
  const auto w = static_cast<size_t>(s.size);
  TSR_RETURN_IF_ERROR(Buffer(kCall, "sendbuf", send, "count", count, w, dt));
  TSR_RETURN_IF_ERROR(Buffer(kCall, "recvbuf", recv, "count", count, w, dt));
  const size_t bytes = count * w * DTypeSize(dt);
  if (Overlap(send, bytes, recv, bytes))
    return InvalidArgument(
        fmt::format("{}: sendbuf {} and recvbuf {} overlap ({} bytes each): they must not", kCall, send, recv, bytes));
  return Stream(kCall, stream, s);
}

Status CheckAllToAllv(const void* send, const size_t* sendcounts, const size_t* sdispls, const void* recv,
                      const size_t* recvcounts, const size_t* rdispls, tsrDataType_t type, tsrStream_t stream,
                      const Shape& s) {
  constexpr const char* kCall = "tsrAllToAllv";
  DType dt;
  TSR_RETURN_IF_ERROR(Type(kCall, type, &dt));
  for (auto [name, a] : {std::pair{"sendcounts", sendcounts}, std::pair{"sdispls", sdispls},
                         std::pair{"recvcounts", recvcounts}, std::pair{"rdispls", rdispls}})
    if (a == nullptr) return InvalidArgument(fmt::format("{}: {} is NULL", kCall, name));
  // Extents: the highest element touched + 1 in each buffer.
  size_t sext = 0, rext = 0;
  for (int p = 0; p < s.size; ++p) {
    if (sendcounts[p] > SIZE_MAX - sdispls[p])
      return InvalidArgument(
          fmt::format("{}: sdispls[{}] {} + sendcounts[{}] {} overflows", kCall, p, sdispls[p], p, sendcounts[p]));
    if (recvcounts[p] > SIZE_MAX - rdispls[p])
      return InvalidArgument(
          fmt::format("{}: rdispls[{}] {} + recvcounts[{}] {} overflows", kCall, p, rdispls[p], p, recvcounts[p]));
    if (sendcounts[p] > 0) sext = std::max(sext, sdispls[p] + sendcounts[p]);
    if (recvcounts[p] > 0) rext = std::max(rext, rdispls[p] + recvcounts[p]);
  }
  TSR_RETURN_IF_ERROR(Buffer(kCall, "sendbuf", send, "extent (sdispls + sendcounts)", sext, 1, dt));
  TSR_RETURN_IF_ERROR(Buffer(kCall, "recvbuf", recv, "extent (rdispls + recvcounts)", rext, 1, dt));
  const size_t esz = DTypeSize(dt);
  if (Overlap(send, sext * esz, recv, rext * esz))
    return InvalidArgument(fmt::format("{}: sendbuf {} ({} elements) and recvbuf {} ({} elements) overlap", kCall, send,
                                       sext, recv, rext));
  if (sendcounts[s.rank] != recvcounts[s.rank])
    return InvalidArgument(fmt::format("{}: sendcounts[{}] {} to this rank itself differs from recvcounts[{}] {}",
                                       kCall, s.rank, sendcounts[s.rank], s.rank, recvcounts[s.rank]));
  return Stream(kCall, stream, s);
}

}  // namespace tessera::comm::api
