// tests/daemon/harness: daemon process control and helpers for the daemon's end-to-end tests.
#include "daemon/harness.hpp"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <thread>

#include "daemon/security.hpp"

namespace tessera::daemon::testing {

std::string Bin() {
  const char* b = std::getenv("TESSERA_BIN");
  return b ? b : "tessera";
}
std::string SourceDir() {
  const char* s = std::getenv("TESSERA_SOURCE_DIR");
  return s ? s : ".";
}

int Shell(const std::string& cmd, std::string* out) {
  FILE* p = ::popen(cmd.c_str(), "r");
  if (!p) return -1;
  char buf[4096];
  std::string s;
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) s.append(buf, n);
  int st = ::pclose(p);
  if (out) *out = s;
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

bool HaveLauncher() {
  static int have = -1;
  if (have < 0) have = Shell(Bin() + " run --help >/dev/null 2>&1") == 0 ? 1 : 0;
  return have == 1;
}

bool HaveComm() {
  static int have = -1;
  if (have < 0) {
#ifdef TESSERA_TRAINER_BIN
    have = HaveLauncher() && Shell("timeout 60 " + Bin() + " run --island ascend=host:1 --island nvidia=host:1 -- " +
                                   TESSERA_TRAINER_BIN + " --steps 2 --data synthetic >/dev/null 2>&1") == 0
               ? 1
               : 0;
#else
    have = 0;
#endif
  }
  return have == 1;
}

std::string MakeTempDir(const std::string& tag) {
  std::string t = "/tmp/tessera-daemon-" + tag + "-XXXXXX";
  std::vector<char> buf(t.begin(), t.end());
  buf.push_back('\0');
  const char* d = ::mkdtemp(buf.data());
  EXPECT_NE(d, nullptr);
  return d ? d : "/tmp";
}

Curve ReadCurve(const std::string& path) {
  Curve c;
  std::ifstream f(path);
  int64_t s;
  double l;
  std::string b;
  while (f >> s >> l >> b) {
    c.steps.push_back(s);
    c.loss.push_back(l);
    c.bits.push_back(b);
  }
  return c;
}

void WriteText(const std::string& path, const std::string& text) {
  std::ofstream f(path);
  f << text;
}

std::string ReadText(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

bool Exists(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0;
}

bool WaitFor(const std::function<bool()>& pred, std::chrono::milliseconds timeout) {
  auto end = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < end) {
    if (pred()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return pred();
}

DaemonProcess::DaemonProcess(std::string state_dir, std::vector<std::string> extra)
    : state_(std::move(state_dir)), extra_(std::move(extra)) {}

DaemonProcess::~DaemonProcess() {
  if (pid_ > 0) Stop();
  // Jobs run in their own sessions and outlive the daemon: stop what this test left running.
  Shell("for f in " + state_ +
        "/jobs/*/attempt-*/pid.json; do [ -f \"$f\" ] || continue; "
        "[ -f \"$(dirname $f)/exit.json\" ] && continue; "
        "p=$(sed 's/.*\"shim\":\\([0-9]*\\).*/\\1/' \"$f\"); pkill -KILL -s \"$p\" 2>/dev/null; done");
}

void DaemonProcess::Start() {
  ASSERT_TRUE(HaveLauncher()) << Bin() << " has no `run` subcommand: the daemon's executor needs the launcher";
  std::vector<std::string> args = prefix_;
  args.push_back(Bin());
  args.insert(args.end(), {"daemon", "--state-dir", state_, "--port", "0", "--tick", "50ms"});
  for (const auto& e : extra_) args.push_back(e);
  ::unlink((state_ + "/daemon.json").c_str());
  pid_ = ::fork();
  ASSERT_GE(pid_, 0);
  if (pid_ == 0) {
    int fd = ::open((state_ + ".daemon.log").c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
    if (fd >= 0) {
      ::dup2(fd, 1);
      ::dup2(fd, 2);
    }
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    ::setenv("TESSERA_LOG", "info", 1);
    // As `make demo` and the README run it: jobs must not learn the state directory from this.
    ::setenv("TESSERA_HOME", state_.c_str(), 1);
    ::execvp(argv[0], argv.data());
    _exit(127);
  }
  bool up = WaitFor(
      [&] {
        if (!Exists(state_ + "/daemon.json")) return false;
        auto c = ClientFor("");
        return c && c->Get("/v1/health").ok();
      },
      std::chrono::seconds(30));
  ASSERT_TRUE(up) << "the daemon did not come up; log:\n" << ReadText(state_ + ".daemon.log");
}

void DaemonProcess::Kill9() {
  if (pid_ <= 0) return;
  ::kill(pid_, SIGKILL);
  ::waitpid(pid_, nullptr, 0);
  pid_ = -1;
}

void DaemonProcess::Stop() {
  if (pid_ <= 0) return;
  ::kill(pid_, SIGTERM);
  ::waitpid(pid_, nullptr, 0);
  pid_ = -1;
}

std::unique_ptr<Client> DaemonProcess::ClientFor(const std::string& token) {
  ClientOptions o;
  o.state_dir = state_;
  o.token = token;
  auto c = Client::Connect(o);
  if (!c.ok()) return nullptr;
  return std::move(c).value();
}

std::string SleepJobYaml(const std::string& name, int priority, int cards, double seconds,
                         const std::string& out_prefix, const std::string& compatible, const std::string& extra) {
  std::ostringstream y;
  y << "name: " << name << "\npriority: " << priority << "\nclass: mlp-train\ncards: " << cards
    << "\ncompatible: " << compatible << "\ncommand: [" << SourceDir() << "/tests/daemon/sleep_job.sh, \"" << seconds
    << "\"]\nenv: {OUT_PREFIX: \"" << out_prefix << "\"}\ngrace: 5s\n"
    << extra;
  return y.str();
}

std::string WriteTenantsFile(const std::string& path, const std::vector<std::pair<std::string, std::string>>& tenants) {
  std::string y = "tenants:\n";
  for (const auto& [name, token] : tenants) y += "  - {name: " + name + ", token_sha256: " + TokenHash(token) + "}\n";
  WriteText(path, y);
  EXPECT_EQ(::chmod(path.c_str(), 0600), 0);
  return path;
}

nlohmann::json Doc(const std::string& source, const std::string& yaml) { return {{"source", source}, {"yaml", yaml}}; }

std::string ExpositionProblems(const std::string& text) {
  std::string problems;
  auto problem = [&](const std::string& p) { problems += p + "\n"; };
  std::map<std::string, std::string> type_of;           // family -> its TYPE
  std::map<std::string, int> helps, types;              // family -> times declared
  std::set<std::string> with_samples, series;           // families that had samples; "name{labels}"
  std::map<std::string, std::set<std::string>> labels;  // family -> the label names of its series (without le)
  std::string current;                                  // the family declared last
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (line.empty()) continue;
    if (line.rfind("# HELP ", 0) == 0 || line.rfind("# TYPE ", 0) == 0) {
      std::istringstream f(line.substr(7));
      std::string name, type;
      f >> name >> type;
      if (with_samples.count(name)) problem(line + ": after the family's samples");
      if (line[2] == 'H' && ++helps[name] > 1) problem("# HELP of " + name + " repeated");
      if (line[2] == 'T' && ++types[name] > 1) problem("# TYPE of " + name + " repeated");
      if (line[2] == 'T') type_of[name] = type;
      current = name;
      continue;
    }
    if (line[0] == '#') continue;
    const size_t brace = line.find('{'), space = line.find(' ');
    const std::string name = line.substr(0, std::min(brace, space));
    std::string family = name;
    for (const char* suffix : {"_bucket", "_sum", "_count"}) {
      const std::string sx = suffix;
      if (name.size() > sx.size() && name.compare(name.size() - sx.size(), sx.size(), sx) == 0 &&
          type_of.count(name.substr(0, name.size() - sx.size())) &&
          type_of[name.substr(0, name.size() - sx.size())] == "histogram")
        family = name.substr(0, name.size() - sx.size());
    }
    if (family != current) problem(line + ": a sample outside its family's block (declared last: " + current + ")");
    if (!helps.count(family) || !types.count(family)) problem(line + ": no # HELP and # TYPE for " + family);
    with_samples.insert(family);
    std::string key = brace < space ? line.substr(0, line.find('}') + 1) : name;
    if (!series.insert(key).second) problem(key + ": the same series twice");
    std::set<std::string> names;
    if (brace < space) {
      // label="value",... (values may hold escaped quotes)
      size_t i = brace + 1;
      while (i < line.size() && line[i] != '}') {
        size_t eq = line.find('=', i);
        if (eq == std::string::npos) break;
        if (line.substr(i, eq - i) != "le") names.insert(line.substr(i, eq - i));
        i = eq + 2;
        while (i < line.size() && line[i] != '"') i += line[i] == '\\' ? 2 : 1;
        i += 1;
        if (i < line.size() && line[i] == ',') ++i;
      }
    }
    auto [it, first] = labels.emplace(family + "|" + name, names);
    if (!first && it->second != names) {
      std::string a, b;
      for (const auto& n : it->second) a += n + " ";
      for (const auto& n : names) b += n + " ";
      problem(name + ": series with different label names ({ " + a + "} and { " + b + "})");
    }
  }
  for (const auto& [name, n] : helps)
    if (!types.count(name)) problem("# HELP of " + name + " without its # TYPE");
  return problems;
}

}  // namespace tessera::daemon::testing
