// tests/daemon/security_test: the daemon-security defects, each against a real daemon on loopback:
// a job cannot read the daemon's token or state (it runs under another identity, or in a sandbox, and its
// environment carries no daemon path); the state directory and its files are private; tenants come from a
// file that holds only token hashes, follow it across SIGHUP and restarts; job paths stay inside the tenant's
// area; slow clients do not starve the API and large bodies get 413; malformed requests get JSON 400s; job
// Names with control characters and jobs that no zone could ever hold are refused at submit.
#include "daemon/security.hpp"

#include <arpa/inet.h>
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <thread>

#include "daemon/harness.hpp"
#include "daemon/job_store.hpp"

namespace tessera::daemon::testing {
namespace {

using json = nlohmann::json;
using namespace std::chrono_literals;

const char* kCatalog = R"(currency: CNY
price_version: test-1
types:
  - {name: ascend-910b, vendor: ascend, domestic: true, price_per_card_hour: 2.4, memory_gib: 64,
     throughput: {mlp-train: 0.3}}
  - {name: nvidia-h800, vendor: nvidia, domestic: false, price_per_card_hour: 6.8, memory_gib: 80,
     throughput: {mlp-train: 1.0}}
)";

const char* kFleet = R"(emulated: true
nodes:
  - {id: n-910b, zone: z, type: ascend-910b, cards: 2}
  - {id: n-h800, zone: z, type: nvidia-h800, cards: 2}
)";

int Mode(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return -1;
  return static_cast<int>(st.st_mode & 07777);
}

std::string Addr(const std::string& state) {
  return nlohmann::json::parse(ReadText(state + "/daemon.json"))["address"].get<std::string>();
}

std::string AdminToken(const std::string& state) {
  std::string t = ReadText(state + "/token");
  while (!t.empty() && (t.back() == '\n' || t.back() == ' ')) t.pop_back();
  return t;
}

// A raw HTTP exchange (so that malformed bodies reach the daemon as they are).
struct Raw {
  int status = 0;
  std::string body;
};
Raw Request(const std::string& state, const std::string& method, const std::string& path, const std::string& body,
            const std::string& token) {
  std::string addr = Addr(state);
  auto colon = addr.rfind(':');
  httplib::Client cli(addr.substr(0, colon), std::stoi(addr.substr(colon + 1)));
  cli.set_connection_timeout(5, 0);
  cli.set_read_timeout(10, 0);
  httplib::Headers h;
  if (!token.empty()) h.emplace("Authorization", "Bearer " + token);
  httplib::Result r = method == "GET"    ? cli.Get(path, h)
                      : method == "POST" ? cli.Post(path, h, body, "application/json")
                                         : cli.Put(path, h, body, "application/json");
  if (!r) return {-1, httplib::to_string(r.error())};
  return {r->status, r->body};
}

// The "error" of a JSON error body, or "" when the body is not one.
std::string ErrorOf(const Raw& r) {
  try {
    auto j = json::parse(r.body);
    return j.is_object() && j.contains("error") && j["error"].is_string() ? j["error"].get<std::string>() : "";
  } catch (const std::exception&) {
    return "";
  }
}

class DaemonSecurity : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = MakeTempDir("sec");
    // Jobs run under an unprivileged identity: the test's own files must be reachable by it.
    ASSERT_EQ(::chmod(dir_.c_str(), 0755), 0);
    out_ = dir_ + "/out";
    ASSERT_EQ(::mkdir(out_.c_str(), 0777), 0);
    ASSERT_EQ(::chmod(out_.c_str(), 0777), 0);
  }
  void TearDown() override {
    d_.reset();
    if (!HasFailure()) Shell("rm -rf '" + dir_ + "' '" + dir_ + "/state.daemon.log' '" + dir_ + "/state-work'");
  }
  void StartDaemon(std::vector<std::string> extra = {}) {
    d_ = std::make_unique<DaemonProcess>(dir_ + "/state", std::move(extra));
    d_->Start();
    admin_ = d_->Admin();
    ASSERT_TRUE(admin_);
  }
  void Register() {
    json body = {{"fleet", Doc("fleet.yaml", kFleet)},
                 {"catalog", Doc("catalog.yaml", kCatalog)},
                 {"policy", Doc("policy.yaml", "floor: 0\n")}};
    auto r = admin_->Put("/v1/fleet", body);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
  }
  Result<json> SubmitYaml(Client& c, const std::string& yaml) {
    return c.Post("/v1/jobs", {{"source", "job.yaml"}, {"yaml", yaml}, {"base_dir", dir_}});
  }
  json Job(int64_t id) {
    auto r = admin_->Get(fmt::format("/v1/jobs/{}", id));
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return r.ok() ? *r : json::object();
  }
  bool WaitEnded(int64_t id, std::chrono::milliseconds t = 60s) {
    return WaitFor(
        [&] {
          auto j = admin_->Get(fmt::format("/v1/jobs/{}", id));
          std::string s = j.ok() ? j->value("state", "?") : "?";
          return s == "succeeded" || s == "failed" || s == "cancelled";
        },
        t);
  }
  std::string Logs(int64_t id) {
    auto r = admin_->GetText(fmt::format("/v1/jobs/{}/logs", id));
    return r.ok() ? *r : "";
  }
  // Whether `token` is accepted; *why gets the refusal.
  bool TokenWorks(const std::string& token, std::string* why = nullptr) {
    auto c = d_ ? d_->ClientFor(token) : nullptr;
    if (!c) {
      if (why) *why = "no daemon";
      return false;
    }
    auto r = c->Get("/v1/jobs");
    if (why) *why = r.ok() ? "" : r.status().message();
    return r.ok();
  }
  std::string ShellJob(const std::string& name, const std::string& script) {
    json cmd = json::array({"sh", "-c", script});
    return fmt::format("name: {}\nclass: mlp-train\ncards: 1\ncompatible: [ascend]\ncommand: {}\n", name, cmd.dump());
  }

  std::string dir_, out_;
  std::unique_ptr<DaemonProcess> d_;
  std::unique_ptr<Client> admin_;
};

// `cat $TESSERA_HOME/token` printed the admin token into the job's own log.
TEST_F(DaemonSecurity, JobCannotReadTheDaemonsTokenOrState) {
  ASSERT_NO_FATAL_FAILURE(StartDaemon());
  ASSERT_NO_FATAL_FAILURE(Register());
  std::string state = d_->state();
  std::string token = AdminToken(state);
  ASSERT_FALSE(token.empty());
  std::string script = fmt::format(
      "echo uid=$(id -u); echo home=${{TESSERA_HOME:-unset}}; cat \"$TESSERA_HOME/token\"; cat '{0}/token'; "
      "ls '{0}'; head -c 15 '{0}/daemon.db'; echo; env | grep '^TESSERA_' | sort; echo end-of-probe",
      state);
  auto r = SubmitYaml(*admin_, ShellJob("probe", script));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  int64_t id = (*r)["id"];
  ASSERT_TRUE(WaitEnded(id)) << Job(id).dump(2);
  std::string log = Logs(id);
  ASSERT_NE(log.find("end-of-probe"), std::string::npos) << log;
  EXPECT_EQ(log.find(token), std::string::npos) << "the job read the admin token:\n" << log;
  EXPECT_NE(log.find("home=unset"), std::string::npos) << log;
  for (const char* v : {"TESSERA_HOME=", "TESSERA_DAEMON=", "TESSERA_DAEMON_TOKEN=", "TESSERA_LEDGER="})
    EXPECT_EQ(log.find(v), std::string::npos) << v << " reached the job:\n" << log;
  // Nothing the job was given names the state directory.
  std::string env_part = log.substr(log.find("TESSERA_") == std::string::npos ? 0 : log.find("TESSERA_"));
  EXPECT_EQ(env_part.find("TESSERA_CKPT_ROOT=" + state + "/"), std::string::npos) << log;
  EXPECT_NE(log.find("TESSERA_CKPT_ROOT="), std::string::npos) << log;
  if (::geteuid() == 0) {
    EXPECT_EQ(log.find("uid=0\n"), std::string::npos) << "a root daemon ran the job as root:\n" << log;
  }
}

// The state directory is tightened to 0700, the database, its WAL and token files to 0600.
TEST_F(DaemonSecurity, StateDirectoryAndSecretsArePrivate) {
  ASSERT_EQ(::mkdir((dir_ + "/state").c_str(), 0755), 0);
  ASSERT_EQ(::chmod((dir_ + "/state").c_str(), 0755), 0);
  ASSERT_NO_FATAL_FAILURE(StartDaemon());
  ASSERT_NO_FATAL_FAILURE(Register());  // writes to the database: its WAL exists
  std::string s = d_->state();
  EXPECT_EQ(Mode(s), 0700);
  for (const char* f : {"daemon.db", "daemon.db-wal", "token", "daemon.json", "ledger.db"})
    EXPECT_EQ(Mode(s + "/" + f), 0600) << f;
  // A restart tightens files that an older daemon (or an operator) left open.
  d_->Stop();
  ASSERT_EQ(::chmod(s.c_str(), 0755), 0);
  ASSERT_EQ(::chmod((s + "/token").c_str(), 0644), 0);
  ASSERT_EQ(::chmod((s + "/daemon.db").c_str(), 0644), 0);
  d_->Start();
  EXPECT_EQ(Mode(s), 0700);
  EXPECT_EQ(Mode(s + "/token"), 0600);
  EXPECT_EQ(Mode(s + "/daemon.db"), 0600);
}

// `checkpoint.dir: ../st1/jobs/2/ckpt` escaped the tenant.
TEST_F(DaemonSecurity, JobPathsAreConfinedToTheTenantArea) {
  ASSERT_NO_FATAL_FAILURE(StartDaemon());
  ASSERT_NO_FATAL_FAILURE(Register());
  const std::string ok = "name: x\nclass: mlp-train\ncards: 1\ncompatible: [ascend]\ncommand: [/bin/true]\n";
  auto first = SubmitYaml(*admin_, ok);
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  // The default checkpoint directory is AREA/<id>/ckpt.
  std::string ckpt = (*first)["checkpoint_dir"];
  std::string area = ckpt.substr(0, ckpt.rfind('/'));
  area = area.substr(0, area.rfind('/'));
  auto refused = [&](const std::string& extra, const std::string& field) {
    auto r = SubmitYaml(*admin_, ok + extra);
    EXPECT_FALSE(r.ok()) << extra << " was accepted: " << (r.ok() ? r->dump() : "");
    if (!r.ok()) {
      EXPECT_NE(r.status().message().find(field), std::string::npos) << r.status().message();
      EXPECT_NE(r.status().message().find("outside"), std::string::npos) << r.status().message();
    }
  };
  refused("checkpoint: {dir: ../st1/jobs/2/ckpt}\n", "checkpoint.dir");
  refused("checkpoint: {dir: " + d_->state() + "/jobs/1/ckpt}\n", "checkpoint.dir");
  refused("checkpoint: {dir: " + area + "/../../x}\n", "checkpoint.dir");
  refused("workdir: /\n", "workdir");
  refused("workdir: ..\n", "workdir");
  // A symlink inside the area that points out of it is resolved before the check.
  ASSERT_EQ(::symlink(dir_.c_str(), (area + "/escape").c_str()), 0);
  refused("checkpoint: {dir: escape/ckpt}\n", "checkpoint.dir");
  refused("checkpoint: {dir: " + area + "/escape/ckpt}\n", "checkpoint.dir");
  // Relative paths inside the area are accepted and resolved against it.
  auto good = SubmitYaml(*admin_, ok + "checkpoint: {dir: shared/ckpt}\n");
  ASSERT_TRUE(good.ok()) << good.status().ToString();
  EXPECT_EQ((*good)["checkpoint_dir"], area + "/shared/ckpt");
}

// 12 connections sending one header line every 2 s made /v1/health time out.
TEST_F(DaemonSecurity, SlowClientsDoNotStarveTheApi) {
  ASSERT_NO_FATAL_FAILURE(StartDaemon());
  std::string addr = Addr(d_->state());
  auto colon = addr.rfind(':');
  int port = std::stoi(addr.substr(colon + 1));
  std::vector<int> socks;
  for (int i = 0; i < 12; ++i) {
    int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    ASSERT_GE(fd, 0);
    sockaddr_in sa{};
    sa.sin_family = AF_INET;
    sa.sin_port = htons(static_cast<uint16_t>(port));
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ASSERT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa), 0);
    std::string head = "GET /v1/health HTTP/1.1\r\nHost: x\r\n";
    ASSERT_GT(::send(fd, head.data(), head.size(), MSG_NOSIGNAL), 0);
    socks.push_back(fd);
  }
  std::atomic<bool> stop{false};
  std::thread slow([&] {
    for (int round = 0; round < 60 && !stop; ++round) {
      for (int fd : socks) (void)::send(fd, "X-Slow: 1\r\n", 11, MSG_NOSIGNAL);
      for (int k = 0; k < 20 && !stop; ++k) std::this_thread::sleep_for(100ms);
    }
  });
  std::this_thread::sleep_for(500ms);  // let the daemon accept them all
  // The API still answers, to a client that waits at most 5 s.
  for (int i = 0; i < 3; ++i) {
    Raw h = Request(d_->state(), "GET", "/v1/health", "", "");
    EXPECT_EQ(h.status, 200) << h.body;
  }
  // A slow client is cut off (the daemon bounds the time to read one request).
  int fd0 = socks[0];
  bool closed = WaitFor(
      [&] {
        char buf[512];
        ssize_t n = ::recv(fd0, buf, sizeof buf, MSG_DONTWAIT);
        return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK) || n > 0;
      },
      60s);
  EXPECT_TRUE(closed) << "the daemon kept a client that sends one header line every 2 s";
  stop = true;
  slow.join();
  for (int fd : socks) ::close(fd);
}

// The request body is capped at 1 MiB, with a JSON 413.
TEST_F(DaemonSecurity, OversizedBodyGets413) {
  ASSERT_NO_FATAL_FAILURE(StartDaemon());
  std::string token = AdminToken(d_->state());
  json body = {{"source", "big.yaml"}, {"yaml", std::string(2 << 20, '#')}};
  Raw r = Request(d_->state(), "POST", "/v1/jobs", body.dump(), token);
  EXPECT_EQ(r.status, 413) << r.body.substr(0, 200);
  EXPECT_NE(ErrorOf(r).find("1 MiB"), std::string::npos) << r.body.substr(0, 200);
  // Just under the cap is read (and refused for what it says, not for its size).
  json small = {{"source", "small.yaml"}, {"yaml", "# " + std::string(1000, 'x') + "\n"}};
  Raw s = Request(d_->state(), "POST", "/v1/jobs", small.dump(), token);
  EXPECT_EQ(s.status, 400) << s.body;
}

// These answered 500 with an empty body.
TEST_F(DaemonSecurity, MalformedRequestsGetJson400s) {
  ASSERT_NO_FATAL_FAILURE(StartDaemon());
  ASSERT_NO_FATAL_FAILURE(Register());
  std::string token = AdminToken(d_->state());
  // A job that prints a step number no integer holds: its status must still be readable.
  auto sub = SubmitYaml(*admin_, ShellJob("huge", "echo 'step 99999999999999999999999/99999999999999999999999'"));
  ASSERT_TRUE(sub.ok()) << sub.status().ToString();
  int64_t id = (*sub)["id"];
  ASSERT_TRUE(WaitEnded(id));
  Raw st = Request(d_->state(), "GET", fmt::format("/v1/jobs/{}", id), "", token);
  EXPECT_EQ(st.status, 200) << st.body;

  struct Case {
    std::string method, path, body, mentions;
  };
  std::vector<Case> cases = {
      {"GET", "/v1/jobs/99999999999999999999999", "", "99999999999999999999999"},
      {"GET", fmt::format("/v1/jobs/{}/logs?offset=abc", id), "", "offset"},
      {"GET", fmt::format("/v1/jobs/{}/logs?tail=-5", id), "", "tail"},
      // Bytes that are not UTF-8 are echoed in the error: the answer must still be JSON.
      {"GET", fmt::format("/v1/jobs/{}/logs?offset=%FF%FE", id), "", "offset"},
      {"POST", "/v1/jobs/99999999999999999999999/cancel", "{}", "99999999999999999999999"},
      {"POST", "/v1/jobs", "[1,2,3]", "object"},
      {"POST", "/v1/jobs", "{\"yaml\":5}", "yaml"},
      {"POST", "/v1/jobs", "null", "object"},
      {"POST", "/v1/jobs", "{\"yaml\":\"name: x\\n\",\"compatible\":\"ascend\"}", "compatible"},
      {"POST", "/v1/jobs", "{\"yaml\":\"name: x\\n\",\"base_dir\":[]}", "base_dir"},
      {"PUT", "/v1/policy", "{\"yaml\":5}", "yaml"},
      {"PUT", "/v1/fleet", "{\"fleet\":{\"yaml\":5}}", "yaml"},
  };
  for (const auto& c : cases) {
    Raw r = Request(d_->state(), c.method, c.path, c.body, token);
    EXPECT_EQ(r.status, 400) << c.method << " " << c.path << " " << c.body << " -> " << r.body;
    EXPECT_NE(ErrorOf(r).find(c.mentions), std::string::npos)
        << c.method << " " << c.path << " " << c.body << " -> '" << r.body << "'";
  }
  // An unknown route with such bytes is a JSON 404 (it made the daemon abort: the error answer threw).
  Raw nf = Request(d_->state(), "GET", "/v1/jobs/%FF", "", token);
  EXPECT_EQ(nf.status, 404) << nf.body;
  EXPECT_NE(ErrorOf(nf).find("no such API route"), std::string::npos) << nf.body;
  EXPECT_EQ(Request(d_->state(), "GET", "/v1/health", "", "").status, 200) << "the daemon did not survive";
}

// A body of 100,000 nested arrays from a tenant killed the daemon (stack overflow quoting it back in the 400):
// every endpoint that reads a body, and the job file inside one, refuse such nesting and the daemon lives.
TEST_F(DaemonSecurity, DeeplyNestedBodiesGet400AndTheDaemonLives) {
  ASSERT_NO_FATAL_FAILURE(StartDaemon());
  ASSERT_NO_FATAL_FAILURE(Register());
  std::string token = AdminToken(d_->state());
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  const std::string deep_obj = "{\"yaml\":" + deep + "}";
  json deep_yaml = {{"source", "deep.yaml"}, {"yaml", "name: x\ncommand: " + deep + "\n"}};
  struct Case {
    std::string method, path, body, mentions;
  };
  std::vector<Case> cases = {
      {"POST", "/v1/jobs", deep, "nests deeper than 64"},
      {"POST", "/v1/jobs", deep_obj, "nests deeper than 64"},
      {"POST", "/v1/jobs", deep_yaml.dump(), "deep.yaml: nests deeper than 64"},
      {"PUT", "/v1/policy", deep, "nests deeper than 64"},
      {"PUT", "/v1/fleet", deep, "nests deeper than 64"},
  };
  for (const auto& c : cases) {
    Raw r = Request(d_->state(), c.method, c.path, c.body, token);
    EXPECT_EQ(r.status, 400) << c.method << " " << c.path << " -> " << r.body.substr(0, 200);
    EXPECT_NE(ErrorOf(r).find(c.mentions), std::string::npos) << c.method << " " << c.path << " -> " << r.body;
    ASSERT_EQ(Request(d_->state(), "GET", "/v1/health", "", "").status, 200) << "the daemon died on " << c.path;
  }
  // Nesting within the bound is parsed and refused for what it says.
  Raw ok = Request(d_->state(), "POST", "/v1/jobs", std::string(60, '[') + std::string(60, ']'), token);
  EXPECT_EQ(ok.status, 400);
  EXPECT_NE(ErrorOf(ok).find("must be a JSON object, not array"), std::string::npos) << ok.body;
}

// Names with control characters split `tessera queue` rows and truncated the ledger key.
TEST_F(DaemonSecurity, NamesWithControlCharactersAreRefused) {
  ASSERT_NO_FATAL_FAILURE(StartDaemon());
  ASSERT_NO_FATAL_FAILURE(Register());
  for (std::string name : {"\"a\\nb\"", "\"a\\0b\"", "\"a\\tb\"", "\"\\e[31mred\"", "\"a\\x7fb\""}) {
    auto r = SubmitYaml(*admin_, "name: " + name +
                                     "\nclass: mlp-train\ncards: 1\ncompatible: [ascend]\n"
                                     "command: [/bin/true]\n");
    EXPECT_FALSE(r.ok()) << name;
    if (!r.ok()) {
      EXPECT_NE(r.status().message().find("name"), std::string::npos) << r.status().message();
      EXPECT_NE(r.status().message().find("control character"), std::string::npos) << r.status().message();
    }
  }
  auto list = admin_->Get("/v1/jobs?all=1");
  ASSERT_TRUE(list.ok());
  EXPECT_TRUE((*list)["jobs"].empty()) << list->dump();
}

// `cards: 1000` on a 4-card fleet was accepted and queued forever.
TEST_F(DaemonSecurity, JobsNoZoneCouldHoldAreRefused) {
  ASSERT_NO_FATAL_FAILURE(StartDaemon());
  ASSERT_NO_FATAL_FAILURE(Register());
  auto job = [&](int cards, const std::string& compat, double secs = 0.2) {
    return SleepJobYaml(fmt::format("j{}", cards), 0, cards, secs, out_ + "/", compat);
  };
  auto r = SubmitYaml(*admin_, job(1000, "[ascend, nvidia]"));
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("can never run"), std::string::npos) << r.status().message();
  EXPECT_NE(r.status().message().find("largest"), std::string::npos) << r.status().message();
  EXPECT_NE(r.status().message().find(" 4 "), std::string::npos) << r.status().message();
  r = SubmitYaml(*admin_, job(3, "[ascend]"));
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find(" 2 "), std::string::npos) << r.status().message();
  // A throughput target: the zone offers 2 x 0.3 + 2 x 1.0 for mlp-train.
  r = SubmitYaml(*admin_,
                 "name: t\nclass: mlp-train\nthroughput: 100\ncompatible: [ascend, nvidia]\n"
                 "command: [/bin/true]\n");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("throughput 2.6"), std::string::npos) << r.status().message();
  // A job that only waits for capacity is queued.
  auto a = SubmitYaml(*admin_, job(4, "[ascend, nvidia]", 30));
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  auto b = SubmitYaml(*admin_, job(2, "[ascend]"));
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  EXPECT_EQ((*b)["state"], "queued");
  ASSERT_TRUE(admin_->Post(fmt::format("/v1/jobs/{}/cancel", (*a)["id"].get<int64_t>()), json::object()).ok());
}

// Tenant tokens were given on the command line (visible in `ps`) and stored as given.
TEST_F(DaemonSecurity, TenantsComeFromAFileAndOnlyHashesAreKept) {
  std::string tf = WriteTenantsFile(dir_ + "/tenants.yaml", {{"alice", "tok-alice-secret"}, {"bob", "tok-bob-secret"}});
  ASSERT_NO_FATAL_FAILURE(StartDaemon({"--tenants", tf}));
  std::string why;
  ASSERT_TRUE(TokenWorks("tok-alice-secret", &why)) << why;
  std::string cmdline = ReadText(fmt::format("/proc/{}/cmdline", d_->pid()));
  EXPECT_NE(cmdline.find("--tenants"), std::string::npos);
  EXPECT_EQ(cmdline.find("tok-"), std::string::npos) << cmdline;
  // The database holds hashes only: no token, not even the admin's, in the file or its WAL.
  std::string admin = AdminToken(d_->state());
  for (const char* f : {"daemon.db", "daemon.db-wal"}) {
    std::string bytes = ReadText(d_->state() + "/" + f);
    for (const std::string& t : {std::string("tok-alice-secret"), std::string("tok-bob-secret"), admin})
      EXPECT_EQ(bytes.find(t), std::string::npos) << f << " holds a token";
  }
  {
    auto db = JobStore::Open(d_->state() + "/daemon.db");
    ASSERT_TRUE(db.ok()) << db.status().ToString();
    auto rows = (*db)->Tenants();
    ASSERT_TRUE(rows.ok()) << rows.status().ToString();
    ASSERT_EQ(rows->size(), 3u);
    EXPECT_EQ((*rows)[0].token_sha256, TokenHash(admin));
    EXPECT_EQ((*rows)[1].token_sha256, TokenHash("tok-alice-secret"));
  }
  // A token on the command line is refused, and so is a tenants file that others can read.
  std::string out;
  EXPECT_EQ(Shell(Bin() + " daemon --state-dir " + dir_ + "/other --tenant a=secret 2>&1", &out), 2) << out;
  EXPECT_NE(out.find("--tenants FILE"), std::string::npos) << out;
  ASSERT_EQ(::chmod(tf.c_str(), 0644), 0);
  EXPECT_NE(Shell("timeout 20 " + Bin() + " daemon --state-dir " + dir_ + "/other --tenants " + tf + " 2>&1", &out), 0);
  EXPECT_NE(out.find(tf), std::string::npos) << out;
  EXPECT_NE(out.find("chmod 600"), std::string::npos) << out;
}

// The tenants file is reloaded on SIGHUP; a broken file keeps the table in force.
TEST_F(DaemonSecurity, TenantsFileIsReloadedOnSighup) {
  std::string tf = WriteTenantsFile(dir_ + "/tenants.yaml", {{"alice", "tok-a"}, {"bob", "tok-b"}});
  ASSERT_NO_FATAL_FAILURE(StartDaemon({"--tenants", tf}));
  ASSERT_TRUE(TokenWorks("tok-b"));
  WriteTenantsFile(tf, {{"alice", "tok-a"}, {"carol", "tok-c"}});
  ASSERT_EQ(::kill(d_->pid(), SIGHUP), 0);
  ASSERT_TRUE(WaitFor([&] { return TokenWorks("tok-c"); }, 20s));
  std::string why;
  ASSERT_FALSE(TokenWorks("tok-b", &why));
  EXPECT_NE(why.find("not known"), std::string::npos) << why;
  // A file that does not parse is reported and changes nothing.
  WriteText(tf, "tenants: [\n");
  ASSERT_EQ(::kill(d_->pid(), SIGHUP), 0);
  ASSERT_TRUE(WaitFor(
      [&] { return ReadText(d_->state() + ".daemon.log").find("previous tenants stay") != std::string::npos; }, 20s));
  EXPECT_TRUE(TokenWorks("tok-c"));
  EXPECT_TRUE(TokenWorks("tok-a"));
}

// A tenant removed from the configuration kept access after a restart.
TEST_F(DaemonSecurity, RemovedTenantGets401AfterRestart) {
  std::string tf = WriteTenantsFile(dir_ + "/tenants.yaml", {{"alice", "tok-a"}, {"bob", "tok-b"}});
  ASSERT_NO_FATAL_FAILURE(StartDaemon({"--tenants", tf}));
  ASSERT_TRUE(TokenWorks("tok-b"));
  d_->Stop();
  WriteTenantsFile(tf, {{"alice", "tok-a"}});
  d_->Start();
  std::string why;
  ASSERT_FALSE(TokenWorks("tok-b", &why));
  EXPECT_NE(why.find("not known"), std::string::npos) << why;
  EXPECT_TRUE(TokenWorks("tok-a"));
  // Without --tenants only the admin remains.
  d_->Stop();
  d_ = std::make_unique<DaemonProcess>(dir_ + "/state");
  d_->Start();
  EXPECT_FALSE(TokenWorks("tok-a"));
  EXPECT_TRUE(TokenWorks(AdminToken(d_->state())));
}

// A tenant's `user:` is the identity its jobs run as (a root daemon).
TEST_F(DaemonSecurity, TenantUserIsTheJobsIdentity) {
  if (::geteuid() != 0) GTEST_SKIP() << "switching users needs a root daemon";
  if (Shell("id -u daemon >/dev/null 2>&1") != 0) GTEST_SKIP() << "no 'daemon' user on this machine";
  std::string uid;
  Shell("id -u daemon", &uid);
  std::string tf = dir_ + "/tenants.yaml";
  WriteText(tf, "tenants:\n  - {name: alice, token_sha256: " + TokenHash("tok-a") +
                    ", user: daemon}\n  - {name: bob, "
                    "token_sha256: " +
                    TokenHash("tok-b") + "}\n");
  ASSERT_EQ(::chmod(tf.c_str(), 0600), 0);
  ASSERT_NO_FATAL_FAILURE(StartDaemon({"--tenants", tf}));
  ASSERT_NO_FATAL_FAILURE(Register());
  auto alice = d_->ClientFor("tok-a");
  auto bob = d_->ClientFor("tok-b");
  ASSERT_TRUE(alice && bob);
  auto ja = SubmitYaml(*alice, ShellJob("who", "echo uid=$(id -u) gid=$(id -g) groups=$(id -G)"));
  ASSERT_TRUE(ja.ok()) << ja.status().ToString();
  auto jb = SubmitYaml(*bob, ShellJob("who", "echo uid=$(id -u); ls ../../alice/1 && echo listed-alice"));
  ASSERT_TRUE(jb.ok()) << jb.status().ToString();
  ASSERT_TRUE(WaitEnded((*ja)["id"]));
  ASSERT_TRUE(WaitEnded((*jb)["id"]));
  std::string la = Logs((*ja)["id"]), lb = Logs((*jb)["id"]);
  EXPECT_NE(la.find("uid=" + uid.substr(0, uid.find('\n')) + " "), std::string::npos) << la;
  EXPECT_NE(lb.find("uid=65534"), std::string::npos) << lb;  // the default job user, nobody
  EXPECT_EQ(lb.find("listed-alice"), std::string::npos) << "bob's job listed alice's directory:\n" << lb;
}

// An ordinary user's daemon: jobs run in a bubblewrap sandbox that hides the state directory,
// the other jobs' areas and the daemon's processes. The daemon is started as nobody (setpriv).
TEST_F(DaemonSecurity, SandboxHidesTheStateFromJobsOfAnUnprivilegedDaemon) {
  if (::geteuid() != 0) GTEST_SKIP() << "the test starts the daemon as nobody with setpriv, which needs root";
  if (Shell("command -v setpriv >/dev/null && command -v bwrap >/dev/null") != 0)
    GTEST_SKIP() << "needs setpriv and bwrap (scripts/install-deps.sh installs bubblewrap)";
  std::string home = dir_ + "/nb";
  ASSERT_EQ(::mkdir(home.c_str(), 0755), 0);
  ASSERT_EQ(::chown(home.c_str(), 65534, 65534), 0);
  d_ = std::make_unique<DaemonProcess>(home + "/state");
  d_->RunUnder({"setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "--"});
  ASSERT_NO_FATAL_FAILURE(d_->Start());
  admin_ = d_->Admin();
  ASSERT_TRUE(admin_);
  auto health = admin_->Get("/v1/health");
  ASSERT_TRUE(health.ok());
  EXPECT_NE(health->value("jobs_run", "").find("bubblewrap"), std::string::npos) << health->dump();
  ASSERT_NO_FATAL_FAILURE(Register());
  std::string state = d_->state(), token = AdminToken(state);
  std::string script = fmt::format(
      "echo uid=$(id -u); cat '{0}/token'; ls -A '{0}'; echo listed-state; ls -A '{0}-work/admin'; echo listed-area; "
      "test -e /proc/{1} && echo sees-the-daemon; echo end-of-probe",
      state, d_->pid());
  auto r = SubmitYaml(*admin_, ShellJob("probe", script));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  int64_t id = (*r)["id"];
  ASSERT_TRUE(WaitEnded(id)) << Job(id).dump(2);
  std::string log = Logs(id);
  ASSERT_NE(log.find("end-of-probe"), std::string::npos) << log;
  EXPECT_EQ(log.find(token), std::string::npos) << log;
  EXPECT_NE(log.find("uid=65534"), std::string::npos) << log;
  EXPECT_EQ(log.find("daemon.db"), std::string::npos) << "the job listed the state directory:\n" << log;
  EXPECT_EQ(log.find("sees-the-daemon"), std::string::npos) << log;
  // Its own directory is there, the other jobs' are not (the area shows only this job).
  std::string area_part = log.substr(log.find("listed-state"));
  area_part = area_part.substr(0, area_part.find("listed-area"));
  EXPECT_NE(area_part.find(fmt::format("] {}\n", id)), std::string::npos) << log;
  // Cancel reaches the job inside the sandbox (SIGTERM, its trap runs) and the end is recorded.
  auto s = SubmitYaml(*admin_, SleepJobYaml("sleeper", 0, 1, 60, out_ + "/", "[ascend]"));
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  int64_t sid = (*s)["id"];
  ASSERT_TRUE(WaitFor([&] { return Exists(out_ + "/pid.1"); }, 30s)) << Job(sid).dump(2);
  ASSERT_TRUE(admin_->Post(fmt::format("/v1/jobs/{}/cancel", sid), json::object()).ok());
  ASSERT_TRUE(WaitFor([&] { return Job(sid).value("state", "") == "cancelled"; }, 30s)) << Job(sid).dump(2);
  EXPECT_TRUE(Exists(out_ + "/term.1.0")) << "the job did not get SIGTERM before the end";
}

// The job identity is never the daemon's own; a user that does not exist is named.
TEST_F(DaemonSecurity, JobUserMustBeAnExistingUnprivilegedUser) {
  if (::geteuid() != 0) GTEST_SKIP() << "--job-user is for a daemon running as root";
  std::string out;
  EXPECT_EQ(Shell("timeout 20 " + Bin() + " daemon --state-dir " + dir_ + "/s --job-user root 2>&1", &out),
            2);  // bad input
  EXPECT_NE(out.find("uid 0"), std::string::npos) << out;
  EXPECT_EQ(Shell("timeout 20 " + Bin() + " daemon --state-dir " + dir_ + "/s --job-user no-such-user 2>&1", &out), 2);
  EXPECT_NE(out.find("'no-such-user' does not exist"), std::string::npos) << out;
}

}  // namespace
}  // namespace tessera::daemon::testing
