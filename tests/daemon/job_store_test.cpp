// tests/daemon/job_store_test: the daemon's job store on a real SQLite file — typed rows round-trip (NULLs
// included), the changes that touch several rows are one transaction (a failed half leaves nothing), errors name
// the statement's purpose, and the shared SQLite wrapper's transactions roll back when dropped.
#include "daemon/job_store.hpp"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <string>

#include "common/sqlite.hpp"

namespace tessera::daemon {
namespace {

namespace fs = std::filesystem;

class JobStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("tessera-jobstore-" + std::to_string(::getpid()) + "-" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    auto s = JobStore::Open(Path());
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    store_ = std::move(s).value();
  }
  void TearDown() override {
    store_.reset();
    fs::remove_all(dir_);
  }
  std::string Path() const { return (dir_ / "daemon.db").string(); }

  JobRow NewJob(const std::string& name, int64_t priority, int64_t submitted_ms) {
    JobRow j;
    j.name = name;
    j.tenant = "alice";
    j.priority = priority;
    j.source = name + ".yaml";
    j.yaml = "name: " + name + "\ncards: 2\n";
    j.base_dir = "/base";
    j.compatible = "ascend,nvidia";
    j.reason = "waits";
    j.submitted_ms = submitted_ms;
    j.grace_ms = 2500;
    return j;
  }
  int64_t Add(const JobRow& j) {
    auto id = store_->AddJob(j, [](int64_t id) { return "/srv/alice/" + std::to_string(id) + "/ckpt"; });
    EXPECT_TRUE(id.ok()) << id.status().ToString();
    return id.ok() ? *id : 0;
  }

  fs::path dir_;
  std::unique_ptr<JobStore> store_;
};

TEST_F(JobStoreTest, JobRowRoundTripsWithNulls) {
  int64_t id = Add(NewJob("train", 3, 1000));
  ASSERT_GT(id, 0);
  auto j = store_->Job(id);
  ASSERT_TRUE(j.ok()) << j.status().ToString();
  EXPECT_EQ(j->id, id);
  EXPECT_EQ(j->name, "train");
  EXPECT_EQ(j->tenant, "alice");
  EXPECT_EQ(j->priority, 3);
  EXPECT_EQ(j->source, "train.yaml");
  EXPECT_EQ(j->yaml, "name: train\ncards: 2\n");
  EXPECT_EQ(j->base_dir, "/base");
  EXPECT_EQ(j->compatible, "ascend,nvidia");
  EXPECT_EQ(j->state, "queued");
  EXPECT_EQ(j->reason, "waits");
  EXPECT_EQ(j->submitted_ms, 1000);
  EXPECT_EQ(j->grace_ms, 2500);
  EXPECT_EQ(j->ckpt_dir, "/srv/alice/" + std::to_string(id) + "/ckpt");
  EXPECT_EQ(j->attempts, 0);
  EXPECT_EQ(j->stop_intent, "");
  EXPECT_EQ(j->plan_json, "");
  // NULL columns come back as nullopt, not 0.
  EXPECT_FALSE(j->position.has_value());
  EXPECT_FALSE(j->blocked_since_ms.has_value());
  EXPECT_FALSE(j->stop_requested_ms.has_value());
  EXPECT_FALSE(j->exit_code.has_value());
  EXPECT_FALSE(j->ended_ms.has_value());
  auto tenant = store_->JobTenant(id);
  ASSERT_TRUE(tenant.ok());
  EXPECT_EQ(*tenant, "alice");

  ASSERT_TRUE(store_->SetQueueReason(id, "needs 2 cards", 1, 5000).ok());
  ASSERT_TRUE(store_->SetQueueReason(id, "needs 2 cards still", 2, 9000).ok());
  j = store_->Job(id);
  ASSERT_TRUE(j.ok());
  EXPECT_EQ(j->reason, "needs 2 cards still");
  EXPECT_EQ(j->position, 2);
  EXPECT_EQ(j->blocked_since_ms, 5000);  // the first time it started to wait is kept

  // A job found waiting at its submission waits from then on: the scheduler's later passes keep that time.
  JobRow waiting = NewJob("waiting", 0, 3000);
  waiting.blocked_since_ms = 3000;
  int64_t idw = Add(waiting);
  ASSERT_TRUE(store_->SetQueueReason(idw, "needs 2 cards", 1, 7000).ok());
  auto jw = store_->Job(idw);
  ASSERT_TRUE(jw.ok());
  EXPECT_EQ(jw->blocked_since_ms, 3000);

  // Text with a NUL, a quote and non-ASCII bytes is stored as given.
  JobRow odd = NewJob("o'dd", 0, 2000);
  odd.yaml = std::string("a\0b \xe2\x9c\x93 \"q\"", 12);
  int64_t id2 = Add(odd);
  auto j2 = store_->Job(id2);
  ASSERT_TRUE(j2.ok());
  EXPECT_EQ(j2->name, "o'dd");
  EXPECT_EQ(j2->yaml, odd.yaml);
}

TEST_F(JobStoreTest, AbsentJobIsNotFound) {
  auto j = store_->Job(42);
  ASSERT_FALSE(j.ok());
  EXPECT_EQ(j.status().code(), Code::kNotFound);
  EXPECT_EQ(j.status().message(), "job 42 not found");
  EXPECT_EQ(store_->JobTenant(42).status().code(), Code::kNotFound);
}

TEST_F(JobStoreTest, QueueAndListOrder) {
  int64_t low = Add(NewJob("low", 1, 100));
  int64_t high = Add(NewJob("high", 5, 300));
  int64_t early = Add(NewJob("early", 5, 200));
  auto q = store_->QueuedJobs();
  ASSERT_TRUE(q.ok());
  ASSERT_EQ(q->size(), 3u);
  EXPECT_EQ((*q)[0].id, early);  // priority first, then submission
  EXPECT_EQ((*q)[1].id, high);
  EXPECT_EQ((*q)[2].id, low);

  JobRow bob = NewJob("bobs", 1, 400);
  bob.tenant = "bob";
  Add(bob);
  ASSERT_TRUE(store_->CancelQueued(low, 500).ok());
  auto mine = store_->ListJobs(false, "alice", false);
  ASSERT_TRUE(mine.ok());
  ASSERT_EQ(mine->size(), 2u);  // not bob's, not the cancelled one
  auto all = store_->ListJobs(true, "", true);
  ASSERT_TRUE(all.ok());
  ASSERT_EQ(all->size(), 4u);
  EXPECT_EQ(all->back().id, low);  // ended jobs last
  EXPECT_EQ(all->back().state, "cancelled");
  EXPECT_EQ(all->back().reason, "cancelled while queued");
  EXPECT_EQ(all->back().ended_ms, 500);

  int64_t queued = 0;
  std::optional<int64_t> oldest;
  ASSERT_TRUE(store_->QueueSummary(&queued, &oldest).ok());
  EXPECT_EQ(queued, 3);
  EXPECT_EQ(oldest, 200);
  auto counts = store_->CountJobsByTenantAndState();
  ASSERT_TRUE(counts.ok());
  int64_t total = 0;
  for (const auto& c : *counts) total += c.n;
  EXPECT_EQ(total, 4);
}

TEST_F(JobStoreTest, AttemptLifecycleRoundTrips) {
  int64_t id = Add(NewJob("train", 1, 100));
  AttemptRow a;
  a.job_id = id;
  a.n = 1;
  a.dir = "/state/jobs/1/attempt-1";
  a.alloc_json = R"({"by_node":[{"node":"n1","cards":2}],"islands":[{"type":"ascend-910b","count":2}]})";
  a.resume_from = "";
  a.started_ms = 1000;
  a.wake_latency_ms = 42;
  ASSERT_TRUE(store_->StartAttempt(a).ok());
  auto j = store_->Job(id);
  ASSERT_TRUE(j.ok());
  EXPECT_EQ(j->state, "running");
  EXPECT_EQ(j->attempts, 1);
  EXPECT_EQ(j->plan_json, a.alloc_json);
  EXPECT_FALSE(j->position.has_value());

  ASSERT_TRUE(store_->SetShim(id, 1, 777, 123456).ok());
  auto open = store_->OpenAttempts();
  ASSERT_TRUE(open.ok());
  ASSERT_EQ(open->size(), 1u);
  const AttemptOfJob& o = (*open)[0];
  EXPECT_EQ(o.name, "train");
  EXPECT_EQ(o.tenant, "alice");
  EXPECT_EQ(o.priority, 1);
  EXPECT_EQ(o.grace_ms, 2500);
  EXPECT_EQ(o.attempt.shim_pid, 777);
  EXPECT_EQ(o.attempt.shim_start_ticks, 123456);
  EXPECT_EQ(o.attempt.wake_latency_ms, 42);
  EXPECT_FALSE(o.attempt.ended_ms.has_value());
  EXPECT_FALSE(o.stop_requested_ms.has_value());

  ASSERT_TRUE(store_->RequestStop(id, "preempt", "preempted for job 9", 1500).ok());
  open = store_->OpenAttempts();
  ASSERT_TRUE(open.ok());
  EXPECT_EQ((*open)[0].stop_intent, "preempt");
  EXPECT_EQ((*open)[0].stop_requested_ms, 1500);

  // A preempted attempt ends and the job waits again: blocked since its end, not ended itself.
  ASSERT_TRUE(
      store_->FinishAttempt(id, 1, 2000, 0, 15, "preempt: killed by signal 15", "queued", "preempted", false).ok());
  j = store_->Job(id);
  ASSERT_TRUE(j.ok());
  EXPECT_EQ(j->state, "queued");
  EXPECT_EQ(j->stop_intent, "");
  EXPECT_FALSE(j->stop_requested_ms.has_value());
  EXPECT_FALSE(j->ended_ms.has_value());
  EXPECT_EQ(j->blocked_since_ms, 2000);
  EXPECT_TRUE(store_->OpenAttempts()->empty());

  auto unbilled = store_->UnbilledAttempts();
  ASSERT_TRUE(unbilled.ok());
  ASSERT_EQ(unbilled->size(), 1u);
  ASSERT_TRUE(store_->MarkBilled(id, 1).ok());
  EXPECT_TRUE(store_->UnbilledAttempts()->empty());

  auto atts = store_->Attempts(id);
  ASSERT_TRUE(atts.ok());
  ASSERT_EQ(atts->size(), 1u);
  const AttemptRow& r = (*atts)[0];
  EXPECT_EQ(r.dir, a.dir);
  EXPECT_EQ(r.alloc_json, a.alloc_json);
  EXPECT_EQ(r.started_ms, 1000);
  EXPECT_EQ(r.ended_ms, 2000);
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_EQ(r.exit_signal, 15);
  EXPECT_EQ(r.end_reason, "preempt: killed by signal 15");
  EXPECT_TRUE(r.billed);

  // A second attempt that succeeds: the job is terminal, with its end time.
  a.n = 2;
  a.wake_latency_ms.reset();
  ASSERT_TRUE(store_->StartAttempt(a).ok());
  ASSERT_TRUE(store_->FinishAttempt(id, 2, 3000, 0, 0, "exit code 0", "succeeded", "", true).ok());
  j = store_->Job(id);
  ASSERT_TRUE(j.ok());
  EXPECT_EQ(j->state, "succeeded");
  EXPECT_EQ(j->ended_ms, 3000);
  EXPECT_EQ(j->exit_code, 0);
  EXPECT_FALSE(j->blocked_since_ms.has_value());
  atts = store_->Attempts(id);
  ASSERT_EQ(atts->size(), 2u);
  EXPECT_FALSE((*atts)[1].wake_latency_ms.has_value());
}

TEST_F(JobStoreTest, FailedStartLeavesNothingHalfDone) {
  int64_t id = Add(NewJob("train", 1, 100));
  AttemptRow a;
  a.job_id = id;
  a.n = 1;
  a.dir = "/d";
  a.alloc_json = "{}";
  a.started_ms = 1000;
  ASSERT_TRUE(store_->StartAttempt(a).ok());
  ASSERT_TRUE(store_->FinishAttempt(id, 1, 1100, 1, 0, "exit code 1", "queued", "restarting", false).ok());
  // The same (job, n) again violates the primary key: the error names the database, the purpose and SQLite's
  // message, and the job row is not changed.
  a.alloc_json = R"({"other":1})";
  Status s = store_->StartAttempt(a);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("record the start of attempt 1 of job " + std::to_string(id)), std::string::npos)
      << s.message();
  EXPECT_NE(s.message().find("daemon database " + Path()), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("UNIQUE"), std::string::npos) << s.message();
  auto j = store_->Job(id);
  ASSERT_TRUE(j.ok());
  EXPECT_EQ(j->state, "queued");
  EXPECT_EQ(j->plan_json, "{}");
  // The store is usable afterwards: no transaction was left open.
  EXPECT_TRUE(store_->AddEvent(id, 1200, "after the failure").ok());
}

// The second statement of a change fails (a trigger added through a second connection refuses it): the first
// one is rolled back with it.
TEST_F(JobStoreTest, FailureInTheSecondStatementRollsBackTheFirst) {
  int64_t id = Add(NewJob("train", 1, 100));
  AttemptRow a;
  a.job_id = id;
  a.n = 1;
  a.dir = "/d";
  a.alloc_json = "{}";
  a.started_ms = 1000;
  ASSERT_TRUE(store_->StartAttempt(a).ok());
  {
    sqlite::OpenOptions o;
    o.label = "test connection";
    auto raw = sqlite::Db::Open(Path(), o);
    ASSERT_TRUE(raw.ok()) << raw.status().ToString();
    ASSERT_TRUE((*raw)
                    ->ExecScript("CREATE TRIGGER refuse BEFORE UPDATE OF state ON jobs WHEN NEW.state='boom' "
                                 "BEGIN SELECT RAISE(ABORT, 'refused by the test'); END;"
                                 "CREATE TRIGGER refuse_ckpt BEFORE UPDATE OF ckpt_dir ON jobs WHEN NEW.ckpt_dir='x' "
                                 "BEGIN SELECT RAISE(ABORT, 'no such checkpoint directory'); END;",
                                 "add the test's triggers")
                    .ok());
  }
  // FinishAttempt: the attempts UPDATE succeeds, the jobs UPDATE is refused.
  Status s = store_->FinishAttempt(id, 1, 2000, 0, 0, "exit code 0", "boom", "", true);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("record the end of attempt 1 of job " + std::to_string(id)), std::string::npos)
      << s.message();
  EXPECT_NE(s.message().find("refused by the test"), std::string::npos) << s.message();
  auto atts = store_->Attempts(id);
  ASSERT_TRUE(atts.ok());
  ASSERT_EQ(atts->size(), 1u);
  EXPECT_FALSE((*atts)[0].ended_ms.has_value());  // rolled back with the refused job update
  EXPECT_EQ(store_->OpenAttempts()->size(), 1u);
  EXPECT_EQ(store_->Job(id)->state, "running");

  // AddJob: the INSERT succeeds, setting the checkpoint directory is refused; no job is left behind.
  auto before = store_->ListJobs(true, "", true);
  ASSERT_TRUE(before.ok());
  auto added = store_->AddJob(NewJob("other", 1, 300), [](int64_t) { return std::string("x"); });
  ASSERT_FALSE(added.ok());
  EXPECT_NE(added.status().message().find("no such checkpoint directory"), std::string::npos)
      << added.status().message();
  auto after = store_->ListJobs(true, "", true);
  ASSERT_TRUE(after.ok());
  EXPECT_EQ(after->size(), before->size());
}

TEST_F(JobStoreTest, NeverStartedAttemptIsDroppedAndJobRequeued) {
  int64_t id = Add(NewJob("train", 1, 100));
  AttemptRow a;
  a.job_id = id;
  a.n = 1;
  a.dir = "/d";
  a.alloc_json = "{}";
  a.started_ms = 1000;
  ASSERT_TRUE(store_->StartAttempt(a).ok());
  ASSERT_TRUE(store_->DropNeverStartedAttempt(id, 1).ok());
  auto j = store_->Job(id);
  ASSERT_TRUE(j.ok());
  EXPECT_EQ(j->state, "queued");
  EXPECT_EQ(j->attempts, 0);
  EXPECT_EQ(j->reason, "restarting: the previous start was interrupted");
  EXPECT_TRUE(store_->Attempts(id)->empty());
}

TEST_F(JobStoreTest, ConfigTenantsAndEvents) {
  ConfigTexts defaults;
  defaults.catalog_source = "embedded";
  defaults.catalog_yaml = "types: []";
  auto c = store_->LoadConfig(defaults);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->catalog_source, "embedded");
  EXPECT_EQ(c->fleet_yaml, "");
  ASSERT_TRUE(store_->SaveConfig({"c.yaml", "C", "f.yaml", "F", "p.yaml", "P"}).ok());
  c = store_->LoadConfig(defaults);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->catalog_source, "c.yaml");
  EXPECT_EQ(c->catalog_yaml, "C");
  EXPECT_EQ(c->fleet_source, "f.yaml");
  EXPECT_EQ(c->fleet_yaml, "F");
  EXPECT_EQ(c->policy_source, "p.yaml");
  EXPECT_EQ(c->policy_yaml, "P");

  ASSERT_TRUE(store_->ReplaceTenants({{"admin", "h0", true}, {"bob", "h2", false}, {"alice", "h1", false}}).ok());
  auto t = store_->Tenants();
  ASSERT_TRUE(t.ok());
  ASSERT_EQ(t->size(), 3u);
  EXPECT_EQ((*t)[0].name, "admin");
  EXPECT_TRUE((*t)[0].admin);
  EXPECT_EQ((*t)[1].name, "alice");
  EXPECT_EQ((*t)[1].token_sha256, "h1");
  EXPECT_FALSE((*t)[1].admin);
  // Two tenants with one token break the UNIQUE constraint: the old table stays whole.
  Status s = store_->ReplaceTenants({{"admin", "h0", true}, {"eve", "h0", false}});
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("tenant 'eve'"), std::string::npos) << s.message();
  t = store_->Tenants();
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->size(), 3u);

  int64_t id = Add(NewJob("train", 1, 100));
  ASSERT_TRUE(store_->AddEvent(id, 10, "first").ok());
  ASSERT_TRUE(store_->AddEvent(id, 5, "second").ok());
  auto ev = store_->Events(id);
  ASSERT_TRUE(ev.ok());
  ASSERT_EQ(ev->size(), 2u);
  EXPECT_EQ((*ev)[0].text, "first");  // in insertion order
  EXPECT_EQ((*ev)[1].at_ms, 5);
}

TEST_F(JobStoreTest, StateSurvivesReopen) {
  int64_t id = Add(NewJob("train", 1, 100));
  store_.reset();
  auto again = JobStore::Open(Path());
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  auto j = (*again)->Job(id);
  ASSERT_TRUE(j.ok());
  EXPECT_EQ(j->name, "train");
}

TEST_F(JobStoreTest, OpenErrorNamesThePath) {
  std::string bad = (dir_ / "no-such-dir" / "daemon.db").string();
  auto s = JobStore::Open(bad);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find(bad), std::string::npos) << s.status().message();
  // A file that is not a database.
  std::string junk = (dir_ / "junk.db").string();
  {
    FILE* f = std::fopen(junk.c_str(), "wb");
    ASSERT_NE(f, nullptr);
    std::fputs("this is not an SQLite database, just text long enough to fill a header page.......", f);
    std::fclose(f);
  }
  auto j = JobStore::Open(junk);
  ASSERT_FALSE(j.ok());
  EXPECT_NE(j.status().message().find("daemon database " + junk), std::string::npos) << j.status().message();
}

// The shared wrapper itself: a transaction dropped without Commit rolls back; a committed one stays.
TEST(Sqlite, TransactionRollsBackWhenDropped) {
  fs::path dir = fs::temp_directory_path() / ("tessera-sqlite-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  sqlite::OpenOptions o;
  o.label = "test db";
  auto db = sqlite::Db::Open((dir / "t.db").string(), o);
  ASSERT_TRUE(db.ok()) << db.status().ToString();
  sqlite::Db& d = **db;
  ASSERT_TRUE(d.ExecScript("CREATE TABLE t(k INTEGER PRIMARY KEY, v TEXT, x REAL)", "create t").ok());
  {
    auto tx = sqlite::Transaction::Begin(&d, "insert one");
    ASSERT_TRUE(tx.ok());
    ASSERT_TRUE(d.Exec("INSERT INTO t VALUES(?1,?2,?3)", {int64_t{1}, std::string("one"), 1.5}, "insert 1").ok());
  }  // dropped: rolled back
  {
    auto tx = sqlite::Transaction::Begin(&d, "insert two");
    ASSERT_TRUE(tx.ok());
    ASSERT_TRUE(d.Exec("INSERT INTO t VALUES(?1,?2,?3)", {int64_t{2}, nullptr, 2.5}, "insert 2").ok());
    ASSERT_TRUE(tx->Commit().ok());
  }
  auto q = d.Prepare("SELECT k, v, x FROM t", "read t");
  ASSERT_TRUE(q.ok());
  auto row = q->Step();
  ASSERT_TRUE(row.ok() && *row);
  EXPECT_EQ(q->Int(0), 2);
  EXPECT_TRUE(q->IsNull(1));
  EXPECT_EQ(q->Text(1), "");
  EXPECT_DOUBLE_EQ(q->Double(2), 2.5);
  row = q->Step();
  ASSERT_TRUE(row.ok());
  EXPECT_FALSE(*row);
  // Errors name the database, the purpose and SQLite's message.
  Status s = d.Exec("INSERT INTO nowhere VALUES(1)", {}, "insert into a missing table");
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("test db "), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("insert into a missing table"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("no such table"), std::string::npos) << s.message();
  fs::remove_all(dir);
}

}  // namespace
}  // namespace tessera::daemon
