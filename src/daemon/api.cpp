// daemon/api: the HTTP/JSON API (daemon.hpp lists the routes) — bearer-token authentication, admission (a job
// that no zone of the fleet could ever hold is refused at submit), request parsing that answers 400 naming the
// bad member, and the answers, read from the job store and the scheduler's state under the daemon's lock. The
// console's routes (daemon/console) share the same lock and authentication through one hook.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <exception>
#include <limits>
#include <regex>

#include "common/env.hpp"
#include "common/log.hpp"
#include "common/nesting.hpp"
#include "daemon/console.hpp"
#include "daemon/daemon_impl.hpp"
#include "daemon/tenant_reads.hpp"
#include "daemon/util.hpp"
#include "tessera/ckpt.hpp"

namespace tessera::daemon {

using json = nlohmann::json;

namespace {

// ---- HTTP ---------------------------------------------------------------------------------------------

// JSON text of an answer. Strings from the request (a path, a parameter echoed in an error) may hold bytes
// that are not UTF-8, on which json::dump throws: they are replaced (U+FFFD) instead.
std::string AnswerText(const json& body) { return body.dump(-1, ' ', false, json::error_handler_t::replace); }

void Reply(httplib::Response& res, int status, const json& body) {
  res.status = status;
  res.set_content(AnswerText(body), "application/json");
}
void Error(httplib::Response& res, int status, const std::string& msg) { Reply(res, status, {{"error", msg}}); }

// Parses the request body as a JSON object into *body; otherwise answers 400 saying what it is.
bool ParseBody(const httplib::Request& req, httplib::Response& res, json* body) {
  // Bounded before parsing: the answers below quote what was sent, and quoting recurses into the value.
  if (Status s = CheckNesting(req.body, Syntax::kJson, "the request body"); !s.ok()) {
    Error(res, 400, s.message());
    return false;
  }
  *body = json::parse(req.body, nullptr, /*allow_exceptions=*/false);
  if (body->is_discarded()) {
    Error(res, 400, "the request body is not JSON");
    return false;
  }
  if (!body->is_object()) {
    Error(res, 400,
          fmt::format("the request body must be a JSON object, not {} ({})", body->type_name(),
                      body->dump().substr(0, 80)));
    return false;
  }
  return true;
}

// Reads the optional string member `key` of the object `obj` into *out (unchanged when absent or null);
// otherwise answers 400 naming `where` + key.
bool StringField(const json& obj, const std::string& key, const std::string& where, std::string* out,
                 httplib::Response& res) {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return true;
  if (!it->is_string()) {
    Error(res, 400,
          fmt::format("{}{}: must be a string, not {} ({})", where, key, it->type_name(), it->dump().substr(0, 80)));
    return false;
  }
  *out = it->get<std::string>();
  return true;
}

// An optional integer column as JSON: the number, or null.
json Opt(const std::optional<int64_t>& v) { return v ? json(*v) : json(nullptr); }

// The HTTP status of a failed look-up: 404 for an absent (or another tenant's) job, 500 for a database error.
int HttpStatusOf(const Status& s) { return s.code() == Code::kNotFound ? 404 : 500; }

// The job id of a route "/v1/jobs/(\d+)..."; answers 400 naming it when no int64 holds it.
std::optional<int64_t> RouteId(const httplib::Request& req, httplib::Response& res) {
  auto v = env::ParseInt("job id", req.matches[1], 1, std::numeric_limits<int64_t>::max());
  if (!v.ok()) {
    Error(res, 400, v.status().message());
    return std::nullopt;
  }
  return *v;
}

}  // namespace

// ---- admission ----------------------------------------------------------------------------------------

// Why no zone of the fleet could ever hold `spec`, even empty, or "" when one could (or when the reason is
// one that a policy change could lift).
std::string Daemon::NeverFits(const JobSpec& spec) {
  std::vector<sched::RunningJob> none;
  auto empty = PlanJob(spec, none);
  if (!empty.ok() || empty->placed()) return empty.ok() ? "" : empty.status().message();
  auto b = empty->infeasible->binding;
  if (b != sched::Binding::kCompatibility && b != sched::Binding::kCapacity && b != sched::Binding::kBounds) return "";
  // The largest the fleet offers this job: per zone, the cards (and throughput) of the types it accepts.
  std::map<std::string, std::pair<int64_t, sched::Throughput>> zones;
  std::set<std::string> types;
  for (const auto& n : fleet_.fleet.nodes) {
    const auto* t = catalog_.Find(n.type);
    if (!t || !spec.job.Accepts(*t)) continue;
    types.insert(t->name);
    auto it = t->throughput.find(spec.job.workload_class);
    auto& z = zones[n.zone];
    z.first += n.cards;
    if (it != t->throughput.end()) z.second += it->second * n.cards;
  }
  std::string largest = "no zone has a card of a type it accepts";
  std::string best_zone;
  int64_t best_cards = -1;
  sched::Throughput best_tp = 0;
  for (const auto& [zone, v] : zones) {
    bool better = spec.job.cards > 0 ? v.first > best_cards : v.second > best_tp;
    if (better) best_zone = zone, best_cards = v.first, best_tp = v.second;
  }
  if (!best_zone.empty()) {
    std::string tl;
    for (const auto& t : types) tl += (tl.empty() ? "" : ", ") + t;
    largest = spec.job.cards > 0
                  ? fmt::format("the largest possible is {} cards (zone {}, types {})", best_cards, best_zone, tl)
                  : fmt::format("the largest possible is throughput {} for class {} (zone {}, {} cards of types {})",
                                sched::FormatThroughput(best_tp), spec.job.workload_class, best_zone, best_cards, tl);
  }
  std::string need = spec.job.cards > 0 ? fmt::format("it needs {} cards in one zone", spec.job.cards)
                                        : fmt::format("it needs throughput {} in one zone",
                                                      sched::FormatThroughput(spec.job.throughput_target));
  return fmt::format("{}; {} ({})", need, largest, empty->infeasible->reason);
}

// ---- routes ---------------------------------------------------------------------------------------------

std::optional<Caller> Daemon::Auth(const httplib::Request& req, httplib::Response& res) {
  std::string h = req.get_header_value("Authorization");
  if (h.rfind("Bearer ", 0) != 0 || h.size() <= 7) {
    Error(res, 401,
          "missing bearer token: pass --token, set TESSERA_DAEMON_TOKEN, or run where STATE/token is readable");
    return std::nullopt;
  }
  // Only hashes are kept; every entry is compared, in constant time, so the answer's timing says nothing.
  std::string hash = TokenHash(h.substr(7));
  const Tenant* found = nullptr;
  for (const auto& t : tenants_)
    if (ConstantTimeEqual(t.token_sha256, hash)) found = &t;
  if (!found) {
    Error(res, 401, "the bearer token is not known to this daemon");
    return std::nullopt;
  }
  return Caller{found->name, found->admin};
}

Result<JobRow> Daemon::LoadJobFor(const Caller& c, int64_t id) {
  auto row = store_->Job(id);
  if (!row.ok() && row.status().code() != Code::kNotFound) return row.status();
  // Another tenant's job is reported as absent: its existence is not theirs to know.
  if (!row.ok() || (!c.admin && row->tenant != c.tenant)) return NotFound(fmt::format("job {} not found", id));
  return row;
}

std::optional<std::pair<Caller, JobRow>> Daemon::CallerAndJob(const httplib::Request& req, httplib::Response& res) {
  auto c = Auth(req, res);
  if (!c) return std::nullopt;
  auto rid = RouteId(req, res);
  if (!rid) return std::nullopt;
  auto j = LoadJobFor(*c, *rid);
  if (!j.ok()) {
    Error(res, HttpStatusOf(j.status()), j.status().message());
    return std::nullopt;
  }
  return std::make_pair(*c, std::move(*j));
}

json Daemon::JobSummary(const JobRow& j) {
  json out = {{"id", j.id},
              {"name", j.name},
              {"tenant", j.tenant},
              {"priority", j.priority},
              {"state", j.state},
              {"reason", j.reason},
              {"position", Opt(j.position)},
              {"submitted_ms", j.submitted_ms},
              {"attempts", j.attempts},
              {"exit_code", Opt(j.exit_code)},
              {"ended_ms", Opt(j.ended_ms)}};
  // Written by Start from a placement; text that is not JSON (never written so) is shown as null, not thrown.
  if (!j.plan_json.empty()) {
    json alloc = json::parse(j.plan_json, nullptr, /*allow_exceptions=*/false);
    out["allocation"] = alloc.is_discarded() ? json(nullptr) : alloc;
  }
  auto it = specs_.find(j.id);
  if (it != specs_.end()) {
    out["cards"] = it->second.job.cards;
    out["compatible"] = it->second.job.compatible;
  }
  out["progress"] = ProgressFromLog(JobLogPath(j.id));
  AddRunTimes(j, &out);
  return out;
}

void Daemon::Routes() {
  http_.Get("/v1/health", [&](const httplib::Request&, httplib::Response& res) {
    Reply(res, 200,
          {{"ok", true}, {"pid", ::getpid()}, {"state_dir", opts_.state_dir}, {"jobs_run", identity_.Describe()}});
  });

  http_.Post("/v1/jobs", [&](const httplib::Request& req, httplib::Response& res) {
    std::lock_guard<std::mutex> lk(mu_);
    auto c = Auth(req, res);
    if (!c) return;
    json body;
    if (!ParseBody(req, res, &body)) return;
    std::string source = "job.yaml", yaml, base;
    if (!StringField(body, "source", "", &source, res) || !StringField(body, "yaml", "", &yaml, res) ||
        !StringField(body, "base_dir", "", &base, res))
      return;
    std::vector<std::string> comp;
    if (auto it = body.find("compatible"); it != body.end() && !it->is_null()) {
      bool ok = it->is_array() && std::all_of(it->begin(), it->end(), [](const json& x) { return x.is_string(); });
      if (!ok) return Error(res, 400, "compatible: must be a list of type or vendor names, not " + it->dump());
      for (const auto& x : *it) comp.push_back(x.get<std::string>());
    }
    auto spec = ParseSpec(yaml, source, base, c->tenant, comp);
    if (!spec.ok()) return Error(res, 400, spec.status().message());
    // Admission: a job that no zone of this fleet could ever hold, even empty, is refused now; one that only
    // waits for capacity is queued.
    json preview = nullptr;
    std::string waits;
    if (have_fleet_) {
      std::string never = NeverFits(*spec);
      if (!never.empty())
        return Error(res, 400,
                     fmt::format("{}: job '{}' can never run on this fleet: {}", source, spec->job.name, never));
      auto running = Running(nullptr);
      if (running.ok()) {
        auto now = PlanJob(*spec, *running);
        if (now.ok() && now->placed()) preview = PlacementToJson(*now->placement, catalog_, fleet_);
        if (now.ok() && !now->placed()) {
          waits = now->infeasible->reason;
          if (!now->infeasible->fix.empty()) waits += " (" + now->infeasible->fix + ")";
        }
      }
    }
    std::string comp_s;
    for (const auto& x : comp) comp_s += (comp_s.empty() ? "" : ",") + x;
    int64_t now = NowMs();
    auto area = TenantArea(c->tenant);
    if (!area.ok()) return Error(res, 500, area.status().message());
    JobRow row;
    row.name = spec->job.name;
    row.tenant = spec->job.tenant;
    row.priority = spec->job.priority;
    row.source = source;
    row.yaml = yaml;
    row.base_dir = base;
    row.compatible = comp_s;
    row.reason = waits;
    row.submitted_ms = now;
    // A job that cannot start now waits for capacity from its submission on (its wake-up latency is then
    // measured even when capacity comes before the scheduler's next pass looks at it).
    if (!waits.empty()) row.blocked_since_ms = now;
    row.grace_ms = spec->run.grace_ms;
    std::string ckpt;
    auto added = store_->AddJob(row, [&](int64_t id) {
      ckpt = spec->run.ckpt_dir.empty() ? fmt::format("{}/{}/ckpt", *area, id) : spec->run.ckpt_dir;
      return ckpt;
    });
    if (!added.ok()) return Error(res, 500, added.status().message());
    int64_t id = *added;
    specs_[id] = *spec;
    Event(id, fmt::format("submitted by tenant {} ({} cards, compatible {})", spec->job.tenant, spec->job.cards,
                          comp_s.empty() ? "from the file" : comp_s));
    wake_ = true;
    cv_.notify_all();
    Reply(res, 201,
          {{"id", id},
           {"name", spec->job.name},
           {"state", "queued"},
           {"plan", preview},
           {"waits", waits},
           {"checkpoint_dir", ckpt}});
  });

  http_.Get("/v1/jobs", [&](const httplib::Request& req, httplib::Response& res) {
    std::lock_guard<std::mutex> lk(mu_);
    auto c = Auth(req, res);
    if (!c) return;
    bool all = req.has_param("all") && req.get_param_value("all") == "1";
    auto rows = store_->ListJobs(c->admin, c->tenant, all);
    if (!rows.ok()) return Error(res, 500, rows.status().message());
    json jobs = json::array();
    std::map<int64_t, json> starts;  // over the whole queue, whose jobs ahead may be another tenant's
    if (std::any_of(rows->begin(), rows->end(), [](const JobRow& r) { return r.state == "queued"; }))
      starts = EstimateStarts(NowMs(), *c);
    for (const auto& r : *rows) {
      (void)SpecFor(r);  // caches the parsed file for JobSummary; one that no longer parses is failed by the scheduler
      jobs.push_back(JobSummary(r));
      if (starts.count(r.id)) jobs.back().update(starts[r.id]);
    }
    Reply(res, 200, {{"jobs", jobs}});
  });

  http_.Get(R"(/v1/jobs/(\d+))", [&](const httplib::Request& req, httplib::Response& res) {
    std::lock_guard<std::mutex> lk(mu_);
    auto cj = CallerAndJob(req, res);
    if (!cj) return;
    const JobRow* j = &cj->second;
    const int64_t id = j->id;
    (void)SpecFor(*j);  // as in GET /v1/jobs
    json out = JobSummary(*j);
    if (j->state == "queued") {
      auto starts = EstimateStarts(NowMs(), cj->first);
      if (starts.count(id)) out.update(starts[id]);
    }
    out["checkpoint_dir"] = j->ckpt_dir;
    out["source"] = j->source;
    auto atts = store_->Attempts(id);
    json aj = json::array();
    if (atts.ok()) {
      for (auto& a : *atts) {
        json alloc = json::parse(a.alloc_json, nullptr, /*allow_exceptions=*/false);
        json move = alloc.is_object() ? alloc.value("move", json()) : json();
        if (move.is_object()) {
          // Only a cost move was triggered by its predicted gain (older records of policy moves carry one).
          if (move.value("reason", std::string()) != "cost") move["predicted_gain"] = nullptr;
          move["summary"] = MoveSummary(move, catalog_.currency);
        }
        aj.push_back({{"n", a.n},
                      {"started_ms", a.started_ms},
                      {"ended_ms", Opt(a.ended_ms)},
                      {"exit_code", Opt(a.exit_code)},
                      {"exit_signal", Opt(a.exit_signal)},
                      {"end_reason", a.end_reason},
                      {"resume_from", a.resume_from},
                      {"wake_latency_ms", Opt(a.wake_latency_ms)},
                      {"billed", a.billed},
                      {"shim_pid", a.shim_pid},
                      {"islands", alloc.is_object() ? alloc.value("islands", json()) : json()},
                      {"move", move}});
      }
    } else {
      TSR_LOG_ERROR("GET /v1/jobs/{}: {}", id, atts.status().ToString());
    }
    out["attempts_detail"] = aj;
    auto ev = store_->Events(id);
    if (ev.ok()) {
      json events = json::array();
      for (const auto& e : *ev) events.push_back({{"at_ms", e.at_ms}, {"text", e.text}});
      out["events"] = events;
    } else {
      TSR_LOG_ERROR("GET /v1/jobs/{}: {}", id, ev.status().ToString());
    }
    auto area = TenantArea(j->tenant);
    auto steps = area.ok() ? BoundedJobRead<std::vector<int64_t>>(
                                 *area, j->ckpt_dir, [](const std::string& r) { return ckpt::ListSteps(r); })
                           : Result<std::vector<int64_t>>(area.status());
    out["checkpoints"] = steps.ok() ? json(*steps) : json::array();
    // Unknown, not "none": a directory that did not answer within the bound (a stalled mount) or cannot be read.
    if (!steps.ok() && steps.status().code() != Code::kNotFound) out["checkpoints_error"] = steps.status().message();
    Reply(res, 200, out);
  });

  auto stop_route = [&](const std::string& intent) {
    return [&, intent](const httplib::Request& req, httplib::Response& res) {
      std::lock_guard<std::mutex> lk(mu_);
      auto cj = CallerAndJob(req, res);
      if (!cj) return;
      const Caller* c = &cj->first;
      const JobRow* j = &cj->second;
      const int64_t id = j->id;
      std::string state = j->state;
      if (state == "queued" && intent == "cancel") {
        Status s = store_->CancelQueued(id, NowMs());
        if (!s.ok()) return Error(res, 500, s.message());
        Event(id, "cancelled while queued by " + c->tenant);
      } else if (state == "running" || (state == "stopping" && intent == "cancel")) {
        std::string why = intent == "cancel"
                              ? "cancelled by " + c->tenant
                              : "interrupted by " + c->tenant + "; will resume from its newest checkpoint";
        Status s = RequestStop(id, intent == "cancel" ? "cancel" : "preempt", why);
        if (!s.ok()) return Error(res, 500, s.message());
      } else {
        return Error(res, 409,
                     fmt::format("job {} is {}; only a {} job can be {}", id, state,
                                 intent == "cancel" ? "queued or running" : "running",
                                 intent == "cancel" ? "cancelled" : "requeued"));
      }
      wake_ = true;
      cv_.notify_all();
      auto after = store_->Job(id);
      Reply(res, 200, after.ok() ? JobSummary(*after) : json{{"id", id}});
    };
  };
  http_.Post(R"(/v1/jobs/(\d+)/cancel)", stop_route("cancel"));
  http_.Post(R"(/v1/jobs/(\d+)/requeue)", stop_route("requeue"));

  http_.Get(R"(/v1/jobs/(\d+)/logs)", [&](const httplib::Request& req, httplib::Response& res) {
    std::string path;
    {
      std::lock_guard<std::mutex> lk(mu_);
      auto cj = CallerAndJob(req, res);
      if (!cj) return;
      path = JobLogPath(cj->second.id);
    }
    int64_t off = -1, tail = -1;
    for (const char* key : {"offset", "tail"}) {
      if (!req.has_param(key)) continue;
      auto v = env::ParseInt(key, req.get_param_value(key), 0, std::numeric_limits<int64_t>::max());
      if (!v.ok()) return Error(res, 400, v.status().message() + " (a byte count)");
      (std::string(key) == "offset" ? off : tail) = *v;
    }
    auto text = ReadFile(path);
    std::string body = text.ok() ? *text : "";
    if (off >= 0) {
      body = static_cast<size_t>(off) < body.size() ? body.substr(static_cast<size_t>(off)) : "";
    } else if (tail >= 0) {
      if (body.size() > static_cast<size_t>(tail)) body = body.substr(body.size() - static_cast<size_t>(tail));
    }
    res.status = 200;
    res.set_header("X-Log-Size", std::to_string(text.ok() ? text->size() : 0));
    res.set_content(body, "text/plain");
  });

  http_.Get("/v1/fleet", [&](const httplib::Request& req, httplib::Response& res) {
    std::lock_guard<std::mutex> lk(mu_);
    auto c = Auth(req, res);
    if (!c) return;
    std::map<std::string, int64_t> used;
    auto running = Running(nullptr);
    if (running.ok())
      for (const auto& r : *running)
        for (const auto& a : r.allocations) used[a.node] += a.cards;
    json types = json::array(), nodes = json::array();
    for (const auto& t : catalog_.types) {
      json tp = json::object();
      for (const auto& [cls, v] : t.throughput) tp[cls] = sched::FormatThroughput(v);
      types.push_back({{"name", t.name},
                       {"vendor", t.vendor},
                       {"domestic", t.domestic},
                       {"price_per_card_hour", sched::FormatMoney(t.price_per_card_hour)},
                       {"throughput", tp}});
    }
    if (have_fleet_)
      for (const auto& n : fleet_.fleet.nodes)
        nodes.push_back({{"id", n.id},
                         {"zone", n.zone},
                         {"type", n.type},
                         {"cards", n.cards},
                         {"used", used[n.id]},
                         {"free", n.cards - used[n.id]},
                         {"emulated", fleet_.IsEmulated(n.id)},
                         {"sm_share", fleet_.SmShare(n.id)}});
    json out = {{"catalog", types},
                {"currency", catalog_.currency},
                {"price_version", catalog_.price_version},
                {"nodes", nodes},
                {"fleet_source", have_fleet_ ? fleet_.fleet.source : ""},
                {"policy_source", policy_.source},
                {"floor_today", sched::FormatShare(policy_.FloorAt(sched::Today()))},
                {"unit", sched::ShareUnitName(policy_.unit)},
                {"ledger", ledger_path_}};
    if (have_fleet_ && running.ok()) {
      auto share = sched::FleetShare(catalog_, fleet_.fleet, policy_, *running, sched::Today());
      if (share.ok()) out["share_now"] = sched::FormatShare(share->share), out["compliant"] = share->compliant;
    }
    Reply(res, 200, out);
  });

  // {key: {source, yaml}}: 1 when read, 0 when absent, -1 after answering 400 (a member of the wrong type).
  auto parse_doc = [](const json& body, const char* key, std::string* src, std::string* yaml,
                      httplib::Response& res) -> int {
    auto it = body.find(key);
    if (it == body.end() || it->is_null()) return 0;
    if (!it->is_object()) {
      Error(res, 400, fmt::format("{}: must be an object {{source, yaml}}, not {}", key, it->type_name()));
      return -1;
    }
    *src = std::string(key) + ".yaml";
    yaml->clear();
    std::string where = std::string(key) + ".";
    if (!StringField(*it, "source", where, src, res) || !StringField(*it, "yaml", where, yaml, res)) return -1;
    return 1;
  };

  http_.Put("/v1/fleet", [&, parse_doc](const httplib::Request& req, httplib::Response& res) {
    std::lock_guard<std::mutex> lk(mu_);
    auto c = Auth(req, res);
    if (!c) return;
    if (!c->admin) return Error(res, 403, "registering a fleet needs the admin token (STATE/token)");
    json body;
    if (!ParseBody(req, res, &body)) return;
    std::string fs, fy, cs, cy, ps, py;
    int f = parse_doc(body, "fleet", &fs, &fy, res);
    if (f < 0) return;
    if (f == 0) return Error(res, 400, "the request names no fleet: {fleet: {source, yaml}}");
    auto cur = store_->LoadConfig(DefaultConfig());
    if (!cur.ok()) return Error(res, 500, cur.status().message());
    int k = parse_doc(body, "catalog", &cs, &cy, res);
    if (k < 0) return;
    if (k == 0) cs = cur->catalog_source, cy = cur->catalog_yaml;
    int p = parse_doc(body, "policy", &ps, &py, res);
    if (p < 0) return;
    if (p == 0) ps = cur->policy_source, py = cur->policy_yaml;
    Status s = ApplyConfig(cs, cy, fs, fy, ps, py, true);
    if (!s.ok()) return Error(res, 400, s.message());
    failed_nodes_.clear();  // a registered fleet is what is usable now
    last_capacity_ms_ = NowMs();
    wake_ = true;
    cv_.notify_all();
    int64_t cards = 0, emu = 0;
    for (const auto& n : fleet_.fleet.nodes) {
      cards += n.cards;
      if (fleet_.IsEmulated(n.id)) emu += n.cards;
    }
    Reply(res, 200, {{"nodes", fleet_.fleet.nodes.size()}, {"cards", cards}, {"emulated_cards", emu}});
  });

  http_.Put("/v1/policy", [&](const httplib::Request& req, httplib::Response& res) {
    std::lock_guard<std::mutex> lk(mu_);
    auto c = Auth(req, res);
    if (!c) return;
    if (!c->admin) return Error(res, 403, "changing the policy needs the admin token (STATE/token)");
    json body;
    if (!ParseBody(req, res, &body)) return;
    auto cur = store_->LoadConfig(DefaultConfig());
    if (!cur.ok()) return Error(res, 500, cur.status().message());
    std::string psrc = "policy.yaml", pyaml;
    if (!StringField(body, "source", "", &psrc, res) || !StringField(body, "yaml", "", &pyaml, res)) return;
    Status s =
        ApplyConfig(cur->catalog_source, cur->catalog_yaml, cur->fleet_source, cur->fleet_yaml, psrc, pyaml, true);
    if (!s.ok()) return Error(res, 400, s.message());
    wake_ = true;
    cv_.notify_all();
    Reply(res, 200, {{"policy", policy_.source}, {"floor_today", sched::FormatShare(policy_.FloorAt(sched::Today()))}});
  });

  // GET /metrics, the web console at /, and the console's read-only endpoints (daemon/console.hpp).
  console::RegisterRoutes(&http_, [this](const httplib::Request& req, httplib::Response& res, bool authenticate,
                                         const console::Handler& fn) {
    std::lock_guard<std::mutex> lk(mu_);
    console::Caller who;
    if (authenticate) {
      auto c = Auth(req, res);
      if (!c) return;
      who = {c->tenant, c->admin, false};
    }
    auto running = Running(nullptr);
    fn(who, {&catalog_, &fleet_, &policy_, have_fleet_, store_.get(), ledger_.get(), opts_.state_dir,
             running.ok() ? *running : std::vector<sched::RunningJob>{}});
  });
}

void Daemon::SetUpHttp() {
  Routes();
  // Bounds against slow, idle or greedy clients (see DeadlineStream and ApiServer).
  http_.new_task_queue = [] { return new httplib::ThreadPool(kApiThreads); };
  http_.set_read_timeout(kReadS, 0);
  http_.set_write_timeout(kWriteS, 0);
  http_.set_keep_alive_max_count(1);
  http_.set_payload_max_length(kMaxBody);
  // Every error answer is JSON, including the ones cpp-httplib makes itself (413, unknown routes).
  http_.set_error_handler(httplib::Server::HandlerWithResponse([](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
    std::string msg = res.status == 413
                          ? fmt::format("the request body is larger than the {} MiB limit", kMaxBody >> 20)
                      : res.status == 404 ? fmt::format("no such API route: {} {}", req.method, req.path)
                                          : fmt::format("HTTP {}: the request was not understood", res.status);
    res.set_content(AnswerText(json{{"error", msg}}), "application/json");
    return httplib::Server::HandlerResponse::Handled;
  }));
  // A last resort: the handlers report errors as Status, so reaching this is a bug; still answer JSON.
  http_.set_exception_handler([](const httplib::Request& req, httplib::Response& res, std::exception_ptr ep) {
    std::string what = "unknown exception";
    try {
      if (ep) std::rethrow_exception(ep);
    } catch (const std::exception& e) {
      what = e.what();
    } catch (...) {
    }
    TSR_LOG_ERROR("internal error answering {} {}: {}", req.method, req.path, what);
    res.status = 500;
    res.set_content(AnswerText(json{{"error", "internal error: " + what}}), "application/json");
  });
}

}  // namespace tessera::daemon
