// examples/trainer: a small data-parallel trainer that shows Tessera end to end.
//
// A 64-H-10 MLP (tanh, softmax cross-entropy, SGD with momentum) on the digits data set from Debian's
// python3-sklearn (/usr/lib/python3/dist-packages/sklearn/datasets/data/digits.csv.gz), or on generated
// data when that file is absent. Every rank holds the whole model. Step t uses global batch t of a
// deterministic order; the batch is split between islands in proportion to (island speed weight x island
// ranks) — weights from --weights or TESSERA_ISLAND_WEIGHTS, which the daemon sets from the catalog — and
// evenly inside an island. Each rank sums its samples' gradients, one tsrAllReduce (f32, sum) adds them,
// and the sum is divided by the global batch: the same mathematics as one large batch, whatever the layout.
//
// Checkpoints (tessera/ckpt.hpp) every K steps into --ckpt-dir / TESSERA_CKPT_ROOT; a start with
// --resume-from / TESSERA_RESUME_FROM (".../step-0000000150") continues after that step. On SIGTERM every
// rank finishes the current step, agrees (inside the same allreduce) to stop, saves a checkpoint, waits
// for it to commit and exits with 143; nothing beyond the checkpoint is lost.
//
// Output: rank 0 prints "step S/N loss L" every --print-every steps and, with --loss-out, appends
// "S L HEXBITS" for every step (the loss as float bits, for bit-identity checks). At the end it prints
// "final params fnv1a=..." (a hash of the parameter bits).
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#ifdef TESSERA_EXAMPLE_HAVE_ZLIB
#include <zlib.h>
#endif

#include "tessera/ckpt.hpp"
#include "tessera/tessera.h"

namespace {

std::atomic<int> g_term{0};
void OnTerm(int) { g_term = 1; }

struct Options {
  int64_t steps = 300;
  int64_t batch = 64;
  int hidden = 32;
  float lr = 0.05f;
  float momentum = 0.9f;
  uint64_t seed = 1;
  int64_t ckpt_every = 50;
  std::string ckpt_dir;
  std::string resume_from;
  std::string weights;
  std::string loss_out;
  std::string data = "auto";  // auto | digits | synthetic
  int64_t print_every = 10;
  int64_t step_delay_ms = 0;
};

[[noreturn]] void Die(const std::string& msg) {
  std::fprintf(stderr, "trainer: %s\n", msg.c_str());
  std::exit(2);
}

const char* EnvOr(const char* name, const char* fallback) {
  const char* v = std::getenv(name);
  return v && *v ? v : fallback;
}

int64_t ParseInt(const std::string& flag, const std::string& v) {
  char* end = nullptr;
  long long x = std::strtoll(v.c_str(), &end, 10);
  if (v.empty() || *end) Die(flag + "='" + v + "' is not an integer");
  return x;
}
float ParseFloat(const std::string& flag, const std::string& v) {
  char* end = nullptr;
  float x = std::strtof(v.c_str(), &end);
  if (v.empty() || *end) Die(flag + "='" + v + "' is not a number");
  return x;
}

Options ParseArgs(int argc, char** argv) {
  Options o;
  o.ckpt_every = ParseInt("TESSERA_CKPT_EVERY", EnvOr("TESSERA_CKPT_EVERY", "50"));
  o.ckpt_dir = EnvOr("TESSERA_CKPT_ROOT", "");
  o.resume_from = EnvOr("TESSERA_RESUME_FROM", "");
  o.weights = EnvOr("TESSERA_ISLAND_WEIGHTS", "");
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto val = [&]() -> std::string {
      if (i + 1 >= argc) Die(a + " needs a value");
      return argv[++i];
    };
    if (a == "--steps")
      o.steps = ParseInt(a, val());
    else if (a == "--batch")
      o.batch = ParseInt(a, val());
    else if (a == "--hidden")
      o.hidden = static_cast<int>(ParseInt(a, val()));
    else if (a == "--lr")
      o.lr = ParseFloat(a, val());
    else if (a == "--momentum")
      o.momentum = ParseFloat(a, val());
    else if (a == "--seed")
      o.seed = static_cast<uint64_t>(ParseInt(a, val()));
    else if (a == "--ckpt-every")
      o.ckpt_every = ParseInt(a, val());
    else if (a == "--ckpt-dir")
      o.ckpt_dir = val();
    else if (a == "--resume-from")
      o.resume_from = val();
    else if (a == "--weights")
      o.weights = val();
    else if (a == "--loss-out")
      o.loss_out = val();
    else if (a == "--data")
      o.data = val();
    else if (a == "--print-every")
      o.print_every = ParseInt(a, val());
    else if (a == "--step-delay-ms")
      o.step_delay_ms = ParseInt(a, val());
    else if (a == "--help" || a == "-h") {
      std::printf(
          "usage: tessera run --island ... -- trainer [--steps N] [--batch B] [--hidden H] [--lr X] [--momentum M]\n"
          "       [--seed S] [--ckpt-every K] [--ckpt-dir DIR] [--resume-from DIR/step-N] [--weights W0,W1,...]\n"
          "       [--loss-out FILE] [--data auto|digits|synthetic] [--print-every N] [--step-delay-ms MS]\n");
      std::exit(0);
    } else {
      Die("unknown option '" + a + "' (see --help)");
    }
  }
  if (o.steps < 1 || o.batch < 1 || o.hidden < 1 || o.ckpt_every < 0 || o.print_every < 1)
    Die("--steps, --batch, --hidden and --print-every must be >= 1, --ckpt-every >= 0");
  return o;
}

// ---- data ---------------------------------------------------------------------------------------------

constexpr int kIn = 64, kOut = 10;

struct Data {
  std::vector<float> x;  // n x 64
  std::vector<int> y;
  std::string name;
  size_t n() const { return y.size(); }
};

bool LoadDigits(Data* d) {
#ifdef TESSERA_EXAMPLE_HAVE_ZLIB
  const char* path = "/usr/lib/python3/dist-packages/sklearn/datasets/data/digits.csv.gz";
  gzFile f = gzopen(path, "rb");
  if (!f) return false;
  char line[4096];
  while (gzgets(f, line, sizeof line)) {
    std::vector<float> row;
    char* p = line;
    while (*p && *p != '\n') {
      char* end = nullptr;
      float v = std::strtof(p, &end);
      if (end == p) break;
      row.push_back(v);
      p = end;
      if (*p == ',') ++p;
    }
    if (row.size() != kIn + 1) continue;
    for (int i = 0; i < kIn; ++i) d->x.push_back(row[static_cast<size_t>(i)] / 16.0f);
    d->y.push_back(static_cast<int>(row[kIn]));
  }
  gzclose(f);
  d->name = std::string("digits (") + path + ")";
  return d->n() > 0;
#else
  (void)d;
  return false;
#endif
}

// Ten classes, each a fixed random prototype plus noise; integer-only generator so every platform agrees.
void MakeSynthetic(Data* d, uint64_t seed) {
  std::mt19937_64 rng(seed * 7919 + 17);
  auto uni = [&] { return static_cast<float>(rng() >> 40) / static_cast<float>(1 << 24); };
  std::vector<float> proto(kOut * kIn);
  for (auto& v : proto) v = uni();
  for (int i = 0; i < 2000; ++i) {
    int c = static_cast<int>(rng() % kOut);
    for (int k = 0; k < kIn; ++k) d->x.push_back(proto[static_cast<size_t>(c * kIn + k)] + 0.5f * (uni() - 0.5f));
    d->y.push_back(c);
  }
  d->name = "synthetic (10 noisy prototypes, 2000 samples)";
}

// ---- model --------------------------------------------------------------------------------------------

struct Model {
  int h;
  size_t w1, b1, w2, b2, size;  // offsets into one flat parameter vector
  explicit Model(int hidden) : h(hidden) {
    w1 = 0;
    b1 = w1 + static_cast<size_t>(h * kIn);
    w2 = b1 + static_cast<size_t>(h);
    b2 = w2 + static_cast<size_t>(kOut * h);
    size = b2 + kOut;
  }
};

void InitParams(const Model& m, std::vector<float>* p, uint64_t seed) {
  std::mt19937_64 rng(seed);
  auto uni = [&] { return static_cast<float>(rng() >> 40) / static_cast<float>(1 << 24) * 2.0f - 1.0f; };
  p->assign(m.size, 0.0f);
  float s1 = 1.0f / std::sqrt(static_cast<float>(kIn)), s2 = 1.0f / std::sqrt(static_cast<float>(m.h));
  for (size_t i = m.w1; i < m.b1; ++i) (*p)[i] = uni() * s1;
  for (size_t i = m.w2; i < m.b2; ++i) (*p)[i] = uni() * s2;
}

// Adds sample (x, y)'s gradient to g (double accumulators) and returns its loss.
double Backprop(const Model& m, const std::vector<float>& p, const float* x, int y, std::vector<double>* g) {
  std::vector<float> hid(static_cast<size_t>(m.h));
  for (int j = 0; j < m.h; ++j) {
    float a = p[m.b1 + static_cast<size_t>(j)];
    const float* w = &p[m.w1 + static_cast<size_t>(j * kIn)];
    for (int k = 0; k < kIn; ++k) a += w[k] * x[k];
    hid[static_cast<size_t>(j)] = std::tanh(a);
  }
  float logits[kOut];
  float mx = -1e30f;
  for (int o = 0; o < kOut; ++o) {
    float a = p[m.b2 + static_cast<size_t>(o)];
    const float* w = &p[m.w2 + static_cast<size_t>(o * m.h)];
    for (int j = 0; j < m.h; ++j) a += w[j] * hid[static_cast<size_t>(j)];
    logits[o] = a;
    mx = std::max(mx, a);
  }
  double z = 0;
  for (int o = 0; o < kOut; ++o) z += std::exp(static_cast<double>(logits[o] - mx));
  double loss = std::log(z) - static_cast<double>(logits[y] - mx);
  std::vector<double> dh(static_cast<size_t>(m.h), 0.0);
  for (int o = 0; o < kOut; ++o) {
    double d = std::exp(static_cast<double>(logits[o] - mx)) / z - (o == y ? 1.0 : 0.0);
    (*g)[m.b2 + static_cast<size_t>(o)] += d;
    for (int j = 0; j < m.h; ++j) {
      (*g)[m.w2 + static_cast<size_t>(o * m.h + j)] += d * hid[static_cast<size_t>(j)];
      dh[static_cast<size_t>(j)] += d * p[m.w2 + static_cast<size_t>(o * m.h + j)];
    }
  }
  for (int j = 0; j < m.h; ++j) {
    double da = dh[static_cast<size_t>(j)] *
                (1.0 - static_cast<double>(hid[static_cast<size_t>(j)]) * hid[static_cast<size_t>(j)]);
    (*g)[m.b1 + static_cast<size_t>(j)] += da;
    for (int k = 0; k < kIn; ++k) (*g)[m.w1 + static_cast<size_t>(j * kIn + k)] += da * x[k];
  }
  return loss;
}

// The sample order: epoch e is a Fisher-Yates shuffle seeded by (seed, e).
class Order {
 public:
  Order(size_t n, uint64_t seed) : n_(n), seed_(seed) {}
  size_t At(int64_t global_index) {
    int64_t e = global_index / static_cast<int64_t>(n_);
    if (e != epoch_) {
      perm_.resize(n_);
      for (size_t i = 0; i < n_; ++i) perm_[i] = i;
      std::mt19937_64 rng(seed_ * 1000003ULL + static_cast<uint64_t>(e));
      for (size_t i = n_ - 1; i > 0; --i) std::swap(perm_[i], perm_[rng() % (i + 1)]);
      epoch_ = e;
    }
    return perm_[static_cast<size_t>(global_index % static_cast<int64_t>(n_))];
  }

 private:
  size_t n_;
  uint64_t seed_;
  int64_t epoch_ = -1;
  std::vector<size_t> perm_;
};

uint64_t Fnv1a(const std::vector<float>& v) {
  uint64_t h = 1469598103934665603ULL;
  const auto* b = reinterpret_cast<const unsigned char*>(v.data());
  for (size_t i = 0; i < v.size() * sizeof(float); ++i) h = (h ^ b[i]) * 1099511628211ULL;
  return h;
}

void Check(tsrResult_t r, tsrComm_t comm, const char* what) {
  if (r != tsrSuccess) Die(std::string(what) + ": " + tsrGetErrorString(r) + ": " + tsrGetLastError(comm));
}

void CheckStatus(const tessera::Status& s, const char* what) {
  if (!s.ok()) Die(std::string(what) + ": " + s.ToString());
}

}  // namespace

int main(int argc, char** argv) {
  Options o = ParseArgs(argc, argv);
  struct sigaction sa {};
  sa.sa_handler = OnTerm;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGINT, &sa, nullptr);

  tsrComm_t comm = nullptr;
  Check(tsrCommInitFromEnv(&comm), nullptr, "tsrCommInitFromEnv");
  int rank = 0, world = 1, island = 0;
  Check(tsrCommRank(comm, &rank), comm, "tsrCommRank");
  Check(tsrCommSize(comm, &world), comm, "tsrCommSize");
  Check(tsrCommIsland(comm, &island), comm, "tsrCommIsland");

  // Every rank's island, to split the batch.
  std::vector<int32_t> islands(static_cast<size_t>(world));
  int32_t mine = island;
  Check(tsrAllGather(&mine, islands.data(), 1, tsrInt32, comm, nullptr), comm, "tsrAllGather(islands)");
  int n_islands = 0;
  for (int32_t i : islands) n_islands = std::max(n_islands, i + 1);
  std::vector<int64_t> island_ranks(static_cast<size_t>(n_islands), 0);
  for (int32_t i : islands) island_ranks[static_cast<size_t>(i)]++;
  std::vector<double> weight(static_cast<size_t>(n_islands), 1.0);
  if (!o.weights.empty()) {
    std::string w = o.weights + ",";
    size_t pos = 0;
    for (int i = 0; i < n_islands; ++i) {
      size_t c = w.find(',', pos);
      if (c == std::string::npos)
        Die("--weights/TESSERA_ISLAND_WEIGHTS='" + o.weights + "' has fewer entries than the " +
            std::to_string(n_islands) + " islands");
      weight[static_cast<size_t>(i)] = ParseFloat("--weights", w.substr(pos, c - pos));
      if (weight[static_cast<size_t>(i)] <= 0) Die("--weights: every weight must be > 0");
      pos = c + 1;
    }
  }
  // Island shares of the global batch by largest remainder (deterministic), then an even split inside.
  std::vector<int64_t> share(static_cast<size_t>(n_islands), 0);
  {
    double total = 0;
    for (int i = 0; i < n_islands; ++i)
      total += weight[static_cast<size_t>(i)] * static_cast<double>(island_ranks[static_cast<size_t>(i)]);
    std::vector<std::pair<double, int>> rem;
    int64_t given = 0;
    for (int i = 0; i < n_islands; ++i) {
      double exact = static_cast<double>(o.batch) * weight[static_cast<size_t>(i)] *
                     static_cast<double>(island_ranks[static_cast<size_t>(i)]) / total;
      share[static_cast<size_t>(i)] = static_cast<int64_t>(std::floor(exact));
      given += share[static_cast<size_t>(i)];
      rem.push_back({exact - std::floor(exact), i});
    }
    std::sort(rem.begin(), rem.end(),
              [](auto& a, auto& b) { return a.first != b.first ? a.first > b.first : a.second < b.second; });
    for (size_t k = 0; given < o.batch; ++k, ++given) share[static_cast<size_t>(rem[k % rem.size()].second)]++;
  }
  // My contiguous range [begin, begin + count) of the global batch: islands in order, ranks in order inside.
  int64_t begin = 0, count = 0;
  {
    for (int i = 0; i < island; ++i) begin += share[static_cast<size_t>(i)];
    int64_t idx = 0;  // my index inside my island
    for (int r = 0; r < rank; ++r)
      if (islands[static_cast<size_t>(r)] == island) ++idx;
    int64_t n = island_ranks[static_cast<size_t>(island)], s = share[static_cast<size_t>(island)];
    for (int64_t k = 0; k < idx; ++k) begin += s / n + (k < s % n ? 1 : 0);
    count = s / n + (idx < s % n ? 1 : 0);
  }

  Data data;
  if (o.data == "digits" || o.data == "auto") {
    if (!LoadDigits(&data) && o.data == "digits") Die("--data digits: python3-sklearn's digits.csv.gz is not readable");
  }
  if (data.n() == 0) MakeSynthetic(&data, o.seed);
  Model model(o.hidden);
  std::vector<float> params, mom(model.size, 0.0f);
  InitParams(model, &params, o.seed);

  int64_t start_step = 0;
  if (!o.resume_from.empty()) {
    std::string path = o.resume_from;
    while (path.size() > 1 && path.back() == '/') path.pop_back();
    size_t slash = path.rfind('/');
    std::string root = slash == std::string::npos ? "." : path.substr(0, slash);
    std::string leaf = slash == std::string::npos ? path : path.substr(slash + 1);
    if (leaf.rfind("step-", 0) != 0)
      Die("TESSERA_RESUME_FROM='" + o.resume_from + "' does not name a step-N directory");
    start_step = ParseInt("TESSERA_RESUME_FROM step", leaf.substr(5));
    std::vector<tessera::ckpt::TensorSlot> slots = {{"params", params.data(), params.size() * sizeof(float), 0, -1},
                                                    {"momentum", mom.data(), mom.size() * sizeof(float), 0, -1}};
    CheckStatus(tessera::ckpt::Restore(root, start_step, slots), "restore");
  }

  std::unique_ptr<tessera::ckpt::CheckpointWriter> writer;
  if (!o.ckpt_dir.empty() && o.ckpt_every >= 0) {
    auto w = tessera::ckpt::CheckpointWriter::Open(o.ckpt_dir, rank, world);
    CheckStatus(w.status(), "open checkpoint writer");
    writer = std::move(w).value();
  }
  auto save = [&](int64_t step) {
    if (!writer) return;
    const auto f32 = static_cast<tessera::DType>(tsrFloat32);
    std::vector<tessera::ckpt::TensorView> t = {
        {"params",
         f32,
         {static_cast<int64_t>(params.size())},
         params.data(),
         tessera::ckpt::Sharding::kReplicated,
         0,
         -1},
        {"momentum", f32, {static_cast<int64_t>(mom.size())}, mom.data(), tessera::ckpt::Sharding::kReplicated, 0, -1}};
    CheckStatus(writer->Save(step, t), "save checkpoint");
  };

  FILE* loss_out = nullptr;
  if (rank == 0) {
    std::printf("trainer: %d ranks in %d island(s); data %s; model 64-%d-10 (%zu parameters); global batch %lld%s\n",
                world, n_islands, data.name.c_str(), o.hidden, model.size, static_cast<long long>(o.batch),
                start_step ? (", resuming after step " + std::to_string(start_step)).c_str() : "");
    for (int i = 0; i < n_islands; ++i)
      std::printf("trainer: island %d: %lld rank(s), speed weight %.3f, %lld samples per step\n", i,
                  static_cast<long long>(island_ranks[static_cast<size_t>(i)]), weight[static_cast<size_t>(i)],
                  static_cast<long long>(share[static_cast<size_t>(i)]));
    std::fflush(stdout);
    if (!o.loss_out.empty()) {
      loss_out = std::fopen(o.loss_out.c_str(), "a");
      if (!loss_out) Die("cannot open --loss-out " + o.loss_out);
    }
  }

  Order order(data.n(), o.seed);
  std::vector<double> gacc(model.size);
  std::vector<float> buf(model.size + 2);  // gradient sums, loss sum, stop votes
  int64_t step = start_step;
  bool stopped = false;
  while (step < o.steps) {
    std::fill(gacc.begin(), gacc.end(), 0.0);
    double loss = 0;
    for (int64_t k = 0; k < count; ++k) {
      size_t s = order.At(step * o.batch + begin + k);
      loss += Backprop(model, params, &data.x[s * kIn], data.y[s], &gacc);
    }
    for (size_t i = 0; i < model.size; ++i) buf[i] = static_cast<float>(gacc[i]);
    buf[model.size] = static_cast<float>(loss);
    buf[model.size + 1] = g_term.load() ? 1.0f : 0.0f;
    Check(tsrAllReduce(buf.data(), buf.data(), buf.size(), tsrFloat32, tsrSum, comm, nullptr), comm, "tsrAllReduce");
    const float inv = 1.0f / static_cast<float>(o.batch);
    for (size_t i = 0; i < model.size; ++i) {
      mom[i] = o.momentum * mom[i] + buf[i] * inv;
      params[i] -= o.lr * mom[i];
    }
    ++step;
    float mean_loss = buf[model.size] * inv;
    if (rank == 0) {
      if (loss_out) {
        uint32_t bits;
        std::memcpy(&bits, &mean_loss, 4);
        std::fprintf(loss_out, "%lld %.9e %08x\n", static_cast<long long>(step), static_cast<double>(mean_loss), bits);
        std::fflush(loss_out);
      }
      if (step % o.print_every == 0 || step == o.steps)
        std::printf("step %lld/%lld loss %.6f\n", static_cast<long long>(step), static_cast<long long>(o.steps),
                    static_cast<double>(mean_loss)),
            std::fflush(stdout);
    }
    bool stop = buf[model.size + 1] > 0.0f;  // every rank sees the same votes: all stop after the same step
    if (stop || (o.ckpt_every > 0 && step % o.ckpt_every == 0 && step < o.steps)) save(step);
    if (stop) {
      stopped = true;
      break;
    }
    if (o.step_delay_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(o.step_delay_ms));
  }
  if (!stopped && step > start_step) save(step);
  if (writer) CheckStatus(writer->Wait(), "commit checkpoint");
  if (rank == 0) {
    if (stopped)
      std::printf("trainer: SIGTERM: checkpoint of step %lld committed; exiting to be resumed\n",
                  static_cast<long long>(step));
    std::printf("final params fnv1a=%016llx after step %lld\n", static_cast<unsigned long long>(Fnv1a(params)),
                static_cast<long long>(step));
    std::fflush(stdout);
  }
  if (loss_out) std::fclose(loss_out);
  tsrCommDestroy(comm);
  return stopped ? 143 : 0;
}
