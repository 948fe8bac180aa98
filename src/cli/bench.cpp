// cli/bench: `tessera bench allreduce|reduce_scatter|allgather|broadcast`, the collective benchmark, run
// under `tessera run` (one process per rank). Output as nccl-tests (size, count, type, redop, time, algbw,
// busbw, #wrong), from rank 0. Uses only the public C API (tessera/tessera.h) and src/common.
//
// Timing: every iteration is bracketed by tsrBarrier; a row's time is the median over iterations of the
// slowest rank's time. algbw = bytes / time; busbw = algbw * 2(n-1)/n (allreduce), (n-1)/n (reduce_scatter,
// allgather), 1 (broadcast). For reduce_scatter and allgather, size is the whole n-block buffer.
// --check: every rank fills its input from a deterministic generator of (seed, rank, index), so each rank
// computes the f64 reference of its result locally. An element is wrong when its error exceeds one final
// rounding to the output type plus f32 accumulation (n * 2^-24 * sum|x_i|) for floats, or is not exact for
// integers. The 64-bit hashes of every rank's result are allgathered to verify bit-identity.
#include <fmt/format.h>
#include <sys/utsname.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "cli/command.hpp"
#include "cli/exit_code.hpp"
#include "common/dtype.hpp"
#include "common/env.hpp"
#include "common/machine.hpp"
#include "tessera/status.hpp"
#include "tessera/tessera.h"

#ifndef TESSERA_GIT_COMMIT
#define TESSERA_GIT_COMMIT "unknown"
#endif

namespace tessera::cli {
namespace {

using Clock = std::chrono::steady_clock;

enum class Coll { kAllReduce, kReduceScatter, kAllGather, kBroadcast };

const char* CollName(Coll c) {
  switch (c) {
    case Coll::kAllReduce:
      return "allreduce";
    case Coll::kReduceScatter:
      return "reduce_scatter";
    case Coll::kAllGather:
      return "allgather";
    case Coll::kBroadcast:
      return "broadcast";
  }
  return "?";
}

double BusFactor(Coll c, int n) {
  if (n <= 1) return c == Coll::kBroadcast ? 1.0 : 0.0;
  switch (c) {
    case Coll::kAllReduce:
      return 2.0 * (n - 1) / n;
    case Coll::kReduceScatter:
    case Coll::kAllGather:
      return 1.0 * (n - 1) / n;
    case Coll::kBroadcast:
      return 1.0;
  }
  return 1.0;
}

// ---- options --------------------------------------------------------------------------------------

struct Options {
  Coll coll = Coll::kAllReduce;
  std::vector<uint64_t> sizes;
  int iters = 20;
  int warmup = 3;
  DType dtype = DType::kFloat32;
  RedOp op = RedOp::kSum;
  bool check = false;
  bool verbose = false;
  int root = 0;
  uint64_t seed = 1;
  std::string json;
};

// A comma-separated list of byte sizes and ranges: "16M,64M,256M", "1K:256M:x4" (multiply by 4),
// "1M:8M:+1M" (add 1M). Units as TESSERA_* byte sizes (K, M, G are binary).
Result<std::vector<uint64_t>> ParseSizes(const std::string& text) {
  std::vector<uint64_t> out;
  if (text.empty()) return InvalidArgument("--sizes is empty (use e.g. 16M,64M or 1K:256M:x4)");
  size_t start = 0;
  while (true) {
    size_t comma = text.find(',', start);
    std::string item = text.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    if (item.empty()) return InvalidArgument(fmt::format("--sizes='{}' has an empty item", text));
    size_t c1 = item.find(':');
    if (c1 == std::string::npos) {
      TSR_ASSIGN_OR_RETURN(uint64_t s, env::ParseBytes("--sizes", item));
      out.push_back(s);
    } else {
      size_t c2 = item.find(':', c1 + 1);
      TSR_ASSIGN_OR_RETURN(uint64_t lo, env::ParseBytes("--sizes range start", item.substr(0, c1)));
      TSR_ASSIGN_OR_RETURN(
          uint64_t hi, env::ParseBytes("--sizes range end",
                                       item.substr(c1 + 1, c2 == std::string::npos ? std::string::npos : c2 - c1 - 1)));
      std::string step = c2 == std::string::npos ? "x2" : item.substr(c2 + 1);
      if (lo > hi) return InvalidArgument(fmt::format("--sizes range '{}' starts above its end", item));
      if (step.size() < 2 || (step[0] != 'x' && step[0] != '+'))
        return InvalidArgument(fmt::format("--sizes range '{}': step '{}' must be xFACTOR or +BYTES", item, step));
      if (step[0] == 'x') {
        char* end = nullptr;
        double f = std::strtod(step.c_str() + 1, &end);
        if (*end != '\0' || !(f > 1.0))
          return InvalidArgument(fmt::format("--sizes range '{}': factor '{}' must be a number > 1", item, step));
        if (lo == 0) out.push_back(0), lo = 1;
        for (double s = static_cast<double>(lo); s <= static_cast<double>(hi) * (1 + 1e-12); s *= f)
          out.push_back(static_cast<uint64_t>(s));
      } else {
        TSR_ASSIGN_OR_RETURN(uint64_t inc, env::ParseBytes("--sizes range step", step.substr(1)));
        if (inc == 0) return InvalidArgument(fmt::format("--sizes range '{}': step must be > 0", item));
        for (uint64_t s = lo; s <= hi; s += inc) out.push_back(s);
      }
    }
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  if (out.size() > 10000)
    return InvalidArgument(fmt::format("--sizes='{}' expands to {} sizes (max 10000)", text, out.size()));
  return out;
}

// ---- deterministic inputs and the f64 reference ------------------------------------------------------

inline uint64_t Mix(uint64_t x) {  // splitmix64 finaliser
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

bool IsSigned(DType t) { return t == DType::kInt8 || t == DType::kInt32 || t == DType::kInt64; }

int64_t TypeMax(DType t) {
  switch (t) {
    case DType::kInt8:
      return 127;
    case DType::kUint8:
      return 255;
    case DType::kInt32:
      return INT32_MAX;
    default:
      return INT64_MAX;
  }
}

// The value of element `i` of rank `rank`'s input, exactly as stored in the element type. Integer ranges
// are chosen so that no reduction over `n` ranks overflows; float products stay within [2^-n, 2^n].
class Generator {
 public:
  Generator(uint64_t seed, DType t, RedOp op, int n) : seed_(Mix(seed)), t_(t), op_(op) {
    if (IsFloat(t)) return;
    const int64_t max = TypeMax(t);
    if (op == RedOp::kProd) {
      bool twos = n < 62 && (int64_t{1} << n) <= max;
      choices_ = IsSigned(t) ? (twos ? std::vector<int64_t>{-2, -1, 1, 2} : std::vector<int64_t>{-1, 1})
                             : (twos ? std::vector<int64_t>{1, 2} : std::vector<int64_t>{1});
    } else {
      int64_t lim =
          op == RedOp::kMax || op == RedOp::kMin ? std::min<int64_t>(max, 1000000) : std::min<int64_t>(max / n, 1000);
      lo_ = IsSigned(t) ? -lim : 0;
      hi_ = lim;
    }
  }

  double Value(int rank, uint64_t i) const {
    uint64_t h = Mix(seed_ ^ (static_cast<uint64_t>(rank) * 0xd1b54a32d192ed03ull) ^ Mix(i));
    if (IsFloat(t_)) {
      double u =
          t_ == DType::kFloat64 ? static_cast<double>(h >> 11) * 0x1p-53 : static_cast<double>(h >> 40) * 0x1p-24;
      double v = op_ == RedOp::kProd ? ((h & 1) ? -1.0 : 1.0) * (0.5 + 1.5 * u) : 2.0 * u - 1.0;
      switch (t_) {
        case DType::kFloat16:
          return F16ToF32(F32ToF16(static_cast<float>(v)));
        case DType::kBfloat16:
          return Bf16ToF32(F32ToBf16(static_cast<float>(v)));
        case DType::kFloat32:
          return static_cast<float>(v);
        default:
          return v;
      }
    }
    if (!choices_.empty()) return static_cast<double>(choices_[h % choices_.size()]);
    return static_cast<double>(lo_ + static_cast<int64_t>(h % static_cast<uint64_t>(hi_ - lo_ + 1)));
  }

 private:
  uint64_t seed_;
  DType t_;
  RedOp op_;
  int64_t lo_ = 0, hi_ = 0;
  std::vector<int64_t> choices_;
};

// Half a unit in the last place of the output type at magnitude a: the error of one final rounding.
double HalfUlp(DType t, double a) {
  switch (t) {
    case DType::kFloat16:
      return std::max(a * 0x1p-11, 0x1p-25);
    case DType::kBfloat16:
      return std::max(a * 0x1p-8, 0x1p-134);
    case DType::kFloat32:
      return std::max(a * 0x1p-24, 0x1p-150);
    default:
      return a * 0x1p-53;
  }
}

// Counts the elements of a reduction result that are outside the bound. `out` holds `count` elements whose
// global indices start at `first` (reduce_scatter: this rank's block).
int64_t CheckReduction(const Generator& gen, const Options& o, int n, const void* out, uint64_t first, uint64_t count) {
  const double acc_eps = o.dtype == DType::kFloat64 ? 0x1p-53 : 0x1p-24;
  int64_t wrong = 0;
  for (uint64_t j = 0; j < count; ++j) {
    const uint64_t i = first + j;
    const double got = LoadElement(out, j, o.dtype);
    if (!IsFloat(o.dtype)) {
      int64_t acc = o.op == RedOp::kProd ? 1 : 0;
      for (int r = 0; r < n; ++r) {
        auto x = static_cast<int64_t>(gen.Value(r, i));
        if (r == 0 && (o.op == RedOp::kMax || o.op == RedOp::kMin))
          acc = x;
        else if (o.op == RedOp::kSum || o.op == RedOp::kAvg)
          acc += x;
        else if (o.op == RedOp::kProd)
          acc *= x;
        else if (o.op == RedOp::kMax)
          acc = std::max(acc, x);
        else
          acc = std::min(acc, x);
      }
      if (o.op == RedOp::kAvg) acc /= n;
      wrong += got != static_cast<double>(acc);
      continue;
    }
    double acc = o.op == RedOp::kProd ? 1.0 : 0.0, abs_sum = 0;
    for (int r = 0; r < n; ++r) {
      double x = gen.Value(r, i);
      if (r == 0 && (o.op == RedOp::kMax || o.op == RedOp::kMin))
        acc = x;
      else if (o.op == RedOp::kSum || o.op == RedOp::kAvg)
        acc += x;
      else if (o.op == RedOp::kProd)
        acc *= x;
      else if (o.op == RedOp::kMax)
        acc = std::max(acc, x);
      else
        acc = std::min(acc, x);
      abs_sum += std::fabs(x);
    }
    double bound = 0;  // max and min are exact: inputs are representable
    if (o.op == RedOp::kSum) bound = HalfUlp(o.dtype, std::fabs(acc)) + n * acc_eps * abs_sum;
    if (o.op == RedOp::kAvg)
      acc /= n, bound = HalfUlp(o.dtype, std::fabs(acc)) + acc_eps * abs_sum + acc_eps * std::fabs(acc);
    if (o.op == RedOp::kProd) bound = HalfUlp(o.dtype, std::fabs(acc)) + n * acc_eps * std::fabs(acc);
    if (!(std::fabs(got - acc) <= bound)) ++wrong;  // NaN counts as wrong
  }
  return wrong;
}

// A fast 64-bit hash of a buffer (bit-identity across ranks, not security).
uint64_t HashBytes(const void* data, size_t len) {
  const auto* p = static_cast<const unsigned char*>(data);
  uint64_t h = 0x243f6a8885a308d3ull ^ len;
  size_t i = 0;
  for (; i + 8 <= len; i += 8) {
    uint64_t w;
    std::memcpy(&w, p + i, 8);
    h = (h ^ Mix(w)) * 0x9fb21c651e98df25ull;
  }
  uint64_t tail = 0;
  std::memcpy(&tail, p + i, len - i);
  return Mix(h ^ tail);
}

// ---- buffers --------------------------------------------------------------------------------------

struct FreeDeleter {
  void operator()(void* p) const { std::free(p); }
};
using Buffer = std::unique_ptr<std::byte, FreeDeleter>;

Buffer Allocate(size_t bytes) {
  size_t rounded = std::max<size_t>(4096, (bytes + 4095) / 4096 * 4096);
  auto* p = static_cast<std::byte*>(std::aligned_alloc(4096, rounded));
  if (p) std::memset(p, 0, rounded);  // fault the pages in before timing
  return Buffer(p);
}

// ---- the world --------------------------------------------------------------------------------------

struct World {
  tsrComm_t comm = nullptr;
  int rank = 0;
  int size = 1;
  int island = 0;
};

struct BenchError {
  std::string message;
};

void Check(tsrResult_t r, const World& w, const std::string& what) {
  if (r != tsrSuccess)
    throw BenchError{
        fmt::format("rank {}: {} failed: {}: {}", w.rank, what, tsrGetErrorString(r), tsrGetLastError(w.comm))};
}

// Per-rank description, allgathered once: island index, vendor and device backend.
struct RankInfo {
  int32_t island;
  char vendor[28];
  char device[32];
};
static_assert(sizeof(RankInfo) == 64);

struct WorldInfo {
  std::string islands;  // "ascend=host:1,nvidia=host:1"
  std::vector<std::string> lines;
};

WorldInfo DescribeWorld(const World& w) {
  RankInfo mine{};
  mine.island = w.island;
  std::string vendor = env::Get("TESSERA_ISLAND_VENDOR").value_or(fmt::format("island{}", w.island));
  std::string device = env::Get("TESSERA_DEVICE").value_or("host");
  std::snprintf(mine.vendor, sizeof mine.vendor, "%s", vendor.c_str());
  std::snprintf(mine.device, sizeof mine.device, "%s", device.c_str());
  std::vector<RankInfo> all(static_cast<size_t>(w.size));
  Check(tsrAllGather(&mine, all.data(), sizeof(RankInfo), tsrUint8, w.comm, nullptr), w,
        "tsrAllGather(world description)");
  std::map<int, std::vector<int>> ranks;
  for (int r = 0; r < w.size; ++r) ranks[all[r].island].push_back(r);
  WorldInfo info;
  for (auto& [island, rs] : ranks) {
    std::string dev = all[rs[0]].device;
    std::string backend = dev.substr(0, dev.find(':'));
    info.islands += fmt::format("{}{}={}:{}", info.islands.empty() ? "" : ",", all[rs[0]].vendor, backend, rs.size());
    std::string list;
    for (int r : rs) list += fmt::format("{}{}({})", list.empty() ? "" : " ", r, all[r].device);
    info.lines.push_back(
        fmt::format("island {} {} ({}): {} rank(s): {}", island, all[rs[0]].vendor, backend, rs.size(), list));
  }
  return info;
}

inline nlohmann::json Machine() { return tessera::MachineJson(); }

// ---- one size ---------------------------------------------------------------------------------------

struct Row {
  uint64_t bytes = 0, count = 0;
  double time_us = 0, algbw = 0, busbw = 0;
  std::optional<int64_t> wrong;
  std::optional<bool> identical;  // nullopt: not checked, or not applicable (reduce_scatter)
};

Row RunSize(const World& w, const Options& o, const Generator& gen, uint64_t bytes) {
  const size_t es = DTypeSize(o.dtype);
  const auto n = static_cast<uint64_t>(w.size);
  const bool blocked = o.coll == Coll::kReduceScatter || o.coll == Coll::kAllGather;
  const uint64_t block = blocked ? bytes / es / n : bytes / es;  // the count passed to the call
  const uint64_t total = blocked ? block * n : block;            // elements in the whole buffer
  const uint64_t in_elems = o.coll == Coll::kAllGather ? block : total;
  const uint64_t out_elems = o.coll == Coll::kReduceScatter ? block : total;
  Buffer in = Allocate(in_elems * es), out = Allocate(out_elems * es);
  if (!in || !out)
    throw BenchError{
        fmt::format("rank {}: cannot allocate {} bytes for size {}", w.rank, (in_elems + out_elems) * es, bytes)};
  for (uint64_t i = 0; i < in_elems; ++i) StoreElement(in.get(), i, o.dtype, gen.Value(w.rank, i));

  const auto dt = static_cast<tsrDataType_t>(o.dtype);
  const auto op = static_cast<tsrRedOp_t>(o.op);
  auto call = [&]() -> tsrResult_t {
    switch (o.coll) {
      case Coll::kAllReduce:
        return tsrAllReduce(in.get(), out.get(), block, dt, op, w.comm, nullptr);
      case Coll::kReduceScatter:
        return tsrReduceScatter(in.get(), out.get(), block, dt, op, w.comm, nullptr);
      case Coll::kAllGather:
        return tsrAllGather(in.get(), out.get(), block, dt, w.comm, nullptr);
      case Coll::kBroadcast:
        return tsrBroadcast(in.get(), out.get(), block, dt, o.root, w.comm, nullptr);
    }
    return tsrInternalError;
  };
  const std::string what =
      fmt::format("{}(count={}, {}, {})", CollName(o.coll), block, DTypeName(o.dtype), RedOpName(o.op));
  for (int i = 0; i < o.warmup; ++i) Check(call(), w, what);
  std::vector<double> times(static_cast<size_t>(o.iters)), tmax(times.size());
  for (int i = 0; i < o.iters; ++i) {
    Check(tsrBarrier(w.comm), w, "tsrBarrier");
    auto t0 = Clock::now();
    Check(call(), w, what);
    times[i] = std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
  }
  Check(tsrAllReduce(times.data(), tmax.data(), times.size(), tsrFloat64, tsrMax, w.comm, nullptr), w,
        "tsrAllReduce(iteration times, max)");
  std::sort(tmax.begin(), tmax.end());
  const size_t m = tmax.size();
  Row row;
  row.bytes = total * es;
  row.count = total;
  row.time_us = m % 2 ? tmax[m / 2] : 0.5 * (tmax[m / 2 - 1] + tmax[m / 2]);
  row.algbw = row.time_us > 0 ? static_cast<double>(row.bytes) / (row.time_us * 1e3) : 0;
  row.busbw = row.algbw * BusFactor(o.coll, w.size);

  if (o.check) {
    // The output of the last timed call: out-of-place, so the input is unchanged.
    int64_t wrong = 0;
    if (o.coll == Coll::kAllReduce) {
      wrong = CheckReduction(gen, o, w.size, out.get(), 0, out_elems);
    } else if (o.coll == Coll::kReduceScatter) {
      wrong = CheckReduction(gen, o, w.size, out.get(), static_cast<uint64_t>(w.rank) * block, out_elems);
    } else {
      for (uint64_t i = 0; i < out_elems; ++i) {
        double want =
            o.coll == Coll::kAllGather ? gen.Value(static_cast<int>(i / block), i % block) : gen.Value(o.root, i);
        wrong += LoadElement(out.get(), i, o.dtype) != want;
      }
    }
    int64_t wrong_all = 0;
    Check(tsrAllReduce(&wrong, &wrong_all, 1, tsrInt64, tsrSum, w.comm, nullptr), w, "tsrAllReduce(#wrong)");
    row.wrong = wrong_all;
    uint64_t h = HashBytes(out.get(), out_elems * es);
    std::vector<uint64_t> hashes(n);
    Check(tsrAllGather(&h, hashes.data(), 1, tsrInt64, w.comm, nullptr), w, "tsrAllGather(result hashes)");
    if (o.coll != Coll::kReduceScatter)
      row.identical = std::all_of(hashes.begin(), hashes.end(), [&](uint64_t x) { return x == hashes[0]; });
  }
  return row;
}

void PrintHeader() {
  std::printf("#%13s %12s %9s %6s %12s %11s %11s %8s %8s\n", "size(B)", "count", "type", "redop", "time(us)",
              "algbw(GB/s)", "busbw(GB/s)", "#wrong", "bitident");
}

void PrintRow(const Row& r, const Options& o) {
  std::string wrong = r.wrong ? std::to_string(*r.wrong) : "N/A";
  std::string ident = r.identical ? (*r.identical ? "yes" : "NO") : "N/A";
  const char* redop = o.coll == Coll::kAllReduce || o.coll == Coll::kReduceScatter ? RedOpName(o.op) : "none";
  std::printf(" %13llu %12llu %9s %6s %12.1f %11.3f %11.3f %8s %8s\n", static_cast<unsigned long long>(r.bytes),
              static_cast<unsigned long long>(r.count), DTypeName(o.dtype), redop, r.time_us, r.algbw, r.busbw,
              wrong.c_str(), ident.c_str());
  std::fflush(stdout);
}

// ---- the command ------------------------------------------------------------------------------------

int RunBench(int argc, char** argv) {
  CLI::App app{
      "Benchmark collectives like nccl-tests; run every rank under `tessera run`, e.g.\n"
      "  tessera run --island ascend=host:1 --island nvidia=host:1 -- tessera bench allreduce "
      "--sizes 16M,64M,256M --check"};
  app.name("tessera bench");
  Options o;
  std::string coll = "allreduce", sizes = "1K:256M:x4", dtype = "float32", op = "sum";
  app.add_option("collective", coll, "allreduce | reduce_scatter | allgather | broadcast")->required();
  app.add_option("--sizes", sizes, "Byte sizes: a list and/or ranges, e.g. 16M,64M,256M or 1K:256M:x4 or 1M:4M:+1M")
      ->capture_default_str();
  app.add_option("--iters", o.iters, "Timed iterations per size")->capture_default_str();
  app.add_option("--warmup", o.warmup, "Untimed iterations per size")->capture_default_str();
  app.add_option("--dtype", dtype, "int8 uint8 int32 int64 float16 bfloat16 float32 float64 (or f16, bf16, f32, ...)")
      ->capture_default_str();
  app.add_option("--op", op, "sum prod max min avg (reductions only)")->capture_default_str();
  app.add_option("--root", o.root, "Root rank of broadcast")->capture_default_str();
  app.add_option("--seed", o.seed, "Seed of the input generator")->capture_default_str();
  app.add_flag("--check", o.check, "Check every element against an f64 reference and bit-identity across ranks");
  app.add_option("--json", o.json, "Write the results to this JSON file (rank 0)");
  app.add_flag("--verbose", o.verbose, "Rank 0 prints the world: islands, ranks per island, the bridge");
  try {
    app.parse(argc, argv);  // argv[0] is "bench"
  } catch (const CLI::ParseError& e) {
    return tessera::cli::ParseExit(app, e);
  }

  auto fail = [](const std::string& msg) {
    std::fprintf(stderr, "tessera bench: %s\n", msg.c_str());
    return 2;
  };
  if (coll == "allreduce")
    o.coll = Coll::kAllReduce;
  else if (coll == "reduce_scatter")
    o.coll = Coll::kReduceScatter;
  else if (coll == "allgather")
    o.coll = Coll::kAllGather;
  else if (coll == "broadcast")
    o.coll = Coll::kBroadcast;
  else
    return fail(fmt::format("unknown collective '{}' (use allreduce, reduce_scatter, allgather or broadcast)", coll));
  auto parsed_sizes = ParseSizes(sizes);
  if (!parsed_sizes.ok()) return fail(parsed_sizes.status().message());
  o.sizes = *parsed_sizes;
  auto d = ParseDType(dtype);
  if (!d)
    return fail(
        fmt::format("--dtype '{}' is not a data type (use int8, uint8, int32, int64, float16, "
                    "bfloat16, float32 or float64)",
                    dtype));
  o.dtype = *d;
  auto r = ParseRedOp(op);
  if (!r) return fail(fmt::format("--op '{}' is not an operation (use sum, prod, max, min or avg)", op));
  o.op = *r;
  if (o.iters < 1 || o.iters > 1000000) return fail(fmt::format("--iters {} is out of range [1, 1000000]", o.iters));
  if (o.warmup < 0 || o.warmup > 1000000)
    return fail(fmt::format("--warmup {} is out of range [0, 1000000]", o.warmup));

  if (!o.json.empty()) {  // fail before the run, not after it
    std::ofstream probe(o.json, std::ios::app);
    if (!probe) return fail(fmt::format("--json '{}' cannot be written", o.json));
  }

  World w;
  if (tsrResult_t res = tsrCommInitFromEnv(&w.comm); res != tsrSuccess)
    return fail(fmt::format("tsrCommInitFromEnv failed: {}: {}", tsrGetErrorString(res), tsrGetLastError(nullptr)));
  int rc = 0;
  try {
    Check(tsrCommRank(w.comm, &w.rank), w, "tsrCommRank");
    Check(tsrCommSize(w.comm, &w.size), w, "tsrCommSize");
    Check(tsrCommIsland(w.comm, &w.island), w, "tsrCommIsland");
    if (o.coll == Coll::kBroadcast && (o.root < 0 || o.root >= w.size))
      throw BenchError{fmt::format("--root {} is not a rank of this world of {}", o.root, w.size)};
    WorldInfo info = DescribeWorld(w);
    std::string bridge = env::Get("TESSERA_BRIDGE").value_or("auto");
    Generator gen(o.seed, o.dtype, o.op, w.size);
    const bool lead = w.rank == 0;
    if (lead) {
      const bool reduces = o.coll == Coll::kAllReduce || o.coll == Coll::kReduceScatter;
      std::printf("# tessera bench %s: %d ranks, islands %s, %s%s%s, iters %d, warmup %d, check %s\n", CollName(o.coll),
                  w.size, info.islands.c_str(), DTypeName(o.dtype), reduces ? " " : "", reduces ? RedOpName(o.op) : "",
                  o.iters, o.warmup, o.check ? "on" : "off");
      if (o.verbose) {
        for (const auto& line : info.lines) std::printf("#   %s\n", line.c_str());
        std::printf("#   comm: %s\n", tsrCommDescribe(w.comm));
        if (auto spec = env::Get("TESSERA_ISLANDS")) std::printf("#   TESSERA_ISLANDS=%s\n", spec->c_str());
        std::printf("#   timing: barrier before each iteration, max over ranks, median over iterations\n");
      }
      PrintHeader();
    }
    nlohmann::json rows = nlohmann::json::array();
    bool bad = false;
    for (uint64_t bytes : o.sizes) {
      Row row = RunSize(w, o, gen, bytes);
      if ((row.wrong && *row.wrong) || (row.identical && !*row.identical)) bad = true;
      if (lead) PrintRow(row, o);
      nlohmann::json j = {{"bytes", row.bytes},      {"count", row.count},      {"time_us", row.time_us},
                          {"algbw_GBps", row.algbw}, {"busbw_GBps", row.busbw}, {"wrong", nullptr}};
      if (row.wrong) j["wrong"] = *row.wrong;
      if (row.identical) j["identical"] = *row.identical;
      rows.push_back(j);
    }
    if (lead && !o.json.empty()) {
      nlohmann::json j = {{"collective", CollName(o.coll)},
                          {"dtype", DTypeName(o.dtype)},
                          {"op", RedOpName(o.op)},
                          {"world_size", w.size},
                          {"islands", info.islands},
                          {"bridge", bridge},
                          {"comm", tsrCommDescribe(w.comm)},
                          {"machine", Machine()},
                          {"commit", TESSERA_GIT_COMMIT},
                          {"iters", o.iters},
                          {"warmup", o.warmup},
                          {"check", o.check},
                          {"rows", rows}};
      std::ofstream f(o.json);
      f << j.dump(2) << "\n";
      if (!f) throw BenchError{fmt::format("cannot write --json '{}'", o.json)};
    }
    if (bad) {
      if (lead) std::fprintf(stderr, "tessera bench: check FAILED (wrong elements or results differ across ranks)\n");
      rc = 1;
    }
  } catch (const BenchError& e) {
    std::fprintf(stderr, "tessera bench: %s\n", e.message.c_str());
    rc = 1;
  }
  tsrCommDestroy(w.comm);
  return rc;
}

}  // namespace
}  // namespace tessera::cli

TESSERA_COMMAND(bench, "Benchmark collectives (run under tessera run)", tessera::cli::RunBench);
