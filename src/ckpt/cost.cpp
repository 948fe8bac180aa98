// ckpt/cost: `tessera ckpt cost` — storage cost per tier vs all-hot and all-warm, showing the arithmetic.
#include "ckpt/cost.hpp"

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>

namespace tessera::ckpt {

Result<Prices> Prices::Load(const std::string& path) {
  Prices p;
  try {
    YAML::Node y = YAML::LoadFile(path);
    if (y["currency"]) p.currency = y["currency"].as<std::string>();
    for (auto [name, tp] : {std::pair{"hot", &p.hot}, {"warm", &p.warm}, {"cold", &p.cold}}) {
      YAML::Node n = y[name];
      if (!n || !n["per_gib_month"])
        return InvalidArgument(fmt::format("prices {}: '{}.per_gib_month' is missing", path, name));
      tp->per_gib_month = n["per_gib_month"].as<double>();
      if (n["min_days"]) tp->min_days = n["min_days"].as<double>();
      if (tp->per_gib_month < 0 || tp->min_days < 0)
        return InvalidArgument(fmt::format("prices {}: '{}' has a negative value", path, name));
    }
  } catch (const std::exception& e) {
    return InvalidArgument(fmt::format("prices {}: {}", path, e.what()));
  }
  return p;
}

double EffectiveMonthly(const TierPrice& p, int months) {
  double days = 30.0 * std::max(1, months);
  return p.per_gib_month * std::max(days, p.min_days) / days;
}

Result<std::string> CostReport(const TierConfig& tiers, const CostOptions& opt) {
  TSR_ASSIGN_OR_RETURN(Prices p, Prices::Load(opt.prices_file));
  TSR_ASSIGN_OR_RETURN(auto all, ListAll(tiers));
  const double gib = 1024.0 * 1024 * 1024;
  double in[3] = {0, 0, 0}, unique = 0;
  for (const auto& l : all) {
    unique += static_cast<double>(l.bytes) / gib;
    for (auto t : l.tiers) in[static_cast<int>(t)] += static_cast<double>(l.bytes) / gib;
  }
  const TierPrice* tp[3] = {&p.hot, &p.warm, &p.cold};
  std::string out;
  out += fmt::format("{} checkpoints, {:.3f} GiB of distinct data; horizon {} month(s); prices from {}\n\n", all.size(),
                     unique, opt.months, opt.prices_file);
  out += fmt::format("{:<6} {:>12} {:>14} {:>10} {:>16} {:>14}\n", "TIER", "GiB", "PRICE/GiB-mo", "MIN DAYS",
                     "EFFECTIVE/GiB-mo", "MONTHLY");
  double layout = 0;
  for (int i = 0; i < 3; ++i) {
    double eff = EffectiveMonthly(*tp[i], opt.months);
    double cost = in[i] * eff;
    layout += cost;
    out += fmt::format("{:<6} {:>12.3f} {:>14.5f} {:>10.0f} {:>16.5f} {:>14.4f}\n", TierName(static_cast<Tier>(i)),
                       in[i], tp[i]->per_gib_month, tp[i]->min_days, eff, cost);
  }
  double all_hot = unique * EffectiveMonthly(p.hot, opt.months);
  double all_warm = unique * EffectiveMonthly(p.warm, opt.months);
  auto pct = [](double a, double b) { return b > 0 ? 100.0 * (1.0 - a / b) : 0.0; };
  out += fmt::format("\n{:<28} {:>14.4f} {}\n", "current layout", layout, p.currency);
  out += fmt::format("{:<28} {:>14.4f} {}   (layout saves {:.1f}%)\n", "baseline: all hot", all_hot, p.currency,
                     pct(layout, all_hot));
  out += fmt::format("{:<28} {:>14.4f} {}   (layout saves {:.1f}%)\n", "baseline: all warm", all_warm, p.currency,
                     pct(layout, all_warm));
  out +=
      "\nComputation: MONTHLY = GiB × EFFECTIVE; EFFECTIVE = PRICE × max(horizon days, MIN DAYS) / horizon days,\n"
      "so data archived for less than the class's minimum duration is billed as if kept that long.\n"
      "A step held in two tiers (e.g. staged back to hot) is paid in both.\n";
  // The reference scenario's claim (examples/fleet/reference/README.md): tiering cuts cost by 38%. Which share of the
  // bytes must leave hot for that?
  double eh = EffectiveMonthly(p.hot, opt.months), ew = EffectiveMonthly(p.warm, opt.months),
         ec = EffectiveMonthly(p.cold, opt.months);
  out += fmt::format(
      "\nThe reference scenario claims 38% lower cost from tiering. Saving vs all-hot = 1 − Σ f_t·price_t / price_hot\n"
      "(f_t = share of bytes in tier t). With these prices a 38% saving needs {:.1f}% of the bytes in warm (if the\n"
      "rest stays hot), or {:.1f}% in cold at this horizon. This layout: {:.1f}% vs all-hot.\n",
      eh > ew ? 100.0 * 0.38 * eh / (eh - ew) : 0.0, eh > ec ? 100.0 * 0.38 * eh / (eh - ec) : 0.0,
      pct(layout, all_hot));
  if (eh <= ec)
    out +=
        "At this horizon archive storage is no cheaper than hot (minimum duration): archiving short-lived steps loses "
        "money.\n";
  return out;
}

}  // namespace tessera::ckpt
