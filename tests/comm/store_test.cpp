// Tests of comm/store: the rendezvous key-value store, over real loopback TCP, across threads and across
// forked processes; timeouts, wrong tokens, unreachable addresses, vanishing clients and server shutdown.
#include "comm/store/store.hpp"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "common/log.hpp"
#include "raw_socket.hpp"

namespace tessera::comm {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

constexpr const char* kToken = "test-token-0123456789abcdef";

std::string Addr(const StoreServer& s) { return "127.0.0.1:" + std::to_string(s.port()); }

std::unique_ptr<StoreServer> StartServer() {
  auto s = StoreServer::Start("127.0.0.1", 0, kToken);
  EXPECT_TRUE(s.ok()) << s.status().ToString();
  return std::move(s).value();
}

std::unique_ptr<StoreClient> ConnectTo(const StoreServer& s) {
  auto c = StoreClient::Connect(Addr(s), kToken, 5s);
  EXPECT_TRUE(c.ok()) << c.status().ToString();
  return std::move(c).value();
}

// A loopback port that nothing listens on (bound once, then released).
int FreePort() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  socklen_t len = sizeof(a);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  ::close(fd);
  return ntohs(a.sin_port);
}

double Seconds(Clock::time_point since) { return std::chrono::duration<double>(Clock::now() - since).count(); }

bool Contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

TEST(Store, SetGetAddRoundTrip) {
  auto server = StartServer();
  auto c = ConnectTo(*server);
  ASSERT_TRUE(c->Set("a", "1").ok());
  EXPECT_EQ(*c->Get("a", 1s), "1");
  ASSERT_TRUE(c->Set("a", "overwritten").ok());
  EXPECT_EQ(*c->Get("a", 1s), "overwritten");
  const std::string binary("x\0y\xff\n", 5);
  ASSERT_TRUE(c->Set("bin", binary).ok());
  EXPECT_EQ(*c->Get("bin", 1s), binary);
  ASSERT_TRUE(c->Set("empty", "").ok());
  EXPECT_EQ(*c->Get("empty", 1s), "");
  const std::string big(1 << 20, 'z');
  ASSERT_TRUE(c->Set("big", big).ok());
  EXPECT_EQ(*c->Get("big", 1s), big);
  EXPECT_EQ(*c->Add("n", 5), 5);
  EXPECT_EQ(*c->Add("n", -7), -2);
  EXPECT_EQ(*c->Get("n", 1s), "-2");  // counters are decimal strings
  // A huge timeout is "no deadline", not an overflow.
  EXPECT_EQ(*c->Get("a", milliseconds::max()), "overwritten");
  // A second client sees the same data.
  auto c2 = ConnectTo(*server);
  EXPECT_EQ(*c2->Get("n", 1s), "-2");
}

TEST(Store, AddOnTextNamesTheKey) {
  auto server = StartServer();
  auto c = ConnectTo(*server);
  ASSERT_TRUE(c->Set("word", "hello").ok());
  auto r = c->Add("word", 1);
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(Contains(r.status().message(), "'word'")) << r.status().ToString();
  EXPECT_TRUE(Contains(r.status().message(), "'hello'")) << r.status().ToString();
  EXPECT_EQ(*c->Add("other", 1), 1);  // the connection is still usable
}

TEST(Store, GetWaitsForALaterSet) {
  auto server = StartServer();
  auto reader = ConnectTo(*server);
  auto writer = ConnectTo(*server);
  std::thread t([&] {
    std::this_thread::sleep_for(100ms);
    EXPECT_TRUE(writer->Set("late", "value").ok());
  });
  auto v = reader->Get("late", 10s);
  t.join();
  ASSERT_TRUE(v.ok()) << v.status().ToString();
  EXPECT_EQ(*v, "value");
}

TEST(Store, AddIsAtomicAcrossThreadsAndClients) {
  auto server = StartServer();
  constexpr int kThreads = 8, kAdds = 200;
  auto shared = ConnectTo(*server);  // one client used from several threads
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::unique_ptr<StoreClient> own;
      StoreClient* c = shared.get();
      if (t % 2 == 0) {
        own = ConnectTo(*server);
        c = own.get();
      }
      for (int i = 0; i < kAdds; ++i) EXPECT_TRUE(c->Add("counter", 1).ok());
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(*shared->Add("counter", 0), kThreads * kAdds);
}

TEST(Store, WaitAndBarrierAcrossThreads) {
  auto server = StartServer();
  constexpr int kWorld = 6;
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (int r = 0; r < kWorld; ++r) {
    threads.emplace_back([&, r] {
      auto c = ConnectTo(*server);
      std::vector<std::string> keys;
      for (int p = 0; p < kWorld; ++p) keys.push_back("addr/" + std::to_string(p));
      if (!c->Set(keys[r], "rank" + std::to_string(r)).ok()) ++failures;
      if (!c->Wait(keys, 10s).ok()) ++failures;
      for (int p = 0; p < kWorld; ++p)
        if (*c->Get(keys[p], 1s) != "rank" + std::to_string(p)) ++failures;
      for (int round = 0; round < 3; ++round) {
        auto s = c->Barrier("round" + std::to_string(round), kWorld, 10s);
        if (!s.ok()) {
          ADD_FAILURE() << s.ToString();
          ++failures;
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(failures.load(), 0);
}

TEST(Store, GetTimeoutNamesKeyAndAddress) {
  auto server = StartServer();
  auto c = ConnectTo(*server);
  const auto t0 = Clock::now();
  auto r = c->Get("never/set", 300ms);
  const double waited = Seconds(t0);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kTimeout);
  EXPECT_TRUE(Contains(r.status().message(), "'never/set'")) << r.status().message();
  EXPECT_TRUE(Contains(r.status().message(), Addr(*server))) << r.status().message();
  EXPECT_TRUE(Contains(r.status().message(), "300ms")) << r.status().message();
  EXPECT_GE(waited, 0.29);
  EXPECT_LT(waited, 5.0);
  // A timeout is an answer, not a broken connection.
  ASSERT_TRUE(c->Set("k", "v").ok());
  EXPECT_EQ(*c->Get("k", 1s), "v");
}

TEST(Store, WaitTimeoutNamesOnlyTheMissingKeys) {
  auto server = StartServer();
  auto c = ConnectTo(*server);
  ASSERT_TRUE(c->Set("here", "1").ok());
  const auto t0 = Clock::now();
  Status s = c->Wait({"here", "gone1", "gone2"}, 200ms);
  EXPECT_LT(Seconds(t0), 5.0);
  ASSERT_EQ(s.code(), Code::kTimeout) << s.ToString();
  EXPECT_TRUE(Contains(s.message(), "'gone1', 'gone2'")) << s.message();
  EXPECT_FALSE(Contains(s.message(), "'here'")) << s.message();
  EXPECT_TRUE(Contains(s.message(), "2 of 3 keys")) << s.message();
  EXPECT_TRUE(c->Wait({"here"}, 200ms).ok());
  EXPECT_TRUE(c->Wait({}, 200ms).ok());
}

TEST(Store, BarrierTimeoutSaysHowManyArrived) {
  auto server = StartServer();
  auto a = ConnectTo(*server);
  auto b = ConnectTo(*server);
  std::thread t([&] { EXPECT_EQ(b->Barrier("b", 3, 300ms).code(), Code::kTimeout); });
  Status s = a->Barrier("b", 3, 300ms);
  t.join();
  ASSERT_EQ(s.code(), Code::kTimeout) << s.ToString();
  EXPECT_TRUE(Contains(s.message(), "barrier 'b'")) << s.message();
  EXPECT_TRUE(Contains(s.message(), "2 of 3")) << s.message();
  // A caller with another idea of the world size is told so.
  Status m = a->Barrier("b", 4, 300ms);
  EXPECT_EQ(m.code(), Code::kInvalidArgument) << m.ToString();
  EXPECT_TRUE(Contains(m.message(), "world size 4")) << m.message();
  EXPECT_EQ(a->Barrier("x", 0, 1s).code(), Code::kInvalidArgument);
  EXPECT_TRUE(a->Barrier("solo", 1, 1s).ok());
}

TEST(Store, WrongTokenIsRefusedClearly) {
  auto server = StartServer();
  auto r = StoreClient::Connect(Addr(*server), "not-the-token", 2s);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kInvalidArgument);
  EXPECT_EQ(r.status().message(),
            "store at " + Addr(*server) + " refused the job token: TESSERA_TOKEN differs from the launcher's");
  EXPECT_FALSE(StoreClient::Connect(Addr(*server), "", 2s).ok());
  // The server still serves the right token.
  auto c = ConnectTo(*server);
  EXPECT_TRUE(c->Set("k", "v").ok());
}

// A rank turned away for its token never arrives: those waiting for it time out, and their message says that the
// store refused a connection with another token, and from where.
TEST(Store, AWaitThatTimesOutNamesTheConnectionsRefusedForTheirToken) {
  auto server = StartServer();
  auto c = ConnectTo(*server);
  auto before = c->Get("rank/1", 100ms);
  ASSERT_EQ(before.status().code(), Code::kTimeout);
  EXPECT_FALSE(Contains(before.status().message(), "refused")) << before.status().message();
  ASSERT_FALSE(StoreClient::Connect(Addr(*server), "not-the-token", 2s).ok());
  ASSERT_FALSE(StoreClient::Connect(Addr(*server), "another-wrong-token", 2s).ok());
  const std::string note = "the store refused 2 connections with another job token (the last from 127.0.0.1:";
  auto got = c->Get("rank/1", 100ms);
  ASSERT_EQ(got.status().code(), Code::kTimeout);
  EXPECT_TRUE(Contains(got.status().message(), "waiting for key 'rank/1'")) << got.status().message();
  EXPECT_TRUE(Contains(got.status().message(), note)) << got.status().message();
  EXPECT_TRUE(Contains(got.status().message(), "a rank started with a different TESSERA_TOKEN cannot join"))
      << got.status().message();
  Status w = c->Wait({"rank/0", "rank/1"}, 100ms);
  ASSERT_EQ(w.code(), Code::kTimeout);
  EXPECT_TRUE(Contains(w.message(), "missing 'rank/0', 'rank/1'; " + note)) << w.message();
  Status b = c->Barrier("init", 2, 100ms);
  ASSERT_EQ(b.code(), Code::kTimeout);
  EXPECT_TRUE(Contains(b.message(), "1 of 2 callers arrived; " + note)) << b.message();
}

TEST(Store, UnreachableAddressIsNamed) {
  const int port = FreePort();
  const std::string addr = "127.0.0.1:" + std::to_string(port);
  const auto t0 = Clock::now();
  auto r = StoreClient::Connect(addr, kToken, 300ms);
  ASSERT_FALSE(r.ok());
  EXPECT_GE(Seconds(t0), 0.29);  // it kept retrying
  EXPECT_LT(Seconds(t0), 5.0);
  EXPECT_EQ(r.status().code(), Code::kTimeout);
  EXPECT_EQ(r.status().message(),
            "cannot reach the store at TESSERA_STORE='" + addr + "' within 300ms: Connection refused");
}

TEST(Store, MalformedAddressIsNamed) {
  for (const char* bad : {"localhost", "127.0.0.1:", ":80", "127.0.0.1:99999", "127.0.0.1:http"}) {
    auto r = StoreClient::Connect(bad, kToken, 100ms);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.status().code(), Code::kInvalidArgument) << bad;
    EXPECT_TRUE(Contains(r.status().message(), std::string("TESSERA_STORE='") + bad + "'")) << r.status().message();
  }
  EXPECT_FALSE(StoreServer::Start("127.0.0.1", 0, "").ok());
  EXPECT_FALSE(StoreServer::Start("127.0.0.1", 70000, kToken).ok());
}

TEST(Store, ConnectRetriesUntilTheServerStarts) {
  const int port = FreePort();
  Result<std::unique_ptr<StoreClient>> client = InternalError("not connected");
  std::thread t([&] { client = StoreClient::Connect("127.0.0.1:" + std::to_string(port), kToken, 10s); });
  std::this_thread::sleep_for(300ms);
  auto server = StoreServer::Start("127.0.0.1", port, kToken);
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  t.join();
  ASSERT_TRUE(client.ok()) << client.status().ToString();
  EXPECT_TRUE(client.value()->Set("k", "v").ok());
}

TEST(Store, ServerDestructionWakesBlockedClients) {
  auto server = StartServer();
  const std::string addr = Addr(*server);
  std::vector<std::unique_ptr<StoreClient>> clients;
  for (int i = 0; i < 4; ++i) clients.push_back(ConnectTo(*server));
  auto idle = ConnectTo(*server);  // connected, no request in flight
  std::vector<Status> results(clients.size());
  std::vector<std::thread> threads;
  for (size_t i = 0; i < clients.size(); ++i) {
    threads.emplace_back([&, i] {
      if (i % 2 == 0)
        results[i] = clients[i]->Get("never", 60s).status();
      else
        results[i] = clients[i]->Barrier("never", 100, 60s);
    });
  }
  std::this_thread::sleep_for(200ms);
  const auto t0 = Clock::now();
  server.reset();
  for (auto& t : threads) t.join();
  EXPECT_LT(Seconds(t0), 10.0);  // nobody waited for the 60 s timeout
  for (const auto& s : results) {
    EXPECT_EQ(s.code(), Code::kRemoteError) << s.ToString();
    EXPECT_TRUE(Contains(s.message(), addr)) << s.message();
  }
  Status s = idle->Set("k", "v");
  EXPECT_EQ(s.code(), Code::kRemoteError) << s.ToString();
  // Once broken, a client stays broken and says why.
  Status again = idle->Set("k", "v");
  EXPECT_EQ(again.code(), Code::kRemoteError);
  EXPECT_TRUE(Contains(again.message(), "earlier error")) << again.message();
}

TEST(Store, SurvivesClientsThatVanishOrSpeakGarbage) {
  auto server = StartServer();
  // A client that disappears in the middle of a blocking Get.
  {
    auto c = ConnectTo(*server);
    std::thread t([&] { (void)c->Get("never", 500ms); });
    t.join();
  }
  // Raw sockets: one that says nothing, one that sends HTTP, one with an absurd frame length.
  auto raw = [&](const std::string& bytes) {
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(server->port()));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
    if (!bytes.empty()) {
      EXPECT_EQ(::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL), ssize_t(bytes.size()));
    }
    return fd;
  };
  const int silent = raw("");
  const int http = raw("GET / HTTP/1.1\r\nHost: x\r\n\r\n");
  const int huge = raw(std::string("\xff\xff\xff\xff", 4));
  auto c = ConnectTo(*server);
  ASSERT_TRUE(c->Set("k", "v").ok());
  EXPECT_EQ(*c->Get("k", 1s), "v");
  ::close(http);
  ::close(huge);
  // Destruction with a silent, never-authenticated connection still open returns promptly.
  const auto t0 = Clock::now();
  server.reset();
  EXPECT_LT(Seconds(t0), 10.0);
  ::close(silent);
}

// ---- hostile clients ----

using test_util::RawConnect;

// Waits (at most 20 s) until the server closes `fd`: true when it did.
bool ClosedByServer(int fd) {
  const auto until = Clock::now() + 20s;
  char buf[256];
  while (Clock::now() < until) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 100) <= 0) continue;
    const ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
    if (n <= 0) return true;  // EOF or reset; bytes (a reply) are read past
  }
  return false;
}

// The server's warnings go to stderr through the library's logger.
void CaptureLog() {
  log::Init();
  ::testing::internal::CaptureStderr();
}

int Threads() {
  int n = 0;
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("Threads:", 0) == 0) n = std::stoi(line.substr(8));
  return n;
}

// The handshake frame of a client with kToken: u32 length | u32 magic "TSR1" | str token.
std::string Handshake(const std::string& token = kToken) {
  std::string body;
  auto u32 = [&](uint32_t v) {
    for (int i = 3; i >= 0; --i) body.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
  };
  u32(0x54535231);
  u32(static_cast<uint32_t>(token.size()));
  body += token;
  std::string frame;
  const auto n = static_cast<uint32_t>(body.size());
  for (int i = 3; i >= 0; --i) frame.push_back(static_cast<char>((n >> (8 * i)) & 0xff));
  return frame + body;
}

TEST(StoreHostile, SilentConnectionsCostNoThreadAndDoNotBlockRealClients) {
  auto server = StartServer();
  CaptureLog();
  const int before = Threads();
  std::vector<int> silent;
  for (int i = 0; i < 300; ++i) silent.push_back(RawConnect(server->port()));
  auto c = ConnectTo(*server);  // a real client after the 300 strays
  ASSERT_TRUE(c->Set("k", "v").ok());
  EXPECT_EQ(*c->Get("k", 1s), "v");
  // Before: one thread per connection (306 threads for 300 silent ones).
  EXPECT_LT(Threads() - before, 20) << "threads before " << before << ", now " << Threads();
  for (int fd : silent) ::close(fd);
  c.reset();
  server.reset();
  (void)::testing::internal::GetCapturedStderr();
}

TEST(StoreHostile, HandshakeIsBoundedByTesseraTimeoutAndTheStrayIsLogged) {
  ::setenv("TESSERA_TIMEOUT", "300ms", 1);
  auto server = StartServer();
  ::unsetenv("TESSERA_TIMEOUT");
  CaptureLog();
  const int fd = RawConnect(server->port());
  EXPECT_TRUE(ClosedByServer(fd));  // before: held for 60 s whatever TESSERA_TIMEOUT said
  ::close(fd);
  server.reset();
  const std::string log = ::testing::internal::GetCapturedStderr();
  EXPECT_TRUE(Contains(log, "sent no valid handshake within 300ms")) << log;
}

TEST(StoreHostile, AHugeFrameIsRefusedWithoutAllocatingIt) {
  auto server = StartServer();
  CaptureLog();
  // Authenticates, then announces a 200 MB request and sends nothing more.
  const int fd = RawConnect(server->port(), Handshake() + std::string("\x0b\xeb\xc2\x00", 4));
  // Before: the server allocated the 200 MB and waited for them; now it drops the connection at once.
  EXPECT_TRUE(ClosedByServer(fd));
  ::close(fd);
  // A huge handshake is refused too.
  const int fd2 = RawConnect(server->port(), std::string("\x0b\xeb\xc2\x00", 4));
  EXPECT_TRUE(ClosedByServer(fd2));
  ::close(fd2);
  auto c = ConnectTo(*server);  // still serving
  EXPECT_TRUE(c->Set("k", "v").ok());
  // A value over the limit is refused by the client, naming the key.
  Status big = c->Set("big", std::string(StoreLimits::kMaxFrame, 'x'));
  EXPECT_EQ(big.code(), Code::kInvalidArgument);
  EXPECT_TRUE(Contains(big.message(), "'big'")) << big.message();
  c.reset();
  server.reset();
  const std::string log = ::testing::internal::GetCapturedStderr();
  EXPECT_TRUE(Contains(log, "announced a frame of 200000000 bytes, more than the store's limit of 16777216")) << log;
  EXPECT_TRUE(Contains(log, "handshake announces 200000000 bytes")) << log;
}

TEST(StoreHostile, ConnectionsBeyondTheCapAreRefusedWithAReason) {
  ::setenv("TESSERA_STORE_MAX_CONNS", "3", 1);
  auto server = StartServer();
  ::unsetenv("TESSERA_STORE_MAX_CONNS");
  CaptureLog();
  std::vector<std::unique_ptr<StoreClient>> clients;
  for (int i = 0; i < 3; ++i) clients.push_back(ConnectTo(*server));
  auto fourth = StoreClient::Connect(Addr(*server), kToken, 2s);
  ASSERT_FALSE(fourth.ok());  // before: no cap
  EXPECT_TRUE(Contains(fourth.status().message(), "3 connections are open, the limit (TESSERA_STORE_MAX_CONNS)"))
      << fourth.status().message();
  clients.pop_back();  // room again once one has gone
  std::unique_ptr<StoreClient> again;
  for (int i = 0; i < 100 && !again; ++i) {
    auto c = StoreClient::Connect(Addr(*server), kToken, 2s);
    if (c.ok())
      again = std::move(c).value();
    else
      std::this_thread::sleep_for(20ms);
  }
  ASSERT_TRUE(again);
  EXPECT_TRUE(again->Set("k", "v").ok());
  clients.clear();
  again.reset();
  server.reset();
  const std::string log = ::testing::internal::GetCapturedStderr();
  EXPECT_TRUE(Contains(log, "refused a connection from 127.0.0.1")) << log;
}

// Forked children are rank processes: they learn the port through a pipe, rendezvous, and check each
// other's values. They are forked before the server starts, so the test process is single-threaded then.
TEST(Store, RendezvousAcrossProcesses) {
  constexpr int kWorld = 5;
  std::vector<pid_t> pids;
  std::vector<int> port_pipes;
  for (int rank = 0; rank < kWorld; ++rank) {
    int p[2];
    ASSERT_EQ(::pipe(p), 0);
    const pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      ::close(p[1]);
      int port = 0;
      if (::read(p[0], &port, sizeof(port)) != sizeof(port)) ::_exit(10);
      auto c = StoreClient::Connect("127.0.0.1:" + std::to_string(port), kToken, 10s);
      if (!c.ok()) ::_exit(11);
      auto& client = *c.value();
      if (!client.Set("rank/" + std::to_string(rank), std::to_string(rank * rank)).ok()) ::_exit(12);
      if (!client.Add("arrived", 1).ok()) ::_exit(13);
      if (!client.Barrier("start", kWorld, 10s).ok()) ::_exit(14);
      if (*client.Add("arrived", 0) != kWorld) ::_exit(15);  // everyone added before the barrier
      for (int peer = 0; peer < kWorld; ++peer) {
        auto v = client.Get("rank/" + std::to_string(peer), 10s);
        if (!v.ok() || *v != std::to_string(peer * peer)) ::_exit(16);
      }
      if (!client.Barrier("end", kWorld, 10s).ok()) ::_exit(17);
      ::_exit(0);
    }
    ::close(p[0]);
    pids.push_back(pid);
    port_pipes.push_back(p[1]);
  }
  auto server = StartServer();
  const int port = server->port();
  for (int fd : port_pipes) {
    EXPECT_EQ(::write(fd, &port, sizeof(port)), ssize_t(sizeof(port)));
    ::close(fd);
  }
  for (int rank = 0; rank < kWorld; ++rank) {
    int status = 0;
    ASSERT_EQ(::waitpid(pids[rank], &status, 0), pids[rank]);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "rank " << rank << " status " << status;
  }
}

// A rank process that dies while blocked: the others' waits end with a Timeout that names what they waited
// for, and the server keeps going.
TEST(Store, ProcessKilledWhileWaiting) {
  int p[2];
  ASSERT_EQ(::pipe(p), 0);
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    ::close(p[1]);
    int port = 0;
    if (::read(p[0], &port, sizeof(port)) != sizeof(port)) ::_exit(10);
    auto c = StoreClient::Connect("127.0.0.1:" + std::to_string(port), kToken, 10s);
    if (!c.ok()) ::_exit(11);
    (void)c.value()->Set("child/up", "1");
    (void)c.value()->Barrier("pair", 2, 60s);  // never completes: the parent waits elsewhere
    ::_exit(0);
  }
  ::close(p[0]);
  auto server = StartServer();
  const int port = server->port();
  ASSERT_EQ(::write(p[1], &port, sizeof(port)), ssize_t(sizeof(port)));
  ::close(p[1]);
  auto c = ConnectTo(*server);
  ASSERT_TRUE(c->Get("child/up", 10s).ok());
  ::kill(pid, SIGKILL);
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  EXPECT_TRUE(WIFSIGNALED(status));
  Status s = c->Wait({"child/done"}, 200ms);
  EXPECT_EQ(s.code(), Code::kTimeout);
  EXPECT_TRUE(Contains(s.message(), "'child/done'")) << s.message();
  EXPECT_TRUE(c->Set("still", "serving").ok());
}

TEST(Store, FormatDuration) {
  EXPECT_EQ(FormatDuration(30s), "30s");
  EXPECT_EQ(FormatDuration(1500ms), "1500ms");
  EXPECT_EQ(FormatDuration(2min), "120s");
  EXPECT_EQ(FormatDuration(0ms), "0s");
}

}  // namespace
}  // namespace tessera::comm
