// tests/common/shell.hpp — what the CLI tests share: run a shell command and collect its exit status and
// output (stdout and stderr together), and the tessera binary under test (TESSERA_BIN, set by CMake).
#pragma once

#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace tessera::testing_shell {

struct Proc {
  int status = -1;  // exit status, or 128+signal
  std::string out;  // stdout and stderr
};

inline Proc Shell(const std::string& cmd) {
  Proc r;
  FILE* p = popen((cmd + " 2>&1").c_str(), "r");
  if (!p) return r;
  std::array<char, 4096> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) r.out.append(buf.data(), n);
  int st = pclose(p);
  r.status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
  return r;
}

inline std::string Bin() { return std::getenv("TESSERA_BIN") ? std::getenv("TESSERA_BIN") : "tessera"; }

}  // namespace tessera::testing_shell
