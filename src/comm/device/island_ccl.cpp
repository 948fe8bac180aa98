// comm/device/island_ccl: an island's own library in a hybrid world, agreed on by its ranks (see island_ccl.hpp).
#include "comm/device/island_ccl.hpp"

#include <fmt/format.h>

#include "comm/comm.hpp"
#include "comm/reduce/reduce.hpp"
#include "comm/store/store.hpp"
#include "common/log.hpp"

namespace tessera::comm {

Result<std::unique_ptr<CclComm>> OpenWorldCcl(StoreClient* store, const HostPath::Shape& shape,
                                              const DeviceName& device) {
  const DeviceFamily& family = *device.family;
  if (*family.ccl == 0)
    return Unsupported(fmt::format(
        "rank {}: {} ({} device) has no collective library, so a world of {} ranks alone cannot run; put a host "
        "or another device island beside it (e.g. --island other=host:1)",
        shape.rank, device.ToString(), family.label, family.prefix));
  TSR_ASSIGN_OR_RETURN(auto lib, CclLibrary::LoadFromEnv(family.ccl));
  auto c = CclComm::Create(lib, store, fmt::format("ccl/island{}/id", shape.island), shape.island_size,
                           shape.island_rank, shape.timeout);
  if (!c.ok())
    return c.status().WithContext(
        fmt::format("rank {}: creating island {}'s {} communicator", shape.rank, shape.island, lib->name()));
  return c;
}

Result<std::unique_ptr<CclComm>> OpenIslandCcl(StoreClient* store, const HostPath::Shape& shape, std::string_view row,
                                               const std::string& family_label) {
  if (row.empty()) {  // a family without a library (emu): every rank knows it, nothing to agree on
    if (shape.island_rank == 0)
      TSR_LOG_INFO("island {} ({}): no collective library; its island phases run on the host path", shape.island,
                   family_label);
    return std::unique_ptr<CclComm>();
  }
  auto lib = CclLibrary::LoadFromEnv(row);
  auto loaded = IslandExchange(store, shape, fmt::format("ccl/island{}/loaded/{{}}", shape.island),
                               lib.ok() ? "" : lib.status().message());
  if (!loaded.ok())
    return loaded.status().WithContext(fmt::format("rank {}: island {}'s library", shape.rank, shape.island));
  std::string why;
  for (int j = 0; j < shape.island_size && why.empty(); ++j)
    if (!(*loaded)[j].empty()) why = fmt::format("rank {} cannot load it: {}", shape.island_ranks[j], (*loaded)[j]);
  if (!why.empty()) {
    if (shape.island_rank == 0)
      TSR_LOG_WARN("island {} ({}): its island phases run on the host path, staged through pinned memory: {}",
                   shape.island, family_label, why);
    return std::unique_ptr<CclComm>();
  }
  auto c = CclComm::Create(*lib, store, fmt::format("ccl/island{}/id", shape.island), shape.island_size,
                           shape.island_rank, shape.timeout);
  if (!c.ok())
    return c.status().WithContext(
        fmt::format("rank {}: creating island {}'s {} communicator", shape.rank, shape.island, (*lib)->name()));
  return c;
}

Result<std::vector<std::string>> IslandExchange(StoreClient* store, const HostPath::Shape& shape,
                                                const std::string& key, const std::string& mine) {
  const auto at = [&](int j) { return fmt::format(fmt::runtime(key), j); };
  TSR_RETURN_IF_ERROR(store->Set(at(shape.island_rank), mine));
  std::vector<std::string> all;
  for (int j = 0; j < shape.island_size; ++j) {
    if (j == shape.island_rank) {
      all.push_back(mine);
      continue;
    }
    auto v = store->Get(at(j), shape.timeout);
    if (!v.ok()) return v.status().WithContext(fmt::format("island {}'s rank {}", shape.island, shape.island_ranks[j]));
    all.push_back(*v);
  }
  return all;
}

Result<IslandHalf> AgreeIslandHalf(StoreClient* store, const HostPath::Shape& shape, const std::string& why,
                                   const char* family_label) {
  const std::string mode = shape.native_island_reduce ? "native" : "f32";
  TSR_ASSIGN_OR_RETURN(auto modes,
                       IslandExchange(store, shape, fmt::format("ccl/island{}/reduce/{{}}", shape.island), mode));
  for (int j = 0; j < shape.island_size; ++j)
    if (modes[j] != mode)
      return InvalidArgument(
          fmt::format("island {} ({}): rank {} reduces 16-bit data '{}' but rank {} '{}' (TESSERA_ISLAND_REDUCE / "
                      "tsrConfig_t::island_reduce): every rank of an island must use the same",
                      shape.island, family_label, shape.rank, mode, shape.island_ranks[j], modes[j]));
  if (shape.native_island_reduce) return IslandHalf::kNative;
  TSR_ASSIGN_OR_RETURN(auto can,
                       IslandExchange(store, shape, fmt::format("ccl/island{}/widen/{{}}", shape.island), why));
  for (int j = 0; j < shape.island_size; ++j)
    if (!can[j].empty()) {
      if (shape.island_rank == 0)
        TSR_LOG_WARN(
            "island {} ({}): 16-bit reductions are staged through pinned memory and reduced on the host, because "
            "rank {} cannot widen 16-bit data to f32 on its device: {}",
            shape.island, family_label, shape.island_ranks[j], can[j]);
      return IslandHalf::kStaged;
    }
  return IslandHalf::kWiden;
}

DType IslandReduceType(DType dt, IslandHalf half) { return half == IslandHalf::kWiden ? AccumType(dt) : dt; }

std::string IslandCclRefusal(CollKind kind, DType dt, RedOp op, CclLibrary& lib, const std::string& runtime,
                             IslandHalf half) {
  const bool reduction = kind == CollKind::kAllReduce || kind == CollKind::kReduceScatter;
  if (reduction && IsHalf(dt) && half == IslandHalf::kStaged)
    return fmt::format(
        "{} reductions: Tessera reduces 16-bit data in f32 inside an island, and the {} runtime cannot widen "
        "it on the device",
        DTypeName(dt), runtime);
  const DType rt = reduction ? IslandReduceType(dt, half) : dt;
  Status s = reduction ? lib.SupportsReduce(rt, op == RedOp::kAvg ? RedOp::kSum : op) : lib.Supports(dt);
  if (s.ok() && reduction && rt != dt) s = lib.Supports(dt);  // the shards' allgather is in the data's type
  return s.ok() ? std::string() : s.message();
}

bool IslandCclGate::Takes(CollKind kind, DType dt, RedOp op, CclLibrary& lib, const std::string& runtime,
                          IslandHalf half, int island, const char* family_label, bool first) {
  const std::string why = IslandCclRefusal(kind, dt, op, lib, runtime, half);
  if (why.empty()) return true;
  if (said_.insert(why).second && first)
    TSR_LOG_INFO("island {} ({}): {} staged through pinned memory, not on its {}: {}", island, family_label,
                 CollName(kind), lib.name(), why);
  return false;
}

}  // namespace tessera::comm
