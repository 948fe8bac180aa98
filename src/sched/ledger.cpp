// sched/ledger: the billing ledger — immutable usage intervals in SQLite (WAL, synchronous=FULL), rated per
// second in fixed-point money. Triggers abort any UPDATE or DELETE of a usage row; every append is one
// transaction, so a crash leaves either the whole row or nothing. Reports split intervals at filter and day
// boundaries with cumulative rounding, so that the parts of a row add up exactly to its amount.
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <map>

#include "sched/inputs_internal.hpp"
#include "sched/sched.hpp"

#ifdef TESSERA_HAVE_SQLITE
#include "common/sqlite.hpp"
#endif

namespace tessera::sched {

bool HaveSqlite() {
#ifdef TESSERA_HAVE_SQLITE
  return true;
#else
  return false;
#endif
}

namespace {

constexpr int64_t kDay = 86400;

int64_t DayOf(int64_t t) { return t >= 0 ? t / kDay : (t - kDay + 1) / kDay; }

// The amount of row `r` for its sub-interval [a, b): the difference of cumulative ratings, so parts add up.
Money PartAmount(const UsageRecord& r, int64_t a, int64_t b) {
  return RateSeconds(r.price_per_card_hour, r.cards, b - r.start) -
         RateSeconds(r.price_per_card_hour, r.cards, a - r.start);
}

}  // namespace

#ifdef TESSERA_HAVE_SQLITE

struct Ledger::Impl {
  std::unique_ptr<sqlite::Db> db;
  bool has_attempt = true;  // false: a ledger from before the attempt column, opened read-only
};

namespace {

const char* kSchema = R"sql(
CREATE TABLE IF NOT EXISTS usage(
  id            INTEGER PRIMARY KEY AUTOINCREMENT,
  job           TEXT    NOT NULL,
  tenant        TEXT    NOT NULL,
  type          TEXT    NOT NULL,
  domestic      INTEGER NOT NULL CHECK (domestic IN (0, 1)),
  cards         INTEGER NOT NULL CHECK (cards > 0),
  start         INTEGER NOT NULL,
  "end"         INTEGER NOT NULL CHECK ("end" > start),
  price_version TEXT    NOT NULL,
  price_micro   INTEGER NOT NULL CHECK (price_micro >= 0),
  amount_micro  INTEGER NOT NULL CHECK (amount_micro >= 0),
  attempt       INTEGER CHECK (attempt IS NULL OR attempt > 0)
);
CREATE INDEX IF NOT EXISTS usage_job ON usage(job);
CREATE INDEX IF NOT EXISTS usage_tenant ON usage(tenant);
CREATE INDEX IF NOT EXISTS usage_start ON usage(start);
CREATE TRIGGER IF NOT EXISTS usage_immutable_update BEFORE UPDATE ON usage
BEGIN SELECT RAISE(ABORT, 'usage rows are immutable (append a correcting row instead)'); END;
CREATE TRIGGER IF NOT EXISTS usage_immutable_delete BEFORE DELETE ON usage
BEGIN SELECT RAISE(ABORT, 'usage rows are immutable (append a correcting row instead)'); END;
)sql";

// Version 1: no attempt column. Version 2: `attempt` (NULL in the rows of version 1).
constexpr int64_t kSchemaVersion = 2;
std::function<void()> g_upgrade_hook;

Result<int64_t> UserVersion(sqlite::Db* db) {
  TSR_ASSIGN_OR_RETURN(auto q, db->Prepare("PRAGMA user_version", "read the schema version"));
  TSR_ASSIGN_OR_RETURN(bool row, q.Step());
  return row ? q.Int(0) : 0;
}

Result<bool> HasAttemptColumn(sqlite::Db* db) {
  TSR_ASSIGN_OR_RETURN(auto q, db->Prepare("SELECT COUNT(*) FROM pragma_table_info('usage') WHERE name = 'attempt'",
                                           "read the usage table's columns"));
  TSR_ASSIGN_OR_RETURN(bool row, q.Step());
  return row && q.Int(0) > 0;
}

Status RefuseNewer(sqlite::Db* db, int64_t version) {
  if (version <= kSchemaVersion) return Status::Ok();
  return Unsupported(
      fmt::format("ledger {}: its schema is version {}, newer than this tessera's ({}): use the "
                  "tessera that wrote it",
                  db->path(), version, kSchemaVersion));
}

Status Validate(const UsageRecord& r) {
  if (r.job.empty() || r.tenant.empty() || r.type.empty())
    return InvalidArgument(
        fmt::format("usage record: job, tenant and type must not be empty (job '{}', tenant '{}', "
                    "type '{}')",
                    r.job, r.tenant, r.type));
  if (r.cards <= 0)
    return InvalidArgument(fmt::format("usage record for job '{}': cards={} must be > 0", r.job, r.cards));
  if (r.end <= r.start)
    return InvalidArgument(fmt::format("usage record for job '{}': end {} is not after start {}", r.job,
                                       FormatTime(r.end), FormatTime(r.start)));
  if (r.price_per_card_hour < 0) return InvalidArgument("usage record: negative price");
  if (r.attempt < 0)
    return InvalidArgument(
        fmt::format("usage record for job '{}': attempt {} must be > 0 (or 0: none)", r.job, r.attempt));
  return Status::Ok();
}

}  // namespace

Ledger::Ledger(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Ledger::~Ledger() = default;

Result<std::unique_ptr<Ledger>> Ledger::Open(const std::string& path) {
  auto impl = std::make_unique<Impl>();
  sqlite::OpenOptions o;
  o.label = "ledger";
  o.require_wal = true;
  TSR_ASSIGN_OR_RETURN(impl->db, sqlite::Db::Open(path, o));
  sqlite::Db* db = impl->db.get();
  // One transaction: the schema, the attempt column a ledger of version 1 lacks, and the version. SQLite's ALTER
  // TABLE ... ADD COLUMN rewrites no row; a crash before the commit leaves the ledger as it was.
  TSR_ASSIGN_OR_RETURN(auto tx, sqlite::Transaction::Begin(db, "create or upgrade the schema"));
  TSR_ASSIGN_OR_RETURN(int64_t version, UserVersion(db));
  TSR_RETURN_IF_ERROR(RefuseNewer(db, version));
  TSR_RETURN_IF_ERROR(db->ExecScript(kSchema, "create the schema"));
  TSR_ASSIGN_OR_RETURN(bool has_attempt, HasAttemptColumn(db));
  if (!has_attempt) {
    TSR_RETURN_IF_ERROR(
        db->ExecScript("ALTER TABLE usage ADD COLUMN attempt INTEGER CHECK (attempt IS NULL OR attempt > 0);",
                       "add the attempt column to a ledger of schema version 1"));
    if (g_upgrade_hook) g_upgrade_hook();
  }
  TSR_RETURN_IF_ERROR(
      db->ExecScript(fmt::format("PRAGMA user_version = {};", kSchemaVersion), "record the schema version"));
  TSR_RETURN_IF_ERROR(tx.Commit());
  return std::unique_ptr<Ledger>(new Ledger(std::move(impl)));
}

Result<std::unique_ptr<Ledger>> Ledger::OpenReadOnly(const std::string& path) {
  if (::access(path.c_str(), F_OK) != 0)
    return NotFound(fmt::format("no ledger at {}: {}", path, std::strerror(errno)));
  auto impl = std::make_unique<Impl>();
  sqlite::OpenOptions o;
  o.label = "ledger";
  o.read_only = true;
  TSR_ASSIGN_OR_RETURN(impl->db, sqlite::Db::Open(path, o));
  TSR_ASSIGN_OR_RETURN(int64_t version, UserVersion(impl->db.get()));
  TSR_RETURN_IF_ERROR(RefuseNewer(impl->db.get(), version));
  TSR_ASSIGN_OR_RETURN(impl->has_attempt, HasAttemptColumn(impl->db.get()));
  return std::unique_ptr<Ledger>(new Ledger(std::move(impl)));
}

Status Ledger::Append(std::vector<UsageRecord>* rows) {
  for (const auto& r : *rows) TSR_RETURN_IF_ERROR(Validate(r));
  sqlite::Db* db = impl_->db.get();
  TSR_ASSIGN_OR_RETURN(auto tx, sqlite::Transaction::Begin(db, "append usage"));
  TSR_ASSIGN_OR_RETURN(auto q,
                       db->Prepare("INSERT INTO usage(job, tenant, type, domestic, cards, start, \"end\", "
                                   "price_version, price_micro, amount_micro, attempt) VALUES (?,?,?,?,?,?,?,?,?,?,?)",
                                   "insert usage"));
  for (auto& r : *rows) {
    r.amount = RateSeconds(r.price_per_card_hour, r.cards, r.end - r.start);
    q.Reset();
    TSR_RETURN_IF_ERROR(q.BindAll({r.job, r.tenant, r.type, int64_t{r.domestic ? 1 : 0}, r.cards, r.start, r.end,
                                   r.price_version, r.price_per_card_hour, r.amount,
                                   r.attempt > 0 ? sqlite::Value(r.attempt) : sqlite::Value(nullptr)}));
    Status st = q.Run();
    if (!st.ok()) return db->Error(fmt::format("insert usage of job '{}'", r.job));
    r.id = db->LastInsertId();
  }
  return tx.Commit();  // a failed insert or commit rolls the whole append back (tx's destructor)
}

Result<UsageRecord> Ledger::Record(const Catalog& catalog, const std::string& job, const std::string& tenant,
                                   const std::string& type, int64_t cards, int64_t start, int64_t end,
                                   int64_t attempt) {
  const AcceleratorType* t = catalog.Find(type);
  if (!t)
    return InvalidArgument(
        fmt::format("usage of job '{}': type '{}' is not in the catalog {}", job, type, catalog.source));
  std::vector<UsageRecord> rows(1);
  UsageRecord& r = rows[0];
  r.job = job;
  r.tenant = tenant;
  r.type = type;
  r.domestic = t->domestic;
  r.cards = cards;
  r.start = start;
  r.end = end;
  r.price_version = catalog.price_version;
  r.price_per_card_hour = t->price_per_card_hour;
  r.attempt = attempt;
  TSR_RETURN_IF_ERROR(Append(&rows));
  return rows[0];
}

Result<std::vector<UsageRecord>> Ledger::Query(const BillFilter& f) {
  std::string sql =
      "SELECT id, job, tenant, type, domestic, cards, start, \"end\", price_version, price_micro, amount_micro, " +
      std::string(impl_->has_attempt ? "attempt" : "NULL") + " FROM usage WHERE 1=1";
  if (f.job) sql += " AND job = ?1";
  if (f.tenant) sql += " AND tenant = ?2";
  if (f.from) sql += " AND \"end\" > ?3";
  if (f.to) sql += " AND start < ?4";
  sql += " ORDER BY start, id";
  TSR_ASSIGN_OR_RETURN(auto q, impl_->db->Prepare(sql, "query usage"));
  if (f.job) TSR_RETURN_IF_ERROR(q.Bind(1, *f.job));
  if (f.tenant) TSR_RETURN_IF_ERROR(q.Bind(2, *f.tenant));
  if (f.from) TSR_RETURN_IF_ERROR(q.Bind(3, *f.from));
  if (f.to) TSR_RETURN_IF_ERROR(q.Bind(4, *f.to));
  std::vector<UsageRecord> out;
  while (true) {
    TSR_ASSIGN_OR_RETURN(bool row, q.Step());
    if (!row) break;
    UsageRecord r;
    r.id = q.Int(0);
    r.job = q.Text(1);
    r.tenant = q.Text(2);
    r.type = q.Text(3);
    r.domestic = q.Int(4) != 0;
    r.cards = q.Int(5);
    r.start = q.Int(6);
    r.end = q.Int(7);
    r.price_version = q.Text(8);
    r.price_per_card_hour = q.Int(9);
    r.amount = q.Int(10);
    r.attempt = q.OptInt(11).value_or(0);
    out.push_back(std::move(r));
  }
  return out;
}

#else  // no SQLite

struct Ledger::Impl {};
Ledger::Ledger(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Ledger::~Ledger() = default;
Result<std::unique_ptr<Ledger>> Ledger::Open(const std::string& path) {
  return Unsupported(
      fmt::format("cannot open ledger '{}': tessera was built without SQLite (install "
                  "libsqlite3-dev and rebuild)",
                  path));
}
Result<std::unique_ptr<Ledger>> Ledger::OpenReadOnly(const std::string& path) { return Open(path); }
Status Ledger::Append(std::vector<UsageRecord>*) { return Unsupported("built without SQLite"); }
Result<UsageRecord> Ledger::Record(const Catalog&, const std::string&, const std::string&, const std::string&, int64_t,
                                   int64_t, int64_t, int64_t) {
  return Unsupported("built without SQLite");
}
Result<std::vector<UsageRecord>> Ledger::Query(const BillFilter&) { return Unsupported("built without SQLite"); }

#endif

namespace testing {
void SetLedgerUpgradeHook(std::function<void()> hook) {
#ifdef TESSERA_HAVE_SQLITE
  g_upgrade_hook = std::move(hook);
#else
  (void)hook;
#endif
}
}  // namespace testing

Result<Bill> Ledger::Report(const BillFilter& f, GroupBy by) {
  TSR_ASSIGN_OR_RETURN(std::vector<UsageRecord> rows, Query(f));
  std::map<std::string, BillLine> lines;
  Bill bill;
  for (const auto& r : rows) {
    int64_t a = f.from ? std::max(r.start, *f.from) : r.start;
    int64_t b = f.to ? std::min(r.end, *f.to) : r.end;
    if (a >= b) continue;
    // Parts: one, or one per day when grouping by day.
    int64_t s = a;
    while (s < b) {
      int64_t e = by == GroupBy::kDay ? std::min(b, (DayOf(s) + 1) * kDay) : b;
      std::string key;
      switch (by) {
        case GroupBy::kType:
          key = r.type;
          break;
        case GroupBy::kDay:
          key = FormatDate(DayOf(s));
          break;
        case GroupBy::kJob:
          key = r.job;
          break;
        case GroupBy::kTenant:
          key = r.tenant;
          break;
        case GroupBy::kAttempt:
          key = fmt::format("{} {:012d} {:06d}", r.job, r.start, r.attempt);
          break;
      }
      BillLine& l = lines[key];
      l.key = key;
      if (by == GroupBy::kAttempt) {
        l.job = r.job;
        l.attempt = r.attempt;
        l.start = r.start;
        l.seconds = std::max(l.seconds, e - s);
        l.cards_by_type[r.type] += r.cards;
      }
      int64_t cs = r.cards * (e - s);
      Money amt = PartAmount(r, s, e);
      l.card_seconds += cs;
      l.amount += amt;
      bill.card_seconds += cs;
      bill.amount += amt;
      s = e;
    }
  }
  for (auto& [k, l] : lines) bill.lines.push_back(l);
  return bill;
}

Result<Compliance> Ledger::ComplianceReport(int64_t day, const Policy& policy, const Catalog* catalog) {
  if (policy.unit == ShareUnit::kThroughput && !catalog)
    return InvalidArgument(
        fmt::format("{}: unit throughput weighs card-hours by the catalog's throughput for '{}': "
                    "give the catalog too",
                    policy.source, policy.weight_class));
  BillFilter f;
  f.from = day * kDay;
  f.to = (day + 1) * kDay;
  TSR_ASSIGN_OR_RETURN(std::vector<UsageRecord> rows, Query(f));
  Compliance c;
  c.day = day;
  c.unit = policy.unit;
  c.floor = policy.FloorAt(day);
  __int128 wdom = 0, wtot = 0;
  for (const auto& r : rows) {
    int64_t a = std::max(r.start, *f.from), b = std::min(r.end, *f.to);
    if (a >= b) continue;
    int64_t cs = r.cards * (b - a);
    c.total_card_seconds += cs;
    if (r.domestic) c.domestic_card_seconds += cs;
    c.card_seconds_by_type[r.type] += cs;
    int64_t w = 1;
    if (policy.unit == ShareUnit::kThroughput) {
      const AcceleratorType* t = catalog->Find(r.type);
      if (!t)
        return InvalidArgument(fmt::format("ledger row {} (job '{}'): type '{}' is not in the catalog {}", r.id, r.job,
                                           r.type, catalog->source));
      auto it = t->throughput.find(policy.weight_class);
      if (it == t->throughput.end()) return internal::NoWeightClassThroughput(policy, *t, *catalog);
      w = it->second;
    }
    wtot += static_cast<__int128>(cs) * w;
    if (r.domestic) wdom += static_cast<__int128>(cs) * w;
  }
  c.share = wtot > 0 ? static_cast<Ppm>(wdom * kPpmScale / wtot) : kPpmScale;
  c.compliant = wdom * kPpmScale >= static_cast<__int128>(c.floor) * wtot;
  return c;
}

}  // namespace tessera::sched
