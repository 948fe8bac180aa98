// tests/fuzz/tenant_input_fuzz_test: a seeded property test of the parsers that read what a tenant controls —
// the daemon's request bodies (nesting bound, then JSON, then quoting in an error), job and fleet files, and
// checkpoint manifests. Each input is a corpus entry (valid files, and the inputs that once crashed or hung a
// reader) mutated by a seeded generator; each parser must answer OK or a non-empty error, never crash, and an
// accepted manifest must write back to one that reads the same.
//
// `make test` runs FUZZ_ITERS=3000 (default) with seed FUZZ_SEED=1 (default), in the plain tree and in the
// ASan+UBSan tree of scripts/test-sanitize.sh; longer by hand: FUZZ_ITERS=200000 FUZZ_SEED=<any number>
// build-asan/tests/fuzz/fuzz_tenant_input_test (docs/daemon.md, "Security model").
// A failure prints the seed, the iteration and the input's first bytes.
#include <gtest/gtest.h>

#include <cstdlib>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "ckpt/format.hpp"
#include "common/nesting.hpp"
#include "daemon/jobspec.hpp"
#include "daemon/security.hpp"
#include "fuzz/mutate.hpp"

namespace tessera::daemon {
namespace {

using json = nlohmann::json;

using fuzz::EnvOr;
using fuzz::Head;
using fuzz::Mutate;

const std::string kDeep = std::string(100000, '[') + std::string(100000, ']');

std::vector<std::string> JobCorpus() {
  return {
      "name: train\nclass: mlp-train\ncards: 2\ncompatible: [ascend, nvidia]\npriority: 3\n"
      "command: [./train, --steps, \"300\"]\nenv: {A: '1', B: \"x y\"}\ngrace: 30s\n",
      "name: n\nclass: c\ncards: 1\ncommand: " + kDeep + "\n",                       // crashed: 100,000 nested arrays
      "name: n\nclass: c\ncards: 1\ncommand: [a]\ncommand: [b]\n",                   // a key given twice
      "name: \"x\\u202egnp.exe\"\nclass: c\ncards: 1\ncommand: [a]\n",               // a bidi override in the name
      "name: " + std::string(100000, 'n') + "\nclass: c\ncards: 1\ncommand: [a]\n",  // a 100,000-byte name
      "name: n\nclass: c\ncards: 4.5\ncommand: [a]\n",
      "name: &a n\nclass: *a\ncards: 1\ncommand: [*a]\n",
  };
}

std::vector<std::string> FleetCorpus() {
  return {"emulated: true\nnodes:\n  - {id: n1, zone: z, type: ascend-910b, cards: 2}\n", "nodes: " + kDeep + "\n",
          "emulated: true\nemulated: false\nnodes: []\n"};
}

std::vector<std::string> BodyCorpus() {
  return {json{{"source", "job.yaml"}, {"yaml", JobCorpus()[0]}, {"compatible", {"ascend"}}}.dump(),
          kDeep,
          "{\"yaml\":" + kDeep + "}",
          "[1,2,3]",
          "{\"yaml\":5}",
          "null"};
}

std::vector<std::string> ManifestCorpus() {
  ckpt::Manifest m;
  m.step = 9;
  m.world = 2;
  m.created_unix = 1700000000;
  m.files = {{0, ckpt::ShardFileName(0, 2), 1000, 0xdeadbeef}, {1, ckpt::ShardFileName(1, 2), 900, 0x01020304}};
  m.tensors.push_back({"w",
                       DType::kBfloat16,
                       {10, 4},
                       ckpt::Sharding::kRowSharded,
                       {{0, 0, 5, 100, 140, 0x11111111}, {1, 5, 5, 96, 136, 0x22222222}}});
  std::string good = ckpt::ManifestToJson(m);
  m.digest = false;
  return {good, ckpt::ManifestToJson(m), "{\"format\":" + kDeep + "}", "{\"format\":\"tessera-ckpt/2\",\"step\":"};
}

// What the daemon does with a body before its handlers: the nesting bound, the parse, and the quote of a body
// that is not an object (the step that overflowed the stack).
std::string BodyAnswer(const std::string& body) {
  if (Status s = CheckNesting(body, Syntax::kJson, "the request body"); !s.ok()) return s.message();
  json j = json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return "the request body is not JSON";
  if (!j.is_object()) return j.dump(-1, ' ', false, json::error_handler_t::replace).substr(0, 80) + " ";
  for (const auto& [k, v] : j.items()) (void)v.dump(-1, ' ', false, json::error_handler_t::replace);
  return "object";
}

TEST(TenantInputFuzz, ParsersAnswerEveryMutatedInputWithoutCrashing) {
  const uint64_t seed = EnvOr("FUZZ_SEED", 1), iters = EnvOr("FUZZ_ITERS", 3000);
  std::mt19937_64 rng(seed);
  const auto jobs = JobCorpus(), fleets = FleetCorpus(), bodies = BodyCorpus(), manifests = ManifestCorpus();
  int accepted_jobs = 0, accepted_manifests = 0;
  for (uint64_t i = 0; i < iters; ++i) {
    const std::string where = "seed " + std::to_string(seed) + ", iteration " + std::to_string(i);
    const bool keep = i < 8;  // the corpus entries themselves first, unmutated
    switch (i % 4) {
      case 0: {
        std::string y = jobs[(i / 4) % jobs.size()];
        if (!keep) y = Mutate(y, rng);
        auto r = ParseJobSpec(y, "job.yaml", "/b", "t", {"ascend"});
        ASSERT_TRUE(r.ok() || !r.status().message().empty()) << where << ": " << Head(y);
        if (r.ok()) {
          ++accepted_jobs;
          EXPECT_TRUE(CheckNoControlChars("name", r->job.name).ok()) << where << ": " << Head(y);
        }
        break;
      }
      case 1: {
        std::string y = fleets[(i / 4) % fleets.size()];
        if (!keep) y = Mutate(y, rng);
        auto r = ParseFleetSpec(y, "fleet.yaml");
        ASSERT_TRUE(r.ok() || !r.status().message().empty()) << where << ": " << Head(y);
        break;
      }
      case 2: {
        std::string b = bodies[(i / 4) % bodies.size()];
        if (!keep) b = Mutate(b, rng);
        ASSERT_FALSE(BodyAnswer(b).empty()) << where << ": " << Head(b);
        break;
      }
      default: {
        std::string t = manifests[(i / 4) % manifests.size()];
        if (!keep) t = Mutate(t, rng);
        auto m = ckpt::ManifestFromJson(t, "manifest.json");
        ASSERT_TRUE(m.ok() || !m.status().message().empty()) << where << ": " << Head(t);
        if (m.ok()) {
          ++accepted_manifests;
          auto back = ckpt::ManifestFromJson(ckpt::ManifestToJson(*m), "written back");
          ASSERT_TRUE(back.ok()) << where << ": " << back.status().ToString() << "\n" << Head(t);
          EXPECT_EQ(back->step, m->step);
          EXPECT_EQ(back->TotalBytes(), m->TotalBytes());
          EXPECT_EQ(back->tensors.size(), m->tensors.size());
        }
        break;
      }
    }
  }
  // The valid corpus entries are read (a parser that refused everything would pass the loop above).
  EXPECT_GT(accepted_jobs, 0);
  EXPECT_GT(accepted_manifests, 0);
}

}  // namespace
}  // namespace tessera::daemon
