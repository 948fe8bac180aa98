// sched/perf_model: a performance model of one training step of a data-parallel hybrid job — islands of
// cards of different vendors and speeds, one global batch split between them, gradients synchronised by
// Tessera's hierarchical algorithm — so that a mix of cards can be judged before it runs (`tessera
// predict`, docs/model.md). Its terms:
//   - the split: the sampler's integer apportioning (Apportion, the C++ twin of python/tessera/split.py);
//   - compute: each rank's share of the global batch at its card's rate (measured tokens/s per card, or
//     FLOP/s × utilisation over 6 × parameters FLOP per token); the step waits for the slowest rank;
//   - communication (perf_collective.cpp): the bytes each rank sends to each peer in every phase of the
//     hierarchical algorithm, taken from comm/schedule's own functions (Shard, Segments, Part, BlocksOf,
//     Contribution: CollectiveLoad), put on links — host memory (shm), the network between hosts (per node: its
//     NICs, rail-aligned), the device bridge of one-card islands on one host, pinned staging over PCIe — with a
//     bandwidth and a latency each; a world of one island uses its vendor library instead (a ring on the island
//     fabric);
//   - the island path, per island and per collective and type, as built (docs/architecture.md, "Islands of
//     several devices"): in a hybrid world a device island of several ranks whose family has a collective
//     library runs its island phases on it and stages only each rank's shard, 16-bit reductions widened to f32
//     on the device (or, IslandReduce::kNative, reduced by the library in their own type); what-ifs: the old
//     host-engine reductions of the pinned-staging families, or every island staged whole (IslandPath);
//   - overlap: the part of the communication hidden behind compute;
//   - the optimizer: on the card (HBM) or offloaded to the host (host memory, PCIe).
// Output: step time, tokens/s, hybrid against the sum of its parts, cost per million tokens, domestic
// share, and which term binds. Pure arithmetic: no I/O; bad input is InvalidArgument naming the value.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "comm/coll_kind.hpp"
#include "comm/schedule.hpp"
#include "sched/sched.hpp"
#include "tessera/status.hpp"

namespace tessera::sched::perf {

// The speed split of `total` samples over ranks of speeds `weights` (each > 0, finite): every rank gets
// one sample, then each further sample goes to the rank that would finish its share soonest with it
// (the smallest (n+1)/w; ties: the smaller n/w, then the lower rank). The same rule and the same
// floating-point comparisons as tessera.split.apportion, which HeteroDistributedSampler uses.
Result<std::vector<int64_t>> Apportion(int64_t total, const std::vector<double>& weights);

// ---- bytes per link, from the schedule -------------------------------------------------------------

// The collectives the model times: comm::CollKind's allreduce, reduce-scatter and allgather (comm::CollName names
// them).
using comm::CollKind;
using comm::CollName;

enum class LinkKind { kShm, kNet, kDevice };  // host memory; between hosts; device bridge (copy engines)
const char* LinkName(LinkKind k);             // "shm", "net", "device"

// Where each rank of a world runs and how its pairs are joined.
struct World {
  comm::IslandRanks islands;        // ranks of each island, sorted (comm/schedule's input)
  std::vector<int> host;            // per rank: its host (node) index
  std::vector<int> local;           // per rank: its index among its host's ranks (its NIC: local % NICs per node)
  std::vector<bool> device_bridge;  // per rank: a one-rank device island on the device bridge
  // Per island: its share of each segment's bridge folds (comm::Part; empty: equal). As Comm::FoldWeights for
  // floating types: beside an island on the device bridge, a device island that stages folds nothing.
  std::vector<int> fold_weights;
  int hosts = 0;
  // The link between two ranks: kDevice when both are on the device bridge and share a host, kShm on one
  // host, kNet otherwise.
  LinkKind Link(int a, int b) const;
};

// One phase of a collective (its steps run one after another): the bytes every rank sends and receives on
// its host (shared memory, or the device bridge's copy engines), the bytes every host sends and receives on
// the network, and the most messages one rank sends.
struct PhaseLoad {
  std::string name;                               // "island reduce-scatter", "bridge", "island allgather", ...
  std::vector<double> local_out, local_in;        // per rank: bytes to / from ranks of its own host
  std::vector<double> net_out, net_in;            // per host: bytes leaving / arriving over the network
  std::vector<double> rank_net_out, rank_net_in;  // per rank: its bytes leaving / arriving over the network
  std::vector<double> sent;                       // per rank: every byte it sends, on any link
  std::vector<int64_t> messages;                  // per rank: its non-empty sends
  int64_t max_messages = 0;                       // per rank, the most non-empty sends
  double total_bytes = 0;                         // every send of the phase
};

// The phases of one call of the hierarchical algorithm (comm/hierarchical.cpp) for `count` elements (per
// rank for reduce-scatter and allgather, as in the C API) of `esz` bytes, accumulated in `asz`-byte
// elements between islands (f32 for 16-bit types), with every send's size from comm/schedule.
std::vector<PhaseLoad> CollectiveLoad(const World& w, CollKind kind, size_t count, size_t esz, size_t asz);

// ---- the scenario --------------------------------------------------------------------------------

struct Links {
  // A rank moves its bytes within a host at shm_gbs (a host rank: its own copies into and out of the shm
  // rings) or device_gbs (a rank on the device bridge: its GPU's copy engines), each direction; a host's
  // network through its nics_per_node NICs of net_gbs each direction, rail-aligned: the rank of local index i
  // on NIC i % nics_per_node, so a host's ranks reach min(nics_per_node, ranks on it) x net_gbs together.
  double shm_gbs = 0;          // GB/s (1e9 B/s) per host rank on shared memory
  double net_gbs = 0;          // GB/s per NIC on the network between hosts (each direction)
  double device_gbs = 0;       // GB/s of the device bridge per card (each direction)
  double pcie_gbs = 0;         // GB/s of pinned host<->device copies per card (staging, offload)
  double latency_s = 0;        // per message, shm and network
  int64_t cores_per_host = 0;  // > 0: host ranks beyond this many per host share the cores (shm_gbs scaled)
  int64_t nics_per_node = 1;   // NICs of net_gbs each per host (>= 1)
};

struct IslandSpec {
  std::string type;  // catalog type (price, domestic), or any label without a catalog
  int64_t cards = 0;
  int64_t cards_per_node = 8;
  bool device = true;       // device ranks (false: host ranks: no staging, no device bridge)
  std::string family;       // device family (common/vendor: "cuda", "npu", "musa", "emu"; "" unnamed: taken to
                            // have the device bridge and a collective library, as cuda has)
  double tokens_per_s = 0;  // per card, measured; 0: from tflops × mfu
  double split_weight = 0;  // the speed the sampler is given for its cards (0: their rate): a split from
                            // a stale calibration
  double tflops = 0;        // per card, dense 16-bit peak (public spec)
  double mfu = 0;           // model FLOP utilisation (0, 1]
  double fabric_gbs = 0;    // island fabric per card (NVLink, HCCS) for the vendor library's ring
  double hbm_gbs = 0;       // per card memory bandwidth (optimizer on the card)
  Money price_per_card_hour = 0;
  bool domestic = false;
};

struct ModelSpec {
  double params = 0;                      // parameters
  int grad_bytes = 2;                     // bytes per gradient element (2: bf16/f16, 4: f32)
  int param_bytes = 2;                    // bytes per parameter as the cards hold it (ZeRO's allgathers)
  int zero = 0;                           // ZeRO stage 0..3 (0 and 1: one allreduce per step; 2: a reduce-scatter per
                                          // micro-batch; 3: also two allgathers of the parameters per micro-batch)
  bool offload = false;                   // optimizer states and step on the host (ZeRO-Offload)
  int64_t seq = 0;                        // tokens per sequence
  int64_t batch = 0;                      // sequences per micro-batch, the whole world (what Apportion splits)
  int64_t accum = 1;                      // micro-batches per step
  double overlap = 0;                     // [0, 1]: part of the communication that hides behind compute (the window:
                                          // the last micro-batch's backward for stages 0-1, the whole step for 2-3)
  double backward_share = 2.0 / 3.0;      // of a micro-batch's compute
  double optimizer_bytes_per_param = 32;  // AdamW on the card: read and write of p, g, m, v (f32)
  double host_adam_gbs = 0;               // offload: host memory bandwidth per node for the optimizer
  double host_bytes_per_param = 32;       // offload: the same traffic on the host
};

// How a hybrid world's device islands of several ranks run the island phases.
enum class IslandPath {
  kAsBuilt,     // on the island's library where its family has one (HasCollectiveLibrary), 16-bit reductions
                // widened to f32 on the device (or native, IslandReduce); else staged whole on the host engine
  kHostReduce,  // what-if: as built, but the 16-bit reductions of a family without the device bridge (the pinned-
                // staging rank: npu, musa) staged whole on the host engine — the code before those rows widened on
                // the device, and what it does where the operator library (libopapi) is missing
  kHost,        // what-if: every one staged whole on the host engine (the code before 4d8e064)
};
const char* IslandPathName(IslandPath p);  // "as built", "host reduce", "host"

// How an island's library reduces 16-bit data (TESSERA_ISLAND_REDUCE): kF32 widened to f32 on the device first (the
// island ring carries f32: twice the 16-bit bytes); kNative in its own type (the ring carries 16-bit, and each
// rank's shard comes down in 16-bit to be widened on the host). Either way the shard crosses the bridge as f32
// partial sums and the cross-island fold is f32.
enum class IslandReduce { kF32, kNative };
const char* IslandReduceName(IslandReduce r);  // "f32", "native"

// Capabilities of a device family, from its rows (common/vendor, comm/runtime); "" (unnamed) has both.
// The device bridge (DeviceBridgeRank): the runtime row maps host memory and has stream memory operations (cuda, emu);
// the others stage through pinned memory (StagedRank: npu, musa).
bool HasDeviceBridge(const std::string& family);
// A collective library row (nccl, hccl, mccl): every family but emu.
bool HasCollectiveLibrary(const std::string& family);

// The device family of a catalog vendor ("nvidia" -> "cuda", "ascend" -> "npu", "mthreads"/"moore-threads" ->
// "musa", or a family's own prefix), "" for a vendor this table does not know.
std::string FamilyOfVendor(const std::string& vendor);

struct Scenario {
  std::vector<IslandSpec> islands;  // in rank order
  ModelSpec model;
  Links links;
  bool one_host = false;  // every rank on one host (the H200 experiment, the CPU jobs)
  // One-card device islands of a family with the device bridge use it where every rank is on one host
  // (TESSERA_DEVICE_BRIDGE=auto: each island decides alone); false: they stage (=staged).
  bool device_bridge = true;
  IslandPath island_path = IslandPath::kAsBuilt;    // see IslandPath
  IslandReduce island_reduce = IslandReduce::kF32;  // see IslandReduce
  bool sum_of_parts = true;  // false: leave Prediction::sum_of_parts_tokens_per_s and hybrid_over_parts 0
};

// One collective of the step: what it moves and how long it takes; `phases` in order.
struct CollectiveCost {
  std::string name;  // "gradient allreduce", ...
  CollKind kind = CollKind::kAllReduce;
  double bytes = 0;    // the buffer (per rank's input for allreduce; the whole for the others)
  int64_t calls = 0;   // per step
  double seconds = 0;  // per call
  struct Phase {
    std::string name;
    double seconds = 0;
    std::string bound;  // "net (host 3 out)", "shm (host 0)", "device (rank 1)", "latency", "fabric"
  };
  std::vector<Phase> phases;
  double staging_s = 0;  // pinned copies of a staged device rank (overlapped chunk by chunk)
  // How each island ran this call (in island order).
  struct Island {
    std::string path;         // "library": island phases on its library; "host": on the host engine; "one rank":
                              // no island phases; "one island": a world of one island (its library, or the host)
    bool widened = false;     // a 16-bit reduction reduce-scattered in f32 on the device (its partial sums: f32)
    bool native = false;      // a 16-bit reduction reduce-scattered by the library in its own type (IslandReduce)
    double staged_bytes = 0;  // per rank, the most one of its ranks copies one way over PCIe (0: none)
    double ring_bytes = 0;    // per rank, the most one of its ranks sends in its library's island phases
    std::string why;          // why a device island of several ranks is on the host engine ("" otherwise)
  };
  std::vector<Island> islands;
};

struct Prediction {
  std::vector<int64_t> split;       // samples per micro-batch, per island (the sum over its ranks)
  std::vector<int64_t> rank_split;  // per rank
  double compute_s = 0;             // slowest rank's compute of the step
  int slowest_island = 0;
  double comm_s = 0;          // every collective of the step, end to end
  double hidden_s = 0;        // of it, behind compute
  double exposed_comm_s = 0;  // comm_s - hidden_s
  double optimizer_s = 0;
  double step_s = 0;
  double tokens_per_step = 0;
  double tokens_per_s = 0;
  std::vector<double> island_tokens_per_s;  // each island's tokens / step time
  double sum_of_parts_tokens_per_s = 0;     // each island as a job of its own, added
  double hybrid_over_parts = 0;
  Money cost_per_hour = 0;
  double cost_per_million_tokens = 0;  // in the catalog currency
  double domestic_card_share = 0;      // domestic cards / cards
  double domestic_compute_share = 0;   // domestic cards' compute rate / all
  std::string binding;                 // "compute", "communication", "optimizer"
  std::string binding_detail;          // e.g. "net (host 9 in) in the island allgather of the parameters"
  std::vector<CollectiveCost> collectives;
};

// The world (ranks, hosts, device-bridge ranks) of a scenario: islands in order, each island's cards
// packed on nodes of its own (`cards_per_node` each), or all on host 0 with one_host.
Result<World> WorldOf(const Scenario& s);

// Checks the scenario (every count and rate positive where needed, fractions in range), naming the bad
// field and value.
Status Check(const Scenario& s);

// One call of a collective in the scenario's world (`count` elements per rank for reduce-scatter and
// allgather, of the whole buffer for allreduce; `esz` bytes each).
Result<CollectiveCost> CallCost(const Scenario& s, CollKind kind, size_t count, size_t esz);
// The same in the world `w` of `s` (WorldOf), named `name`, `calls` per step.
Result<CollectiveCost> CallCost(const Scenario& s, const World& w, const std::string& name, CollKind kind, size_t count,
                                size_t esz, int64_t calls);

// The step of the scenario, and each island as a job of its own for the sum of the parts.
Result<Prediction> Predict(const Scenario& s);

// Prices and domesticity from the catalog for islands whose `type` names a catalog type; NotFound naming
// the type otherwise.
Status FillFromCatalog(const Catalog& catalog, Scenario* s);

// ---- the planner's use: a job that names its model ----------------------------------------------------

// "1.5e11", "151943168", "130B", "7.5M", "512K" -> a non-negative number; InvalidArgument "`what`: 'text' is
// not a non-negative number" otherwise.
Result<double> ParseQuantity(const std::string& what, const std::string& text);

// A training setup a job can name (job `model.class`): everything of ModelSpec but the parameters (the job's
// `model.params`) and the micro-batch (seqs_per_card x the job's cards). bf16 gradients and parameters.
struct ModelClass {
  const char* name;
  int zero;
  bool offload;
  double overlap;
  int64_t seq;            // tokens per sequence
  int64_t seqs_per_card;  // sequences per card per micro-batch
  int64_t accum;          // micro-batches per step
};
const std::vector<ModelClass>& ModelClasses();  // dp, zero1, zero2, zero3, zero3-offload
// InvalidArgument "'NAME' is not a model class (one of: dp, ...)" for an unknown name.
Result<ModelClass> FindModelClass(const std::string& name);

// The scenario of cards[i] cards of *types[i] (islands in that order; types with 0 cards left out), each
// type's cards on nodes of their own, training `model` with the catalog's figures (types[i]->model, catalog
// .model). InvalidArgument naming the type without figures, or the catalog without host figures.
Result<Scenario> MixScenario(const Catalog& catalog, const JobModel& model,
                             const std::vector<const AcceleratorType*>& types, const std::vector<int64_t>& cards);

}  // namespace tessera::sched::perf
