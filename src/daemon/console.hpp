// daemon/console: the operator's view, served by the daemon itself —
//   GET /metrics                   Prometheus text format (daemon/metrics): fleet, queue, share, cost, bill,
//                                  checkpoints, event counters and histograms. Without a token: the fleet-level
//                                  series only; with a tenant token: also that tenant's series; admin: all.
//   GET /  and /console/FILE       the web console (web/, embedded into the binary at build time)
//   GET /v1/bill/daily[?format=csv]  billed amount and card-seconds per day, type and tenant (tenant: own rows)
//   GET /v1/compliance[?days=N]    the domestic share per day over the last N days against the floor calendar
//   GET /v1/jobs/ID/checkpoints    the job's committed checkpoints with the tiers holding each (hot, warm, cold)
//   GET /v1/whoami                 {tenant, admin} of the bearer token (the console's login)
//   GET /v1/cost                   cards allocated now and their cost per hour, per type and in total
// The routes read the daemon's state through one hook that takes the daemon's lock and authenticates the
// bearer token exactly as the rest of the API does, so the console and the CLI read the same answers.
#pragma once

#include <httplib.h>

#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "daemon/jobspec.hpp"
#include "sched/sched.hpp"

namespace tessera::daemon {
class JobStore;
}

namespace tessera::daemon::console {

struct Caller {
  std::string tenant;
  bool admin = false;
  bool anonymous = true;  // no Authorization header (allowed only where a route says so)
};

// The daemon's state, valid only during a Handler call (the daemon's lock is held).
struct View {
  const sched::Catalog* catalog = nullptr;
  const FleetSpec* fleet = nullptr;
  const sched::Policy* policy = nullptr;
  bool have_fleet = false;
  JobStore* store = nullptr;
  sched::Ledger* ledger = nullptr;  // null when the daemon has no ledger
  std::string state_dir;
  std::vector<sched::RunningJob> running;  // open attempts (running or stopping), as the planner counts them
};

using Handler = std::function<void(const Caller&, const View&)>;
// Takes the daemon's lock; when `authenticate`, checks the bearer token (answering 401 itself and not
// calling `fn` when it is missing or unknown); then calls `fn`.
using Locked = std::function<void(const httplib::Request&, httplib::Response&, bool authenticate, const Handler& fn)>;

void RegisterRoutes(httplib::Server* http, Locked locked);

// GET /v1/jobs/ID/progress: {id, of, points: [[step, loss], ...]} from the job's log (at most 500 points).
nlohmann::json LossCurve(int64_t id, const std::string& log_path);

}  // namespace tessera::daemon::console
