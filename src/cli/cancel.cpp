// cli/cancel: `tessera cancel ID [--requeue]` — cancels a job (SIGTERM, grace, SIGKILL), or with --requeue
// interrupts it: it checkpoints, stops, goes back to the queue and resumes from that checkpoint.
#include "cli/daemon_command.hpp"
#ifdef TESSERA_HAVE_DAEMON
#include <fmt/format.h>

#include <cstdio>
#endif

namespace {

#ifdef TESSERA_HAVE_DAEMON
int RunCancel(int argc, char** argv) {
  CLI::App app{"Cancel a job, or interrupt it and queue it again (--requeue)", "tessera cancel"};
  tessera::cli::DaemonCommand cmd("cancel", app);
  int64_t id = 0;
  bool requeue = false;
  app.add_option("id", id, "Job id")->required();
  app.add_flag("--requeue", requeue, "Interrupt instead: checkpoint, stop, queue again, resume from the checkpoint");
  return cmd.Run(argc, argv, [&](tessera::daemon::Client& c) -> tessera::Status {
    TSR_ASSIGN_OR_RETURN(
        auto r, c.Post(fmt::format("/v1/jobs/{}/{}", id, requeue ? "requeue" : "cancel"), nlohmann::json::object()));
    std::printf("job %lld: %s%s%s\n", static_cast<long long>(id), r["state"].get<std::string>().c_str(),
                r["reason"].get<std::string>().empty() ? "" : " — ", r["reason"].get<std::string>().c_str());
    return tessera::Status::Ok();
  });
}
#endif

}  // namespace

TESSERA_DAEMON_COMMAND(cancel, "Cancel a job, or interrupt and requeue it (--requeue)", RunCancel);
