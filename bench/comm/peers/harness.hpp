// bench/comm/peers/harness.hpp — helpers shared by the peer harnesses (Gloo, OpenMPI, memcpy): size lists,
// medians, the nccl-tests-style table and the JSON row format that `tessera bench` also writes, so that
// scripts/bench-comm.sh can put every result side by side. Header-only; the peers do not link libtessera.
#pragma once

#include <sys/utsname.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "common/machine.hpp"

namespace tessera::bench {

// One line of the table (sizes in bytes, time in microseconds, bandwidth in GB/s = 1e9 B/s).
struct Row {
  uint64_t bytes = 0;
  uint64_t count = 0;
  double time_us = 0;
  double algbw = 0;
  double busbw = 0;
  int64_t wrong = 0;  // -1: not checked
};

inline nlohmann::json RowJson(const Row& r) {
  return {{"bytes", r.bytes},      {"count", r.count},      {"time_us", r.time_us},
          {"algbw_GBps", r.algbw}, {"busbw_GBps", r.busbw}, {"wrong", r.wrong}};
}

// "4096", "512K", "16M", "1G" (binary units). Throws std::invalid_argument naming the text.
inline uint64_t ParseOneSize(const std::string& text) {
  size_t pos = 0;
  double n = 0;
  try {
    n = std::stod(text, &pos);
  } catch (...) {
    throw std::invalid_argument("size '" + text + "' is not a byte size (use e.g. 4096, 512K, 16M, 1G)");
  }
  std::string unit = text.substr(pos);
  double mult = 1;
  if (unit.empty() || unit == "B")
    mult = 1;
  else if (unit == "K" || unit == "k" || unit == "KiB")
    mult = 1024.0;
  else if (unit == "M" || unit == "MiB")
    mult = 1024.0 * 1024;
  else if (unit == "G" || unit == "GiB")
    mult = 1024.0 * 1024 * 1024;
  else
    throw std::invalid_argument("size '" + text + "' has an unknown unit '" + unit + "' (use K, M or G)");
  if (n < 0 || !std::isfinite(n)) throw std::invalid_argument("size '" + text + "' is negative or not finite");
  return static_cast<uint64_t>(n * mult);
}

// A comma-separated list of sizes and ranges: "16M,64M,256M", "1K:256M:x4" (multiply), "1M:8M:+1M" (add).
inline std::vector<uint64_t> ParseSizes(const std::string& text) {
  std::vector<uint64_t> out;
  size_t start = 0;
  while (start <= text.size()) {
    size_t comma = text.find(',', start);
    std::string item = text.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    if (item.empty()) throw std::invalid_argument("--sizes '" + text + "' has an empty item");
    size_t c1 = item.find(':');
    if (c1 == std::string::npos) {
      out.push_back(ParseOneSize(item));
    } else {
      size_t c2 = item.find(':', c1 + 1);
      uint64_t lo = ParseOneSize(item.substr(0, c1));
      uint64_t hi = ParseOneSize(item.substr(c1 + 1, c2 == std::string::npos ? std::string::npos : c2 - c1 - 1));
      std::string step = c2 == std::string::npos ? "x2" : item.substr(c2 + 1);
      if (lo > hi) throw std::invalid_argument("range '" + item + "' starts above its end");
      if (step.size() < 2 || (step[0] != 'x' && step[0] != '+'))
        throw std::invalid_argument("range '" + item + "': step '" + step + "' must be xFACTOR or +BYTES");
      if (step[0] == 'x') {
        double f = 0;
        try {
          f = std::stod(step.substr(1));
        } catch (...) {
          f = 0;
        }
        if (!(f > 1)) throw std::invalid_argument("range '" + item + "': factor '" + step + "' must be > 1");
        for (double s = static_cast<double>(lo); s <= static_cast<double>(hi) * (1 + 1e-12); s *= f) {
          out.push_back(static_cast<uint64_t>(s));
          if (s == 0) break;
        }
      } else {
        uint64_t inc = ParseOneSize(step.substr(1));
        if (inc == 0) throw std::invalid_argument("range '" + item + "': increment must be > 0");
        for (uint64_t s = lo; s <= hi; s += inc) out.push_back(s);
      }
    }
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return out;
}

inline double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// A required integer environment variable (TESSERA_RANK, ...), or `fallback` names.
inline int EnvInt(const char* name, const char* fallback_name, int lo, int hi) {
  const char* v = std::getenv(name);
  const char* used = name;
  if ((!v || !*v) && fallback_name) {
    v = std::getenv(fallback_name);
    used = fallback_name;
  }
  if (!v || !*v) throw std::invalid_argument(std::string(name) + " is not set (launch under `tessera run`)");
  char* end = nullptr;
  long x = std::strtol(v, &end, 10);
  if (*end || x < lo || x > hi)
    throw std::invalid_argument(std::string(used) + "='" + v + "' is not an integer in [" + std::to_string(lo) + ", " +
                                std::to_string(hi) + "]");
  return static_cast<int>(x);
}

inline nlohmann::json Machine() { return tessera::MachineJson(); }

// nccl-tests busbw factors.
inline double BusFactor(const std::string& collective, int n) {
  if (collective == "allreduce") return n > 1 ? 2.0 * (n - 1) / n : 0;
  if (collective == "reduce_scatter" || collective == "allgather") return n > 1 ? 1.0 * (n - 1) / n : 0;
  return 1.0;  // broadcast
}

inline Row MakeRow(const std::string& collective, int n, uint64_t bytes, uint64_t count, double time_us,
                   int64_t wrong) {
  Row r;
  r.bytes = bytes;
  r.count = count;
  r.time_us = time_us;
  r.algbw = time_us > 0 ? static_cast<double>(bytes) / (time_us * 1e3) : 0;  // B/us / 1e3 = GB/s
  r.busbw = r.algbw * BusFactor(collective, n);
  r.wrong = wrong;
  return r;
}

inline void PrintHeader(const char* title) {
  std::printf("# %s\n", title);
  std::printf("#%13s %12s %8s %6s %12s %10s %10s %8s\n", "size(B)", "count", "type", "redop", "time(us)", "algbw(GB/s)",
              "busbw(GB/s)", "#wrong");
}

inline void PrintRow(const Row& r, const char* type, const char* redop) {
  char wrong[32];
  if (r.wrong < 0)
    std::snprintf(wrong, sizeof wrong, "N/A");
  else
    std::snprintf(wrong, sizeof wrong, "%lld", static_cast<long long>(r.wrong));
  std::printf(" %13llu %12llu %8s %6s %12.1f %10.3f %10.3f %8s\n", static_cast<unsigned long long>(r.bytes),
              static_cast<unsigned long long>(r.count), type, redop, r.time_us, r.algbw, r.busbw, wrong);
  std::fflush(stdout);
}

inline void WriteJson(const std::string& path, const nlohmann::json& j) {
  std::ofstream out(path);
  if (!out) throw std::runtime_error("cannot write --json '" + path + "'");
  out << j.dump(2) << "\n";
  if (!out) throw std::runtime_error("writing --json '" + path + "' failed");
}

// Check values: small integers, so every float sum over ranks is exact.
inline float CheckValue(int rank, uint64_t i) { return static_cast<float>(rank + 1 + static_cast<int>(i % 13)); }
inline float CheckSum(int n, uint64_t i) { return static_cast<float>(n * (n + 1) / 2 + n * static_cast<int>(i % 13)); }

}  // namespace tessera::bench
