// tests/daemon/slurm_e2e_test: `tessera daemon --executor slurm` against a real Slurm (two slurmd nodes on this
// machine, started by tests/daemon/slurm_test.sh through scripts/slurm-test-cluster.sh): the fleet imported from
// `scontrol show nodes`; a two-island job as one heterogeneous Slurm job that runs to completion and is billed
// with the times Slurm recorded; preemption by a higher-priority job (scancel --signal=TERM) and resume from the
// checkpoint; a node failure (the node set DOWN while the job runs) requeued and resumed; cancel through the
// daemon and in Slurm; a failing sbatch named with Slurm's message. Jobs are the example trainer as `nobody`.
// All waits are bounded; no test asserts a duration.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cstdlib>
#include <fstream>
#include <set>

#include "daemon/harness.hpp"
#include "daemon/slurm.hpp"
#include "sched/sched.hpp"

namespace tessera::daemon::testing {
namespace {

using json = nlohmann::json;
using namespace std::chrono_literals;

const char* kCatalog = R"(price_version: t
types:
  - {name: ascend-910b, vendor: ascend, domestic: true, price_per_card_hour: 2.4, throughput: {mlp-train: 0.5}}
  - {name: nvidia-h800, vendor: nvidia, domestic: false, price_per_card_hour: 6.8, throughput: {mlp-train: 1.0}}
)";

// The steps of the trainer's --loss-out file ("STEP LOSS BITS" lines).
std::vector<int64_t> Steps(const std::string& path) {
  std::vector<int64_t> s;
  std::ifstream f(path);
  int64_t step;
  double loss;
  std::string bits;
  while (f >> step >> loss >> bits) s.push_back(step);
  return s;
}

class SlurmE2E : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* conf = std::getenv("SLURM_CONF");
    ASSERT_TRUE(conf) << "run through tests/daemon/slurm_test.sh (it starts the Slurm cluster)";
    std::string c = conf;
    cluster_ = c.substr(0, c.rfind("/etc/"));
    dir_ = MakeTempDir("slurm");
    ASSERT_EQ(::chmod(dir_.c_str(), 0755), 0);  // the jobs run as nobody
    out_ = dir_ + "/out";
    ASSERT_EQ(::mkdir(out_.c_str(), 0777), 0);
    ASSERT_EQ(::chmod(out_.c_str(), 0777), 0);
    d_ = std::make_unique<DaemonProcess>(dir_ + "/state",
                                         std::vector<std::string>{"--executor", "slurm", "--slurm-poll", "200ms"});
    d_->Start();
    admin_ = d_->Admin();
    ASSERT_TRUE(admin_);
    WriteText(dir_ + "/catalog.yaml", kCatalog);
  }
  void TearDown() override {
    Shell("scontrol -o show node localhost | grep -q 'State=DOWN' && scontrol update nodename=localhost state=resume");
    d_.reset();
    if (!HasFailure()) Shell("rm -rf '" + dir_ + "' '" + dir_ + "/state-work'");
  }
  // The fleet from Slurm itself: `tessera fleet import --slurm --register`.
  void ImportFleet() {
    std::string out;
    int rc = Shell(fmt::format("TESSERA_HOME='{}' '{}' fleet import --slurm --emulated --catalog '{}/catalog.yaml' "
                               "--out '{}/fleet.yaml' --register 2>&1",
                               d_->state(), Bin(), dir_, dir_),
                   &out);
    ASSERT_EQ(rc, 0) << out;
    std::string fleet = ReadText(dir_ + "/fleet.yaml");
    ASSERT_NE(fleet.find("type: ascend-910b, cards: 2"), std::string::npos) << fleet;
    ASSERT_NE(fleet.find("type: nvidia-h800, cards: 2"), std::string::npos) << fleet;
  }
  std::string TrainerJob(const std::string& name, int priority, int cards, const std::string& compatible, int steps,
                         const std::string& extra = "") {
    return fmt::format(R"(name: {}
priority: {}
class: mlp-train
cards: {}
compatible: {}
bounds: {{nvidia-h800: {{max: 1}}}}
command: [{}, --steps, "{}", --step-delay-ms, "15", --loss-out, {}/{}.txt]
checkpoint: {{every: 50}}
grace: 30s
{})",
                       name, priority, cards, compatible, TESSERA_TRAINER_BIN, steps, out_, name, extra);
  }
  int64_t Submit(const std::string& yaml) {
    auto r = admin_->Post("/v1/jobs", {{"source", "job.yaml"}, {"yaml", yaml}, {"base_dir", dir_}});
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return r.ok() ? (*r)["id"].get<int64_t>() : -1;
  }
  json Job(int64_t id) {
    auto r = admin_->Get(fmt::format("/v1/jobs/{}", id));
    return r.ok() ? *r : json::object();
  }
  std::string Events(int64_t id) {
    std::string s;
    for (const auto& e : Job(id).value("events", json::array())) s += e["text"].get<std::string>() + "\n";
    return s;
  }
  std::string Log(int64_t id) {
    auto r = admin_->GetText(fmt::format("/v1/jobs/{}/logs", id));
    return r.ok() ? *r : "";
  }
  bool WaitState(int64_t id, const std::string& state, std::chrono::milliseconds t) {
    return WaitFor([&] { return Job(id).value("state", "") == state; }, t);
  }
  // The Slurm job ids the daemon submitted for job `id`, in order.
  std::vector<int64_t> SlurmIds(int64_t id) {
    std::vector<int64_t> out;
    const std::string key = "to Slurm as heterogeneous job ";
    std::string ev = Events(id);
    for (size_t p = ev.find(key); p != std::string::npos; p = ev.find(key, p + 1))
      out.push_back(std::stoll(ev.substr(p + key.size())));
    return out;
  }

  std::string cluster_, dir_, out_;
  std::unique_ptr<DaemonProcess> d_;
  std::unique_ptr<Client> admin_;
};

TEST_F(SlurmE2E, TwoIslandJobRunsAsOneHetJobAndIsBilledWithSlurmsTimes) {
  ImportFleet();
  int64_t id = Submit(TrainerJob("two", 0, 3, "[ascend, nvidia]", 150));
  ASSERT_TRUE(WaitState(id, "succeeded", 60s)) << Job(id).dump(2) << Log(id);
  json j = Job(id);
  ASSERT_EQ(j["attempts_detail"].size(), 1u);
  std::string ev = Events(id);
  EXPECT_NE(ev.find("2xascend-910b (npu on localhost) + 1xnvidia-h800 (gpu on vm)"), std::string::npos) << ev;
  EXPECT_NE(ev.find("RUNNING on"), std::string::npos) << ev;
  auto sids = SlurmIds(id);
  ASSERT_EQ(sids.size(), 1u) << ev;
  // Every step ran once, the three ranks of two islands together (the trainer's allreduce needs them all).
  auto steps = Steps(out_ + "/two.txt");
  ASSERT_EQ(steps.size(), 150u);
  EXPECT_NE(Log(id).find("final params fnv1a="), std::string::npos);
  // Slurm's record: one het job of two components, npu on localhost and gpu on vm, both COMPLETED.
  auto recs = slurm::ParseJobs(ReadText(cluster_ + "/log/jobcomp.txt"));
  ASSERT_TRUE(recs.ok()) << recs.status().ToString();
  auto mine = slurm::RecordsOf(*recs, sids[0]);
  ASSERT_EQ(mine.size(), 2u);
  EXPECT_EQ(mine[0].nodes, "localhost");
  EXPECT_EQ(mine[1].nodes, "vm");
  auto st = slurm::Combine(mine);
  EXPECT_EQ(st.phase, slurm::Phase::kCompleted);
  // The bill: one row per type with Slurm's start and end (seconds), as recorded in its jobcomp file.
  ASSERT_TRUE(WaitFor([&] { return Job(id)["attempts_detail"][0]["billed"].get<bool>(); }, 10s));
  auto ledger = sched::Ledger::Open(d_->state() + "/ledger.db");
  ASSERT_TRUE(ledger.ok()) << ledger.status().ToString();
  sched::BillFilter f;
  f.job = fmt::format("two#{}", id);
  auto rows = (*ledger)->Query(f);
  ASSERT_TRUE(rows.ok());
  ASSERT_EQ(rows->size(), 2u);
  std::map<std::string, int64_t> cards;
  for (const auto& r : *rows) {
    cards[r.type] = r.cards;
    EXPECT_EQ(r.start, st.start_unix) << r.type;
    EXPECT_EQ(r.end, std::max(st.end_unix, st.start_unix + 1)) << r.type;
  }
  EXPECT_EQ(cards["ascend-910b"], 2);
  EXPECT_EQ(cards["nvidia-h800"], 1);
  EXPECT_NE(ev.find("by sacct -c (the jobcomp file)"), std::string::npos) << ev;
  // tessera bill shows those seconds.
  std::string bill;
  ASSERT_EQ(Shell(fmt::format("'{}' bill --db '{}/ledger.db' --by job --csv", Bin(), d_->state()), &bill), 0);
  int64_t secs = std::max<int64_t>(st.end_unix - st.start_unix, 1);
  EXPECT_NE(bill.find(fmt::format("two#{},{},", id, 3 * secs)), std::string::npos) << "3 cards x " << secs << " s\n"
                                                                                   << bill;
}

TEST_F(SlurmE2E, PreemptedByAHigherPriorityJobResumesFromItsCheckpoint) {
  ImportFleet();
  int64_t low = Submit(TrainerJob("low", 0, 3, "[ascend, nvidia]", 400));
  ASSERT_TRUE(WaitFor([&] { return Steps(out_ + "/low.txt").size() >= 60; }, 60s)) << Job(low).dump(2) << Log(low);
  int64_t high = Submit(TrainerJob("high", 5, 2, "[ascend]", 40));
  ASSERT_TRUE(WaitState(high, "succeeded", 60s)) << Job(high).dump(2) << Events(low);
  ASSERT_TRUE(WaitState(low, "succeeded", 90s)) << Job(low).dump(2) << Log(low);
  json j = Job(low);
  ASSERT_EQ(j["attempts_detail"].size(), 2u) << j.dump(2);
  EXPECT_NE(j["attempts_detail"][0]["end_reason"].get<std::string>().find("preempt"), std::string::npos);
  std::string resumed = j["attempts_detail"][1]["resume_from"];
  ASSERT_FALSE(resumed.empty()) << j.dump(2);
  std::string ev = Events(low);
  EXPECT_NE(ev.find("scancel --signal=TERM"), std::string::npos) << ev;
  EXPECT_EQ(SlurmIds(low).size(), 2u) << ev;
  // The SIGTERM checkpoint was the last step of attempt 1: steps 1..400 exactly once.
  auto steps = Steps(out_ + "/low.txt");
  ASSERT_EQ(steps.size(), 400u);
  for (size_t i = 0; i < steps.size(); ++i) ASSERT_EQ(steps[i], static_cast<int64_t>(i + 1));
  int64_t step = std::stoll(resumed.substr(resumed.rfind("step-") + 5));
  EXPECT_GE(step, 60);
  EXPECT_LT(step, 400);
}

TEST_F(SlurmE2E, NodeFailureRequeuesAndResumesFromTheCheckpoint) {
  ImportFleet();
  int64_t id = Submit(TrainerJob("nf", 0, 3, "[ascend, nvidia]", 400));
  ASSERT_TRUE(WaitFor([&] { return Steps(out_ + "/nf.txt").size() >= 60; }, 60s)) << Job(id).dump(2) << Log(id);
  std::string out;
  ASSERT_EQ(Shell("scontrol update nodename=localhost state=down reason=tessera-test 2>&1", &out), 0) << out;
  ASSERT_TRUE(WaitState(id, "succeeded", 90s)) << Job(id).dump(2) << Log(id);
  json j = Job(id);
  ASSERT_EQ(j["attempts_detail"].size(), 2u) << j.dump(2);
  std::string why = j["attempts_detail"][0]["end_reason"];
  EXPECT_NE(why.find("NODE_FAIL"), std::string::npos) << why;
  std::string resumed = j["attempts_detail"][1]["resume_from"];
  ASSERT_FALSE(resumed.empty()) << j.dump(2);
  int64_t step = std::stoll(resumed.substr(resumed.rfind("step-") + 5));
  EXPECT_GE(step, 50);
  // Every step ran; the second attempt started after the checkpoint it resumed from.
  auto steps = Steps(out_ + "/nf.txt");
  std::set<int64_t> seen(steps.begin(), steps.end());
  EXPECT_EQ(seen.size(), 400u);
  EXPECT_EQ(*seen.rbegin(), 400);
  auto again = std::find(steps.begin() + 1, steps.end(), step + 1);
  EXPECT_NE(again, steps.end());
}

TEST_F(SlurmE2E, CancelThroughTheDaemonAndInSlurm) {
  ImportFleet();
  int64_t a = Submit(TrainerJob("ca", 0, 2, "[ascend]", 2000));
  ASSERT_TRUE(WaitFor([&] { return Steps(out_ + "/ca.txt").size() >= 5; }, 60s)) << Log(a);
  ASSERT_TRUE(admin_->Post(fmt::format("/v1/jobs/{}/cancel", a), json::object()).ok());
  ASSERT_TRUE(WaitState(a, "cancelled", 30s)) << Job(a).dump(2);
  EXPECT_NE(Events(a).find("scancel --signal=TERM"), std::string::npos) << Events(a);
  // Cancelled by someone else, in Slurm: the job ends cancelled and says so.
  int64_t b = Submit(TrainerJob("cb", 0, 1, "[nvidia]", 2000));
  ASSERT_TRUE(WaitFor([&] { return Steps(out_ + "/cb.txt").size() >= 5; }, 60s)) << Log(b);
  auto ids = SlurmIds(b);
  ASSERT_EQ(ids.size(), 1u);
  ASSERT_EQ(Shell(fmt::format("scancel {}", ids[0])), 0);
  ASSERT_TRUE(WaitState(b, "cancelled", 30s)) << Job(b).dump(2);
  EXPECT_NE(Job(b)["attempts_detail"][0]["end_reason"].get<std::string>().find("cancelled in Slurm"), std::string::npos)
      << Job(b).dump(2);
}

TEST_F(SlurmE2E, PendingInSlurmShowsTheReasonAndIsCancelledUnbilled) {
  ImportFleet();
  // A job outside the daemon holds the gpu node: the daemon's job waits in Slurm with Slurm's reason.
  std::string out;
  ASSERT_EQ(Shell("sbatch --parsable -w vm --gres=gpu:2 -n1 --wrap 'sleep 10'", &out), 0) << out;
  std::string blocker = out.substr(0, out.find_first_of(";\n"));
  int64_t id = Submit(TrainerJob("pend", 0, 1, "[nvidia]", 10));
  ASSERT_TRUE(
      WaitFor([&] { return Job(id).value("reason", "").find("PENDING (Resources)") != std::string::npos; }, 30s))
      << Job(id).dump(2);
  std::string queue;
  ASSERT_EQ(Shell(fmt::format("TESSERA_HOME='{}' '{}' queue", d_->state(), Bin()), &queue), 0);
  EXPECT_NE(queue.find("PENDING (Resources)"), std::string::npos) << queue;
  ASSERT_TRUE(admin_->Post(fmt::format("/v1/jobs/{}/cancel", id), json::object()).ok());
  ASSERT_TRUE(WaitState(id, "cancelled", 30s)) << Job(id).dump(2);
  std::string ev = Events(id);
  EXPECT_NE(ev.find("was still pending: cancelled it"), std::string::npos) << ev;
  EXPECT_NE(ev.find("not billed"), std::string::npos) << ev;
  Shell("scancel " + blocker);
  auto ledger = sched::Ledger::Open(d_->state() + "/ledger.db");
  ASSERT_TRUE(ledger.ok());
  sched::BillFilter f;
  f.job = fmt::format("pend#{}", id);
  EXPECT_TRUE((*ledger)->Query(f)->empty());
}

TEST_F(SlurmE2E, RestartedDaemonFollowsItsSlurmJobs) {
  ImportFleet();
  int64_t id = Submit(TrainerJob("rs", 0, 3, "[ascend, nvidia]", 300));
  ASSERT_TRUE(WaitFor([&] { return Steps(out_ + "/rs.txt").size() >= 20; }, 60s)) << Log(id);
  d_->Kill9();
  d_->Start();
  admin_ = d_->Admin();
  ASSERT_TRUE(WaitState(id, "succeeded", 60s)) << Job(id).dump(2);
  json j = Job(id);
  EXPECT_EQ(j["attempts_detail"].size(), 1u) << j.dump(2);
  EXPECT_EQ(Steps(out_ + "/rs.txt").size(), 300u);
  EXPECT_NE(Events(id).find("reconciling attempt 1 (its Slurm job)"), std::string::npos) << Events(id);
  EXPECT_NE(Log(id).find("final params fnv1a="), std::string::npos);
}

TEST_F(SlurmE2E, FailingSbatchIsNamedWithSlurmsMessage) {
  // A zone that is no partition: sbatch refuses the job; the daemon fails it with the command and the message.
  json body = {{"fleet", Doc("fleet.yaml",
                             "emulated: true\nnodes:\n  - {id: localhost, zone: nosuchpart, type: "
                             "ascend-910b, cards: 2}\n")},
               {"catalog", Doc("catalog.yaml", kCatalog)}};
  ASSERT_TRUE(admin_->Put("/v1/fleet", body).ok());
  int64_t id = Submit(TrainerJob("bad", 0, 2, "[ascend]", 10));
  ASSERT_TRUE(WaitState(id, "failed", 30s)) << Job(id).dump(2);
  std::string reason = Job(id)["reason"];
  EXPECT_NE(reason.find("`sbatch` failed (exit 1)"), std::string::npos) << reason;
  EXPECT_NE(reason.find("Invalid partition"), std::string::npos) << reason;
}

}  // namespace
}  // namespace tessera::daemon::testing
