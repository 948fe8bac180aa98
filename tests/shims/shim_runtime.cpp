// tests/shims/shim_runtime: the allocation registry, streams and events shared by the ACL and MUSA host shims
// (see shim_runtime.hpp).
#include "shim_runtime.hpp"

#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace tshim {

uint64_t EnvU64(const char* name, uint64_t dflt) {
  const char* v = std::getenv(name);
  if (!v || !*v) return dflt;
  char* end = nullptr;
  unsigned long long x = std::strtoull(v, &end, 10);
  return (end && *end == 0) ? x : dflt;
}

int DeviceCount(const char* visible_env) {
  const int all = static_cast<int>(EnvU64("TESSERA_SHIM_DEVICE_COUNT", 8));
  const char* v = std::getenv(visible_env);
  if (v == nullptr) return all;
  // As CUDA_VISIBLE_DEVICES: the listed devices, in order, up to the first entry that is not one of them.
  int n = 0;
  for (const char* p = v; *p != 0;) {
    char* end = nullptr;
    const long id = std::strtol(p, &end, 10);
    if (end == p || id < 0 || id >= all || (*end != 0 && *end != ',')) break;
    ++n;
    p = *end == ',' ? end + 1 : end;
  }
  return n;
}

std::string Fmt(const char* fmt, ...) {
  char buf[1024];
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  return buf;
}

namespace {
size_t PageRound(size_t n) {
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  return (n + page - 1) / page * page;
}
}  // namespace

void* Memory::Alloc(size_t bytes, MemKind kind, int device, unsigned flags) {
  if (bytes == 0) return nullptr;
  const size_t mapped = PageRound(bytes);
  char* user = nullptr;
  char* alias = nullptr;
  if (kind == MemKind::kDevice) {
    int fd = memfd_create("tessera-shim-device", MFD_CLOEXEC);
    if (fd < 0) return nullptr;
    if (ftruncate(fd, static_cast<off_t>(mapped)) != 0) {
      close(fd);
      return nullptr;
    }
    const int user_prot = EnvU64("TESSERA_SHIM_HOST_ACCESS", 0) ? PROT_READ | PROT_WRITE : PROT_NONE;
    void* a = mmap(nullptr, mapped, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    void* u = a == MAP_FAILED ? MAP_FAILED : mmap(nullptr, mapped, user_prot, MAP_SHARED, fd, 0);
    close(fd);
    if (a == MAP_FAILED || u == MAP_FAILED) {
      if (a != MAP_FAILED) munmap(a, mapped);
      return nullptr;
    }
    user = static_cast<char*>(u);
    alias = static_cast<char*>(a);
  } else {
    void* p = nullptr;
    if (posix_memalign(&p, static_cast<size_t>(sysconf(_SC_PAGESIZE)), mapped) != 0) return nullptr;
    user = alias = static_cast<char*>(p);
  }
  std::lock_guard<std::mutex> l(mu_);
  blocks_[reinterpret_cast<uintptr_t>(user)] = Block{kind, device, bytes, mapped, alias, flags};
  return user;
}

bool Memory::Free(void* p, MemKind kind) {
  Block b;
  {
    std::lock_guard<std::mutex> l(mu_);
    auto it = blocks_.find(reinterpret_cast<uintptr_t>(p));
    if (it == blocks_.end() || it->second.kind != kind || it->second.registered) return false;
    b = it->second;
    blocks_.erase(it);
  }
  if (kind == MemKind::kDevice) {
    munmap(p, b.mapped);
    munmap(b.alias, b.mapped);
  } else {
    std::free(p);
  }
  return true;
}

bool Memory::Register(void* p, size_t bytes, int device) {
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  std::lock_guard<std::mutex> l(mu_);
  auto next = blocks_.lower_bound(a);
  if (next != blocks_.end() && next->first < a + bytes) return false;  // a known range starts inside
  if (next != blocks_.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second.size > a) return false;  // a known range runs into it
  }
  Block b{MemKind::kPinnedHost, device, bytes, bytes, static_cast<char*>(p), 0};
  b.registered = true;
  blocks_[a] = b;
  return true;
}

bool Memory::Unregister(void* p) {
  std::lock_guard<std::mutex> l(mu_);
  auto it = blocks_.find(reinterpret_cast<uintptr_t>(p));
  if (it == blocks_.end() || !it->second.registered) return false;
  blocks_.erase(it);
  return true;
}

PtrInfo Memory::Lookup(const void* p) const {
  PtrInfo info;
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  std::lock_guard<std::mutex> l(mu_);
  auto it = blocks_.upper_bound(a);
  if (it == blocks_.begin()) return info;
  --it;
  const Block& b = it->second;
  if (a >= it->first + b.size) return info;  // past the requested size: not this allocation
  info.kind = b.kind;
  info.device = b.device;
  info.base = reinterpret_cast<const char*>(it->first);
  info.alias = b.alias;
  info.size = b.size;
  info.avail = it->first + b.size - a;
  info.flags = b.flags;
  return info;
}

Stream::Stream(int device, uint64_t delay_us) : device_(device), delay_us_(delay_us) {
  worker_ = std::thread([this] { Loop(); });
}

Stream::~Stream() {
  {
    std::lock_guard<std::mutex> l(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  worker_.join();
}

void Stream::Enqueue(Task t) {
  {
    std::lock_guard<std::mutex> l(mu_);
    queue_.push_back(std::move(t));
    ++enqueued_;
  }
  cv_.notify_all();
}

void Stream::Loop() {
  std::unique_lock<std::mutex> l(mu_);
  for (;;) {
    cv_.wait(l, [this] { return stop_ || !queue_.empty(); });
    if (queue_.empty()) return;  // stop_ and drained
    Task t = std::move(queue_.front());
    queue_.pop_front();
    l.unlock();
    if (delay_us_) std::this_thread::sleep_for(std::chrono::microseconds(delay_us_));
    Status s = t();
    l.lock();
    if (s.code != 0 && error_.code == 0) error_ = std::move(s);
    ++completed_;
    cv_.notify_all();
  }
}

Status Stream::Synchronize(uint64_t timeout_ms) {
  std::unique_lock<std::mutex> l(mu_);
  const uint64_t target = enqueued_;
  auto done = [&] { return completed_ >= target; };
  if (timeout_ms == 0) {
    cv_.wait(l, done);
  } else if (!cv_.wait_for(l, std::chrono::milliseconds(timeout_ms), done)) {
    return {-1, Fmt("the stream did not drain within %llu ms", static_cast<unsigned long long>(timeout_ms))};
  }
  Status s = std::move(error_);
  error_ = Status{};
  return s;
}

bool Stream::Idle() {
  std::lock_guard<std::mutex> l(mu_);
  return completed_ == enqueued_;
}

Status Stream::RunAndWait(Task t) {
  struct Slot {
    std::mutex mu;
    std::condition_variable cv;
    bool done = false;
    Status s;
  };
  auto slot = std::make_shared<Slot>();
  Enqueue([slot, t = std::move(t)] {
    Status s = t();
    std::lock_guard<std::mutex> l(slot->mu);
    slot->s = s;
    slot->done = true;
    slot->cv.notify_all();
    return s;
  });
  std::unique_lock<std::mutex> l(slot->mu);
  slot->cv.wait(l, [&] { return slot->done; });
  return slot->s;
}

uint64_t Event::Record(Stream& s, std::shared_ptr<Event> self) {
  uint64_t gen;
  {
    std::lock_guard<std::mutex> l(mu_);
    gen = ++recorded_;
  }
  s.Enqueue([self = std::move(self), gen] {
    std::lock_guard<std::mutex> l(self->mu_);
    if (gen > self->completed_) self->completed_ = gen;
    self->cv_.notify_all();
    return Status::Ok();
  });
  return gen;
}

uint64_t Event::generation() {
  std::lock_guard<std::mutex> l(mu_);
  return recorded_;
}

bool Event::Done(uint64_t gen) {
  std::lock_guard<std::mutex> l(mu_);
  return completed_ >= gen;
}

void Event::Wait(uint64_t gen) {
  std::unique_lock<std::mutex> l(mu_);
  cv_.wait(l, [&] { return completed_ >= gen; });
}

bool Event::WaitFor(uint64_t gen, uint64_t timeout_ms) {
  std::unique_lock<std::mutex> l(mu_);
  return cv_.wait_for(l, std::chrono::milliseconds(timeout_ms), [&] { return completed_ >= gen; });
}

bool ProcessAlive(pid_t pid) {
  char path[64];
  std::snprintf(path, sizeof path, "/proc/%d/stat", static_cast<int>(pid));
  FILE* f = std::fopen(path, "r");
  if (!f) return errno != ENOENT;
  char buf[512];
  size_t n = std::fread(buf, 1, sizeof buf - 1, f);
  std::fclose(f);
  buf[n] = 0;
  const char* close_paren = std::strrchr(buf, ')');  // the command name may contain spaces or parentheses
  if (!close_paren || close_paren[1] != ' ') return true;
  const char state = close_paren[2];
  return state != 'Z' && state != 'X' && state != 'x';
}

}  // namespace tshim
