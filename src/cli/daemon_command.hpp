// cli/daemon_command: what the subcommands that talk to the job daemon share — `submit`, `queue`, `status`,
// `cancel`, `logs` and `fleet` — and the registration of every daemon subcommand (`daemon` too), so that a
// build without the daemon answers them all the same way (exit 4, NoDaemon).
//
//   CLI::App app{"Cancel a job", "tessera cancel"};
//   tessera::cli::DaemonCommand cmd("cancel", app);     // --state-dir, --daemon, --token
//   app.add_option("id", id, "Job id")->required();
//   return cmd.Run(argc, argv, [&](tessera::daemon::Client& c) -> tessera::Status { ... });
//   ...
//   TESSERA_DAEMON_COMMAND(cancel, "Cancel a job", RunCancel);
#pragma once

#include "cli/command.hpp"
#include "cli/exit_code.hpp"

#ifdef TESSERA_HAVE_DAEMON
#include <CLI/CLI.hpp>
#include <functional>
#include <optional>

#include "daemon/client.hpp"
#include "tessera/status.hpp"

namespace tessera::cli {

// What a daemon command does once its flags are parsed and the daemon's address and token are known. An error
// Status is printed as "tessera NAME: message" and becomes the exit status (ExitCodeOf).
using DaemonBody = std::function<Status(daemon::Client&)>;

class DaemonCommand {
 public:
  // Adds --state-dir, --daemon and --token to `app` (where the client finds the daemon and its token).
  DaemonCommand(const char* name, CLI::App& app);

  // Parse(argc, argv), then Connected(body).
  int Run(int argc, char** argv, const DaemonBody& body);
  // Parses argv: nullopt when the command goes on; else the exit status to return (--help: 0, a usage error: 2,
  // printed by ParseExit).
  std::optional<int> Parse(int argc, char** argv);
  // Finds the daemon (Client::Connect) and runs `body`; a failure of either is printed and mapped to its exit code.
  int Connected(const DaemonBody& body);

  const daemon::ClientOptions& options() const { return options_; }

 private:
  const char* name_;
  CLI::App& app_;
  daemon::ClientOptions options_;
};

}  // namespace tessera::cli

// Registers a daemon subcommand: `fn` in a build with the daemon, NoDaemon in one without (where `fn` need not
// exist).
#define TESSERA_DAEMON_COMMAND(name, summary, fn) TESSERA_COMMAND(name, summary, fn)
#else
#define TESSERA_DAEMON_COMMAND(name, summary, fn) \
  TESSERA_COMMAND(name, summary, [](int, char**) { return ::tessera::cli::NoDaemon(#name); })
#endif
