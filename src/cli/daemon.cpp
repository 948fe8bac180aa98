// cli/daemon: `tessera daemon` — runs the job daemon (HTTP/JSON API on 127.0.0.1, SQLite state, queue with
// automatic wake-up, local executor). `tessera daemon token [show|rotate]` prints or replaces the admin token;
// `tessera daemon shim ...` is the per-attempt shim it starts.
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <cstring>
#include <sstream>
#include <tuple>

#include "cli/daemon_command.hpp"
#ifdef TESSERA_HAVE_DAEMON
#include <signal.h>

#include <nlohmann/json.hpp>

#include "common/env.hpp"
#include "common/file.hpp"
#include "common/process.hpp"
#include "common/token.hpp"
#include "daemon/daemon.hpp"
#include "daemon/executor.hpp"
#endif

namespace {

#ifdef TESSERA_HAVE_DAEMON
// `tessera daemon token [show|rotate] [--state-dir DIR]`: the admin token of STATE/token on stdout. rotate
// writes a new one (0600) and sends the running daemon SIGHUP, after which the old one is refused.
int RunToken(int argc, char** argv) {
  CLI::App app{
      "Print the daemon's admin token (STATE/token), or replace it (rotate): the web console and the CLI "
      "log in with it",
      "tessera daemon token"};
  std::string state, action = "show";
  app.add_option("action", action, "show (default) or rotate")->check(CLI::IsMember({"show", "rotate"}));
  app.add_option("--state-dir", state, "State directory (default $TESSERA_HOME or ~/.tessera)");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return tessera::cli::ParseExit(app, e);
  }
  state = tessera::daemon::DefaultStateDir(state);
  const std::string path = state + "/token";
  if (action == "show") {
    auto t = tessera::ReadFile(path);
    if (!t.ok()) {
      if (t.status().code() != tessera::Code::kNotFound) return tessera::cli::Fail("daemon token", t.status());
      return tessera::cli::Fail("daemon token",
                                tessera::NotFound(fmt::format("no admin token in {} (`tessera daemon --state-dir {}` "
                                                              "creates it at its first start)",
                                                              path, state)));
    }
    std::string tok = *t;
    while (!tok.empty() && (tok.back() == '\n' || tok.back() == ' ')) tok.pop_back();
    std::printf("%s\n", tok.c_str());
    return 0;
  }
  auto tok = tessera::RandomToken("the admin token");
  if (!tok.ok()) return tessera::cli::Fail("daemon token", tok.status());
  tessera::Status s = tessera::WriteFileAtomic(path, *tok + "\n", {.mode = 0600});
  if (!s.ok()) return tessera::cli::Fail("daemon token", s);
  std::printf("%s\n", tok->c_str());
  // The running daemon (daemon.json's pid) reads it again on SIGHUP.
  auto info = tessera::ReadFile(state + "/daemon.json");
  auto j = nlohmann::json::parse(info.ok() ? *info : std::string(), nullptr, /*allow_exceptions=*/false);
  pid_t pid = j.is_object() && j.value("pid", nlohmann::json()).is_number_integer() ? j["pid"].get<pid_t>() : 0;
  if (pid > 0 && tessera::ProcessAlive(pid) && ::kill(pid, SIGHUP) == 0) {
    std::fprintf(stderr, "tessera daemon token: the daemon (pid %d) takes the new token now; the old one is refused\n",
                 static_cast<int>(pid));
  } else {
    std::fprintf(stderr, "tessera daemon token: no running daemon found in %s: it takes the new token at its start\n",
                 state.c_str());
  }
  return 0;
}

int RunDaemonCmd(int argc, char** argv) {
  if (argc >= 2 && !std::strcmp(argv[1], "shim")) return tessera::daemon::RunShim(argc - 1, argv + 1);
  if (argc >= 2 && !std::strcmp(argv[1], "token")) return RunToken(argc - 1, argv + 1);
  CLI::App app{
      "Run the job daemon: HTTP/JSON API on 127.0.0.1 with bearer tokens, state in SQLite (WAL), queue with "
      "automatic wake-up, local execution through `tessera run`. Jobs keep running when it stops; a "
      "restart reconciles with them. `tessera daemon token [show|rotate]` prints or replaces the admin token.",
      "tessera daemon"};
  tessera::daemon::DaemonOptions o;
  std::string state, tick = "100ms";
  std::vector<std::string> tenants;
  app.add_option("--state-dir", state, "State directory (default $TESSERA_HOME or ~/.tessera)");
  app.add_option("--host", o.host, "Listen address (loopback by default)");
  app.add_option("--port", o.port, "Listen port; 0 picks a free one (written to STATE/daemon.json)");
  app.add_option("--catalog", o.catalog_path,
                 "Catalog YAML (default: the stored one, else the reference scenario's two prices)");
  app.add_option("--fleet", o.fleet_path, "Fleet YAML to register at start (or use `tessera fleet register`)");
  app.add_option("--policy", o.policy_path, "Policy YAML (default: the stored one, else no floor)");
  app.add_option("--tenants", o.tenants_file,
                 "Tenants file (YAML, mode 0600): name and token_sha256 of each tenant, optional user; reloaded on "
                 "SIGHUP. The admin token is STATE/token");
  app.add_option("--tenant", tenants, "Refused: a token on the command line is visible in `ps`; use --tenants FILE");
  app.add_option("--work-dir", o.work_dir,
                 "The tenants' areas WORK/TENANT/JOB (job working and checkpoint directories); default STATE-work");
  app.add_option("--job-user", o.job_user,
                 "Daemon running as root: the unprivileged user jobs run as (default nobody; a tenant's `user:` in "
                 "the tenants file overrides it)");
  app.add_flag("--insecure-no-job-isolation", o.insecure_no_job_isolation,
               "Run jobs with the daemon's own rights, so that they can read its token and database (only when "
               "neither root nor bubblewrap is available)");
  app.add_option("--tick", tick, "Scheduler poll interval (events wake it at once)");
  std::string launcher;
  std::string slurm_poll = "1s", slurm_timeout = "20s";
  app.add_option("--executor", o.executor,
                 "Where jobs run: local (this host, through the shim) or slurm (one heterogeneous sbatch job per "
                 "attempt; docs/daemon.md)")
      ->check(CLI::IsMember({"local", "slurm"}));
  app.add_option("--slurm-poll", slurm_poll, "Slurm executor: how often a job's state is read (scontrol show job)");
  app.add_option("--slurm-timeout", slurm_timeout,
                 "Slurm executor: bound on every Slurm command (sbatch, scontrol, scancel, sacct)");
  app.add_option("--launcher", launcher,
                 "Launcher command, space-separated (default: this binary's `run`); islands and -- COMMAND follow");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return tessera::cli::ParseExit(app, e);
  }
  o.state_dir = tessera::daemon::DefaultStateDir(state);
  o.state_dir_is_default = state.empty() && !tessera::env::Get("TESSERA_HOME");
  if (!tenants.empty()) {
    std::fprintf(stderr,
                 "tessera daemon: --tenant NAME=TOKEN is no longer accepted: every user can read it in `ps`. Write "
                 "the tenants to a file (mode 0600) and pass --tenants FILE:\n  tenants:\n    - {name: NAME, "
                 "token_sha256: HASH}   # HASH: printf %%s TOKEN | sha256sum\n");
    return 2;
  }
  auto tk = tessera::env::ParseDuration("--tick", tick);
  if (!tk.ok()) {
    std::fprintf(stderr, "tessera daemon: %s\n", tk.status().message().c_str());
    return 2;
  }
  o.tick_ms = tk->count();
  for (auto [flag, text, out] : {std::tuple{"--slurm-poll", &slurm_poll, &o.slurm_poll_ms},
                                 std::tuple{"--slurm-timeout", &slurm_timeout, &o.slurm_timeout_ms}}) {
    auto d = tessera::env::ParseDuration(flag, *text);
    if (!d.ok() || d->count() <= 0) {
      std::fprintf(stderr, "tessera daemon: %s\n",
                   d.ok() ? (std::string(flag) + " must be > 0").c_str() : d.status().message().c_str());
      return tessera::cli::kExitUsage;
    }
    *out = d->count();
  }
  {
    std::istringstream ss(launcher);
    std::string w;
    while (ss >> w) o.launcher.push_back(w);
  }
  return tessera::daemon::RunDaemon(o);
}
#endif

}  // namespace

TESSERA_DAEMON_COMMAND(daemon, "Run the job daemon (queue, wake-up, local execution, billing)", RunDaemonCmd);
