// Tests of common/net, the socket helpers shared by the store and the TCP transport: host:port parsing,
// deadlines, listening, connecting with retries, exact reads/writes and how they report a closed peer, a
// timeout or a wake-up.
#include "common/net.hpp"

#include <gtest/gtest.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <string>
#include <thread>

namespace tessera::net {
namespace {

using namespace std::chrono_literals;

TEST(NetSplitHostPort, AcceptsHostPortAndBracketedV6) {
  auto a = SplitHostPort("10.0.0.3:29500");
  ASSERT_TRUE(a.has_value());
  EXPECT_EQ(a->host, "10.0.0.3");
  EXPECT_EQ(a->port, "29500");
  auto b = SplitHostPort("[::1]:80");
  ASSERT_TRUE(b.has_value());
  EXPECT_EQ(b->host, "::1");
  EXPECT_EQ(b->port, "80");
  auto c = SplitHostPort("node-7.cluster:1");
  ASSERT_TRUE(c.has_value());
  EXPECT_EQ(c->host, "node-7.cluster");
}

TEST(NetSplitHostPort, RejectsMalformedAddresses) {
  for (const char* bad : {"", "host", ":29500", "host:", "host:0", "host:65536", "host:12ab", "[]:80"})
    EXPECT_FALSE(SplitHostPort(bad).has_value()) << bad;
}

TEST(NetDeadline, SaturatesAndPollMsCountsDown) {
  EXPECT_EQ(DeadlineAfter(std::chrono::hours(24 * 365 * 200)), Clock::time_point::max());
  EXPECT_EQ(PollMs(Clock::time_point::max()), -1);
  EXPECT_EQ(PollMs(Clock::now() - 1s), 0);
  const int ms = PollMs(DeadlineAfter(2000ms));
  EXPECT_GT(ms, 1900);
  EXPECT_LE(ms, 2001);
  const auto before = Clock::now();
  const auto d = DeadlineAfter(-5s);  // negative counts as zero: now
  EXPECT_GE(d, before);
  EXPECT_LE(d, Clock::now());
}

// A listener on 127.0.0.1 and a connected pair (client, accepted server side).
struct Pair {
  int listen_fd = -1, port = 0, client = -1, server = -1;
  ~Pair() {
    for (int fd : {listen_fd, client, server})
      if (fd >= 0) ::close(fd);
  }
};

void Connect(Pair* p) {
  SocketError e;
  p->listen_fd = Listen("127.0.0.1", 0, AF_INET, &p->port, &e);
  ASSERT_GE(p->listen_fd, 0) << e.Describe();
  ASSERT_GT(p->port, 0);
  SocketError last;
  p->client = ConnectWithRetry("127.0.0.1", std::to_string(p->port), ConnectRetry{}, DeadlineAfter(5s), &last);
  ASSERT_GE(p->client, 0) << last.Describe();
  int err = 0;
  ASSERT_EQ(WaitReady(p->listen_fd, POLLIN, DeadlineAfter(5s), -1, &err), Io::kOk);
  p->server = ::accept(p->listen_fd, nullptr, nullptr);
  ASSERT_GE(p->server, 0);
}

TEST(NetSocket, ListenConnectAndMoveExactlyNBytes) {
  Pair p;
  ASSERT_NO_FATAL_FAILURE(Connect(&p));
  EXPECT_EQ(PeerName(p.server).rfind("127.0.0.1:", 0), 0u) << PeerName(p.server);
  EXPECT_EQ(PeerName(p.client), "127.0.0.1:" + std::to_string(p.port));
  // Larger than the socket buffers, so both sides wait for each other.
  std::string out(8 << 20, '\0');
  for (size_t i = 0; i < out.size(); ++i) out[i] = static_cast<char>(i * 131 + 7);
  std::string in(out.size(), '\0');
  int rerr = 0;
  Io rio = Io::kError;
  std::thread reader([&] { rio = ReadFull(p.server, in.data(), in.size(), DeadlineAfter(20s), -1, &rerr); });
  int werr = 0;
  EXPECT_EQ(WriteFull(p.client, out.data(), out.size(), DeadlineAfter(20s), -1, &werr), Io::kOk) << werr;
  reader.join();
  EXPECT_EQ(rio, Io::kOk) << rerr;
  EXPECT_TRUE(in == out);
}

TEST(NetSocket, ReadReportsTimeoutWakeAndClose) {
  Pair p;
  ASSERT_NO_FATAL_FAILURE(Connect(&p));
  char buf[16];
  int err = 0;
  const auto t0 = Clock::now();
  EXPECT_EQ(ReadFull(p.server, buf, sizeof(buf), DeadlineAfter(100ms), -1, &err), Io::kTimeout);
  EXPECT_GE(Clock::now() - t0, 90ms);
  int wake[2];
  ASSERT_EQ(::pipe(wake), 0);
  ASSERT_EQ(::write(wake[1], "x", 1), 1);
  EXPECT_EQ(ReadFull(p.server, buf, sizeof(buf), Clock::time_point::max(), wake[0], &err), Io::kWoken);
  ::close(wake[0]);
  ::close(wake[1]);
  // Half of what is wanted, then an orderly close: kClosed with err 0, and IoStatus says so.
  ASSERT_EQ(::send(p.client, "12345678", 8, MSG_NOSIGNAL), 8);
  ::close(p.client);
  p.client = -1;
  err = -1;
  const Io io = ReadFull(p.server, buf, sizeof(buf), DeadlineAfter(5s), -1, &err);
  EXPECT_EQ(io, Io::kClosed);
  EXPECT_EQ(err, 0);
  const Status s = IoStatus(io, err, "reading the hello");
  EXPECT_EQ(s.code(), Code::kRemoteError);
  EXPECT_EQ(s.message(), "reading the hello: connection closed by the peer");
  EXPECT_EQ(IoStatus(Io::kTimeout, 0, "x").code(), Code::kTimeout);
  EXPECT_TRUE(IoStatus(Io::kOk, 0, "x").ok());
}

TEST(NetSocket, WriteToAResetPeerIsClosedNotSigpipe) {
  Pair p;
  ASSERT_NO_FATAL_FAILURE(Connect(&p));
  linger l{1, 0};  // close with RST
  ASSERT_EQ(::setsockopt(p.server, SOL_SOCKET, SO_LINGER, &l, sizeof(l)), 0);
  ::close(p.server);
  p.server = -1;
  std::string data(1 << 20, 'x');
  int err = 0;
  Io io = Io::kOk;
  // The first write may still be accepted by the kernel; a later one sees the reset.
  for (int i = 0; i < 50 && io == Io::kOk; ++i)
    io = WriteFull(p.client, data.data(), data.size(), DeadlineAfter(5s), -1, &err);
  EXPECT_EQ(io, Io::kClosed);
  EXPECT_TRUE(err == ECONNRESET || err == EPIPE) << err;
  EXPECT_EQ(IoStatus(io, err, "w").code(), Code::kSystemError);
}

TEST(NetConnect, RetriesUntilTheListenerAppearsAndGivesUpAtTheDeadline) {
  // A free port: bind, note it, close.
  SocketError e;
  int port = 0;
  const int probe = Listen("127.0.0.1", 0, AF_INET, &port, &e);
  ASSERT_GE(probe, 0) << e.Describe();
  ::close(probe);
  SocketError last;
  const auto t0 = Clock::now();
  EXPECT_LT(ConnectWithRetry("127.0.0.1", std::to_string(port), ConnectRetry{}, DeadlineAfter(300ms), &last), 0);
  EXPECT_GE(Clock::now() - t0, 250ms);
  EXPECT_EQ(last.gai, 0);
  EXPECT_EQ(last.err, ECONNREFUSED) << last.Describe();
  // The listener comes up 200 ms after the first attempt: the retries find it.
  int fd = -1;
  std::thread late([&] {
    std::this_thread::sleep_for(200ms);
    int p2 = 0;
    SocketError e2;
    fd = Listen("127.0.0.1", port, AF_INET, &p2, &e2);
  });
  const int c = ConnectWithRetry("127.0.0.1", std::to_string(port), ConnectRetry{}, DeadlineAfter(5s), &last);
  late.join();
  ASSERT_GE(fd, 0);
  EXPECT_GE(c, 0) << last.Describe();
  if (c >= 0) ::close(c);
  ::close(fd);
}

TEST(NetConnect, AnUnresolvableNameFailsAtOnceWhenNotRetried) {
  SocketError last;
  ConnectRetry once;
  once.retry_unresolved = false;
  const auto t0 = Clock::now();
  EXPECT_LT(ConnectWithRetry("no-such-host.invalid", "80", once, DeadlineAfter(10s), &last), 0);
  EXPECT_LT(Clock::now() - t0, 5s);
  EXPECT_NE(last.gai, 0);
  EXPECT_FALSE(last.Describe().empty());
  int port = 0;
  SocketError le;
  EXPECT_LT(Listen("no-such-host.invalid", 0, AF_INET, &port, &le), 0);
  EXPECT_NE(le.gai, 0);
}

TEST(NetSocket, OptionsApply) {
  Pair p;
  ASSERT_NO_FATAL_FAILURE(Connect(&p));
  SetNoDelay(p.server);
  int v = 0;
  socklen_t len = sizeof(v);
  ASSERT_EQ(::getsockopt(p.server, IPPROTO_TCP, TCP_NODELAY, &v, &len), 0);
  EXPECT_NE(v, 0);
  ASSERT_TRUE(SetNonBlocking(p.server, true));
  char c;
  EXPECT_EQ(::recv(p.server, &c, 1, 0), -1);
  EXPECT_TRUE(errno == EAGAIN || errno == EWOULDBLOCK);
  ASSERT_TRUE(SetNonBlocking(p.server, false));
  EXPECT_FALSE(SetNonBlocking(-1, true));
}

}  // namespace
}  // namespace tessera::net
