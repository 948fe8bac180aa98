// daemon/job_view: what a job shows beyond its row, as squeue, sacct and `sky queue` show it — when it started
// and ended, how long its attempts ran, what they cost so far at the catalog's prices, and when a running job
// with a known total of steps should end (from its progress) — and the hot-tier retention of its checkpoints.
#include <fmt/format.h>

#include <algorithm>
#include <set>

#include "common/log.hpp"
#include "daemon/daemon_impl.hpp"
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
    auto done = ckpt::ApplyRetention(hot, p, now_ms / 1000 + 1);
    if (!done.ok()) {
      TSR_LOG_WARN("job {}: checkpoint retention in {}: {}", id, row->ckpt_dir, done.status().ToString());
      continue;
    }
    size_t n = std::count_if(done->begin(), done->end(), [](const ckpt::RetentionAction& a) { return a.status.ok(); });
    if (n > 0) TSR_LOG_INFO("job {}: kept the newest {} checkpoints, deleted {} older ones", id, p.keep_hot, n);
  }
}

}  // namespace tessera::daemon
