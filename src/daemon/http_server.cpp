// daemon/http_server: the API's HTTP server with a deadline per request (see http_server.hpp).
#include "daemon/http_server.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <string>

namespace tessera::daemon {

namespace {

// A socket stream whose reads share one deadline: a client that trickles its request is cut off.
class DeadlineStream : public httplib::Stream {
 public:
  explicit DeadlineStream(int sock)
      : sock_(sock), deadline_(std::chrono::steady_clock::now() + std::chrono::seconds(kRequestReadS)) {}
  bool is_readable() const override { return Wait(POLLIN) > 0; }
  bool is_writable() const override { return WaitFor(POLLOUT, kWriteS * 1000) > 0; }
  ssize_t read(char* ptr, size_t size) override {
    if (Wait(POLLIN) <= 0) return -1;
    ssize_t n;
    do {
      n = ::recv(sock_, ptr, size, 0);
    } while (n < 0 && errno == EINTR);
    return n;
  }
  ssize_t write(const char* ptr, size_t size) override {
    if (WaitFor(POLLOUT, kWriteS * 1000) <= 0) return -1;
    ssize_t n;
    do {
      n = ::send(sock_, ptr, size, MSG_NOSIGNAL);
    } while (n < 0 && errno == EINTR);
    return n;
  }
  void get_remote_ip_and_port(std::string& ip, int& port) const override { Address(true, ip, port); }
  void get_local_ip_and_port(std::string& ip, int& port) const override { Address(false, ip, port); }
  socket_t socket() const override { return sock_; }

 private:
  int Wait(short ev) const {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline_ - std::chrono::steady_clock::now());
    if (left.count() <= 0) return 0;
    return WaitFor(ev, static_cast<int>(std::min<int64_t>(left.count(), kReadS * 1000)));
  }
  int WaitFor(short ev, int ms) const {
    struct pollfd p {
      sock_, ev, 0
    };
    int r;
    do {
      r = ::poll(&p, 1, ms);
    } while (r < 0 && errno == EINTR);
    return r;
  }
  void Address(bool peer, std::string& ip, int& port) const {
    sockaddr_storage ss{};
    socklen_t len = sizeof ss;
    int r = peer ? ::getpeername(sock_, reinterpret_cast<sockaddr*>(&ss), &len)
                 : ::getsockname(sock_, reinterpret_cast<sockaddr*>(&ss), &len);
    char buf[INET6_ADDRSTRLEN] = "";
    port = 0;
    if (r == 0 && ss.ss_family == AF_INET) {
      auto* a = reinterpret_cast<sockaddr_in*>(&ss);
      ::inet_ntop(AF_INET, &a->sin_addr, buf, sizeof buf);
      port = ntohs(a->sin_port);
    } else if (r == 0 && ss.ss_family == AF_INET6) {
      auto* a = reinterpret_cast<sockaddr_in6*>(&ss);
      ::inet_ntop(AF_INET6, &a->sin6_addr, buf, sizeof buf);
      port = ntohs(a->sin6_port);
    }
    ip = buf;
  }
  int sock_;
  std::chrono::steady_clock::time_point deadline_;
};

}  // namespace

bool ApiServer::process_and_close_socket(socket_t sock) {
  bool ok = false;
  {
    DeadlineStream strm(sock);
    bool closed = false;
    ok = process_request(strm, /*close_connection=*/true, closed,
                         [&](httplib::Request& req) { strm.get_remote_ip_and_port(req.remote_addr, req.remote_port); });
  }
  ::shutdown(sock, SHUT_RDWR);
  ::close(sock);
  return ok;
}

}  // namespace tessera::daemon
