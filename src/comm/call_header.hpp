// comm/call_header: the 64-byte header that opens every collective and every point-to-point message on
// the wire. Collectives exchange one with each peer of their schedule before the data; send/recv, groups
// and alltoall send one before each message. Any disagreement fails the call with a message naming both
// sides (DescribeCall).
#pragma once

#include <fmt/format.h>

#include <cstdint>
#include <string>

#include "comm/comm.hpp"
#include "common/dtype.hpp"

namespace tessera::comm {

inline constexpr uint32_t kHeaderMagic = 0x54535248;  // "TSRH"

struct Header {
  uint32_t magic;
  uint32_t kind;
  uint64_t seq;
  uint64_t count;
  int32_t dtype;
  int32_t op;
  int32_t root;
  int32_t rank;
  uint8_t pad[24];
};
static_assert(sizeof(Header) == 64);

// "allreduce(count=8, bf16, sum)": a call as the mismatch messages name it.
inline std::string DescribeCall(CollKind kind, size_t count, DType dt, RedOp op, int root) {
  switch (kind) {
    case CollKind::kAllReduce:
    case CollKind::kReduceScatter:
      return fmt::format("{}(count={}, {}, {})", CollName(kind), count, DTypeName(dt), RedOpName(op));
    case CollKind::kBroadcast:
      return fmt::format("{}(count={}, {}, root={})", CollName(kind), count, DTypeName(dt), root);
    default:
      return fmt::format("{}(count={}, {})", CollName(kind), count, DTypeName(dt));
  }
}

}  // namespace tessera::comm
