// python/csrc/crash_trace.cpp — tessera._C's crash trace (TESSERA_TORCH_CRASH_TRACE=1; scripts/torch-check.sh
// turns it on for every rank): the native stack of a thread that dies of a fatal signal, for addr2line.
#include "crash_trace.hpp"

#include <dlfcn.h>
#include <execinfo.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace tessera_torch {

bool CrashTraceOn() {
  static const bool on = [] {
    const char* v = std::getenv("TESSERA_TORCH_CRASH_TRACE");
    return v != nullptr && *v != '\0' && std::strcmp(v, "0") != 0;
  }();
  return on;
}

// TESSERA_TORCH_CRASH_TRACE=1: on SIGSEGV/SIGBUS/SIGFPE/SIGILL/SIGABRT, write this thread's native stack to
// stderr (module+offset per frame; scripts/torch-check.sh resolves them with addr2line), then hand the
// signal to the handler that was there before (Python's faulthandler prints the Python stacks when
// PYTHONFAULTHANDLER=1). Off by default: a library does not take over a host program's signals.
namespace {
constexpr int kCrashSignals[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT};
struct sigaction g_previous[sizeof(kCrashSignals) / sizeof(kCrashSignals[0])];

void CrashTrace(int sig, siginfo_t* info, void* ctx) {
  static const char head[] = "tessera._C: fatal signal, native stack of the faulting thread:\n";
  (void)!write(2, head, sizeof(head) - 1);
  void* frames[64];
  const int n = backtrace(frames, 64);
  backtrace_symbols_fd(frames, n, 2);
  // The same frames as module(+offset), for addr2line (the names above are only the nearest exported ones).
  for (int i = 0; i < n; ++i) {
    Dl_info di{};
    if (dladdr(frames[i], &di) == 0 || di.dli_fname == nullptr) continue;
    char line[512];
    const int len = std::snprintf(
        line, sizeof(line), "frame %d: %s(+0x%lx)\n", i, di.dli_fname,
        static_cast<unsigned long>(reinterpret_cast<uintptr_t>(frames[i]) - reinterpret_cast<uintptr_t>(di.dli_fbase)));
    if (len > 0) (void)!write(2, line, static_cast<size_t>(std::min(len, static_cast<int>(sizeof(line)) - 1)));
  }
  for (size_t i = 0; i < sizeof(kCrashSignals) / sizeof(kCrashSignals[0]); ++i) {
    if (kCrashSignals[i] != sig) continue;
    const struct sigaction& prev = g_previous[i];
    if ((prev.sa_flags & SA_SIGINFO) && prev.sa_sigaction != nullptr) {
      prev.sa_sigaction(sig, info, ctx);
      return;
    }
    if (prev.sa_handler != SIG_DFL && prev.sa_handler != SIG_IGN && prev.sa_handler != nullptr) {
      prev.sa_handler(sig);
      return;
    }
  }
  signal(sig, SIG_DFL);
  raise(sig);
}

}  // namespace

void InstallCrashTrace() {
  if (!CrashTraceOn()) return;
  void* warm[1];
  (void)backtrace(warm, 1);  // loads libgcc's unwinder now, not inside the signal handler
  for (size_t i = 0; i < sizeof(kCrashSignals) / sizeof(kCrashSignals[0]); ++i) {
    struct sigaction sa {};
    sa.sa_sigaction = CrashTrace;
    sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
    sigemptyset(&sa.sa_mask);
    sigaction(kCrashSignals[i], &sa, &g_previous[i]);
  }
}

}  // namespace tessera_torch
