// cli/bill: `tessera bill` — per-second billing reports from the usage ledger (SQLite), `tessera bill
// compliance --day D` — the day's domestic share of card-hours against the floor in force, and `tessera bill
// record` — append one usage interval by hand (the daemon records through the C++ API).
// Exit status: 0 ok (compliance: compliant), 1 compliance: not compliant, 2 bad input or a build without SQLite.
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <cstdio>

#include "cli/command.hpp"
#include "cli/exit_code.hpp"
#include "common/env.hpp"
#include "sched/sched.hpp"

namespace {

using namespace tessera::sched;

int Fail(const tessera::Status& s) {
  std::fprintf(stderr, "tessera bill: %s\n", s.ToString().c_str());
  return tessera::cli::ExitCodeOf(s);
}

// Card-seconds as card-hours with two decimals, exactly (no floating point).
std::string CardHours(int64_t card_seconds) {
  __int128 h100 = (static_cast<__int128>(card_seconds) * 100 + 1800) / 3600;
  return fmt::format("{}.{:02d}", static_cast<int64_t>(h100 / 100), static_cast<int>(h100 % 100));
}

std::string CsvField(const std::string& s) {
  if (s.find_first_of(",\"\n") == std::string::npos) return s;
  std::string o = "\"";
  for (char c : s) o += c == '"' ? std::string("\"\"") : std::string(1, c);
  return o + "\"";
}

int RunBill(int argc, char** argv) {
  CLI::App app{"Billing reports from the per-second usage ledger", "tessera bill"};
  app.fallthrough();  // --db before or after the subcommand
  std::string db, job, tenant, by = "type", from, to;
  bool csv = false;
  app.add_option("--db", db, "ledger database (default: $TESSERA_LEDGER)");
  auto* job_opt = app.add_option("--job", job, "only this job");
  auto* tenant_opt = app.add_option("--tenant", tenant, "only this tenant");
  job_opt->excludes(tenant_opt);
  app.add_option("--by", by, "group by: type, day, job or tenant")->capture_default_str();
  app.add_option("--from", from, "from this time (YYYY-MM-DD[THH:MM:SSZ] or Unix seconds, UTC), inclusive");
  app.add_option("--to", to, "until this time, exclusive");
  app.add_flag("--csv", csv, "print CSV");

  auto* comp = app.add_subcommand("compliance", "Domestic share of one day's card-hours against the floor in force");
  std::string day, policy_path, catalog_path;
  comp->add_option("--day", day, "the day, YYYY-MM-DD (UTC)")->required();
  comp->add_option("--policy", policy_path, "the policy (YAML) whose floor applies")->required();
  comp->add_option("--catalog", catalog_path, "the catalog (needed for a throughput unit)");

  auto* rec = app.add_subcommand("record", "Append one usage interval (rated with the catalog's price)");
  std::string r_catalog, r_job, r_tenant, r_type, r_start, r_end;
  int64_t r_cards = 0;
  rec->add_option("--catalog", r_catalog, "catalog (YAML) giving the price and its version")->required();
  rec->add_option("--job", r_job, "job name")->required();
  rec->add_option("--tenant", r_tenant, "tenant")->required();
  rec->add_option("--type", r_type, "accelerator type")->required();
  rec->add_option("--cards", r_cards, "card count")->required();
  rec->add_option("--start", r_start, "start time (UTC), inclusive")->required();
  rec->add_option("--end", r_end, "end time (UTC), exclusive")->required();
  app.require_subcommand(0, 1);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return tessera::cli::ParseExit(app, e);
  }
  if (db.empty()) {
    auto env = tessera::env::Get("TESSERA_LEDGER");
    if (!env) return Fail(tessera::InvalidArgument("no ledger: give --db FILE or set TESSERA_LEDGER"));
    db = *env;
  }
  auto ledger = Ledger::Open(db);
  if (!ledger.ok()) return Fail(ledger.status());

  if (*rec) {
    auto catalog = LoadCatalog(r_catalog);
    if (!catalog.ok()) return Fail(catalog.status());
    auto s = ParseTime("--start", r_start);
    if (!s.ok()) return Fail(s.status());
    auto e = ParseTime("--end", r_end);
    if (!e.ok()) return Fail(e.status());
    auto row = (*ledger)->Record(*catalog, r_job, r_tenant, r_type, r_cards, *s, *e);
    if (!row.ok()) return Fail(row.status());
    std::printf("recorded #%lld: job %s, %lld x %s, %s .. %s, %s %s (price %s/card-hour, version %s)\n",
                static_cast<long long>(row->id), row->job.c_str(), static_cast<long long>(row->cards),
                row->type.c_str(), FormatTime(row->start).c_str(), FormatTime(row->end).c_str(),
                FormatMoney(row->amount).c_str(), catalog->currency.c_str(),
                FormatMoney(row->price_per_card_hour).c_str(), row->price_version.c_str());
    return 0;
  }

  if (*comp) {
    auto d = ParseDate("--day", day);
    if (!d.ok()) return Fail(d.status());
    auto policy = LoadPolicy(policy_path);
    if (!policy.ok()) return Fail(policy.status());
    std::optional<Catalog> catalog;
    if (!catalog_path.empty()) {
      auto c = LoadCatalog(catalog_path);
      if (!c.ok()) return Fail(c.status());
      catalog = std::move(*c);
    }
    auto c = (*ledger)->ComplianceReport(*d, *policy, catalog ? &*catalog : nullptr);
    if (!c.ok()) return Fail(c.status());
    std::printf("compliance on %s (UTC), unit %s\n", FormatDate(c->day).c_str(), ShareUnitName(c->unit));
    for (const auto& [type, cs] : c->card_seconds_by_type)
      std::printf("  %-16s %14s card-hours\n", type.c_str(), CardHours(cs).c_str());
    std::printf("  %-16s %14s card-hours, %s domestic\n", "total", CardHours(c->total_card_seconds).c_str(),
                CardHours(c->domestic_card_seconds).c_str());
    std::printf("  domestic share %s against a floor of %s in force that day: %s\n",
                c->total_card_seconds ? FormatShare(c->share).c_str() : "n/a (no usage)", FormatShare(c->floor).c_str(),
                c->compliant ? "COMPLIANT" : "NOT COMPLIANT");
    return c->compliant ? 0 : 1;
  }

  auto group = ParseGroupBy(by);
  if (!group.ok()) return Fail(group.status());
  BillFilter f;
  if (!job.empty()) f.job = job;
  if (!tenant.empty()) f.tenant = tenant;
  if (!from.empty()) {
    auto t = ParseTime("--from", from);
    if (!t.ok()) return Fail(t.status());
    f.from = *t;
  }
  if (!to.empty()) {
    auto t = ParseTime("--to", to);
    if (!t.ok()) return Fail(t.status());
    f.to = *t;
  }
  if (f.from && f.to && *f.to <= *f.from) return Fail(tessera::InvalidArgument("--to must be after --from"));
  auto bill = (*ledger)->Report(f, *group);
  if (!bill.ok()) return Fail(bill.status());
  if (csv) {
    std::printf("%s,card_seconds,card_hours,amount,amount_micro\n", by.c_str());
    for (const auto& l : bill->lines)
      std::printf("%s,%lld,%s,%s,%lld\n", CsvField(l.key).c_str(), static_cast<long long>(l.card_seconds),
                  CardHours(l.card_seconds).c_str(), FormatMoney(l.amount).c_str(), static_cast<long long>(l.amount));
    return 0;
  }
  std::string scope = job.empty() ? (tenant.empty() ? "all usage" : "tenant " + tenant) : "job " + job;
  std::printf("%s by %s%s%s (per-second rating; amounts in CNY)\n", scope.c_str(), by.c_str(),
              f.from ? (", from " + FormatTime(*f.from)).c_str() : "",
              f.to ? (" to " + FormatTime(*f.to)).c_str() : "");
  std::printf("  %-24s %14s %16s\n", by.c_str(), "card-hours", "amount");
  for (const auto& l : bill->lines)
    std::printf("  %-24s %14s %16s\n", l.key.c_str(), CardHours(l.card_seconds).c_str(), FormatMoney(l.amount).c_str());
  std::printf("  %-24s %14s %16s\n", "total", CardHours(bill->card_seconds).c_str(), FormatMoney(bill->amount).c_str());
  return 0;
}

}  // namespace

TESSERA_COMMAND(bill, "Per-second billing reports and the daily domestic-share audit", RunBill);
