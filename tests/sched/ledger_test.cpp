// Tests of the billing ledger: per-second rating, immutable rows (UPDATE/DELETE refused by the database
// itself), reports by type/day/job/tenant/attempt with exact splits, the daily compliance audit, crash safety
// (a writer killed mid-stream leaves a valid database holding only whole rows), and ledgers from before the
// attempt column: read as they are, upgraded without losing a row, left whole by a crash in the upgrade.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sqlite3.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>

#include "sched/sched.hpp"

using namespace tessera::sched;
namespace fs = std::filesystem;

namespace {

Catalog ReferenceCatalog() {
  auto c = ParseCatalog(R"(price_version: reference-2026-03
types:
  - {name: ascend-910b, vendor: ascend, domestic: true, price_per_card_hour: 2.4, throughput: {llm-train: 0.3}}
  - {name: nvidia-h800, vendor: nvidia, domestic: false, price_per_card_hour: 6.8, throughput: {llm-train: 1}}
)",
                        "catalog.yaml");
  EXPECT_TRUE(c.ok());
  return *c;
}

class LedgerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!HaveSqlite()) GTEST_SKIP() << "built without SQLite";
    dir_ = fs::temp_directory_path() / ("tessera-ledger-" + std::to_string(getpid()) + "-" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    path_ = (dir_ / "ledger.db").string();
  }
  void TearDown() override { fs::remove_all(dir_); }
  int64_t T(const char* s) { return *ParseTime("t", s); }
  fs::path dir_;
  std::string path_;
};

}  // namespace

TEST_F(LedgerTest, RecordsRatePerSecond) {
  auto l = Ledger::Open(path_);
  ASSERT_TRUE(l.ok()) << l.status().ToString();
  Catalog c = ReferenceCatalog();
  auto r = (*l)->Record(c, "glm", "research", "nvidia-h800", 480, T("2026-03-01T00:00:00Z"), T("2026-03-01T01:00:01Z"));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->amount, 480 * 6'800'000LL + RateSeconds(6'800'000, 480, 1));
  EXPECT_EQ(r->amount, 3'264'906'667);  // 3264.906667: one more second of 480 H800 cards
  EXPECT_EQ(r->price_version, "reference-2026-03");
  EXPECT_FALSE(r->domestic);
  auto bad = (*l)->Record(c, "glm", "research", "nvidia-h800", 8, 100, 100);
  EXPECT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("is not after start"), std::string::npos);
  EXPECT_FALSE((*l)->Record(c, "glm", "research", "moore-s4000", 8, 0, 10).ok());
  auto rows = (*l)->Query({});
  ASSERT_TRUE(rows.ok());
  ASSERT_EQ(rows->size(), 1u);
  EXPECT_EQ((*rows)[0].amount, r->amount);
}

TEST_F(LedgerTest, RowsAreImmutableEvenThroughRawSql) {
  {
    auto l = Ledger::Open(path_);
    ASSERT_TRUE(l.ok());
    ASSERT_TRUE((*l)->Record(ReferenceCatalog(), "j", "t", "ascend-910b", 8, 0, 3600).ok());
  }
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(path_.c_str(), &db), SQLITE_OK);
  char* err = nullptr;
  EXPECT_NE(sqlite3_exec(db, "UPDATE usage SET amount_micro = 0", nullptr, nullptr, &err), SQLITE_OK);
  ASSERT_NE(err, nullptr);
  EXPECT_NE(std::string(err).find("immutable"), std::string::npos);
  sqlite3_free(err);
  err = nullptr;
  EXPECT_NE(sqlite3_exec(db, "DELETE FROM usage", nullptr, nullptr, &err), SQLITE_OK);
  sqlite3_free(err);
  sqlite3_stmt* s = nullptr;
  ASSERT_EQ(sqlite3_prepare_v2(db, "SELECT amount_micro, (SELECT journal_mode FROM pragma_journal_mode) FROM usage", -1,
                               &s, nullptr),
            SQLITE_OK);
  ASSERT_EQ(sqlite3_step(s), SQLITE_ROW);
  EXPECT_EQ(sqlite3_column_int64(s, 0), 8 * 2'400'000);
  EXPECT_STREQ(reinterpret_cast<const char*>(sqlite3_column_text(s, 1)), "wal");
  sqlite3_finalize(s);
  sqlite3_close(db);
}

TEST_F(LedgerTest, ReportsSplitExactly) {
  auto l = Ledger::Open(path_);
  ASSERT_TRUE(l.ok());
  Catalog c = ReferenceCatalog();
  // 3 H800 cards from 23:59:59 to 00:00:02 the next day: 3 seconds, split 1 + 2 across days.
  ASSERT_TRUE((*l)->Record(c, "a", "t1", "nvidia-h800", 3, T("2026-03-01T23:59:59Z"), T("2026-03-02T00:00:02Z")).ok());
  ASSERT_TRUE((*l)->Record(c, "b", "t2", "ascend-910b", 8, T("2026-03-02T10:00:00Z"), T("2026-03-02T12:00:00Z")).ok());
  ASSERT_TRUE((*l)->Record(c, "a", "t1", "ascend-910b", 2, T("2026-03-02T10:00:00Z"), T("2026-03-02T10:30:00Z")).ok());
  auto all = (*l)->Query({});
  ASSERT_TRUE(all.ok());
  Money total = 0;
  for (const auto& r : *all) total += r.amount;
  for (GroupBy by : {GroupBy::kType, GroupBy::kDay, GroupBy::kJob, GroupBy::kTenant}) {
    auto b = (*l)->Report({}, by);
    ASSERT_TRUE(b.ok());
    EXPECT_EQ(b->amount, total) << "parts add up for every grouping";
    Money sum = 0;
    for (const auto& line : b->lines) sum += line.amount;
    EXPECT_EQ(sum, total);
  }
  auto by_day = (*l)->Report({}, GroupBy::kDay);
  ASSERT_EQ(by_day->lines.size(), 2u);
  EXPECT_EQ(by_day->lines[0].key, "2026-03-01");
  EXPECT_EQ(by_day->lines[0].card_seconds, 3);
  EXPECT_EQ(by_day->lines[0].amount, RateSeconds(6'800'000, 3, 1));
  EXPECT_EQ(by_day->lines[1].amount,
            RateSeconds(6'800'000, 3, 3) - RateSeconds(6'800'000, 3, 1) + 16 * 2'400'000LL + 2'400'000);
  BillFilter jf;
  jf.job = "a";
  auto by_type = (*l)->Report(jf, GroupBy::kType);
  ASSERT_EQ(by_type->lines.size(), 2u);
  EXPECT_EQ(by_type->lines[0].key, "ascend-910b");
  EXPECT_EQ(by_type->lines[0].amount, 2'400'000);
  BillFilter tf;
  tf.tenant = "t2";
  tf.from = T("2026-03-02T11:00:00Z");
  auto clipped = (*l)->Report(tf, GroupBy::kJob);
  ASSERT_EQ(clipped->lines.size(), 1u);
  EXPECT_EQ(clipped->lines[0].card_seconds, 8 * 3600);
  EXPECT_EQ(clipped->lines[0].amount, 8 * 2'400'000LL);
}

TEST_F(LedgerTest, ComplianceAuditAgainstTheCalendar) {
  auto l = Ledger::Open(path_);
  ASSERT_TRUE(l.ok());
  Catalog c = ReferenceCatalog();
  // Day 1: 480 910B and 480 H800 for 24 h -> 50%. Day 2: 12 h of each, then only H800.
  ASSERT_TRUE((*l)->Record(c, "j", "t", "ascend-910b", 480, T("2026-03-01"), T("2026-03-02T12:00:00Z")).ok());
  ASSERT_TRUE((*l)->Record(c, "j", "t", "nvidia-h800", 480, T("2026-03-01"), T("2026-03-03")).ok());
  auto p = ParsePolicy("calendar:\n  - {from: 2026-01-01, floor: 50%}\n  - {from: 2026-03-02, floor: 40%}\n", "p.yaml");
  ASSERT_TRUE(p.ok());
  auto d1 = (*l)->ComplianceReport(*ParseDate("d", "2026-03-01"), *p);
  ASSERT_TRUE(d1.ok()) << d1.status().ToString();
  EXPECT_EQ(d1->share, 500'000);
  EXPECT_EQ(d1->floor, 500'000);
  EXPECT_TRUE(d1->compliant);
  EXPECT_EQ(d1->total_card_seconds, 960LL * 86400);
  auto d2 = (*l)->ComplianceReport(*ParseDate("d", "2026-03-02"), *p);
  ASSERT_TRUE(d2.ok());
  EXPECT_EQ(d2->share, kPpmScale * 12 / 36);  // 12 h domestic of 36 card-day-hours: 33.3%
  EXPECT_EQ(d2->floor, 400'000);
  EXPECT_FALSE(d2->compliant);
  // Throughput unit: 910B cards weigh 0.3 -> day 1 share 0.3 / 1.3.
  auto pt = ParsePolicy("unit: throughput\nweight_class: llm-train\nfloor: 20%\n", "pt.yaml");
  ASSERT_TRUE(pt.ok());
  EXPECT_FALSE((*l)->ComplianceReport(*ParseDate("d", "2026-03-01"), *pt).ok());  // needs the catalog
  auto d1t = (*l)->ComplianceReport(*ParseDate("d", "2026-03-01"), *pt, &c);
  ASSERT_TRUE(d1t.ok()) << d1t.status().ToString();
  EXPECT_EQ(d1t->share, 300 * kPpmScale / 1300);
  EXPECT_TRUE(d1t->compliant);
  // A day with no usage is compliant (nothing allocated).
  EXPECT_TRUE((*l)->ComplianceReport(*ParseDate("d", "2026-04-01"), *p)->compliant);
  // A weight class the catalog has no throughput for: named with the policy's file, line and field.
  auto pw = ParsePolicy("unit: throughput\nweight_class: infer\nfloor: 20%\n", "pw.yaml");
  ASSERT_TRUE(pw.ok());
  auto bad = (*l)->ComplianceReport(*ParseDate("d", "2026-03-01"), *pw, &c);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("pw.yaml:2: weight_class: 'infer' has no throughput for type"),
            std::string::npos)
      << bad.status().message();
}

TEST_F(LedgerTest, KilledWriterLeavesAValidDatabase) {
  { ASSERT_TRUE(Ledger::Open(path_).ok()); }
  pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    auto l = Ledger::Open(path_);
    if (!l.ok()) _exit(3);
    Catalog c = ReferenceCatalog();
    for (int i = 0;; ++i) {
      std::vector<UsageRecord> batch(4);
      for (int k = 0; k < 4; ++k) {
        batch[k] = {0, "job", "t", "ascend-910b", true, 1 + k, i * 10, i * 10 + 7, "v", 2'400'000, 0};
      }
      if (!(*l)->Append(&batch).ok()) _exit(4);
    }
  }
  usleep(300'000);
  kill(child, SIGKILL);
  int status = 0;
  waitpid(child, &status, 0);
  ASSERT_TRUE(WIFSIGNALED(status)) << "the writer must have been killed, not exited (status " << status << ")";
  // Reopen: integrity holds and batches are whole (all-or-nothing transactions of 4 rows).
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(path_.c_str(), &db), SQLITE_OK);
  sqlite3_stmt* s = nullptr;
  ASSERT_EQ(sqlite3_prepare_v2(db, "PRAGMA integrity_check", -1, &s, nullptr), SQLITE_OK);
  ASSERT_EQ(sqlite3_step(s), SQLITE_ROW);
  EXPECT_STREQ(reinterpret_cast<const char*>(sqlite3_column_text(s, 0)), "ok");
  sqlite3_finalize(s);
  sqlite3_close(db);
  auto l = Ledger::Open(path_);
  ASSERT_TRUE(l.ok()) << l.status().ToString();
  auto rows = (*l)->Query({});
  ASSERT_TRUE(rows.ok());
  EXPECT_GT(rows->size(), 0u);
  EXPECT_EQ(rows->size() % 4, 0u) << "a batch is all or nothing";
  for (const auto& r : *rows) EXPECT_EQ(r.amount, RateSeconds(2'400'000, r.cards, 7));
  // And the ledger keeps working after the crash.
  EXPECT_TRUE((*l)->Record(ReferenceCatalog(), "after", "t", "nvidia-h800", 1, 0, 1).ok());
}

namespace {

// The schema of a ledger from before the attempt column (schema version 1), as older builds created it.
const char* kSchemaV1 = R"sql(
CREATE TABLE usage(
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
  amount_micro  INTEGER NOT NULL CHECK (amount_micro >= 0)
);
CREATE INDEX usage_job ON usage(job);
CREATE TRIGGER usage_immutable_update BEFORE UPDATE ON usage
BEGIN SELECT RAISE(ABORT, 'usage rows are immutable (append a correcting row instead)'); END;
CREATE TRIGGER usage_immutable_delete BEFORE DELETE ON usage
BEGIN SELECT RAISE(ABORT, 'usage rows are immutable (append a correcting row instead)'); END;
PRAGMA user_version = 1;
PRAGMA journal_mode = WAL;
-- job train#7: attempt 1 on 2 + 2 cards for 18 s, attempt 2 on 3 + 1 for 35 s; another job for an hour.
INSERT INTO usage(job, tenant, type, domestic, cards, start, "end", price_version, price_micro, amount_micro) VALUES
  ('train#7', 't', 'ascend-910b', 1, 2, 1772323200, 1772323218, 'v1', 2400000, 24000),
  ('train#7', 't', 'nvidia-h800', 0, 2, 1772323200, 1772323218, 'v1', 6800000, 68000),
  ('train#7', 't', 'ascend-910b', 1, 3, 1772323225, 1772323260, 'v1', 2400000, 70000),
  ('train#7', 't', 'nvidia-h800', 0, 1, 1772323225, 1772323260, 'v1', 6800000, 66111),
  ('other#8', 'u', 'nvidia-h800', 0, 8, 1772323200, 1772326800, 'v1', 6800000, 54400000);
)sql";

// A single value of `sql` on the database at `path`, read with SQLite itself (not through the ledger).
std::string Sql(const std::string& path, const std::string& sql) {
  sqlite3* db = nullptr;
  if (sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READONLY, nullptr) != SQLITE_OK) return "open failed";
  sqlite3_stmt* st = nullptr;
  std::string out = "prepare failed: " + sql;
  if (sqlite3_prepare_v2(db, sql.c_str(), -1, &st, nullptr) == SQLITE_OK) {
    out = sqlite3_step(st) == SQLITE_ROW && sqlite3_column_text(st, 0)
              ? reinterpret_cast<const char*>(sqlite3_column_text(st, 0))
              : "";
    sqlite3_finalize(st);
  }
  sqlite3_close(db);
  return out;
}

// What the bills of a ledger say: the total, and the attempts of train#7 as "start:attempt:seconds:amount".
std::string Bills(Ledger& l) {
  auto all = l.Report({}, GroupBy::kType);
  BillFilter f;
  f.job = "train#7";
  auto by = l.Report(f, GroupBy::kAttempt);
  if (!all.ok() || !by.ok()) return "report failed";
  std::string out = std::to_string(all->amount) + "/" + std::to_string(all->card_seconds);
  for (const auto& line : by->lines)
    out += fmt::format(" {}:{}:{}:{}", line.start, line.attempt, line.seconds, line.amount);
  return out;
}

}  // namespace

TEST_F(LedgerTest, ALedgerFromBeforeTheAttemptColumnIsReadUpgradedAndBillsTheSame) {
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(path_.c_str(), &db), SQLITE_OK);
  char* err = nullptr;
  ASSERT_EQ(sqlite3_exec(db, kSchemaV1, nullptr, nullptr, &err), SQLITE_OK) << (err ? err : "");
  sqlite3_close(db);
  const std::string want =
      "54628111/29012 1772323200:0:18:92000 1772323225:0:35:136111";  // 0.092 + 0.136111 + 54.4 CNY
  // Read-only (`tessera bill`): read as it is, not upgraded.
  {
    auto ro = Ledger::OpenReadOnly(path_);
    ASSERT_TRUE(ro.ok()) << ro.status().ToString();
    EXPECT_EQ(Bills(**ro), want);
  }
  EXPECT_EQ(Sql(path_, "PRAGMA user_version"), "1");
  // A crash in the middle of the upgrade (after the column was added, before the commit): the ledger is as it was,
  // whole, every row there.
  pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    tessera::sched::testing::SetLedgerUpgradeHook([] { _exit(7); });
    (void)Ledger::Open(path_);
    _exit(3);  // the hook did not run: no upgrade was made
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 7) << "status " << status;
  EXPECT_EQ(Sql(path_, "PRAGMA integrity_check"), "ok");
  EXPECT_EQ(Sql(path_, "PRAGMA user_version"), "1");
  EXPECT_EQ(Sql(path_, "SELECT COUNT(*) FROM pragma_table_info('usage') WHERE name = 'attempt'"), "0");
  EXPECT_EQ(Sql(path_, "SELECT COUNT(*) FROM usage"), "5");
  // The upgrade: the column and the version, every row kept (attempt 0), the same bills; rows stay immutable.
  auto l = Ledger::Open(path_);
  ASSERT_TRUE(l.ok()) << l.status().ToString();
  EXPECT_EQ(Sql(path_, "PRAGMA user_version"), "2");
  EXPECT_EQ(Sql(path_, "SELECT COUNT(*) FROM usage"), "5");
  EXPECT_EQ(Bills(**l), want);
  EXPECT_EQ(Sql(path_, "PRAGMA integrity_check"), "ok");
  ASSERT_EQ(sqlite3_open(path_.c_str(), &db), SQLITE_OK);
  EXPECT_NE(sqlite3_exec(db, "UPDATE usage SET attempt = 1", nullptr, nullptr, nullptr), SQLITE_OK);
  sqlite3_close(db);
  // A new attempt's rows carry its number; one in the same second as an old row is its own line.
  ASSERT_TRUE((*l)->Record(ReferenceCatalog(), "train#7", "t", "ascend-910b", 4, 1772323225, 1772323230, 3).ok());
  BillFilter f;
  f.job = "train#7";
  auto by = (*l)->Report(f, GroupBy::kAttempt);
  ASSERT_TRUE(by.ok());
  ASSERT_EQ(by->lines.size(), 3u);
  EXPECT_EQ(by->lines[2].attempt, 3);
  EXPECT_EQ(by->lines[2].cards_by_type.at("ascend-910b"), 4);
  // Opened again: nothing to upgrade, nothing changes.
  l->reset();
  auto again = Ledger::Open(path_);
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ(Sql(path_, "SELECT COUNT(*) FROM usage"), "6");
}

TEST_F(LedgerTest, ALedgerOfANewerSchemaIsRefusedNamingBothVersions) {
  { ASSERT_TRUE(Ledger::Open(path_).ok()); }
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(path_.c_str(), &db), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(db, "PRAGMA user_version = 9", nullptr, nullptr, nullptr), SQLITE_OK);
  sqlite3_close(db);
  for (bool ro : {false, true}) {
    auto l = ro ? Ledger::OpenReadOnly(path_) : Ledger::Open(path_);
    ASSERT_FALSE(l.ok());
    EXPECT_NE(l.status().message().find("its schema is version 9, newer than this tessera's (2)"), std::string::npos)
        << l.status().message();
  }
}
