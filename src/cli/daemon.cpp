// cli/daemon: `tessera daemon` — runs the job daemon (HTTP/JSON API on 127.0.0.1, SQLite state, queue with
// automatic wake-up, local executor). `tessera daemon shim ...` is the per-attempt shim it starts.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <cstring>
#include <sstream>
#include <tuple>

#include "cli/command.hpp"
#include "cli/exit_code.hpp"
#ifdef TESSERA_HAVE_DAEMON
#include "common/env.hpp"
#include "daemon/daemon.hpp"
#include "daemon/executor.hpp"
#endif

namespace {

int RunDaemonCmd(int argc, char** argv) {
#ifndef TESSERA_HAVE_DAEMON
  (void)argc;
  (void)argv;
  return tessera::cli::NoDaemon("daemon");
#else
  if (argc >= 2 && !std::strcmp(argv[1], "shim")) return tessera::daemon::RunShim(argc - 1, argv + 1);
  CLI::App app{
      "Run the job daemon: HTTP/JSON API on 127.0.0.1 with bearer tokens, state in SQLite (WAL), queue with "
      "automatic wake-up, local execution through `tessera run`. Jobs keep running when it stops; a "
      "restart reconciles with them.",
      "tessera daemon"};
  tessera::daemon::DaemonOptions o;
  std::string state, tick = "100ms";
  std::vector<std::string> tenants;
  app.add_option("--state-dir", state, "State directory (default $TESSERA_HOME or ~/.tessera)");
  app.add_option("--host", o.host, "Listen address (loopback by default)");
  app.add_option("--port", o.port, "Listen port; 0 picks a free one (written to STATE/daemon.json)");
  app.add_option("--catalog", o.catalog_path, "Catalog YAML (default: the stored one, else the brief's two prices)");
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
#endif
}

}  // namespace

TESSERA_COMMAND(daemon, "Run the job daemon (queue, wake-up, local execution, billing)", RunDaemonCmd);
