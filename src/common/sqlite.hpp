// common/sqlite: the one SQLite wrapper, shared by the daemon's job store (daemon/job_store) and the billing
// ledger (sched/ledger). A Db owns one connection (opened with WAL and synchronous=FULL unless told
// otherwise); a Statement is one prepared statement with typed binds and column reads; a Transaction is
// BEGIN IMMEDIATE ... COMMIT that rolls back when it is dropped uncommitted. Every error is a Status whose
// message names the database (its label and path), the purpose given by the caller, and SQLite's message:
// "ledger /s/ledger.db: insert usage of job 'a#1': UNIQUE constraint failed: ...".
//
// Compiled only where SQLite is (TESSERA_HAVE_SQLITE); the types are opaque here, so this header does not
// need <sqlite3.h>.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <variant>

#include "tessera/status.hpp"

struct sqlite3;
struct sqlite3_stmt;

namespace tessera::sqlite {

// A value bound to a parameter: NULL, an integer, a double or text.
using Value = std::variant<std::nullptr_t, int64_t, double, std::string>;
inline Value Null() { return nullptr; }
inline Value Int(int64_t v) { return v; }
inline Value Text(std::string v) { return v; }
inline Value OptInt(const std::optional<int64_t>& v) { return v ? Value(*v) : Value(nullptr); }

class Db;

// One prepared statement. Parameters are numbered from 1 (?1, ?2, ...); columns from 0.
class Statement {
 public:
  Statement(Statement&& o) noexcept;
  Statement& operator=(Statement&& o) noexcept;
  Statement(const Statement&) = delete;
  Statement& operator=(const Statement&) = delete;
  ~Statement();

  Status Bind(int index, const Value& v);
  // Binds values to ?1, ?2, ... in order.
  Status BindAll(std::initializer_list<Value> values);
  // Advances: true when a row is ready, false when the statement is done.
  Result<bool> Step();
  // Steps until done (a statement that returns no rows, or whose rows are not needed).
  Status Run();
  // Makes the statement ready to run again (bindings are kept).
  void Reset();

  int64_t Int(int col) const;
  double Double(int col) const;
  std::string Text(int col) const;  // "" for NULL
  bool IsNull(int col) const;
  std::optional<int64_t> OptInt(int col) const;  // nullopt for NULL

 private:
  friend class Db;
  Statement(const Db* db, sqlite3_stmt* st, std::string purpose) : db_(db), st_(st), purpose_(std::move(purpose)) {}
  const Db* db_ = nullptr;
  sqlite3_stmt* st_ = nullptr;
  std::string purpose_;
};

struct OpenOptions {
  std::string label = "database";  // names the database in messages ("ledger", "daemon database")
  bool wal = true;                 // journal_mode=WAL (refused when SQLite cannot give it: require_wal)
  bool require_wal = false;        // fail when the journal mode is not WAL afterwards
  bool synchronous_full = true;    // synchronous=FULL: a committed transaction survives a power cut
  bool secure_delete = false;      // deleted rows are overwritten, not left in free pages
  bool serialized = false;         // SQLITE_OPEN_FULLMUTEX (else NOMUTEX: one thread at a time)
  int busy_timeout_ms = 10000;
  bool read_only = false;  // SQLITE_OPEN_READONLY: an existing database, never created or written (no pragmas)
};

class Db {
 public:
  static Result<std::unique_ptr<Db>> Open(const std::string& path, const OpenOptions& options);
  ~Db();
  Db(const Db&) = delete;
  Db& operator=(const Db&) = delete;

  // Runs a script of statements without parameters (a schema, pragmas).
  Status ExecScript(const std::string& sql, const std::string& purpose);
  Result<Statement> Prepare(const std::string& sql, const std::string& purpose);
  // Prepares, binds `params` and runs one statement to completion.
  Status Exec(const std::string& sql, std::initializer_list<Value> params, const std::string& purpose);
  int64_t LastInsertId() const;
  // Rows changed by the last INSERT, UPDATE or DELETE.
  int64_t Changes() const;

  // "LABEL PATH: WHAT: SQLite's message".
  Status Error(const std::string& what) const;
  const std::string& path() const { return path_; }
  const std::string& label() const { return label_; }
  sqlite3* handle() const { return db_; }

 private:
  Db(sqlite3* db, std::string path, std::string label) : db_(db), path_(std::move(path)), label_(std::move(label)) {}
  sqlite3* db_;
  std::string path_;
  std::string label_;
};

// BEGIN IMMEDIATE on Begin(); COMMIT on Commit(); ROLLBACK when dropped before a successful Commit() (a
// failed rollback is logged with the transaction's purpose).
class Transaction {
 public:
  static Result<Transaction> Begin(Db* db, std::string purpose);
  Transaction(Transaction&& o) noexcept : db_(o.db_), purpose_(std::move(o.purpose_)) { o.db_ = nullptr; }
  Transaction& operator=(Transaction&&) = delete;
  Transaction(const Transaction&) = delete;
  Transaction& operator=(const Transaction&) = delete;
  ~Transaction();
  Status Commit();

 private:
  Transaction(Db* db, std::string purpose) : db_(db), purpose_(std::move(purpose)) {}
  Db* db_;  // null once committed or rolled back
  std::string purpose_;
};

}  // namespace tessera::sqlite
