// common/sqlite: the one SQLite wrapper (connection, prepared statements, transactions) of the job store and
// the billing ledger.
#include "common/sqlite.hpp"

#include <fmt/format.h>
#include <sqlite3.h>

#include "common/log.hpp"

namespace tessera::sqlite {

// ---- Statement --------------------------------------------------------------------------------------------

Statement::Statement(Statement&& o) noexcept : db_(o.db_), st_(o.st_), purpose_(std::move(o.purpose_)) {
  o.st_ = nullptr;
}

Statement& Statement::operator=(Statement&& o) noexcept {
  if (this != &o) {
    sqlite3_finalize(st_);
    db_ = o.db_;
    st_ = o.st_;
    purpose_ = std::move(o.purpose_);
    o.st_ = nullptr;
  }
  return *this;
}

Statement::~Statement() { sqlite3_finalize(st_); }

Status Statement::Bind(int index, const Value& v) {
  int rc = SQLITE_OK;
  if (std::holds_alternative<std::nullptr_t>(v)) {
    rc = sqlite3_bind_null(st_, index);
  } else if (const auto* i = std::get_if<int64_t>(&v)) {
    rc = sqlite3_bind_int64(st_, index, *i);
  } else if (const auto* d = std::get_if<double>(&v)) {
    rc = sqlite3_bind_double(st_, index, *d);
  } else {
    const auto& s = std::get<std::string>(v);
    rc = sqlite3_bind_text(st_, index, s.data(), static_cast<int>(s.size()), SQLITE_TRANSIENT);
  }
  if (rc != SQLITE_OK) return db_->Error(fmt::format("{}: bind parameter {}", purpose_, index));
  return Status::Ok();
}

Status Statement::BindAll(std::initializer_list<Value> values) {
  int i = 1;
  for (const auto& v : values) TSR_RETURN_IF_ERROR(Bind(i++, v));
  return Status::Ok();
}

Result<bool> Statement::Step() {
  int rc = sqlite3_step(st_);
  if (rc == SQLITE_ROW) return true;
  if (rc == SQLITE_DONE) return false;
  return db_->Error(purpose_);
}

Status Statement::Run() {
  while (true) {
    TSR_ASSIGN_OR_RETURN(bool row, Step());
    if (!row) return Status::Ok();
  }
}

void Statement::Reset() { sqlite3_reset(st_); }

int64_t Statement::Int(int col) const { return sqlite3_column_int64(st_, col); }
double Statement::Double(int col) const { return sqlite3_column_double(st_, col); }
std::string Statement::Text(int col) const {
  const auto* t = reinterpret_cast<const char*>(sqlite3_column_text(st_, col));
  return t ? std::string(t, static_cast<size_t>(sqlite3_column_bytes(st_, col))) : std::string();
}
bool Statement::IsNull(int col) const { return sqlite3_column_type(st_, col) == SQLITE_NULL; }
std::optional<int64_t> Statement::OptInt(int col) const {
  if (IsNull(col)) return std::nullopt;
  return Int(col);
}

// ---- Db -----------------------------------------------------------------------------------------------------

Result<std::unique_ptr<Db>> Db::Open(const std::string& path, const OpenOptions& o) {
  sqlite3* h = nullptr;
  int flags = (o.read_only ? SQLITE_OPEN_READONLY : SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE) |
              (o.serialized ? SQLITE_OPEN_FULLMUTEX : SQLITE_OPEN_NOMUTEX);
  if (sqlite3_open_v2(path.c_str(), &h, flags, nullptr) != SQLITE_OK) {
    std::string msg = h ? sqlite3_errmsg(h) : "out of memory";
    if (h) sqlite3_close_v2(h);
    return SystemError(fmt::format("{} {}: cannot open: {}", o.label, path, msg));
  }
  std::unique_ptr<Db> db(new Db(h, path, o.label));
  sqlite3_busy_timeout(h, o.busy_timeout_ms);
  if (o.read_only) return db;
  if (o.wal) TSR_RETURN_IF_ERROR(db->ExecScript("PRAGMA journal_mode=WAL", "set journal_mode=WAL"));
  if (o.synchronous_full) TSR_RETURN_IF_ERROR(db->ExecScript("PRAGMA synchronous=FULL", "set synchronous=FULL"));
  if (o.secure_delete) TSR_RETURN_IF_ERROR(db->ExecScript("PRAGMA secure_delete=ON", "set secure_delete=ON"));
  if (o.require_wal) {
    TSR_ASSIGN_OR_RETURN(auto st, db->Prepare("PRAGMA journal_mode", "PRAGMA journal_mode"));
    TSR_ASSIGN_OR_RETURN(bool row, st.Step());
    std::string mode = row ? st.Text(0) : "";
    if (mode != "wal")
      return SystemError(fmt::format("{} {}: WAL journal unavailable (mode '{}')", o.label, path, mode));
  }
  return db;
}

Db::~Db() { sqlite3_close_v2(db_); }

Status Db::Error(const std::string& what) const {
  return SystemError(fmt::format("{} {}: {}: {}", label_, path_, what, db_ ? sqlite3_errmsg(db_) : "no database"));
}

Status Db::ExecScript(const std::string& sql, const std::string& purpose) {
  char* err = nullptr;
  if (sqlite3_exec(db_, sql.c_str(), nullptr, nullptr, &err) != SQLITE_OK) {
    std::string m = err ? err : sqlite3_errmsg(db_);
    sqlite3_free(err);
    return SystemError(fmt::format("{} {}: {}: {}", label_, path_, purpose, m));
  }
  return Status::Ok();
}

Result<Statement> Db::Prepare(const std::string& sql, const std::string& purpose) {
  sqlite3_stmt* st = nullptr;
  if (sqlite3_prepare_v2(db_, sql.c_str(), -1, &st, nullptr) != SQLITE_OK) {
    sqlite3_finalize(st);
    return Error(purpose + " (prepare)");
  }
  return Statement(this, st, purpose);
}

Status Db::Exec(const std::string& sql, std::initializer_list<Value> params, const std::string& purpose) {
  TSR_ASSIGN_OR_RETURN(auto st, Prepare(sql, purpose));
  TSR_RETURN_IF_ERROR(st.BindAll(params));
  return st.Run();
}

int64_t Db::LastInsertId() const { return sqlite3_last_insert_rowid(db_); }
int64_t Db::Changes() const { return sqlite3_changes(db_); }

// ---- Transaction ----------------------------------------------------------------------------------------

Result<Transaction> Transaction::Begin(Db* db, std::string purpose) {
  TSR_RETURN_IF_ERROR(db->ExecScript("BEGIN IMMEDIATE", purpose + ": begin"));
  return Transaction(db, std::move(purpose));
}

Status Transaction::Commit() {
  if (!db_) return InternalError(fmt::format("{}: commit of a transaction that is over", purpose_));
  Status s = db_->ExecScript("COMMIT", purpose_ + ": commit");
  if (!s.ok()) return s;  // still open: the destructor rolls it back
  db_ = nullptr;
  return Status::Ok();
}

Transaction::~Transaction() {
  if (!db_) return;
  Status s = db_->ExecScript("ROLLBACK", purpose_ + ": rollback");
  if (!s.ok()) TSR_LOG_ERROR("{}", s.ToString());
}

}  // namespace tessera::sqlite
