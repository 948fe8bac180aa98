// tests/ckpt/save_restore_test: save/commit/restore round trips, N→M resharding, snapshot semantics,
// the safetensors layout (checked against the format spec), "latest good" fallback, the C API, CUDA.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <cstring>
#include <fstream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <thread>

#include "ckpt/device.hpp"
#include "ckpt/format.hpp"
#include "ckpt/test_util.hpp"
#include "comm/runtime/runtime.hpp"
#include "common/dtype.hpp"
#include "tessera/ckpt.h"
#include "tessera/ckpt.hpp"

#ifdef TESSERA_HAVE_CUDA
#include <cuda_runtime.h>
#endif

namespace tessera::ckpt {
namespace {

using test::Fill;
using test::TempDir;

constexpr int64_t kRows = 11, kCols = 3;

// Saves step `step` from `world` ranks (one writer per thread): "w" row-sharded [kRows, kCols] f32 with
// values Fill(step, ...), "b" replicated [5] f32 Fill(step + 100).
void SaveWorld(const std::string& root, int world, int64_t step) {
  std::vector<std::thread> ts;
  ASSERT_LE(world, 8);
  std::array<Status, 8> st;  // not a vector: GCC 13 reports a false -Wfree-nonheap-object on vector<Status> here
  for (int r = 0; r < world; ++r) {
    ts.emplace_back([&, r] {
      auto w = CheckpointWriter::Open(root, r, world);
      if (!w.ok()) {
        st[r] = w.status();
        return;
      }
      auto [b, n] = EvenRows(kRows, r, world);
      auto wdata =
          Fill(static_cast<uint64_t>(step), static_cast<uint64_t>(b * kCols), static_cast<uint64_t>(n * kCols));
      auto bdata = Fill(static_cast<uint64_t>(step) + 100, 0, 5);
      std::vector<TensorView> tv;
      tv.push_back({"w", DType::kFloat32, {n, kCols}, wdata.data(), Sharding::kRowSharded, b, kRows});
      tv.push_back({"b", DType::kFloat32, {5}, bdata.data(), Sharding::kReplicated});
      st[r] = (*w)->Save(step, tv);
      if (st[r].ok()) st[r] = (*w)->Wait();
    });
  }
  for (auto& t : ts) t.join();
  for (auto& s : st) ASSERT_TRUE(s.ok()) << s.ToString();
}

TEST(SaveRestore, SingleRankAllDTypes) {
  TempDir d;
  auto w = CheckpointWriter::Open(d.path(), 0, 1);
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  std::vector<std::vector<uint8_t>> data;
  std::vector<TensorView> tv;
  for (int i = 0; i < static_cast<int>(DType::kCount); ++i) {
    DType t = static_cast<DType>(i);
    std::vector<uint8_t> v(DTypeSize(t) * 6);
    for (size_t k = 0; k < v.size(); ++k) v[k] = static_cast<uint8_t>(k * 31 + i);
    data.push_back(v);
    tv.push_back({std::string("t_") + DTypeName(t), t, {2, 3}, data.back().data()});
  }
  uint8_t scalar = 0x5a;
  tv.push_back({"scalar", DType::kUint8, {}, &scalar});
  ASSERT_TRUE((*w)->Save(7, tv).ok());
  ASSERT_TRUE((*w)->Wait().ok());
  auto steps = ListSteps(d.path());
  ASSERT_TRUE(steps.ok());
  EXPECT_EQ(*steps, std::vector<int64_t>{7});
  auto info = Describe(d.path(), 7);
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->world, 1);
  EXPECT_EQ(info->tensors.size(), tv.size());
  EXPECT_TRUE(Verify(d.path(), 7).ok());
  for (size_t i = 0; i < data.size(); ++i) {
    std::vector<uint8_t> out(data[i].size(), 0);
    ASSERT_TRUE(Restore(d.path(), 7, {{tv[i].name, out.data(), out.size()}}).ok());
    EXPECT_EQ(out, data[i]) << tv[i].name;
  }
  uint8_t s2 = 0;
  ASSERT_TRUE(Restore(d.path(), 7, {{"scalar", &s2, 1}}).ok());
  EXPECT_EQ(s2, 0x5a);
}

class Reshard : public ::testing::TestWithParam<std::pair<int, int>> {};

TEST_P(Reshard, RowShardedAndReplicated) {
  auto [n, m] = GetParam();
  TempDir d;
  SaveWorld(d.path(), n, 3);
  auto info = Describe(d.path(), 3);
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->world, n);
  ASSERT_EQ(info->files.size(), static_cast<size_t>(n));
  for (int r = 0; r < m; ++r) {
    auto [b, rows] = EvenRows(kRows, r, m);
    std::vector<float> w(static_cast<size_t>(rows * kCols), -1.f), bias(5, -1.f);
    Status s = Restore(d.path(), 3, {{"w", w.data(), w.size() * 4, b, rows}, {"b", bias.data(), bias.size() * 4}});
    ASSERT_TRUE(s.ok()) << s.ToString();
    EXPECT_EQ(w, Fill(3, static_cast<uint64_t>(b * kCols), static_cast<uint64_t>(rows * kCols)))
        << "rank " << r << " of " << m;
    EXPECT_EQ(bias, Fill(103, 0, 5));
  }
}
INSTANTIATE_TEST_SUITE_P(NtoM, Reshard,
                         ::testing::Values(std::pair{1, 1}, std::pair{3, 2}, std::pair{2, 3}, std::pair{4, 1},
                                           std::pair{1, 4}, std::pair{3, 5}));

TEST(SaveRestore, ArbitraryRowRangeAndBadRequests) {
  TempDir d;
  SaveWorld(d.path(), 3, 1);
  std::vector<float> w(4 * kCols);
  ASSERT_TRUE(Restore(d.path(), 1, {{"w", w.data(), w.size() * 4, 6, 4}}).ok());
  EXPECT_EQ(w, Fill(1, 6 * kCols, 4 * kCols));
  Status s = Restore(d.path(), 1, {{"w", w.data(), w.size() * 4 - 4, 6, 4}});
  EXPECT_EQ(s.code(), Code::kInvalidArgument);
  EXPECT_NE(s.message().find("'w'"), std::string::npos) << s.message();
  s = Restore(d.path(), 1, {{"w", w.data(), w.size() * 4, 9, 4}});
  EXPECT_EQ(s.code(), Code::kInvalidArgument);
  s = Restore(d.path(), 1, {{"nope", w.data(), 4}});
  EXPECT_EQ(s.code(), Code::kNotFound);
  EXPECT_NE(s.message().find("nope"), std::string::npos);
  s = Restore(d.path(), 2, {{"w", w.data(), 4}});
  EXPECT_EQ(s.code(), Code::kNotFound);
  EXPECT_NE(s.message().find("step 2"), std::string::npos);
}

TEST(SaveRestore, BadSaveInputsAreRejected) {
  TempDir d;
  auto w = CheckpointWriter::Open(d.path(), 1, 2);
  ASSERT_TRUE(w.ok());
  float x[4] = {};
  EXPECT_EQ((*w)->Save(1, {{"a", DType::kFloat32, {4}, x}, {"a", DType::kFloat32, {4}, x}}).code(),
            Code::kInvalidArgument);
  Status s = (*w)->Save(1, {{"a", DType::kFloat32, {2, 2}, x, Sharding::kRowSharded, 3, 4}});
  EXPECT_EQ(s.code(), Code::kInvalidArgument);
  EXPECT_NE(s.message().find("'a'"), std::string::npos);
  EXPECT_FALSE(CheckpointWriter::Open(d.path(), 2, 2).ok());
  // A name that is not UTF-8 cannot go into the JSON header and manifest: an error, not an exception.
  Status bad = (*w)->Save(1, {{"bad\xff", DType::kFloat32, {2}, x, Sharding::kRowSharded, 0, 4}});
  EXPECT_EQ(bad.code(), Code::kInvalidArgument) << bad.ToString();
  EXPECT_NE(bad.message().find("UTF-8"), std::string::npos) << bad.message();
}

TEST(SaveRestore, SnapshotIsTakenAtSaveTimeAndOverlapsPersist) {
  TempDir d;
  auto w = CheckpointWriter::Open(d.path(), 0, 1);
  ASSERT_TRUE(w.ok());
  std::vector<float> v(1 << 20);
  for (int step = 1; step <= 5; ++step) {
    std::fill(v.begin(), v.end(), static_cast<float>(step));
    ASSERT_TRUE((*w)->Save(step, {{"v", DType::kFloat32, {static_cast<int64_t>(v.size())}, v.data()}}).ok());
    std::fill(v.begin(), v.end(), -1.f);  // the caller may reuse its buffer at once
  }
  ASSERT_TRUE((*w)->Wait().ok());
  auto steps = ListSteps(d.path());
  EXPECT_EQ(*steps, (std::vector<int64_t>{1, 2, 3, 4, 5}));
  for (int step = 1; step <= 5; ++step) {
    std::vector<float> out(v.size());
    ASSERT_TRUE(Restore(d.path(), step, {{"v", out.data(), out.size() * 4}}).ok());
    EXPECT_EQ(out.front(), static_cast<float>(step));
    EXPECT_EQ(out.back(), static_cast<float>(step));
  }
  EXPECT_EQ((*w)->Save(3, {{"v", DType::kFloat32, {1}, v.data()}}).code(), Code::kInvalidArgument);  // committed
}

// The shard files must follow the safetensors spec (what huggingface/safetensors checks on load):
// u64 little-endian header size N; N bytes of UTF-8 JSON starting with '{'; per tensor dtype, shape,
// data_offsets [begin, end) relative to the byte buffer, contiguous, in order, covering the buffer;
// optional "__metadata__" with string values only; the header padded with spaces (8-byte aligned).
// WriterOptions::progress: per step, `done` grows, never passes `total` (the shard file's size), and
// (total, total) comes exactly once, after the manifest is in place; a step whose write fails ends
// without it. 20 MiB in 8 MiB chunks over 4 io threads: several calls per step.
TEST(SaveRestore, SaveProgressGrowsToTheFileSizeOnceCommitted) {
  TempDir d;
  struct Call {
    int64_t step;
    uint64_t done, total;
    bool manifest_present;
  };
  std::mutex mu;
  std::vector<Call> calls;
  WriterOptions wo;
  wo.progress = [&](int64_t step, uint64_t done, uint64_t total) {
    bool m = ::access((d / (StepDirName(step) + "/manifest.json")).c_str(), F_OK) == 0;
    std::lock_guard lk(mu);
    calls.push_back({step, done, total, m});
  };
  auto w = CheckpointWriter::Open(d.path(), 0, 1, wo);
  ASSERT_TRUE(w.ok());
  std::vector<float> v(5 << 20, 1.5f);
  std::vector<float> b(7, 2.f);
  auto save = [&](int64_t step) {
    Status s =
        (*w)->Save(step, {{"v", DType::kFloat32, {5, 1 << 20}, v.data()}, {"b", DType::kFloat32, {7}, b.data()}});
    return s.ok() ? (*w)->Wait() : s;
  };
  ASSERT_TRUE(save(1).ok());
  ASSERT_TRUE(save(2).ok());
  testing::SetWriteHook([](const std::string& path, uint64_t off, size_t) {
    return path.find("step-0000000003") != std::string::npos && off > (uint64_t{9} << 20) ? ENOSPC : 0;
  });
  EXPECT_FALSE(save(3).ok());
  testing::SetWriteHook(nullptr);
  for (int64_t step : {1, 2, 3}) {
    std::vector<Call> mine;
    for (const auto& c : calls)
      if (c.step == step) mine.push_back(c);
    ASSERT_GE(mine.size(), 2u) << "step " << step << ": several chunks, several calls";
    uint64_t total = mine[0].total, last = 0;
    int finals = 0;
    for (const auto& c : mine) {
      EXPECT_EQ(c.total, total);
      EXPECT_GE(c.done, last) << "step " << step;
      EXPECT_LE(c.done, c.total);
      last = c.done;
      if (c.done == c.total) {
        ++finals;
        EXPECT_TRUE(c.manifest_present) << "step " << step << ": 100% only once committed";
      }
    }
    if (step == 3) {
      EXPECT_EQ(finals, 0) << "a failed step never reports completion";
      EXPECT_LT(last, total);
      continue;
    }
    EXPECT_EQ(finals, 1) << "step " << step;
    EXPECT_EQ(mine.back().done, total) << "the last call is (total, total)";
    struct stat st {};
    ASSERT_EQ(::stat((d / (StepDirName(step) + "/rank-00000-of-00001.safetensors")).c_str(), &st), 0);
    EXPECT_EQ(total, static_cast<uint64_t>(st.st_size)) << "total is the shard file's size";
  }
  // Calls come in step order.
  for (size_t i = 1; i < calls.size(); ++i) EXPECT_LE(calls[i - 1].step, calls[i].step);
}

TEST(SaveRestore, ShardFilesFollowTheSafetensorsSpec) {
  TempDir d;
  SaveWorld(d.path(), 2, 4);
  for (int r = 0; r < 2; ++r) {
    std::string path = d / ("step-0000000004/" + ShardFileName(r, 2));
    std::ifstream f(path, std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    ASSERT_GE(bytes.size(), 8u);
    uint64_t n = 0;
    for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<uint8_t>(bytes[i]);
    ASSERT_LE(8 + n, bytes.size());
    EXPECT_EQ(n % 8, 0u);
    std::string header = bytes.substr(8, n);
    EXPECT_EQ(header[0], '{');
    auto j = nlohmann::json::parse(header);
    ASSERT_TRUE(j.contains("__metadata__"));
    for (auto& [k, v] : j["__metadata__"].items()) EXPECT_TRUE(v.is_string()) << k;
    EXPECT_EQ(j["__metadata__"]["tessera.rank"], std::to_string(r));
    std::vector<std::pair<uint64_t, uint64_t>> ranges;
    for (auto& [name, t] : j.items()) {
      if (name == "__metadata__") continue;
      EXPECT_EQ(t["dtype"], "F32");
      auto off = t["data_offsets"].get<std::vector<uint64_t>>();
      uint64_t elems = 1;
      for (auto s : t["shape"].get<std::vector<uint64_t>>()) elems *= s;
      EXPECT_EQ(off[1] - off[0], elems * 4) << name;
      ranges.push_back({off[0], off[1]});
      if (name == "w") {
        auto [b, rows] = EvenRows(kRows, r, 2);
        EXPECT_EQ(t["shape"], nlohmann::json({rows, kCols}));
        std::vector<float> got(static_cast<size_t>(elems));
        std::memcpy(got.data(), bytes.data() + 8 + n + off[0], elems * 4);
        EXPECT_EQ(got, Fill(4, static_cast<uint64_t>(b * kCols), elems));
      }
    }
    EXPECT_EQ(j.contains("b"), r == 0) << "replicated tensors are stored once, by rank 0";
    std::sort(ranges.begin(), ranges.end());
    uint64_t next = 0;
    for (auto [b, e] : ranges) {
      EXPECT_EQ(b, next);
      next = e;
    }
    EXPECT_EQ(8 + n + next, bytes.size()) << "the byte buffer is exactly covered";
  }
  // The manifest is the commit record and no pre-commit part files are left.
  EXPECT_TRUE(std::filesystem::exists(d / "step-0000000004/manifest.json"));
  EXPECT_FALSE(std::filesystem::exists(d / "step-0000000004/rank-00000.part.json"));
}

// Reads the shard files with the Hugging Face library itself, via tests/ckpt/safetensors_check.py: with the
// project's .venv (scripts/install-deps.sh pins safetensors and numpy there), else a python3 that has it.
TEST(SaveRestore, HfLibraryReadsShards) {
  std::string py;
  for (const std::string& cand :
       {test::SourceDir() + "/.venv/bin/python", std::string("/usr/bin/python3"), std::string("python3")})
    if (std::system((cand + " -c 'import safetensors, numpy' 2>/dev/null").c_str()) == 0) {
      py = cand;
      break;
    }
  if (py.empty())
    GTEST_SKIP() << "no python with safetensors and numpy (scripts/install-deps.sh makes .venv with both)";
  TempDir d;
  SaveWorld(d.path(), 2, 6);
  for (int r = 0; r < 2; ++r) {
    std::string out = d / "hf.json";
    std::string cmd = py + " " + test::SourceDir() + "/tests/ckpt/safetensors_check.py " + d.path() +
                      "/step-0000000006/" + ShardFileName(r, 2) + " > " + out;
    ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
    std::ifstream f(out);
    auto j = nlohmann::json::parse(f);
    auto [b, rows] = EvenRows(kRows, r, 2);
    auto w = j["tensors"]["w"];
    EXPECT_EQ(w["dtype"], "float32");
    EXPECT_EQ(w["shape"], nlohmann::json({rows, kCols}));
    EXPECT_EQ(w["first"].get<double>(), test::Val(6, static_cast<uint64_t>(b * kCols)));
    EXPECT_EQ(w["last"].get<double>(), test::Val(6, static_cast<uint64_t>((b + rows) * kCols - 1)));
    EXPECT_EQ(j["metadata"]["tessera.step"], "6");
  }
}

void FlipByte(const std::string& path, uint64_t off) {
  int fd = ::open(path.c_str(), O_RDWR);
  ASSERT_GE(fd, 0) << path;
  char c;
  ASSERT_EQ(::pread(fd, &c, 1, static_cast<off_t>(off)), 1);
  c ^= 0x20;
  ASSERT_EQ(::pwrite(fd, &c, 1, static_cast<off_t>(off)), 1);
  ::close(fd);
}

TEST(SaveRestore, LatestSkipsCorruptAndTornStepsNamingTheFile) {
  TempDir d;
  for (int s = 1; s <= 3; ++s) SaveWorld(d.path(), 2, s);
  auto l = Latest(d.path());
  ASSERT_TRUE(l.ok());
  EXPECT_EQ(l->step, 3);
  EXPECT_TRUE(l->warnings.empty());
  // An uncommitted newer step (shards, no manifest) does not exist.
  std::filesystem::create_directories(d / "step-0000000009");
  std::filesystem::copy_file(d / "step-0000000003/rank-00000-of-00002.safetensors",
                             d / "step-0000000009/rank-00000-of-00002.safetensors");
  EXPECT_EQ(Latest(d.path())->step, 3);

  std::string bad3 = d / "step-0000000003/rank-00001-of-00002.safetensors";
  FlipByte(bad3, std::filesystem::file_size(bad3) - 5);  // one byte of tensor data
  Status v = Verify(d.path(), 3);
  EXPECT_EQ(v.code(), Code::kCorrupt);
  EXPECT_NE(v.message().find(bad3), std::string::npos) << v.message();
  EXPECT_NE(v.message().find("step 3"), std::string::npos) << v.message();
  std::vector<float> w(kRows * kCols);
  Status r = Restore(d.path(), 3, {{"w", w.data(), w.size() * 4}});
  EXPECT_EQ(r.code(), Code::kCorrupt);
  EXPECT_NE(r.message().find(bad3), std::string::npos) << r.message();
  l = Latest(d.path());
  ASSERT_TRUE(l.ok());
  EXPECT_EQ(l->step, 2);
  ASSERT_EQ(l->warnings.size(), 1u);
  EXPECT_NE(l->warnings[0].find(bad3), std::string::npos);

  std::string bad2 = d / "step-0000000002/rank-00000-of-00002.safetensors";
  std::filesystem::resize_file(bad2, std::filesystem::file_size(bad2) - 100);
  v = Verify(d.path(), 2, {false});  // cheap check catches a torn file
  EXPECT_NE(v.message().find("torn"), std::string::npos) << v.message();
  l = Latest(d.path());
  ASSERT_TRUE(l.ok());
  EXPECT_EQ(l->step, 1);
  EXPECT_EQ(l->warnings.size(), 2u);
  ASSERT_TRUE(Restore(d.path(), 1, {{"w", w.data(), w.size() * 4}}).ok());
  EXPECT_EQ(w, Fill(1, 0, kRows * kCols));

  std::string bad1 = d / "step-0000000001/rank-00000-of-00002.safetensors";
  FlipByte(bad1, 20);  // inside the safetensors header
  l = Latest(d.path());
  EXPECT_EQ(l.status().code(), Code::kNotFound);
  EXPECT_NE(l.status().message().find(d.path()), std::string::npos);

  ASSERT_TRUE(Remove(d.path(), 3).ok());
  EXPECT_FALSE(std::filesystem::exists(d / "step-0000000003"));
  EXPECT_EQ(Remove(d.path(), 3).code(), Code::kNotFound);
}

TEST(SaveRestore, CApiRoundTrip) {
  TempDir d;
  tsrCkptWriter_t w = nullptr;
  ASSERT_EQ(tsrCkptWriterOpen(d.path().c_str(), 0, 1, &w), tsrSuccess);
  double x[6] = {1, 2, 3, 4, 5, 6};
  int64_t shape[2] = {2, 3};
  tsrCkptTensor_t t{"x", tsrFloat64, 2, shape, x, tsrCkptReplicated, 0, 0};
  ASSERT_EQ(tsrCkptSave(w, 11, &t, 1), tsrSuccess);
  ASSERT_EQ(tsrCkptWriterClose(w), tsrSuccess);
  int64_t step = -1;
  ASSERT_EQ(tsrCkptLatest(d.path().c_str(), &step), tsrSuccess);
  EXPECT_EQ(step, 11);
  double y[3] = {};
  tsrCkptSlot_t slot{"x", y, sizeof y, 1, 1};
  ASSERT_EQ(tsrCkptRestore(d.path().c_str(), 11, &slot, 1), tsrSuccess);
  EXPECT_EQ(y[0], 4);
  EXPECT_EQ(y[2], 6);
  slot.name = "missing";
  EXPECT_EQ(tsrCkptRestore(d.path().c_str(), 11, &slot, 1), TSR_CKPT_NOT_FOUND);
  EXPECT_NE(std::string(tsrCkptGetLastError()).find("missing"), std::string::npos);
  TempDir empty;
  EXPECT_EQ(tsrCkptLatest(empty.path().c_str(), &step), TSR_CKPT_NOT_FOUND);
}

// A sharding or datatype value outside its C enum is refused naming the value, before anything is written; an
// unknown sharding was once taken for replicated.
TEST(SaveRestore, CApiRefusesAnUnknownShardingOrDatatypeNamingIt) {
  TempDir d;
  tsrCkptWriter_t w = nullptr;
  ASSERT_EQ(tsrCkptWriterOpen(d.path().c_str(), 0, 1, &w), tsrSuccess);
  double x[6] = {1, 2, 3, 4, 5, 6};
  int64_t shape[2] = {2, 3};
  tsrCkptTensor_t t{"x", tsrFloat64, 2, shape, x, static_cast<tsrCkptSharding_t>(7), 0, 0};
  EXPECT_EQ(tsrCkptSave(w, 1, &t, 1), tsrInvalidArgument);
  EXPECT_NE(std::string(tsrCkptGetLastError()).find("sharding 7 is not a tsrCkptSharding_t"), std::string::npos)
      << tsrCkptGetLastError();
  t.sharding = tsrCkptReplicated;
  t.dtype = static_cast<tsrDataType_t>(-1);
  EXPECT_EQ(tsrCkptSave(w, 1, &t, 1), tsrInvalidArgument);
  EXPECT_NE(std::string(tsrCkptGetLastError()).find("datatype -1 is not a tsrDataType_t"), std::string::npos)
      << tsrCkptGetLastError();
  ASSERT_EQ(tsrCkptWriterClose(w), tsrSuccess);
  int64_t step = -1;
  EXPECT_EQ(tsrCkptLatest(d.path().c_str(), &step), TSR_CKPT_NOT_FOUND);  // nothing was committed
}

// The C progress callback: same contract as WriterOptions::progress, with the caller's pointer.
TEST(SaveRestore, CApiProgress) {
  TempDir d;
  struct Seen {
    int calls = 0;
    int64_t step = -1;
    uint64_t done = 0, total = 0;
    bool grew = true;
  } seen;
  auto fn = [](int64_t step, uint64_t done, uint64_t total, void* user) {
    auto* s = static_cast<Seen*>(user);
    s->grew = s->grew && done >= s->done;
    ++s->calls;
    s->step = step;
    s->done = done;
    s->total = total;
  };
  tsrCkptWriter_t w = nullptr;
  ASSERT_EQ(tsrCkptWriterOpenWithProgress(d.path().c_str(), 0, 1, fn, &seen, &w), tsrSuccess);
  std::vector<float> x(3 << 20, 0.5f);  // 12 MiB: two write chunks and the header
  int64_t shape[1] = {static_cast<int64_t>(x.size())};
  tsrCkptTensor_t t{"x", tsrFloat32, 1, shape, x.data(), tsrCkptReplicated, 0, 0};
  ASSERT_EQ(tsrCkptSave(w, 5, &t, 1), tsrSuccess);
  ASSERT_EQ(tsrCkptWait(w), tsrSuccess);
  EXPECT_GE(seen.calls, 2);
  EXPECT_TRUE(seen.grew);
  EXPECT_EQ(seen.step, 5);
  EXPECT_EQ(seen.done, seen.total);
  EXPECT_GT(seen.total, x.size() * 4) << "the file: header + data";
  ASSERT_EQ(tsrCkptWriterClose(w), tsrSuccess);
  ASSERT_EQ(tsrCkptWriterOpenWithProgress(d.path().c_str(), 0, 1, nullptr, nullptr, &w), tsrSuccess);  // no callback
  ASSERT_EQ(tsrCkptSave(w, 6, &t, 1), tsrSuccess);
  ASSERT_EQ(tsrCkptWriterClose(w), tsrSuccess);
  EXPECT_EQ(seen.step, 5);
}

TEST(SaveRestore, DeviceMemory) {
#ifndef TESSERA_HAVE_CUDA
  GTEST_SKIP() << "built without CUDA";
#else
  int gpus = 0;
  if (cudaGetDeviceCount(&gpus) != cudaSuccess || gpus == 0)
    GTEST_SKIP() << "no CUDA GPU present (cudaGetDeviceCount gave 0 or failed)";
  TempDir d;
  std::vector<float> h = Fill(5, 0, 4096), back(4096, 0);
  float* dev = nullptr;
  ASSERT_EQ(cudaMalloc(&dev, h.size() * 4), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(dev, h.data(), h.size() * 4, cudaMemcpyHostToDevice), cudaSuccess);
  EXPECT_TRUE(comm::IsDeviceMemory(dev));
  auto w = CheckpointWriter::Open(d.path(), 0, 1);
  ASSERT_TRUE((*w)->Save(1, {{"g", DType::kFloat32, {64, 64}, dev}}).ok());
  ASSERT_TRUE((*w)->Wait().ok());
  ASSERT_EQ(cudaMemset(dev, 0, h.size() * 4), cudaSuccess);
  ASSERT_TRUE(Restore(d.path(), 1, {{"g", dev + 64, 63 * 64 * 4, 1, 63}}).ok());  // partial: via staging
  ASSERT_EQ(cudaMemcpy(back.data(), dev, back.size() * 4, cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_EQ(back[0], 0.f);
  EXPECT_TRUE(std::equal(back.begin() + 64, back.end(), h.begin() + 64));
  cudaFree(dev);
#endif
}

TEST(SaveRestore, AnotherVendorsDeviceMemoryIsCopiedByItsRuntime) {
  // NPU memory on the ACL host shim (tests/shims): the address it hands out is mapped PROT_NONE, so a host memcpy
  // of it crashes (as the code before the runtime table did: it knew CUDA pointers only). A save and restores that
  // work copied through the runtime table (aclrtMemcpy), the restores on the reader's own threads too (eight
  // tensors, four readers; device.hpp: those threads are bound to the tensors' device first).
  ::setenv("TESSERA_ACL_LIBRARY", TESSERA_SHIM_ACL, 1);
  auto acl = comm::LoadRuntime("acl");
  ASSERT_TRUE(acl.ok()) << acl.status().ToString();
  comm::DeviceRuntime& rt = **acl;
  ASSERT_TRUE(rt.SetDevice(1).ok());
  constexpr int kTensors = 8;
  constexpr size_t kElems = 64 * 64, kBytes = kElems * 4;
  TempDir d;
  std::vector<float> h = Fill(9, 0, kTensors * kElems), back(h.size(), -1.f);
  auto dev = rt.Malloc(h.size() * 4);
  ASSERT_TRUE(dev.ok()) << dev.status().ToString();
  auto* g = static_cast<float*>(*dev);
  ASSERT_TRUE(rt.Memcpy(g, h.size() * 4, h.data(), h.size() * 4, comm::CopyKind::kHostToDevice).ok());
  EXPECT_TRUE(comm::IsDeviceMemory(g));
  EXPECT_FALSE(comm::IsDeviceMemory(h.data()));
  auto name = [](int i) { return "t" + std::to_string(i); };
  std::vector<TensorView> views;
  for (int i = 0; i < kTensors; ++i) views.push_back({name(i), DType::kFloat32, {64, 64}, g + i * kElems});
  auto w = CheckpointWriter::Open(d.path(), 0, 1);
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  Status saved = (*w)->Save(1, views);
  ASSERT_TRUE(saved.ok()) << saved.ToString();
  ASSERT_TRUE((*w)->Wait().ok());
  // The files hold the tensors' bytes.
  std::vector<float> host(h.size(), 0.f);
  std::vector<TensorSlot> to_host;
  for (int i = 0; i < kTensors; ++i) to_host.push_back({name(i), host.data() + i * kElems, kBytes});
  ASSERT_TRUE(Restore(d.path(), 1, to_host).ok());
  EXPECT_EQ(host, h);
  // Into the device memory: whole tensors, then rows 1..63 of each.
  for (int64_t first : {0, 1}) {
    ASSERT_TRUE(rt.Memset(g, h.size() * 4, 0, h.size() * 4).ok());
    std::vector<TensorSlot> slots;
    for (int i = 0; i < kTensors; ++i)
      slots.push_back(
          {name(i), g + i * kElems + first * 64, static_cast<size_t>(64 - first) * 64 * 4, first, 64 - first});
    Status s = Restore(d.path(), 1, slots);
    ASSERT_TRUE(s.ok()) << "from row " << first << ": " << s.ToString();
    ASSERT_TRUE(rt.Memcpy(back.data(), h.size() * 4, g, h.size() * 4, comm::CopyKind::kDeviceToHost).ok());
    for (int i = 0; i < kTensors; ++i) {
      const size_t at = i * kElems;
      EXPECT_TRUE(std::equal(back.begin() + at + first * 64, back.begin() + at + kElems, h.begin() + at + first * 64))
          << name(i) << " from row " << first;
      if (first > 0) {
        EXPECT_EQ(back[at], 0.f) << name(i);
      }
    }
  }
  EXPECT_TRUE(rt.Free(g).ok());
}

}  // namespace
}  // namespace tessera::ckpt
