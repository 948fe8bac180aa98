// cli/logs: `tessera logs ID [--tail BYTES] [--follow]` — the job's output (every attempt, every rank).
#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <thread>

#include "cli/command.hpp"
#include "cli/exit_code.hpp"
#ifdef TESSERA_HAVE_DAEMON
#include <fmt/format.h>

#include "daemon/cli_flags.hpp"
#endif

namespace {

int RunLogs(int argc, char** argv) {
#ifndef TESSERA_HAVE_DAEMON
  (void)argc;
  (void)argv;
  return tessera::cli::NoDaemon("logs");
#else
  using namespace tessera::daemon;
  CLI::App app{"Print a job's output", "tessera logs"};
  ClientOptions co;
  AddClientFlags(app, &co);
  int64_t id = 0;
  size_t tail = 0;
  bool follow = false;
  app.add_option("id", id, "Job id")->required();
  app.add_option("--tail", tail, "Only the last BYTES bytes");
  app.add_flag("-f,--follow", follow, "Keep printing new output until the job ends");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return tessera::cli::ParseExit(app, e);
  }
  auto client = Client::Connect(co);
  if (!client.ok()) return tessera::cli::Fail("logs", client.status());
  size_t size = 0;
  auto text = (*client)->GetText(
      tail ? fmt::format("/v1/jobs/{}/logs?tail={}", id, tail) : fmt::format("/v1/jobs/{}/logs", id), &size);
  if (!text.ok()) return tessera::cli::Fail("logs", text.status());
  std::fwrite(text->data(), 1, text->size(), stdout);
  std::fflush(stdout);
  while (follow) {
    auto j = (*client)->Get(fmt::format("/v1/jobs/{}", id));
    if (!j.ok()) return tessera::cli::Fail("logs", j.status());
    std::string state = (*j)["state"];
    auto more = (*client)->GetText(fmt::format("/v1/jobs/{}/logs?offset={}", id, size), &size);
    if (!more.ok()) return tessera::cli::Fail("logs", more.status());
    std::fwrite(more->data(), 1, more->size(), stdout);
    std::fflush(stdout);
    if (state != "running" && state != "stopping" && state != "queued") break;
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
  }
  return 0;
#endif
}

}  // namespace

TESSERA_COMMAND(logs, "Print a job's output (--follow)", RunLogs);
