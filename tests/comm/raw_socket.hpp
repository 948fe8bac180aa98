// tests/comm/raw_socket: a raw loopback TCP connection for tests that play a stray or hostile client
// (store_test, tcp_test): no handshake beyond the bytes given.
#pragma once

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <string>

namespace tessera::comm::test_util {

// A connection to 127.0.0.1:`port`, having sent `bytes`; the caller closes it.
inline int RawConnect(int port, const std::string& bytes = "") {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  if (!bytes.empty()) {
    EXPECT_EQ(::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL), ssize_t(bytes.size()));
  }
  return fd;
}

}  // namespace tessera::comm::test_util
