// common/process: whether a process is alive, and what identifies it across pid reuse — read from
// /proc/PID/stat (state, session, start time), with kill(pid, 0) where /proc does not show the process (not
// mounted, or hidden by hidepid). Used by comm (a same-host peer's rank died) and the daemon (its job shims).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <optional>

namespace tessera {

// Fields of /proc/PID/stat.
struct ProcStat {
  char state = '?';         // field 3: R, S, D, Z (zombie), X (dead), ...
  pid_t session = 0;        // field 6
  int64_t start_ticks = 0;  // field 22: start time in clock ticks since boot
};
// nullopt when the process does not exist (or /proc does not show it) or pid <= 0.
std::optional<ProcStat> ReadProcStat(pid_t pid);

// True when `pid` (> 0) exists and is not a zombie. Where /proc does not show it, kill(pid, 0) decides (a
// process of another user counts as alive).
bool ProcessAlive(pid_t pid);
// The start time of a process (field 22 of /proc/PID/stat); -1 if it is gone. With the pid it identifies a
// process across pid reuse.
int64_t ProcessStartTicks(pid_t pid);

}  // namespace tessera
