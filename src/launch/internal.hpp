// launch/internal: what the front of `tessera run` (launcher.cpp) calls in job.cpp. Internal to
// src/launch.
#pragma once

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "launch/launcher.hpp"

namespace tessera::launch::internal {

// Starts this node's `ranks` of a job of `world_size` ranks (`layout`: TESSERA_ISLANDS) from the program at
// `path` and supervises them to the end; returns the launcher's exit status as Run() documents it.
// `extra_env`: variables every rank gets after its own (MPS directories); `island_env`: per island index (an
// emulated island's SM share and label).
int RunJob(const Options& options, std::vector<RankSpec> ranks, int world_size, std::string layout, std::string path,
           std::vector<std::pair<std::string, std::string>> extra_env,
           std::map<int, std::vector<std::pair<std::string, std::string>>> island_env);

}  // namespace tessera::launch::internal
