// comm/launcher: `tessera run` — plans the ranks of a job, starts its store and its rank processes,
// prefixes and forwards their output, forwards signals, and stops the job when a rank fails.
//
// One thread does everything after start-up: a poll loop over the ranks' stdout/stderr pipes and a
// self-pipe that the signal handlers (SIGCHLD, SIGINT, SIGTERM, SIGHUP) write to. Each rank runs in its
// own process group, so that a terminal's Ctrl-C reaches the launcher only (which forwards it once) and
// stopping a rank also stops the processes it started. Ranks die with the launcher (PR_SET_PDEATHSIG).
#include "comm/launcher.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <set>

#include "comm/sm_share.hpp"
#include "comm/store.hpp"
#include "common/env.hpp"
#include "common/log.hpp"

#ifdef TESSERA_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

extern char** environ;

namespace tessera::comm::launcher {

using Clock = std::chrono::steady_clock;
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
  if (device == "host") {
    spec.device = DeviceKind::kHost;
  } else if (device == "cuda") {
    spec.device = DeviceKind::kCuda;
  } else {
    return InvalidArgument(fmt::format("unknown device '{}' in --island '{}': use host or cuda", device, text));
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
    out += fmt::format("{}{}={}:{}", out.empty() ? "" : ",", i.vendor, i.device == DeviceKind::kCuda ? "cuda" : "host",
                       i.count);
  return out;
}

Result<std::vector<RankSpec>> PlanRanks(const std::vector<IslandSpec>& islands, int cuda_devices,
                                        const std::string& cuda_why) {
  std::vector<RankSpec> ranks;
  int next_gpu = 0;
  for (size_t i = 0; i < islands.size(); ++i) {
    const IslandSpec& island = islands[i];
    if (island.device == DeviceKind::kCuda && cuda_devices < 1)
      return Unsupported(
          fmt::format("--island '{}' needs CUDA devices, but no CUDA device is visible on this machine{}", island.text,
                      cuda_why.empty() ? "" : " (" + cuda_why + ")"));
    for (int k = 0; k < island.count; ++k) {
      RankSpec r;
      r.rank = static_cast<int>(ranks.size());
      r.local_rank = r.rank;
      r.island = static_cast<int>(i);
      r.vendor = island.vendor;
      if (island.device == DeviceKind::kCuda) {
        r.device = fmt::format("cuda:{}", next_gpu);
        next_gpu = (next_gpu + 1) % cuda_devices;
      } else {
        r.device = "host";
      }
      ranks.push_back(std::move(r));
    }
  }
  return ranks;
}

std::pair<int, int> NodeBlock(int world, int nnodes, int node) {
  const auto lo = static_cast<int>(static_cast<int64_t>(world) * node / nnodes);
  const auto hi = static_cast<int>(static_cast<int64_t>(world) * (node + 1) / nnodes);
  return {lo, hi};
}

Result<std::vector<RankSpec>> PlanNodeRanks(const std::vector<IslandSpec>& islands, int nnodes, int node_rank,
                                            int cuda_devices, const std::string& cuda_why, int local_offset) {
  int world = 0;
  for (const auto& i : islands) world += i.count;
  if (nnodes < 1) return InvalidArgument(fmt::format("--nnodes {} is not a positive integer", nnodes));
  if (node_rank < 0 || node_rank >= nnodes)
    return InvalidArgument(fmt::format("--node-rank {} is not in [0, {}) (--nnodes {})", node_rank, nnodes, nnodes));
  if (nnodes > world)
    return InvalidArgument(
        fmt::format("--nnodes {} is more than the job's {} ranks ({}): every node starts at least one rank", nnodes,
                    world, LayoutString(islands)));
  const auto [lo, hi] = NodeBlock(world, nnodes, node_rank);
  // Devices are assigned among this node's ranks only: its GPUs are its own.
  TSR_ASSIGN_OR_RETURN(auto all, PlanRanks(islands, 1 << 30));  // numbering and islands; devices below
  std::vector<RankSpec> mine;
  int next_gpu = 0;
  for (int r = lo; r < hi; ++r) {
    RankSpec spec = all[r];
    spec.node = node_rank;
    spec.local_rank = local_offset + (r - lo);
    if (islands[spec.island].device == DeviceKind::kCuda) {
      if (cuda_devices < 1)
        return Unsupported(fmt::format(
            "--island '{}' needs CUDA devices for rank {} on node {}, but no CUDA device is visible on this "
            "machine{}",
            islands[spec.island].text, r, node_rank, cuda_why.empty() ? "" : " (" + cuda_why + ")"));
      spec.device = fmt::format("cuda:{}", next_gpu);
      next_gpu = (next_gpu + 1) % cuda_devices;
    }
    mine.push_back(std::move(spec));
  }
  return mine;
}

namespace {

// Splits at commas that are not inside [...].
std::vector<std::string> SplitTopLevel(const std::string& s) {
  std::vector<std::string> out;
  int depth = 0;
  std::string cur;
  for (char c : s) {
    if (c == '[') ++depth;
    if (c == ']') --depth;
    if (c == ',' && depth == 0) {
      out.push_back(cur);
      cur.clear();
    } else {
      cur += c;
    }
  }
  out.push_back(cur);
  return out;
}

bool AllDigits(const std::string& s) {
  return !s.empty() && s.size() <= 9 && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

}  // namespace

Result<std::vector<std::string>> ExpandHostList(const std::string& list) {
  std::vector<std::string> out;
  const auto bad = [&](const std::string& why) {
    return InvalidArgument(fmt::format("Slurm node list '{}': {}", list, why));
  };
  if (list.empty()) return bad("empty");
  for (const std::string& item : SplitTopLevel(list)) {
    if (item.empty()) return bad("an empty name");
    // Expand the first [...] group, then the rest of the item recursively (a name may have several).
    const size_t open = item.find('[');
    if (open == std::string::npos) {
      if (item.find(']') != std::string::npos) return bad(fmt::format("']' without '[' in '{}'", item));
      out.push_back(item);
      continue;
    }
    const size_t close = item.find(']', open);
    if (close == std::string::npos) return bad(fmt::format("'[' without ']' in '{}'", item));
    const std::string head = item.substr(0, open), body = item.substr(open + 1, close - open - 1);
    TSR_ASSIGN_OR_RETURN(auto tails, close + 1 < item.size()
                                         ? ExpandHostList(item.substr(close + 1))
                                         : Result<std::vector<std::string>>(std::vector<std::string>{""}));
    size_t start = 0;
    for (;;) {
      const size_t comma = std::min(body.find(',', start), body.size());
      const std::string range = body.substr(start, comma - start);
      const size_t dash = range.find('-');
      const std::string a = range.substr(0, dash), b = dash == std::string::npos ? a : range.substr(dash + 1);
      if (!AllDigits(a) || !AllDigits(b)) return bad(fmt::format("'{}' in '{}' is not N or N-M", range, item));
      const int from = std::stoi(a), to = std::stoi(b);
      if (to < from) return bad(fmt::format("the range '{}' in '{}' runs backwards", range, item));
      if (to - from > 65536) return bad(fmt::format("the range '{}' in '{}' is too long", range, item));
      for (int n = from; n <= to; ++n)
        for (const auto& t : tails) out.push_back(fmt::format("{}{:0{}}{}", head, n, a.size(), t));
      if (comma >= body.size()) break;
      start = comma + 1;
    }
  }
  return out;
}

Result<std::vector<int>> ExpandTasksPerNode(const std::string& text) {
  std::vector<int> out;
  for (const std::string& item : SplitTopLevel(text)) {
    const size_t paren = item.find("(x");
    const std::string n = item.substr(0, paren);
    std::string times = "1";
    if (paren != std::string::npos) {
      if (item.back() != ')')
        return InvalidArgument(fmt::format("SLURM_TASKS_PER_NODE='{}': '{}' is not N or N(xM)", text, item));
      times = item.substr(paren + 2, item.size() - paren - 3);
    }
    if (!AllDigits(n) || !AllDigits(times) || std::stoi(times) > 65536)
      return InvalidArgument(fmt::format("SLURM_TASKS_PER_NODE='{}': '{}' is not N or N(xM)", text, item));
    for (int k = 0; k < std::stoi(times); ++k) out.push_back(std::stoi(n));
  }
  return out;
}

Result<std::optional<SlurmTask>> SlurmFromEnv(const std::map<std::string, std::string>& env) {
  auto get = [&](const char* name) -> std::optional<std::string> {
    auto it = env.find(name);
    if (it == env.end() || it->second.empty()) return std::nullopt;
    return it->second;
  };
  auto number = [&](const char* name, int64_t lo, int64_t hi) -> Result<int> {
    const std::string v = *get(name);
    if (!AllDigits(v) || std::stoll(v) < lo || std::stoll(v) > hi)
      return InvalidArgument(fmt::format("{}='{}' is not an integer in [{}, {}]", name, v, lo, hi));
    return std::stoi(v);
  };
  if (!get("SLURM_PROCID") || !get("SLURM_NTASKS")) return std::optional<SlurmTask>();
  SlurmTask t;
  TSR_ASSIGN_OR_RETURN(t.ntasks, number("SLURM_NTASKS", 1, 1 << 20));
  TSR_ASSIGN_OR_RETURN(t.procid, number("SLURM_PROCID", 0, t.ntasks - 1));
  if (get("SLURM_LOCALID")) {
    TSR_ASSIGN_OR_RETURN(t.localid, number("SLURM_LOCALID", 0, t.procid));
  }
  t.node_tasks = t.localid + 1;
  if (get("SLURM_TASKS_PER_NODE") && get("SLURM_NODEID")) {
    TSR_ASSIGN_OR_RETURN(auto per_node, ExpandTasksPerNode(*get("SLURM_TASKS_PER_NODE")));
    TSR_ASSIGN_OR_RETURN(int node, number("SLURM_NODEID", 0, 1 << 20));
    if (node >= static_cast<int>(per_node.size()))
      return InvalidArgument(fmt::format("SLURM_NODEID={} but SLURM_TASKS_PER_NODE='{}' lists {} node(s)", node,
                                         *get("SLURM_TASKS_PER_NODE"), per_node.size()));
    t.node_tasks = std::max(per_node[node], t.localid + 1);
  }
  // A heterogeneous job: one world over its components (srun ... : ...), the store on component 0's first node.
  // A step over several components (srun --het-group=0,1, Slurm 22.05) sets no SLURM_HET_JOB_ID in the tasks:
  // SLURM_JOB_NODELIST_HET_GROUP_0 says so, the component is found from SLURM_PROCID and the per-group task
  // counts, and SLURM_STEP_NODELIST is the sorted union of the groups' nodes, whose first need not be task 0's.
  std::optional<std::string> nodes;
  if (get("SLURM_HET_JOB_ID") || get("SLURM_JOB_NODELIST_HET_GROUP_0")) {
    const char* comp = get("SLURM_HET_JOB_COMPONENT") ? "SLURM_HET_JOB_COMPONENT" : "SLURM_HET_JOB_OFFSET";
    if (get(comp)) {
      TSR_ASSIGN_OR_RETURN(t.het_component, number(comp, 0, 1 << 20));
    } else if (get("SLURM_NTASKS_HET_GROUP_0")) {
      int first = 0;
      for (int g = 0; g < 1 << 10; ++g) {
        const std::string var = fmt::format("SLURM_NTASKS_HET_GROUP_{}", g);
        if (!get(var.c_str())) break;
        TSR_ASSIGN_OR_RETURN(int n, number(var.c_str(), 0, 1 << 20));
        if (t.procid < first + n) {
          t.het_component = g;
          break;
        }
        first += n;
      }
    }
    nodes = get("SLURM_JOB_NODELIST_HET_GROUP_0");
  }
  const char* list_var = nullptr;
  for (const char* v : {"SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST", "SLURM_NODELIST"}) {
    if (!nodes && get(v)) {
      nodes = get(v);
      list_var = v;
    }
  }
  if (!nodes)
    return InvalidArgument(
        "SLURM_PROCID and SLURM_NTASKS are set but no node list (SLURM_STEP_NODELIST, SLURM_JOB_NODELIST): "
        "cannot tell which host serves the store; pass --store HOST:PORT");
  auto hosts = ExpandHostList(*nodes);
  if (!hosts.ok()) return hosts.status().WithContext(list_var != nullptr ? list_var : "SLURM_JOB_NODELIST_HET_GROUP_0");
  t.store_host = hosts->front();
  t.job_id = get("SLURM_HET_JOB_ID").value_or(get("SLURM_JOB_ID").value_or(""));
  if (!AllDigits(t.job_id))
    return InvalidArgument(
        fmt::format("SLURM_JOB_ID='{}' is not a job number (the store's port comes from it)", t.job_id));
  t.store_port = 20000 + 2 * static_cast<int>(std::stoll(t.job_id) % 20000);
  t.text = fmt::format("Slurm job {} task {} of {}{}", t.job_id, t.procid, t.ntasks,
                       t.het_component >= 0 ? fmt::format(" (heterogeneous component {})", t.het_component) : "");
  return std::optional<SlurmTask>(std::move(t));
}

Result<std::string> ReadTokenFile(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) return ErrnoError(fmt::format("--token-file '{}'", path), errno);
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return InvalidArgument(fmt::format("--token-file '{}' is not a regular file", path));
  }
  if (st.st_uid != ::geteuid() || (st.st_mode & 077) != 0) {
    ::close(fd);
    return InvalidArgument(
        fmt::format("--token-file '{}' has mode {:04o} and owner uid {}: it must be yours and readable by no one else "
                    "(chmod 600 '{}')",
                    path, st.st_mode & 07777, st.st_uid, path));
  }
  std::string text(4096, '\0');
  const ssize_t n = ::read(fd, text.data(), text.size());
  ::close(fd);
  if (n < 0) return ErrnoError(fmt::format("--token-file '{}'", path), errno);
  text.resize(static_cast<size_t>(n));
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.back()))) text.pop_back();
  if (text.empty() || text.size() > 256 || text.find_first_of("\n\r") != std::string::npos)
    return InvalidArgument(
        fmt::format("--token-file '{}' must hold one non-empty line of at most 256 characters", path));
  return text;
}

Result<std::string> RouteSourceAddress(const std::string& host) {
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* res = nullptr;
  const int gai = ::getaddrinfo(host.c_str(), "9", &hints, &res);
  if (gai != 0) return NotFound(fmt::format("cannot resolve the store host '{}': {}", host, ::gai_strerror(gai)));
  const int fd = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  sockaddr_in local{};
  socklen_t len = sizeof(local);
  const bool ok = fd >= 0 && ::connect(fd, res->ai_addr, res->ai_addrlen) == 0 &&
                  ::getsockname(fd, reinterpret_cast<sockaddr*>(&local), &len) == 0;
  const int e = errno;
  ::freeaddrinfo(res);
  if (fd >= 0) ::close(fd);
  if (!ok) return ErrnoError(fmt::format("no route to the store host '{}'", host), e);
  char buf[INET_ADDRSTRLEN] = {};
  ::inet_ntop(AF_INET, &local.sin_addr, buf, sizeof(buf));
  return std::string(buf);
}

int VisibleCudaDevices(std::string* why) {
#ifdef TESSERA_HAVE_CUDA
  int n = 0;
  const cudaError_t err = cudaGetDeviceCount(&n);
  if (err != cudaSuccess) {
    *why = fmt::format("cudaGetDeviceCount: {}", cudaGetErrorString(err));
    return 0;
  }
  if (n == 0) *why = "cudaGetDeviceCount found 0 devices";
  return n;
#else
  *why = "this tessera was built without CUDA";
  return 0;
#endif
}

std::vector<std::pair<std::string, std::string>> RankEnvironment(const RankSpec& rank, int world_size,
                                                                 const std::string& layout,
                                                                 const std::string& store_address,
                                                                 const std::string& token, milliseconds timeout,
                                                                 int master_port, const std::string& visible_gpus,
                                                                 int local_world_size, const std::string& master_addr) {
  // A CUDA rank sees only its own GPU (CUDA_VISIBLE_DEVICES), as under Slurm's --gpus-per-task, so inside
  // the process its device is cuda:0. `visible_gpus` is the launcher's own CUDA_VISIBLE_DEVICES, whose
  // N-th entry is GPU cuda:N here.
  std::string device = rank.device;
  std::string cuda_visible;
  if (device.rfind("cuda:", 0) == 0) {
    cuda_visible = device.substr(5);
    if (!visible_gpus.empty()) {
      std::vector<std::string> ids;
      size_t start = 0;
      while (start <= visible_gpus.size()) {
        const size_t comma = std::min(visible_gpus.find(',', start), visible_gpus.size());
        ids.push_back(visible_gpus.substr(start, comma - start));
        start = comma + 1;
      }
      const size_t n = std::strtoul(cuda_visible.c_str(), nullptr, 10);  // PlanRanks wrote it: a GPU index
      if (n < ids.size()) cuda_visible = ids[n];
    }
    device = "cuda:0";
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
  if (!cuda_visible.empty()) vars.emplace_back("CUDA_VISIBLE_DEVICES", cuda_visible);
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

constexpr size_t kMaxLine = 1 << 20;  // a longer line without '\n' is emitted in pieces of this size

int g_signal_pipe = -1;  // write end of the self-pipe, for the signal handler

void OnSignal(int sig) {
  const int saved = errno;
  const unsigned char b = static_cast<unsigned char>(sig);
  if (g_signal_pipe >= 0) (void)!::write(g_signal_pipe, &b, 1);
  errno = saved;
}

const int kHandledSignals[] = {SIGCHLD, SIGINT, SIGTERM, SIGHUP};

// Installs the handlers (and ignores SIGPIPE) for its lifetime; restores the previous ones after.
class SignalScope {
 public:
  SignalScope() = default;
  Status Install() {
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
  ~SignalScope() {
    if (installed_) {
      for (auto& [sig, sa] : old_) ::sigaction(sig, &sa, nullptr);
      g_signal_pipe = -1;
    }
    if (read_fd_ >= 0) ::close(read_fd_);
    if (write_fd_ >= 0) ::close(write_fd_);
  }
  int read_fd() const { return read_fd_; }

 private:
  int read_fd_ = -1, write_fd_ = -1;
  bool installed_ = false;
  std::map<int, struct sigaction> old_;
};

Result<std::string> RandomToken() {
  const int fd = ::open("/dev/urandom", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return ErrnoError("tessera run: cannot open /dev/urandom for the job token", errno);
  unsigned char bytes[16];
  size_t got = 0;
  while (got < sizeof(bytes)) {
    const ssize_t n = ::read(fd, bytes + got, sizeof(bytes) - got);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int err = n < 0 ? errno : EIO;
      ::close(fd);
      return ErrnoError("tessera run: cannot read /dev/urandom for the job token", err);
    }
    got += static_cast<size_t>(n);
  }
  ::close(fd);
  std::string token;
  for (unsigned char b : bytes) token += fmt::format("{:02x}", b);
  return token;
}

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

// Writes all of `data` to fd; false when the reader is gone.
bool WriteAll(int fd, const char* data, size_t n) {
  while (n > 0) {
    const ssize_t w = ::write(fd, data, n);
    if (w > 0) {
      data += w;
      n -= static_cast<size_t>(w);
      continue;
    }
    if (w < 0 && errno == EINTR) continue;
    if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      pollfd p{fd, POLLOUT, 0};
      ::poll(&p, 1, 1000);
      continue;
    }
    return false;
  }
  return true;
}

// In the child between fork and exec: async-signal-safe calls only.
[[noreturn]] void ExecRank(const char* path, char* const argv[], char* const envp[], int out_fd, int err_fd,
                           int exec_error_fd, pid_t launcher) {
  ::setpgid(0, 0);
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (::getppid() != launcher) ::_exit(127);  // the launcher died before the line above
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  sigemptyset(&dfl.sa_mask);
  for (int sig : {SIGCHLD, SIGINT, SIGTERM, SIGHUP, SIGPIPE}) ::sigaction(sig, &dfl, nullptr);
  sigset_t none;
  sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
  const int devnull = ::open("/dev/null", O_RDONLY);
  if (devnull >= 0 && devnull != 0) {
    ::dup2(devnull, 0);
    ::close(devnull);
  }
  for (auto [from, to] : {std::pair{out_fd, 1}, std::pair{err_fd, 2}}) {
    if (from == to)
      ::fcntl(to, F_SETFD, 0);  // keep it across exec
    else
      ::dup2(from, to);
  }
  ::execve(path, argv, envp);
  const int err = errno;
  (void)!::write(exec_error_fd, &err, sizeof(err));
  ::_exit(127);
}

class Job {
 public:
  // `extra_env`: variables every rank gets after its own (MPS directories); `island_env`: per island index
  // (an emulated island's SM share and label).
  Job(const Options& options, std::vector<RankSpec> ranks, int world_size, std::string layout, std::string path,
      std::vector<std::pair<std::string, std::string>> extra_env = {},
      std::map<int, std::vector<std::pair<std::string, std::string>>> island_env = {})
      : options_(options),
        world_size_(world_size),
        layout_(std::move(layout)),
        path_(std::move(path)),
        extra_env_(std::move(extra_env)),
        island_env_(std::move(island_env)) {
    for (auto& spec : ranks) ranks_.push_back(Rank{std::move(spec)});
  }

  int Run() {
    // The store's threads must not take the signals meant for the poll loop: start it with them blocked.
    sigset_t block, old;
    sigemptyset(&block);
    for (int sig : kHandledSignals) sigaddset(&block, sig);
    ::pthread_sigmask(SIG_BLOCK, &block, &old);
    const bool multi = options_.nnodes > 1 || !options_.store_host.empty();
    Result<std::string> token = options_.token.empty() ? RandomToken() : Result<std::string>(options_.token);
    Result<std::unique_ptr<StoreServer>> store = InternalError("not started");
    if (token.ok() && options_.node_rank != 0) {
      store = std::unique_ptr<StoreServer>();  // node 0 serves it
    } else if (token.ok()) {
      // Room for every rank's communicators (a split opens one store connection per member) unless
      // TESSERA_STORE_MAX_CONNS says otherwise.
      StoreLimits limits = StoreLimits::FromEnv();
      if (!env::Get("TESSERA_STORE_MAX_CONNS"))
        limits.max_connections = std::max<int>(limits.max_connections, 16 * static_cast<int>(ranks_.size()));
      if (multi && !env::Get("TESSERA_STORE_MAX_CONNS"))  // the whole job's ranks meet here
        limits.max_connections = std::max<int>(limits.max_connections, 16 * world_size_);
      store = StoreServer::Start(multi ? options_.store_host : "127.0.0.1", multi ? options_.store_port : 0, *token,
                                 limits);
    }
    ::pthread_sigmask(SIG_SETMASK, &old, nullptr);
    if (!token.ok()) return Fail(1, token.status().message());
    if (!store.ok())
      return Fail(1, multi ? fmt::format("node 0 cannot start the store on {}:{}: {}", options_.store_host,
                                         options_.store_port, store.status().message())
                           : "cannot start the store: " + store.status().message());
    store_ = std::move(store).value();
    token_ = *token;
    if (multi) {
      // Every node's ranks meet at node 0's store; torchrun's MASTER_* name node 0 too (the next port).
      store_host_ = options_.store_host;
      store_port_ = store_ ? store_->port() : options_.store_port;
      master_port_ = store_port_ + 1;
      master_addr_ = store_host_;
      if (store_ && options_.store_port == 0)
        Say(fmt::format("node 0 serves the store at {}:{}: start the other nodes with --store {}:{}", store_host_,
                        store_port_, store_host_, store_port_));
      bridge_addr_ = options_.node_addr;
      if (bridge_addr_.empty() && !env::Get("TESSERA_BRIDGE_ADDR")) {
        auto a = RouteSourceAddress(store_host_);
        if (!a.ok())
          return Fail(1, fmt::format("node {}: {} (set --node-addr to this node's address)", options_.node_rank,
                                     a.status().message()));
        bridge_addr_ = *a;
      }
    } else {
      store_host_ = "127.0.0.1";
      store_port_ = store_->port();
      auto master_port = FreeLoopbackPort();
      if (!master_port.ok()) return Fail(1, master_port.status().message());
      master_port_ = *master_port;
    }
    visible_gpus_ = env::Get("CUDA_VISIBLE_DEVICES").value_or("");

    Status s = signals_.Install();
    if (!s.ok()) return Fail(1, s.message());
    TSR_LOG_INFO("tessera run: store at {}:{}; node {} of {} starting {} of {} ranks ({})", store_host_, store_port_,
                 options_.node_rank, options_.nnodes, ranks_.size(), world_size_, layout_);
    for (auto& r : ranks_) {
      const int code = StartRank(r);
      if (code != 0) {
        SignalAll(SIGKILL);
        for (auto& other : ranks_) {
          if (other.running) {
            int st = 0;
            while (::waitpid(other.pid, &st, 0) < 0 && errno == EINTR) {
            }
            other.running = false;
          }
        }
        CloseStreams();
        return code;
      }
    }
    Loop();
    CloseStreams();
    return exit_code_;
  }

 private:
  struct Rank {
    RankSpec spec;
    pid_t pid = -1;
    bool running = false;
  };
  struct Stream {
    int fd;
    size_t rank;  // index into ranks_
    int out_fd;   // 1 or 2
    std::string prefix;
    std::string partial;
  };

  int Fail(int code, const std::string& message) {
    std::fprintf(stderr, "tessera run: %s\n", message.c_str());
    return code;
  }
  void Say(const std::string& message) { std::fprintf(stderr, "tessera run: %s\n", message.c_str()); }

  // Forks and execs one rank; 0, or the launcher's exit status when it could not be started.
  int StartRank(Rank& r) {
    const std::string addr = fmt::format("{}:{}", store_host_, store_port_);
    auto vars = RankEnvironment(
        r.spec, world_size_, layout_, addr, token_, options_.timeout, master_port_, visible_gpus_,
        options_.local_world > 0 ? options_.local_world : static_cast<int>(ranks_.size()), master_addr_);
    if (!bridge_addr_.empty()) vars.emplace_back("TESSERA_BRIDGE_ADDR", bridge_addr_);
    vars.insert(vars.end(), extra_env_.begin(), extra_env_.end());
    if (auto it = island_env_.find(r.spec.island); it != island_env_.end())
      vars.insert(vars.end(), it->second.begin(), it->second.end());
    std::vector<std::string> env_strings;
    for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
      const std::string entry(*e);
      const std::string name = entry.substr(0, entry.find('='));
      if (std::none_of(vars.begin(), vars.end(), [&](const auto& v) { return v.first == name; }))
        env_strings.push_back(entry);
    }
    for (const auto& [k, v] : vars) env_strings.push_back(k + "=" + v);
    std::vector<char*> envp, argv;
    for (auto& e : env_strings) envp.push_back(e.data());
    envp.push_back(nullptr);
    std::vector<std::string> args = options_.program;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);

    int out[2], err[2], ex[2];
    if (::pipe2(out, O_CLOEXEC) != 0) return Fail(1, fmt::format("pipe for rank {}: {}", r.spec.rank, strerror(errno)));
    if (::pipe2(err, O_CLOEXEC) != 0) {
      const int e = errno;
      ::close(out[0]);
      ::close(out[1]);
      return Fail(1, fmt::format("pipe for rank {}: {}", r.spec.rank, strerror(e)));
    }
    if (::pipe2(ex, O_CLOEXEC) != 0) {
      const int e = errno;
      for (int fd : {out[0], out[1], err[0], err[1]}) ::close(fd);
      return Fail(1, fmt::format("pipe for rank {}: {}", r.spec.rank, strerror(e)));
    }
    const pid_t self = ::getpid();
    const pid_t pid = ::fork();
    if (pid == 0) ExecRank(path_.c_str(), argv.data(), envp.data(), out[1], err[1], ex[1], self);
    const int fork_errno = errno;
    ::close(out[1]);
    ::close(err[1]);
    ::close(ex[1]);
    if (pid < 0) {
      for (int fd : {out[0], err[0], ex[0]}) ::close(fd);
      return Fail(1, fmt::format("cannot start rank {}: fork: {}", r.spec.rank, strerror(fork_errno)));
    }
    ::setpgid(pid, pid);  // also done by the child; whichever runs first wins the race
    r.pid = pid;
    r.running = true;
    for (auto [fd, to] : {std::pair{out[0], 1}, std::pair{err[0], 2}}) {
      ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
      streams_.push_back(Stream{fd,
                                static_cast<size_t>(&r - ranks_.data()),
                                to,
                                fmt::format("[rank {} {}] ", r.spec.rank, r.spec.vendor),
                                {}});
    }
    // EOF on the exec-error pipe means execve succeeded (the pipe is close-on-exec).
    int exec_errno = 0;
    ssize_t n;
    while ((n = ::read(ex[0], &exec_errno, sizeof(exec_errno))) < 0 && errno == EINTR) {
    }
    ::close(ex[0]);
    if (n == sizeof(exec_errno)) {
      Fail(127, fmt::format("cannot start rank {}: {}: {}", r.spec.rank, options_.program[0], strerror(exec_errno)));
      return 127;
    }
    return 0;
  }

  size_t Running() const {
    return static_cast<size_t>(std::count_if(ranks_.begin(), ranks_.end(), [](const Rank& r) { return r.running; }));
  }

  // Sends `sig` to the process group of every running rank.
  void SignalAll(int sig) {
    for (auto& r : ranks_) {
      if (!r.running) continue;
      if (::kill(-r.pid, sig) != 0) ::kill(r.pid, sig);
    }
    last_signal_sent_ = sig;
  }

  void Loop() {
    const auto never = Clock::time_point::max();
    while (Running() > 0) {
      std::vector<pollfd> fds;
      fds.push_back({signals_.read_fd(), POLLIN, 0});
      for (const auto& s : streams_) fds.push_back({s.fd, POLLIN, 0});
      const auto next = std::min(grace_deadline_, kill_deadline_);
      int timeout_ms = -1;
      if (next != never)
        timeout_ms = static_cast<int>(
            std::clamp<int64_t>(std::chrono::duration_cast<milliseconds>(next - Clock::now()).count() + 1, 0, 1 << 30));
      const int n = ::poll(fds.data(), fds.size(), timeout_ms);
      if (n < 0 && errno != EINTR) {
        Say(fmt::format("poll: {}", strerror(errno)));
        SignalAll(SIGKILL);
        grace_deadline_ = never;
      }
      // Output first, so that a rank's last lines come before the news of its exit.
      std::vector<int> ready;
      for (size_t i = 1; n > 0 && i < fds.size(); ++i)
        if (fds[i].revents != 0) ready.push_back(fds[i].fd);
      for (int fd : ready) {
        auto it = std::find_if(streams_.begin(), streams_.end(), [&](const Stream& s) { return s.fd == fd; });
        if (it != streams_.end() && !Pump(*it)) CloseStream(it);
      }
      if (n > 0 && (fds[0].revents & POLLIN)) HandleSignals();
      const auto now = Clock::now();
      if (now >= grace_deadline_) {
        grace_deadline_ = never;
        const size_t left = Running();
        if (left > 0) {
          Say(fmt::format(
              "stopping the {} rank{} still running {} after rank {} failed (SIGTERM, then SIGKILL after {})", left,
              left == 1 ? "" : "s", FormatDuration(options_.timeout), first_failed_,
              FormatDuration(options_.kill_after)));
          SignalAll(SIGTERM);
          kill_deadline_ = now + options_.kill_after;
        }
      }
      if (now >= kill_deadline_) {
        kill_deadline_ = never;
        const size_t left = Running();
        if (left > 0) {
          Say(fmt::format("killing the {} rank{} still running (SIGKILL)", left, left == 1 ? "" : "s"));
          SignalAll(SIGKILL);
        }
      }
    }
    // Every rank has exited: what they wrote is in the pipes. Take it, then stop (a process the ranks
    // left behind may hold a pipe open; its later output is not theirs to wait for).
    for (auto it = streams_.begin(); it != streams_.end();) {
      for (int rounds = 0; rounds < 64 && Pump(*it) && ReadableNow(it->fd); ++rounds) {
      }
      it = CloseStream(it);
    }
  }

  static bool ReadableNow(int fd) {
    pollfd p{fd, POLLIN, 0};
    return ::poll(&p, 1, 0) > 0 && (p.revents & POLLIN);
  }

  void HandleSignals() {
    unsigned char buf[64];
    ssize_t n;
    std::set<int> seen;
    while ((n = ::read(signals_.read_fd(), buf, sizeof(buf))) > 0) {
      for (ssize_t i = 0; i < n; ++i) {
        const int sig = buf[i];
        if (sig == SIGCHLD) {
          seen.insert(SIGCHLD);
          continue;
        }
        const size_t left = Running();
        if (sig == SIGINT && ++interrupts_ >= 2) {
          Say(fmt::format("second SIGINT: killing the {} rank{} still running (SIGKILL)", left, left == 1 ? "" : "s"));
          SignalAll(SIGKILL);
          continue;
        }
        Say(fmt::format("forwarding {} to the {} rank{} still running{}", SignalName(sig), left, left == 1 ? "" : "s",
                        sig == SIGINT ? " (interrupt again to kill them)" : ""));
        SignalAll(sig);
      }
    }
    if (seen.count(SIGCHLD)) Reap();
  }

  void Reap() {
    for (auto& r : ranks_) {
      if (!r.running) continue;
      int st = 0;
      pid_t got;
      while ((got = ::waitpid(r.pid, &st, WNOHANG)) < 0 && errno == EINTR) {
      }
      if (got != r.pid) continue;
      r.running = false;
      OnExit(r, st);
    }
  }

  void OnExit(Rank& r, int st) {
    // Its last output first.
    const size_t index = static_cast<size_t>(&r - ranks_.data());
    for (auto it = streams_.begin(); it != streams_.end();) {
      if (it->rank == index) {
        bool open = true;
        while (open && ReadableNow(it->fd)) open = Pump(*it);
        if (!open) {
          it = CloseStream(it);
          continue;
        }
      }
      ++it;
    }
    if (WIFEXITED(st) && WEXITSTATUS(st) == 0) return;
    int code;
    std::string how;
    if (WIFEXITED(st)) {
      code = WEXITSTATUS(st);
      how = fmt::format("exited with status {}", code);
    } else {
      const int sig = WTERMSIG(st);
      code = 128 + sig;
      how = fmt::format("was killed by signal {} ({})", sig, SignalName(sig));
      if (sig == last_signal_sent_) how += " sent by tessera run";
    }
    Say(fmt::format("rank {} ({}) {}", r.spec.rank, r.spec.vendor, how));
    if (first_failed_ >= 0) return;
    first_failed_ = r.spec.rank;
    exit_code_ = code;
    const size_t left = Running();
    if (left > 0 && kill_deadline_ == Clock::time_point::max()) {
      Say(fmt::format("waiting up to {} (TESSERA_TIMEOUT) for {} to exit, then stopping {}",
                      FormatDuration(options_.timeout),
                      left == 1 ? std::string("the other rank") : fmt::format("the other {} ranks", left),
                      left == 1 ? "it" : "them"));
      grace_deadline_ = Clock::now() + options_.timeout;
    }
  }

  // Reads what is there from one stream and prints its complete lines; false at end of file.
  bool Pump(Stream& s) {
    char buf[65536];
    for (int rounds = 0; rounds < 16; ++rounds) {
      const ssize_t n = ::read(s.fd, buf, sizeof(buf));
      if (n > 0) {
        s.partial.append(buf, static_cast<size_t>(n));
        EmitLines(s);
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return true;
      return false;  // EOF or an error
    }
    return true;
  }

  void EmitLines(Stream& s) {
    std::string out;
    size_t start = 0;
    for (;;) {
      const size_t nl = s.partial.find('\n', start);
      if (nl == std::string::npos) break;
      out += s.prefix;
      out.append(s.partial, start, nl + 1 - start);
      start = nl + 1;
    }
    s.partial.erase(0, start);
    while (s.partial.size() >= kMaxLine) {  // a runaway line: print it in pieces rather than hoard it
      out += s.prefix;
      out.append(s.partial, 0, kMaxLine);
      out += '\n';
      s.partial.erase(0, kMaxLine);
    }
    Print(s.out_fd, out);
  }

  void Print(int fd, const std::string& text) {
    if (text.empty() || output_gone_[fd]) return;
    if (!WriteAll(fd, text.data(), text.size())) output_gone_[fd] = true;
  }

  std::vector<Stream>::iterator CloseStream(std::vector<Stream>::iterator it) {
    if (!it->partial.empty()) Print(it->out_fd, it->prefix + it->partial + "\n");
    ::close(it->fd);
    return streams_.erase(it);
  }

  void CloseStreams() {
    for (auto it = streams_.begin(); it != streams_.end();) it = CloseStream(it);
  }

  const Options& options_;
  const int world_size_;  // of the whole job (this launcher starts ranks_ of them)
  const std::string layout_;
  const std::string path_;
  std::vector<Rank> ranks_;
  std::vector<Stream> streams_;
  std::unique_ptr<StoreServer> store_;
  std::string token_;
  std::vector<std::pair<std::string, std::string>> extra_env_;
  std::map<int, std::vector<std::pair<std::string, std::string>>> island_env_;
  std::string store_host_;  // the store the ranks meet at: 127.0.0.1, or node 0's address
  int store_port_ = 0;
  std::string bridge_addr_;  // multi-node: TESSERA_BRIDGE_ADDR for this node's ranks ("" = leave it)
  std::string master_addr_ = "127.0.0.1";
  int master_port_ = 0;       // torchrun's MASTER_PORT for the ranks (a free loopback port; multi-node: store + 1)
  std::string visible_gpus_;  // the launcher's CUDA_VISIBLE_DEVICES, "" when unset
  SignalScope signals_;
  int exit_code_ = 0;
  int first_failed_ = -1;
  int interrupts_ = 0;
  int last_signal_sent_ = 0;
  bool output_gone_[3] = {false, false, false};
  Clock::time_point grace_deadline_ = Clock::time_point::max();
  Clock::time_point kill_deadline_ = Clock::time_point::max();
};

}  // namespace

int Run(const Options& options) {
  auto fail = [](int code, const std::string& message) {
    std::fprintf(stderr, "tessera run: %s\n", message.c_str());
    return code;
  };
  int cuda_devices = 0;
  std::string cuda_why;
  if (std::any_of(options.islands.begin(), options.islands.end(),
                  [](const IslandSpec& i) { return i.device == DeviceKind::kCuda; }))
    cuda_devices = VisibleCudaDevices(&cuda_why);
  const bool multi = options.nnodes > 1 || !options.store_host.empty();
  int world = 0;
  for (const auto& i : options.islands) world += i.count;
  auto plan = multi ? PlanNodeRanks(options.islands, options.nnodes, options.node_rank, cuda_devices, cuda_why,
                                    options.local_offset)
                    : PlanRanks(options.islands, cuda_devices, cuda_why);
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
        if (r.island == static_cast<int>(i)) gpu = std::atoi(r.device.c_str() + 5);
      const std::string label = EmulatedLabel(CudaDeviceName(gpu), it->second);
      std::fprintf(stderr,
                   "tessera run: island %s: %s, through NVIDIA MPS (a model of a slower card, not real %s "
                   "hardware)\n",
                   options.islands[i].vendor.c_str(), label.c_str(), options.islands[i].vendor.c_str());
      island_env[static_cast<int>(i)] = {{"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", std::to_string(it->second)},
                                         {"TESSERA_SM_SHARE", std::to_string(it->second)},
                                         {"TESSERA_EMULATED", label}};
    }
  }
  std::fflush(stdout);
  std::fflush(stderr);
  Job job(options, std::move(plan).value(), world, layout, std::move(path).value(), std::move(extra_env),
          std::move(island_env));
  return job.Run();
}

}  // namespace tessera::comm::launcher
