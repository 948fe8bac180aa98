// ckpt/retention: the retention policy (YAML) and ApplyRetention — which steps stay hot, move to warm or
// cold, or expire. Every action is a Demote (copy → verify → mark ready → delete source) or a delete of a
// step that `keep_every` and `keep_hot` do not protect, so a rerun after a crash just finishes the work.
#include <yaml-cpp/yaml.h>

#include <ctime>
#include <fmt/format.h>
#include <set>

#include "ckpt/tiers.hpp"
#include "common/env.hpp"
#include "common/log.hpp"

namespace tessera::ckpt {
namespace {

// "3600", "90s", "30m", "12h", "7d", "2w", "never" → seconds (-1 for never).
Result<int64_t> ParseAge(const std::string& what, const std::string& text) {
  if (text == "never" || text == "-1") return int64_t{-1};
  if (text.empty()) return InvalidArgument(fmt::format("{} is empty", what));
  int64_t mul = 1;
  std::string num = text;
  switch (text.back()) {
    case 's': mul = 1; break;
    case 'm': mul = 60; break;
    case 'h': mul = 3600; break;
    case 'd': mul = 86400; break;
    case 'w': mul = 7 * 86400; break;
    default: num.push_back('s');
  }
  num.pop_back();
  auto v = env::ParseInt(what, num, 0, int64_t{1} << 40);
  if (!v.ok()) return InvalidArgument(fmt::format("{}='{}' is not an age (use e.g. 3600, 90s, 30m, 12h, 7d, 2w, never)", what, text));
  return *v * mul;
}

}  // namespace

Result<RetentionPolicy> RetentionPolicy::Load(const std::string& yaml_path) {
  RetentionPolicy p;
  YAML::Node y;
  try {
    y = YAML::LoadFile(yaml_path);
  } catch (const std::exception& e) {
    return InvalidArgument(fmt::format("retention policy {}: {}", yaml_path, e.what()));
  }
  if (!y.IsMap()) return InvalidArgument(fmt::format("retention policy {}: expected a map of keys", yaml_path));
  static const std::set<std::string> known{"keep_hot", "demote_to_warm_after", "demote_to_cold_after", "expire_after", "keep_every"};
  try {
    for (const auto& it : y) {
      std::string key = it.first.as<std::string>();
      std::string val = it.second.as<std::string>();
      std::string what = fmt::format("{}: {}", yaml_path, key);
      if (!known.count(key))
        return InvalidArgument(fmt::format("retention policy {}: unknown key '{}' (known: keep_hot, demote_to_warm_after, "
                                           "demote_to_cold_after, expire_after, keep_every)", yaml_path, key));
      if (key == "keep_hot") {
        TSR_ASSIGN_OR_RETURN(auto v, env::ParseInt(what, val, 0, 1 << 30));
        p.keep_hot = static_cast<int>(v);
      } else if (key == "keep_every") {
        TSR_ASSIGN_OR_RETURN(p.keep_every, env::ParseInt(what, val, 0, int64_t{1} << 50));
      } else if (key == "demote_to_warm_after") {
        TSR_ASSIGN_OR_RETURN(p.demote_to_warm_after, ParseAge(what, val));
      } else if (key == "demote_to_cold_after") {
        TSR_ASSIGN_OR_RETURN(p.demote_to_cold_after, ParseAge(what, val));
      } else if (key == "expire_after") {
        TSR_ASSIGN_OR_RETURN(p.expire_after, ParseAge(what, val));
      }
    }
  } catch (const std::exception& e) {
    return InvalidArgument(fmt::format("retention policy {}: {}", yaml_path, e.what()));
  }
  return p;
}

Result<std::vector<RetentionAction>> ApplyRetention(const TierConfig& tiers, const RetentionPolicy& policy,
                                                    int64_t now_unix, bool dry_run, const Progress& progress) {
  if (now_unix == 0) now_unix = static_cast<int64_t>(std::time(nullptr));
  TSR_ASSIGN_OR_RETURN(auto all, ListAll(tiers));
  std::vector<RetentionAction> actions;
  auto has = [](const StepLocation& l, Tier t) { return std::find(l.tiers.begin(), l.tiers.end(), t) != l.tiers.end(); };
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
    if (!tiers.warm.empty() && policy.demote_to_warm_after >= 0 && age > policy.demote_to_warm_after && has(l, Tier::kHot)) {
      run("demote hot→warm", [&] { return Demote(tiers, l.step, Tier::kWarm, true, progress); });
    }
  }
  return actions;
}

}  // namespace tessera::ckpt
