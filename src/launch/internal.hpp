// launch/internal: what the parts of `tessera run` share inside src/launch — the device dealer of the rank
// planners (launcher.cpp, nodes.cpp) and what the front (launcher.cpp) calls in job.cpp.
#pragma once

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "launch/launcher.hpp"

namespace tessera::launch::internal {

// Deals each device family's visible devices round-robin, in the order ranks ask for them (islands of one
// family may share a device): PlanRanks for a job, PlanNodeRanks for one node's block of it.
class DeviceDealer {
 public:
  explicit DeviceDealer(const DeviceCounts& visible) : visible_(visible) {}
  // PREFIX:N for the next rank of `island` (whose family is not null); Unsupported naming the island, `where`
  // (" for rank 3 on node 1", or "") and why, when its family has no visible device.
  Result<std::string> Next(const IslandSpec& island, const std::string& where = "");

 private:
  const DeviceCounts& visible_;
  std::map<std::string, int> next_;  // per family: the device the next rank gets
};

// Starts this node's `ranks` of a job of `world_size` ranks (`layout`: TESSERA_ISLANDS) from the program at
// `path` and supervises them to the end; returns the launcher's exit status as Run() documents it.
// `extra_env`: variables every rank gets after its own (MPS directories); `island_env`: per island index (an
// emulated island's SM share and label).
int RunJob(const Options& options, std::vector<RankSpec> ranks, int world_size, std::string layout, std::string path,
           std::vector<std::pair<std::string, std::string>> extra_env,
           std::map<int, std::vector<std::pair<std::string, std::string>>> island_env);

}  // namespace tessera::launch::internal
