// cli/bench: `tessera bench allreduce|reduce_scatter|allgather|broadcast`, the collective benchmark, run
// under `tessera run` (one process per rank). Output as nccl-tests (size, count, type, redop, time, algbw,
// busbw, #wrong), from rank 0, after lines naming each rank's device and memory. Uses the public C API
// (tessera/tessera.h), src/common and, for device memory, the CUDA runtime or the family's device-runtime row
// (cli/bench_memory).
//
// Memory: a rank of a device island (TESSERA_DEVICE=cuda:N, npu:N, musa:N) keeps its buffers in device memory of
// its device and passes a stream of its own, as nccl-tests does; --host-memory puts them in host memory (stream
// NULL), as every host rank's are.
// Timing: a sample is a tsrBarrier, then --batch calls (default 1) and, on device memory, a wait for the
// stream; its time per call is the slowest rank's (the samples are allreduced with max), and a row's time is
// the median over --iters samples. algbw = bytes / time; busbw = algbw * 2(n-1)/n (allreduce), (n-1)/n
// (reduce_scatter, allgather), 1 (broadcast). For reduce_scatter and allgather, size is the whole n-block
// buffer.
// --check (cli/bench_check): every element against an f64 reference computed locally from the generator of
// the inputs, read back from the device where the result is there; the 64-bit hashes of every rank's result
// are allgathered to verify bit-identity.
#include <fmt/format.h>

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

#include "cli/bench_check.hpp"
#include "cli/bench_memory.hpp"
#include "cli/command.hpp"
#include "cli/exit_code.hpp"
#include "comm/coll_kind.hpp"
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
using bench::CheckReduction;
using bench::Generator;
using bench::HashBytes;

// --coll: allreduce, reduce_scatter, allgather or broadcast (the communicator's kinds and names).
using Coll = comm::CollKind;
using comm::CollName;

double BusFactor(Coll c, int n) {
  if (n <= 1) return c == Coll::kBroadcast ? 1.0 : 0.0;
  switch (c) {
    case Coll::kAllReduce:
      return 2.0 * (n - 1) / n;
    case Coll::kReduceScatter:
    case Coll::kAllGather:
      return 1.0 * (n - 1) / n;
    case Coll::kBroadcast:
    default:
      return 1.0;
  }
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
  int batch = 1;             // calls per timed sample
  bool in_place = false;     // send == recv (reduce_scatter, allgather: the rank's block of one buffer)
  bool host_memory = false;  // ranks of a CUDA island on host memory too
  std::string json;          // "-": one line on stdout
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

// ---- the world --------------------------------------------------------------------------------------

struct World {
  tsrComm_t comm = nullptr;
  int rank = 0;
  int size = 1;
  int island = 0;
};

// A failed call of the C API as an error naming the rank and the call (exit status 1).
Status Check(tsrResult_t r, const World& w, const std::string& what) {
  if (r == tsrSuccess) return Status::Ok();
  return SystemError(
      fmt::format("rank {}: {} failed: {}: {}", w.rank, what, tsrGetErrorString(r), tsrGetLastError(w.comm)));
}

// `s` naming the rank and what it was doing; its code (and so the exit status) kept.
Status Check(const Status& s, const World& w, const std::string& what) {
  if (s.ok()) return s;
  return Status(s.code(), fmt::format("rank {}: {}: {}", w.rank, what, s.message()));
}

// Per-rank description, allgathered once: island index, vendor, family and the memory its
// buffers are in ("device" or "host").
struct RankInfo {
  int32_t island;
  char vendor[28];
  char device[24];
  char memory[8];
};
static_assert(sizeof(RankInfo) == 64);

struct WorldInfo {
  std::string islands;             // "ascend=host:1,nvidia=cuda:1"
  std::string memory;              // "device", "host" or "device+host"
  std::string memory_by_rank;      // "device on rank 0, host on ranks 1-3"
  std::vector<std::string> lines;  // one per island, naming each rank's device and memory
  nlohmann::json ranks = nlohmann::json::array();
};

// "0", "1-3", "0,2,5-7"
std::string RankList(const std::vector<int>& rs) {
  std::string out;
  for (size_t i = 0; i < rs.size();) {
    size_t j = i;
    while (j + 1 < rs.size() && rs[j + 1] == rs[j] + 1) ++j;
    out += fmt::format("{}{}", out.empty() ? "" : ",", rs[i]);
    if (j > i) out += fmt::format("-{}", rs[j]);
    i = j + 1;
  }
  return out;
}

Result<WorldInfo> DescribeWorld(const World& w, const BenchMemory& mem) {
  RankInfo mine{};
  mine.island = w.island;
  std::string vendor = env::Get("TESSERA_ISLAND_VENDOR").value_or(fmt::format("island{}", w.island));
  std::string device = env::GetOrDefault("TESSERA_DEVICE");
  std::snprintf(mine.vendor, sizeof mine.vendor, "%s", vendor.c_str());
  std::snprintf(mine.device, sizeof mine.device, "%s", device.c_str());
  std::snprintf(mine.memory, sizeof mine.memory, "%s", mem.kind());
  std::vector<RankInfo> all(static_cast<size_t>(w.size));
  TSR_RETURN_IF_ERROR(Check(tsrAllGather(&mine, all.data(), sizeof(RankInfo), tsrUint8, w.comm, nullptr), w,
                            "tsrAllGather(world description)"));
  std::map<int, std::vector<int>> ranks;
  std::map<std::string, std::vector<int>> by_memory;
  for (int r = 0; r < w.size; ++r) {
    ranks[all[r].island].push_back(r);
    by_memory[all[r].memory].push_back(r);
  }
  WorldInfo info;
  for (auto& [island, rs] : ranks) {
    std::string dev = all[rs[0]].device;
    std::string family = dev.substr(0, dev.find(':'));
    info.islands += fmt::format("{}{}={}:{}", info.islands.empty() ? "" : ",", all[rs[0]].vendor, family, rs.size());
    std::string list;
    for (int r : rs)
      list += fmt::format("{}{}({}, {} memory)", list.empty() ? "" : " ", r, all[r].device, all[r].memory);
    info.lines.push_back(
        fmt::format("island {} {} ({}): {} rank(s): {}", island, all[rs[0]].vendor, family, rs.size(), list));
  }
  for (auto& [kind, rs] : by_memory) {  // "device" sorts before "host"
    info.memory += fmt::format("{}{}", info.memory.empty() ? "" : "+", kind);
    info.memory_by_rank += fmt::format("{}{} on rank{} {}", info.memory_by_rank.empty() ? "" : ", ", kind,
                                       rs.size() > 1 ? "s" : "", RankList(rs));
  }
  for (int r = 0; r < w.size; ++r)
    info.ranks.push_back({{"rank", r},
                          {"island", all[r].island},
                          {"vendor", all[r].vendor},
                          {"device", all[r].device},
                          {"memory", all[r].memory}});
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

Result<Row> RunSize(const World& w, const Options& o, const Generator& gen, BenchMemory& mem, uint64_t bytes) {
  const size_t es = DTypeSize(o.dtype);
  const auto n = static_cast<uint64_t>(w.size);
  const auto me = static_cast<uint64_t>(w.rank);
  const bool blocked = o.coll == Coll::kReduceScatter || o.coll == Coll::kAllGather;
  const uint64_t block = blocked ? bytes / es / n : bytes / es;  // the count passed to the call
  const uint64_t total = blocked ? block * n : block;            // elements in the whole buffer
  const uint64_t in_elems = o.coll == Coll::kAllGather ? block : total;
  const uint64_t out_elems = o.coll == Coll::kReduceScatter ? block : total;
  const std::string where = fmt::format("size {}", bytes);
  auto allocate = [&](uint64_t elems) -> Result<BenchMemory::Buffer> {
    auto b = mem.Allocate(elems * es);
    TSR_RETURN_IF_ERROR(Check(b.status(), w, where));
    return std::move(b).value();
  };
  // Out of place: an input and an output buffer. In place (NCCL's convention): one buffer of the whole
  // size; reduce_scatter's output and allgather's input are this rank's block inside it.
  TSR_ASSIGN_OR_RETURN(BenchMemory::Buffer first, allocate(o.in_place ? total : in_elems));
  BenchMemory::Buffer second;
  std::byte *send = first.get(), *recv = first.get();
  if (!o.in_place) {
    TSR_ASSIGN_OR_RETURN(second, allocate(out_elems));
    recv = second.get();
  } else if (o.coll == Coll::kReduceScatter) {
    recv += me * block * es;
  } else if (o.coll == Coll::kAllGather) {
    send += me * block * es;
  }
  // This rank's input, generated on the host; device memory gets it through a copy on the stream.
  std::vector<std::byte> staging;
  auto fill = [&]() -> Status {
    if (!mem.on_device()) {
      gen.Fill(w.rank, 0, in_elems, send);
      return Status::Ok();
    }
    staging.resize(in_elems * es);
    gen.Fill(w.rank, 0, in_elems, staging.data());
    return Check(mem.Upload(send, staging.data(), in_elems * es), w, where);
  };
  TSR_RETURN_IF_ERROR(fill());

  const auto dt = static_cast<tsrDataType_t>(o.dtype);
  const auto op = static_cast<tsrRedOp_t>(o.op);
  const tsrStream_t stream = mem.stream();  // NULL on host memory: the call returns when it is done
  auto call = [&]() -> tsrResult_t {
    switch (o.coll) {
      case Coll::kAllReduce:
        return tsrAllReduce(send, recv, block, dt, op, w.comm, stream);
      case Coll::kReduceScatter:
        return tsrReduceScatter(send, recv, block, dt, op, w.comm, stream);
      case Coll::kAllGather:
        return tsrAllGather(send, recv, block, dt, w.comm, stream);
      case Coll::kBroadcast:
        return tsrBroadcast(send, recv, block, dt, o.root, w.comm, stream);
      default:
        return tsrInternalError;  // not a --coll choice
    }
  };
  const std::string what =
      fmt::format("{}(count={}, {}, {})", CollName(o.coll), block, DTypeName(o.dtype), RedOpName(o.op));
  for (int i = 0; i < o.warmup; ++i) TSR_RETURN_IF_ERROR(Check(call(), w, what));
  TSR_RETURN_IF_ERROR(Check(mem.Synchronize(), w, what));
  // A sample: a barrier, then --batch calls and (device memory) the wait for the stream; its time per call.
  std::vector<double> times(static_cast<size_t>(o.iters)), tmax(times.size());
  for (int i = 0; i < o.iters; ++i) {
    TSR_RETURN_IF_ERROR(Check(tsrBarrier(w.comm), w, "tsrBarrier"));
    auto t0 = Clock::now();
    for (int j = 0; j < o.batch; ++j) TSR_RETURN_IF_ERROR(Check(call(), w, what));
    TSR_RETURN_IF_ERROR(Check(mem.Synchronize(), w, what));
    times[i] = std::chrono::duration<double, std::micro>(Clock::now() - t0).count() / o.batch;
  }
  TSR_RETURN_IF_ERROR(Check(tsrAllReduce(times.data(), tmax.data(), times.size(), tsrFloat64, tsrMax, w.comm, nullptr),
                            w, "tsrAllReduce(iteration times, max)"));
  std::sort(tmax.begin(), tmax.end());
  const size_t m = tmax.size();
  Row row;
  row.bytes = total * es;
  row.count = total;
  row.time_us = m % 2 ? tmax[m / 2] : 0.5 * (tmax[m / 2 - 1] + tmax[m / 2]);
  row.algbw = row.time_us > 0 ? static_cast<double>(row.bytes) / (row.time_us * 1e3) : 0;
  row.busbw = row.algbw * BusFactor(o.coll, w.size);

  if (o.check) {
    // Out of place, the input is unchanged and the last timed call's output is checked. In place, the
    // timed calls have overwritten the input: it is filled again and one more call is checked.
    if (o.in_place) {
      TSR_RETURN_IF_ERROR(fill());
      TSR_RETURN_IF_ERROR(Check(call(), w, what));
      TSR_RETURN_IF_ERROR(Check(mem.Synchronize(), w, what));
    }
    const std::byte* result = recv;  // device memory: copied back to the host
    std::vector<std::byte> back;
    if (mem.on_device()) {
      back.resize(out_elems * es);
      TSR_RETURN_IF_ERROR(Check(mem.Download(back.data(), recv, out_elems * es), w, where));
      result = back.data();
    }
    int64_t wrong = 0;
    if (o.coll == Coll::kAllReduce) {
      wrong = CheckReduction(gen, o.dtype, o.op, w.size, result, 0, out_elems);
    } else if (o.coll == Coll::kReduceScatter) {
      wrong = CheckReduction(gen, o.dtype, o.op, w.size, result, me * block, out_elems);
    } else {
      for (uint64_t i = 0; i < out_elems; ++i) {
        double want =
            o.coll == Coll::kAllGather ? gen.Value(static_cast<int>(i / block), i % block) : gen.Value(o.root, i);
        wrong += LoadElement(result, i, o.dtype) != want;
      }
    }
    int64_t wrong_all = 0;
    TSR_RETURN_IF_ERROR(
        Check(tsrAllReduce(&wrong, &wrong_all, 1, tsrInt64, tsrSum, w.comm, nullptr), w, "tsrAllReduce(#wrong)"));
    row.wrong = wrong_all;
    uint64_t h = HashBytes(result, out_elems * es);
    std::vector<uint64_t> hashes(n);
    TSR_RETURN_IF_ERROR(
        Check(tsrAllGather(&h, hashes.data(), 1, tsrInt64, w.comm, nullptr), w, "tsrAllGather(result hashes)"));
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

// The exit status of a failed tsrCommInitFromEnv (a CUDA island on a machine without a GPU: unsupported).
int InitExit(tsrResult_t r) {
  switch (r) {
    case tsrInvalidArgument:
      return kExitUsage;
    case tsrUnsupported:
      return kExitUnsupported;
    case tsrNotFound:
      return kExitNotFound;
    default:
      return kExitFailure;
  }
}

// Under `tessera run` every rank parses the same command line: rank 0 alone reports a mistake in it.
bool OtherRank() {
  auto r = tessera::env::Get("TESSERA_RANK");
  return r && !r->empty() && *r != "0";
}

// The run on an initialised world: rank, size and island into `w`, the header (rank 0), every size. Whether every
// element was right and every rank's result the same (true when --check is off); an error names the rank.
Result<bool> RunWorld(World& w, const Options& o) {
  TSR_RETURN_IF_ERROR(Check(tsrCommRank(w.comm, &w.rank), w, "tsrCommRank"));
  TSR_RETURN_IF_ERROR(Check(tsrCommSize(w.comm, &w.size), w, "tsrCommSize"));
  TSR_RETURN_IF_ERROR(Check(tsrCommIsland(w.comm, &w.island), w, "tsrCommIsland"));
  if (o.coll == Coll::kBroadcast && (o.root < 0 || o.root >= w.size))
    return InvalidArgument(fmt::format("--root {} is not a rank of this world of {}", o.root, w.size));
  // After the communicator, which has checked TESSERA_DEVICE and made its GPU current.
  auto opened = BenchMemory::Open(env::GetOrDefault("TESSERA_DEVICE"), o.host_memory);
  TSR_RETURN_IF_ERROR(Check(opened.status(), w, "buffers"));
  BenchMemory& mem = **opened;
  TSR_ASSIGN_OR_RETURN(WorldInfo info, DescribeWorld(w, mem));
  std::string bridge = env::GetOrDefault("TESSERA_BRIDGE");
  std::string device_bridge = env::GetOrDefault("TESSERA_DEVICE_BRIDGE");
  Generator gen(o.seed, o.dtype, o.op, w.size);
  const bool lead = w.rank == 0;
  if (lead) {
    const bool reduces = o.coll == Coll::kAllReduce || o.coll == Coll::kReduceScatter;
    std::printf("# tessera bench %s: %d ranks, islands %s, %s%s%s, %s, iters %d x batch %d, warmup %d, check %s\n",
                CollName(o.coll), w.size, info.islands.c_str(), DTypeName(o.dtype), reduces ? " " : "",
                reduces ? RedOpName(o.op) : "", o.in_place ? "in place" : "out of place", o.iters, o.batch, o.warmup,
                o.check ? "on" : "off");
    std::printf("# memory: %s\n", info.memory_by_rank.c_str());
    for (const auto& line : info.lines) std::printf("#   %s\n", line.c_str());
    if (o.verbose) {
      std::printf("#   comm: %s\n", tsrCommDescribe(w.comm));
      if (auto spec = env::Get("TESSERA_ISLANDS")) std::printf("#   TESSERA_ISLANDS=%s\n", spec->c_str());
      std::printf(
          "#   timing: per sample a barrier, %d call(s), then (device memory) a wait for the stream; max over "
          "ranks, median over samples\n",
          o.batch);
    }
    PrintHeader();
  }
  nlohmann::json rows = nlohmann::json::array();
  bool bad = false;
  for (uint64_t bytes : o.sizes) {
    TSR_ASSIGN_OR_RETURN(Row row, RunSize(w, o, gen, mem, bytes));
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
                        {"memory", info.memory},
                        {"ranks", info.ranks},
                        {"bridge", bridge},
                        {"device_bridge", device_bridge},
                        {"comm", tsrCommDescribe(w.comm)},
                        {"machine", Machine()},
                        {"commit", TESSERA_GIT_COMMIT},
                        {"iters", o.iters},
                        {"batch", o.batch},
                        {"warmup", o.warmup},
                        {"in_place", o.in_place},
                        {"check", o.check},
                        {"rows", rows}};
    if (o.json == "-") {
      std::printf("%s\n", j.dump().c_str());
      std::fflush(stdout);
    } else {
      std::ofstream f(o.json);
      f << j.dump(2) << "\n";
      if (!f) return SystemError(fmt::format("cannot write --json '{}'", o.json));
    }
  }
  return !bad;
}

// ---- the command ------------------------------------------------------------------------------------

int RunBench(int argc, char** argv) {
  CLI::App app{
      "Benchmark collectives like nccl-tests; run every rank under `tessera run`, e.g.\n"
      "  tessera run --island ascend=host:1 --island nvidia=cuda:1 -- tessera bench allreduce "
      "--sizes 16M,64M,256M --check\n"
      "Ranks of a CUDA island use device memory of their GPU and a stream of their own (--host-memory: host "
      "memory); other ranks use host memory."};
  app.name("tessera bench");
  Options o;
  std::string coll = "allreduce", sizes = "1K:256M:x4", dtype = "float32", op = "sum";
  app.add_option("collective", coll, "allreduce | reduce_scatter | allgather | broadcast")->required();
  app.add_option("--sizes", sizes, "Byte sizes: a list and/or ranges, e.g. 16M,64M,256M or 1K:256M:x4 or 1M:4M:+1M")
      ->capture_default_str();
  app.add_option("--iters", o.iters, "Timed samples per size")->capture_default_str();
  app.add_option("--warmup", o.warmup, "Untimed calls per size")->capture_default_str();
  app.add_option("--batch", o.batch,
                 "Calls per timed sample, back to back, with one wait for the stream at the end (as nccl-tests)")
      ->capture_default_str();
  app.add_option("--dtype", dtype, "int8 uint8 int32 int64 float16 bfloat16 float32 float64 (or f16, bf16, f32, ...)")
      ->capture_default_str();
  app.add_option("--op", op, "sum prod max min avg (reductions only)")->capture_default_str();
  app.add_option("--root", o.root, "Root rank of broadcast")->capture_default_str();
  app.add_option("--seed", o.seed, "Seed of the input generator")->capture_default_str();
  app.add_flag("--in-place", o.in_place, "One buffer for input and output (NCCL's in-place convention)");
  app.add_flag("--host-memory", o.host_memory, "Ranks of a CUDA island use host memory and stream NULL too");
  app.add_flag("--check", o.check, "Check every element against an f64 reference and bit-identity across ranks");
  app.add_option("--json", o.json, "Write the results to this JSON file (rank 0); '-': one line on stdout");
  app.add_flag("--verbose", o.verbose, "Rank 0 prints the world: islands, ranks per island, the bridge");
  try {
    app.parse(argc, argv);  // argv[0] is "bench"
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() != 0 && OtherRank()) return kExitUsage;
    return tessera::cli::ParseExit(app, e);
  }

  auto fail = [](const std::string& msg, int code = kExitUsage) {
    if (code != kExitUsage || !OtherRank()) std::fprintf(stderr, "tessera bench: %s\n", msg.c_str());
    return code;
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
  if (o.batch < 1 || o.batch > 100000) return fail(fmt::format("--batch {} is out of range [1, 100000]", o.batch));

  if (!o.json.empty() && o.json != "-") {  // fail before the run, not after it
    std::ofstream probe(o.json, std::ios::app);
    if (!probe) return fail(fmt::format("--json '{}' cannot be written", o.json));
  }

  World w;
  if (tsrResult_t res = tsrCommInitFromEnv(&w.comm); res != tsrSuccess)
    return fail(fmt::format("tsrCommInitFromEnv failed: {}: {}", tsrGetErrorString(res), tsrGetLastError(nullptr)),
                InitExit(res));
  auto checked = RunWorld(w, o);
  int rc = kExitOk;
  if (!checked.ok()) {
    std::fprintf(stderr, "tessera bench: %s\n", checked.status().message().c_str());
    rc = ExitCodeOf(checked.status());
  } else if (!*checked) {
    if (w.rank == 0)
      std::fprintf(stderr, "tessera bench: check FAILED (wrong elements or results differ across ranks)\n");
    rc = kExitFailure;
  }
  tsrCommDestroy(w.comm);
  return rc;
}

}  // namespace
}  // namespace tessera::cli

TESSERA_COMMAND(bench, "Benchmark collectives (run under tessera run)", tessera::cli::RunBench);
