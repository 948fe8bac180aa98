// cli/plan: `tessera plan` — places one job on the fleet at the lowest cost per unit of work while keeping the
// domestic-share floor in force on --at, and prints the allocation (or why the job cannot be placed); for a job
// that names its model (docs/sched.md), the performance model's predicted step and its binding term too.
// Exit status: 0 placed, 1 cannot be placed, 2 bad input or a build without GLPK.
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "cli/command.hpp"
#include "cli/exit_code.hpp"
#include "sched/sched.hpp"

namespace {

using namespace tessera::sched;

int Fail(const tessera::Status& s) {
  std::fprintf(stderr, "tessera plan: %s\n", s.message().c_str());
  return tessera::cli::ExitCodeOf(s);
}

std::string Unit(const Catalog& c) { return c.currency; }

nlohmann::json PlacementJson(const Catalog& catalog, const Job& job, const Placement& p, int64_t day) {
  nlohmann::json j;
  j["job"] = job.name;
  j["tenant"] = job.tenant;
  j["placed"] = true;
  j["date"] = FormatDate(day);
  j["zone"] = p.zone;
  j["currency"] = catalog.currency;
  j["total_cards"] = p.total_cards;
  j["total_throughput"] = FormatThroughput(p.total_throughput);
  j["cost_per_hour"] = FormatMoney(p.cost_per_hour, 2);
  j["cost_per_hour_micro"] = p.cost_per_hour;
  j["cost_per_work_hour"] = FormatMoney(p.cost_per_work_hour, 6);
  j["cost_per_work_hour_micro"] = p.cost_per_work_hour;
  j["share_unit"] = ShareUnitName(p.unit);
  j["floor"] = FormatShare(p.floor);
  j["floor_ppm"] = p.floor;
  j["share_before_ppm"] = p.share_before;
  j["share_after"] = FormatShare(p.share_after);
  j["share_after_ppm"] = p.share_after;
  j["solver_rounds"] = p.solver_rounds;
  auto& types = j["by_type"] = nlohmann::json::array();
  for (const auto& t : p.by_type)
    types.push_back({{"type", t.type},
                     {"domestic", t.domestic},
                     {"cards", t.cards},
                     {"cost_per_hour", FormatMoney(t.cost_per_hour, 2)},
                     {"cost_per_hour_micro", t.cost_per_hour},
                     {"throughput", FormatThroughput(t.throughput)}});
  auto& nodes = j["by_node"] = nlohmann::json::array();
  for (const auto& n : p.by_node) nodes.push_back({{"node", n.node}, {"cards", n.cards}});
  if (const auto& s = p.predicted) {
    j["predicted"] = {{"model_params", job.model->params},
                      {"model_class", job.model->model_class},
                      {"step_s", s->step_s},
                      {"compute_s", s->compute_s},
                      {"exposed_comm_s", s->exposed_comm_s},
                      {"optimizer_s", s->optimizer_s},
                      {"tokens_per_s", s->tokens_per_s},
                      {"sum_of_parts_tokens_per_s", s->sum_of_parts_tokens_per_s},
                      {"hybrid_over_parts", s->hybrid_over_parts},
                      {"cost_per_million_tokens", s->cost_per_million_tokens},
                      {"binding", s->binding},
                      {"binding_detail", s->binding_detail},
                      {"mixes_evaluated", s->mixes_evaluated},
                      {"lattice_step", s->lattice_step}};
  }
  return j;
}

void PrintPlacement(const Catalog& catalog, const Job& job, const Placement& p, int64_t day, bool had_running) {
  const std::string cur = Unit(catalog);
  std::printf("job %s (tenant %s): placed in zone %s, %lld cards, on %s\n\n", job.name.c_str(), job.tenant.c_str(),
              p.zone.c_str(), static_cast<long long>(p.total_cards), FormatDate(day).c_str());
  std::printf("  %-16s %-9s %8s %14s %12s\n", "type", "domestic", "cards", (cur + "/h").c_str(), "throughput");
  for (const auto& t : p.by_type)
    std::printf("  %-16s %-9s %8lld %14s %12s\n", t.type.c_str(), t.domestic ? "yes" : "no",
                static_cast<long long>(t.cards), FormatMoney(t.cost_per_hour).c_str(),
                FormatThroughput(t.throughput).c_str());
  std::printf("  %-16s %-9s %8lld %14s %12s\n\n", "total", "", static_cast<long long>(p.total_cards),
              FormatMoney(p.cost_per_hour).c_str(), FormatThroughput(p.total_throughput).c_str());
  std::printf("  cost per hour:         %s %s\n", FormatMoney(p.cost_per_hour).c_str(), cur.c_str());
  std::printf("  cost per unit of work: %s %s per throughput-hour (class %s)\n",
              FormatMoney(p.cost_per_work_hour, 4).c_str(), cur.c_str(), job.workload_class.c_str());
  std::printf(
      "  domestic share:        %s of the fleet's allocated %s after placement (before: %s; floor in "
      "force: %s)\n",
      FormatShare(p.share_after).c_str(), p.unit == ShareUnit::kCards ? "cards" : "throughput",
      had_running ? FormatShare(p.share_before).c_str() : "nothing running", FormatShare(p.floor).c_str());
  if (const auto& s = p.predicted) {
    std::printf(
        "  predicted step:        %.3f s (model %.4g parameters, class %s): compute %.3f s, exposed "
        "communication %.3f s, optimizer %.3f s\n",
        s->step_s, job.model->params, job.model->model_class.c_str(), s->compute_s, s->exposed_comm_s, s->optimizer_s);
    std::printf("  predicted throughput:  %.0f tokens/s (hybrid / sum of parts %.1f%%), %.4f %s per million tokens\n",
                s->tokens_per_s, 100 * s->hybrid_over_parts, s->cost_per_million_tokens, cur.c_str());
    std::printf("  binding term:          %s: %s\n", s->binding.c_str(), s->binding_detail.c_str());
    std::printf("  placed by:             predicted tokens/s per %s (%lld mix%s predicted%s)\n", cur.c_str(),
                static_cast<long long>(s->mixes_evaluated), s->mixes_evaluated == 1 ? "" : "es",
                s->lattice_step > 1
                    ? fmt::format(", on a lattice of step {} then moves between types", s->lattice_step).c_str()
                    : ": every mix");
  }
  std::printf("\n  nodes (%zu, cards per node):\n", p.by_node.size());
  for (size_t i = 0; i < p.by_node.size(); ++i) {
    std::string cell = fmt::format("{} {}", p.by_node[i].node, p.by_node[i].cards);
    std::printf("%s%-26s", i % 4 == 0 ? "    " : "  ", cell.c_str());
    if (i % 4 == 3 || i + 1 == p.by_node.size()) std::printf("\n");
  }
}

int RunPlan(int argc, char** argv) {
  CLI::App app{"Place a job at the lowest cost per unit of work within the domestic-share policy", "tessera plan"};
  std::string catalog_path, fleet_path, policy_path, job_path, running_path, at;
  bool json = false;
  app.add_option("--catalog", catalog_path, "accelerator catalog (YAML)")->required();
  app.add_option("--fleet", fleet_path, "fleet: nodes, zones, cards (YAML)")->required();
  app.add_option("--policy", policy_path, "domestic-share policy with its date calendar (YAML)")->required();
  app.add_option("--job", job_path, "the job to place (YAML)")->required();
  app.add_option("--running", running_path, "jobs already running (YAML)");
  app.add_option("--at", at, "date whose floor applies, YYYY-MM-DD (default: today, UTC)");
  app.add_flag("--json", json, "print JSON");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return tessera::cli::ParseExit(app, e);
  }
  auto catalog = LoadCatalog(catalog_path);
  if (!catalog.ok()) return Fail(catalog.status());
  auto fleet = LoadFleet(fleet_path);
  if (!fleet.ok()) return Fail(fleet.status());
  auto policy = LoadPolicy(policy_path);
  if (!policy.ok()) return Fail(policy.status());
  auto job = LoadJob(job_path);
  if (!job.ok()) return Fail(job.status());
  std::vector<RunningJob> running;
  if (!running_path.empty()) {
    auto r = LoadRunning(running_path);
    if (!r.ok()) return Fail(r.status());
    running = std::move(*r);
  }
  int64_t day = Today();
  if (!at.empty()) {
    auto d = ParseDate("--at", at);
    if (!d.ok()) return Fail(d.status());
    day = *d;
  }
  if (auto st = CheckInputs(*catalog, *fleet, *policy, running); !st.ok()) return Fail(st);
  PlanRequest req;
  req.catalog = &*catalog;
  req.fleet = &*fleet;
  req.policy = &*policy;
  req.job = &*job;
  req.running = &running;
  req.day = day;
  auto result = Plan(req);
  if (!result.ok()) return Fail(result.status());
  if (result->placed()) {
    if (json) {
      std::printf("%s\n", PlacementJson(*catalog, *job, *result->placement, day).dump(2).c_str());
    } else {
      PrintPlacement(*catalog, *job, *result->placement, day, !running.empty());
    }
    return 0;
  }
  const Infeasible& inf = *result->infeasible;
  if (json) {
    nlohmann::json j{{"job", job->name},
                     {"tenant", job->tenant},
                     {"placed", false},
                     {"date", FormatDate(day)},
                     {"binding", BindingName(inf.binding)},
                     {"reason", inf.reason},
                     {"fix", inf.fix}};
    std::printf("%s\n", j.dump(2).c_str());
  } else {
    std::printf("job %s (tenant %s) cannot be placed on %s\n  binding constraint: %s\n  why:    %s\n  to fit: %s\n",
                job->name.c_str(), job->tenant.c_str(), FormatDate(day).c_str(), BindingName(inf.binding),
                inf.reason.c_str(), inf.fix.c_str());
  }
  return 1;
}

}  // namespace

TESSERA_COMMAND(plan, "Place a job: cheapest cards per unit of work within the domestic-share policy", RunPlan);
