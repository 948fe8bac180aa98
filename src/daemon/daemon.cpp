// daemon/daemon: the job daemon — HTTP API, scheduler loop (admission, queue, wake-up, backfill,
// preemption), local execution through the shim, reconciliation after a restart, and billing.
#include "daemon/daemon.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <map>
#include <mutex>
#include <optional>
#include <regex>
#include <set>
#include <thread>

#include <fmt/format.h>
#include <httplib.h>

#include <nlohmann/json.hpp>

#include "common/env.hpp"
#include "common/log.hpp"
#include "daemon/executor.hpp"
#include "daemon/jobspec.hpp"
#include "daemon/security.hpp"
#include "daemon/state.hpp"
#include "daemon/util.hpp"
#include "tessera/ckpt.hpp"
#include "tessera/sched.hpp"
// The operator's view (issue #20): /metrics, the web console and its endpoints.
#include "daemon/console.hpp"
#include "daemon/metrics.hpp"

namespace tessera::daemon {

using json = nlohmann::json;

const char* kDefaultCatalogYaml = R"(# Embedded default catalog: the two prices the product brief gives. Throughput is configuration.
currency: CNY
price_version: brief-2026-03
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
    memory_gib: 80
    throughput: {llm-train: 1.0}
)";

const char* kDefaultPolicyYaml = "# Embedded default policy: no domestic floor.\nfloor: 0\n";

std::string DefaultStateDir(const std::string& flag) {
  if (!flag.empty()) return flag;
  if (auto h = env::Get("TESSERA_HOME")) return *h;
  if (auto home = env::Get("HOME")) return *home + "/.tessera";
  return ".tessera";
}

namespace {

std::atomic<bool> g_stop{false};
std::atomic<bool> g_reload{false};
void OnSignal(int) { g_stop = true; }
void OnHangup(int) { g_reload = true; }

// HTTP limits (docs/daemon.md "Security model"): one request per connection, read within kRequestReadS seconds
// (head and body together, each read within kReadS), at most kMaxBody bytes of body, kApiThreads connections
// served at once (more wait for a free thread).
constexpr int kRequestReadS = 10;
constexpr int kReadS = 5;
constexpr int kWriteS = 10;
constexpr size_t kMaxBody = 1 << 20;
constexpr size_t kApiThreads = 32;

// A socket stream whose reads share one deadline: a client that trickles its request is cut off.
class DeadlineStream : public httplib::Stream {
 public:
  explicit DeadlineStream(int sock)
      : sock_(sock), deadline_(std::chrono::steady_clock::now() + std::chrono::seconds(kRequestReadS)) {}
  bool is_readable() const override { return Wait(POLLIN) > 0; }
  bool is_writable() const override { return WaitFor(POLLOUT, kWriteS * 1000) > 0; }
  ssize_t read(char* ptr, size_t size) override {
    if (Wait(POLLIN) <= 0) return -1;
    ssize_t n;
    do {
      n = ::recv(sock_, ptr, size, 0);
    } while (n < 0 && errno == EINTR);
    return n;
  }
  ssize_t write(const char* ptr, size_t size) override {
    if (WaitFor(POLLOUT, kWriteS * 1000) <= 0) return -1;
    ssize_t n;
    do {
      n = ::send(sock_, ptr, size, MSG_NOSIGNAL);
    } while (n < 0 && errno == EINTR);
    return n;
  }
  void get_remote_ip_and_port(std::string& ip, int& port) const override { Address(true, ip, port); }
  void get_local_ip_and_port(std::string& ip, int& port) const override { Address(false, ip, port); }
  socket_t socket() const override { return sock_; }

 private:
  int Wait(short ev) const {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline_ - std::chrono::steady_clock::now());
    if (left.count() <= 0) return 0;
    return WaitFor(ev, static_cast<int>(std::min<int64_t>(left.count(), kReadS * 1000)));
  }
  int WaitFor(short ev, int ms) const {
    struct pollfd p {
      sock_, ev, 0
    };
    int r;
    do {
      r = ::poll(&p, 1, ms);
    } while (r < 0 && errno == EINTR);
    return r;
  }
  void Address(bool peer, std::string& ip, int& port) const {
    sockaddr_storage ss{};
    socklen_t len = sizeof ss;
    int r = peer ? ::getpeername(sock_, reinterpret_cast<sockaddr*>(&ss), &len)
                 : ::getsockname(sock_, reinterpret_cast<sockaddr*>(&ss), &len);
    char buf[INET6_ADDRSTRLEN] = "";
    port = 0;
    if (r == 0 && ss.ss_family == AF_INET) {
      auto* a = reinterpret_cast<sockaddr_in*>(&ss);
      ::inet_ntop(AF_INET, &a->sin_addr, buf, sizeof buf);
      port = ntohs(a->sin_port);
    } else if (r == 0 && ss.ss_family == AF_INET6) {
      auto* a = reinterpret_cast<sockaddr_in6*>(&ss);
      ::inet_ntop(AF_INET6, &a->sin6_addr, buf, sizeof buf);
      port = ntohs(a->sin6_port);
    }
    ip = buf;
  }
  int sock_;
  std::chrono::steady_clock::time_point deadline_;
};

// cpp-httplib's server with DeadlineStream and one request per connection: neither a slow nor an idle
// (keep-alive) client holds a worker thread for longer than the read bound.
class ApiServer : public httplib::Server {
 private:
  bool process_and_close_socket(socket_t sock) override {
    bool ok = false;
    {
      DeadlineStream strm(sock);
      bool closed = false;
      ok = process_request(strm, /*close_connection=*/true, closed, [&](httplib::Request& req) {
        strm.get_remote_ip_and_port(req.remote_addr, req.remote_port);
      });
    }
    ::shutdown(sock, SHUT_RDWR);
    ::close(sock);
    return ok;
  }
};

std::string JobKey(const std::string& name, int64_t id) { return fmt::format("{}#{}", name, id); }

json PlacementToJson(const sched::Placement& p, const sched::Catalog& catalog, const FleetSpec& fleet) {
  json types = json::array(), nodes = json::array();
  for (const auto& t : p.by_type) {
    bool emu = true;
    for (const auto& nc : p.by_node) {
      const auto* n = fleet.fleet.Find(nc.node);
      if (n && n->type == t.type && !fleet.IsEmulated(n->id)) emu = false;
    }
    const auto* ct = catalog.Find(t.type);
    types.push_back({{"type", t.type},
                     {"vendor", ct ? ct->vendor : ""},
                     {"domestic", t.domestic},
                     {"cards", t.cards},
                     {"emulated", emu},
                     {"cost_per_hour", sched::FormatMoney(t.cost_per_hour)}});
  }
  for (const auto& nc : p.by_node) {
    const auto* n = fleet.fleet.Find(nc.node);
    nodes.push_back({{"node", nc.node},
                     {"cards", nc.cards},
                     {"type", n ? n->type : ""},
                     {"emulated", fleet.IsEmulated(nc.node)}});
  }
  return {{"zone", p.zone},
          {"by_type", types},
          {"by_node", nodes},
          {"total_cards", p.total_cards},
          {"cost_per_hour", sched::FormatMoney(p.cost_per_hour)},
          {"currency", catalog.currency},
          {"floor", sched::FormatShare(p.floor)},
          {"share_before", sched::FormatShare(p.share_before)},
          {"share_after", sched::FormatShare(p.share_after)},
          {"unit", sched::ShareUnitName(p.unit)}};
}

// The last "step N[/M]" in the tail of a log: the job's progress as the example trainer prints it.
json ProgressFromLog(const std::string& path) {
  FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) return nullptr;
  std::fseek(f, 0, SEEK_END);
  long size = std::ftell(f);
  long from = std::max(0L, size - 65536L);
  std::fseek(f, from, SEEK_SET);
  std::string tail(static_cast<size_t>(size - from), '\0');
  size_t n = std::fread(tail.data(), 1, tail.size(), f);
  std::fclose(f);
  tail.resize(n);
  static const std::regex re(R"(step (\d+)(?:/(\d+))?(?: loss ([0-9.eE+-]+))?)");
  json out = nullptr;
  for (auto it = std::sregex_iterator(tail.begin(), tail.end(), re); it != std::sregex_iterator(); ++it) {
    // The log is the job's: a number no int64 holds is skipped, not thrown.
    auto step = env::ParseInt("step", (*it)[1], 0, std::numeric_limits<int64_t>::max());
    if (!step.ok()) continue;
    out = json{{"step", *step}};
    if ((*it)[2].matched) {
      auto of = env::ParseInt("of", (*it)[2], 0, std::numeric_limits<int64_t>::max());
      if (of.ok()) out["of"] = *of;
    }
    if ((*it)[3].matched) out["loss"] = (*it)[3].str();
  }
  return out;
}

struct Caller {
  std::string tenant;
  bool admin = false;
};

class Daemon {
 public:
  explicit Daemon(DaemonOptions o) : opts_(std::move(o)) {}
  Status Init();
  int Serve();

 private:
  // ---- configuration
  Status LoadConfig();
  Status ApplyConfig(const std::string& catalog_src, const std::string& catalog_yaml, const std::string& fleet_src,
                     const std::string& fleet_yaml, const std::string& policy_src, const std::string& policy_yaml,
                     bool persist);
  // ---- scheduler (all under mu_)
  void Loop();
  void Tick();
  void CheckAttempt(const json& a, int64_t now);
  void FinishAttempt(const json& a, int exit_code, int sig, int64_t ended_ms, const std::string& note);
  void BillPending();
  void Schedule(int64_t now);
  Result<std::vector<sched::RunningJob>> Running(std::vector<json>* active_rows);
  Result<sched::PlanResult> PlanJob(const JobSpec& spec, const std::vector<sched::RunningJob>& running);
  Status Start(const json& job, const JobSpec& spec, const sched::Placement& placement, int64_t now);
  Status RequestStop(int64_t job_id, const std::string& intent, const std::string& reason);
  Result<JobSpec> SpecFor(const json& job);
  void Event(int64_t job_id, const std::string& text);
  void FailJob(int64_t job_id, const std::string& reason);
  // ---- HTTP
  void Routes();
  std::optional<Caller> Auth(const httplib::Request& req, httplib::Response& res);
  // ---- security (daemon/security.hpp)
  Status LoadTenants();
  Result<std::string> TenantArea(const std::string& tenant);
  Status IdentityFor(const std::string& tenant, int64_t* uid, int64_t* gid);
  Result<JobSpec> ParseSpec(const std::string& yaml, const std::string& source, const std::string& base,
                            const std::string& tenant, const std::vector<std::string>& compatible);
  std::string NeverFits(const JobSpec& spec);
  Result<json> LoadJobFor(const Caller& c, int64_t id);
  json JobSummary(const json& job);

  DaemonOptions opts_;
  std::unique_ptr<StateDb> db_;
  std::unique_ptr<sched::Ledger> ledger_;
  bool ledger_warned_ = false;
  std::string ledger_path_;

  std::mutex mu_;
  std::condition_variable cv_;
  bool wake_ = false;

  sched::Catalog catalog_;
  FleetSpec fleet_;
  sched::Policy policy_;
  bool have_fleet_ = false;

  std::map<int64_t, JobSpec> specs_;     // parsed job files by id
  std::set<pid_t> children_;             // shims started by this process (to reap)
  std::set<std::pair<int64_t, int64_t>> term_sent_, kill_sent_;  // (job, attempt)
  std::map<int64_t, int64_t> hold_;      // beneficiary job -> its priority, while preemption is in flight
  int64_t last_capacity_ms_ = 0;         // last time capacity became available (an attempt ended, fleet changed)
  // Compliance preemption runs when the policy changes (a new policy, or a new floor from its calendar),
  // not when a job's end lowers the share: the planner already keeps the floor for every placement.
  bool policy_changed_ = true;
  sched::Ppm last_floor_ = -1;

  ApiServer http_;
  int lock_fd_ = -1;
  std::string admin_hash_;       // SHA-256 of STATE/token
  std::vector<Tenant> tenants_;  // admin first, then the --tenants file; only hashes
  JobIdentity identity_;
  std::string work_dir_;    // resolved
  std::string state_real_;  // the state directory, resolved (what a sandbox hides)
};

// ---- configuration --------------------------------------------------------------------------------------

Status Daemon::ApplyConfig(const std::string& catalog_src, const std::string& catalog_yaml,
                           const std::string& fleet_src, const std::string& fleet_yaml, const std::string& policy_src,
                           const std::string& policy_yaml, bool persist) {
  TSR_ASSIGN_OR_RETURN(auto catalog, sched::ParseCatalog(catalog_yaml, catalog_src));
  TSR_ASSIGN_OR_RETURN(auto policy, sched::ParsePolicy(policy_yaml, policy_src));
  FleetSpec fleet;
  bool have_fleet = !fleet_yaml.empty();
  if (have_fleet) {
    TSR_ASSIGN_OR_RETURN(fleet, ParseFleetSpec(fleet_yaml, fleet_src));
  }
  if (have_fleet) {
    std::vector<sched::RunningJob> running;
    if (db_) {
      TSR_ASSIGN_OR_RETURN(running, Running(nullptr));
    }
    Status s = sched::CheckInputs(catalog, fleet.fleet, policy, running);
    if (!s.ok()) return s.WithContext("the running jobs must still fit the new fleet");
  }
  if (persist) {
    TSR_RETURN_IF_ERROR(db_->Begin());
    Status s = db_->SetMeta("catalog_source", catalog_src);
    if (s.ok()) s = db_->SetMeta("catalog_yaml", catalog_yaml);
    if (s.ok()) s = db_->SetMeta("policy_source", policy_src);
    if (s.ok()) s = db_->SetMeta("policy_yaml", policy_yaml);
    if (s.ok()) s = db_->SetMeta("fleet_source", fleet_src);
    if (s.ok()) s = db_->SetMeta("fleet_yaml", fleet_yaml);
    if (!s.ok()) {
      db_->Rollback();
      return s;
    }
    TSR_RETURN_IF_ERROR(db_->Commit());
  }
  catalog_ = std::move(catalog);
  policy_ = std::move(policy);
  fleet_ = std::move(fleet);
  have_fleet_ = have_fleet;
  specs_.clear();  // the compatible list may name new types
  policy_changed_ = true;
  return Status::Ok();
}

Status Daemon::LoadConfig() {
  TSR_ASSIGN_OR_RETURN(auto cat_src, db_->GetMeta("catalog_source", "embedded default catalog"));
  TSR_ASSIGN_OR_RETURN(auto cat, db_->GetMeta("catalog_yaml", kDefaultCatalogYaml));
  TSR_ASSIGN_OR_RETURN(auto pol_src, db_->GetMeta("policy_source", "embedded default policy"));
  TSR_ASSIGN_OR_RETURN(auto pol, db_->GetMeta("policy_yaml", kDefaultPolicyYaml));
  TSR_ASSIGN_OR_RETURN(auto fl_src, db_->GetMeta("fleet_source", ""));
  TSR_ASSIGN_OR_RETURN(auto fl, db_->GetMeta("fleet_yaml", ""));
  auto base = [](const std::string& p) { return p.substr(p.rfind('/') + 1); };
  if (!opts_.catalog_path.empty()) {
    TSR_ASSIGN_OR_RETURN(cat, ReadFile(opts_.catalog_path));
    cat_src = base(opts_.catalog_path);
  }
  if (!opts_.policy_path.empty()) {
    TSR_ASSIGN_OR_RETURN(pol, ReadFile(opts_.policy_path));
    pol_src = base(opts_.policy_path);
  }
  if (!opts_.fleet_path.empty()) {
    TSR_ASSIGN_OR_RETURN(fl, ReadFile(opts_.fleet_path));
    fl_src = base(opts_.fleet_path);
  }
  return ApplyConfig(cat_src, cat, fl_src, fl, pol_src, pol, true);
}

Status Daemon::Init() {
  if (opts_.self_exe.empty()) opts_.self_exe = SelfExe();
  TSR_ASSIGN_OR_RETURN(identity_, ChooseJobIdentity(opts_.job_user, opts_.insecure_no_job_isolation));
  // The tenants' areas are reachable by the jobs' identity; the state directory by nobody but the daemon.
  work_dir_ = opts_.work_dir.empty() ? opts_.state_dir + "-work" : opts_.work_dir;
  {
    ::umask(022);
    Status s = MakeDirs(work_dir_, 0755);
    if (s.ok() && ::chmod(work_dir_.c_str(), 0755) != 0) s = ErrnoError("chmod " + work_dir_, errno);
    ::umask(077);  // everything the daemon creates from here on is its own: 0600 files, 0700 directories
    TSR_RETURN_IF_ERROR(s);
  }
  TSR_RETURN_IF_ERROR(MakeDirs(opts_.state_dir, 0700));
  {
    TSR_ASSIGN_OR_RETURN(auto st, ConfinePath("--state-dir", opts_.state_dir, ".", "/"));
    TSR_ASSIGN_OR_RETURN(auto wk, ConfinePath("--work-dir", work_dir_, ".", "/"));
    if (st == wk || wk.rfind(st + "/", 0) == 0 || st.rfind(wk + "/", 0) == 0)
      return InvalidArgument(
          fmt::format("--work-dir {} and --state-dir {} must not contain one another: jobs reach "
                      "the first and must not reach the second",
                      wk, st));
    work_dir_ = wk;
    state_real_ = st;
  }
  if (::chmod(opts_.state_dir.c_str(), 0700) != 0) return ErrnoError("chmod 0700 " + opts_.state_dir, errno);
  TSR_RETURN_IF_ERROR(MakeDirs(opts_.state_dir + "/jobs", 0700));
  std::string lock = opts_.state_dir + "/daemon.lock";
  lock_fd_ = ::open(lock.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (lock_fd_ < 0) return ErrnoError("open " + lock, errno);
  if (::flock(lock_fd_, LOCK_EX | LOCK_NB) != 0)
    return InvalidArgument(fmt::format("another tessera daemon already uses the state directory {} (lock {})",
                                       opts_.state_dir, lock));
  TSR_ASSIGN_OR_RETURN(db_, StateDb::Open(opts_.state_dir + "/daemon.db"));
  ledger_path_ = opts_.state_dir + "/ledger.db";
  auto ledger = sched::Ledger::Open(ledger_path_);
  if (ledger.ok()) {
    ledger_ = std::move(ledger).value();
  } else {
    TSR_LOG_WARN("billing is off: {}", ledger.status().ToString());
  }

  // The admin token is created once and kept in STATE/token (0600) for the CLI; the daemon keeps its hash.
  std::string token_path = opts_.state_dir + "/token";
  auto admin = ReadFile(token_path);
  std::string admin_token;
  if (admin.ok() && !admin->empty()) {
    admin_token = *admin;
    while (!admin_token.empty() && (admin_token.back() == '\n' || admin_token.back() == ' ')) admin_token.pop_back();
  } else {
    TSR_ASSIGN_OR_RETURN(admin_token, RandomToken());
    TSR_RETURN_IF_ERROR(WriteFileAtomic(token_path, admin_token + "\n", 0600));
  }
  admin_hash_ = TokenHash(admin_token);
  TSR_RETURN_IF_ERROR(LoadTenants());
  TSR_RETURN_IF_ERROR(LoadConfig());
  // Files an older daemon (or an operator) left readable are tightened: the database, its WAL, the tokens.
  for (const char* f : {"daemon.db", "daemon.db-wal", "daemon.db-shm", "ledger.db", "ledger.db-wal", "ledger.db-shm",
                        "token", "daemon.json", "daemon.lock"}) {
    std::string path = opts_.state_dir + "/" + f;
    if (::chmod(path.c_str(), 0600) != 0 && errno != ENOENT) return ErrnoError("chmod 0600 " + path, errno);
  }
  TSR_LOG_INFO("jobs run {}; their areas are under {}", identity_.Describe(), work_dir_);
  if (identity_.mode == JobIdentity::Mode::kNone)
    std::fprintf(stderr,
                 "tessera daemon: WARNING: --insecure-no-job-isolation: jobs run with the daemon's rights and "
                 "can read its token and database\n");

  // Reconcile: attempts left open by a previous daemon are checked by the first Tick (pid.json /
  // exit.json / live shim); nothing else to do here but log them.
  TSR_ASSIGN_OR_RETURN(auto open, db_->Query("SELECT job_id, n, shim_pid FROM attempts WHERE ended_ms IS NULL"));
  for (const auto& a : open) {
    Event(a["job_id"].get<int64_t>(),
          fmt::format("daemon restarted: reconciling attempt {} (shim pid {})", a["n"].get<int64_t>(),
                      a["shim_pid"].get<int64_t>()));
  }
  last_capacity_ms_ = NowMs();
  return Status::Ok();
}

// ---- security -----------------------------------------------------------------------------------------

// The tenant table follows the configuration: the admin and the --tenants file, nothing else (a removed
// tenant's token stops working at the next start or SIGHUP). On error the previous table stays.
Status Daemon::LoadTenants() {
  std::vector<Tenant> list = {Tenant{"admin", admin_hash_, true, ""}};
  if (!opts_.tenants_file.empty()) {
    TSR_ASSIGN_OR_RETURN(auto file, LoadTenantsFile(opts_.tenants_file));
    for (auto& t : file) {
      if (!t.user.empty()) {
        if (identity_.mode != JobIdentity::Mode::kUser)
          return InvalidArgument(
              fmt::format("{}: tenant '{}' names user '{}', but only a daemon running as root "
                          "switches users",
                          opts_.tenants_file, t.name, t.user));
        int64_t uid, gid;
        Status s = LookupJobUser(t.user, &uid, &gid);
        if (!s.ok()) return s.WithContext(fmt::format("{}: tenant '{}'", opts_.tenants_file, t.name));
      }
      if (t.token_sha256 == admin_hash_)
        return InvalidArgument(fmt::format("{}: tenant '{}' has the admin's token", opts_.tenants_file, t.name));
      list.push_back(std::move(t));
    }
  }
  TSR_RETURN_IF_ERROR(db_->Begin());
  Status s = db_->Exec("DELETE FROM tenants");
  for (const auto& t : list) {
    if (s.ok())
      s = db_->Exec("INSERT INTO tenants(name,token,admin) VALUES(?1,?2,?3)",
                    {t.name, t.token_sha256, t.admin ? 1 : 0});
  }
  if (s.ok()) s = db_->Commit();
  if (!s.ok()) {
    db_->Rollback();
    return s;
  }
  tenants_ = std::move(list);
  TSR_LOG_INFO("tenants: {} (admin included)", tenants_.size());
  return Status::Ok();
}

Result<std::string> Daemon::TenantArea(const std::string& tenant) {
  TSR_RETURN_IF_ERROR(CheckTenantName(tenant, "tenant"));
  std::string area = work_dir_ + "/" + tenant;
  // Owned by the daemon, 0711: a job reaches its own directory inside but cannot list or rename its neighbours.
  if (::mkdir(area.c_str(), 0711) != 0 && errno != EEXIST) return ErrnoError("mkdir " + area, errno);
  struct stat st {};
  if (::lstat(area.c_str(), &st) != 0 || !S_ISDIR(st.st_mode) || st.st_uid != ::geteuid())
    return SystemError(fmt::format("{} is not a directory owned by the daemon", area));
  if ((st.st_mode & 07777) != 0711 && ::chmod(area.c_str(), 0711) != 0) return ErrnoError("chmod " + area, errno);
  return area;
}

Status Daemon::IdentityFor(const std::string& tenant, int64_t* uid, int64_t* gid) {
  *uid = *gid = -1;
  if (identity_.mode != JobIdentity::Mode::kUser) return Status::Ok();
  *uid = identity_.uid;
  *gid = identity_.gid;
  for (const auto& t : tenants_)
    if (t.name == tenant && !t.user.empty()) return LookupJobUser(t.user, uid, gid);
  return Status::Ok();
}

Result<JobSpec> Daemon::ParseSpec(const std::string& yaml, const std::string& source, const std::string& base,
                                  const std::string& tenant, const std::vector<std::string>& compatible) {
  TSR_ASSIGN_OR_RETURN(auto area, TenantArea(tenant));
  return ParseJobSpec(yaml, source, base, tenant, compatible, area);
}

// Why no zone of the fleet could ever hold `spec`, even empty, or "" when one could (or when the reason is
// one that a policy change could lift).
std::string Daemon::NeverFits(const JobSpec& spec) {
  std::vector<sched::RunningJob> none;
  auto empty = PlanJob(spec, none);
  if (!empty.ok() || empty->placed()) return empty.ok() ? "" : empty.status().message();
  auto b = empty->infeasible->binding;
  if (b != sched::Binding::kCompatibility && b != sched::Binding::kCapacity && b != sched::Binding::kBounds) return "";
  // The largest the fleet offers this job: per zone, the cards (and throughput) of the types it accepts.
  std::map<std::string, std::pair<int64_t, sched::Throughput>> zones;
  std::set<std::string> types;
  for (const auto& n : fleet_.fleet.nodes) {
    const auto* t = catalog_.Find(n.type);
    if (!t || !spec.job.Accepts(*t)) continue;
    types.insert(t->name);
    auto it = t->throughput.find(spec.job.workload_class);
    auto& z = zones[n.zone];
    z.first += n.cards;
    if (it != t->throughput.end()) z.second += it->second * n.cards;
  }
  std::string largest = "no zone has a card of a type it accepts";
  std::string best_zone;
  int64_t best_cards = -1;
  sched::Throughput best_tp = 0;
  for (const auto& [zone, v] : zones) {
    bool better = spec.job.cards > 0 ? v.first > best_cards : v.second > best_tp;
    if (better) best_zone = zone, best_cards = v.first, best_tp = v.second;
  }
  if (!best_zone.empty()) {
    std::string tl;
    for (const auto& t : types) tl += (tl.empty() ? "" : ", ") + t;
    largest = spec.job.cards > 0
                  ? fmt::format("the largest possible is {} cards (zone {}, types {})", best_cards, best_zone, tl)
                  : fmt::format("the largest possible is throughput {} for class {} (zone {}, {} cards of types {})",
                                sched::FormatThroughput(best_tp), spec.job.workload_class, best_zone, best_cards, tl);
  }
  std::string need = spec.job.cards > 0 ? fmt::format("it needs {} cards in one zone", spec.job.cards)
                                        : fmt::format("it needs throughput {} in one zone",
                                                      sched::FormatThroughput(spec.job.throughput_target));
  return fmt::format("{}; {} ({})", need, largest, empty->infeasible->reason);
}

// ---- helpers ------------------------------------------------------------------------------------------

void Daemon::Event(int64_t job_id, const std::string& text) {
  TSR_LOG_INFO("job {}: {}", job_id, text);
  Status s = db_->Exec("INSERT INTO events(job_id, at_ms, text) VALUES(?1,?2,?3)", {job_id, NowMs(), text});
  if (!s.ok()) TSR_LOG_WARN("{}", s.ToString());
}

void Daemon::FailJob(int64_t job_id, const std::string& reason) {
  Status s = db_->Exec("UPDATE jobs SET state='failed', reason=?2, ended_ms=?3, position=NULL WHERE id=?1",
                       {job_id, reason, NowMs()});
  if (!s.ok()) TSR_LOG_WARN("{}", s.ToString());
  Event(job_id, "failed: " + reason);
  metrics::CountJobEvent(db_.get(), job_id, metrics::kJobFailures);
}

Result<JobSpec> Daemon::SpecFor(const json& job) {
  int64_t id = job["id"].get<int64_t>();
  auto it = specs_.find(id);
  if (it != specs_.end()) return it->second;
  auto comp = SplitList(job["compatible"].get<std::string>());
  TSR_ASSIGN_OR_RETURN(auto spec,
                       ParseSpec(job["yaml"].get<std::string>(), job["source"].get<std::string>(),
                                 job["base_dir"].get<std::string>(), job["tenant"].get<std::string>(), comp));
  specs_[id] = spec;
  return spec;
}

Result<std::vector<sched::RunningJob>> Daemon::Running(std::vector<json>* active_rows) {
  TSR_ASSIGN_OR_RETURN(auto rows, db_->Query("SELECT a.*, j.name, j.tenant, j.priority, j.stop_intent FROM attempts a "
                                             "JOIN jobs j ON j.id=a.job_id WHERE a.ended_ms IS NULL"));
  std::vector<sched::RunningJob> out;
  for (auto& r : rows) {
    sched::RunningJob rj;
    rj.name = JobKey(r["name"], r["job_id"]);
    rj.tenant = r["tenant"];
    auto alloc = json::parse(r["alloc_json"].get<std::string>());
    for (const auto& n : alloc["by_node"]) rj.allocations.push_back({n["node"], n["cards"].get<int64_t>()});
    out.push_back(std::move(rj));
    if (active_rows) active_rows->push_back(r);
  }
  return out;
}

Result<sched::PlanResult> Daemon::PlanJob(const JobSpec& spec, const std::vector<sched::RunningJob>& running) {
  sched::PlanRequest req;
  req.catalog = &catalog_;
  req.fleet = &fleet_.fleet;
  req.policy = &policy_;
  req.job = &spec.job;
  req.running = &running;
  req.day = sched::Today();
  return sched::Plan(req);
}

// ---- the scheduler ------------------------------------------------------------------------------------

void Daemon::Loop() {
  std::unique_lock<std::mutex> lk(mu_);
  while (!g_stop) {
    Tick();
    cv_.wait_for(lk, std::chrono::milliseconds(opts_.tick_ms), [&] { return wake_ || g_stop.load(); });
    wake_ = false;
  }
}

void Daemon::Tick() {
  metrics::PassTimer pass;  // tessera_scheduling_pass_duration_seconds
  int64_t now = NowMs();
  for (auto it = children_.begin(); it != children_.end();) {
    int st = 0;
    pid_t r = ::waitpid(*it, &st, WNOHANG);
    it = (r == *it || (r < 0 && errno == ECHILD)) ? children_.erase(it) : std::next(it);
  }
  auto active = db_->Query(
      "SELECT a.*, j.name, j.tenant, j.stop_intent, j.stop_requested_ms, j.grace_ms FROM attempts a "
      "JOIN jobs j ON j.id=a.job_id WHERE a.ended_ms IS NULL");
  if (!active.ok()) {
    TSR_LOG_ERROR("{}", active.status().ToString());
    return;
  }
  for (const auto& a : *active) CheckAttempt(a, now);
  BillPending();
  Schedule(now);
}

void Daemon::CheckAttempt(const json& a, int64_t now) {
  int64_t job = a["job_id"], n = a["n"];
  std::string dir = a["dir"];
  pid_t shim = static_cast<pid_t>(a["shim_pid"].get<int64_t>());
  if (shim == 0) {
    auto pids = ReadPidFile(dir);
    if (pids.ok()) {
      shim = pids->shim;
      (void)db_->Exec("UPDATE attempts SET shim_pid=?3, shim_start_ticks=?4 WHERE job_id=?1 AND n=?2",
                      {job, n, shim, ProcessStartTicks(shim)});
    } else if (now - a["started_ms"].get<int64_t>() > 10000) {
      // The daemon died between recording the attempt and starting it: it never ran.
      (void)db_->Exec("DELETE FROM attempts WHERE job_id=?1 AND n=?2", {job, n});
      (void)db_->Exec("UPDATE jobs SET state='queued', attempts=attempts-1, reason='restarting: the previous start "
                      "was interrupted' WHERE id=?1",
                      {job});
      Event(job, fmt::format("attempt {} never started (daemon stopped first); queued again", n));
      return;
    } else {
      return;
    }
  }
  auto ex = ReadExitFile(dir);
  if (ex.ok()) {
    FinishAttempt(a, ex->exit_code, ex->signal, ex->ended_ms, "");
    return;
  }
  int64_t ticks = a["shim_start_ticks"].get<int64_t>();
  bool alive = ProcessAlive(shim) && (ticks < 0 || ProcessStartTicks(shim) == ticks);
  if (!alive) {
    ex = ReadExitFile(dir);
    if (ex.ok()) {
      FinishAttempt(a, ex->exit_code, ex->signal, ex->ended_ms, "");
    } else {
      SignalSession(shim, SIGKILL, 0);
      FinishAttempt(a, -1, SIGKILL, now, "the job's shim disappeared (host restart or kill -9)");
    }
    return;
  }
  std::string intent = a["stop_intent"];
  if (intent.empty()) return;
  auto key = std::make_pair(job, n);
  if (!term_sent_.count(key)) {
    // In a sandbox the shim's child is bubblewrap's monitor: it must outlive the job to report its end.
    auto pids = ReadPidFile(dir);
    pid_t spare = pids.ok() && pids->sandboxed ? pids->child : 0;
    int k = SignalSession(shim, SIGTERM, shim, spare);
    term_sent_.insert(key);
    Event(job, fmt::format("sent SIGTERM to {} process(es) of attempt {} ({}); grace {:.1f} s", k, n, intent,
                           a["grace_ms"].get<int64_t>() / 1000.0));
  }
  int64_t requested = a["stop_requested_ms"].is_null() ? now : a["stop_requested_ms"].get<int64_t>();
  if (now - requested > a["grace_ms"].get<int64_t>() && !kill_sent_.count(key)) {
    int k = SignalSession(shim, SIGKILL, shim);
    kill_sent_.insert(key);
    Event(job, fmt::format("grace period over: sent SIGKILL to {} process(es) of attempt {}", k, n));
  }
}

void Daemon::FinishAttempt(const json& a, int exit_code, int sig, int64_t ended_ms, const std::string& note) {
  int64_t job = a["job_id"], n = a["n"];
  std::string intent = a["stop_intent"];
  auto jr = db_->QueryOne("SELECT * FROM jobs WHERE id=?1", {job}, fmt::format("job {}", job));
  if (!jr.ok()) return;
  std::string how = sig ? fmt::format("killed by signal {} ({})", sig, strsignal(sig))
                        : fmt::format("exit code {}", exit_code);
  std::string state, reason;
  bool terminal = true;
  if (intent == "cancel") {
    state = "cancelled";
    reason = "cancelled (" + how + ")";
  } else if (exit_code == 0 && sig == 0) {
    state = "succeeded";
    reason = "";
  } else if (intent == "preempt") {
    state = "queued";
    reason = (*jr)["reason"].get<std::string>();
    terminal = false;
  } else if (!note.empty()) {
    state = "queued";
    reason = "restarting: " + note;
    terminal = false;
  } else {
    state = "failed";
    reason = how + fmt::format(" (see `tessera logs {}`)", job);
  }
  std::string end_reason = !note.empty() ? note : intent.empty() ? how : intent + ": " + how;
  Status s = db_->Begin();
  if (s.ok())
    s = db_->Exec("UPDATE attempts SET ended_ms=?3, exit_code=?4, exit_signal=?5, end_reason=?6 WHERE job_id=?1 AND n=?2",
                  {job, n, ended_ms, exit_code, sig, end_reason});
  if (s.ok())
    s = db_->Exec(
        "UPDATE jobs SET state=?2, reason=?3, stop_intent='', stop_requested_ms=NULL, exit_code=?4, ended_ms=?5, "
        "blocked_since_ms=?6 WHERE id=?1",
        {job, state, reason, exit_code, terminal ? json(ended_ms) : json(nullptr),
         terminal ? json(nullptr) : json(ended_ms)});
  if (s.ok()) s = db_->Commit();
  if (!s.ok()) {
    db_->Rollback();
    TSR_LOG_ERROR("job {}: cannot record the end of attempt {}: {}", job, n, s.ToString());
    return;
  }
  Event(job, fmt::format("attempt {} ended: {}; job is {}", n, end_reason, state));
  if (state == "failed") metrics::CountJobEvent(db_.get(), job, metrics::kJobFailures);
  term_sent_.erase({job, n});
  kill_sent_.erase({job, n});
  if (state != "queued") hold_.erase(job);
  last_capacity_ms_ = std::max(last_capacity_ms_, ended_ms);
  wake_ = true;
}

void Daemon::BillPending() {
  if (!ledger_) {
    if (!ledger_warned_) TSR_LOG_WARN("no billing ledger: usage is not billed");
    ledger_warned_ = true;
    return;
  }
  auto rows = db_->Query(
      "SELECT a.*, j.name, j.tenant FROM attempts a JOIN jobs j ON j.id=a.job_id "
      "WHERE a.ended_ms IS NOT NULL AND a.billed=0");
  if (!rows.ok()) return;
  for (const auto& a : *rows) {
    int64_t job = a["job_id"], n = a["n"];
    std::string key = JobKey(a["name"], job);
    // The ledger counts whole seconds: round the real start and stop to the nearest second (at least 1 s).
    int64_t start = (a["started_ms"].get<int64_t>() + 500) / 1000;
    int64_t end = (a["ended_ms"].get<int64_t>() + 500) / 1000;
    if (end <= start) end = start + 1;
    auto alloc = json::parse(a["alloc_json"].get<std::string>());
    sched::BillFilter f;
    f.job = key;
    auto existing = ledger_->Query(f);
    if (!existing.ok()) {
      TSR_LOG_ERROR("billing job {}: {}", key, existing.status().ToString());
      continue;
    }
    bool ok = true;
    for (const auto& isl : alloc["islands"]) {
      std::string type = isl["type"];
      int64_t cards = isl["count"];
      bool dup = std::any_of(existing->begin(), existing->end(),
                             [&](const sched::UsageRecord& r) { return r.type == type && r.start == start; });
      if (dup) continue;  // billed before a crash; the ledger is append-only, so do not add it twice
      auto rec = ledger_->Record(catalog_, key, a["tenant"], type, cards, start, end);
      if (!rec.ok()) {
        TSR_LOG_ERROR("billing job {} attempt {}: {}", key, n, rec.status().ToString());
        ok = false;
        break;
      }
      Event(job, fmt::format("billed {} x {} for {} s: {} {}", cards, type, end - start,
                             sched::FormatMoney(rec->amount, 4), catalog_.currency));
    }
    if (ok) (void)db_->Exec("UPDATE attempts SET billed=1 WHERE job_id=?1 AND n=?2", {job, n});
  }
}

Status Daemon::RequestStop(int64_t job_id, const std::string& intent, const std::string& reason) {
  TSR_RETURN_IF_ERROR(db_->Exec(
      "UPDATE jobs SET stop_intent=?2, stop_requested_ms=?3, state='stopping', reason=?4 WHERE id=?1",
      {job_id, intent, NowMs(), reason}));
  Event(job_id, fmt::format("stop requested ({}): {}", intent, reason));
  if (intent == "preempt") metrics::CountJobEvent(db_.get(), job_id, metrics::kJobPreemptions);
  wake_ = true;
  return Status::Ok();
}

Status Daemon::Start(const json& job, const JobSpec& spec, const sched::Placement& placement, int64_t now) {
  int64_t id = job["id"];
  int64_t n = job["attempts"].get<int64_t>() + 1;
  TSR_ASSIGN_OR_RETURN(auto islands, IslandsFor(placement, catalog_, fleet_, spec.job.workload_class));
  // What the job may reach: its own directory, checkpoint directory and working directory, all inside its
  // tenant's area (checked again now: a path's symlinks may have changed since the submission), created
  // without following symlinks and owned by the job's identity.
  std::string tenant = job["tenant"];
  TSR_ASSIGN_OR_RETURN(auto area, TenantArea(tenant));
  int64_t uid = -1, gid = -1;
  TSR_RETURN_IF_ERROR(IdentityFor(tenant, &uid, &gid));
  std::string own = fmt::format("{}/{}", area, id);
  TSR_RETURN_IF_ERROR(MakeDirsInside(area, own, 0700, uid, gid));
  TSR_ASSIGN_OR_RETURN(auto ckpt_dir, ConfinePath("checkpoint.dir", job["ckpt_dir"], area, area));
  TSR_RETURN_IF_ERROR(MakeDirsInside(area, ckpt_dir, 0700, uid, gid));
  std::string workdir = own;
  if (!spec.run.workdir.empty()) {
    TSR_ASSIGN_OR_RETURN(workdir, ConfinePath("workdir", spec.run.workdir, area, area));
    TSR_RETURN_IF_ERROR(MakeDirsInside(area, workdir, 0700, uid, gid));
  }
  // The daemon's own files of the job (log, pid.json, exit.json) stay in the state directory.
  std::string jobdir = fmt::format("{}/jobs/{}", opts_.state_dir, id);
  std::string dir = fmt::format("{}/attempt-{}", jobdir, n);
  TSR_RETURN_IF_ERROR(MakeDirs(dir, 0700));
  std::string resume;
  auto latest = ckpt::Latest(ckpt_dir);
  if (latest.ok() && latest->step >= 0) {
    resume = fmt::format("{}/step-{:010d}", ckpt_dir, latest->step);
    for (const auto& w : latest->warnings) Event(id, "checkpoint warning: " + w);
  }
  json alloc = PlacementToJson(placement, catalog_, fleet_);
  alloc["islands"] = IslandsToJson(islands);
  std::optional<int64_t> latency;
  if (!job["blocked_since_ms"].is_null() && last_capacity_ms_ >= job["blocked_since_ms"].get<int64_t>())
    latency = now - last_capacity_ms_;

  TSR_RETURN_IF_ERROR(db_->Begin());
  Status s = db_->Exec(
      "INSERT INTO attempts(job_id,n,dir,alloc_json,resume_from,started_ms,wake_latency_ms) VALUES(?1,?2,?3,?4,?5,?6,?7)",
      {id, n, dir, alloc.dump(), resume, now, latency ? json(*latency) : json(nullptr)});
  if (s.ok())
    s = db_->Exec(
        "UPDATE jobs SET state='running', attempts=?2, reason='', position=NULL, blocked_since_ms=NULL, "
        "plan_json=?3 WHERE id=?1",
        {id, n, alloc.dump()});
  if (s.ok()) s = db_->Commit();
  if (!s.ok()) {
    db_->Rollback();
    return s;
  }

  LaunchRequest lr;
  lr.self_exe = opts_.self_exe;
  lr.launcher = opts_.launcher;
  lr.attempt_dir = dir;
  lr.log_path = jobdir + "/job.log";
  lr.workdir = workdir;
  lr.uid = uid;
  lr.gid = gid;
  if (identity_.mode == JobIdentity::Mode::kSandbox) {
    lr.bwrap = identity_.bwrap;
    lr.hide = {state_real_, work_dir_};
    lr.bind = {own};
    for (const auto& d : {ckpt_dir, workdir})
      if (d != own && d.rfind(own + "/", 0) != 0) lr.bind.push_back(d);
  }
  lr.islands = islands;
  lr.command = spec.run.command;
  lr.env = spec.run.env;
  if (identity_.mode != JobIdentity::Mode::kNone) lr.env["HOME"] = own;
  lr.env["TESSERA_JOB_ID"] = std::to_string(id);
  lr.env["TESSERA_JOB_NAME"] = spec.job.name;
  lr.env["TESSERA_ATTEMPT"] = std::to_string(n);
  lr.env["TESSERA_CKPT_ROOT"] = ckpt_dir;
  if (spec.run.ckpt_every > 0) lr.env["TESSERA_CKPT_EVERY"] = std::to_string(spec.run.ckpt_every);
  lr.env["TESSERA_ISLAND_WEIGHTS"] = IslandWeights(islands);
  if (!resume.empty()) lr.env["TESSERA_RESUME_FROM"] = resume;
  {
    std::string header = fmt::format("=== tessera daemon: job {} ({}) attempt {} at {} on", id, spec.job.name, n,
                                     FormatMs(now));
    for (const auto& i : islands)
      header += fmt::format(" {}x{}{}", i.count, i.type, i.emulated ? " (emulated on host)" : "");
    header += resume.empty() ? "; fresh start" : "; resuming from " + resume;
    header += " ===\n";
    FILE* f = std::fopen(lr.log_path.c_str(), "ab");
    if (f) {
      std::fputs(header.c_str(), f);
      std::fclose(f);
    }
  }
  auto pid = Launch(lr);
  if (!pid.ok()) {
    (void)db_->Exec("UPDATE attempts SET ended_ms=?3, exit_code=127, end_reason=?4 WHERE job_id=?1 AND n=?2",
                    {id, n, NowMs(), pid.status().message()});
    FailJob(id, "could not start: " + pid.status().message());
    return Status::Ok();
  }
  children_.insert(*pid);
  metrics::JobStarted(spec.job.tenant, !resume.empty());
  if (latency) metrics::WakeLatency(*latency);
  (void)db_->Exec("UPDATE attempts SET shim_pid=?3, shim_start_ticks=?4 WHERE job_id=?1 AND n=?2",
                  {id, n, *pid, ProcessStartTicks(*pid)});
  std::string where;
  for (const auto& i : islands)
    where += fmt::format("{}{}x{}{}", where.empty() ? "" : " + ", i.count, i.type, i.emulated ? " (emulated)" : "");
  Event(id, fmt::format("attempt {} started on {} in zone {} (shim pid {}){}{}", n, where, placement.zone, *pid,
                        resume.empty() ? "" : ", resuming from " + resume,
                        latency ? fmt::format(", {} ms after capacity became available", *latency) : ""));
  hold_.erase(id);
  return Status::Ok();
}

void Daemon::Schedule(int64_t now) {
  auto queued = db_->Query("SELECT * FROM jobs WHERE state='queued' ORDER BY priority DESC, submitted_ms, id");
  if (!queued.ok()) return;
  std::vector<json> active;
  auto running = Running(&active);
  if (!running.ok()) return;
  bool stopping = std::any_of(active.begin(), active.end(), [](const json& a) { return a["stop_intent"] != ""; });
  if (!stopping) hold_.clear();
  int64_t hold = std::numeric_limits<int64_t>::min();
  for (const auto& [id, prio] : hold_) hold = std::max(hold, prio);

  // Policy: a floor that rose (new policy, or a new date in the calendar) can make the running jobs
  // non-compliant; preempt the lowest-priority jobs until the remaining ones comply.
  sched::Ppm floor_now = policy_.FloorAt(sched::Today());
  if (floor_now != last_floor_) policy_changed_ = true;
  last_floor_ = floor_now;
  if (have_fleet_ && !stopping && policy_changed_) {
    policy_changed_ = false;
    auto share = sched::FleetShare(catalog_, fleet_.fleet, policy_, *running, sched::Today());
    if (share.ok() && !share->compliant && !active.empty()) {
      std::vector<size_t> order(active.size());
      for (size_t i = 0; i < order.size(); ++i) order[i] = i;
      std::sort(order.begin(), order.end(), [&](size_t x, size_t y) {
        if (active[x]["priority"] != active[y]["priority"]) return active[x]["priority"] < active[y]["priority"];
        return active[x]["started_ms"] > active[y]["started_ms"];
      });
      std::vector<sched::RunningJob> rest = *running;
      std::set<std::string> removed;
      for (size_t idx : order) {
        std::string key = JobKey(active[idx]["name"], active[idx]["job_id"]);
        removed.insert(key);
        std::erase_if(rest, [&](const sched::RunningJob& r) { return r.name == key; });
        Status s = RequestStop(active[idx]["job_id"], "preempt",
                               fmt::format("preempted: the fleet's domestic share {} is below the floor {} in force "
                                           "today; it will be placed again under the policy",
                                           sched::FormatShare(share->share), sched::FormatShare(share->floor)));
        if (!s.ok()) TSR_LOG_ERROR("{}", s.ToString());
        auto after = sched::FleetShare(catalog_, fleet_.fleet, policy_, rest, sched::Today());
        if (!after.ok() || after->compliant) break;
      }
      return;  // place nothing until the preempted jobs have stopped
    }
  }

  int64_t position = 0;
  bool tried_preempt = stopping;
  for (const auto& job : *queued) {
    int64_t id = job["id"];
    auto spec = SpecFor(job);
    if (!spec.ok()) {
      FailJob(id, spec.status().message());
      continue;
    }
    std::string reason;
    if (!have_fleet_) {
      reason = "no fleet registered yet (tessera fleet register FLEET.yaml)";
    } else if (job["priority"].get<int64_t>() < hold) {
      reason = "held: cards freed by preemption go to a higher-priority job first";
    } else {
      auto plan = PlanJob(*spec, *running);
      if (!plan.ok()) {
        reason = "planner error: " + plan.status().message();
      } else if (plan->placed()) {
        Status s = Start(job, *spec, *plan->placement, now);
        if (!s.ok()) {
          FailJob(id, s.message());
        } else {
          sched::RunningJob rj;
          rj.name = JobKey(job["name"], id);
          rj.tenant = job["tenant"];
          rj.allocations = plan->placement->by_node;
          running->push_back(rj);
        }
        continue;
      } else {
        reason = plan->infeasible->reason;
        if (!plan->infeasible->fix.empty()) reason += " (" + plan->infeasible->fix + ")";
        // Preemption: the first blocked job may take cards from lower-priority running jobs.
        if (!tried_preempt) {
          tried_preempt = true;
          std::vector<size_t> cand;
          for (size_t i = 0; i < active.size(); ++i)
            if (active[i]["priority"].get<int64_t>() < job["priority"].get<int64_t>()) cand.push_back(i);
          std::sort(cand.begin(), cand.end(), [&](size_t x, size_t y) {
            if (active[x]["priority"] != active[y]["priority"]) return active[x]["priority"] < active[y]["priority"];
            return active[x]["started_ms"] > active[y]["started_ms"];
          });
          std::vector<sched::RunningJob> rest = *running;
          for (size_t k = 0; k < cand.size(); ++k) {
            std::string key = JobKey(active[cand[k]]["name"], active[cand[k]]["job_id"]);
            std::erase_if(rest, [&](const sched::RunningJob& r) { return r.name == key; });
            auto p = PlanJob(*spec, rest);
            if (!p.ok() || !p->placed()) continue;
            std::string victims;
            for (size_t v = 0; v <= k; ++v) {
              int64_t vid = active[cand[v]]["job_id"];
              victims += (victims.empty() ? "" : ", ") + std::to_string(vid);
              Status s = RequestStop(vid, "preempt",
                                     fmt::format("preempted for job {} (priority {} > {}); will resume from its "
                                                 "newest checkpoint",
                                                 id, job["priority"].get<int64_t>(),
                                                 active[cand[v]]["priority"].get<int64_t>()));
              if (!s.ok()) TSR_LOG_ERROR("{}", s.ToString());
            }
            hold_[id] = job["priority"];
            hold = std::max(hold, job["priority"].get<int64_t>());
            reason = fmt::format("waiting for job(s) {} to checkpoint and stop (preempted for this job)", victims);
            break;
          }
        }
      }
    }
    ++position;
    if (job["reason"] != reason || job["position"] != position || job["blocked_since_ms"].is_null()) {
      (void)db_->Exec("UPDATE jobs SET reason=?2, position=?3, blocked_since_ms=COALESCE(blocked_since_ms, ?4) "
                      "WHERE id=?1",
                      {id, reason, position, now});
    }
  }
}

// ---- HTTP ---------------------------------------------------------------------------------------------

// JSON text of an answer. Strings from the request (a path, a parameter echoed in an error) may hold bytes
// that are not UTF-8, on which json::dump throws: they are replaced (U+FFFD) instead.
std::string AnswerText(const json& body) { return body.dump(-1, ' ', false, json::error_handler_t::replace); }

void Reply(httplib::Response& res, int status, const json& body) {
  res.status = status;
  res.set_content(AnswerText(body), "application/json");
}
void Error(httplib::Response& res, int status, const std::string& msg) { Reply(res, status, {{"error", msg}}); }

// Parses the request body as a JSON object into *body; otherwise answers 400 saying what it is.
bool ParseBody(const httplib::Request& req, httplib::Response& res, json* body) {
  *body = json::parse(req.body, nullptr, /*allow_exceptions=*/false);
  if (body->is_discarded()) {
    Error(res, 400, "the request body is not JSON");
    return false;
  }
  if (!body->is_object()) {
    Error(res, 400,
          fmt::format("the request body must be a JSON object, not {} ({})", body->type_name(),
                      body->dump().substr(0, 80)));
    return false;
  }
  return true;
}

// Reads the optional string member `key` of the object `obj` into *out (unchanged when absent or null);
// otherwise answers 400 naming `where` + key.
bool StringField(const json& obj, const std::string& key, const std::string& where, std::string* out,
                 httplib::Response& res) {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return true;
  if (!it->is_string()) {
    Error(res, 400,
          fmt::format("{}{}: must be a string, not {} ({})", where, key, it->type_name(), it->dump().substr(0, 80)));
    return false;
  }
  *out = it->get<std::string>();
  return true;
}

// The job id of a route "/v1/jobs/(\d+)..."; answers 400 naming it when no int64 holds it.
std::optional<int64_t> RouteId(const httplib::Request& req, httplib::Response& res) {
  auto v = env::ParseInt("job id", req.matches[1], 1, std::numeric_limits<int64_t>::max());
  if (!v.ok()) {
    Error(res, 400, v.status().message());
    return std::nullopt;
  }
  return *v;
}

std::optional<Caller> Daemon::Auth(const httplib::Request& req, httplib::Response& res) {
  std::string h = req.get_header_value("Authorization");
  if (h.rfind("Bearer ", 0) != 0 || h.size() <= 7) {
    Error(res, 401,
          "missing bearer token: pass --token, set TESSERA_DAEMON_TOKEN, or run where STATE/token is readable");
    return std::nullopt;
  }
  // Only hashes are kept; every entry is compared, in constant time, so the answer's timing says nothing.
  std::string hash = TokenHash(h.substr(7));
  const Tenant* found = nullptr;
  for (const auto& t : tenants_)
    if (ConstantTimeEqual(t.token_sha256, hash)) found = &t;
  if (!found) {
    Error(res, 401, "the bearer token is not known to this daemon");
    return std::nullopt;
  }
  return Caller{found->name, found->admin};
}

Result<json> Daemon::LoadJobFor(const Caller& c, int64_t id) {
  auto row = db_->QueryOne("SELECT * FROM jobs WHERE id=?1", {id}, fmt::format("job {}", id));
  // Another tenant's job is reported as absent: its existence is not theirs to know.
  if (!row.ok() || (!c.admin && (*row)["tenant"] != c.tenant)) return NotFound(fmt::format("job {} not found", id));
  return row;
}

json Daemon::JobSummary(const json& j) {
  json out = {{"id", j["id"]},
              {"name", j["name"]},
              {"tenant", j["tenant"]},
              {"priority", j["priority"]},
              {"state", j["state"]},
              {"reason", j["reason"]},
              {"position", j["position"]},
              {"submitted_ms", j["submitted_ms"]},
              {"attempts", j["attempts"]},
              {"exit_code", j["exit_code"]},
              {"ended_ms", j["ended_ms"]}};
  if (!j["plan_json"].get<std::string>().empty()) out["allocation"] = json::parse(j["plan_json"].get<std::string>());
  auto it = specs_.find(j["id"]);
  if (it != specs_.end()) {
    out["cards"] = it->second.job.cards;
    out["compatible"] = it->second.job.compatible;
  }
  return out;
}

void Daemon::Routes() {
  http_.Get("/v1/health", [&](const httplib::Request&, httplib::Response& res) {
    Reply(res, 200,
          {{"ok", true}, {"pid", ::getpid()}, {"state_dir", opts_.state_dir}, {"jobs_run", identity_.Describe()}});
  });

  http_.Post("/v1/jobs", [&](const httplib::Request& req, httplib::Response& res) {
    std::lock_guard<std::mutex> lk(mu_);
    auto c = Auth(req, res);
    if (!c) return;
    json body;
    if (!ParseBody(req, res, &body)) return;
    std::string source = "job.yaml", yaml, base;
    if (!StringField(body, "source", "", &source, res) || !StringField(body, "yaml", "", &yaml, res) ||
        !StringField(body, "base_dir", "", &base, res))
      return;
    std::vector<std::string> comp;
    if (auto it = body.find("compatible"); it != body.end() && !it->is_null()) {
      bool ok = it->is_array() && std::all_of(it->begin(), it->end(), [](const json& x) { return x.is_string(); });
      if (!ok) return Error(res, 400, "compatible: must be a list of type or vendor names, not " + it->dump());
      for (const auto& x : *it) comp.push_back(x.get<std::string>());
    }
    auto spec = ParseSpec(yaml, source, base, c->tenant, comp);
    if (!spec.ok()) return Error(res, 400, spec.status().message());
    // Admission: a job that no zone of this fleet could ever hold, even empty, is refused now; one that only
    // waits for capacity is queued.
    json preview = nullptr;
    std::string waits;
    if (have_fleet_) {
      std::string never = NeverFits(*spec);
      if (!never.empty())
        return Error(res, 400,
                     fmt::format("{}: job '{}' can never run on this fleet: {}", source, spec->job.name, never));
      auto running = Running(nullptr);
      if (running.ok()) {
        auto now = PlanJob(*spec, *running);
        if (now.ok() && now->placed()) preview = PlacementToJson(*now->placement, catalog_, fleet_);
        if (now.ok() && !now->placed()) {
          waits = now->infeasible->reason;
          if (!now->infeasible->fix.empty()) waits += " (" + now->infeasible->fix + ")";
        }
      }
    }
    std::string comp_s;
    for (const auto& x : comp) comp_s += (comp_s.empty() ? "" : ",") + x;
    int64_t now = NowMs();
    Status s = db_->Exec(
        "INSERT INTO jobs(name,tenant,priority,source,yaml,base_dir,compatible,state,reason,submitted_ms,grace_ms,"
        "ckpt_dir) VALUES(?1,?2,?3,?4,?5,?6,?7,'queued',?8,?9,?10,'')",
        {spec->job.name, spec->job.tenant, spec->job.priority, source, yaml, base, comp_s, waits, now,
         spec->run.grace_ms});
    if (!s.ok()) return Error(res, 500, s.message());
    int64_t id = db_->LastInsertId();
    auto area = TenantArea(c->tenant);
    if (!area.ok()) return Error(res, 500, area.status().message());
    std::string ckpt = spec->run.ckpt_dir.empty() ? fmt::format("{}/{}/ckpt", *area, id) : spec->run.ckpt_dir;
    (void)db_->Exec("UPDATE jobs SET ckpt_dir=?2 WHERE id=?1", {id, ckpt});
    specs_[id] = *spec;
    Event(id, fmt::format("submitted by tenant {} ({} cards, compatible {})", spec->job.tenant, spec->job.cards,
                          comp_s.empty() ? "from the file" : comp_s));
    wake_ = true;
    cv_.notify_all();
    Reply(res, 201, {{"id", id}, {"name", spec->job.name}, {"state", "queued"}, {"plan", preview},
                     {"waits", waits}, {"checkpoint_dir", ckpt}});
  });

  http_.Get("/v1/jobs", [&](const httplib::Request& req, httplib::Response& res) {
    std::lock_guard<std::mutex> lk(mu_);
    auto c = Auth(req, res);
    if (!c) return;
    bool all = req.has_param("all") && req.get_param_value("all") == "1";
    std::string sql = "SELECT * FROM jobs WHERE (?1 OR tenant=?2) AND (?3 OR state IN ('queued','running','stopping')) "
                      "ORDER BY CASE state WHEN 'running' THEN 0 WHEN 'stopping' THEN 0 WHEN 'queued' THEN 1 ELSE 2 "
                      "END, position, id";
    auto rows = db_->Query(sql, {c->admin, c->tenant, all});
    if (!rows.ok()) return Error(res, 500, rows.status().message());
    json jobs = json::array();
    for (const auto& r : *rows) {
      (void)SpecFor(r);
      jobs.push_back(JobSummary(r));
    }
    Reply(res, 200, {{"jobs", jobs}});
  });

  http_.Get(R"(/v1/jobs/(\d+))", [&](const httplib::Request& req, httplib::Response& res) {
    std::lock_guard<std::mutex> lk(mu_);
    auto c = Auth(req, res);
    if (!c) return;
    auto rid = RouteId(req, res);
    if (!rid) return;
    int64_t id = *rid;
    auto j = LoadJobFor(*c, id);
    if (!j.ok()) return Error(res, 404, j.status().message());
    (void)SpecFor(*j);
    json out = JobSummary(*j);
    out["checkpoint_dir"] = (*j)["ckpt_dir"];
    out["source"] = (*j)["source"];
    auto atts = db_->Query("SELECT * FROM attempts WHERE job_id=?1 ORDER BY n", {id});
    json aj = json::array();
    if (atts.ok())
      for (auto& a : *atts) {
        aj.push_back({{"n", a["n"]},
                      {"started_ms", a["started_ms"]},
                      {"ended_ms", a["ended_ms"]},
                      {"exit_code", a["exit_code"]},
                      {"exit_signal", a["exit_signal"]},
                      {"end_reason", a["end_reason"]},
                      {"resume_from", a["resume_from"]},
                      {"wake_latency_ms", a["wake_latency_ms"]},
                      {"billed", a["billed"].get<int64_t>() != 0},
                      {"shim_pid", a["shim_pid"]},
                      {"islands", json::parse(a["alloc_json"].get<std::string>())["islands"]}});
      }
    out["attempts_detail"] = aj;
    auto ev = db_->Query("SELECT at_ms, text FROM events WHERE job_id=?1 ORDER BY id", {id});
    if (ev.ok()) out["events"] = *ev;
    out["progress"] = ProgressFromLog(fmt::format("{}/jobs/{}/job.log", opts_.state_dir, id));
    auto steps = ckpt::ListSteps((*j)["ckpt_dir"].get<std::string>());
    out["checkpoints"] = steps.ok() ? json(*steps) : json::array();
    Reply(res, 200, out);
  });

  auto stop_route = [&](const std::string& intent) {
    return [&, intent](const httplib::Request& req, httplib::Response& res) {
      std::lock_guard<std::mutex> lk(mu_);
      auto c = Auth(req, res);
      if (!c) return;
      auto rid = RouteId(req, res);
      if (!rid) return;
      int64_t id = *rid;
      auto j = LoadJobFor(*c, id);
      if (!j.ok()) return Error(res, 404, j.status().message());
      std::string state = (*j)["state"];
      if (state == "queued" && intent == "cancel") {
        Status s = db_->Exec("UPDATE jobs SET state='cancelled', reason='cancelled while queued', ended_ms=?2, "
                             "position=NULL WHERE id=?1",
                             {id, NowMs()});
        if (!s.ok()) return Error(res, 500, s.message());
        Event(id, "cancelled while queued by " + c->tenant);
      } else if (state == "running" || (state == "stopping" && intent == "cancel")) {
        std::string why = intent == "cancel" ? "cancelled by " + c->tenant
                                             : "interrupted by " + c->tenant +
                                                   "; will resume from its newest checkpoint";
        Status s = RequestStop(id, intent == "cancel" ? "cancel" : "preempt", why);
        if (!s.ok()) return Error(res, 500, s.message());
      } else {
        return Error(res, 409, fmt::format("job {} is {}; only a {} job can be {}", id, state,
                                           intent == "cancel" ? "queued or running" : "running",
                                           intent == "cancel" ? "cancelled" : "requeued"));
      }
      wake_ = true;
      cv_.notify_all();
      auto after = db_->QueryOne("SELECT * FROM jobs WHERE id=?1", {id}, "job");
      Reply(res, 200, after.ok() ? JobSummary(*after) : json{{"id", id}});
    };
  };
  http_.Post(R"(/v1/jobs/(\d+)/cancel)", stop_route("cancel"));
  http_.Post(R"(/v1/jobs/(\d+)/requeue)", stop_route("requeue"));

  http_.Get(R"(/v1/jobs/(\d+)/logs)", [&](const httplib::Request& req, httplib::Response& res) {
    std::string path;
    {
      std::lock_guard<std::mutex> lk(mu_);
      auto c = Auth(req, res);
      if (!c) return;
      auto rid = RouteId(req, res);
      if (!rid) return;
      int64_t id = *rid;
      auto j = LoadJobFor(*c, id);
      if (!j.ok()) return Error(res, 404, j.status().message());
      path = fmt::format("{}/jobs/{}/job.log", opts_.state_dir, id);
    }
    int64_t off = -1, tail = -1;
    for (const char* key : {"offset", "tail"}) {
      if (!req.has_param(key)) continue;
      auto v = env::ParseInt(key, req.get_param_value(key), 0, std::numeric_limits<int64_t>::max());
      if (!v.ok()) return Error(res, 400, v.status().message() + " (a byte count)");
      (std::string(key) == "offset" ? off : tail) = *v;
    }
    auto text = ReadFile(path);
    std::string body = text.ok() ? *text : "";
    if (off >= 0) {
      body = static_cast<size_t>(off) < body.size() ? body.substr(static_cast<size_t>(off)) : "";
    } else if (tail >= 0) {
      if (body.size() > static_cast<size_t>(tail)) body = body.substr(body.size() - static_cast<size_t>(tail));
    }
    res.status = 200;
    res.set_header("X-Log-Size", std::to_string(text.ok() ? text->size() : 0));
    res.set_content(body, "text/plain");
  });

  http_.Get("/v1/fleet", [&](const httplib::Request& req, httplib::Response& res) {
    std::lock_guard<std::mutex> lk(mu_);
    auto c = Auth(req, res);
    if (!c) return;
    std::map<std::string, int64_t> used;
    auto running = Running(nullptr);
    if (running.ok())
      for (const auto& r : *running)
        for (const auto& a : r.allocations) used[a.node] += a.cards;
    json types = json::array(), nodes = json::array();
    for (const auto& t : catalog_.types) {
      json tp = json::object();
      for (const auto& [cls, v] : t.throughput) tp[cls] = sched::FormatThroughput(v);
      types.push_back({{"name", t.name},
                       {"vendor", t.vendor},
                       {"domestic", t.domestic},
                       {"price_per_card_hour", sched::FormatMoney(t.price_per_card_hour)},
                       {"throughput", tp}});
    }
    if (have_fleet_)
      for (const auto& n : fleet_.fleet.nodes)
        nodes.push_back({{"id", n.id},
                         {"zone", n.zone},
                         {"type", n.type},
                         {"cards", n.cards},
                         {"used", used[n.id]},
                         {"free", n.cards - used[n.id]},
                         {"emulated", fleet_.IsEmulated(n.id)}});
    json out = {{"catalog", types},
                {"currency", catalog_.currency},
                {"price_version", catalog_.price_version},
                {"nodes", nodes},
                {"fleet_source", have_fleet_ ? fleet_.fleet.source : ""},
                {"policy_source", policy_.source},
                {"floor_today", sched::FormatShare(policy_.FloorAt(sched::Today()))},
                {"unit", sched::ShareUnitName(policy_.unit)},
                {"ledger", ledger_path_}};
    if (have_fleet_ && running.ok()) {
      auto share = sched::FleetShare(catalog_, fleet_.fleet, policy_, *running, sched::Today());
      if (share.ok()) out["share_now"] = sched::FormatShare(share->share), out["compliant"] = share->compliant;
    }
    Reply(res, 200, out);
  });

  // {key: {source, yaml}}: 1 when read, 0 when absent, -1 after answering 400 (a member of the wrong type).
  auto parse_doc = [](const json& body, const char* key, std::string* src, std::string* yaml,
                      httplib::Response& res) -> int {
    auto it = body.find(key);
    if (it == body.end() || it->is_null()) return 0;
    if (!it->is_object()) {
      Error(res, 400, fmt::format("{}: must be an object {{source, yaml}}, not {}", key, it->type_name()));
      return -1;
    }
    *src = std::string(key) + ".yaml";
    yaml->clear();
    std::string where = std::string(key) + ".";
    if (!StringField(*it, "source", where, src, res) || !StringField(*it, "yaml", where, yaml, res)) return -1;
    return 1;
  };

  http_.Put("/v1/fleet", [&, parse_doc](const httplib::Request& req, httplib::Response& res) {
    std::lock_guard<std::mutex> lk(mu_);
    auto c = Auth(req, res);
    if (!c) return;
    if (!c->admin) return Error(res, 403, "registering a fleet needs the admin token (STATE/token)");
    json body;
    if (!ParseBody(req, res, &body)) return;
    std::string fs, fy, cs, cy, ps, py;
    int f = parse_doc(body, "fleet", &fs, &fy, res);
    if (f < 0) return;
    if (f == 0) return Error(res, 400, "the request names no fleet: {fleet: {source, yaml}}");
    auto cur_cs = db_->GetMeta("catalog_source", "embedded default catalog");
    auto cur_cy = db_->GetMeta("catalog_yaml", kDefaultCatalogYaml);
    auto cur_ps = db_->GetMeta("policy_source", "embedded default policy");
    auto cur_py = db_->GetMeta("policy_yaml", kDefaultPolicyYaml);
    for (const auto* r : {&cur_cs, &cur_cy, &cur_ps, &cur_py})
      if (!r->ok()) return Error(res, 500, r->status().message());
    int k = parse_doc(body, "catalog", &cs, &cy, res);
    if (k < 0) return;
    if (k == 0) cs = *cur_cs, cy = *cur_cy;
    int p = parse_doc(body, "policy", &ps, &py, res);
    if (p < 0) return;
    if (p == 0) ps = *cur_ps, py = *cur_py;
    Status s = ApplyConfig(cs, cy, fs, fy, ps, py, true);
    if (!s.ok()) return Error(res, 400, s.message());
    last_capacity_ms_ = NowMs();
    wake_ = true;
    cv_.notify_all();
    int64_t cards = 0, emu = 0;
    for (const auto& n : fleet_.fleet.nodes) {
      cards += n.cards;
      if (fleet_.IsEmulated(n.id)) emu += n.cards;
    }
    Reply(res, 200, {{"nodes", fleet_.fleet.nodes.size()}, {"cards", cards}, {"emulated_cards", emu}});
  });

  http_.Put("/v1/policy", [&](const httplib::Request& req, httplib::Response& res) {
    std::lock_guard<std::mutex> lk(mu_);
    auto c = Auth(req, res);
    if (!c) return;
    if (!c->admin) return Error(res, 403, "changing the policy needs the admin token (STATE/token)");
    json body;
    if (!ParseBody(req, res, &body)) return;
    auto cs = db_->GetMeta("catalog_source", "embedded default catalog");
    auto cy = db_->GetMeta("catalog_yaml", kDefaultCatalogYaml);
    auto fs = db_->GetMeta("fleet_source", "");
    auto fy = db_->GetMeta("fleet_yaml", "");
    for (const auto* r : {&cs, &cy, &fs, &fy})
      if (!r->ok()) return Error(res, 500, r->status().message());
    std::string psrc = "policy.yaml", pyaml;
    if (!StringField(body, "source", "", &psrc, res) || !StringField(body, "yaml", "", &pyaml, res)) return;
    Status s = ApplyConfig(*cs, *cy, *fs, *fy, psrc, pyaml, true);
    if (!s.ok()) return Error(res, 400, s.message());
    wake_ = true;
    cv_.notify_all();
    Reply(res, 200, {{"policy", policy_.source}, {"floor_today", sched::FormatShare(policy_.FloorAt(sched::Today()))}});
  });

  // GET /metrics, the web console at /, and the console's read-only endpoints (daemon/console.hpp).
  console::RegisterRoutes(&http_, [this](const httplib::Request& req, httplib::Response& res, bool authenticate,
                                         const console::Handler& fn) {
    std::lock_guard<std::mutex> lk(mu_);
    console::Caller who;
    if (authenticate) {
      auto c = Auth(req, res);
      if (!c) return;
      who = {c->tenant, c->admin, false};
    }
    auto running = Running(nullptr);
    fn(who, {&catalog_, &fleet_, &policy_, have_fleet_, db_.get(), ledger_.get(), opts_.state_dir,
             running.ok() ? *running : std::vector<sched::RunningJob>{}});
  });
}

int Daemon::Serve() {
  Routes();
  // Bounds against slow, idle or greedy clients (see DeadlineStream and ApiServer).
  http_.new_task_queue = [] { return new httplib::ThreadPool(kApiThreads); };
  http_.set_read_timeout(kReadS, 0);
  http_.set_write_timeout(kWriteS, 0);
  http_.set_keep_alive_max_count(1);
  http_.set_payload_max_length(kMaxBody);
  // Every error answer is JSON, including the ones cpp-httplib makes itself (413, unknown routes).
  http_.set_error_handler(httplib::Server::HandlerWithResponse([](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
    std::string msg = res.status == 413
                          ? fmt::format("the request body is larger than the {} MiB limit", kMaxBody >> 20)
                      : res.status == 404 ? fmt::format("no such API route: {} {}", req.method, req.path)
                                          : fmt::format("HTTP {}: the request was not understood", res.status);
    res.set_content(AnswerText(json{{"error", msg}}), "application/json");
    return httplib::Server::HandlerResponse::Handled;
  }));
  // A last resort: the handlers report errors as Status, so reaching this is a bug; still answer JSON.
  http_.set_exception_handler([](const httplib::Request& req, httplib::Response& res, std::exception_ptr ep) {
    std::string what = "unknown exception";
    try {
      if (ep) std::rethrow_exception(ep);
    } catch (const std::exception& e) {
      what = e.what();
    } catch (...) {
    }
    TSR_LOG_ERROR("internal error answering {} {}: {}", req.method, req.path, what);
    res.status = 500;
    res.set_content(AnswerText(json{{"error", "internal error: " + what}}), "application/json");
  });
  int port = opts_.port;
  if (port == 0) {
    port = http_.bind_to_any_port(opts_.host);
  } else if (!http_.bind_to_port(opts_.host, port)) {
    port = -1;
  }
  if (port <= 0) {
    std::fprintf(stderr, "tessera daemon: cannot listen on %s:%d\n", opts_.host.c_str(), opts_.port);
    return 1;
  }
  json info = {{"address", fmt::format("{}:{}", opts_.host, port)}, {"pid", ::getpid()}};
  Status s = WriteFileAtomic(opts_.state_dir + "/daemon.json", info.dump() + "\n", 0600);
  if (!s.ok()) {
    std::fprintf(stderr, "tessera daemon: %s\n", s.ToString().c_str());
    return 1;
  }
  std::fprintf(stderr, "tessera daemon: listening on http://%s:%d (state %s, pid %d)\n", opts_.host.c_str(), port,
               opts_.state_dir.c_str(), ::getpid());
  std::fprintf(stderr, "tessera daemon: web console at http://%s:%d/ (log in with a token), metrics at /metrics\n",
               opts_.host.c_str(), port);
  std::thread loop([&] { Loop(); });
  std::thread http([&] { http_.listen_after_bind(); });
  while (!g_stop) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    if (g_reload.exchange(false)) {
      std::lock_guard<std::mutex> lk(mu_);
      Status s = LoadTenants();
      if (s.ok()) {
        std::fprintf(stderr, "tessera daemon: SIGHUP: reloaded %s (%zu tenants with the admin)\n",
                     opts_.tenants_file.c_str(), tenants_.size());
      } else {
        std::fprintf(stderr, "tessera daemon: SIGHUP: %s; the previous tenants stay in force\n", s.ToString().c_str());
      }
    }
  }
  http_.stop();
  {
    std::lock_guard<std::mutex> lk(mu_);
    wake_ = true;
  }
  cv_.notify_all();
  loop.join();
  http.join();
  std::fprintf(stderr, "tessera daemon: stopped; running jobs keep running and are reconciled on the next start\n");
  return 0;
}

}  // namespace

int RunDaemon(const DaemonOptions& options) {
  struct sigaction sa {};
  sa.sa_handler = OnSignal;
  sigemptyset(&sa.sa_mask);
  ::sigaction(SIGINT, &sa, nullptr);
  ::sigaction(SIGTERM, &sa, nullptr);
  sa.sa_handler = OnHangup;
  ::sigaction(SIGHUP, &sa, nullptr);
  ::signal(SIGPIPE, SIG_IGN);
  Daemon d(options);
  Status s = d.Init();
  if (!s.ok()) {
    std::fprintf(stderr, "tessera daemon: %s\n", s.ToString().c_str());
    return 1;
  }
  return d.Serve();
}

}  // namespace tessera::daemon
