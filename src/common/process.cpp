// common/process: process liveness and identity from /proc/PID/stat (see process.hpp).
#include "common/process.hpp"

#include <signal.h>

#include <cerrno>
#include <cstdlib>
#include <string>
#include <vector>

#include "common/file.hpp"

namespace tessera {

std::optional<ProcStat> ReadProcStat(pid_t pid) {
  if (pid <= 0) return std::nullopt;
  auto text = ReadFile("/proc/" + std::to_string(pid) + "/stat");
  if (!text.ok()) return std::nullopt;
  // "PID (COMM) STATE ...": COMM may hold spaces and parentheses, so the fields start after the last ')'.
  const std::string& line = *text;
  const auto rp = line.rfind(')');
  if (rp == std::string::npos || rp + 2 > line.size()) return std::nullopt;
  std::vector<std::string> fields;  // fields[0] is field 3
  size_t i = rp + 1;
  while (i < line.size()) {
    while (i < line.size() && (line[i] == ' ' || line[i] == '\n')) ++i;
    const size_t b = i;
    while (i < line.size() && line[i] != ' ' && line[i] != '\n') ++i;
    if (i > b) fields.push_back(line.substr(b, i - b));
  }
  if (fields.size() < 20) return std::nullopt;
  ProcStat s;
  s.state = fields[0].empty() ? '?' : fields[0][0];
  s.session = static_cast<pid_t>(std::strtol(fields[3].c_str(), nullptr, 10));
  s.start_ticks = std::strtoll(fields[19].c_str(), nullptr, 10);
  return s;
}

bool ProcessAlive(pid_t pid) {
  if (pid <= 0) return false;
  if (auto st = ReadProcStat(pid)) return st->state != 'Z' && st->state != 'X';
  // Not in /proc: gone, unless /proc hides it (hidepid) or is not mounted; the kernel knows.
  return ::kill(pid, 0) == 0 || errno == EPERM;
}

int64_t ProcessStartTicks(pid_t pid) {
  auto st = ReadProcStat(pid);
  return st ? st->start_ticks : -1;
}

}  // namespace tessera
