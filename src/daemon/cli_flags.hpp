// daemon/cli_flags: the flags every daemon client subcommand shares (--state-dir, --daemon, --token) and
// the error printing they share. Header-only; used by src/cli/{submit,queue,status,cancel,logs,fleet}.cpp.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdio>
#include <string>

#include "daemon/client.hpp"
#include "daemon/jobspec.hpp"

namespace tessera::daemon {

inline void AddClientFlags(CLI::App& app, ClientOptions* o) {
  app.add_option("--state-dir", o->state_dir, "Daemon state directory (default $TESSERA_HOME or ~/.tessera)");
  app.add_option("--daemon", o->address, "Daemon address HOST:PORT (default $TESSERA_DAEMON or STATE/daemon.json)");
  app.add_option("--token", o->token, "Bearer token (default $TESSERA_DAEMON_TOKEN or STATE/token)");
}

inline int Fail(const char* cmd, const Status& s) {
  std::fprintf(stderr, "tessera %s: %s\n", cmd, s.message().c_str());
  return 1;
}

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

}  // namespace tessera::daemon
