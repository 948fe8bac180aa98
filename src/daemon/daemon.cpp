// daemon/daemon: RunDaemon — signals, then the Daemon (daemon_impl.hpp) is set up (config.cpp) and served:
// the HTTP API (api.cpp) and the scheduler thread (scheduler.cpp) run until SIGINT/SIGTERM; SIGHUP reloads
// the tenants file.
#include "daemon/daemon.hpp"

#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <thread>

#include "daemon/daemon_impl.hpp"
#include "daemon/util.hpp"

namespace tessera::daemon {

using json = nlohmann::json;

std::atomic<bool> g_stop{false};
std::atomic<bool> g_reload{false};

namespace {
void OnSignal(int) { g_stop = true; }
void OnHangup(int) { g_reload = true; }
}  // namespace

int Daemon::Serve() {
  SetUpHttp();
  int port = opts_.port;
  if (port == 0) {
    port = http_.bind_to_any_port(opts_.host);
  } else if (!http_.bind_to_port(opts_.host, port)) {
    port = -1;
  }
  if (port <= 0) {
    std::fprintf(stderr, "tessera daemon: cannot listen on %s:%d\n", opts_.host.c_str(), opts_.port);
    return 1;
  }
  json info = {{"address", fmt::format("{}:{}", opts_.host, port)}, {"pid", ::getpid()}};
  Status s = WriteFileAtomic(opts_.state_dir + "/daemon.json", info.dump() + "\n", {.mode = 0600});
  if (!s.ok()) {
    std::fprintf(stderr, "tessera daemon: %s\n", s.ToString().c_str());
    return 1;
  }
  std::fprintf(stderr, "tessera daemon: listening on http://%s:%d (state %s, pid %d)\n", opts_.host.c_str(), port,
               opts_.state_dir.c_str(), ::getpid());
  std::fprintf(stderr,
               "tessera daemon: web console at http://%s:%d/ (log in with a tenant's token, or the admin token that "
               "`tessera daemon token` prints), metrics at /metrics\n",
               opts_.host.c_str(), port);
  std::thread loop([&] { Loop(); });
  std::thread http([&] { http_.listen_after_bind(); });
  while (!g_stop) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    if (g_reload.exchange(false)) {
      std::lock_guard<std::mutex> lk(mu_);
      // The admin token first (`tessera daemon token rotate`), then the tenants table that holds its hash.
      Status s = LoadAdminToken();
      if (s.ok()) s = LoadTenants();
      if (s.ok()) {
        std::fprintf(stderr, "tessera daemon: SIGHUP: reloaded STATE/token and %s (%zu tenants with the admin)\n",
                     opts_.tenants_file.empty() ? "no tenants file" : opts_.tenants_file.c_str(), tenants_.size());
      } else {
        std::fprintf(stderr, "tessera daemon: SIGHUP: %s; the previous tenants stay in force\n", s.ToString().c_str());
      }
    }
  }
  http_.stop();
  {
    std::lock_guard<std::mutex> lk(mu_);
    wake_ = true;
  }
  cv_.notify_all();
  loop.join();
  http.join();
  std::fprintf(stderr, "tessera daemon: stopped; running jobs keep running and are reconciled on the next start\n");
  return 0;
}

int RunDaemon(const DaemonOptions& options) {
  struct sigaction sa {};
  sa.sa_handler = OnSignal;
  sigemptyset(&sa.sa_mask);
  ::sigaction(SIGINT, &sa, nullptr);
  ::sigaction(SIGTERM, &sa, nullptr);
  sa.sa_handler = OnHangup;
  ::sigaction(SIGHUP, &sa, nullptr);
  ::signal(SIGPIPE, SIG_IGN);
  Daemon d(options);
  Status s = d.Init();
  if (!s.ok()) {
    std::fprintf(stderr, "tessera daemon: %s\n", s.message().c_str());
    return s.code() == Code::kInvalidArgument ? 2 : s.code() == Code::kUnsupported ? 4 : 1;
  }
  return d.Serve();
}

}  // namespace tessera::daemon
