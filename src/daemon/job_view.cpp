// daemon/job_view: what a job shows beyond its row, as squeue, sacct and `sky queue` show it — when it started
// and ended, how long its attempts ran, what they cost so far at the catalog's prices, and when a running job
// with a known total of steps should end (from its progress), and when a queued job should start — and the hot-tier
// retention of its checkpoints.
#include <fmt/format.h>

#include <algorithm>
#include <set>

#include "common/log.hpp"
#include "daemon/daemon_impl.hpp"
#include "daemon/tenant_reads.hpp"
#include "daemon/util.hpp"
#include "tessera/ckpt.hpp"

namespace tessera::daemon {

using json = nlohmann::json;

void Daemon::AddRunTimes(const JobRow& j, json* out) {
  auto atts = store_->Attempts(j.id);
  if (!atts.ok()) return;
  const int64_t now = NowMs();
  int64_t elapsed = 0;
  sched::Money cost = 0;
  json first = nullptr, current = nullptr;
  for (const auto& a : *atts) {
    const int64_t end = a.ended_ms.value_or(now);
    elapsed += std::max<int64_t>(0, end - a.started_ms);
    if (first.is_null()) first = a.started_ms;
    if (!a.ended_ms) current = a.started_ms;
    // Priced as the ledger rates it, per second of each attempt's cards.
    json alloc = json::parse(a.alloc_json, nullptr, /*allow_exceptions=*/false);
    if (!alloc.is_object() || !alloc.value("islands", json()).is_array()) continue;
    for (const auto& isl : alloc["islands"]) {
      if (!isl.is_object() || !isl.value("type", json()).is_string() || !isl.value("count", json()).is_number_integer())
        continue;
      const auto* t = catalog_.Find(isl["type"].get<std::string>());
      if (t)
        cost += sched::RateSeconds(t->price_per_card_hour, isl["count"].get<int64_t>(), (end - a.started_ms) / 1000);
    }
  }
  (*out)["first_started_ms"] = first;
  (*out)["started_ms"] = current;
  (*out)["elapsed_ms"] = elapsed;
  (*out)["cost_so_far"] = sched::FormatMoney(cost, 4);
  (*out)["currency"] = catalog_.currency;
  // A running job that reports "step N/M": its end at the pace of its steps so far.
  const json& p = out->value("progress", json());
  if (!current.is_null() && p.is_object() && p.contains("of") && p.value("step", int64_t{0}) > 0) {
    const int64_t step = p["step"].get<int64_t>(), of = p["of"].get<int64_t>();
    if (of >= step)
      (*out)["estimated_end_ms"] =
          now + static_cast<int64_t>(static_cast<double>(elapsed) * static_cast<double>(of - step) / step);
  }
}

void Daemon::PruneCheckpoints(const std::vector<AttemptOfJob>& active, int64_t now_ms) {
  // Only while a job runs: once it has ended its directory is left as it is (a `tessera ckpt verify` of it then
  // never races a deletion).
  if (now_ms - last_prune_ms_ < 2000) return;
  last_prune_ms_ = now_ms;
  std::set<int64_t> jobs;
  for (const auto& a : active) jobs.insert(a.attempt.job_id);
  for (int64_t id : jobs) {
    auto row = store_->Job(id);
    if (!row.ok() || row->ckpt_dir.empty()) continue;
    auto spec = SpecFor(*row);
    if (!spec.ok() || spec->run.ckpt_keep <= 0) continue;
    // Only the hot tier: a step older than the newest `keep` is deleted there (expire_after 0 in a policy
    // that knows no other tier); warm and cold copies are the job's own retention's.
    ckpt::TierConfig hot;
    hot.hot = row->ckpt_dir;
    ckpt::RetentionPolicy p;
    p.keep_hot = static_cast<int>(std::min<int64_t>(spec->run.ckpt_keep, 1'000'000));
    p.expire_after = 0;
    auto area = TenantArea(row->tenant);
    if (!area.ok()) continue;
    // As root, in a directory the job owns: opened beneath the tenant's area (a link swapped in anywhere on the way
    // is refused, so another tenant's checkpoints are never pruned) and bounded in time.
    auto done = BoundedJobRead<std::vector<ckpt::RetentionAction>>(
        *area, row->ckpt_dir, [hot, p, now_ms](const std::string& r) {
          ckpt::TierConfig at = hot;
          at.hot = r;
          return ckpt::ApplyRetention(at, p, now_ms / 1000 + 1);
        });
    if (!done.ok()) {
      TSR_LOG_WARN("job {}: checkpoint retention in {}: {}", id, row->ckpt_dir, done.status().ToString());
      continue;
    }
    size_t n = std::count_if(done->begin(), done->end(), [](const ckpt::RetentionAction& a) { return a.status.ok(); });
    if (n > 0) TSR_LOG_INFO("job {}: kept the newest {} checkpoints, deleted {} older ones", id, p.keep_hot, n);
  }
}

}  // namespace tessera::daemon

namespace tessera::daemon {

namespace {
json UnknownStart(const std::string& why) { return {{"estimated_start_ms", nullptr}, {"estimated_start", why}}; }
constexpr size_t kMaxEstimated = 50;  // queued jobs estimated per answer; later ones say so
}  // namespace

std::map<int64_t, json> Daemon::EstimateStarts(int64_t now, const Caller& caller) {
  std::map<int64_t, json> out;
  auto queued = store_->QueuedJobs();
  if (!queued.ok() || queued->empty()) return out;
  std::vector<AttemptOfJob> active;
  auto running = have_fleet_ ? Running(&active) : Result<std::vector<sched::RunningJob>>(NotFound("no fleet"));
  if (!running.ok()) {
    std::string why = have_fleet_ ? "the running jobs cannot be read: " + running.status().message()
                                  : "no fleet registered yet (tessera fleet register FLEET.yaml)";
    for (const auto& q : *queued) out[q.id] = UnknownStart(why);
    return out;
  }
  // What holds cards and until when: each running job until its estimated end (from its "step N/M" progress,
  // as `tessera queue` shows it), or with no known end; then each queued job from its estimated start on, with
  // no known end (it has reported no progress yet).
  struct Holder {
    sched::RunningJob cards;
    int64_t start_ms = 0;  // a queued job ahead holds its cards from its estimated start on
    std::optional<int64_t> end_ms;
    std::string who;  // "job 3"
    std::string why;  // why its end is unknown
  };
  std::vector<Holder> holders;
  auto Name = [&](int64_t id, const std::string& tenant) {
    return caller.admin || tenant == caller.tenant ? fmt::format("job {}", id) : std::string("another tenant's job");
  };
  for (size_t i = 0; i < active.size(); ++i) {
    const int64_t id = active[i].attempt.job_id;
    Holder h{(*running)[i], 0, std::nullopt, Name(id, active[i].tenant), ""};
    if (!active[i].stop_intent.empty()) {
      h.why = "it is stopping; it frees its cards once it has checkpointed and exited";
    } else {
      json view = {{"progress", ProgressFromLog(JobLogPath(id))}};
      auto row = store_->Job(id);
      if (row.ok()) AddRunTimes(*row, &view);
      if (view.value("estimated_end_ms", json()).is_number_integer())
        h.end_ms = std::max(now, view["estimated_end_ms"].get<int64_t>());
      else
        h.why = "it reports no progress as `step N/M`, so its end is unknown";
    }
    holders.push_back(std::move(h));
  }
  size_t n = 0;
  for (const auto& q : *queued) {
    if (++n > kMaxEstimated) {
      out[q.id] = UnknownStart(fmt::format("not estimated beyond the first {} queued jobs", kMaxEstimated));
      continue;
    }
    if (q.reason.rfind("held", 0) == 0 || q.reason.rfind("waiting for job", 0) == 0) {
      out[q.id] = UnknownStart("it is " + q.reason);
      continue;
    }
    auto spec = SpecFor(q);
    if (!spec.ok()) {
      out[q.id] = UnknownStart(spec.status().message());
      continue;
    }
    // The planner's view at each time cards free up: now, then each known end in order; the floor of that day.
    std::vector<int64_t> times = {now};
    for (const auto& h : holders)
      if (h.end_ms) times.push_back(*h.end_ms);
    std::sort(times.begin(), times.end());
    times.erase(std::unique(times.begin(), times.end()), times.end());
    std::optional<sched::Placement> where;
    int64_t at = now;
    std::string error;
    for (int64_t t : times) {
      std::vector<sched::RunningJob> busy;
      for (const auto& h : holders)
        if (h.start_ms <= t && (!h.end_ms || *h.end_ms > t)) busy.push_back(h.cards);
      auto p = PlanJob(*spec, busy, "", t / 86'400'000);
      if (!p.ok()) {
        error = "the planner cannot evaluate it" + (caller.admin ? ": " + p.status().message() : std::string());
        break;
      }
      if (p->placed()) {
        where = *p->placement, at = t;
        break;
      }
    }
    if (!where) {
      if (!error.empty()) {
        out[q.id] = UnknownStart(error);
        continue;
      }
      std::vector<sched::RunningJob> none;
      auto empty = PlanJob(*spec, none, "", times.back() / 86'400'000);
      if (!empty.ok() || !empty->placed()) {
        out[q.id] = UnknownStart("it cannot be placed even when every running job has ended: " +
                                 (empty.ok() ? empty->infeasible->reason : empty.status().message()));
        continue;
      }
      // Blocked by holders with no known end: those on cards of a type it accepts.
      std::string who;
      for (const auto& h : holders) {
        if (h.end_ms) continue;
        bool blocks = false;
        for (const auto& nc : h.cards.allocations) {
          const auto* node = fleet_.fleet.Find(nc.node);
          const auto* type = node ? catalog_.Find(node->type) : nullptr;
          blocks |= type && spec->job.Accepts(*type);
        }
        if (blocks) who += fmt::format("{}{} ({})", who.empty() ? "" : "; ", h.who, h.why);
      }
      out[q.id] = UnknownStart("it waits for cards held by " + (who.empty() ? "running jobs" : who));
      continue;
    }
    std::string from = "now: the cards it needs are free (the scheduler's next pass starts it)";
    if (at > now) {
      std::string ending;
      for (const auto& h : holders)
        if (h.end_ms && *h.end_ms == at) ending += (ending.empty() ? "" : ", ") + h.who;
      from = "when " + ending + " ends (its estimated end from its progress)";
    }
    out[q.id] = {{"estimated_start_ms", at}, {"estimated_start", from}};
    sched::RunningJob rj;
    rj.name = JobKey(q.name, q.id);
    rj.tenant = q.tenant;
    rj.allocations = where->by_node;
    holders.push_back({rj, at, std::nullopt, Name(q.id, q.tenant),
                       fmt::format("queued ahead, estimated to start {}; its run time is unknown until it reports "
                                   "progress",
                                   FormatMs(at))});
  }
  return out;
}

}  // namespace tessera::daemon
