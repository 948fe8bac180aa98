// cli/status: `tessera status ID` — one job: state, cards (emulated ones labelled), progress, checkpoints,
// every attempt with its start, end, exit and wake-up latency, and the job's event history.
#include "cli/daemon_command.hpp"
#ifdef TESSERA_HAVE_DAEMON
#include <fmt/format.h>

#include <cstdio>

#include "daemon/cli_format.hpp"
#include "daemon/util.hpp"
#endif

namespace {

#ifdef TESSERA_HAVE_DAEMON
// A list of any length on one short line: "[50, 100, 150]" up to 8 steps, else "61 steps: 50, 100 … 2950, 3000";
// with the bytes stored, from GET /v1/jobs/ID/checkpoints when it answers.
std::string CheckpointSummary(tessera::daemon::Client& c, int64_t id, const nlohmann::json& steps) {
  if (!steps.is_array() || steps.empty()) return "none yet";
  std::vector<int64_t> s;
  for (const auto& x : steps) s.push_back(x.get<int64_t>());
  std::string out;
  if (s.size() <= 8) {
    for (int64_t x : s) out += (out.empty() ? "" : ", ") + std::to_string(x);
    out = "[" + out + "]";
  } else {
    out = fmt::format("{} steps: {}, {} … {}, {}", s.size(), s[0], s[1], s[s.size() - 2], s.back());
  }
  auto detail = c.Get(fmt::format("/v1/jobs/{}/checkpoints", id));
  if (detail.ok() && (*detail)["checkpoints"].is_array()) {
    int64_t bytes = 0;
    for (const auto& x : (*detail)["checkpoints"]) bytes += x.value("bytes", int64_t{0});
    out += fmt::format(", {:.1f} MiB stored", static_cast<double>(bytes) / (1 << 20));
  }
  return out;
}

int RunStatus(int argc, char** argv) {
  using namespace tessera::daemon;
  using nlohmann::json;
  CLI::App app{"Show one job in detail", "tessera status"};
  tessera::cli::DaemonCommand cmd("status", app);
  int64_t id = 0;
  bool json_out = false, events = true;
  app.add_option("id", id, "Job id")->required();
  app.add_flag("--json", json_out, "Print JSON");
  app.add_flag("!--no-events", events, "Leave out the event history");
  return cmd.Run(argc, argv, [&](Client& c) -> tessera::Status {
    TSR_ASSIGN_OR_RETURN(const json j, c.Get(fmt::format("/v1/jobs/{}", id)));
    if (json_out) {
      std::printf("%s\n", j.dump(2).c_str());
      return tessera::Status::Ok();
    }
    std::printf("job %lld  %s  (tenant %s, priority %lld, from %s)\n", static_cast<long long>(id),
                j["name"].get<std::string>().c_str(), j["tenant"].get<std::string>().c_str(),
                static_cast<long long>(j["priority"].get<int64_t>()), j["source"].get<std::string>().c_str());
    std::printf("  state:       %s", j["state"].get<std::string>().c_str());
    if (!j["position"].is_null()) std::printf(" (position %lld)", static_cast<long long>(j["position"].get<int64_t>()));
    if (!j["reason"].get<std::string>().empty()) std::printf(" — %s", j["reason"].get<std::string>().c_str());
    std::printf("\n");
    if (j.contains("allocation")) {
      const auto& a = j["allocation"];
      std::printf("  cards:       %s in zone %s, %s %s/h, domestic share after placement %s\n",
                  DescribeAllocation(a).c_str(), a["zone"].get<std::string>().c_str(),
                  a["cost_per_hour"].get<std::string>().c_str(), a["currency"].get<std::string>().c_str(),
                  a["share_after"].get<std::string>().c_str());
    }
    if (j.value("estimated_start_ms", json()).is_number_integer())
      std::printf("  starts:      ~%s, %s\n", FormatMs(j["estimated_start_ms"].get<int64_t>()).c_str(),
                  j.value("estimated_start", "").c_str());
    else if (j.value("estimated_start", json()).is_string())
      std::printf("  starts:      unknown: %s\n", j["estimated_start"].get<std::string>().c_str());
    if (j["progress"].is_object()) std::printf("  progress:    %s\n", FormatProgress(j["progress"]).c_str());
    if (j.value("elapsed_ms", json()).is_number_integer() && j["elapsed_ms"] > 0) {
      std::printf("  run time:    %s over %lld attempt(s), %s %s so far",
                  FormatElapsed(j["elapsed_ms"].get<int64_t>()).c_str(),
                  static_cast<long long>(j["attempts"].get<int64_t>()), j["cost_so_far"].get<std::string>().c_str(),
                  j.value("currency", "").c_str());
      if (j.value("estimated_end_ms", json()).is_number_integer())
        std::printf("; ends ~%s at its pace so far", FormatMs(j["estimated_end_ms"].get<int64_t>()).c_str());
      std::printf("\n");
    }
    std::printf("  checkpoints: %s  %s\n", j["checkpoint_dir"].get<std::string>().c_str(),
                j.value("checkpoints_error", json()).is_string()
                    ? ("unknown: " + j["checkpoints_error"].get<std::string>()).c_str()
                    : CheckpointSummary(c, id, j["checkpoints"]).c_str());
    for (const auto& a : j["attempts_detail"]) {
      std::string islands;
      for (const auto& i : a["islands"])
        islands += fmt::format("{}{}x{}{}", islands.empty() ? "" : " + ", i["count"].get<int64_t>(),
                               i["type"].get<std::string>(), EmulatedNote(i));
      std::string end = a["ended_ms"].is_null() ? "running" : FormatMs(a["ended_ms"].get<int64_t>());
      std::printf("  attempt %lld: %s .. %s on %s", static_cast<long long>(a["n"].get<int64_t>()),
                  FormatMs(a["started_ms"].get<int64_t>()).c_str(), end.c_str(), islands.c_str());
      if (!a["end_reason"].get<std::string>().empty()) std::printf("; %s", a["end_reason"].get<std::string>().c_str());
      if (a.contains("move") && a["move"].is_object())  // a move to another mix: what triggered it (MoveSummary)
        std::printf("; moved (%s) from %s: %s", a["move"].value("reason", "?").c_str(),
                    a["move"].value("from", "?").c_str(), a["move"].value("summary", "").c_str());
      if (!a["resume_from"].get<std::string>().empty())
        std::printf("; resumed from %s", a["resume_from"].get<std::string>().c_str());
      if (!a["wake_latency_ms"].is_null())
        std::printf("; started %.2f s after capacity freed", a["wake_latency_ms"].get<int64_t>() / 1000.0);
      std::printf("%s\n", a["billed"].get<bool>() ? "; billed" : "");
    }
    if (events && j.contains("events")) {
      std::printf("  events:\n");
      for (const auto& e : j["events"])
        std::printf("    %s  %s\n", FormatMs(e["at_ms"].get<int64_t>()).c_str(), e["text"].get<std::string>().c_str());
    }
    return tessera::Status::Ok();
  });
}
#endif

}  // namespace

TESSERA_DAEMON_COMMAND(status, "Show one job: state, cards, progress, checkpoints, attempts", RunStatus);
