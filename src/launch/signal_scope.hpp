// launch/signal_scope: the launcher's signal handling (launch/job): SIGCHLD, SIGINT, SIGTERM and SIGHUP become
// bytes on a self-pipe that the poll loop reads (SIGPIPE is ignored), for the lifetime of a SignalScope. Other
// threads of the launcher may write bytes of their own to the pipe (write_fd) to wake the loop.
#pragma once

#include <signal.h>

#include <map>

#include "tessera/status.hpp"

namespace tessera::launch {

inline constexpr int kHandledSignals[] = {SIGCHLD, SIGINT, SIGTERM, SIGHUP};

// Installs the handlers (and ignores SIGPIPE) for its lifetime; restores the previous ones after.
class SignalScope {
 public:
  SignalScope() = default;
  SignalScope(const SignalScope&) = delete;
  SignalScope& operator=(const SignalScope&) = delete;
  Status Install();
  ~SignalScope();
  int read_fd() const { return read_fd_; }
  int write_fd() const { return write_fd_; }

 private:
  int read_fd_ = -1, write_fd_ = -1;
  bool installed_ = false;
  std::map<int, struct sigaction> old_;
};

}  // namespace tessera::launch
