// cli/bill: `tessera bill` — per-second billing reports from the usage ledger (SQLite), `tessera bill
// compliance [--day D]` — the day's domestic share of card-hours against the floor in force, and `tessera bill
// record` — append one usage interval by hand (the daemon records through the C++ API).
// The ledger: --db, else $TESSERA_LEDGER, else the daemon's STATE/ledger.db (--state-dir, $TESSERA_HOME or
// ~/.tessera); reports open an existing one read-only. Exit status: 0 ok (compliance: compliant), 1 compliance:
// not compliant, 2 bad input, 3 no ledger at that path, 4 a build without SQLite.
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "cli/command.hpp"
#include "cli/exit_code.hpp"
#include "common/env.hpp"
#include "sched/sched.hpp"
#ifdef TESSERA_HAVE_DAEMON
#include "daemon/client.hpp"
#include "daemon/daemon.hpp"
#endif

namespace {

using namespace tessera::sched;

int Fail(const tessera::Status& s) { return tessera::cli::Fail("bill", s); }

// Hundredths as "12.34".
std::string Hundredths(int64_t h100) {
  return fmt::format("{}{}.{:02d}", h100 < 0 ? "-" : "", std::abs(h100 / 100), static_cast<int>(std::abs(h100 % 100)));
}

// Card-seconds as card-hours with two decimals, exactly (no floating point).
std::string CardHours(int64_t card_seconds) {
  return Hundredths(static_cast<int64_t>((static_cast<__int128>(card_seconds) * 100 + 1800) / 3600));
}

// Rounds each of `values` (in units of 1/`per_hundredth` of a hundredth: 36 card-seconds, 10,000 micro) to
// hundredths so that the rounded rows add up to the rounded total: every row is rounded down, then the
// hundredths still missing go to the rows with the largest remainders (ties: the earlier row). Non-negative.
std::vector<int64_t> RoundCarried(const std::vector<int64_t>& values, int64_t per_hundredth) {
  std::vector<int64_t> out(values.size());
  std::vector<size_t> order(values.size());
  __int128 sum = 0, floors = 0;
  for (size_t i = 0; i < values.size(); ++i) {
    out[i] = values[i] / per_hundredth;
    floors += out[i];
    sum += values[i];
    order[i] = i;
  }
  int64_t total = static_cast<int64_t>((sum + per_hundredth / 2) / per_hundredth);
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return values[a] % per_hundredth > values[b] % per_hundredth; });
  for (size_t k = 0; k < order.size() && floors < total; ++k, ++floors) ++out[order[k]];
  return out;
}

std::string CsvField(const std::string& s) {
  if (s.find_first_of(",\"\n") == std::string::npos) return s;
  std::string o = "\"";
  for (char c : s) o += c == '"' ? std::string("\"\"") : std::string(1, c);
  return o + "\"";
}

void PrintCompliance(const Compliance& c, const std::string& policy) {
  std::printf("compliance on %s (UTC), unit %s, policy %s\n", FormatDate(c.day).c_str(), ShareUnitName(c.unit),
              policy.c_str());
  for (const auto& [type, cs] : c.card_seconds_by_type)
    std::printf("  %-16s %14s card-hours\n", type.c_str(), CardHours(cs).c_str());
  std::printf("  %-16s %14s card-hours, %s domestic\n", "total", CardHours(c.total_card_seconds).c_str(),
              CardHours(c.domestic_card_seconds).c_str());
  std::printf("  domestic share %s against a floor of %s in force that day: %s\n",
              c.total_card_seconds ? FormatShare(c.share).c_str() : "n/a (no usage)", FormatShare(c.floor).c_str(),
              c.compliant ? "COMPLIANT" : "NOT COMPLIANT");
}

// `bill compliance` without --policy: the running daemon's policy and ledger, through GET /v1/compliance.
int DaemonCompliance(const std::string& state_dir, int64_t day) {
#ifndef TESSERA_HAVE_DAEMON
  (void)state_dir;
  (void)day;
  return Fail(tessera::InvalidArgument("--policy FILE is needed: this build has no job daemon to ask for its policy"));
#else
  int64_t days = Today() - day + 1;
  if (days < 1 || days > 366)
    return Fail(tessera::InvalidArgument(
        fmt::format("--day {}: the daemon reports the last 366 days up to today; for another day pass --policy FILE",
                    FormatDate(day))));
  tessera::daemon::ClientOptions o;
  o.state_dir = state_dir;
  auto client = tessera::daemon::Client::Connect(o);
  if (!client.ok())
    return Fail(tessera::Status(client.status().code(),
                                client.status().message() + "; or pass --policy FILE to use a policy file"));
  auto r = (*client)->Get(fmt::format("/v1/compliance?days={}", days));
  if (!r.ok()) return Fail(tessera::Status(r.status().code(), r.status().message() + "; or pass --policy FILE"));
  for (const auto& e : (*r)["days"]) {
    if (e.value("day", "") != FormatDate(day)) continue;
    Compliance c;
    c.day = day;
    c.unit = (*r).value("unit", "cards") == "throughput" ? ShareUnit::kThroughput : ShareUnit::kCards;
    c.floor = e.value("floor_ppm", Ppm{0});
    c.share = e.value("share_ppm", Ppm{0});
    c.compliant = e.value("compliant", true);
    c.total_card_seconds = e.value("total_card_seconds", int64_t{0});
    c.domestic_card_seconds = e.value("domestic_card_seconds", int64_t{0});
    for (const auto& [t, cs] : e["card_seconds_by_type"].items()) c.card_seconds_by_type[t] = cs.get<int64_t>();
    PrintCompliance(c, (*r).value("policy_source", "?") + " (the daemon's)");
    return c.compliant ? 0 : 1;
  }
  return Fail(tessera::InternalError(fmt::format("the daemon's report has no entry for {}", FormatDate(day))));
#endif
}

// "2xascend-910b + 2xnvidia-h800"
std::string Mix(const BillLine& l) {
  std::string mix;
  for (const auto& [type, cards] : l.cards_by_type)
    mix += fmt::format("{}{}x{}", mix.empty() ? "" : " + ", cards, type);
  return mix;
}

std::string Window(const BillFilter& f) {
  return std::string(f.from ? ", from " + FormatTime(*f.from) : "") + (f.to ? " to " + FormatTime(*f.to) : "");
}

// --by attempt: each attempt of each job (the daemon's attempt number; rows without one, from ledgers older than
// the attempt column, are numbered per job in the order they started) with its mix, seconds and amount; the
// amounts, rounded to hundredths, add up to the total as printed (RoundCarried).
int PrintAttempts(const Bill& bill, const std::string& scope, const BillFilter& f, bool csv) {
  std::vector<int64_t> secs, micros;
  for (const auto& l : bill.lines) secs.push_back(l.card_seconds), micros.push_back(l.amount);
  auto hours = RoundCarried(secs, 36);
  auto money = RoundCarried(micros, tessera::sched::kMoneyScale / 100);
  if (csv)
    std::printf("job,attempt,start,mix,seconds,card_seconds,card_hours,amount,amount_micro\n");
  else
    std::printf("%s by attempt%s (per-second rating; amounts in CNY)\n  %-20s %3s  %-20s %-32s %8s %12s %10s %12s\n",
                scope.c_str(), Window(f).c_str(), "job", "#", "started", "mix", "seconds", "card-seconds", "card-hours",
                "amount");
  std::string job;
  int n = 0;
  int64_t seconds = 0;
  bool carried = false;
  for (size_t i = 0; i < bill.lines.size(); ++i) {
    const auto& l = bill.lines[i];
    n = l.job == job ? n + 1 : 1;
    job = l.job;
    const long long number = l.attempt > 0 ? l.attempt : n;
    seconds += l.seconds;
    if (csv) {
      std::printf("%s,%lld,%s,%s,%lld,%lld,%s,%s,%lld\n", CsvField(l.job).c_str(), number, FormatTime(l.start).c_str(),
                  CsvField(Mix(l)).c_str(), static_cast<long long>(l.seconds), static_cast<long long>(l.card_seconds),
                  CardHours(l.card_seconds).c_str(), FormatMoney(l.amount).c_str(), static_cast<long long>(l.amount));
      continue;
    }
    carried |= Hundredths(hours[i]) != CardHours(l.card_seconds) || Hundredths(money[i]) != FormatMoney(l.amount);
    std::printf("  %-20s %3lld  %-20s %-32s %8lld %12lld %10s %12s\n", l.job.c_str(), number,
                FormatTime(l.start).c_str(), Mix(l).c_str(), static_cast<long long>(l.seconds),
                static_cast<long long>(l.card_seconds), Hundredths(hours[i]).c_str(), Hundredths(money[i]).c_str());
  }
  if (csv) return 0;
  std::printf("  %-20s %3s  %-20s %-32s %8lld %12lld %10s %12s\n", "total", "", "", "", static_cast<long long>(seconds),
              static_cast<long long>(bill.card_seconds), CardHours(bill.card_seconds).c_str(),
              FormatMoney(bill.amount).c_str());
  if (carried)
    std::printf("  (rows rounded to 0.01 so that they add up to the total; --csv gives the exact amounts)\n");
  return 0;
}

int RunBill(int argc, char** argv) {
  CLI::App app{"Billing reports from the per-second usage ledger", "tessera bill"};
  app.fallthrough();  // --db before or after the subcommand
  std::string db, job, tenant, by = "type", from, to;
  bool csv = false;
  std::string state_dir;
  app.add_option("--db", db, "ledger database (default: $TESSERA_LEDGER, else the daemon's STATE/ledger.db)");
  app.add_option("--state-dir", state_dir, "the daemon's state directory (default $TESSERA_HOME or ~/.tessera)");
  auto* job_opt = app.add_option("--job", job, "only this job");
  auto* tenant_opt = app.add_option("--tenant", tenant, "only this tenant");
  job_opt->excludes(tenant_opt);
  auto* by_opt =
      app.add_option("--by", by, "group by: type, day, job, tenant or attempt (default: type; with --job: attempt)")
          ->capture_default_str();
  app.add_option("--from", from, "from this time (YYYY-MM-DD[THH:MM:SSZ] or Unix seconds, UTC), inclusive");
  app.add_option("--to", to, "until this time, exclusive");
  app.add_flag("--csv", csv, "print CSV");

  auto* comp = app.add_subcommand("compliance", "Domestic share of one day's card-hours against the floor in force");
  std::string day, policy_path, catalog_path;
  day = "today";
  comp->add_option("--day", day, "the day: YYYY-MM-DD (UTC), today or yesterday")->capture_default_str();
  comp->add_option("--policy", policy_path,
                   "the policy (YAML) whose floor applies (default: the running daemon's, over its API)");
  comp->add_option("--catalog", catalog_path, "the catalog (needed for a throughput unit)");

  auto* rec = app.add_subcommand("record", "Append one usage interval (rated with the catalog's price)");
  std::string r_catalog, r_job, r_tenant, r_type, r_start, r_end;
  int64_t r_cards = 0, r_attempt = 0;
  rec->add_option("--catalog", r_catalog, "catalog (YAML) giving the price and its version")->required();
  rec->add_option("--job", r_job, "job name")->required();
  rec->add_option("--tenant", r_tenant, "tenant")->required();
  rec->add_option("--type", r_type, "accelerator type")->required();
  rec->add_option("--cards", r_cards, "card count")->required();
  rec->add_option("--start", r_start, "start time (UTC), inclusive")->required();
  rec->add_option("--end", r_end, "end time (UTC), exclusive")->required();
  rec->add_option("--attempt", r_attempt, "the job's attempt number (1, 2, ...; default: none)")
      ->check(CLI::PositiveNumber);
  app.require_subcommand(0, 1);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return tessera::cli::ParseExit(app, e);
  }
  std::string from_where = "--db";
  if (db.empty() && state_dir.empty()) {
    auto env = tessera::env::Get("TESSERA_LEDGER");
    if (env) db = *env, from_where = "TESSERA_LEDGER";
  }
  if (db.empty()) {
#ifdef TESSERA_HAVE_DAEMON
    std::string state = tessera::daemon::DefaultStateDir(state_dir);
    db = state + "/ledger.db";
    from_where = "the daemon's ledger in " + state;
#else
    return Fail(tessera::InvalidArgument("no ledger: give --db FILE or set TESSERA_LEDGER"));
#endif
  }
  // Reports read an existing ledger and never create one; `record` appends, creating it if needed.
  auto ledger = *rec ? Ledger::Open(db) : Ledger::OpenReadOnly(db);
  if (!ledger.ok()) {
    if (ledger.status().code() != tessera::Code::kNotFound) return Fail(ledger.status());
    return Fail(tessera::NotFound(
        fmt::format("{} ({}); start `tessera daemon` (its ledger is STATE/ledger.db), or pass --db FILE or "
                    "--state-dir DIR",
                    ledger.status().message(), from_where)));
  }

  if (*rec) {
    auto catalog = LoadCatalog(r_catalog);
    if (!catalog.ok()) return Fail(catalog.status());
    auto s = ParseTime("--start", r_start);
    if (!s.ok()) return Fail(s.status());
    auto e = ParseTime("--end", r_end);
    if (!e.ok()) return Fail(e.status());
    auto row = (*ledger)->Record(*catalog, r_job, r_tenant, r_type, r_cards, *s, *e, r_attempt);
    if (!row.ok()) return Fail(row.status());
    std::printf("recorded #%lld: job %s, %lld x %s, %s .. %s, %s %s (price %s/card-hour, version %s)\n",
                static_cast<long long>(row->id), row->job.c_str(), static_cast<long long>(row->cards),
                row->type.c_str(), FormatTime(row->start).c_str(), FormatTime(row->end).c_str(),
                FormatMoney(row->amount).c_str(), catalog->currency.c_str(),
                FormatMoney(row->price_per_card_hour).c_str(), row->price_version.c_str());
    return 0;
  }

  if (*comp) {
    auto d = day == "today"       ? tessera::Result<int64_t>(Today())
             : day == "yesterday" ? tessera::Result<int64_t>(Today() - 1)
                                  : ParseDate("--day", day);
    if (!d.ok()) return Fail(tessera::InvalidArgument(d.status().message() + " (or today, yesterday)"));
    if (policy_path.empty()) return DaemonCompliance(state_dir, *d);
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
    PrintCompliance(*c, policy->source);
    return c->compliant ? 0 : 1;
  }

  if (by_opt->count() == 0 && !job.empty()) by = "attempt";  // one job: each attempt with its mix
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
  if (*group == GroupBy::kAttempt) return PrintAttempts(*bill, job.empty() ? "all usage" : "job " + job, f, csv);
  if (csv) {
    std::printf("%s,card_seconds,card_hours,amount,amount_micro\n", by.c_str());
    for (const auto& l : bill->lines)
      std::printf("%s,%lld,%s,%s,%lld\n", CsvField(l.key).c_str(), static_cast<long long>(l.card_seconds),
                  CardHours(l.card_seconds).c_str(), FormatMoney(l.amount).c_str(), static_cast<long long>(l.amount));
    return 0;
  }
  std::string scope = job.empty() ? (tenant.empty() ? "all usage" : "tenant " + tenant) : "job " + job;
  std::printf("%s by %s%s (per-second rating; amounts in CNY)\n", scope.c_str(), by.c_str(), Window(f).c_str());
  std::printf("  %-24s %14s %14s %16s\n", by.c_str(), "card-seconds", "card-hours", "amount");
  // Two decimals per row that add up to the total as printed: the rounding is carried (RoundCarried).
  std::vector<int64_t> secs, micros;
  for (const auto& l : bill->lines) secs.push_back(l.card_seconds), micros.push_back(l.amount);
  auto hours = RoundCarried(secs, 36);
  auto money = RoundCarried(micros, tessera::sched::kMoneyScale / 100);
  bool carried = false;
  for (size_t i = 0; i < bill->lines.size(); ++i) {
    const auto& l = bill->lines[i];
    carried |= Hundredths(hours[i]) != CardHours(l.card_seconds) || Hundredths(money[i]) != FormatMoney(l.amount);
    std::printf("  %-24s %14lld %14s %16s\n", l.key.c_str(), static_cast<long long>(l.card_seconds),
                Hundredths(hours[i]).c_str(), Hundredths(money[i]).c_str());
  }
  std::printf("  %-24s %14lld %14s %16s\n", "total", static_cast<long long>(bill->card_seconds),
              CardHours(bill->card_seconds).c_str(), FormatMoney(bill->amount).c_str());
  if (carried)
    std::printf("  (rows rounded to 0.01 so that they add up to the total; --csv gives the exact amounts)\n");
  return 0;
}

}  // namespace

TESSERA_COMMAND(bill, "Per-second billing reports and the daily domestic-share audit", RunBill);
