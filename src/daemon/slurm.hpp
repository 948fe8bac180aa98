// daemon/slurm: what the daemon's Slurm executor (slurm_executor.cpp) needs from Slurm, as pure functions over
// its text — the nodes of `scontrol show nodes` and the fleet file they make, the records of `scontrol show job`
// and `sacct -P` / `sacct -c`, Slurm's job states mapped to the daemon's, the sbatch command line of a
// heterogeneous job (one component per card type) and its batch script — plus RunCommand, which runs one Slurm
// command with a bound on its time (every Slurm call of the daemon goes through it, so none can hang it).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "daemon/executor.hpp"
#include "daemon/jobspec.hpp"
#include "sched/sched.hpp"
#include "tessera/status.hpp"

namespace tessera::daemon::slurm {

// The GRES of one card of a catalog type: its `slurm_gres`, else its vendor's family's (common/vendor.hpp:
// nvidia → gpu, ascend/huawei → npu), else the vendor's name.
std::string GresOf(const sched::AcceleratorType& type);

struct Gres {
  std::string name;  // "gpu"
  std::string type;  // "h800" in gpu:h800:8; "" when untyped
  int64_t count = 0;
};
// "gpu:2,npu:4", "gpu:h800:8(S:0-1)", "(null)" (none).
Result<std::vector<Gres>> ParseGres(const std::string& text);

struct Node {
  std::string name;                     // NodeName
  std::string state;                    // State, e.g. IDLE, MIXED, DOWN+NOT_RESPONDING
  std::vector<std::string> partitions;  // Partitions, in Slurm's order
  std::vector<Gres> gres;
};
// The records of `scontrol show nodes` (multi-line or --oneliner). Errors name the record.
Result<std::vector<Node>> ParseNodes(const std::string& text);

struct ImportOptions {
  bool emulated = false;      // write `emulated: true` (cards run as host ranks: test clusters)
  std::string zone;           // every node in this zone; "" = the node's first partition
  bool include_down = false;  // keep nodes whose state is DOWN, DRAIN or FAIL
};
// The daemon's fleet file for these nodes: one fleet node per (Slurm node, catalog type whose GRES it has),
// with id NODE (or NODE/TYPE when the node has cards of several types), zone = partition, cards = the GRES
// count. GRES that no catalog type claims are listed in a comment. Error when no node has any catalog GRES.
Result<std::string> FleetYaml(const std::vector<Node>& nodes, const sched::Catalog& catalog,
                              const ImportOptions& options, const std::string& origin);
// The Slurm node of a fleet node id (the part before '/').
std::string SlurmNodeOf(const std::string& fleet_node_id);
// A node Slurm cannot run jobs on: its state says DOWN, DRAIN or FAIL.
bool IsDown(const Node& node);
// After a NODE_FAIL: the fleet node ids of an allocation (`fleet_nodes`, "a01" or "a01/TYPE") whose Slurm node is
// down in `nodes` (`scontrol show nodes`), in the allocation's order.
std::vector<std::string> LostNodes(const std::vector<Node>& nodes, const std::vector<std::string>& fleet_nodes);

// Cards emulated on an SM share of a GPU (`sm_share:` in the fleet file) are a single-host emulation: one
// launcher starts the MPS daemon that shares its GPU, which a job spread by Slurm over nodes does not have.
// Unsupported, naming the first such node (at fleet registration) or island (at an attempt's start).
Status CheckNoSmShare(const FleetSpec& fleet);
Status CheckNoSmShare(const std::vector<Island>& islands);

// One job record (a component of a heterogeneous job is one record).
struct JobRecord {
  int64_t id = 0;
  int64_t het_id = 0, het_offset = -1;     // HetJobId / HetJobOffset; 0 / -1 when not a het job
  std::string state;                       // JobState, e.g. PENDING, RUNNING, COMPLETED, NODE_FAIL
  std::string reason;                      // Reason ("None" becomes "")
  int64_t start_unix = -1, end_unix = -1;  // -1 when Unknown / None
  int exit_code = 0, signal = 0;           // ExitCode=C:S
  std::string nodes;                       // NodeList
};
// The records of `scontrol show job ID` (multi-line or --oneliner), or of the jobcomp file's lines.
Result<std::vector<JobRecord>> ParseJobs(const std::string& text);
// `sacct -n -P -o JobID,State,Start,End,ExitCode` (also with -c): one record per line; step lines
// (JobID with '.') are skipped; "CANCELLED by 0" becomes CANCELLED.
Result<std::vector<JobRecord>> ParseSacct(const std::string& text);
// "2026-12-01T10:25:33" in local time → Unix seconds; -1 for Unknown, None, N/A or anything else.
int64_t ParseTime(const std::string& text);

// What a Slurm state means for the daemon.
enum class Phase { kPending, kRunning, kCompleted, kFailed, kCancelled, kNodeFail };
Phase PhaseOf(const std::string& state);
const char* PhaseName(Phase p);
// One heterogeneous job from its components' records: pending while any is pending and none has ended,
// running while any runs; ended when all have ended — NODE_FAIL if any component's node failed, else
// CANCELLED if any was cancelled, else FAILED if any failed, else COMPLETED. Start = the earliest start,
// end = the latest end; the exit status is the first non-zero one; the reason is the first non-empty one.
struct JobState {
  Phase phase = Phase::kPending;
  std::string states;  // "RUNNING" or "RUNNING+PENDING": the components' states, in offset order, distinct
  std::string reason;
  int64_t start_unix = -1, end_unix = -1;
  int exit_code = 0, signal = 0;
  std::string nodes;
};
JobState Combine(const std::vector<JobRecord>& records);
// The records that belong to het job `id` (records whose HetJobId is `id`, or whose JobId is `id`).
std::vector<JobRecord> RecordsOf(const std::vector<JobRecord>& all, int64_t id);

// One component of the heterogeneous job: the cards of one catalog type.
struct Component {
  std::string gres;                                    // "gpu", "npu", "gpu:h800"
  std::string partition;                               // "" = Slurm's default
  std::vector<std::pair<std::string, int64_t>> nodes;  // Slurm node, cards on it
};
struct SubmitRequest {
  std::string job_name;
  std::string workdir;
  std::string output;          // the file the job's output is appended to
  std::string script;          // path of the batch script
  int64_t uid = -1, gid = -1;  // root daemon: run the job as this user (sbatch --uid/--gid)
  std::vector<Component> components;
};
// sbatch's arguments (without "sbatch"): --parsable, the common options, then per component its options,
// components separated by ":", then the script. Errors name what is wrong (no components, no nodes).
Result<std::vector<std::string>> SbatchArgs(const SubmitRequest& request);
// The batch script: one step over all components, `srun --het-group=0,...,k-1 COMMAND...` (plain srun for one
// component), exec'd so that the job's exit status is srun's. Every word is quoted for the shell.
std::string BatchScript(const std::vector<std::string>& command, size_t components, const std::string& comment);
std::string ShellQuote(const std::string& word);

// ---- running Slurm's commands ---------------------------------------------------------------------------

struct CommandResult {
  int exit_code = -1;  // -1: could not start, killed, or timed out
  bool timed_out = false;
  std::string out, err;
  std::string Describe(const std::string& command) const;  // "sbatch: exit 1: sbatch: error: ..." etc.
};
// Runs argv[0] (looked up in PATH) with stdin from /dev/null, collecting stdout and stderr; after `timeout_ms`
// it is killed (SIGKILL to its process group) and timed_out is set. Never waits longer than timeout_ms + 1 s.
CommandResult RunCommand(const std::vector<std::string>& argv, int64_t timeout_ms,
                         const std::vector<std::string>* env = nullptr);

}  // namespace tessera::daemon::slurm
