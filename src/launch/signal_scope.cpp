// launch/signal_scope: the launcher's signal handlers and self-pipe (see signal_scope.hpp).
#include "launch/signal_scope.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>

namespace tessera::launch {
namespace {

int g_signal_pipe = -1;  // write end of the self-pipe, for the signal handler

void OnSignal(int sig) {
  const int saved = errno;
  const unsigned char b = static_cast<unsigned char>(sig);
  if (g_signal_pipe >= 0) (void)!::write(g_signal_pipe, &b, 1);
  errno = saved;
}

}  // namespace

Status SignalScope::Install() {
  int p[2];
  if (::pipe2(p, O_CLOEXEC | O_NONBLOCK) != 0) return ErrnoError("tessera run: pipe", errno);
  read_fd_ = p[0];
  write_fd_ = p[1];
  g_signal_pipe = write_fd_;
  struct sigaction sa {};
  sa.sa_handler = OnSignal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  for (int sig : kHandledSignals) {
    struct sigaction one = sa;
    if (sig == SIGCHLD) one.sa_flags |= SA_NOCLDSTOP;
    ::sigaction(sig, &one, &old_[sig]);
  }
  struct sigaction ign {};
  ign.sa_handler = SIG_IGN;
  ::sigaction(SIGPIPE, &ign, &old_[SIGPIPE]);
  installed_ = true;
  return Status::Ok();
}

SignalScope::~SignalScope() {
  if (installed_) {
    for (auto& [sig, sa] : old_) ::sigaction(sig, &sa, nullptr);
    g_signal_pipe = -1;
  }
  if (read_fd_ >= 0) ::close(read_fd_);
  if (write_fd_ >= 0) ::close(write_fd_);
}

}  // namespace tessera::launch
