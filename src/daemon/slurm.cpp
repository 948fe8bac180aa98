// daemon/slurm: parsing of Slurm's text (nodes, jobs, accounting), the state mapping, the sbatch command line
// and batch script of a heterogeneous job, and bounded runs of Slurm's commands (see slurm.hpp).
#include "daemon/slurm.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <ctime>
#include <set>

#include "common/text.hpp"
#include "common/vendor.hpp"

namespace tessera::daemon::slurm {

std::string GresOf(const sched::AcceleratorType& type) {
  if (!type.slurm_gres.empty()) return type.slurm_gres;
  const DeviceFamily* family = FindFamilyOfVendor(type.vendor);  // common/vendor: the family's row
  if (family != nullptr && *family->slurm_gres != 0) return family->slurm_gres;
  return type.vendor;
}

namespace {

bool Digits(const std::string& s) {
  return !s.empty() && s.size() <= 15 && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

// A word that starts a new Key=Value pair: a key of letters, digits and _:/() before the first '='.
bool IsKeyWord(const std::string& w) {
  size_t eq = w.find('=');
  if (eq == std::string::npos || eq == 0 || !std::isalpha(static_cast<unsigned char>(w[0]))) return false;
  for (size_t i = 0; i < eq; ++i) {
    char c = w[i];
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_' && c != ':' && c != '/' && c != '(' && c != ')')
      return false;
  }
  return true;
}

using Record = std::map<std::string, std::string>;

// Splits scontrol's Key=Value text into records, each starting at the key `first` (NodeName, JobId). A word
// without '=' continues the previous value (OS=Linux 6.1 #1 SMP, Reason=test [root@...]).
std::vector<Record> Records(const std::string& text, const std::string& first) {
  std::vector<Record> out;
  std::string last;
  size_t i = 0;
  while (i < text.size()) {
    while (i < text.size() && std::isspace(static_cast<unsigned char>(text[i]))) ++i;
    size_t j = i;
    while (j < text.size() && !std::isspace(static_cast<unsigned char>(text[j]))) ++j;
    if (j == i) break;
    std::string w = text.substr(i, j - i);
    i = j;
    if (IsKeyWord(w)) {
      std::string k = w.substr(0, w.find('=')), v = w.substr(w.find('=') + 1);
      if (k == first) out.emplace_back();
      if (out.empty()) continue;  // text before the first record (a header, a warning)
      out.back()[k] = v;
      last = k;
    } else if (!out.empty() && !last.empty()) {
      out.back()[last] += " " + w;
    }
  }
  return out;
}

std::string Get(const Record& r, const std::string& k) {
  auto it = r.find(k);
  return it == r.end() ? "" : it->second;
}

void ParseExit(const std::string& text, int* code, int* sig) {
  size_t colon = text.find(':');
  std::string c = text.substr(0, colon), s = colon == std::string::npos ? "0" : text.substr(colon + 1);
  *code = Digits(c) ? std::stoi(c) : 0;
  *sig = Digits(s) ? std::stoi(s) : 0;
}

}  // namespace

Result<std::vector<Gres>> ParseGres(const std::string& text) {
  std::vector<Gres> out;
  if (text.empty() || text == "(null)" || text == "N/A") return out;
  for (std::string item : SplitOutsideBrackets(text, ',')) {
    size_t paren = item.find('(');
    if (paren != std::string::npos) item = item.substr(0, paren);  // (S:0-1): socket affinity
    if (item.empty()) continue;
    auto parts = SplitOutsideBrackets(item, ':');
    Gres g;
    g.name = parts[0];
    if (g.name.empty()) return InvalidArgument(fmt::format("GRES '{}': '{}' has no name", text, item));
    g.count = 1;
    std::string count;
    if (parts.size() >= 2) {
      count = parts.back();
      int64_t mult = 1;
      if (!count.empty() && std::strchr("KMG", count.back())) {
        mult = count.back() == 'K' ? 1024 : count.back() == 'M' ? 1024 * 1024 : int64_t{1} << 30;
        count.pop_back();
      }
      if (Digits(count)) {
        g.count = std::stoll(count) * mult;
        if (parts.size() >= 3) g.type = parts[1];
      } else {
        if (parts.size() > 2)
          return InvalidArgument(fmt::format("GRES '{}': '{}' is not NAME[:TYPE][:COUNT]", text, item));
        g.type = parts[1];  // gpu:tesla: one card of a type
      }
    }
    out.push_back(g);
  }
  return out;
}

Result<std::vector<Node>> ParseNodes(const std::string& text) {
  std::vector<Node> out;
  for (const auto& r : Records(text, "NodeName")) {
    Node n;
    n.name = Get(r, "NodeName");
    if (n.name.empty()) return InvalidArgument("scontrol show nodes: a record has an empty NodeName");
    n.state = Get(r, "State");
    for (const auto& p : SplitOutsideBrackets(Get(r, "Partitions"), ','))
      if (!p.empty()) n.partitions.push_back(p);
    auto g = ParseGres(Get(r, "Gres"));
    if (!g.ok()) return g.status().WithContext("scontrol show nodes: node " + n.name);
    n.gres = *g;
    out.push_back(std::move(n));
  }
  return out;
}

std::string SlurmNodeOf(const std::string& id) { return id.substr(0, id.find('/')); }

bool IsDown(const Node& n) {
  return n.state.find("DOWN") != std::string::npos || n.state.find("DRAIN") != std::string::npos ||
         n.state.find("FAIL") != std::string::npos;
}

std::vector<std::string> LostNodes(const std::vector<Node>& nodes, const std::vector<std::string>& fleet_nodes) {
  std::vector<std::string> lost;
  for (const auto& id : fleet_nodes)
    for (const auto& n : nodes)
      if (n.name == SlurmNodeOf(id) && IsDown(n)) {
        lost.push_back(id);
        break;
      }
  return lost;
}

Status CheckNoSmShare(const FleetSpec& fleet) {
  for (const auto& n : fleet.fleet.nodes) {
    int p = fleet.SmShare(n.id);
    if (p <= 0) continue;
    return Unsupported(fmt::format(
        "{}: node '{}' has sm_share {}, but the Slurm executor cannot run cards on an SM share of a GPU (a "
        "single-host emulation through one launcher's NVIDIA MPS); drop sm_share (emulated: true runs them as host "
        "ranks) or use the local executor",
        n.line > 0 ? fmt::format("{}:{}", fleet.fleet.source, n.line) : fleet.fleet.source, n.id, p));
  }
  return Status::Ok();
}

Status CheckNoSmShare(const std::vector<Island>& islands) {
  for (const auto& i : islands) {
    if (i.sm_share <= 0) continue;
    return Unsupported(
        fmt::format("island {} ({}) is emulated on an SM share of {}% of a GPU, which the Slurm executor cannot run (a "
                    "single-host emulation through one launcher's NVIDIA MPS); use the local executor",
                    i.vendor, i.type, i.sm_share));
  }
  return Status::Ok();
}

Result<std::string> FleetYaml(const std::vector<Node>& nodes, const sched::Catalog& catalog, const ImportOptions& o,
                              const std::string& origin) {
  std::string body, notes;
  int64_t count = 0;
  for (const auto& n : nodes) {
    if (IsDown(n) && !o.include_down) {
      notes += fmt::format("# node {} left out: state {}\n", n.name, n.state);
      continue;
    }
    std::string zone = !o.zone.empty() ? o.zone : n.partitions.empty() ? "" : n.partitions.front();
    if (zone.empty()) {
      notes += fmt::format("# node {} left out: in no partition\n", n.name);
      continue;
    }
    // Cards per catalog type: a GRES matches a type's "NAME" (any subtype) or "NAME:TYPE".
    std::vector<std::pair<std::string, int64_t>> cards;
    for (const auto& g : n.gres) {
      const sched::AcceleratorType* match = nullptr;
      for (const auto& t : catalog.types) {
        std::string want = GresOf(t);
        if (want == g.name || (!g.type.empty() && want == g.name + ":" + g.type)) {
          // A typed match wins over an untyped one.
          if (!match || want.find(':') != std::string::npos) match = &t;
        }
      }
      if (!match) {
        notes += fmt::format("# node {}: GRES {}{}:{} matches no catalog type (set slurm_gres in the catalog)\n",
                             n.name, g.name, g.type.empty() ? "" : ":" + g.type, g.count);
        continue;
      }
      auto it = std::find_if(cards.begin(), cards.end(), [&](const auto& c) { return c.first == match->name; });
      if (it == cards.end())
        cards.emplace_back(match->name, g.count);
      else
        it->second += g.count;
    }
    for (const auto& [type, k] : cards) {
      std::string id = cards.size() == 1 ? n.name : n.name + "/" + type;
      body += fmt::format("  - {{id: {}, zone: {}, type: {}, cards: {}}}\n", id, zone, type, k);
      ++count;
    }
  }
  if (count == 0)
    return NotFound(
        fmt::format("{}: no node has a GRES of a catalog type ({} nodes read)\n{}", origin, nodes.size(), notes));
  std::string head = fmt::format("# fleet imported from {} by `tessera fleet import --slurm`\n", origin);
  head += "# zone = the node's first Slurm partition; id = the Slurm node (NODE/TYPE when it has several types)\n";
  head += notes;
  if (o.emulated) head += "emulated: true\n";
  return head + "nodes:\n" + body;
}

int64_t ParseTime(const std::string& text) {
  std::tm tm{};
  const char* end = strptime(text.c_str(), "%Y-%m-%dT%H:%M:%S", &tm);
  if (!end || *end != '\0') return -1;
  tm.tm_isdst = -1;
  return static_cast<int64_t>(std::mktime(&tm));
}

Result<std::vector<JobRecord>> ParseJobs(const std::string& text) {
  std::vector<JobRecord> out;
  for (const auto& r : Records(text, "JobId")) {
    JobRecord j;
    std::string id = Get(r, "JobId");
    if (!Digits(id)) return InvalidArgument(fmt::format("Slurm job record: JobId '{}' is not a number", id));
    j.id = std::stoll(id);
    std::string h = Get(r, "HetJobId"), off = Get(r, "HetJobOffset");
    if (Digits(h)) j.het_id = std::stoll(h);
    if (Digits(off)) j.het_offset = std::stoll(off);
    j.state = Get(r, "JobState");
    j.reason = Get(r, "Reason");
    if (j.reason == "None" || j.reason == "(null)") j.reason.clear();
    j.start_unix = ParseTime(Get(r, "StartTime"));
    j.end_unix = ParseTime(Get(r, "EndTime"));
    ParseExit(Get(r, "ExitCode"), &j.exit_code, &j.signal);
    j.nodes = Get(r, "NodeList");
    if (j.nodes == "(null)") j.nodes.clear();
    out.push_back(std::move(j));
  }
  return out;
}

Result<std::vector<JobRecord>> ParseSacct(const std::string& text) {
  std::vector<JobRecord> out;
  size_t start = 0;
  while (start < text.size()) {
    size_t nl = std::min(text.find('\n', start), text.size());
    std::string line = text.substr(start, nl - start);
    start = nl + 1;
    if (line.empty() || line.find('|') == std::string::npos) continue;  // sacct -c's "error: Unknown type" lines
    auto f = SplitOutsideBrackets(line, '|');
    if (f.size() < 4) return InvalidArgument(fmt::format("sacct: '{}' has fewer than 4 fields", line));
    std::string id = f[0];
    if (id.find('.') != std::string::npos) continue;  // a step
    JobRecord j;
    size_t plus = id.find('+');
    if (plus != std::string::npos) {  // 12+1: component 1 of het job 12 (sacct with slurmdbd)
      std::string h = id.substr(0, plus), off = id.substr(plus + 1);
      if (!Digits(h) || !Digits(off)) return InvalidArgument(fmt::format("sacct: JobID '{}' is not N or N+K", id));
      j.het_id = std::stoll(h);
      j.het_offset = std::stoll(off);
    } else {
      if (!Digits(id)) return InvalidArgument(fmt::format("sacct: JobID '{}' is not a number", id));
      j.id = std::stoll(id);
    }
    j.state = f[1].substr(0, f[1].find(' '));  // "CANCELLED by 0"
    j.start_unix = ParseTime(f[2]);
    j.end_unix = ParseTime(f[3]);
    if (f.size() >= 5) ParseExit(f[4], &j.exit_code, &j.signal);
    out.push_back(std::move(j));
  }
  return out;
}

Phase PhaseOf(const std::string& s) {
  std::string st = s.substr(0, s.find_first_of("+ "));
  if (st == "RUNNING" || st == "COMPLETING" || st == "SIGNALING" || st == "STAGE_OUT" || st == "SUSPENDED" ||
      st == "STOPPED" || st == "RESIZING")
    return Phase::kRunning;
  if (st == "COMPLETED") return Phase::kCompleted;
  if (st == "CANCELLED" || st == "REVOKED") return Phase::kCancelled;
  if (st == "NODE_FAIL") return Phase::kNodeFail;
  if (st == "FAILED" || st == "TIMEOUT" || st == "OUT_OF_MEMORY" || st == "BOOT_FAIL" || st == "DEADLINE" ||
      st == "PREEMPTED")
    return Phase::kFailed;
  return Phase::kPending;  // PENDING, CONFIGURING, REQUEUED, REQUEUE_HOLD, REQUEUE_FED, RESV_DEL_HOLD, ...
}

const char* PhaseName(Phase p) {
  switch (p) {
    case Phase::kPending:
      return "pending";
    case Phase::kRunning:
      return "running";
    case Phase::kCompleted:
      return "completed";
    case Phase::kFailed:
      return "failed";
    case Phase::kCancelled:
      return "cancelled";
    case Phase::kNodeFail:
      return "node failure";
  }
  return "?";
}

std::vector<JobRecord> RecordsOf(const std::vector<JobRecord>& all, int64_t id) {
  std::vector<JobRecord> out;
  for (const auto& r : all)
    if (r.het_id == id || (r.het_id == 0 && r.id == id)) out.push_back(r);
  std::sort(out.begin(), out.end(), [](const JobRecord& a, const JobRecord& b) { return a.het_offset < b.het_offset; });
  return out;
}

JobState Combine(const std::vector<JobRecord>& records) {
  JobState s;
  bool any_pending = false, any_running = false, any_node_fail = false, any_cancel = false, any_fail = false;
  for (const auto& r : records) {
    Phase p = PhaseOf(r.state);
    std::string st = r.state.empty() ? "?" : r.state;
    if (("+" + s.states + "+").find("+" + st + "+") == std::string::npos)
      s.states += (s.states.empty() ? "" : "+") + st;
    any_pending |= p == Phase::kPending;
    any_running |= p == Phase::kRunning;
    any_node_fail |= p == Phase::kNodeFail;
    any_cancel |= p == Phase::kCancelled;
    any_fail |= p == Phase::kFailed;
    if (s.reason.empty()) s.reason = r.reason;
    if (r.start_unix >= 0 && (s.start_unix < 0 || r.start_unix < s.start_unix)) s.start_unix = r.start_unix;
    if (r.end_unix >= 0 && r.end_unix > s.end_unix) s.end_unix = r.end_unix;
    if (s.exit_code == 0 && s.signal == 0) {
      s.exit_code = r.exit_code;
      s.signal = r.signal;
    }
    if (!r.nodes.empty()) s.nodes += (s.nodes.empty() ? "" : ",") + r.nodes;
  }
  if (any_running)
    s.phase = Phase::kRunning;
  else if (any_pending || records.empty())
    s.phase = Phase::kPending;
  else if (any_node_fail)
    s.phase = Phase::kNodeFail;
  else if (any_cancel)
    s.phase = Phase::kCancelled;
  else if (any_fail)
    s.phase = Phase::kFailed;
  else
    s.phase = Phase::kCompleted;
  return s;
}

Result<std::vector<std::string>> SbatchArgs(const SubmitRequest& r) {
  if (r.components.empty()) return InvalidArgument("a Slurm job needs at least one component");
  std::vector<std::string> a = {"--parsable",           "--job-name=" + r.job_name, "--chdir=" + r.workdir,
                                "--output=" + r.output, "--open-mode=append",       "--no-requeue"};
  if (r.uid >= 0) {
    a.push_back(fmt::format("--uid={}", r.uid));
    a.push_back(fmt::format("--gid={}", r.gid));
  }
  for (size_t i = 0; i < r.components.size(); ++i) {
    const Component& c = r.components[i];
    if (c.nodes.empty()) return InvalidArgument(fmt::format("component {} ({}) has no nodes", i, c.gres));
    if (i > 0) a.push_back(":");
    std::string list;
    int64_t cards = 0, most = 0, least = INT64_MAX;
    for (const auto& [node, k] : c.nodes) {
      list += (list.empty() ? "" : ",") + node;
      cards += k;
      most = std::max(most, k);
      least = std::min(least, k);
    }
    if (!c.partition.empty()) a.push_back("--partition=" + c.partition);
    a.push_back("--nodelist=" + list);
    a.push_back(fmt::format("--nodes={}", c.nodes.size()));
    a.push_back(fmt::format("--ntasks={}", cards));
    if (most == least) a.push_back(fmt::format("--ntasks-per-node={}", most));
    // --gres counts per node: nodes with fewer planned cards are asked for as many as the largest.
    a.push_back(fmt::format("--gres={}:{}", c.gres, most));
  }
  a.push_back(r.script);
  return a;
}

std::string ShellQuote(const std::string& w) {
  std::string q = "'";
  for (char c : w) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

std::string BatchScript(const std::vector<std::string>& command, size_t components, const std::string& comment) {
  std::string groups;
  for (size_t i = 0; i < components; ++i) groups += (i ? "," : "") + std::to_string(i);
  std::string s = "#!/bin/sh\n# " + comment + "\n";
  s += "# One step over every component: one task per card, each a `tessera run` launcher of one rank.\n";
  // A job of one component is no heterogeneous job: srun --het-group would find no component to run on.
  s += components > 1 ? "exec srun --het-group=" + groups + " --kill-on-bad-exit=1" : "exec srun --kill-on-bad-exit=1";
  for (const auto& w : command) s += " " + ShellQuote(w);
  return s + "\n";
}

// ---- commands -------------------------------------------------------------------------------------------

std::string CommandResult::Describe(const std::string& command) const {
  auto trim = [](std::string s) {
    while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.pop_back();
    return s;
  };
  std::string msg = trim(err).empty() ? trim(out) : trim(err);
  if (timed_out)
    return fmt::format("`{}` did not answer within its time limit (killed){}", command, msg.empty() ? "" : ": " + msg);
  if (exit_code == 127 && msg.find("cannot start") != std::string::npos) return msg;
  return fmt::format("`{}` failed (exit {}){}", command, exit_code, msg.empty() ? "" : ": " + msg);
}

CommandResult RunCommand(const std::vector<std::string>& argv, int64_t timeout_ms,
                         const std::vector<std::string>* env) {
  CommandResult res;
  int out[2], err[2];
  if (::pipe2(out, O_CLOEXEC) != 0) {
    res.err = fmt::format("pipe: {}", std::strerror(errno));
    return res;
  }
  if (::pipe2(err, O_CLOEXEC) != 0) {
    res.err = fmt::format("pipe: {}", std::strerror(errno));
    ::close(out[0]);
    ::close(out[1]);
    return res;
  }
  std::vector<std::string> args = argv, envs = env ? *env : std::vector<std::string>{};
  std::vector<char*> av, ev;
  for (auto& a : args) av.push_back(a.data());
  av.push_back(nullptr);
  for (auto& e : envs) ev.push_back(e.data());
  ev.push_back(nullptr);
  pid_t pid = ::fork();
  if (pid < 0) {
    res.err = fmt::format("fork: {}", std::strerror(errno));
    for (int fd : {out[0], out[1], err[0], err[1]}) ::close(fd);
    return res;
  }
  if (pid == 0) {
    ::setpgid(0, 0);
    int devnull = ::open("/dev/null", O_RDONLY);
    if (devnull >= 0) ::dup2(devnull, 0);
    ::dup2(out[1], 1);
    ::dup2(err[1], 2);
    ::close_range(3, ~0U, 0);
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    if (env)
      ::execvpe(av[0], av.data(), ev.data());
    else
      ::execvp(av[0], av.data());
    const char* m = "cannot start ";
    ssize_t ignored = ::write(2, m, std::strlen(m));
    ignored = ::write(2, av[0], std::strlen(av[0]));
    const char* m2 = ": not found or not executable (is Slurm's client installed and in PATH?)\n";
    ignored = ::write(2, m2, std::strlen(m2));
    (void)ignored;
    _exit(127);
  }
  ::setpgid(pid, pid);
  ::close(out[1]);
  ::close(err[1]);
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  bool open_out = true, open_err = true;
  char buf[4096];
  while (open_out || open_err) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      res.timed_out = true;
      break;
    }
    pollfd fds[2] = {{open_out ? out[0] : -1, POLLIN, 0}, {open_err ? err[0] : -1, POLLIN, 0}};
    int n = ::poll(fds, 2, static_cast<int>(std::min<int64_t>(left.count(), 1000)));
    if (n < 0 && errno != EINTR) break;
    for (int k = 0; k < 2; ++k) {
      if (!(fds[k].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      ssize_t got = ::read(fds[k].fd, buf, sizeof buf);
      if (got > 0)
        (k == 0 ? res.out : res.err).append(buf, static_cast<size_t>(got));
      else
        (k == 0 ? open_out : open_err) = false;
    }
  }
  if (res.timed_out) ::kill(-pid, SIGKILL);
  ::close(out[0]);
  ::close(err[0]);
  int status = 0;
  // After the pipes closed the command exits at once; a grandchild that kept them open is not waited for.
  for (int i = 0; i < 100; ++i) {
    pid_t w = ::waitpid(pid, &status, WNOHANG);
    if (w == pid) {
      if (!res.timed_out) res.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
      return res;
    }
    if (w < 0 && errno != EINTR) return res;
    if (i == 50) ::kill(-pid, SIGKILL);
    ::usleep(10000);
  }
  return res;
}

}  // namespace tessera::daemon::slurm
