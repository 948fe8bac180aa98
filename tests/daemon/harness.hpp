// tests/daemon/harness: starts and stops a `tessera daemon` process on loopback in a temporary state
// directory, with tenants, a fleet and a launcher, and gives tests a client per token and bounded waits.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "daemon/client.hpp"

namespace tessera::daemon::testing {

std::string Bin();        // $TESSERA_BIN (the tessera binary)
std::string SourceDir();  // $TESSERA_SOURCE_DIR
// True when this build's `tessera run` exists (the launcher the daemon's executor starts).
bool HaveLauncher();
// True when the collectives core (tsrCommInitFromEnv) runs a 1+1 host world under `tessera run`.
bool HaveComm();
// A loss curve as the tests' trainer jobs write it: one "step loss bits" line per step.
struct Curve {
  std::vector<int64_t> steps;
  std::vector<double> loss;
  std::vector<std::string> bits;
};
Curve ReadCurve(const std::string& path);
std::string MakeTempDir(const std::string& tag);
void WriteText(const std::string& path, const std::string& text);
std::string ReadText(const std::string& path);
bool Exists(const std::string& path);
// Polls `pred` every 50 ms until it holds or `timeout` passes; returns whether it held.
bool WaitFor(const std::function<bool()>& pred, std::chrono::milliseconds timeout);
// Runs a shell command; returns its exit status and stdout.
int Shell(const std::string& cmd, std::string* out = nullptr);

class DaemonProcess {
 public:
  // state_dir is created if needed. extra: more daemon flags.
  explicit DaemonProcess(std::string state_dir, std::vector<std::string> extra = {});
  ~DaemonProcess();
  // A command the daemon is started under, e.g. {"setpriv", "--reuid=nobody", ...}: another identity.
  void RunUnder(std::vector<std::string> prefix) { prefix_ = std::move(prefix); }
  void Start();  // starts and waits until it answers /v1/health (asserts on failure)
  void Kill9();  // SIGKILL, like a crash
  void Stop();   // SIGTERM and wait
  pid_t pid() const { return pid_; }
  const std::string& state() const { return state_; }
  std::unique_ptr<Client> ClientFor(const std::string& token);  // "" = admin token from STATE/token
  std::unique_ptr<Client> Admin() { return ClientFor(""); }

 private:
  std::string state_;
  std::vector<std::string> extra_;
  std::vector<std::string> prefix_;
  pid_t pid_ = -1;
};

// A job file for tests/daemon/sleep_job.sh (its files go to OUT_PREFIX + "pid.1" etc.) with the given planner fields.
std::string SleepJobYaml(const std::string& name, int priority, int cards, double seconds,
                         const std::string& out_prefix, const std::string& compatible = "[ascend, nvidia]",
                         const std::string& extra = "");
nlohmann::json Doc(const std::string& source, const std::string& yaml);
// What is wrong with a Prometheus text exposition as one family per name wants it ("" when nothing): a family's
// `# HELP` or `# TYPE` missing, repeated or after its samples; a sample outside the family declared last (a
// histogram's _bucket, _sum and _count are its own); a series (name and labels) twice; series of one family (its
// buckets apart from `le`) with different label names — as `{reason="policy"} 1` beside `{tenant="a"} 0`.
std::string ExpositionProblems(const std::string& text);
// Writes a --tenants file (mode 0600) holding the SHA-256 of each (name, token); returns its path.
std::string WriteTenantsFile(const std::string& path, const std::vector<std::pair<std::string, std::string>>& tenants);

}  // namespace tessera::daemon::testing
