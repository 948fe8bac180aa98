// daemon/metrics: the daemon's counters and histograms, and the Prometheus text exposition format (version
// 0.0.4) they are served in at GET /metrics. The event sites of the daemon call one function each
// (JobStarted, CountJobEvent, WakeLatency, a PassTimer around a scheduling pass); the values that are state
// rather than events (cards, jobs per state, queue, share, cost, bill, checkpoints) are read at scrape time
// by daemon/console. Thread-safe: the registry has its own mutex.
//
// Format: every family has one `# HELP` and one `# TYPE` line before its samples; HELP text escapes `\` and
// newline, label values escape `\`, `"` and newline; histograms give cumulative `_bucket{le=...}` samples
// ending with `le="+Inf"`, then `_sum` and `_count`. Content type: kContentType.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace tessera::daemon {
class JobStore;
}

namespace tessera::daemon::metrics {

inline constexpr const char* kContentType = "text/plain; version=0.0.4; charset=utf-8";

// Label names and values, in the order they are printed.
using Labels = std::vector<std::pair<std::string, std::string>>;

std::string EscapeLabelValue(const std::string& v);  // \ -> \\, " -> \", newline -> \n
std::string EscapeHelp(const std::string& v);        // \ -> \\, newline -> \n
// A sample value: integers without a fraction ("3"), others in shortest round-trip form, "+Inf", "-Inf", "NaN".
std::string FormatValue(double v);

// Builds one exposition. Samples of a family must follow its Family() call; a family without samples is
// left out.
class Exposition {
 public:
  // type: "counter", "gauge" or "histogram".
  void Family(const std::string& name, const std::string& type, const std::string& help);
  // `suffix` is appended to the family's name ("_bucket", "_sum", "_count" for histograms).
  void Sample(const Labels& labels, double value, const std::string& suffix = "");
  std::string Text() const;

 private:
  struct Fam {
    std::string name, type, help;
    std::vector<std::string> lines;
  };
  std::vector<Fam> fams_;
};

struct HistogramData {
  std::vector<double> bounds;    // upper bounds, ascending (+Inf is implicit)
  std::vector<uint64_t> counts;  // per bucket, not cumulative; bounds.size() + 1 (the last is +Inf)
  double sum = 0;
  uint64_t count = 0;
};

// Counters and histograms updated by the daemon's event sites.
class Registry {
 public:
  // `zero_with_tenants`: the series Render is given to start at 0 (one per known tenant) apply to this family;
  // false for a family whose series carry more labels than the tenant (they appear at their first event).
  void DeclareCounter(const std::string& name, const std::string& help, bool zero_with_tenants = true);
  void DeclareHistogram(const std::string& name, const std::string& help, std::vector<double> bounds);
  void Inc(const std::string& name, const Labels& labels = {}, double by = 1);
  void Observe(const std::string& name, double value, const Labels& labels = {});
  // Appends every declared family to `out`, with the series for which `visible(labels)` holds (unlabelled
  // ones always). Counter series in `zero_series` that have no event yet are printed as 0, in the families
  // declared with `zero_with_tenants`.
  void Render(Exposition* out, const std::function<bool(const Labels&)>& visible,
              const std::vector<Labels>& zero_series = {}) const;
  // The value of one counter series (0 when absent); for tests and the console.
  double CounterValue(const std::string& name, const Labels& labels) const;

 private:
  struct Family {
    std::string help;
    bool histogram = false;
    bool zero_with_tenants = true;
    std::vector<double> bounds;
    std::map<Labels, double> counters;
    std::map<Labels, HistogramData> histograms;
  };
  mutable std::mutex mu_;
  std::vector<std::string> order_;
  std::map<std::string, Family> fams_;
};

// The daemon's registry, with its families declared.
Registry& Default();

// Family names (see docs/daemon.md, "Metrics").
inline constexpr const char* kJobStarts = "tessera_job_starts_total";
inline constexpr const char* kJobResumes = "tessera_job_resumes_total";
inline constexpr const char* kJobPreemptions = "tessera_job_preemptions_total";
inline constexpr const char* kJobFailures = "tessera_job_failures_total";
inline constexpr const char* kJobMoves = "tessera_job_moves_total";
inline constexpr const char* kWakeLatency = "tessera_wakeup_latency_seconds";
inline constexpr const char* kPassDuration = "tessera_scheduling_pass_duration_seconds";

// Event sites (one call each in scheduler.cpp).
void JobStarted(const std::string& tenant, bool resumed);
// Increments `counter` for the tenant of job `job_id` (looked up in `store`).
void CountJobEvent(JobStore* store, int64_t job_id, const char* counter);
void WakeLatency(int64_t ms);
// Observes the time from its construction to its destruction as one scheduling pass.
class PassTimer {
 public:
  PassTimer() : t0_(std::chrono::steady_clock::now()) {}
  ~PassTimer();
  PassTimer(const PassTimer&) = delete;
  PassTimer& operator=(const PassTimer&) = delete;

 private:
  std::chrono::steady_clock::time_point t0_;
};

}  // namespace tessera::daemon::metrics
