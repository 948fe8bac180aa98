// daemon/job_store: the daemon's durable state in SQLite (STATE/daemon.db; WAL, synchronous=FULL) behind typed
// rows — tenants (token hashes only), the catalog/fleet/policy texts, jobs (JobRow), their attempts (AttemptRow:
// one per start, with pids and start/stop times) and an event log. It holds all of the daemon's SQL; the
// scheduler, the HTTP API, the console and the metrics call it. Every state change is committed before the
// daemon acts on it or answers, so a kill -9 at any moment loses no submitted job; changes that touch several
// rows are one transaction. Errors name the statement's purpose and the job ("daemon database /s/daemon.db:
// record the end of attempt 2 of job 7: ..."). Billing rows go to the planner's ledger (sched/sched.hpp),
// and an attempt is marked billed only after its rows are stored (re-billing after a crash is deduplicated).
//
// Not thread-safe: the daemon serialises access with its own mutex.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/sqlite.hpp"
#include "tessera/status.hpp"

namespace tessera::daemon {

// A row of `jobs`. state: queued | running | stopping | succeeded | failed | cancelled.
struct JobRow {
  int64_t id = 0;
  std::string name, tenant;
  int64_t priority = 0;
  std::string source, yaml, base_dir;
  std::string compatible;  // comma-separated, as submitted ("" = the job file's)
  std::string state = "queued";
  std::string reason;               // why it waits / why it stopped
  std::optional<int64_t> position;  // place in the queue (1 = next), queued jobs only
  int64_t submitted_ms = 0;
  std::optional<int64_t> blocked_since_ms;  // when it last started waiting for capacity
  std::string stop_intent;                  // "" | preempt | cancel
  std::optional<int64_t> stop_requested_ms;
  int64_t grace_ms = 0;
  std::string ckpt_dir;
  int64_t attempts = 0;
  std::optional<int64_t> exit_code, ended_ms;
  std::string plan_json;  // the allocation of the newest attempt ("" before the first)
};

// A row of `attempts`, keyed by (job_id, n).
struct AttemptRow {
  int64_t job_id = 0, n = 0;
  std::string dir;
  std::string alloc_json;  // placement: per type and per node, islands, emulated flags
  std::string resume_from;
  int64_t started_ms = 0;
  std::optional<int64_t> ended_ms;
  int64_t shim_pid = 0, shim_start_ticks = -1;
  std::optional<int64_t> exit_code, exit_signal;
  std::string end_reason;
  std::optional<int64_t> wake_latency_ms;  // capacity available -> process started, for jobs that waited
  bool billed = false;
};

// An attempt with the fields of its job that the scheduler needs.
struct AttemptOfJob {
  AttemptRow attempt;
  std::string name, tenant;
  int64_t priority = 0;
  std::string stop_intent;
  std::optional<int64_t> stop_requested_ms;
  int64_t grace_ms = 0;
};

struct TenantRow {
  std::string name;
  std::string token_sha256;
  bool admin = false;
};

struct EventRow {
  int64_t at_ms = 0;
  std::string text;
};

// The configuration texts kept in `meta`.
struct ConfigTexts {
  std::string catalog_source, catalog_yaml, fleet_source, fleet_yaml, policy_source, policy_yaml;
};

struct JobCount {
  std::string tenant, state;
  int64_t n = 0;
};

class JobStore {
 public:
  static Result<std::unique_ptr<JobStore>> Open(const std::string& path);
  const std::string& path() const { return db_->path(); }

  // ---- configuration and tenants
  Result<std::string> GetMeta(const std::string& key, const std::string& fallback = "");
  Status SetMeta(const std::string& key, const std::string& value);
  // The stored texts; `defaults` fills in what was never stored.
  Result<ConfigTexts> LoadConfig(const ConfigTexts& defaults);
  // Stores all six texts in one transaction.
  Status SaveConfig(const ConfigTexts& c);
  // Replaces the tenant table in one transaction (on error the old table stays).
  Status ReplaceTenants(const std::vector<TenantRow>& tenants);
  Result<std::vector<TenantRow>> Tenants();  // by name

  // ---- jobs
  // Inserts a queued job (row.id is ignored) and sets its checkpoint directory to ckpt_dir_for(id), in one
  // transaction. Returns the id.
  Result<int64_t> AddJob(const JobRow& row, const std::function<std::string(int64_t id)>& ckpt_dir_for);
  // NotFound "job ID not found" when there is none.
  Result<JobRow> Job(int64_t id);
  Result<std::string> JobTenant(int64_t id);
  // The queue in scheduling order: priority (higher first), then submission.
  Result<std::vector<JobRow>> QueuedJobs();
  // GET /v1/jobs: `tenant`'s jobs (everyone's when all_tenants), active ones only unless all_states; running
  // and stopping first, then queued by position, then the rest, each by id.
  Result<std::vector<JobRow>> ListJobs(bool all_tenants, const std::string& tenant, bool all_states);
  // Jobs with a checkpoint directory (the console's checkpoint metrics).
  Result<std::vector<JobRow>> JobsWithCheckpoints();
  Result<std::vector<JobCount>> CountJobsByTenantAndState();
  // The number of queued jobs and the earliest time one of them started to wait (nullopt when none).
  Status QueueSummary(int64_t* queued, std::optional<int64_t>* oldest_wait_ms);

  Status SetQueueReason(int64_t id, const std::string& reason, int64_t position, int64_t now_ms);
  Status FailJob(int64_t id, const std::string& reason, int64_t now_ms);
  Status CancelQueued(int64_t id, int64_t now_ms);
  Status RequestStop(int64_t id, const std::string& intent, const std::string& reason, int64_t now_ms);

  // ---- attempts
  // Records attempt `a` and marks its job running with `a`'s allocation as its plan, in one transaction.
  Status StartAttempt(const AttemptRow& a);
  Status SetShim(int64_t job_id, int64_t n, int64_t shim_pid, int64_t shim_start_ticks);
  // The real start of an attempt, when the executor learns it later (Slurm: the job left PENDING).
  Status SetAttemptStart(int64_t job_id, int64_t n, int64_t started_ms);
  // What a running job is doing, as its executor reports it (Slurm: "Slurm job 12: PENDING (Resources)");
  // only a job in state running is changed.
  Status SetRunningReason(int64_t id, const std::string& reason);
  // The shim could not be started: the attempt ends at once (exit 127).
  Status EndUnlaunchedAttempt(int64_t job_id, int64_t n, int64_t ended_ms, const std::string& why);
  // An attempt recorded by a daemon that died before starting it: removed, the job queued again.
  Status DropNeverStartedAttempt(int64_t job_id, int64_t n);
  // The end of an attempt and the job's new state, in one transaction. A terminal job gets ended_ms; one that
  // waits again gets blocked_since_ms = ended_ms.
  Status FinishAttempt(int64_t job_id, int64_t n, int64_t ended_ms, int exit_code, int exit_signal,
                       const std::string& end_reason, const std::string& state, const std::string& reason,
                       bool terminal);
  Status MarkBilled(int64_t job_id, int64_t n);
  Result<std::vector<AttemptRow>> Attempts(int64_t job_id);  // by n
  // Attempts not yet ended (running or stopping jobs).
  Result<std::vector<AttemptOfJob>> OpenAttempts();
  // Ended attempts whose usage is not yet in the ledger.
  Result<std::vector<AttemptOfJob>> UnbilledAttempts();

  // ---- events
  Status AddEvent(int64_t job_id, int64_t at_ms, const std::string& text);
  Result<std::vector<EventRow>> Events(int64_t job_id);  // oldest first

 private:
  explicit JobStore(std::unique_ptr<sqlite::Db> db) : db_(std::move(db)) {}
  Result<std::vector<JobRow>> Jobs(const std::string& where_and_order, std::initializer_list<sqlite::Value> params,
                                   const std::string& purpose);
  Result<std::vector<AttemptOfJob>> AttemptsOfJobs(const std::string& where, const std::string& purpose);
  std::unique_ptr<sqlite::Db> db_;
};

}  // namespace tessera::daemon
