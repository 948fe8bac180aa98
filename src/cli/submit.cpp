// cli/submit: `tessera submit JOB.yaml [--policy-compatible ascend,nvidia]` — sends a job to the daemon and
// prints its plan (or why it waits).
#include <CLI/CLI.hpp>
#include <cstdio>

#include "cli/command.hpp"
#include "cli/exit_code.hpp"
#ifdef TESSERA_HAVE_DAEMON
#include "daemon/cli_flags.hpp"
#include "daemon/util.hpp"
#endif

namespace {

int RunSubmit(int argc, char** argv) {
#ifndef TESSERA_HAVE_DAEMON
  (void)argc;
  (void)argv;
  return tessera::cli::NoDaemon("submit");
#else
  using namespace tessera::daemon;
  CLI::App app{"Submit a job file to the daemon", "tessera submit"};
  ClientOptions co;
  AddClientFlags(app, &co);
  std::string file, compatible;
  bool json_out = false;
  app.add_option("job", file, "Job YAML (planner fields + command, checkpoint, grace, env)")->required();
  app.add_option("--policy-compatible", compatible,
                 "Accelerator vendors or types the job accepts, e.g. ascend,moore,nvidia (overrides the file)");
  app.add_flag("--json", json_out, "Print the daemon's answer as JSON");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return tessera::cli::ParseExit(app, e);
  }
  std::string base;
  auto doc = ReadDocument(file, &base);
  if (!doc.ok()) return tessera::cli::Fail("submit", doc.status());
  nlohmann::json body = *doc;
  body["base_dir"] = base;
  body["compatible"] = SplitList(compatible);
  auto client = Client::Connect(co);
  if (!client.ok()) return tessera::cli::Fail("submit", client.status());
  auto r = (*client)->Post("/v1/jobs", body);
  if (!r.ok()) return tessera::cli::Fail("submit", r.status());
  if (json_out) {
    std::printf("%s\n", r->dump(2).c_str());
    return 0;
  }
  std::printf("job %lld (%s) submitted; checkpoints in %s\n", static_cast<long long>((*r)["id"].get<int64_t>()),
              (*r)["name"].get<std::string>().c_str(), (*r)["checkpoint_dir"].get<std::string>().c_str());
  const auto& p = (*r)["plan"];
  if (p.is_object()) {
    std::printf("plan: %s in zone %s\n", DescribeAllocation(p).c_str(), p["zone"].get<std::string>().c_str());
    for (const auto& t : p["by_type"])
      std::printf("  %-14s %3lld cards  %-8s %s  %s %s/h\n", t["type"].get<std::string>().c_str(),
                  static_cast<long long>(t["cards"].get<int64_t>()), t["vendor"].get<std::string>().c_str(),
                  t["domestic"].get<bool>() ? "domestic" : "imported",
                  !t["emulated"].get<bool>()   ? "[real]"
                  : t.value("sm_share", 0) > 0 ? ("[emulated on " + EmulationKind(t.value("sm_share", 0)) + "]").c_str()
                                               : "[emulated on host]",
                  t["cost_per_hour"].get<std::string>().c_str());
    for (const auto& n : p["by_node"])
      std::printf("  node %-12s %3lld x %s%s\n", n["node"].get<std::string>().c_str(),
                  static_cast<long long>(n["cards"].get<int64_t>()), n["type"].get<std::string>().c_str(),
                  EmulatedNote(n).c_str());
    std::printf("  cost %s %s/h; domestic share %s -> %s (floor %s, by %s)\n",
                p["cost_per_hour"].get<std::string>().c_str(), p["currency"].get<std::string>().c_str(),
                p["share_before"].get<std::string>().c_str(), p["share_after"].get<std::string>().c_str(),
                p["floor"].get<std::string>().c_str(), p["unit"].get<std::string>().c_str());
  } else if (!(*r)["waits"].get<std::string>().empty()) {
    std::printf("queued: %s\n", (*r)["waits"].get<std::string>().c_str());
  } else {
    std::printf("queued\n");
  }
  return 0;
#endif
}

}  // namespace

TESSERA_COMMAND(submit, "Submit a job to the daemon (--policy-compatible ascend,nvidia)", RunSubmit);
