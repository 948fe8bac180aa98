// cli/cancel: `tessera cancel ID [--requeue]` — cancels a job (SIGTERM, grace, SIGKILL), or with --requeue
// interrupts it: it checkpoints, stops, goes back to the queue and resumes from that checkpoint.
#include <CLI/CLI.hpp>
#include <cstdio>

#include "cli/command.hpp"
#include "cli/exit_code.hpp"
#ifdef TESSERA_HAVE_DAEMON
#include <fmt/format.h>

#include "daemon/cli_flags.hpp"
#endif

namespace {

int RunCancel(int argc, char** argv) {
#ifndef TESSERA_HAVE_DAEMON
  (void)argc;
  (void)argv;
  return tessera::cli::NoDaemon("cancel");
#else
  using namespace tessera::daemon;
  CLI::App app{"Cancel a job, or interrupt it and queue it again (--requeue)", "tessera cancel"};
  ClientOptions co;
  AddClientFlags(app, &co);
  int64_t id = 0;
  bool requeue = false;
  app.add_option("id", id, "Job id")->required();
  app.add_flag("--requeue", requeue, "Interrupt instead: checkpoint, stop, queue again, resume from the checkpoint");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return tessera::cli::ParseExit(app, e);
  }
  auto client = Client::Connect(co);
  if (!client.ok()) return tessera::cli::Fail("cancel", client.status());
  auto r = (*client)->Post(fmt::format("/v1/jobs/{}/{}", id, requeue ? "requeue" : "cancel"), nlohmann::json::object());
  if (!r.ok()) return tessera::cli::Fail("cancel", r.status());
  std::printf("job %lld: %s%s%s\n", static_cast<long long>(id), (*r)["state"].get<std::string>().c_str(),
              (*r)["reason"].get<std::string>().empty() ? "" : " — ", (*r)["reason"].get<std::string>().c_str());
  return 0;
#endif
}

}  // namespace

TESSERA_COMMAND(cancel, "Cancel a job, or interrupt and requeue it (--requeue)", RunCancel);
