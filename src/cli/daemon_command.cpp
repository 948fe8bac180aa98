// cli/daemon_command: flags, parse, connect and error mapping shared by the daemon client subcommands.
#include "cli/daemon_command.hpp"

#ifdef TESSERA_HAVE_DAEMON
namespace tessera::cli {

DaemonCommand::DaemonCommand(const char* name, CLI::App& app) : name_(name), app_(app) {
  app.add_option("--state-dir", options_.state_dir, "Daemon state directory (default $TESSERA_HOME or ~/.tessera)");
  app.add_option("--daemon", options_.address,
                 "Daemon address HOST:PORT (default $TESSERA_DAEMON or STATE/daemon.json)");
  app.add_option("--token", options_.token, "Bearer token (default $TESSERA_DAEMON_TOKEN or STATE/token)");
}

std::optional<int> DaemonCommand::Parse(int argc, char** argv) {
  try {
    app_.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return ParseExit(app_, e);
  }
  return std::nullopt;
}

int DaemonCommand::Connected(const DaemonBody& body) {
  auto client = daemon::Client::Connect(options_);
  if (!client.ok()) return Fail(name_, client.status());
  Status s = body(**client);
  return s.ok() ? kExitOk : Fail(name_, s);
}

int DaemonCommand::Run(int argc, char** argv, const DaemonBody& body) {
  if (auto rc = Parse(argc, argv)) return *rc;
  return Connected(body);
}

}  // namespace tessera::cli
#endif
