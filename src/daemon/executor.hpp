// daemon/executor: the local executor. A job attempt runs as
//   tessera daemon shim --dir ATTEMPT_DIR --log LOG --cwd DIR -- tessera run --island V=host:N ... -- COMMAND
// The shim is started in its own session (setsid), so the job survives a crash of the daemon; it starts
// the launcher in a process group of its own, writes pid.json (its pid, the launcher's pid, the start
// time) and, when the launcher ends, exit.json (exit code or signal, the end time) — both atomically. The
// daemon, restarted, reads these files to reconcile: a job whose shim still runs keeps running, one whose
// exit.json exists is finished with its real end time. Signals go to every process of the session except
// the shim (SIGTERM first, SIGKILL after the grace period), so the shim always records the end.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "daemon/jobspec.hpp"
#include "sched/sched.hpp"
#include "tessera/status.hpp"

namespace tessera::daemon {

// One island of an attempt: the cards of one accelerator type.
struct Island {
  std::string type;    // catalog type, "ascend-910b"
  std::string vendor;  // island vendor for `tessera run --island VENDOR=...`
  std::string device;  // "host" for emulated cards, "cuda" for real NVIDIA cards and cards on an SM share
  int64_t count = 0;
  bool emulated = false;
  int sm_share = 0;              // 1..100: emulated on that percentage of the GPU's SMs (--sm-share); 0: none
  sched::Throughput weight = 0;  // per-card throughput for the job's workload class (speed weight)
};
nlohmann::json IslandsToJson(const std::vector<Island>& islands);
std::vector<Island> IslandsFromJson(const nlohmann::json& j);
// "--island ascend=host:2 --island nvidia=host:2" as argv items; the islands on an SM share follow with
// "--sm-share ascend=35" after all the islands.
std::vector<std::string> IslandArgs(const std::vector<Island>& islands);
// "1.0,0.5": the islands' speed weights in island order (TESSERA_ISLAND_WEIGHTS).
std::string IslandWeights(const std::vector<Island>& islands);

// Maps a placement to islands, one per accelerator type, in catalog order. Cards on emulated nodes run as
// host ranks, or as cuda ranks on an SM share of the GPU for nodes with sm_share; real NVIDIA cards as cuda
// ranks; other real cards are Unsupported on this executor, and so is a type placed on nodes that run
// differently (real and emulated, or two shares).
Result<std::vector<Island>> IslandsFor(const sched::Placement& placement, const sched::Catalog& catalog,
                                       const FleetSpec& fleet, const std::string& workload_class);

struct LaunchRequest {
  std::string self_exe;               // the tessera binary (runs the shim)
  std::vector<std::string> launcher;  // default {self_exe, "run"}
  std::string attempt_dir;            // pid.json / exit.json go here
  std::string log_path;               // stdout+stderr of the launcher and ranks, appended
  std::string workdir;
  std::vector<Island> islands;
  std::vector<std::string> command;
  std::map<std::string, std::string> env;  // set for the ranks (over the daemon's environment)
  // Isolation (daemon/security.hpp). uid >= 0: the shim drops to uid/gid (no supplementary groups, no new
  // privileges) before it starts the launcher. bwrap non-empty: the launcher runs inside bubblewrap, where each
  // `hide` directory is an empty tmpfs and each `bind` directory (inside a hidden one) is the real one again.
  int64_t uid = -1, gid = -1;
  std::string bwrap;
  std::vector<std::string> hide, bind;
};
// The environment a job gets: the daemon's, without what belongs to the daemon (TESSERA_HOME, TESSERA_DAEMON*,
// TESSERA_LEDGER and every other TESSERA_* but the collectives' tuning variables and TESSERA_LOG), plus `set`.
std::vector<std::string> JobEnvironment(char** daemon_env, const std::map<std::string, std::string>& set);
// Starts the shim in a new session; returns its pid (= the session id).
Result<pid_t> Launch(const LaunchRequest& request);

struct ShimPids {
  pid_t shim = 0;
  pid_t child = 0;
  int64_t started_ms = 0;
  bool sandboxed = false;  // child is bubblewrap's monitor: it must not get the job's SIGTERM
};
struct ShimExit {
  int exit_code = -1;  // exit status, or -1 when killed by a signal
  int signal = 0;
  int64_t ended_ms = 0;
  // false when the shim's child never started its program (the work directory could not be entered, the
  // identity could not be taken, exec failed): such an attempt is not billed.
  bool started = true;
};
Result<ShimPids> ReadPidFile(const std::string& attempt_dir);   // NotFound until written
Result<ShimExit> ReadExitFile(const std::string& attempt_dir);  // NotFound while running

// Entry point of `tessera daemon shim ...` (argv starts at "shim").
int RunShim(int argc, char** argv);

// The path of the running executable (/proc/self/exe).
std::string SelfExe();

}  // namespace tessera::daemon
