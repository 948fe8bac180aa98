// comm/launcher: the logic of `tessera run`, as a library so that it can be tested piece by piece.
//
// `tessera run --island VENDOR=DEVICE:COUNT [--island ...] -- PROGRAM ARGS...` starts a store (with a random
// job token) and one process per rank on this machine, numbered in island order, each with the TESSERA_*
// variables that tsrCommInitFromEnv() reads. It prefixes every line the ranks print with
// "[rank R vendor] ", forwards SIGINT/SIGTERM/SIGHUP to them, and when one rank fails it reports which
// one and how, waits up to TESSERA_TIMEOUT for the others to exit on their own, then stops them
// (SIGTERM, SIGKILL 2 s later). docs/launcher.md is the user guide.
#pragma once

#include <chrono>
#include <cstdio>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "tessera/status.hpp"

namespace tessera::comm::launcher {

enum class DeviceKind { kHost, kCuda };

// One --island option: "ascend=host:3".
struct IslandSpec {
  std::string vendor;
  DeviceKind device = DeviceKind::kHost;
  int count = 0;
  std::string text;  // as the user wrote it, for messages
};

// One rank of the job, as it will be started.
struct RankSpec {
  int rank = 0;        // 0..world-1, island 0's ranks first
  int island = 0;      // index of its island, in --island order
  int local_rank = 0;  // index among the ranks on this machine (== rank: one machine)
  std::string vendor;  // the island's vendor
  std::string device;  // "host" or "cuda:N"
};

// The most ranks one launcher starts (each takes two pipes and a process).
constexpr int kMaxWorldSize = 1024;

// Parses one --island value; errors name the value and what is wrong with it.
Result<IslandSpec> ParseIsland(const std::string& text);
// Parses every --island value and checks the layout as a whole (at least one, no vendor twice, world size).
Result<std::vector<IslandSpec>> ParseIslands(const std::vector<std::string>& texts);
// "ascend=host:3,nvidia=host:5": the TESSERA_ISLANDS value.
std::string LayoutString(const std::vector<IslandSpec>& islands);
// Numbers the ranks and assigns devices: cuda ranks get cuda:0, cuda:1, ... round-robin over
// `cuda_devices` visible GPUs (islands may share one). A cuda island with no visible GPU is an error
// that says so; `cuda_why` says why none is visible (e.g. the cudaGetDeviceCount error).
Result<std::vector<RankSpec>> PlanRanks(const std::vector<IslandSpec>& islands, int cuda_devices,
                                        const std::string& cuda_why = "");
// The number of CUDA devices this process sees (cudaGetDeviceCount when built with CUDA, else 0); when
// 0, *why says why.
int VisibleCudaDevices(std::string* why);

// The variables of one rank, in a fixed order: TESSERA_*, torchrun's RANK, WORLD_SIZE, LOCAL_RANK,
// LOCAL_WORLD_SIZE (and MASTER_ADDR/MASTER_PORT when master_port > 0), and for a CUDA rank
// CUDA_VISIBLE_DEVICES naming its GPU (its TESSERA_DEVICE is then cuda:0). `visible_gpus` is the
// launcher's own CUDA_VISIBLE_DEVICES ("" when unset).
std::vector<std::pair<std::string, std::string>> RankEnvironment(const RankSpec& rank, int world_size,
                                                                 const std::string& layout,
                                                                 const std::string& store_address,
                                                                 const std::string& token,
                                                                 std::chrono::milliseconds timeout,
                                                                 int master_port = 0,
                                                                 const std::string& visible_gpus = "");
// A free TCP port on 127.0.0.1 (bound, read back, released), for MASTER_PORT.
Result<int> FreeLoopbackPort();

// A table of rank, island, vendor, device (for --dry-run).
std::string FormatRankTable(const std::vector<RankSpec>& ranks, const std::string& layout);

// "SIGKILL" for 9; "signal 64" when the number has no name.
std::string SignalName(int sig);

struct Options {
  std::vector<IslandSpec> islands;
  std::vector<std::string> program;            // PROGRAM ARGS...
  std::chrono::milliseconds timeout{60000};    // TESSERA_TIMEOUT for the ranks; also the grace after a failure
  std::chrono::milliseconds kill_after{2000};  // from SIGTERM to SIGKILL when stopping ranks
  bool dry_run = false;                        // print the rank table, start nothing
  // --sm-share VENDOR=PERCENT: the cuda island VENDOR runs on PERCENT% of its GPU's SMs (MPS; sm_share.hpp).
  std::map<std::string, int> sm_share;
};

// Runs the job to completion and returns the launcher's exit status: 0 when every rank exited 0; else
// the exit status of the first rank that failed (128+N when it was killed by signal N); 2 for a layout
// that cannot run here; 127 when a rank could not be started; 1 for other failures of the launcher.
// Messages go to stderr, prefixed "tessera run: "; the ranks' output goes to stdout/stderr, prefixed.
// Installs signal handlers for the duration of the call; call it from the main thread.
int Run(const Options& options);

}  // namespace tessera::comm::launcher
