// common/machine: a JSON description of this machine (kernel, CPU model, core count) for benchmark
// results, shared by `tessera bench` and the peer harnesses in bench/. Header-only so the peers, which do
// not link libtessera, can use it too.
#pragma once

#include <sys/utsname.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>

namespace tessera {

inline nlohmann::json MachineJson() {
  struct utsname u {};
  uname(&u);
  std::string cpu = "unknown";
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("model name", 0) == 0) {
      auto p = line.find(':');
      if (p != std::string::npos) cpu = line.substr(p + 2);
      break;
    }
  }
  return {{"uname", std::string(u.sysname) + " " + u.release + " " + u.machine},
          {"hostname", u.nodename},
          {"cpu", cpu},
          {"cores", static_cast<int>(std::thread::hardware_concurrency())}};
}

}  // namespace tessera
