// daemon/state: the daemon's durable state in SQLite (WAL, synchronous=FULL): tenants and their tokens,
// the catalog/fleet/policy texts, jobs, their attempts (one per start, with pids and start/stop times)
// and an event log. Every state change is committed before the daemon acts on it or answers, so a kill -9
// at any moment loses no submitted job; billing rows go to the planner's ledger (tessera/sched.hpp) and an
// attempt is marked billed only after its rows are stored (re-billing after a crash is deduplicated).
//
// Rows are returned as JSON objects (column name -> value) to keep this layer small. Not thread-safe:
// the daemon serialises access with its own mutex.
#pragma once

#include <sqlite3.h>

#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "tessera/status.hpp"

namespace tessera::daemon {

class StateDb {
 public:
  static Result<std::unique_ptr<StateDb>> Open(const std::string& path);
  ~StateDb();
  StateDb(const StateDb&) = delete;
  StateDb& operator=(const StateDb&) = delete;

  // Runs one statement with positional parameters (?1, ?2, ...): strings, integers, doubles, null.
  Status Exec(const std::string& sql, const nlohmann::json& params = nlohmann::json::array());
  // Runs a query; each row is an object keyed by column name.
  Result<nlohmann::json> Query(const std::string& sql, const nlohmann::json& params = nlohmann::json::array());
  // The first row, or NotFound naming `what`.
  Result<nlohmann::json> QueryOne(const std::string& sql, const nlohmann::json& params, const std::string& what);
  int64_t LastInsertId() const;
  Status Begin() { return Exec("BEGIN IMMEDIATE"); }
  Status Commit() { return Exec("COMMIT"); }
  void Rollback();

  // meta key/value (catalog, fleet, policy texts).
  Result<std::string> GetMeta(const std::string& key, const std::string& fallback = "");
  Status SetMeta(const std::string& key, const std::string& value);

  const std::string& path() const { return path_; }

 private:
  StateDb(sqlite3* db, std::string path) : db_(db), path_(std::move(path)) {}
  sqlite3* db_;
  std::string path_;
};

}  // namespace tessera::daemon
