// daemon/util: time, tokens and /proc sessions for the daemon.
#include "daemon/util.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <ctime>
#include <fstream>
#include <sstream>

namespace tessera::daemon {

int64_t NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::string FormatMs(int64_t unix_ms) {
  if (unix_ms <= 0) return "-";
  time_t t = static_cast<time_t>(unix_ms / 1000);
  struct tm tm {};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%S", &tm);
  return buf;
}

Status MakeDirs(const std::string& path, int mode) {
  if (path.empty()) return InvalidArgument("empty directory path");
  std::string cur;
  size_t i = 0;
  while (i <= path.size()) {
    size_t j = path.find('/', i);
    if (j == std::string::npos) j = path.size();
    cur = path.substr(0, j);
    if (!cur.empty() && ::mkdir(cur.c_str(), static_cast<mode_t>(mode)) != 0 && errno != EEXIST)
      return ErrnoError("mkdir " + cur, errno);
    i = j + 1;
  }
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
    return SystemError(fmt::format("{} exists and is not a directory", path));
  return Status::Ok();
}

std::vector<pid_t> SessionMembers(pid_t sid) {
  std::vector<pid_t> out;
  if (sid <= 0) return out;
  DIR* d = ::opendir("/proc");
  if (!d) return out;
  while (struct dirent* e = ::readdir(d)) {
    char* end = nullptr;
    long pid = std::strtol(e->d_name, &end, 10);
    if (*end != '\0' || pid <= 0) continue;
    auto st = ReadProcStat(static_cast<pid_t>(pid));
    if (st && st->session == sid && st->state != 'Z' && st->state != 'X') out.push_back(static_cast<pid_t>(pid));
  }
  ::closedir(d);
  return out;
}

int SignalSession(pid_t sid, int sig, pid_t except, pid_t except2) {
  int n = 0;
  for (pid_t p : SessionMembers(sid)) {
    if (p == except || (except2 > 0 && p == except2)) continue;
    if (::kill(p, sig) == 0) ++n;
  }
  return n;
}

std::vector<std::string> SplitList(const std::string& text) {
  std::vector<std::string> out;
  std::string cur;
  for (char c : text + ",") {
    if (c == ',') {
      size_t b = cur.find_first_not_of(" \t"), e = cur.find_last_not_of(" \t");
      if (b != std::string::npos) out.push_back(cur.substr(b, e - b + 1));
      cur.clear();
    } else {
      cur += c;
    }
  }
  return out;
}

}  // namespace tessera::daemon
