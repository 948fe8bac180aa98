// tests/ckpt/s3_harness: starts a real S3 server (npm's s3rver) on a free loopback port with a temporary
// directory and stops it; plus FaultProxy, a tiny HTTP proxy in front of it that answers chosen requests
// with 503 or drops the connection, for retry tests. s3rver is found via TESSERA_S3RVER, then
// <source>/.deps/node/node_modules/.bin/s3rver (scripts/install-deps.sh installs it there).
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "ckpt/test_util.hpp"

namespace tessera::ckpt::test {

inline int FreePort() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  socklen_t len = sizeof a;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  int port = ntohs(a.sin_port);
  ::close(fd);
  return port;
}

inline bool CanConnect(int port) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bool ok = ::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
  ::close(fd);
  return ok;
}

class S3rver {
 public:
  // Empty when s3rver or node is missing; `why` says what is missing.
  static std::string Find(std::string* why) {
    if (const char* e = std::getenv("TESSERA_S3RVER")) return e;
    std::string p = SourceDir() + "/.deps/node/node_modules/.bin/s3rver";
    if (::access(p.c_str(), X_OK) != 0) {
      *why = "s3rver not found: set TESSERA_S3RVER or run scripts/install-deps.sh (installs it into .deps/node)";
      return "";
    }
    if (std::system("node --version >/dev/null 2>&1") != 0) {
      *why = "node is not installed (apt-get install nodejs)";
      return "";
    }
    return p;
  }
  bool Start(std::string* why) {
    std::string bin = Find(why);
    if (bin.empty()) return false;
    port_ = FreePort();
    pid_ = ::fork();
    if (pid_ == 0) {
      std::string port = std::to_string(port_);
      std::string log = dir_ / "s3rver.log";
      if (!std::freopen(log.c_str(), "w", stdout) || !std::freopen(log.c_str(), "a", stderr)) ::_exit(126);
      ::execl(bin.c_str(), bin.c_str(), "-d", (dir_ / "data").c_str(), "-a", "127.0.0.1", "-p", port.c_str(), "--silent",
              "--service-endpoint", "localhost", static_cast<char*>(nullptr));
      ::_exit(127);
    }
    std::filesystem::create_directories(dir_ / "data");
    for (int i = 0; i < 300; ++i) {
      if (CanConnect(port_)) return true;
      int st;
      if (::waitpid(pid_, &st, WNOHANG) == pid_) {
        pid_ = -1;
        *why = "s3rver exited at start (see its log)";
        return false;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    *why = "s3rver did not listen within 15 s";
    return false;
  }
  ~S3rver() {
    if (pid_ > 0) {
      ::kill(pid_, SIGTERM);
      int st;
      ::waitpid(pid_, &st, 0);
    }
  }
  int port() const { return port_; }
  std::string endpoint() const { return "http://127.0.0.1:" + std::to_string(port_); }
  // s3rver's built-in account.
  static void SetCredentials() {
    setenv("AWS_ACCESS_KEY_ID", "S3RVER", 1);
    setenv("AWS_SECRET_ACCESS_KEY", "S3RVER", 1);
  }

 private:
  TempDir dir_;
  int port_ = 0;
  pid_t pid_ = -1;
};

// One request per connection: reads the request (headers + Content-Length body), asks `plan` what to do
// with request number i (0-based), then passes it upstream with "Connection: close", answers 503, or
// closes the connection without an answer.
class FaultProxy {
 public:
  enum Action { kPass, k503, kDrop };
  FaultProxy(int upstream_port, std::function<Action(int index, const std::string& request_line)> plan)
      : upstream_(upstream_port), plan_(std::move(plan)) {
    lfd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    int one = 1;
    setsockopt(lfd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ::bind(lfd_, reinterpret_cast<sockaddr*>(&a), sizeof a);
    socklen_t len = sizeof a;
    ::getsockname(lfd_, reinterpret_cast<sockaddr*>(&a), &len);
    port_ = ntohs(a.sin_port);
    ::listen(lfd_, 64);
    thread_ = std::thread([this] { Loop(); });
  }
  ~FaultProxy() {
    stop_ = true;
    ::shutdown(lfd_, SHUT_RDWR);
    ::close(lfd_);
    thread_.join();
    for (auto& t : workers_) t.join();
  }
  int port() const { return port_; }
  std::string endpoint() const { return "http://127.0.0.1:" + std::to_string(port_); }
  int requests() const { return count_; }
  int faults() const { return faults_; }
  // The head (request line and headers) of every request seen, in arrival order.
  std::vector<std::string> heads() {
    std::lock_guard lk(mu_);
    return heads_;
  }

 private:
  void Loop() {
    while (!stop_) {
      int c = ::accept(lfd_, nullptr, nullptr);
      if (c < 0) {
        if (stop_) return;
        continue;
      }
      std::lock_guard lk(mu_);
      workers_.emplace_back([this, c] { Serve(c); });
    }
  }
  static bool SendAll(int fd, const char* p, size_t n) {
    while (n > 0) {
      ssize_t w = ::send(fd, p, n, MSG_NOSIGNAL);
      if (w <= 0) return false;
      p += w;
      n -= static_cast<size_t>(w);
    }
    return true;
  }
  void Serve(int c) {
    std::string req;
    char buf[65536];
    size_t hend;
    while ((hend = req.find("\r\n\r\n")) == std::string::npos) {
      ssize_t r = ::recv(c, buf, sizeof buf, 0);
      if (r <= 0) {
        ::close(c);
        return;
      }
      req.append(buf, static_cast<size_t>(r));
    }
    std::string head = req.substr(0, hend + 2), body = req.substr(hend + 4);
    size_t clen = 0;
    std::string out_head;
    size_t pos = 0;
    while (pos < head.size()) {
      size_t e = head.find("\r\n", pos);
      std::string line = head.substr(pos, e - pos);
      pos = e + 2;
      std::string lower = line;
      for (auto& ch : lower) ch = static_cast<char>(tolower(static_cast<unsigned char>(ch)));
      if (lower.rfind("content-length:", 0) == 0) clen = std::stoull(line.substr(15));
      if (lower.rfind("connection:", 0) == 0) continue;
      out_head += line + "\r\n";
    }
    while (body.size() < clen) {
      ssize_t r = ::recv(c, buf, sizeof buf, 0);
      if (r <= 0) break;
      body.append(buf, static_cast<size_t>(r));
    }
    {
      std::lock_guard lk(mu_);
      heads_.push_back(head);
    }
    int idx = count_++;
    Action act = plan_(idx, head.substr(0, head.find("\r\n")));
    if (act == kDrop) {
      ++faults_;
      ::close(c);
      return;
    }
    if (act == k503) {
      ++faults_;
      std::string b = "<Error><Code>SlowDown</Code><Message>Reduce your request rate</Message></Error>";
      std::string r = "HTTP/1.1 503 Slow Down\r\nContent-Type: application/xml\r\nConnection: close\r\nContent-Length: " +
                      std::to_string(b.size()) + "\r\n\r\n" + b;
      SendAll(c, r.data(), r.size());
      ::close(c);
      return;
    }
    int u = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(upstream_));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::connect(u, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0) {
      std::string fwd = out_head + "Connection: close\r\n\r\n" + body;
      if (SendAll(u, fwd.data(), fwd.size())) {
        for (;;) {
          ssize_t r = ::recv(u, buf, sizeof buf, 0);
          if (r <= 0 || !SendAll(c, buf, static_cast<size_t>(r))) break;
        }
      }
    }
    ::close(u);
    ::close(c);
  }

  int upstream_, port_ = 0, lfd_ = -1;
  std::function<Action(int, const std::string&)> plan_;
  std::atomic<bool> stop_{false};
  std::atomic<int> count_{0}, faults_{0};
  std::mutex mu_;
  std::vector<std::thread> workers_;
  std::vector<std::string> heads_;
  std::thread thread_;
};

}  // namespace tessera::ckpt::test
