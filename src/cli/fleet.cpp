// cli/fleet: `tessera fleet show | register FLEET.yaml [--catalog C] [--policy P] | policy P.yaml` — the
// daemon's fleet, with host-emulated cards labelled "emulated", free cards per node and the policy floor.
#include <CLI/CLI.hpp>

#include <cstdio>

#include "cli/command.hpp"
#include "cli/exit_code.hpp"
#ifdef TESSERA_HAVE_DAEMON
#include "daemon/cli_flags.hpp"
#endif

namespace {

#ifdef TESSERA_HAVE_DAEMON
int Show(tessera::daemon::Client& c) {
  auto r = c.Get("/v1/fleet");
  if (!r.ok()) return tessera::cli::Fail("fleet", r.status());
  const auto& f = *r;
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
                  n["emulated"].get<bool>() ? "emulated (host ranks)" : "real");
  }
  std::printf("policy (%s): domestic floor today %s, measured in %s", f["policy_source"].get<std::string>().c_str(),
              f["floor_today"].get<std::string>().c_str(), f["unit"].get<std::string>().c_str());
  if (f.contains("share_now"))
    std::printf("; running jobs' share %s (%s)", f["share_now"].get<std::string>().c_str(),
                f["compliant"].get<bool>() ? "compliant" : "NOT compliant");
  std::printf("\nbilling ledger: %s\n", f["ledger"].get<std::string>().c_str());
  return 0;
}
#endif

int RunFleet(int argc, char** argv) {
#ifndef TESSERA_HAVE_DAEMON
  (void)argc;
  (void)argv;
  std::fprintf(stderr, "tessera fleet: this build has no job daemon (needs libsqlite3-dev and libcpp-httplib-dev)\n");
  return tessera::cli::kExitUnsupported;
#else
  using namespace tessera::daemon;
  CLI::App app{"Show or register the daemon's fleet, catalog and policy", "tessera fleet"};
  ClientOptions co;
  AddClientFlags(app, &co);
  app.require_subcommand(0, 1);
  app.fallthrough();
  auto* show = app.add_subcommand("show", "Show catalog, nodes (emulated ones labelled), free cards, policy");
  auto* reg = app.add_subcommand("register", "Register (replace) the fleet; optionally the catalog and policy too");
  std::string fleet, catalog, policy, policy_only;
  reg->add_option("fleet", fleet, "Fleet YAML (nodes; 'emulated: true' for host-emulated cards)")->required();
  reg->add_option("--catalog", catalog, "Catalog YAML (accelerator types and prices)");
  reg->add_option("--policy", policy, "Policy YAML (domestic-share floor calendar)");
  auto* pol = app.add_subcommand("policy", "Replace the policy; running jobs that break it are preempted");
  pol->add_option("policy", policy_only, "Policy YAML")->required();
  (void)show;
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return tessera::cli::ParseExit(app, e);
  }
  auto client = Client::Connect(co);
  if (!client.ok()) return tessera::cli::Fail("fleet", client.status());
  if (reg->parsed()) {
    nlohmann::json body;
    auto f = ReadDocument(fleet);
    if (!f.ok()) return tessera::cli::Fail("fleet", f.status());
    body["fleet"] = *f;
    if (!catalog.empty()) {
      auto c = ReadDocument(catalog);
      if (!c.ok()) return tessera::cli::Fail("fleet", c.status());
      body["catalog"] = *c;
    }
    if (!policy.empty()) {
      auto p = ReadDocument(policy);
      if (!p.ok()) return tessera::cli::Fail("fleet", p.status());
      body["policy"] = *p;
    }
    auto r = (*client)->Put("/v1/fleet", body);
    if (!r.ok()) return tessera::cli::Fail("fleet", r.status());
    std::printf("registered %lld nodes, %lld cards (%lld emulated on this host)\n",
                static_cast<long long>((*r)["nodes"].get<int64_t>()), static_cast<long long>((*r)["cards"].get<int64_t>()),
                static_cast<long long>((*r)["emulated_cards"].get<int64_t>()));
  } else if (pol->parsed()) {
    auto p = ReadDocument(policy_only);
    if (!p.ok()) return tessera::cli::Fail("fleet", p.status());
    auto r = (*client)->Put("/v1/policy", *p);
    if (!r.ok()) return tessera::cli::Fail("fleet", r.status());
    std::printf("policy %s in force; floor today %s\n", (*r)["policy"].get<std::string>().c_str(),
                (*r)["floor_today"].get<std::string>().c_str());
    return 0;
  }
  return Show(**client);
#endif
}

}  // namespace

TESSERA_COMMAND(fleet, "Show or register the daemon's fleet (emulated cards labelled), catalog and policy", RunFleet);
