// daemon/daemon: `tessera daemon` — the job daemon.
//
// It serves an HTTP/JSON API on 127.0.0.1 (bearer-token auth, one token per tenant; the admin token is
// written to STATE/token), keeps its state in SQLite (STATE/daemon.db, WAL) and bills into the planner's
// ledger (STATE/ledger.db). A scheduler thread, woken by every event and at least every tick, reaps ended
// attempts, bills them, enforces preemption deadlines, and places queued jobs with the planner in priority
// order with backfill; a job that does not fit waits with the planner's reason. Preemption (for a
// higher-priority job, or when the fleet's domestic share falls below the policy floor) is SIGTERM, a
// grace period for the job to checkpoint, then SIGKILL; the job goes back to the queue and resumes from its
// newest committed checkpoint (TESSERA_RESUME_FROM). Jobs run in their own sessions through a shim, so
// stopping or killing the daemon leaves them running; on start the daemon reconciles with them.
//
// API (JSON bodies of at most 1 MiB; errors are {"error": "..."} with 400/401/403/404/409/413):
//   GET  /v1/health                      PUT /v1/fleet   {fleet:{source,yaml}, catalog?:{..}, policy?:{..}} (admin)
//   POST /v1/jobs  {source,yaml,base_dir,compatible[]}      PUT /v1/policy  {source,yaml} (admin)
//   GET  /v1/jobs[?all=1]   GET /v1/jobs/ID   GET /v1/jobs/ID/logs?tail=BYTES   GET /v1/fleet
//   POST /v1/jobs/ID/cancel   POST /v1/jobs/ID/requeue (interrupt: checkpoint, stop, queue again)
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace tessera::daemon {

struct DaemonOptions {
  std::string state_dir;  // required
  std::string host = "127.0.0.1";
  int port = 0;              // 0: a free port (written to STATE/daemon.json)
  std::string catalog_path;  // seeds; "" keeps the stored one (or the embedded default catalog)
  std::string fleet_path;
  std::string policy_path;
  std::string tenants_file;  // --tenants FILE (daemon/security.hpp); "" = the admin only
  std::string work_dir;      // the tenants' areas WORK/<tenant>/<id>; "" = STATE + "-work"
  // The state directory is the default one (neither --state-dir nor TESSERA_HOME): a root daemon whose job
  // user cannot reach STATE-work (~ is /root, 0700) puts the areas in `system_work_dir` instead.
  bool state_dir_is_default = false;
  std::string system_work_dir = "/var/lib/tessera/work";
  std::string job_user;                    // root daemon: who jobs run as ("" = nobody)
  bool insecure_no_job_isolation = false;  // run jobs with the daemon's rights (refused otherwise when no isolation)
  int64_t tick_ms = 100;
  std::string self_exe;  // the tessera binary for shims and `tessera run`
  // The launcher command the shim starts (island flags and "-- COMMAND" are appended); default
  // {self_exe, "run"}. Tests may point it elsewhere when `tessera run` is not built.
  std::vector<std::string> launcher;
  // Where attempts run: "local" (the shim on this host) or "slurm" (one heterogeneous sbatch job per attempt;
  // daemon/slurm_executor.cpp, docs/daemon.md "Slurm executor").
  std::string executor = "local";
  int64_t slurm_poll_ms = 1000;      // how often a Slurm job's state is read (scontrol show job)
  int64_t slurm_timeout_ms = 20000;  // bound on every Slurm command (sbatch, scontrol, scancel, sacct)
};

// Runs until SIGINT/SIGTERM. Returns the process exit status; errors are printed to stderr.
int RunDaemon(const DaemonOptions& options);

// The catalog used when none was given: the two prices of the reference scenario (Ascend 910B 2.4 and
// NVIDIA H800 6.8 CNY per card-hour). Per-card throughput is configuration; the default weighs both 1.0.
extern const char* kDefaultCatalogYaml;
// The policy used when none was given: no domestic floor.
extern const char* kDefaultPolicyYaml;

// STATE resolution shared by the daemon and its clients: --state-dir, else $TESSERA_HOME, else ~/.tessera.
std::string DefaultStateDir(const std::string& flag);

}  // namespace tessera::daemon
