// cli/queue: `tessera queue` — the caller's jobs: running ones with their cards, queued ones with their place
// in the queue and the reason they wait.
#include <CLI/CLI.hpp>
#include <cstdio>

#include "cli/command.hpp"
#include "cli/exit_code.hpp"
#ifdef TESSERA_HAVE_DAEMON
#include "daemon/cli_flags.hpp"
#endif

namespace {

int RunQueue(int argc, char** argv) {
#ifndef TESSERA_HAVE_DAEMON
  (void)argc;
  (void)argv;
  return tessera::cli::NoDaemon("queue");
#else
  using namespace tessera::daemon;
  CLI::App app{"Show the queue: position and the reason each job waits", "tessera queue"};
  ClientOptions co;
  AddClientFlags(app, &co);
  bool all = false, json_out = false;
  app.add_flag("--all", all, "Include finished jobs");
  app.add_flag("--json", json_out, "Print JSON");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return tessera::cli::ParseExit(app, e);
  }
  auto client = Client::Connect(co);
  if (!client.ok()) return tessera::cli::Fail("queue", client.status());
  auto r = (*client)->Get(all ? "/v1/jobs?all=1" : "/v1/jobs");
  if (!r.ok()) return tessera::cli::Fail("queue", r.status());
  if (json_out) {
    std::printf("%s\n", r->dump(2).c_str());
    return 0;
  }
  std::printf("%-5s %-18s %-10s %4s %-10s %4s  %s\n", "ID", "NAME", "TENANT", "PRI", "STATE", "POS", "CARDS / REASON");
  for (const auto& j : (*r)["jobs"]) {
    std::string state = j["state"];
    std::string pos = j["position"].is_null() ? "-" : std::to_string(j["position"].get<int64_t>());
    std::string what;
    if (state == "running" || state == "stopping") {
      what = j.contains("allocation") ? DescribeAllocation(j["allocation"]) : "";
      // stopping: why; running: what the executor reports, if anything (Slurm: its state and reason).
      std::string reason = j.value("reason", "");
      if (!reason.empty()) what += "  [" + reason + "]";
    } else {
      what = j["reason"].get<std::string>();
      if (state == "queued" && what.empty()) what = "being placed";
    }
    std::printf("%-5lld %-18s %-10s %4lld %-10s %4s  %s\n", static_cast<long long>(j["id"].get<int64_t>()),
                j["name"].get<std::string>().c_str(), j["tenant"].get<std::string>().c_str(),
                static_cast<long long>(j["priority"].get<int64_t>()), state.c_str(), pos.c_str(), what.c_str());
  }
  return 0;
#endif
}

}  // namespace

TESSERA_COMMAND(queue, "Show queued and running jobs, with position and the reason each waits", RunQueue);
