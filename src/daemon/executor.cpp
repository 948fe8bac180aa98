// daemon/executor: maps placements to islands, starts job attempts through the shim, and the shim itself.
#include "daemon/executor.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <grp.h>
#include <signal.h>
#include <spawn.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <map>
#include <set>

#include "comm/runtime/runtime.hpp"
#include "common/vendor.hpp"
#include "daemon/util.hpp"

extern char** environ;

namespace tessera::daemon {

nlohmann::json IslandsToJson(const std::vector<Island>& islands) {
  nlohmann::json a = nlohmann::json::array();
  for (const auto& i : islands) {
    a.push_back({{"type", i.type},
                 {"vendor", i.vendor},
                 {"device", i.device},
                 {"count", i.count},
                 {"emulated", i.emulated},
                 {"sm_share", i.sm_share},
                 {"weight", i.weight}});
  }
  return a;
}

std::vector<Island> IslandsFromJson(const nlohmann::json& j) {
  std::vector<Island> out;
  for (const auto& e : j) {
    Island i;
    i.type = e.value("type", "");
    i.vendor = e.value("vendor", "");
    i.device = e.value("device", "host");
    i.count = e.value("count", int64_t{0});
    i.emulated = e.value("emulated", false);
    i.weight = e.value("weight", int64_t{0});
    i.sm_share = e.value("sm_share", 0);  // absent in rows written before SM shares
    out.push_back(i);
  }
  return out;
}

std::vector<std::string> IslandArgs(const std::vector<Island>& islands) {
  std::vector<std::string> a;
  for (const auto& i : islands) {
    a.push_back("--island");
    a.push_back(fmt::format("{}={}:{}", i.vendor, i.device, i.count));
  }
  for (const auto& i : islands) {
    if (i.sm_share <= 0) continue;
    a.push_back("--sm-share");
    a.push_back(fmt::format("{}={}", i.vendor, i.sm_share));
  }
  return a;
}

std::string IslandWeights(const std::vector<Island>& islands) {
  std::string s;
  for (const auto& i : islands) {
    if (!s.empty()) s += ",";
    s += sched::FormatThroughput(i.weight > 0 ? i.weight : sched::kThroughputScale);
  }
  return s;
}

Result<std::vector<Island>> IslandsFor(const sched::Placement& placement, const sched::Catalog& catalog,
                                       const FleetSpec& fleet, const std::string& workload_class) {
  std::vector<Island> out;
  for (const auto& ta : placement.by_type) {
    if (ta.cards <= 0) continue;
    const auto* t = catalog.Find(ta.type);
    if (!t) return InternalError(fmt::format("placement names type '{}', which is not in the catalog", ta.type));
    bool any_real = false, any_emulated = false;
    std::map<int, std::string> shares;  // how the emulated nodes run (0: host ranks) -> one such node
    for (const auto& nc : placement.by_node) {
      const auto* n = fleet.fleet.Find(nc.node);
      if (!n || n->type != ta.type || nc.cards <= 0) continue;
      bool emu = fleet.IsEmulated(n->id);
      (emu ? any_emulated : any_real) = true;
      if (emu) shares.emplace(fleet.SmShare(n->id), n->id);
    }
    Island i;
    i.type = t->name;
    i.vendor = t->vendor;
    i.count = ta.cards;
    i.emulated = !any_real;
    if (any_real && any_emulated)
      return Unsupported(
          fmt::format("type '{}' is placed on both emulated and real nodes; one island needs one kind", ta.type));
    if (shares.size() > 1) {
      std::string list;
      for (const auto& [p, node] : shares)
        list += fmt::format("{}node '{}' {}", list.empty() ? "" : ", ", node, EmulationKind(p));
      return Unsupported(fmt::format(
          "type '{}' is placed on emulated nodes that run differently ({}); one island has one share: give the "
          "type's nodes in zone {} the same sm_share in the fleet file",
          ta.type, list, placement.zone));
    }
    if (i.emulated && !shares.empty() && shares.begin()->first > 0) {
      i.device = "cuda";
      i.sm_share = shares.begin()->first;
    } else if (i.emulated) {
      i.device = "host";
    } else if (const DeviceFamily* family = FindFamilyOfVendor(t->vendor); family != nullptr) {
      i.device = family->prefix;  // the family table (common/vendor): nvidia -> cuda, ascend -> npu, ...
    } else {
      return Unsupported(fmt::format(
          "type '{}' (vendor {}) is on real nodes, but no device family has the vendor '{}' (common/vendor.hpp); "
          "mark the nodes 'emulated: true' in the fleet file to run them as host ranks (or 'sm_share: "
          "PERCENT' to emulate them on a share of this host's GPU)",
          ta.type, t->vendor, t->vendor));
    }
    auto it = t->throughput.find(workload_class);
    i.weight = it != t->throughput.end() ? it->second : sched::kThroughputScale;
    out.push_back(i);
  }
  if (out.empty()) return InternalError("placement has no cards");
  return out;
}

std::string SelfExe() {
  char buf[4096];
  ssize_t n = ::readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) return "tessera";
  buf[n] = '\0';
  return buf;
}

std::vector<std::string> JobEnvironment(char** daemon_env, const std::map<std::string, std::string>& set) {
  // TESSERA_* variables a job may inherit from the daemon: logging and the collectives' tuning (docs/env.md).
  // Each device-runtime row's own variable (TESSERA_CUDA_LIBRARY, ...) comes from the table (comm/runtime).
  static const std::set<std::string> kKeep = [] {
    std::set<std::string> keep = {
        "TESSERA_LOG", "TESSERA_TIMEOUT", "TESSERA_BRIDGE", "TESSERA_BRIDGE_ADDR", "TESSERA_SHM_RING",
        "TESSERA_TCP_STREAMS", "TESSERA_TCP_CHUNK", "TESSERA_DEVICE_BRIDGE", "TESSERA_DEVICE_RING",
        "TESSERA_DEVICE_PIECE", "TESSERA_DEVICE_CHUNK", "TESSERA_CCL", "TESSERA_CCL_LIB", "TESSERA_CCL_PREFIX",
        "TESSERA_ACL_NNOPBASE_LIBRARY", "TESSERA_ACL_OPAPI_LIBRARY", "TESSERA_ISLAND_REDUCE",
        // the old names of the TESSERA_DEVICE_* knobs, still read
        "TESSERA_CUDA_BRIDGE", "TESSERA_CUDA_RING", "TESSERA_CUDA_PIECE", "TESSERA_CUDA_CHUNK"};
    for (const comm::RuntimeRow& row : comm::kRuntimeTable)
      if (*row.env_var != 0) keep.insert(row.env_var);
    return keep;
  }();
  std::vector<std::string> envs;
  for (char** e = daemon_env; e && *e; ++e) {
    std::string kv = *e;
    std::string k = kv.substr(0, kv.find('='));
    if (set.count(k)) continue;
    if (k.rfind("TESSERA_", 0) == 0 && !kKeep.count(k)) continue;
    envs.push_back(kv);
  }
  for (const auto& [k, v] : set) envs.push_back(k + "=" + v);
  return envs;
}

Result<pid_t> Launch(const LaunchRequest& r) {
  std::vector<std::string> args = {r.self_exe, "daemon",   "shim",  "--dir",  r.attempt_dir,
                                   "--log",    r.log_path, "--cwd", r.workdir};
  if (r.uid >= 0) {
    args.insert(args.end(), {"--uid", std::to_string(r.uid), "--gid", std::to_string(r.gid)});
  }
  if (!r.bwrap.empty()) {
    args.insert(args.end(), {"--bwrap", r.bwrap});
    for (const auto& h : r.hide) args.insert(args.end(), {"--hide", h});
    for (const auto& b : r.bind) args.insert(args.end(), {"--bind", b});
  }
  args.push_back("--");
  if (r.launcher.empty()) {
    args.push_back(r.self_exe);
    args.push_back("run");
  } else {
    for (const auto& l : r.launcher) args.push_back(l);
  }
  for (auto& a : IslandArgs(r.islands)) args.push_back(a);
  args.push_back("--");
  for (const auto& c : r.command) args.push_back(c);

  std::vector<std::string> envs = JobEnvironment(environ, r.env);
  std::vector<char*> argv, envp;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  for (auto& e : envs) envp.push_back(e.data());
  envp.push_back(nullptr);

  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  sigset_t none, all;
  sigemptyset(&none);
  sigfillset(&all);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setsigdefault(&attr, &all);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSID | POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
  posix_spawn_file_actions_addopen(&fa, 2, r.log_path.c_str(), O_WRONLY | O_APPEND | O_CREAT, 0600);
  pid_t pid = 0;
  int rc = posix_spawn(&pid, r.self_exe.c_str(), &fa, &attr, argv.data(), envp.data());
  posix_spawn_file_actions_destroy(&fa);
  posix_spawnattr_destroy(&attr);
  if (rc != 0) return ErrnoError("start the job shim " + r.self_exe, rc);
  return pid;
}

Result<ShimPids> ReadPidFile(const std::string& dir) {
  auto text = ReadFile(dir + "/pid.json");
  if (!text.ok()) return NotFound(dir + "/pid.json not written yet");
  try {
    auto j = nlohmann::json::parse(*text);
    return ShimPids{j.at("shim").get<pid_t>(), j.at("child").get<pid_t>(), j.at("started_ms").get<int64_t>(),
                    j.value("sandboxed", false)};
  } catch (const std::exception& e) {
    return Corrupt(fmt::format("{}/pid.json: {}", dir, e.what()));
  }
}

Result<ShimExit> ReadExitFile(const std::string& dir) {
  auto text = ReadFile(dir + "/exit.json");
  if (!text.ok()) return NotFound(dir + "/exit.json not written yet");
  try {
    auto j = nlohmann::json::parse(*text);
    return ShimExit{j.at("exit_code").get<int>(), j.at("signal").get<int>(), j.at("ended_ms").get<int64_t>(),
                    j.value("started", true)};
  } catch (const std::exception& e) {
    return Corrupt(fmt::format("{}/exit.json: {}", dir, e.what()));
  }
}

// ---- the shim ------------------------------------------------------------------------------------------

int RunShim(int argc, char** argv) {
  std::string dir, log, cwd, bwrap;
  std::vector<std::string> hide, bind;
  long uid = -1, gid = -1;
  int i = 1;
  for (; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--") {
      ++i;
      break;
    }
    if (i + 1 >= argc) break;
    if (a == "--dir")
      dir = argv[++i];
    else if (a == "--log")
      log = argv[++i];
    else if (a == "--cwd")
      cwd = argv[++i];
    else if (a == "--uid")
      uid = std::strtol(argv[++i], nullptr, 10);
    else if (a == "--gid")
      gid = std::strtol(argv[++i], nullptr, 10);
    else if (a == "--bwrap")
      bwrap = argv[++i];
    else if (a == "--hide")
      hide.push_back(argv[++i]);
    else if (a == "--bind")
      bind.push_back(argv[++i]);
    else {
      std::fprintf(stderr, "tessera daemon shim: unknown option '%s'\n", a.c_str());
      return 2;
    }
  }
  if (dir.empty() || log.empty() || i >= argc) {
    std::fprintf(stderr,
                 "usage: tessera daemon shim --dir DIR --log FILE [--cwd DIR] [--uid N --gid N] [--bwrap "
                 "PATH [--hide DIR]... [--bind DIR]...] -- PROGRAM ARGS...\n");
    return 2;
  }
  if ((uid >= 0) != (gid >= 0) || uid == 0 || gid == 0) {
    std::fprintf(stderr, "tessera daemon shim: --uid and --gid go together and may not be 0\n");
    return 2;
  }
  // Nothing the daemon had open (its database, its listening socket) reaches the job.
  ::close_range(3, ~0U, 0);
  // The shim outlives signals aimed at the job; it only records.
  ::signal(SIGTERM, SIG_IGN);
  ::signal(SIGINT, SIG_IGN);
  ::signal(SIGHUP, SIG_IGN);
  ::signal(SIGPIPE, SIG_IGN);
  int64_t started = NowMs();
  // The child writes one byte here when it fails before its program starts; exec closes the pipe.
  int started_pipe[2];
  if (::pipe2(started_pipe, O_CLOEXEC) != 0) {
    std::fprintf(stderr, "tessera daemon shim: pipe: %s\n", std::strerror(errno));
    return 1;
  }
  pid_t child = ::fork();
  if (child < 0) {
    std::fprintf(stderr, "tessera daemon shim: fork: %s\n", std::strerror(errno));
    return 1;
  }
  if (child == 0) {
    ::setpgid(0, 0);
    ::signal(SIGTERM, SIG_DFL);
    ::signal(SIGINT, SIG_DFL);
    ::signal(SIGHUP, SIG_DFL);
    ::signal(SIGPIPE, SIG_DFL);
    int fd = ::open(log.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600);
    if (fd >= 0) {
      ::dup2(fd, 1);
      ::dup2(fd, 2);
    }
    ::close(started_pipe[0]);
    int never_started = started_pipe[1];
    auto fail = [never_started] {
      ssize_t w = ::write(never_started, "x", 1);
      (void)w;
      _exit(127);
    };
    auto die = [&fail](const char* what) {
      std::fprintf(stderr, "tessera daemon shim: %s: %s\n", what, std::strerror(errno));
      fail();
    };
    if (uid >= 0) {
      if (::setgroups(0, nullptr) != 0) die("setgroups");
      if (::setgid(static_cast<gid_t>(gid)) != 0) die("setgid");
      if (::setuid(static_cast<uid_t>(uid)) != 0) die("setuid");
      if (::setuid(0) == 0) die("the job could regain root");
    }
    if (::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) die("prctl(PR_SET_NO_NEW_PRIVS)");
    if (!bwrap.empty()) {
      // bubblewrap: a new pid namespace and /proc (no view of the daemon's processes), the state directory and
      // the other jobs' directories hidden under empty tmpfs mounts, this job's directories bound back.
      std::vector<std::string> b = {bwrap,  "--bind", "/",      "/",     "--dev-bind",
                                    "/dev", "/dev",   "--proc", "/proc", "--unshare-pid"};
      for (const auto& h : hide) b.insert(b.end(), {"--tmpfs", h});
      for (const auto& d : bind) b.insert(b.end(), {"--bind", d, d});
      if (!cwd.empty()) b.insert(b.end(), {"--chdir", cwd});
      b.push_back("--");
      for (int k = i; k < argc; ++k) b.push_back(argv[k]);
      std::vector<char*> bv;
      for (auto& x : b) bv.push_back(x.data());
      bv.push_back(nullptr);
      ::execv(bv[0], bv.data());
      die(("cannot start " + bwrap).c_str());
    }
    if (!cwd.empty() && ::chdir(cwd.c_str()) != 0) {
      int e = errno;
      std::fprintf(stderr, "tessera daemon shim: cannot enter the job's workdir %s: %s", cwd.c_str(), std::strerror(e));
      if (uid >= 0) std::fprintf(stderr, " (the job runs as uid %ld; see the daemon's --work-dir)", uid);
      std::fprintf(stderr, "\n");
      fail();
    }
    ::execvp(argv[i], argv + i);
    int e = errno;
    std::fprintf(stderr, "tessera daemon shim: cannot start %s: %s\n", argv[i], std::strerror(e));
    if (e == EACCES && uid >= 0)
      std::fprintf(stderr,
                   "tessera daemon shim: the job runs as uid %ld, which must be able to reach and run it: make its "
                   "directories searchable (chmod o+x) or choose another --job-user\n",
                   uid);
    fail();
  }
  ::close(started_pipe[1]);
  nlohmann::json pj = {{"shim", ::getpid()}, {"child", child}, {"started_ms", started}, {"sandboxed", !bwrap.empty()}};
  Status s = WriteFileAtomic(dir + "/pid.json", pj.dump());
  if (!s.ok()) std::fprintf(stderr, "tessera daemon shim: %s\n", s.ToString().c_str());
  char byte = 0;
  ssize_t r;
  while ((r = ::read(started_pipe[0], &byte, 1)) < 0 && errno == EINTR) {
  }
  ::close(started_pipe[0]);
  int status = 0;
  while (::waitpid(child, &status, 0) < 0 && errno == EINTR) {
  }
  nlohmann::json ej = {{"exit_code", WIFEXITED(status) ? WEXITSTATUS(status) : -1},
                       {"signal", WIFSIGNALED(status) ? WTERMSIG(status) : 0},
                       {"ended_ms", NowMs()},
                       {"started", r != 1}};
  s = WriteFileAtomic(dir + "/exit.json", ej.dump());
  if (!s.ok()) {
    std::fprintf(stderr, "tessera daemon shim: %s\n", s.ToString().c_str());
    return 1;
  }
  return 0;
}

}  // namespace tessera::daemon
