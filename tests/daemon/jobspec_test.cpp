// tests/daemon/jobspec_test: the daemon's job and fleet files — its own keys (command, workdir, checkpoint,
// grace, env, remix, emulated, sm_share) are read, blanked without moving the planner's line numbers, and errors name
// the file, the line and the key — and the islands a placement on such a fleet becomes (IslandsFor, IslandArgs,
// the job rows' JSON), with the example fleet examples/fleet-gpu-sm-share.yaml.
#include "daemon/jobspec.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

#include "daemon/cli_format.hpp"
#include "daemon/executor.hpp"

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

TEST(JobSpec, RemixModeAndItsThresholds) {
  std::string base = "name: n\nclass: c\ncards: 1\ncommand: [a]\n";
  auto parse = [&](const std::string& extra) { return ParseJobSpec(base + extra, "j.yaml", "/b", "t", {"ascend"}); };
  auto d = parse("");
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_EQ(d->run.remix.mode, RemixMode::kPolicy);  // the default: moved when the floor rises
  EXPECT_EQ(d->run.remix.min_gain, 150'000);
  EXPECT_EQ(d->run.remix.min_interval_ms, 600'000);
  auto n = parse("remix: never\n");
  ASSERT_TRUE(n.ok()) << n.status().ToString();
  EXPECT_EQ(n->run.remix.mode, RemixMode::kNever);
  auto c = parse("remix: {mode: cost, min_gain: 25%, min_interval: 30s}\n");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->run.remix.mode, RemixMode::kCost);
  EXPECT_EQ(c->run.remix.min_gain, 250'000);
  EXPECT_EQ(c->run.remix.min_interval_ms, 30'000);
  auto bad = [&](const std::string& extra) {
    auto s = parse(extra);
    EXPECT_FALSE(s.ok()) << extra;
    return s.ok() ? std::string() : s.status().message();
  };
  EXPECT_NE(bad("remix: always\n").find("j.yaml:5: remix: 'always' is not one of never, policy, cost"),
            std::string::npos)
      << bad("remix: always\n");
  EXPECT_NE(bad("remix: {mode: cost, gain: 1}\n").find("remix.gain: unknown key"), std::string::npos);
  EXPECT_NE(bad("remix: {min_gain: lots}\n").find("remix.min_gain"), std::string::npos);
  EXPECT_NE(bad("remix: {min_interval: soon}\n").find("remix.min_interval"), std::string::npos);
}

// A job file of 100,000 nested flow sequences: refused before yaml-cpp reads it, naming the file.
TEST(JobSpec, DeeplyNestedJobFilesAreRefusedBeforeParsing) {
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  auto s = ParseJobSpec("name: n\nclass: c\ncards: 1\ncommand: " + deep + "\n", "j.yaml", "/b", "t", {"ascend"});
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("j.yaml: nests deeper than 64 levels"), std::string::npos)
      << s.status().message();
  // Brackets inside quotes and comments do not count; 64 levels are read.
  auto q = ParseJobSpec("name: '[[[[' # " + std::string(100, '[') + "\nclass: c\ncards: 1\ncommand: " +
                            std::string(64, '[') + "a" + std::string(64, ']') + "\n",
                        "j.yaml", "/b", "t", {"ascend"});
  EXPECT_EQ(q.status().message().find("nests deeper"), std::string::npos) << q.status().message();
  auto f = ParseFleetSpec("nodes: " + deep + "\n", "f.yaml");
  ASSERT_FALSE(f.ok());
  EXPECT_NE(f.status().message().find("f.yaml: nests deeper than 64 levels"), std::string::npos)
      << f.status().message();
}

// A misspelled key is named with the closest known one, the daemon's keys among those listed.
TEST(JobSpec, UnknownKeysNameTheClosestKnownOne) {
  auto bad = [](const std::string& y) {
    auto s = ParseJobSpec(y, "j.yaml", "/b", "t", {"ascend"});
    EXPECT_FALSE(s.ok()) << y;
    return s.ok() ? std::string() : s.status().message();
  };
  std::string base = "name: n\nclass: c\ncards: 1\n";
  std::string m = bad(base + "comand: [a]\n");
  EXPECT_NE(m.find("j.yaml:4: comand: unknown field; did you mean 'command'?"), std::string::npos) << m;
  for (const char* k : {"command", "checkpoint", "grace", "env", "workdir", "priority", "compatible"})
    EXPECT_NE(m.find(k), std::string::npos) << k << ": " << m;
  m = bad(base + "command: [a]\npriorty: 9\n");
  EXPECT_NE(m.find("j.yaml:5: priorty: unknown field; did you mean 'priority'?"), std::string::npos) << m;
  m = bad(base + "command: [a]\nzzzzzz: 1\n");
  EXPECT_NE(m.find("zzzzzz: unknown field (a job file has:"), std::string::npos) << m;
}

TEST(JobSpec, DuplicateKeysOfTheDaemonsOwnFieldsAreRefused) {
  // The planner's keys were checked already; the daemon's own (command, env, ...) were taken silently.
  auto s = ParseJobSpec("name: n\nclass: c\ncards: 1\ncommand: [a]\ncommand: [b]\n", "j.yaml", "/b", "t", {"ascend"});
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

// ---- SM shares --------------------------------------------------------------------------------------------

const char* kCatalog = R"(currency: CNY
price_version: test-1
types:
  - {name: ascend-910b, vendor: ascend, domestic: true, price_per_card_hour: 2.4, memory_gib: 64,
     throughput: {mlp-train: 0.5}}
  - {name: nvidia-h800, vendor: nvidia, domestic: false, price_per_card_hour: 6.8, memory_gib: 80,
     throughput: {mlp-train: 1.0}}
)";

const char* kShareFleet = R"(# two cards on one GPU
nodes:
  - {id: ascend-emu, zone: local, type: ascend-910b, cards: 1, sm_share: 35}
  - id: nvidia-emu
    zone: local
    type: nvidia-h800
    sm_share: 65   # the faster card
    cards: 1
)";

std::string Message(const Status& s) { return s.message(); }

sched::Placement PlaceOnNodes(const FleetSpec& f, const std::vector<std::pair<std::string, int64_t>>& nodes) {
  sched::Placement p;
  p.zone = f.fleet.nodes.empty() ? "" : f.fleet.nodes[0].zone;
  std::map<std::string, int64_t> by_type;
  for (const auto& [id, cards] : nodes) {
    p.by_node.push_back({id, cards});
    by_type[f.fleet.Find(id)->type] += cards;
  }
  for (const char* t : {"ascend-910b", "nvidia-h800"})
    if (by_type.count(t)) p.by_type.push_back({t, std::string(t) == "ascend-910b", by_type[t]});
  return p;
}

TEST(FleetSpec, SmSharePerNodeIsEmulatedWithItsShare) {
  auto f = ParseFleetSpec(kShareFleet, "fleet.yaml");
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  ASSERT_EQ(f->fleet.nodes.size(), 2u);
  EXPECT_TRUE(f->IsEmulated("ascend-emu"));
  EXPECT_TRUE(f->IsEmulated("nvidia-emu"));
  EXPECT_EQ(f->SmShare("ascend-emu"), 35);
  EXPECT_EQ(f->SmShare("nvidia-emu"), 65);
  EXPECT_EQ(f->SmShare("absent"), 0);
  // `emulated: true` alone still means host ranks.
  auto h = ParseFleetSpec("emulated: true\nnodes:\n  - {id: a, zone: z, type: ascend-910b, cards: 2}\n", "f.yaml");
  ASSERT_TRUE(h.ok()) << h.status().ToString();
  EXPECT_TRUE(h->IsEmulated("a"));
  EXPECT_EQ(h->SmShare("a"), 0);
  EXPECT_TRUE(h->sm_share.empty());
}

TEST(FleetSpec, SmShareAtTopLevelCoversAllNodesAndEmulatedFalseOptsOut) {
  auto f = ParseFleetSpec(R"(sm_share: 50
nodes:
  - {id: a, zone: z, type: ascend-910b, cards: 1}
  - {id: b, zone: z, type: nvidia-h800, cards: 1, sm_share: 40}
  - {id: c, zone: y, type: nvidia-h800, cards: 2, emulated: false}
  - {id: d, zone: x, type: ascend-910b, cards: 1, count: 2, emulated: true}
)",
                          "fleet.yaml");
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  ASSERT_EQ(f->fleet.nodes.size(), 5u);
  EXPECT_EQ(f->SmShare("a"), 50);
  EXPECT_EQ(f->SmShare("b"), 40);
  EXPECT_FALSE(f->IsEmulated("c"));
  EXPECT_EQ(f->SmShare("c"), 0);
  EXPECT_TRUE(f->IsEmulated("d-0"));
  EXPECT_EQ(f->SmShare("d-0"), 50);
  EXPECT_EQ(f->SmShare("d-1"), 50);
}

TEST(FleetSpec, SmShareBlankingKeepsThePlannersLineNumbers) {
  // The planner's error on line 4 (cards: x) keeps its line after sm_share keys on lines 1 and 3 are blanked.
  auto f = ParseFleetSpec(
      "sm_share: 30\nnodes:\n  - {id: a, zone: z, type: t, cards: 1, sm_share: 20}\n"
      "  - {id: b, zone: z, type: t, cards: x}\n",
      "f.yaml");
  ASSERT_FALSE(f.ok());
  EXPECT_NE(Message(f.status()).find("f.yaml:4"), std::string::npos) << Message(f.status());
}

TEST(FleetSpec, BadSmSharesAreRefusedNamingFileLineAndValue) {
  struct Case {
    std::string yaml, want;
  };
  std::vector<Case> cases = {
      {"nodes:\n  - {id: a, zone: z, type: t, cards: 1, sm_share: 0}\n", "f.yaml:2: nodes[].sm_share"},
      {"nodes:\n  - {id: a, zone: z, type: t, cards: 1, sm_share: 101}\n", "not '101'"},
      {"nodes:\n  - {id: a, zone: z, type: t, cards: 1, sm_share: 35.5}\n", "not '35.5'"},
      {"nodes:\n  - {id: a, zone: z, type: t, cards: 1, sm_share: half}\n", "not 'half'"},
      {"nodes:\n  - {id: a, zone: z, type: t, cards: 1, sm_share: -5}\n", "not '-5'"},
      {"nodes:\n  - {id: a, zone: z, type: t, cards: 1, sm_share: [35]}\n", "not 'a list'"},
      {"# c\nsm_share: 1000\nnodes: []\n", "f.yaml:2: sm_share: must be a whole percentage 1..100"},
      {"sm_share: 35\nemulated: false\nnodes: []\n", "f.yaml:1: sm_share: 35"},
      {"nodes:\n  - {id: a, zone: z, type: t, cards: 1,\n     emulated: false, sm_share: 35}\n",
       "f.yaml:3: nodes[].sm_share: 35 runs node 'a'"},
      {"nodes:\n  - id: a\n    zone: z\n    type: t\n    cards: 1\n    sm_share:\n      35\n", "on one line"},
      {"sm_share: 35\nsm_share: 40\nnodes: []\n", "f.yaml:2: sm_share"},
  };
  for (const auto& c : cases) {
    auto f = ParseFleetSpec(c.yaml, "f.yaml");
    ASSERT_FALSE(f.ok()) << c.yaml;
    EXPECT_NE(Message(f.status()).find(c.want), std::string::npos) << c.yaml << "\n" << Message(f.status());
  }
  auto e = ParseFleetSpec("sm_share: 35\nemulated: false\nnodes: []\n", "f.yaml");
  EXPECT_NE(Message(e.status()).find("emulated: false"), std::string::npos) << Message(e.status());
}

TEST(FleetSpec, NodesOfOneTypeAndZoneMustShareOneWay) {
  auto f = ParseFleetSpec(R"(nodes:
  - {id: a, zone: z, type: nvidia-h800, cards: 1, sm_share: 35}
  - {id: b, zone: z, type: nvidia-h800, cards: 1, sm_share: 65}
)",
                          "fleet.yaml");
  ASSERT_FALSE(f.ok());
  EXPECT_NE(Message(f.status())
                .find("fleet.yaml:3: node 'b' (type nvidia-h800, zone z) is emulated on an SM share "
                      "of 65%, but node 'a' of the same type and zone (fleet.yaml:2) is emulated on "
                      "an SM share of 35%"),
            std::string::npos)
      << Message(f.status());
  EXPECT_NE(Message(f.status()).find("same sm_share"), std::string::npos);
  // Host ranks next to a share, same type and zone: refused the same way.
  auto g = ParseFleetSpec(R"(nodes:
  - {id: a, zone: z, type: nvidia-h800, cards: 1, emulated: true}
  - {id: b, zone: z, type: nvidia-h800, cards: 1, sm_share: 65}
)",
                          "fleet.yaml");
  ASSERT_FALSE(g.ok());
  EXPECT_NE(Message(g.status()).find("is emulated as host ranks"), std::string::npos) << Message(g.status());
  // In different zones (a placement is in one zone) they may differ; the same share twice is fine.
  auto h = ParseFleetSpec(R"(nodes:
  - {id: a, zone: z, type: nvidia-h800, cards: 1, sm_share: 35}
  - {id: b, zone: y, type: nvidia-h800, cards: 1, sm_share: 65}
  - {id: c, zone: z, type: nvidia-h800, cards: 1, sm_share: 35}
)",
                          "fleet.yaml");
  EXPECT_TRUE(h.ok()) << h.status().ToString();
}

TEST(Islands, SmShareNodesBecomeCudaIslandsWithTheirShare) {
  auto catalog = sched::ParseCatalog(kCatalog, "catalog.yaml");
  ASSERT_TRUE(catalog.ok()) << catalog.status().ToString();
  auto f = ParseFleetSpec(kShareFleet, "fleet.yaml");
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  auto islands = IslandsFor(PlaceOnNodes(*f, {{"ascend-emu", 1}, {"nvidia-emu", 1}}), *catalog, *f, "mlp-train");
  ASSERT_TRUE(islands.ok()) << islands.status().ToString();
  ASSERT_EQ(islands->size(), 2u);
  EXPECT_EQ((*islands)[0].vendor, "ascend");
  EXPECT_EQ((*islands)[0].device, "cuda");
  EXPECT_TRUE((*islands)[0].emulated);
  EXPECT_EQ((*islands)[0].sm_share, 35);
  EXPECT_EQ((*islands)[1].vendor, "nvidia");
  EXPECT_EQ((*islands)[1].device, "cuda");
  EXPECT_TRUE((*islands)[1].emulated);
  EXPECT_EQ((*islands)[1].sm_share, 65);
  std::string args;
  for (const auto& a : IslandArgs(*islands)) args += (args.empty() ? "" : " ") + a;
  EXPECT_EQ(args, "--island ascend=cuda:1 --island nvidia=cuda:1 --sm-share ascend=35 --sm-share nvidia=65");
  EXPECT_EQ(IslandWeights(*islands), "0.5,1");

  // Host-emulated nodes are unchanged: no --sm-share at all.
  auto h = ParseFleetSpec(
      "emulated: true\nnodes:\n  - {id: a, zone: z, type: ascend-910b, cards: 2}\n"
      "  - {id: b, zone: z, type: nvidia-h800, cards: 2}\n",
      "f.yaml");
  ASSERT_TRUE(h.ok()) << h.status().ToString();
  auto hi = IslandsFor(PlaceOnNodes(*h, {{"a", 2}, {"b", 2}}), *catalog, *h, "mlp-train");
  ASSERT_TRUE(hi.ok()) << hi.status().ToString();
  args.clear();
  for (const auto& a : IslandArgs(*hi)) args += (args.empty() ? "" : " ") + a;
  EXPECT_EQ(args, "--island ascend=host:2 --island nvidia=host:2");
  EXPECT_EQ((*hi)[0].sm_share, 0);
}

TEST(Islands, ATypeOnNodesThatRunDifferentlyIsRefused) {
  auto catalog = sched::ParseCatalog(kCatalog, "catalog.yaml");
  ASSERT_TRUE(catalog.ok()) << catalog.status().ToString();
  // Real and SM-share nodes of one type: one island needs one kind (the fleet parser allows it, like
  // emulated + real: the planner may place the type on one kind only).
  auto f = ParseFleetSpec(R"(nodes:
  - {id: real, zone: z, type: nvidia-h800, cards: 1}
  - {id: emu, zone: z, type: nvidia-h800, cards: 1, sm_share: 65}
)",
                          "fleet.yaml");
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  auto mixed = IslandsFor(PlaceOnNodes(*f, {{"real", 1}, {"emu", 1}}), *catalog, *f, "mlp-train");
  ASSERT_FALSE(mixed.ok());
  EXPECT_NE(Message(mixed.status()).find("both emulated and real nodes"), std::string::npos) << Message(mixed.status());
  auto real_only = IslandsFor(PlaceOnNodes(*f, {{"real", 1}}), *catalog, *f, "mlp-train");
  ASSERT_TRUE(real_only.ok()) << real_only.status().ToString();
  EXPECT_EQ((*real_only)[0].sm_share, 0);
  EXPECT_FALSE((*real_only)[0].emulated);
  // Two shares in one placement cannot come from a parsed fleet (refused above); built in code, IslandsFor still
  // refuses them with what to change.
  FleetSpec two;
  two.fleet.nodes = {{"a", "z", "nvidia-h800", 1}, {"b", "z", "nvidia-h800", 1}};
  ASSERT_TRUE(two.fleet.Reindex().ok());
  two.emulated = {"a", "b"};
  two.sm_share = {{"a", 35}, {"b", 65}};
  auto shares = IslandsFor(PlaceOnNodes(two, {{"a", 1}, {"b", 1}}), *catalog, two, "mlp-train");
  ASSERT_FALSE(shares.ok());
  EXPECT_NE(Message(shares.status()).find("node 'a' SM share 35% of a GPU, node 'b' SM share 65% of a GPU"),
            std::string::npos)
      << Message(shares.status());
  EXPECT_NE(Message(shares.status()).find("the same sm_share"), std::string::npos);
}

TEST(Islands, JsonRoundTripKeepsTheShareAndReadsOldRows) {
  Island a{"ascend-910b", "ascend", "cuda", 1, true, 35, sched::kThroughputScale / 2};
  Island b{"nvidia-h800", "nvidia", "host", 2, true, 0, sched::kThroughputScale};
  auto j = IslandsToJson({a, b});
  EXPECT_EQ(j[0]["sm_share"], 35);
  auto back = IslandsFromJson(nlohmann::json::parse(j.dump()));
  ASSERT_EQ(back.size(), 2u);
  EXPECT_EQ(back[0].device, "cuda");
  EXPECT_EQ(back[0].sm_share, 35);
  EXPECT_EQ(back[0].weight, a.weight);
  EXPECT_EQ(back[1].sm_share, 0);
  EXPECT_EQ(back[1].count, 2);
  // A row written before SM shares existed: no sm_share key.
  auto old = IslandsFromJson(nlohmann::json::parse(
      R"([{"type":"ascend-910b","vendor":"ascend","device":"host","count":2,"emulated":true,"weight":500000}])"));
  ASSERT_EQ(old.size(), 1u);
  EXPECT_EQ(old[0].sm_share, 0);
  EXPECT_EQ(old[0].device, "host");
  std::string args;
  for (const auto& x : IslandArgs(old)) args += (args.empty() ? "" : " ") + x;
  EXPECT_EQ(args, "--island ascend=host:2");
}

TEST(Islands, LabelsSaySmShareWhereHostRanksWereSaid) {
  EXPECT_EQ(EmulationKind(0), "host ranks");
  EXPECT_EQ(EmulationKind(35), "SM share 35% of a GPU");
  EXPECT_EQ(EmulatedNote({{"emulated", true}, {"sm_share", 35}}), " (emulated, SM share 35% of a GPU)");
  EXPECT_EQ(EmulatedNote({{"emulated", true}, {"sm_share", 0}}), " (emulated)");
  EXPECT_EQ(EmulatedNote({{"emulated", true}}), " (emulated)");  // an older daemon's answer
  EXPECT_EQ(EmulatedNote({{"emulated", false}}), "");
  nlohmann::json alloc = {{"by_type",
                           {{{"type", "ascend-910b"}, {"cards", 1}, {"emulated", true}, {"sm_share", 35}},
                            {{"type", "nvidia-h800"}, {"cards", 2}, {"emulated", false}, {"sm_share", 0}}}}};
  EXPECT_EQ(DescribeAllocation(alloc), "1 x ascend-910b (emulated, SM share 35% of a GPU) + 2 x nvidia-h800");
}

TEST(Islands, ExampleFleetOnSharesOfOneGpu) {
  const char* src = std::getenv("TESSERA_SOURCE_DIR");
  ASSERT_NE(src, nullptr) << "TESSERA_SOURCE_DIR is not set (ctest sets it)";
  auto read = [&](const std::string& rel) {
    std::ifstream in(std::string(src) + "/" + rel);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  };
  std::string yaml = read("examples/fleet-gpu-sm-share.yaml");
  ASSERT_FALSE(yaml.empty());
  auto f = ParseFleetSpec(yaml, "fleet-gpu-sm-share.yaml");
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  auto catalog = sched::ParseCatalog(read("examples/demo/catalog.yaml"), "catalog.yaml");
  ASSERT_TRUE(catalog.ok()) << catalog.status().ToString();
  ASSERT_EQ(f->fleet.nodes.size(), 2u);
  EXPECT_EQ(f->fleet.nodes[0].id, "ascend-emu");
  EXPECT_EQ(f->fleet.nodes[0].type, "ascend-910b");
  EXPECT_EQ(f->fleet.nodes[1].id, "nvidia-emu");
  EXPECT_EQ(f->fleet.nodes[1].type, "nvidia-h800");
  EXPECT_EQ(f->fleet.nodes[0].zone, f->fleet.nodes[1].zone);
  EXPECT_EQ(f->SmShare("ascend-emu"), 35);
  EXPECT_EQ(f->SmShare("nvidia-emu"), 65);
  EXPECT_TRUE(sched::CheckInputs(*catalog, f->fleet, sched::Policy{}, {}).ok());
  auto islands = IslandsFor(PlaceOnNodes(*f, {{"ascend-emu", 1}, {"nvidia-emu", 1}}), *catalog, *f, "mlp-train");
  ASSERT_TRUE(islands.ok()) << islands.status().ToString();
  std::string args;
  for (const auto& a : IslandArgs(*islands)) args += (args.empty() ? "" : " ") + a;
  EXPECT_EQ(args, "--island ascend=cuda:1 --island nvidia=cuda:1 --sm-share ascend=35 --sm-share nvidia=65");
}

// Real nodes run the device family of their type's vendor, from the family table (common/vendor.hpp).
TEST(Islands, RealNodesRunTheirVendorsFamily) {
  auto catalog = sched::ParseCatalog(
      "currency: CNY\nprice_version: t\ntypes:\n"
      "  - {name: a, vendor: ascend, domestic: true, price_per_card_hour: 1, memory_gib: 64, throughput: {x: 1}}\n"
      "  - {name: i, vendor: iluvatar, domestic: true, price_per_card_hour: 1, memory_gib: 32, throughput: {x: 1}}\n"
      "  - {name: n, vendor: nvidia, domestic: false, price_per_card_hour: 1, memory_gib: 80, throughput: {x: 1}}\n"
      "  - {name: r, vendor: rocm-co, domestic: false, price_per_card_hour: 1, memory_gib: 80, throughput: {x: 1}}\n",
      "catalog.yaml");
  ASSERT_TRUE(catalog.ok()) << catalog.status().ToString();
  auto f = ParseFleetSpec(
      "nodes:\n  - {id: a, zone: z, type: a, cards: 2}\n  - {id: i, zone: z, type: i, cards: 2}\n"
      "  - {id: n, zone: z, type: n, cards: 2}\n  - {id: r, zone: z, type: r, cards: 2}\n",
      "fleet.yaml");
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  auto place = [](const std::vector<std::pair<std::string, int64_t>>& nodes) {  // node id == type name here
    sched::Placement p;
    p.zone = "z";
    for (const auto& [id, cards] : nodes) {
      p.by_node.push_back({id, cards});
      p.by_type.push_back({id, id != "n" && id != "r", cards});
    }
    return p;
  };
  auto islands = IslandsFor(place({{"a", 2}, {"i", 2}, {"n", 1}}), *catalog, *f, "x");
  ASSERT_TRUE(islands.ok()) << islands.status().ToString();
  std::string args;
  for (const auto& a : IslandArgs(*islands)) args += (args.empty() ? "" : " ") + a;
  EXPECT_EQ(args, "--island ascend=npu:2 --island iluvatar=corex:2 --island nvidia=cuda:1");
  auto r = IslandsFor(place({{"r", 2}}), *catalog, *f, "x");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("no device family has the vendor 'rocm-co'"), std::string::npos)
      << r.status().ToString();
}

// A job inherits each device-runtime row's variable from the daemon (the table's, not a list of names).
TEST(JobEnvironment, KeepsEveryRuntimeRowsVariable) {
  std::vector<std::string> vars = {"TESSERA_COREX_LIBRARY=/x/libcudart.so", "TESSERA_MUSA_LIBRARY=/m.so",
                                   "TESSERA_DAEMON_DB=/d", "PATH=/bin"};
  std::vector<char*> env;
  for (auto& v : vars) env.push_back(v.data());
  env.push_back(nullptr);
  const std::vector<std::string> out = JobEnvironment(env.data(), {});
  auto has = [&](const std::string& kv) { return std::find(out.begin(), out.end(), kv) != out.end(); };
  EXPECT_TRUE(has("TESSERA_COREX_LIBRARY=/x/libcudart.so"));
  EXPECT_TRUE(has("TESSERA_MUSA_LIBRARY=/m.so"));
  EXPECT_TRUE(has("PATH=/bin"));
  EXPECT_FALSE(has("TESSERA_DAEMON_DB=/d"));
}

}  // namespace
}  // namespace tessera::daemon
