// daemon/daemon: the job daemon — HTTP API, scheduler loop (admission, queue, wake-up, backfill,
// preemption), local execution through the shim, reconciliation after a restart, and billing.
#include "daemon/daemon.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
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
void OnSignal(int) { g_stop = true; }

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
    out = json{{"step", std::stoll((*it)[1])}};
    if ((*it)[2].matched) out["of"] = std::stoll((*it)[2]);
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

  httplib::Server http_;
  int lock_fd_ = -1;
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
  TSR_RETURN_IF_ERROR(MakeDirs(opts_.state_dir, 0700));
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

  // Tenants: the admin token (created once, kept in STATE/token, mode 0600) and the --tenant ones.
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
  TSR_RETURN_IF_ERROR(db_->Exec(
      "INSERT INTO tenants(name,token,admin) VALUES('admin',?1,1) ON CONFLICT(name) DO UPDATE SET token=excluded.token",
      {admin_token}));
  for (const auto& [name, token] : opts_.tenants) {
    if (name == "admin") return InvalidArgument("--tenant admin=...: 'admin' is reserved for the token in STATE/token");
    Status s = db_->Exec(
        "INSERT INTO tenants(name,token,admin) VALUES(?1,?2,0) ON CONFLICT(name) DO UPDATE SET token=excluded.token",
        {name, token});
    if (!s.ok()) return InvalidArgument(fmt::format("--tenant {}=...: {} (is the token used by another tenant?)", name,
                                                    s.message()));
  }
  TSR_RETURN_IF_ERROR(LoadConfig());

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
  TSR_ASSIGN_OR_RETURN(auto spec, ParseJobSpec(job["yaml"].get<std::string>(), job["source"].get<std::string>(),
                                               job["base_dir"].get<std::string>(), job["tenant"].get<std::string>(),
                                               comp));
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
    int k = SignalSession(shim, SIGTERM, shim);
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
  std::string jobdir = fmt::format("{}/jobs/{}", opts_.state_dir, id);
  std::string dir = fmt::format("{}/attempt-{}", jobdir, n);
  TSR_RETURN_IF_ERROR(MakeDirs(dir));
  std::string ckpt_dir = job["ckpt_dir"];
  TSR_RETURN_IF_ERROR(MakeDirs(ckpt_dir));
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
  lr.workdir = spec.run.workdir;
  lr.islands = islands;
  lr.command = spec.run.command;
  lr.env = spec.run.env;
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

void Reply(httplib::Response& res, int status, const json& body) {
  res.status = status;
  res.set_content(body.dump(), "application/json");
}
void Error(httplib::Response& res, int status, const std::string& msg) { Reply(res, status, {{"error", msg}}); }

// Parses the request body as JSON into *body; on failure answers 400 naming the parse error.
bool ParseBody(const httplib::Request& req, httplib::Response& res, json* body) {
  try {
    *body = json::parse(req.body);
    return true;
  } catch (const std::exception& e) {
    Error(res, 400, std::string("request body is not JSON: ") + e.what());
    return false;
  }
}

std::optional<Caller> Daemon::Auth(const httplib::Request& req, httplib::Response& res) {
  std::string h = req.get_header_value("Authorization");
  if (h.rfind("Bearer ", 0) != 0 || h.size() <= 7) {
    Error(res, 401,
          "missing bearer token: pass --token, set TESSERA_DAEMON_TOKEN, or run where STATE/token is readable");
    return std::nullopt;
  }
  auto rows = db_->Query("SELECT name, admin FROM tenants WHERE token=?1", {h.substr(7)});
  if (!rows.ok() || rows->empty()) {
    Error(res, 401, "the bearer token is not known to this daemon");
    return std::nullopt;
  }
  return Caller{(*rows)[0]["name"], (*rows)[0]["admin"].get<int64_t>() != 0};
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
    Reply(res, 200, {{"ok", true}, {"pid", ::getpid()}, {"state_dir", opts_.state_dir}});
  });

  http_.Post("/v1/jobs", [&](const httplib::Request& req, httplib::Response& res) {
    std::lock_guard<std::mutex> lk(mu_);
    auto c = Auth(req, res);
    if (!c) return;
    json body;
    if (!ParseBody(req, res, &body)) return;
    std::string source = body.value("source", "job.yaml"), yaml = body.value("yaml", ""),
                base = body.value("base_dir", "");
    std::vector<std::string> comp = body.value("compatible", std::vector<std::string>{});
    auto spec = ParseJobSpec(yaml, source, base, c->tenant, comp);
    if (!spec.ok()) return Error(res, 400, spec.status().message());
    // Admission: a job that no type of this catalog/fleet can ever run is refused now.
    json preview = nullptr;
    std::string waits;
    if (have_fleet_) {
      std::vector<sched::RunningJob> none;
      auto empty = PlanJob(*spec, none);
      if (!empty.ok()) return Error(res, 400, fmt::format("{}: {}", source, empty.status().message()));
      if (!empty->placed() && empty->infeasible->binding == sched::Binding::kCompatibility)
        return Error(res, 400,
                     fmt::format("{}: job '{}' can never run on this fleet: {}", source, spec->job.name,
                                 empty->infeasible->reason));
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
    std::string ckpt = spec->run.ckpt_dir.empty() ? fmt::format("{}/jobs/{}/ckpt", opts_.state_dir, id)
                                                  : spec->run.ckpt_dir;
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
    int64_t id = std::stoll(req.matches[1]);
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
      int64_t id = std::stoll(req.matches[1]);
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
      int64_t id = std::stoll(req.matches[1]);
      auto j = LoadJobFor(*c, id);
      if (!j.ok()) return Error(res, 404, j.status().message());
      path = fmt::format("{}/jobs/{}/job.log", opts_.state_dir, id);
    }
    auto text = ReadFile(path);
    std::string body = text.ok() ? *text : "";
    if (req.has_param("offset")) {
      size_t off = std::stoull(req.get_param_value("offset"));
      body = off < body.size() ? body.substr(off) : "";
    } else if (req.has_param("tail")) {
      size_t tail = std::stoull(req.get_param_value("tail"));
      if (body.size() > tail) body = body.substr(body.size() - tail);
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

  auto parse_doc = [](const json& body, const char* key, std::string* src, std::string* yaml) -> bool {
    if (!body.contains(key) || !body[key].is_object()) return false;
    *src = body[key].value("source", std::string(key) + ".yaml");
    *yaml = body[key].value("yaml", "");
    return true;
  };

  http_.Put("/v1/fleet", [&, parse_doc](const httplib::Request& req, httplib::Response& res) {
    std::lock_guard<std::mutex> lk(mu_);
    auto c = Auth(req, res);
    if (!c) return;
    if (!c->admin) return Error(res, 403, "registering a fleet needs the admin token (STATE/token)");
    json body;
    if (!ParseBody(req, res, &body)) return;
    std::string fs, fy, cs, cy, ps, py;
    if (!parse_doc(body, "fleet", &fs, &fy)) return Error(res, 400, "the request names no fleet");
    auto cur_cs = db_->GetMeta("catalog_source", "embedded default catalog");
    auto cur_cy = db_->GetMeta("catalog_yaml", kDefaultCatalogYaml);
    auto cur_ps = db_->GetMeta("policy_source", "embedded default policy");
    auto cur_py = db_->GetMeta("policy_yaml", kDefaultPolicyYaml);
    if (!parse_doc(body, "catalog", &cs, &cy)) cs = *cur_cs, cy = *cur_cy;
    if (!parse_doc(body, "policy", &ps, &py)) ps = *cur_ps, py = *cur_py;
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
    Status s = ApplyConfig(*cs, *cy, *fs, *fy, body.value("source", "policy.yaml"), body.value("yaml", ""), true);
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
  while (!g_stop) std::this_thread::sleep_for(std::chrono::milliseconds(50));
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
