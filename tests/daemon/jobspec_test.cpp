// tests/daemon/jobspec_test: the daemon's job and fleet files — its own keys (command, workdir, checkpoint,
// grace, env, emulated) are read, blanked without moving the planner's line numbers, and errors name the
// file, the line and the key.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>

#include "daemon/jobspec.hpp"

namespace tessera::daemon {
namespace {

const char* kJob = R"(# a job
name: train
priority: 3
command: [./bin/train, --steps, "10"]
checkpoint:
  dir: ckpt
  every: 25
class: mlp-train
grace: 2m
env:
  A: "1"
cards: 4
)";

TEST(JobSpec, ReadsDaemonKeysAndResolvesPaths) {
  auto s = ParseJobSpec(kJob, "job.yaml", "/base", "alice", {"ascend", "nvidia"});
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ(s->job.name, "train");
  EXPECT_EQ(s->job.tenant, "alice");
  EXPECT_EQ(s->job.priority, 3);
  EXPECT_EQ(s->job.cards, 4);
  EXPECT_EQ(s->job.compatible, (std::vector<std::string>{"ascend", "nvidia"}));
  EXPECT_EQ(s->run.command, (std::vector<std::string>{"/base/./bin/train", "--steps", "10"}));
  EXPECT_EQ(s->run.workdir, "/base");
  EXPECT_EQ(s->run.ckpt_dir, "/base/ckpt");
  EXPECT_EQ(s->run.ckpt_every, 25);
  EXPECT_EQ(s->run.grace_ms, 120000);
  EXPECT_EQ(s->run.env.at("A"), "1");
}

TEST(JobSpec, BlankingKeepsLineNumbersForThePlannersErrors) {
  std::string y = std::string(kJob) + "bogus: 1\n";
  auto s = ParseJobSpec(y, "job.yaml", "/base", "alice", {"ascend"});
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("job.yaml:13"), std::string::npos) << s.status().message();
  EXPECT_NE(s.status().message().find("bogus"), std::string::npos) << s.status().message();
  std::string blank = BlankTopLevelKeys(kJob, {"command", "checkpoint", "env"});
  EXPECT_EQ(std::count(blank.begin(), blank.end(), '\n'), std::count(kJob, kJob + std::strlen(kJob), '\n'));
  EXPECT_EQ(blank.find("command"), std::string::npos);
  EXPECT_EQ(blank.find("every"), std::string::npos);
  EXPECT_NE(blank.find("cards: 4"), std::string::npos);
}

TEST(JobSpec, ErrorsNameFileLineAndKey) {
  auto bad = [](const std::string& y) {
    auto s = ParseJobSpec(y, "j.yaml", "/b", "t", {"ascend"});
    EXPECT_FALSE(s.ok()) << y;
    return s.ok() ? std::string() : s.status().message();
  };
  std::string base = "name: n\nclass: c\ncards: 1\n";
  EXPECT_NE(bad(base).find("missing 'command'"), std::string::npos);
  EXPECT_NE(bad(base + "command: []\n").find("j.yaml:4: command"), std::string::npos);
  EXPECT_NE(bad(base + "command: [a]\ncheckpoint: {dri: x}\n").find("checkpoint.dri"), std::string::npos);
  EXPECT_NE(bad(base + "command: [a]\ngrace: 0\n").find("grace"), std::string::npos);
  EXPECT_NE(bad(base + "command: [a]\ntenant: other\n").find("does not match"), std::string::npos);
  auto no_compat = ParseJobSpec(base + "command: [a]\n", "j.yaml", "/b", "t", {});
  ASSERT_FALSE(no_compat.ok());
  EXPECT_NE(no_compat.status().message().find("--policy-compatible"), std::string::npos);
}

TEST(JobSpec, DuplicateKeysOfTheDaemonsOwnFieldsAreRefused) {
  // The planner's keys were checked already; the daemon's own (command, env, ...) were taken silently.
  auto s = ParseJobSpec("name: n\nclass: c\ncards: 1\ncommand: [a]\ncommand: [b]\n", "j.yaml", "/b", "t",
                        {"ascend"});
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("j.yaml:5: command: is given twice (first on line 4)"), std::string::npos)
      << s.status().message();
  auto e = ParseJobSpec("name: n\nclass: c\ncards: 1\ncommand: [a]\nenv:\n  A: 1\n  A: 2\n", "j.yaml", "/b", "t",
                        {"ascend"});
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.status().message().find("env.A"), std::string::npos) << e.status().message();
  auto f = ParseFleetSpec("emulated: true\nemulated: false\nnodes: []\n", "f.yaml");
  ASSERT_FALSE(f.ok());
  EXPECT_NE(f.status().message().find("f.yaml:2: emulated"), std::string::npos) << f.status().message();
}

TEST(FleetSpec, EmulatedAtTopLevelOrPerNode) {
  auto f = ParseFleetSpec(R"(emulated: true
nodes:
  - {id: a, zone: z, type: ascend-910b, cards: 2}
  - id: b
    zone: z
    type: nvidia-h800
    emulated: false
    cards: 2
  - {id: c, zone: z, type: nvidia-h800, cards: 1, count: 2}
)",
                          "fleet.yaml");
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  ASSERT_EQ(f->fleet.nodes.size(), 4u);
  EXPECT_TRUE(f->IsEmulated("a"));
  EXPECT_FALSE(f->IsEmulated("b"));
  EXPECT_TRUE(f->IsEmulated("c-0"));
  EXPECT_TRUE(f->IsEmulated("c-1"));
  auto g = ParseFleetSpec("nodes:\n  - {id: a, zone: z, type: t, cards: 2, emulated: yes-please}\n", "f.yaml");
  ASSERT_FALSE(g.ok());
  EXPECT_NE(g.status().message().find("f.yaml:2"), std::string::npos) << g.status().message();
  auto h = ParseFleetSpec("nodes:\n  - {id: a, zone: z, type: t, cards: x}\n", "f.yaml");
  ASSERT_FALSE(h.ok());
  EXPECT_NE(h.status().message().find("f.yaml:2"), std::string::npos) << h.status().message();
}

}  // namespace
}  // namespace tessera::daemon
