// daemon/metrics: counters, histograms and the Prometheus text exposition format (see metrics.hpp).
#include "daemon/metrics.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cmath>

#include "common/log.hpp"
#include "daemon/job_store.hpp"

namespace tessera::daemon::metrics {

std::string EscapeLabelValue(const std::string& v) {
  std::string out;
  out.reserve(v.size());
  for (char c : v) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '"') {
      out += "\\\"";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

std::string EscapeHelp(const std::string& v) {
  std::string out;
  for (char c : v) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

std::string FormatValue(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  if (v == std::floor(v) && std::fabs(v) < 1e15) return fmt::format("{}", static_cast<int64_t>(v));
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, r.ptr);
}

namespace {

std::string LabelText(const Labels& labels) {
  if (labels.empty()) return "";
  std::string s = "{";
  for (size_t i = 0; i < labels.size(); ++i) {
    if (i) s += ",";
    s += labels[i].first + "=\"" + EscapeLabelValue(labels[i].second) + "\"";
  }
  return s + "}";
}

}  // namespace

void Exposition::Family(const std::string& name, const std::string& type, const std::string& help) {
  fams_.push_back({name, type, help, {}});
}

void Exposition::Sample(const Labels& labels, double value, const std::string& suffix) {
  if (fams_.empty()) return;
  Fam& f = fams_.back();
  f.lines.push_back(f.name + suffix + LabelText(labels) + " " + FormatValue(value));
}

std::string Exposition::Text() const {
  std::string out;
  for (const auto& f : fams_) {
    if (f.lines.empty()) continue;
    out += "# HELP " + f.name + " " + EscapeHelp(f.help) + "\n";
    out += "# TYPE " + f.name + " " + f.type + "\n";
    for (const auto& l : f.lines) out += l + "\n";
  }
  return out;
}

void Registry::DeclareCounter(const std::string& name, const std::string& help, bool zero_with_tenants) {
  std::lock_guard<std::mutex> lk(mu_);
  if (!fams_.count(name)) order_.push_back(name);
  fams_[name].help = help;
  fams_[name].zero_with_tenants = zero_with_tenants;
}

void Registry::DeclareHistogram(const std::string& name, const std::string& help, std::vector<double> bounds) {
  std::lock_guard<std::mutex> lk(mu_);
  if (!fams_.count(name)) order_.push_back(name);
  Family& f = fams_[name];
  f.help = help;
  f.histogram = true;
  std::sort(bounds.begin(), bounds.end());
  f.bounds = std::move(bounds);
}

void Registry::Inc(const std::string& name, const Labels& labels, double by) {
  std::lock_guard<std::mutex> lk(mu_);
  auto it = fams_.find(name);
  if (it == fams_.end() || it->second.histogram) return;
  it->second.counters[labels] += by;
}

void Registry::Observe(const std::string& name, double value, const Labels& labels) {
  std::lock_guard<std::mutex> lk(mu_);
  auto it = fams_.find(name);
  if (it == fams_.end() || !it->second.histogram) return;
  Family& f = it->second;
  HistogramData& h = f.histograms[labels];
  if (h.counts.empty()) {
    h.bounds = f.bounds;
    h.counts.assign(f.bounds.size() + 1, 0);
  }
  size_t i = std::lower_bound(f.bounds.begin(), f.bounds.end(), value) - f.bounds.begin();  // le: value <= bound
  h.counts[i] += 1;
  h.sum += value;
  h.count += 1;
}

void Registry::Render(Exposition* out, const std::function<bool(const Labels&)>& visible,
                      const std::vector<Labels>& zero_series) const {
  std::lock_guard<std::mutex> lk(mu_);
  for (const auto& name : order_) {
    const Family& f = fams_.at(name);
    out->Family(name, f.histogram ? "histogram" : "counter", f.help);
    if (!f.histogram) {
      std::map<Labels, double> series = f.counters;
      if (f.zero_with_tenants)
        for (const auto& z : zero_series) series.emplace(z, 0);  // known series start at 0
      for (const auto& [labels, v] : series)
        if (labels.empty() || visible(labels)) out->Sample(labels, v);
      continue;
    }
    auto emit = [&](const Labels& labels, const HistogramData& h) {
      uint64_t cum = 0;
      for (size_t i = 0; i <= f.bounds.size(); ++i) {
        cum += h.counts.empty() ? 0 : h.counts[i];
        Labels l = labels;
        l.emplace_back("le", i < f.bounds.size() ? FormatValue(f.bounds[i]) : "+Inf");
        out->Sample(l, static_cast<double>(cum), "_bucket");
      }
      out->Sample(labels, h.sum, "_sum");
      out->Sample(labels, static_cast<double>(h.count), "_count");
    };
    if (!f.histograms.count({})) emit({}, HistogramData{});
    for (const auto& [labels, h] : f.histograms)
      if (labels.empty() || visible(labels)) emit(labels, h);
  }
}

double Registry::CounterValue(const std::string& name, const Labels& labels) const {
  std::lock_guard<std::mutex> lk(mu_);
  auto it = fams_.find(name);
  if (it == fams_.end()) return 0;
  auto c = it->second.counters.find(labels);
  return c == it->second.counters.end() ? 0 : c->second;
}

Registry& Default() {
  static Registry* r = [] {
    auto* reg = new Registry;
    reg->DeclareCounter(kJobStarts, "Attempts started (fresh starts and resumes), per tenant.");
    reg->DeclareCounter(kJobResumes, "Attempts started from a committed checkpoint (TESSERA_RESUME_FROM), per tenant.");
    reg->DeclareCounter(kJobPreemptions,
                        "Stops requested to requeue a running job (priority, policy floor, or cancel --requeue), "
                        "per tenant.");
    reg->DeclareCounter(kJobMoves,
                        "Running jobs moved to another mix of cards, per tenant and reason (policy, cost, capacity); "
                        "counted when the new attempt starts.",
                        /*zero_with_tenants=*/false);
    reg->DeclareCounter(kJobFailures, "Jobs that ended failed (non-zero exit, or could not start), per tenant.");
    reg->DeclareHistogram(kWakeLatency,
                          "Time from capacity becoming available to a waiting job's new attempt being started.",
                          {0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900});
    reg->DeclareHistogram(kPassDuration, "Duration of one scheduling pass (reap, bill, policy check, placement).",
                          {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5});
    return reg;
  }();
  return *r;
}

void JobStarted(const std::string& tenant, bool resumed) {
  Default().Inc(kJobStarts, {{"tenant", tenant}});
  if (resumed) Default().Inc(kJobResumes, {{"tenant", tenant}});
}

void CountJobEvent(JobStore* store, int64_t job_id, const char* counter) {
  if (!store) return;
  auto tenant = store->JobTenant(job_id);
  if (tenant.ok()) {
    Default().Inc(counter, {{"tenant", *tenant}});
  } else {
    TSR_LOG_WARN("metrics: {} not counted: {}", counter, tenant.status().ToString());
  }
}

void WakeLatency(int64_t ms) { Default().Observe(kWakeLatency, static_cast<double>(ms) / 1000.0); }

PassTimer::~PassTimer() {
  Default().Observe(kPassDuration, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count());
}

}  // namespace tessera::daemon::metrics
