// daemon/cli_format: how the daemon client subcommands print what the daemon answers (allocations, emulated
// cards, progress, run time). Header-only; used by src/cli/{submit,queue,status,fleet}.cpp. Their flags,
// connection and error mapping are cli/daemon_command.hpp.
#pragma once

#include <cstdio>
#include <string>

#include "daemon/client.hpp"
#include "daemon/jobspec.hpp"

namespace tessera::daemon {

// " (emulated)", " (emulated, SM share 35% of a GPU)" or "" for an object with "emulated" (and "sm_share",
// absent from daemons and job rows older than SM shares).
inline std::string EmulatedNote(const nlohmann::json& o) {
  if (!o.value("emulated", false)) return "";
  int share = o.value("sm_share", 0);
  return share > 0 ? " (emulated, " + EmulationKind(share) + ")" : " (emulated)";
}

// "2 x ascend-910b (emulated)" lines of an allocation object (PlacementToJson in scheduler.cpp).
inline std::string DescribeAllocation(const nlohmann::json& a) {
  std::string s;
  if (!a.is_object() || !a.contains("by_type")) return s;
  for (const auto& t : a["by_type"]) {
    if (!s.empty()) s += " + ";
    s += std::to_string(t["cards"].get<int64_t>()) + " x " + t["type"].get<std::string>();
    s += EmulatedNote(t);
  }
  return s;
}

// A job's progress as `queue` and `status` print it in every state: "step 140/400, loss 0.1645" ("-": none).
inline std::string FormatProgress(const nlohmann::json& p) {
  if (!p.is_object() || !p.contains("step")) return "-";
  std::string s = "step " + std::to_string(p["step"].get<int64_t>());
  if (p.contains("of")) s += "/" + std::to_string(p["of"].get<int64_t>());
  if (p.contains("loss")) s += ", loss " + p["loss"].get<std::string>();
  return s;
}

// A duration as squeue's TIME: "M:SS", "H:MM:SS" or "D-HH:MM:SS".
inline std::string FormatElapsed(int64_t ms) {
  int64_t s = ms / 1000, d = s / 86400, h = s / 3600 % 24, m = s / 60 % 60;
  char buf[48];
  if (d > 0)
    std::snprintf(buf, sizeof buf, "%lld-%02lld:%02lld:%02lld", static_cast<long long>(d), static_cast<long long>(h),
                  static_cast<long long>(m), static_cast<long long>(s % 60));
  else if (h > 0)
    std::snprintf(buf, sizeof buf, "%lld:%02lld:%02lld", static_cast<long long>(h), static_cast<long long>(m),
                  static_cast<long long>(s % 60));
  else
    std::snprintf(buf, sizeof buf, "%lld:%02lld", static_cast<long long>(m), static_cast<long long>(s % 60));
  return buf;
}

}  // namespace tessera::daemon
