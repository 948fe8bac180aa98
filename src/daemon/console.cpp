// daemon/console: GET /metrics, the embedded web console, and the read-only JSON endpoints the console
// needs beyond the job API (daily bill, compliance history, checkpoints with tiers). See console.hpp.
#include "daemon/console.hpp"

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <regex>
#include <set>
#include <tuple>

#include "common/log.hpp"
#include "daemon/job_store.hpp"
#include "daemon/metrics.hpp"
#include "daemon/tenant_reads.hpp"
#include "daemon/util.hpp"
#include "daemon/web_assets.hpp"
#include "tessera/ckpt.hpp"

namespace tessera::daemon::console {
namespace {

using json = nlohmann::json;
using metrics::Exposition;
using metrics::Labels;

constexpr int64_t kDay = 86400;

void Reply(httplib::Response& res, int status, const json& body) {
  res.status = status;
  res.set_content(body.dump(), "application/json");
}
void Error(httplib::Response& res, int status, const std::string& msg) { Reply(res, status, {{"error", msg}}); }

// Whether `c` may see data of `tenant`.
bool Sees(const Caller& c, const std::string& tenant) { return c.admin || (!c.anonymous && c.tenant == tenant); }

// The job id of a `/v1/jobs/(\d+)/...` route; an id that does not fit is a job not found (the reply is written).
std::optional<int64_t> RouteJobId(const httplib::Request& req, httplib::Response& res) {
  try {
    return std::stoll(req.matches[1]);
  } catch (const std::exception&) {
    Error(res, 404, "job " + std::string(req.matches[1]) + " not found");
    return std::nullopt;
  }
}

// The job's row if the caller may see it; otherwise the reply is written: another tenant's job is absent, as in
// GET /v1/jobs/ID.
std::optional<JobRow> VisibleJob(const Caller& c, const View& v, int64_t id, httplib::Response& res) {
  auto row = v.store->Job(id);
  if (!row.ok() && row.status().code() != Code::kNotFound) {
    Error(res, 500, row.status().message());
    return std::nullopt;
  }
  if (!row.ok() || !Sees(c, row->tenant)) {
    Error(res, 404, fmt::format("job {} not found", id));
    return std::nullopt;
  }
  return *std::move(row);
}

double Units(sched::Money m) { return static_cast<double>(m) / static_cast<double>(sched::kMoneyScale); }
double Ratio(sched::Ppm p) { return static_cast<double>(p) / static_cast<double>(sched::kPpmScale); }

// The tiers of a job's checkpoints: its hot directory, and the warm and cold tiers its job file's env names.
ckpt::TierConfig TiersOf(const JobRow& job) {
  ckpt::TierConfig t;
  t.hot = job.ckpt_dir;
  try {
    YAML::Node y = YAML::Load(job.yaml);
    if (y["env"] && y["env"].IsMap()) {
      if (y["env"]["TESSERA_CKPT_WARM"]) t.warm = y["env"]["TESSERA_CKPT_WARM"].as<std::string>();
      if (y["env"]["TESSERA_CKPT_COLD"]) t.cold = y["env"]["TESSERA_CKPT_COLD"].as<std::string>();
    }
  } catch (const std::exception&) {
  }
  if (!t.cold.empty() && t.cold[0] != '/') t.cold = job.base_dir + "/" + t.cold;
  return t;
}

// Every committed step of a job in any of its tiers. A warm tier that cannot be read (no S3 endpoint or
// credentials in the daemon's environment) is left out and named in *warning; *unanswered is set when the job's
// directory did not answer within the bound (daemon/tenant_reads).
std::vector<ckpt::StepLocation> ListCheckpoints(const ckpt::TierConfig& tiers, std::string* warning,
                                                bool* unanswered = nullptr) {
  if (tiers.hot.empty()) return {};
  // Bounded (daemon/tenant_reads): a job's directory on a stalled mount gives a warning, not a hung scrape.
  auto list = [](const ckpt::TierConfig& t) {
    return BoundedRead<std::vector<ckpt::StepLocation>>(t.hot, [t] { return ckpt::ListAll(t); });
  };
  auto all = list(tiers);
  if (all.ok()) return *all;
  if (!tiers.warm.empty() && all.status().code() != Code::kTimeout) {
    if (warning) *warning = "warm tier " + tiers.warm + " not readable: " + all.status().message();
    ckpt::TierConfig local = tiers;
    local.warm.clear();
    all = list(local);
    if (all.ok()) return *all;
  }
  if (warning && warning->empty()) *warning = all.status().message();
  if (unanswered) *unanswered = all.status().code() == Code::kTimeout;
  return {};
}

// The part of the whole-second usage row `r` in [a, b): cumulative ratings, as the ledger's reports cut rows.
sched::Money PartAmount(const sched::UsageRecord& r, int64_t a, int64_t b) {
  return sched::RateSeconds(r.price_per_card_hour, r.cards, b - r.start) -
         sched::RateSeconds(r.price_per_card_hour, r.cards, a - r.start);
}

// Cards allocated now and their cost per hour, per catalog type (catalog order).
struct TypeCost {
  std::string type;
  int64_t cards = 0;
  sched::Money per_hour = 0;
};
std::vector<TypeCost> CostNow(const View& v) {
  std::map<std::string, int64_t> used;
  if (v.have_fleet)
    for (const auto& r : v.running)
      for (const auto& a : r.allocations)
        if (const auto* n = v.fleet->fleet.Find(a.node)) used[n->type] += a.cards;
  std::vector<TypeCost> out;
  for (const auto& t : v.catalog->types)
    out.push_back({t.name, used[t.name], sched::RateSeconds(t.price_per_card_hour, used[t.name], 3600)});
  return out;
}

// ---- /metrics -------------------------------------------------------------------------------------------

// Everything but the checkpoints (scanned outside the daemon's lock), for `c`.
std::string StateMetrics(const Caller& c, const View& v) {
  Exposition x;
  std::map<std::string, int64_t> used_by_node;
  for (const auto& r : v.running)
    for (const auto& a : r.allocations) used_by_node[a.node] += a.cards;

  // Cards per type, zone and emulation.
  std::map<std::tuple<std::string, std::string, std::string>, std::pair<int64_t, int64_t>> cards;  // total, used
  if (v.have_fleet)
    for (const auto& n : v.fleet->fleet.nodes) {
      auto& e = cards[{n.type, n.zone, v.fleet->IsEmulated(n.id) ? "true" : "false"}];
      e.first += n.cards;
      e.second += used_by_node[n.id];
    }
  const char* names[3] = {"tessera_fleet_cards", "tessera_fleet_cards_used", "tessera_fleet_cards_free"};
  const char* helps[3] = {"Cards in the registered fleet, per accelerator type and zone.",
                          "Cards allocated to running (or stopping) jobs.", "Cards not allocated to any job."};
  for (int k = 0; k < 3; ++k) {
    x.Family(names[k], "gauge", helps[k]);
    for (const auto& [key, tu] : cards) {
      double val = k == 0 ? tu.first : k == 1 ? tu.second : tu.first - tu.second;
      x.Sample({{"type", std::get<0>(key)}, {"zone", std::get<1>(key)}, {"emulated", std::get<2>(key)}}, val);
    }
  }

  // Jobs per state: fleet-wide for everyone, per tenant for who may see the tenant.
  static const char* kStates[] = {"queued", "running", "stopping", "succeeded", "failed", "cancelled"};
  std::map<std::string, int64_t> by_state;
  std::map<std::pair<std::string, std::string>, int64_t> by_tenant_state;
  auto rows = v.store->CountJobsByTenantAndState();
  if (rows.ok()) {
    for (const auto& r : *rows) {
      by_state[r.state] += r.n;
      by_tenant_state[{r.tenant, r.state}] += r.n;
    }
  } else {
    TSR_LOG_ERROR("metrics: {}", rows.status().ToString());
  }
  x.Family("tessera_jobs", "gauge", "Jobs per state, all tenants.");
  for (const char* s : kStates) x.Sample({{"state", s}}, static_cast<double>(by_state[s]));
  for (const auto& [s, n] : by_state)
    if (std::find_if(std::begin(kStates), std::end(kStates), [&](const char* k) { return s == k; }) ==
        std::end(kStates))
      x.Sample({{"state", s}}, static_cast<double>(n));
  x.Family("tessera_tenant_jobs", "gauge", "Jobs per tenant and state.");
  for (const auto& [ts, n] : by_tenant_state)
    if (Sees(c, ts.first)) x.Sample({{"tenant", ts.first}, {"state", ts.second}}, static_cast<double>(n));

  // The queue.
  int64_t queued = 0, oldest_ms = 0;
  std::optional<int64_t> oldest;
  if (Status s = v.store->QueueSummary(&queued, &oldest); !s.ok()) TSR_LOG_ERROR("metrics: {}", s.ToString());
  if (oldest) oldest_ms = *oldest;
  x.Family("tessera_queue_length", "gauge", "Jobs waiting in the queue.");
  x.Sample({}, static_cast<double>(queued));
  x.Family("tessera_queue_oldest_wait_seconds", "gauge",
           "How long the longest-waiting queued job has waited (since it was submitted or last requeued); 0 "
           "when the queue is empty.");
  x.Sample({}, queued && oldest_ms ? std::max<double>(0, (NowMs() - oldest_ms) / 1000.0) : 0);

  // The domestic share of the running jobs and the floor in force today, in the policy's unit.
  const std::string unit = sched::ShareUnitName(v.policy->unit);
  sched::Ppm floor = v.policy->FloorAt(sched::Today());
  x.Family("tessera_domestic_floor", "gauge", "The domestic-share floor in force today (0..1), in the policy's unit.");
  x.Sample({{"unit", unit}}, Ratio(floor));
  if (v.have_fleet) {
    auto share = sched::FleetShare(*v.catalog, v.fleet->fleet, *v.policy, v.running, sched::Today());
    if (share.ok()) {
      x.Family("tessera_domestic_share", "gauge",
               "Domestic share of the allocated cards now (0..1; 1 when nothing runs), in the policy's unit.");
      x.Sample({{"unit", unit}}, Ratio(share->share));
    }
  }

  // Cost per hour of what runs now.
  x.Family("tessera_cost_per_hour", "gauge", "Cost per hour of the cards allocated now, per type, in the currency.");
  for (const auto& t : CostNow(v)) x.Sample({{"type", t.type}, {"currency", v.catalog->currency}}, Units(t.per_hour));

  // The bill, from the ledger (append-only: these only grow).
  if (v.ledger && !c.anonymous) {
    sched::BillFilter f;
    if (!c.admin) f.tenant = c.tenant;
    auto usage = v.ledger->Query(f);
    std::map<std::pair<std::string, std::string>, std::pair<int64_t, sched::Money>> sums;  // (type, tenant)
    if (usage.ok())
      for (const auto& r : *usage) {
        auto& s = sums[{r.type, r.tenant}];
        s.first += r.cards * (r.end - r.start);
        s.second += r.amount;
      }
    x.Family("tessera_billed_amount_total", "counter", "Amount billed to the ledger, per type and tenant.");
    for (const auto& [k, s] : sums)
      x.Sample({{"type", k.first}, {"tenant", k.second}, {"currency", v.catalog->currency}}, Units(s.second));
    x.Family("tessera_billed_card_seconds_total", "counter", "Card-seconds billed to the ledger, per type and tenant.");
    for (const auto& [k, s] : sums) x.Sample({{"type", k.first}, {"tenant", k.second}}, static_cast<double>(s.first));
  }

  // Event counters, per tenant: every known tenant's series starts at 0.
  std::vector<Labels> tenants;
  auto known = v.store->Tenants();
  if (known.ok()) {
    for (const auto& r : *known) tenants.push_back({{"tenant", r.name}});
  } else {
    TSR_LOG_ERROR("metrics: {}", known.status().ToString());
  }
  metrics::Default().Render(
      &x,
      [&](const Labels& l) {
        for (const auto& [k, val] : l)
          if (k == "tenant") return Sees(c, val);
        return true;
      },
      tenants);
  return x.Text();
}

std::string CheckpointMetrics(const std::vector<ckpt::TierConfig>& jobs) {
  std::map<std::string, std::pair<int64_t, uint64_t>> per_tier;  // count, bytes
  for (const char* t : {"hot", "warm", "cold"}) per_tier[t] = {0, 0};
  int64_t unread = 0;
  for (const auto& tiers : jobs) {
    std::string warning;
    bool unanswered = false;
    for (const auto& loc : ListCheckpoints(tiers, &warning, &unanswered))
      for (auto tier : loc.tiers) {
        auto& e = per_tier[ckpt::TierName(tier)];
        e.first += 1;
        e.second += loc.bytes;
      }
    // A directory that did not answer within the bound (a stalled mount): left out of the counts, and said so.
    if (unanswered) {
      ++unread;
      TSR_LOG_WARN("metrics: {}", warning);
    }
  }
  Exposition x;
  x.Family("tessera_checkpoints_committed", "gauge",
           "Committed checkpoints of the daemon's jobs held in each tier (a step in two tiers counts in both).");
  for (const auto& [t, e] : per_tier) x.Sample({{"tier", t}}, static_cast<double>(e.first));
  x.Family("tessera_checkpoint_bytes", "gauge", "Bytes of the committed checkpoints held in each tier.");
  for (const auto& [t, e] : per_tier) x.Sample({{"tier", t}}, static_cast<double>(e.second));
  x.Family("tessera_checkpoint_dirs_unanswered", "gauge",
           "Checkpoint directories of the daemon's jobs that did not answer within the bound at this scrape (a "
           "stalled network or FUSE mount); their checkpoints are left out of the two gauges above, the daemon's log "
           "and GET /v1/jobs/ID name them.");
  x.Sample({}, static_cast<double>(unread));
  return x.Text();
}

// ---- the daily bill ----------------------------------------------------------------------------------------

struct DailyLine {
  std::string day, type, tenant;
  int64_t card_seconds = 0;
  sched::Money amount = 0;
};

std::vector<DailyLine> DailyBill(const Caller& c, const View& v, std::string* error) {
  if (!v.ledger) {
    *error = "this daemon has no billing ledger";
    return {};
  }
  sched::BillFilter f;
  if (!c.admin) f.tenant = c.tenant;
  auto usage = v.ledger->Query(f);
  if (!usage.ok()) {
    *error = usage.status().message();
    return {};
  }
  std::map<std::tuple<int64_t, std::string, std::string>, DailyLine> lines;
  for (const auto& r : *usage) {
    for (int64_t s = r.start; s < r.end;) {
      int64_t day = s / kDay, e = std::min(r.end, (day + 1) * kDay);
      DailyLine& l = lines[{day, r.type, r.tenant}];
      l.day = sched::FormatDate(day);
      l.type = r.type;
      l.tenant = r.tenant;
      l.card_seconds += r.cards * (e - s);
      l.amount += PartAmount(r, s, e);
      s = e;
    }
  }
  std::vector<DailyLine> out;
  for (auto& [k, l] : lines) out.push_back(l);
  return out;
}

std::string CsvField(const std::string& s) {
  if (s.find_first_of(",\"\n") == std::string::npos) return s;
  std::string q = "\"";
  for (char ch : s) q += ch == '"' ? std::string("\"\"") : std::string(1, ch);
  return q + "\"";
}

const char* MimeOf(const std::string& name) {
  auto ends = [&](const char* s) {
    std::string e(s);
    return name.size() >= e.size() && name.compare(name.size() - e.size(), e.size(), e) == 0;
  };
  if (ends(".html")) return "text/html; charset=utf-8";
  if (ends(".js")) return "text/javascript; charset=utf-8";
  if (ends(".css")) return "text/css; charset=utf-8";
  if (ends(".svg")) return "image/svg+xml";
  if (ends(".png")) return "image/png";
  return "application/octet-stream";
}

bool ServeAsset(const std::string& name, httplib::Response& res) {
  for (size_t i = 0; i < kWebAssetCount; ++i) {
    if (name != kWebAssets[i].name) continue;
    res.status = 200;
    res.set_header("Cache-Control", "no-cache");
    res.set_header("X-Content-Type-Options", "nosniff");
    res.set_header("Content-Security-Policy",
                   "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; "
                   "frame-ancestors 'none'");
    res.set_content(reinterpret_cast<const char*>(kWebAssets[i].data), kWebAssets[i].size, MimeOf(name));
    return true;
  }
  return false;
}

}  // namespace

json LossCurve(int64_t id, const std::string& log_path) {
  json points = json::array();
  json of = nullptr;
  if (FILE* f = std::fopen(log_path.c_str(), "rb")) {
    std::fseek(f, 0, SEEK_END);
    long size = std::ftell(f);
    long from = std::max(0L, size - (4L << 20));
    std::fseek(f, from, SEEK_SET);
    std::string text(static_cast<size_t>(size - from), '\0');
    text.resize(std::fread(text.data(), 1, text.size(), f));
    std::fclose(f);
    static const std::regex re(R"(step (\d{1,15})(?:/(\d{1,15}))? loss ([0-9][0-9.eE+-]{0,30}))");
    int64_t last = -1;
    for (auto it = std::sregex_iterator(text.begin(), text.end(), re); it != std::sregex_iterator(); ++it) {
      int64_t step = std::stoll((*it)[1]);
      double loss = std::strtod((*it)[3].str().c_str(), nullptr);
      if (step == last || !std::isfinite(loss)) continue;  // every rank may print the same step
      last = step;
      if ((*it)[2].matched) of = std::stoll((*it)[2]);
      points.push_back({step, loss});
    }
  }
  if (points.size() > 500) {
    json thin = json::array();
    const double every = static_cast<double>(points.size() - 1) / 499;
    for (size_t k = 0; k < 500; ++k) thin.push_back(points[static_cast<size_t>(k * every + 0.5)]);
    thin.back() = points.back();
    points = thin;
  }
  return {{"id", id}, {"of", of}, {"points", points}};
}

void RegisterRoutes(httplib::Server* http, Locked locked) {
  http->Get("/metrics", [locked](const httplib::Request& req, httplib::Response& res) {
    bool called = false;
    std::string text;
    std::vector<ckpt::TierConfig> ckpts;
    // No Authorization header: the fleet-level series only. A token that is sent must be valid (401).
    locked(req, res, req.has_header("Authorization"), [&](const Caller& c, const View& v) {
      called = true;
      text = StateMetrics(c, v);
      auto jobs = v.store->JobsWithCheckpoints();
      if (jobs.ok()) {
        for (const auto& j : *jobs) ckpts.push_back(TiersOf(j));
      } else {
        TSR_LOG_ERROR("metrics: {}", jobs.status().ToString());
      }
    });
    if (!called) return;
    text += CheckpointMetrics(ckpts);
    res.status = 200;
    res.set_content(text, metrics::kContentType);
  });

  auto index = [](const httplib::Request&, httplib::Response& res) {
    if (!ServeAsset("index.html", res)) Error(res, 404, "this build has no web console (web/index.html)");
  };
  http->Get("/", index);
  http->Get("/index.html", index);
  http->Get(R"(/console/([A-Za-z0-9_][A-Za-z0-9_.-]*))", [](const httplib::Request& req, httplib::Response& res) {
    if (!ServeAsset(req.matches[1], res)) Error(res, 404, "no such console file: " + std::string(req.matches[1]));
  });

  http->Get("/v1/whoami", [locked](const httplib::Request& req, httplib::Response& res) {
    locked(req, res, true, [&](const Caller& c, const View&) {
      Reply(res, 200, {{"tenant", c.tenant}, {"admin", c.admin}});
    });
  });

  http->Get("/v1/cost", [locked](const httplib::Request& req, httplib::Response& res) {
    locked(req, res, true, [&](const Caller&, const View& v) {
      json types = json::array();
      sched::Money total = 0;
      for (const auto& t : CostNow(v)) {
        total += t.per_hour;
        types.push_back({{"type", t.type},
                         {"cards", t.cards},
                         {"cost_per_hour", sched::FormatMoney(t.per_hour)},
                         {"cost_per_hour_micro", t.per_hour}});
      }
      Reply(res, 200,
            {{"currency", v.catalog->currency},
             {"by_type", types},
             {"cost_per_hour", sched::FormatMoney(total)},
             {"cost_per_hour_micro", total}});
    });
  });

  http->Get("/v1/bill/daily", [locked](const httplib::Request& req, httplib::Response& res) {
    bool csv = req.has_param("format") && req.get_param_value("format") == "csv";
    locked(req, res, true, [&](const Caller& c, const View& v) {
      std::string err;
      auto lines = DailyBill(c, v, &err);
      if (!err.empty()) return Error(res, 500, err);
      if (csv) {
        std::string out = "day,type,tenant,card_seconds,card_hours,amount,amount_micro\n";
        for (const auto& l : lines)
          out += fmt::format("{},{},{},{},{:.2f},{},{}\n", l.day, CsvField(l.type), CsvField(l.tenant), l.card_seconds,
                             l.card_seconds / 3600.0, sched::FormatMoney(l.amount), l.amount);
        res.status = 200;
        res.set_header("Content-Disposition", "attachment; filename=\"tessera-bill.csv\"");
        res.set_content(out, "text/csv; charset=utf-8");
        return;
      }
      json rows = json::array();
      sched::Money total = 0;
      for (const auto& l : lines) {
        total += l.amount;
        rows.push_back({{"day", l.day},
                        {"type", l.type},
                        {"tenant", l.tenant},
                        {"card_seconds", l.card_seconds},
                        {"amount", sched::FormatMoney(l.amount)},
                        {"amount_micro", l.amount}});
      }
      Reply(res, 200,
            {{"currency", v.catalog->currency},
             {"scope", c.admin ? "all tenants" : "tenant " + c.tenant},
             {"rows", rows},
             {"total", sched::FormatMoney(total)},
             {"total_micro", total}});
    });
  });

  http->Get("/v1/compliance", [locked](const httplib::Request& req, httplib::Response& res) {
    int64_t days = 14;
    if (req.has_param("days")) {
      const std::string d = req.get_param_value("days");
      if (d.empty() || d.size() > 3 || d.find_first_not_of("0123456789") != std::string::npos || std::stoll(d) < 1 ||
          std::stoll(d) > 366)
        return Error(res, 400, "days: '" + d + "' is not a whole number of days from 1 to 366");
      days = std::stoll(d);
    }
    locked(req, res, true, [&](const Caller&, const View& v) {
      if (!v.ledger) return Error(res, 500, "this daemon has no billing ledger");
      int64_t today = sched::Today();
      json out = json::array();
      for (int64_t day = today - days + 1; day <= today; ++day) {
        auto c = v.ledger->ComplianceReport(day, *v.policy, v.catalog);
        if (!c.ok()) return Error(res, 500, c.status().message());
        json by_type = json::object();
        for (const auto& [t, cs] : c->card_seconds_by_type) by_type[t] = cs;
        out.push_back({{"day", sched::FormatDate(day)},
                       {"floor", sched::FormatShare(c->floor)},
                       {"floor_ppm", c->floor},
                       {"share", sched::FormatShare(c->share)},
                       {"share_ppm", c->share},
                       {"used", c->total_card_seconds > 0},
                       {"compliant", c->compliant},
                       {"domestic_card_seconds", c->domestic_card_seconds},
                       {"total_card_seconds", c->total_card_seconds},
                       {"card_seconds_by_type", by_type}});
      }
      json calendar = json::array();
      for (const auto& f : v.policy->calendar)
        // A plain `floor:` is one entry in force since the beginning of time: "from": null.
        calendar.push_back({{"from", f.from_day < -1000000 ? json(nullptr) : json(sched::FormatDate(f.from_day))},
                            {"floor", sched::FormatShare(f.floor)},
                            {"floor_ppm", f.floor}});
      json body = {{"unit", sched::ShareUnitName(v.policy->unit)},
                   {"policy_source", v.policy->source},
                   {"calendar", calendar},
                   {"floor_today", sched::FormatShare(v.policy->FloorAt(today))},
                   {"days", out}};
      if (v.have_fleet) {
        auto share = sched::FleetShare(*v.catalog, v.fleet->fleet, *v.policy, v.running, today);
        if (share.ok()) body["share_now"] = sched::FormatShare(share->share), body["compliant_now"] = share->compliant;
      }
      Reply(res, 200, body);
    });
  });

  // The loss curve of the job page: every "step N[/M] loss L" of the log's last 4 MiB, at most 500 points
  // (evenly thinned, the last one kept).
  http->Get(R"(/v1/jobs/(\d+)/progress)", [locked](const httplib::Request& req, httplib::Response& res) {
    auto id = RouteJobId(req, res);
    if (!id) return;
    std::string log;
    locked(req, res, true, [&](const Caller& c, const View& v) {
      if (VisibleJob(c, v, *id, res)) log = v.state_dir + "/jobs/" + std::to_string(*id) + "/job.log";
    });
    if (log.empty()) return;
    Reply(res, 200, LossCurve(*id, log));
  });

  http->Get(R"(/v1/jobs/(\d+)/checkpoints)", [locked](const httplib::Request& req, httplib::Response& res) {
    auto id = RouteJobId(req, res);
    if (!id) return;
    std::optional<ckpt::TierConfig> tiers;
    locked(req, res, true, [&](const Caller& c, const View& v) {
      if (auto row = VisibleJob(c, v, *id, res)) tiers = TiersOf(*row);
    });
    if (!tiers) return;
    std::string warning;
    json steps = json::array();
    for (const auto& loc : ListCheckpoints(*tiers, &warning)) {
      json t = json::array();
      for (auto tier : loc.tiers) t.push_back(ckpt::TierName(tier));
      steps.push_back({{"step", loc.step}, {"tiers", t}, {"bytes", loc.bytes}, {"created_unix", loc.created_unix}});
    }
    json body = {
        {"id", *id}, {"hot", tiers->hot}, {"warm", tiers->warm}, {"cold", tiers->cold}, {"checkpoints", steps}};
    if (!warning.empty()) body["warning"] = warning;
    Reply(res, 200, body);
  });
}

}  // namespace tessera::daemon::console
