// launch/launcher: `tessera run` — plans the ranks of a job, starts its store and its rank processes,
// prefixes and forwards their output, forwards signals, and stops the job when a rank fails.
//
// One thread does everything after start-up: a poll loop over the ranks' stdout/stderr pipes and a
// self-pipe that the signal handlers (SIGCHLD, SIGINT, SIGTERM, SIGHUP) write to. Each rank runs in its
// own process group, so that a terminal's Ctrl-C reaches the launcher only (which forwards it once) and
// stopping a rank also stops the processes it started. Ranks die with the launcher (PR_SET_PDEATHSIG).
//
// This file: the front — islands and ranks (--island, numbering, devices), each rank's environment, the
// dry-run table, and Run(), which checks the layout and hands this node's ranks to job.cpp (the
// processes: start, output, signals, failures). Several nodes: nodes.cpp (each node's block of
// ranks, the token file, the route to the store); inside Slurm: slurm.cpp (the node layout, the
// store's host and port from SLURM_*, heterogeneous jobs included).
#include "launch/launcher.hpp"

#include <fmt/format.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <set>

#include "comm/runtime/runtime.hpp"
#include "comm/store/store.hpp"
#include "common/env.hpp"
#include "common/log.hpp"
#include "launch/internal.hpp"
#include "launch/sm_share.hpp"

namespace tessera::launch {

using comm::FormatDuration;

using std::chrono::milliseconds;

// ---- planning ----------------------------------------------------------------------------------------

Result<IslandSpec> ParseIsland(const std::string& text) {
  const std::string usage = "use VENDOR=DEVICE:COUNT, e.g. --island ascend=host:3";
  const size_t eq = text.find('=');
  if (eq == std::string::npos) return InvalidArgument(fmt::format("--island '{}' has no '=': {}", text, usage));
  IslandSpec spec;
  spec.text = text;
  spec.vendor = text.substr(0, eq);
  if (spec.vendor.empty()) return InvalidArgument(fmt::format("--island '{}' has no vendor name: {}", text, usage));
  for (char c : spec.vendor) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_' && c != '-')
      return InvalidArgument(fmt::format("vendor name '{}' in --island '{}' may only have letters, digits, '_' and '-'",
                                         spec.vendor, text));
  }
  const std::string rest = text.substr(eq + 1);
  const size_t colon = rest.rfind(':');
  if (colon == std::string::npos)
    return InvalidArgument(fmt::format("--island '{}' has no ':COUNT' (how many ranks): {}", text, usage));
  const std::string device = rest.substr(0, colon);
  const std::string count = rest.substr(colon + 1);
  if (device != "host") {
    spec.family = FindDeviceFamily(device);
    if (spec.family == nullptr)
      return InvalidArgument(fmt::format("unknown device '{}' in --island '{}': use {}", device, text, DeviceWords()));
  }
  const bool digits = !count.empty() && count.size() <= 9 &&
                      std::all_of(count.begin(), count.end(), [](char c) { return c >= '0' && c <= '9'; });
  if (!digits || std::stoi(count) < 1)
    return InvalidArgument(fmt::format("rank count '{}' in --island '{}' is not a positive integer", count, text));
  spec.count = std::stoi(count);
  if (spec.count > kMaxWorldSize)
    return InvalidArgument(
        fmt::format("rank count {} in --island '{}' is more than {} ranks", spec.count, text, kMaxWorldSize));
  return spec;
}

Result<std::vector<IslandSpec>> ParseIslands(const std::vector<std::string>& texts) {
  if (texts.empty())
    return InvalidArgument("no --island given: name at least one, e.g. --island ascend=host:3 --island nvidia=host:5");
  std::vector<IslandSpec> islands;
  int world = 0;
  for (const auto& text : texts) {
    TSR_ASSIGN_OR_RETURN(IslandSpec spec, ParseIsland(text));
    for (const auto& other : islands) {
      if (other.vendor == spec.vendor)
        return InvalidArgument(
            fmt::format("vendor '{}' is given twice (--island '{}' and --island '{}'): "
                        "each island is one vendor; give it once with the total count",
                        spec.vendor, other.text, spec.text));
    }
    world += spec.count;
    if (world > kMaxWorldSize)
      return InvalidArgument(
          fmt::format("the islands add up to {} ranks or more; one launcher starts at most {}", world, kMaxWorldSize));
    islands.push_back(std::move(spec));
  }
  return islands;
}

std::string LayoutString(const std::vector<IslandSpec>& islands) {
  std::string out;
  for (const auto& i : islands)
    out += fmt::format("{}{}={}:{}", out.empty() ? "" : ",", i.vendor, i.family ? i.family->prefix : "host", i.count);
  return out;
}

DeviceCounts CountVisibleDevices(const std::vector<IslandSpec>& islands) {
  DeviceCounts out;
  for (const IslandSpec& i : islands) {
    if (i.family == nullptr || out.count(i.family->prefix)) continue;
    VisibleDevices v;
    v.count = comm::VisibleDeviceCount(*i.family, &v.why);
    out.emplace(i.family->prefix, std::move(v));
  }
  return out;
}

DeviceCounts SameDeviceCount(int count, const std::string& why) {
  DeviceCounts out;
  for (const DeviceFamily& f : kDeviceFamilies) out[f.prefix] = VisibleDevices{count, why};
  return out;
}

namespace internal {
Result<std::string> DeviceDealer::Next(const IslandSpec& island, const std::string& where) {
  const DeviceFamily& family = *island.family;
  VisibleDevices devices;
  if (auto it = visible_.find(family.prefix); it != visible_.end()) devices = it->second;
  if (devices.count < 1)
    return Unsupported(fmt::format("--island '{}' needs {} devices{}, but no {} device is visible on this machine{}",
                                   island.text, family.label, where, family.label,
                                   devices.why.empty() ? "" : " (" + devices.why + ")"));
  int& n = next_[family.prefix];
  const std::string name = DeviceName{&family, n}.ToString();
  n = (n + 1) % devices.count;
  return name;
}
}  // namespace internal

std::string SharedDeviceNote(const std::vector<RankSpec>& ranks, const std::vector<IslandSpec>& islands,
                             const std::map<std::string, int>& sm_share) {
  std::map<std::string, std::vector<int>> by_device;  // device -> the islands of its ranks, in order, once each
  for (const RankSpec& r : ranks) {
    const IslandSpec& island = islands[static_cast<size_t>(r.island)];
    if (island.family == nullptr || !island.family->mps) continue;
    std::vector<int>& on = by_device[r.device];
    if (std::find(on.begin(), on.end(), r.island) == on.end()) on.push_back(r.island);
  }
  for (const auto& [device, on] : by_device) {
    if (on.size() < 2) continue;
    std::string names, shares;
    bool outside = false;
    for (int i : on) {
      const std::string& vendor = islands[static_cast<size_t>(i)].vendor;
      names += (names.empty() ? "" : ", ") + vendor;
      shares += fmt::format(" --sm-share {}={}", vendor, 100 / static_cast<int>(on.size()));
      outside |= sm_share.count(vendor) == 0;
    }
    if (!outside) continue;
    return fmt::format(
        "islands {} share {} as separate processes outside NVIDIA MPS: the GPU runs them in turns, a "
        "fixed cost on every call between them (docs/devices.md, \"Limits\");{} runs them under MPS",
        names, device, shares);
  }
  return "";
}

Result<std::vector<RankSpec>> PlanRanks(const std::vector<IslandSpec>& islands, const DeviceCounts& visible) {
  std::vector<RankSpec> ranks;
  internal::DeviceDealer devices(visible);
  for (size_t i = 0; i < islands.size(); ++i) {
    const IslandSpec& island = islands[i];
    for (int k = 0; k < island.count; ++k) {
      RankSpec r;
      r.rank = static_cast<int>(ranks.size());
      r.local_rank = r.rank;
      r.island = static_cast<int>(i);
      r.vendor = island.vendor;
      if (island.family != nullptr) {
        TSR_ASSIGN_OR_RETURN(r.device, devices.Next(island));
      } else {
        r.device = "host";
      }
      ranks.push_back(std::move(r));
    }
  }
  return ranks;
}

std::vector<std::pair<std::string, std::string>> RankEnvironment(const RankSpec& rank, int world_size,
                                                                 const std::string& layout,
                                                                 const std::string& store_address,
                                                                 const std::string& token, milliseconds timeout,
                                                                 int master_port, const std::string& visible_gpus,
                                                                 int local_world_size, const std::string& master_addr) {
  // A device rank sees only its own device (its family's visible-devices variable, CUDA_VISIBLE_DEVICES for
  // cuda), as under Slurm's --gpus-per-task, so inside the process its device is PREFIX:0. `visible_gpus`
  // is the launcher's own value of that variable, whose N-th entry is device N here.
  std::string device = rank.device;
  std::string visible;  // the value of the family's visible-devices variable for this rank
  const DeviceFamily* family = nullptr;
  if (auto parsed = ParseDeviceName(device, "device"); parsed.ok() && !parsed->host()) {
    family = parsed->family;
    visible = std::to_string(parsed->index);
    if (!visible_gpus.empty()) {
      std::vector<std::string> ids;
      size_t start = 0;
      while (start <= visible_gpus.size()) {
        const size_t comma = std::min(visible_gpus.find(',', start), visible_gpus.size());
        ids.push_back(visible_gpus.substr(start, comma - start));
        start = comma + 1;
      }
      const size_t n = std::strtoul(visible.c_str(), nullptr, 10);  // PlanRanks wrote it: a device index
      if (n < ids.size()) visible = ids[n];
    }
    device = DeviceName{family, 0}.ToString();
  }
  std::vector<std::pair<std::string, std::string>> vars = {
      {"TESSERA_RANK", std::to_string(rank.rank)},
      {"TESSERA_WORLD_SIZE", std::to_string(world_size)},
      {"TESSERA_ISLAND", std::to_string(rank.island)},
      {"TESSERA_ISLAND_VENDOR", rank.vendor},
      {"TESSERA_DEVICE", device},
      {"TESSERA_LOCAL_RANK", std::to_string(rank.local_rank)},
      {"TESSERA_ISLANDS", layout},
      {"TESSERA_STORE", store_address},
      {"TESSERA_TOKEN", token},
      {"TESSERA_TIMEOUT", FormatDuration(timeout)},
      // torchrun's variables, so that a script written for torchrun (init_process_group with env://)
      // runs unchanged; on one machine the local world is the world.
      {"RANK", std::to_string(rank.rank)},
      {"WORLD_SIZE", std::to_string(world_size)},
      {"LOCAL_RANK", std::to_string(rank.local_rank)},
      {"LOCAL_WORLD_SIZE", std::to_string(local_world_size > 0 ? local_world_size : world_size)},
  };
  if (master_port > 0) {
    vars.emplace_back("MASTER_ADDR", master_addr);
    vars.emplace_back("MASTER_PORT", std::to_string(master_port));
  }
  if (family != nullptr) vars.emplace_back(family->visible_env, visible);
  return vars;
}

Result<int> FreeLoopbackPort() {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return SystemError(fmt::format("socket: {}", std::strerror(errno)));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    const int e = errno;
    ::close(fd);
    return SystemError(fmt::format("finding a free loopback port for MASTER_PORT: {}", std::strerror(e)));
  }
  ::close(fd);
  return static_cast<int>(ntohs(addr.sin_port));
}

std::string FormatRankTable(const std::vector<RankSpec>& ranks, const std::string& layout) {
  std::set<int> islands;
  size_t vw = 6, dw = 6;
  for (const auto& r : ranks) {
    islands.insert(r.island);
    vw = std::max(vw, r.vendor.size());
    dw = std::max(dw, r.device.size());
  }
  std::string out = fmt::format("{} rank{} in {} island{}: {}\n", ranks.size(), ranks.size() == 1 ? "" : "s",
                                islands.size(), islands.size() == 1 ? "" : "s", layout);
  out +=
      fmt::format("{:>4}  {:>6}  {:<{}}  {:<{}}  {:>10}\n", "rank", "island", "vendor", vw, "device", dw, "local_rank");
  for (const auto& r : ranks)
    out += fmt::format("{:>4}  {:>6}  {:<{}}  {:<{}}  {:>10}\n", r.rank, r.island, r.vendor, vw, r.device, dw,
                       r.local_rank);
  return out;
}

std::string SignalName(int sig) {
  const char* abbrev = ::sigabbrev_np(sig);
  if (abbrev == nullptr) return fmt::format("signal {}", sig);
  return std::string("SIG") + abbrev;
}

// ---- running -----------------------------------------------------------------------------------------

namespace {

// The path to exec for `name`: as given when it has a '/', else the first executable file on PATH.
Result<std::string> ResolveProgram(const std::string& name) {
  if (name.empty()) return InvalidArgument("the program name is empty");
  if (name.find('/') != std::string::npos) return name;
  const char* path_env = std::getenv("PATH");
  const std::string path = path_env != nullptr ? path_env : "/usr/local/bin:/usr/bin:/bin";
  size_t start = 0;
  for (;;) {
    const size_t colon = path.find(':', start);
    std::string dir = path.substr(start, colon == std::string::npos ? std::string::npos : colon - start);
    if (dir.empty()) dir = ".";
    const std::string candidate = dir + "/" + name;
    struct stat st {};
    if (::stat(candidate.c_str(), &st) == 0 && S_ISREG(st.st_mode) && ::access(candidate.c_str(), X_OK) == 0)
      return candidate;
    if (colon == std::string::npos) break;
    start = colon + 1;
  }
  return NotFound(fmt::format("{}: command not found in PATH", name));
}

}  // namespace

int Run(const Options& options) {
  auto fail = [](int code, const std::string& message) {
    std::fprintf(stderr, "tessera run: %s\n", message.c_str());
    return code;
  };
  const DeviceCounts visible = CountVisibleDevices(options.islands);
  const bool multi = options.nnodes > 1 || !options.store_host.empty();
  int world = 0;
  for (const auto& i : options.islands) world += i.count;
  auto plan = multi ? PlanNodeRanks(options.islands, options.nnodes, options.node_rank, visible, options.local_offset)
                    : PlanRanks(options.islands, visible);
  if (!plan.ok()) return fail(2, (options.origin.empty() ? "" : options.origin + ": ") + plan.status().message());
  if (plan->empty()) return fail(2, "no ranks to start: give at least one --island");
  const std::string layout = LayoutString(options.islands);
  if (multi && options.store_host.empty())
    return fail(2, fmt::format("{}: --nnodes {} needs --store HOST:PORT (node 0's address; node 0 may give port 0 "
                               "to pick one)",
                               options.origin.empty() ? "tessera run" : options.origin, options.nnodes));
  if (multi && options.node_rank != 0 && options.store_port == 0)
    return fail(2, fmt::format("node {} needs the store's port: --store {}:PORT (node 0 prints it)", options.node_rank,
                               options.store_host));
  if (multi && options.token.empty() && !options.dry_run)
    return fail(2,
                "a job on several nodes needs the same job token on every node: set TESSERA_TOKEN (e.g. export "
                "TESSERA_TOKEN=$(openssl rand -hex 16)) or pass --token-file FILE (mode 0600); it is never "
                "taken from the command line");
  if (std::string note = SharedDeviceNote(*plan, options.islands, options.sm_share); !note.empty())
    std::fprintf(stderr, "tessera run: note: %s\n", note.c_str());
  if (options.dry_run) {
    if (multi)
      std::fprintf(stdout, "node %d of %d (%s): ranks %d-%d of %d, store %s:%d\n", options.node_rank, options.nnodes,
                   options.origin.empty() ? "--nnodes/--node-rank" : options.origin.c_str(), plan->front().rank,
                   plan->back().rank, world, options.store_host.c_str(), options.store_port);
    std::fputs(FormatRankTable(*plan, layout).c_str(), stdout);
    std::fprintf(stdout, "TESSERA_TIMEOUT=%s\n", FormatDuration(options.timeout).c_str());
    std::fflush(stdout);
    return 0;
  }
  if (options.program.empty())
    return fail(2, "no program given: tessera run --island VENDOR=DEVICE:COUNT -- PROGRAM ARGS...");
  auto path = ResolveProgram(options.program[0]);
  if (!path.ok()) return fail(127, "cannot start rank 0: " + path.status().message());
  // Emulated islands: an MPS daemon for the job, and each such island's share and label.
  std::unique_ptr<MpsDaemon> mps;
  std::vector<std::pair<std::string, std::string>> extra_env;
  std::map<int, std::vector<std::pair<std::string, std::string>>> island_env;
  if (!options.sm_share.empty()) {
    auto started = MpsDaemon::Start();
    if (!started.ok()) return fail(2, started.status().message());
    mps = std::move(started).value();
    extra_env = mps->ClientEnvironment();
    for (size_t i = 0; i < options.islands.size(); ++i) {
      auto it = options.sm_share.find(options.islands[i].vendor);
      if (it == options.sm_share.end()) continue;
      int gpu = 0;
      for (const auto& r : *plan)
        if (auto d = ParseDeviceName(r.device, "device"); r.island == static_cast<int>(i) && d.ok()) gpu = d->index;
      const std::string label = EmulatedLabel(CudaDeviceName(gpu), it->second);
      std::fprintf(stderr,
                   "tessera run: island %s: %s, through NVIDIA MPS (a model of a slower card, not real %s "
                   "hardware)\n",
                   options.islands[i].vendor.c_str(), label.c_str(), options.islands[i].vendor.c_str());
      island_env[static_cast<int>(i)] = SmShareEnvironment(it->second, label);
    }
  }
  std::fflush(stdout);
  std::fflush(stderr);
  return internal::RunJob(options, std::move(plan).value(), world, layout, std::move(path).value(),
                          std::move(extra_env), std::move(island_env));
}

}  // namespace tessera::launch
