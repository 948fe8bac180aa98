// daemon/util: small helpers shared by the daemon, its executor and its client: wall-clock time,
// random tokens, and sessions of processes through /proc. Files (ReadFile, WriteFileAtomic) are
// common/file's, process liveness and start times (ProcessAlive, ProcessStartTicks) common/process's.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

#include "common/file.hpp"
#include "common/process.hpp"
#include "tessera/status.hpp"

namespace tessera::daemon {

// Milliseconds since the Unix epoch (wall clock).
int64_t NowMs();
// "2026-11-29 15:04:05" (UTC) from Unix milliseconds; "-" for 0.
std::string FormatMs(int64_t unix_ms);

// mkdir -p with `mode` for created directories.
Status MakeDirs(const std::string& path, int mode = 0755);

// Every live process whose session id is `sid` (scan of /proc).
std::vector<pid_t> SessionMembers(pid_t sid);
// Sends `sig` to every live member of session `sid` except `except` and `except2`; returns how many were signalled.
int SignalSession(pid_t sid, int sig, pid_t except, pid_t except2 = 0);

// Splits "a,b, c" into {"a","b","c"} (empty items dropped).
std::vector<std::string> SplitList(const std::string& text);

}  // namespace tessera::daemon
