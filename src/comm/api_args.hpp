// comm/api_args: the C API's argument checks (tessera.h), run on the calling rank before anything is
// allocated or sent. Each returns InvalidArgument naming the call, the argument and its value — a datatype or
// op that is not one of the enum's, a NULL buffer with a count, a count whose byte size (count × type size,
// and × the world size where a call gathers or scatters) overflows or ends past the addresses a process can map,
// a root or peer that is not a rank, a stream on a host rank, alltoallv's counts and displacements. Every rank
// that passes the same arguments gets the same answer, so a refused call has sent nothing and the communicator
// stays usable (as ncclInvalidArgument leaves an NCCL communicator).
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "tessera/status.hpp"
#include "tessera/tessera.h"

namespace tessera::comm {

struct P2POp;

namespace api {

// What the checks need to know of the communicator.
struct Shape {
  int rank = 0;
  int size = 1;
  bool host = true;    // a host rank: its calls take host memory and no stream
  std::string vendor;  // its island's, for messages
};

Status CheckAllReduce(const void* send, const void* recv, size_t count, tsrDataType_t type, tsrRedOp_t op,
                      tsrStream_t stream, const Shape& s);
Status CheckReduceScatter(const void* send, const void* recv, size_t recvcount, tsrDataType_t type, tsrRedOp_t op,
                          tsrStream_t stream, const Shape& s);
Status CheckAllGather(const void* send, const void* recv, size_t sendcount, tsrDataType_t type, tsrStream_t stream,
                      const Shape& s);
Status CheckBroadcast(const void* send, const void* recv, size_t count, tsrDataType_t type, int root,
                      tsrStream_t stream, const Shape& s);
// tsrSend (is_send) or tsrRecv outside a group: the peer is another rank.
Status CheckSendRecv(bool is_send, const void* buf, size_t count, tsrDataType_t type, int peer, tsrStream_t stream,
                     const Shape& s);
// The queued sends and receives of one communicator at tsrGroupEnd (a peer may be this rank itself).
Status CheckGroup(const std::vector<P2POp>& ops, const Shape& s);
Status CheckAllToAll(const void* send, const void* recv, size_t count, tsrDataType_t type, tsrStream_t stream,
                     const Shape& s);
Status CheckAllToAllv(const void* send, const size_t* sendcounts, const size_t* sdispls, const void* recv,
                      const size_t* recvcounts, const size_t* rdispls, tsrDataType_t type, tsrStream_t stream,
                      const Shape& s);

}  // namespace api
}  // namespace tessera::comm
