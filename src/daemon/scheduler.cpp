// daemon/scheduler: the scheduler thread — every tick (and at once on every event) it reaps ended attempts,
// bills them (billing.cpp), enforces grace periods, preempts for compliance or priority, and places queued jobs with
// the planner in priority order with backfill, starting each placed job's attempt through the shim.
#include <signal.h>
#include <sys/wait.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <exception>
#include <limits>

#include "common/log.hpp"
#include "daemon/daemon_impl.hpp"
#include "daemon/executor.hpp"
#include "daemon/metrics.hpp"
#include "daemon/tenant_reads.hpp"
#include "daemon/util.hpp"
#include "tessera/ckpt.hpp"

namespace tessera::daemon {

using json = nlohmann::json;

json PlacementToJson(const sched::Placement& p, const sched::Catalog& catalog, const FleetSpec& fleet) {
  json types = json::array(), nodes = json::array();
  for (const auto& t : p.by_type) {
    bool emu = true;
    int share = 0;  // the share of the type's emulated nodes (IslandsFor refuses two different ones)
    for (const auto& nc : p.by_node) {
      const auto* n = fleet.fleet.Find(nc.node);
      if (n && n->type == t.type && !fleet.IsEmulated(n->id)) emu = false;
      if (n && n->type == t.type) share = std::max(share, fleet.SmShare(n->id));
    }
    const auto* ct = catalog.Find(t.type);
    types.push_back({{"type", t.type},
                     {"vendor", ct ? ct->vendor : ""},
                     {"domestic", t.domestic},
                     {"cards", t.cards},
                     {"emulated", emu},
                     {"sm_share", emu ? share : 0},
                     {"cost_per_hour", sched::FormatMoney(t.cost_per_hour)}});
  }
  for (const auto& nc : p.by_node) {
    const auto* n = fleet.fleet.Find(nc.node);
    nodes.push_back({{"node", nc.node},
                     {"cards", nc.cards},
                     {"type", n ? n->type : ""},
                     {"emulated", fleet.IsEmulated(nc.node)},
                     {"sm_share", fleet.SmShare(nc.node)}});
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

// ---- helpers ------------------------------------------------------------------------------------------

void Daemon::Event(int64_t job_id, const std::string& text) {
  TSR_LOG_INFO("job {}: {}", job_id, text);
  Status s = store_->AddEvent(job_id, NowMs(), text);
  if (!s.ok()) TSR_LOG_WARN("{}", s.ToString());
}

void Daemon::FailJob(int64_t job_id, const std::string& reason) {
  Status s = store_->FailJob(job_id, reason, NowMs());
  if (!s.ok()) TSR_LOG_WARN("{}", s.ToString());
  Event(job_id, "failed: " + reason);
  metrics::CountJobEvent(store_.get(), job_id, metrics::kJobFailures);
}

Result<JobSpec> Daemon::SpecFor(const JobRow& job) {
  int64_t id = job.id;
  auto it = specs_.find(id);
  if (it != specs_.end()) return it->second;
  auto comp = SplitList(job.compatible);
  TSR_ASSIGN_OR_RETURN(auto spec, ParseSpec(job.yaml, job.source, job.base_dir, job.tenant, comp));
  specs_[id] = spec;
  return spec;
}

namespace {
// The attempt's allocation per node, as stored by Start; a row that does not hold one is an error naming it.
Status AllocationOf(const AttemptRow& a, std::vector<sched::NodeCards>* out) {
  json alloc = json::parse(a.alloc_json, nullptr, /*allow_exceptions=*/false);
  if (!alloc.is_object() || !alloc.contains("by_node") || !alloc["by_node"].is_array())
    return Corrupt(fmt::format("attempt {} of job {}: its allocation is not readable: {}", a.n, a.job_id,
                               a.alloc_json.substr(0, 80)));
  for (const auto& n : alloc["by_node"]) {
    if (!n.is_object() || !n.value("node", json()).is_string() || !n.value("cards", json()).is_number_integer())
      return Corrupt(
          fmt::format("attempt {} of job {}: a node of its allocation is not readable: {}", a.n, a.job_id, n.dump()));
    out->push_back({n["node"].get<std::string>(), n["cards"].get<int64_t>()});
  }
  return Status::Ok();
}
}  // namespace

Result<std::vector<sched::RunningJob>> Daemon::Running(std::vector<AttemptOfJob>* active_rows) {
  TSR_ASSIGN_OR_RETURN(auto rows, store_->OpenAttempts());
  std::vector<sched::RunningJob> out;
  for (auto& r : rows) {
    sched::RunningJob rj;
    rj.name = JobKey(r.name, r.attempt.job_id);
    rj.tenant = r.tenant;
    TSR_RETURN_IF_ERROR(AllocationOf(r.attempt, &rj.allocations));
    out.push_back(std::move(rj));
    if (active_rows) active_rows->push_back(r);
  }
  return out;
}

Result<sched::PlanResult> Daemon::PlanJob(const JobSpec& spec, const std::vector<sched::RunningJob>& running,
                                          const std::string& moving, std::optional<int64_t> day) {
  sched::PlanRequest req;
  req.catalog = &catalog_;
  req.fleet = &fleet_.fleet;
  req.policy = &policy_;
  req.job = &spec.job;
  req.running = &running;
  req.day = day.value_or(sched::Today());
  auto plan = [&] { return moving.empty() ? sched::Plan(req) : sched::PlanMove(req, moving); };
  if (!failed_nodes_.empty()) {
    // Nodes that lost a job's ranks are avoided while the job fits elsewhere; else it waits for them as before.
    sched::Fleet usable = UsableFleet(running);
    req.fleet = &usable;
    auto p = plan();
    req.fleet = &fleet_.fleet;
    if (!p.ok() || p->placed()) return p;
  }
  return plan();
}

// ---- the scheduler ------------------------------------------------------------------------------------

void Daemon::Loop() {
  std::unique_lock<std::mutex> lk(mu_);
  while (!g_stop) {
    // Errors are Status values; an exception here is a bug, logged so that it does not end the daemon.
    try {
      Tick();
    } catch (const std::exception& e) {
      TSR_LOG_ERROR("scheduler: internal error in a pass: {}", e.what());
    } catch (...) {
      TSR_LOG_ERROR("scheduler: internal error in a pass: unknown exception");
    }
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
  auto active = store_->OpenAttempts();
  if (!active.ok()) {
    TSR_LOG_ERROR("{}", active.status().ToString());
    return;
  }
  for (const auto& a : *active) CheckAttempt(a, now);
  PruneCheckpoints(*active, now);
  BillPending();
  Schedule(now);
}

void Daemon::CheckAttempt(const AttemptOfJob& a, int64_t now) {
  if (opts_.executor == "slurm") return CheckSlurmAttempt(a, now);
  int64_t job = a.attempt.job_id, n = a.attempt.n;
  std::string dir = a.attempt.dir;
  pid_t shim = static_cast<pid_t>(a.attempt.shim_pid);
  if (shim == 0) {
    auto pids = ReadPidFile(dir);
    if (pids.ok()) {
      shim = pids->shim;
      Status s = store_->SetShim(job, n, shim, ProcessStartTicks(shim));
      if (!s.ok()) TSR_LOG_ERROR("{}", s.ToString());
    } else if (now - a.attempt.started_ms > 10000) {
      // The daemon died between recording the attempt and starting it: it never ran.
      Status s = store_->DropNeverStartedAttempt(job, n);
      if (!s.ok()) {
        TSR_LOG_ERROR("{}", s.ToString());
        return;
      }
      Event(job, fmt::format("attempt {} never started (daemon stopped first); queued again", n));
      return;
    } else {
      return;
    }
  }
  auto ex = ReadExitFile(dir);
  if (ex.ok()) {
    FinishAttempt(a, ex->exit_code, ex->signal, ex->ended_ms, "", ex->started);
    return;
  }
  int64_t ticks = a.attempt.shim_start_ticks;
  bool alive = ProcessAlive(shim) && (ticks < 0 || ProcessStartTicks(shim) == ticks);
  if (!alive) {
    ex = ReadExitFile(dir);
    if (ex.ok()) {
      FinishAttempt(a, ex->exit_code, ex->signal, ex->ended_ms, "", ex->started);
    } else {
      SignalSession(shim, SIGKILL, 0);
      FinishAttempt(a, -1, SIGKILL, now, "the job's shim disappeared (host restart or kill -9)");
    }
    return;
  }
  std::string intent = a.stop_intent;
  if (intent.empty()) return;
  auto key = std::make_pair(job, n);
  if (!term_sent_.count(key)) {
    // In a sandbox the shim's child is bubblewrap's monitor: it must outlive the job to report its end.
    auto pids = ReadPidFile(dir);
    pid_t spare = pids.ok() && pids->sandboxed ? pids->child : 0;
    int k = SignalSession(shim, SIGTERM, shim, spare);
    term_sent_.insert(key);
    Event(job, fmt::format("sent SIGTERM to {} process(es) of attempt {} ({}); grace {:.1f} s", k, n, intent,
                           a.grace_ms / 1000.0));
  }
  int64_t requested = a.stop_requested_ms.value_or(now);
  if (now - requested > a.grace_ms && !kill_sent_.count(key)) {
    int k = SignalSession(shim, SIGKILL, shim);
    kill_sent_.insert(key);
    Event(job, fmt::format("grace period over: sent SIGKILL to {} process(es) of attempt {}", k, n));
  }
}

void Daemon::FinishAttempt(const AttemptOfJob& a, int exit_code, int sig, int64_t ended_ms, const std::string& note,
                           bool started) {
  int64_t job = a.attempt.job_id, n = a.attempt.n;
  std::string intent = a.stop_intent;
  auto jr = store_->Job(job);
  if (!jr.ok()) {
    TSR_LOG_ERROR("job {}: cannot record the end of attempt {}: {}", job, n, jr.status().ToString());
    return;
  }
  std::string how =
      sig ? fmt::format("killed by signal {} ({})", sig, strsignal(sig)) : fmt::format("exit code {}", exit_code);
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
    reason = jr->reason;
    terminal = false;
  } else if (!note.empty()) {
    state = "queued";
    reason = "restarting: " + note;
    terminal = false;
  } else if (std::string lost = CapacityLost(a); !lost.empty()) {
    state = "queued";
    reason = "restarting: " + lost;
    terminal = false;
  } else {
    state = "failed";
    reason = how + fmt::format(" (see `tessera logs {}`)", job);
  }
  std::string end_reason = !note.empty() ? note : intent.empty() ? how : intent + ": " + how;
  Status s = store_->FinishAttempt(job, n, ended_ms, exit_code, sig, end_reason, state, reason, terminal);
  if (!s.ok()) {
    TSR_LOG_ERROR("job {}: cannot record the end of attempt {}: {}", job, n, s.ToString());
    return;
  }
  Event(job, fmt::format("attempt {} ended: {}; job is {}", n, end_reason, state));
  if (!started) {
    s = store_->MarkBilled(job, n);
    if (s.ok()) Event(job, fmt::format("attempt {} never started its program: not billed", n));
    if (!s.ok()) TSR_LOG_ERROR("job {}: {}", job, s.ToString());
  }
  if (state == "failed") metrics::CountJobEvent(store_.get(), job, metrics::kJobFailures);
  term_sent_.erase({job, n});
  kill_sent_.erase({job, n});
  if (state != "queued") {
    hold_.erase(job);
    moving_.erase(job);
  }
  last_capacity_ms_ = std::max(last_capacity_ms_, ended_ms);
  wake_ = true;
}

Status Daemon::RequestStop(int64_t job_id, const std::string& intent, const std::string& reason) {
  TSR_RETURN_IF_ERROR(store_->RequestStop(job_id, intent, reason, NowMs()));
  Event(job_id, fmt::format("stop requested ({}): {}", intent, reason));
  if (intent == "preempt") metrics::CountJobEvent(store_.get(), job_id, metrics::kJobPreemptions);
  wake_ = true;
  return Status::Ok();
}

Result<StartDirs> PrepareStartDirs(const std::string& area, const std::string& own, const std::string& ckpt_dir,
                                   const std::string& workdir, int64_t uid, int64_t gid) {
  // What the job may reach: its own directory, checkpoint directory and working directory, all inside its tenant's
  // area (checked again now: a path's symlinks may have changed since the submission), created without following
  // symlinks and owned by the job's identity; then the newest checkpoint, read beneath the area (OpenJobDir).
  TSR_RETURN_IF_ERROR(MakeDirsInside(area, own, 0700, uid, gid));
  StartDirs d;
  TSR_ASSIGN_OR_RETURN(d.ckpt_dir, ConfinePath("checkpoint.dir", ckpt_dir, area, area));
  TSR_RETURN_IF_ERROR(MakeDirsInside(area, d.ckpt_dir, 0700, uid, gid));
  d.workdir = own;
  if (!workdir.empty()) {
    TSR_ASSIGN_OR_RETURN(d.workdir, ConfinePath("workdir", workdir, area, area));
    TSR_RETURN_IF_ERROR(MakeDirsInside(area, d.workdir, 0700, uid, gid));
  }
  auto fd = OpenJobDir(area, d.ckpt_dir);
  d.latest = fd.ok() ? ckpt::Latest(FdPath(fd->get())) : Result<ckpt::LatestInfo>(fd.status());
  return d;
}

Status Daemon::Start(const JobRow& job, const JobSpec& spec, const sched::Placement& placement, int64_t now) {
  int64_t id = job.id;
  int64_t n = job.attempts + 1;
  TSR_ASSIGN_OR_RETURN(auto islands, IslandsFor(placement, catalog_, fleet_, spec.job.workload_class));
  std::string tenant = job.tenant;
  TSR_ASSIGN_OR_RETURN(auto area, TenantArea(tenant));
  int64_t uid = -1, gid = -1;
  TSR_RETURN_IF_ERROR(IdentityFor(tenant, &uid, &gid));
  std::string own = fmt::format("{}/{}", area, id);
  // Made and read off the daemon's lock (daemon/tenant_reads, AsyncReads): a read that is not done within the
  // bound keeps the job queued, and a later pass picks its answer up.
  auto prepared = start_reads_.Get(
      fmt::format("{}/{}", id, n),
      [area, own, ckpt_in = job.ckpt_dir, workdir_in = spec.run.workdir, uid, gid] {
        return PrepareStartDirs(area, own, ckpt_in, workdir_in, uid, gid);
      },
      kTenantReadMs, kStartDirsFreshMs);
  if (!prepared)
    return Timeout(fmt::format(
        "its directories are being made and its checkpoint directory {} read for the step it resumes from (a large "
        "checkpoint's data is read whole; a stalled network or FUSE mount does not answer): it starts when that "
        "is done",
        job.ckpt_dir));
  TSR_ASSIGN_OR_RETURN(StartDirs dirs, std::move(*prepared));
  const std::string& ckpt_dir = dirs.ckpt_dir;
  const std::string& workdir = dirs.workdir;
  // The daemon's own files of the job (log, pid.json, exit.json) stay in the state directory.
  std::string jobdir = JobDir(id);
  std::string dir = fmt::format("{}/attempt-{}", jobdir, n);
  TSR_RETURN_IF_ERROR(MakeDirs(dir, 0700));
  std::string resume;
  if (dirs.latest.ok() && dirs.latest->step >= 0) {
    resume = fmt::format("{}/step-{:010d}", ckpt_dir, dirs.latest->step);
    for (const auto& w : dirs.latest->warnings) Event(id, "checkpoint warning: " + w);
  }
  json alloc = PlacementToJson(placement, catalog_, fleet_);
  alloc["islands"] = IslandsToJson(islands);
  CompleteMove(id, job.tenant, &alloc, now);
  std::optional<int64_t> latency;
  if (job.blocked_since_ms && last_capacity_ms_ >= *job.blocked_since_ms) latency = now - last_capacity_ms_;

  AttemptRow attempt;
  attempt.job_id = id;
  attempt.n = n;
  attempt.dir = dir;
  attempt.alloc_json = alloc.dump();
  attempt.resume_from = resume;
  attempt.started_ms = now;
  attempt.wake_latency_ms = latency;
  TSR_RETURN_IF_ERROR(store_->StartAttempt(attempt));

  LaunchRequest lr;
  lr.self_exe = opts_.self_exe;
  lr.launcher = opts_.launcher;
  lr.attempt_dir = dir;
  lr.log_path = JobLogPath(id);
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
    std::string header =
        fmt::format("=== tessera daemon: job {} ({}) attempt {} at {} on", id, spec.job.name, n, FormatMs(now));
    for (const auto& i : islands)
      header += fmt::format(
          " {}x{}{}", i.count, i.type,
          !i.emulated      ? ""
          : i.sm_share > 0 ? fmt::format(" (emulated: {}, not real {} hardware)", EmulationKind(i.sm_share), i.type)
                           : " (emulated on host)");
    header += resume.empty() ? "; fresh start" : "; resuming from " + resume;
    header += " ===\n";
    FILE* f = std::fopen(lr.log_path.c_str(), "ab");
    if (f) {
      std::fputs(header.c_str(), f);
      std::fclose(f);
    }
  }
  if (opts_.executor == "slurm") return StartSlurm(job, attempt, lr, islands, placement, own);
  auto pid = Launch(lr);
  if (!pid.ok()) {
    Status s = store_->EndUnlaunchedAttempt(id, n, NowMs(), pid.status().message());
    if (!s.ok()) TSR_LOG_ERROR("{}", s.ToString());
    FailJob(id, "could not start: " + pid.status().message());
    return Status::Ok();
  }
  children_.insert(*pid);
  metrics::JobStarted(spec.job.tenant, !resume.empty());
  if (latency) metrics::WakeLatency(*latency);
  // Without the pid the next pass finds it in pid.json (CheckAttempt), so a failure here is logged only.
  if (Status s = store_->SetShim(id, n, *pid, ProcessStartTicks(*pid)); !s.ok()) TSR_LOG_ERROR("{}", s.ToString());
  std::string where;
  for (const auto& i : islands)
    where += fmt::format("{}{}x{}{}", where.empty() ? "" : " + ", i.count, i.type,
                         !i.emulated      ? ""
                         : i.sm_share > 0 ? " (emulated, " + EmulationKind(i.sm_share) + ")"
                                          : " (emulated)");
  Event(id, fmt::format("attempt {} started on {} in zone {} (shim pid {}){}{}", n, where, placement.zone, *pid,
                        resume.empty() ? "" : ", resuming from " + resume,
                        latency ? fmt::format(", {} ms after capacity became available", *latency) : ""));
  hold_.erase(id);
  moving_.erase(id);
  return Status::Ok();
}

void Daemon::Schedule(int64_t now) {
  auto queued = store_->QueuedJobs();
  if (!queued.ok()) {
    TSR_LOG_ERROR("scheduler: {}", queued.status().ToString());
    return;
  }
  std::vector<AttemptOfJob> active;
  auto running = Running(&active);
  if (!running.ok()) {
    TSR_LOG_ERROR("scheduler: {}", running.status().ToString());
    return;
  }
  bool stopping =
      std::any_of(active.begin(), active.end(), [](const AttemptOfJob& a) { return !a.stop_intent.empty(); });
  if (!stopping) hold_.clear();
  int64_t hold = std::numeric_limits<int64_t>::min();
  for (const auto& [id, prio] : hold_) hold = std::max(hold, prio);

  // Policy: a floor that rose (new policy, or a new date in the calendar) can make the running jobs
  // non-compliant; stop the lowest-priority jobs until the remaining ones comply, moving each to a compliant mix
  // chosen now where its job file allows it (remix.cpp).
  sched::Ppm floor_now = policy_.FloorAt(sched::Today());
  if (floor_now != last_floor_) policy_changed_ = true;
  last_floor_ = floor_now;
  if (have_fleet_ && !stopping && policy_changed_) {
    policy_changed_ = false;
    auto share = sched::FleetShare(catalog_, fleet_.fleet, policy_, *running, sched::Today());
    if (share.ok() && !share->compliant && !active.empty()) {
      PolicyMoves(active, *running, *share);
      return;  // place nothing until the preempted jobs have stopped
    }
  }
  // Cost: at a checkpoint boundary of a `remix: cost` job, a cheaper compliant mix may be worth a move.
  if (have_fleet_ && !stopping && CostMoves(active, *running, now)) return;
  // Cards are kept for jobs being moved: no job of their priority or lower takes them first.
  int64_t moving_prio = std::numeric_limits<int64_t>::min();
  std::string movers;
  for (const auto& [id, prio] : moving_) {
    moving_prio = std::max(moving_prio, prio);
    movers += (movers.empty() ? "" : ", ") + std::to_string(id);
  }

  int64_t position = 0;
  bool tried_preempt = stopping;
  for (const auto& job : *queued) {
    int64_t id = job.id;
    auto spec = SpecFor(job);
    if (!spec.ok()) {
      FailJob(id, spec.status().message());
      continue;
    }
    std::string reason;
    if (!have_fleet_) {
      reason = "no fleet registered yet (tessera fleet register FLEET.yaml)";
    } else if (job.priority < hold) {
      reason = "held: cards freed by preemption go to a higher-priority job first";
    } else if (!moving_.empty() && !moving_.count(id) && job.priority <= moving_prio) {
      reason = fmt::format("held: cards are kept for job(s) {} moving to another mix", movers);
    } else {
      auto plan = PlanJob(*spec, *running);
      if (!plan.ok()) {
        reason = "planner error: " + plan.status().message();
      } else if (plan->placed()) {
        Status s = Start(job, *spec, *plan->placement, now);
        if (s.code() == Code::kTimeout) {
          reason = s.message();  // its checkpoint directory did not answer (daemon/tenant_reads): it waits
        } else {
          if (!s.ok()) {
            FailJob(id, s.message());
          } else {
            sched::RunningJob rj;
            rj.name = JobKey(job.name, id);
            rj.tenant = job.tenant;
            rj.allocations = plan->placement->by_node;
            running->push_back(rj);
          }
          continue;
        }
      } else {
        reason = plan->infeasible->reason;
        if (!plan->infeasible->fix.empty()) reason += " (" + plan->infeasible->fix + ")";
        if (moving_.erase(id)) Event(id, "its move's new mix is no longer free; it waits in the queue: " + reason);
        // Preemption: the first blocked job may take cards from lower-priority running jobs.
        if (!tried_preempt) {
          tried_preempt = true;
          std::vector<size_t> cand;
          for (size_t i = 0; i < active.size(); ++i)
            if (active[i].priority < job.priority) cand.push_back(i);
          std::sort(cand.begin(), cand.end(), [&](size_t x, size_t y) {
            if (active[x].priority != active[y].priority) return active[x].priority < active[y].priority;
            return active[x].attempt.started_ms > active[y].attempt.started_ms;
          });
          std::vector<sched::RunningJob> rest = *running;
          for (size_t k = 0; k < cand.size(); ++k) {
            std::string key = JobKey(active[cand[k]].name, active[cand[k]].attempt.job_id);
            std::erase_if(rest, [&](const sched::RunningJob& r) { return r.name == key; });
            auto p = PlanJob(*spec, rest);
            if (!p.ok() || !p->placed()) continue;
            std::string victims;
            for (size_t v = 0; v <= k; ++v) {
              int64_t vid = active[cand[v]].attempt.job_id;
              victims += (victims.empty() ? "" : ", ") + std::to_string(vid);
              Status s = RequestStop(vid, "preempt",
                                     fmt::format("preempted for job {} (priority {} > {}); will resume from its "
                                                 "newest checkpoint",
                                                 id, job.priority, active[cand[v]].priority));
              if (!s.ok()) TSR_LOG_ERROR("{}", s.ToString());
            }
            hold_[id] = job.priority;
            hold = std::max(hold, job.priority);
            reason = fmt::format("waiting for job(s) {} to checkpoint and stop (preempted for this job)", victims);
            break;
          }
        }
      }
    }
    ++position;
    if (job.reason != reason || job.position != position || !job.blocked_since_ms) {
      Status s = store_->SetQueueReason(id, reason, position, now);
      if (!s.ok()) TSR_LOG_ERROR("scheduler: {}", s.ToString());
    }
  }
}

}  // namespace tessera::daemon
