// sched/sched: the policy-first planner and the per-second billing ledger (the C++ API of the binary and
// its tests; not installed: sched is not in libtessera).
//
// Inputs are YAML files (catalog, fleet, policy, job, running jobs); every loader reports bad input as
// InvalidArgument naming the file, the line and the field ("fleet.yaml:12: nodes[3].cards: 'x' is not
// ..."). Plan() chooses, for one job, how many cards of each accepted type to take in one zone so that the
// cost per unit of work is lowest while the fleet-wide domestic-share floor in force keeps holding (an
// integer program solved with GLPK); a job that names its model (Job::model) is placed instead by the
// performance model's predicted tokens/s per unit of money under the same constraints (docs/sched.md). The
// Ledger stores immutable usage intervals in SQLite (WAL) and rates them per second. Money is fixed point
// (int64 micro-units of the catalog currency), never floating point.
//
// Built without GLPK, Plan() returns Unsupported; built without SQLite, Ledger::Open() returns
// Unsupported. Everything else works in both builds.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "tessera/status.hpp"

namespace tessera::sched {

// ---- fixed-point quantities -----------------------------------------------------------------------

// Money in micro-units of the catalog currency: 1 CNY = 1'000'000. 2.4 CNY/card-hour = 2'400'000.
using Money = int64_t;
inline constexpr Money kMoneyScale = 1'000'000;
// Parses a decimal such as "2.4", "6.80" or "1234" exactly (at most 6 decimals). `what` names the source.
Result<Money> ParseMoney(const std::string& what, const std::string& text);
// "4416.00" — rounded half away from zero to `decimals` (0..6) places.
std::string FormatMoney(Money m, int decimals = 2);

// Throughput per card in milli-units of the workload class's unit (e.g. tokens/s): 0.3 = 300.
using Throughput = int64_t;
inline constexpr Throughput kThroughputScale = 1'000;
Result<Throughput> ParseThroughput(const std::string& what, const std::string& text);
std::string FormatThroughput(Throughput t);

// A share in parts per million: 50% = 500'000.
using Ppm = int64_t;
inline constexpr Ppm kPpmScale = 1'000'000;
// "0.6", "60%", "60.5%" -> ppm; must lie in [0, 1].
Result<Ppm> ParseShare(const std::string& what, const std::string& text);
std::string FormatShare(Ppm share);  // "50.0%"

// Civil dates (UTC) as days since 1970-01-01; times as Unix seconds.
Result<int64_t> ParseDate(const std::string& what, const std::string& text);  // "2026-03-01"
std::string FormatDate(int64_t day);
int64_t Today();
// "2026-03-01", "2026-03-01T12:00:00Z", "2026-03-01 12:00:00" (UTC) or a plain Unix-seconds integer.
Result<int64_t> ParseTime(const std::string& what, const std::string& text);
std::string FormatTime(int64_t unix_seconds);  // "2026-03-01T12:00:00Z"

// ---- inputs --------------------------------------------------------------------------------------

// The performance model's figures (sched/perf_model, docs/model.md), optional in the catalog: a job that names
// its model (Job::model) is placed by the model's predicted tokens/s per unit of money, and then needs them.
struct CardFigures {      // one card of a type (catalog `types[i].model`)
  double tflops = 0;      // dense 16-bit peak, TFLOP/s
  double mfu = 0;         // model FLOP utilisation, (0, 1]
  double fabric_gbs = 0;  // island fabric per card (NVLink, HCCS), GB/s each way
  double hbm_gbs = 0;     // card memory bandwidth, GB/s (the optimizer on the card)
  int64_t cards_per_node = 8;
};
struct HostFigures {         // the hosts and the network between them (catalog `model`)
  double net_gbps = 0;       // network per node between nodes, Gb/s each way (RoCE 200 Gb/s: 200)
  double pcie_gbs = 0;       // pinned host<->device copies per card, GB/s
  double shm_gbs = 0;        // shared-memory transfers per host rank, GB/s
  double latency_us = 0;     // per message
  double host_adam_gbs = 0;  // host memory per node for an offloaded optimizer, GB/s
};

struct AcceleratorType {
  std::string name;    // "ascend-910b"
  std::string vendor;  // "ascend"
  bool domestic = false;
  Money price_per_card_hour = 0;
  int64_t memory_gib = 0;
  std::map<std::string, Throughput> throughput;  // per workload class, per card
  // The Slurm GRES of one card ("gpu", "npu", or typed "gpu:h800"); "" = by vendor (daemon/slurm.hpp).
  std::string slurm_gres;
  std::optional<CardFigures> model;  // the performance model's figures (optional)
};

struct Catalog {
  std::string source;  // file name (for messages)
  std::string currency = "CNY";
  std::string price_version;  // recorded with every ledger row
  std::vector<AcceleratorType> types;
  std::optional<HostFigures> model;  // the performance model's host and network figures (optional)
  const AcceleratorType* Find(const std::string& name) const;
};

struct Node {
  std::string id;
  std::string zone;
  std::string type;
  int64_t cards = 0;
  // Where the loader read it, for errors that involve another file: the 1-based line of its `type` and its
  // entry ("nodes[3]"). 0 and empty for nodes built in code.
  int line = 0;
  std::string field = {};
};

struct Fleet {
  std::string source;
  std::vector<Node> nodes;
  std::unordered_map<std::string, size_t> index;  // node id -> position in `nodes`
  std::vector<std::string> zones;                 // distinct zones, first-seen order
  std::vector<int> zone_of;                       // per node: its zone's position in `zones`
  const Node* Find(const std::string& id) const;
  // Rebuilds `index`, `zones` and `zone_of` from `nodes` (the loaders call it; call it after editing `nodes`).
  // InvalidArgument on a duplicate node id. Plan() checks `zone_of` against the nodes and rebuilds its own
  // copy when they disagree; a stale `index` is reported as an error.
  Status Reindex();
};

enum class ShareUnit { kCards, kThroughput };
const char* ShareUnitName(ShareUnit u);  // "cards" | "throughput"

struct FloorChange {
  int64_t from_day = 0;  // in force from this date (inclusive) until the next entry
  Ppm floor = 0;
};

struct Policy {
  std::string source;
  ShareUnit unit = ShareUnit::kCards;
  std::string weight_class;           // unit == kThroughput: the workload class whose throughput weighs cards
  int weight_class_line = 0;          // its 1-based line in `source` (0: not loaded from a file)
  std::vector<FloorChange> calendar;  // sorted by from_day, strictly increasing
  // The floor in force on `day`; 0 before the first entry.
  Ppm FloorAt(int64_t day) const;
};

struct TypeBounds {
  int64_t min = 0;
  std::optional<int64_t> max;
  int line = 0;  // 1-based line of its key under `bounds:` in the job file (0: not loaded from a file)
};

// The model a job trains (job `model:`): its size and its class, one of the training setups the performance
// model knows (perf::ModelClasses(): ZeRO stage, offload, sequence, batch per card, overlap).
struct JobModel {
  double params = 0;        // parameters, > 0
  std::string model_class;  // "dp", "zero1", "zero2", "zero3", "zero3-offload"
  int line = 0;             // 1-based line of `model:` in the job file (0: not loaded from a file)
};

struct Job {
  std::string source;
  std::string name;
  std::string tenant;
  int64_t priority = 0;
  std::string workload_class;
  int64_t cards = 0;                         // exactly one of `cards` and `throughput_target` is > 0
  Throughput throughput_target = 0;          // sum of per-card throughput (same unit as the catalog)
  std::vector<std::string> compatible;       // vendor names or type names
  std::map<std::string, TypeBounds> bounds;  // per type name
  // Set: the job is placed by the performance model's predicted tokens/s per unit of money of the mix (needs
  // `cards`); unset: by the sum of the catalog's per-card throughputs.
  std::optional<JobModel> model;
  bool Accepts(const AcceleratorType& t) const;
};

struct NodeCards {
  std::string node;
  int64_t cards = 0;
  // For running jobs read from a file: the 1-based lines of `node` and `cards` and the entry
  // ("running[0].allocations[1]"). 0 and empty otherwise.
  int line = 0;
  int cards_line = 0;
  std::string field = {};
};

struct RunningJob {
  std::string name;
  std::string tenant;
  std::vector<NodeCards> allocations;
  std::string source = {};  // the file it was read from (for messages)
};

// Loaders: from a file, or from YAML text (`source` names it in messages). Structural checks only, plus: a key
// given twice in one mapping is an error (yaml-cpp would keep one of the values silently). Cross-file checks
// (a node's type is in the catalog, ...) happen in Plan() / CheckInputs(); their errors name the file, line and
// field of the entry at fault, from the positions the loaders record.
Result<Catalog> LoadCatalog(const std::string& path);
Result<Catalog> ParseCatalog(const std::string& yaml, const std::string& source = "<catalog>");
Result<Fleet> LoadFleet(const std::string& path);
Result<Fleet> ParseFleet(const std::string& yaml, const std::string& source = "<fleet>");
Result<Policy> LoadPolicy(const std::string& path);
Result<Policy> ParsePolicy(const std::string& yaml, const std::string& source = "<policy>");
Result<Job> LoadJob(const std::string& path);
Result<Job> ParseJob(const std::string& yaml, const std::string& source = "<job>");
// The top-level keys of a job file that ParseJob reads (the daemon adds its own: docs/daemon.md).
const std::vector<std::string>& JobKeys();
Result<std::vector<RunningJob>> LoadRunning(const std::string& path);
Result<std::vector<RunningJob>> ParseRunning(const std::string& yaml, const std::string& source = "<running>");

// Cross-file checks: node types exist in the catalog, running allocations name existing nodes and fit
// their capacity, the policy's weight class exists where needed.
Status CheckInputs(const Catalog& catalog, const Fleet& fleet, const Policy& policy,
                   const std::vector<RunningJob>& running);

// ---- the planner -----------------------------------------------------------------------------------

struct PlanRequest {
  const Catalog* catalog = nullptr;
  const Fleet* fleet = nullptr;
  const Policy* policy = nullptr;
  const Job* job = nullptr;
  const std::vector<RunningJob>* running = nullptr;  // may be null: no running jobs
  int64_t day = 0;                                   // the date whose floor applies (days since epoch)
};

struct TypeAlloc {
  std::string type;
  bool domestic = false;
  int64_t cards = 0;
  Money cost_per_hour = 0;
  Throughput throughput = 0;  // cards x per-card throughput for the job's class
};

// The performance model's step of a placed mix (a job that names its model).
struct PredictedStep {
  double step_s = 0, compute_s = 0, exposed_comm_s = 0, optimizer_s = 0;
  double tokens_per_s = 0;
  double sum_of_parts_tokens_per_s = 0;  // each type's cards a job of their own, added
  double hybrid_over_parts = 0;
  double cost_per_million_tokens = 0;  // in the catalog currency
  std::string binding;                 // "compute", "communication", "optimizer"
  std::string binding_detail;          // e.g. "gradient allreduce: bridge phase, bound by net (host 3 out)"
  int64_t mixes_evaluated = 0;         // predictions the search made
  int64_t lattice_step = 1;            // 1: every mix was evaluated; > 1: a lattice, then local moves
};

struct Placement {
  std::string zone;
  std::vector<TypeAlloc> by_type;  // types with cards > 0, catalog order
  std::vector<NodeCards> by_node;  // nodes used, by type then fewest nodes first
  int64_t total_cards = 0;
  Throughput total_throughput = 0;
  Money cost_per_hour = 0;
  // Cost per unit of work: cost_per_hour / total_throughput, in money micro-units per (unit of throughput x
  // hour), rounded half up. The exact value is cost_per_hour * kThroughputScale / total_throughput.
  Money cost_per_work_hour = 0;
  ShareUnit unit = ShareUnit::kCards;
  Ppm floor = 0;                           // in force on the request's day
  Ppm share_before = 0;                    // fleet-wide domestic share of running jobs (kPpmScale when nothing runs)
  Ppm share_after = 0;                     // counting this placement
  int solver_rounds = 0;                   // MILPs solved (Dinkelbach rounds for a card count)
  std::optional<PredictedStep> predicted;  // set for a job that names its model
};

enum class Binding {
  kCompatibility,  // no accepted type has nodes / throughput for the job's class
  kBounds,         // a per-type min (or max) cannot be met in any zone
  kCapacity,       // not enough free cards (or throughput) in any single zone
  kFloor,          // the domestic floor cannot be kept in any zone
  kCombination,    // each constraint alone can be met, not all together
};
const char* BindingName(Binding b);  // "compatibility", "bounds", "capacity", "floor", "combination"

struct Infeasible {
  Binding binding = Binding::kCapacity;
  std::string reason;  // "needs 8 domestic cards in one zone to keep the 60.0% floor; zone b has 3 free"
  std::string fix;     // "would fit with at most 3 cards, or with a floor of at most 41.7%"
};

struct PlanResult {
  std::optional<Placement> placement;    // set when placed
  std::optional<Infeasible> infeasible;  // set otherwise
  bool placed() const { return placement.has_value(); }
};

// Plans one job. Errors (bad inputs, solver failure, built without GLPK) are a non-OK Result; a job that
// does not fit is an OK Result holding `infeasible`.
Result<PlanResult> Plan(const PlanRequest& request);

// Plans a running job's move to another mix (the daemon's "Moving running jobs"): the running job named `moving`
// gives its cards back, the others keep theirs, and the job is planned as Plan() plans it. The placement may
// reuse the job's own cards (they are free once it stops) and keeps the floor next to the others. NotFound when
// `moving` is not among request.running.
Result<PlanResult> PlanMove(const PlanRequest& request, const std::string& moving);

// The fleet's domestic share of the running jobs against the floor in force on `day` (for preemption).
struct ShareStatus {
  ShareUnit unit = ShareUnit::kCards;
  Ppm floor = 0;
  Ppm share = 0;               // kPpmScale when nothing runs
  int64_t domestic_units = 0;  // cards, or throughput milli-units
  int64_t total_units = 0;
  bool compliant = true;
};
Result<ShareStatus> FleetShare(const Catalog& catalog, const Fleet& fleet, const Policy& policy,
                               const std::vector<RunningJob>& running, int64_t day);

// ---- billing -----------------------------------------------------------------------------------------

// Per-second rating: cards x seconds x price / 3600, rounded half up to a micro-unit.
Money RateSeconds(Money price_per_card_hour, int64_t cards, int64_t seconds);

struct UsageRecord {
  int64_t id = 0;  // assigned by the ledger
  std::string job;
  std::string tenant;
  std::string type;
  bool domestic = false;
  int64_t cards = 0;
  int64_t start = 0;  // Unix seconds, inclusive
  int64_t end = 0;    // Unix seconds, exclusive; end > start
  std::string price_version;
  Money price_per_card_hour = 0;
  Money amount = 0;  // RateSeconds(price, cards, end - start)
  // The job's attempt this interval belongs to (1, 2, ... as the job daemon numbers them); 0 when not recorded:
  // rows of ledgers from before the attempt column, and `tessera bill record` without --attempt.
  int64_t attempt = 0;
};

// kAttempt: one line per attempt of a job: its rows with one attempt number (and start); rows without a number
// (older ledgers) are grouped by their start — the daemon bills an attempt as one row per island, all with the
// attempt's start and end.
enum class GroupBy { kType, kDay, kJob, kTenant, kAttempt };
Result<GroupBy> ParseGroupBy(const std::string& text);  // "type" | "day" | "job" | "tenant" | "attempt"

struct BillFilter {
  std::optional<std::string> job;
  std::optional<std::string> tenant;
  std::optional<int64_t> from;  // Unix seconds; intervals are clipped to [from, to)
  std::optional<int64_t> to;
};

struct BillLine {
  std::string key;  // type name, "YYYY-MM-DD", job or tenant; kAttempt: "JOB START ATTEMPT" (zero-padded)
  int64_t card_seconds = 0;
  Money amount = 0;
  // kAttempt only: the job, the attempt's start (Unix seconds), its seconds (within the filter's window) and its
  // mix (cards per type).
  std::string job;
  int64_t attempt = 0;  // its rows' attempt number; 0: not recorded (an older ledger's rows)
  int64_t start = 0;
  int64_t seconds = 0;
  std::map<std::string, int64_t> cards_by_type;
};

struct Bill {
  std::vector<BillLine> lines;  // sorted by key
  int64_t card_seconds = 0;
  Money amount = 0;
  std::string currency = "CNY";
};

struct Compliance {
  int64_t day = 0;
  ShareUnit unit = ShareUnit::kCards;
  Ppm floor = 0;
  int64_t domestic_card_seconds = 0;
  int64_t total_card_seconds = 0;
  Ppm share = 0;  // in the policy's unit; kPpmScale when nothing ran
  bool compliant = true;
  std::map<std::string, int64_t> card_seconds_by_type;
};

// An append-only ledger in SQLite (WAL, synchronous=FULL). UPDATE and DELETE are refused by triggers.
// One Ledger per thread; several processes may share the file.
class Ledger {
 public:
  // Creates the ledger, or opens one and brings its schema up to date: a ledger from before the attempt column
  // gets it (its rows keep attempt 0) in one transaction with the schema version, so a crash in the middle leaves
  // the old schema and every row; a ledger of a newer schema is refused, naming both versions.
  static Result<std::unique_ptr<Ledger>> Open(const std::string& path);
  // An existing ledger, for reports: NotFound naming `path` when there is no file, never created or written (an
  // older schema is read as it is: its rows have attempt 0).
  static Result<std::unique_ptr<Ledger>> OpenReadOnly(const std::string& path);
  ~Ledger();
  Ledger(const Ledger&) = delete;
  Ledger& operator=(const Ledger&) = delete;

  // Rates one interval with the catalog's price for `type` and appends it. Returns the stored row.
  // `attempt`: the job's attempt number (> 0), or 0 when there is none.
  Result<UsageRecord> Record(const Catalog& catalog, const std::string& job, const std::string& tenant,
                             const std::string& type, int64_t cards, int64_t start, int64_t end, int64_t attempt = 0);
  // Appends rows whose price fields are already set (amount is recomputed); all or nothing.
  Status Append(std::vector<UsageRecord>* rows);

  Result<std::vector<UsageRecord>> Query(const BillFilter& filter);
  // Amounts of intervals cut by the filter or by day boundaries are split so that parts add up exactly.
  Result<Bill> Report(const BillFilter& filter, GroupBy by);
  // Domestic share of the card-hours used on `day` (UTC) against policy.FloorAt(day). With a throughput
  // unit, card-seconds are weighed by the catalog's throughput for policy.weight_class.
  Result<Compliance> ComplianceReport(int64_t day, const Policy& policy, const Catalog* catalog = nullptr);

  struct Impl;

 private:
  explicit Ledger(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

namespace testing {
// Called inside Ledger::Open's schema upgrade, after the attempt column was added and before the commit (a test
// ends the process there, as a crash would); nullptr removes it.
void SetLedgerUpgradeHook(std::function<void()> hook);
}  // namespace testing

// Whether this build has the solver and the ledger.
bool HaveGlpk();
bool HaveSqlite();

}  // namespace tessera::sched
