// tests/daemon/metrics_test: GET /metrics and the console's read-only endpoints.
//  * MetricsFormat: the exposition format itself — label and HELP escaping, cumulative histogram buckets
//    ending in +Inf with _sum and _count — checked line by line and by `promtool check metrics`.
//  * MetricsE2E: a real daemon with two tenants, jobs that run, wait, are requeued and resume from real
//    checkpoints (one also demoted to a cold tier); every scraped value is compared with the API's own
//    answers (fleet, jobs, attempts, checkpoints) and with the billing ledger read directly; a tenant
//    sees only its own tenant series, no token sees none, a bad token gets 401; promtool accepts every view.
// promtool comes from Debian's `prometheus` package (scripts/install-deps.sh); tests needing it skip without.
#include "daemon/metrics.hpp"

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <sys/stat.h>

#include <cstdlib>
#include <map>
#include <optional>

#include "daemon/harness.hpp"
#include "daemon/util.hpp"
#include "sched/sched.hpp"
#include "tessera/ckpt.hpp"

namespace tessera::daemon::testing {
namespace {

using json = nlohmann::json;
using namespace std::chrono_literals;

bool HavePromtool() { return Shell("command -v promtool >/dev/null 2>&1") == 0; }

// Runs `promtool check metrics` on `text`; returns its exit status and puts its output in *out.
int Promtool(const std::string& text, std::string* out) {
  std::string dir = MakeTempDir("promtool");
  WriteText(dir + "/m.txt", text);
  int rc = Shell("promtool check metrics < '" + dir + "/m.txt' 2>&1", out);
  Shell("rm -rf '" + dir + "'");
  return rc;
}

// ---- a reader of the text format, for comparing values (promtool checks the syntax) ----------------------

struct SampleLine {
  std::string name;
  std::map<std::string, std::string> labels;
  double value = 0;
};

std::vector<SampleLine> ParseExposition(const std::string& text) {
  std::vector<SampleLine> out;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t eol = text.find('\n', pos);
    std::string line = text.substr(pos, eol - pos);
    pos = eol == std::string::npos ? text.size() : eol + 1;
    if (line.empty() || line[0] == '#') continue;
    SampleLine s;
    size_t i = line.find_first_of("{ ");
    s.name = line.substr(0, i);
    if (line[i] == '{') {
      ++i;
      while (line[i] != '}') {
        size_t eq = line.find('=', i);
        std::string key = line.substr(i, eq - i), val;
        i = eq + 2;  // past ="
        while (line[i] != '"') {
          if (line[i] == '\\') {
            ++i;
            val += line[i] == 'n' ? '\n' : line[i];
          } else {
            val += line[i];
          }
          ++i;
        }
        s.labels[key] = val;
        ++i;  // past "
        if (line[i] == ',') ++i;
      }
      ++i;
    }
    std::string v = line.substr(line.find_first_not_of(' ', i));
    s.value = v == "+Inf" ? INFINITY : v == "-Inf" ? -INFINITY : std::strtod(v.c_str(), nullptr);
    out.push_back(s);
  }
  return out;
}

// The samples named `name` whose labels include all of `want`.
std::vector<SampleLine> Select(const std::vector<SampleLine>& all, const std::string& name,
                               const std::map<std::string, std::string>& want = {}) {
  std::vector<SampleLine> out;
  for (const auto& s : all) {
    if (s.name != name) continue;
    bool ok = true;
    for (const auto& [k, v] : want) ok = ok && s.labels.count(k) && s.labels.at(k) == v;
    if (ok) out.push_back(s);
  }
  return out;
}
std::optional<double> One(const std::vector<SampleLine>& all, const std::string& name,
                          const std::map<std::string, std::string>& want = {}) {
  auto s = Select(all, name, want);
  if (s.size() != 1) return std::nullopt;
  return s[0].value;
}
double Percent(const std::string& s) { return std::strtod(s.c_str(), nullptr) / 100.0; }  // "50.0%" -> 0.5

// ---- the format -----------------------------------------------------------------------------------------

TEST(MetricsFormat, EscapesLabelValuesAndHelpText) {
  metrics::Exposition x;
  x.Family("t_temperature", "gauge", "Help with a back\\slash and a\nnewline.");
  x.Sample({{"zone", "a\"b\\c\nd"}, {"type", "plain"}}, 1.5);
  x.Family("t_empty", "gauge", "No samples: left out.");
  std::string text = x.Text();
  EXPECT_EQ(text,
            "# HELP t_temperature Help with a back\\\\slash and a\\nnewline.\n"
            "# TYPE t_temperature gauge\n"
            "t_temperature{zone=\"a\\\"b\\\\c\\nd\",type=\"plain\"} 1.5\n");
  auto parsed = ParseExposition(text);
  ASSERT_EQ(parsed.size(), 1u);
  EXPECT_EQ(parsed[0].labels["zone"], "a\"b\\c\nd");  // round trip
  if (!HavePromtool()) GTEST_SKIP() << "promtool not installed (Debian package prometheus): format not re-checked";
  std::string out;
  EXPECT_EQ(Promtool(text, &out), 0) << out << text;
}

TEST(MetricsFormat, HistogramBucketsAreCumulativeWithInfSumAndCount) {
  metrics::Registry r;
  r.DeclareHistogram("t_seconds", "A test histogram.", {2, 1});  // bounds are sorted
  r.DeclareCounter("t_events_total", "A test counter.");
  for (double v : {0.5, 1.0, 1.5, 3.0}) r.Observe("t_seconds", v);
  r.Inc("t_events_total", {{"tenant", "a"}}, 2);
  r.Inc("t_events_total", {{"tenant", "b"}});
  metrics::Exposition x;
  r.Render(&x, [](const metrics::Labels& l) { return l[0].second != "b"; }, {{{"tenant", "c"}}, {{"tenant", "a"}}});
  EXPECT_EQ(x.Text(),
            "# HELP t_seconds A test histogram.\n"
            "# TYPE t_seconds histogram\n"
            "t_seconds_bucket{le=\"1\"} 2\n"  // 0.5 and 1.0 (le: less or equal)
            "t_seconds_bucket{le=\"2\"} 3\n"
            "t_seconds_bucket{le=\"+Inf\"} 4\n"
            "t_seconds_sum 6\n"
            "t_seconds_count 4\n"
            "# HELP t_events_total A test counter.\n"
            "# TYPE t_events_total counter\n"
            "t_events_total{tenant=\"a\"} 2\n"
            "t_events_total{tenant=\"c\"} 0\n");
  EXPECT_EQ(r.CounterValue("t_events_total", {{"tenant", "b"}}), 1);
  // A family whose series carry more than the tenant starts no tenant-only series at 0 (it would print a second
  // label set beside the real one).
  r.DeclareCounter("t_moves_total", "Another test counter.", /*zero_with_tenants=*/false);
  r.Inc("t_moves_total", {{"tenant", "a"}, {"reason", "cost"}});
  metrics::Exposition y;
  r.Render(&y, [](const metrics::Labels&) { return true; }, {{{"tenant", "a"}}});
  EXPECT_NE(y.Text().find("t_moves_total{tenant=\"a\",reason=\"cost\"} 1\n"), std::string::npos) << y.Text();
  EXPECT_EQ(y.Text().find("t_moves_total{tenant=\"a\"} 0"), std::string::npos) << y.Text();
  EXPECT_NE(y.Text().find("t_events_total{tenant=\"a\"} 2"), std::string::npos) << y.Text();
  EXPECT_EQ(metrics::FormatValue(0.25), "0.25");
  EXPECT_EQ(metrics::FormatValue(1e300 * 1e300), "+Inf");
  if (!HavePromtool()) GTEST_SKIP() << "promtool not installed (Debian package prometheus): format not re-checked";
  std::string out;
  EXPECT_EQ(Promtool(x.Text(), &out), 0) << out;
}

// One family per name, as Prometheus wants it: ExpositionProblems (the e2e scrapes below are checked with it)
// finds what once went wrong — the move counter printed with two label sets, {reason} beside {tenant} 0 — and
// the other ways of breaking a family; the daemon's registry, with a move and the per-tenant zero series, has none.
TEST(MetricsFormat, EachFamilyOnceWithOneSetOfLabelNames) {
  EXPECT_NE(ExpositionProblems("# HELP t_moves_total Moves.\n# TYPE t_moves_total counter\n"
                               "t_moves_total{reason=\"policy\"} 1\nt_moves_total{tenant=\"a\"} 0\n")
                .find("different label names"),
            std::string::npos);
  EXPECT_NE(ExpositionProblems("# HELP t_x X.\n# TYPE t_x gauge\nt_x 1\n# HELP t_x X.\n# TYPE t_x gauge\nt_x 2\n")
                .find("repeated"),
            std::string::npos);
  EXPECT_NE(ExpositionProblems("# HELP t_x X.\n# TYPE t_x gauge\nt_x{a=\"1\"} 1\nt_x{a=\"1\"} 2\n").find("twice"),
            std::string::npos);
  EXPECT_NE(ExpositionProblems("t_x 1\n").find("no # HELP"), std::string::npos);
  EXPECT_NE(ExpositionProblems("# HELP t_x X.\n# TYPE t_x gauge\n# HELP t_y Y.\n# TYPE t_y gauge\nt_y 1\nt_x 1\n")
                .find("outside its family"),
            std::string::npos);
  EXPECT_EQ(ExpositionProblems("# HELP t_s S.\n# TYPE t_s histogram\nt_s_bucket{le=\"1\"} 0\n"
                               "t_s_bucket{le=\"+Inf\"} 0\nt_s_sum 0\nt_s_count 0\n"),
            "");
  metrics::Registry r;
  r.DeclareCounter(metrics::kJobStarts, "Starts.");
  r.DeclareCounter(metrics::kJobMoves, "Moves.", /*zero_with_tenants=*/false);
  r.DeclareHistogram(metrics::kWakeLatency, "Latency.", {1, 2});
  r.Inc(metrics::kJobMoves, {{"tenant", "a"}, {"reason", "policy"}});
  r.Inc(metrics::kJobMoves, {{"tenant", "b"}, {"reason", "cost"}});
  r.Inc(metrics::kJobStarts, {{"tenant", "a"}});
  r.Observe(metrics::kWakeLatency, 1.5);
  metrics::Exposition x;
  r.Render(&x, [](const metrics::Labels&) { return true; }, {{{"tenant", "a"}}, {{"tenant", "b"}}});
  EXPECT_EQ(ExpositionProblems(x.Text()), "") << x.Text();
}

// ---- end to end -----------------------------------------------------------------------------------------

const char* kCatalog = R"(currency: CNY
price_version: test-1
types:
  - {name: ascend-910b, vendor: ascend, domestic: true, price_per_card_hour: 2.4, throughput: {mlp-train: 0.5}}
  - {name: nvidia-h800, vendor: nvidia, domestic: false, price_per_card_hour: 6.8, throughput: {mlp-train: 1.0}}
)";
const char* kFleet = R"(emulated: true
nodes:
  - {id: n-910b, zone: z, type: ascend-910b, cards: 2}
  - {id: n-h800, zone: z, type: nvidia-h800, cards: 2}
)";

// The daemon's tenant flags for alice (tok-alice) and bob (tok-bob): a `--tenants FILE` of token hashes (mode
// 0600) where this daemon takes one, else `--tenant NAME=TOKEN`.
std::vector<std::string> TenantFlags(const std::string& dir) {
  std::string help;
  Shell(Bin() + " daemon --help 2>&1", &help);
  if (help.find("--tenants") == std::string::npos) return {"--tenant", "alice=tok-alice", "--tenant", "bob=tok-bob"};
  std::string yaml = "tenants:\n";
  for (const char* name : {"alice", "bob"}) {
    std::string hash;
    Shell(fmt::format("printf %s tok-{} | sha256sum", name), &hash);
    yaml += fmt::format("  - {{name: {}, token_sha256: {}}}\n", name, hash.substr(0, 64));
  }
  WriteText(dir + "/tenants.yaml", yaml);
  EXPECT_EQ(::chmod((dir + "/tenants.yaml").c_str(), 0600), 0);
  return {"--tenants", dir + "/tenants.yaml"};
}

struct Reply {
  int status = 0;
  std::string content_type, body;
};

class MetricsE2E : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = MakeTempDir("metrics");
    // A daemon running as root may run jobs as an unprivileged user: what they write must be reachable by it.
    ASSERT_EQ(::chmod(dir_.c_str(), 0755), 0);
    ASSERT_EQ(::mkdir((dir_ + "/out").c_str(), 0777), 0);
    ASSERT_EQ(::chmod((dir_ + "/out").c_str(), 0777), 0);
    d_ = std::make_unique<DaemonProcess>(dir_ + "/state", TenantFlags(dir_));
    d_->Start();
    admin_ = d_->Admin();
    alice_ = d_->ClientFor("tok-alice");
    bob_ = d_->ClientFor("tok-bob");
    ASSERT_TRUE(admin_ && alice_ && bob_);
    json body = {{"fleet", Doc("fleet.yaml", kFleet)},
                 {"catalog", Doc("catalog.yaml", kCatalog)},
                 {"policy", Doc("policy.yaml", "floor: 25%\n")}};
    auto r = admin_->Put("/v1/fleet", body);
    ASSERT_TRUE(r.ok()) << r.status().ToString();

    // alice: a long job with a cold tier; it gets two real checkpoints (one demoted to cold), is requeued,
    // and resumes from the newest.
    std::string yaml = SleepJobYaml("long", 1, 1, 120, dir_ + "/out/long-", "[ascend]");
    yaml.replace(yaml.find("env: {"), 6, "env: {TESSERA_CKPT_COLD: \"" + dir_ + "/cold\", ");
    long_ = Submit(*alice_, yaml);
    ASSERT_TRUE(WaitFor([&] { return Job(long_)["state"] == "running"; }, 30s));
    WriteCheckpoints(Job(long_)["checkpoint_dir"], dir_ + "/cold");
    // bob: a short job that runs and is billed.
    short_ = Submit(*bob_, SleepJobYaml("short", 0, 1, 1, dir_ + "/out/short-", "[nvidia]"));
    // alice: a job that waits for capacity (2 Ascend cards while the long job holds 1 of 2) with the planner's
    // reason (a job no zone could ever hold is refused at submit).
    huge_ = Submit(*alice_, SleepJobYaml("huge", 0, 2, 1, dir_ + "/out/huge-", "[ascend]"));
    ASSERT_TRUE(WaitFor([&] { return Job(short_)["state"] == "succeeded"; }, 60s));
    auto rq = alice_->Post(fmt::format("/v1/jobs/{}/requeue", long_), json::object());
    ASSERT_TRUE(rq.ok()) << rq.status().ToString();
    ASSERT_TRUE(WaitFor(
        [&] {
          json j = Job(long_);
          return j["state"] == "running" && j["attempts"] == 2;
        },
        60s));
    // Every ended attempt billed, and the waiting job has its position.
    ASSERT_TRUE(WaitFor(
        [&] {
          for (int64_t id : {long_, short_}) {
            json j = Job(id);  // kept: a range-for over a temporary's member would dangle
            for (const auto& a : j["attempts_detail"])
              if (!a["ended_ms"].is_null() && !a["billed"].get<bool>()) return false;
          }
          return Job(huge_)["position"] == 1;
        },
        30s));
  }
  void TearDown() override {
    d_.reset();
    if (!HasFailure()) Shell("rm -rf '" + dir_ + "' '" + dir_ + "/state.daemon.log' '" + dir_ + "/state-work'");
  }

  void WriteCheckpoints(const std::string& root, const std::string& cold) {
    auto w = ckpt::CheckpointWriter::Open(root, 0, 1);
    ASSERT_TRUE(w.ok()) << w.status().ToString();
    std::vector<float> weights(1000, 0.5f);
    for (int64_t step : {10, 20}) {
      ASSERT_TRUE((*w)->Save(step, {{"w", ckpt::dtype::kFloat32, {1000}, weights.data()}}).ok());
      ASSERT_TRUE((*w)->Wait().ok());
    }
    ckpt::TierConfig tiers;
    tiers.hot = root;
    tiers.cold = cold;
    Status s = ckpt::Demote(tiers, 10, ckpt::Tier::kCold, /*delete_source=*/false);
    ASSERT_TRUE(s.ok()) << s.ToString();
  }

  int64_t Submit(Client& c, const std::string& yaml) {
    auto r = c.Post("/v1/jobs", {{"source", "job.yaml"}, {"yaml", yaml}, {"base_dir", dir_}});
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return r.ok() ? (*r)["id"].get<int64_t>() : -1;
  }
  json Job(int64_t id) {
    auto r = admin_->Get(fmt::format("/v1/jobs/{}", id));
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return r.ok() ? *r : json::object();
  }
  json Get(Client& c, const std::string& path) {
    auto r = c.Get(path);
    EXPECT_TRUE(r.ok()) << path << ": " << r.status().ToString();
    return r.ok() ? *r : json::object();
  }
  // A raw GET with an optional bearer token ("" = none), keeping the status and the content type.
  Reply Raw(const std::string& path, const std::string& token) {
    json info = json::parse(ReadText(d_->state() + "/daemon.json"));
    std::string addr = info["address"];
    httplib::Client cli(addr.substr(0, addr.rfind(':')), std::stoi(addr.substr(addr.rfind(':') + 1)));
    httplib::Headers h;
    if (!token.empty()) h.emplace("Authorization", "Bearer " + token);
    auto res = cli.Get(path.c_str(), h);
    if (!res) return {};
    return {res->status, res->get_header_value("Content-Type"), res->body};
  }
  std::string AdminToken() {
    std::string t = ReadText(d_->state() + "/token");
    while (!t.empty() && (t.back() == '\n' || t.back() == ' ')) t.pop_back();
    return t;
  }

  std::string dir_;
  std::unique_ptr<DaemonProcess> d_;
  std::unique_ptr<Client> admin_, alice_, bob_;
  int64_t long_ = -1, short_ = -1, huge_ = -1;
};

TEST_F(MetricsE2E, AdminScrapeAgreesWithTheApiAndTheLedger) {
  Reply r = Raw("/metrics", AdminToken());
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.content_type, "text/plain; version=0.0.4; charset=utf-8");
  EXPECT_EQ(ExpositionProblems(r.body), "") << r.body;
  auto m = ParseExposition(r.body);

  // Cards per type and zone: the sums of /v1/fleet's nodes.
  json fleet = Get(*admin_, "/v1/fleet");
  std::map<std::string, std::array<int64_t, 3>> want;  // type -> total, used, free
  for (const auto& n : fleet["nodes"]) {
    auto& w = want[n["type"].get<std::string>()];
    w[0] += n["cards"].get<int64_t>(), w[1] += n["used"].get<int64_t>(), w[2] += n["free"].get<int64_t>();
  }
  ASSERT_EQ(want.size(), 2u);
  for (const auto& [type, w] : want) {
    std::map<std::string, std::string> l = {{"type", type}, {"zone", "z"}, {"emulated", "true"}};
    EXPECT_EQ(One(m, "tessera_fleet_cards", l), w[0]) << type;
    EXPECT_EQ(One(m, "tessera_fleet_cards_used", l), w[1]) << type;
    EXPECT_EQ(One(m, "tessera_fleet_cards_free", l), w[2]) << type;
  }
  EXPECT_EQ(want["ascend-910b"][1], 1) << "the long job runs on one 910B card";

  // Jobs per state and the queue: /v1/jobs?all=1.
  json jobs = Get(*admin_, "/v1/jobs?all=1")["jobs"];
  std::map<std::string, int> per_state;
  std::map<std::string, int64_t> starts, resumes;
  int64_t wakeups = 0;
  for (const auto& j : jobs) {
    per_state[j["state"]] += 1;
    json detail = Job(j["id"]);
    for (const auto& a : detail["attempts_detail"]) {
      starts[j["tenant"]] += 1;
      if (!a["resume_from"].get<std::string>().empty()) resumes[j["tenant"]] += 1;
      if (!a["wake_latency_ms"].is_null()) ++wakeups;
    }
  }
  for (const char* s : {"queued", "running", "succeeded", "failed", "cancelled"})
    EXPECT_EQ(One(m, "tessera_jobs", {{"state", s}}), per_state[s]) << s;
  EXPECT_EQ(per_state["queued"], 1);
  EXPECT_EQ(One(m, "tessera_queue_length"), per_state["queued"]);
  auto wait = One(m, "tessera_queue_oldest_wait_seconds");
  ASSERT_TRUE(wait);
  EXPECT_GT(*wait, 0);
  EXPECT_LE(*wait, (NowMs() - Job(huge_)["submitted_ms"].get<int64_t>()) / 1000.0 + 1);
  for (const char* t : {"alice", "bob"})
    for (const char* s : {"queued", "running", "succeeded"}) {
      int n = 0;
      for (const auto& j : jobs) n += j["tenant"] == t && j["state"] == s;
      auto v = One(m, "tessera_tenant_jobs", {{"tenant", t}, {"state", s}});
      EXPECT_EQ(v.value_or(0), n) << t << " " << s;
    }

  // Share, floor, cost per hour: /v1/fleet and the running jobs' allocations.
  EXPECT_DOUBLE_EQ(One(m, "tessera_domestic_floor", {{"unit", "cards"}}).value_or(-1), Percent(fleet["floor_today"]));
  EXPECT_DOUBLE_EQ(One(m, "tessera_domestic_share", {{"unit", "cards"}}).value_or(-1), Percent(fleet["share_now"]));
  std::map<std::string, double> cost;
  for (const auto& j : jobs)
    if (j["state"] == "running")
      for (const auto& t : j["allocation"]["by_type"])
        cost[t["type"]] += std::strtod(t["cost_per_hour"].get<std::string>().c_str(), nullptr);
  for (const char* t : {"ascend-910b", "nvidia-h800"})
    EXPECT_NEAR(One(m, "tessera_cost_per_hour", {{"type", t}, {"currency", "CNY"}}).value_or(-1), cost[t], 0.005) << t;
  EXPECT_NEAR(cost["ascend-910b"], 2.4, 1e-9);
  json cost_api = Get(*admin_, "/v1/cost");
  for (const auto& t : cost_api["by_type"])
    EXPECT_DOUBLE_EQ(One(m, "tessera_cost_per_hour", {{"type", t["type"]}, {"currency", "CNY"}}).value_or(-1),
                     t["cost_per_hour_micro"].get<int64_t>() / 1e6)
        << t;
  EXPECT_EQ(cost_api["cost_per_hour_micro"], 2400000);

  // The bill per type and tenant: the ledger itself, as `tessera bill --tenant T --by type` reads it.
  auto ledger = sched::Ledger::Open(d_->state() + "/ledger.db");
  ASSERT_TRUE(ledger.ok()) << ledger.status().ToString();
  int billed_series = 0;
  for (const char* tenant : {"alice", "bob"}) {
    sched::BillFilter f;
    f.tenant = tenant;
    auto bill = (*ledger)->Report(f, sched::GroupBy::kType);
    ASSERT_TRUE(bill.ok());
    EXPECT_FALSE(bill->lines.empty()) << tenant << " ran and was billed";
    for (const auto& l : bill->lines) {
      ++billed_series;
      EXPECT_DOUBLE_EQ(One(m, "tessera_billed_amount_total", {{"type", l.key}, {"tenant", tenant}, {"currency", "CNY"}})
                           .value_or(-1),
                       static_cast<double>(l.amount) / 1e6);
      EXPECT_EQ(One(m, "tessera_billed_card_seconds_total", {{"type", l.key}, {"tenant", tenant}}).value_or(-1),
                l.card_seconds);
    }
  }
  EXPECT_EQ(static_cast<int>(Select(m, "tessera_billed_amount_total").size()), billed_series);

  // Event counters: the attempts the API lists.
  EXPECT_EQ(One(m, "tessera_job_starts_total", {{"tenant", "alice"}}), starts["alice"]);
  EXPECT_EQ(One(m, "tessera_job_starts_total", {{"tenant", "bob"}}), starts["bob"]);
  EXPECT_EQ(starts["alice"], 2);
  EXPECT_EQ(One(m, "tessera_job_resumes_total", {{"tenant", "alice"}}), resumes["alice"]);
  EXPECT_EQ(resumes["alice"], 1) << "the requeued job resumed from its checkpoint";
  EXPECT_EQ(One(m, "tessera_job_preemptions_total", {{"tenant", "alice"}}), 1);
  EXPECT_EQ(One(m, "tessera_job_failures_total", {{"tenant", "alice"}}), 0);
  EXPECT_EQ(One(m, "tessera_job_failures_total", {{"tenant", "bob"}}), 0);
  EXPECT_EQ(One(m, "tessera_job_preemptions_total", {{"tenant", "bob"}}), 0) << "known tenants start at 0";
  EXPECT_EQ(One(m, "tessera_wakeup_latency_seconds_count"), wakeups);
  EXPECT_EQ(One(m, "tessera_wakeup_latency_seconds_bucket", {{"le", "+Inf"}}), wakeups);
  auto passes = One(m, "tessera_scheduling_pass_duration_seconds_count");
  ASSERT_TRUE(passes);
  EXPECT_GT(*passes, 0);
  EXPECT_EQ(One(m, "tessera_scheduling_pass_duration_seconds_bucket", {{"le", "+Inf"}}), *passes);
  double prev = 0;  // buckets are cumulative
  for (const auto& b : Select(m, "tessera_scheduling_pass_duration_seconds_bucket")) {
    EXPECT_GE(b.value, prev);
    prev = b.value;
  }

  // Checkpoints per tier: /v1/jobs/ID/checkpoints of every job, and the manifests themselves.
  std::map<std::string, std::pair<int64_t, int64_t>> tiers;
  for (const auto& j : jobs) {
    json ck = Get(*admin_, fmt::format("/v1/jobs/{}/checkpoints", j["id"].get<int64_t>()));
    for (const auto& c : ck["checkpoints"])
      for (const auto& t : c["tiers"]) {
        tiers[t].first += 1;
        tiers[t].second += c["bytes"].get<int64_t>();
      }
  }
  EXPECT_EQ(tiers["hot"].first, 2);
  EXPECT_EQ(tiers["cold"].first, 1);
  auto d10 = ckpt::Describe(Job(long_)["checkpoint_dir"], 10);
  ASSERT_TRUE(d10.ok());
  EXPECT_EQ(tiers["cold"].second, static_cast<int64_t>(d10->bytes));
  for (const char* t : {"hot", "warm", "cold"}) {
    EXPECT_EQ(One(m, "tessera_checkpoints_committed", {{"tier", t}}), tiers[t].first) << t;
    EXPECT_EQ(One(m, "tessera_checkpoint_bytes", {{"tier", t}}), tiers[t].second) << t;
  }
}

TEST_F(MetricsE2E, TenantsSeeOnlyTheirOwnSeriesAndABadTokenIsRefused) {
  auto has_tenant = [](const std::vector<SampleLine>& m, const std::string& t) {
    for (const auto& s : m)
      if (s.labels.count("tenant") && (t.empty() || s.labels.at("tenant") == t)) return true;
    return false;
  };
  auto admin = ParseExposition(Raw("/metrics", AdminToken()).body);
  EXPECT_TRUE(has_tenant(admin, "alice"));
  EXPECT_TRUE(has_tenant(admin, "bob"));

  Reply ra = Raw("/metrics", "tok-alice");
  ASSERT_EQ(ra.status, 200);
  EXPECT_EQ(ExpositionProblems(ra.body), "") << ra.body;
  auto alice = ParseExposition(ra.body);
  EXPECT_TRUE(has_tenant(alice, "alice"));
  EXPECT_FALSE(has_tenant(alice, "bob")) << ra.body;
  EXPECT_TRUE(One(alice, "tessera_billed_amount_total", {{"tenant", "alice"}, {"type", "ascend-910b"}}));
  Reply rb = Raw("/metrics", "tok-bob");
  auto bob = ParseExposition(rb.body);
  EXPECT_FALSE(has_tenant(bob, "alice")) << rb.body;
  EXPECT_EQ(One(bob, "tessera_job_starts_total", {{"tenant", "bob"}}), 1);

  Reply anon = Raw("/metrics", "");
  ASSERT_EQ(anon.status, 200);
  auto none = ParseExposition(anon.body);
  EXPECT_FALSE(has_tenant(none, "")) << "no tenant series without a token:\n" << anon.body;
  EXPECT_TRUE(Select(none, "tessera_billed_amount_total").empty());
  // The fleet-level series are the same for everyone.
  for (const char* name :
       {"tessera_fleet_cards", "tessera_fleet_cards_used", "tessera_jobs", "tessera_cost_per_hour"}) {
    auto a = Select(admin, name), n = Select(none, name), t = Select(alice, name);
    ASSERT_EQ(a.size(), n.size()) << name;
    ASSERT_EQ(a.size(), t.size()) << name;
    for (size_t i = 0; i < a.size(); ++i) {
      EXPECT_EQ(a[i].labels, n[i].labels);
      EXPECT_EQ(a[i].value, n[i].value) << name;
      EXPECT_EQ(a[i].value, t[i].value) << name;
    }
  }
  Reply bad = Raw("/metrics", "not-a-token");
  EXPECT_EQ(bad.status, 401);
  EXPECT_NE(bad.body.find("not known"), std::string::npos) << bad.body;

  if (!HavePromtool()) GTEST_SKIP() << "promtool not installed (Debian package prometheus): views not format-checked";
  for (const auto& [who, body] : {std::pair<std::string, std::string>{"admin", Raw("/metrics", AdminToken()).body},
                                  {"alice", ra.body},
                                  {"bob", rb.body},
                                  {"anonymous", anon.body}}) {
    std::string out;
    EXPECT_EQ(Promtool(body, &out), 0) << who << ": promtool check metrics:\n" << out << "\n" << body;
  }
}

TEST_F(MetricsE2E, ConsoleEndpointsAnswerPerTenant) {
  // /v1/whoami
  EXPECT_EQ(Get(*alice_, "/v1/whoami"), (json{{"tenant", "alice"}, {"admin", false}}));
  EXPECT_TRUE(Get(*admin_, "/v1/whoami")["admin"].get<bool>());

  // /v1/bill/daily: alice's rows only, adding up to the ledger's total for alice.
  auto ledger = sched::Ledger::Open(d_->state() + "/ledger.db");
  ASSERT_TRUE(ledger.ok());
  for (const char* tenant : {"alice", "bob"}) {
    json b = Get(tenant == std::string("alice") ? *alice_ : *bob_, "/v1/bill/daily");
    sched::BillFilter f;
    f.tenant = tenant;
    auto bill = (*ledger)->Report(f, sched::GroupBy::kDay);
    ASSERT_TRUE(bill.ok());
    int64_t sum = 0, cs = 0;
    for (const auto& r : b["rows"]) {
      EXPECT_EQ(r["tenant"], tenant);
      sum += r["amount_micro"].get<int64_t>();
      cs += r["card_seconds"].get<int64_t>();
    }
    EXPECT_GT(b["rows"].size(), 0u);
    EXPECT_EQ(sum, bill->amount) << tenant;
    EXPECT_EQ(cs, bill->card_seconds) << tenant;
    EXPECT_EQ(b["total_micro"], bill->amount);
  }
  json all = Get(*admin_, "/v1/bill/daily");
  std::set<std::string> tenants;
  for (const auto& r : all["rows"]) tenants.insert(r["tenant"]);
  EXPECT_EQ(tenants, (std::set<std::string>{"alice", "bob"}));
  Reply csv = Raw("/v1/bill/daily?format=csv", "tok-bob");
  EXPECT_EQ(csv.status, 200);
  EXPECT_EQ(csv.content_type, "text/csv; charset=utf-8");
  EXPECT_EQ(csv.body.rfind("day,type,tenant,card_seconds,card_hours,amount,amount_micro\n", 0), 0u) << csv.body;
  EXPECT_EQ(csv.body.find("alice"), std::string::npos) << csv.body;
  EXPECT_NE(csv.body.find(",nvidia-h800,bob,"), std::string::npos) << csv.body;

  // /v1/compliance: today's entry is the ledger's compliance report for today.
  json c = Get(*bob_, "/v1/compliance?days=3");
  ASSERT_EQ(c["days"].size(), 3u);
  json today = c["days"][2];
  EXPECT_EQ(today["day"], sched::FormatDate(sched::Today()));
  auto policy = sched::ParsePolicy("floor: 25%\n");
  ASSERT_TRUE(policy.ok());
  auto rep = (*ledger)->ComplianceReport(sched::Today(), *policy);
  ASSERT_TRUE(rep.ok());
  EXPECT_EQ(today["share_ppm"], rep->share);
  EXPECT_EQ(today["floor_ppm"], rep->floor);
  EXPECT_EQ(today["compliant"], rep->compliant);
  EXPECT_EQ(today["total_card_seconds"], rep->total_card_seconds);
  EXPECT_TRUE(today["used"].get<bool>());
  EXPECT_EQ(c["floor_today"], "25.0%");
  EXPECT_EQ(Raw("/v1/compliance?days=0", "tok-bob").status, 400);
  EXPECT_EQ(Raw("/v1/compliance?days=x", "tok-bob").status, 400);

  // /v1/jobs/ID/checkpoints: the owner and admin see the tiers; another tenant gets "not found".
  json ck = Get(*alice_, fmt::format("/v1/jobs/{}/checkpoints", long_));
  ASSERT_EQ(ck["checkpoints"].size(), 2u);
  EXPECT_EQ(ck["checkpoints"][0]["step"], 10);
  EXPECT_EQ(ck["checkpoints"][0]["tiers"], (json{"hot", "cold"}));
  EXPECT_EQ(ck["checkpoints"][1]["tiers"], (json{"hot"}));
  json j = Job(long_);
  EXPECT_EQ(j["checkpoints"], (json{10, 20})) << "the same steps as GET /v1/jobs/ID";
  EXPECT_EQ(Raw(fmt::format("/v1/jobs/{}/checkpoints", long_), "tok-bob").status, 404);
  EXPECT_EQ(Raw(fmt::format("/v1/jobs/{}/checkpoints", long_), "").status, 401);

  // The console's files are served without a token; the data never is.
  Reply index = Raw("/", "");
  EXPECT_EQ(index.status, 200);
  EXPECT_EQ(index.content_type, "text/html; charset=utf-8");
  EXPECT_NE(index.body.find("/console/app.js"), std::string::npos);
  EXPECT_EQ(Raw("/console/app.js", "").status, 200);
  EXPECT_EQ(Raw("/console/nope.js", "").status, 404);
  EXPECT_EQ(Raw("/v1/bill/daily", "").status, 401);
}

}  // namespace
}  // namespace tessera::daemon::testing
