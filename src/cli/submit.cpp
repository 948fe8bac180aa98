// cli/submit: `tessera submit JOB.yaml [--policy-compatible ascend,nvidia]` — sends a job to the daemon and
// prints its plan (or why it waits).
#include "cli/daemon_command.hpp"
#ifdef TESSERA_HAVE_DAEMON
#include <cstdio>

#include "daemon/cli_format.hpp"
#include "daemon/util.hpp"
#endif

namespace {

#ifdef TESSERA_HAVE_DAEMON
// The daemon's answer to POST /v1/jobs: the job, and its plan or why it waits.
void Print(const nlohmann::json& r) {
  using namespace tessera::daemon;
  std::printf("job %lld (%s) submitted; checkpoints in %s\n", static_cast<long long>(r["id"].get<int64_t>()),
              r["name"].get<std::string>().c_str(), r["checkpoint_dir"].get<std::string>().c_str());
  const auto& p = r["plan"];
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
  } else if (!r["waits"].get<std::string>().empty()) {
    std::printf("queued: %s\n", r["waits"].get<std::string>().c_str());
  } else {
    std::printf("queued\n");
  }
}

int RunSubmit(int argc, char** argv) {
  using namespace tessera::daemon;
  CLI::App app{"Submit a job file to the daemon", "tessera submit"};
  tessera::cli::DaemonCommand cmd("submit", app);
  std::string file, compatible;
  bool json_out = false;
  app.add_option("job", file, "Job YAML (planner fields + command, checkpoint, grace, env)")->required();
  app.add_option("--policy-compatible", compatible,
                 "Accelerator vendors or types the job accepts, e.g. ascend,moore,nvidia (overrides the file)");
  app.add_flag("--json", json_out, "Print the daemon's answer as JSON");
  if (auto rc = cmd.Parse(argc, argv)) return *rc;
  std::string base;
  auto doc = ReadDocument(file, &base);
  if (!doc.ok()) return tessera::cli::Fail("submit", doc.status());
  nlohmann::json body = *doc;
  body["base_dir"] = base;
  body["compatible"] = SplitList(compatible);
  return cmd.Connected([&](Client& c) -> tessera::Status {
    TSR_ASSIGN_OR_RETURN(auto r, c.Post("/v1/jobs", body));
    if (json_out)
      std::printf("%s\n", r.dump(2).c_str());
    else
      Print(r);
    return tessera::Status::Ok();
  });
}
#endif

}  // namespace

TESSERA_DAEMON_COMMAND(submit, "Submit a job to the daemon (--policy-compatible ascend,nvidia)", RunSubmit);
