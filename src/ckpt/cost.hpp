// ckpt/cost: the monthly storage cost of the current checkpoint layout (bytes per tier × price) against
// two baselines, everything hot and everything warm, with the archive class's minimum storage duration
// charged over the chosen horizon. Prices come from a YAML file (docs/ckpt.md shows one).
#pragma once

#include <string>

#include "tessera/ckpt.hpp"

namespace tessera::ckpt {

struct CostOptions {
  std::string prices_file;
  int months = 1;  // horizon: data archived now and deleted after this many months
};

struct TierPrice {
  double per_gib_month = 0;
  double min_days = 0;  // minimum storage duration billed (e.g. 180 for deep archive classes)
};
struct Prices {
  std::string currency = "USD";
  TierPrice hot, warm, cold;
  static Result<Prices> Load(const std::string& path);
};

// Effective monthly price per GiB over a horizon of `months`: price × max(months·30, min_days) / (months·30).
double EffectiveMonthly(const TierPrice& p, int months);
// The full report (tables and the computation) as text.
Result<std::string> CostReport(const TierConfig& tiers, const CostOptions& opt);

}  // namespace tessera::ckpt
