// daemon/billing: the scheduler's billing of ended attempts — each attempt's usage as rows of the billing ledger
// (sched::Ledger, append-only).
#include <algorithm>

#include "common/log.hpp"
#include "daemon/daemon_impl.hpp"
#include "daemon/util.hpp"

namespace tessera::daemon {

using json = nlohmann::json;

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
    bool ok = true;
    for (const auto& isl : alloc["islands"]) {
      if (!isl.is_object() || !isl.value("type", json()).is_string() ||
          !isl.value("count", json()).is_number_integer()) {
        TSR_LOG_ERROR("billing job {} attempt {}: an island of its allocation is not readable: {}", key, n, isl.dump());
        ok = false;
        break;
      }
      std::string type = isl["type"];
      int64_t cards = isl["count"];
      bool dup = std::any_of(existing->begin(), existing->end(),
                             [&](const sched::UsageRecord& r) { return r.type == type && r.start == start; });
      if (dup) continue;  // billed before a crash; the ledger is append-only, so do not add it twice
      auto rec = ledger_->Record(catalog_, key, row.tenant, type, cards, start, end);
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
