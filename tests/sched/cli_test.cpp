// Tests of the `tessera plan` and `tessera bill` commands on the shipped examples: output, JSON, exit codes
// and error messages for bad files.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "tessera/sched.hpp"

// The source tree: $TESSERA_SOURCE_DIR, else the path CMake compiled in.
static const char* SourceDir() {
  const char* env = std::getenv("TESSERA_SOURCE_DIR");
  return env ? env : TESSERA_TEST_SOURCE_DIR;
}

namespace fs = std::filesystem;

namespace {

struct Out {
  int rc = -1;
  std::string out;
};

// Runs `tessera <args>` with stderr merged into stdout.
Out Tessera(const std::string& args) {
  const char* bin = std::getenv("TESSERA_BIN");
  EXPECT_NE(bin, nullptr);
  std::string cmd = std::string(bin) + " " + args + " 2>&1";
  Out r;
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return r;
  std::array<char, 4096> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) r.out.append(buf.data(), n);
  int st = pclose(p);
  r.rc = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return r;
}

std::string Ex(const std::string& f) { return std::string(SourceDir()) + "/examples/fleet/" + f; }

std::string BriefArgs(const std::string& catalog, const std::string& pool) {
  return "plan --catalog " + Ex("brief/" + catalog) + " --fleet " + Ex("brief/" + pool) + " --policy " +
         Ex("brief/policy-50.yaml") + " --job " + Ex("brief/job-960.yaml");
}

bool Has(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

}  // namespace

TEST(SchedCli, PlanPrintsTheBriefsAllocation) {
  if (!tessera::sched::HaveGlpk()) GTEST_SKIP() << "built without GLPK";
  Out r = Tessera(BriefArgs("catalog-equal.yaml", "pool-480-960.yaml"));
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_TRUE(Has(r.out, "4416.00 CNY")) << r.out;
  EXPECT_TRUE(Has(r.out, "50.0%")) << r.out;
  EXPECT_TRUE(Has(r.out, "nodes (120, cards per node)")) << r.out;
  EXPECT_TRUE(Has(r.out, "vpc-910b-00 8")) << r.out;
}

TEST(SchedCli, PlanJson) {
  if (!tessera::sched::HaveGlpk()) GTEST_SKIP() << "built without GLPK";
  Out r = Tessera(BriefArgs("catalog-910b-0.3x.yaml", "pool-960-960.yaml") + " --json");
  ASSERT_EQ(r.rc, 0) << r.out;
  auto j = nlohmann::json::parse(r.out);
  EXPECT_TRUE(j["placed"].get<bool>());
  EXPECT_EQ(j["cost_per_hour"], "4416.00");
  int64_t total = 0;
  for (const auto& n : j["by_node"]) total += n["cards"].get<int64_t>();
  EXPECT_EQ(total, 960);
  ASSERT_EQ(j["by_type"].size(), 2u);
  EXPECT_EQ(j["by_type"][0]["type"], "ascend-910b");
  EXPECT_EQ(j["by_type"][0]["cards"], 480);
}

TEST(SchedCli, PlanExplainsWhyAJobCannotBePlaced) {
  if (!tessera::sched::HaveGlpk()) GTEST_SKIP() << "built without GLPK";
  // The example calendar raises the floor to 60% on 2026-07-01: zone a's 480 free 910B cards are then too few.
  std::string args = "plan --catalog " + Ex("catalog.yaml") + " --fleet " + Ex("fleet.yaml") + " --policy " +
                     Ex("policy.yaml") + " --job " + Ex("job.yaml") + " --running " + Ex("running.yaml");
  Out before = Tessera(args + " --at 2026-06-30");
  EXPECT_EQ(before.rc, 0) << before.out;
  Out after = Tessera(args + " --at 2026-07-01 --json");
  ASSERT_EQ(after.rc, 1) << after.out;
  auto j = nlohmann::json::parse(after.out);
  EXPECT_FALSE(j["placed"].get<bool>());
  EXPECT_EQ(j["binding"], "floor");
  EXPECT_TRUE(Has(j["reason"], "needs 577 domestic cards in one zone")) << j.dump();
  EXPECT_TRUE(Has(j["reason"], "zone a has 480 free")) << j.dump();
  EXPECT_TRUE(Has(j["fix"], "at most 798 cards")) << j.dump();
}

TEST(SchedCli, PlanRejectsBadFilesWithFileLineField) {
  fs::path dir = fs::temp_directory_path() / ("tessera-cli-" + std::to_string(getpid()));
  fs::create_directories(dir);
  std::ofstream(dir / "job.yaml") << "name: x\ntenant: t\nclass: llm-train\ncards: lots\ncompatible: [ascend]\n";
  Out r = Tessera("plan --catalog " + Ex("catalog.yaml") + " --fleet " + Ex("fleet.yaml") + " --policy " +
                  Ex("policy.yaml") + " --job " + (dir / "job.yaml").string());
  EXPECT_EQ(r.rc, 2);
  EXPECT_TRUE(Has(r.out, "job.yaml:4: cards: 'lots' is not an integer")) << r.out;
  Out bad_date = Tessera("plan --catalog " + Ex("catalog.yaml") + " --fleet " + Ex("fleet.yaml") + " --policy " +
                         Ex("policy.yaml") + " --job " + Ex("job.yaml") + " --at 2026-02-30");
  EXPECT_EQ(bad_date.rc, 2);
  EXPECT_TRUE(Has(bad_date.out, "--at: '2026-02-30' is not a date")) << bad_date.out;
  fs::remove_all(dir);
}

// Issue #13: a cheaper mix 1 ppm under the floor made `tessera plan` exit 2 ("GLPK solutions keep violating the
// domestic floor by rounding"). 3 domestic cards at 9.00/h, exit 0; with d0 at 2 cards, exit 1 on the floor.
TEST(SchedCli, PlanNearTheFloorPlacesOrExplains) {
  if (!tessera::sched::HaveGlpk()) GTEST_SKIP() << "built without GLPK";
  fs::path dir = fs::temp_directory_path() / ("tessera-cli-floor-" + std::to_string(getpid()));
  fs::create_directories(dir);
  std::ofstream(dir / "catalog.yaml")
      << "currency: CNY\nprice_version: probe\ntypes:\n"
         "  - {name: dom, vendor: ascend, domestic: true, price_per_card_hour: 3, throughput: {llm-train: 1}}\n"
         "  - {name: for, vendor: nvidia, domestic: false, price_per_card_hour: 1, throughput: {llm-train: 1}}\n";
  auto fleet = [&](int d0) {
    std::ofstream(dir / "fleet.yaml") << "nodes:\n  - {id: d0, zone: a, type: dom, cards: " << d0
                                      << "}\n  - {id: f0, zone: a, type: for, cards: 8}\n";
  };
  std::ofstream(dir / "policy.yaml") << "unit: cards\nfloor: 66.6667%\n";
  std::ofstream(dir / "job.yaml")
      << "name: a\ntenant: probe\nclass: llm-train\ncards: 3\ncompatible: [ascend, nvidia]\n";
  const std::string args = "plan --catalog " + (dir / "catalog.yaml").string() + " --fleet " +
                           (dir / "fleet.yaml").string() + " --policy " + (dir / "policy.yaml").string() + " --job " +
                           (dir / "job.yaml").string() + " --at 2026-03-01 --json";
  fleet(8);
  Out r = Tessera(args);
  ASSERT_EQ(r.rc, 0) << r.out;
  auto j = nlohmann::json::parse(r.out);
  ASSERT_EQ(j["by_type"].size(), 1u) << r.out;
  EXPECT_EQ(j["by_type"][0]["type"], "dom");
  EXPECT_EQ(j["by_type"][0]["cards"], 3);
  EXPECT_EQ(j["cost_per_hour"], "9.00");
  fleet(2);
  Out no = Tessera(args);
  ASSERT_EQ(no.rc, 1) << no.out;
  EXPECT_EQ(nlohmann::json::parse(no.out)["binding"], "floor") << no.out;
  fs::remove_all(dir);
}

TEST(SchedCli, BillRecordReportAndCompliance) {
  if (!tessera::sched::HaveSqlite()) GTEST_SKIP() << "built without SQLite";
  fs::path dir = fs::temp_directory_path() / ("tessera-bill-" + std::to_string(getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  std::string db = " --db " + (dir / "l.db").string();
  std::string rec = "bill record" + db + " --catalog " + Ex("catalog.yaml") + " --job glm --tenant research";
  Out a = Tessera(rec + " --type ascend-910b --cards 480 --start 2026-03-01T22:00:00Z --end 2026-03-02T02:00:00Z");
  ASSERT_EQ(a.rc, 0) << a.out;
  EXPECT_TRUE(Has(a.out, "4608.00 CNY")) << a.out;
  Out b = Tessera(rec + " --type nvidia-h800 --cards 480 --start 2026-03-01T22:00:00Z --end 2026-03-02T02:00:00Z");
  ASSERT_EQ(b.rc, 0) << b.out;
  Out day = Tessera("bill" + db + " --by day --csv");
  ASSERT_EQ(day.rc, 0) << day.out;
  // Two hours of the brief's 480 + 480 on each side of midnight: 2 x 4416 per day.
  EXPECT_TRUE(Has(day.out, "2026-03-01,6912000,1920.00,8832.00,8832000000")) << day.out;
  EXPECT_TRUE(Has(day.out, "2026-03-02,6912000,1920.00,8832.00,8832000000")) << day.out;
  Out type = Tessera("bill" + db + " --job glm --by type");
  EXPECT_TRUE(Has(type.out, "17664.00")) << type.out;
  Out none = Tessera("bill" + db + " --tenant nobody");
  EXPECT_TRUE(Has(none.out, "0.00")) << none.out;
  Out comp = Tessera("bill compliance" + db + " --day 2026-03-01 --policy " + Ex("policy.yaml"));
  EXPECT_EQ(comp.rc, 0) << comp.out;
  EXPECT_TRUE(Has(comp.out, "50.0% against a floor of 50.0%")) << comp.out;
  EXPECT_TRUE(Has(comp.out, "COMPLIANT")) << comp.out;
  std::ofstream(dir / "strict.yaml") << "floor: 60%\n";
  Out strict = Tessera("bill compliance" + db + " --day 2026-03-01 --policy " + (dir / "strict.yaml").string());
  EXPECT_EQ(strict.rc, 1) << strict.out;
  EXPECT_TRUE(Has(strict.out, "NOT COMPLIANT")) << strict.out;
  Out bad = Tessera("bill" + db + " --by week");
  EXPECT_EQ(bad.rc, 2);
  EXPECT_TRUE(Has(bad.out, "--by 'week'")) << bad.out;
  fs::remove_all(dir);
}
