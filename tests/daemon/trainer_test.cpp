// tests/daemon/trainer_test: the example trainer under `tessera run` and under the daemon.
//  * Its loss curve on two islands (uneven: 1 + 2 ranks, speed weights 0.5 and 1) matches the single-island
//    run within 1e-4 relative at every one of 200 steps (same global batch and seed).
//  * Two runs of the same layout are bit-identical (every step's loss bits, and the final parameters).
//  * Interrupted by the daemon (SIGTERM), it checkpoints, is requeued, resumes from TESSERA_RESUME_FROM and
//    finishes with exactly the parameters of an uninterrupted run: no step lost, none repeated.
// These need the launcher and the collectives core; they skip with a message where the build lacks them.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cmath>
#include <fstream>
#include <map>
#include <sstream>

#include "daemon/harness.hpp"

namespace tessera::daemon::testing {
namespace {

using json = nlohmann::json;
using namespace std::chrono_literals;

std::string FinalHash(const std::string& output) {
  auto p = output.rfind("final params fnv1a=");
  return p == std::string::npos ? "" : output.substr(p + 19, 16);
}

#define REQUIRE_COMM() \
  if (!HaveComm()) GTEST_SKIP() << "needs `tessera run` and the collectives core (not in this build)"

std::string RunTrainer(const std::string& islands, const std::string& args, const std::string& loss_out) {
  std::string out;
  int rc = Shell(fmt::format("timeout 300 {} run {} -- {} {} --loss-out {} 2>&1", Bin(), islands, TESSERA_TRAINER_BIN,
                             args, loss_out),
                 &out);
  EXPECT_EQ(rc, 0) << out;
  return out;
}

TEST(Trainer, TwoIslandsMatchOneIslandWithin1e4) {
  REQUIRE_COMM();
  std::string dir = MakeTempDir("trainer");
  RunTrainer("--island nvidia=host:1", "--steps 200 --batch 60", dir + "/one.txt");
  RunTrainer("--island ascend=host:1 --island nvidia=host:2", "--steps 200 --batch 60 --weights 0.5,1",
             dir + "/two.txt");
  Curve a = ReadCurve(dir + "/one.txt"), b = ReadCurve(dir + "/two.txt");
  ASSERT_EQ(a.steps.size(), 200u);
  ASSERT_EQ(b.steps.size(), 200u);
  double worst = 0;
  for (size_t i = 0; i < 200; ++i) {
    ASSERT_EQ(a.steps[i], b.steps[i]);
    double rel = std::fabs(a.loss[i] - b.loss[i]) / std::fabs(a.loss[i]);
    worst = std::max(worst, rel);
    EXPECT_LE(rel, 1e-4) << "step " << a.steps[i] << ": " << a.loss[i] << " vs " << b.loss[i];
  }
  EXPECT_LT(b.loss.back(), b.loss.front());  // it learns
  std::printf("worst relative loss difference over 200 steps: %.3g\n", worst);
  if (!HasFailure()) Shell("rm -rf '" + dir + "'");
}

TEST(Trainer, SameLayoutIsBitIdentical) {
  REQUIRE_COMM();
  std::string dir = MakeTempDir("trainer");
  std::string islands = "--island ascend=host:1 --island nvidia=host:2";
  std::string o1 = RunTrainer(islands, "--steps 200 --weights 0.5,1", dir + "/a.txt");
  std::string o2 = RunTrainer(islands, "--steps 200 --weights 0.5,1", dir + "/b.txt");
  Curve a = ReadCurve(dir + "/a.txt"), b = ReadCurve(dir + "/b.txt");
  ASSERT_EQ(a.bits.size(), 200u);
  EXPECT_EQ(a.bits, b.bits);
  ASSERT_FALSE(FinalHash(o1).empty()) << o1;
  EXPECT_EQ(FinalHash(o1), FinalHash(o2));
  if (!HasFailure()) Shell("rm -rf '" + dir + "'");
}

TEST(Trainer, DaemonInterruptResumesFromCheckpointWithNoStepLost) {
  REQUIRE_COMM();
  std::string dir = MakeTempDir("resume");
  // Reference: the same layout (1 ascend + 1 nvidia, weights from the catalog) without interruption.
  std::string ref = RunTrainer("--island ascend=host:1 --island nvidia=host:1",
                               "--steps 240 --ckpt-every 0 --weights 0.5,1", dir + "/ref.txt");
  // The job runs under an unprivileged identity (nobody, as root): its loss file goes where it may write.
  ASSERT_EQ(::chmod(dir.c_str(), 0755), 0);
  ASSERT_EQ(::mkdir((dir + "/out").c_str(), 0777), 0);
  ASSERT_EQ(::chmod((dir + "/out").c_str(), 0777), 0);
  DaemonProcess d(dir + "/state");
  d.Start();
  auto admin = d.Admin();
  json fleet = {{"fleet", Doc("fleet.yaml", R"(emulated: true
nodes:
  - {id: a, zone: z, type: ascend-910b, cards: 1}
  - {id: n, zone: z, type: nvidia-h800, cards: 1}
)")},
                {"catalog", Doc("catalog.yaml", R"(price_version: t
types:
  - {name: ascend-910b, vendor: ascend, domestic: true, price_per_card_hour: 2.4, throughput: {mlp-train: 0.5}}
  - {name: nvidia-h800, vendor: nvidia, domestic: false, price_per_card_hour: 6.8, throughput: {mlp-train: 1.0}}
)")},
                {"policy", Doc("policy.yaml", "floor: 50%\n")}};
  ASSERT_TRUE(admin->Put("/v1/fleet", fleet).ok());
  std::string job = fmt::format(R"(name: resume
class: mlp-train
cards: 2
compatible: [ascend, nvidia]
command: [{}, --steps, "240", --step-delay-ms, "15", --loss-out, {}/out/daemon.txt]
checkpoint: {{every: 50}}
grace: 60s
)",
                                TESSERA_TRAINER_BIN, dir);
  auto r = admin->Post("/v1/jobs", {{"source", "resume.yaml"}, {"yaml", job}, {"base_dir", dir}});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  int64_t id = (*r)["id"];
  auto get = [&] { return *admin->Get(fmt::format("/v1/jobs/{}", id)); };
  ASSERT_TRUE(WaitFor([&] { return ReadCurve(dir + "/out/daemon.txt").steps.size() >= 70; }, 120s)) << get().dump(2);
  ASSERT_TRUE(admin->Post(fmt::format("/v1/jobs/{}/requeue", id), json::object()).ok());
  ASSERT_TRUE(WaitFor([&] { return get()["state"] == "succeeded"; }, 240s)) << get().dump(2);
  json j = get();
  ASSERT_EQ(j["attempts_detail"].size(), 2u) << j.dump(2);
  std::string resumed = j["attempts_detail"][1]["resume_from"];
  ASSERT_FALSE(resumed.empty());
  Curve c = ReadCurve(dir + "/out/daemon.txt"), refc = ReadCurve(dir + "/ref.txt");
  // Steps 1..240 exactly once each: the SIGTERM checkpoint was the last step the first attempt ran.
  ASSERT_EQ(c.steps.size(), 240u);
  for (size_t i = 0; i < c.steps.size(); ++i) ASSERT_EQ(c.steps[i], static_cast<int64_t>(i + 1));
  int64_t resumed_step = std::stoll(resumed.substr(resumed.rfind("step-") + 5));
  EXPECT_GE(resumed_step, 70);
  EXPECT_LT(resumed_step, 240);
  EXPECT_EQ(c.bits, refc.bits);
  auto log = d.Admin()->GetText(fmt::format("/v1/jobs/{}/logs", id));
  ASSERT_TRUE(log.ok());
  EXPECT_EQ(FinalHash(*log), FinalHash(ref)) << *log;
  d.Stop();
  if (!HasFailure()) Shell("rm -rf '" + dir + "' '" + dir + "/state.daemon.log' '" + dir + "/state-work'");
}

}  // namespace
}  // namespace tessera::daemon::testing
