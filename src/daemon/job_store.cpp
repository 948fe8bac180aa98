// daemon/job_store: the daemon's jobs, attempts, tenants, configuration texts and events in SQLite (WAL) — all
// of the daemon's SQL.
#include "daemon/job_store.hpp"

#include <fmt/format.h>

namespace tessera::daemon {

namespace {
const char* kSchema = R"SQL(
CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value TEXT NOT NULL);
-- token: the SHA-256 (hex) of the tenant's token, never the token; rewritten from the configuration at every start
-- and SIGHUP, so removed tenants disappear.
CREATE TABLE IF NOT EXISTS tenants(name TEXT PRIMARY KEY, token TEXT NOT NULL UNIQUE, admin INTEGER NOT NULL DEFAULT 0);
CREATE TABLE IF NOT EXISTS jobs(
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  name TEXT NOT NULL, tenant TEXT NOT NULL, priority INTEGER NOT NULL,
  source TEXT NOT NULL, yaml TEXT NOT NULL, base_dir TEXT NOT NULL, compatible TEXT NOT NULL,
  state TEXT NOT NULL,              -- queued | running | stopping | succeeded | failed | cancelled
  reason TEXT NOT NULL DEFAULT '',  -- why it waits / why it stopped
  position INTEGER,                 -- place in the queue (1 = next), queued jobs only
  submitted_ms INTEGER NOT NULL,
  blocked_since_ms INTEGER,         -- when it last started waiting for capacity (NULL: not blocked)
  stop_intent TEXT NOT NULL DEFAULT '',  -- '' | preempt | cancel
  stop_requested_ms INTEGER, grace_ms INTEGER NOT NULL,
  ckpt_dir TEXT NOT NULL,
  attempts INTEGER NOT NULL DEFAULT 0,
  exit_code INTEGER, ended_ms INTEGER,
  plan_json TEXT NOT NULL DEFAULT ''
);
CREATE TABLE IF NOT EXISTS attempts(
  job_id INTEGER NOT NULL, n INTEGER NOT NULL,
  dir TEXT NOT NULL,
  alloc_json TEXT NOT NULL,         -- placement: per type and per node, islands, emulated flags
  resume_from TEXT NOT NULL DEFAULT '',
  started_ms INTEGER NOT NULL, ended_ms INTEGER,
  shim_pid INTEGER NOT NULL DEFAULT 0, shim_start_ticks INTEGER NOT NULL DEFAULT -1,
  exit_code INTEGER, exit_signal INTEGER, end_reason TEXT NOT NULL DEFAULT '',
  wake_latency_ms INTEGER,          -- capacity available -> process started, for jobs that waited
  billed INTEGER NOT NULL DEFAULT 0,
  PRIMARY KEY(job_id, n));
CREATE TABLE IF NOT EXISTS events(id INTEGER PRIMARY KEY AUTOINCREMENT, job_id INTEGER, at_ms INTEGER NOT NULL,
                                  text TEXT NOT NULL);
)SQL";

constexpr const char* kJobColumns =
    "id, name, tenant, priority, source, yaml, base_dir, compatible, state, reason, position, submitted_ms, "
    "blocked_since_ms, stop_intent, stop_requested_ms, grace_ms, ckpt_dir, attempts, exit_code, ended_ms, plan_json";

JobRow ReadJob(const sqlite::Statement& q) {
  JobRow j;
  j.id = q.Int(0);
  j.name = q.Text(1);
  j.tenant = q.Text(2);
  j.priority = q.Int(3);
  j.source = q.Text(4);
  j.yaml = q.Text(5);
  j.base_dir = q.Text(6);
  j.compatible = q.Text(7);
  j.state = q.Text(8);
  j.reason = q.Text(9);
  j.position = q.OptInt(10);
  j.submitted_ms = q.Int(11);
  j.blocked_since_ms = q.OptInt(12);
  j.stop_intent = q.Text(13);
  j.stop_requested_ms = q.OptInt(14);
  j.grace_ms = q.Int(15);
  j.ckpt_dir = q.Text(16);
  j.attempts = q.Int(17);
  j.exit_code = q.OptInt(18);
  j.ended_ms = q.OptInt(19);
  j.plan_json = q.Text(20);
  return j;
}

// The columns of `attempts` prefixed with "a.", in ReadAttempt's order.
constexpr const char* kAttemptColumns =
    "a.job_id, a.n, a.dir, a.alloc_json, a.resume_from, a.started_ms, a.ended_ms, a.shim_pid, a.shim_start_ticks, "
    "a.exit_code, a.exit_signal, a.end_reason, a.wake_latency_ms, a.billed";
constexpr int kAttemptColumnCount = 14;

AttemptRow ReadAttempt(const sqlite::Statement& q) {
  AttemptRow a;
  a.job_id = q.Int(0);
  a.n = q.Int(1);
  a.dir = q.Text(2);
  a.alloc_json = q.Text(3);
  a.resume_from = q.Text(4);
  a.started_ms = q.Int(5);
  a.ended_ms = q.OptInt(6);
  a.shim_pid = q.Int(7);
  a.shim_start_ticks = q.Int(8);
  a.exit_code = q.OptInt(9);
  a.exit_signal = q.OptInt(10);
  a.end_reason = q.Text(11);
  a.wake_latency_ms = q.OptInt(12);
  a.billed = q.Int(13) != 0;
  return a;
}

}  // namespace

Result<std::unique_ptr<JobStore>> JobStore::Open(const std::string& path) {
  sqlite::OpenOptions o;
  o.label = "daemon database";
  o.serialized = true;
  o.secure_delete = true;  // deleted rows (old tenant rows) are overwritten, not left in free pages
  TSR_ASSIGN_OR_RETURN(auto db, sqlite::Db::Open(path, o));
  TSR_RETURN_IF_ERROR(db->ExecScript(kSchema, "create the schema"));
  return std::unique_ptr<JobStore>(new JobStore(std::move(db)));
}

// ---- configuration and tenants ----------------------------------------------------------------------------

Result<std::string> JobStore::GetMeta(const std::string& key, const std::string& fallback) {
  TSR_ASSIGN_OR_RETURN(auto q, db_->Prepare("SELECT value FROM meta WHERE key=?1", "read meta " + key));
  TSR_RETURN_IF_ERROR(q.BindAll({key}));
  TSR_ASSIGN_OR_RETURN(bool row, q.Step());
  return row ? q.Text(0) : fallback;
}

Status JobStore::SetMeta(const std::string& key, const std::string& value) {
  return db_->Exec("INSERT INTO meta(key,value) VALUES(?1,?2) ON CONFLICT(key) DO UPDATE SET value=excluded.value",
                   {key, value}, "store meta " + key);
}

Result<ConfigTexts> JobStore::LoadConfig(const ConfigTexts& d) {
  ConfigTexts c;
  TSR_ASSIGN_OR_RETURN(c.catalog_source, GetMeta("catalog_source", d.catalog_source));
  TSR_ASSIGN_OR_RETURN(c.catalog_yaml, GetMeta("catalog_yaml", d.catalog_yaml));
  TSR_ASSIGN_OR_RETURN(c.policy_source, GetMeta("policy_source", d.policy_source));
  TSR_ASSIGN_OR_RETURN(c.policy_yaml, GetMeta("policy_yaml", d.policy_yaml));
  TSR_ASSIGN_OR_RETURN(c.fleet_source, GetMeta("fleet_source", d.fleet_source));
  TSR_ASSIGN_OR_RETURN(c.fleet_yaml, GetMeta("fleet_yaml", d.fleet_yaml));
  return c;
}

Status JobStore::SaveConfig(const ConfigTexts& c) {
  TSR_ASSIGN_OR_RETURN(auto tx, sqlite::Transaction::Begin(db_.get(), "store the configuration"));
  TSR_RETURN_IF_ERROR(SetMeta("catalog_source", c.catalog_source));
  TSR_RETURN_IF_ERROR(SetMeta("catalog_yaml", c.catalog_yaml));
  TSR_RETURN_IF_ERROR(SetMeta("policy_source", c.policy_source));
  TSR_RETURN_IF_ERROR(SetMeta("policy_yaml", c.policy_yaml));
  TSR_RETURN_IF_ERROR(SetMeta("fleet_source", c.fleet_source));
  TSR_RETURN_IF_ERROR(SetMeta("fleet_yaml", c.fleet_yaml));
  return tx.Commit();
}

Status JobStore::ReplaceTenants(const std::vector<TenantRow>& tenants) {
  TSR_ASSIGN_OR_RETURN(auto tx, sqlite::Transaction::Begin(db_.get(), "replace the tenants"));
  TSR_RETURN_IF_ERROR(db_->Exec("DELETE FROM tenants", {}, "remove the old tenants"));
  TSR_ASSIGN_OR_RETURN(auto q, db_->Prepare("INSERT INTO tenants(name,token,admin) VALUES(?1,?2,?3)", "add a tenant"));
  for (const auto& t : tenants) {
    q.Reset();
    TSR_RETURN_IF_ERROR(q.BindAll({t.name, t.token_sha256, int64_t{t.admin ? 1 : 0}}));
    Status s = q.Run();
    if (!s.ok()) return s.WithContext("tenant '" + t.name + "'");
  }
  return tx.Commit();
}

Result<std::vector<TenantRow>> JobStore::Tenants() {
  TSR_ASSIGN_OR_RETURN(auto q, db_->Prepare("SELECT name, token, admin FROM tenants ORDER BY name", "list tenants"));
  std::vector<TenantRow> out;
  while (true) {
    TSR_ASSIGN_OR_RETURN(bool row, q.Step());
    if (!row) return out;
    out.push_back({q.Text(0), q.Text(1), q.Int(2) != 0});
  }
}

// ---- jobs -------------------------------------------------------------------------------------------------

Result<std::vector<JobRow>> JobStore::Jobs(const std::string& where_and_order,
                                           std::initializer_list<sqlite::Value> params, const std::string& purpose) {
  TSR_ASSIGN_OR_RETURN(auto q,
                       db_->Prepare(fmt::format("SELECT {} FROM jobs {}", kJobColumns, where_and_order), purpose));
  TSR_RETURN_IF_ERROR(q.BindAll(params));
  std::vector<JobRow> out;
  while (true) {
    TSR_ASSIGN_OR_RETURN(bool row, q.Step());
    if (!row) return out;
    out.push_back(ReadJob(q));
  }
}

Result<int64_t> JobStore::AddJob(const JobRow& j, const std::function<std::string(int64_t id)>& ckpt_dir_for) {
  std::string purpose = fmt::format("submit job '{}' of tenant {}", j.name, j.tenant);
  TSR_ASSIGN_OR_RETURN(auto tx, sqlite::Transaction::Begin(db_.get(), purpose));
  TSR_RETURN_IF_ERROR(db_->Exec(
      "INSERT INTO jobs(name,tenant,priority,source,yaml,base_dir,compatible,state,reason,submitted_ms,grace_ms,"
      "ckpt_dir,blocked_since_ms) VALUES(?1,?2,?3,?4,?5,?6,?7,'queued',?8,?9,?10,'',?11)",
      {j.name, j.tenant, j.priority, j.source, j.yaml, j.base_dir, j.compatible, j.reason, j.submitted_ms, j.grace_ms,
       sqlite::OptInt(j.blocked_since_ms)},
      purpose));
  int64_t id = db_->LastInsertId();
  TSR_RETURN_IF_ERROR(db_->Exec("UPDATE jobs SET ckpt_dir=?2 WHERE id=?1", {id, ckpt_dir_for(id)},
                                fmt::format("set the checkpoint directory of job {}", id)));
  TSR_RETURN_IF_ERROR(tx.Commit());
  return id;
}

Result<JobRow> JobStore::Job(int64_t id) {
  TSR_ASSIGN_OR_RETURN(auto rows, Jobs("WHERE id=?1", {id}, fmt::format("read job {}", id)));
  if (rows.empty()) return NotFound(fmt::format("job {} not found", id));
  return rows[0];
}

Result<std::string> JobStore::JobTenant(int64_t id) {
  TSR_ASSIGN_OR_RETURN(auto q, db_->Prepare("SELECT tenant FROM jobs WHERE id=?1", fmt::format("read job {}", id)));
  TSR_RETURN_IF_ERROR(q.BindAll({id}));
  TSR_ASSIGN_OR_RETURN(bool row, q.Step());
  if (!row) return NotFound(fmt::format("job {} not found", id));
  return q.Text(0);
}

Result<std::vector<JobRow>> JobStore::QueuedJobs() {
  return Jobs("WHERE state='queued' ORDER BY priority DESC, submitted_ms, id", {}, "read the queue");
}

Result<std::vector<JobRow>> JobStore::ListJobs(bool all_tenants, const std::string& tenant, bool all_states) {
  return Jobs(
      "WHERE (?1 OR tenant=?2) AND (?3 OR state IN ('queued','running','stopping')) "
      "ORDER BY CASE state WHEN 'running' THEN 0 WHEN 'stopping' THEN 0 WHEN 'queued' THEN 1 ELSE 2 END, position, id",
      {int64_t{all_tenants}, tenant, int64_t{all_states}}, "list jobs");
}

Result<std::vector<JobRow>> JobStore::JobsWithCheckpoints() {
  return Jobs("WHERE ckpt_dir != ''", {}, "list the jobs' checkpoint directories");
}

Result<std::vector<JobCount>> JobStore::CountJobsByTenantAndState() {
  TSR_ASSIGN_OR_RETURN(auto q, db_->Prepare("SELECT tenant, state, COUNT(*) FROM jobs GROUP BY tenant, state",
                                            "count jobs per tenant and state"));
  std::vector<JobCount> out;
  while (true) {
    TSR_ASSIGN_OR_RETURN(bool row, q.Step());
    if (!row) return out;
    out.push_back({q.Text(0), q.Text(1), q.Int(2)});
  }
}

Status JobStore::QueueSummary(int64_t* queued, std::optional<int64_t>* oldest_wait_ms) {
  TSR_ASSIGN_OR_RETURN(
      auto q,
      db_->Prepare("SELECT COUNT(*), MIN(COALESCE(blocked_since_ms, submitted_ms)) FROM jobs WHERE state='queued'",
                   "summarise the queue"));
  TSR_ASSIGN_OR_RETURN(bool row, q.Step());
  *queued = row ? q.Int(0) : 0;
  *oldest_wait_ms = row ? q.OptInt(1) : std::nullopt;
  return Status::Ok();
}

Status JobStore::SetQueueReason(int64_t id, const std::string& reason, int64_t position, int64_t now_ms) {
  return db_->Exec(
      "UPDATE jobs SET reason=?2, position=?3, blocked_since_ms=COALESCE(blocked_since_ms, ?4) WHERE id=?1",
      {id, reason, position, now_ms}, fmt::format("record why job {} waits", id));
}

Status JobStore::FailJob(int64_t id, const std::string& reason, int64_t now_ms) {
  return db_->Exec("UPDATE jobs SET state='failed', reason=?2, ended_ms=?3, position=NULL WHERE id=?1",
                   {id, reason, now_ms}, fmt::format("mark job {} failed", id));
}

Status JobStore::CancelQueued(int64_t id, int64_t now_ms) {
  return db_->Exec(
      "UPDATE jobs SET state='cancelled', reason='cancelled while queued', ended_ms=?2, position=NULL WHERE id=?1",
      {id, now_ms}, fmt::format("cancel queued job {}", id));
}

Status JobStore::RequestStop(int64_t id, const std::string& intent, const std::string& reason, int64_t now_ms) {
  return db_->Exec("UPDATE jobs SET stop_intent=?2, stop_requested_ms=?3, state='stopping', reason=?4 WHERE id=?1",
                   {id, intent, now_ms, reason}, fmt::format("request job {} to stop ({})", id, intent));
}

// ---- attempts ---------------------------------------------------------------------------------------------

Status JobStore::StartAttempt(const AttemptRow& a) {
  std::string purpose = fmt::format("record the start of attempt {} of job {}", a.n, a.job_id);
  TSR_ASSIGN_OR_RETURN(auto tx, sqlite::Transaction::Begin(db_.get(), purpose));
  TSR_RETURN_IF_ERROR(db_->Exec(
      "INSERT INTO attempts(job_id,n,dir,alloc_json,resume_from,started_ms,wake_latency_ms) "
      "VALUES(?1,?2,?3,?4,?5,?6,?7)",
      {a.job_id, a.n, a.dir, a.alloc_json, a.resume_from, a.started_ms, sqlite::OptInt(a.wake_latency_ms)}, purpose));
  TSR_RETURN_IF_ERROR(db_->Exec(
      "UPDATE jobs SET state='running', attempts=?2, reason='', position=NULL, blocked_since_ms=NULL, plan_json=?3 "
      "WHERE id=?1",
      {a.job_id, a.n, a.alloc_json}, purpose));
  return tx.Commit();
}

Status JobStore::SetShim(int64_t job_id, int64_t n, int64_t shim_pid, int64_t shim_start_ticks) {
  return db_->Exec("UPDATE attempts SET shim_pid=?3, shim_start_ticks=?4 WHERE job_id=?1 AND n=?2",
                   {job_id, n, shim_pid, shim_start_ticks},
                   fmt::format("record the shim of attempt {} of job {}", n, job_id));
}

Status JobStore::SetAttemptStart(int64_t job_id, int64_t n, int64_t started_ms) {
  return db_->Exec("UPDATE attempts SET started_ms=?3 WHERE job_id=?1 AND n=?2", {job_id, n, started_ms},
                   fmt::format("record the start time of attempt {} of job {}", n, job_id));
}

Status JobStore::SetRunningReason(int64_t id, const std::string& reason) {
  return db_->Exec("UPDATE jobs SET reason=?2 WHERE id=?1 AND state='running'", {id, reason},
                   fmt::format("record what running job {} is doing", id));
}

Status JobStore::EndUnlaunchedAttempt(int64_t job_id, int64_t n, int64_t ended_ms, const std::string& why) {
  return db_->Exec("UPDATE attempts SET ended_ms=?3, exit_code=127, end_reason=?4 WHERE job_id=?1 AND n=?2",
                   {job_id, n, ended_ms, why},
                   fmt::format("record that attempt {} of job {} did not start", n, job_id));
}

Status JobStore::DropNeverStartedAttempt(int64_t job_id, int64_t n) {
  std::string purpose = fmt::format("drop attempt {} of job {}, which never started", n, job_id);
  TSR_ASSIGN_OR_RETURN(auto tx, sqlite::Transaction::Begin(db_.get(), purpose));
  TSR_RETURN_IF_ERROR(db_->Exec("DELETE FROM attempts WHERE job_id=?1 AND n=?2", {job_id, n}, purpose));
  TSR_RETURN_IF_ERROR(db_->Exec(
      "UPDATE jobs SET state='queued', attempts=attempts-1, reason='restarting: the previous start was interrupted' "
      "WHERE id=?1",
      {job_id}, purpose));
  return tx.Commit();
}

Status JobStore::FinishAttempt(int64_t job_id, int64_t n, int64_t ended_ms, int exit_code, int exit_signal,
                               const std::string& end_reason, const std::string& state, const std::string& reason,
                               bool terminal) {
  std::string purpose = fmt::format("record the end of attempt {} of job {}", n, job_id);
  TSR_ASSIGN_OR_RETURN(auto tx, sqlite::Transaction::Begin(db_.get(), purpose));
  TSR_RETURN_IF_ERROR(
      db_->Exec("UPDATE attempts SET ended_ms=?3, exit_code=?4, exit_signal=?5, end_reason=?6 WHERE job_id=?1 AND n=?2",
                {job_id, n, ended_ms, int64_t{exit_code}, int64_t{exit_signal}, end_reason}, purpose));
  TSR_RETURN_IF_ERROR(db_->Exec(
      "UPDATE jobs SET state=?2, reason=?3, stop_intent='', stop_requested_ms=NULL, exit_code=?4, ended_ms=?5, "
      "blocked_since_ms=?6 WHERE id=?1",
      {job_id, state, reason, int64_t{exit_code}, terminal ? sqlite::Int(ended_ms) : sqlite::Null(),
       terminal ? sqlite::Null() : sqlite::Int(ended_ms)},
      purpose));
  return tx.Commit();
}

Status JobStore::MarkBilled(int64_t job_id, int64_t n) {
  return db_->Exec("UPDATE attempts SET billed=1 WHERE job_id=?1 AND n=?2", {job_id, n},
                   fmt::format("mark attempt {} of job {} billed", n, job_id));
}

Result<std::vector<AttemptRow>> JobStore::Attempts(int64_t job_id) {
  TSR_ASSIGN_OR_RETURN(
      auto q, db_->Prepare(fmt::format("SELECT {} FROM attempts a WHERE a.job_id=?1 ORDER BY a.n", kAttemptColumns),
                           fmt::format("read the attempts of job {}", job_id)));
  TSR_RETURN_IF_ERROR(q.BindAll({job_id}));
  std::vector<AttemptRow> out;
  while (true) {
    TSR_ASSIGN_OR_RETURN(bool row, q.Step());
    if (!row) return out;
    out.push_back(ReadAttempt(q));
  }
}

Result<std::vector<AttemptOfJob>> JobStore::AttemptsOfJobs(const std::string& where, const std::string& purpose) {
  TSR_ASSIGN_OR_RETURN(
      auto q, db_->Prepare(fmt::format("SELECT {}, j.name, j.tenant, j.priority, j.stop_intent, j.stop_requested_ms, "
                                       "j.grace_ms FROM attempts a JOIN jobs j ON j.id=a.job_id WHERE {}",
                                       kAttemptColumns, where),
                           purpose));
  std::vector<AttemptOfJob> out;
  while (true) {
    TSR_ASSIGN_OR_RETURN(bool row, q.Step());
    if (!row) return out;
    AttemptOfJob x;
    x.attempt = ReadAttempt(q);
    int c = kAttemptColumnCount;
    x.name = q.Text(c);
    x.tenant = q.Text(c + 1);
    x.priority = q.Int(c + 2);
    x.stop_intent = q.Text(c + 3);
    x.stop_requested_ms = q.OptInt(c + 4);
    x.grace_ms = q.Int(c + 5);
    out.push_back(std::move(x));
  }
}

Result<std::vector<AttemptOfJob>> JobStore::OpenAttempts() {
  return AttemptsOfJobs("a.ended_ms IS NULL", "read the open attempts");
}

Result<std::vector<AttemptOfJob>> JobStore::UnbilledAttempts() {
  return AttemptsOfJobs("a.ended_ms IS NOT NULL AND a.billed=0", "read the attempts not yet billed");
}

// ---- events -----------------------------------------------------------------------------------------------

Status JobStore::AddEvent(int64_t job_id, int64_t at_ms, const std::string& text) {
  return db_->Exec("INSERT INTO events(job_id, at_ms, text) VALUES(?1,?2,?3)", {job_id, at_ms, text},
                   fmt::format("record an event of job {}", job_id));
}

Result<std::vector<EventRow>> JobStore::Events(int64_t job_id) {
  TSR_ASSIGN_OR_RETURN(auto q, db_->Prepare("SELECT at_ms, text FROM events WHERE job_id=?1 ORDER BY id",
                                            fmt::format("read the events of job {}", job_id)));
  TSR_RETURN_IF_ERROR(q.BindAll({job_id}));
  std::vector<EventRow> out;
  while (true) {
    TSR_ASSIGN_OR_RETURN(bool row, q.Step());
    if (!row) return out;
    out.push_back({q.Int(0), q.Text(1)});
  }
}

}  // namespace tessera::daemon
