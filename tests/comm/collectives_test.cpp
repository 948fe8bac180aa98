// tests/comm/collectives_test: multi-process tests of the collectives under `tessera run`.
//
// Each case starts a real job (the launcher, the store, N rank processes of comm_worker) and checks what
// every rank printed: every collective, type and op against an f64 reference and bit-identity across
// ranks, on island layouts 1, 1+1, 3+5, 2+2+3 and 1+7, over shm and tcp links between islands; the device bridge's
// engine on an emulated device (device_emu_worker); and the faults — a count mismatch, a rank that dies, a rank that
// stalls, a wrong token, an unreachable store and malformed variables — each giving a clear error on every rank within
// the bound.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <array>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ostream>
#include <regex>
#include <string>

#include "comm/store/store.hpp"
#include "comm/transport/ucx.hpp"

namespace {

struct Proc {
  int status = -1;  // exit status, or 128+signal
  std::string out;
  double seconds = 0;
};

Proc Shell(const std::string& cmd) {
  Proc r;
  auto t0 = std::chrono::steady_clock::now();
  FILE* p = popen((cmd + " 2>&1").c_str(), "r");
  std::array<char, 4096> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) r.out.append(buf.data(), n);
  int st = pclose(p);
  r.status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

std::string Bin() { return std::getenv("TESSERA_BIN") ? std::getenv("TESSERA_BIN") : "tessera"; }
std::string Worker() {
  std::string bin = Bin();
  return bin.substr(0, bin.rfind('/')) + "/tests/comm/comm_worker";
}

std::string Islands(const std::vector<int>& sizes) {
  static const char* kVendors[] = {"ascend", "nvidia", "moore", "iluvatar"};
  std::string s;
  for (size_t i = 0; i < sizes.size(); ++i)
    s += " --island " + std::string(kVendors[i]) + "=host:" + std::to_string(sizes[i]);
  return s;
}

int Count(const std::string& text, const std::string& pattern) {
  std::regex re(pattern);
  return static_cast<int>(std::distance(std::sregex_iterator(text.begin(), text.end(), re), std::sregex_iterator()));
}

int World(const std::vector<int>& sizes) {
  int w = 0;
  for (int s : sizes) w += s;
  return w;
}

class Layouts : public ::testing::TestWithParam<std::vector<int>> {};

TEST_P(Layouts, EveryCollectiveTypeAndOpIsExactAndBitIdentical) {
  auto sizes = GetParam();
  Proc r = Shell("TESSERA_TIMEOUT=60s " + Bin() + " run" + Islands(sizes) + " -- " + Worker() +
                 " check --sizes 0,1,2,7,13,97,1000,4099");
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_EQ(Count(r.out, "OK rank"), World(sizes)) << r.out;
  EXPECT_EQ(Count(r.out, "FAIL"), 0) << r.out;
}

INSTANTIATE_TEST_SUITE_P(Comm, Layouts,
                         ::testing::Values(std::vector<int>{1}, std::vector<int>{1, 1}, std::vector<int>{3, 5},
                                           std::vector<int>{2, 2, 3}, std::vector<int>{1, 7}),
                         [](const auto& info) {
                           std::string n;
                           for (int s : info.param) n += (n.empty() ? "" : "_") + std::to_string(s);
                           return "islands_" + n;
                         });

TEST(Comm, LargeAndOddCountsOverTcpBridge) {
  Proc r = Shell("TESSERA_BRIDGE=tcp TESSERA_TCP_CHUNK=64K " + Bin() + " run" + Islands({2, 1, 2}) + " -- " + Worker() +
                 " check --sizes 1,4099,262147 --dtype bf16");
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_EQ(Count(r.out, "OK rank"), 5) << r.out;
}

// Each pair takes the first row of its order: TESSERA_TRANSPORTS for every pair, TESSERA_BRIDGE for the links
// between islands alone (the "joined" line names each rank's rows inside its island and across islands).
TEST(Comm, TheTransportOrderPicksEachPairsRow) {
  struct Case {
    std::string env, inside, bridge;
  } cases[] = {
      {"", "shm", "shm"},
      {"TESSERA_TRANSPORTS=tcp", "tcp", "tcp"},
      {"TESSERA_BRIDGE=tcp", "shm", "tcp"},
      {"TESSERA_TRANSPORTS=tcp,shm", "tcp", "tcp"},
  };
  for (const auto& c : cases) {
    Proc r = Shell("TESSERA_LOG=info " + c.env + " " + Bin() + " run" + Islands({2, 1}) + " -- " + Worker() +
                   " check --sizes 1,4099");
    EXPECT_EQ(r.status, 0) << c.env << "\n" << r.out;
    EXPECT_EQ(Count(r.out, "OK rank"), 3) << c.env << "\n" << r.out;
    EXPECT_EQ(Count(r.out, "rank 0: joined — [^\n]*island library: host \\(" + c.inside + "\\); bridge: " + c.bridge),
              1)
        << c.env << "\n"
        << r.out;
  }
  // Both at once: refused on every rank, naming both.
  Proc r = Shell("TESSERA_TRANSPORTS=tcp TESSERA_BRIDGE=shm " + Bin() + " run --timeout 10s" + Islands({1, 1}) +
                 " -- " + Worker() + " check");
  EXPECT_NE(r.status, 0) << r.out;
  EXPECT_EQ(Count(r.out, "TESSERA_TRANSPORTS='tcp' and TESSERA_BRIDGE='shm' are both set"), 2) << r.out;
}

TEST(Comm, LargeCountsOverShm) {
  Proc r = Shell("TESSERA_SHM_RING=64K " + Bin() + " run" + Islands({2, 2}) + " -- " + Worker() +
                 " check --sizes 262147 --dtype f16");
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_EQ(Count(r.out, "OK rank"), 4) << r.out;
}

TEST(Comm, SendRecvRing) {
  Proc r = Shell(Bin() + " run" + Islands({2, 2}) + " -- " + Worker() + " p2p");
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_EQ(Count(r.out, "OK rank"), 4) << r.out;
}

// The device bridge's engine (what a GPU rank runs: copies straight into the rings, folds on the device,
// results sent as their folds finish) on an emulated device, through 64 KiB rings in 16 KiB pieces:
// every rank emulated, then every other rank (a hybrid job: device-bridge ranks beside host ranks).
std::string EmuWorker() { return Worker().substr(0, Worker().rfind('/')) + "/device_emu_worker"; }

TEST(DeviceBridgeEmulated, ExactAndBitIdenticalOnAnEmulatedDevice) {
  for (const char* who : {"all", "even"}) {
    Proc r = Shell("TESSERA_TIMEOUT=30s TESSERA_SHM_RING=65536 " + Bin() + " run" + Islands({1, 1, 1}) + " -- " +
                   EmuWorker() + " --emulate " + who);
    EXPECT_EQ(r.status, 0) << who << "\n" << r.out;
    EXPECT_EQ(Count(r.out, "OK rank"), 3) << who << "\n" << r.out;
    EXPECT_EQ(Count(r.out, "on the emulated device bridge"), std::string(who) == "all" ? 3 : 2) << r.out;
  }
}

// The device bridge over TCP (TESSERA_DEVICE_BRIDGE=device where the bridge is TCP): the emulated ranks'
// TCP links to other islands go through TcpRelays with 64 KiB rings (wrapping many times per call), the
// host path's calls (the hash allgathers) through the same rings; beside host ranks on plain TCP.
TEST(DeviceBridgeEmulated, ExactAndBitIdenticalOverRelayedTcpLinks) {
  for (const char* who : {"all", "even"}) {
    Proc r = Shell("TESSERA_TIMEOUT=30s TESSERA_BRIDGE=tcp TESSERA_SHM_RING=65536 " + Bin() + " run" +
                   Islands({1, 1, 1}) + " -- " + EmuWorker() + " --emulate " + who + " --relay 65536");
    EXPECT_EQ(r.status, 0) << who << "\n" << r.out;
    EXPECT_EQ(Count(r.out, "OK rank"), 3) << who << "\n" << r.out;
    EXPECT_EQ(Count(r.out, "on the emulated device bridge, over 2 relayed TCP links"),
              std::string(who) == "all" ? 3 : 2)
        << r.out;
  }
}

// A peer that leaves: the relayed ranks fail at once, naming it, not after TESSERA_TIMEOUT. Which report
// comes first is a race: the relayed link's end of stream ("the link to rank 1 (tcp, relayed for the device
// bridge": its wording and its order after the bytes that arrived are TcpRelay.* in tcp_channel_test) or the
// communicator's health check ("rank 1 ... exited"), so each rank must name rank 1 either way.
TEST(DeviceBridgeEmulated, APeerGoneFailsTheRelayedRanksNamingIt) {
  Proc r = Shell("TESSERA_TIMEOUT=30s TESSERA_BRIDGE=tcp " + Bin() + " run" + Islands({1, 1, 1}) + " -- " +
                 EmuWorker() + " --emulate all --relay 65536 --quit-rank 1");
  EXPECT_NE(r.status, 0) << r.out;
  EXPECT_EQ(Count(r.out, "FAIL rank [02]: .*(the link to rank 1 .*relayed for the device bridge|rank 1 .* exited)"), 2)
      << r.out;
  EXPECT_LT(r.seconds, 20) << r.out;
}

// The emulated device runs a copy as soon as it is issued unless SendAfterFolds gates it: with the gate
// switched off (a planted bug), results leave before their folds and the check must catch it.
TEST(DeviceBridgeEmulated, AResultCopiedBeforeItsFoldsIsCaught) {
  Proc r = Shell("TESSERA_TIMEOUT=10s TESSERA_SHM_RING=65536 " + Bin() + " run" + Islands({1, 1}) + " -- " +
                 EmuWorker() + " --no-gate");
  EXPECT_NE(r.status, 0) << r.out;
  EXPECT_GE(Count(r.out, "FAIL rank [0-9]: [a-z0-9]+ op [0-9] count [0-9]+.*f64 reference"), 1) << r.out;
}

// ---- DeviceBridgeRank (src/comm/device/device_bridge_rank.cpp) on the emulated device row (emu,
// src/comm/runtime/runtime_emu.cpp): the device bridge, staging, the worker and its flags — the code a CUDA rank runs —
// without a GPU, under the sanitizers too. The emulated streams are asynchronous workers (TESSERA_EMU_STREAM_DELAY_US
// slows each operation), so a copy or fold run out of order shows wrong bytes (a SendAfterFolds that did not wait was
// caught this way when planted by hand). accel_worker checks every collective, type and op against an f64 reference,
// bit-identical.
std::string AccelWorker() {
  std::string bin = Bin();
  return bin.substr(0, bin.rfind('/')) + "/tests/comm/accel_worker";
}
Proc EmuJob(const std::string& env, const std::string& islands, const std::string& args) {
  return Shell("TESSERA_TIMEOUT=60s " + env + " " + Bin() + " run " + islands + " -- " + AccelWorker() + " " + args);
}

struct EmuLayout {
  const char* name;
  const char* islands;
  int ranks;
  const char* env;
};
void PrintTo(const EmuLayout& l, std::ostream* os) { *os << l.islands; }
class EmuLayouts : public ::testing::TestWithParam<EmuLayout> {};

TEST_P(EmuLayouts, EveryCollectiveIsExactAndBitIdenticalOnDeviceMemory) {
  const EmuLayout& l = GetParam();
  Proc r = EmuJob(l.env, l.islands, "check");
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_EQ(Count(r.out, "OK rank"), l.ranks) << r.out;
  EXPECT_EQ(Count(r.out, "FAIL"), 0) << r.out;
}

INSTANTIATE_TEST_SUITE_P(
    DeviceBridgeRankEmulated, EmuLayouts,
    ::testing::Values(
        EmuLayout{"emu_1_beside_host_1_device_bridge", "--island a=emu:1 --island b=host:1", 2, ""},
        EmuLayout{"emu_1_host_2_emu_1_slow_streams", "--island a=emu:1 --island b=host:2 --island c=emu:1", 4,
                  "TESSERA_EMU_STREAM_DELAY_US=200"},
        EmuLayout{"emu_1_beside_emu_1_staged", "--island a=emu:1 --island b=emu:1", 2, "TESSERA_DEVICE_BRIDGE=staged"},
        EmuLayout{"emu_1_beside_host_2_relayed_tcp", "--island a=emu:1 --island b=host:2", 3,
                  "TESSERA_BRIDGE=tcp TESSERA_DEVICE_BRIDGE=device"},
        // An island of several emu ranks: no library, so its island phases stage through the host path.
        EmuLayout{"emu_2_beside_host_1", "--island a=emu:2 --island b=host:1", 3, ""}),
    [](const auto& info) { return std::string(info.param.name); });

TEST(DeviceBridgeRankEmulated, AnEmuRankRunsTheDeviceBridgeOnItsRuntimeRow) {
  Proc r = EmuJob("TESSERA_LOG=info", "--island a=emu:1 --island b=host:1", "check --sizes 1,4099");
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("device: emu:0 (Tessera emulated device 0), path to the bridge: copy engines straight into "
                       "the shm rings"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("stream wait: stream-wait-value"), std::string::npos) << r.out;
}

TEST(DeviceBridgeRankEmulated, AWorldOfEmuRanksAloneIsRefusedSayingWhy) {
  Proc r = EmuJob("", "--island a=emu:2", "check --sizes 1");
  EXPECT_NE(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("has no collective library, so a world of emu ranks alone cannot run"), std::string::npos)
      << r.out;
}

TEST(DeviceBridgeRankEmulated, HostMemoryWithAStreamIsRefusedOnEveryRank) {
  Proc r = EmuJob("", "--island a=emu:1 --island b=host:2", "wrongmem");
  EXPECT_EQ(Count(r.out, "ERROR rank"), 3) << r.out;
  EXPECT_EQ(Count(r.out, "FAIL"), 0) << r.out;
  EXPECT_NE(r.out.find("is not device memory (host memory or no allocation at all)"), std::string::npos) << r.out;
}

TEST(DeviceBridgeRankEmulated, ADeadPeerFailsEveryRankInTime) {
  Proc r = EmuJob("TESSERA_TIMEOUT=10s", "--island a=emu:1 --island b=emu:1 --island c=host:1", "die 2");
  EXPECT_NE(r.status, 0) << r.out;
  EXPECT_EQ(Count(r.out, "ERROR rank [01] after"), 2) << r.out;
  EXPECT_LT(r.seconds, 20) << r.out;
}

// The ucx row carrying every pair (TESSERA_TRANSPORTS=ucx) on this host: UCX's own choice of transport, and TCP
// alone on loopback. Skipped, saying why, where UCX is not installed.
#define SKIP_WITHOUT_UCX()                                                          \
  do {                                                                              \
    const tessera::Status v = tessera::comm::MakeUcxTransport()->Viable();          \
    if (!v.ok()) GTEST_SKIP() << "the ucx row is not viable here: " << v.message(); \
  } while (0)

#if TESSERA_HAVE_UCX_HEADERS
TEST(CommUcx, EveryCollectiveTypeAndOpIsExactAndBitIdenticalOverTheUcxRow) {
  SKIP_WITHOUT_UCX();
  for (const std::string tls : {"", "UCX_TLS=tcp"}) {
    Proc r = Shell("TESSERA_LOG=info TESSERA_TIMEOUT=30s TESSERA_TRANSPORTS=ucx " + tls + " " + Bin() + " run" +
                   Islands({2, 1}) + " -- " + Worker() + " check --sizes 1,4099,262147");
    EXPECT_EQ(r.status, 0) << tls << "\n" << r.out;
    EXPECT_EQ(Count(r.out, "OK rank"), 3) << tls << "\n" << r.out;
    EXPECT_EQ(Count(r.out, "island library: host \\((ucx|none)\\); bridge: ucx"), 3) << tls << "\n" << r.out;
    // The error-handling variables the row sets for UCX's shared-memory transports are unused where UCX_TLS leaves
    // those out: UCX must not warn of them on every rank.
    EXPECT_EQ(Count(r.out, "unused env"), 0) << tls << "\n" << r.out;
  }
}

// A device island (the emulated device) across the ucx row: the device bridge with the row's channels taking the
// device's memory themselves (the emulated device's memory goes to UCX as host memory: the path a CUDA rank takes
// where UCX has CUDA support — sends posted from device memory, copies received into their destination, folds
// from a landing buffer), and staged through the host engine. Then two device islands with landing buffers of
// 64 KiB, which messages of 100003 elements wrap many times.
TEST(CommUcx, AnEmulatedDeviceIslandIsExactAcrossTheUcxRow) {
  SKIP_WITHOUT_UCX();
  struct Case {
    std::string env, islands, args;
    int ranks, direct;  // ranks that report their links taking the device's memory
  };
  for (const Case& c :
       {Case{"TESSERA_DEVICE_BRIDGE=device", "--island a=emu:1 --island b=host:2", "check", 3, 1},
        Case{"TESSERA_DEVICE_BRIDGE=staged", "--island a=emu:1 --island b=host:2", "check", 3, 0},
        Case{"TESSERA_DEVICE_BRIDGE=device TESSERA_DEVICE_RING=64K",
             "--island a=emu:1 --island b=emu:1 --island c=host:2", "check --sizes 1,4099,100003", 4, 2}}) {
    Proc r = EmuJob("TESSERA_LOG=info TESSERA_TRANSPORTS=ucx " + c.env, c.islands, c.args);
    EXPECT_EQ(r.status, 0) << c.env << "\n" << r.out;
    EXPECT_EQ(Count(r.out, "OK rank"), c.ranks) << c.env << "\n" << r.out;
    EXPECT_EQ(Count(r.out, "FAIL"), 0) << c.env << "\n" << r.out;
    EXPECT_EQ(Count(r.out, "receiving into emu memory, no ring"), c.direct) << c.env << "\n" << r.out;
  }
}

TEST(CommUcx, ADeadOrStalledPeerOnTheUcxRowFailsEveryRankInTime) {
  SKIP_WITHOUT_UCX();
  Proc dead = Shell("TESSERA_TIMEOUT=10s TESSERA_TRANSPORTS=ucx " + Bin() + " run" + Islands({2, 2}) + " -- " +
                    Worker() + " die 2");
  EXPECT_NE(dead.status, 0) << dead.out;
  // The dying rank _exits without destroying its communicator, so bytes UCX still held in its memory die with it: a
  // peer may already fail its first allreduce (the TCP row's bytes were in the kernel and arrive).
  EXPECT_EQ(Count(dead.out, "(ERROR rank \\d after [0-9.]+s|FAIL rank \\d: first allreduce): (remote error|timeout)"),
            3)
      << dead.out;
  EXPECT_NE(dead.out.find("rank 2"), std::string::npos) << dead.out;
  EXPECT_LT(dead.seconds, 10 + 5) << dead.out;
  Proc stalled = Shell("TESSERA_TIMEOUT=2s TESSERA_TRANSPORTS=ucx " + Bin() + " run" + Islands({1, 2}) + " -- " +
                       Worker() + " stall 1");
  EXPECT_NE(stalled.status, 0) << stalled.out;
  EXPECT_EQ(Count(stalled.out, "ERROR rank \\d after [0-9.]+s: (timeout|remote error)"), 2) << stalled.out;
  EXPECT_GE(Count(stalled.out, "no progress for 2000 ms \\(TESSERA_TIMEOUT\\) waiting on rank 1"), 1) << stalled.out;
  EXPECT_LT(stalled.seconds, 2 + 2 + 10) << stalled.out;
}
#endif

TEST(CommFaults, CountMismatchIsReportedOnEveryRank) {
  Proc r = Shell("TESSERA_TIMEOUT=20s " + Bin() + " run" + Islands({2, 2}) + " -- " + Worker() + " mismatch");
  EXPECT_EQ(Count(r.out, "ERROR rank"), 4) << r.out;
  // The message names both sides of the disagreement.
  EXPECT_GE(Count(r.out, "count=48"), 4) << r.out;
  EXPECT_GE(Count(r.out, "count=64"), 4) << r.out;
  EXPECT_LT(r.seconds, 20) << r.out;
}

TEST(CommFaults, DeadRankGivesRemoteErrorWithinTimeout) {
  Proc r = Shell("TESSERA_TIMEOUT=10s " + Bin() + " run" + Islands({2, 2}) + " -- " + Worker() + " die 2");
  EXPECT_NE(r.status, 0) << r.out;
  EXPECT_EQ(Count(r.out, "ERROR rank \\d after [0-9.]+s: (remote error|timeout)"), 3) << r.out;
  EXPECT_NE(r.out.find("rank 2"), std::string::npos) << r.out;
  EXPECT_LT(r.seconds, 10 + 5) << r.out;
}

TEST(CommFaults, StalledRankGivesTimeoutAndTheLauncherStopsIt) {
  Proc r = Shell("TESSERA_TIMEOUT=2s " + Bin() + " run" + Islands({1, 2}) + " -- " + Worker() + " stall 1");
  EXPECT_NE(r.status, 0) << r.out;
  // The rank waiting on the stalled one times out; the others may learn it from that rank's abort first.
  EXPECT_EQ(Count(r.out, "ERROR rank \\d after [0-9.]+s: (timeout|remote error)"), 2) << r.out;
  EXPECT_GE(Count(r.out, "no progress for 2000 ms \\(TESSERA_TIMEOUT\\) waiting on rank 1"), 1) << r.out;
  EXPECT_LT(r.seconds, 2 + 2 + 10) << r.out;
}

// A rank started by hand, without the launcher, against a store it is not allowed into.
std::string Env(int rank, int world, const std::string& store, const std::string& token,
                const std::string& extra = "") {
  return "env TESSERA_RANK=" + std::to_string(rank) + " TESSERA_WORLD_SIZE=" + std::to_string(world) +
         " TESSERA_STORE=" + store + " TESSERA_TOKEN=" + token + " TESSERA_TIMEOUT=2s " + extra + " ";
}

TEST(CommFaults, WrongTokenIsRefused) {
  auto server = tessera::comm::StoreServer::Start("127.0.0.1", 0, "the-right-token");
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  std::string store = "127.0.0.1:" + std::to_string((*server)->port());
  Proc r = Shell(Env(1, 2, store, "a-wrong-token") + Worker() + " check");
  EXPECT_EQ(r.status, 3) << r.out;
  EXPECT_NE(r.out.find("INITFAIL"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("token"), std::string::npos) << r.out;
}

TEST(CommFaults, UnreachableStoreNamesTheAddress) {
  Proc r = Shell(Env(1, 2, "127.0.0.1:1", "t") + Worker() + " check");
  EXPECT_EQ(r.status, 3) << r.out;
  EXPECT_NE(r.out.find("127.0.0.1:1"), std::string::npos) << r.out;
  EXPECT_LT(r.seconds, 10) << r.out;
}

// Variables read once the world has met (channel set-up): every rank fails init naming the value.
TEST(CommFaults, MalformedChannelVariablesAreNamedWithTheirValue) {
  struct Case {
    std::string env, expect;
  } cases[] = {
      {"TESSERA_SHM_RING=100000", "TESSERA_SHM_RING=100000 must be at least 64K and a multiple of 4K"},
      {"TESSERA_DEVICE_RING=32K", "TESSERA_DEVICE_RING=32768 must be at least 64K and a multiple of 4K"},
      {"TESSERA_DEVICE_BRIDGE=fast", "TESSERA_DEVICE_BRIDGE='fast'"},
      // The variable's old name is still read, and a bad value is named as the user spelled it.
      {"TESSERA_CUDA_BRIDGE=fast", "TESSERA_CUDA_BRIDGE='fast'"},
  };
  for (const auto& c : cases) {
    Proc r = Shell(c.env + " " + Bin() + " run --timeout 10s" + Islands({1, 1}) + " -- " + Worker() + " check");
    EXPECT_NE(r.status, 0) << c.env << "\n" << r.out;
    EXPECT_EQ(Count(r.out, c.expect), 2) << c.env << "\n" << r.out;
  }
}

TEST(CommFaults, MalformedVariablesAreNamedWithTheirValue) {
  struct Case {
    std::string env, expect;
  } cases[] = {
      {"TESSERA_RANK=abc TESSERA_WORLD_SIZE=2", "TESSERA_RANK='abc'"},
      {"TESSERA_RANK=5 TESSERA_WORLD_SIZE=2", "TESSERA_RANK='5' is out of range"},
      {"TESSERA_RANK=0 TESSERA_WORLD_SIZE=2 TESSERA_TIMEOUT=soon", "TESSERA_TIMEOUT='soon'"},
      {"TESSERA_RANK=0 TESSERA_WORLD_SIZE=2 TESSERA_BRIDGE=udp", "TESSERA_BRIDGE='udp'"},
      {"TESSERA_RANK=0 TESSERA_WORLD_SIZE=2 TESSERA_STORE=nowhere", "TESSERA_STORE='nowhere'"},
      {"TESSERA_RANK=0 TESSERA_WORLD_SIZE=2 TESSERA_DEVICE=tpu:0", "TESSERA_DEVICE='tpu:0'"},
      // Families whose runtime is not installed here: the library named, with the variable that points elsewhere.
      {"TESSERA_RANK=0 TESSERA_WORLD_SIZE=2 TESSERA_DEVICE=npu:0",
       "cannot load the acl device runtime 'libascendcl.so'"},
      {"TESSERA_RANK=0 TESSERA_WORLD_SIZE=2 TESSERA_DEVICE=musa:1", "or set TESSERA_MUSA_LIBRARY to its path"},
      {"TESSERA_RANK=0", "TESSERA_WORLD_SIZE is not set"},
  };
  for (const auto& c : cases) {
    Proc r = Shell("env -i PATH=/usr/bin:/bin TESSERA_STORE=127.0.0.1:1 TESSERA_TOKEN=t TESSERA_TIMEOUT=1s " + c.env +
                   " " + Worker() + " check");
    EXPECT_EQ(r.status, 3) << c.env << "\n" << r.out;
    EXPECT_NE(r.out.find(c.expect), std::string::npos) << c.env << "\n" << r.out;
  }
}

}  // namespace
