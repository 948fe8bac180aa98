// comm/device/device_trace: TESSERA_DEVICE_TRACE's writer, shared by both device ranks (device.hpp, DeviceTrace).
#include <fmt/format.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>

#include "comm/device/device.hpp"
#include "common/env.hpp"
#include "common/log.hpp"

namespace tessera::comm {

void DeviceTrace::Open(int rank, std::string header) {
  const std::string prefix = env::Get("TESSERA_DEVICE_TRACE").value_or("");
  path_ = prefix.empty() ? "" : fmt::format("{}.rank{}", prefix, rank);
  header_ = std::move(header);
}

double DeviceTrace::NowUs() {
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

void DeviceTrace::Write() const {
  if (!on()) return;
  FILE* f = std::fopen(path_.c_str(), "w");
  if (f == nullptr) {
    TSR_LOG_WARN("TESSERA_DEVICE_TRACE: cannot write {}: {}", path_, std::strerror(errno));
    return;
  }
  std::fprintf(f, "%s\n", header_.c_str());
  for (const std::string& r : rows_) std::fprintf(f, "%s\n", r.c_str());
  if (std::fclose(f) != 0) TSR_LOG_WARN("TESSERA_DEVICE_TRACE: cannot write {}: {}", path_, std::strerror(errno));
}

}  // namespace tessera::comm
