// tests/runtime/staged_rank_test: the device ranks in whole jobs — the staged rank (src/comm/device/staged_rank.cpp)
// and, beside it, the device-bridge rank on the emulated device (device_bridge_rank.cpp, last in this file) — under
// `tessera run`, with npu (Ascend: ACL + HCCL), musa (Moore Threads: MUSA + MCCL) and corex (Iluvatar CoreX) islands on
// the host ABI shims of tests/shims, found as an installed runtime would be: on LD_LIBRARY_PATH by soname (corex: by
// its rows' variables). Each rank is an accel_worker process; each prints "OK rank R" or "FAIL rank R: why".
//   - a world of one npu / musa island: the island's library (HCCL / MCCL shim) inside, staged for what it lacks;
//   - hybrid worlds: npu beside host, npu beside musa beside host, uneven islands, every collective staged through
//     pinned memory, with and without a delay on every stream task (a missing synchronisation shows stale data);
//   - the launcher: it counts npu devices through the ACL row and gives each rank its own
//     (ASCEND_RT_VISIBLE_DEVICES), round-robin past the count, and names the library when there is none;
//   - faults: device memory expected but host memory given, a rank that dies, a device index past the count.
#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <ostream>
#include <regex>
#include <sstream>
#include <string>

#include "comm/transport/ucx.hpp"
#include "common/shell.hpp"

namespace {

using tessera::testing_shell::Proc;
using tessera::testing_shell::Shell;

int Count(const std::string& text, const std::string& pattern) {
  std::regex re(pattern);
  return static_cast<int>(std::distance(std::sregex_iterator(text.begin(), text.end(), re), std::sregex_iterator()));
}

// `tessera run ISLANDS -- accel_worker ARGS` with the shims on the library path.
Proc Job(const std::string& env, const std::string& islands, const std::string& args) {
  return Shell("LD_LIBRARY_PATH=" TESSERA_SHIM_DIR " TESSERA_TIMEOUT=20s " + env + " " TESSERA_CLI " run " + islands +
               " -- " TESSERA_ACCEL_WORKER " " + args);
}

struct Layout {
  const char* name;
  const char* islands;
  int ranks;
  const char* env;
};

void PrintTo(const Layout& l, std::ostream* os) { *os << l.islands; }

class Layouts : public ::testing::TestWithParam<Layout> {};

// The CoreX rows pointed at their host shims (tests/shims/corex_abi.h) by their variables.
#define COREX_SHIMS                         \
  "TESSERA_COREX_LIBRARY=" TESSERA_SHIM_DIR \
  "/corex/libcudart.so "                    \
  "TESSERA_CCL_LIB=" TESSERA_SHIM_DIR "/corex/libnccl.so"

TEST_P(Layouts, EveryCollectiveIsExactAndBitIdenticalOnDeviceMemory) {
  const Layout& l = GetParam();
  Proc r = Job(l.env, l.islands, "check");
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_EQ(Count(r.out, "OK rank"), l.ranks) << r.out;
  EXPECT_EQ(Count(r.out, "FAIL"), 0) << r.out;
}

INSTANTIATE_TEST_SUITE_P(
    StagedRank, Layouts,
    ::testing::Values(
        // A world of one island is the island's library alone: its 16-bit reductions carry the library's rounding
        // at every hop (the shims round as HCCL and NCCL's ring kernels do), checked against that bound.
        Layout{"one_npu_island_of_3_on_hccl", "--island ascend=npu:3", 3, "ACCEL_WORKER_LIBRARY_16BIT=1"},
        Layout{"one_musa_island_of_2_on_mccl", "--island moore=musa:2", 2, "ACCEL_WORKER_LIBRARY_16BIT=1"},
        Layout{"npu_2_beside_host_1", "--island ascend=npu:2 --island nvidia=host:1", 3, ""},
        Layout{"npu_1_musa_2_host_1", "--island ascend=npu:1 --island moore=musa:2 --island x86=host:1", 4,
               "TESSERA_COPY_BRIDGE=off"},
        Layout{"npu_3_beside_musa_1_slow_streams", "--island ascend=npu:3 --island moore=musa:1", 4,
               "TESSERA_SHIM_STREAM_DELAY_US=300"},
        Layout{"npu_1_beside_host_2_over_tcp", "--island ascend=npu:1 --island nvidia=host:2", 3,
               "TESSERA_BRIDGE=tcp TESSERA_COPY_BRIDGE=off"},
        // Islands of several devices beside host islands and islands of one rank: the island's library
        // runs the island phases, only shards cross the bridge (16-bit reductions staged).
        Layout{"npu_4_beside_host_1_musa_1", "--island ascend=npu:4 --island nvidia=host:1 --island moore=musa:1", 6,
               ""},
        Layout{"musa_3_beside_npu_2_host_2", "--island moore=musa:3 --island ascend=npu:2 --island x86=host:2", 7, ""},
        Layout{"npu_2_beside_npu_3_over_tcp", "--island ascend=npu:2 --island ascend2=npu:3", 5, "TESSERA_BRIDGE=tcp"},
        Layout{"npu_3_beside_musa_5", "--island ascend=npu:3 --island moore=musa:5", 8, ""},
        Layout{"host_1_beside_npu_8", "--island x86=host:1 --island ascend=npu:8", 9, ""},
        // npu islands that widen 16-bit data on the device (CANN's aclnnCast on the shim) and reduce it in f32 on
        // HCCL, beside an emulated device island on the device bridge and host islands.
        Layout{"npu_2_beside_emu_1_host_1", "--island ascend=npu:2 --island nvidia=emu:1 --island x86=host:1", 4, ""},
        Layout{"npu_3_beside_emu_1_slow_streams", "--island ascend=npu:3 --island nvidia=emu:1", 4,
               "TESSERA_SHIM_STREAM_DELAY_US=200 TESSERA_EMU_STREAM_DELAY_US=200"},
        Layout{"npu_4_beside_emu_1_host_2", "--island ascend=npu:4 --island nvidia=emu:1 --island x86=host:2", 7, ""},
        Layout{"npu_3_small_chunks_beside_host_1", "--island ascend=npu:3 --island x86=host:1", 4,
               "TESSERA_DEVICE_CHUNK=4K"},
        // corex islands (Iluvatar CoreX: CUDA's runtime API and NCCL's under their own names) on the CoreX shims,
        // found through the rows' variables as an install outside the loader's path would be: alone (IXCCL
        // inside: its 16-bit reductions round at every hop, as NCCL's do), beside host ranks, and beside an emulated
        // device island on the device bridge.
        Layout{"one_corex_island_of_3_on_ixccl", "--island iluvatar=corex:3", 3,
               COREX_SHIMS " ACCEL_WORKER_LIBRARY_16BIT=1"},
        Layout{"corex_2_beside_host_2", "--island iluvatar=corex:2 --island x86=host:2", 4, COREX_SHIMS},
        Layout{"corex_2_beside_emu_1_host_1_slow_streams",
               "--island iluvatar=corex:2 --island nvidia=emu:1 --island x86=host:1", 4,
               COREX_SHIMS " TESSERA_SHIM_STREAM_DELAY_US=200 TESSERA_EMU_STREAM_DELAY_US=200"},
        // The copy bridge: an npu island of one rank copies its floating-point allreduce between device memory and
        // rings registered with aclrtHostRegisterV2 and folds nothing, beside an island on the device bridge (by
        // default, TESSERA_COPY_BRIDGE=auto), beside host islands (which fold; with =on), two of them beside one
        // folder, slow streams; two npu islands of one rank alone have no folder and stay staged.
        Layout{"npu_1_copy_bridge_beside_emu_1", "--island ascend=npu:1 --island nvidia=emu:1", 2, ""},
        Layout{"npu_1_copy_bridge_beside_host_2", "--island ascend=npu:1 --island x86=host:2", 3,
               "TESSERA_COPY_BRIDGE=on"},
        Layout{"npu_1_npu_1_copy_bridges_beside_emu_1_slow_streams",
               "--island a=npu:1 --island b=npu:1 --island nvidia=emu:1", 3,
               "TESSERA_SHIM_STREAM_DELAY_US=200 TESSERA_EMU_STREAM_DELAY_US=200"},
        Layout{"npu_1_copy_bridge_beside_npu_2_host_1", "--island a=npu:1 --island b=npu:2 --island x86=host:1", 4,
               "TESSERA_COPY_BRIDGE=on"},
        Layout{"npu_1_copy_bridge_beside_emu_1_over_relayed_tcp", "--island ascend=npu:1 --island nvidia=emu:1", 2,
               "TESSERA_DEVICE_BRIDGE=device TESSERA_BRIDGE=tcp"},
        Layout{"npu_1_beside_npu_1_copy_bridge_without_a_folder", "--island a=npu:1 --island b=npu:1", 2,
               "TESSERA_COPY_BRIDGE=on"},
        // The NCCL row over a multi-rank NCCL-shaped library (the MCCL shim under the prefix mccl).
        Layout{"musa_2_on_the_nccl_row_beside_host_2", "--island moore=musa:2 --island x86=host:2", 4,
               "TESSERA_CCL=nccl TESSERA_CCL_LIB=" TESSERA_SHIM_DIR "/libmccl.so.2 TESSERA_CCL_PREFIX=mccl"}),
    [](const auto& info) { return std::string(info.param.name); });

#if TESSERA_HAVE_UCX_HEADERS
// An npu island's data crosses the ucx row as it crosses any link: staged to host memory, copied into the row's ring
// (plain mmap'ed memory registered with UCX; NPU memory is never handed to UCX). Skipped where UCX is not installed.
TEST(StagedRank, AnNpuIslandIsExactAcrossTheUcxRow) {
  const tessera::Status v = tessera::comm::MakeUcxTransport()->Viable();
  if (!v.ok()) GTEST_SKIP() << "the ucx row is not viable here: " << v.message();
  Proc r = Job("TESSERA_TRANSPORTS=ucx", "--island ascend=npu:2 --island nvidia=host:1", "check");
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_EQ(Count(r.out, "OK rank"), 3) << r.out;
}
#endif

TEST(StagedRank, LargeCountsCrossStagingGrowthAndBridgeChunks) {
  Proc r = Job("TESSERA_DEVICE_CHUNK=64K", "--island ascend=npu:2 --island nvidia=host:1", "check --sizes 300007");
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_EQ(Count(r.out, "OK rank"), 3) << r.out;
}

TEST(StagedRank, TesseraBenchRunsOnNpuDeviceMemory) {
  // `tessera bench` keeps an npu rank's buffers in device memory of the ACL row, with a stream of its own, and
  // checks every result (its "wrong" count).
  Proc r = Shell("LD_LIBRARY_PATH=" TESSERA_SHIM_DIR " " TESSERA_CLI
                 " run --island ascend=npu:1 --island x86=host:1 -- " TESSERA_CLI
                 " bench allreduce --sizes 4K,1M --iters 2 --warmup 1 --check --json -");
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find(R"("memory":"device+host")"), std::string::npos) << r.out;
  EXPECT_EQ(Count(r.out, R"("wrong":0)"), 2) << r.out;
}

// `tessera bench allreduce ARGS --check --json -` under `tessera run ISLANDS` on the shims, with TESSERA_DEVICE_TRACE
// writing DIR/t.rankN (DIR made first) and ENV beside it.
Proc TracedBench(const std::string& dir, const std::string& env, const std::string& islands, const std::string& args) {
  std::filesystem::create_directories(dir);
  return Shell("LD_LIBRARY_PATH=" TESSERA_SHIM_DIR " TESSERA_DEVICE_TRACE=" + dir + "/t " + env +
               " " TESSERA_CLI " run " + islands + " -- " TESSERA_CLI " bench allreduce " + args + " --check --json -");
}

// TESSERA_DEVICE_TRACE: the staged (npu) rank writes one row per part of each staged allreduce (1 MiB chunks of a 4 MiB
// call: parts 0..3 of every run, its phases in time order), the device-bridge (emu) rank one row per bridge job.
TEST(StagedRank, DeviceTraceHasARowPerPartOfTheStagedRankAndPerJobOfTheBridgeRank) {
  const std::string dir = ::testing::TempDir() + "staged-trace-" + std::to_string(::getpid());
  Proc r = TracedBench(dir, "TESSERA_DEVICE_CHUNK=1M TESSERA_COPY_BRIDGE=off",
                       "--island ascend=npu:1 --island nvidia=emu:1", "--sizes 4M --iters 2 --batch 1 --warmup 1");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_EQ(Count(r.out, R"("wrong":0)"), 1) << r.out;
  std::ifstream staged(dir + "/t.rank0"), bridge(dir + "/t.rank1");
  std::string line;
  ASSERT_TRUE(std::getline(staged, line)) << "no trace of the staged rank";
  EXPECT_EQ(line, "call run part bytes queued_us wait_us down_us host_us up_us");
  int rows = 0;
  std::map<uint64_t, int> parts;  // run -> parts seen, in order
  while (std::getline(staged, line)) {
    std::istringstream in(line);
    std::string call;
    uint64_t run = 0, bytes = 0;
    int part = -1;
    double queued, wait, down, host, up;
    ASSERT_TRUE(in >> call >> run >> part >> bytes >> queued >> wait >> down >> host >> up) << line;
    if (call != "allreduce") continue;
    EXPECT_EQ(part, parts[run]++) << line;
    EXPECT_EQ(bytes, 2u << 20) << line;  // 1 MiB down and 1 MiB up
    EXPECT_LE(queued, down) << line;
    EXPECT_LE(wait, down) << line;
    EXPECT_LE(down, host) << line;
    EXPECT_LE(host, up) << line;
    ++rows;
  }
  EXPECT_GE(rows, 3 * 4);  // warm-up, two timed calls and the check: four parts each
  for (const auto& [run, n] : parts) EXPECT_EQ(n, 4) << "run " << run;
  ASSERT_TRUE(std::getline(bridge, line)) << "no trace of the device-bridge rank";
  EXPECT_EQ(line, "ticket submitted_us started_us ran_us copied_us send_ops send_mean_us fold_ops fold_mean_us");
  int jobs = 0, with_ops = 0;
  while (std::getline(bridge, line)) {
    std::istringstream in(line);
    uint64_t ticket = 0, send_ops = 0, fold_ops = 0;
    double submitted, started, ran, copied, send_mean, fold_mean;
    ASSERT_TRUE(in >> ticket >> submitted >> started >> ran >> copied >> send_ops >> send_mean >> fold_ops >> fold_mean)
        << line;
    EXPECT_LE(started, ran) << line;
    EXPECT_GE(send_mean, 0) << line;
    EXPECT_GE(fold_mean, 0) << line;
    // A bridge job of the allreduce copies to the npu rank's ring and folds what it sends (the emu rank folds it all).
    if (send_ops > 0 && fold_ops > 0) ++with_ops;
    ++jobs;
  }
  EXPECT_GE(jobs, 3);
  EXPECT_GE(with_ops, 3);
  std::filesystem::remove_all(dir);
}

// TESSERA_DEVICE_CHUNK's default, `auto`: a 24 MiB allreduce is cut into four 6 MiB chunks (the staged rank's trace has
// four parts per run), every element exact; a value that is neither `auto` nor a size is refused, naming it.
TEST(StagedRank, TheAutoChunkCutsALargeCallIntoQuartersAndABadChunkIsNamed) {
  const std::string dir = ::testing::TempDir() + "auto-chunk-" + std::to_string(::getpid());
  Proc r = TracedBench(dir, "TESSERA_COPY_BRIDGE=off", "--island ascend=npu:1 --island x86=host:1",
                       "--sizes 24M --iters 1 --batch 1 --warmup 0");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_EQ(Count(r.out, R"("wrong":0)"), 1) << r.out;
  std::ifstream trace(dir + "/t.rank0");
  std::string line;
  std::getline(trace, line);                           // the header
  std::map<std::string, std::vector<uint64_t>> parts;  // run -> bytes of each part, down and up
  while (std::getline(trace, line)) {
    std::istringstream in(line);
    std::string call, run, part;
    uint64_t bytes = 0;
    if (in >> call >> run >> part >> bytes && call == "allreduce") parts[run].push_back(bytes);
  }
  ASSERT_FALSE(parts.empty()) << "no staged allreduce in the trace";
  for (const auto& [run, bytes] : parts) EXPECT_EQ(bytes, std::vector<uint64_t>(4, 12u << 20)) << "run " << run;
  std::filesystem::remove_all(dir);

  Proc bad = Job("TESSERA_DEVICE_CHUNK=lots", "--island ascend=npu:1 --island x86=host:1", "check --sizes 7");
  EXPECT_NE(bad.status, 0) << bad.out;
  EXPECT_NE(bad.out.find("TESSERA_DEVICE_CHUNK='lots' must be `auto` or a size"), std::string::npos) << bad.out;
}

// What each rank's links carried, from TESSERA_LINK_TRACE: "peer P island I TRANSPORT sent B" lines and the device
// line "device npu:0 down B up B ...".
struct Traffic {
  std::map<int, uint64_t> sent;  // peer -> bytes
  std::map<int, int> island;     // peer -> its island
  uint64_t down = 0, up = 0;
  int copy_bridge_calls = -1;  // -1: the device line does not say
  int copy_bridge_sync_copies = -1;
};
Traffic ReadTrace(const std::string& path) {
  Traffic t;
  std::ifstream f(path);
  std::string line;
  std::smatch m;
  while (std::getline(f, line)) {
    if (std::regex_search(line, m, std::regex(R"(^peer (\d+) island (\d+) \S+ sent (\d+))"))) {
      t.sent[std::stoi(m[1])] = std::stoull(m[3]);
      t.island[std::stoi(m[1])] = std::stoi(m[2]);
    } else if (std::regex_search(line, m, std::regex(R"(^device \S+ down (\d+) up (\d+))"))) {
      t.down = std::stoull(m[1]);
      t.up = std::stoull(m[2]);
      if (std::regex_search(line, m, std::regex(R"( copy_bridge_calls (\d+))"))) t.copy_bridge_calls = std::stoi(m[1]);
      if (std::regex_search(line, m, std::regex(R"( copy_bridge_sync_copies (\d+))")))
        t.copy_bridge_sync_copies = std::stoi(m[1]);
    }
  }
  return t;
}

constexpr uint64_t kHeaders = 1024;  // what a rank may send a peer besides data: 64-byte call headers

TEST(StagedRank, OnlyShardsCrossTheBridgeFromAnIslandOfSeveralDevices) {
  // npu 2 + host 2, one f32 allreduce of C elements in one bridge chunk: npu rank r's shard is C/2; its island's
  // library reduce-scatters and allgathers on the device, so the rank stages down and up only its shard, sends
  // nothing to its island peer but headers, and sends its counterpart in the host island (rank r + 2) exactly a
  // shard: half of it as its island's partial sums, half as the final values of the part it reduces.
  const size_t C = 1 << 20, shard = C / 2 * 4;
  char dir[] = "/tmp/tsr-linktrace-XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  const std::string prefix = std::string(dir) + "/t";
  Proc r = Job("TESSERA_LINK_TRACE=" + prefix, "--island ascend=npu:2 --island nvidia=host:2",
               "traffic " + std::to_string(C));
  ASSERT_EQ(r.status, 0) << r.out;
  for (int rank = 0; rank < 2; ++rank) {
    Traffic t = ReadTrace(prefix + ".rank" + std::to_string(rank));
    ASSERT_EQ(t.sent.size(), 3u) << "rank " << rank;
    EXPECT_EQ(t.down, shard) << "rank " << rank;
    EXPECT_EQ(t.up, shard) << "rank " << rank;
    EXPECT_LE(t.sent[1 - rank], kHeaders) << "rank " << rank << " to its island peer";
    EXPECT_GE(t.sent[rank + 2], shard) << "rank " << rank << " to its counterpart";
    EXPECT_LE(t.sent[rank + 2], shard + kHeaders) << "rank " << rank << " to its counterpart";
    EXPECT_LE(t.sent[3 - rank], kHeaders) << "rank " << rank << " to the other host rank";
  }
  // The same job with the island's library missing on every rank: staged whole, the island phases on the host path
  // (the rank's island peer now gets half the buffer as partial sums, and its shard of the result back).
  Proc s = Job("TESSERA_LINK_TRACE=" + prefix + "s TESSERA_CCL_LIB=/nonexistent/libhccl.so",
               "--island ascend=npu:2 --island nvidia=host:2", "traffic " + std::to_string(C));
  ASSERT_EQ(s.status, 0) << s.out;
  EXPECT_NE(s.out.find("/nonexistent/libhccl.so"), std::string::npos) << s.out;  // the one warning says why
  Traffic t = ReadTrace(prefix + "s.rank0");
  EXPECT_EQ(t.down, C * 4);
  EXPECT_EQ(t.up, C * 4);
  EXPECT_GE(t.sent[1], shard);
  std::filesystem::remove_all(dir);
}

TEST(StagedRank, SixteenBitShardsCrossTheBridgeInF32FromAWideningIsland) {
  // npu 2 + host 2, one bf16 allreduce of C elements in one bridge chunk: the island widens its inputs on the device
  // (aclnnCast), HCCL reduce-scatters them in f32, and each npu rank stages down only its shard of f32 partial sums
  // (C/2 elements, twice the 16-bit bytes) and takes up its shard of bf16 results; its counterpart in the host island
  // gets a quarter of the buffer as f32 partial sums and a quarter as bf16 final values.
  const size_t C = 1 << 20;
  char dir[] = "/tmp/tsr-linktrace-XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  const std::string prefix = std::string(dir) + "/t";
  Proc r = Job("TESSERA_LINK_TRACE=" + prefix, "--island ascend=npu:2 --island nvidia=host:2",
               "traffic " + std::to_string(C) + " bf16");
  ASSERT_EQ(r.status, 0) << r.out;
  for (int rank = 0; rank < 2; ++rank) {
    Traffic t = ReadTrace(prefix + ".rank" + std::to_string(rank));
    EXPECT_EQ(t.down, C / 2 * 4) << "rank " << rank;
    EXPECT_EQ(t.up, C / 2 * 2) << "rank " << rank;
    EXPECT_LE(t.sent[1 - rank], kHeaders) << "rank " << rank << " to its island peer";
    EXPECT_GE(t.sent[rank + 2], C / 4 * 6) << "rank " << rank << " to its counterpart";
    EXPECT_LE(t.sent[rank + 2], C / 4 * 6 + kHeaders) << "rank " << rank << " to its counterpart";
  }
  // CANN's operator library missing: one warning names the file and the variable, and 16-bit reductions are staged
  // whole (the island phases on the host path).
  Proc s = Job("TESSERA_LINK_TRACE=" + prefix + "s TESSERA_ACL_OPAPI_LIBRARY=/nonexistent/libopapi.so",
               "--island ascend=npu:2 --island nvidia=host:2", "traffic " + std::to_string(C) + " bf16");
  ASSERT_EQ(s.status, 0) << s.out;
  EXPECT_EQ(Count(s.out, "cannot widen 16-bit data to f32 on its device.*/nonexistent/libopapi.so"), 1) << s.out;
  EXPECT_NE(s.out.find("TESSERA_ACL_OPAPI_LIBRARY"), std::string::npos) << s.out;
  Traffic t = ReadTrace(prefix + "s.rank0");
  EXPECT_EQ(t.down, C * 2);
  EXPECT_EQ(t.up, C * 2);
  std::filesystem::remove_all(dir);
}

TEST(StagedRank, AnEmuIslandKeepsTheDeviceBridgeBesideAStagedNpuIsland) {
  // The device bridge is chosen per island: the emulated device's rank stays on it beside a staged npu island, and
  // every collective stays exact and bit-identical (the staged island cuts allreduces into chunks, which the device
  // bridge follows).
  Proc r = Job("TESSERA_LOG=info TESSERA_DEVICE_CHUNK=64K", "--island nvidia=emu:1 --island ascend=npu:2",
               "check --sizes 0,7,4099,70001");
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_EQ(Count(r.out, "OK rank"), 3) << r.out;
  EXPECT_EQ(Count(r.out, "rank 0: joined[^\n]*copy engines straight into the shm rings"), 1) << r.out;
}

TEST(StagedRank, TheCopyBridgeMovesAnNpuRanksAllreduceWithoutStaging) {
  // By default (TESSERA_COPY_BRIDGE=auto), npu 1 + emu 1, one f32 allreduce: the npu rank says it is on the copy
  // bridge, stages no byte (TESSERA_LINK_TRACE's down/up), makes one copy-bridge call, and sends its whole buffer once
  // for the emu rank to fold (it folds nothing). With TESSERA_COPY_BRIDGE=off the same call stages the buffer down and
  // the result up. With a
  // reduce-scatter, an allgather and a broadcast after it, those take the copy bridge too: four calls, none staged.
  const size_t C = 1 << 20;
  char dir[] = "/tmp/tsr-copybridge-XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  const std::string prefix = std::string(dir) + "/t";
  const char* islands = "--island ascend=npu:1 --island nvidia=emu:1";
  Proc r = Job("TESSERA_LOG=info TESSERA_LINK_TRACE=" + prefix, islands, "traffic " + std::to_string(C));
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_EQ(Count(r.out, "OK rank"), 2) << r.out;
  EXPECT_EQ(Count(r.out, "rank 0: joined[^\n]*copy engines straight into the shm rings, folds nothing"), 1) << r.out;
  // Its own piece where TESSERA_DEVICE_PIECE is not set (kCopyBridgePiece), the variable's where it is (below).
  EXPECT_EQ(Count(r.out, "rank 0: joined[^\n]*broadcast; 4 MiB a copy\\)"), 1) << r.out;
  Traffic t = ReadTrace(prefix + ".rank0");
  EXPECT_GE(t.sent[1], C * 4);
  EXPECT_LE(t.sent[1], C * 4 + kHeaders);
  EXPECT_EQ(t.down, 0u);
  EXPECT_EQ(t.up, 0u);
  EXPECT_EQ(t.copy_bridge_calls, 1);
  Proc four =
      Job("TESSERA_LOG=info TESSERA_DEVICE_PIECE=64K TESSERA_COPY_BRIDGE=on TESSERA_LINK_TRACE=" + prefix + "four",
          islands, "traffic " + std::to_string(C) + " f32 four");
  ASSERT_EQ(four.status, 0) << four.out;
  EXPECT_EQ(Count(four.out, "OK rank"), 2) << four.out;
  EXPECT_EQ(Count(four.out, "rank 0: joined[^\n]*broadcast; 64 KiB a copy\\)"), 1) << four.out;
  t = ReadTrace(prefix + "four.rank0");
  EXPECT_EQ(t.down, 0u);
  EXPECT_EQ(t.up, 0u);
  EXPECT_EQ(t.copy_bridge_calls, 4);
  // Every copy between the device and the rings asynchronous (ACL's 64-byte rule for both addresses), also after the
  // barriers' small messages between the calls: every message starts 64-byte aligned in a ring (kChannelAlign).
  EXPECT_EQ(t.copy_bridge_sync_copies, 0);
  Proc off = Job("TESSERA_LOG=info TESSERA_COPY_BRIDGE=off TESSERA_LINK_TRACE=" + prefix + "off", islands,
                 "traffic " + std::to_string(C));
  ASSERT_EQ(off.status, 0) << off.out;
  EXPECT_EQ(Count(off.out, "rank 0: joined[^\n]*staged through pinned host memory"), 1) << off.out;
  t = ReadTrace(prefix + "off.rank0");
  EXPECT_EQ(t.down, C * 4);
  EXPECT_EQ(t.up, C * 4);
  EXPECT_EQ(t.copy_bridge_calls, 0);
  // Beside host islands alone the default stages (their host engines would fold the whole bridge); =on takes the
  // copy bridge there too.
  Proc host = Job("TESSERA_LOG=info", "--island ascend=npu:1 --island x86=host:1", "traffic " + std::to_string(C));
  ASSERT_EQ(host.status, 0) << host.out;
  EXPECT_EQ(Count(host.out, "rank 0: joined[^\n]*staged through pinned host memory"), 1) << host.out;
  Proc on = Job("TESSERA_LOG=info TESSERA_COPY_BRIDGE=on", "--island ascend=npu:1 --island x86=host:1",
                "traffic " + std::to_string(C));
  ASSERT_EQ(on.status, 0) << on.out;
  EXPECT_EQ(Count(on.out, "rank 0: joined[^\n]*copy engines straight into the shm rings, folds nothing"), 1) << on.out;
  Proc bad = Job("TESSERA_COPY_BRIDGE=yes", islands, "traffic 7");
  EXPECT_NE(bad.status, 0) << bad.out;
  EXPECT_NE(bad.out.find("TESSERA_COPY_BRIDGE"), std::string::npos) << bad.out;
  EXPECT_NE(bad.out.find("yes"), std::string::npos) << bad.out;
  std::filesystem::remove_all(dir);
}

TEST(StagedRank, ACopyBridgeTheRuntimeRefusesStagesWithOneWarning) {
  // The runtime refuses to register the rings (a driver without aclrtHostRegisterV2's support, on the shim's hook):
  // one warning naming the call, and every collective stays exact on pinned staging (the wire is the same).
  Proc r = Job("TESSERA_COPY_BRIDGE=on TESSERA_SHIM_ACL_REGISTER_FAILS=1",
               "--island ascend=npu:1 --island nvidia=emu:1", "check --sizes 7,4099");
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_EQ(Count(r.out, "OK rank"), 2) << r.out;
  EXPECT_EQ(Count(r.out, "aclrtHostRegisterV2[^\n]*stage through pinned memory instead"), 1) << r.out;
}

TEST(StagedRank, TheDeviceBridgeIslandFoldsTheStagedIslandsShare) {
  // emu 1 + npu 1 + host 1, one f32 allreduce of C elements in one bridge chunk (one segment, an owner per island).
  // The emu island is on the device bridge and the npu rank stages through pinned memory, so the npu island leaves
  // its share of the bridge's folds to the other two (Comm::FoldWeights): the npu rank sends each of them exactly its
  // partial sums of the half that one folds, and no results of its own. The result is checked exact on every rank.
  const size_t C = 1 << 20;
  char dir[] = "/tmp/tsr-linktrace-XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  const std::string prefix = std::string(dir) + "/t";
  const char* islands = "--island nvidia=emu:1 --island ascend=npu:1 --island x86=host:1";
  Proc r = Job("TESSERA_COPY_BRIDGE=off TESSERA_LINK_TRACE=" + prefix, islands, "traffic " + std::to_string(C));
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_EQ(Count(r.out, "OK rank"), 3) << r.out;
  Traffic t = ReadTrace(prefix + ".rank1");
  for (int peer : {0, 2}) {
    EXPECT_GE(t.sent[peer], C / 2 * 4) << "to rank " << peer;
    EXPECT_LE(t.sent[peer], C / 2 * 4 + kHeaders) << "to rank " << peer;
  }
  // An int32 allreduce does not take the device bridge: every island folds a third (Part), and the npu rank sends
  // each of the others its partial sums of that one's third and the final values of its own.
  Proc i = Job("TESSERA_LINK_TRACE=" + prefix + "i", islands, "traffic " + std::to_string(C) + " int32");
  ASSERT_EQ(i.status, 0) << i.out;
  t = ReadTrace(prefix + "i.rank1");
  const size_t third = C / 3;  // parts 0 and 1 (the last one is one longer)
  EXPECT_GE(t.sent[0], 2 * third * 4);
  EXPECT_LE(t.sent[0], 2 * third * 4 + kHeaders);
  EXPECT_GE(t.sent[2], (2 * third + 1) * 4);
  EXPECT_LE(t.sent[2], (2 * third + 1) * 4 + kHeaders);
  std::filesystem::remove_all(dir);
}

TEST(StagedRank, NativeIslandReduceHandsSixteenBitDataToTheLibrary) {
  // TESSERA_ISLAND_REDUCE=native: HCCL reduces bf16 in bf16, rounding at every hop as the shim (and HCCL's public
  // code) does, so a 16-bit sum of four ranks is no longer within one rounding of the exact sum: the same check that
  // passes by default fails, naming a 16-bit case. (This is what a 16-bit reduction handed to a vendor library looks
  // like to the bit-identity tests.)
  Proc r = Job("TESSERA_ISLAND_REDUCE=native", "--island ascend=npu:4 --island x86=host:1", "check --sizes 4099");
  EXPECT_NE(r.status, 0) << r.out;
  EXPECT_GE(Count(r.out, "FAIL rank [0-4]: [^\n]*(bf16|f16|bfloat16|float16)"), 1) << r.out;
  // Within the library's bound, every rank still gets the same bits (the island allgathers the shard owners'
  // results), and the fold across islands is still f32 with one rounding.
  Proc ok = Job("TESSERA_ISLAND_REDUCE=native ACCEL_WORKER_LIBRARY_16BIT=1",
                "--island ascend=npu:4 --island x86=host:1 --island nvidia=emu:1", "check --sizes 7,4099");
  EXPECT_EQ(ok.status, 0) << ok.out;
  EXPECT_EQ(Count(ok.out, "OK rank"), 6) << ok.out;
  // Every rank of an island must ask for the same: one that differs is refused, naming both settings.
  Proc m = Shell("LD_LIBRARY_PATH=" TESSERA_SHIM_DIR " TESSERA_TIMEOUT=20s " TESSERA_CLI
                 " run --island ascend=npu:2 --island x86=host:1 -- sh -c '[ $TESSERA_RANK = 1 ] && export "
                 "TESSERA_ISLAND_REDUCE=native; exec " TESSERA_ACCEL_WORKER " check --sizes 7'");
  EXPECT_NE(m.status, 0) << m.out;
  EXPECT_NE(m.out.find("every rank of an island must use the same"), std::string::npos) << m.out;
}

TEST(StagedRank, TheLibraryMissingOnOneRankStagesTheWholeIsland) {
  // Rank 1 of the npu island cannot load HCCL: the island agrees to stage (one warning naming the rank and the
  // file), and every collective stays exact.
  Proc r = Shell("LD_LIBRARY_PATH=" TESSERA_SHIM_DIR " TESSERA_TIMEOUT=20s " TESSERA_CLI
                 " run --island ascend=npu:3 --island nvidia=host:1 -- sh -c '[ $TESSERA_RANK = 1 ] && export "
                 "TESSERA_CCL_LIB=/nonexistent/libhccl.so; exec " TESSERA_ACCEL_WORKER " check --sizes 0,7,4099'");
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_EQ(Count(r.out, "OK rank"), 4) << r.out;
  EXPECT_EQ(Count(r.out, "rank 1 cannot load it.*/nonexistent/libhccl.so"), 1) << r.out;
}

TEST(StagedRank, LauncherGivesEachRankItsOwnDevice) {
  // Three npu ranks on a machine of four: each sees one device, index 0, through ASCEND_RT_VISIBLE_DEVICES.
  Proc r = Shell("LD_LIBRARY_PATH=" TESSERA_SHIM_DIR " TESSERA_SHIM_DEVICE_COUNT=4 " TESSERA_CLI
                 " run --island ascend=npu:3 -- sh -c 'echo \"rank $TESSERA_RANK device $TESSERA_DEVICE visible "
                 "$ASCEND_RT_VISIBLE_DEVICES\"'");
  EXPECT_EQ(r.status, 0) << r.out;
  for (int i = 0; i < 3; ++i)
    EXPECT_NE(r.out.find("rank " + std::to_string(i) + " device npu:0 visible " + std::to_string(i)), std::string::npos)
        << r.out;
  // More ranks than devices: dealt round-robin, as cuda devices are (two islands may share a device).
  Proc wrap =
      Shell("LD_LIBRARY_PATH=" TESSERA_SHIM_DIR " TESSERA_SHIM_DEVICE_COUNT=2 " TESSERA_CLI
            " run --island ascend=npu:3 -- sh -c 'echo \"rank $TESSERA_RANK visible $ASCEND_RT_VISIBLE_DEVICES\"'");
  EXPECT_EQ(wrap.status, 0) << wrap.out;
  for (const char* want : {"rank 0 visible 0", "rank 1 visible 1", "rank 2 visible 0"})
    EXPECT_NE(wrap.out.find(want), std::string::npos) << wrap.out;
  // No runtime at all: the launcher says which library it looked for and which variable points elsewhere.
  Proc none =
      Shell("TESSERA_ACL_LIBRARY=/nonexistent/libascendcl.so " TESSERA_CLI " run --island ascend=npu:1 -- true");
  EXPECT_NE(none.status, 0) << none.out;
  EXPECT_NE(none.out.find("/nonexistent/libascendcl.so"), std::string::npos) << none.out;
  EXPECT_NE(none.out.find("TESSERA_ACL_LIBRARY"), std::string::npos) << none.out;
}

TEST(StagedRank, HostMemoryWithAStreamIsRefusedOnEveryRank) {
  Proc r = Job("", "--island ascend=npu:1 --island nvidia=host:2", "wrongmem");
  EXPECT_EQ(Count(r.out, "ERROR rank"), 3) << r.out;
  EXPECT_EQ(Count(r.out, "FAIL"), 0) << r.out;
  EXPECT_NE(r.out.find("is not device memory of npu:0"), std::string::npos) << r.out;
  EXPECT_EQ(Count(r.out, R"(\(offender\): invalid argument: rank 0: allreduce: sendbuf = 0x[0-9a-f]+ is not device)"),
            1)
      << r.out;
}

// Every "ERROR rank R after Xs" line of `out` came within `limit` seconds.
void ExpectErrorsWithin(const std::string& out, double limit) {
  std::smatch m;
  std::string rest = out;
  while (std::regex_search(rest, m, std::regex(R"(ERROR rank \d after ([0-9.]+)s)"))) {
    EXPECT_LT(std::stod(m[1]), limit) << out;
    rest = m.suffix();
  }
}

TEST(StagedRank, ADeadPeerFailsEveryRankInTime) {
  Proc r = Job("TESSERA_TIMEOUT=10s", "--island ascend=npu:2 --island nvidia=host:1", "die 2");
  EXPECT_NE(r.status, 0) << r.out;
  EXPECT_EQ(Count(r.out, "ERROR rank [01] after"), 2) << r.out;
  ExpectErrorsWithin(r.out, 15.0);
}

TEST(StagedRank, ADeadRankOfAnIslandOfSeveralDevicesFailsEveryRankInTime) {
  // Rank 1 dies between collectives; its island peer is in the island's library (HCCL) and its counterpart on the
  // bridge: both, and the host rank, fail within the timeout, naming rank 1.
  Proc r = Job("TESSERA_TIMEOUT=10s", "--island ascend=npu:2 --island nvidia=host:2", "die 1");
  EXPECT_NE(r.status, 0) << r.out;
  EXPECT_EQ(Count(r.out, "ERROR rank [023] after"), 3) << r.out;
  EXPECT_EQ(Count(r.out, "ERROR rank [023] after [^\\n]*rank 1"), 3) << r.out;
  ExpectErrorsWithin(r.out, 15.0);
}

TEST(StagedRank, ADeadRankOfAWideningIslandFailsEveryRankInTime) {
  // As above, with bf16: the island widens on the device and reduces in f32 when rank 1 dies.
  Proc r = Job("TESSERA_TIMEOUT=10s", "--island ascend=npu:2 --island nvidia=host:2", "die 1 bf16");
  EXPECT_NE(r.status, 0) << r.out;
  EXPECT_EQ(Count(r.out, "ERROR rank [023] after [^\n]*rank 1"), 3) << r.out;
  ExpectErrorsWithin(r.out, 15.0);
}

TEST(StagedRank, ADeadPeerOfACopyBridgeFailsEveryRankInTime) {
  // TESSERA_COPY_BRIDGE=on: the npu rank (0) and the host rank (2) are in an allreduce on the bridge when the emu rank
  // (1) dies after its first; both fail within the timeout, naming rank 1 (in that first allreduce where the death is
  // announced before they have finished it: "FAIL ... first allreduce").
  Proc r = Job("TESSERA_TIMEOUT=10s TESSERA_COPY_BRIDGE=on",
               "--island ascend=npu:1 --island nvidia=emu:1 --island x86=host:1", "die 1");
  EXPECT_NE(r.status, 0) << r.out;
  EXPECT_EQ(Count(r.out, "(ERROR rank [02] after|FAIL rank [02]: first allreduce)[^\n]*rank 1"), 2) << r.out;
  ExpectErrorsWithin(r.out, 15.0);
}

TEST(StagedRank, ADeviceIndexPastTheCountNamesIt) {
  // Started without the launcher: rank 0 of a world of one asks for npu:5 of 2 devices.
  Proc r =
      Shell("LD_LIBRARY_PATH=" TESSERA_SHIM_DIR
            " TESSERA_SHIM_DEVICE_COUNT=2 TESSERA_RANK=0 TESSERA_WORLD_SIZE=1 "
            "TESSERA_STORE=127.0.0.1:1 TESSERA_TOKEN=t TESSERA_DEVICE=npu:5 " TESSERA_ACCEL_WORKER " check --sizes 1");
  EXPECT_NE(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("TESSERA_DEVICE='npu:5'"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("sees 2 devices"), std::string::npos) << r.out;
}

}  // namespace

// DeviceBridgeRank on the emulated device beside a staged rank of a row without the bridge (npu on the ACL shim):
// every island stages. (The emulated device's other jobs are in tests/comm/collectives_test.cpp,
// DeviceBridgeRankEmulated, where the sanitizers run them too.)
INSTANTIATE_TEST_SUITE_P(Bridge, Layouts,
                         ::testing::Values(Layout{"emu_1_beside_npu_1", "--island a=emu:1 --island b=npu:1", 2,
                                                  "TESSERA_COPY_BRIDGE=off"}),
                         [](const auto& info) { return std::string(info.param.name); });
