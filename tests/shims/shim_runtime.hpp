// tests/shims/shim_runtime: the host "device" that the ACL and MUSA shims (libascendcl.so, libmusart.so) share:
// a registry of allocations, streams that run their work on a worker thread each, and events. Vendor-neutral:
// the vendor files turn its results into their own error codes and enforce their own documented rules.
//
// Device memory is a memfd mapped twice: the address handed out is PROT_NONE, so host code that dereferences a
// device pointer faults as it would on a real accelerator; the shim copies through a second, readable alias
// (TESSERA_SHIM_HOST_ACCESS=1 makes the handed-out address readable too). Knobs (read when a stream or
// allocation is made): TESSERA_SHIM_STREAM_DELAY_US (each stream task waits this long before it runs, so a
// missing synchronisation shows stale data), TESSERA_SHIM_DEVICE_COUNT (default 8; see DeviceCount).
//
// Everything here has hidden visibility (the shared libraries are built with -fvisibility=hidden), so the
// two runtimes loaded in one process keep separate state.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

namespace tshim {

uint64_t EnvU64(const char* name, uint64_t dflt);
// The devices a process sees: TESSERA_SHIM_DEVICE_COUNT (default 8), or, when the runtime's visible-devices
// variable `visible_env` is set, as many as it lists (comma-separated indices below that count, up to the first
// that is not), as the vendors document ASCEND_RT_VISIBLE_DEVICES / MUSA_VISIBLE_DEVICES.
int DeviceCount(const char* visible_env);
std::string Fmt(const char* fmt, ...) __attribute__((format(printf, 1, 2)));

// A task's outcome: code 0 is success, anything else is the owning vendor's error code.
struct Status {
  int code = 0;
  std::string msg;
  static Status Ok() { return {}; }
};

enum class MemKind { kUnregistered, kDevice, kPinnedHost };

struct PtrInfo {
  MemKind kind = MemKind::kUnregistered;
  int device = -1;
  const char* base = nullptr;  // the address the caller got
  char* alias = nullptr;       // where the shim reads and writes `base` (== base for host memory)
  size_t size = 0;             // bytes requested
  size_t avail = 0;            // bytes from the queried pointer to the end of the allocation
  unsigned flags = 0;          // vendor data (ACL: the malloc policy)
  // The shim's address for the queried pointer (the pointer itself when unregistered).
  char* Translate(const void* p) const {
    return kind == MemKind::kUnregistered ? static_cast<char*>(const_cast<void*>(p))
                                          : alias + (static_cast<const char*>(p) - base);
  }
};

class Memory {
 public:
  // Device memory of `device` (`bytes` usable, mapped as `bytes` rounded up to pages), or pinned host memory
  // (page-aligned). nullptr when out of memory.
  void* Alloc(size_t bytes, MemKind kind, int device, unsigned flags);
  // False when `p` is not the start of a live allocation of that kind (nothing is freed then).
  bool Free(void* p, MemKind kind);
  // Registers the caller's host memory [p, p + bytes) as pinned host memory of `device` (the range stays the
  // caller's); false when it overlaps a range the shim knows. Unregister takes the start of a registered range only.
  bool Register(void* p, size_t bytes, int device);
  bool Unregister(void* p);
  PtrInfo Lookup(const void* p) const;
  void ResetLockAfterFork() { new (&mu_) std::mutex(); }

 private:
  struct Block {
    MemKind kind;
    int device;
    size_t size, mapped;
    char* alias;
    unsigned flags;
    bool registered = false;  // the caller's memory (Register), not the shim's allocation
  };
  mutable std::mutex mu_;
  std::map<uintptr_t, Block> blocks_;
};

using Task = std::function<Status()>;

class Stream {
 public:
  Stream(int device, uint64_t delay_us);
  ~Stream();  // drains the queue, then joins the worker
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;

  int device() const { return device_; }
  void Enqueue(Task t);
  // Waits for everything enqueued before the call (up to `timeout_ms`; 0 = forever). Returns the first task
  // error since the previous Synchronize (and clears it); code -1 on timeout.
  Status Synchronize(uint64_t timeout_ms = 0);
  bool Idle();
  // Runs `t` on the stream in order and waits for it (for "synchronous" calls that honour stream order).
  Status RunAndWait(Task t);

 private:
  void Loop();
  const int device_;
  const uint64_t delay_us_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Task> queue_;
  uint64_t enqueued_ = 0, completed_ = 0;
  bool stop_ = false;
  Status error_;
  std::thread worker_;
};

// An event: Record() enqueues a marker; the event is complete when the stream's worker reaches the marker of
// its most recent record. Waits refer to the most recent record at the time they are made (CUDA's rule).
class Event {
 public:
  // The generation of the record it queued.
  uint64_t Record(Stream& s, std::shared_ptr<Event> self);
  uint64_t generation();  // 0 = never recorded
  bool Done(uint64_t gen);
  bool Complete() { return Done(generation()); }
  void Wait(uint64_t gen);                          // host wait
  bool WaitFor(uint64_t gen, uint64_t timeout_ms);  // false on timeout

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  uint64_t recorded_ = 0, completed_ = 0;
};

// Handles given to the application: opaque pointers that map to shared objects. Unknown handles are refused.
template <typename T>
class Handles {
 public:
  void* Add(std::shared_ptr<T> obj) {
    std::lock_guard<std::mutex> l(mu_);
    void* h = obj.get();
    map_[h] = std::move(obj);
    return h;
  }
  std::shared_ptr<T> Get(void* h) {
    std::lock_guard<std::mutex> l(mu_);
    auto it = map_.find(h);
    return it == map_.end() ? nullptr : it->second;
  }
  std::vector<std::shared_ptr<T>> All() {
    std::lock_guard<std::mutex> l(mu_);
    std::vector<std::shared_ptr<T>> v;
    for (auto& [h, obj] : map_) v.push_back(obj);
    return v;
  }
  // In a child after fork(): the parent's objects (and their worker threads) are not this process's; they are
  // dropped without running their destructors, and the lock is made anew.
  void ForgetAfterFork() {
    new (&mu_) std::mutex();
    new std::unordered_map<void*, std::shared_ptr<T>>(std::move(map_));  // leaked on purpose
    map_.clear();
  }
  std::shared_ptr<T> Remove(void* h) {
    std::lock_guard<std::mutex> l(mu_);
    auto it = map_.find(h);
    if (it == map_.end()) return nullptr;
    auto obj = std::move(it->second);
    map_.erase(it);
    return obj;
  }

 private:
  std::mutex mu_;
  std::unordered_map<void*, std::shared_ptr<T>> map_;
};

// What a runtime exports for its collective library (libhccl -> libascendcl, libmccl -> libmusart), through
// one extern "C" function per runtime (tesseraAclShimHooks, tesseraMusaShimHooks). Not a vendor API.
struct RuntimeHooks {
  int version;  // kHooksVersion
  // Resolves the application's stream handle (NULL = the current device's default stream); nullptr when the
  // handle is unknown.
  std::shared_ptr<Stream> (*stream)(void* handle);
  PtrInfo (*lookup)(const void* p);
  int (*current_device)();  // -1 when none is set
  // Records a message where the runtime's own error query will find it.
  void (*set_error)(const std::string& msg);
};
inline constexpr int kHooksVersion = 1;

bool ProcessAlive(pid_t pid);  // false for an exited (or zombie) process

// A runtime's state in a child after fork() (both runtimes register it with pthread_atfork): the child has
// none of the parent's worker threads, so it starts with no streams (the parent's are forgotten, not
// destroyed) and fresh locks. Memory allocated before the fork stays usable (device memory is a shared
// mapping, so it is shared with the parent).
inline void ForgetRuntimeAfterFork(std::mutex& mu, std::vector<std::shared_ptr<Stream>>& default_streams,
                                   Handles<Stream>& streams, Handles<Event>& events, Memory& mem) {
  new (&mu) std::mutex();
  for (auto& st : default_streams) new std::shared_ptr<Stream>(std::move(st));  // leaked on purpose
  default_streams.clear();
  streams.ForgetAfterFork();
  events.ForgetAfterFork();
  mem.ResetLockAfterFork();
}

}  // namespace tshim
