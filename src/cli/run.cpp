// cli/run: `tessera run --island VENDOR=DEVICE:COUNT [--island ...] [--sm-share VENDOR=PCT] [--timeout D] [--dry-run]
//   -- PROGRAM ARGS...`
// Parses the command line and hands over to comm/launcher, which starts the ranks on this machine.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "cli/command.hpp"
#include "cli/exit_code.hpp"
#include "comm/launcher.hpp"
#include "comm/sm_share.hpp"
#include "common/env.hpp"

namespace {

namespace launcher = tessera::comm::launcher;

constexpr const char* kUsage =
    "tessera run --island VENDOR=DEVICE:COUNT [--island ...] [--timeout D] -- PROGRAM ARGS...";

int Error(const std::string& message) {
  std::fprintf(stderr, "tessera run: %s\n", message.c_str());
  return 2;
}

int RunRun(int argc, char** argv) {
  // Everything after the first "--" is the program; CLI11 sees only what comes before it.
  int sep = -1;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--") == 0) {
      sep = i;
      break;
    }
  }
  std::vector<std::string> program;
  if (sep >= 0) program.assign(argv + sep + 1, argv + argc);

  CLI::App app{"Start the ranks of a job on this machine, grouped into islands of one vendor each.", "tessera run"};
  std::vector<std::string> islands;
  std::string timeout_text;
  bool dry_run = false;
  std::vector<std::string> sm_shares;
  app.add_option("--island", islands,
                 "An island: VENDOR=DEVICE:COUNT, DEVICE host or cuda (e.g. ascend=host:3). Repeat for more "
                 "islands; ranks are numbered in island order.")
      ->type_name("VENDOR=DEVICE:COUNT")
      ->allow_extra_args(false);
  app.add_option("--timeout", timeout_text,
                 "TESSERA_TIMEOUT for the ranks (e.g. 30s, 2m), and how long the other ranks get to exit after one "
                 "fails. Default: the caller's TESSERA_TIMEOUT, else 60s.")
      ->type_name("DURATION");
  app.add_option("--sm-share", sm_shares,
                 "Run a cuda island's ranks on PERCENT% of their GPU's SMs (NVIDIA MPS), e.g. ascend=40: a model of a "
                 "slower card on one GPU, labelled 'emulated' in every output. Repeat per island.")
      ->type_name("VENDOR=PERCENT")
      ->allow_extra_args(false);
  app.add_flag("--dry-run", dry_run, "Print the ranks (rank, island, vendor, device) and start nothing.");
  app.footer(
      "Each rank gets TESSERA_RANK, TESSERA_WORLD_SIZE, TESSERA_ISLAND, TESSERA_ISLAND_VENDOR, TESSERA_DEVICE,\n"
      "TESSERA_LOCAL_RANK, TESSERA_ISLANDS, TESSERA_STORE, TESSERA_TOKEN and TESSERA_TIMEOUT. Its output lines are\n"
      "prefixed \"[rank R vendor] \". SIGINT, SIGTERM and SIGHUP are forwarded to the ranks (a second SIGINT kills\n"
      "them). When a rank fails, the others get TESSERA_TIMEOUT to exit, then SIGTERM, then SIGKILL 2s later;\n"
      "the exit status is the first failing rank's (128+N for signal N). See docs/launcher.md.\n\n"
      "example: tessera run --island ascend=host:3 --island nvidia=host:5 -- ./train");
  app.allow_extras();
  try {
    app.parse(sep >= 0 ? sep : argc, argv);
  } catch (const CLI::ParseError& e) {
    return tessera::cli::ParseExit(app, e);
  }
  const auto extras = app.remaining();
  if (!extras.empty()) {
    if (sep < 0 && !extras[0].empty() && extras[0][0] != '-')
      return Error("put '--' before the program ('" + extras[0] + "'): " + kUsage);
    return Error("unknown option '" + extras[0] + "': " + kUsage);
  }

  auto parsed = launcher::ParseIslands(islands);
  if (!parsed.ok()) return Error(parsed.status().message());
  launcher::Options options;
  options.islands = std::move(parsed).value();
  options.dry_run = dry_run;
  auto shares = launcher::ParseSmShares(sm_shares, options.islands);
  if (!shares.ok()) return Error(shares.status().message());
  options.sm_share = std::move(shares).value();
  options.program = std::move(program);
  if (!timeout_text.empty()) {
    auto t = tessera::env::ParseDuration("--timeout", timeout_text);
    if (!t.ok()) return Error(t.status().message());
    options.timeout = *t;
  } else {
    auto t = tessera::env::Duration("TESSERA_TIMEOUT", std::chrono::seconds(60));
    if (!t.ok()) return Error(t.status().message());
    options.timeout = *t;
  }
  if (!dry_run && sep < 0) return Error(std::string("no program given: missing '--' and PROGRAM: ") + kUsage);
  if (!dry_run && options.program.empty()) return Error(std::string("no program after '--': ") + kUsage);
  return launcher::Run(options);
}

}  // namespace

TESSERA_COMMAND(run, "Start the ranks of a job on this machine", RunRun);
