// launch/job: runs this node's ranks of a `tessera run` job — what a one-node job is, and each node's
// part of a job across nodes. Starts the store (node 0) with the job token, forks and execs one process per
// rank with its environment (RankEnvironment), prefixes and forwards their output, forwards signals, and
// when a rank fails reports which one and how, gives the others a short grace (--stop-grace), then stops them; the
// other nodes of a job across nodes hear of it through the store (launch/failure_notice) and stop theirs too.
//
// One thread does everything after start-up: a poll loop over the ranks' stdout/stderr pipes and a
// self-pipe that the signal handlers (SIGCHLD, SIGINT, SIGTERM, SIGHUP) write to. Each rank runs in its
// own process group, so that a terminal's Ctrl-C reaches the launcher only (which forwards it once) and
// stopping a rank also stops the processes it started. Ranks die with the launcher (PR_SET_PDEATHSIG).
#include <fcntl.h>
#include <fmt/format.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <set>
#include <thread>

#include "comm/store/store.hpp"
#include "common/env.hpp"
#include "common/log.hpp"
#include "common/token.hpp"
#include "launch/failure_notice.hpp"
#include "launch/internal.hpp"
#include "launch/launcher.hpp"
#include "launch/signal_scope.hpp"

extern char** environ;

namespace tessera::launch {

using comm::FormatDuration;
using comm::StoreLimits;
using comm::StoreServer;

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

namespace {

constexpr size_t kMaxLine = 1 << 20;  // a longer line without '\n' is emitted in pieces of this size

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
    Result<std::string> token =
        options_.token.empty() ? RandomToken("the job token") : Result<std::string>(options_.token);
    Result<std::unique_ptr<StoreServer>> store = InternalError("not started");
    if (token.ok() && options_.node_rank != 0) {
      store = std::unique_ptr<StoreServer>();  // node 0 serves it
    } else if (token.ok()) {
      // Room for every rank's communicators (a split opens one store connection per member) unless
      // TESSERA_STORE_MAX_CONNS says otherwise.
      StoreLimits limits = StoreLimits::FromEnv();
      limits.handshake_timeout = options_.timeout;  // the job's --timeout, not only TESSERA_TIMEOUT
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
    for (const DeviceFamily& f : kDeviceFamilies) visible_devices_[f.prefix] = env::Get(f.visible_env).value_or("");

    Status s = signals_.Install();
    if (!s.ok()) return Fail(1, s.message());
    if (multi) {  // with the signals blocked: the notice's thread must not take them
      ::pthread_sigmask(SIG_BLOCK, &block, &old);
      notice_ = std::make_unique<FailureNotice>(fmt::format("{}:{}", store_host_, store_port_), token_,
                                                options_.node_rank, options_.timeout, signals_.write_fd(), kNoticeByte);
      ::pthread_sigmask(SIG_SETMASK, &old, nullptr);
    }
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
    if (multi && store_ && exit_code_ != 0) LingerForOtherNodes();
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

  // Node 0 of a job that failed keeps the store up a little longer: the other nodes' ranks read from it
  // which rank failed first and why (the failure their own messages name). Without it, a rank that saw
  // only a closed connection to a node-0 rank, because that rank had already exited, could name node 0
  // instead of the host that was lost (seen in Hosts.AHostWhoseProcessesAreKilledMakesEveryRankFailNamingIt).
  void LingerForOtherNodes() {
    const auto linger = std::min<std::chrono::milliseconds>(options_.timeout, std::chrono::seconds(2));
    Say(fmt::format("the job failed: keeping its store up for {} so that the other nodes' ranks can read why",
                    FormatDuration(linger)));
    std::this_thread::sleep_for(linger);
  }

  int Fail(int code, const std::string& message) {
    std::fprintf(stderr, "tessera run: %s\n", message.c_str());
    return code;
  }
  void Say(const std::string& message) { std::fprintf(stderr, "tessera run: %s\n", message.c_str()); }

  // Forks and execs one rank; 0, or the launcher's exit status when it could not be started.
  int StartRank(Rank& r) {
    const std::string addr = fmt::format("{}:{}", store_host_, store_port_);
    const IslandSpec& island = options_.islands[r.spec.island];
    const std::string visible = island.family != nullptr ? visible_devices_[island.family->prefix] : "";
    auto vars = RankEnvironment(r.spec, world_size_, layout_, addr, token_, options_.timeout, master_port_, visible,
                                options_.local_world > 0 ? options_.local_world : static_cast<int>(ranks_.size()),
                                master_addr_);
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
                                options_.prefix ? fmt::format("[rank {} {}] ", r.spec.rank, r.spec.vendor) : "",
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
              left == 1 ? "" : "s", FormatDuration(options_.stop_grace), first_failed_,
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
        if (sig == kNoticeByte) {
          OnOtherNodesFailure();
          continue;
        }
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
    if (notice_) notice_->Post(r.spec.rank, code, fmt::format("rank {} ({}) {}", r.spec.rank, r.spec.vendor, how));
    StartGrace(Running() == 1 ? std::string("the other rank") : fmt::format("the other {} ranks", Running()));
  }

  // The grace after the job's first failure: the ranks still running get --stop-grace to exit on their own.
  void StartGrace(const std::string& whom) {
    const size_t left = Running();
    if (left > 0 && kill_deadline_ == Clock::time_point::max()) {
      Say(fmt::format("waiting up to {} (--stop-grace) for {} to exit, then stopping {}",
                      FormatDuration(options_.stop_grace), whom, left == 1 ? "it" : "them"));
      grace_deadline_ = Clock::now() + options_.stop_grace;
    }
  }

  // Another node's launcher posted the job's first failure: this node's ranks get the same grace.
  void OnOtherNodesFailure() {
    auto n = notice_ ? notice_->Take() : std::nullopt;
    if (!n || first_failed_ >= 0) return;
    Say(fmt::format("node {}: {}", n->node, n->what));
    first_failed_ = n->rank;
    exit_code_ = n->code;
    const size_t left = Running();
    StartGrace(left == 1 ? std::string("this node's rank") : fmt::format("this node's {} ranks", left));
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
  int master_port_ = 0;  // torchrun's MASTER_PORT for the ranks (a free loopback port; multi-node: store + 1)
  // The launcher's own visible-devices variable of each device family (CUDA_VISIBLE_DEVICES), "" when unset.
  std::map<std::string, std::string> visible_devices_;
  SignalScope signals_;
  // A job across nodes: the other nodes' first failure, and this node's for them. After signals_ (its thread
  // writes to signals_' pipe), so destroyed first.
  std::unique_ptr<FailureNotice> notice_;
  static constexpr unsigned char kNoticeByte = 0;  // on the self-pipe: no signal has number 0
  int exit_code_ = 0;
  int first_failed_ = -1;
  int interrupts_ = 0;
  int last_signal_sent_ = 0;
  bool output_gone_[3] = {false, false, false};
  Clock::time_point grace_deadline_ = Clock::time_point::max();
  Clock::time_point kill_deadline_ = Clock::time_point::max();
};

}  // namespace

namespace internal {

int RunJob(const Options& options, std::vector<RankSpec> ranks, int world_size, std::string layout, std::string path,
           std::vector<std::pair<std::string, std::string>> extra_env,
           std::map<int, std::vector<std::pair<std::string, std::string>>> island_env) {
  Job job(options, std::move(ranks), world_size, std::move(layout), std::move(path), std::move(extra_env),
          std::move(island_env));
  return job.Run();
}

}  // namespace internal

}  // namespace tessera::launch
