// launch/sm_share: see sm_share.hpp.
#include "launch/sm_share.hpp"

#include <fmt/format.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "common/env.hpp"
#include "common/log.hpp"

#ifdef TESSERA_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

namespace tessera::launch {

Result<std::map<std::string, int>> ParseSmShares(const std::vector<std::string>& texts,
                                                 const std::vector<IslandSpec>& islands) {
  std::map<std::string, int> out;
  for (const auto& text : texts) {
    const auto eq = text.find('=');
    if (eq == std::string::npos || eq == 0)
      return InvalidArgument(fmt::format("--sm-share '{}' is not VENDOR=PERCENT (e.g. ascend=40)", text));
    const std::string vendor = text.substr(0, eq);
    auto pct = env::ParseInt(fmt::format("--sm-share '{}'", text), text.substr(eq + 1), 1, 100);
    if (!pct.ok()) return pct.status();
    const IslandSpec* island = nullptr;
    for (const auto& i : islands)
      if (i.vendor == vendor) island = &i;
    if (island == nullptr)
      return InvalidArgument(
          fmt::format("--sm-share '{}': there is no island '{}' (give it with --island)", text, vendor));
    if (island->family == nullptr || !island->family->mps)
      return InvalidArgument(
          fmt::format("--sm-share '{}': island '{}' is {}, not a cuda island (SM shares are NVIDIA MPS's)", text,
                      vendor, island->text));
    if (!out.emplace(vendor, static_cast<int>(*pct)).second)
      return InvalidArgument(fmt::format("--sm-share for '{}' is given twice", vendor));
  }
  return out;
}

std::vector<std::pair<std::string, std::string>> SmShareEnvironment(int percent, const std::string& label) {
  std::vector<std::pair<std::string, std::string>> env = {
      {"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", std::to_string(percent)},
      {"TESSERA_SM_SHARE", std::to_string(percent)},
      {"TESSERA_EMULATED", label}};
  if (std::getenv("CUDA_DEVICE_MAX_CONNECTIONS") == nullptr) env.emplace_back("CUDA_DEVICE_MAX_CONNECTIONS", "32");
  return env;
}

std::string EmulatedLabel(const std::string& gpu_name, int percent) {
  return fmt::format("emulated on an SM share of {} ({}%)", gpu_name, percent);
}

std::string CudaDeviceName(int n) {
#ifdef TESSERA_HAVE_CUDA
  cudaDeviceProp p{};
  if (cudaGetDeviceProperties(&p, n) == cudaSuccess) return p.name;
#endif
  return fmt::format("GPU {}", n);
}

namespace {

// Runs `argv` with `env` added, stdin from `input`; returns its exit status and what it printed.
int RunTool(const std::vector<std::string>& argv, const std::vector<std::pair<std::string, std::string>>& env,
            const std::string& input, std::string* output) {
  std::string cmd;
  for (const auto& [k, v] : env) cmd += k + "='" + v + "' ";
  for (const auto& a : argv) cmd += "'" + a + "' ";
  cmd += "2>&1";
  if (!input.empty()) cmd = "echo " + input + " | " + cmd;
  FILE* p = ::popen(cmd.c_str(), "r");
  if (p == nullptr) return -1;
  char buf[512];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), p)) > 0) output->append(buf, n);
  const int st = ::pclose(p);
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

std::string FindOnPath(const std::string& name) {
  const std::string path = env::Get("PATH").value_or("/usr/bin:/bin");
  size_t start = 0;
  while (start <= path.size()) {
    const size_t colon = std::min(path.find(':', start), path.size());
    const std::string dir = path.substr(start, colon - start);
    if (!dir.empty() && ::access((dir + "/" + name).c_str(), X_OK) == 0) return dir + "/" + name;
    start = colon + 1;
  }
  return "";
}

}  // namespace

Result<std::unique_ptr<MpsDaemon>> MpsDaemon::Start() {
  std::string control = FindOnPath("nvidia-cuda-mps-control");
  if (control.empty())
    return Unsupported(
        "--sm-share needs NVIDIA MPS, but nvidia-cuda-mps-control is not on PATH (it comes with the "
        "NVIDIA driver); without MPS an island cannot be limited to a share of a GPU");
  char tmpl[] = "/tmp/tessera-mps-XXXXXX";
  if (::mkdtemp(tmpl) == nullptr) return SystemError(fmt::format("mkdtemp for MPS: {}", std::strerror(errno)));
  std::unique_ptr<MpsDaemon> d(new MpsDaemon());
  d->dir_ = tmpl;
  d->control_ = control;
  std::error_code ec;
  std::filesystem::create_directories(d->dir_ + "/pipe", ec);
  std::filesystem::create_directories(d->dir_ + "/log", ec);
  std::string out;
  const int rc = RunTool({control, "-d"}, d->ClientEnvironment(), "", &out);
  if (rc != 0) {
    std::filesystem::remove_all(d->dir_, ec);
    d->dir_.clear();
    return Unsupported(fmt::format("--sm-share: starting the MPS control daemon ({} -d) failed (exit {}): {}", control,
                                   rc, out.empty() ? "no output" : out));
  }
  TSR_LOG_INFO("tessera run: MPS control daemon started ({})", d->dir_);
  return d;
}

MpsDaemon::~MpsDaemon() {
  if (dir_.empty()) return;
  std::string out;
  (void)RunTool({control_}, ClientEnvironment(), "quit", &out);
  std::error_code ec;
  for (int i = 0; i < 50 && std::filesystem::exists(dir_ + "/pipe/control", ec); ++i) ::usleep(100 * 1000);
  std::filesystem::remove_all(dir_, ec);
}

std::vector<std::pair<std::string, std::string>> MpsDaemon::ClientEnvironment() const {
  return {{"CUDA_MPS_PIPE_DIRECTORY", dir_ + "/pipe"}, {"CUDA_MPS_LOG_DIRECTORY", dir_ + "/log"}};
}

}  // namespace tessera::launch
