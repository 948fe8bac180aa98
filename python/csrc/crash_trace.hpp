// python/csrc/crash_trace.hpp — TESSERA_TORCH_CRASH_TRACE (crash_trace.cpp).
#pragma once

namespace tessera_torch {

// TESSERA_TORCH_CRASH_TRACE is set: a failed call is also printed to stderr, and InstallCrashTrace takes the signals.
bool CrashTraceOn();
// With TESSERA_TORCH_CRASH_TRACE=1: on a fatal signal, the faulting thread's native stack goes to stderr.
void InstallCrashTrace();

}  // namespace tessera_torch
