// tests/comm/framework_test: the framework C API on real rank processes started without the
// launcher and with no TESSERA_* variable: tsrGetUniqueId (here, or in rank 0), tsrCommInitRank, two
// communicators at once, tsrCommSplit (subsets, NOCOLOR, nested), groups of sends and receives in
// adversarial orders, alltoall(v) for every type, tsrCommAbort from another thread, and
// tsrCommGetAsyncError after a peer died. The ranks are framework_worker processes; each prints "OK rank
// R" or "FAIL rank R: why". Also: tsrGetVersion and `tessera --version` match CMake's project version.
#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <mutex>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "common/c_result.hpp"
#include "tessera/tessera.h"

extern char** environ;

namespace {

std::string BinDir() {
  const char* b = std::getenv("TESSERA_BIN");
  std::string bin = b ? b : "./tessera";
  return bin.substr(0, bin.rfind('/'));
}

int Count(const std::string& text, const std::string& pattern) {
  std::regex re(pattern);
  return static_cast<int>(std::distance(std::sregex_iterator(text.begin(), text.end(), re), std::sregex_iterator()));
}

struct Job {
  std::string out;
  std::vector<int> status;  // per rank: exit code, or 128 + signal
};

// Starts one framework_worker per rank of `layout` (island sizes) with every TESSERA_* variable removed
// (TESSERA_LOG kept), collects their output, and waits for all of them (killing them after 240 s).
Job RunRanks(const std::string& scenario, const std::vector<int>& layout, bool worker_makes_id,
             const std::vector<std::string>& extra_env = {}, std::vector<tsrUniqueId>* made = nullptr) {
  static int seq = 0;
  const std::string ids =
      testing::TempDir() + "/framework_ids_" + std::to_string(getpid()) + "_" + std::to_string(seq++);
  std::remove(ids.c_str());
  if (!worker_makes_id) {
    const size_t n = scenario == "basic" || scenario == "pairs" ? 2 : 1;
    std::vector<tsrUniqueId> v(n);
    if (made != nullptr && made->size() >= n)
      std::copy(made->begin(), made->begin() + n, v.begin());
    else
      for (auto& id : v) EXPECT_EQ(tsrGetUniqueId(&id), tsrSuccess) << tsrGetLastError(nullptr);
    std::ofstream(ids, std::ios::binary).write(reinterpret_cast<const char*>(v.data()), n * sizeof(tsrUniqueId));
  }
  std::string lay;
  int world = 0;
  for (int n : layout) {
    lay += (lay.empty() ? "" : ",") + std::to_string(n);
    world += n;
  }
  std::vector<std::string> env_s;
  for (char** e = environ; *e; ++e)
    if (std::strncmp(*e, "TESSERA_", 8) != 0 || std::strncmp(*e, "TESSERA_LOG=", 12) == 0) env_s.push_back(*e);
  for (const auto& e : extra_env) env_s.push_back(e);
  std::vector<char*> envp;
  for (auto& s : env_s) envp.push_back(s.data());
  envp.push_back(nullptr);
  const std::string worker = BinDir() + "/tests/comm/framework_worker";
  int fds[2];
  EXPECT_EQ(pipe(fds), 0);
  std::vector<pid_t> pids;
  for (int r = 0; r < world; ++r) {
    std::vector<std::string> args = {worker, scenario, "--ids", ids, "--rank", std::to_string(r), "--layout", lay};
    if (worker_makes_id) args.push_back("--make-id");
    pid_t pid = fork();
    if (pid == 0) {
      dup2(fds[1], 1);
      dup2(fds[1], 2);
      close(fds[0]);
      std::vector<char*> argv;
      for (auto& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      execve(worker.c_str(), argv.data(), envp.data());
      _exit(127);
    }
    pids.push_back(pid);
  }
  close(fds[1]);
  Job job;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(240);
  std::array<char, 4096> buf;
  for (;;) {
    pollfd p{fds[0], POLLIN, 0};
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      for (pid_t pid : pids) kill(pid, SIGKILL);
      job.out += "\n[test] ranks killed after 240 s\n";
      break;
    }
    if (poll(&p, 1, static_cast<int>(left.count())) <= 0) continue;
    const ssize_t n = read(fds[0], buf.data(), buf.size());
    if (n <= 0) break;
    job.out.append(buf.data(), static_cast<size_t>(n));
  }
  close(fds[0]);
  for (pid_t pid : pids) {
    int st = 0;
    waitpid(pid, &st, 0);
    job.status.push_back(WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st));
  }
  std::remove(ids.c_str());
  return job;
}

void ExpectAllOk(const Job& j, int world) {
  EXPECT_EQ(Count(j.out, "OK rank"), world) << j.out;
  EXPECT_EQ(Count(j.out, "FAIL"), 0) << j.out;
  for (size_t r = 0; r < j.status.size(); ++r) EXPECT_EQ(j.status[r], 0) << "rank " << r << "\n" << j.out;
}

TEST(FrameworkApi, InitRankWithoutEnvTwoCommunicatorsAtOnce) {
  ExpectAllOk(RunRanks("basic", {2, 1}, false), 3);
  ExpectAllOk(RunRanks("basic", {1, 2, 1}, false), 4);
}

// Under `tessera run` every id of the job is checked against the job's token. Two communicators of disjoint ranks made
// at the same moment (a DeviceMesh's subgroups) each have a rank 0, whose shared-memory inbox must not
// take the other's name (it did: "shm_open /tsr-...-0: File exists").
TEST(FrameworkApi, DisjointCommunicatorsOfOneJobTokenMadeAtOnce) {
  setenv("TESSERA_TOKEN", "one-job-token", 1);
  std::vector<tsrUniqueId> ids(2);
  for (auto& id : ids) ASSERT_EQ(tsrGetUniqueId(&id), tsrSuccess) << tsrGetLastError(nullptr);
  unsetenv("TESSERA_TOKEN");
  for (int round = 0; round < 3; ++round) {
    std::vector<tsrUniqueId> fresh(2);
    if (round > 0) {
      setenv("TESSERA_TOKEN", "one-job-token", 1);
      for (auto& id : fresh) ASSERT_EQ(tsrGetUniqueId(&id), tsrSuccess) << tsrGetLastError(nullptr);
      unsetenv("TESSERA_TOKEN");
    }
    ExpectAllOk(RunRanks("pairs", {2, 2}, false, {"TESSERA_TOKEN=one-job-token"}, round == 0 ? &ids : &fresh), 4);
  }
}

TEST(FrameworkApi, RankZeroMakesTheIdAndPassesItByFile) { ExpectAllOk(RunRanks("basic", {1, 1}, true), 2); }

TEST(FrameworkApi, SplitIntoSubsetsNoColorAndNested) {
  ExpectAllOk(RunRanks("split", {2, 1, 2}, false), 5);  // children span islands {0,1} and {0,2}
  ExpectAllOk(RunRanks("split", {3}, false), 3);
}

TEST(FrameworkApi, GroupSendRecvInAnyOrderCompletes) {
  ExpectAllOk(RunRanks("group", {2, 2}, false), 4);
  ExpectAllOk(RunRanks("group", {1, 2}, false), 3);
}

TEST(FrameworkApi, AllToAllAndAllToAllvEveryTypeExact) {
  ExpectAllOk(RunRanks("alltoall", {1, 2, 1}, false), 4);
  ExpectAllOk(RunRanks("alltoall", {2}, false), 2);
}

TEST(FrameworkApi, AbortFromAnotherThreadEndsAPendingRecv) {
  Job j = RunRanks("abort", {2, 1}, false);
  ExpectAllOk(j, 3);
  EXPECT_EQ(Count(j.out, "aborted \\(tsrCommAbort\\)"), 3) << j.out;  // named on every rank
}

TEST(FrameworkApi, AsyncErrorAfterAPeerDies) { ExpectAllOk(RunRanks("asyncerr", {1, 2}, false), 3); }

// Rank 0 reaches the dead rank over a TCP link on the same host: its process is watched too.
TEST(FrameworkApi, AsyncErrorAfterAPeerDiesOverATcpBridge) {
  ExpectAllOk(RunRanks("asyncerr", {1, 2}, false, {"TESSERA_BRIDGE=tcp", "TESSERA_TCP_STREAMS=1"}), 3);
}

int Threads() {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("Threads:", 0) == 0) return std::atoi(line.c_str() + 8);
  return 0;
}

// On a real job: 300 silent connections to the job's store (served by this
// process, which made the id) while the ranks start over TCP links. The job still succeeds and the
// strays hold no thread of the store (before: one thread each).
TEST(FrameworkApi, SilentStrayConnectionsNeitherBreakAJobNorHoldThreads) {
  std::vector<tsrUniqueId> ids(2);
  for (auto& id : ids) ASSERT_EQ(tsrGetUniqueId(&id), tsrSuccess) << tsrGetLastError(nullptr);
  const std::string text(ids[0].internal);  // "TSRU2 <token> <host:port>"
  const std::string addr = text.substr(text.rfind(' ') + 1);
  const std::string host = addr.substr(0, addr.rfind(':'));
  const int port = std::atoi(addr.c_str() + addr.rfind(':') + 1);
  const int before = Threads();
  std::vector<int> strays;
  for (int i = 0; i < 300; ++i) {
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(port));
    ASSERT_EQ(inet_pton(AF_INET, host.c_str(), &a.sin_addr), 1) << host;
    ASSERT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
    strays.push_back(fd);
  }
  Job j = RunRanks("basic", {1, 2}, false, {"TESSERA_BRIDGE=tcp", "TESSERA_TCP_STREAMS=2"}, &ids);
  EXPECT_LT(Threads() - before, 50) << "threads before " << before << ", after " << Threads();
  for (int fd : strays) close(fd);
  ExpectAllOk(j, 3);
}

// In a job (TESSERA_TOKEN set) the id carried the job token in plain text, and torch publishes the id in its
// env:// store, which any local process could read; a rank with a wrong TESSERA_TOKEN joined with the id's
// token. Now the id carries no token, its store checks the job token, and each rank presents its own, as a
// rank under `tessera run` does to the launcher's store. In a job on one host the id's store is on loopback.
TEST(FrameworkApi, AJobsIdCarriesNoTokenAndOnlyTheJobTokenJoins) {
  setenv("TESSERA_TOKEN", "job-token-42", 1);
  setenv("TESSERA_STORE", "127.0.0.1:1", 1);  // the launcher's store on loopback
  tsrUniqueId id;
  const tsrResult_t made = tsrGetUniqueId(&id);
  unsetenv("TESSERA_TOKEN");
  unsetenv("TESSERA_STORE");
  ASSERT_EQ(made, tsrSuccess) << tsrGetLastError(nullptr);
  const std::string bytes(id.internal, sizeof(id.internal));
  EXPECT_EQ(bytes.find("job-token-42"), std::string::npos) << id.internal;
  EXPECT_EQ(std::string(id.internal).rfind("TSRU2 - 127.0.0.1:", 0), 0u) << id.internal;
  tsrConfig_t cfg = TSR_CONFIG_INITIALIZER;
  cfg.timeout_ms = 3000;
  tsrComm_t c = nullptr;
  // No token at all: refused before connecting, saying what is missing.
  EXPECT_EQ(tsrCommInitRank(&c, 1, id, 0, &cfg), tsrInvalidArgument);
  EXPECT_NE(std::string(tsrGetLastError(nullptr)).find("has no TESSERA_TOKEN"), std::string::npos)
      << tsrGetLastError(nullptr);
  // A wrong token, from the environment or the config: the id's store refuses it, and the error says which
  // token differs from which, as the launcher's store says it of TESSERA_TOKEN (not the launcher's: the group's
  // store is the one tsrGetUniqueId started).
  setenv("TESSERA_TOKEN", "another-token", 1);
  EXPECT_EQ(tsrCommInitRank(&c, 1, id, 0, &cfg), tsrInvalidArgument);
  std::string error = tsrGetLastError(nullptr);
  EXPECT_NE(error.find("refused the job token: TESSERA_TOKEN differs from the job token of the process that made "
                       "the id"),
            std::string::npos)
      << error;
  EXPECT_EQ(error.find("launcher"), std::string::npos) << error;
  cfg.token = "another-token";
  EXPECT_EQ(tsrCommInitRank(&c, 1, id, 0, &cfg), tsrInvalidArgument);
  error = tsrGetLastError(nullptr);
  EXPECT_NE(error.find("refused the job token: tsrConfig_t.token differs from the job token of the process that "
                       "made the id"),
            std::string::npos)
      << error;
  cfg.token = nullptr;
  setenv("TESSERA_TOKEN", "job-token-42", 1);  // the job's token: a world of one host rank
  const tsrResult_t joined = tsrCommInitRank(&c, 1, id, 0, &cfg);
  unsetenv("TESSERA_TOKEN");
  ASSERT_EQ(joined, tsrSuccess) << tsrGetLastError(nullptr);
  float x = 1.5f;
  EXPECT_EQ(tsrAllReduce(&x, &x, 1, tsrFloat32, tsrSum, c, nullptr), tsrSuccess) << tsrGetLastError(c);
  EXPECT_EQ(x, 1.5f);
  EXPECT_EQ(tsrCommDestroy(c), tsrSuccess);
}

namespace {
// The local addresses of the sockets listening on `port`, from the kernel's tables (/proc/net/tcp, tcp6).
std::vector<std::string> ListeningOn(int port) {
  std::vector<std::string> found;
  for (const char* table : {"/proc/net/tcp", "/proc/net/tcp6"}) {
    std::ifstream in(table);
    std::string line;
    std::getline(in, line);  // the header
    while (std::getline(in, line)) {
      std::smatch m;  // "  1: 0100007F:AD67 00000000:0000 0A ...": local address:port, remote, state (0A: LISTEN)
      if (!std::regex_search(line, m, std::regex(R"(^\s*\d+: ([0-9A-F]+):([0-9A-F]+) \S+ 0A)")) ||
          std::stoi(m[2].str(), nullptr, 16) != port)
        continue;
      if (m[1].length() != 8) {
        found.push_back("ipv6:" + m[1].str());
        continue;
      }
      in_addr a{};
      a.s_addr = static_cast<uint32_t>(std::stoul(m[1].str(), nullptr, 16));  // the table holds it as stored
      found.push_back(inet_ntoa(a));
    }
  }
  return found;
}
}  // namespace

// Where an id's store listens (docs/launcher.md, "Per-group stores"): TESSERA_BRIDGE_ADDR when set (several
// nodes: the node's route to the job's store), else 127.0.0.1 where the launcher's store is on loopback (one host);
// read back from the kernel's table of listening sockets, not from the id alone.
TEST(FrameworkApi, AnIdsStoreListensOnTheBridgeAddressElseOnLoopbackUnderAOneHostLauncher) {
  for (const char* bridge : {"127.0.0.2", static_cast<const char*>(nullptr)}) {
    if (bridge != nullptr) setenv("TESSERA_BRIDGE_ADDR", bridge, 1);
    setenv("TESSERA_STORE", "127.0.0.1:1", 1);
    tsrUniqueId id;
    const tsrResult_t made = tsrGetUniqueId(&id);
    unsetenv("TESSERA_BRIDGE_ADDR");
    unsetenv("TESSERA_STORE");
    ASSERT_EQ(made, tsrSuccess) << tsrGetLastError(nullptr);
    const std::string text(id.internal);  // "TSRU2 <token> <host:port>"
    const std::string addr = text.substr(text.rfind(' ') + 1);
    const std::string want = bridge != nullptr ? bridge : "127.0.0.1";
    EXPECT_EQ(addr.substr(0, addr.rfind(':')), want) << text;
    EXPECT_EQ(ListeningOn(std::atoi(addr.c_str() + addr.rfind(':') + 1)), std::vector<std::string>{want}) << text;
  }
}

namespace {
// Waits for a forked child and expects it to have exited 0 (its exit code or signal in the message otherwise).
void ExpectChildExitedZero(pid_t child) {
  ASSERT_GE(child, 0);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
      << (WIFSIGNALED(status) ? "killed by signal " + std::to_string(WTERMSIG(status))
                              : "exit status " + std::to_string(WEXITSTATUS(status)));
}
}  // namespace

// A process that made an id (so runs its store's server) and then forks: the child's normal exit (exit(), whose
// handlers stop the stores this process started) must not touch the parent's stores, whose threads the child does
// not have. Joining one crashed the child with SIGSEGV once glibc had unmapped the parent's thread stacks it
// inherited (it keeps 40 MiB of them, trimmed when a thread of the child is joined): a forked child of a torch
// rank 0 that left through sys.exit.
TEST(FrameworkApi, AForkedChildOfAProcessWithAnIdsStoreExitsCleanly) {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  // The sanitizers' allocators are not fork-safe: a child's first allocation can wait on a lock a parent thread held
  // at the fork (seen: the child's thread creation, under ASan). glibc's malloc, which the plain build uses, is.
  GTEST_SKIP() << "fork() from a process with threads, under a sanitizer";
#endif
  tsrUniqueId id;
  ASSERT_EQ(tsrGetUniqueId(&id), tsrSuccess) << tsrGetLastError(nullptr);
  // Other threads alive at the fork, as a torch process has: glibc's child keeps at most 40 MiB of its parent's
  // thread stacks (default 8 MiB each) and unmaps the rest, the store's threads' among them.
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  std::vector<std::thread> others;
  for (int i = 0; i < 12; ++i)
    others.emplace_back([&] {
      std::unique_lock<std::mutex> l(mu);
      cv.wait(l, [&] { return done; });
    });
  const pid_t child = fork();
  if (child == 0) {
    // A thread of the child's own, joined (Python's exit makes some): glibc then trims the cache of stacks it
    // inherited, unmapping parent threads' stacks.
    std::thread([] {}).join();
    std::exit(0);  // runs the exit handlers, as a Python child's sys.exit does
  }
  {
    std::lock_guard<std::mutex> l(mu);
    done = true;
  }
  cv.notify_all();
  for (auto& t : others) t.join();
  ExpectChildExitedZero(child);
  // The parent's store still answers: it is the parent's to stop.
  const std::string text(id.internal);
  const std::string addr = text.substr(text.rfind(' ') + 1);
  EXPECT_EQ(ListeningOn(std::atoi(addr.c_str() + addr.rfind(':') + 1)).size(), 1u) << text;
}

// A communicator is not inherited across fork(): in the child every call on it is refused, naming both processes,
// before it touches anything of the parent's (its rings, its store connection, its threads), and tsrCommDestroy only
// forgets the handle. The parent's communicator carries on. Before the check the child's allreduce ran on the
// parent's communicator and returned tsrSuccess.
TEST(FrameworkApi, AForkedChildIsRefusedTheCommunicatorItInheritedAndTheParentCarriesOn) {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  GTEST_SKIP() << "fork() from a process with threads, under a sanitizer";
#endif
  tsrUniqueId id;
  ASSERT_EQ(tsrGetUniqueId(&id), tsrSuccess) << tsrGetLastError(nullptr);
  tsrConfig_t cfg = TSR_CONFIG_INITIALIZER;
  cfg.timeout_ms = 5000;
  tsrComm_t c = nullptr;
  ASSERT_EQ(tsrCommInitRank(&c, 1, id, 0, &cfg), tsrSuccess) << tsrGetLastError(nullptr);
  const pid_t child = fork();
  if (child == 0) {
    // Exit codes say which expectation failed (gtest's assertions do not reach the parent from here).
    float x = 2.0f;
    if (tsrAllReduce(&x, &x, 1, tsrFloat32, tsrSum, c, nullptr) != tsrInvalidArgument) _exit(10);
    const std::string error = tsrGetLastError(c);
    if (error.find("tsrAllReduce: this communicator was made by process " + std::to_string(getppid())) ==
            std::string::npos ||
        error.find("made by fork()") == std::string::npos)
      _exit(11);
    if (tsrBarrier(c) != tsrInvalidArgument) _exit(12);
    if (tsrCommAbort(c) != tsrInvalidArgument) _exit(13);
    tsrResult_t async = tsrSuccess;
    if (tsrCommGetAsyncError(c, &async) != tsrInvalidArgument) _exit(14);
    if (tsrCommDestroy(c) != tsrSuccess) _exit(15);
    _exit(0);
  }
  ExpectChildExitedZero(child);
  float y = 1.5f;
  EXPECT_EQ(tsrAllReduce(&y, &y, 1, tsrFloat32, tsrSum, c, nullptr), tsrSuccess) << tsrGetLastError(c);
  EXPECT_EQ(y, 1.5f);
  tsrResult_t async = tsrInternalError;
  EXPECT_EQ(tsrCommGetAsyncError(c, &async), tsrSuccess);
  EXPECT_EQ(async, tsrSuccess);
  EXPECT_EQ(tsrCommDestroy(c), tsrSuccess);
}

TEST(FrameworkApi, VersionIsCMakesProjectVersion) {
  int v = -1;
  ASSERT_EQ(tsrGetVersion(&v), tsrSuccess);
  const std::string s = std::to_string(v / 10000) + "." + std::to_string(v / 100 % 100) + "." + std::to_string(v % 100);
  EXPECT_EQ(s, TESSERA_CMAKE_VERSION);
  EXPECT_EQ(v, TESSERA_VERSION_CODE);
  const char* bin = std::getenv("TESSERA_BIN");
  ASSERT_NE(bin, nullptr);
  FILE* p = popen((std::string(bin) + " --version").c_str(), "r");
  ASSERT_NE(p, nullptr);
  char line[256] = {};
  ASSERT_NE(fgets(line, sizeof(line), p), nullptr);
  pclose(p);
  EXPECT_EQ(std::string(line), "tessera " + std::string(TESSERA_CMAKE_VERSION) + "\n");
}

TEST(FrameworkApi, BadIdsAndConfigsAreRefusedNamingTheValue) {
  tsrUniqueId junk;
  std::memset(&junk, 'x', sizeof(junk));
  tsrComm_t c = reinterpret_cast<tsrComm_t>(1);
  EXPECT_EQ(tsrCommInitRank(&c, 2, junk, 0, nullptr), tsrInvalidArgument);
  EXPECT_EQ(c, nullptr);
  EXPECT_NE(std::string(tsrGetLastError(nullptr)).find("unique id"), std::string::npos) << tsrGetLastError(nullptr);
  tsrUniqueId id;
  ASSERT_EQ(tsrGetUniqueId(&id), tsrSuccess);
  tsrConfig_t cfg = TSR_CONFIG_INITIALIZER;
  cfg.magic = 42;
  EXPECT_EQ(tsrCommInitRank(&c, 2, id, 0, &cfg), tsrInvalidArgument);
  EXPECT_NE(std::string(tsrGetLastError(nullptr)).find("0x2a"), std::string::npos) << tsrGetLastError(nullptr);
  EXPECT_EQ(tsrCommInitRank(&c, 2, id, 5, nullptr), tsrInvalidArgument);
  EXPECT_NE(std::string(tsrGetLastError(nullptr)).find("rank 5"), std::string::npos) << tsrGetLastError(nullptr);
  EXPECT_EQ(tsrGroupEnd(), tsrInvalidArgument);
  EXPECT_EQ(std::string(tsrGetErrorString(tsrNotFound)), "not found");
  EXPECT_EQ(static_cast<int>(tsrNotFound), 7);
  EXPECT_EQ(static_cast<int>(tsrCorrupt), 8);
  // One mapping for the comm and ckpt C APIs (comm's used to turn NotFound into InvalidArgument and
  // Corrupt into SystemError).
  EXPECT_EQ(tessera::ToResult(tessera::NotFound("x")), tsrNotFound);
  EXPECT_EQ(tessera::ToResult(tessera::Corrupt("x")), tsrCorrupt);
  EXPECT_EQ(tessera::ToResult(tessera::Timeout("x")), tsrTimeout);
  EXPECT_EQ(tessera::ToResult(tessera::Status::Ok()), tsrSuccess);
}

}  // namespace
