// Tests of comm/transport/tcp's listener against stray connections: a connection
// that sends nothing, or a wrong token, must neither block the bridge's start-up nor take a peer's place,
// and is logged; the listener binds the address it is given, not every interface.
#include "comm/transport/tcp.hpp"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <string>
#include <thread>

#include "common/log.hpp"
#include "raw_socket.hpp"

namespace tessera::comm {
namespace {

using namespace std::chrono_literals;

constexpr const char* kToken = "bridge-test-token";

using test_util::RawConnect;

// The local address (hex, as /proc/net/tcp writes it) of the listening socket on `port`.
std::string ListenAddress(int port) {
  std::ifstream f("/proc/net/tcp");
  std::string line;
  char want[8];
  std::snprintf(want, sizeof(want), "%04X", port);
  while (std::getline(f, line)) {
    char local[64] = {}, remote[64] = {};
    unsigned st = 0;
    if (std::sscanf(line.c_str(), " %*d: %63s %63s %X", local, remote, &st) != 3) continue;
    std::string l = local;
    if (st == 0x0A && l.size() > 5 && l.substr(l.size() - 4) == want) return l.substr(0, l.find(':'));
  }
  return "";
}

TEST(TcpListener, SilentAndWrongTokenStraysAreDroppedLoggedAndTakeNoSlot) {
  log::Init();
  auto l = TcpListener::Listen("127.0.0.1");
  ASSERT_TRUE(l.ok()) << l.status().ToString();
  const int port = (*l)->port();
  ::testing::internal::CaptureStderr();
  // Strays connect first: one silent, one with a wrong token.
  const int silent = RawConnect(port);
  const int wrong = RawConnect(port);
  int wrong_hello = -1;
  {
    auto fd = TcpConnect("127.0.0.1:" + std::to_string(port), 5, 0, "not-the-token", 5s);  // sent, not acked
    ASSERT_TRUE(fd.ok()) << fd.status().ToString();
    wrong_hello = *fd;
  }
  // Then the real peer.
  std::thread peer([&] {
    auto fd = TcpConnect("127.0.0.1:" + std::to_string(port), 3, 1, kToken, 5s);
    ASSERT_TRUE(fd.ok()) << fd.status().ToString();
    (void)TcpAwaitAck(*fd, "listener", 5s);
    ::close(*fd);
  });
  // Before: the listener read the silent stray's hello until its deadline, so the peer never counted
  // ("0 of 1 peer connections arrived").
  auto in = (*l)->AcceptHellos(1, kToken, 8s);
  ASSERT_TRUE(in.ok()) << in.status().ToString();
  ASSERT_EQ(in->size(), 1u);
  EXPECT_EQ((*in)[0].from_rank, 3);
  EXPECT_EQ((*in)[0].stream, 1);
  EXPECT_TRUE(TcpSendAck((*in)[0].fd).ok());
  peer.join();
  ::close(wrong_hello);
  ::close((*in)[0].fd);
  ::close(silent);
  ::close(wrong);
  const std::string log = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(log.find("bridge: dropped a connection from 127.0.0.1"), std::string::npos) << log;
  EXPECT_NE(log.find("wrong job token"), std::string::npos) << log;
}

TEST(TcpListener, BindsTheGivenAddressNotEveryInterface) {
  auto l = TcpListener::Listen("127.0.0.1");
  ASSERT_TRUE(l.ok()) << l.status().ToString();
  EXPECT_EQ(ListenAddress((*l)->port()), "0100007F");  // 127.0.0.1, not 00000000 (0.0.0.0)
  auto any = TcpListener::Listen("0.0.0.0");
  ASSERT_TRUE(any.ok()) << any.status().ToString();
  EXPECT_EQ(ListenAddress((*any)->port()), "00000000");
  // Comm listens on 0.0.0.0 (with a warning) only when the host's name resolves to loopback here.
  EXPECT_TRUE(ResolvesToLoopback("127.0.0.1"));
  EXPECT_TRUE(ResolvesToLoopback("localhost"));
  EXPECT_FALSE(ResolvesToLoopback("no-such-host.invalid"));
  auto bad = TcpListener::Listen("no-such-host.invalid");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("no-such-host.invalid"), std::string::npos) << bad.status().message();
}

}  // namespace
}  // namespace tessera::comm
