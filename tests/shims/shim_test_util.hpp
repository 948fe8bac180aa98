// tests/shims/shim_test_util: helpers of shim_test: dlopen a shim and resolve its symbols with the declared
// signatures, run the ranks of a communicator as forked processes (each reports "" or what went wrong through a
// pipe), pass a root info / unique id between them through a file, and make test data.
#pragma once

#include <dlfcn.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace shimtest {

inline std::string Fmt(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
inline std::string Fmt(const char* fmt, ...) {
  char buf[2048];
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  return buf;
}

#if defined(__SANITIZE_THREAD__)
extern "C" void AnnotateIgnoreReadsBegin(const char* file, int line);
extern "C" void AnnotateIgnoreReadsEnd(const char* file, int line);
#endif
// Reads a byte that a stream may still be writing: the race a missing synchronisation is (the tests that show
// stale data make it on purpose; ThreadSanitizer is told so).
inline unsigned char RacyRead(const void* p) {
#if defined(__SANITIZE_THREAD__)
  AnnotateIgnoreReadsBegin(__FILE__, __LINE__);
#endif
  const unsigned char v = *static_cast<const volatile unsigned char*>(p);
#if defined(__SANITIZE_THREAD__)
  AnnotateIgnoreReadsEnd(__FILE__, __LINE__);
#endif
  return v;
}

// A loaded shim. Sym<decltype(&aclInit)>("aclInit") is the exported function with the header's signature.
class Lib {
 public:
  explicit Lib(const char* path) : path_(path), h_(dlopen(path, RTLD_NOW | RTLD_LOCAL)) {
    if (!h_) error_ = dlerror();
  }
  bool ok() const { return h_ != nullptr; }
  const std::string& error() const { return error_; }
  template <typename F>
  F Sym(const char* name) {
    void* p = h_ ? dlsym(h_, name) : nullptr;
    if (!p) missing_ += std::string(missing_.empty() ? "" : ", ") + name;
    return reinterpret_cast<F>(p);
  }
  const std::string& missing() const { return missing_; }  // every name Sym could not resolve
  void* handle() const { return h_; }

 private:
  std::string path_, error_, missing_;
  void* h_;
};
#define SHIM_SYM(lib, name) name = (lib).Sym<decltype(&::name)>(#name)

// In a child: "" or the first failed check.
#define RANK_CHECK(cond, ...) \
  if (!(cond)) return shimtest::Fmt("%s:%d: %s: ", __FILE__, __LINE__, #cond) + shimtest::Fmt(__VA_ARGS__)

struct RankResult {
  int status = -1;  // waitpid status
  std::string msg;  // what the rank reported ("" = success)
};

// Forks `n` ranks running fn(rank); waits up to `timeout_s` for all (then kills the rest). A rank passes when it
// returns "" and exits 0; fn may also end the process itself (_exit) to play a dead rank.
inline std::vector<RankResult> RunRanks(int n, const std::function<std::string(int)>& fn, int timeout_s = 120) {
  std::vector<pid_t> pids(static_cast<size_t>(n), -1);
  std::vector<int> fds(static_cast<size_t>(n), -1);
  std::vector<RankResult> out(static_cast<size_t>(n));
  std::fflush(nullptr);
  for (int r = 0; r < n; ++r) {
    int p[2];
    if (pipe(p) != 0) {
      out[static_cast<size_t>(r)].msg = "pipe failed";
      continue;
    }
    pid_t pid = fork();
    if (pid == 0) {
      close(p[0]);
      std::string msg;
      try {
        msg = fn(r);
      } catch (const std::exception& e) {
        msg = std::string("exception: ") + e.what();
      }
      if (msg.empty()) msg = "OK";
      ssize_t w = write(p[1], msg.data(), msg.size());
      (void)w;
      _exit(msg == "OK" ? 0 : 1);
    }
    close(p[1]);
    pids[static_cast<size_t>(r)] = pid;
    fds[static_cast<size_t>(r)] = p[0];
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(timeout_s);
  for (int r = 0; r < n; ++r) {
    const int fd = fds[static_cast<size_t>(r)];
    if (fd < 0) continue;
    std::string msg;
    char buf[4096];
    for (;;) {
      const auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
      pollfd pf{fd, POLLIN, 0};
      if (left.count() <= 0 || poll(&pf, 1, static_cast<int>(left.count())) <= 0) {
        msg += " [timed out: killed]";
        kill(pids[static_cast<size_t>(r)], SIGKILL);
        break;
      }
      ssize_t k = read(fd, buf, sizeof buf);
      if (k <= 0) break;
      msg.append(buf, static_cast<size_t>(k));
    }
    close(fd);
    out[static_cast<size_t>(r)].msg = msg == "OK" ? "" : msg;
  }
  for (int r = 0; r < n; ++r)
    if (pids[static_cast<size_t>(r)] > 0) waitpid(pids[static_cast<size_t>(r)], &out[static_cast<size_t>(r)].status, 0);
  return out;
}

// Passes for ranks whose fn returned "" and exited 0, naming each that did not.
inline void ExpectAllPassed(const std::vector<RankResult>& res, const std::vector<int>& skip = {}) {
  for (size_t r = 0; r < res.size(); ++r) {
    bool skipped = false;
    for (int s : skip) skipped = skipped || static_cast<size_t>(s) == r;
    if (skipped) continue;
    EXPECT_TRUE(res[r].msg.empty() && WIFEXITED(res[r].status) && WEXITSTATUS(res[r].status) == 0)
        << "rank " << r << ": " << (res[r].msg.empty() ? "exited abnormally" : res[r].msg);
  }
}

// A private directory for one test's files.
class TempDir {
 public:
  TempDir() {
    char tmpl[] = "/tmp/tessera-shim-test-XXXXXX";
    path_ = mkdtemp(tmpl) ? tmpl : "/tmp";
  }
  ~TempDir() {
    std::error_code ec;
    if (path_ != "/tmp") std::filesystem::remove_all(path_, ec);
  }
  std::string File(const char* name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

// Rank 0 publishes `bytes` of id; the others wait (up to 30 s) to read them.
inline bool PublishId(const std::string& path, const void* id, size_t bytes) {
  const std::string tmp = path + ".tmp";
  FILE* f = std::fopen(tmp.c_str(), "wb");
  if (!f) return false;
  const bool ok = std::fwrite(id, 1, bytes, f) == bytes;
  std::fclose(f);
  return ok && std::rename(tmp.c_str(), path.c_str()) == 0;
}
inline bool ReadId(const std::string& path, void* id, size_t bytes) {
  for (int i = 0; i < 30000; ++i) {
    if (FILE* f = std::fopen(path.c_str(), "rb")) {
      const bool ok = std::fread(id, 1, bytes, f) == bytes;
      std::fclose(f);
      return ok;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return false;
}

// Sets an environment variable for the life of the object (tests run one at a time).
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    const char* old = std::getenv(name);
    had_ = old != nullptr;
    if (had_) old_ = old;
    setenv(name, value, 1);
  }
  ~ScopedEnv() {
    if (had_)
      setenv(name_.c_str(), old_.c_str(), 1);
    else
      unsetenv(name_.c_str());
  }

 private:
  std::string name_, old_;
  bool had_ = false;
};

}  // namespace shimtest
