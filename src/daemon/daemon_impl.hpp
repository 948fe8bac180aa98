// daemon/daemon_impl: the Daemon object behind RunDaemon (daemon.hpp), internal to src/daemon. Its members are
// defined in one file per concern, among them:
//   config.cpp     configuration (catalog, fleet, policy), start-up (Init), tenants and their areas
//   scheduler.cpp  the scheduler thread: reaping, preemption, placement and starting attempts
//   billing.cpp    the billing of ended attempts in the ledger
//   api.cpp        the HTTP/JSON API's routes (authentication, admission, request parsing, answers)
//   daemon.cpp     Serve (threads, signals) and RunDaemon
// All SQL is in the job store (daemon/job_store); all state is guarded by mu_, which the scheduler holds for a
// pass and every handler for its request.
#pragma once

#include <fmt/format.h>
#include <sys/types.h>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "daemon/daemon.hpp"
#include "daemon/executor.hpp"
#include "daemon/http_server.hpp"
#include "daemon/job_store.hpp"
#include "daemon/jobspec.hpp"
#include "daemon/security.hpp"
#include "daemon/tenant_reads.hpp"
#include "sched/sched.hpp"
#include "tessera/ckpt.hpp"

namespace tessera::daemon {

// Set by SIGINT/SIGTERM and SIGHUP (daemon.cpp).
extern std::atomic<bool> g_stop;
extern std::atomic<bool> g_reload;

// The key of a job in the planner and the ledger: "name#id".
inline std::string JobKey(const std::string& name, int64_t id) { return fmt::format("{}#{}", name, id); }

// What the configuration is before anything was stored: the embedded catalog and policy, no fleet.
ConfigTexts DefaultConfig();

// A placement as the API shows it and as attempts store it (alloc_json, plan_json).
nlohmann::json PlacementToJson(const sched::Placement& p, const sched::Catalog& catalog, const FleetSpec& fleet);

// A mix of cards: cards per catalog type.
using Mix = std::map<std::string, int64_t>;
Mix MixOfAllocation(const std::string& alloc_json);  // an attempt's stored allocation ("by_type")
Mix MixOfPlacement(const sched::Placement& p);
std::string MixText(const Mix& mix);  // "2xascend-910b + 2xnvidia-h800"
// What a mix costs per hour now and the work it does per hour (the catalog's throughput for the job's class).
struct MixValue {
  sched::Money cost_per_hour = 0;
  sched::Throughput throughput = 0;
};
MixValue ValueOfMix(const Mix& mix, const sched::Catalog& catalog, const std::string& workload_class);
// The predicted gain in work per unit of money of doing the remaining work (`remaining_s` seconds on `from`) on
// `to` instead, paying `restart_s` seconds of `to`'s price for the move: cost on `from` / cost on `to` - 1.
// nullopt when a value is zero (no throughput for the class, no price, nothing left).
std::optional<double> PredictedGain(const MixValue& from, const MixValue& to, double remaining_s, double restart_s);
std::string FormatGain(std::optional<double> gain);  // "+23.5%", "unknown"
// What moved a job, from its move record (an attempt's allocation "move"), as the job's events, GET /v1/jobs/ID's
// "summary", `tessera status` and the console say it. A cost move names its predicted gain, which triggered it;
// a policy or capacity move says that the floor or the lost cards required it, not its cost (a policy move adds
// how the new mix's work per unit of money compares, per hour of work: the restart is paid whatever the gain).
std::string MoveSummary(const nlohmann::json& move, const std::string& currency);
// The last "step N[/M] [loss L]" of the job's log: {step, of?, loss?}, or null.
nlohmann::json ProgressFromLog(const std::string& path);

// What a job's start makes and reads in its tenant's area (PrepareStartDirs, run off the daemon's lock): its
// checkpoint and working directories (resolved, created, owned by the job) and the newest checkpoint to resume
// from (an error there means a fresh start, as an empty directory does).
struct StartDirs {
  std::string ckpt_dir, workdir;
  Result<ckpt::LatestInfo> latest = NotFound("not read");
};
Result<StartDirs> PrepareStartDirs(const std::string& area, const std::string& own, const std::string& ckpt_dir,
                                   const std::string& workdir, int64_t uid, int64_t gid);
// How long a start's prepared directories stay good for when the job was not started at the pass that found
// them ready (no cards by then): after that they are made and read again.
constexpr int64_t kStartDirsFreshMs = 60'000;

struct Caller {
  std::string tenant;
  bool admin = false;
};

class Daemon {
 public:
  explicit Daemon(DaemonOptions o) : opts_(std::move(o)) {}
  Status Init();
  int Serve();

 private:
  // ---- configuration (config.cpp)
  Status LoadConfig();
  Status ApplyConfig(const std::string& catalog_src, const std::string& catalog_yaml, const std::string& fleet_src,
                     const std::string& fleet_yaml, const std::string& policy_src, const std::string& policy_yaml,
                     bool persist);
  // ---- scheduler (scheduler.cpp; all under mu_)
  void Loop();
  void Tick();
  void CheckAttempt(const AttemptOfJob& a, int64_t now);
  // started: false when the program never started (ShimExit::started); the attempt is then not billed.
  void FinishAttempt(const AttemptOfJob& a, int exit_code, int sig, int64_t ended_ms, const std::string& note,
                     bool started = true);
  void BillPending();
  void Schedule(int64_t now);
  Result<std::vector<sched::RunningJob>> Running(std::vector<AttemptOfJob>* active_rows);
  // `moving`: the key of a running job in `running` planned for a move (sched::PlanMove): its cards count as free.
  // `day`: the day whose floor applies (default today).
  Result<sched::PlanResult> PlanJob(const JobSpec& spec, const std::vector<sched::RunningJob>& running,
                                    const std::string& moving = "", std::optional<int64_t> day = std::nullopt);
  Status Start(const JobRow& job, const JobSpec& spec, const sched::Placement& placement, int64_t now);
  Status RequestStop(int64_t job_id, const std::string& intent, const std::string& reason);
  // ---- moving running jobs (remix.cpp; under mu_; docs/daemon.md, "Moving running jobs")
  struct MoveRequest {
    std::string reason;  // policy | cost | capacity
    std::string why, from, to;
    std::optional<double> gain;         // cost moves: the predicted gain that triggered it
    std::optional<double> rate_change;  // policy moves: work per unit of money of `to` against `from`, per hour
  };
  // The floor rose and `running` breaks it: stops the lowest-priority jobs until the rest comply, each with a
  // compliant mix chosen for it now (recorded as a move) when its remix mode allows one and one exists.
  void PolicyMoves(const std::vector<AttemptOfJob>& active, const std::vector<sched::RunningJob>& running,
                   const sched::ShareStatus& share);
  // At each new committed checkpoint of a `remix: cost` job: moves it when a compliant mix is predicted to gain
  // at least remix.min_gain; true when a move was requested.
  bool CostMoves(const std::vector<AttemptOfJob>& active, const std::vector<sched::RunningJob>& running, int64_t now);
  Status RequestMove(int64_t job_id, int64_t priority, const MoveRequest& m);
  // At the start of an attempt: records the move it completes (if any) in its allocation, counts it, logs it.
  void CompleteMove(int64_t job_id, const std::string& tenant, nlohmann::json* alloc, int64_t now);
  // An attempt of the local executor that ended because some of its ranks were killed by SIGKILL from outside
  // the launcher (a lost node or card): leaves the nodes of those islands' types out of planning (failed_nodes_)
  // and records a capacity move; returns the reason to queue it with, "" when it was no such loss.
  std::string CapacityLost(const AttemptOfJob& a);
  // Records a capacity move of the attempt's job (for its next start); returns the reason to queue it with.
  std::string RecordCapacityMove(const AttemptOfJob& a, const std::string& why);
  // The fleet without the failed nodes' free cards (what a job can be placed on now).
  sched::Fleet UsableFleet(const std::vector<sched::RunningJob>& running) const;
  std::optional<double> RemainingSeconds(const AttemptOfJob& a, int64_t now);  // of the job's work, on its mix
  double RestartSeconds(int64_t job_id, const RemixSpec& remix);  // the last measured move's, else remix.restart
  std::optional<int64_t> LastMoveMs(int64_t job_id);              // start of the attempt of its last move
  // ---- Slurm executor (slurm_executor.cpp; under mu_)
  Status CheckSlurmReady();  // at start: Slurm's client answers, jobs can run as their users
  // Submits the attempt as one heterogeneous job; a failure of sbatch fails the job (naming the command and
  // Slurm's message) and returns Ok, as a failed local launch does.
  Status StartSlurm(const JobRow& job, const AttemptRow& attempt, const LaunchRequest& lr,
                    const std::vector<Island>& islands, const sched::Placement& placement, const std::string& own_dir);
  void CheckSlurmAttempt(const AttemptOfJob& a, int64_t now);
  void CopySlurmLog(const AttemptOfJob& a, const std::string& output);
  Result<JobSpec> SpecFor(const JobRow& job);
  void Event(int64_t job_id, const std::string& text);
  void FailJob(int64_t job_id, const std::string& reason);
  // ---- HTTP (api.cpp)
  std::string NeverFits(const JobSpec& spec);  // admission: why no zone could ever hold it, or ""
  void SetUpHttp();                            // the routes, the limits, the error and exception handlers
  void Routes();
  std::optional<Caller> Auth(const httplib::Request& req, httplib::Response& res);
  Result<JobRow> LoadJobFor(const Caller& c, int64_t id);
  // The routes under /v1/jobs/ID: the caller (authenticated) and the job ID it may see; on failure the
  // error reply is written and nullopt returned. Call with mu_ held.
  std::optional<std::pair<Caller, JobRow>> CallerAndJob(const httplib::Request& req, httplib::Response& res);
  // STATE/jobs/ID: the job's attempts (pid.json, exit.json); job.log there is the launcher's and the ranks'
  // output.
  std::string JobDir(int64_t job_id) const { return opts_.state_dir + "/jobs/" + std::to_string(job_id); }
  std::string JobLogPath(int64_t job_id) const { return JobDir(job_id) + "/job.log"; }
  nlohmann::json JobSummary(const JobRow& job);
  // Adds started_ms, first_started_ms, elapsed_ms, cost_so_far, currency and (running, with "progress" set
  // to step N of M) estimated_end_ms to a job's JSON (job_view.cpp).
  void AddRunTimes(const JobRow& job, nlohmann::json* out);
  // The queued jobs' estimated starts, as squeue --start (job_view.cpp): job id -> {estimated_start_ms (null
  // when unknown), estimated_start (from what it was estimated, or why it cannot be)}. Jobs of tenants other
  // than the caller's are not named to it.
  std::map<int64_t, nlohmann::json> EstimateStarts(int64_t now, const Caller& caller);
  // Hot-tier retention (job_view.cpp): every 2 s each job with an open attempt keeps its newest
  // `checkpoint.keep` committed steps in its checkpoint directory.
  void PruneCheckpoints(const std::vector<AttemptOfJob>& active, int64_t now_ms);
  int64_t last_prune_ms_ = 0;
  // ---- security (config.cpp; daemon/security.hpp)
  Status LoadTenants();
  Status LoadAdminToken();  // STATE/token (created when missing) -> admin_hash_
  Result<std::string> TenantArea(const std::string& tenant);
  Status IdentityFor(const std::string& tenant, int64_t* uid, int64_t* gid);
  Result<JobSpec> ParseSpec(const std::string& yaml, const std::string& source, const std::string& base,
                            const std::string& tenant, const std::vector<std::string>& compatible);

  DaemonOptions opts_;
  std::unique_ptr<JobStore> store_;
  std::unique_ptr<sched::Ledger> ledger_;
  bool ledger_warned_ = false;
  std::string ledger_path_;

  std::mutex mu_;
  std::condition_variable cv_;
  bool wake_ = false;

  sched::Catalog catalog_;
  FleetSpec fleet_;
  sched::Policy policy_;
  bool have_fleet_ = false;

  std::map<int64_t, JobSpec> specs_;                                 // parsed job files by id
  std::set<pid_t> children_;                                         // shims started by this process (to reap)
  std::set<std::pair<int64_t, int64_t>> term_sent_, kill_sent_;      // (job, attempt)
  std::map<std::pair<int64_t, int64_t>, int64_t> slurm_polled_ms_;   // (job, attempt) -> last scontrol
  std::map<std::pair<int64_t, int64_t>, std::string> slurm_reason_;  // (job, attempt) -> reason last stored
  std::set<std::pair<int64_t, int64_t>> slurm_ran_;                  // attempts seen RUNNING in Slurm
  std::map<int64_t, int64_t> hold_;  // beneficiary job -> its priority, while preemption is in flight
  // Jobs being moved -> their priority, from the stop until the new start: the cards are kept for them.
  std::map<int64_t, int64_t> moving_;
  std::map<std::pair<int64_t, int64_t>, int64_t> cost_checked_step_;  // (job, attempt) -> checkpoint step seen
  std::set<std::string> cost_noted_;                                  // non-moves already told in the events
  AsyncReads<StartDirs> start_reads_;   // "job/attempt" -> its start's directories and resume step (Start)
  std::set<std::string> failed_nodes_;  // nodes that lost a job's ranks: left out until the fleet is registered
  int64_t last_capacity_ms_ = 0;        // last time capacity became available (an attempt ended, fleet changed)
  // Compliance preemption runs when the policy changes (a new policy, or a new floor from its calendar),
  // not when a job's end lowers the share: the planner already keeps the floor for every placement.
  bool policy_changed_ = true;
  sched::Ppm last_floor_ = -1;

  ApiServer http_;
  int lock_fd_ = -1;
  std::string admin_hash_;       // SHA-256 of STATE/token
  std::vector<Tenant> tenants_;  // admin first, then the --tenants file; only hashes
  JobIdentity identity_;
  std::string work_dir_;    // resolved
  std::string state_real_;  // the state directory, resolved (what a sandbox hides)
};

}  // namespace tessera::daemon
