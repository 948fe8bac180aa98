// tests/fuzz/api_fuzz_test: a seeded property test of every route of the daemon's API, end to end against a real
// daemon on loopback. Each request is a route (with a job id that exists, one that does not, one no int64 holds),
// a query, a token (the admin's, a tenant's, none, a wrong one) and a body mutated from a corpus (valid job and
// fleet documents and the bodies that once crashed the daemon: 100,000 nested arrays, a bidi override in a name,
// a 100,000-byte name). Every answer must be an HTTP status the API documents, every error a JSON object with an
// "error" string, and the daemon must answer /v1/health after each batch. No fleet is registered with a document
// that the daemon could place a job on, so nothing that the fuzz submits ever runs. In the ASan+UBSan tree the
// daemon is that tree's `tessera daemon`: a sanitizer report kills it (the next request fails) or, for a leak, is
// written at its exit; either way its log must hold none, and a failure prints the log's end.
//
// FUZZ_ITERS (default 300 requests) and FUZZ_SEED (default 1) for longer runs by hand; TESSERA_BIN (which ctest
// sets) names the binary whose daemon it starts:
// TESSERA_BIN=build-asan/tessera FUZZ_ITERS=20000 FUZZ_SEED=N build-asan/tests/fuzz/fuzz_api_test.
#include <gtest/gtest.h>
#include <httplib.h>
#include <sys/stat.h>

#include <cstdio>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "daemon/harness.hpp"
#include "fuzz/mutate.hpp"

namespace tessera::daemon::testing {
namespace {

using json = nlohmann::json;
using fuzz::EnvOr;
using fuzz::Head;
using fuzz::Mutate;

struct Answer {
  int status = -1;
  std::string body;
};

Answer Send(const std::string& host, int port, const std::string& method, const std::string& path,
            const std::string& body, const std::string& token) {
  httplib::Client cli(host, port);
  cli.set_connection_timeout(5, 0);
  cli.set_read_timeout(15, 0);
  httplib::Headers h;
  if (!token.empty()) h.emplace("Authorization", "Bearer " + token);
  httplib::Result r = method == "GET"    ? cli.Get(path, h)
                      : method == "POST" ? cli.Post(path, h, body, "application/json")
                                         : cli.Put(path, h, body, "application/json");
  if (!r) return {-1, httplib::to_string(r.error())};
  return {r->status, r->body};
}

// A sanitizer's report in the daemon's log: "==PID==ERROR: AddressSanitizer: ..." (or LeakSanitizer),
// "FILE:LINE:COL: runtime error: ..." (UBSan).
bool HasSanitizerReport(const std::string& log) {
  return log.find("Sanitizer:") != std::string::npos || log.find("runtime error:") != std::string::npos;
}

// Prints the end of the daemon's log when the test has failed: where a sanitizer's report is.
struct LogOnFailure {
  std::string path;
  ~LogOnFailure() {
    if (!::testing::Test::HasFailure()) return;
    const std::string log = ReadText(path);
    const size_t keep = 12000;
    std::fprintf(stderr, "--- the daemon's log (%s), its last %zu bytes:\n%s\n", path.c_str(), keep,
                 log.size() > keep ? log.substr(log.size() - keep).c_str() : log.c_str());
  }
};

TEST(ApiFuzz, EveryRouteAnswersEveryMutatedRequest) {
  const uint64_t seed = EnvOr("FUZZ_SEED", 1), iters = EnvOr("FUZZ_ITERS", 300);
  const std::string dir = MakeTempDir("apifuzz");
  ASSERT_EQ(::chmod(dir.c_str(), 0755), 0);
  const LogOnFailure log{dir + "/state.daemon.log"};  // DaemonProcess's log: STATE.daemon.log
  const std::string tenant_token = "fuzz-tenant-token-0123456789";
  const std::string tenants = WriteTenantsFile(dir + "/tenants.yaml", {{"alice", tenant_token}});
  DaemonProcess d(dir + "/state", {"--tenants", tenants});
  ASSERT_NO_FATAL_FAILURE(d.Start());
  std::string admin = ReadText(d.state() + "/token");
  while (!admin.empty() && (admin.back() == '\n' || admin.back() == ' ')) admin.pop_back();
  const json addr = json::parse(ReadText(d.state() + "/daemon.json"));
  const std::string a = addr["address"].get<std::string>();
  const std::string host = a.substr(0, a.rfind(':'));
  const int port = std::stoi(a.substr(a.rfind(':') + 1));

  // One queued job of each caller: routes under /v1/jobs/ID reach a real row (no fleet: it never runs).
  const std::string job = "name: fuzz\nclass: llm-train\ncards: 1\ncompatible: [ascend]\ncommand: [/bin/true]\n";
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  std::vector<std::string> bodies = {
      json{{"source", "job.yaml"}, {"yaml", job}, {"base_dir", dir}}.dump(),
      json{{"source", "job.yaml"}, {"yaml", "name: \"x\\u202egnp.exe\"\nclass: c\ncards: 1\ncommand: [/bin/true]\n"}}
          .dump(),
      json{{"yaml", "name: " + std::string(100000, 'n') + "\nclass: c\ncards: 1\ncommand: [/bin/true]\n"}}.dump(),
      json{{"fleet", {{"source", "f.yaml"}, {"yaml", "nodes: []\n"}}}}.dump(),
      json{{"source", "p.yaml"}, {"yaml", "floor: 0.5\n"}}.dump(),
      deep,
      "{\"yaml\":" + deep + "}",
      "{}",
      "null",
  };
  std::set<int64_t> ids;
  for (const auto& tok : {admin, tenant_token}) {
    Answer r = Send(host, port, "POST", "/v1/jobs", bodies[0], tok);
    ASSERT_EQ(r.status, 201) << r.body;
    ids.insert(json::parse(r.body)["id"].get<int64_t>());
  }
  const std::vector<std::pair<std::string, std::string>> routes = {
      {"GET", "/v1/health"},
      {"POST", "/v1/jobs"},
      {"GET", "/v1/jobs"},
      {"GET", "/v1/jobs?all=1"},
      {"GET", "/v1/jobs/ID"},
      {"POST", "/v1/jobs/ID/cancel"},
      {"POST", "/v1/jobs/ID/requeue"},
      {"GET", "/v1/jobs/ID/logs"},
      {"GET", "/v1/jobs/ID/logs?tail=Q"},
      {"GET", "/v1/jobs/ID/logs?offset=Q"},
      {"GET", "/v1/fleet"},
      {"PUT", "/v1/fleet"},
      {"PUT", "/v1/policy"},
      {"GET", "/metrics"},
      {"GET", "/"},
      {"GET", "/console/app.js"},
      {"GET", "/v1/whoami"},
      {"GET", "/v1/cost"},
      {"GET", "/v1/bill/daily"},
      {"GET", "/v1/compliance"},
      {"GET", "/v1/jobs/ID/progress"},
      {"GET", "/v1/jobs/ID/checkpoints"},
      {"GET", "/v1/no/such/route"},
  };
  const std::set<int> documented = {200, 201, 400, 401, 403, 404, 409, 413};
  std::mt19937_64 rng(seed);
  for (uint64_t i = 0; i < iters; ++i) {
    auto [method, path] = routes[i % routes.size()];
    const std::vector<std::string> id_texts = {std::to_string(*ids.begin()), std::to_string(*ids.rbegin()), "999999",
                                               "99999999999999999999999"};
    if (auto at = path.find("ID"); at != std::string::npos) path.replace(at, 2, id_texts[rng() % id_texts.size()]);
    if (auto at = path.find("=Q"); at != std::string::npos)
      path.replace(at + 1, 1, std::vector<std::string>{"5", "-1", "abc", "%FF%FE", "99999999999999999999"}[rng() % 5]);
    std::string body = bodies[rng() % bodies.size()];
    if (rng() % 4 != 0) body = Mutate(body, rng);
    // Pending jobs must stay unrunnable: a mutated fleet goes only with the tenant's token (refused, 403).
    const bool fleet = method == "PUT" && path == "/v1/fleet";
    const std::vector<std::string> tokens = {admin, tenant_token, "", "wrong-token"};
    const std::string tok = fleet ? (rng() % 2 ? tenant_token : "") : tokens[rng() % tokens.size()];
    const std::string where = "seed " + std::to_string(seed) + ", request " + std::to_string(i) + ": " + method + " " +
                              path + " " + Head(body);
    Answer r = Send(host, port, method, path, body, tok);
    ASSERT_TRUE(documented.count(r.status)) << where << " -> " << r.status << " " << Head(r.body);
    if (r.status >= 400) {
      json e = json::parse(r.body, nullptr, /*allow_exceptions=*/false);
      ASSERT_TRUE(e.is_object() && e.contains("error") && e["error"].is_string() && !e["error"].empty())
          << where << " -> " << r.status << " " << Head(r.body);
    }
    if (r.status == 201 && method == "POST" && path == "/v1/jobs") ids.insert(json::parse(r.body)["id"].get<int64_t>());
    if (i % 25 == 24) {
      ASSERT_EQ(Send(host, port, "GET", "/v1/health", "", "").status, 200) << "after " << where;
    }
  }
  ASSERT_EQ(Send(host, port, "GET", "/v1/health", "", "").status, 200) << "the daemon did not survive";
  d.Stop();
  ASSERT_FALSE(HasSanitizerReport(ReadText(log.path))) << "the daemon's log holds a sanitizer's report";
  Shell("rm -rf '" + dir + "'");
}

}  // namespace
}  // namespace tessera::daemon::testing
