// Tests of the YAML inputs: good files load, and every bad input gets an error naming the file, the line and
// the field (and the offending value where there is one).
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>

#include "sched/sched.hpp"

// The source tree: $TESSERA_SOURCE_DIR, else the path CMake compiled in.
static const char* SourceDir() {
  const char* env = std::getenv("TESSERA_SOURCE_DIR");
  return env ? env : TESSERA_TEST_SOURCE_DIR;
}

using namespace tessera::sched;

namespace {

const char* kCatalog = R"(currency: CNY
price_version: v1
types:
  - name: ascend-910b
    vendor: ascend
    domestic: true
    price_per_card_hour: 2.4
    memory_gib: 64
    throughput: {llm-train: 1.0}
  - name: nvidia-h800
    vendor: nvidia
    domestic: false
    price_per_card_hour: 6.8
    throughput: {llm-train: 1.0, infer: 2}
)";

// Expects a failure whose message contains every one of `parts`.
template <typename R>
void ExpectError(const R& r, std::initializer_list<const char*> parts) {
  ASSERT_FALSE(r.ok()) << "expected an error containing " << *parts.begin();
  EXPECT_EQ(r.status().code(), tessera::Code::kInvalidArgument) << r.status().ToString();
  for (const char* p : parts)
    EXPECT_NE(r.status().message().find(p), std::string::npos)
        << "'" << p << "' missing from: " << r.status().message();
}

std::string Replace(std::string s, const std::string& from, const std::string& to) {
  auto pos = s.find(from);
  EXPECT_NE(pos, std::string::npos) << from;
  return s.replace(pos, from.size(), to);
}

}  // namespace

TEST(SchedInputs, CatalogLoads) {
  auto c = ParseCatalog(kCatalog, "cat.yaml");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  ASSERT_EQ(c->types.size(), 2u);
  EXPECT_EQ(c->price_version, "v1");
  EXPECT_EQ(c->types[0].price_per_card_hour, 2'400'000);
  EXPECT_TRUE(c->types[0].domestic);
  EXPECT_FALSE(c->types[1].domestic);
  EXPECT_EQ(c->types[1].throughput.at("infer"), 2000);
  EXPECT_EQ(c->Find("nvidia-h800")->memory_gib, 0);
  EXPECT_EQ(c->Find("moore-s4000"), nullptr);
}

TEST(SchedInputs, CatalogErrorsNameFileLineField) {
  std::string k = kCatalog;
  ExpectError(ParseCatalog(Replace(k, "price_per_card_hour: 6.8", "price_per_card_hour: cheap"), "cat.yaml"),
              {"cat.yaml:13:", "types[1].price_per_card_hour", "'cheap'"});
  ExpectError(ParseCatalog(Replace(k, "price_per_card_hour: 6.8", "price_per_card_hour: -6.8"), "cat.yaml"),
              {"cat.yaml:13:", "'-6.8'"});
  ExpectError(ParseCatalog(Replace(k, "domestic: false", "domestic: maybe"), "cat.yaml"),
              {"cat.yaml:12:", "types[1].domestic", "'maybe'"});
  ExpectError(ParseCatalog(Replace(k, "    domestic: false\n", ""), "cat.yaml"),
              {"cat.yaml:", "types[1].domestic", "is required"});
  ExpectError(ParseCatalog(Replace(k, "name: nvidia-h800", "name: ascend-910b"), "cat.yaml"),
              {"cat.yaml:10:", "types[1].name", "listed twice"});
  ExpectError(ParseCatalog(Replace(k, "memory_gib: 64", "memry_gib: 64"), "cat.yaml"),
              {"cat.yaml:8:", "types[0].memry_gib", "unknown field; did you mean 'memory_gib'?"});
  ExpectError(ParseCatalog(Replace(k, "{llm-train: 1.0, infer: 2}", "{llm-train: fast}"), "cat.yaml"),
              {"cat.yaml:14:", "types[1].throughput.llm-train", "'fast'"});
  ExpectError(ParseCatalog(Replace(k, "{llm-train: 1.0, infer: 2}", "{llm-train: 0}"), "cat.yaml"),
              {"cat.yaml:14:", "must be > 0"});
  ExpectError(ParseCatalog(Replace(k, "price_version: v1\n", ""), "cat.yaml"), {"price_version", "is required"});
  ExpectError(ParseCatalog("types: [\n  - {name: x\n", "cat.yaml"), {"cat.yaml:", "not valid YAML"});
  ExpectError(ParseCatalog("", "cat.yaml"), {"cat.yaml", "empty"});
  ExpectError(ParseCatalog("price_version: v\ntypes: oops\n", "cat.yaml"), {"cat.yaml:2:", "types", "expected a list"});
}

TEST(SchedInputs, FleetLoadsAndExpandsCount) {
  auto f = ParseFleet(
      "nodes:\n  - {id: a, zone: z1, type: t, cards: 8, count: 12}\n  - {id: b, zone: z2, type: t, "
      "cards: 4}\n",
      "fleet.yaml");
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  ASSERT_EQ(f->nodes.size(), 13u);
  EXPECT_EQ(f->nodes[0].id, "a-00");
  EXPECT_EQ(f->nodes[11].id, "a-11");
  EXPECT_EQ(f->Find("b")->cards, 4);
  EXPECT_EQ(f->Find("a-11")->zone, "z1");
}

TEST(SchedInputs, FleetErrors) {
  ExpectError(ParseFleet("nodes:\n  - {id: a, zone: z, type: t, cards: 8}\n  - {id: b, zone: z, type: t, cards: x}\n",
                         "fleet.yaml"),
              {"fleet.yaml:3:", "nodes[1].cards", "'x'", "not an integer"});
  ExpectError(ParseFleet("nodes:\n  - {id: a, zone: z, type: t, cards: -8}\n", "fleet.yaml"),
              {"fleet.yaml:2:", "nodes[0].cards", "out of range"});
  ExpectError(ParseFleet("nodes:\n  - {id: a, zone: z, type: t, cards: 8}\n  - {id: a, zone: z, type: t, cards: 8}\n",
                         "fleet.yaml"),
              {"fleet.yaml:3:", "nodes[1].id", "'a' is listed twice"});
  ExpectError(ParseFleet("nodes:\n  - {id: a, type: t, cards: 8}\n", "fleet.yaml"),
              {"fleet.yaml:2:", "nodes[0].zone", "is required"});
  ExpectError(ParseFleet("node:\n  - {id: a}\n", "fleet.yaml"), {"fleet.yaml:1:", "node", "unknown field"});
}

TEST(SchedInputs, PolicyCalendar) {
  auto p = ParsePolicy(
      "unit: cards\ncalendar:\n  - {from: 2025-01-01, floor: 50%}\n  - {from: 2026-07-01, floor: "
      "0.6}\n",
      "policy.yaml");
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_EQ(p->FloorAt(*ParseDate("d", "2024-12-31")), 0);
  EXPECT_EQ(p->FloorAt(*ParseDate("d", "2025-01-01")), 500'000);
  EXPECT_EQ(p->FloorAt(*ParseDate("d", "2026-06-30")), 500'000);
  EXPECT_EQ(p->FloorAt(*ParseDate("d", "2026-07-01")), 600'000);
  EXPECT_EQ(p->FloorAt(*ParseDate("d", "2030-01-01")), 600'000);
  auto q = ParsePolicy("floor: 40%\nunit: throughput\nweight_class: llm-train\n", "p2.yaml");
  ASSERT_TRUE(q.ok()) << q.status().ToString();
  EXPECT_EQ(q->FloorAt(0), 400'000);
  EXPECT_EQ(q->unit, ShareUnit::kThroughput);
}

TEST(SchedInputs, PolicyErrors) {
  ExpectError(
      ParsePolicy("calendar:\n  - {from: 2026-07-01, floor: 60%}\n  - {from: 2025-01-01, floor: 50%}\n", "policy.yaml"),
      {"policy.yaml:3:", "calendar[1].from", "2025-01-01 is not after"});
  ExpectError(ParsePolicy("calendar:\n  - {from: 2026-02-30, floor: 60%}\n", "policy.yaml"),
              {"policy.yaml:2:", "calendar[0].from", "'2026-02-30'"});
  ExpectError(ParsePolicy("calendar:\n  - {from: 2026-02-01, floor: 160%}\n", "policy.yaml"),
              {"policy.yaml:2:", "calendar[0].floor", "'160%'"});
  ExpectError(ParsePolicy("unit: chips\nfloor: 50%\n", "policy.yaml"), {"policy.yaml:1:", "unit", "'chips'"});
  ExpectError(ParsePolicy("unit: throughput\nfloor: 50%\n", "policy.yaml"), {"policy.yaml:1:", "weight_class"});
  ExpectError(ParsePolicy("unit: cards\n", "policy.yaml"), {"policy.yaml:1:", "either 'floor'"});
}

TEST(SchedInputs, Job) {
  auto j = ParseJob(
      "name: x\ntenant: t\nclass: llm-train\ncards: 16\ncompatible: ascend, nvidia\nbounds:\n  "
      "nvidia-h800: {max: 8}\n",
      "job.yaml");
  ASSERT_TRUE(j.ok()) << j.status().ToString();
  EXPECT_EQ(j->cards, 16);
  EXPECT_EQ(j->compatible, (std::vector<std::string>{"ascend", "nvidia"}));
  EXPECT_EQ(*j->bounds.at("nvidia-h800").max, 8);
  ExpectError(ParseJob("name: x\ntenant: t\nclass: c\ncards: 16\nthroughput: 3\ncompatible: [a]\n", "job.yaml"),
              {"job.yaml:1:", "cards", "not both"});
  ExpectError(ParseJob("name: x\ntenant: t\nclass: c\ncards: 0\ncompatible: [a]\n", "job.yaml"),
              {"job.yaml:4:", "cards", "'0'", "out of range"});
  ExpectError(ParseJob("name: x\ntenant: t\nclass: c\ncards: 4\n", "job.yaml"), {"job.yaml:1:", "compatible"});
  ExpectError(
      ParseJob("name: x\ntenant: t\nclass: c\ncards: 4\ncompatible: [a]\nbounds:\n  a: {min: 5, max: 2}\n", "job.yaml"),
      {"job.yaml:7:", "bounds.a.max", "below min"});
  ExpectError(ParseJob("name: x\ntenant: t\nclass: c\ncards: 4\ncompatible: [a]\npriorty: 3\n", "job.yaml"),
              {"job.yaml:6:", "priorty", "unknown field; did you mean 'priority'?"});
}

TEST(SchedInputs, JobModelAndTheCatalogsModelFigures) {
  const std::string job = "name: x\ntenant: t\nclass: c\ncards: 4\ncompatible: [a]\n";
  auto j = ParseJob(job + "model: {params: 130B, class: zero3-offload}\n", "job.yaml");
  ASSERT_TRUE(j.ok()) << j.status().ToString();
  ASSERT_TRUE(j->model.has_value());
  EXPECT_EQ(j->model->params, 130e9);
  EXPECT_EQ(j->model->model_class, "zero3-offload");
  EXPECT_EQ(j->model->line, 6);
  EXPECT_FALSE(ParseJob(job, "job.yaml")->model.has_value());
  ExpectError(ParseJob(job + "model: {params: 7e9, class: zero4}\n", "job.yaml"),
              {"job.yaml:6:", "model.class",
               "'zero4' is not a model class (one of: dp, zero1, zero2, zero3, "
               "zero3-offload)"});
  ExpectError(ParseJob(job + "model: {params: 0, class: dp}\n", "job.yaml"),
              {"job.yaml:6:", "model.params", "'0' is not a positive number"});
  ExpectError(ParseJob(job + "model: {params: -7B, class: dp}\n", "job.yaml"),
              {"job.yaml:6:", "model.params", "'-7B' is not a positive number"});
  ExpectError(ParseJob(job + "model: {class: dp}\n", "job.yaml"), {"job.yaml:6:", "model.params", "is required"});
  ExpectError(ParseJob(job + "model: {params: 7B, class: dp, seq: 4}\n", "job.yaml"),
              {"job.yaml:6:", "model.seq", "unknown field"});
  ExpectError(ParseJob("name: x\ntenant: t\nclass: c\nthroughput: 4\ncompatible: [a]\nmodel: {params: 7B, class: dp}\n",
                       "job.yaml"),
              {"job.yaml:6:", "model", "give 'cards', not 'throughput'"});

  const std::string figures =
      "  - {name: a, vendor: a, domestic: true, price_per_card_hour: 2.4, throughput: {c: 1},\n"
      "     model: {tflops: 320, mfu: 0.4, fabric_gbs: 196, hbm_gbs: 1600}}\n";
  auto c = ParseCatalog("price_version: v\nmodel: {net_gbps: 200, pcie_gbs: 25, shm_gbs: 2}\ntypes:\n" + figures,
                        "cat.yaml");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  ASSERT_TRUE(c->model && c->types[0].model);
  EXPECT_EQ(c->model->net_gbps, 200);
  EXPECT_EQ(c->model->latency_us, 0);
  EXPECT_EQ(c->types[0].model->tflops, 320);
  EXPECT_EQ(c->types[0].model->cards_per_node, 8);
  EXPECT_FALSE(ParseCatalog(kCatalog, "cat.yaml")->types[0].model.has_value());
  ExpectError(ParseCatalog("price_version: v\ntypes:\n" + Replace(figures, "mfu: 0.4", "mfu: 1.5"), "cat.yaml"),
              {"cat.yaml:4:", "types[0].model.mfu", "'1.5' is not in (0, 1]"});
  ExpectError(ParseCatalog("price_version: v\ntypes:\n" + Replace(figures, "tflops: 320", "tflops: fast"), "cat.yaml"),
              {"cat.yaml:4:", "types[0].model.tflops", "'fast' is not a positive number"});
  ExpectError(ParseCatalog("price_version: v\ntypes:\n" + Replace(figures, ", hbm_gbs: 1600", ""), "cat.yaml"),
              {"types[0].model.hbm_gbs", "is required"});
  ExpectError(
      ParseCatalog("price_version: v\nmodel: {net_gbps: 0, pcie_gbs: 25, shm_gbs: 2}\ntypes:\n" + figures, "cat.yaml"),
      {"cat.yaml:2:", "model.net_gbps", "'0' is not a positive number"});
}

TEST(SchedInputs, RunningAndCrossChecks) {
  auto cat = ParseCatalog(kCatalog, "cat.yaml");
  auto fleet = ParseFleet("nodes:\n  - {id: n, zone: z, type: ascend-910b, cards: 8, count: 2}\n", "fleet.yaml");
  auto pol = ParsePolicy("floor: 50%\n", "policy.yaml");
  ASSERT_TRUE(cat.ok() && fleet.ok() && pol.ok());
  auto run = ParseRunning(
      "running:\n  - name: j\n    allocations:\n      - {node: n-0, cards: 8}\n      - {node: n-1, "
      "cards: 2}\n",
      "run.yaml");
  ASSERT_TRUE(run.ok()) << run.status().ToString();
  EXPECT_TRUE(CheckInputs(*cat, *fleet, *pol, *run).ok());
  ExpectError(ParseRunning("running:\n  - name: j\n    allocations:\n      - {node: n-0, cards: many}\n", "run.yaml"),
              {"run.yaml:4:", "running[0].allocations[0].cards", "'many'"});
  auto over = ParseRunning(
      "- name: j\n  allocations: [{node: n-0, cards: 6}]\n- name: k\n  allocations: [{node: n-0, "
      "cards: 6}]\n",
      "run.yaml");
  ASSERT_TRUE(over.ok()) << over.status().ToString();
  auto st = CheckInputs(*cat, *fleet, *pol, *over);
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("12 cards on node 'n-0', which has 8"), std::string::npos) << st.message();
  auto ghost = ParseRunning("- name: j\n  allocations: [{node: zz, cards: 1}]\n", "run.yaml");
  ASSERT_TRUE(ghost.ok());
  EXPECT_NE(CheckInputs(*cat, *fleet, *pol, *ghost).message().find("node 'zz' is not in the fleet"), std::string::npos);
  auto badtype = ParseFleet("nodes:\n  - {id: m, zone: z, type: moore-s4000, cards: 8}\n", "fleet.yaml");
  ASSERT_TRUE(badtype.ok());
  EXPECT_NE(CheckInputs(*cat, *badtype, *pol, {}).message().find("type 'moore-s4000' is not in the catalog"),
            std::string::npos);
}

TEST(SchedInputs, ShippedExamplesLoad) {
  const char* src = SourceDir();
  ASSERT_NE(src, nullptr);
  std::string d = std::string(src) + "/examples/fleet/";
  auto cat = LoadCatalog(d + "catalog.yaml");
  ASSERT_TRUE(cat.ok()) << cat.status().ToString();
  // The reference scenario's two prices, and one Iluvatar CoreX type (domestic; its figures are placeholders,
  // as the catalog's header says).
  ASSERT_EQ(cat->types.size(), 3u);
  EXPECT_EQ(cat->Find("ascend-910b")->price_per_card_hour, 2'400'000);
  EXPECT_EQ(cat->Find("nvidia-h800")->price_per_card_hour, 6'800'000);
  ASSERT_NE(cat->Find("iluvatar-corex"), nullptr);
  EXPECT_TRUE(cat->Find("iluvatar-corex")->domestic);
  auto fleet = LoadFleet(d + "fleet.yaml");
  auto pol = LoadPolicy(d + "policy.yaml");
  auto run = LoadRunning(d + "running.yaml");
  ASSERT_TRUE(fleet.ok() && pol.ok() && run.ok());
  EXPECT_TRUE(CheckInputs(*cat, *fleet, *pol, *run).ok());
  EXPECT_TRUE(LoadJob(d + "job.yaml").ok());
  EXPECT_TRUE(LoadJob(d + "job-throughput.yaml").ok());
  auto missing = LoadJob(d + "no-such-job.yaml");
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("no-such-job.yaml"), std::string::npos);
}

// yaml-cpp keeps both entries of a key given twice and a lookup sees one, so `cards: 8` then
// `cards: 4` silently lost a value. Every file the loaders read refuses it, naming the file, both lines and
// the field.
TEST(SchedInputs, DuplicateKeysAreRefusedWithFileLineField) {
  ExpectError(ParseFleet("nodes:\n  - id: d0\n    zone: a\n    type: t\n    cards: 8\n    cards: 4\n", "fleet.yaml"),
              {"fleet.yaml:6:", "nodes[0].cards", "given twice (first on line 5)"});
  ExpectError(ParseFleet("nodes:\n  - {id: a, zone: z, type: t, cards: 8}\n  - {id: b, zone: z, type: t, cards: 8, "
                         "zone: y}\n",
                         "fleet.yaml"),
              {"fleet.yaml:3:", "nodes[1].zone", "given twice"});
  ExpectError(ParseFleet("nodes:\n  - {id: a, zone: z, type: t, cards: 8}\nnodes: []\n", "fleet.yaml"),
              {"fleet.yaml:3:", "nodes", "given twice (first on line 1)"});
  ExpectError(ParseCatalog(Replace(kCatalog, "currency: CNY\n", "currency: CNY\ncurrency: USD\n"), "cat.yaml"),
              {"cat.yaml:2:", "currency", "given twice (first on line 1)"});
  ExpectError(
      ParseCatalog(Replace(kCatalog, "{llm-train: 1.0, infer: 2}", "{llm-train: 1.0, llm-train: 2}"), "cat.yaml"),
      {"cat.yaml:14:", "types[1].throughput.llm-train", "given twice (first on line 14)"});
  ExpectError(ParsePolicy("unit: cards\nfloor: 60%\nfloor: 40%\n", "policy.yaml"),
              {"policy.yaml:3:", "floor", "given twice (first on line 2)"});
  ExpectError(ParsePolicy("calendar:\n  - {from: 2026-01-01, floor: 60%, floor: 10%}\n", "policy.yaml"),
              {"policy.yaml:2:", "calendar[0].floor", "given twice"});
  ExpectError(ParseJob("name: x\ntenant: t\nclass: c\ncards: 8\ncards: 4\ncompatible: [a]\n", "job.yaml"),
              {"job.yaml:5:", "cards", "given twice (first on line 4)"});
  ExpectError(ParseJob("name: x\ntenant: t\nclass: c\ncards: 8\ncompatible: [a]\nbounds:\n  a: {max: 2}\n  a: {min: "
                       "1}\n",
                       "job.yaml"),
              {"job.yaml:8:", "bounds.a", "given twice (first on line 7)"});
  ExpectError(
      ParseRunning("running:\n  - name: j\n    allocations:\n      - {node: n-0, cards: 8, node: n-1}\n", "run.yaml"),
      {"run.yaml:4:", "running[0].allocations[0].node", "given twice"});
  // The same key in different mappings is fine.
  EXPECT_TRUE(ParseFleet("nodes:\n  - {id: a, zone: z, type: t, cards: 8}\n  - {id: b, zone: z, type: t, cards: 8}\n",
                         "fleet.yaml")
                  .ok());
}

// Errors that span two files name the file, line and field of the entry at fault, like the loaders.
TEST(SchedInputs, CrossFileErrorsNameFileLineField) {
  auto cat = ParseCatalog(kCatalog, "cat.yaml");
  auto fleet = ParseFleet("nodes:\n  - {id: n, zone: z, type: ascend-910b, cards: 8, count: 2}\n", "fleet.yaml");
  auto pol = ParsePolicy("floor: 50%\n", "policy.yaml");
  ASSERT_TRUE(cat.ok() && fleet.ok() && pol.ok());
  auto expect = [](const tessera::Status& st, std::initializer_list<const char*> parts) {
    ASSERT_FALSE(st.ok());
    for (const char* p : parts) EXPECT_NE(st.message().find(p), std::string::npos) << p << " in: " << st.message();
  };
  // A node of a type the catalog lacks.
  auto badtype = ParseFleet(
      "nodes:\n  - {id: a, zone: z, type: ascend-910b, cards: 8}\n  - id: m\n    zone: z\n"
      "    type: moore-s4000\n    cards: 8\n",
      "fleet.yaml");
  ASSERT_TRUE(badtype.ok());
  expect(CheckInputs(*cat, *badtype, *pol, {}),
         {"fleet.yaml:5: nodes[1].type: type 'moore-s4000' is not in the catalog cat.yaml"});
  // A weight class the catalog has no throughput for.
  auto wpol = ParsePolicy("unit: throughput\nweight_class: infer\nfloor: 50%\n", "policy.yaml");
  ASSERT_TRUE(wpol.ok());
  expect(CheckInputs(*cat, *fleet, *wpol, {}),
         {"policy.yaml:2: weight_class: 'infer' has no throughput for type 'ascend-910b' in cat.yaml"});
  // A running job on an unknown node, and one over-allocating a node.
  auto ghost =
      ParseRunning("- name: j\n  allocations:\n    - {node: n-0, cards: 1}\n    - {node: zz, cards: 1}\n", "run.yaml");
  ASSERT_TRUE(ghost.ok());
  expect(CheckInputs(*cat, *fleet, *pol, *ghost),
         {"run.yaml:4: running[0].allocations[1].node: node 'zz' is not in the fleet fleet.yaml"});
  auto over = ParseRunning(
      "- name: j\n  allocations: [{node: n-0, cards: 6}]\n- name: k\n  allocations:\n    - node: "
      "n-0\n      cards: 6\n",
      "run.yaml");
  ASSERT_TRUE(over.ok());
  expect(CheckInputs(*cat, *fleet, *pol, *over),
         {"run.yaml:6: running[1].allocations[0].cards: running jobs use 12 cards on node 'n-0', which has 8"});
  // Plan() and FleetShare() report the same errors.
  auto job = ParseJob("name: x\ntenant: t\nclass: llm-train\ncards: 1\ncompatible: [ascend]\n", "job.yaml");
  ASSERT_TRUE(job.ok());
  PlanRequest req{&*cat, &*badtype, &*pol, &*job, nullptr, 0};
  auto r = Plan(req);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("fleet.yaml:5: nodes[1].type"), std::string::npos) << r.status().message();
  req.fleet = &*fleet;
  req.running = &*over;
  r = Plan(req);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("run.yaml:6: running[1].allocations[0].cards"), std::string::npos)
      << r.status().message();
  auto share = FleetShare(*cat, *fleet, *wpol, {}, 0);
  ASSERT_FALSE(share.ok());
  EXPECT_NE(share.status().message().find("policy.yaml:2: weight_class"), std::string::npos)
      << share.status().message();
  // Bounds on a type the catalog lacks.
  auto bjob = ParseJob(
      "name: x\ntenant: t\nclass: llm-train\ncards: 1\ncompatible: [ascend]\nbounds:\n  ascend-910b: "
      "{max: 4}\n  moore: {max: 2}\n",
      "job.yaml");
  ASSERT_TRUE(bjob.ok());
  req.job = &*bjob;
  req.running = nullptr;
  r = Plan(req);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("job.yaml:8: bounds.moore: type 'moore' is not in the catalog cat.yaml"),
            std::string::npos)
      << r.status().message();
}
