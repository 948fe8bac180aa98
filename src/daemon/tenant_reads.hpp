// daemon/tenant_reads: the daemon's reads of directories that jobs own — their checkpoint directories, read for
// GET /metrics, the console, GET /v1/jobs/ID, hot-tier retention, cost moves and the step a job resumes from —
// bounded in time. A job may put its checkpoint directory on a network or FUSE filesystem that stops
// answering: a read there blocks in the kernel and cannot be interrupted. Each read runs on a thread of its
// own; the daemon waits for it at most kTenantReadMs (it holds its lock meanwhile) and then goes on without the
// answer. The thread is left to finish when the filesystem answers; until then further reads of that directory
// fail at once, so a stalled mount costs one thread, not one per scrape or tick. The preparation of a job's start
// (AsyncReads) is not waited for beyond the bound either: its answer is picked up by a later pass (docs/daemon.md,
// "Security model").
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "common/beneath.hpp"
#include "tessera/status.hpp"

namespace tessera::daemon {

constexpr int64_t kTenantReadMs = 2000;

namespace tenant_reads {
// The directories with a read still running after its wait ran out (counted: each such read once).
bool Stalled(const std::string& dir);
void MarkStalled(const std::string& dir);
void Unstall(const std::string& dir);
void RunHook(const std::string& dir);
}  // namespace tenant_reads

// Runs `read` (which must own what it uses: capture by value) on a thread of its own and returns its answer when
// it comes within `limit_ms`; otherwise Timeout naming `dir` and the bound. While an earlier read of `dir` that
// ran out has not returned, a read of it fails at once, saying so.
template <typename T>
Result<T> BoundedRead(const std::string& dir, std::function<Result<T>()> read, int64_t limit_ms = kTenantReadMs) {
  if (tenant_reads::Stalled(dir))
    return Timeout("the job's directory " + dir +
                   " did not answer an earlier read, which is still waiting (a stalled network or FUSE mount?); "
                   "not read again until it answers");
  struct Shared {
    std::mutex mu;
    std::condition_variable cv;
    std::optional<Result<T>> out;
    bool abandoned = false;  // the caller stopped waiting: the reader unmarks `dir` when it returns
  };
  auto shared = std::make_shared<Shared>();
  std::thread([shared, dir, read = std::move(read)] {
    tenant_reads::RunHook(dir);
    Result<T> r = read();
    bool abandoned;
    {
      std::lock_guard<std::mutex> lk(shared->mu);
      shared->out.emplace(std::move(r));
      abandoned = shared->abandoned;
      shared->cv.notify_all();
    }
    if (abandoned) tenant_reads::Unstall(dir);
  }).detach();
  std::unique_lock<std::mutex> lk(shared->mu);
  if (!shared->cv.wait_for(lk, std::chrono::milliseconds(limit_ms), [&] { return shared->out.has_value(); })) {
    shared->abandoned = true;
    tenant_reads::MarkStalled(dir);  // under shared->mu: the reader sees `abandoned` only after this
    return Timeout("reading the job's directory " + dir + " took longer than " + std::to_string(limit_ms) +
                   " ms (a stalled network or FUSE mount?); went on without it");
  }
  return std::move(*shared->out);
}

// A read whose answer is picked up by a later call when it is not there in time: the preparation of a job's start
// (its directories made and the step it resumes from found, which reads that step's data whole: long for a large
// checkpoint, forever on a stalled mount), asked for under the daemon's lock at each scheduling pass. Get starts
// the read of `key` on a thread of its own when none runs and waits for it at most `wait_ms`; it returns the answer
// when it has come (once: a later Get reads again), else nullopt (*running_ms: how long the read has run). A Get
// while the read runs does not wait. An answer older than `fresh_ms` is dropped and read again. So the lock is
// held at most `wait_ms` once per read, a slow read still ends in a start, and a stalled one costs one thread.
template <typename T>
class AsyncReads {
 public:
  std::optional<Result<T>> Get(const std::string& key, std::function<Result<T>()> read, int64_t wait_ms,
                               int64_t fresh_ms, int64_t* running_ms = nullptr) {
    using Clock = std::chrono::steady_clock;
    std::shared_ptr<Slot> slot;
    bool started = false;
    {
      std::lock_guard<std::mutex> lk(mu_);
      auto& s = slots_[key];
      if (s) {
        std::lock_guard<std::mutex> sl(s->mu);
        if (s->out && Clock::now() - s->done_at > std::chrono::milliseconds(fresh_ms)) s.reset();  // stale
      }
      if (!s) {
        started = true;
        s = std::make_shared<Slot>();
        s->started_at = Clock::now();
        std::thread([s, key, read = std::move(read)] {
          tenant_reads::RunHook(key);
          Result<T> r = read();
          std::lock_guard<std::mutex> sl(s->mu);
          s->out.emplace(std::move(r));
          s->done_at = Clock::now();
          s->cv.notify_all();
        }).detach();
      }
      slot = s;
    }
    std::unique_lock<std::mutex> sl(slot->mu);
    // Only the call that started the read waits: while a read runs, each pass asks without waiting.
    slot->cv.wait_for(sl, std::chrono::milliseconds(started ? wait_ms : 0), [&] { return slot->out.has_value(); });
    if (!slot->out) {
      if (running_ms)
        *running_ms = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - slot->started_at).count();
      return std::nullopt;
    }
    std::optional<Result<T>> out = std::move(slot->out);
    sl.unlock();
    std::lock_guard<std::mutex> lk(mu_);
    if (slots_[key] == slot) slots_.erase(key);
    return out;
  }

 private:
  struct Slot {
    std::mutex mu;
    std::condition_variable cv;
    std::optional<Result<T>> out;
    std::chrono::steady_clock::time_point started_at, done_at;
  };
  std::mutex mu_;
  std::map<std::string, std::shared_ptr<Slot>> slots_;
};

// The job's directory `dir`, beneath the tenant's area `area` (both resolved paths), opened from the area without
// following a link at any component: the job owns the directories below its area and may swap one for a link to
// another tenant's directory, which the daemon (root) must not read or prune. InvalidArgument when `dir` is not
// beneath `area`.
Result<Fd> OpenJobDir(const std::string& area, const std::string& dir);

// BoundedRead of a job's directory: opened with OpenJobDir on the reader thread (the open may block too), and
// `read` given "/proc/self/fd/N", a path of that directory that no later swap can redirect.
template <typename T>
Result<T> BoundedJobRead(const std::string& area, const std::string& dir,
                         std::function<Result<T>(const std::string& root)> read, int64_t limit_ms = kTenantReadMs) {
  return BoundedRead<T>(
      dir,
      [area, dir, read = std::move(read)]() -> Result<T> {
        auto fd = OpenJobDir(area, dir);
        if (!fd.ok()) return fd.status();
        return read(FdPath(fd->get()));
      },
      limit_ms);
}

namespace testing {
// Called on the reader thread before each read, with its directory (tests stall it there); nullptr removes it.
void SetTenantReadHook(std::function<void(const std::string& dir)> hook);
}  // namespace testing

}  // namespace tessera::daemon
