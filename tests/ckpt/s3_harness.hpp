// tests/ckpt/s3_harness: starts a real S3 server, moto's standalone server (PyPI moto[server], pinned in
// python/requirements-test.txt), on a free loopback port with its SigV4 checking switched on, and stops it;
// plus FaultProxy, a tiny HTTP proxy in front of it that answers chosen requests with 503 or drops the
// connection, for retry tests. The server is found via TESSERA_S3_SERVER (a moto_server executable), then
// <source>/.venv/bin/moto_server (scripts/install-deps.sh installs it there).
#pragma once

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
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
#include <string_view>
#include <thread>
#include <vector>

#include "ckpt/sigv4.hpp"
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

inline bool SendAll(int fd, const char* p, size_t n) {
  while (n > 0) {
    ssize_t w = ::send(fd, p, n, MSG_NOSIGNAL);
    if (w <= 0) return false;
    p += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}

// One HTTP/1.1 exchange with 127.0.0.1:port on a fresh connection ("Connection: close", the answer read to
// EOF): the harness's own setup requests to the server, not the client under test.
struct HttpAnswer {
  int status = 0;  // 0: no answer (no connection, or closed before a status line)
  std::string body;
};
inline HttpAnswer HttpExchange(int port, const std::string& method, const std::string& path,
                               const std::vector<std::string>& headers, const std::string& body) {
  HttpAnswer out;
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    ::close(fd);
    return out;
  }
  std::string req = method + " " + path + " HTTP/1.1\r\nHost: 127.0.0.1:" + std::to_string(port) +
                    "\r\nConnection: close\r\nContent-Length: " + std::to_string(body.size()) + "\r\n";
  for (const auto& h : headers) req += h + "\r\n";
  req += "\r\n" + body;
  std::string got;
  if (SendAll(fd, req.data(), req.size())) {
    char buf[65536];
    for (ssize_t r; (r = ::recv(fd, buf, sizeof buf, 0)) > 0;) got.append(buf, static_cast<size_t>(r));
  }
  ::close(fd);
  if (std::sscanf(got.c_str(), "HTTP/1.%*d %d", &out.status) != 1) out.status = 0;
  if (size_t e = got.find("\r\n\r\n"); e != std::string::npos) out.body = got.substr(e + 4);
  return out;
}

// The text between <tag> and </tag>, "" when absent.
inline std::string XmlText(const std::string& xml, const std::string& tag) {
  size_t b = xml.find("<" + tag + ">");
  if (b == std::string::npos) return "";
  b += tag.size() + 2;
  size_t e = xml.find("</" + tag + ">", b);
  return e == std::string::npos ? "" : xml.substr(b, e - b);
}

// moto's standalone server, with SigV4 checking on. moto keeps everything in memory (large objects spill
// to unnamed temporary files), so nothing outlives the process. Checking is switched on the way moto's own
// test decorator does it in server mode: the server starts with INITIAL_NO_AUTH_ACTION_COUNT unset
// (nothing checked), the harness creates an IAM user with an access key and a policy allowing s3:*, then
// POSTs 0 to /moto-api/reset-auth — from then on every S3 request must carry a valid SigV4 signature made
// with that user's key, else 403 (what is and is not checked: docs/ckpt.md, "Tests").
class S3Server {
 public:
  // Empty when moto_server is missing; `why` says what is missing and how to install it.
  static std::string Find(std::string* why) {
    if (const char* e = std::getenv("TESSERA_S3_SERVER"); e != nullptr && *e != '\0') {
      if (::access(e, X_OK) != 0) {
        *why = std::string("TESSERA_S3_SERVER=") + e + " is not an executable file (it names moto's moto_server)";
        return "";
      }
      return e;
    }
    std::string p = SourceDir() + "/.venv/bin/moto_server";
    if (::access(p.c_str(), X_OK) != 0) {
      *why = "moto's S3 server not found: " + p +
             " is missing; run scripts/install-deps.sh (installs moto[server] from python/requirements-test.txt "
             "into .venv) or set TESSERA_S3_SERVER to a moto_server";
      if (std::getenv("TESSERA_S3RVER") != nullptr)
        *why += " (TESSERA_S3RVER is set but no longer read: the tests use moto, not s3rver)";
      return "";
    }
    return p;
  }
  // False with `why` set when the server is missing (missing() is then true: skip) or failed to start or to
  // switch checking on (a failure).
  bool Start(std::string* why) {
    std::string bin = Find(why);
    if (bin.empty()) {
      missing_ = true;
      return false;
    }
    port_ = FreePort();
    log_ = dir_ / "moto_server.log";
    // Everything the child needs is built before fork (only async-signal-safe calls after it). Its
    // environment is ours without INITIAL_NO_AUTH_ACTION_COUNT, so that checking starts exactly at reset-auth.
    std::string port = std::to_string(port_);
    std::vector<std::string> env;
    for (char** e = environ; *e != nullptr; ++e)
      if (std::string_view(*e).rfind("INITIAL_NO_AUTH_ACTION_COUNT=", 0) != 0) env.emplace_back(*e);
    std::vector<char*> envp, argv;
    for (auto& e : env) envp.push_back(e.data());
    envp.push_back(nullptr);
    std::string host = "127.0.0.1", h = "-H", p = "-p";
    for (std::string* a : {&bin, &h, &host, &p, &port}) argv.push_back(a->data());
    argv.push_back(nullptr);
    pid_ = ::fork();
    if (pid_ == 0) {
      ::prctl(PR_SET_PDEATHSIG, SIGTERM);  // not left behind when the test dies
      int fd = ::open(log_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
      if (fd < 0 || ::dup2(fd, 1) < 0 || ::dup2(fd, 2) < 0) ::_exit(126);
      ::execve(bin.c_str(), argv.data(), envp.data());
      ::_exit(127);
    }
    bool up = false;
    for (int i = 0; i < 600 && !(up = CanConnect(port_)); ++i) {
      int st;
      if (::waitpid(pid_, &st, WNOHANG) == pid_) {
        pid_ = -1;
        *why =
            bin + " exited at start (" +
            (WIFEXITED(st) ? "status " + std::to_string(WEXITSTATUS(st)) : "signal " + std::to_string(WTERMSIG(st))) +
            "); its log: " + LogTail();
        return false;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    if (!up) {
      *why = bin + " did not listen on 127.0.0.1:" + port + " within 30 s; its log: " + LogTail();
      return false;
    }
    return EnableSigV4(why);
  }
  ~S3Server() {
    if (pid_ > 0) {
      ::kill(pid_, SIGTERM);
      int st;
      ::waitpid(pid_, &st, 0);
    }
  }
  bool missing() const { return missing_; }
  int port() const { return port_; }
  std::string endpoint() const { return "http://127.0.0.1:" + std::to_string(port_); }
  const std::string& access_key() const { return access_key_; }
  const std::string& secret_key() const { return secret_key_; }
  // The credentials of the IAM user that Start created (AWS_SESSION_TOKEN cleared: moto would refuse it).
  void SetCredentials() const {
    setenv("AWS_ACCESS_KEY_ID", access_key_.c_str(), 1);
    setenv("AWS_SECRET_ACCESS_KEY", secret_key_.c_str(), 1);
    unsetenv("AWS_SESSION_TOKEN");
  }
  // The last 2,000 characters of the server's log, for error messages (the log goes with the server).
  std::string LogTail() const {
    std::string t = ReadText(log_);
    return t.size() > 2000 ? "..." + t.substr(t.size() - 2000) : t;
  }

 private:
  bool EnableSigV4(std::string* why) {
    // moto routes a request to a service by the credential scope of its Authorization header; until
    // reset-auth it checks nothing else, so these setup requests need no real signature.
    const std::vector<std::string> iam = {
        "Authorization: AWS4-HMAC-SHA256 Credential=tessera-setup/20000101/us-east-1/iam/aws4_request, "
        "SignedHeaders=host, Signature=0",
        "Content-Type: application/x-www-form-urlencoded; charset=utf-8"};
    auto call = [&](const std::string& form, HttpAnswer* out) {
      *out = HttpExchange(port_, "POST", "/", iam, form + "&Version=2010-05-08");
      if (out->status == 200) return true;
      *why = "moto IAM setup: POST " + form.substr(0, form.find('&')) + " answered " + std::to_string(out->status) +
             ": " + out->body.substr(0, 500) + "; server log: " + LogTail();
      return false;
    };
    const std::string policy =
        R"({"Version":"2012-10-17","Statement":[{"Effect":"Allow","Action":"s3:*","Resource":"*"}]})";
    HttpAnswer r;
    if (!call("Action=CreateUser&UserName=tessera", &r) || !call("Action=CreateAccessKey&UserName=tessera", &r))
      return false;
    access_key_ = XmlText(r.body, "AccessKeyId");
    secret_key_ = XmlText(r.body, "SecretAccessKey");
    if (access_key_.empty() || secret_key_.empty()) {
      *why = "moto IAM setup: no AccessKeyId/SecretAccessKey in the CreateAccessKey answer: " + r.body.substr(0, 500);
      return false;
    }
    if (!call("Action=PutUserPolicy&UserName=tessera&PolicyName=s3-all&PolicyDocument=" + s3::UriEncode(policy, true),
              &r))
      return false;
    // The body is the number of requests still let through unchecked; no Content-Type, so that Flask
    // leaves it in request.data (a form Content-Type would move it to request.form and moto fail with 500).
    r = HttpExchange(port_, "POST", "/moto-api/reset-auth", {}, "0");
    if (r.status != 200 || r.body.find(R"("status": "ok")") == std::string::npos) {
      *why = "moto: POST /moto-api/reset-auth (switching SigV4 checking on) answered " + std::to_string(r.status) +
             ": " + r.body.substr(0, 500) + "; server log: " + LogTail();
      return false;
    }
    return true;
  }

  TempDir dir_;
  std::string log_, access_key_, secret_key_;
  int port_ = 0;
  pid_t pid_ = -1;
  bool missing_ = false;
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
      std::string r =
          "HTTP/1.1 503 Slow Down\r\nContent-Type: application/xml\r\nConnection: close\r\nContent-Length: " +
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
