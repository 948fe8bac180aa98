// comm/coll_kind: the one enum of collective kinds — the communicator's calls (its value is the kind field of the
// wire header, comm/call_header.hpp), the performance model's collectives (sched/perf_model.hpp) and `tessera
// bench`'s --coll — and each kind's name as messages and reports print it.
#pragma once

#include <cstdint>

namespace tessera::comm {

// Numbered from 1: the header's kind on the wire (0 is no call).
enum class CollKind : uint32_t { kAllReduce = 1, kReduceScatter, kAllGather, kBroadcast, kBarrier, kSend, kAllToAll };

// "allreduce", "reduce_scatter", "allgather", "broadcast", "barrier", "send", "alltoall".
constexpr const char* CollName(CollKind k) {
  switch (k) {
    case CollKind::kAllReduce:
      return "allreduce";
    case CollKind::kReduceScatter:
      return "reduce_scatter";
    case CollKind::kAllGather:
      return "allgather";
    case CollKind::kBroadcast:
      return "broadcast";
    case CollKind::kBarrier:
      return "barrier";
    case CollKind::kSend:
      return "send";
    case CollKind::kAllToAll:
      return "alltoall";
  }
  return "?";
}

}  // namespace tessera::comm
