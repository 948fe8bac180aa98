// cli/logs: `tessera logs ID [--tail BYTES] [--follow]` — the job's output (every attempt, every rank).
#include "cli/daemon_command.hpp"
#ifdef TESSERA_HAVE_DAEMON
#include <fmt/format.h>

#include <chrono>
#include <cstdio>
#include <thread>
#endif

namespace {

#ifdef TESSERA_HAVE_DAEMON
int RunLogs(int argc, char** argv) {
  CLI::App app{"Print a job's output", "tessera logs"};
  tessera::cli::DaemonCommand cmd("logs", app);
  int64_t id = 0;
  size_t tail = 0;
  bool follow = false;
  app.add_option("id", id, "Job id")->required();
  app.add_option("--tail", tail, "Only the last BYTES bytes");
  app.add_flag("-f,--follow", follow, "Keep printing new output until the job ends");
  return cmd.Run(argc, argv, [&](tessera::daemon::Client& c) -> tessera::Status {
    size_t size = 0;
    TSR_ASSIGN_OR_RETURN(std::string text, c.GetText(tail ? fmt::format("/v1/jobs/{}/logs?tail={}", id, tail)
                                                          : fmt::format("/v1/jobs/{}/logs", id),
                                                     &size));
    std::fwrite(text.data(), 1, text.size(), stdout);
    std::fflush(stdout);
    while (follow) {
      TSR_ASSIGN_OR_RETURN(auto j, c.Get(fmt::format("/v1/jobs/{}", id)));
      std::string state = j["state"];
      TSR_ASSIGN_OR_RETURN(std::string more, c.GetText(fmt::format("/v1/jobs/{}/logs?offset={}", id, size), &size));
      std::fwrite(more.data(), 1, more.size(), stdout);
      std::fflush(stdout);
      if (state != "running" && state != "stopping" && state != "queued") break;
      std::this_thread::sleep_for(std::chrono::milliseconds(500));
    }
    return tessera::Status::Ok();
  });
}
#endif

}  // namespace

TESSERA_DAEMON_COMMAND(logs, "Print a job's output (--follow)", RunLogs);
