// cli/fleet: `tessera fleet show | register FLEET.yaml [--catalog C] [--policy P] | policy P.yaml` — the
// daemon's fleet, with host-emulated cards labelled "emulated", free cards per node and the policy floor —
// and `tessera fleet import --slurm`, which writes a fleet file from `scontrol show nodes` (daemon/slurm.hpp).
#include "cli/daemon_command.hpp"
#ifdef TESSERA_HAVE_DAEMON
#include <cstdio>

#include "common/file.hpp"
#include "daemon/cli_format.hpp"
#include "daemon/daemon.hpp"
#include "daemon/slurm.hpp"
#include "daemon/util.hpp"
#endif

namespace {

#ifdef TESSERA_HAVE_DAEMON
tessera::Status Show(tessera::daemon::Client& c) {
  TSR_ASSIGN_OR_RETURN(const auto f, c.Get("/v1/fleet"));
  std::printf("catalog (%s, price version %s):\n", f["currency"].get<std::string>().c_str(),
              f["price_version"].get<std::string>().c_str());
  for (const auto& t : f["catalog"]) {
    std::string tp;
    for (auto it = t["throughput"].begin(); it != t["throughput"].end(); ++it)
      tp += (tp.empty() ? "" : ", ") + it.key() + " " + it.value().get<std::string>();
    std::printf("  %-14s %-8s %-9s %8s %s/card-hour  throughput %s\n", t["name"].get<std::string>().c_str(),
                t["vendor"].get<std::string>().c_str(), t["domestic"].get<bool>() ? "domestic" : "imported",
                t["price_per_card_hour"].get<std::string>().c_str(), f["currency"].get<std::string>().c_str(),
                tp.c_str());
  }
  if (f["nodes"].empty()) {
    std::printf("fleet: none registered (tessera fleet register FLEET.yaml)\n");
  } else {
    std::printf("fleet (%s):\n  %-14s %-8s %-14s %5s %5s %5s  %s\n", f["fleet_source"].get<std::string>().c_str(),
                "NODE", "ZONE", "TYPE", "CARDS", "USED", "FREE", "KIND");
    for (const auto& n : f["nodes"])
      std::printf("  %-14s %-8s %-14s %5lld %5lld %5lld  %s\n", n["id"].get<std::string>().c_str(),
                  n["zone"].get<std::string>().c_str(), n["type"].get<std::string>().c_str(),
                  static_cast<long long>(n["cards"].get<int64_t>()), static_cast<long long>(n["used"].get<int64_t>()),
                  static_cast<long long>(n["free"].get<int64_t>()),
                  n["emulated"].get<bool>()
                      ? ("emulated (" + tessera::daemon::EmulationKind(n.value("sm_share", 0)) + ")").c_str()
                      : "real");
  }
  std::printf("policy (%s): domestic floor today %s, measured in %s", f["policy_source"].get<std::string>().c_str(),
              f["floor_today"].get<std::string>().c_str(), f["unit"].get<std::string>().c_str());
  if (f.contains("share_now"))
    std::printf("; running jobs' share %s (%s)", f["share_now"].get<std::string>().c_str(),
                f["compliant"].get<bool>() ? "compliant" : "NOT compliant");
  std::printf("\nbilling ledger: %s\n", f["ledger"].get<std::string>().c_str());
  return tessera::Status::Ok();
}

int RunFleet(int argc, char** argv) {
  using namespace tessera::daemon;
  CLI::App app{"Show or register the daemon's fleet, catalog and policy", "tessera fleet"};
  tessera::cli::DaemonCommand cmd("fleet", app);
  app.require_subcommand(0, 1);
  app.fallthrough();
  auto* show = app.add_subcommand("show", "Show catalog, nodes (emulated ones labelled), free cards, policy");
  auto* reg = app.add_subcommand("register", "Register (replace) the fleet; optionally the catalog and policy too");
  std::string fleet, catalog, policy, policy_only;
  reg->add_option("fleet", fleet,
                  "Fleet YAML (nodes; 'emulated: true' for host-emulated cards, 'sm_share: P' for cards emulated on "
                  "P% of the GPU's SMs)")
      ->required();
  reg->add_option("--catalog", catalog, "Catalog YAML (accelerator types and prices)");
  reg->add_option("--policy", policy, "Policy YAML (domestic-share floor calendar)");
  auto* pol = app.add_subcommand("policy", "Replace the policy; running jobs that break it are preempted");
  pol->add_option("policy", policy_only, "Policy YAML")->required();
  auto* imp = app.add_subcommand("import", "Write a fleet file from Slurm's nodes (scontrol show nodes)");
  bool from_slurm = false, emulated = false, include_down = false, do_register = false;
  std::string imp_catalog, nodes_file, out_file, zone;
  imp->add_flag("--slurm", from_slurm, "Read the nodes from Slurm (the only source today)")->required();
  imp->add_option("--catalog", imp_catalog,
                  "Catalog YAML: which GRES is which card type (slurm_gres, else gpu = nvidia, npu = ascend); "
                  "default the daemon's embedded catalog");
  imp->add_option("--nodes-file", nodes_file, "Read this saved `scontrol show nodes` output instead of running it");
  imp->add_option("--zone", zone, "Put every node in this zone (default: the node's first partition)");
  imp->add_flag("--emulated", emulated, "Mark the cards emulated (host ranks): test clusters with fake GRES");
  imp->add_flag("--include-down", include_down, "Keep nodes that are DOWN, DRAINED or FAILED");
  imp->add_option("-o,--out", out_file, "Write the fleet file here (default: stdout)");
  imp->add_flag("--register", do_register, "Also register it with the daemon (with --catalog when given)");
  (void)show;
  if (auto rc = cmd.Parse(argc, argv)) return *rc;
  std::string imported;
  if (imp->parsed()) {
    namespace slurm = tessera::daemon::slurm;
    auto cat = imp_catalog.empty() ? tessera::sched::ParseCatalog(kDefaultCatalogYaml, "the embedded catalog")
                                   : tessera::sched::LoadCatalog(imp_catalog);
    if (!cat.ok()) return tessera::cli::Fail("fleet import", cat.status());
    std::string text, origin;
    if (!nodes_file.empty()) {
      auto t = tessera::ReadFile(nodes_file);
      if (!t.ok()) return tessera::cli::Fail("fleet import", t.status().WithContext("--nodes-file"));
      text = *t;
      origin = nodes_file;
    } else {
      auto r = slurm::RunCommand({"scontrol", "show", "nodes"}, 20000);
      if (r.exit_code != 0)
        return tessera::cli::Fail("fleet import", tessera::SystemError(r.Describe("scontrol show nodes")));
      text = r.out;
      origin = "scontrol show nodes";
    }
    auto nodes = slurm::ParseNodes(text);
    if (!nodes.ok()) return tessera::cli::Fail("fleet import", nodes.status());
    slurm::ImportOptions io;
    io.emulated = emulated;
    io.zone = zone;
    io.include_down = include_down;
    auto yaml = slurm::FleetYaml(*nodes, *cat, io, origin);
    if (!yaml.ok()) return tessera::cli::Fail("fleet import", yaml.status());
    if (out_file.empty() && !do_register) {
      std::fputs(yaml->c_str(), stdout);
      return 0;
    }
    if (!out_file.empty()) {
      if (tessera::Status s = tessera::WriteFileAtomic(out_file, *yaml); !s.ok())
        return tessera::cli::Fail("fleet import", s);
      std::fprintf(stderr, "tessera fleet import: wrote %s\n", out_file.c_str());
    }
    if (!do_register) return 0;
    imported = *yaml;
  }
  return cmd.Connected([&](Client& client) -> tessera::Status {
    if (!imported.empty()) {
      nlohmann::json body;
      body["fleet"] = {{"source", out_file.empty() ? "slurm-import.yaml" : out_file}, {"yaml", imported}};
      if (!imp_catalog.empty()) {
        TSR_ASSIGN_OR_RETURN(body["catalog"], ReadDocument(imp_catalog));
      }
      TSR_ASSIGN_OR_RETURN(auto r, client.Put("/v1/fleet", body));
      std::printf("registered %lld nodes, %lld cards from Slurm\n", static_cast<long long>(r["nodes"].get<int64_t>()),
                  static_cast<long long>(r["cards"].get<int64_t>()));
      return tessera::Status::Ok();
    }
    if (reg->parsed()) {
      nlohmann::json body;
      TSR_ASSIGN_OR_RETURN(body["fleet"], ReadDocument(fleet));
      if (!catalog.empty()) {
        TSR_ASSIGN_OR_RETURN(body["catalog"], ReadDocument(catalog));
      }
      if (!policy.empty()) {
        TSR_ASSIGN_OR_RETURN(body["policy"], ReadDocument(policy));
      }
      TSR_ASSIGN_OR_RETURN(auto r, client.Put("/v1/fleet", body));
      std::printf("registered %lld nodes, %lld cards (%lld emulated on this host)\n",
                  static_cast<long long>(r["nodes"].get<int64_t>()), static_cast<long long>(r["cards"].get<int64_t>()),
                  static_cast<long long>(r["emulated_cards"].get<int64_t>()));
    } else if (pol->parsed()) {
      TSR_ASSIGN_OR_RETURN(auto p, ReadDocument(policy_only));
      TSR_ASSIGN_OR_RETURN(auto r, client.Put("/v1/policy", p));
      std::printf("policy %s in force; floor today %s\n", r["policy"].get<std::string>().c_str(),
                  r["floor_today"].get<std::string>().c_str());
      return tessera::Status::Ok();
    }
    return Show(client);
  });
}
#endif

}  // namespace

TESSERA_DAEMON_COMMAND(fleet, "Show or register the daemon's fleet (emulated cards labelled), catalog and policy",
                       RunFleet);
