// daemon/billing: the scheduler's billing of ended attempts — each attempt's usage as rows of the billing ledger
// (sched::Ledger, append-only), once, also when the daemon stopped in the middle of an attempt's rows.
#include "daemon/billing.hpp"

#include <vector>

#include "common/log.hpp"
#include "daemon/daemon_impl.hpp"
#include "daemon/util.hpp"

namespace tessera::daemon {

using json = nlohmann::json;

std::vector<IslandUsage> UnbilledIslands(const std::vector<IslandUsage>& islands,
                                         const std::vector<sched::UsageRecord>& billed, int64_t attempt, int64_t start,
                                         int64_t end) {
  std::vector<bool> used(billed.size(), false);  // each ledger row accounts for one island
  std::vector<IslandUsage> out;
  for (const auto& isl : islands) {
    bool found = false;
    for (size_t i = 0; i < billed.size() && !found; ++i) {
      const sched::UsageRecord& r = billed[i];
      // A row without an attempt number is from a ledger older than the column: matched by its times alone.
      found = !used[i] && (r.attempt == attempt || r.attempt == 0) && r.type == isl.type && r.cards == isl.cards &&
              r.start == start && r.end == end;
      if (found) used[i] = true;
    }
    if (!found) out.push_back(isl);
  }
  return out;
}

void Daemon::BillPending() {
  if (!ledger_) {
    if (!ledger_warned_) TSR_LOG_WARN("no billing ledger: usage is not billed");
    ledger_warned_ = true;
    return;
  }
  auto rows = store_->UnbilledAttempts();
  if (!rows.ok()) {
    TSR_LOG_ERROR("billing: {}", rows.status().ToString());
    return;
  }
  for (const auto& row : *rows) {
    const AttemptRow& a = row.attempt;
    int64_t job = a.job_id, n = a.n;
    std::string key = JobKey(row.name, job);
    // The ledger counts whole seconds: round the real start and stop to the nearest second (at least 1 s).
    int64_t start = (a.started_ms + 500) / 1000;
    int64_t end = (a.ended_ms.value_or(a.started_ms) + 500) / 1000;
    if (end <= start) end = start + 1;
    json alloc = json::parse(a.alloc_json, nullptr, /*allow_exceptions=*/false);
    if (!alloc.is_object() || !alloc.contains("islands") || !alloc["islands"].is_array()) {
      TSR_LOG_ERROR("billing job {} attempt {}: its allocation has no islands: {}", key, n, a.alloc_json.substr(0, 80));
      continue;
    }
    sched::BillFilter f;
    f.job = key;
    auto existing = ledger_->Query(f);
    if (!existing.ok()) {
      TSR_LOG_ERROR("billing job {}: {}", key, existing.status().ToString());
      continue;
    }
    std::vector<IslandUsage> islands;
    bool ok = true;
    for (const auto& isl : alloc["islands"]) {
      if (!isl.is_object() || !isl.value("type", json()).is_string() ||
          !isl.value("count", json()).is_number_integer()) {
        TSR_LOG_ERROR("billing job {} attempt {}: an island of its allocation is not readable: {}", key, n, isl.dump());
        ok = false;
        break;
      }
      islands.push_back({isl["type"].get<std::string>(), isl["count"].get<int64_t>()});
    }
    if (!ok) continue;
    // Rows billed before a crash are not added twice.
    for (const auto& [type, cards] : UnbilledIslands(islands, *existing, n, start, end)) {
      auto rec = ledger_->Record(catalog_, key, row.tenant, type, cards, start, end, n);
      if (!rec.ok()) {
        TSR_LOG_ERROR("billing job {} attempt {}: {}", key, n, rec.status().ToString());
        ok = false;
        break;
      }
      Event(job, fmt::format("billed {} x {} for {} s: {} {}", cards, type, end - start,
                             sched::FormatMoney(rec->amount, 4), catalog_.currency));
    }
    if (!ok) continue;
    Status s = store_->MarkBilled(job, n);
    if (!s.ok())
      TSR_LOG_ERROR("billing job {}: {} (its rows are in the ledger and are not added twice)", key, s.ToString());
  }
}

}  // namespace tessera::daemon
