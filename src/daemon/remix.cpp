// daemon/remix: moving running jobs to another mix of cards (docs/daemon.md, "Moving running jobs"). When the
// floor in force rises and the running jobs break it, the lowest-priority jobs are stopped, each with a new
// compliant mix chosen for it now (`remix: policy`, the default); at each new committed checkpoint of a
// `remix: cost` job, the planner's best compliant mix for it is compared with its current one, and the job
// moves when the predicted gain in work per unit of money over its remaining work, after paying the restart,
// clears `remix.min_gain`. A move is a stop (SIGTERM, grace: the job checkpoints) and a start on the new mix
// from that checkpoint; the cards it needs are kept for it in between, and the move is recorded with the
// attempt that completes it. Under the local executor, an attempt whose ranks were killed by SIGKILL from outside
// the launcher lost capacity: the nodes of those islands' types are left out of planning and the job is queued
// again at once (a `capacity` move) to resume on what is free.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <regex>
#include <set>

#include "common/env.hpp"
#include "common/log.hpp"
#include "daemon/daemon_impl.hpp"
#include "daemon/metrics.hpp"
#include "daemon/tenant_reads.hpp"
#include "daemon/util.hpp"
#include "tessera/ckpt.hpp"

namespace tessera::daemon {

using json = nlohmann::json;

namespace {

std::string MoveKey(int64_t job) { return fmt::format("move.{}", job); }

// The step of a "DIR/step-NNNNNNNNNN" resume point; 0 for a fresh start.
int64_t ResumeStep(const std::string& resume_from) {
  auto p = resume_from.rfind("step-");
  if (p == std::string::npos) return 0;
  auto v = env::ParseInt("resume step", resume_from.substr(p + 5), 0, std::numeric_limits<int64_t>::max());
  return v.ok() ? *v : 0;
}

}  // namespace

// The last "step N[/M]" line in the tail of a log: the job's progress as the example trainer prints it.
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
  // At the start of a line, or after `tessera run`'s "[rank 0 ascend] " prefix: not "checkpoint step 400 committed".
  static const std::regex re(R"((?:^|\n|\] )step (\d+)(?:/(\d+))?(?: loss ([0-9.eE+-]+))?)");
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

Mix MixOfAllocation(const std::string& alloc_json) {
  Mix mix;
  json alloc = json::parse(alloc_json, nullptr, /*allow_exceptions=*/false);
  if (!alloc.is_object() || !alloc.value("by_type", json()).is_array()) return mix;
  for (const auto& t : alloc["by_type"])
    if (t.is_object() && t.value("type", json()).is_string() && t.value("cards", json()).is_number_integer())
      mix[t["type"].get<std::string>()] += t["cards"].get<int64_t>();
  return mix;
}

Mix MixOfPlacement(const sched::Placement& p) {
  Mix mix;
  for (const auto& t : p.by_type) mix[t.type] += t.cards;
  return mix;
}

std::string MixText(const Mix& mix) {
  std::string out;
  for (const auto& [type, cards] : mix) out += fmt::format("{}{}x{}", out.empty() ? "" : " + ", cards, type);
  return out.empty() ? "no cards" : out;
}

MixValue ValueOfMix(const Mix& mix, const sched::Catalog& catalog, const std::string& workload_class) {
  MixValue v;
  for (const auto& [type, cards] : mix) {
    const auto* t = catalog.Find(type);
    if (!t) continue;
    v.cost_per_hour += t->price_per_card_hour * cards;
    auto th = t->throughput.find(workload_class);
    if (th != t->throughput.end()) v.throughput += th->second * cards;
  }
  return v;
}

std::optional<double> PredictedGain(const MixValue& from, const MixValue& to, double remaining_s, double restart_s) {
  if (from.throughput <= 0 || to.throughput <= 0 || to.cost_per_hour <= 0 || remaining_s <= 0) return std::nullopt;
  double cost_from = remaining_s * static_cast<double>(from.cost_per_hour);
  double to_s = remaining_s * static_cast<double>(from.throughput) / static_cast<double>(to.throughput);
  double cost_to = (to_s + restart_s) * static_cast<double>(to.cost_per_hour);
  return cost_from / cost_to - 1.0;
}

std::string FormatGain(std::optional<double> gain) {
  return gain ? fmt::format("{:+.1f}%", *gain * 100.0) : std::string("unknown");
}

std::string MoveSummary(const json& move, const std::string& currency) {
  auto num = [&](const char* k) {
    return move.is_object() && move.value(k, json()).is_number() ? std::optional<double>(move[k].get<double>())
                                                                 : std::nullopt;
  };
  std::string reason = move.is_object() ? move.value("reason", std::string("?")) : "?";
  std::string why = move.is_object() ? move.value("why", std::string()) : "";
  if (reason == "cost")
    return "for its cost: " +
           (why.empty() ? fmt::format("predicted gain in work per {} {}", currency, FormatGain(num("predicted_gain")))
                        : why);
  std::string out = reason == "policy"     ? "required by the policy, not chosen for its cost"
                    : reason == "capacity" ? "required by lost capacity, not chosen for its cost"
                                           : "moved (" + reason + ")";
  if (!why.empty()) out += ": " + why;
  if (reason == "policy" && num("rate_change")) {
    const double r = *num("rate_change");
    out += r == 0
               ? fmt::format("; the new mix does as much work per {} (per hour of work, before the restart)", currency)
               : fmt::format("; the new mix does {:.1f}% {} work per {} (per hour of work, before the restart)",
                             std::abs(r) * 100, r < 0 ? "less" : "more", currency);
  }
  return out;
}

std::optional<double> Daemon::RemainingSeconds(const AttemptOfJob& a, int64_t now) {
  json p = ProgressFromLog(JobLogPath(a.attempt.job_id));
  if (!p.is_object() || !p.contains("of")) return std::nullopt;
  int64_t step = p["step"], of = p["of"], from = ResumeStep(a.attempt.resume_from);
  if (step <= from || of <= step || now <= a.attempt.started_ms) return std::nullopt;
  double per_step = static_cast<double>(now - a.attempt.started_ms) / 1000.0 / static_cast<double>(step - from);
  return per_step * static_cast<double>(of - step);
}

double Daemon::RestartSeconds(int64_t job_id, const RemixSpec& remix) {
  auto atts = store_->Attempts(job_id);
  if (atts.ok()) {
    for (auto it = atts->rbegin(); it != atts->rend(); ++it) {
      json alloc = json::parse(it->alloc_json, nullptr, /*allow_exceptions=*/false);
      if (alloc.is_object() && alloc.contains("move") && alloc["move"].value("restart_ms", json()).is_number_integer())
        return alloc["move"]["restart_ms"].get<int64_t>() / 1000.0;
    }
  }
  return static_cast<double>(remix.restart_ms) / 1000.0;
}

std::optional<int64_t> Daemon::LastMoveMs(int64_t job_id) {
  auto atts = store_->Attempts(job_id);
  if (!atts.ok()) return std::nullopt;
  for (auto it = atts->rbegin(); it != atts->rend(); ++it) {
    json alloc = json::parse(it->alloc_json, nullptr, /*allow_exceptions=*/false);
    if (alloc.is_object() && alloc.contains("move")) return it->started_ms;
  }
  return std::nullopt;
}

Status Daemon::RequestMove(int64_t job_id, int64_t priority, const MoveRequest& m) {
  json rec = {{"reason", m.reason},      {"why", m.why},
              {"from", m.from},          {"to", m.to},
              {"requested_ms", NowMs()}, {"predicted_gain", m.gain ? json(*m.gain) : json()}};
  if (m.rate_change) rec["rate_change"] = *m.rate_change;
  TSR_RETURN_IF_ERROR(store_->SetMeta(MoveKey(job_id), rec.dump()));
  moving_[job_id] = priority;
  return RequestStop(
      job_id, "preempt",
      fmt::format("moving ({}) from {} to {}: {}", m.reason, m.from, m.to, MoveSummary(rec, catalog_.currency)));
}

void Daemon::CompleteMove(int64_t job_id, const std::string& tenant, json* alloc, int64_t now) {
  auto text = store_->GetMeta(MoveKey(job_id), "");
  if (!text.ok() || text->empty()) return;
  json rec = json::parse(*text, nullptr, /*allow_exceptions=*/false);
  if (Status s = store_->SetMeta(MoveKey(job_id), ""); !s.ok()) TSR_LOG_ERROR("{}", s.ToString());
  if (!rec.is_object() || !rec.value("reason", json()).is_string()) return;
  std::string to = MixText(MixOfAllocation(alloc->dump()));
  rec["to"] = to;  // the mix it starts on now
  if (rec.value("requested_ms", json()).is_number_integer())
    rec["restart_ms"] = std::max<int64_t>(0, now - rec["requested_ms"].get<int64_t>());
  (*alloc)["move"] = rec;
  std::string reason = rec["reason"];
  metrics::Default().Inc(metrics::kJobMoves, {{"tenant", tenant}, {"reason", reason}});
  Event(job_id, fmt::format("moved ({}): {} -> {}; {}", reason, rec.value("from", std::string()), to,
                            MoveSummary(rec, catalog_.currency)));
}

void Daemon::PolicyMoves(const std::vector<AttemptOfJob>& active, const std::vector<sched::RunningJob>& running,
                         const sched::ShareStatus& share) {
  std::vector<size_t> order(active.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](size_t x, size_t y) {
    if (active[x].priority != active[y].priority) return active[x].priority < active[y].priority;
    return active[x].attempt.started_ms > active[y].attempt.started_ms;
  });
  // `rest`: what runs once the jobs chosen so far have stopped, with the new mixes chosen for them.
  std::vector<sched::RunningJob> rest = running;
  std::string why = fmt::format("the fleet's domestic share {} is below the floor {} in force today",
                                sched::FormatShare(share.share), sched::FormatShare(share.floor));
  for (size_t idx : order) {
    const AttemptOfJob& a = active[idx];
    int64_t id = a.attempt.job_id;
    std::string key = JobKey(a.name, id);
    auto old = std::find_if(rest.begin(), rest.end(), [&](const sched::RunningJob& r) { return r.name == key; });
    if (old == rest.end()) continue;
    sched::RunningJob before = *old;
    auto job = store_->Job(id);
    auto spec = job.ok() ? SpecFor(*job) : Result<JobSpec>(job.status());
    std::optional<sched::PlanResult> plan;
    if (spec.ok() && spec->run.remix.mode != RemixMode::kNever) {
      auto p = PlanJob(*spec, rest, key);
      if (p.ok()) plan = std::move(p).value();
    }
    std::erase_if(rest, [&](const sched::RunningJob& r) { return r.name == key; });
    bool moved = plan && plan->placed();
    if (moved) {
      Mix from = MixOfAllocation(a.attempt.alloc_json), to = MixOfPlacement(*plan->placement);
      if (to == from) {
        rest.push_back(before);  // its own mix keeps the floor next to the rest: it need not stop
      } else {
        // The floor requires this move whatever it costs: no predicted gain (a restart charged against a few
        // seconds of remaining work made it look like a loss that nobody chose); the rates of the two mixes are
        // compared instead, per hour of work.
        MixValue vf = ValueOfMix(from, catalog_, spec->job.workload_class);
        MixValue vt = ValueOfMix(to, catalog_, spec->job.workload_class);
        Status s =
            RequestMove(id, a.priority,
                        {"policy", why, MixText(from), MixText(to), std::nullopt, PredictedGain(vf, vt, 3600.0, 0.0)});
        if (!s.ok()) TSR_LOG_ERROR("{}", s.ToString());
        rest.push_back({key, a.tenant, plan->placement->by_node});
      }
    }
    if (!moved) {
      Status s = RequestStop(id, "preempt", "preempted: " + why + "; it will be placed again under the policy");
      if (!s.ok()) TSR_LOG_ERROR("{}", s.ToString());
    }
    auto after = sched::FleetShare(catalog_, fleet_.fleet, policy_, rest, sched::Today());
    if (!after.ok() || after->compliant) break;
  }
}

std::string Daemon::CapacityLost(const AttemptOfJob& a) {
  if (opts_.executor == "slurm") return "";  // Slurm reports NODE_FAIL itself (CheckSlurmAttempt)
  int64_t id = a.attempt.job_id, n = a.attempt.n;
  FILE* f = std::fopen(JobLogPath(id).c_str(), "rb");
  if (!f) return "";
  std::fseek(f, 0, SEEK_END);
  long size = std::ftell(f);
  long from = std::max(0L, size - 262144L);
  std::fseek(f, from, SEEK_SET);
  std::string tail(static_cast<size_t>(size - from), '\0');
  tail.resize(std::fread(tail.data(), 1, tail.size(), f));
  std::fclose(f);
  // This attempt's part of the log: from its header line to the next header.
  std::string header = fmt::format("=== tessera daemon: job {} (", id), mine = fmt::format(") attempt {} at ", n);
  std::set<std::string> vendors;
  std::string lines;
  bool in = false;
  size_t pos = 0;
  static const std::regex killed(R"(tessera run: rank (\d+) \((\w+)\) was killed by signal 9 \(SIGKILL\)\r?$)");
  while (pos < tail.size()) {
    size_t end = tail.find('\n', pos);
    std::string line = tail.substr(pos, end == std::string::npos ? std::string::npos : end - pos);
    pos = end == std::string::npos ? tail.size() : end + 1;
    if (line.rfind("=== tessera daemon: job ", 0) == 0) {
      in = line.rfind(header, 0) == 0 && line.find(mine) != std::string::npos;
      continue;
    }
    std::smatch m;
    if (in && std::regex_search(line, m, killed)) {
      vendors.insert(m[2].str());
      lines += (lines.empty() ? "" : "; ") + line.substr(static_cast<size_t>(m.position(0)));
    }
  }
  if (vendors.empty()) return "";
  // The nodes of the lost islands' types in this attempt's allocation are left out of planning.
  json alloc = json::parse(a.attempt.alloc_json, nullptr, /*allow_exceptions=*/false);
  std::set<std::string> types;
  if (alloc.is_object() && alloc.value("islands", json()).is_array())
    for (const auto& i : alloc["islands"])
      if (i.is_object() && vendors.count(i.value("vendor", std::string())))
        types.insert(i.value("type", std::string()));
  std::string lost;
  if (alloc.is_object() && alloc.value("by_node", json()).is_array())
    for (const auto& nc : alloc["by_node"]) {
      std::string id_of = nc.is_object() ? nc.value("node", std::string()) : "";
      const auto* node = fleet_.fleet.Find(id_of);
      if (node && types.count(node->type) && failed_nodes_.insert(id_of).second)
        lost += (lost.empty() ? "" : ", ") + id_of;
    }
  if (lost.empty()) return "";
  return RecordCapacityMove(
      a, fmt::format("{}: node(s) {} are left out until the fleet is registered again", lines, lost));
}

std::string Daemon::RecordCapacityMove(const AttemptOfJob& a, const std::string& why) {
  json rec = {{"reason", "capacity"},
              {"why", why},
              {"from", MixText(MixOfAllocation(a.attempt.alloc_json))},
              {"to", ""},
              {"requested_ms", NowMs()},
              {"predicted_gain", json()}};
  if (Status s = store_->SetMeta(MoveKey(a.attempt.job_id), rec.dump()); !s.ok()) TSR_LOG_ERROR("{}", s.ToString());
  return "capacity lost: " + why + "; it resumes from its newest checkpoint on what is free";
}

sched::Fleet Daemon::UsableFleet(const std::vector<sched::RunningJob>& running) const {
  sched::Fleet usable = fleet_.fleet;
  std::map<std::string, int64_t> used;
  for (const auto& r : running)
    for (const auto& nc : r.allocations) used[nc.node] += nc.cards;
  std::erase_if(usable.nodes, [&](const sched::Node& n) { return failed_nodes_.count(n.id) && used[n.id] == 0; });
  for (auto& n : usable.nodes)
    if (failed_nodes_.count(n.id)) n.cards = used[n.id];  // others still run there: nothing more is free
  if (Status s = usable.Reindex(); !s.ok()) TSR_LOG_ERROR("{}", s.ToString());
  return usable;
}

bool Daemon::CostMoves(const std::vector<AttemptOfJob>& active, const std::vector<sched::RunningJob>& running,
                       int64_t now) {
  for (const auto& a : active) {
    if (!a.stop_intent.empty()) continue;
    int64_t id = a.attempt.job_id, n = a.attempt.n;
    auto job = store_->Job(id);
    if (!job.ok() || job->state != "running") continue;
    auto spec = SpecFor(*job);
    if (!spec.ok() || spec->run.remix.mode != RemixMode::kCost) continue;
    // Only at a checkpoint boundary: a new committed step since the last look.
    auto area = TenantArea(job->tenant);
    if (!area.ok()) continue;
    auto latest =
        BoundedJobRead<ckpt::LatestInfo>(*area, job->ckpt_dir, [](const std::string& r) { return ckpt::Latest(r); });
    if (!latest.ok() || latest->step < 0) continue;
    auto& seen = cost_checked_step_[{id, n}];
    if (latest->step <= seen || latest->step <= ResumeStep(a.attempt.resume_from)) continue;
    seen = latest->step;
    const RemixSpec& remix = spec->run.remix;
    std::string key = JobKey(a.name, id);
    std::vector<sched::RunningJob> rest = running;
    std::erase_if(rest, [&](const sched::RunningJob& r) { return r.name == key; });
    // Between the stop and the start the rest must keep the floor on their own, and the new mix with them.
    auto rest_share = sched::FleetShare(catalog_, fleet_.fleet, policy_, rest, sched::Today());
    if (!rest_share.ok() || !rest_share->compliant) continue;
    auto plan = PlanJob(*spec, running, key);
    if (!plan.ok() || !plan->placed()) continue;
    Mix from = MixOfAllocation(a.attempt.alloc_json), to = MixOfPlacement(*plan->placement);
    if (to == from) continue;
    auto remaining = RemainingSeconds(a, now);
    double restart = RestartSeconds(id, remix);
    auto gain = remaining ? PredictedGain(ValueOfMix(from, catalog_, spec->job.workload_class),
                                          ValueOfMix(to, catalog_, spec->job.workload_class), *remaining, restart)
                          : std::nullopt;
    std::string target = MixText(to);
    auto note = [&](const std::string& text) {  // a non-move is told once per attempt, target and cause
      if (cost_noted_.insert(fmt::format("{}/{}/{}/{}", id, n, target, text.substr(0, 24))).second)
        Event(id, fmt::format("not moved to {}: {}", target, text));
    };
    if (!gain) {
      note("its remaining work is not known yet (no `step N/M` line in its log after its resume point)");
      continue;
    }
    std::string pred =
        fmt::format("predicted gain in work per {} {} over its remaining {:.0f} s after a {:.1f} s restart",
                    catalog_.currency, FormatGain(gain), *remaining, restart);
    if (*gain * sched::kPpmScale < static_cast<double>(remix.min_gain)) {
      note(fmt::format("{} is below remix.min_gain {}", pred, sched::FormatShare(remix.min_gain)));
      continue;
    }
    auto last = LastMoveMs(id);
    if (last && now - *last < remix.min_interval_ms) {
      note(fmt::format("{}, but its last move was {:.1f} s ago (remix.min_interval {:.1f} s)", pred,
                       (now - *last) / 1000.0, remix.min_interval_ms / 1000.0));
      continue;
    }
    std::string why = fmt::format("price version {}: {}", catalog_.price_version, pred);
    Status s = RequestMove(id, a.priority, {"cost", why, MixText(from), target, gain});
    if (!s.ok()) TSR_LOG_ERROR("{}", s.ToString());
    return true;  // one move per pass: the next pass sees it stopping
  }
  return false;
}

}  // namespace tessera::daemon
