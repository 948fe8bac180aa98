// daemon/util: small helpers shared by the daemon, its executor and its client: wall-clock time,
// atomic file writes, random tokens, and process inspection through /proc (start times, sessions).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

#include "tessera/status.hpp"

namespace tessera::daemon {

// Milliseconds since the Unix epoch (wall clock).
int64_t NowMs();
// "2026-11-29 15:04:05" (UTC) from Unix milliseconds; "-" for 0.
std::string FormatMs(int64_t unix_ms);

// Writes `data` to `path` atomically: tmp file, fsync, rename, fsync of the directory.
Status WriteFileAtomic(const std::string& path, const std::string& data, int mode = 0644);
Result<std::string> ReadFile(const std::string& path);
// mkdir -p with `mode` for created directories.
Status MakeDirs(const std::string& path, int mode = 0755);
// 32 hex characters from /dev/urandom.
Result<std::string> RandomToken();

// The start time of a process in clock ticks since boot (field 22 of /proc/PID/stat); -1 if it is gone.
// Together with the pid it identifies a process across pid reuse.
int64_t ProcessStartTicks(pid_t pid);
// True when `pid` exists and is not a zombie.
bool ProcessAlive(pid_t pid);
// Every live process whose session id is `sid` (scan of /proc).
std::vector<pid_t> SessionMembers(pid_t sid);
// Sends `sig` to every live member of session `sid` except `except` and `except2`; returns how many were signalled.
int SignalSession(pid_t sid, int sig, pid_t except, pid_t except2 = 0);

// Splits "a,b, c" into {"a","b","c"} (empty items dropped).
std::vector<std::string> SplitList(const std::string& text);

}  // namespace tessera::daemon
