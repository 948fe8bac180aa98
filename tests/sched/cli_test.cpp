// Tests of the `tessera plan`, `tessera bill` and `tessera predict` commands on the shipped examples: output,
// JSON, exit codes and error messages for bad files (predict: the seed's configuration of docs/model.md, each island's
// path per collective as built and in the what-ifs).
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <tuple>

#include "sched/perf_model.hpp"
#include "sched/sched.hpp"

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

std::string ReferenceArgs(const std::string& catalog, const std::string& pool) {
  return "plan --catalog " + Ex("reference/" + catalog) + " --fleet " + Ex("reference/" + pool) + " --policy " +
         Ex("reference/policy-50.yaml") + " --job " + Ex("reference/job-960.yaml");
}

bool Has(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

}  // namespace

TEST(SchedCli, PlanPrintsTheReferenceScenariosAllocation) {
  if (!tessera::sched::HaveGlpk()) GTEST_SKIP() << "built without GLPK";
  Out r = Tessera(ReferenceArgs("catalog-equal.yaml", "pool-480-960.yaml"));
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_TRUE(Has(r.out, "4416.00 CNY")) << r.out;
  EXPECT_TRUE(Has(r.out, "50.0%")) << r.out;
  EXPECT_TRUE(Has(r.out, "nodes (120, cards per node)")) << r.out;
  EXPECT_TRUE(Has(r.out, "vpc-910b-00 8")) << r.out;
}

TEST(SchedCli, PlanJson) {
  if (!tessera::sched::HaveGlpk()) GTEST_SKIP() << "built without GLPK";
  Out r = Tessera(ReferenceArgs("catalog-910b-0.3x.yaml", "pool-960-960.yaml") + " --json");
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

// A job that names its model, in the reference scenario's third case (910B at 0.3 x an H800, 960 free of each, 50%
// floor) with the performance model's figures of docs/model.md: the sum of the catalog's throughputs places
// 480 + 480; the model predicts that mix and places the one of the most predicted tokens per CNY instead.
TEST(SchedCli, PlanByTheModelShowsThePredictedStep) {
  if (!tessera::sched::HaveGlpk()) GTEST_SKIP() << "built without GLPK";
  fs::path dir = fs::temp_directory_path() / ("tessera-cli-model-" + std::to_string(getpid()));
  fs::create_directories(dir);
  std::ofstream(dir / "catalog.yaml")
      << "currency: CNY\nprice_version: v\nmodel: {net_gbps: 200, pcie_gbs: 25, shm_gbs: 2, latency_us: 20, "
         "host_adam_gbs: 200}\ntypes:\n"
         "  - {name: ascend-910b, vendor: ascend, domestic: true, price_per_card_hour: 2.4, throughput: {llm-train: "
         "0.3}, model: {tflops: 320, mfu: 0.4, fabric_gbs: 196, hbm_gbs: 1600}}\n"
         "  - {name: nvidia-h800, vendor: nvidia, domestic: false, price_per_card_hour: 6.8, throughput: {llm-train: "
         "1.0}, model: {tflops: 989, mfu: 0.4, fabric_gbs: 200, hbm_gbs: 3350}}\n";
  std::ofstream(dir / "job.yaml") << "name: m\ntenant: t\nclass: llm-train\ncards: 960\ncompatible: [ascend, "
                                     "nvidia]\nmodel: {params: 7B, class: dp}\n";
  const std::string args = "plan --catalog " + (dir / "catalog.yaml").string() + " --fleet " +
                           Ex("reference/pool-960-960.yaml") + " --policy " + Ex("reference/policy-50.yaml") +
                           " --job ";
  Out text = Tessera(args + (dir / "job.yaml").string());
  ASSERT_EQ(text.rc, 0) << text.out;
  EXPECT_TRUE(Has(text.out, "predicted step:")) << text.out;
  EXPECT_TRUE(Has(text.out, "binding term:          compute: ")) << text.out;
  Out r = Tessera(args + (dir / "job.yaml").string() + " --json");
  ASSERT_EQ(r.rc, 0) << r.out;
  auto j = nlohmann::json::parse(r.out);
  const auto& p = j["predicted"];
  EXPECT_EQ(p["model_class"], "dp");
  EXPECT_NEAR(p["step_s"].get<double>(),
              p["compute_s"].get<double>() + p["exposed_comm_s"].get<double>() + p["optimizer_s"].get<double>(), 1e-9);
  EXPECT_FALSE(p["binding_detail"].get<std::string>().empty());
  // The linear planner's 480 + 480 (the same job without its model), predicted: more CNY per million tokens.
  std::ofstream(dir / "plain.yaml")
      << "name: m\ntenant: t\nclass: llm-train\ncards: 960\ncompatible: [ascend, nvidia]\n";
  Out plain = Tessera(args + (dir / "plain.yaml").string() + " --json");
  ASSERT_EQ(plain.rc, 0) << plain.out;
  auto pj = nlohmann::json::parse(plain.out);
  EXPECT_FALSE(pj.contains("predicted"));
  ASSERT_EQ(pj["by_type"].size(), 2u);
  EXPECT_EQ(pj["by_type"][0]["cards"], 480);
  auto catalog = tessera::sched::LoadCatalog((dir / "catalog.yaml").string());
  ASSERT_TRUE(catalog.ok());
  auto s =
      tessera::sched::perf::MixScenario(*catalog, {7e9, "dp", 0}, {&catalog->types[0], &catalog->types[1]}, {480, 480});
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  auto linear = tessera::sched::perf::Predict(*s);
  ASSERT_TRUE(linear.ok());
  EXPECT_LT(p["cost_per_million_tokens"].get<double>(), linear->cost_per_million_tokens) << r.out;
  EXPECT_NE(j["by_type"], pj["by_type"]) << "the model places another mix here";
  // Bad model input: named with its value.
  std::ofstream(dir / "bad.yaml") << "name: m\ntenant: t\nclass: llm-train\ncards: 8\ncompatible: [ascend]\n"
                                     "model: {params: 7B, class: moe}\n";
  Out bad = Tessera(args + (dir / "bad.yaml").string());
  EXPECT_EQ(bad.rc, 2);
  EXPECT_TRUE(Has(bad.out, "bad.yaml:6: model.class: 'moe' is not a model class (one of: dp,")) << bad.out;
  fs::remove_all(dir);
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

// A cheaper mix 1 ppm under the floor made `tessera plan` exit 2 ("GLPK solutions keep violating the
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
  // Two hours of the reference scenario's 480 + 480 on each side of midnight: 2 x 4416 per day.
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

// The rows of `tessera bill` (card-seconds, card-hours, amount) as printed: "  KEY  SECONDS  HOURS  AMOUNT".
std::vector<std::tuple<std::string, int64_t, int64_t, int64_t>> BillRows(const std::string& out) {
  std::vector<std::tuple<std::string, int64_t, int64_t, int64_t>> rows;
  std::istringstream in(out);
  std::string line;
  auto hundredths = [](const std::string& v) {
    auto dot = v.find('.');
    return std::stoll(v.substr(0, dot)) * 100 + std::stoll(v.substr(dot + 1));
  };
  while (std::getline(in, line)) {
    std::istringstream f(line);
    std::string key, secs, hours, amount;
    if (!(f >> key >> secs >> hours >> amount) || secs.find_first_not_of("0123456789") != std::string::npos) continue;
    rows.emplace_back(key, std::stoll(secs), hundredths(hours), hundredths(amount));
  }
  return rows;
}

// A report opens an existing ledger read-only: a wrong path is exit 3 naming it, and no file appears. With no
// --db the daemon's STATE/ledger.db is read (TESSERA_HOME). Rows printed with two decimals add up to the total.
TEST(SchedCli, BillFindsTheDaemonLedgerAndItsRowsAddUp) {
  if (!tessera::sched::HaveSqlite()) GTEST_SKIP() << "built without SQLite";
  fs::path dir = fs::temp_directory_path() / ("tessera-bill-home-" + std::to_string(getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  ::unsetenv("TESSERA_LEDGER");
  Out missing = Tessera("bill --db " + (dir / "typo.db").string());
  EXPECT_EQ(missing.rc, 3) << missing.out;
  EXPECT_TRUE(Has(missing.out, (dir / "typo.db").string())) << missing.out;
  EXPECT_FALSE(fs::exists(dir / "typo.db")) << "a report must not create a ledger";
  ::setenv("TESSERA_HOME", dir.c_str(), 1);
  Out none = Tessera("bill");
  EXPECT_EQ(none.rc, 3) << none.out;
  EXPECT_TRUE(Has(none.out, (dir / "ledger.db").string())) << none.out;
  // 18 s of one 910B card (0.012 CNY) and of one H800 (0.034 CNY): 0.01 + 0.03 would not make the 0.05 total.
  std::string rec = "bill record --db " + (dir / "ledger.db").string() + " --catalog " + Ex("catalog.yaml") +
                    " --job demo --tenant t --cards 1 --start 2026-03-01T00:00:00Z --end 2026-03-01T00:00:18Z";
  ASSERT_EQ(Tessera(rec + " --type ascend-910b").rc, 0);
  ASSERT_EQ(Tessera(rec + " --type nvidia-h800").rc, 0);
  Out bill = Tessera("bill --by type");
  ::unsetenv("TESSERA_HOME");
  ASSERT_EQ(bill.rc, 0) << bill.out;
  auto rows = BillRows(bill.out);
  ASSERT_EQ(rows.size(), 3u) << bill.out;
  auto [tkey, tsecs, thours, tamount] = rows.back();
  EXPECT_EQ(tkey, "total");
  EXPECT_EQ(tsecs, 36);
  EXPECT_EQ(thours, std::get<2>(rows[0]) + std::get<2>(rows[1])) << bill.out;
  EXPECT_EQ(tamount, 5) << bill.out;
  EXPECT_EQ(tamount, std::get<3>(rows[0]) + std::get<3>(rows[1])) << bill.out;
  EXPECT_TRUE(Has(bill.out, "add up to the total")) << bill.out;
  Out today = Tessera("bill compliance --db " + (dir / "ledger.db").string() + " --policy " + Ex("policy.yaml"));
  EXPECT_EQ(today.rc, 0) << today.out;
  EXPECT_TRUE(Has(today.out, "compliance on " + tessera::sched::FormatDate(tessera::sched::Today()))) << today.out;
  Out yday = Tessera("bill compliance --db " + (dir / "ledger.db").string() + " --day yesterday --policy " +
                     Ex("policy.yaml"));
  EXPECT_TRUE(Has(yday.out, "compliance on " + tessera::sched::FormatDate(tessera::sched::Today() - 1))) << yday.out;
  fs::remove_all(dir);
}

// `bill --job J` lists each attempt (the daemon bills one row per card type, all with the attempt's start) with
// its mix, seconds and amount; rows rounded to hundredths add up to the total as printed.
TEST(SchedCli, BillByAttemptShowsEachAttemptsMixAndAddsUp) {
  if (!tessera::sched::HaveSqlite()) GTEST_SKIP() << "built without SQLite";
  fs::path dir = fs::temp_directory_path() / ("tessera-bill-attempt-" + std::to_string(getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  std::string db = " --db " + (dir / "l.db").string();
  auto rec = [&](const std::string& job, const std::string& type, int cards, const std::string& from,
                 const std::string& to, int attempt) {
    Out r = Tessera("bill record" + db + " --catalog " + Ex("catalog.yaml") + " --job " + job + " --tenant t --type " +
                    type + " --cards " + std::to_string(cards) + " --start 2026-03-01T00:" + from +
                    "Z --end 2026-03-01T00:" + to + "Z --attempt " + std::to_string(attempt));
    ASSERT_EQ(r.rc, 0) << r.out;
  };
  // 18 s of one 910B (0.012 CNY), 18 s of one H800 (0.034 CNY): 0.01 + 0.03 would not make the 0.05 total; then
  // a mixed attempt of 2 + 2 cards for 10 s (attempt 4: the daemon's attempt 3 never started its program and was
  // not billed); another job's row is left out.
  rec("lm", "ascend-910b", 1, "00:00", "00:18", 1);
  rec("lm", "nvidia-h800", 1, "00:20", "00:38", 2);
  rec("lm", "ascend-910b", 2, "01:00", "01:10", 4);
  rec("lm", "nvidia-h800", 2, "01:00", "01:10", 4);
  rec("other", "nvidia-h800", 8, "00:00", "10:00", 1);
  Out out = Tessera("bill" + db + " --job lm");
  ASSERT_EQ(out.rc, 0) << out.out;
  EXPECT_TRUE(Has(out.out, "job lm by attempt")) << out.out;
  // "  lm  N  START  MIX...  SECONDS  CARD-SECONDS  HOURS  AMOUNT", then "  total  SECONDS CARD-SECONDS HOURS AMOUNT"
  std::vector<std::vector<std::string>> rows;
  std::istringstream in(out.out);
  for (std::string line; std::getline(in, line);) {
    std::istringstream f(line);
    std::vector<std::string> w;
    for (std::string x; f >> x;) w.push_back(x);
    if (!w.empty() && (w[0] == "lm" || w[0] == "total")) rows.push_back(w);
  }
  ASSERT_EQ(rows.size(), 4u) << out.out;
  EXPECT_TRUE(Has(out.out, "lm                     1  2026-03-01T00:00:00Z 1xascend-910b ")) << out.out;
  EXPECT_TRUE(Has(out.out, "lm                     2  2026-03-01T00:00:20Z 1xnvidia-h800 ")) << out.out;
  EXPECT_TRUE(Has(out.out, "lm                     4  2026-03-01T00:01:00Z 2xascend-910b + 2xnvidia-h800 ")) << out.out;
  auto hundredths = [](const std::string& v) {
    auto dot = v.find('.');
    return std::stoll(v.substr(0, dot)) * 100 + std::stoll(v.substr(dot + 1));
  };
  int64_t seconds = 0, card_seconds = 0, amount = 0;
  for (size_t i = 0; i < 3; ++i) {
    const auto& w = rows[i];
    seconds += std::stoll(w[w.size() - 4]);
    card_seconds += std::stoll(w[w.size() - 3]);
    amount += hundredths(w.back());
  }
  const auto& total = rows.back();
  EXPECT_EQ(std::stoll(total[1]), 18 + 18 + 10) << out.out;
  EXPECT_EQ(seconds, std::stoll(total[1])) << out.out;
  EXPECT_EQ(card_seconds, std::stoll(total[2])) << out.out;
  EXPECT_EQ(card_seconds, 18 + 18 + 40) << out.out;
  EXPECT_EQ(amount, hundredths(total.back())) << out.out;
  EXPECT_TRUE(Has(out.out, "add up to the total")) << out.out;
  Out csv = Tessera("bill" + db + " --job lm --csv");
  ASSERT_EQ(csv.rc, 0) << csv.out;
  EXPECT_TRUE(Has(csv.out, "job,attempt,start,mix,seconds,card_seconds,card_hours,amount,amount_micro")) << csv.out;
  EXPECT_TRUE(Has(csv.out, "lm,1,2026-03-01T00:00:00Z,1xascend-910b,18,18,0.01,0.01,12000")) << csv.out;
  EXPECT_TRUE(Has(csv.out, "lm,4,2026-03-01T00:01:00Z,2xascend-910b + 2xnvidia-h800,10,40,")) << csv.out;
  Out bad =
      Tessera("bill record" + db + " --catalog " + Ex("catalog.yaml") +
              " --job lm --tenant t --type ascend-910b --cards 1 --start 2026-03-01 --end 2026-03-02 --attempt 0");
  EXPECT_NE(bad.rc, 0) << bad.out;
  EXPECT_TRUE(Has(bad.out, "--attempt")) << bad.out;
  Out type = Tessera("bill" + db + " --job lm --by type");
  EXPECT_TRUE(Has(type.out, "job lm by type")) << type.out;
  fs::remove_all(dir);
}

namespace {

// docs/model.md's seed configuration: 64 + 64 cards on 8-card hosts, 130B, ZeRO-3 with offload, RoCE 200 Gb/s.
const std::string kSeed =
    "predict --island ascend-910b=64@8 --island nvidia-h800=64@8 --tflops ascend-910b=320 --tflops nvidia-h800=989 "
    "--mfu ascend-910b=0.4 --mfu nvidia-h800=0.4 --fabric-gbs ascend-910b=196 --fabric-gbs nvidia-h800=200 "
    "--params 130B --zero 3 --offload --host-adam-gbs 200 --seq 2048 --batch 512 --accum 8 --overlap 1 "
    "--net-gbps 200 --shm-gbs 2 --pcie-gbs 25 --latency-us 20 --catalog " +
    Ex("reference/catalog-equal.yaml");

TEST(PredictCli, TheSeedConfigurationInJsonMatchesTheModel) {
  Out r = Tessera(kSeed + " --versus nvidia-h800 --json");
  ASSERT_EQ(r.rc, 0) << r.out;
  auto j = nlohmann::json::parse(r.out);
  // The same scenario through the C++ API.
  using namespace tessera::sched::perf;
  Scenario s;
  for (auto [type, tf, fabric, price, dom] : {std::tuple{"ascend-910b", 320.0, 196.0, 2'400'000, true},
                                              std::tuple{"nvidia-h800", 989.0, 200.0, 6'800'000, false}}) {
    IslandSpec is;
    is.type = type;
    is.family = dom ? "npu" : "cuda";  // the catalog's vendors: ascend, nvidia
    is.cards = 64;
    is.tflops = tf;
    is.mfu = 0.4;
    is.fabric_gbs = fabric;
    is.price_per_card_hour = price;
    is.domestic = dom;
    s.islands.push_back(is);
  }
  s.model.params = 130e9;
  s.model.zero = 3;
  s.model.offload = true;
  s.model.host_adam_gbs = 200;
  s.model.seq = 2048;
  s.model.batch = 512;
  s.model.accum = 8;
  s.model.overlap = 1;
  s.links = {2, 25, 0, 25, 20e-6, 0, 1};
  auto p = Predict(s);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_DOUBLE_EQ(j["tokens_per_s"].get<double>(), p->tokens_per_s);
  EXPECT_EQ(j["island_path"], "as built");
  EXPECT_EQ(j["island_reduce"], "f32");
  EXPECT_EQ(j["nics_per_node"], 1);
  EXPECT_EQ(j["binding"], p->binding);
  EXPECT_EQ(j["cost_per_hour"], "588.80");  // 64 x 2.4 + 64 x 6.8
  EXPECT_DOUBLE_EQ(j["domestic_card_share"].get<double>(), 0.5);
  EXPECT_EQ(j["islands"][0]["samples_per_micro_batch"], p->split[0]);
  // --versus: all 128 cards H800s, the cost per hour of 128 x 6.8.
  EXPECT_EQ(j["versus"]["cost_per_hour"], "870.40");
  EXPECT_EQ(j["versus"]["islands"][0]["cards"], 128);
  EXPECT_DOUBLE_EQ(j["versus_tokens_ratio"].get<double>(), p->tokens_per_s / j["versus"]["tokens_per_s"].get<double>());
}

TEST(PredictCli, AsBuiltTheSeedsBf16GradientsTakeHcclAndNcclWidenedAndTheWhatIfsStageThem) {
  // The catalog's vendors give the families (ascend -> npu, nvidia -> cuda); --family overrides them.
  for (const std::string extra :
       {"", " --island-ccl", " --island-host-reduce", " --family nvidia-h800=npu --island-host-reduce",
        " --island-host-path", " --island-reduce native"}) {
    Out r = Tessera(kSeed + extra + " --json");
    ASSERT_EQ(r.rc, 0) << r.out;
    auto j = nlohmann::json::parse(r.out);
    const auto& cs = j["collectives"];
    ASSERT_EQ(cs.size(), 2u) << r.out;
    EXPECT_EQ(cs[0]["name"], "gradient reduce-scatter");
    const bool host = extra == " --island-host-path";
    const bool host_reduce = extra.find("--island-host-reduce") != std::string::npos;
    const bool native = extra == " --island-reduce native";
    EXPECT_EQ(j["island_path"], host ? "host" : host_reduce ? "host reduce" : "as built") << extra;
    EXPECT_EQ(j["island_reduce"], native ? "native" : "f32") << extra;
    // The bf16 reduce-scatter: as built both islands on their library, widened to f32 on the device, each rank
    // staging its shard of f32 partial sums, 1/64 of the buffer at twice the width (native: in bf16). With
    // --island-host-reduce the npu island (no device bridge) stages the whole buffer on the host engine.
    for (int i : {0, 1}) {
      const bool staged_whole = host || (host_reduce && (i == 0 || extra.find("=npu") != std::string::npos));
      EXPECT_EQ(cs[0]["islands"][i]["path"], staged_whole ? "host" : "library") << extra << i;
      EXPECT_EQ(cs[0]["islands"][i]["widened"], !staged_whole && !native) << extra << i;
      EXPECT_EQ(cs[0]["islands"][i]["native"], !staged_whole && native) << extra << i;
      EXPECT_DOUBLE_EQ(cs[0]["islands"][i]["staged_bytes"].get<double>(),
                       cs[0]["bytes"].get<double>() * (staged_whole ? 1
                                                       : native     ? 1.0 / 64
                                                                    : 2.0 / 64))
          << extra << i;
    }
    // The bf16 parameter allgathers are no reduction: on both libraries unless the host path is asked for.
    for (int i : {0, 1}) EXPECT_EQ(cs[1]["islands"][i]["path"], host ? "host" : "library") << extra;
  }
  Out text = Tessera(kSeed);
  EXPECT_NE(text.out.find("island 0 (ascend-910b): library, widened to f32 on the device"), std::string::npos)
      << text.out;
  EXPECT_NE(text.out.find("island phases as built, island reduce f32, 1 NIC a node"), std::string::npos) << text.out;
  Out old = Tessera(kSeed + " --island-host-reduce");
  EXPECT_NE(old.out.find("island 0 (ascend-910b): host, stages"), std::string::npos) << old.out;
  EXPECT_NE(old.out.find("16-bit reductions of the npu family's pinned-staging rank on the host engine"),
            std::string::npos)
      << old.out;
  Out native = Tessera(kSeed + " --island-reduce native --nics-per-node 8");
  EXPECT_NE(native.out.find("island 0 (ascend-910b): library, 16-bit reduced in its own type"), std::string::npos)
      << native.out;
  EXPECT_NE(native.out.find("island reduce native, 8 NICs a node"), std::string::npos) << native.out;
  for (const std::string both : {" --island-ccl --island-host-path", " --island-host-reduce --island-host-path"}) {
    Out r = Tessera(kSeed + both);
    EXPECT_EQ(r.rc, 2) << both << r.out;
    EXPECT_NE(r.out.find("excludes"), std::string::npos) << r.out;
  }
}

TEST(PredictCli, NicsPerNodeSpeedTheNetworkBoundSeed) {
  // The seed is bound by the network of one 200 Gb/s port a node; eight rail-aligned ports move its bridge and its
  // rings across hosts eight times as fast (the step then gains less: compute and the optimizer stay). Bad counts
  // are usage errors naming the value.
  auto tokens = [](const std::string& extra) {
    Out r = Tessera(kSeed + extra + " --json");
    EXPECT_EQ(r.rc, 0) << r.out;
    return nlohmann::json::parse(r.out)["tokens_per_s"].get<double>();
  };
  EXPECT_GT(tokens(" --nics-per-node 8"), 1.5 * tokens(""));
  EXPECT_DOUBLE_EQ(tokens(" --nics-per-node 1"), tokens(""));
  Out bad = Tessera(kSeed + " --nics-per-node 0");
  EXPECT_EQ(bad.rc, 2) << bad.out;
  EXPECT_NE(bad.out.find("--nics-per-node: 0 is not a positive count"), std::string::npos) << bad.out;
  Out reduce = Tessera(kSeed + " --island-reduce bf16");
  EXPECT_EQ(reduce.rc, 2) << reduce.out;
  EXPECT_NE(reduce.out.find("bf16"), std::string::npos) << reduce.out;
}

TEST(PredictCli, TextNamesEveryTermAndTheBindingOne) {
  Out r = Tessera(kSeed);
  ASSERT_EQ(r.rc, 0) << r.out;
  for (const char* part : {"split per micro-batch of 512 sequences:", "compute:", "communication:",
                           "parameter allgather (forward and backward) x16", "island allgather",
                           "optimizer:", "sum of parts:", "cost:           588.80 CNY/h",
                           "domestic share: 50.0% of the cards", "binding term:   communication"})
    EXPECT_NE(r.out.find(part), std::string::npos) << part << "\n" << r.out;
}

// --preset reference-128 is docs/model.md's seed; flags given override it.
TEST(PredictCli, ThePresetIsTheSeedAndFlagsOverrideIt) {
  Out seed = Tessera(kSeed + " --versus nvidia-h800");
  Out preset = Tessera("predict --preset reference-128 --catalog " + Ex("reference/catalog-equal.yaml") +
                       " --versus nvidia-h800");
  ASSERT_EQ(preset.rc, 0) << preset.out;
  EXPECT_EQ(preset.out, seed.out);
  Out more = Tessera("predict --preset reference-128 --params 7B --json");
  ASSERT_EQ(more.rc, 0) << more.out;
  std::string seven_args = kSeed.substr(0, kSeed.find(" --catalog"));
  seven_args.replace(seven_args.find("--params 130B"), 13, "--params 7B");
  Out seven = Tessera(seven_args + " --json");
  EXPECT_EQ(nlohmann::json::parse(more.out)["step_s"], nlohmann::json::parse(seven.out)["step_s"]) << more.out;
}

// Whatever the model lacks is reported at once, each input with its flag; a catalog's model: figures fill them.
TEST(PredictCli, EveryMissingInputIsNamedAtOnceWithItsFlag) {
  Out r = Tessera("predict --island nvidia-h800=8 --island ascend-910b=8 --params 7B --seq 2048 --batch 32");
  EXPECT_EQ(r.rc, 2) << r.out;
  for (const char* flag :
       {"--tflops nvidia-h800=", "--mfu nvidia-h800=", "--tflops ascend-910b=", "--mfu ascend-910b=",
        "--fabric-gbs nvidia-h800=", "--hbm-gbs ascend-910b=", "--net-gbps", "--preset reference-128"})
    EXPECT_NE(r.out.find(flag), std::string::npos) << flag << "\n" << r.out;
  EXPECT_EQ(r.out.find("bandwidth is 0"), std::string::npos) << r.out;
  Out none = Tessera("predict --seq 2048");
  EXPECT_EQ(none.rc, 2) << none.out;
  for (const char* flag : {"--island", "--params", "--batch"})
    EXPECT_NE(none.out.find(flag), std::string::npos) << flag;
  fs::path dir = fs::temp_directory_path() / ("tessera-predict-model-" + std::to_string(getpid()));
  fs::create_directories(dir);
  std::ofstream(dir / "catalog.yaml")
      << "currency: CNY\nprice_version: v\nmodel: {net_gbps: 200, pcie_gbs: 25, shm_gbs: 2, latency_us: 20, "
         "host_adam_gbs: 200}\ntypes:\n"
         "  - {name: ascend-910b, vendor: ascend, domestic: true, price_per_card_hour: 2.4, throughput: {llm-train: "
         "0.3}, model: {tflops: 320, mfu: 0.4, fabric_gbs: 196, hbm_gbs: 1600}}\n"
         "  - {name: nvidia-h800, vendor: nvidia, domestic: false, price_per_card_hour: 6.8, throughput: {llm-train: "
         "1.0}, model: {tflops: 989, mfu: 0.4, fabric_gbs: 200, hbm_gbs: 3350}}\n";
  Out filled = Tessera(
      "predict --island nvidia-h800=8 --island ascend-910b=8 --params 7B --seq 2048 --batch 32 "
      "--device-gbs 22 --catalog " +
      (dir / "catalog.yaml").string());
  EXPECT_EQ(filled.rc, 0) << filled.out;
  EXPECT_NE(filled.out.find("tokens/s:"), std::string::npos) << filled.out;
  fs::remove_all(dir);
}

TEST(PredictCli, BadInputIsNamed) {
  struct Case {
    std::string args, says;
  } cases[] = {
      {"predict --island a=0 --rate a=1 --params 1M --seq 8 --batch 8",
       "--island a: cards '0' is not a positive integer"},
      {"predict --island a=8 --rate b=1 --params 1M --seq 8 --batch 8",
       "--rate: type 'b' is not one of the --island types"},
      {"predict --island a=8 --rate a=fast --params 1M --seq 8 --batch 8",
       "--rate a: 'fast' is not a non-negative number"},
      {"predict --island a=8 --rate a=1 --params 1M --seq 8 --batch 8 --grad-dtype f8", "--grad-dtype: 'f8'"},
      {"predict --island a=8 --rate a=1 --params 1M --seq 8 --batch 8 --overlap 2", "overlap 2 is not in [0, 1]"},
      {"predict --island a=8 --rate a=1 --params 1M --seq 8 --batch 8 --catalog " + Ex("reference/catalog-equal.yaml"),
       "type 'a' is not in the catalog"},
      {"predict --island a=8 --rate a=1 --params 1M --seq 8 --batch 8 --family a=rocm",
       "island 0 (a): device family 'rocm' is not one of cuda, npu, musa"},
      {"predict --island a=8 --rate a=1 --params 1M --seq 8 --batch 8 --family b=npu",
       "--family: type 'b' is not one of the --island types"},
      {"predict --island a=8 --rate a=1 --params 1M --seq 8 --batch 8 --family npu",
       "--family: 'npu' is not TYPE=FAMILY"},
  };
  for (const auto& c : cases) {
    Out r = Tessera(c.args);
    EXPECT_EQ(r.rc, 2) << c.args << "\n" << r.out;
    EXPECT_NE(r.out.find(c.says), std::string::npos) << c.args << "\n" << r.out;
  }
}

}  // namespace
