// cli/command: registry of `tessera` subcommands. Each src/cli/<name>.cpp registers itself with
//   TESSERA_COMMAND(ckpt, "Inspect, restore and tier checkpoints", RunCkpt);
// and main() dispatches on argv[1]. A subcommand gets argv starting at its own name, parses with CLI11,
// prints errors to stderr and returns the process exit status.
#pragma once

#include <string>
#include <vector>

namespace tessera::cli {

using CommandFn = int (*)(int argc, char** argv);

struct Command {
  const char* name;
  const char* summary;
  CommandFn run;
};

std::vector<Command>& Registry();

struct Registrar {
  explicit Registrar(Command c) { Registry().push_back(c); }
};

}  // namespace tessera::cli

#define TESSERA_COMMAND(name, summary, fn) \
  static ::tessera::cli::Registrar tessera_command_registrar_##name({#name, summary, fn})
