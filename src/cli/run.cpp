// cli/run: `tessera run --island VENDOR=DEVICE:COUNT [--island ...] [--sm-share VENDOR=PCT] [--timeout D]
//   [--stop-grace D] [--dry-run] [--nnodes N --node-rank K --store HOST:PORT [--node-addr A] [--token-file F]]
//   -- PROGRAM ARGS...`
// Parses the command line (and, inside a Slurm step without --nnodes, the SLURM_* variables) and hands over
// to launch/launcher, which starts this node's ranks.
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "cli/command.hpp"
#include "cli/exit_code.hpp"
#include "comm/store/store.hpp"
#include "common/env.hpp"
#include "launch/launcher.hpp"
#include "launch/sm_share.hpp"

extern char** environ;

namespace {

namespace launch = tessera::launch;

constexpr const char* kUsage =
    "tessera run --island VENDOR=DEVICE:COUNT [--island ...] [--timeout D] [--nnodes N --node-rank K --store "
    "HOST:PORT] -- PROGRAM ARGS...";

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

  CLI::App app{
      "Start the ranks of a job on this machine (or this node's share of a job on several), grouped into "
      "islands of one vendor each.",
      "tessera run"};
  std::vector<std::string> islands;
  std::string timeout_text;
  bool dry_run = false;
  std::vector<std::string> sm_shares;
  app.add_option("--island", islands,
                 "An island: VENDOR=DEVICE:COUNT, DEVICE host, cuda, npu, musa, corex or emu (e.g. ascend=host:3). "
                 "Repeat for more islands; ranks are numbered in island order.")
      ->type_name("VENDOR=DEVICE:COUNT")
      ->allow_extra_args(false);
  app.add_option("--timeout", timeout_text,
                 "TESSERA_TIMEOUT for the ranks (e.g. 30s, 2m). Default: the caller's TESSERA_TIMEOUT, else " +
                     tessera::env::DeclaredString("TESSERA_TIMEOUT") + ".")
      ->type_name("DURATION");
  std::string stop_grace_text;
  app.add_option("--stop-grace", stop_grace_text,
                 "When a rank fails (on any node of the job), how long the others get to exit on their own, so that "
                 "they can print why they fail, before they are stopped (e.g. 500ms, 10s). Default: " +
                     tessera::comm::FormatDuration(launch::Options{}.stop_grace) + ".")
      ->type_name("DURATION");
  app.add_option("--sm-share", sm_shares,
                 "Run a cuda island's ranks on PERCENT% of their GPU's SMs (NVIDIA MPS), e.g. ascend=40: a model of a "
                 "slower card on one GPU, labelled 'emulated' in every output. Repeat per island.")
      ->type_name("VENDOR=PERCENT")
      ->allow_extra_args(false);
  app.add_flag("--dry-run", dry_run, "Print the ranks (rank, island, vendor, device) and start nothing.");
  bool no_prefix = false;
  app.add_flag("--no-prefix", no_prefix,
               "Print the ranks' lines as they write them, without \"[rank R vendor] \" (output for machines: "
               "`tessera bench --json -` prints one JSON line; lines stay whole).");
  int nnodes = 0, node_rank = -1;
  std::string store, node_addr, token_file;
  app.add_option("--nnodes", nnodes,
                 "Nodes (hosts) of the job; each runs this same command with its own --node-rank. The --island counts "
                 "are the whole job's; ranks are dealt to the nodes in order, in contiguous blocks.")
      ->type_name("N");
  app.add_option("--node-rank", node_rank, "This node's index, 0..N-1 (node 0 serves the store).")->type_name("K");
  app.add_option("--store", store,
                 "HOST:PORT of the job's store, on node 0 (node 0 binds it; port 0 or none on node 0: pick one and "
                 "print it).")
      ->type_name("HOST:PORT");
  app.add_option("--node-addr", node_addr,
                 "This node's address for the ranks' TCP transport (default: the local address of the route to the "
                 "store host).")
      ->type_name("ADDR");
  app.add_option("--token-file", token_file,
                 "File with the job token (mode 0600), the same on every node; or set TESSERA_TOKEN. Required with "
                 "--nnodes > 1.")
      ->type_name("FILE");
  app.footer(
      "Each rank gets TESSERA_RANK, TESSERA_WORLD_SIZE, TESSERA_ISLAND, TESSERA_ISLAND_VENDOR, TESSERA_DEVICE,\n"
      "TESSERA_LOCAL_RANK, TESSERA_ISLANDS, TESSERA_STORE, TESSERA_TOKEN and TESSERA_TIMEOUT. Its output lines are\n"
      "prefixed \"[rank R vendor] \" (--no-prefix: not). SIGINT, SIGTERM and SIGHUP are forwarded to the ranks (a "
      "second SIGINT kills\n"
      "them). When a rank fails, the others (on every node) get --stop-grace to exit, then SIGTERM, then SIGKILL\n"
      "2s later; the exit status is the first failing rank's (128+N for signal N). See docs/launcher.md.\n\n"
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
    return Error("unknown option '" + extras[0] + "'" + tessera::DidYouMean(extras[0], tessera::cli::NamesOf(app)) +
                 ": " + kUsage);
  }

  auto parsed = launch::ParseIslands(islands);
  if (!parsed.ok()) return Error(parsed.status().message());
  launch::Options options;
  options.islands = std::move(parsed).value();
  options.dry_run = dry_run;
  options.prefix = !no_prefix;
  auto shares = launch::ParseSmShares(sm_shares, options.islands);
  if (!shares.ok()) return Error(shares.status().message());
  options.sm_share = std::move(shares).value();
  options.program = std::move(program);
  if (!timeout_text.empty()) {
    auto t = tessera::env::ParseDuration("--timeout", timeout_text);
    if (!t.ok()) return Error(t.status().message());
    options.timeout = *t;
  } else {
    auto t = tessera::env::Duration("TESSERA_TIMEOUT");
    if (!t.ok()) return Error(t.status().message());
    options.timeout = *t;
  }
  if (!stop_grace_text.empty()) {
    auto g = tessera::env::ParseDuration("--stop-grace", stop_grace_text);
    if (!g.ok()) return Error(g.status().message());
    options.stop_grace = *g;
  }
  // Nodes: from the flags, else from a Slurm step (one launcher per task), else one node.
  const bool flags = nnodes > 0 || node_rank >= 0 || !store.empty();
  if (flags) {
    options.nnodes = nnodes > 0 ? nnodes : 1;
    options.node_rank = node_rank >= 0 ? node_rank : 0;
    options.origin = fmt::format("--nnodes {} --node-rank {}", options.nnodes, options.node_rank);
    if (options.nnodes > 1 && store.empty())
      return Error(options.origin + ": give --store HOST:PORT (node 0's address)");
  } else {
    std::map<std::string, std::string> env;
    for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
      const std::string entry(*e);
      if (entry.rfind("SLURM_", 0) == 0) env[entry.substr(0, entry.find('='))] = entry.substr(entry.find('=') + 1);
    }
    auto slurm = launch::SlurmFromEnv(env);
    if (!slurm.ok()) return Error("inside Slurm: " + slurm.status().message());
    if (slurm->has_value() && (*slurm)->ntasks > 1) {
      const launch::SlurmTask& t = **slurm;
      options.nnodes = t.ntasks;
      options.node_rank = t.procid;
      options.store_host = t.store_host;
      options.store_port = t.store_port;
      options.origin = t.text;
      int world = 0;
      for (const auto& i : options.islands) world += i.count;
      if (t.ntasks <= world) {
        // Local ranks count the earlier tasks' ranks on this machine (block distribution: consecutive ids).
        const int first = t.procid - t.localid, last = std::min(first + t.node_tasks, t.ntasks);
        const int base = launch::NodeBlock(world, t.ntasks, first).first;
        options.local_offset = launch::NodeBlock(world, t.ntasks, t.procid).first - base;
        options.local_world = launch::NodeBlock(world, t.ntasks, last - 1).second - base;
      }
    }
  }
  if (!store.empty()) {
    const size_t colon = store.rfind(':');
    options.store_host = colon == std::string::npos ? store : store.substr(0, colon);
    if (colon != std::string::npos) {
      auto port = tessera::env::ParseInt("port of --store '" + store + "'", store.substr(colon + 1), 0, 65534);
      if (!port.ok()) return Error(port.status().message());
      options.store_port = static_cast<int>(*port);
    }
    if (options.store_host.empty()) return Error("--store '" + store + "' has no host: use HOST:PORT");
  }
  options.node_addr = node_addr;
  if (!token_file.empty()) {
    auto token = launch::ReadTokenFile(token_file);
    if (!token.ok()) return Error(token.status().message());
    options.token = *token;
  } else if (options.nnodes > 1 || !options.store_host.empty()) {
    options.token = tessera::env::Get("TESSERA_TOKEN").value_or("");
  }
  if (!dry_run && sep < 0) return Error(std::string("no program given: missing '--' and PROGRAM: ") + kUsage);
  if (!dry_run && options.program.empty()) return Error(std::string("no program after '--': ") + kUsage);
  return launch::Run(options);
}

}  // namespace

TESSERA_COMMAND(run, "Start the ranks of a job, on this machine or this node's share of several", RunRun);
