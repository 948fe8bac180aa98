// tests/integration/bench_cli_test: `tessera bench` end to end under `tessera run`.
//
// Runs the real binary on small sizes (0, 1, odd, prime) with --check over island layouts 1, 1+1 and 1+2,
// for every collective and a spread of types and ops, and asserts on what it printed and wrote: exit
// status 0, #wrong 0 and bit-identical results in the JSON, the nccl-tests columns. Bad options must fail
// before any rank starts work, with a message naming the value. Timings are not asserted (see bench/).
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "common/shell.hpp"

namespace {

using tessera::testing_shell::Bin;
using tessera::testing_shell::Proc;
using tessera::testing_shell::Shell;

class BenchCli : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() / ("tessera-bench-test-" + std::to_string(getpid()));
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  // Runs `tessera bench ARGS` under `tessera run ISLANDS`; returns the process and the parsed JSON.
  Proc Bench(const std::string& islands, const std::string& args, nlohmann::json* json) {
    std::string path = (dir_ / "out.json").string();
    std::filesystem::remove(path);
    Proc p = Shell(Bin() + " run --timeout 60s " + islands + " -- " + Bin() + " bench " + args + " --json " + path);
    if (json && std::filesystem::exists(path)) *json = nlohmann::json::parse(std::ifstream(path), nullptr, false);
    return p;
  }

  std::filesystem::path dir_;
};

const char* kTwoIslands = "--island ascend=host:1 --island nvidia=host:2";

TEST_F(BenchCli, AllReduceEveryTypeAndOpIsCheckedAndBitIdentical) {
  const std::pair<const char*, const char*> cases[] = {{"f32", "sum"},  {"f16", "sum"}, {"bf16", "sum"}, {"f64", "avg"},
                                                       {"i32", "prod"}, {"i8", "max"},  {"u8", "min"},   {"i64", "sum"},
                                                       {"bf16", "avg"}, {"f32", "prod"}};
  for (const auto& [dtype, op] : cases) {
    nlohmann::json j;
    Proc p = Bench(
        kTwoIslands,
        std::string("allreduce --sizes 0,1,7,997,64K --iters 2 --warmup 1 --check --dtype ") + dtype + " --op " + op,
        &j);
    ASSERT_EQ(p.status, 0) << dtype << " " << op << "\n" << p.out;
    ASSERT_TRUE(j.is_object()) << p.out;
    EXPECT_EQ(j["world_size"], 3);
    EXPECT_EQ(j["islands"], "ascend=host:1,nvidia=host:2");
    EXPECT_EQ(j["bridge"], "auto");
    EXPECT_EQ(j["device_bridge"], "auto");  // TESSERA_DEVICE_BRIDGE; records made before it say cuda_bridge
    EXPECT_FALSE(j.contains("cuda_bridge"));
    ASSERT_EQ(j["rows"].size(), 5u);
    for (const auto& row : j["rows"]) {
      EXPECT_EQ(row["wrong"], 0) << dtype << " " << op << " " << row.dump();
      EXPECT_EQ(row["identical"], true) << dtype << " " << op << " " << row.dump();
    }
  }
}

TEST_F(BenchCli, EveryCollectiveOnEveryLayout) {
  for (const char* islands : {"--island nvidia=host:1", "--island ascend=host:1 --island nvidia=host:1", kTwoIslands}) {
    for (const char* coll : {"allreduce", "reduce_scatter", "allgather", "broadcast"}) {
      nlohmann::json j;
      Proc p = Bench(islands, std::string(coll) + " --sizes 3,4K,131071 --iters 2 --warmup 0 --check --dtype bf16", &j);
      ASSERT_EQ(p.status, 0) << islands << " " << coll << "\n" << p.out;
      ASSERT_TRUE(j.is_object()) << p.out;
      EXPECT_EQ(j["collective"], coll);
      for (const auto& row : j["rows"]) EXPECT_EQ(row["wrong"], 0) << islands << " " << coll << " " << row.dump();
    }
  }
}

TEST_F(BenchCli, PrintsNcclTestsColumnsFromRankZeroOnly) {
  Proc p = Bench(kTwoIslands, "allreduce --sizes 1K:16K:x4 --iters 2 --verbose", nullptr);
  ASSERT_EQ(p.status, 0) << p.out;
  for (const char* col : {"size(B)", "count", "type", "redop", "time(us)", "algbw(GB/s)", "busbw(GB/s)", "#wrong"})
    EXPECT_NE(p.out.find(col), std::string::npos) << col << "\n" << p.out;
  EXPECT_NE(p.out.find("island 1 nvidia (host): 2 rank(s)"), std::string::npos) << p.out;
  EXPECT_EQ(p.out.find("[rank 1"), std::string::npos) << "only rank 0 prints\n" << p.out;
  EXPECT_NE(p.out.find("16384"), std::string::npos) << p.out;
}

TEST_F(BenchCli, BadOptionsNameTheValue) {
  const std::pair<const char*, const char*> cases[] = {
      {"allreduce --dtype f17", "'f17'"},
      {"allreduce --op mean", "'mean'"},
      {"allreduce --sizes 16Q", "'16Q'"},
      {"allreduce --sizes 1K:1M:x1", "'x1'"},
      {"allreduce --sizes 4M:1M", "'4M:1M'"},
      {"allgatherv", "'allgatherv'"},
      {"broadcast --root 7 --sizes 1K", "--root 7"},
      {"allreduce --batch 0", "--batch 0"},
  };
  for (const auto& [args, needle] : cases) {
    Proc p = Bench("--island nvidia=host:1", args, nullptr);
    EXPECT_NE(p.status, 0) << args << "\n" << p.out;
    EXPECT_NE(p.out.find(needle), std::string::npos) << args << "\n" << p.out;
  }
}

// In place (NCCL's convention: reduce_scatter's output and allgather's input are the rank's block of one
// buffer): the timed calls overwrite the input, so the check fills it again and checks one more call.
TEST_F(BenchCli, InPlaceEveryCollectiveIsChecked) {
  for (const char* coll : {"allreduce", "reduce_scatter", "allgather", "broadcast"}) {
    for (const char* dtype : {"f32", "bf16", "i32"}) {
      nlohmann::json j;
      Proc p = Bench(kTwoIslands,
                     std::string(coll) + " --in-place --sizes 0,3,4K,131071 --iters 3 --warmup 1 --check --root 2 " +
                         "--dtype " + dtype,
                     &j);
      ASSERT_EQ(p.status, 0) << coll << " " << dtype << "\n" << p.out;
      ASSERT_TRUE(j.is_object()) << p.out;
      EXPECT_EQ(j["in_place"], true);
      EXPECT_NE(p.out.find(", in place,"), std::string::npos) << p.out;
      ASSERT_EQ(j["rows"].size(), 4u);
      for (const auto& row : j["rows"]) {
        EXPECT_EQ(row["wrong"], 0) << coll << " " << dtype << " " << row.dump();
        if (std::string(coll) != "reduce_scatter") {
          EXPECT_EQ(row["identical"], true) << coll << " " << row.dump();
        }
      }
    }
  }
}

// Every rank's memory is named, in the output and in the JSON: host ranks are on host memory (CUDA ranks'
// device memory is tested in tests/gpu/bench_gpu_test). --host-memory is accepted where it changes nothing.
TEST_F(BenchCli, NamesEveryRanksMemory) {
  for (const char* extra : {"", " --host-memory"}) {
    nlohmann::json j;
    Proc p = Bench(kTwoIslands, std::string("allgather --sizes 4K --iters 2 --check") + extra, &j);
    ASSERT_EQ(p.status, 0) << p.out;
    ASSERT_TRUE(j.is_object()) << p.out;
    EXPECT_NE(p.out.find("# memory: host on ranks 0-2"), std::string::npos) << p.out;
    EXPECT_NE(p.out.find("island 1 nvidia (host): 2 rank(s): 1(host, host memory) 2(host, host memory)"),
              std::string::npos)
        << p.out;
    EXPECT_EQ(j["memory"], "host");
    ASSERT_EQ(j["ranks"].size(), 3u);
    for (int r = 0; r < 3; ++r) {
      EXPECT_EQ(j["ranks"][r]["rank"], r);
      EXPECT_EQ(j["ranks"][r]["memory"], "host");
      EXPECT_EQ(j["ranks"][r]["device"], "host");
      EXPECT_EQ(j["ranks"][r]["island"], r == 0 ? 0 : 1);
    }
  }
}

// --batch N: N calls per timed sample (one wait at the end, as nccl-tests); --json -: one line of JSON on
// stdout after the table, which a script can pick out of `tessera run`'s prefixed output.
TEST_F(BenchCli, BatchedSamplesAndJsonOnStdout) {
  Proc p = Shell(Bin() + " run --timeout 60s " + kTwoIslands + " -- " + Bin() +
                 " bench allreduce --sizes 1K,64K --iters 3 --batch 4 --warmup 0 --check --op avg --json -");
  ASSERT_EQ(p.status, 0) << p.out;
  const size_t open = p.out.find('{'), close = p.out.rfind('}');
  ASSERT_NE(open, std::string::npos) << p.out;
  ASSERT_NE(close, std::string::npos) << p.out;
  EXPECT_EQ(p.out.find('\n', open), close + 1) << "the JSON is one line\n" << p.out;
  auto j = nlohmann::json::parse(p.out.substr(open, close - open + 1), nullptr, false);
  ASSERT_TRUE(j.is_object()) << p.out;
  EXPECT_EQ(j["batch"], 4);
  EXPECT_EQ(j["iters"], 3);
  EXPECT_EQ(j["op"], "avg");
  ASSERT_EQ(j["rows"].size(), 2u);
  EXPECT_EQ(j["rows"][1]["bytes"], 65536);
  for (const auto& row : j["rows"]) {
    EXPECT_EQ(row["wrong"], 0) << row.dump();
    EXPECT_GT(row["time_us"].get<double>(), 0) << row.dump();
  }
  EXPECT_NE(p.out.find("iters 3 x batch 4"), std::string::npos) << p.out;
}

}  // namespace
