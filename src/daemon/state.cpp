// daemon/state: SQLite (WAL) storage of the daemon's jobs, attempts, tenants and configuration.
#include "daemon/state.hpp"

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

Status SqlError(sqlite3* db, const std::string& what) {
  return SystemError(fmt::format("sqlite: {}: {}", what, sqlite3_errmsg(db)));
}
}  // namespace

Result<std::unique_ptr<StateDb>> StateDb::Open(const std::string& path) {
  sqlite3* db = nullptr;
  if (sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_FULLMUTEX,
                      nullptr) != SQLITE_OK) {
    std::string msg = db ? sqlite3_errmsg(db) : "out of memory";
    if (db) sqlite3_close(db);
    return SystemError(fmt::format("cannot open the daemon database {}: {}", path, msg));
  }
  std::unique_ptr<StateDb> s(new StateDb(db, path));
  sqlite3_busy_timeout(db, 10000);
  TSR_RETURN_IF_ERROR(s->Exec("PRAGMA journal_mode=WAL"));
  TSR_RETURN_IF_ERROR(s->Exec("PRAGMA synchronous=FULL"));
  // Deleted rows (old tenant rows) are overwritten, not left in free pages.
  TSR_RETURN_IF_ERROR(s->Exec("PRAGMA secure_delete=ON"));
  char* err = nullptr;
  if (sqlite3_exec(db, kSchema, nullptr, nullptr, &err) != SQLITE_OK) {
    std::string msg = err ? err : "?";
    sqlite3_free(err);
    return SystemError(fmt::format("cannot create the schema in {}: {}", path, msg));
  }
  return s;
}

StateDb::~StateDb() { sqlite3_close(db_); }

namespace {
Status Bind(sqlite3* db, sqlite3_stmt* st, const nlohmann::json& params) {
  int i = 1;
  for (const auto& p : params) {
    int rc = SQLITE_OK;
    if (p.is_null()) rc = sqlite3_bind_null(st, i);
    else if (p.is_boolean()) rc = sqlite3_bind_int64(st, i, p.get<bool>() ? 1 : 0);
    else if (p.is_number_integer()) rc = sqlite3_bind_int64(st, i, p.get<int64_t>());
    else if (p.is_number()) rc = sqlite3_bind_double(st, i, p.get<double>());
    else if (p.is_string()) {
      const auto& s = p.get_ref<const std::string&>();
      rc = sqlite3_bind_text(st, i, s.data(), static_cast<int>(s.size()), SQLITE_TRANSIENT);
    } else {
      std::string s = p.dump();
      rc = sqlite3_bind_text(st, i, s.data(), static_cast<int>(s.size()), SQLITE_TRANSIENT);
    }
    if (rc != SQLITE_OK) return SqlError(db, fmt::format("bind parameter {}", i));
    ++i;
  }
  return Status::Ok();
}
}  // namespace

Result<nlohmann::json> StateDb::Query(const std::string& sql, const nlohmann::json& params) {
  sqlite3_stmt* st = nullptr;
  if (sqlite3_prepare_v2(db_, sql.c_str(), -1, &st, nullptr) != SQLITE_OK) return SqlError(db_, "prepare " + sql);
  Status bs = Bind(db_, st, params);
  if (!bs.ok()) {
    sqlite3_finalize(st);
    return bs;
  }
  nlohmann::json rows = nlohmann::json::array();
  while (true) {
    int rc = sqlite3_step(st);
    if (rc == SQLITE_DONE) break;
    if (rc != SQLITE_ROW) {
      Status s = SqlError(db_, "step " + sql);
      sqlite3_finalize(st);
      return s;
    }
    nlohmann::json row = nlohmann::json::object();
    int n = sqlite3_column_count(st);
    for (int c = 0; c < n; ++c) {
      const char* name = sqlite3_column_name(st, c);
      switch (sqlite3_column_type(st, c)) {
        case SQLITE_INTEGER: row[name] = static_cast<int64_t>(sqlite3_column_int64(st, c)); break;
        case SQLITE_FLOAT: row[name] = sqlite3_column_double(st, c); break;
        case SQLITE_NULL: row[name] = nullptr; break;
        default: {
          const auto* t = reinterpret_cast<const char*>(sqlite3_column_text(st, c));
          row[name] = std::string(t ? t : "", static_cast<size_t>(sqlite3_column_bytes(st, c)));
        }
      }
    }
    rows.push_back(std::move(row));
  }
  sqlite3_finalize(st);
  return rows;
}

Status StateDb::Exec(const std::string& sql, const nlohmann::json& params) {
  auto r = Query(sql, params);
  return r.ok() ? Status::Ok() : r.status();
}

Result<nlohmann::json> StateDb::QueryOne(const std::string& sql, const nlohmann::json& params,
                                         const std::string& what) {
  TSR_ASSIGN_OR_RETURN(auto rows, Query(sql, params));
  if (rows.empty()) return NotFound(what + " not found");
  return rows[0];
}

int64_t StateDb::LastInsertId() const { return sqlite3_last_insert_rowid(db_); }

void StateDb::Rollback() { (void)Exec("ROLLBACK"); }

Result<std::string> StateDb::GetMeta(const std::string& key, const std::string& fallback) {
  TSR_ASSIGN_OR_RETURN(auto rows, Query("SELECT value FROM meta WHERE key=?1", {key}));
  if (rows.empty()) return fallback;
  return rows[0]["value"].get<std::string>();
}

Status StateDb::SetMeta(const std::string& key, const std::string& value) {
  return Exec("INSERT INTO meta(key,value) VALUES(?1,?2) ON CONFLICT(key) DO UPDATE SET value=excluded.value",
              {key, value});
}

}  // namespace tessera::daemon
