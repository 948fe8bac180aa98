// Tests of `tessera run` (src/launch): the island parser and rank planner directly, and the real
// `tessera` binary (TESSERA_BIN) starting `/bin/sh -c` snippets as ranks: their environment, prefixed
// output, failure handling, signal forwarding, bad input; and ranks that meet at the launcher's store.
#include "launch/launcher.hpp"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "comm/runtime/runtime.hpp"
#include "comm/store/store.hpp"
#include "launch/sm_share.hpp"

namespace tessera::launch {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

bool Contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

size_t Count(const std::string& s, const std::string& part) {
  size_t n = 0;
  for (size_t pos = s.find(part); pos != std::string::npos; pos = s.find(part, pos + part.size())) ++n;
  return n;
}

std::vector<std::string> Lines(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

// ---- the parser and the planner ----------------------------------------------------------------------

TEST(LauncherParse, GoodIslands) {
  auto i = ParseIsland("ascend=host:3");
  ASSERT_TRUE(i.ok()) << i.status().ToString();
  EXPECT_EQ(i->vendor, "ascend");
  EXPECT_EQ(i->family, nullptr);
  EXPECT_EQ(i->count, 3);
  auto c = ParseIsland("nvidia=cuda:8");
  ASSERT_TRUE(c.ok());
  ASSERT_NE(c->family, nullptr);
  EXPECT_STREQ(c->family->prefix, "cuda");
  EXPECT_STREQ(c->family->visible_env, "CUDA_VISIBLE_DEVICES");
  EXPECT_EQ(c->count, 8);
  auto all = ParseIslands({"ascend=host:3", "nvidia=host:5"});
  ASSERT_TRUE(all.ok());
  EXPECT_EQ(LayoutString(*all), "ascend=host:3,nvidia=host:5");
}

TEST(LauncherParse, BadIslandsNameTheValue) {
  const std::map<std::string, std::string> cases = {
      {"ascend=hots:3", "unknown device 'hots' in --island 'ascend=hots:3': use host, cuda, npu, musa, corex or emu"},
      {"ascend=host:0", "rank count '0' in --island 'ascend=host:0' is not a positive integer"},
      {"ascend=host:x", "rank count 'x' in --island 'ascend=host:x' is not a positive integer"},
      {"ascend=host:-2", "rank count '-2' in --island 'ascend=host:-2'"},
      {"ascend=host:", "rank count '' in --island 'ascend=host:'"},
      {"ascend=host", "--island 'ascend=host' has no ':COUNT'"},
      {"ascend", "--island 'ascend' has no '='"},
      {"=host:1", "--island '=host:1' has no vendor name"},
      {"a b=host:1", "vendor name 'a b' in --island 'a b=host:1'"},
      {"a=host:99999", "rank count 99999 in --island 'a=host:99999' is more than 1024"},
      {"a=host:99999999999", "rank count '99999999999' in --island 'a=host:99999999999'"},
  };
  for (const auto& [text, message] : cases) {
    auto r = ParseIsland(text);
    ASSERT_FALSE(r.ok()) << text;
    EXPECT_EQ(r.status().code(), Code::kInvalidArgument);
    EXPECT_TRUE(Contains(r.status().message(), message)) << text << " -> " << r.status().message();
  }
  auto dup = ParseIslands({"ascend=host:3", "nvidia=host:1", "ascend=host:2"});
  ASSERT_FALSE(dup.ok());
  EXPECT_TRUE(Contains(dup.status().message(), "vendor 'ascend' is given twice")) << dup.status().message();
  EXPECT_TRUE(Contains(dup.status().message(), "'ascend=host:2'")) << dup.status().message();
  EXPECT_FALSE(ParseIslands({}).ok());
  EXPECT_FALSE(ParseIslands({"a=host:1000", "b=host:100"}).ok());  // world too large
}

TEST(LauncherPlan, RanksInIslandOrder) {
  auto islands = ParseIslands({"ascend=host:3", "nvidia=host:5"});
  ASSERT_TRUE(islands.ok());
  auto ranks = PlanRanks(*islands, 0);
  ASSERT_TRUE(ranks.ok());
  ASSERT_EQ(ranks->size(), 8u);
  for (int r = 0; r < 8; ++r) {
    EXPECT_EQ((*ranks)[r].rank, r);
    EXPECT_EQ((*ranks)[r].local_rank, r);
    EXPECT_EQ((*ranks)[r].island, r < 3 ? 0 : 1);
    EXPECT_EQ((*ranks)[r].vendor, r < 3 ? "ascend" : "nvidia");
    EXPECT_EQ((*ranks)[r].device, "host");
  }
  auto env = RankEnvironment((*ranks)[4], 8, LayoutString(*islands), "127.0.0.1:5", "tok", 1500ms);
  std::map<std::string, std::string> m(env.begin(), env.end());
  EXPECT_EQ(m["TESSERA_RANK"], "4");
  EXPECT_EQ(m["TESSERA_WORLD_SIZE"], "8");
  EXPECT_EQ(m["TESSERA_ISLAND"], "1");
  EXPECT_EQ(m["TESSERA_ISLAND_VENDOR"], "nvidia");
  EXPECT_EQ(m["TESSERA_DEVICE"], "host");
  EXPECT_EQ(m["TESSERA_LOCAL_RANK"], "4");
  EXPECT_EQ(m["TESSERA_ISLANDS"], "ascend=host:3,nvidia=host:5");
  EXPECT_EQ(m["TESSERA_STORE"], "127.0.0.1:5");
  EXPECT_EQ(m["TESSERA_TOKEN"], "tok");
  EXPECT_EQ(m["TESSERA_TIMEOUT"], "1500ms");
  // torchrun's variables, so that a torch script's env:// rendezvous works unchanged.
  EXPECT_EQ(m["RANK"], "4");
  EXPECT_EQ(m["WORLD_SIZE"], "8");
  EXPECT_EQ(m["LOCAL_RANK"], "4");
  EXPECT_EQ(m["LOCAL_WORLD_SIZE"], "8");
  EXPECT_EQ(m.count("MASTER_PORT"), 0u);           // only when the launcher gives one
  EXPECT_EQ(m.count("CUDA_VISIBLE_DEVICES"), 0u);  // a host rank keeps the launcher's visibility
}

TEST(Launcher, CudaRankSeesOnlyItsGpuAndGetsTorchrunVariables) {
  RankSpec r;
  r.rank = 1;
  r.local_rank = 1;
  r.island = 1;
  r.vendor = "nvidia";
  r.device = "cuda:1";
  auto env = RankEnvironment(r, 2, "a=host:1,nvidia=cuda:1", "127.0.0.1:5", "tok", 1500ms, 29500, "");
  std::map<std::string, std::string> m(env.begin(), env.end());
  EXPECT_EQ(m["CUDA_VISIBLE_DEVICES"], "1");
  EXPECT_EQ(m["TESSERA_DEVICE"], "cuda:0");
  EXPECT_EQ(m["MASTER_ADDR"], "127.0.0.1");
  EXPECT_EQ(m["MASTER_PORT"], "29500");
  // The launcher's own CUDA_VISIBLE_DEVICES maps cuda:N to its N-th entry.
  auto env2 = RankEnvironment(r, 2, "a=host:1,nvidia=cuda:1", "127.0.0.1:5", "tok", 1500ms, 29500, "5,7");
  std::map<std::string, std::string> m2(env2.begin(), env2.end());
  EXPECT_EQ(m2["CUDA_VISIBLE_DEVICES"], "7");
  EXPECT_EQ(m2["TESSERA_DEVICE"], "cuda:0");
  auto port = FreeLoopbackPort();
  ASSERT_TRUE(port.ok()) << port.status().message();
  EXPECT_GT(*port, 0);
}

TEST(LauncherPlan, CudaRanksShareVisibleGpusRoundRobin) {
  auto islands = ParseIslands({"nvidia=cuda:3", "cpu=host:1", "ascend=cuda:2"});
  ASSERT_TRUE(islands.ok());
  auto ranks = PlanRanks(*islands, 2);
  ASSERT_TRUE(ranks.ok()) << ranks.status().ToString();
  std::vector<std::string> devices;
  for (const auto& r : *ranks) devices.push_back(r.device);
  EXPECT_EQ(devices, (std::vector<std::string>{"cuda:0", "cuda:1", "cuda:0", "host", "cuda:1", "cuda:0"}));
  auto none = PlanRanks(*islands, 0, "no driver");
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.status().code(), Code::kUnsupported);
  EXPECT_TRUE(Contains(none.status().message(), "--island 'nvidia=cuda:3'")) << none.status().message();
  EXPECT_TRUE(Contains(none.status().message(), "no CUDA device is visible")) << none.status().message();
  EXPECT_TRUE(Contains(none.status().message(), "no driver")) << none.status().message();
}

// Two cuda islands dealt one GPU are two processes on it: outside MPS their contexts take turns, and the launcher
// says so, with the --sm-share options that would run them under MPS. Not on two GPUs, not for host ranks, not when
// every island on the GPU has its share, and not for a family MPS does not serve.
TEST(LauncherPlan, IslandsSharingOneGpuOutsideMpsGetANote) {
  auto islands = ParseIslands({"nvidia=cuda:1", "cpu=host:1", "other=cuda:1"});
  ASSERT_TRUE(islands.ok());
  auto one = PlanRanks(*islands, 1);
  ASSERT_TRUE(one.ok()) << one.status().ToString();
  const std::string note = SharedDeviceNote(*one, *islands, {});
  EXPECT_TRUE(Contains(note, "islands nvidia, other share cuda:0")) << note;
  EXPECT_TRUE(Contains(note, "--sm-share nvidia=50 --sm-share other=50 runs them under MPS")) << note;
  EXPECT_TRUE(Contains(SharedDeviceNote(*one, *islands, {{"nvidia", 40}}), "share cuda:0"));  // one island outside
  EXPECT_EQ(SharedDeviceNote(*one, *islands, {{"nvidia", 40}, {"other", 60}}), "");
  auto two = PlanRanks(*islands, 2);
  ASSERT_TRUE(two.ok());
  EXPECT_EQ(SharedDeviceNote(*two, *islands, {}), "");
  auto hosts = ParseIslands({"a=host:2", "b=host:1"});
  ASSERT_TRUE(hosts.ok());
  auto host_ranks = PlanRanks(*hosts, 0);
  ASSERT_TRUE(host_ranks.ok());
  EXPECT_EQ(SharedDeviceNote(*host_ranks, *hosts, {}), "");
  auto emu = ParseIslands({"a=emu:1", "b=emu:1"});
  ASSERT_TRUE(emu.ok()) << emu.status().ToString();
  auto emu_ranks = PlanRanks(*emu, 1);
  ASSERT_TRUE(emu_ranks.ok());
  EXPECT_EQ(SharedDeviceNote(*emu_ranks, *emu, {}), "");
}

TEST(LauncherPlan, SignalNames) {
  EXPECT_EQ(SignalName(SIGKILL), "SIGKILL");
  EXPECT_EQ(SignalName(SIGTERM), "SIGTERM");
  EXPECT_EQ(SignalName(SIGINT), "SIGINT");
}

// ---- the tessera binary ------------------------------------------------------------------------------

struct Outcome {
  int status = -1;  // the launcher's exit status; -1 if it had to be killed by the test
  std::string out, err;
  double seconds = 0;
};

// `tessera ARGS...` as a child process with its stdout and stderr captured.
class Tessera {
 public:
  explicit Tessera(std::vector<std::string> args, std::map<std::string, std::string> env = {}) {
    const char* bin = std::getenv("TESSERA_BIN");
    if (bin == nullptr) {
      ADD_FAILURE() << "TESSERA_BIN is not set (ctest sets it to the built tessera binary)";
      return;
    }
    args.insert(args.begin(), bin);
    std::vector<std::string> env_strings;
    for (char** e = environ; *e != nullptr; ++e) {
      std::string entry(*e);
      if (!env.count(entry.substr(0, entry.find('=')))) env_strings.push_back(entry);
    }
    for (const auto& [k, v] : env)
      if (!v.empty()) env_strings.push_back(k + "=" + v);  // an empty value unsets
    std::vector<char*> argv, envp;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    for (auto& e : env_strings) envp.push_back(e.data());
    envp.push_back(nullptr);
    int out[2], err[2];
    if (::pipe(out) != 0 || ::pipe(err) != 0) {
      ADD_FAILURE() << "pipe";
      return;
    }
    start_ = Clock::now();
    pid_ = ::fork();
    if (pid_ == 0) {
      ::dup2(out[1], 1);
      ::dup2(err[1], 2);
      ::close(out[0]);
      ::close(err[0]);
      ::close(out[1]);
      ::close(err[1]);
      ::execve(argv[0], argv.data(), envp.data());
      ::_exit(126);
    }
    ::close(out[1]);
    ::close(err[1]);
    out_fd_ = out[0];
    err_fd_ = err[0];
  }
  ~Tessera() {
    if (pid_ > 0 && !reaped_) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
    if (out_fd_ >= 0) ::close(out_fd_);
    if (err_fd_ >= 0) ::close(err_fd_);
  }

  // Reads output until `needle` occurs `times` times in stdout (or stderr), or `timeout` passes.
  bool WaitFor(const std::string& needle, size_t times, milliseconds timeout, bool in_stderr = false) {
    const auto deadline = Clock::now() + timeout;
    while (Count(in_stderr ? err_ : out_, needle) < times) {
      if (Clock::now() >= deadline || !Pump(deadline)) return Count(in_stderr ? err_ : out_, needle) >= times;
    }
    return true;
  }

  void Signal(int sig) { ::kill(pid_, sig); }
  // What it has printed so far.
  Outcome Peek() const {
    Outcome o;
    o.out = out_;
    o.err = err_;
    return o;
  }

  // Waits for the launcher to exit and its output to end; kills it after `timeout`.
  Outcome Finish(milliseconds timeout = 60s) {
    const auto deadline = Clock::now() + timeout;
    while ((out_fd_ >= 0 || err_fd_ >= 0) && Pump(deadline)) {
    }
    Outcome o;
    int st = 0;
    if (Clock::now() >= deadline) {
      ADD_FAILURE() << "tessera did not finish within the bound; killing it";
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, &st, 0);
    } else {
      ::waitpid(pid_, &st, 0);
      o.status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    }
    reaped_ = true;
    o.seconds = std::chrono::duration<double>(Clock::now() - start_).count();
    o.out = out_;
    o.err = err_;
    return o;
  }

 private:
  // One round of reading; false when both pipes are at EOF or the deadline passed.
  bool Pump(Clock::time_point deadline) {
    std::vector<pollfd> fds;
    if (out_fd_ >= 0) fds.push_back({out_fd_, POLLIN, 0});
    if (err_fd_ >= 0) fds.push_back({err_fd_, POLLIN, 0});
    if (fds.empty()) return false;
    const auto left = std::chrono::duration_cast<milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) return false;
    if (::poll(fds.data(), fds.size(), static_cast<int>(left)) <= 0) return Clock::now() < deadline;
    for (const auto& p : fds) {
      if (p.revents == 0) continue;
      char buf[65536];
      const ssize_t n = ::read(p.fd, buf, sizeof(buf));
      std::string& sink = p.fd == out_fd_ ? out_ : err_;
      if (n > 0) {
        sink.append(buf, static_cast<size_t>(n));
      } else {
        ::close(p.fd);
        (p.fd == out_fd_ ? out_fd_ : err_fd_) = -1;
      }
    }
    return true;
  }

  pid_t pid_ = -1;
  bool reaped_ = false;
  int out_fd_ = -1, err_fd_ = -1;
  std::string out_, err_;
  Clock::time_point start_;
};

std::vector<std::string> RunArgs(const std::vector<std::string>& islands, const std::vector<std::string>& extra,
                                 const std::string& script) {
  std::vector<std::string> args = {"run"};
  for (const auto& i : islands) {
    args.push_back("--island");
    args.push_back(i);
  }
  args.insert(args.end(), extra.begin(), extra.end());
  for (const char* a : {"--", "/bin/sh", "-c"}) args.push_back(a);
  args.push_back(script);
  return args;
}

bool Gone(pid_t pid) { return ::kill(pid, 0) != 0 && errno == ESRCH; }

class LauncherLayout : public ::testing::TestWithParam<std::vector<std::pair<std::string, int>>> {};

TEST_P(LauncherLayout, EveryRankGetsItsEnvironment) {
  const auto& layout = GetParam();
  std::vector<std::string> islands;
  std::string layout_string;
  int world = 0;
  for (const auto& [vendor, count] : layout) {
    islands.push_back(vendor + "=host:" + std::to_string(count));
    layout_string += (layout_string.empty() ? "" : ",") + islands.back();
    world += count;
  }
  Tessera t(RunArgs(islands, {"--timeout", "45s"},
                    "echo \"R=$TESSERA_RANK W=$TESSERA_WORLD_SIZE I=$TESSERA_ISLAND V=$TESSERA_ISLAND_VENDOR "
                    "D=$TESSERA_DEVICE L=$TESSERA_LOCAL_RANK IS=$TESSERA_ISLANDS S=$TESSERA_STORE "
                    "T=$TESSERA_TIMEOUT K=$TESSERA_TOKEN F=$FOO\""),
            {{"FOO", "passed-through"}, {"TESSERA_RANK", "99"}});
  const Outcome o = t.Finish();
  ASSERT_EQ(o.status, 0) << o.err;
  const auto lines = Lines(o.out);
  ASSERT_EQ(lines.size(), static_cast<size_t>(world)) << o.out;
  std::map<int, std::string> by_rank;
  std::string store, token;
  for (const auto& line : lines) {
    int rank = -1;
    char vendor[64] = {};
    ASSERT_EQ(std::sscanf(line.c_str(), "[rank %d %63[^]]] ", &rank, vendor), 2) << line;
    by_rank[rank] = line;
    const size_t s = line.find(" S="), k = line.find(" K=");
    ASSERT_NE(s, std::string::npos);
    const std::string this_store = line.substr(s + 3, line.find(' ', s + 1) - s - 3);
    const std::string this_token = line.substr(k + 3, line.find(' ', k + 1) - k - 3);
    if (store.empty()) store = this_store, token = this_token;
    EXPECT_EQ(this_store, store) << "every rank meets at the same store";
    EXPECT_EQ(this_token, token) << "every rank has the same token";
  }
  EXPECT_TRUE(store.rfind("127.0.0.1:", 0) == 0) << store;
  EXPECT_EQ(token.size(), 32u) << token;
  ASSERT_EQ(by_rank.size(), static_cast<size_t>(world));
  int rank = 0;
  for (size_t island = 0; island < layout.size(); ++island) {
    for (int k = 0; k < layout[island].second; ++k, ++rank) {
      const std::string& v = layout[island].first;
      const std::string expected = "[rank " + std::to_string(rank) + " " + v + "] R=" + std::to_string(rank) +
                                   " W=" + std::to_string(world) + " I=" + std::to_string(island) + " V=" + v +
                                   " D=host L=" + std::to_string(rank) + " IS=" + layout_string + " S=" + store +
                                   " T=45s K=" + token + " F=passed-through";
      EXPECT_EQ(by_rank[rank], expected);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Layouts, LauncherLayout,
                         ::testing::Values(std::vector<std::pair<std::string, int>>{{"nvidia", 1}},
                                           std::vector<std::pair<std::string, int>>{{"ascend", 1}, {"nvidia", 1}},
                                           std::vector<std::pair<std::string, int>>{{"ascend", 3}, {"nvidia", 5}},
                                           std::vector<std::pair<std::string, int>>{
                                               {"ascend", 2}, {"moore", 2}, {"nvidia", 3}},
                                           std::vector<std::pair<std::string, int>>{{"ascend", 1}, {"nvidia", 7}}),
                         [](const auto& info) {
                           std::string name;
                           for (const auto& [vendor, count] : info.param)
                             name += (name.empty() ? "" : "_") + vendor + std::to_string(count);
                           return name;
                         });

TEST(Launcher, TimeoutComesFromTheFlagTheCallerOrTheDefault) {
  const std::string script = "echo T=$TESSERA_TIMEOUT";
  EXPECT_EQ(Tessera(RunArgs({"a=host:1"}, {"--timeout", "1500ms"}, script)).Finish().out, "[rank 0 a] T=1500ms\n");
  EXPECT_EQ(Tessera(RunArgs({"a=host:1"}, {}, script), {{"TESSERA_TIMEOUT", "2m"}}).Finish().out,
            "[rank 0 a] T=120s\n");
  EXPECT_EQ(Tessera(RunArgs({"a=host:1"}, {}, script), {{"TESSERA_TIMEOUT", ""}}).Finish().out, "[rank 0 a] T=60s\n");
  const Outcome bad = Tessera(RunArgs({"a=host:1"}, {}, script), {{"TESSERA_TIMEOUT", "soon"}}).Finish();
  EXPECT_EQ(bad.status, 2);
  EXPECT_TRUE(Contains(bad.err, "TESSERA_TIMEOUT='soon'")) << bad.err;
}

// A connection that never authenticates was kept for TESSERA_TIMEOUT's default (60 s) in a job run with
// --timeout 1s: the store drops it after the job's own timeout (the rank's `cat` sees the end well before its
// 20 s bound, which gives 124).
TEST(Launcher, StoreDropsSilentConnectionsAfterTheJobsTimeout) {
  const std::string script =
      "exec bash -c 'exec 3<>/dev/tcp/${TESSERA_STORE%:*}/${TESSERA_STORE##*:} && timeout 20 cat <&3 >/dev/null; "
      "echo rc=$?'";
  const Outcome o = Tessera(RunArgs({"a=host:1"}, {"--timeout", "1s"}, script), {{"TESSERA_TIMEOUT", ""}}).Finish();
  EXPECT_EQ(o.out, "[rank 0 a] rc=0\n") << o.err;
}

TEST(Launcher, OutputIsPrefixedPerRankAndStream) {
  Tessera t(RunArgs({"a=host:2", "b=host:1"}, {},
                    "echo out1; echo err1 >&2; echo out2; echo err2 >&2; printf 'tail-without-newline'"));
  const Outcome o = t.Finish();
  ASSERT_EQ(o.status, 0) << o.err;
  for (const auto& [rank, vendor] : std::vector<std::pair<int, std::string>>{{0, "a"}, {1, "a"}, {2, "b"}}) {
    const std::string p = "[rank " + std::to_string(rank) + " " + vendor + "] ";
    std::vector<std::string> outs, errs;
    for (const auto& l : Lines(o.out))
      if (l.rfind(p, 0) == 0) outs.push_back(l.substr(p.size()));
    for (const auto& l : Lines(o.err))
      if (l.rfind(p, 0) == 0) errs.push_back(l.substr(p.size()));
    EXPECT_EQ(outs, (std::vector<std::string>{"out1", "out2", "tail-without-newline"})) << o.out;
    EXPECT_EQ(errs, (std::vector<std::string>{"err1", "err2"})) << o.err;
  }
  EXPECT_EQ(Lines(o.out).size(), 9u) << o.out;
}

// --no-prefix: the ranks' lines as they wrote them (machine-readable output stays parseable), still whole.
TEST(Launcher, NoPrefixPrintsTheLinesAsWritten) {
  Tessera t(RunArgs({"a=host:1", "b=host:1"}, {"--no-prefix"},
                    "printf 'rank=%s\\n' $TESSERA_RANK; echo \"err $TESSERA_RANK\" >&2"));
  const Outcome o = t.Finish();
  ASSERT_EQ(o.status, 0) << o.err;
  auto outs = Lines(o.out), errs = Lines(o.err);
  std::sort(outs.begin(), outs.end());
  std::sort(errs.begin(), errs.end());
  EXPECT_EQ(outs, (std::vector<std::string>{"rank=0", "rank=1"})) << o.out;
  EXPECT_EQ(errs, (std::vector<std::string>{"err 0", "err 1"})) << o.err;
}

// A mistake in `tessera bench`'s command line is the same on every rank: it is printed once, by rank 0.
TEST(Launcher, BenchUsageErrorIsPrintedOnce) {
  const char* bin = std::getenv("TESSERA_BIN");
  ASSERT_NE(bin, nullptr);
  Tessera t({"run", "--island", "a=host:1", "--island", "b=host:1", "--", bin, "bench", "allredcue"});
  const Outcome o = t.Finish();
  EXPECT_EQ(o.status, 2) << o.err;
  size_t n = 0;
  for (size_t at = o.err.find("unknown collective 'allredcue'"); at != std::string::npos;
       at = o.err.find("unknown collective 'allredcue'", at + 1))
    ++n;
  EXPECT_EQ(n, 1u) << o.err;
}

TEST(Launcher, LinesAreNeverBrokenOrInterleaved) {
  // Four ranks race to print 3000 numbered lines each and one 200 000-character line.
  Tessera t(
      RunArgs({"a=host:2", "b=host:2"}, {}, "seq 1 3000; head -c 200000 /dev/zero | tr '\\0' x; echo; seq 3001 3500"));
  const Outcome o = t.Finish();
  ASSERT_EQ(o.status, 0) << o.err;
  std::map<int, std::vector<std::string>> by_rank;
  for (const auto& line : Lines(o.out)) {
    int rank = -1;
    char vendor[8] = {};
    int consumed = 0;
    ASSERT_EQ(std::sscanf(line.c_str(), "[rank %d %7[^]]] %n", &rank, vendor, &consumed), 2) << line.substr(0, 80);
    by_rank[rank].push_back(line.substr(static_cast<size_t>(consumed)));
  }
  ASSERT_EQ(by_rank.size(), 4u);
  for (auto& [rank, lines] : by_rank) {
    ASSERT_EQ(lines.size(), 3501u) << "rank " << rank;
    for (int i = 0; i < 3000; ++i) ASSERT_EQ(lines[i], std::to_string(i + 1)) << "rank " << rank;
    EXPECT_EQ(lines[3000], std::string(200000, 'x')) << "rank " << rank;
    for (int i = 3001; i <= 3500; ++i) ASSERT_EQ(lines[i], std::to_string(i)) << "rank " << rank;
  }
}

TEST(Launcher, FailingRankStopsStuckRanksAndNamesIt) {
  // Rank 3 fails at once; the others hang. With --stop-grace 1s they get 1 s of grace, then SIGTERM.
  Tessera t(RunArgs({"a=host:2", "b=host:2"}, {"--stop-grace", "1s"},
                    "echo pid $$; if [ $TESSERA_RANK = 3 ]; then exit 3; fi; exec sleep 1000"));
  const Outcome o = t.Finish(30s);
  EXPECT_EQ(o.status, 3) << o.err;
  EXPECT_LT(o.seconds, 10.0);
  EXPECT_TRUE(Contains(o.err, "tessera run: rank 3 (b) exited with status 3\n")) << o.err;
  EXPECT_TRUE(Contains(o.err, "tessera run: rank 0 (a) was killed by signal 15 (SIGTERM)")) << o.err;
  int pids = 0;
  for (const auto& line : Lines(o.out)) {
    const size_t p = line.find("] pid ");
    if (p == std::string::npos) continue;
    ++pids;
    const pid_t pid = std::stoi(line.substr(p + 6));
    EXPECT_TRUE(Gone(pid)) << "rank process " << pid << " is still running";
  }
  EXPECT_EQ(pids, 4) << o.out;
}

TEST(Launcher, AFailedRankStopsTheOthersAfterTheStopGraceNotTheTimeout) {
  // Rank 2 fails before the others have joined anything; they would wait for the whole --timeout (60 s) before
  // being stopped. They get the default grace (3 s) instead.
  Tessera t(RunArgs({"a=host:3"}, {"--timeout", "60s"},
                    "if [ $TESSERA_RANK = 2 ]; then echo failing; exit 4; fi; exec sleep 1000"));
  const Outcome o = t.Finish(40s);
  EXPECT_EQ(o.status, 4) << o.err;
  EXPECT_TRUE(Contains(o.err, "waiting up to 3s (--stop-grace) for the other 2 ranks to exit, then stopping them"))
      << o.err;
  EXPECT_TRUE(Contains(o.err, "stopping the 2 ranks still running 3s after rank 2 failed")) << o.err;
  EXPECT_TRUE(Contains(o.err, "rank 0 (a) was killed by signal 15 (SIGTERM) sent by tessera run")) << o.err;
}

TEST(Launcher, StopGraceComesFromTheFlag) {
  Tessera t(
      RunArgs({"a=host:2"}, {"--stop-grace", "200ms"}, "if [ $TESSERA_RANK = 0 ]; then exit 1; fi; exec sleep 1000"));
  const Outcome o = t.Finish(30s);
  EXPECT_EQ(o.status, 1) << o.err;
  EXPECT_TRUE(Contains(o.err, "waiting up to 200ms (--stop-grace) for the other rank to exit")) << o.err;
  EXPECT_TRUE(Contains(o.err, "stopping the 1 rank still running 200ms after rank 0 failed")) << o.err;
  const Outcome bad = Tessera(RunArgs({"a=host:1"}, {"--stop-grace", "soon"}, "true")).Finish(30s);
  EXPECT_EQ(bad.status, 2);
  EXPECT_TRUE(Contains(bad.err, "--stop-grace")) << bad.err;
  EXPECT_TRUE(Contains(bad.err, "soon")) << bad.err;
}

TEST(Launcher, RanksThatIgnoreSigtermAreKilled) {
  Tessera t(RunArgs({"a=host:3"}, {"--stop-grace", "500ms"},
                    "trap '' TERM; echo pid $$; if [ $TESSERA_RANK = 0 ]; then exit 1; fi; exec sleep 1000"));
  const Outcome o = t.Finish(30s);
  EXPECT_EQ(o.status, 1) << o.err;
  EXPECT_LT(o.seconds, 15.0);
  EXPECT_TRUE(Contains(o.err, "rank 0 (a) exited with status 1")) << o.err;
  EXPECT_TRUE(Contains(o.err, "rank 1 (a) was killed by signal 9 (SIGKILL)")) << o.err;
  EXPECT_TRUE(Contains(o.err, "rank 2 (a) was killed by signal 9 (SIGKILL)")) << o.err;
  for (const auto& line : Lines(o.out)) {
    const size_t p = line.find("] pid ");
    if (p != std::string::npos) {
      EXPECT_TRUE(Gone(std::stoi(line.substr(p + 6)))) << line;
    }
  }
}

TEST(Launcher, RankKilledBySignalIsReported) {
  Tessera t(RunArgs({"a=host:2", "b=host:1"}, {}, "if [ $TESSERA_RANK = 1 ]; then kill -9 $$; fi; exit 0"));
  const Outcome o = t.Finish(30s);
  EXPECT_EQ(o.status, 128 + 9) << o.err;
  EXPECT_TRUE(Contains(o.err, "tessera run: rank 1 (a) was killed by signal 9 (SIGKILL)\n")) << o.err;
  EXPECT_EQ(Count(o.err, "tessera run: rank "), 1u) << "only rank 1 failed: " << o.err;
}

TEST(Launcher, OtherRanksMayFinishOnTheirOwnAfterAFailure) {
  // Rank 0 fails; rank 1 needs a moment, then exits 0 on its own within the grace: nobody is stopped.
  Tessera t(RunArgs({"a=host:1", "b=host:1"}, {"--timeout", "30s"},
                    "if [ $TESSERA_RANK = 0 ]; then exit 5; fi; sleep 0.3; echo done"));
  const Outcome o = t.Finish(30s);
  EXPECT_EQ(o.status, 5) << o.err;
  EXPECT_LT(o.seconds, 10.0);
  EXPECT_TRUE(Contains(o.out, "[rank 1 b] done\n")) << o.out;
  EXPECT_TRUE(Contains(o.err, "rank 0 (a) exited with status 5")) << o.err;
  EXPECT_FALSE(Contains(o.err, "still running")) << o.err;
}

class LauncherForwards : public ::testing::TestWithParam<int> {};

TEST_P(LauncherForwards, SignalToEveryRank) {
  const int sig = GetParam();
  const std::string name = SignalName(sig).substr(3);
  Tessera t(RunArgs({"a=host:2", "b=host:1"}, {},
                    "trap 'echo got-" + name + "; exit 0' " + name + "; echo ready; while :; do sleep 0.05; done"));
  ASSERT_TRUE(t.WaitFor("ready", 3, 20s));
  t.Signal(sig);
  const Outcome o = t.Finish(30s);
  EXPECT_EQ(o.status, 0) << o.err;  // every rank handled the signal and exited 0
  EXPECT_EQ(Count(o.out, "got-" + name), 3u) << o.out;
  EXPECT_TRUE(Contains(o.err, "forwarding SIG" + name + " to the 3 ranks")) << o.err;
}

INSTANTIATE_TEST_SUITE_P(Signals, LauncherForwards, ::testing::Values(SIGINT, SIGTERM, SIGHUP),
                         [](const auto& info) { return SignalName(info.param).substr(3); });

TEST(Launcher, SecondInterruptKills) {
  Tessera t(RunArgs({"a=host:2"}, {}, "trap '' INT; echo ready; exec sleep 1000"));
  ASSERT_TRUE(t.WaitFor("ready", 2, 20s));
  t.Signal(SIGINT);
  ASSERT_TRUE(t.WaitFor("forwarding SIGINT", 1, 20s, /*in_stderr=*/true));
  t.Signal(SIGINT);
  const Outcome o = t.Finish(30s);
  EXPECT_EQ(o.status, 128 + 9) << o.err;
  EXPECT_TRUE(Contains(o.err, "second SIGINT: killing the 2 ranks")) << o.err;
  EXPECT_TRUE(Contains(o.err, "was killed by signal 9 (SIGKILL)")) << o.err;
}

TEST(Launcher, ProgramThatCannotStart) {
  const Outcome o = Tessera({"run", "--island", "a=host:2", "--", "./nope-no-such-program"}).Finish(30s);
  EXPECT_EQ(o.status, 127);
  EXPECT_EQ(o.err, "tessera run: cannot start rank 0: ./nope-no-such-program: No such file or directory\n");
  const Outcome p = Tessera({"run", "--island", "a=host:1", "--", "no-such-command-in-path"}).Finish(30s);
  EXPECT_EQ(p.status, 127);
  EXPECT_TRUE(Contains(p.err, "cannot start rank 0: no-such-command-in-path: command not found in PATH")) << p.err;
  // A file without execute permission.
  char path[] = "/tmp/tessera-launcher-test-XXXXXX";
  const int fd = ::mkstemp(path);
  ASSERT_GE(fd, 0);
  ::close(fd);
  ::chmod(path, 0644);
  const Outcome q = Tessera({"run", "--island", "a=host:1", "--", path}).Finish(30s);
  ::unlink(path);
  EXPECT_EQ(q.status, 127);
  EXPECT_TRUE(Contains(q.err, std::string("cannot start rank 0: ") + path + ": Permission denied")) << q.err;
}

TEST(Launcher, BadCommandLinesAreNamed) {
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"run", "--island", "ascend=hots:3", "--", "true"},
       "unknown device 'hots' in --island 'ascend=hots:3': use host, cuda, npu, musa, corex or emu"},
      {{"run", "--island", "ascend=host:0", "--", "true"}, "rank count '0' in --island 'ascend=host:0'"},
      {{"run", "--island", "ascend=host:three", "--", "true"}, "rank count 'three' in --island 'ascend=host:three'"},
      {{"run", "--island", "a=host:1", "--island", "a=host:2", "--", "true"}, "vendor 'a' is given twice"},
      {{"run", "--island", "a=host:1"}, "no program given"},
      {{"run", "--island", "a=host:1", "./train"}, "put '--' before the program ('./train')"},
      {{"run", "--island", "a=host:1", "--"}, "no program after '--'"},
      {{"run", "--", "true"}, "no --island given"},
      {{"run", "--island", "a=host:1", "--timeout", "soon", "--", "true"}, "--timeout='soon'"},
      {{"run", "--island", "a=host:1", "--frobnicate", "--", "true"}, "unknown option '--frobnicate'"},
  };
  for (const auto& [args, message] : cases) {
    const Outcome o = Tessera(args).Finish(30s);
    EXPECT_EQ(o.status, 2) << message;
    EXPECT_TRUE(Contains(o.err, "tessera run: " + message)) << o.err;
    EXPECT_EQ(o.out, "");
  }
}

TEST(Launcher, CudaIslandWithoutGpuIsRefused) {
  std::string why;
  if (comm::VisibleDeviceCount(*FindDeviceFamily("cuda"), &why) > 0) GTEST_SKIP() << "a CUDA device is visible here";
  const Outcome o = Tessera({"run", "--island", "nvidia=cuda:1", "--", "true"}).Finish(30s);
  EXPECT_EQ(o.status, 2);
  EXPECT_TRUE(Contains(o.err, "--island 'nvidia=cuda:1' needs CUDA devices, but no CUDA device is visible")) << o.err;
}

TEST(Launcher, DryRunPrintsTheRankTable) {
  const Outcome o =
      Tessera({"run", "--dry-run", "--island", "ascend=host:3", "--island", "nvidia=host:5", "--", "./whatever"})
          .Finish(30s);
  EXPECT_EQ(o.status, 0) << o.err;
  EXPECT_TRUE(Contains(o.out, "8 ranks in 2 islands: ascend=host:3,nvidia=host:5\n")) << o.out;
  EXPECT_TRUE(Contains(o.out, "rank  island  vendor  device  local_rank\n")) << o.out;
  EXPECT_TRUE(Contains(o.out, "   2       0  ascend  host             2\n")) << o.out;
  EXPECT_TRUE(Contains(o.out, "   7       1  nvidia  host             7\n")) << o.out;
}

// Ranks started by the launcher meet at its store with its token. The ranks are this test binary itself,
// running only LauncherRank.MeetsAtTheStore (which skips when not started by `tessera run`).
TEST(Launcher, RanksMeetAtTheStore) {
  char self[4096];
  const ssize_t n = ::readlink("/proc/self/exe", self, sizeof(self) - 1);
  ASSERT_GT(n, 0);
  self[n] = '\0';
  const Outcome o = Tessera({"run", "--island", "ascend=host:2", "--island", "nvidia=host:3", "--timeout", "30s", "--",
                             self, "--gtest_filter=LauncherRank.MeetsAtTheStore"})
                        .Finish(120s);
  EXPECT_EQ(o.status, 0) << o.out << o.err;
  EXPECT_EQ(Count(o.out, "[  PASSED  ] 1 test"), 5u) << o.out;
}

TEST(LauncherRank, MeetsAtTheStore) {
  if (std::getenv("TESSERA_RANK") == nullptr) GTEST_SKIP() << "runs as a rank of Launcher.RanksMeetAtTheStore";
  const int rank = std::atoi(std::getenv("TESSERA_RANK"));
  const int world = std::atoi(std::getenv("TESSERA_WORLD_SIZE"));
  const std::string store = std::getenv("TESSERA_STORE");
  const std::string token = std::getenv("TESSERA_TOKEN");
  auto c = comm::StoreClient::Connect(store, token, 30s);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  ASSERT_TRUE(c.value()->Set("vendor/" + std::to_string(rank), std::getenv("TESSERA_ISLAND_VENDOR")).ok());
  ASSERT_TRUE(c.value()->Barrier("all", world, 30s).ok());
  for (int peer = 0; peer < world; ++peer) {
    auto v = c.value()->Get("vendor/" + std::to_string(peer), 1s);
    ASSERT_TRUE(v.ok()) << v.status().ToString();
    EXPECT_EQ(*v, peer < 2 ? "ascend" : "nvidia");
  }
  auto wrong = comm::StoreClient::Connect(store, token + "x", 5s);
  ASSERT_FALSE(wrong.ok());
  EXPECT_TRUE(Contains(wrong.status().message(), "refused the job token")) << wrong.status().message();
}

TEST(LauncherSmShare, ParsesSharesOfCudaIslandsAndNamesBadValues) {
  auto islands = ParseIslands({"ascend=cuda:1", "nvidia=cuda:1", "cpu=host:2"});
  ASSERT_TRUE(islands.ok()) << islands.status().message();
  auto ok = ParseSmShares({"ascend=40"}, *islands);
  ASSERT_TRUE(ok.ok()) << ok.status().message();
  EXPECT_EQ(ok->at("ascend"), 40);
  for (const auto& [bad, says] : std::vector<std::pair<std::string, std::string>>{{"ascend", "VENDOR=PERCENT"},
                                                                                  {"ascend=0", "ascend=0"},
                                                                                  {"ascend=101", "ascend=101"},
                                                                                  {"ascend=4x", "ascend=4x"},
                                                                                  {"moore=40", "no island 'moore'"},
                                                                                  {"cpu=40", "not a cuda island"}}) {
    auto r = ParseSmShares({bad}, *islands);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_NE(r.status().message().find(says), std::string::npos) << r.status().message();
  }
  auto twice = ParseSmShares({"ascend=40", "ascend=50"}, *islands);
  ASSERT_FALSE(twice.ok());
  EXPECT_NE(twice.status().message().find("twice"), std::string::npos);
  EXPECT_EQ(EmulatedLabel("NVIDIA H200", 40), "emulated on an SM share of NVIDIA H200 (40%)");
}

TEST(LauncherSmShare, EachRankGetsItsShareLabelAndMoreWorkQueuesUnlessSet) {
  const char* old = std::getenv("CUDA_DEVICE_MAX_CONNECTIONS");
  const std::string saved = old ? old : "";
  auto value = [](const std::vector<std::pair<std::string, std::string>>& env, const std::string& k) {
    for (const auto& [key, v] : env)
      if (key == k) return v;
    return std::string("<unset>");
  };
  ::unsetenv("CUDA_DEVICE_MAX_CONNECTIONS");
  auto env = SmShareEnvironment(35, "emulated on an SM share of NVIDIA H200 (35%)");
  EXPECT_EQ(value(env, "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"), "35");
  EXPECT_EQ(value(env, "TESSERA_SM_SHARE"), "35");
  EXPECT_EQ(value(env, "TESSERA_EMULATED"), "emulated on an SM share of NVIDIA H200 (35%)");
  EXPECT_EQ(value(env, "CUDA_DEVICE_MAX_CONNECTIONS"), "32");
  ::setenv("CUDA_DEVICE_MAX_CONNECTIONS", "4", 1);  // the user's value is kept (the rank inherits it)
  EXPECT_EQ(value(SmShareEnvironment(65, "x"), "CUDA_DEVICE_MAX_CONNECTIONS"), "<unset>");
  if (old)
    ::setenv("CUDA_DEVICE_MAX_CONNECTIONS", saved.c_str(), 1);
  else
    ::unsetenv("CUDA_DEVICE_MAX_CONNECTIONS");
}

TEST(LauncherSmShare, RefusesClearlyWithoutMps) {
  // No nvidia-cuda-mps-control on this PATH: the daemon cannot start, and the error says what is missing.
  const char* old = std::getenv("PATH");
  const std::string saved = old ? old : "";
  ::setenv("PATH", "/nonexistent", 1);
  auto d = MpsDaemon::Start();
  ::setenv("PATH", saved.c_str(), 1);
  ASSERT_FALSE(d.ok());
  EXPECT_NE(d.status().message().find("nvidia-cuda-mps-control"), std::string::npos) << d.status().message();
}
// ---- jobs across nodes: the layout, Slurm's variables, the token ---------------------------------------

TEST(LauncherNodes, RanksAreDealtToNodesInContiguousBlocks) {
  EXPECT_EQ(NodeBlock(7, 3, 0), std::make_pair(0, 2));
  EXPECT_EQ(NodeBlock(7, 3, 1), std::make_pair(2, 4));
  EXPECT_EQ(NodeBlock(7, 3, 2), std::make_pair(4, 7));
  auto islands = ParseIslands({"ascend=host:4", "nvidia=host:3"});
  ASSERT_TRUE(islands.ok());
  auto node1 = PlanNodeRanks(*islands, 3, 1, 0);
  ASSERT_TRUE(node1.ok()) << node1.status().message();
  ASSERT_EQ(node1->size(), 2u);
  EXPECT_EQ((*node1)[0].rank, 2);
  EXPECT_EQ((*node1)[1].rank, 3);
  EXPECT_EQ((*node1)[1].island, 0);
  EXPECT_EQ((*node1)[1].local_rank, 1);
  EXPECT_EQ((*node1)[1].node, 1);
  auto node2 = PlanNodeRanks(*islands, 3, 2, 0, "", 5);  // local ranks after 5 others on the machine
  ASSERT_TRUE(node2.ok());
  ASSERT_EQ(node2->size(), 3u);
  EXPECT_EQ((*node2)[0].rank, 4);
  EXPECT_EQ((*node2)[0].vendor, "nvidia");
  EXPECT_EQ((*node2)[0].local_rank, 5);
  EXPECT_EQ((*node2)[2].rank, 6);
}

TEST(LauncherNodes, BadNodeLayoutsAreNamed) {
  auto islands = ParseIslands({"ascend=host:2"});
  ASSERT_TRUE(islands.ok());
  auto a = PlanNodeRanks(*islands, 3, 0, 0);
  ASSERT_FALSE(a.ok());
  EXPECT_TRUE(Contains(a.status().message(), "--nnodes 3 is more than the job's 2 ranks")) << a.status().message();
  auto b = PlanNodeRanks(*islands, 2, 2, 0);
  ASSERT_FALSE(b.ok());
  EXPECT_TRUE(Contains(b.status().message(), "--node-rank 2 is not in [0, 2)")) << b.status().message();
  auto cuda = ParseIslands({"ascend=host:2", "nvidia=cuda:2"});
  ASSERT_TRUE(cuda.ok());
  EXPECT_TRUE(PlanNodeRanks(*cuda, 2, 0, 0).ok());  // node 0 has host ranks only: no GPU needed here
  auto c = PlanNodeRanks(*cuda, 2, 1, 0, "no driver");
  ASSERT_FALSE(c.ok());
  EXPECT_TRUE(Contains(c.status().message(), "for rank 2 on node 1")) << c.status().message();
}

TEST(LauncherNodes, TorchrunVariablesPointAtNodeZero) {
  RankSpec r;
  r.rank = 5;
  r.local_rank = 1;
  r.island = 1;
  r.vendor = "nvidia";
  r.device = "host";
  auto vars =
      RankEnvironment(r, 8, "ascend=host:4,nvidia=host:4", "10.0.0.1:20000", "tok", 60s, 20001, "", 4, "10.0.0.1");
  std::map<std::string, std::string> env(vars.begin(), vars.end());
  EXPECT_EQ(env["RANK"], "5");
  EXPECT_EQ(env["WORLD_SIZE"], "8");
  EXPECT_EQ(env["LOCAL_RANK"], "1");
  EXPECT_EQ(env["LOCAL_WORLD_SIZE"], "4");
  EXPECT_EQ(env["MASTER_ADDR"], "10.0.0.1");
  EXPECT_EQ(env["MASTER_PORT"], "20001");
  EXPECT_EQ(env["TESSERA_STORE"], "10.0.0.1:20000");
}

TEST(LauncherSlurm, ExpandsNodeListsAsScontrolDoes) {
  auto a = ExpandHostList("node[01-03],gpu7,a[1,4-5]b");
  ASSERT_TRUE(a.ok()) << a.status().message();
  EXPECT_EQ(*a, (std::vector<std::string>{"node01", "node02", "node03", "gpu7", "a1b", "a4b", "a5b"}));
  auto b = ExpandHostList("n[8-10]");
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(*b, (std::vector<std::string>{"n8", "n9", "n10"}));
  auto c = ExpandHostList("r[1-2]c[1-2]");
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(*c, (std::vector<std::string>{"r1c1", "r1c2", "r2c1", "r2c2"}));
  for (const char* bad : {"node[01-", "n[3-1]", "n[a-b]", "", "a,,b"}) {
    auto e = ExpandHostList(bad);
    ASSERT_FALSE(e.ok()) << bad;
    EXPECT_TRUE(Contains(e.status().message(), std::string("'") + bad + "'")) << e.status().message();
  }
  auto t = ExpandTasksPerNode("2(x3),1");
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(*t, (std::vector<int>{2, 2, 2, 1}));
  EXPECT_FALSE(ExpandTasksPerNode("2(x").ok());
}

TEST(LauncherSlurm, OneLauncherPerTask) {
  auto none = SlurmFromEnv({{"SLURM_JOB_ID", "7"}});
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE(none->has_value());  // not in a step
  auto t = SlurmFromEnv({{"SLURM_PROCID", "3"},
                         {"SLURM_NTASKS", "4"},
                         {"SLURM_LOCALID", "1"},
                         {"SLURM_NODEID", "1"},
                         {"SLURM_NNODES", "2"},
                         {"SLURM_TASKS_PER_NODE", "2(x2)"},
                         {"SLURM_JOB_NODELIST", "node[01-02]"},
                         {"SLURM_JOB_ID", "4242"}});
  ASSERT_TRUE(t.ok()) << t.status().message();
  ASSERT_TRUE(t->has_value());
  const SlurmTask& s = **t;
  EXPECT_EQ(s.procid, 3);
  EXPECT_EQ(s.ntasks, 4);
  EXPECT_EQ(s.localid, 1);
  EXPECT_EQ(s.node_tasks, 2);
  EXPECT_EQ(s.store_host, "node01");
  EXPECT_EQ(s.store_port, 20000 + 2 * 4242);
  EXPECT_EQ(s.text, "Slurm job 4242 task 3 of 4");
  // The step's own node list wins over the job's.
  auto step = SlurmFromEnv({{"SLURM_PROCID", "0"},
                            {"SLURM_NTASKS", "2"},
                            {"SLURM_STEP_NODELIST", "node[05-06]"},
                            {"SLURM_JOB_NODELIST", "node[01-08]"},
                            {"SLURM_JOB_ID", "9"}});
  ASSERT_TRUE(step.ok());
  EXPECT_EQ((*step)->store_host, "node05");
}

TEST(LauncherSlurm, HeterogeneousJobMeetsOnComponentZero) {
  auto t = SlurmFromEnv({{"SLURM_PROCID", "2"},
                         {"SLURM_NTASKS", "3"},
                         {"SLURM_JOB_ID", "101"},
                         {"SLURM_HET_JOB_ID", "100"},
                         {"SLURM_HET_JOB_COMPONENT", "1"},
                         {"SLURM_JOB_NODELIST", "nv[5-6]"},
                         {"SLURM_JOB_NODELIST_HET_GROUP_0", "asc[1-2]"}});
  ASSERT_TRUE(t.ok()) << t.status().message();
  EXPECT_EQ((*t)->store_host, "asc1");
  EXPECT_EQ((*t)->store_port, 20000 + 2 * 100);  // the het job's id: the same for every component
  EXPECT_EQ((*t)->het_component, 1);
  EXPECT_TRUE(Contains((*t)->text, "heterogeneous component 1")) << (*t)->text;
}

// What a task of `srun --het-group=0,1` sees under Slurm 22.05 (captured on the test cluster of
// scripts/slurm-test-cluster.sh): no SLURM_HET_JOB_ID, the leader's SLURM_JOB_ID in every component, and a
// sorted SLURM_STEP_NODELIST whose first host is component 1's. The store must be on component 0's node.
TEST(LauncherSlurm, HetGroupStepWithoutHetJobIdMeetsOnComponentZero) {
  std::map<std::string, std::string> env = {{"SLURM_PROCID", "2"},
                                            {"SLURM_NTASKS", "3"},
                                            {"SLURM_JOB_ID", "3"},
                                            {"SLURM_HET_SIZE", "2"},
                                            {"SLURM_JOB_NODELIST", "localhost,vm"},
                                            {"SLURM_STEP_NODELIST", "localhost,vm"},
                                            {"SLURM_JOB_NODELIST_HET_GROUP_0", "vm"},
                                            {"SLURM_JOB_NODELIST_HET_GROUP_1", "localhost"},
                                            {"SLURM_NTASKS_HET_GROUP_0", "1"},
                                            {"SLURM_NTASKS_HET_GROUP_1", "2"}};
  auto t = SlurmFromEnv(env);
  ASSERT_TRUE(t.ok()) << t.status().message();
  EXPECT_EQ((*t)->store_host, "vm");
  EXPECT_EQ((*t)->store_port, 20000 + 2 * 3);
  EXPECT_EQ((*t)->het_component, 1);
  env["SLURM_PROCID"] = "0";
  t = SlurmFromEnv(env);
  ASSERT_TRUE(t.ok()) << t.status().message();
  EXPECT_EQ((*t)->het_component, 0);
  EXPECT_EQ((*t)->store_host, "vm");
}

TEST(LauncherSlurm, MalformedVariablesAreNamed) {
  auto a = SlurmFromEnv({{"SLURM_PROCID", "x"}, {"SLURM_NTASKS", "2"}, {"SLURM_JOB_NODELIST", "n1"}});
  ASSERT_FALSE(a.ok());
  EXPECT_TRUE(Contains(a.status().message(), "SLURM_PROCID='x'")) << a.status().message();
  auto b = SlurmFromEnv({{"SLURM_PROCID", "2"}, {"SLURM_NTASKS", "2"}, {"SLURM_JOB_NODELIST", "n1"}});
  ASSERT_FALSE(b.ok());
  EXPECT_TRUE(Contains(b.status().message(), "SLURM_PROCID='2' is not an integer in [0, 1]")) << b.status().message();
  auto c = SlurmFromEnv({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "2"}, {"SLURM_JOB_ID", "5"}});
  ASSERT_FALSE(c.ok());
  EXPECT_TRUE(Contains(c.status().message(), "no node list")) << c.status().message();
}

TEST(LauncherSlurm, DryRunInsideAStepNeedsNoFlags) {
  // Task 3 of 4, the second task on node02: ranks 6-7 of 8; task 2's ranks 4-5 come first on this machine.
  const Outcome o = Tessera({"run", "--dry-run", "--island", "ascend=host:4", "--island", "nvidia=host:4"},
                            {{"SLURM_PROCID", "3"},
                             {"SLURM_NTASKS", "4"},
                             {"SLURM_LOCALID", "1"},
                             {"SLURM_NODEID", "1"},
                             {"SLURM_TASKS_PER_NODE", "2(x2)"},
                             {"SLURM_JOB_NODELIST", "node[01-02]"},
                             {"SLURM_JOB_ID", "7"}})
                        .Finish(30s);
  EXPECT_EQ(o.status, 0) << o.err;
  EXPECT_TRUE(Contains(o.out, "node 3 of 4 (Slurm job 7 task 3 of 4): ranks 6-7 of 8, store node01:20014\n")) << o.out;
  EXPECT_TRUE(Contains(o.out, "   6       1  nvidia  host             2\n")) << o.out;
  EXPECT_TRUE(Contains(o.out, "   7       1  nvidia  host             3\n")) << o.out;
}

TEST(LauncherNodes, DryRunWithFlags) {
  const Outcome o = Tessera({"run", "--dry-run", "--nnodes", "2", "--node-rank", "1", "--store", "10.1.1.1:5000",
                             "--island", "ascend=host:3", "--island", "nvidia=host:3"})
                        .Finish(30s);
  EXPECT_EQ(o.status, 0) << o.err;
  EXPECT_TRUE(Contains(o.out, "node 1 of 2 (--nnodes 2 --node-rank 1): ranks 3-5 of 6, store 10.1.1.1:5000\n"))
      << o.out;
  const Outcome bad =
      Tessera({"run", "--nnodes", "2", "--node-rank", "1", "--island", "a=host:2", "--", "true"}).Finish(30s);
  EXPECT_EQ(bad.status, 2);
  EXPECT_TRUE(Contains(bad.err, "give --store HOST:PORT")) << bad.err;
}

TEST(LauncherNodes, AFailureOnOneNodeStopsTheOtherNodesRanksAfterTheGrace) {
  // Two launchers on this host form a job of two nodes; node 1's rank fails at once, node 0's would wait for the
  // whole --timeout (60 s): node 0 hears of it through the store and stops its rank after the grace.
  const std::string script = "if [ $TESSERA_RANK = 2 ]; then exit 3; fi; echo up; exec sleep 1000";
  const std::map<std::string, std::string> env = {{"TESSERA_TOKEN", "two-nodes-one-host"}};
  auto node = [&](int k, const std::string& store) {
    return RunArgs({"a=host:4"},
                   {"--nnodes", "2", "--node-rank", std::to_string(k), "--store", store, "--timeout", "60s",
                    "--stop-grace", "500ms"},
                   script);
  };
  Tessera node0(node(0, "127.0.0.1:0"), env);
  ASSERT_TRUE(node0.WaitFor("start the other nodes with --store 127.0.0.1:", 1, 20s, /*in_stderr=*/true));
  ASSERT_TRUE(node0.WaitFor("up", 2, 20s));
  const Outcome partial = node0.Peek();
  const size_t at = partial.err.find("--store 127.0.0.1:");
  const std::string store = partial.err.substr(at + 8, partial.err.find('\n', at) - at - 8);
  Tessera node1(node(1, store), env);
  const Outcome o1 = node1.Finish(30s);
  const Outcome o0 = node0.Finish(30s);
  EXPECT_EQ(o1.status, 3) << o1.err;
  EXPECT_TRUE(Contains(o1.err, "rank 2 (a) exited with status 3")) << o1.err;
  EXPECT_EQ(o0.status, 3) << "node 0 exits with the failed rank's status: " << o0.err;
  EXPECT_TRUE(Contains(o0.err, "node 1: rank 2 (a) exited with status 3\n")) << o0.err;
  EXPECT_TRUE(Contains(o0.err, "waiting up to 500ms (--stop-grace) for this node's 2 ranks to exit")) << o0.err;
  EXPECT_TRUE(Contains(o0.err, "rank 0 (a) was killed by signal 15 (SIGTERM) sent by tessera run")) << o0.err;
}

TEST(LauncherSlurm, AFailureInOneTaskStopsTheOtherTasksRanksAfterTheGrace) {
  // Two tasks of a Slurm step on this host (the step's node list: localhost), one launcher each: task 1's rank
  // fails at once, task 0 hears of it through the store and stops its rank. The store's port comes from the job
  // id (20000 + 2 × (id mod 20000)): an id whose port is free here.
  auto port_free = [](int port) {
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(port));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    const bool ok = ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
    ::close(fd);
    return ok;
  };
  int job = -1;
  for (int id = 1 + ::getpid() % 19999, tries = 0; tries < 500 && job < 0; ++tries, id = 1 + (id + 7919) % 19999)
    if (port_free(20000 + 2 * id) && port_free(20001 + 2 * id)) job = id;
  ASSERT_GT(job, 0) << "no free port for the step's store";
  auto task = [&](int k) {
    return Tessera(RunArgs({"a=host:2"}, {"--timeout", "60s", "--stop-grace", "500ms"},
                           "if [ $TESSERA_RANK = 1 ]; then exit 3; fi; echo up; exec sleep 1000"),
                   {{"SLURM_PROCID", std::to_string(k)},
                    {"SLURM_NTASKS", "2"},
                    {"SLURM_LOCALID", std::to_string(k)},
                    {"SLURM_NODEID", "0"},
                    {"SLURM_TASKS_PER_NODE", "2"},
                    {"SLURM_JOB_NODELIST", "localhost"},
                    {"SLURM_JOB_ID", std::to_string(job)},
                    {"TESSERA_TOKEN", "one-step-one-host"}});
  };
  Tessera task0 = task(0);
  ASSERT_TRUE(task0.WaitFor("up", 1, 20s));
  Tessera task1 = task(1);
  const Outcome o1 = task1.Finish(30s);
  const Outcome o0 = task0.Finish(30s);
  EXPECT_EQ(o1.status, 3) << o1.err;
  EXPECT_EQ(o0.status, 3) << o0.err;
  EXPECT_TRUE(Contains(o0.err, "node 1: rank 1 (a) exited with status 3\n")) << o0.err;
  EXPECT_TRUE(Contains(o0.err, "rank 0 (a) was killed by signal 15 (SIGTERM) sent by tessera run")) << o0.err;
}

TEST(LauncherNodes, TokenFileMustBePrivate) {
  char path[] = "/tmp/tsr-token-XXXXXX";
  const int fd = ::mkstemp(path);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::write(fd, "s3cret\n", 7), 7);
  ::close(fd);
  ASSERT_EQ(::chmod(path, 0644), 0);
  auto open = ReadTokenFile(path);
  ASSERT_FALSE(open.ok());
  EXPECT_TRUE(Contains(open.status().message(), "has mode 0644")) << open.status().message();
  ASSERT_EQ(::chmod(path, 0600), 0);
  auto ok = ReadTokenFile(path);
  ASSERT_TRUE(ok.ok()) << ok.status().message();
  EXPECT_EQ(*ok, "s3cret");
  ::unlink(path);
}

}  // namespace
}  // namespace tessera::launch
