// daemon/slurm_executor: `tessera daemon --executor slurm`. The planner still chooses the cards; an admitted
// attempt becomes ONE heterogeneous Slurm job (sbatch), one component per card type with that type's GRES on the
// nodes the planner chose (partition = zone), whose batch script runs one step over all components
// (`srun --het-group=0,..`): one task per card, each a `tessera run` launcher of one rank, so the components are
// the job's islands. The attempt directory keeps slurm.json (the job id, its components, its output file) so
// that a restarted daemon finds its jobs again. Every pass reads the job's state (`scontrol show job`, at most
// every --slurm-poll), stores Slurm's state and reason as the job's reason (shown by `tessera queue`), copies
// new output into the job's log, and maps the end: COMPLETED → succeeded, FAILED → failed, CANCELLED →
// cancelled, NODE_FAIL → queued again (resume from the newest checkpoint). Stops are `scancel --signal=TERM`,
// the job's grace period, then `scancel`. Billing uses the start and end Slurm reports (sacct, else `sacct -c`
// from the jobcomp file, else scontrol's), else the daemon's own observation. Every Slurm command is bounded
// by --slurm-timeout.
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>

#include "common/log.hpp"
#include "common/token.hpp"
#include "daemon/daemon_impl.hpp"
#include "daemon/executor.hpp"
#include "daemon/metrics.hpp"
#include "daemon/slurm.hpp"
#include "daemon/util.hpp"

extern char** environ;

namespace tessera::daemon {

using json = nlohmann::json;

Status Daemon::CheckSlurmReady() {
  if (identity_.mode == JobIdentity::Mode::kSandbox)
    return Unsupported(
        "the Slurm executor runs jobs as their users through `sbatch --uid`, which needs a daemon running as root "
        "(bubblewrap, the non-root isolation, does not reach Slurm's nodes); run it as root, or pass "
        "--insecure-no-job-isolation to run jobs as the daemon's user");
  auto r = slurm::RunCommand({"sbatch", "--version"}, opts_.slurm_timeout_ms);
  if (r.exit_code != 0)
    return SystemError("--executor slurm: " + r.Describe("sbatch --version") +
                       " (install Slurm's client, e.g. Debian's slurm-client, and set SLURM_CONF if needed)");
  TSR_LOG_INFO("Slurm executor: {}", r.out.substr(0, r.out.find('\n')));
  return Status::Ok();
}

Status Daemon::StartSlurm(const JobRow& job, const AttemptRow& attempt, const LaunchRequest& lr,
                          const std::vector<Island>& islands, const sched::Placement& placement,
                          const std::string& own_dir) {
  int64_t id = job.id, n = attempt.n;
  auto fail = [&](const std::string& why) {
    Status s = store_->EndUnlaunchedAttempt(id, n, NowMs(), why);
    if (!s.ok()) TSR_LOG_ERROR("{}", s.ToString());
    FailJob(id, "could not start: " + why);
    return Status::Ok();
  };
  if (Status s = slurm::CheckNoSmShare(islands); !s.ok()) return fail(s.message());
  // One component per island (catalog order), on the Slurm nodes the planner chose for its type.
  slurm::SubmitRequest req;
  std::map<std::string, std::string> node_type;
  for (const auto& isl : islands) {
    slurm::Component c;
    const auto* t = catalog_.Find(isl.type);
    c.gres = t ? slurm::GresOf(*t) : isl.type;
    c.partition = placement.zone;
    for (const auto& nc : placement.by_node) {
      const auto* node = fleet_.fleet.Find(nc.node);
      if (!node || node->type != isl.type || nc.cards <= 0) continue;
      std::string sn = slurm::SlurmNodeOf(nc.node);
      auto [it, fresh] = node_type.emplace(sn, isl.type);
      if (!fresh && it->second != isl.type)
        return fail(
            fmt::format("types {} and {} are both placed on Slurm node {}: the components of a "
                        "heterogeneous job need nodes of their own (Slurm does not start it otherwise)",
                        it->second, isl.type, sn));
      c.nodes.emplace_back(sn, nc.cards);
    }
    req.components.push_back(std::move(c));
  }
  req.job_name = fmt::format("tessera-{}-{}", id, n);
  req.workdir = lr.workdir;
  req.output = fmt::format("{}/slurm-attempt-{}.log", own_dir, n);
  req.script = attempt.dir + "/job.sbatch";
  req.uid = lr.uid;
  req.gid = lr.gid;
  std::vector<std::string> cmd = lr.launcher.empty() ? std::vector<std::string>{lr.self_exe, "run"} : lr.launcher;
  for (auto& a : IslandArgs(islands)) cmd.push_back(a);
  cmd.push_back("--");
  for (const auto& c : lr.command) cmd.push_back(c);
  Status w = WriteFileAtomic(
      req.script, slurm::BatchScript(cmd, islands.size(), fmt::format("tessera daemon: job {} attempt {}", id, n)),
      {.mode = 0700});
  if (!w.ok()) return fail(w.message());
  auto args = slurm::SbatchArgs(req);
  if (!args.ok()) return fail(args.status().message());
  // The launchers of the job's tasks meet with one token (srun passes the environment on).
  auto token = RandomToken("the job token");
  if (!token.ok()) return fail(token.status().message());
  std::map<std::string, std::string> env = lr.env;
  env["TESSERA_TOKEN"] = *token;
  std::vector<std::string> envs = JobEnvironment(environ, env);
  std::vector<std::string> argv = {"sbatch"};
  argv.insert(argv.end(), args->begin(), args->end());
  auto r = slurm::RunCommand(argv, opts_.slurm_timeout_ms, &envs);
  std::string line = r.out.substr(0, r.out.find('\n'));
  std::string idtext = line.substr(0, line.find(';'));  // --parsable: "ID" or "ID;CLUSTER"
  if (r.exit_code != 0 || idtext.empty() || idtext.find_first_not_of("0123456789") != std::string::npos)
    return fail(r.exit_code != 0 ? r.Describe("sbatch")
                                 : fmt::format("`sbatch` printed no job id: '{}' {}", line, r.err));
  int64_t sid = std::stoll(idtext);
  json sj = {{"job_id", sid}, {"output", req.output}, {"submitted_ms", NowMs()}};
  if (Status s = WriteFileAtomic(attempt.dir + "/slurm.json", sj.dump()); !s.ok())
    TSR_LOG_ERROR("job {}: Slurm job {} submitted, but {}", id, sid, s.ToString());
  metrics::JobStarted(job.tenant, !attempt.resume_from.empty());
  if (attempt.wake_latency_ms) metrics::WakeLatency(*attempt.wake_latency_ms);
  std::string where;
  for (size_t i = 0; i < islands.size(); ++i) {
    std::string nodes;
    for (const auto& [nd, k] : req.components[i].nodes) nodes += (nodes.empty() ? "" : ",") + nd;
    where += fmt::format("{}{}x{} ({} on {})", where.empty() ? "" : " + ", islands[i].count, islands[i].type,
                         req.components[i].gres, nodes);
  }
  Event(id, fmt::format("attempt {} submitted to Slurm as heterogeneous job {}: {} in partition {}{}", n, sid, where,
                        placement.zone, attempt.resume_from.empty() ? "" : ", resuming from " + attempt.resume_from));
  (void)store_->SetRunningReason(id, fmt::format("Slurm job {}: submitted", sid));
  hold_.erase(id);
  return Status::Ok();
}

void Daemon::CopySlurmLog(const AttemptOfJob& a, const std::string& output) {
  std::string offfile = a.attempt.dir + "/log.offset";
  int64_t off = 0;
  if (auto t = ReadFile(offfile); t.ok() && !t->empty()) off = std::strtoll(t->c_str(), nullptr, 10);
  int fd = ::open(output.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) return;
  FILE* log = std::fopen(JobLogPath(a.attempt.job_id).c_str(), "ab");
  char buf[65536];
  int64_t copied = off;
  ssize_t got;
  while (log && (got = ::pread(fd, buf, sizeof buf, copied)) > 0) {
    std::fwrite(buf, 1, static_cast<size_t>(got), log);
    copied += got;
  }
  ::close(fd);
  if (log) std::fclose(log);
  if (copied != off) {
    FILE* f = std::fopen(offfile.c_str(), "wb");
    if (f) {
      std::fprintf(f, "%lld", static_cast<long long>(copied));
      std::fclose(f);
    }
  }
}

void Daemon::CheckSlurmAttempt(const AttemptOfJob& a, int64_t now) {
  int64_t job = a.attempt.job_id, n = a.attempt.n;
  auto key = std::make_pair(job, n);
  auto text = ReadFile(a.attempt.dir + "/slurm.json");
  json sj = text.ok() ? json::parse(*text, nullptr, false) : json();
  if (!sj.is_object() || !sj.value("job_id", json()).is_number_integer()) {
    if (now - a.attempt.started_ms > 10000) {
      // The daemon died between recording the attempt and submitting it (or sbatch's answer was lost).
      Status s = store_->DropNeverStartedAttempt(job, n);
      if (s.ok()) Event(job, fmt::format("attempt {} was never submitted to Slurm; queued again", n));
    }
    return;
  }
  int64_t sid = sj["job_id"];
  std::string output = sj.value("output", "");
  std::string sids = std::to_string(sid);
  // Read Slurm's state at most every --slurm-poll (at most every 250 ms while a stop is due).
  auto& polled = slurm_polled_ms_[key];
  int64_t every = a.stop_intent.empty() ? opts_.slurm_poll_ms : std::min<int64_t>(opts_.slurm_poll_ms, 250);
  if (now - polled < every) return;
  polled = now;
  CopySlurmLog(a, output);
  auto r = slurm::RunCommand({"scontrol", "--oneliner", "show", "job", sids}, opts_.slurm_timeout_ms);
  slurm::JobState st;
  bool known = false;
  if (r.exit_code == 0) {
    auto recs = slurm::ParseJobs(r.out);
    if (recs.ok()) {
      auto mine = slurm::RecordsOf(*recs, sid);
      if (!mine.empty()) {
        st = slurm::Combine(mine);
        known = true;
        if (!sj.contains("components")) {  // remembered for sacct -c, which does not print HetJobId
          json ids = json::array();
          for (const auto& m : mine) ids.push_back(m.id);
          sj["components"] = ids;
          (void)WriteFileAtomic(a.attempt.dir + "/slurm.json", sj.dump());
        }
      }
    } else {
      TSR_LOG_WARN("job {}: {}", job, recs.status().ToString());
    }
  }
  // Accounting (for jobs Slurm no longer holds, and for the billed times): sacct, else sacct -c (jobcomp file).
  auto accounting = [&](std::string* source) -> std::optional<slurm::JobState> {
    std::string ids = sids;
    if (sj.contains("components") && sj["components"].is_array()) {
      ids.clear();
      for (const auto& c : sj["components"]) ids += (ids.empty() ? "" : ",") + std::to_string(c.get<int64_t>());
    }
    for (bool jobcomp : {false, true}) {
      std::vector<std::string> argv = {
          "sacct", "-n", "-P", "-X", "-j", jobcomp ? ids : sids, "-o", "JobID,State,Start,End,ExitCode"};
      if (jobcomp) argv.insert(argv.begin() + 1, "-c");
      auto q = slurm::RunCommand(argv, opts_.slurm_timeout_ms);
      if (q.exit_code != 0) continue;
      auto recs = slurm::ParseSacct(q.out);
      if (!recs.ok()) continue;
      std::vector<slurm::JobRecord> mine;
      for (const auto& rec : *recs) {
        bool ours = rec.het_id == sid || rec.id == sid;
        for (const auto& c : sj.value("components", json::array())) ours |= rec.id == c.get<int64_t>();
        if (ours) mine.push_back(rec);
      }
      if (mine.empty()) continue;
      *source = jobcomp ? "sacct -c (the jobcomp file)" : "sacct";
      return slurm::Combine(mine);
    }
    return std::nullopt;
  };
  if (!known) {
    if (r.timed_out || (r.exit_code != 0 && r.err.find("Invalid job id") == std::string::npos)) {
      TSR_LOG_WARN("job {}: {}", job, r.Describe("scontrol show job " + sids));
      return;  // Slurm does not answer now: try again at the next poll
    }
    std::string source;
    auto acc = accounting(&source);
    if (!acc) {
      FinishAttempt(a, -1, 0, now, fmt::format("Slurm no longer knows job {} and accounting has no record of it", sid));
      return;
    }
    st = *acc;
  }

  bool ended = st.phase != slurm::Phase::kPending && st.phase != slurm::Phase::kRunning;
  if (!ended) {
    std::string reason = fmt::format("Slurm job {}: {}", sid, st.states);
    if (!st.reason.empty()) reason += " (" + st.reason + ")";
    if (st.phase == slurm::Phase::kRunning && !st.nodes.empty()) reason += " on " + st.nodes;
    if (slurm_reason_[key] != reason) {
      slurm_reason_[key] = reason;
      (void)store_->SetRunningReason(job, reason);
      Event(job, reason);
    }
    if (st.phase == slurm::Phase::kRunning) slurm_ran_.insert(key);
    if (st.phase == slurm::Phase::kRunning && st.start_unix > 0 && a.attempt.started_ms != st.start_unix * 1000)
      (void)store_->SetAttemptStart(job, n, st.start_unix * 1000);
    if (a.stop_intent.empty()) return;
    std::string intent = a.stop_intent;
    if (st.phase == slurm::Phase::kPending && !kill_sent_.count(key)) {
      auto c = slurm::RunCommand({"scancel", sids}, opts_.slurm_timeout_ms);
      kill_sent_.insert(key);
      Event(job, c.exit_code == 0 ? fmt::format("Slurm job {} was still pending: cancelled it ({})", sid, intent)
                                  : c.Describe("scancel " + sids));
      return;
    }
    if (!term_sent_.count(key)) {
      auto c = slurm::RunCommand({"scancel", "--signal=TERM", sids}, opts_.slurm_timeout_ms);
      term_sent_.insert(key);
      Event(job, c.exit_code == 0 ? fmt::format("sent SIGTERM to Slurm job {} (scancel --signal=TERM; {}); grace "
                                                "{:.1f} s",
                                                sid, intent, a.grace_ms / 1000.0)
                                  : c.Describe("scancel --signal=TERM " + sids));
    }
    int64_t requested = a.stop_requested_ms.value_or(now);
    if (now - requested > a.grace_ms && !kill_sent_.count(key)) {
      auto c = slurm::RunCommand({"scancel", sids}, opts_.slurm_timeout_ms);
      kill_sent_.insert(key);
      Event(job, c.exit_code == 0 ? fmt::format("grace period over: cancelled Slurm job {} (scancel)", sid)
                                  : c.Describe("scancel " + sids));
    }
    return;
  }

  // The end. Times: accounting's, else scontrol's, else what the daemon saw.
  CopySlurmLog(a, output);
  std::string source;
  auto acc = accounting(&source);
  int64_t start_s = acc && acc->start_unix > 0 ? acc->start_unix : st.start_unix;
  int64_t end_s = acc && acc->end_unix > 0 ? acc->end_unix : st.end_unix;
  if (!acc) source = start_s > 0 && end_s > 0 ? "scontrol show job" : "";
  int64_t started_ms = start_s > 0 ? start_s * 1000 : a.attempt.started_ms;
  int64_t ended_ms = end_s > 0 ? end_s * 1000 : now;
  if (start_s <= 0 || end_s <= 0) source = "the daemon's observation (Slurm reported no times)";
  if (started_ms != a.attempt.started_ms) (void)store_->SetAttemptStart(job, n, started_ms);
  Event(job, fmt::format("Slurm job {} ended {} (exit {}:{}); ran {} to {} by {}", sid, st.states, st.exit_code,
                         st.signal, FormatMs(started_ms), FormatMs(ended_ms), source));
  // Cancelled before it ever ran (Slurm gives such a job StartTime = EndTime): nothing to bill.
  bool never_ran = st.phase == slurm::Phase::kCancelled && !slurm_ran_.count(key) && start_s == end_s;
  slurm_polled_ms_.erase(key);
  slurm_reason_.erase(key);
  slurm_ran_.erase(key);
  AttemptOfJob end = a;
  switch (st.phase) {
    case slurm::Phase::kCompleted:
      FinishAttempt(end, 0, 0, ended_ms, "");
      break;
    case slurm::Phase::kNodeFail: {
      // The nodes Slurm now says are down are left out of planning: the job resumes on what is free now.
      std::string note = fmt::format("node failure: Slurm ended job {} as NODE_FAIL (nodes {})", sid,
                                     st.nodes.empty() ? "?" : st.nodes);
      std::vector<std::string> ids;
      json alloc = json::parse(a.attempt.alloc_json, nullptr, /*allow_exceptions=*/false);
      if (alloc.is_object() && alloc.value("by_node", json()).is_array())
        for (const auto& nc : alloc["by_node"])
          if (nc.is_object()) ids.push_back(nc.value("node", std::string()));
      auto shown = slurm::RunCommand({"scontrol", "show", "nodes"}, opts_.slurm_timeout_ms);
      auto nodes = shown.exit_code == 0
                       ? slurm::ParseNodes(shown.out)
                       : Result<std::vector<slurm::Node>>(InternalError(shown.Describe("scontrol show nodes")));
      std::string lost;
      if (nodes.ok())
        for (const auto& id : slurm::LostNodes(*nodes, ids))
          if (failed_nodes_.insert(id).second) lost += (lost.empty() ? "" : ", ") + id;
      FinishAttempt(end, -1, 0, ended_ms,
                    lost.empty() ? note + "; it resumes from its newest checkpoint"
                                 : RecordCapacityMove(a, fmt::format("{}: node(s) {} are left out until the fleet is "
                                                                     "registered again",
                                                                     note, lost)));
      break;
    }
    case slurm::Phase::kCancelled:
      if (end.stop_intent.empty()) {
        end.stop_intent = "cancel";
        FinishAttempt(end, st.exit_code, st.signal, ended_ms,
                      fmt::format("cancelled in Slurm (job {} {}), not by the daemon", sid, st.states));
        break;
      }
      // A stop the daemon asked for: the job ends as its intent says (queued again, or cancelled).
      FinishAttempt(end, st.exit_code == 0 && st.signal == 0 ? -1 : st.exit_code,
                    st.exit_code == 0 && st.signal == 0 ? SIGTERM : st.signal, ended_ms, "");
      break;
    default:
      FinishAttempt(end, st.exit_code == 0 && st.signal == 0 ? 1 : st.exit_code, st.signal, ended_ms, "");
  }
  if (never_ran) {
    if (Status s = store_->MarkBilled(job, n); s.ok())
      Event(job, fmt::format("not billed: Slurm job {} never ran", sid));
  }
}

}  // namespace tessera::daemon
