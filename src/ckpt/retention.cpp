// ckpt/retention: ApplyRetention — which steps stay hot, move to warm or cold, or expire (the policy file is
// read in retention_file.cpp). Every action is a Demote (copy → verify → mark ready → delete source) or a delete of a
// step that `keep_every` and `keep_hot` do not protect, so a rerun after a crash just finishes the work.
#include <fmt/format.h>

#include <ctime>
#include <set>

#include "ckpt/tiers.hpp"
#include "common/env.hpp"
#include "common/log.hpp"

namespace tessera::ckpt {
Result<std::vector<RetentionAction>> ApplyRetention(const TierConfig& tiers, const RetentionPolicy& policy,
                                                    int64_t now_unix, bool dry_run, const Progress& progress) {
  if (now_unix == 0) now_unix = static_cast<int64_t>(std::time(nullptr));
  TSR_ASSIGN_OR_RETURN(auto all, ListAll(tiers));
  std::vector<RetentionAction> actions;
  auto has = [](const StepLocation& l, Tier t) {
    return std::find(l.tiers.begin(), l.tiers.end(), t) != l.tiers.end();
  };
  int n = static_cast<int>(all.size());
  for (int i = 0; i < n; ++i) {
    const StepLocation& l = all[static_cast<size_t>(i)];
    bool newest = i >= n - policy.keep_hot;  // protected: stays where it is
    if (newest) continue;
    int64_t age = now_unix - l.created_unix;
    bool keep_forever = policy.keep_every > 0 && l.step % policy.keep_every == 0;
    auto run = [&](const std::string& what, const std::function<Status()>& fn) {
      RetentionAction a{l.step, what, Status::Ok()};
      if (!dry_run) a.status = fn();
      if (!a.status.ok()) TSR_LOG_WARN("retention: step {}: {}: {}", l.step, what, a.status.ToString());
      actions.push_back(a);
    };
    if (policy.expire_after >= 0 && age > policy.expire_after && !keep_forever) {
      run("expire", [&]() -> Status {
        TSR_ASSIGN_OR_RETURN(auto stores, OpenStores(tiers));
        // Slowest tier first is not needed for safety (expiry deletes everything); fastest first frees NVMe soonest.
        for (auto& s : stores)
          if (has(l, s->tier())) TSR_RETURN_IF_ERROR(s->Delete(l.step));
        return Status::Ok();
      });
      continue;
    }
    if (!tiers.cold.empty() && policy.demote_to_cold_after >= 0 && age > policy.demote_to_cold_after &&
        (has(l, Tier::kHot) || has(l, Tier::kWarm))) {
      run(fmt::format("demote {}→cold", has(l, Tier::kHot) ? "hot" : "warm"),
          [&] { return Demote(tiers, l.step, Tier::kCold, true, progress); });
      continue;
    }
    if (!tiers.warm.empty() && policy.demote_to_warm_after >= 0 && age > policy.demote_to_warm_after &&
        has(l, Tier::kHot)) {
      run("demote hot→warm", [&] { return Demote(tiers, l.step, Tier::kWarm, true, progress); });
    }
  }
  return actions;
}

}  // namespace tessera::ckpt
