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
  const auto key = [&](int j) { return fmt::format("ccl/island{}/loaded/{}", shape.island, j); };
  TSR_RETURN_IF_ERROR(store->Set(key(shape.island_rank), lib.ok() ? "" : lib.status().message()));
  std::string why;
  for (int j = 0; j < shape.island_size && why.empty(); ++j) {
    auto v = store->Get(key(j), shape.timeout);
    if (!v.ok()) return v.status().WithContext(fmt::format("rank {}: island {}'s library", shape.rank, shape.island));
    if (!v->empty()) why = fmt::format("rank {} cannot load it: {}", shape.island_ranks[j], *v);
  }
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

std::string IslandCclRefusal(CollKind kind, DType dt, RedOp op, CclLibrary& lib, const std::string& runtime,
                             bool widens) {
  const bool reduction = kind == CollKind::kAllReduce || kind == CollKind::kReduceScatter;
  if (reduction && IsHalf(dt) && !widens)
    return fmt::format(
        "{} reductions: Tessera reduces 16-bit data in f32 inside an island, and the {} device backend has no kernel "
        "to widen it on the device",
        DTypeName(dt), runtime);
  const DType rt = reduction ? AccumType(dt) : dt;
  Status s = reduction ? lib.SupportsReduce(rt, op == RedOp::kAvg ? RedOp::kSum : op) : lib.Supports(dt);
  if (s.ok() && reduction && rt != dt) s = lib.Supports(dt);  // the shards' allgather is in the data's type
  return s.ok() ? std::string() : s.message();
}

bool IslandCclGate::Takes(CollKind kind, DType dt, RedOp op, CclLibrary& lib, const std::string& runtime, bool widens,
                          int island, const char* family_label, bool first) {
  const std::string why = IslandCclRefusal(kind, dt, op, lib, runtime, widens);
  if (why.empty()) return true;
  if (said_.insert(why).second && first)
    TSR_LOG_INFO("island {} ({}): {} staged through pinned memory, not on its {}: {}", island, family_label,
                 CollName(kind), lib.name(), why);
  return false;
}

}  // namespace tessera::comm
