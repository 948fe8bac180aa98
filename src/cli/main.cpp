// cli/main: entry point of the `tessera` binary; dispatches to the registered subcommands.
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "cli/command.hpp"
#include "common/log.hpp"
#include "common/text.hpp"
#include "tessera/tessera.h"

namespace tessera::cli {
std::vector<Command>& Registry() {
  static std::vector<Command> commands;
  return commands;
}
}  // namespace tessera::cli

namespace {
void Usage(FILE* out) {
  auto cmds = tessera::cli::Registry();
  std::sort(cmds.begin(), cmds.end(), [](auto& a, auto& b) { return std::strcmp(a.name, b.name) < 0; });
  std::fprintf(out, "tessera %d.%d.%d — one training job across accelerators of several vendors\n\n",
               TESSERA_VERSION_MAJOR, TESSERA_VERSION_MINOR, TESSERA_VERSION_PATCH);
  std::fprintf(out, "usage: tessera <command> [options]   (tessera <command> --help for details)\n\ncommands:\n");
  for (const auto& c : cmds) std::fprintf(out, "  %-10s %s\n", c.name, c.summary);
}
}  // namespace

int main(int argc, char** argv) {
  tessera::log::Init();
  if (argc < 2 || !std::strcmp(argv[1], "--help") || !std::strcmp(argv[1], "-h") || !std::strcmp(argv[1], "help")) {
    Usage(argc < 2 ? stderr : stdout);
    return argc < 2 ? 2 : 0;
  }
  if (!std::strcmp(argv[1], "--version")) {
    int v = 0;  // the library's version (the one defined in tessera.h when it was built)
    (void)tsrGetVersion(&v);
    std::printf("tessera %d.%d.%d\n", v / 10000, v / 100 % 100, v % 100);
    return 0;
  }
  for (const auto& c : tessera::cli::Registry()) {
    if (!std::strcmp(argv[1], c.name)) return c.run(argc - 1, argv + 1);
  }
  std::vector<std::string> names;
  for (const auto& c : tessera::cli::Registry()) names.push_back(c.name);
  std::string hint = tessera::DidYouMean(argv[1], names);
  if (!std::strcmp(argv[1], "version")) hint = "; did you mean 'tessera --version'?";
  std::fprintf(stderr, "tessera: unknown command '%s'%s (`tessera --help` lists the commands)\n", argv[1],
               hint.c_str());
  return 2;
}
