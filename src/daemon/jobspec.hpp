// daemon/jobspec: the job file that `tessera submit` sends. It is the planner's job YAML (name, tenant,
// priority, workload class, cards or throughput, compatible types; see sched/sched.hpp) plus the keys
// the daemon owns:
//   command: [program, arg, ...]      what each rank runs under `tessera run` (required)
//   workdir: DIR                      default: the job's own directory in the tenant's area
//   checkpoint: {dir: DIR, every: N}  where the job's checkpoints live (TESSERA_CKPT_ROOT); every N steps
//   grace: 10s                        SIGTERM -> SIGKILL grace period on preemption or cancel
//   env: {NAME: value}                extra environment for the ranks
//   remix: never|policy|cost          whether the scheduler may move the running job to another mix of cards,
//                                     or {mode: cost, min_gain: 15%, min_interval: 10m,
//                                     restart: 30s} (docs/daemon.md,
//                                     "Moving running jobs"); default policy
// A relative command is resolved against the job file's directory, workdir and checkpoint.dir against the
// tenant's area (and confined to it). Errors name the file, the line and the key.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "sched/sched.hpp"
#include "tessera/status.hpp"

namespace tessera::daemon {

// When the scheduler may move a running job to another mix of cards (docs/daemon.md, "Moving running jobs").
enum class RemixMode { kNever, kPolicy, kCost };
const char* RemixModeName(RemixMode m);  // "never" | "policy" | "cost"
struct RemixSpec {
  RemixMode mode = RemixMode::kPolicy;
  sched::Ppm min_gain = 150'000;      // predicted gain in tokens per unit of money that a cost move needs
  int64_t min_interval_ms = 600'000;  // no move by choice (cost) sooner than this after the job's last move
  int64_t restart_ms = 30'000;        // the restart a move costs, until one of the job's moves measured it
};

// `checkpoint.keep` when a job file gives none: the newest 5 committed steps stay in the hot tier.
inline constexpr int64_t kDefaultCheckpointKeep = 5;

struct RunSpec {
  std::vector<std::string> command;
  std::string workdir;
  std::string ckpt_dir;    // "" = the daemon picks <state>/jobs/<id>/ckpt
  int64_t ckpt_every = 0;  // 0 = the program's default
  // Hot-tier retention: the daemon keeps this many newest committed steps in ckpt_dir (0: all of them).
  int64_t ckpt_keep = kDefaultCheckpointKeep;
  int64_t grace_ms = 10000;
  std::map<std::string, std::string> env;
  RemixSpec remix;
};

struct JobSpec {
  sched::Job job;  // the planner's part
  RunSpec run;
};

// Parses `yaml` (the text of file `source`, whose directory is `base_dir`). `tenant` is the submitting
// tenant: a `tenant:` in the file must match it. `compatible` (from --policy-compatible), when not empty,
// replaces the file's compatible list. The job's name may not hold control characters.
// `area` (the tenant's area; the daemon always gives it): `workdir` and `checkpoint.dir` are taken relative to
// it and must resolve ('..' and symlinks) inside it; an absent workdir stays "" (the job's own directory).
// Without `area` they are relative to `base_dir`, and the workdir defaults to it.
Result<JobSpec> ParseJobSpec(const std::string& yaml, const std::string& source, const std::string& base_dir,
                             const std::string& tenant, const std::vector<std::string>& compatible,
                             const std::string& area = "");

// Blanks the top-level `keys` of a YAML mapping (their whole block) so that another parser sees the rest
// with unchanged line numbers. Exposed for the fleet's `emulated:` keys and for tests.
std::string BlankTopLevelKeys(const std::string& yaml, const std::vector<std::string>& keys);

// The fleet file the daemon accepts: the planner's fleet YAML plus, at the top level (all nodes) or per node,
//   emulated: true|false   true: the node's cards are emulated as host ranks (--island VENDOR=host:N)
//   sm_share: PERCENT      1..100: the cards are emulated on PERCENT% of the SMs of this host's GPU
//                          (--island VENDOR=cuda:N --sm-share VENDOR=PERCENT, through NVIDIA MPS)
// A node's own key wins over the top level's; a node's `emulated: false` opts it out of a top-level sm_share,
// and `sm_share` with `emulated: false` on one node (or both at the top level) is refused. The emulated nodes of
// one type in one zone must run one way (all host ranks, or all one share): a placement's island has one share.
// Returns the planner's fleet, the ids of the emulated nodes and the shares.
struct FleetSpec {
  sched::Fleet fleet;
  std::vector<std::string> emulated;    // node ids whose cards are emulated (host ranks or an SM share)
  std::map<std::string, int> sm_share;  // node id -> percent, for the emulated nodes on an SM share of the GPU
  bool IsEmulated(const std::string& node) const;
  int SmShare(const std::string& node) const;  // 0: not on an SM share
};
// How emulated cards run, for every label: "host ranks", or "SM share 35% of a GPU" for sm_share 35.
std::string EmulationKind(int sm_share);
Result<FleetSpec> ParseFleetSpec(const std::string& yaml, const std::string& source);

}  // namespace tessera::daemon
