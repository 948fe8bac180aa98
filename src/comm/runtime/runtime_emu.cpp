// comm/runtime/runtime_emu: the `emu` row — an emulated device, built in (nothing to dlopen), so that the device
// ranks' code (DeviceBridgeRank: the device bridge, staging, the worker and its flags) runs on every machine without a
// GPU (TESSERA_DEVICE=emu:N).
//
// Its "device memory" is host memory the row hands out and keeps a table of (so pointer queries answer as a
// runtime's would, allocation extents included); mapped host memory is the same bytes on both sides. Each stream
// is a worker thread that runs its queued operations in order — copies, memsets, event records, stream waits on
// events, stream write / wait value, Tessera's folds (comm/reduce, the CPU twins of the CUDA kernels) — so
// everything queued is really asynchronous: a caller that reads before it synchronizes sees stale bytes, and
// TESSERA_EMU_STREAM_DELAY_US (read when a stream is made) makes every operation of that stream wait first, so
// a missing synchronisation fails reliably. TESSERA_EMU_DEVICES says how many devices it has (default 2);
// TESSERA_EMU_VISIBLE_DEVICES, set by `tessera run` per rank, narrows them as CUDA_VISIBLE_DEVICES does.
// Not a model of any vendor's timing or memory: a test device with a runtime's contract.
#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <thread>

#include "comm/reduce/reduce.hpp"
#include "comm/runtime/runtime.hpp"
#include "common/env.hpp"

namespace tessera::comm::internal {
namespace {

// One emulated stream: a worker running queued operations in order.
class EmuStream {
 public:
  explicit EmuStream(std::chrono::microseconds delay) : delay_(delay), worker_([this] { Run(); }) {}
  // Like cudaStreamDestroy, returns without waiting for the queued work, which still runs in order; a wait
  // that nothing will release (a stream write / wait value) ends instead of blocking the stream forever.
  ~EmuStream() {
    {
      std::lock_guard<std::mutex> l(mu_);
      stop_.store(true, std::memory_order_relaxed);
    }
    cv_.notify_all();
    worker_.join();
  }
  void Push(std::function<void()> op) {
    {
      std::lock_guard<std::mutex> l(mu_);
      q_.push_back(std::move(op));
      ++queued_;
    }
    cv_.notify_all();
  }
  void Synchronize() {
    std::unique_lock<std::mutex> l(mu_);
    const uint64_t want = queued_;
    done_cv_.wait(l, [&] { return done_ >= want; });
  }
  bool stopping() const { return stop_.load(std::memory_order_relaxed); }

 private:
  void Run() {
    for (;;) {
      std::function<void()> op;
      {
        std::unique_lock<std::mutex> l(mu_);
        cv_.wait(l, [&] { return stopping() || !q_.empty(); });
        if (q_.empty()) return;
        op = std::move(q_.front());
        q_.pop_front();
      }
      if (delay_.count() > 0) std::this_thread::sleep_for(delay_);
      op();
      {
        std::lock_guard<std::mutex> l(mu_);
        ++done_;
      }
      done_cv_.notify_all();
    }
  }
  std::chrono::microseconds delay_;
  std::mutex mu_;
  std::condition_variable cv_, done_cv_;
  std::deque<std::function<void()>> q_;
  uint64_t queued_ = 0, done_ = 0;
  std::atomic<bool> stop_{false};  // the worker's loop, and the waits it runs (stopping)
  std::thread worker_;
};

struct EmuEvent {
  std::atomic<uint64_t> recorded{0}, completed{0};
};

// Spins (then sleeps) until `done` says so, for the stream workers' waits.
template <typename F>
void WaitUntil(F done) {
  for (int spin = 0; !done(); ++spin) {
    if (spin < 1000)
      std::this_thread::yield();
    else
      std::this_thread::sleep_for(std::chrono::microseconds(20));
  }
}

// The bodies of the stream memory operations (StreamWrite/WaitValue32, and the kernels' flag-write / spin-wait):
// the write after the stream's earlier writes (sequentially consistent); the wait until the word reaches `value`
// (wrap-around >=), or the stream is being destroyed (`st` null: the NULL stream, which nothing destroys).
void WriteValue(uint32_t* addr, uint32_t value) { __atomic_store_n(addr, value, __ATOMIC_SEQ_CST); }
void WaitValue(const EmuStream* st, const volatile uint32_t* addr, uint32_t value) {
  WaitUntil([&] {
    return (st != nullptr && st->stopping()) ||
           static_cast<int32_t>(__atomic_load_n(addr, __ATOMIC_ACQUIRE) - value) >= 0;
  });
}

thread_local int t_device = -1;

class EmuRuntime final : public DeviceRuntime {
 public:
  explicit EmuRuntime(const RuntimeRow& row) : DeviceRuntime(row, "(built in)") {}

  Result<int> DeviceCount() override {
    const std::string visible = env::Get("TESSERA_EMU_VISIBLE_DEVICES").value_or("");
    if (!visible.empty()) return static_cast<int>(std::count(visible.begin(), visible.end(), ',')) + 1;
    TSR_ASSIGN_OR_RETURN(int64_t n, env::Int("TESSERA_EMU_DEVICES", 0, 64));
    return static_cast<int>(n);
  }
  Status SetDevice(int device) override {
    TSR_ASSIGN_OR_RETURN(int n, DeviceCount());
    if (device < 0 || device >= n)
      return InvalidArgument(fmt::format("{}: device index {} is not in [0, {})", name_, device, n));
    t_device = device;
    return Status::Ok();
  }
  Result<std::string> DeviceName(int device) override { return fmt::format("Tessera emulated device {}", device); }

  Result<void*> Malloc(size_t bytes) override {
    TSR_RETURN_IF_ERROR(Current("emuMalloc"));
    return Allocate(bytes, MemoryType::kDevice, t_device, "emuMalloc");
  }
  Status Free(void* dev) override { return Release(dev, MemoryType::kDevice, "emuFree"); }
  Result<void*> MallocHost(size_t bytes) override {
    return Allocate(bytes, MemoryType::kPinnedHost, -1, "emuMallocHost");
  }
  Status FreeHost(void* host) override { return Release(host, MemoryType::kPinnedHost, "emuFreeHost"); }
  Result<PointerInfo> GetPointerInfo(const void* p) override {
    const auto at = reinterpret_cast<uintptr_t>(p);
    std::lock_guard<std::mutex> l(mu_);
    auto it = allocs_.upper_bound(at);
    PointerInfo info;
    if (it == allocs_.begin()) return info;
    --it;
    if (at >= it->first + std::max<size_t>(it->second.bytes, 1)) return info;
    info.type = it->second.type;
    info.device = it->second.device;
    if (info.type == MemoryType::kDevice) {
      info.base = it->first;
      info.extent = it->second.bytes;
    }
    return info;
  }

  Result<Stream> StreamCreate() override {
    TSR_ASSIGN_OR_RETURN(int64_t us, env::Int("TESSERA_EMU_STREAM_DELAY_US", 0, 10'000'000));
    return static_cast<Stream>(new EmuStream(std::chrono::microseconds(us)));
  }
  Status StreamDestroy(Stream s) override {
    if (s == nullptr) return InvalidArgument("emu: StreamDestroy of the NULL stream");
    delete static_cast<EmuStream*>(s);
    return Status::Ok();
  }
  Status StreamSynchronize(Stream s) override {
    if (s != nullptr) static_cast<EmuStream*>(s)->Synchronize();
    return Status::Ok();
  }

  Result<Event> EventCreate() override { return static_cast<Event>(new EmuEvent()); }
  Status EventDestroy(Event e) override {
    delete static_cast<EmuEvent*>(e);
    return Status::Ok();
  }
  Status EventRecord(Event e, Stream s) override {
    auto* ev = static_cast<EmuEvent*>(e);
    const uint64_t gen = ev->recorded.fetch_add(1) + 1;
    Run(s, [ev, gen] { ev->completed.store(gen, std::memory_order_release); });
    return Status::Ok();
  }
  Result<bool> EventQuery(Event e) override {
    auto* ev = static_cast<EmuEvent*>(e);
    return ev->completed.load(std::memory_order_acquire) >= ev->recorded.load(std::memory_order_acquire);
  }
  Status EventSynchronize(Event e) override {
    auto* ev = static_cast<EmuEvent*>(e);
    const uint64_t gen = ev->recorded.load(std::memory_order_acquire);
    WaitUntil([&] { return ev->completed.load(std::memory_order_acquire) >= gen; });
    return Status::Ok();
  }
  Status StreamWaitEvent(Stream s, Event e) override {
    auto* ev = static_cast<EmuEvent*>(e);
    const uint64_t gen = ev->recorded.load(std::memory_order_acquire);  // the record made before this call
    Run(s, [ev, gen] { WaitUntil([&] { return ev->completed.load(std::memory_order_acquire) >= gen; }); });
    return Status::Ok();
  }

  Status Memcpy(void* dst, size_t dst_bytes, const void* src, size_t bytes, CopyKind kind) override {
    TSR_RETURN_IF_ERROR(CheckCopy(dst, dst_bytes, src, bytes, kind, "emuMemcpy"));
    if (bytes > 0) std::memmove(dst, src, bytes);
    return Status::Ok();
  }
  Status MemcpyAsync(void* dst, size_t dst_bytes, const void* src, size_t bytes, CopyKind kind, Stream s) override {
    TSR_RETURN_IF_ERROR(CheckCopy(dst, dst_bytes, src, bytes, kind, "emuMemcpyAsync"));
    if (bytes > 0) Run(s, [=] { std::memmove(dst, src, bytes); });
    return Status::Ok();
  }
  Status Memset(void* dev, size_t dst_bytes, int value, size_t bytes) override {
    TSR_RETURN_IF_ERROR(Room(dst_bytes, bytes, "emuMemset"));
    std::memset(dev, value, bytes);
    return Status::Ok();
  }
  Status MemsetAsync(void* dev, size_t dst_bytes, int value, size_t bytes, Stream s) override {
    TSR_RETURN_IF_ERROR(Room(dst_bytes, bytes, "emuMemsetAsync"));
    Run(s, [=] { std::memset(dev, value, bytes); });
    return Status::Ok();
  }

  Result<MappedHost> HostAllocMapped(size_t bytes) override {
    TSR_ASSIGN_OR_RETURN(void* p, MallocHost(bytes));
    return MappedHost{p, p};  // one address space: the device sees the same bytes at the same address
  }
  Status HostRegister(void* host, size_t bytes) override {
    std::lock_guard<std::mutex> l(mu_);
    const auto at = reinterpret_cast<uintptr_t>(host);
    if (allocs_.count(at)) return InvalidArgument(fmt::format("emu: emuHostRegister: {} is registered already", host));
    allocs_[at] = {bytes, MemoryType::kPinnedHost, -1, /*owned=*/false};
    return Status::Ok();
  }
  Status HostUnregister(void* host) override {
    std::lock_guard<std::mutex> l(mu_);
    auto it = allocs_.find(reinterpret_cast<uintptr_t>(host));
    if (it == allocs_.end() || it->second.owned)
      return InvalidArgument(fmt::format("emu: emuHostUnregister: {} was not registered", host));
    allocs_.erase(it);
    return Status::Ok();
  }
  Status StreamWriteValue32(Stream s, uint32_t* dev_addr, uint32_t value) override {
    Run(s, [dev_addr, value] { WriteValue(dev_addr, value); });
    return Status::Ok();
  }
  Status StreamWaitValue32(Stream s, uint32_t* dev_addr, uint32_t value) override {
    auto* st = static_cast<const EmuStream*>(s);
    Run(s, [st, dev_addr, value] { WaitValue(st, dev_addr, value); });
    return Status::Ok();
  }

 protected:
  Status CheckCode(int code, const std::string& what) const override {
    if (code == 0) return Status::Ok();
    return SystemError(fmt::format("emu error {} in {}", code, what));
  }

 private:
  struct Alloc {
    size_t bytes;
    MemoryType type;
    int device;
    bool owned;  // allocated here (else registered host memory)
  };
  // Runs `op` on stream `s`, or now on the NULL stream (CUDA's legacy stream would order it; here nothing runs
  // concurrently with the caller on it).
  static void Run(Stream s, std::function<void()> op) {
    if (s == nullptr)
      op();
    else
      static_cast<EmuStream*>(s)->Push(std::move(op));
  }
  Status Current(const char* what) const {
    if (t_device < 0) return SystemError(fmt::format("emu error: {} on a thread that set no device", what));
    return Status::Ok();
  }
  Result<void*> Allocate(size_t bytes, MemoryType type, int device, const char* what) {
    void* p = std::aligned_alloc(256, (std::max<size_t>(bytes, 1) + 255) / 256 * 256);
    if (p == nullptr) return SystemError(fmt::format("emu error: {}({}): out of memory", what, bytes));
    std::lock_guard<std::mutex> l(mu_);
    allocs_[reinterpret_cast<uintptr_t>(p)] = {bytes, type, device, true};
    return p;
  }
  Status Release(void* p, MemoryType type, const char* what) {
    {
      std::lock_guard<std::mutex> l(mu_);
      auto it = allocs_.find(reinterpret_cast<uintptr_t>(p));
      if (it == allocs_.end() || it->second.type != type || !it->second.owned)
        return SystemError(fmt::format("emu error: {}: {} is not an allocation of this kind", what, p));
      allocs_.erase(it);
    }
    std::free(p);
    return Status::Ok();
  }
  Status Room(size_t dst_bytes, size_t bytes, const char* what) const {
    if (bytes <= dst_bytes) return Status::Ok();
    return InvalidArgument(fmt::format("emu: {} of {} bytes into a destination of {} bytes", what, bytes, dst_bytes));
  }
  // The kind must say where the bytes are: device memory of the emulated device on the device side.
  Status CheckCopy(void* dst, size_t dst_bytes, const void* src, size_t bytes, CopyKind kind, const char* what) {
    TSR_RETURN_IF_ERROR(Room(dst_bytes, bytes, what));
    if (bytes == 0) return Status::Ok();
    const bool dst_dev = kind != CopyKind::kDeviceToHost, src_dev = kind != CopyKind::kHostToDevice;
    auto is_dev = [&](const void* p) {
      auto i = GetPointerInfo(p);
      return i.ok() && i->type == MemoryType::kDevice;
    };
    if (dst_dev && !is_dev(dst))
      return SystemError(
          fmt::format("emu error: {} ({}): the destination {} is not device memory", what, CopyKindName(kind), dst));
    if (src_dev && !is_dev(src))
      return SystemError(
          fmt::format("emu error: {} ({}): the source {} is not device memory", what, CopyKindName(kind), src));
    return Status::Ok();
  }
  std::mutex mu_;
  std::map<uintptr_t, Alloc> allocs_;
};

// Tessera's kernels on the emulated device: the host folds (comm/reduce), queued on the stream.
int EmuPreload() { return 0; }
int EmuFold(void* acc, const void* src, size_t n, DType dtype, DType src_type, RedOp op, bool first, void* s) {
  static_cast<EmuStream*>(s)->Push([=] { comm::Fold(acc, src, n, dtype, src_type, op, first); });
  return 0;
}
int EmuFinalize(void* out, const void* acc, size_t n, DType dtype, RedOp op, int divisor, void* s) {
  static_cast<EmuStream*>(s)->Push([=] { comm::Finalize(out, acc, n, dtype, op, divisor); });
  return 0;
}
// The kernels' fallbacks are the stream memory operations themselves here.
int EmuSpinWait(const volatile uint32_t* flag, uint32_t value, void* s) {
  auto* st = static_cast<EmuStream*>(s);
  st->Push([st, flag, value] { WaitValue(st, flag, value); });
  return 0;
}
int EmuWriteFlag(uint32_t* flag, uint32_t value, void* s) {
  static_cast<EmuStream*>(s)->Push([flag, value] { WriteValue(flag, value); });
  return 0;
}

}  // namespace

extern const DeviceKernels kEmuKernels;
const DeviceKernels kEmuKernels = {"emu", EmuPreload, EmuFold, EmuFinalize, EmuSpinWait, EmuWriteFlag};

Result<std::shared_ptr<DeviceRuntime>> MakeEmu(const RuntimeRow& row) {
  return std::shared_ptr<DeviceRuntime>(std::make_shared<EmuRuntime>(row));
}

}  // namespace tessera::comm::internal
