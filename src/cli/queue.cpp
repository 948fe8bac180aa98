// cli/queue: `tessera queue` — the caller's jobs: running ones with their cards, queued ones with their place
// in the queue, the reason they wait and their estimated start (or why it is unknown).
#include "cli/daemon_command.hpp"
#ifdef TESSERA_HAVE_DAEMON
#include <cstdio>

#include "daemon/cli_format.hpp"
#include "daemon/util.hpp"
#endif

namespace {

#ifdef TESSERA_HAVE_DAEMON
int RunQueue(int argc, char** argv) {
  using namespace tessera::daemon;
  CLI::App app{"Show the queue: position and the reason each job waits", "tessera queue"};
  tessera::cli::DaemonCommand cmd("queue", app);
  bool all = false, json_out = false;
  app.add_flag("--all", all, "Include finished jobs");
  app.add_flag("--json", json_out, "Print JSON");
  return cmd.Run(argc, argv, [&](Client& c) -> tessera::Status {
    TSR_ASSIGN_OR_RETURN(auto r, c.Get(all ? "/v1/jobs?all=1" : "/v1/jobs"));
    if (json_out) {
      std::printf("%s\n", r.dump(2).c_str());
      return tessera::Status::Ok();
    }
    const auto& jobs = r["jobs"];
    if (jobs.empty()) {
      // Say so, and how many finished jobs --all would show.
      size_t finished = 0;
      if (!all) {
        auto every = c.Get("/v1/jobs?all=1");
        if (every.ok()) finished = (*every)["jobs"].size();
      }
      if (all || finished == 0)
        std::printf("no jobs yet (`tessera submit JOB.yaml` queues one)\n");
      else
        std::printf("no jobs running or queued (%zu finished: `tessera queue --all`)\n", finished);
      return tessera::Status::Ok();
    }
    // As squeue / sacct / `sky queue`: run time over all attempts, progress in one format in every state, cost
    // so far at the catalog's prices, and the cards (running), the reason (queued) or how it ended.
    std::printf("%-5s %-18s %-10s %4s %-10s %4s %10s  %-26s %12s  %s\n", "ID", "NAME", "TENANT", "PRI", "STATE", "POS",
                "ELAPSED", "PROGRESS", "COST", "CARDS / REASON / END");
    for (const auto& j : jobs) {
      std::string state = j["state"];
      std::string pos = j["position"].is_null() ? "-" : std::to_string(j["position"].get<int64_t>());
      std::string what;
      if (state == "running" || state == "stopping") {
        what = j.contains("allocation") ? DescribeAllocation(j["allocation"]) : "";
        // stopping: why; running: what the executor reports, if anything (Slurm: its state and reason).
        std::string reason = j.value("reason", "");
        if (!reason.empty()) what += "  [" + reason + "]";
        if (j.value("started_ms", nlohmann::json()).is_number_integer())
          what += "; started " + FormatMs(j["started_ms"].get<int64_t>());
        if (j.value("estimated_end_ms", nlohmann::json()).is_number_integer())
          what += ", ends ~" + FormatMs(j["estimated_end_ms"].get<int64_t>());
      } else if (state == "queued") {
        what = j["reason"].get<std::string>();
        if (what.empty()) what = "being placed";
        // As squeue --start: from the running jobs' estimated ends and the planner's view of that moment.
        if (j.value("estimated_start_ms", nlohmann::json()).is_number_integer())
          what += "; starts ~" + FormatMs(j["estimated_start_ms"].get<int64_t>());
        else if (j.value("estimated_start", nlohmann::json()).is_string())
          what += "; start unknown: " + j["estimated_start"].get<std::string>();
      } else {
        what = j["reason"].get<std::string>();
        if (what.empty()) what = state == "succeeded" ? "exit code 0" : state;
        if (j.value("ended_ms", nlohmann::json()).is_number_integer())
          what += "; ended " + FormatMs(j["ended_ms"].get<int64_t>());
      }
      std::string elapsed = j.value("elapsed_ms", nlohmann::json()).is_number_integer() && j["elapsed_ms"] > 0
                                ? FormatElapsed(j["elapsed_ms"].get<int64_t>())
                                : "-";
      std::string cost = j.value("cost_so_far", nlohmann::json()).is_string() && j["elapsed_ms"] > 0
                             ? j["cost_so_far"].get<std::string>() + " " + j.value("currency", "")
                             : "-";
      std::printf("%-5lld %-18s %-10s %4lld %-10s %4s %10s  %-26s %12s  %s\n",
                  static_cast<long long>(j["id"].get<int64_t>()), j["name"].get<std::string>().c_str(),
                  j["tenant"].get<std::string>().c_str(), static_cast<long long>(j["priority"].get<int64_t>()),
                  state.c_str(), pos.c_str(), elapsed.c_str(),
                  FormatProgress(j.value("progress", nlohmann::json())).c_str(), cost.c_str(), what.c_str());
    }
    return tessera::Status::Ok();
  });
}
#endif

}  // namespace

TESSERA_DAEMON_COMMAND(queue, "Show queued and running jobs, with position and the reason each waits", RunQueue);
