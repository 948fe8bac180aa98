// tests/hosts/hosts_test: jobs across hosts, with "hosts" made on this machine out of namespaces.
//
// scripts/netns-hosts.sh makes each host a network namespace with its own address (10.77.0.I+1) joined to
// the others by veth links, and runs its `tessera run --nnodes N --node-rank I --store 10.77.0.1:PORT` in
// new UTS, IPC and mount namespaces (hostname hI, a private /dev/shm), so shared memory cannot cross hosts
// and only TCP joins them. The cases check every collective, type and op (exact against an f64 reference,
// bit-identical on every rank) on 2 and 3 hosts with islands that span hosts, over the tcp row and over the ucx
// row; a host that disappears (its link taken down, or its processes killed; on the ucx row also stopped) makes
// every rank fail within TESSERA_TIMEOUT naming the host;
// and a node with another job token is refused by the store. They need root; otherwise (or when `ip netns`
// fails) they skip and say why.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "comm/transport/ucx.hpp"

namespace {

struct Proc {
  int status = -1;
  std::string out;
};

Proc Shell(const std::string& cmd) {
  Proc r;
  FILE* p = popen((cmd + " 2>&1").c_str(), "r");
  std::array<char, 4096> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) r.out.append(buf.data(), n);
  const int st = pclose(p);
  r.status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
  return r;
}

std::string Bin() { return std::getenv("TESSERA_BIN") ? std::getenv("TESSERA_BIN") : "tessera"; }
std::string Worker() { return Bin().substr(0, Bin().rfind('/')) + "/tests/comm/comm_worker"; }
std::string Script() {
  const char* src = std::getenv("TESSERA_SOURCE_DIR");
  return std::string(src != nullptr ? src : ".") + "/scripts/netns-hosts.sh";
}

std::string ReadFile(const std::string& path) {
  std::ifstream f(path);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

int Count(const std::string& text, const std::string& pattern) {
  std::regex re(pattern);
  return static_cast<int>(std::distance(std::sregex_iterator(text.begin(), text.end(), re), std::sregex_iterator()));
}

// The hosts of one test: made in the constructor, removed in the destructor (also when the test fails).
// Each host's launcher runs in the background; its output and exit status go to files.
class Hosts {
 public:
  explicit Hosts(int n) : n_(n) {
    static int seq = 0;
    tag_ = "t" + std::to_string(getpid()) + "x" + std::to_string(seq++);
    dir_ = "/tmp/tsr-hosts-" + tag_;
    Proc up = Shell("mkdir -p " + dir_ + " && " + Script() + " up " + tag_ + " " + std::to_string(n));
    ok_ = up.status == 0;
    why_ = up.out;
  }
  ~Hosts() {
    // Stop what is left of the job (a failed test), then remove the namespaces.
    for (int i = 0; i < n_; ++i) (void)!system(("ip netns pids " + Ns(i) + " 2>/dev/null | xargs -r kill -9").c_str());
    (void)!system((Script() + " down " + tag_).c_str());
    (void)!system(("rm -rf " + dir_).c_str());
  }
  bool ok() const { return ok_; }
  const std::string& why() const { return why_; }
  const std::string& tag() const { return tag_; }
  std::string Ns(int i) const { return "tsr-" + tag_ + "-h" + std::to_string(i); }

  // Starts `tessera run --nnodes n --node-rank i --store 10.77.0.1:29400 ARGS` as node i in the background
  // (`node_flags` false: `tessera run ARGS`, the node layout from the environment, e.g. Slurm's).
  void Start(int i, const std::string& env, const std::string& args, bool node_flags = true) {
    const std::string out = dir_ + "/out" + std::to_string(i), rc = dir_ + "/rc" + std::to_string(i);
    const std::string flags = node_flags ? " --nnodes " + std::to_string(n_) + " --node-rank " + std::to_string(i) +
                                               " --store 10.77.0.1:29400 "
                                         : " ";
    const std::string cmd =
        "env " + env + " " + Script() + " exec " + tag_ + " " + std::to_string(i) + " " + Bin() + " run" + flags + args;
    (void)!system(("(" + cmd + " >" + out + " 2>&1; echo $? >" + rc + ") </dev/null &").c_str());
  }
  void StartAll(const std::string& env, const std::string& args) {
    for (int i = 0; i < n_; ++i) Start(i, env, args);
  }
  std::string Out(int i) const { return ReadFile(dir_ + "/out" + std::to_string(i)); }
  std::string AllOut() const {
    std::string s;
    for (int i = 0; i < n_; ++i) s += "---- host h" + std::to_string(i) + " ----\n" + Out(i);
    return s;
  }
  // Waits until every launcher has exited (at most `limit`); their exit statuses, -1 for one still running.
  // `except`: a host not waited for (one that was stopped).
  std::vector<int> Wait(std::chrono::seconds limit, int except = -1) const {
    const auto end = std::chrono::steady_clock::now() + limit;
    std::vector<int> rc(n_, -1);
    for (;;) {
      bool all = true;
      for (int i = 0; i < n_; ++i) {
        const std::string t = ReadFile(dir_ + "/rc" + std::to_string(i));
        if (t.empty())
          all = all && i == except;
        else
          rc[i] = std::atoi(t.c_str());
      }
      if (all || std::chrono::steady_clock::now() > end) return rc;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  }
  // Waits until `pattern` occurs `count` times in the hosts' output together (at most `limit`).
  bool WaitFor(const std::string& pattern, int count, std::chrono::seconds limit) const {
    const auto end = std::chrono::steady_clock::now() + limit;
    while (std::chrono::steady_clock::now() < end) {
      if (Count(AllOut(), pattern) >= count) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    return false;
  }

 private:
  int n_;
  std::string tag_, dir_, why_;
  bool ok_ = false;
};

#define SKIP_WITHOUT_NAMESPACES()                         \
  do {                                                    \
    static const Proc check = Shell(Script() + " check"); \
    if (check.status != 0) GTEST_SKIP() << check.out;     \
  } while (0)

const std::string kToken = "TESSERA_TOKEN=0123456789abcdef0123456789abcdef";

// Every rank's "joined — ..." line (TESSERA_LOG=info) says which transports it uses.
std::string Joined(const std::string& out, int rank) {
  std::smatch m;
  const std::regex re("rank " + std::to_string(rank) + ": joined — ([^\n]*)");
  return std::regex_search(out, m, re) ? m[1].str() : "";
}

TEST(Hosts, EveryCollectiveIsExactAndBitIdenticalOnTwoHosts) {
  SKIP_WITHOUT_NAMESPACES();
  Hosts hosts(2);
  ASSERT_TRUE(hosts.ok()) << hosts.why();
  // 5 ranks: h0 runs ranks 0-1 (ascend), h1 ranks 2 (ascend) and 3-4 (nvidia): ascend spans the hosts.
  hosts.StartAll(kToken + " TESSERA_LOG=info TESSERA_TIMEOUT=60s",
                 "--island ascend=host:3 --island nvidia=host:2 -- " + Worker() + " check");
  const auto rc = hosts.Wait(std::chrono::seconds(400));
  const std::string out = hosts.AllOut();
  EXPECT_EQ(rc, (std::vector<int>{0, 0})) << out;
  EXPECT_EQ(Count(out, "OK rank \\d: "), 5) << out;  // each also checked bit-identity across all 5 ranks
  EXPECT_EQ(Count(hosts.Out(0), "\\[rank [01] ascend\\] OK"), 2) << out;
  EXPECT_EQ(Count(hosts.Out(1), "\\[rank [234] (ascend|nvidia)\\] OK"), 3) << out;
  // Rank 0's island peers: rank 1 on its host (shm), rank 2 on the other (tcp); its bridge peers are remote.
  EXPECT_NE(Joined(out, 0).find("island library: host (shm+tcp); bridge: tcp"), std::string::npos) << out;
  // Rank 2: its island peers are on h0 (tcp); its bridge peers 3-4 share its host (shm).
  EXPECT_NE(Joined(out, 2).find("island library: host (tcp); bridge: shm"), std::string::npos) << out;
}

TEST(Hosts, EveryCollectiveIsExactAndBitIdenticalOnThreeHosts) {
  SKIP_WITHOUT_NAMESPACES();
  Hosts hosts(3);
  ASSERT_TRUE(hosts.ok()) << hosts.why();
  // 9 ranks in 3 blocks: h0 ascend 0-2; h1 ascend 3, nvidia 4-5; h2 nvidia 6, moore 7-8.
  hosts.StartAll(kToken + " TESSERA_LOG=info TESSERA_TIMEOUT=60s",
                 "--island ascend=host:4 --island nvidia=host:3 --island moore=host:2 -- " + Worker() +
                     " check --sizes 0,1,7,97,1000,4099");
  const auto rc = hosts.Wait(std::chrono::seconds(500));
  const std::string out = hosts.AllOut();
  EXPECT_EQ(rc, (std::vector<int>{0, 0, 0})) << out;
  EXPECT_EQ(Count(out, "OK rank \\d: "), 9) << out;
  EXPECT_EQ(Count(hosts.Out(2), "\\[rank [678] (nvidia|moore)\\] OK"), 3) << out;
  EXPECT_NE(Joined(out, 3).find("island library: host (tcp); bridge: shm+tcp"), std::string::npos) << out;
  EXPECT_NE(Joined(out, 4).find("island library: host (shm+tcp)"), std::string::npos) << out;
}

// How a host disappears: its link taken down, its processes killed, or stopped (alive, silent).
enum class Gone { kCut, kKilled, kStopped };

// The ucx row between hosts, shm within a host; UCX chooses its transport (TCP between these hosts: they have no
// RDMA NIC) on the device TESSERA_UCX_DEVICES gives each rank: every host's eth0.
const std::string kUcx = "TESSERA_TRANSPORTS=shm,ucx TESSERA_UCX_DEVICES=eth0";

// Three hosts run allreduces until one disappears; every rank must fail within TESSERA_TIMEOUT (plus the
// time its failing call had already run, bounded by the same), and the survivors' messages name it.
void DeadHost(bool cut_link, int victim = 2, const std::string& env = "", Gone how = Gone::kKilled) {
  if (cut_link) how = Gone::kCut;
  Hosts hosts(3);
  ASSERT_TRUE(hosts.ok()) << hosts.why();
  constexpr int kTimeout = 5;
  // h0: ascend 0-1; h1: ascend 2, nvidia 3; h2: nvidia 4-5.
  hosts.StartAll(kToken + " TESSERA_TIMEOUT=" + std::to_string(kTimeout) + "s " + env,
                 "--island ascend=host:3 --island nvidia=host:3 -- " + Worker() + " until-failure 120");
  ASSERT_TRUE(hosts.WaitFor("RUNNING rank", 6, std::chrono::seconds(60))) << hosts.AllOut();
  if (how == Gone::kCut)
    ASSERT_EQ(Shell(Script() + " cut " + hosts.tag() + " " + std::to_string(victim)).status, 0);
  else
    ASSERT_EQ(
        system(("ip netns pids " + hosts.Ns(victim) + " | xargs -r kill -" + (how == Gone::kStopped ? "STOP" : "9"))
                   .c_str()),
        0);
  const auto t0 = std::chrono::steady_clock::now();
  // A stopped host never exits: the others are waited for, then it is killed.
  std::vector<int> rc = hosts.Wait(std::chrono::seconds(4 * kTimeout + 20), how == Gone::kStopped ? victim : -1);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (how == Gone::kStopped) {
    (void)!system(("ip netns pids " + hosts.Ns(victim) + " | xargs -r kill -9").c_str());
    rc = hosts.Wait(std::chrono::seconds(10));
  }
  const std::string out = hosts.AllOut();
  for (int i = 0; i < 3; ++i) EXPECT_NE(rc[i], 0) << "host h" << i << " still ran or succeeded\n" << out;
  // The survivors' ranks fail naming the victim; how long each failing call ran is bounded by the timeout.
  const std::string gone =
      "on host h" + std::to_string(victim) + " \\(10\\.77\\.0\\." + std::to_string(victim + 1) + "\\)";
  for (int r = 0; r < 6; ++r) {
    const int host = r / 2;
    if (host == victim) continue;
    std::smatch m;
    const std::string text = hosts.Out(host);
    const std::regex re("ERROR rank " + std::to_string(r) + " after ([0-9.]+)s: [^\n]*" + gone);
    ASSERT_TRUE(std::regex_search(text, m, re)) << "rank " << r << "\n" << out;
    EXPECT_LE(std::stod(m[1].str()), kTimeout + 3) << m[0] << "\n" << out;
  }
  if (how == Gone::kCut) {
    // Cut off, the victim's own ranks fail too: one names a host it lost (the other may learn it from that
    // one's exit).
    const std::string text = hosts.Out(victim);
    EXPECT_EQ(Count(text, "ERROR rank \\d after [0-9.]+s: "), 2) << out;
    EXPECT_GE(Count(text, "ERROR rank \\d after [0-9.]+s: [^\n]*on host h[0-9] "), 1) << out;
  }
  std::printf("%s", out.c_str());  // the messages, for the log
  // Every launcher is done within two timeouts (the failure, then the grace) and the kill's 2 s.
  EXPECT_LT(secs, 2 * kTimeout + 2 + 10) << out;
}

TEST(Hosts, AHostCutOffMakesEveryRankFailNamingIt) {
  SKIP_WITHOUT_NAMESPACES();
  DeadHost(true);
}

TEST(Hosts, TheStoresHostCutOffMakesEveryRankFailNamingIt) {
  SKIP_WITHOUT_NAMESPACES();
  DeadHost(true, 0);  // node 0: the store goes with it
}

TEST(Hosts, AHostWhoseProcessesAreKilledMakesEveryRankFailNamingIt) {
  SKIP_WITHOUT_NAMESPACES();
  DeadHost(false);
}

#if TESSERA_HAVE_UCX_HEADERS
// Skipped, saying why, where UCX is not installed.
#define SKIP_WITHOUT_UCX()                                                          \
  do {                                                                              \
    const tessera::Status v = tessera::comm::MakeUcxTransport()->Viable();          \
    if (!v.ok()) GTEST_SKIP() << "the ucx row is not viable here: " << v.message(); \
  } while (0)

TEST(Hosts, EveryCollectiveIsExactAndBitIdenticalOverUcxOnTwoHosts) {
  SKIP_WITHOUT_NAMESPACES();
  SKIP_WITHOUT_UCX();
  Hosts hosts(2);
  ASSERT_TRUE(hosts.ok()) << hosts.why();
  // As the two-host case above, with the hosts joined by the ucx row.
  hosts.StartAll(kToken + " TESSERA_LOG=info TESSERA_TIMEOUT=60s " + kUcx,
                 "--island ascend=host:3 --island nvidia=host:2 -- " + Worker() + " check --sizes 0,1,7,97,1000,70001");
  const auto rc = hosts.Wait(std::chrono::seconds(400));
  const std::string out = hosts.AllOut();
  EXPECT_EQ(rc, (std::vector<int>{0, 0})) << out;
  EXPECT_EQ(Count(out, "OK rank \\d: "), 5) << out;
  EXPECT_NE(Joined(out, 0).find("island library: host (shm+ucx); bridge: ucx"), std::string::npos) << out;
  EXPECT_NE(Joined(out, 2).find("island library: host (ucx); bridge: shm"), std::string::npos) << out;
}

TEST(Hosts, AHostCutOffFromTheUcxRowMakesEveryRankFailNamingIt) {
  SKIP_WITHOUT_NAMESPACES();
  SKIP_WITHOUT_UCX();
  DeadHost(true, 2, kUcx);
}

TEST(Hosts, AHostKilledOnTheUcxRowMakesEveryRankFailNamingIt) {
  SKIP_WITHOUT_NAMESPACES();
  SKIP_WITHOUT_UCX();
  DeadHost(false, 2, kUcx);
}

TEST(Hosts, AHostStoppedOnTheUcxRowMakesEveryRankFailNamingIt) {
  SKIP_WITHOUT_NAMESPACES();
  SKIP_WITHOUT_UCX();
  DeadHost(false, 2, kUcx, Gone::kStopped);
}

#endif

TEST(Hosts, TheStoreRefusesANodeWithAnotherToken) {
  SKIP_WITHOUT_NAMESPACES();
  Hosts hosts(2);
  ASSERT_TRUE(hosts.ok()) << hosts.why();
  const std::string args = "--island ascend=host:1 --island nvidia=host:1 -- " + Worker() + " check";
  hosts.Start(0, kToken + " TESSERA_TIMEOUT=4s", args);
  hosts.Start(1, "TESSERA_TOKEN=ffffffffffffffffffffffffffffffff TESSERA_TIMEOUT=4s", args);
  const auto rc = hosts.Wait(std::chrono::seconds(40));
  const std::string out = hosts.AllOut();
  EXPECT_NE(rc[0], 0) << out;
  EXPECT_NE(rc[1], 0) << out;
  EXPECT_NE(hosts.Out(1).find("INITFAIL"), std::string::npos) << out;
  EXPECT_NE(hosts.Out(1).find("store at 10.77.0.1:29400 refused the job token"), std::string::npos) << out;
  // Rank 0 waits for rank 1, which never joins, and says so within its timeout.
  EXPECT_NE(hosts.Out(0).find("waiting for rank 1 to join"), std::string::npos) << out;
}

// The bridge across hosts refuses connections without the job token: while ranks 1-2 (h1) wait for a late
// rank 0 (h0), a stray on h0 connects to each of their bridge listeners with another token, and another
// with no hello at all; the job still completes (the strays took no peer's place) and h1 logs each refusal.
TEST(Hosts, TheBridgeRefusesStraysFromAnotherHost) {
  SKIP_WITHOUT_NAMESPACES();
  Hosts hosts(2);
  ASSERT_TRUE(hosts.ok()) << hosts.why();
  // 3 ranks: h0 runs rank 0 (3 s late), h1 ranks 1-2.
  const std::string islands = "--island ascend=host:1 --island nvidia=host:2 -- ";
  hosts.Start(0, kToken + " TESSERA_TIMEOUT=60s", islands + "sh -c 'sleep 3; exec " + Worker() + " check --sizes 7'");
  hosts.Start(1, kToken + " TESSERA_TIMEOUT=60s", islands + Worker() + " check --sizes 7");
  // The listeners of ranks 1-2: every TCP port h1 listens on (nothing else runs there).
  std::vector<std::string> ports;
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (ports.size() < 2 && std::chrono::steady_clock::now() < end) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    Proc ss = Shell("ip netns exec " + hosts.Ns(1) + " ss -Hltn | awk '{print $4}' | sed 's/.*://'");
    ports.clear();
    std::istringstream in(ss.out);
    for (std::string p; std::getline(in, p);)
      if (!p.empty()) ports.push_back(p);
  }
  ASSERT_EQ(ports.size(), 2u) << hosts.AllOut();
  for (const auto& port : ports) {
    // A Tessera hello (magic "TSRB", rank 0, stream 0) with another job's token, then a silent connection.
    const std::string py =
        "import socket,struct,time\n"
        "a=socket.create_connection(('10.77.0.2'," +
        port +
        "))\n"
        "a.sendall(struct.pack('<Iiii',0x54535242,0,0,32)+b'f'*32)\n"
        "b=socket.create_connection(('10.77.0.2'," +
        port +
        "))\n"
        "time.sleep(8)\n";
    (void)!system(("ip netns exec " + hosts.Ns(0) + " python3 -c \"" + py + "\" >/dev/null 2>&1 &").c_str());
  }
  const auto rc = hosts.Wait(std::chrono::seconds(120));
  const std::string out = hosts.AllOut();
  EXPECT_EQ(rc, (std::vector<int>{0, 0})) << out;
  EXPECT_EQ(Count(out, "OK rank \\d: "), 3) << out;
  EXPECT_EQ(Count(hosts.Out(1), "bridge: dropped a connection from 10\\.77\\.0\\.1:\\d+: wrong job token"), 2) << out;
}

// A Slurm step of 2 tasks, one per host (as `srun --ntasks-per-node=1` makes): the launchers get only Slurm's
// variables, no node flags, and find node 0's store on the node list's first host (h0, resolved there).
TEST(Hosts, ASlurmStepFormsTheJobWithoutFlags) {
  SKIP_WITHOUT_NAMESPACES();
  Hosts hosts(2);
  ASSERT_TRUE(hosts.ok()) << hosts.why();
  for (int i = 0; i < 2; ++i)
    hosts.Start(i,
                kToken + " TESSERA_TIMEOUT=60s SLURM_JOB_ID=4242 SLURM_NTASKS=2 SLURM_NNODES=2 SLURM_PROCID=" +
                    std::to_string(i) + " SLURM_NODEID=" + std::to_string(i) +
                    " SLURM_LOCALID=0 SLURM_TASKS_PER_NODE='1(x2)' SLURM_JOB_NODELIST='h[0-1]'",
                "--island ascend=host:2 --island nvidia=host:2 -- " + Worker() + " check --sizes 0,7,4099", false);
  const auto rc = hosts.Wait(std::chrono::seconds(300));
  const std::string out = hosts.AllOut();
  EXPECT_EQ(rc, (std::vector<int>{0, 0})) << out;
  EXPECT_EQ(Count(hosts.Out(0), "\\[rank [01] ascend\\] OK rank"), 2) << out;
  EXPECT_EQ(Count(hosts.Out(1), "\\[rank [23] nvidia\\] OK rank"), 2) << out;
}

TEST(Hosts, AMultiNodeJobNeedsATokenThatIsNotOnTheCommandLine) {
  // No namespaces needed: the launcher refuses before starting anything.
  Proc r = Shell("env -u TESSERA_TOKEN " + Bin() +
                 " run --nnodes 2 --node-rank 1 --store 127.0.0.1:1 --island a=host:2 -- true");
  EXPECT_EQ(r.status, 2) << r.out;
  EXPECT_NE(r.out.find("set TESSERA_TOKEN"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("--token-file"), std::string::npos) << r.out;
}

}  // namespace
