// tests/daemon/remix_test: running jobs that move to another mix of cards (docs/daemon.md, "Moving running jobs"),
// end to end with the example trainer on host-emulated islands:
//  * policy: a 2 + 2 job (a throughput target); the floor in force rises from 50% to 75% (a calendar entry from
//    today) -> it moves to 6 x 910B + 1 x H800 (another world size and split) and finishes there;
//  * cost: two 1 + 1 jobs; the 910B's price drops (a new catalog version) -> the job whose min_gain the predicted
//    gain clears moves to 2 x 910B (one island instead of two), the other (min_gain 100%) does not; the prices
//    then turn so that the way back would pay, and the moved job does not move back within its
//    remix.min_interval;
//  * capacity: a 2 + 2 job whose H800 rank is killed (SIGKILL) resumes at once on the other H800 node.
// Each ends with the job succeeded, every checkpoint verified (`tessera ckpt verify`), steps 1..N each trained
// exactly once, the losses before the move bit-identical to an unmoved run of the same job and after it within
// 1e-4 relative of it: the trainer's gradient is the global batch's whatever the islands and the split, so a
// different world changes only the order of float additions (the same bound as the trainer's 1-vs-1+2 test);
// the attempts do not overlap in time (nothing billed twice), and the domestic share of the running jobs is at
// or above the floor at every poll (every 50 ms) from the moment the move was asked for.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>

#include <cmath>
#include <fstream>
#include <map>
#include <sstream>

#include "daemon/daemon_impl.hpp"
#include "daemon/harness.hpp"

namespace tessera::daemon::testing {
namespace {

// The value of the job-moves counter for `reason`, summed over tenants; also checks that every series of the
// family carries a reason (no tenant-only series at 0 beside the real ones).
double Moves(const std::string& metrics, const std::string& reason) {
  EXPECT_EQ(ExpositionProblems(metrics), "") << metrics;  // one family, one HELP and TYPE, one set of label names
  double sum = 0;
  std::istringstream in(metrics);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("tessera_job_moves_total{", 0) != 0) continue;
    EXPECT_NE(line.find("reason=\""), std::string::npos) << "a series without its reason: " << line;
    EXPECT_NE(line.find("tenant=\""), std::string::npos) << "a series without its tenant: " << line;
    if (line.find("reason=\"" + reason + "\"") != std::string::npos) sum += std::stod(line.substr(line.rfind(' ') + 1));
  }
  return sum;
}

using json = nlohmann::json;
using namespace std::chrono_literals;

// H800 does more work per CNY (6.8 / 1.0 < 2.4 / 0.3): with a 50% floor a 2-card job takes 1 + 1, and a job that
// needs 2.6 units of throughput takes 2 + 2 (0.6 + 2.0).
const char* kCatalog = R"(price_version: v1
types:
  - {name: ascend-910b, vendor: ascend, domestic: true, price_per_card_hour: 2.4, throughput: {mlp-train: 0.3}}
  - {name: nvidia-h800, vendor: nvidia, domestic: false, price_per_card_hour: 6.8, throughput: {mlp-train: 1.0}}
)";
const char* kFleet = R"(emulated: true
nodes:
  - {id: a, zone: z, type: ascend-910b, cards: 8}
  - {id: n, zone: z, type: nvidia-h800, cards: 4}
)";

class Remix : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!HaveComm()) GTEST_SKIP() << "needs `tessera run` and the collectives core (not in this build)";
    dir_ = MakeTempDir("remix");
    // The jobs run under an unprivileged identity (nobody, as root): their loss files go where it may write.
    ASSERT_EQ(::chmod(dir_.c_str(), 0755), 0);
    ASSERT_EQ(::mkdir((dir_ + "/out").c_str(), 0777), 0);
    ASSERT_EQ(::chmod((dir_ + "/out").c_str(), 0777), 0);
    d_ = std::make_unique<DaemonProcess>(dir_ + "/state");
    d_->Start();
    admin_ = d_->Admin();
  }
  void TearDown() override {
    if (d_) d_->Stop();
    if (!HasFailure() && !dir_.empty())
      Shell("rm -rf '" + dir_ + "' '" + dir_ + "/state.daemon.log' '" + dir_ + "/state-work'");
  }
  void Register(const std::string& catalog, const std::string& policy) {
    json body = {{"fleet", Doc("fleet.yaml", kFleet)},
                 {"catalog", Doc("catalog.yaml", catalog)},
                 {"policy", Doc("policy.yaml", policy)}};
    auto r = admin_->Put("/v1/fleet", body);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
  }
  // `size`: "cards: 2" or "throughput: 2.6"; `extra`: more job-file lines.
  int64_t Submit(const std::string& name, const std::string& size, int steps, const std::string& remix,
                 const std::string& extra = "") {
    std::string job = fmt::format(R"(name: {0}
class: mlp-train
{1}
compatible: [ascend, nvidia]
command: [{2}, --steps, "{3}", --step-delay-ms, "25", --print-every, "5", --loss-out, {4}/out/{0}.txt]
checkpoint: {{every: 20}}
grace: 60s
remix: {5}
{6})",
                                  name, size, TESSERA_TRAINER_BIN, steps, dir_, remix, extra);
    auto r = admin_->Post("/v1/jobs", {{"source", name + ".yaml"}, {"yaml", job}, {"base_dir", dir_}});
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return r.ok() ? (*r)["id"].get<int64_t>() : -1;
  }
  json Get(int64_t id) {
    auto r = admin_->Get(fmt::format("/v1/jobs/{}", id));
    return r.ok() ? *r : json();
  }
  std::string Events(int64_t id) {
    std::string all;
    json j = Get(id);  // not `: Get(id)["events"]`: the temporary would end before the loop
    for (const auto& e : j["events"]) all += e["text"].get<std::string>() + "\n";
    return all;
  }
  // Waits for `pred`, checking at every poll from `check_from` on that the share of the running jobs keeps the
  // floor in force.
  bool WaitCompliant(const std::function<bool()>& pred, std::chrono::seconds timeout, const bool* check_from) {
    return WaitFor(
        [&] {
          if (*check_from) {
            auto f = admin_->Get("/v1/fleet");
            if (f.ok() && (*f).contains("compliant")) {
              EXPECT_TRUE((*f)["compliant"].get<bool>()) << (*f).dump();
              ++polls_;
            }
          }
          return pred();
        },
        timeout);
  }
  // The reference: the same job, unmoved, on one layout.
  Curve Reference(const std::string& islands, const std::string& weights, int steps, const std::string& name) {
    std::string out;
    int rc = Shell(fmt::format("timeout 300 {} run {} -- {} --steps {} --ckpt-every 0 --weights {} --loss-out {} 2>&1",
                               Bin(), islands, TESSERA_TRAINER_BIN, steps, weights, dir_ + "/" + name),
                   &out);
    EXPECT_EQ(rc, 0) << out;
    return ReadCurve(dir_ + "/" + name);
  }
  // Every step once; bit-identical to the reference up to `same_until`, within 1e-4 relative after it.
  void ExpectContinues(const Curve& c, const Curve& ref, int64_t same_until, int steps) {
    ASSERT_EQ(c.steps.size(), static_cast<size_t>(steps));
    ASSERT_EQ(ref.steps.size(), static_cast<size_t>(steps));
    for (size_t i = 0; i < c.steps.size(); ++i)
      ASSERT_EQ(c.steps[i], static_cast<int64_t>(i + 1)) << "step twice or skipped";
    for (size_t i = 0; i < c.steps.size(); ++i) {
      if (c.steps[i] <= same_until) {
        EXPECT_EQ(c.bits[i], ref.bits[i]) << "step " << c.steps[i];
      } else {
        EXPECT_LE(std::fabs(c.loss[i] - ref.loss[i]) / std::fabs(ref.loss[i]), 1e-4)
            << "step " << c.steps[i] << ": " << c.loss[i] << " vs " << ref.loss[i];
      }
    }
  }
  void ExpectVerified(const json& job) {
    std::string out;
    int rc =
        Shell(fmt::format("{} ckpt --root '{}' verify 2>&1", Bin(), job["checkpoint_dir"].get<std::string>()), &out);
    EXPECT_EQ(rc, 0) << out;
  }
  static std::string IslandsText(const json& attempt) {
    std::string s;
    for (const auto& i : attempt["islands"])
      s += fmt::format("{}{}x{}", s.empty() ? "" : " + ", i["count"].get<int64_t>(), i["type"].get<std::string>());
    return s;
  }
  static int64_t ResumeStep(const json& attempt) {
    std::string r = attempt["resume_from"];
    return r.empty() ? 0 : std::stoll(r.substr(r.rfind("step-") + 5));
  }

  std::string dir_;
  std::unique_ptr<DaemonProcess> d_;
  std::unique_ptr<Client> admin_;
  int64_t polls_ = 0;
};

TEST_F(Remix, PolicyFloorRiseMovesARunningJobToACompliantMix) {
  const int kSteps = 240;
  Curve ref = Reference("--island ascend=host:2 --island nvidia=host:2", "0.3,1", kSteps, "ref.txt");
  Register(kCatalog, "floor: 50%\n");
  int64_t id = Submit("policy", "throughput: 2.6", kSteps, "policy");
  ASSERT_TRUE(WaitFor([&] { return ReadCurve(dir_ + "/out/policy.txt").steps.size() >= 50; }, 120s)) << Get(id).dump(2);
  ASSERT_EQ(IslandsText(Get(id)["attempts_detail"][0]), "2xascend-910b + 2xnvidia-h800");
  // The calendar puts 75% in force from today: the running 2 + 2 (50%) breaks it. Its cheapest compliant mix
  // is 6 + 1 (2.8 units for 21.2 CNY/h; 6 + 2 is dearer, 8 + 0 too slow).
  std::string today;
  ASSERT_EQ(Shell("date -u +%F | tr -d '\\n'", &today), 0);
  std::string policy =
      fmt::format("calendar:\n  - {{from: 2020-01-01, floor: 50%}}\n  - {{from: {}, floor: 75%}}\n", today);
  ASSERT_TRUE(admin_->Put("/v1/policy", Doc("policy-2.yaml", policy)).ok());
  bool moved_started = false;
  ASSERT_TRUE(WaitFor([&] { return Get(id)["attempts_detail"].size() == 2; }, 120s)) << Get(id).dump(2);
  moved_started = true;  // the old mix ended before the new one started: from here on the floor holds
  ASSERT_TRUE(WaitCompliant([&] { return Get(id)["state"] == "succeeded"; }, 240s, &moved_started)) << Get(id).dump(2);
  EXPECT_GT(polls_, 0);
  json j = Get(id);
  ASSERT_EQ(j["attempts_detail"].size(), 2u) << j.dump(2);
  const json& a1 = j["attempts_detail"][0];
  const json& a2 = j["attempts_detail"][1];
  EXPECT_EQ(IslandsText(a2), "6xascend-910b + 1xnvidia-h800");
  ASSERT_TRUE(a2["move"].is_object()) << a2.dump(2);
  EXPECT_EQ(a2["move"]["reason"], "policy");
  EXPECT_EQ(a2["move"]["from"], "2xascend-910b + 2xnvidia-h800");
  EXPECT_EQ(a2["move"]["to"], "6xascend-910b + 1xnvidia-h800");
  // The floor required the move: no predicted gain is shown as if it had been chosen for cost (a 30 s restart
  // charged against the few seconds left made it a large loss), the summary says what triggered it.
  EXPECT_TRUE(a2["move"]["predicted_gain"].is_null()) << a2.dump(2);
  EXPECT_TRUE(a2["move"]["rate_change"].is_number()) << a2.dump(2);
  EXPECT_EQ(a2["move"]
                .value("summary", "")
                .rfind("required by the policy, not chosen for its cost: the fleet's "
                       "domestic share 50.0% is below the floor 75.0%",
                       0),
            0u)
      << a2.dump(2);
  std::string status;
  ASSERT_EQ(Shell("TESSERA_HOME='" + d_->state() + "' " + Bin() + " status " + std::to_string(id), &status), 0)
      << status;
  EXPECT_NE(status.find("moved (policy) from 2xascend-910b + 2xnvidia-h800: required by the policy, not chosen for "
                        "its cost"),
            std::string::npos)
      << status;
  EXPECT_EQ(status.find("predicted gain"), std::string::npos) << status;
  EXPECT_GE(a2["started_ms"].get<int64_t>(), a1["ended_ms"].get<int64_t>());  // no second billed twice
  int64_t resumed = ResumeStep(a2);
  EXPECT_GE(resumed, 50);
  ExpectContinues(ReadCurve(dir_ + "/out/policy.txt"), ref, resumed, kSteps);
  ExpectVerified(j);
  std::string ev = Events(id);
  EXPECT_NE(ev.find("moved (policy): 2xascend-910b + 2xnvidia-h800 -> 6xascend-910b + 1xnvidia-h800; required by "
                    "the policy, not chosen for its cost"),
            std::string::npos)
      << ev;
  EXPECT_EQ(ev.find("predicted gain"), std::string::npos) << ev;
  EXPECT_NE(ev.find("billed 6 x ascend-910b"), std::string::npos) << ev;
  // The bill shows each attempt with the daemon's attempt number and its mix.
  std::string bill;
  ASSERT_EQ(Shell(fmt::format("TESSERA_HOME='{}' {} bill --job 'policy#{}'", d_->state(), Bin(), id), &bill), 0)
      << bill;
  std::vector<std::string> attempts;  // "N MIX"
  std::istringstream lines(bill);
  for (std::string line; std::getline(lines, line);) {
    std::istringstream f(line);
    std::vector<std::string> w;
    for (std::string x; f >> x;) w.push_back(x);
    if (w.size() > 5 && w[0] == fmt::format("policy#{}", id)) attempts.push_back(w[1] + " " + w[3] + w[4] + w[5]);
  }
  EXPECT_EQ(attempts, (std::vector<std::string>{"1 2xascend-910b+2xnvidia-h800", "2 6xascend-910b+1xnvidia-h800"}))
      << bill;
  auto m = admin_->GetText("/metrics");
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(Moves(*m, "policy"), 1) << *m;
}

TEST_F(Remix, CostMoveWhenThePriceDropsClearsMinGainAndDoesNotMoveBack) {
  const int kSteps = 400;
  Curve ref = Reference("--island ascend=host:1 --island nvidia=host:1", "0.3,1", kSteps, "ref.txt");
  Register(kCatalog, "floor: 50%\n");
  int64_t a = Submit("cheap", "cards: 2", kSteps, "{mode: cost, min_gain: 15%, min_interval: 10m, restart: 1s}");
  // At most one H800: when the prices turn, 2 x H800 (next to cheap's 910B cards) is no candidate for it.
  int64_t b = Submit("picky", "cards: 2", kSteps, "{mode: cost, min_gain: 100%, restart: 1s}",
                     "bounds: {nvidia-h800: {max: 1}}\n");
  ASSERT_TRUE(WaitFor(
      [&] {
        return ReadCurve(dir_ + "/out/cheap.txt").steps.size() >= 30 &&
               ReadCurve(dir_ + "/out/picky.txt").steps.size() >= 30;
      },
      120s))
      << Get(a).dump(2) << Get(b).dump(2);
  ASSERT_EQ(IslandsText(Get(a)["attempts_detail"][0]), "1xascend-910b + 1xnvidia-h800");
  ASSERT_EQ(IslandsText(Get(b)["attempts_detail"][0]), "1xascend-910b + 1xnvidia-h800");
  // Price version v2: the 910B at half price does more work per CNY than the H800 (1.2 / 0.3 < 6.8 / 1.0).
  std::string v2 = kCatalog;
  v2.replace(v2.find("v1"), 2, "v2");
  v2.replace(v2.find("2.4"), 3, "1.2");
  bool check = true;  // the floor holds throughout: a cost move never takes the rest below it
  Register(v2, "floor: 50%\n");
  ASSERT_TRUE(WaitCompliant([&] { return Get(a)["attempts_detail"].size() == 2; }, 120s, &check)) << Get(a).dump(2);
  EXPECT_EQ(IslandsText(Get(a)["attempts_detail"][1]), "2xascend-910b");
  ASSERT_TRUE(
      WaitCompliant([&] { return Events(b).find("below remix.min_gain 100.0%") != std::string::npos; }, 60s, &check))
      << Events(b);
  // Price version v3: the way back would pay (H800 at half price, the 910B dearer), but the last move was less
  // than remix.min_interval ago.
  std::string v3 = kCatalog;
  v3.replace(v3.find("v1"), 2, "v3");
  v3.replace(v3.find("2.4"), 3, "6.0");
  v3.replace(v3.find("6.8"), 3, "3.4");
  Register(v3, "floor: 50%\n");
  ASSERT_TRUE(WaitCompliant([&] { return Events(a).find("remix.min_interval") != std::string::npos; }, 60s, &check))
      << Events(a);
  ASSERT_TRUE(
      WaitCompliant([&] { return Get(a)["state"] == "succeeded" && Get(b)["state"] == "succeeded"; }, 240s, &check))
      << Get(a).dump(2) << Get(b).dump(2);
  json ja = Get(a), jb = Get(b);
  ASSERT_EQ(ja["attempts_detail"].size(), 2u) << ja.dump(2);  // moved once, not back
  ASSERT_EQ(jb["attempts_detail"].size(), 1u) << jb.dump(2);  // never moved
  const json& m = ja["attempts_detail"][1]["move"];
  ASSERT_TRUE(m.is_object()) << ja.dump(2);
  EXPECT_EQ(m["reason"], "cost");
  EXPECT_GE(m["predicted_gain"].get<double>(), 0.15);
  EXPECT_NE(m.value("summary", "").find("for its cost: price version v2: predicted gain in work per CNY +"),
            std::string::npos)
      << m.dump(2);
  EXPECT_GE(ja["attempts_detail"][1]["started_ms"].get<int64_t>(), ja["attempts_detail"][0]["ended_ms"].get<int64_t>());
  int64_t resumed = ResumeStep(ja["attempts_detail"][1]);
  ExpectContinues(ReadCurve(dir_ + "/out/cheap.txt"), ref, resumed, kSteps);
  ExpectContinues(ReadCurve(dir_ + "/out/picky.txt"), ref, kSteps, kSteps);
  ExpectVerified(ja);
  ExpectVerified(jb);
  auto metrics = admin_->GetText("/metrics");
  ASSERT_TRUE(metrics.ok());
  EXPECT_EQ(Moves(*metrics, "cost"), 1) << *metrics;
}

TEST_F(Remix, CapacityARankKilledResumesAtOnceOnOtherFreeCards) {
  const int kSteps = 240;
  Curve ref = Reference("--island ascend=host:2 --island nvidia=host:2", "0.3,1", kSteps, "ref.txt");
  // Two H800 nodes: the job takes n1's two cards; when one of its H800 ranks dies, n1 is left out and it
  // continues on n2 at once.
  json body = {{"fleet", Doc("fleet.yaml", R"(emulated: true
nodes:
  - {id: a, zone: z, type: ascend-910b, cards: 4}
  - {id: n1, zone: z, type: nvidia-h800, cards: 2}
  - {id: n2, zone: z, type: nvidia-h800, cards: 2}
)")},
               {"catalog", Doc("catalog.yaml", kCatalog)},
               {"policy", Doc("policy.yaml", "floor: 50%\n")}};
  ASSERT_TRUE(admin_->Put("/v1/fleet", body).ok());
  int64_t id = Submit("cap", "cards: 4", kSteps, "policy", "env: {TESSERA_TIMEOUT: 5s}\n");
  ASSERT_TRUE(WaitFor([&] { return ReadCurve(dir_ + "/out/cap.txt").steps.size() >= 50; }, 120s)) << Get(id).dump(2);
  json a1 = Get(id)["attempts_detail"][0];
  ASSERT_EQ(IslandsText(a1), "2xascend-910b + 2xnvidia-h800");
  // One H800 rank (island 1) of this job dies as if its node went away.
  std::string pids;
  ASSERT_EQ(Shell(fmt::format("pgrep -f -- '{}/out/cap.txt'", dir_), &pids), 0);
  pid_t victim = -1;
  std::istringstream in(pids);
  for (pid_t p; in >> p;) {
    std::string env = ReadText(fmt::format("/proc/{}/environ", p));
    if (env.find(std::string("TESSERA_ISLAND=1") + '\0') != std::string::npos) victim = p;
  }
  ASSERT_GT(victim, 0) << pids;
  ASSERT_EQ(::kill(victim, SIGKILL), 0);
  ASSERT_TRUE(WaitFor([&] { return Get(id)["state"] == "succeeded"; }, 240s)) << Get(id).dump(2);
  json j = Get(id);
  ASSERT_EQ(j["attempts_detail"].size(), 2u) << j.dump(2);
  const json& a2 = j["attempts_detail"][1];
  EXPECT_EQ(IslandsText(a2), "2xascend-910b + 2xnvidia-h800");
  std::string nodes;
  for (const auto& e : j["allocation"]["by_node"]) nodes += e["node"].get<std::string>() + " ";
  EXPECT_EQ(nodes.find("n1"), std::string::npos) << j["allocation"].dump();
  EXPECT_NE(nodes.find("n2"), std::string::npos) << j["allocation"].dump();
  ASSERT_TRUE(a2["move"].is_object()) << a2.dump(2);
  EXPECT_EQ(a2["move"]["reason"], "capacity");
  EXPECT_TRUE(a2["move"]["predicted_gain"].is_null()) << a2.dump(2);
  EXPECT_EQ(a2["move"].value("summary", "").rfind("required by lost capacity, not chosen for its cost: ", 0), 0u)
      << a2.dump(2);
  EXPECT_LT(a2["wake_latency_ms"].is_null() ? 0 : a2["wake_latency_ms"].get<int64_t>(), 5000);
  EXPECT_GE(a2["started_ms"].get<int64_t>(), j["attempts_detail"][0]["ended_ms"].get<int64_t>());
  // The steps after the newest checkpoint were lost with the rank and trained again: each step's last line is
  // the reference's bits (the same layout), and only steps after the resume point appear twice.
  int64_t resumed = ResumeStep(a2);
  Curve c = ReadCurve(dir_ + "/out/cap.txt");
  std::map<int64_t, std::string> last;
  std::map<int64_t, int> seen;
  for (size_t i = 0; i < c.steps.size(); ++i) last[c.steps[i]] = c.bits[i], ++seen[c.steps[i]];
  ASSERT_EQ(last.size(), static_cast<size_t>(kSteps));
  for (int64_t s = 1; s <= kSteps; ++s) {
    EXPECT_EQ(last[s], ref.bits[static_cast<size_t>(s - 1)]) << "step " << s;
    EXPECT_LE(seen[s], s <= resumed ? 1 : 2) << "step " << s;
  }
  ExpectVerified(j);
  auto m = admin_->GetText("/metrics");
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(Moves(*m, "capacity"), 1) << *m;
}

// What a move says triggered it: a cost move its predicted gain; a policy or capacity move that it was required,
// never a gain (older records of policy moves carry one: it is not shown), a policy move the rates compared.
TEST(RemixSummary, OnlyACostMoveShowsAPredictedGain) {
  json cost = {{"reason", "cost"},
               {"why", "price version v2: predicted gain in work per CNY +41.2% ..."},
               {"predicted_gain", 0.412}};
  EXPECT_EQ(MoveSummary(cost, "CNY"), "for its cost: price version v2: predicted gain in work per CNY +41.2% ...");
  cost.erase("why");
  EXPECT_EQ(MoveSummary(cost, "CNY"), "for its cost: predicted gain in work per CNY +41.2%");
  json policy = {{"reason", "policy"},
                 {"why", "the fleet's domestic share 50.0% is below the floor 75.0% in force today"},
                 {"predicted_gain", -0.95},
                 {"rate_change", -0.294}};
  EXPECT_EQ(MoveSummary(policy, "CNY"),
            "required by the policy, not chosen for its cost: the fleet's domestic share 50.0% is below the floor "
            "75.0% in force today; the new mix does 29.4% less work per CNY (per hour of work, before the restart)");
  json capacity = {{"reason", "capacity"}, {"why", "node(s) n1 are left out"}, {"predicted_gain", nullptr}};
  EXPECT_EQ(MoveSummary(capacity, "CNY"),
            "required by lost capacity, not chosen for its cost: node(s) n1 are left out");
}

// The progress a move's prediction reads: a step line, not the checkpoint line the trainer prints after it at
// every checkpoint (which once hid the step count, M, exactly when a cost move is considered).
TEST(RemixProgress, TheCheckpointLineAfterAStepLineIsNotProgress) {
  std::string dir = MakeTempDir("progress");
  WriteText(dir + "/job.log",
            "=== tessera daemon: job 1 attempt 1 ===\n[rank 0 ascend] step 40/400 loss 0.5\n"
            "[rank 0 ascend] tessera info: checkpoint step 40 committed in /w/ckpt/step-0000000040 (19624 bytes)\n");
  json p = ProgressFromLog(dir + "/job.log");
  ASSERT_TRUE(p.is_object()) << p.dump();
  EXPECT_EQ(p["step"], 40);
  EXPECT_EQ(p["of"], 400);
  EXPECT_EQ(p["loss"], "0.5");
  WriteText(dir + "/plain.log", "step 7/9 loss 1.25\n");  // a program run without the launcher's prefixes
  EXPECT_EQ(ProgressFromLog(dir + "/plain.log")["of"], 9);
  Shell("rm -rf '" + dir + "'");
}

}  // namespace
}  // namespace tessera::daemon::testing
