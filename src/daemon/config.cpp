// daemon/config: the daemon's configuration and start-up — the embedded default catalog and policy, the
// catalog/fleet/policy in force (validated against the running jobs, stored in the job store), Init (state and
// work directories, lock, job store, ledger, admin token, reconciliation), and the tenants with their areas.
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>

#include "common/env.hpp"
#include "common/log.hpp"
#include "common/text.hpp"
#include "common/token.hpp"
#include "daemon/daemon_impl.hpp"
#include "daemon/executor.hpp"
#include "daemon/slurm.hpp"
#include "daemon/util.hpp"

namespace tessera::daemon {

const char* kDefaultCatalogYaml =
    R"(# Embedded default catalog: the two prices of the reference scenario (examples/fleet/reference/). Throughput is configuration.
currency: CNY
price_version: reference-2026-03
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
ConfigTexts DefaultConfig() {
  ConfigTexts c;
  c.catalog_source = "embedded default catalog";
  c.catalog_yaml = kDefaultCatalogYaml;
  c.policy_source = "embedded default policy";
  c.policy_yaml = kDefaultPolicyYaml;
  return c;
}

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
    if (opts_.executor == "slurm") TSR_RETURN_IF_ERROR(slurm::CheckNoSmShare(fleet));
  }
  if (have_fleet) {
    std::vector<sched::RunningJob> running;
    if (store_) {
      TSR_ASSIGN_OR_RETURN(running, Running(nullptr));
    }
    Status s = sched::CheckInputs(catalog, fleet.fleet, policy, running);
    if (!s.ok()) return s.WithContext("the running jobs must still fit the new fleet");
  }
  if (persist) {
    TSR_RETURN_IF_ERROR(
        store_->SaveConfig({catalog_src, catalog_yaml, fleet_src, fleet_yaml, policy_src, policy_yaml}));
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
  TSR_ASSIGN_OR_RETURN(auto stored, store_->LoadConfig(DefaultConfig()));
  std::string cat_src = stored.catalog_source, cat = stored.catalog_yaml;
  std::string pol_src = stored.policy_source, pol = stored.policy_yaml;
  std::string fl_src = stored.fleet_source, fl = stored.fleet_yaml;
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
  if (opts_.executor != "local" && opts_.executor != "slurm")
    return InvalidArgument(fmt::format("--executor '{}': expected local or slurm", opts_.executor));
  if (opts_.executor == "slurm") TSR_RETURN_IF_ERROR(CheckSlurmReady());
  // The tenants' areas are reachable by the jobs' identity; the state directory by nobody but the daemon.
  TSR_ASSIGN_OR_RETURN(work_dir_, ChooseWorkDir(opts_.work_dir, opts_.state_dir, opts_.state_dir_is_default,
                                                opts_.system_work_dir, identity_));
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
  if (::flock(lock_fd_, LOCK_EX | LOCK_NB) != 0) {
    // The running daemon's address and pid, from the daemon.json it wrote when it started listening.
    std::string who;
    auto info = ReadFile(opts_.state_dir + "/daemon.json");
    auto j = nlohmann::json::parse(info.ok() ? *info : std::string(), nullptr, /*allow_exceptions=*/false);
    if (j.is_object() && j.value("address", nlohmann::json()).is_string() &&
        j.value("pid", nlohmann::json()).is_number_integer())
      who = fmt::format(" (pid {}, listening on {})", j["pid"].get<int64_t>(), j["address"].get<std::string>());
    return SystemError(
        fmt::format("another tessera daemon{} already uses the state directory {}: stop it first, or give this one "
                    "another --state-dir",
                    who, opts_.state_dir));
  }
  TSR_ASSIGN_OR_RETURN(store_, JobStore::Open(opts_.state_dir + "/daemon.db"));
  ledger_path_ = opts_.state_dir + "/ledger.db";
  auto ledger = sched::Ledger::Open(ledger_path_);
  if (ledger.ok()) {
    ledger_ = std::move(ledger).value();
  } else {
    TSR_LOG_WARN("billing is off: {}", ledger.status().ToString());
  }

  TSR_RETURN_IF_ERROR(LoadAdminToken());
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
  TSR_ASSIGN_OR_RETURN(auto open, store_->OpenAttempts());
  for (const auto& a : open) {
    Event(a.attempt.job_id,
          opts_.executor == "slurm"
              ? fmt::format("daemon restarted: reconciling attempt {} (its Slurm job)", a.attempt.n)
              : fmt::format("daemon restarted: reconciling attempt {} (shim pid {})", a.attempt.n, a.attempt.shim_pid));
  }
  last_capacity_ms_ = NowMs();
  return Status::Ok();
}

// ---- security -----------------------------------------------------------------------------------------

// The admin token is created once and kept in STATE/token (0600) for the CLI; the daemon keeps its hash.
// `tessera daemon token rotate` writes a new one and sends SIGHUP, which reads it again.
Status Daemon::LoadAdminToken() {
  std::string token_path = opts_.state_dir + "/token";
  auto admin = ReadFile(token_path);
  std::string admin_token;
  if (admin.ok() && !admin->empty()) {
    admin_token = *admin;
    while (!admin_token.empty() && (admin_token.back() == '\n' || admin_token.back() == ' ')) admin_token.pop_back();
  }
  if (admin_token.empty()) {
    TSR_ASSIGN_OR_RETURN(admin_token, RandomToken("the admin token"));
    TSR_RETURN_IF_ERROR(WriteFileAtomic(token_path, admin_token + "\n", {.mode = 0600}));
  }
  admin_hash_ = TokenHash(admin_token);
  return Status::Ok();
}

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
  std::vector<TenantRow> rows;
  for (const auto& t : list) rows.push_back({t.name, t.token_sha256, t.admin});
  TSR_RETURN_IF_ERROR(store_->ReplaceTenants(rows));
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
  TSR_ASSIGN_OR_RETURN(auto spec, ParseJobSpec(yaml, source, base, tenant, compatible, area));
  // A class that no type of the catalog has a throughput for can never be placed: name it and the known ones
  // (a typo would otherwise read as "needs 2 cards; the largest possible is 2 cards").
  std::vector<std::string> classes;
  for (const auto& t : catalog_.types)
    for (const auto& [c, v] : t.throughput)
      if (std::find(classes.begin(), classes.end(), c) == classes.end()) classes.push_back(c);
  const std::string& cls = spec.job.workload_class;
  if (std::find(classes.begin(), classes.end(), cls) == classes.end()) {
    std::string list;
    for (const auto& c : classes) list += (list.empty() ? "" : ", ") + c;
    return InvalidArgument(fmt::format("{}: class: unknown class '{}'{} (the catalog {} has {})", source, cls,
                                       DidYouMean(cls, classes), catalog_.source,
                                       list.empty() ? "no throughput for any class" : list));
  }
  return spec;
}

}  // namespace tessera::daemon
