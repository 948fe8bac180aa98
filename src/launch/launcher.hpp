// launch/launcher: the logic of `tessera run`, as a library so that it can be tested piece by piece.
//
// `tessera run --island VENDOR=DEVICE:COUNT [--island ...] -- PROGRAM ARGS...` starts a store (with a random
// job token) and one process per rank on this machine, numbered in island order, each with the TESSERA_*
// variables that tsrCommInitFromEnv() reads. It prefixes every line the ranks print with
// "[rank R vendor] ", forwards SIGINT/SIGTERM/SIGHUP to them, and when one rank fails it reports which
// one and how, gives the others a short grace (--stop-grace) to exit on their own, then stops them
// (SIGTERM, SIGKILL 2 s later); on several nodes every node's launcher hears of it through the store and
// stops its ranks the same way. docs/launcher.md is the user guide.
//
// Several hosts form one job when every host runs the same `tessera run` with --nnodes N --node-rank K
// --store HOST:PORT (or inside a Slurm step, where all three come from SLURM_*): the ranks of the job
// (the --island counts are per job) are dealt to the nodes in order, in contiguous blocks, node 0 serves
// the store on HOST:PORT, and every node starts only its own block, with the job's rank numbers.
#pragma once

#include <chrono>
#include <cstdio>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/env.hpp"
#include "common/vendor.hpp"
#include "tessera/status.hpp"

namespace tessera::launch {

// One --island option: "ascend=host:3", "nvidia=cuda:4".
struct IslandSpec {
  std::string vendor;
  const DeviceFamily* family = nullptr;  // the device family of its ranks (common/vendor); null: host ranks
  int count = 0;
  std::string text;  // as the user wrote it, for messages
};

// One rank of the job, as it will be started.
struct RankSpec {
  int rank = 0;        // 0..world-1, island 0's ranks first
  int island = 0;      // index of its island, in --island order
  int local_rank = 0;  // index among the ranks on this machine (== rank on one machine)
  int node = 0;        // index of the node (launcher) that starts it
  std::string vendor;  // the island's vendor
  std::string device;  // "host" or PREFIX:N ("cuda:3"), PREFIX a device family's (common/vendor)
};

// The most ranks one launcher starts (each takes two pipes and a process).
constexpr int kMaxWorldSize = 1024;

// Parses one --island value; errors name the value and what is wrong with it.
Result<IslandSpec> ParseIsland(const std::string& text);
// Parses every --island value and checks the layout as a whole (at least one, no vendor twice, world size).
Result<std::vector<IslandSpec>> ParseIslands(const std::vector<std::string>& texts);
// "ascend=host:3,nvidia=host:5": the TESSERA_ISLANDS value.
std::string LayoutString(const std::vector<IslandSpec>& islands);
// The devices this launcher sees, per device family (by prefix); a family not listed has none.
struct VisibleDevices {
  int count = 0;
  std::string why;  // why there are none (e.g. the runtime's error), for messages
};
using DeviceCounts = std::map<std::string, VisibleDevices>;
// The counts of the families the islands use (comm/runtime's VisibleDeviceCount); host islands ask nothing.
DeviceCounts CountVisibleDevices(const std::vector<IslandSpec>& islands);
// Every family with `count` devices (tests, and plans whose devices are assigned later).
DeviceCounts SameDeviceCount(int count, const std::string& why = "");
// Numbers the ranks and assigns devices: the ranks of a family's islands get PREFIX:0, PREFIX:1, ...
// round-robin over that family's visible devices (islands may share one). An island whose family has no
// visible device is an error that says so and why.
Result<std::vector<RankSpec>> PlanRanks(const std::vector<IslandSpec>& islands, const DeviceCounts& visible);
inline Result<std::vector<RankSpec>> PlanRanks(const std::vector<IslandSpec>& islands, int devices,
                                               const std::string& why = "") {
  return PlanRanks(islands, SameDeviceCount(devices, why));
}
// The note `tessera run` prints when ranks of different islands share one device of a family that MPS serves (cuda)
// as separate processes, outside MPS (an island not in `sm_share`): the GPU runs their contexts in turns, a fixed
// cost on every device-bridge call between them (docs/devices.md, "Limits"). "" when no device is shared so.
std::string SharedDeviceNote(const std::vector<RankSpec>& ranks, const std::vector<IslandSpec>& islands,
                             const std::map<std::string, int>& sm_share);
// Multi-node: the ranks [lo, hi) of `node` when `world` ranks are dealt to `nnodes` nodes in order, in
// contiguous blocks whose sizes differ by at most one (lo = world * node / nnodes).
std::pair<int, int> NodeBlock(int world, int nnodes, int node);
// The ranks that node `node_rank` of `nnodes` starts (global rank numbers, local_rank from
// `local_offset`, devices assigned as in PlanRanks among this node's ranks only). Errors name the values.
Result<std::vector<RankSpec>> PlanNodeRanks(const std::vector<IslandSpec>& islands, int nnodes, int node_rank,
                                            const DeviceCounts& visible, int local_offset = 0);
inline Result<std::vector<RankSpec>> PlanNodeRanks(const std::vector<IslandSpec>& islands, int nnodes, int node_rank,
                                                   int devices, const std::string& why = "", int local_offset = 0) {
  return PlanNodeRanks(islands, nnodes, node_rank, SameDeviceCount(devices, why), local_offset);
}

// Slurm: "node[01-03],gpu7,a[1,4-5]b" → node01 node02 node03 gpu7 a1b a4b a5b (what `scontrol show
// hostnames` prints). Errors name the list.
Result<std::vector<std::string>> ExpandHostList(const std::string& list);
// Slurm's SLURM_TASKS_PER_NODE: "2(x3),1" → 2 2 2 1.
Result<std::vector<int>> ExpandTasksPerNode(const std::string& text);

// One `tessera run` inside a Slurm job step (srun): one launcher per task, the task's rank = node rank.
struct SlurmTask {
  int procid = 0;          // SLURM_PROCID: this launcher's index ("node rank")
  int ntasks = 1;          // SLURM_NTASKS: launchers in the step ("nnodes")
  int localid = 0;         // SLURM_LOCALID: this task's index on its machine
  int node_tasks = 1;      // tasks of the step on this machine (SLURM_TASKS_PER_NODE at SLURM_NODEID)
  std::string store_host;  // first host of the step's node list (het job: of component 0)
  int store_port = 0;      // 20000 + 2 * (job id % 20000); MASTER_PORT is the next one
  std::string job_id;      // SLURM_HET_JOB_ID when set, else SLURM_JOB_ID
  int het_component = -1;  // SLURM_HET_JOB_COMPONENT (or SLURM_HET_JOB_OFFSET) in a heterogeneous job
  std::string text;        // "Slurm job 123 task 2 of 4" for messages
};
// Reads a Slurm step from these variables: nullopt when SLURM_PROCID or SLURM_NTASKS is unset (not in a
// step); an error naming the variable and value when one is malformed.
Result<std::optional<SlurmTask>> SlurmFromEnv(const std::map<std::string, std::string>& env);
// The job token from a file: it must be a regular file of this user, readable by no one else (mode 0600
// or 0400), with one non-empty line of at most 256 characters.
Result<std::string> ReadTokenFile(const std::string& path);
// The local address this host uses to reach `host` (the source address of the route to it): what the
// ranks of this node advertise for their TCP transport. Errors name the host.
Result<std::string> RouteSourceAddress(const std::string& host);

// The variables of one rank, in a fixed order: TESSERA_*, torchrun's RANK, WORLD_SIZE, LOCAL_RANK,
// LOCAL_WORLD_SIZE (`local_world_size`, or `world_size` when 0), MASTER_ADDR/MASTER_PORT when
// master_port > 0, and for a rank with a device its family's visible-devices variable naming that device
// alone (CUDA_VISIBLE_DEVICES for cuda:N; its TESSERA_DEVICE is then PREFIX:0). `visible_gpus` is the
// launcher's own value of that variable ("" when unset), whose N-th entry is device N here.
std::vector<std::pair<std::string, std::string>> RankEnvironment(
    const RankSpec& rank, int world_size, const std::string& layout, const std::string& store_address,
    const std::string& token, std::chrono::milliseconds timeout, int master_port = 0,
    const std::string& visible_gpus = "", int local_world_size = 0, const std::string& master_addr = "127.0.0.1");
// A free TCP port on 127.0.0.1 (bound, read back, released), for MASTER_PORT.
Result<int> FreeLoopbackPort();

// A table of rank, island, vendor, device (for --dry-run).
std::string FormatRankTable(const std::vector<RankSpec>& ranks, const std::string& layout);

// "SIGKILL" for 9; "signal 64" when the number has no name.
std::string SignalName(int sig);

struct Options {
  std::vector<IslandSpec> islands;
  std::vector<std::string> program;  // PROGRAM ARGS...
  // TESSERA_TIMEOUT for the ranks. Default: its declared one.
  std::chrono::milliseconds timeout = env::DeclaredDuration("TESSERA_TIMEOUT");
  // After the job's first failure (on any node), how long the other ranks get to exit on their own (to say why
  // they fail) before they are stopped (--stop-grace).
  std::chrono::milliseconds stop_grace{3000};
  std::chrono::milliseconds kill_after{2000};  // from SIGTERM to SIGKILL when stopping ranks
  bool dry_run = false;                        // print the rank table, start nothing
  bool prefix = true;  // "[rank R vendor] " before every line of the ranks' output (--no-prefix: as they print it)
  // --sm-share VENDOR=PERCENT: the cuda island VENDOR runs on PERCENT% of its GPU's SMs (MPS; sm_share.hpp).
  std::map<std::string, int> sm_share;
  // Several nodes (docs/launcher.md, "Jobs across hosts"). One node: nnodes 1, store_host "" (a store on
  // 127.0.0.1 with a free port), a random token.
  int nnodes = 1;
  int node_rank = 0;
  std::string store_host;  // where node 0 serves the store (its own address); required with nnodes > 1
  int store_port = 0;      // 0 on node 0: pick a free port and print it
  std::string token;       // the job token, the same on every node (TESSERA_TOKEN or --token-file); "": random
  std::string node_addr;   // this node's address for the ranks' TCP transport; "": RouteSourceAddress(store_host)
  int local_offset = 0;    // local rank of this launcher's first rank (Slurm: earlier tasks on the machine)
  int local_world = 0;     // ranks on this machine (LOCAL_WORLD_SIZE); 0: this launcher's ranks
  std::string origin;      // where the node layout came from, for messages ("--nnodes 2 --node-rank 1", Slurm ...)
};

// Runs the job to completion and returns the launcher's exit status: 0 when every rank exited 0; else
// the exit status of the first rank that failed (128+N when it was killed by signal N); 2 for a layout
// that cannot run here; 127 when a rank could not be started; 1 for other failures of the launcher.
// Messages go to stderr, prefixed "tessera run: "; the ranks' output goes to stdout/stderr, prefixed.
// Installs signal handlers for the duration of the call; call it from the main thread.
int Run(const Options& options);

}  // namespace tessera::launch
