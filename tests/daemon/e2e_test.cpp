// tests/daemon/e2e_test: the job daemon end to end on loopback, with real processes: queue and automatic
// wake-up in priority order with backfill, wake-up when the fleet grows, preemption for priority and for a
// policy change, cancel escalating to SIGKILL, kill -9 of the daemon and reconciliation on restart
// (no job and no billing record lost), bad job files, tenant isolation, and jobs on cards emulated on SM
// shares of a GPU (cuda islands with --sm-share; without a GPU the launcher's refusal reaches the job), queued
// jobs' estimated starts, and a job's checkpoint directory on a mount that never answers. Jobs are
// tests/daemon/sleep_job.sh under the real `tessera run`. All waits are bounded; no test asserts a speed: the only
// durations checked are answers that must come far within a bound where the alternative is a hang.
#include <fcntl.h>
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <map>

#include "daemon/harness.hpp"
#include "sched/sched.hpp"
#include "tessera/ckpt.hpp"

namespace tessera::daemon::testing {
namespace {

using json = nlohmann::json;
using namespace std::chrono_literals;

const char* kCatalog = R"(currency: CNY
price_version: test-1
types:
  - {name: ascend-910b, vendor: ascend, domestic: true, price_per_card_hour: 2.4, memory_gib: 64,
     throughput: {mlp-train: 0.3}}
  - {name: nvidia-h800, vendor: nvidia, domestic: false, price_per_card_hour: 6.8, memory_gib: 80,
     throughput: {mlp-train: 1.0}}
)";

std::string Fleet(int ascend, int nvidia) {
  std::string y = "emulated: true\nnodes:\n";
  if (ascend) y += fmt::format("  - {{id: n-910b, zone: z, type: ascend-910b, cards: {}}}\n", ascend);
  if (nvidia) y += fmt::format("  - {{id: n-h800, zone: z, type: nvidia-h800, cards: {}}}\n", nvidia);
  return y;
}

class DaemonE2E : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = MakeTempDir("e2e");
    // Jobs run under an unprivileged identity (nobody, as root): what they write must be reachable by it.
    ASSERT_EQ(::chmod(dir_.c_str(), 0755), 0);
    out_ = dir_ + "/out";
    ASSERT_EQ(::mkdir(out_.c_str(), 0777), 0);
    ASSERT_EQ(::chmod(out_.c_str(), 0777), 0);
    std::string tenants = WriteTenantsFile(dir_ + "/tenants.yaml", {{"alice", "tok-alice"}, {"bob", "tok-bob"}});
    d_ = std::make_unique<DaemonProcess>(dir_ + "/state", std::vector<std::string>{"--tenants", tenants});
    d_->Start();
    admin_ = d_->Admin();
    ASSERT_TRUE(admin_);
  }
  void TearDown() override {
    d_.reset();
    if (!HasFailure()) Shell("rm -rf '" + dir_ + "' '" + dir_ + "/state.daemon.log' '" + dir_ + "/state-work'");
  }

  void Register(int ascend, int nvidia, const std::string& floor = "0") {
    json body = {{"fleet", Doc("fleet.yaml", Fleet(ascend, nvidia))},
                 {"catalog", Doc("catalog.yaml", kCatalog)},
                 {"policy", Doc("policy.yaml", "floor: " + floor + "\n")}};
    auto r = admin_->Put("/v1/fleet", body);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
  }
  int64_t Submit(Client& c, const std::string& yaml, const std::string& source = "job.yaml") {
    auto r = c.Post("/v1/jobs", {{"source", source}, {"yaml", yaml}, {"base_dir", dir_}});
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return r.ok() ? (*r)["id"].get<int64_t>() : -1;
  }
  json Job(int64_t id) {
    auto r = admin_->Get(fmt::format("/v1/jobs/{}", id));
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return r.ok() ? *r : json::object();
  }
  std::string State(int64_t id) { return Job(id).value("state", "?"); }
  bool WaitState(int64_t id, const std::string& state, std::chrono::milliseconds t = 30s) {
    return WaitFor([&] { return State(id) == state; }, t);
  }
  std::string Events(int64_t id) {
    std::string s;
    json j = Job(id);
    for (const auto& e : j["events"]) s += e["text"].get<std::string>() + "\n";
    return s;
  }

  std::string dir_, out_;
  std::unique_ptr<DaemonProcess> d_;
  std::unique_ptr<Client> admin_;
};

TEST_F(DaemonE2E, QueueWakesInPriorityOrderWithBackfill) {
  Register(3, 0);
  int64_t a = Submit(*admin_, SleepJobYaml("a", 10, 2, 3, out_ + "/a-", "[ascend]"));
  ASSERT_TRUE(WaitState(a, "running"));
  // c (priority 5) needs all 3 cards: it waits; it cannot preempt a (priority 10).
  int64_t c = Submit(*admin_, SleepJobYaml("c", 5, 3, 1, out_ + "/", "[ascend]"));
  // d (priority 0) fits in the 1 free card: backfilled while c waits.
  int64_t d = Submit(*admin_, SleepJobYaml("d", 0, 1, 1, out_ + "/", "[ascend]"));
  // e (priority 0) needs 3 cards like c: it must start after c.
  int64_t e = Submit(*admin_, SleepJobYaml("e", 0, 3, 1, out_ + "/", "[ascend]"));
  ASSERT_TRUE(WaitFor([&] { return Job(d)["attempts"] == 1 && !Job(e)["position"].is_null(); }, 30s)) << Events(d);
  json jc = Job(c);
  EXPECT_EQ(jc["state"], "queued");
  EXPECT_EQ(jc["position"], 1);
  EXPECT_NE(jc["reason"].get<std::string>().find("free"), std::string::npos) << jc["reason"];
  json je = Job(e);
  EXPECT_EQ(je["state"], "queued");
  EXPECT_EQ(je["position"], 2);
  // Nobody acts: when a and d end, c wakes up by itself, then e.
  ASSERT_TRUE(WaitState(e, "succeeded", 60s)) << Events(c) << Events(e);
  for (int64_t id : {a, c, d, e}) EXPECT_EQ(State(id), "succeeded") << "job " << id;
  auto start = [&](int64_t id) { return Job(id)["attempts_detail"][0]["started_ms"].get<int64_t>(); };
  auto end = [&](int64_t id) { return Job(id)["attempts_detail"][0]["ended_ms"].get<int64_t>(); };
  EXPECT_LT(start(d), end(a));                    // backfilled while a ran
  EXPECT_GE(start(c), std::max(end(a), end(d)));  // c needed all cards
  EXPECT_GE(start(e), end(c));                    // priority order
  json att = Job(c)["attempts_detail"][0];
  ASSERT_FALSE(att["wake_latency_ms"].is_null()) << "c waited, so its wake-up latency is recorded";
  EXPECT_GE(att["wake_latency_ms"].get<int64_t>(), 0);
}

TEST_F(DaemonE2E, FleetGrowthWakesQueuedJob) {
  Register(2, 0);
  // The cards are taken (a job no zone could ever hold is refused at submit; this one only waits).
  int64_t blocker = Submit(*admin_, SleepJobYaml("blocker", 0, 2, 60, out_ + "/b-", "[ascend]"));
  ASSERT_TRUE(WaitState(blocker, "running"));
  int64_t j = Submit(*admin_, SleepJobYaml("grow", 0, 2, 1, out_ + "/", "[ascend]"));
  ASSERT_TRUE(WaitFor([&] { return !Job(j)["reason"].get<std::string>().empty(); }, 10s));
  EXPECT_EQ(State(j), "queued");
  Register(4, 0);  // the fleet grows: the job starts without any user action
  ASSERT_TRUE(WaitState(j, "succeeded", 30s)) << Events(j);
  EXPECT_FALSE(Job(j)["attempts_detail"][0]["wake_latency_ms"].is_null());
  EXPECT_EQ(State(blocker), "running");
  ASSERT_TRUE(admin_->Post(fmt::format("/v1/jobs/{}/cancel", blocker), json::object()).ok());
  ASSERT_TRUE(WaitState(blocker, "cancelled"));
}

TEST_F(DaemonE2E, PreemptionForPriorityRequeuesAndRestarts) {
  Register(2, 0);
  int64_t low = Submit(*admin_, SleepJobYaml("low", 0, 2, 60, out_ + "/", "[ascend]"));
  ASSERT_TRUE(WaitFor([&] { return Exists(out_ + "/pid.1"); }, 30s)) << Events(low);
  int64_t high = Submit(*admin_, SleepJobYaml("high", 5, 2, 1, out_ + "/h", "[ascend]"));
  // low gets SIGTERM (its rank writes term.1.<rank>), goes back to the queue, high runs.
  ASSERT_TRUE(WaitFor([&] { return Exists(out_ + "/term.1.0"); }, 30s)) << Events(low);
  ASSERT_TRUE(WaitState(high, "succeeded", 30s)) << Events(high);
  json l = Job(low);
  ASSERT_GE(l["attempts_detail"].size(), 1u);
  EXPECT_NE(l["attempts_detail"][0]["end_reason"].get<std::string>().find("preempt"), std::string::npos)
      << l["attempts_detail"][0]["end_reason"];
  // ... and wakes up again by itself, as attempt 2.
  ASSERT_TRUE(WaitFor([&] { return Exists(out_ + "/env.2"); }, 30s)) << Events(low);
  EXPECT_NE(ReadText(out_ + "/env.2").find("TESSERA_ATTEMPT=2"), std::string::npos);
  EXPECT_GE(Job(high)["attempts_detail"][0]["started_ms"].get<int64_t>(),
            Job(low)["attempts_detail"][0]["ended_ms"].get<int64_t>());
  ASSERT_TRUE(admin_->Post(fmt::format("/v1/jobs/{}/cancel", low), json::object()).ok());
  ASSERT_TRUE(WaitState(low, "cancelled"));
}

TEST_F(DaemonE2E, CancelEscalatesToSigkillAfterGrace) {
  Register(1, 0);
  std::string y = SleepJobYaml("stubborn", 0, 1, 60, out_ + "/", "[ascend]");
  y.replace(y.find("\"]"), 2, "\", ignore-term]");
  y.replace(y.find("grace: 5s"), 9, "grace: 1s");
  int64_t j = Submit(*admin_, y);
  ASSERT_TRUE(WaitFor([&] { return Exists(out_ + "/pid.1"); }, 30s)) << Events(j);
  pid_t pid = std::stoi(ReadText(out_ + "/pid.1"));
  ASSERT_TRUE(admin_->Post(fmt::format("/v1/jobs/{}/cancel", j), json::object()).ok());
  ASSERT_TRUE(WaitState(j, "cancelled", 30s)) << Events(j);
  EXPECT_NE(Events(j).find("SIGKILL"), std::string::npos) << Events(j);
  EXPECT_TRUE(WaitFor([&] { return ::kill(pid, 0) != 0; }, 10s));
}

TEST_F(DaemonE2E, PolicyChangePreemptsAndReplacesCompliantly) {
  // H800 is cheaper per unit of work here (6.8/1.0 < 2.4/0.3), so with no floor the job takes H800 cards.
  Register(2, 2, "0");
  int64_t j = Submit(*admin_, SleepJobYaml("pol", 0, 2, 60, out_ + "/", "[ascend, nvidia]"));
  ASSERT_TRUE(WaitFor([&] { return Exists(out_ + "/pid.1"); }, 30s)) << Events(j);
  EXPECT_EQ(Job(j)["attempts_detail"][0]["islands"][0]["type"], "nvidia-h800");
  // The floor rises to 100% domestic: the running job breaks it, is preempted and placed again on 910B.
  auto r = admin_->Put("/v1/policy", Doc("policy-2.yaml", "floor: 100%\n"));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_TRUE(WaitFor([&] { return Exists(out_ + "/env.2"); }, 30s)) << Events(j);
  json a2 = Job(j)["attempts_detail"][1];
  ASSERT_EQ(a2["islands"].size(), 1u);
  EXPECT_EQ(a2["islands"][0]["type"], "ascend-910b");
  EXPECT_NE(Job(j)["attempts_detail"][0]["end_reason"].get<std::string>().find("preempt"), std::string::npos);
  EXPECT_NE(Events(j).find("floor"), std::string::npos) << Events(j);
  ASSERT_TRUE(admin_->Post(fmt::format("/v1/jobs/{}/cancel", j), json::object()).ok());
  ASSERT_TRUE(WaitState(j, "cancelled"));
}

TEST_F(DaemonE2E, AJobsEndDoesNotPreemptForTheFloor) {
  // Floor 50%: b (H800 only) may start next to a (910B only). When a ends the share drops below the floor,
  // but only a policy change preempts: b keeps running to its end.
  Register(2, 2, "50%");
  int64_t a = Submit(*admin_, SleepJobYaml("a", 0, 2, 1, out_ + "/a-", "[ascend]"));
  ASSERT_TRUE(WaitState(a, "running"));
  int64_t b = Submit(*admin_, SleepJobYaml("b", 0, 2, 4, out_ + "/b-", "[nvidia]"));
  ASSERT_TRUE(WaitFor([&] { return Exists(out_ + "/b-pid.1"); }, 30s)) << Events(b);
  ASSERT_TRUE(WaitState(a, "succeeded", 30s));
  ASSERT_TRUE(WaitState(b, "succeeded", 30s)) << Events(b);
  EXPECT_EQ(Job(b)["attempts"], 1) << Events(b);
  EXPECT_EQ(Events(b).find("preempt"), std::string::npos) << Events(b);
}

TEST_F(DaemonE2E, CrashAndRestartLosesNoJobAndNoBillingRecord) {
  Register(2, 0);
  int64_t j1 = Submit(*admin_, SleepJobYaml("crash1", 0, 2, 3, out_ + "/1-", "[ascend]"));
  ASSERT_TRUE(WaitFor([&] { return Exists(out_ + "/1-pid.1"); }, 30s)) << Events(j1);
  int64_t j2 = Submit(*admin_, SleepJobYaml("crash2", 0, 2, 3, out_ + "/2-", "[ascend]"));
  d_->Kill9();
  // The job survives the daemon and finishes while it is down.
  pid_t pid = std::stoi(ReadText(out_ + "/1-pid.1"));
  EXPECT_EQ(::kill(pid, 0), 0) << "the job died with the daemon";
  ASSERT_TRUE(WaitFor([&] { return Exists(out_ + "/1-done.1"); }, 30s));
  std::this_thread::sleep_for(500ms);
  int64_t restart_ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
          .count();
  d_->Start();
  admin_ = d_->Admin();
  // Restarted: job 1 is finished with its real end time (before the restart), job 2 was not lost and runs.
  ASSERT_TRUE(WaitState(j1, "succeeded", 10s)) << Events(j1);
  EXPECT_LT(Job(j1)["attempts_detail"][0]["ended_ms"].get<int64_t>(), restart_ms);
  ASSERT_TRUE(WaitFor([&] { return Exists(out_ + "/2-pid.1"); }, 30s)) << Events(j2);
  // Kill the daemon again while job 2 runs; the restarted daemon adopts it and sees it finish.
  d_->Kill9();
  d_->Start();
  admin_ = d_->Admin();
  EXPECT_EQ(State(j2), "running");
  ASSERT_TRUE(WaitState(j2, "succeeded", 30s)) << Events(j2);
  ASSERT_TRUE(WaitFor([&] { return Job(j2)["attempts_detail"][0]["billed"].get<bool>(); }, 10s));
  // Billing: exactly one usage row per attempt and type, with the real run time.
  auto ledger = sched::Ledger::Open(d_->state() + "/ledger.db");
  ASSERT_TRUE(ledger.ok()) << ledger.status().ToString();
  for (auto [id, name] : {std::pair{j1, "crash1"}, std::pair{j2, "crash2"}}) {
    sched::BillFilter f;
    f.job = fmt::format("{}#{}", name, id);
    auto rows = (*ledger)->Query(f);
    ASSERT_TRUE(rows.ok()) << rows.status().ToString();
    ASSERT_EQ(rows->size(), 1u) << "job " << id;
    EXPECT_EQ((*rows)[0].type, "ascend-910b");
    EXPECT_EQ((*rows)[0].cards, 2);
    EXPECT_GE((*rows)[0].end - (*rows)[0].start, 2);  // the script runs 3 s
    EXPECT_GT((*rows)[0].amount, 0);
  }
}

TEST_F(DaemonE2E, KillDuringSubmitLosesNoAcceptedJob) {
  Register(2, 0);
  int64_t blocker = Submit(*admin_, SleepJobYaml("blocker", 0, 2, 60, out_ + "/b-", "[ascend]"));
  ASSERT_TRUE(WaitState(blocker, "running"));
  std::vector<int64_t> ids;
  for (int i = 0; i < 5; ++i)
    ids.push_back(Submit(*admin_, SleepJobYaml(fmt::format("s{}", i), 0, 2, 1, out_ + "/", "[ascend]")));
  d_->Kill9();  // every job above got its 201 answer: each must survive
  d_->Start();
  admin_ = d_->Admin();
  auto list = admin_->Get("/v1/jobs?all=1");
  ASSERT_TRUE(list.ok());
  EXPECT_EQ((*list)["jobs"].size(), ids.size() + 1);
  for (int64_t id : ids) EXPECT_EQ(State(id), "queued");  // the blocker holds both cards
  ASSERT_TRUE(admin_->Post(fmt::format("/v1/jobs/{}/cancel", blocker), json::object()).ok());
  ASSERT_TRUE(WaitState(blocker, "cancelled"));
}

TEST_F(DaemonE2E, BadJobSpecsGetClearErrors) {
  Register(2, 2);
  auto err = [&](const std::string& yaml) {
    auto r = admin_->Post("/v1/jobs", {{"source", "bad.yaml"}, {"yaml", yaml}, {"base_dir", dir_}});
    EXPECT_FALSE(r.ok()) << yaml;
    return r.ok() ? std::string() : r.status().message();
  };
  const std::string ok = "name: x\nclass: mlp-train\ncards: 1\ncompatible: [ascend]\ncommand: [/bin/true]\n";
  std::string m = err("name: x\nclass: mlp-train\ncards: 1\ncompatible: [ascend]\n");
  EXPECT_NE(m.find("bad.yaml"), std::string::npos) << m;
  EXPECT_NE(m.find("command"), std::string::npos) << m;
  m = err(ok + "gpus: 3\n");
  EXPECT_NE(m.find("bad.yaml:6"), std::string::npos) << m;
  EXPECT_NE(m.find("gpus"), std::string::npos) << m;
  m = err("name: x\nclass: mlp-train\ncards: -1\ncompatible: [ascend]\ncommand: [/bin/true]\n");
  EXPECT_NE(m.find("cards"), std::string::npos) << m;
  m = err("name: x\nclass: mlp-train\ncards: 1\ncompatible: [moore]\ncommand: [/bin/true]\n");
  EXPECT_NE(m.find("can never run"), std::string::npos) << m;
  m = err(ok + "checkpoint: {every: often}\n");
  EXPECT_NE(m.find("checkpoint.every"), std::string::npos) << m;
  EXPECT_NE(m.find("often"), std::string::npos) << m;
  m = err(ok + "grace: soon\n");
  EXPECT_NE(m.find("grace"), std::string::npos) << m;
  m = err("name: [x\n");
  EXPECT_NE(m.find("YAML"), std::string::npos) << m;
  m = err(ok + "env: [A, B]\n");
  EXPECT_NE(m.find("env"), std::string::npos) << m;
  auto alice = d_->ClientFor("tok-alice");
  auto r = alice->Post("/v1/jobs", {{"source", "bad.yaml"}, {"yaml", ok + "tenant: bob\n"}, {"base_dir", dir_}});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("does not match"), std::string::npos) << r.status().message();
  // Nothing above was queued.
  auto list = admin_->Get("/v1/jobs?all=1");
  ASSERT_TRUE(list.ok());
  EXPECT_TRUE((*list)["jobs"].empty());
}

// A job on cards emulated on SM shares of one GPU (examples/fleet-gpu-sm-share.yaml) gets cuda islands with
// --sm-share, and every output labels the cards. Without a GPU and NVIDIA MPS the launcher refuses to start
// (exit 2), and that refusal reaches the job's log and its failed state; with them the job runs.
TEST_F(DaemonE2E, SmShareNodesRunAsCudaIslandsOnShares) {
  std::string fleet = ReadText(SourceDir() + "/examples/fleet-gpu-sm-share.yaml");
  json body = {{"fleet", Doc("fleet-gpu-sm-share.yaml", fleet)},
               {"catalog", Doc("catalog.yaml", kCatalog)},
               {"policy", Doc("policy.yaml", "floor: 0\n")}};
  auto reg = admin_->Put("/v1/fleet", body);
  ASSERT_TRUE(reg.ok()) << reg.status().ToString();
  EXPECT_EQ((*reg)["emulated_cards"], 2);
  auto f = admin_->Get("/v1/fleet");
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  ASSERT_EQ((*f)["nodes"].size(), 2u);
  EXPECT_EQ((*f)["nodes"][0]["emulated"], true);
  EXPECT_EQ((*f)["nodes"][0]["sm_share"], 35);
  EXPECT_EQ((*f)["nodes"][1]["sm_share"], 65);

  int64_t j = Submit(*admin_, SleepJobYaml("shares", 0, 2, 1, out_ + "/", "[ascend, nvidia]"));
  ASSERT_TRUE(WaitFor([&] { return State(j) == "failed" || State(j) == "succeeded"; }, 60s)) << Events(j);
  json job = Job(j);
  ASSERT_GE(job["attempts_detail"].size(), 1u) << job.dump();
  const auto& islands = job["attempts_detail"][0]["islands"];
  ASSERT_EQ(islands.size(), 2u) << job.dump();
  EXPECT_EQ(islands[0]["device"], "cuda");
  EXPECT_EQ(islands[0]["sm_share"], 35);
  EXPECT_EQ(islands[1]["device"], "cuda");
  EXPECT_EQ(islands[1]["sm_share"], 65);
  EXPECT_NE(Events(j).find("1xascend-910b (emulated, SM share 35% of a GPU) + 1xnvidia-h800 (emulated, SM share "
                           "65% of a GPU)"),
            std::string::npos)
      << Events(j);
  auto log = admin_->GetText(fmt::format("/v1/jobs/{}/logs", j));
  ASSERT_TRUE(log.ok()) << log.status().ToString();
  EXPECT_NE(log->find("1xascend-910b (emulated: SM share 35% of a GPU, not real ascend-910b hardware)"),
            std::string::npos)
      << *log;
  if (State(j) == "failed") {
    // No GPU or no MPS here: the launcher's reason is in the log, and the job failed with its exit status.
    EXPECT_TRUE(log->find("tessera run: ") != std::string::npos &&
                (log->find("CUDA") != std::string::npos || log->find("MPS") != std::string::npos))
        << *log;
    EXPECT_EQ(job["attempts_detail"][0]["end_reason"], "exit code 2") << job.dump();
    EXPECT_NE(job["reason"].get<std::string>().find("exit code 2 (see `tessera logs"), std::string::npos) << job.dump();
  }
}

// The launcher command line of a job on SM-share cards, recorded by a stand-in launcher (--launcher).
TEST_F(DaemonE2E, SmShareJobGetsTheShareArgumentsOfTesseraRun) {
  std::string rec = dir_ + "/record-launcher.sh";
  WriteText(rec, "#!/bin/sh\nprintf '%s\\n' \"$@\" > \"" + out_ + "/argv\"\n");
  ASSERT_EQ(::chmod(rec.c_str(), 0755), 0);
  d_.reset();
  d_ = std::make_unique<DaemonProcess>(
      dir_ + "/state2", std::vector<std::string>{"--tenants", dir_ + "/tenants.yaml", "--launcher", rec});
  d_->Start();
  admin_ = d_->Admin();
  ASSERT_TRUE(admin_);
  json body = {{"fleet", Doc("fleet.yaml", ReadText(SourceDir() + "/examples/fleet-gpu-sm-share.yaml"))},
               {"catalog", Doc("catalog.yaml", kCatalog)},
               {"policy", Doc("policy.yaml", "floor: 0\n")}};
  ASSERT_TRUE(admin_->Put("/v1/fleet", body).ok());
  int64_t j = Submit(*admin_, SleepJobYaml("argv", 0, 2, 1, out_ + "/", "[ascend, nvidia]"));
  ASSERT_TRUE(WaitState(j, "succeeded")) << Events(j);
  std::string argv = ReadText(out_ + "/argv");
  std::string line;
  for (char c : argv) line += c == '\n' ? ' ' : c;
  EXPECT_EQ(line, "--island ascend=cuda:1 --island nvidia=cuda:1 --sm-share ascend=35 --sm-share nvidia=65 -- " +
                      SourceDir() + "/tests/daemon/sleep_job.sh 1 ")
      << argv;
}

// An attempt whose program never started (here the launcher cannot be executed) fails without a bill.
TEST_F(DaemonE2E, AttemptThatNeverStartedItsProgramIsNotBilled) {
  std::string rec = dir_ + "/not-executable.sh";
  WriteText(rec, "#!/bin/sh\nexit 0\n");
  ASSERT_EQ(::chmod(rec.c_str(), 0644), 0);
  d_.reset();
  d_ = std::make_unique<DaemonProcess>(
      dir_ + "/state2", std::vector<std::string>{"--tenants", dir_ + "/tenants.yaml", "--launcher", rec});
  d_->Start();
  admin_ = d_->Admin();
  ASSERT_TRUE(admin_);
  Register(2, 0);
  int64_t j = Submit(*admin_, SleepJobYaml("nostart", 0, 1, 1, out_ + "/", "[ascend]"));
  ASSERT_TRUE(WaitState(j, "failed")) << Events(j);
  ASSERT_TRUE(WaitFor([&] { return Job(j)["attempts_detail"][0].value("billed", false); }, 10s)) << Events(j);
  std::string ev = Events(j);
  EXPECT_NE(ev.find("attempt 1 never started its program: not billed"), std::string::npos) << ev;
  EXPECT_EQ(ev.find("billed 1 x"), std::string::npos) << ev;
}

// queue and status as squeue / sacct show them: run time, progress in one format in every state, cost so far,
// an estimated end while running, how a finished job ended; an empty queue says so.
TEST_F(DaemonE2E, QueueShowsRunTimeProgressAndCostAndSaysWhenEmpty) {
  std::string cli = "TESSERA_HOME='" + d_->state() + "' " + Bin() + " ", out;
  ASSERT_EQ(Shell(cli + "queue", &out), 0) << out;
  EXPECT_NE(out.find("no jobs yet"), std::string::npos) << out;
  Register(2, 0);
  int64_t j = Submit(*admin_, SleepJobYaml("timed", 0, 1, 2, out_ + "/", "[ascend]"));
  ASSERT_TRUE(WaitFor(
      [&] {
        json p = Job(j)["progress"];
        return p.is_object() && p.value("step", 0) >= 5;
      },
      30s))
      << Events(j);
  json running = Job(j);
  EXPECT_EQ(running["progress"]["of"], 20) << running.dump();
  EXPECT_TRUE(running["estimated_end_ms"].is_number_integer()) << running.dump();
  EXPECT_GT(running["elapsed_ms"].get<int64_t>(), 0);
  ASSERT_EQ(Shell(cli + "queue", &out), 0) << out;
  EXPECT_NE(out.find("ELAPSED"), std::string::npos) << out;
  EXPECT_NE(out.find(", ends ~"), std::string::npos) << out;
  ASSERT_TRUE(WaitState(j, "succeeded")) << Events(j);
  ASSERT_EQ(Shell(cli + "queue", &out), 0) << out;
  EXPECT_NE(out.find("no jobs running or queued (1 finished: `tessera queue --all`)"), std::string::npos) << out;
  ASSERT_EQ(Shell(cli + "queue --all", &out), 0) << out;
  EXPECT_NE(out.find("step 20/20"), std::string::npos) << out;
  EXPECT_NE(out.find("exit code 0; ended "), std::string::npos) << out;
  EXPECT_NE(out.find(" CNY"), std::string::npos) << out;
  ASSERT_EQ(Shell(cli + "status " + std::to_string(j), &out), 0) << out;
  EXPECT_NE(out.find("progress:    step 20/20"), std::string::npos) << out;
  EXPECT_NE(out.find("run time:    0:0"), std::string::npos) << out;
}

// A queued job's estimated start, as squeue --start: behind a running job that reports no `step N/M`, unknown,
// naming that job and why; behind one that does, that job's estimated end.
TEST_F(DaemonE2E, QueuedJobsGetAnEstimatedStartFromTheRunningJobsEnds) {
  std::string cli = "TESSERA_HOME='" + d_->state() + "' " + Bin() + " ", out;
  const auto npos = std::string::npos;
  Register(2, 0);
  int64_t quiet = Submit(*admin_,
                         "name: quiet\npriority: 0\nclass: mlp-train\ncards: 2\ncompatible: [ascend]\n"
                         "command: [/bin/sleep, \"60\"]\ngrace: 5s\n");
  ASSERT_TRUE(WaitState(quiet, "running")) << Events(quiet);
  int64_t next = Submit(*admin_, SleepJobYaml("next", 0, 2, 8, out_ + "/", "[ascend]"));
  json q = Job(next);
  ASSERT_EQ(q["state"], "queued") << q.dump();
  EXPECT_TRUE(q["estimated_start_ms"].is_null()) << q.dump();
  EXPECT_NE(q.value("estimated_start", "").find(fmt::format("held by job {} (it reports no progress", quiet)), npos)
      << q.dump();
  ASSERT_EQ(Shell(cli + "queue", &out), 0) << out;
  EXPECT_NE(out.find("start unknown: it waits for cards held by job"), npos) << out;
  ASSERT_EQ(Shell(cli + "status " + std::to_string(next), &out), 0) << out;
  EXPECT_NE(out.find("starts:      unknown: it waits for cards held by job"), npos) << out;
  // Once the quiet job is gone, `next` runs and reports progress; a job queued behind it starts at its end.
  ASSERT_TRUE(admin_->Post(fmt::format("/v1/jobs/{}/cancel", quiet), json::object()).ok());
  ASSERT_TRUE(WaitFor(
      [&] {
        json p = Job(next)["progress"];
        return p.is_object() && p.value("step", 0) >= 10;
      },
      30s))
      << Events(next);
  int64_t third = Submit(*admin_, SleepJobYaml("third", 0, 2, 1, out_ + "/", "[ascend]"));
  auto r = admin_->Get("/v1/jobs");  // both from one answer
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  json running, queued;
  for (const auto& j : (*r)["jobs"]) {
    if (j["id"] == next) running = j;
    if (j["id"] == third) queued = j;
  }
  ASSERT_EQ(running.value("state", ""), "running") << r->dump();
  ASSERT_TRUE(running["estimated_end_ms"].is_number_integer()) << running.dump();
  ASSERT_TRUE(queued["estimated_start_ms"].is_number_integer()) << queued.dump();
  // The same estimate, up to the few milliseconds between the two reads of the clock in one answer.
  EXPECT_NEAR(static_cast<double>(queued["estimated_start_ms"].get<int64_t>()),
              static_cast<double>(running["estimated_end_ms"].get<int64_t>()), 1000.0)
      << r->dump();
  EXPECT_NE(queued.value("estimated_start", "").find(fmt::format("when job {} ends", next)), npos) << queued.dump();
  ASSERT_EQ(Shell(cli + "queue", &out), 0) << out;
  EXPECT_NE(out.find("; starts ~"), npos) << out;
  EXPECT_TRUE(WaitState(third, "succeeded", 60s)) << Events(third);
}

// The other two cases of a queued job's estimated start: one that fits once any running job ends starts at the
// first such end (job `short`'s, not the later `long`'s), and one that no end can make room for (only H800 cards
// and a 100% domestic floor) is unknown, saying it cannot be placed even when every running job has ended.
TEST_F(DaemonE2E, QueuedJobsStartAtTheFirstEndThatFreesEnoughOrSayTheyNeverFit) {
  std::string cli = "TESSERA_HOME='" + d_->state() + "' " + Bin() + " ", out;
  const auto npos = std::string::npos;
  Register(4, 1, "100%");
  int64_t shorter = Submit(*admin_, SleepJobYaml("short", 0, 2, 8, out_ + "/s-", "[ascend]"));
  int64_t longer = Submit(*admin_, SleepJobYaml("long", 0, 2, 60, out_ + "/l-", "[ascend]"));
  ASSERT_TRUE(WaitFor(
      [&] {
        json a = Job(shorter)["progress"], b = Job(longer)["progress"];
        return a.is_object() && a.value("step", 0) >= 5 && b.is_object() && b.value("step", 0) >= 5;
      },
      30s))
      << Events(shorter) << Events(longer);
  int64_t next = Submit(*admin_, SleepJobYaml("next", 0, 2, 1, out_ + "/n-", "[ascend]"));
  int64_t never = Submit(*admin_, SleepJobYaml("never", 0, 1, 1, out_ + "/x-", "[nvidia]"));
  auto r = admin_->Get("/v1/jobs");  // all from one answer
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  std::map<int64_t, json> jobs;
  for (const auto& j : (*r)["jobs"]) jobs[j["id"].get<int64_t>()] = j;
  ASSERT_EQ(jobs[shorter].value("state", ""), "running") << r->dump();
  ASSERT_TRUE(jobs[shorter]["estimated_end_ms"].is_number_integer()) << r->dump();
  ASSERT_TRUE(jobs[longer]["estimated_end_ms"].is_number_integer()) << r->dump();
  ASSERT_LT(jobs[shorter]["estimated_end_ms"].get<int64_t>(), jobs[longer]["estimated_end_ms"].get<int64_t>());
  ASSERT_EQ(jobs[next].value("state", ""), "queued") << r->dump();
  ASSERT_TRUE(jobs[next]["estimated_start_ms"].is_number_integer()) << r->dump();
  EXPECT_NEAR(static_cast<double>(jobs[next]["estimated_start_ms"].get<int64_t>()),
              static_cast<double>(jobs[shorter]["estimated_end_ms"].get<int64_t>()), 1000.0)
      << r->dump();
  EXPECT_NE(jobs[next].value("estimated_start", "").find(fmt::format("when job {} ends", shorter)), npos) << r->dump();
  ASSERT_EQ(jobs[never].value("state", ""), "queued") << r->dump();
  EXPECT_TRUE(jobs[never]["estimated_start_ms"].is_null()) << r->dump();
  EXPECT_NE(jobs[never].value("estimated_start", "").find("it cannot be placed even when every running job has ended"),
            npos)
      << r->dump();
  ASSERT_EQ(Shell(cli + "status " + std::to_string(never), &out), 0) << out;
  EXPECT_NE(out.find("starts:      unknown: it cannot be placed even when every running job has ended"), npos) << out;
  ASSERT_EQ(Shell(cli + "queue", &out), 0) << out;
  EXPECT_NE(out.find("start unknown: it cannot be placed even when every running job has ended"), npos) << out;
  EXPECT_TRUE(WaitState(next, "succeeded", 60s)) << Events(next);
  for (int64_t id : {longer, never})
    ASSERT_TRUE(admin_->Post(fmt::format("/v1/jobs/{}/cancel", id), json::object()).ok());
}

// A misspelled class names the catalog's classes and the closest one, not a contradiction about card counts.
TEST_F(DaemonE2E, UnknownClassNamesTheCatalogsClasses) {
  Register(2, 2);
  std::string y = SleepJobYaml("typo", 0, 2, 1, out_ + "/");
  y.replace(y.find("class: mlp-train"), 16, "class: mlp-trian");
  auto r = admin_->Post("/v1/jobs", {{"source", "bad6.yaml"}, {"yaml", y}, {"base_dir", dir_}});
  ASSERT_FALSE(r.ok());
  std::string m = r.status().message();
  EXPECT_NE(m.find("bad6.yaml: class: unknown class 'mlp-trian'; did you mean 'mlp-train'?"), std::string::npos) << m;
  EXPECT_NE(m.find("has mlp-train"), std::string::npos) << m;
}

// Hot-tier retention: by default the newest 5 committed steps stay; checkpoint.keep sets another number.
TEST_F(DaemonE2E, CheckpointsBeyondTheNewestKeepAreDeletedFromTheHotTier) {
  Register(2, 0);
  int64_t dflt = Submit(*admin_, SleepJobYaml("keep-default", 0, 1, 30, out_ + "/d-", "[ascend]"));
  int64_t two =
      Submit(*admin_, SleepJobYaml("keep-two", 0, 1, 30, out_ + "/t-", "[ascend]", "checkpoint: {keep: 2}\n"));
  ASSERT_TRUE(WaitState(dflt, "running") && WaitState(two, "running")) << Events(dflt) << Events(two);
  std::vector<float> weights(100, 0.5f);
  for (int64_t id : {dflt, two}) {
    auto w = ckpt::CheckpointWriter::Open(Job(id)["checkpoint_dir"].get<std::string>(), 0, 1);
    ASSERT_TRUE(w.ok()) << w.status().ToString();
    for (int64_t step = 10; step <= 70; step += 10) {
      ASSERT_TRUE((*w)->Save(step, {{"w", ckpt::dtype::kFloat32, {100}, weights.data()}}).ok());
      ASSERT_TRUE((*w)->Wait().ok());
    }
  }
  EXPECT_TRUE(WaitFor(
      [&] {
        return Job(dflt)["checkpoints"] == json({30, 40, 50, 60, 70});
      },
      15s))
      << Job(dflt)["checkpoints"];
  EXPECT_TRUE(WaitFor([&] { return Job(two)["checkpoints"] == json({60, 70}); }, 15s)) << Job(two)["checkpoints"];
  for (int64_t id : {dflt, two}) ASSERT_TRUE(admin_->Post(fmt::format("/v1/jobs/{}/cancel", id), json::object()).ok());
}

// `tessera daemon token` prints STATE/token; `rotate` replaces it and the running daemon refuses the old one.
TEST_F(DaemonE2E, DaemonTokenShowsAndRotatesTheAdminToken) {
  std::string env = "TESSERA_HOME='" + d_->state() + "' ", out;
  ASSERT_EQ(Shell(env + Bin() + " daemon token", &out), 0) << out;
  std::string old = ReadText(d_->state() + "/token");
  EXPECT_EQ(out, old);
  ASSERT_EQ(Shell(env + Bin() + " daemon token rotate", &out), 0) << out;
  std::string fresh = ReadText(d_->state() + "/token");
  EXPECT_NE(fresh, old);
  EXPECT_EQ(out, fresh);
  auto trim = [](std::string t) { return t.substr(0, t.find('\n')); };
  auto with_old = d_->ClientFor(trim(old));
  ASSERT_TRUE(WaitFor([&] { return !with_old->Get("/v1/jobs").ok(); }, 10s)) << "the old token still works";
  EXPECT_NE(with_old->Get("/v1/jobs").status().message().find("not known"), std::string::npos);
  EXPECT_TRUE(d_->ClientFor(trim(fresh))->Get("/v1/jobs").ok());
}

// A FUSE filesystem at `dir` whose server never answers: every access below it blocks in the kernel, as on a hung
// NFS or FUSE mount, until the destructor detaches it and closes the server's end (which fails the blocked calls).
// Needs /dev/fuse and the right to mount (root): At returns null and says why otherwise.
class HungMount {
 public:
  static std::unique_ptr<HungMount> At(const std::string& dir, std::string* why) {
    const int fuse = ::open("/dev/fuse", O_RDWR | O_CLOEXEC);
    const std::string opts = "fd=" + std::to_string(fuse) + ",rootmode=40000,user_id=0,group_id=0";
    if (fuse < 0 || ::mount("tessera-stalled", dir.c_str(), "fuse", MS_NOSUID | MS_NODEV, opts.c_str()) != 0) {
      *why = std::string("cannot mount a FUSE filesystem here (") + std::strerror(errno) + ")";
      if (fuse >= 0) ::close(fuse);
      return nullptr;
    }
    return std::unique_ptr<HungMount>(new HungMount(dir, fuse));
  }
  ~HungMount() {
    ::umount2(dir_.c_str(), MNT_DETACH);
    ::close(fd_);
  }

 private:
  HungMount(std::string dir, int fd) : dir_(std::move(dir)), fd_(fd) {}
  std::string dir_;
  int fd_;
};

// The daemon's reads of a job's checkpoint directory are bounded in time: with that directory on a FUSE mount
// whose server never answers (every read there blocks in the kernel, as on a hung NFS or FUSE mount), GET
// /v1/jobs/ID, `tessera status` and GET /metrics answer, saying the checkpoints are unknown and naming the
// directory, and the scheduler goes on placing and finishing other jobs. Needs /dev/fuse and the right to mount.
TEST_F(DaemonE2E, ACheckpointDirectoryOnAHungMountHangsNeitherTheApiNorTheScheduler) {
  using Clock = std::chrono::steady_clock;
  Register(2, 0);
  int64_t hung = Submit(*admin_, SleepJobYaml("hung", 0, 1, 60, out_ + "/h-", "[ascend]"));
  ASSERT_TRUE(WaitState(hung, "running")) << Events(hung);
  const std::string dir = Job(hung).value("checkpoint_dir", "");
  ASSERT_FALSE(dir.empty());
  std::string why;
  auto mount = HungMount::At(dir, &why);
  if (!mount) {
    (void)admin_->Post(fmt::format("/v1/jobs/{}/cancel", hung), json::object());
    GTEST_SKIP() << why;
  }
  // The bound is 2 s (kTenantReadMs); the margin is for a loaded machine, far below a hang.
  auto t0 = Clock::now();
  json j = Job(hung);
  EXPECT_LT(Clock::now() - t0, 20s);
  ASSERT_TRUE(j.value("checkpoints_error", json()).is_string()) << j.dump();
  EXPECT_NE(j["checkpoints_error"].get<std::string>().find(dir), std::string::npos) << j.dump();
  EXPECT_EQ(j["state"], "running");
  // Read again while the first read still waits: refused at once, saying so.
  j = Job(hung);
  EXPECT_NE(j.value("checkpoints_error", "").find("did not answer an earlier read"), std::string::npos) << j.dump();
  std::string out;
  ASSERT_EQ(Shell("TESSERA_HOME='" + d_->state() + "' " + Bin() + " status " + std::to_string(hung), &out), 0) << out;
  EXPECT_NE(out.find("checkpoints: " + dir + "  unknown: the job's directory " + dir), std::string::npos) << out;
  t0 = Clock::now();
  auto m = admin_->GetText("/metrics");
  EXPECT_LT(Clock::now() - t0, 20s);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_NE(m->find("\ntessera_checkpoint_dirs_unanswered 1\n"), std::string::npos) << *m;
  // The scheduler's loop goes on: a job submitted now is placed on the free card and finishes.
  int64_t next = Submit(*admin_, SleepJobYaml("next", 0, 1, 1, out_ + "/n-", "[ascend]"));
  EXPECT_TRUE(WaitState(next, "succeeded")) << Events(next);
  ASSERT_TRUE(admin_->Post(fmt::format("/v1/jobs/{}/cancel", hung), json::object()).ok());
  EXPECT_TRUE(WaitState(hung, "cancelled")) << Events(hung);
}

// A job's start makes its directories and reads the step it resumes from off the daemon's lock: with its
// checkpoint directory on a mount that never answers, the job waits in the queue saying why, the API answers
// within the bound at every poll, and the scheduler places and finishes another job meanwhile (this held the
// daemon's lock for ever: the directories were made, and the directory resolved, before any bound).
TEST_F(DaemonE2E, AStartOnAHungCheckpointDirectoryWaitsWithoutHoldingTheDaemon) {
  using Clock = std::chrono::steady_clock;
  Register(3, 0);
  int64_t blocker = Submit(*admin_, SleepJobYaml("blocker", 0, 2, 60, out_ + "/b-", "[ascend]"));
  ASSERT_TRUE(WaitState(blocker, "running")) << Events(blocker);
  int64_t hung = Submit(*admin_, SleepJobYaml("hung", 0, 2, 1, out_ + "/h-", "[ascend]"));
  ASSERT_EQ(State(hung), "queued");
  // Its directories do not exist yet: made here (as the daemon would) and the checkpoint directory mounted over.
  const std::string dir = Job(hung).value("checkpoint_dir", "");
  ASSERT_FALSE(dir.empty());
  ASSERT_EQ(Shell("mkdir -p '" + dir + "'"), 0);
  std::string why;
  auto mount = HungMount::At(dir, &why);
  if (!mount) GTEST_SKIP() << why;
  ASSERT_TRUE(admin_->Post(fmt::format("/v1/jobs/{}/cancel", blocker), json::object()).ok());
  ASSERT_TRUE(WaitFor([&] { return Job(hung).value("reason", "").find("its directories are being made") == 0; }, 30s))
      << Job(hung).dump();
  EXPECT_NE(Job(hung).value("reason", "").find(dir), std::string::npos) << Job(hung).dump();
  // Every answer within the bound (2 s; the margin is for a loaded machine, far below a hang).
  for (int i = 0; i < 5; ++i) {
    auto t0 = Clock::now();
    json j = Job(hung);
    EXPECT_LT(Clock::now() - t0, 10s);
    EXPECT_EQ(j.value("state", ""), "queued") << j.dump();
  }
  int64_t next = Submit(*admin_, SleepJobYaml("next", 0, 1, 1, out_ + "/n-", "[ascend]"));
  EXPECT_TRUE(WaitState(next, "succeeded")) << Events(next);
  EXPECT_EQ(State(hung), "queued");
  ASSERT_TRUE(admin_->Post(fmt::format("/v1/jobs/{}/cancel", hung), json::object()).ok());
  EXPECT_TRUE(WaitState(hung, "cancelled")) << Events(hung);
}

// A root daemon whose job user cannot reach the work directory refuses to start, naming the user, the
// directory that blocks it and --work-dir (else every job would fail at its start).
TEST(DaemonStart, RefusesAWorkDirectoryTheJobUserCannotReach) {
  if (::geteuid() != 0) GTEST_SKIP() << "only a daemon running as root switches to a job user";
  std::string dir = MakeTempDir("reach");  // mode 0700, like /root
  std::string out;
  int rc = Shell("timeout 20 " + Bin() + " daemon --state-dir " + dir + "/state --port 0 2>&1", &out);
  EXPECT_EQ(rc, 2) << out;
  EXPECT_NE(out.find("user nobody"), std::string::npos) << out;
  EXPECT_NE(out.find(dir + " (mode 0700) blocks it"), std::string::npos) << out;
  EXPECT_NE(out.find("--work-dir"), std::string::npos) << out;
  EXPECT_FALSE(Exists(dir + "/state-work")) << "nothing is created before the check";
  Shell("rm -rf '" + dir + "'");
}

TEST_F(DaemonE2E, AuthRefusesMissingTokenAndIsolatesTenants) {
  Register(2, 0);
  ClientOptions none;
  none.state_dir = d_->state();
  none.token = "no-such-token";
  auto bad = Client::Connect(none);
  ASSERT_TRUE(bad.ok());
  auto r = (*bad)->Get("/v1/jobs");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("not known"), std::string::npos) << r.status().message();
  // No Authorization header at all.
  std::string out;
  std::string addr = nlohmann::json::parse(ReadText(d_->state() + "/daemon.json"))["address"];
  EXPECT_EQ(Shell("curl -s -o /dev/null -w '%{http_code}' http://" + addr + "/v1/jobs", &out), 0);
  EXPECT_EQ(out, "401");

  auto alice = d_->ClientFor("tok-alice");
  auto bob = d_->ClientFor("tok-bob");
  int64_t j = Submit(*alice, SleepJobYaml("secret", 0, 1, 30, out_ + "/", "[ascend]"));
  ASSERT_TRUE(WaitFor([&] { return Exists(out_ + "/pid.1"); }, 30s)) << Events(j);
  EXPECT_EQ(Job(j)["tenant"], "alice");
  auto bl = bob->Get("/v1/jobs?all=1");
  ASSERT_TRUE(bl.ok());
  EXPECT_TRUE((*bl)["jobs"].empty()) << bl->dump();
  EXPECT_EQ(bob->Get(fmt::format("/v1/jobs/{}", j)).status().code(), Code::kNotFound);
  EXPECT_EQ(bob->Post(fmt::format("/v1/jobs/{}/cancel", j), json::object()).status().code(), Code::kNotFound);
  EXPECT_EQ(bob->GetText(fmt::format("/v1/jobs/{}/logs", j)).status().code(), Code::kNotFound);
  EXPECT_EQ(State(j), "running");
  auto al = alice->Get("/v1/jobs");
  ASSERT_TRUE(al.ok());
  ASSERT_EQ((*al)["jobs"].size(), 1u);
  // Only the admin registers fleets.
  auto fr = bob->Put("/v1/fleet", {{"fleet", Doc("f.yaml", Fleet(8, 8))}});
  ASSERT_FALSE(fr.ok());
  EXPECT_NE(fr.status().message().find("admin"), std::string::npos);
  ASSERT_TRUE(alice->Post(fmt::format("/v1/jobs/{}/cancel", j), json::object()).ok());
  ASSERT_TRUE(WaitState(j, "cancelled"));
}

}  // namespace
}  // namespace tessera::daemon::testing
