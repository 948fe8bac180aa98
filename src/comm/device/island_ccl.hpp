// comm/device/island_ccl: what the device ranks share when, in a hybrid world, an island of several device ranks
// runs the hierarchical algorithm's island phases on its own collective library (docs/architecture.md, "Islands of
// several devices"): the library reduce-scatters the island's inputs on the device, only each rank's shard goes
// down to host memory and across the bridge, and the library allgathers the shards.
//   - OpenWorldCcl: a world of one device island's communicator (not the island phases: everything);
//   - OpenIslandCcl: every rank of the island says through the store whether it loaded the library; all use it or
//     none does (a rank without it would leave the others waiting in the library's initialisation).
//   - IslandCclRefusal: why a call cannot run its island phases on the library (empty: it can); IslandCclGate: the
//     same per call of a communicator, each reason logged once.
//   - PaddedBlocks: the schedule's shards of a buffer (uneven when the island's size does not divide it) and where
//     each sits in the library's equal blocks.
// Used by StagedRank (staged_rank.cpp) and DeviceBridgeRank (device_bridge_collectives.cpp).
#pragma once

#include <chrono>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "comm/ccl/ccl.hpp"
#include "comm/device/device.hpp"

namespace tessera::comm {

// A world of one device island: the communicator of `device`'s family's library (TESSERA_CCL and friends apply),
// every rank of it. Unsupported, saying why, for a family without a library (emu). Errors name the rank, the island
// and the library.
Result<std::unique_ptr<CclComm>> OpenWorldCcl(StoreClient* store, const HostPath::Shape& shape,
                                              const DeviceName& device);

// The island's communicator of `row` (TESSERA_CCL and friends apply) when every rank of the island could load the
// library; null (and one warning on the island's first rank, naming the rank and its error) when one could not.
// An error when the store or the library's initialisation fails.
Result<std::unique_ptr<CclComm>> OpenIslandCcl(StoreClient* store, const HostPath::Shape& shape, std::string_view row,
                                               const std::string& family_label);

// Every rank of the island publishes `mine` under `key` (a store key with "{}" for the island rank) and reads the
// others': the island's values in island order. For what the island must agree on before its first call.
Result<std::vector<std::string>> IslandExchange(StoreClient* store, const HostPath::Shape& shape,
                                                const std::string& key, const std::string& mine);

// How an island's library reduces 16-bit data: widened to f32 on the device (Tessera's rule: the same bits as the
// host path), in the data's own type (TESSERA_ISLAND_REDUCE=native), or not at all (the runtime cannot widen on its
// device, and the island did not ask for native: 16-bit reductions are staged).
enum class IslandHalf { kWiden, kNative, kStaged };
// What the island's ranks agree on for 16-bit reductions (IslandHalf), through the store: every rank must ask for the
// same TESSERA_ISLAND_REDUCE (InvalidArgument naming two ranks that differ); f32 widens where every rank can (`why`
// empty: this rank can; else one warning on the island's first rank names a rank that cannot and why).
Result<IslandHalf> AgreeIslandHalf(StoreClient* store, const HostPath::Shape& shape, const std::string& why,
                                   const char* family_label);

// Why a hybrid call of `kind` on (dt, op) cannot run its island phases on `lib`: a 16-bit reduction the island stages
// (`half`; Tessera reduces 16-bit data in f32 inside an island; `runtime` names the runtime row), or a type or op the
// library lacks (avg is the library's sum: the bridge divides once; a widened reduction is the library's f32
// reduction, a native one the library's reduction in the data's type). Empty when it can.
std::string IslandCclRefusal(CollKind kind, DType dt, RedOp op, CclLibrary& lib, const std::string& runtime,
                             IslandHalf half);
// The type an island's library reduces `dt` in: AccumType(dt) where it widens, dt otherwise.
DType IslandReduceType(DType dt, IslandHalf half);

// A device rank's choice, per call, between the island's library and staging: IslandCclRefusal, and where it refuses,
// one info line per reason and communicator, on the island's first rank (`first`).
class IslandCclGate {
 public:
  bool Takes(CollKind kind, DType dt, RedOp op, CclLibrary& lib, const std::string& runtime, IslandHalf half,
             int island, const char* family_label, bool first);

 private:
  std::set<std::string> said_;  // reasons already logged
};

// Shards of `total` elements among `members` ranks (Shard) laid into the library's equal blocks of
// q = ceil(total / members) elements: block j holds shard j at its start. q, and whether they differ (the shards
// then need copying into and out of a padded buffer of members x q elements).
struct PaddedBlocks {
  PaddedBlocks(size_t members, size_t total) : n(members), q((total + members - 1) / members), total(total) {}
  bool padded() const { return q * n != total; }
  Range shard(size_t j) const { return Shard(n, j, total); }
  size_t n, q, total;
};

}  // namespace tessera::comm
