// comm/runtime: the dlopen-based loader of the device-runtime rows (kRuntimeTable), the kernels registry, the
// optional calls' defaults and the pinned staging helpers every row supports; the rows' call shapes are in
// runtime_acl.cpp and runtime_cuda_api.cpp. See runtime.hpp.
#include "comm/runtime/runtime.hpp"

#include <fmt/format.h>
#include <link.h>

#include <atomic>
#include <cstring>
#include <map>
#include <mutex>

#include "comm/ccl/ccl.hpp"
#include "common/dl.hpp"
#include "common/env.hpp"
#include "common/log.hpp"

namespace tessera::comm {

namespace {
// Every device family names a row of kRuntimeTable and a row of kCclTable: a new vendor is a family row, a runtime
// row and a CCL row (and its kernels, below), and a typo in one fails the build.
constexpr bool FamiliesHaveRows() {
  for (const DeviceFamily& f : kDeviceFamilies)
    if (!dl::HasRow(kRuntimeTable, f.runtime) || (*f.ccl != 0 && !dl::HasRow(kCclTable, f.ccl))) return false;
  return true;
}
static_assert(FamiliesHaveRows(), "a DeviceFamily (common/vendor.hpp) names a runtime or CCL row that does not exist");
}  // namespace

// The kernels this build has, one entry per runtime (comm/kernels/device_kernels.cpp: CUDA's where nvcc built them,
// MUSA's where mcc did). A new vendor's kernels are one more entry here.
namespace internal {
extern const DeviceKernels kEmuKernels;  // runtime_emu.cpp
#ifdef TESSERA_HAVE_CUDA
extern const DeviceKernels kCudaKernels;
#endif
#ifdef TESSERA_HAVE_MUSA_KERNELS
extern const DeviceKernels kMusaKernels;
#endif
}  // namespace internal
const DeviceKernels* FindKernels(std::string_view runtime) {
#ifdef TESSERA_HAVE_CUDA
  if (runtime == internal::kCudaKernels.runtime) return &internal::kCudaKernels;
#endif
#ifdef TESSERA_HAVE_MUSA_KERNELS
  if (runtime == internal::kMusaKernels.runtime) return &internal::kMusaKernels;
#endif
  if (runtime == internal::kEmuKernels.runtime) return &internal::kEmuKernels;
  return nullptr;
}

bool HasDeviceBridge(const RuntimeRow& row) {
  return row.host_register && row.stream_memops && FindKernels(row.name) != nullptr;
}
bool HasDeviceBridge(const DeviceFamily& family) {
  const RuntimeRow* row = FindRuntimeRow(family.runtime);
  return row != nullptr && HasDeviceBridge(*row);
}
bool HasCopyBridge(const DeviceFamily& family) {
  const RuntimeRow* row = FindRuntimeRow(family.runtime);
  return row != nullptr && row->host_register && !HasDeviceBridge(*row);
}

namespace {
// The rows whose `started` file is mapped in this process, one bit each. Asking the loader by name
// (dlopen(RTLD_NOLOAD)) searches the library path when the file is not mapped: about 22 us per row on a
// 2-core VM, paid twice by every host collective (its buffer check). The list of mapped objects only
// changes when something is loaded, which dl_iterate_phdr's dlpi_adds counts, so it is scanned again only then
// (the first object's callback ends the walk: 0.01-0.02 us measured there). *epoch: that count.
uint32_t StartedRows(unsigned long long* epoch) {
  static std::atomic<unsigned long long> seen_adds{~0ULL};
  static std::atomic<uint32_t> seen_mask{0};
  unsigned long long adds = 0;
  dl_iterate_phdr(
      [](dl_phdr_info* info, size_t, void* out) {
        *static_cast<unsigned long long*>(out) = info->dlpi_adds;
        return 1;
      },
      &adds);
  *epoch = adds;
  if (adds == seen_adds.load(std::memory_order_acquire)) return seen_mask.load(std::memory_order_relaxed);
  uint32_t mask = 0;
  dl_iterate_phdr(
      [](dl_phdr_info* info, size_t, void* out) {
        const char* name = info->dlpi_name;
        if (name == nullptr || *name == 0) return 0;
        const char* slash = std::strrchr(name, '/');
        const char* base = slash ? slash + 1 : name;
        uint32_t bit = 1;
        for (const RuntimeRow& row : kRuntimeTable) {
          if (row.started != nullptr && std::strcmp(base, row.started) == 0) *static_cast<uint32_t*>(out) |= bit;
          bit <<= 1;
        }
        return 0;
      },
      &mask);
  seen_mask.store(mask, std::memory_order_relaxed);
  seen_adds.store(adds, std::memory_order_release);
  return mask;
}
static_assert(sizeof(kRuntimeTable) / sizeof(kRuntimeTable[0]) <= 32, "StartedRows has one bit per row");

// The first runtime LoadRuntime(name) made for each row, in table order (it lives as long as the process: the
// loader keeps it): IsDeviceMemory asks it without the loader's lock, and a built-in row counts as started once made.
constexpr size_t kRows = sizeof(kRuntimeTable) / sizeof(kRuntimeTable[0]);
std::atomic<DeviceRuntime*> g_first_loaded[kRows] = {};
// A row whose started file is mapped but whose runtime would not load (libcuda.so.1 mapped by a torch built for
// another CUDA, without libcudart.so.13): the StartedRows epoch of IsDeviceMemory's failed load, plus one (0: none).
// IsDeviceMemory tries again only once something more is loaded; else every host collective would pay a failed
// dlopen (a search of the library path) twice.
std::atomic<unsigned long long> g_failed_at[kRows] = {};
// LoadRuntime(row) calls per row, for tests (internal::RuntimeLoadAttempts).
std::atomic<uint64_t> g_load_attempts[kRows] = {};
}  // namespace

bool IsDeviceMemory(const void* p) { return DeviceMemoryOwner(p).rt != nullptr; }

DeviceMemoryOwnerInfo DeviceMemoryOwner(const void* p) {
  if (p == nullptr) return {};
  unsigned long long epoch = 0;
  const uint32_t started = StartedRows(&epoch);
  for (size_t i = 0; i < kRows; ++i) {
    const RuntimeRow& row = kRuntimeTable[i];
    DeviceRuntime* rt = g_first_loaded[i].load(std::memory_order_acquire);
    if (row.started != nullptr ? (started & (1u << i)) == 0 : rt == nullptr) continue;
    if (rt == nullptr) {  // started by someone else (torch, the application): load the row once
      if (g_failed_at[i].load(std::memory_order_relaxed) == epoch + 1) continue;  // failed, nothing loaded since
      auto loaded = LoadRuntime(row.name);
      if (!loaded.ok()) {
        g_failed_at[i].store(epoch + 1, std::memory_order_relaxed);
        continue;
      }
      rt = loaded->get();
    }
    auto info = rt->GetPointerInfo(p);
    if (info.ok() && (info->type == MemoryType::kDevice || info->type == MemoryType::kManaged)) return {rt, *info};
  }
  return {};
}

int VisibleDeviceCount(const DeviceFamily& family, std::string* why) {
  auto rt = LoadRuntime(family.runtime);
  if (!rt.ok()) {
    *why = rt.status().message();
    return 0;
  }
  auto n = (*rt)->DeviceCount();
  if (!n.ok()) {
    *why = n.status().message();
    return 0;
  }
  if (*n == 0) *why = fmt::format("the {} runtime ('{}') found 0 devices", (*rt)->name(), (*rt)->path());
  return *n;
}

const RuntimeRow* FindRuntimeRow(std::string_view name) { return dl::FindRow(kRuntimeTable, name); }

std::string RuntimeRowNames() { return dl::RowNames(kRuntimeTable); }

const char* CopyKindName(CopyKind k) {
  switch (k) {
    case CopyKind::kHostToDevice:
      return "host-to-device";
    case CopyKind::kDeviceToHost:
      return "device-to-host";
    case CopyKind::kDeviceToDevice:
      return "device-to-device";
  }
  return "?";
}

DeviceRuntime::DeviceRuntime(const RuntimeRow& row, std::string path)
    : row_(row),
      name_(row.name),
      path_(std::move(path)),
      env_var_(row.env_var ? row.env_var : ""),
      prefix_(row.prefix ? row.prefix : ""),
      kernels_(FindKernels(row.name)) {
  row_.name = name_.c_str();
  row_.soname = path_.c_str();
  row_.env_var = env_var_.c_str();
  row_.prefix = prefix_.c_str();
}

Status DeviceRuntime::Lacks(const char* call) const {
  return Unsupported(fmt::format("the {} device runtime ('{}') has no {}", name_, path_, call));
}
Result<std::string> DeviceRuntime::DeviceName(int device) { return fmt::format("{} device {}", name_, device); }
Result<MappedHost> DeviceRuntime::HostAllocMapped(size_t) { return Lacks("mapped host allocation"); }
Status DeviceRuntime::HostRegister(void*, size_t) { return Lacks("host memory registration"); }
Status DeviceRuntime::HostUnregister(void*) { return Lacks("host memory registration"); }
Status DeviceRuntime::StreamWriteValue32(Stream, uint32_t*, uint32_t) { return Lacks("stream write-value"); }
Status DeviceRuntime::StreamWaitValue32(Stream, uint32_t*, uint32_t) { return Lacks("stream wait-value"); }

Status DeviceRuntime::WidenSupport() {
  if (kernels_ == nullptr)
    return Lacks("a kernel to widen 16-bit data to f32 on the device (no Tessera kernels in this build)");
  return Status::Ok();
}

Status DeviceRuntime::Widen(void* dst, const void* src, size_t n, DType src_type, Stream s) {
  TSR_RETURN_IF_ERROR(WidenSupport());
  return Fold(dst, src, n, src_type, src_type, RedOp::kSum, /*first=*/true, s);
}

Status DeviceRuntime::PreloadKernels() {
  if (kernels_ == nullptr) return Lacks("Tessera kernels in this build");
  return CheckCode(kernels_->preload(), "loading Tessera's kernels");
}
Status DeviceRuntime::Fold(void* acc, const void* src, size_t n, DType dtype, DType src_type, RedOp op, bool first,
                           Stream s) {
  if (kernels_ == nullptr) return Lacks("Tessera kernels in this build");
  return CheckCode(kernels_->fold(acc, src, n, dtype, src_type, op, first, s), "the fold kernel");
}
Status DeviceRuntime::Finalize(void* out, const void* acc, size_t n, DType dtype, RedOp op, int divisor, Stream s) {
  if (kernels_ == nullptr) return Lacks("Tessera kernels in this build");
  return CheckCode(kernels_->finalize(out, acc, n, dtype, op, divisor, s), "the finalize kernel");
}
Status DeviceRuntime::SpinWait(uint32_t* dev_addr, uint32_t value, Stream s) {
  if (kernels_ == nullptr) return Lacks("Tessera kernels in this build");
  return CheckCode(kernels_->spin_wait(dev_addr, value, s), "the spin-wait kernel");
}
Status DeviceRuntime::WriteFlag(uint32_t* dev_addr, uint32_t value, Stream s) {
  if (kernels_ == nullptr) return Lacks("Tessera kernels in this build");
  return CheckCode(kernels_->write_flag(dev_addr, value, s), "the flag-write kernel");
}

Result<std::shared_ptr<DeviceRuntime>> LoadRuntime(const RuntimeRow& row) {
  if (const RuntimeRow* r = FindRuntimeRow(row.name)) g_load_attempts[r - kRuntimeTable].fetch_add(1);
  if (row.shape == RuntimeShape::kEmu) return internal::MakeEmu(row);  // built in: nothing to load
  TSR_ASSIGN_OR_RETURN(
      const dl::Library lib,
      dl::Library::Open(row.soname, {.what = fmt::format("the {} device runtime", row.name),
                                     .env_var = row.env_var ? row.env_var : "",
                                     .mismatch = fmt::format("not a {} runtime of this version", row.name)}));
  Result<std::shared_ptr<DeviceRuntime>> rt = Unsupported("no such shape");
  switch (row.shape) {
    case RuntimeShape::kAcl:
      rt = internal::BindAcl(row, lib);
      break;
    case RuntimeShape::kCudaApi:
      rt = internal::BindCudaApi(row, lib);
      break;
    case RuntimeShape::kEmu:
      break;  // returned above
  }
  if (rt.ok()) TSR_LOG_DEBUG("loaded the {} device runtime from {}", row.name, row.soname);
  return rt;
}

Result<std::shared_ptr<DeviceRuntime>> LoadRuntime(std::string_view name) {
  const RuntimeRow* r = FindRuntimeRow(name);
  if (r == nullptr)
    return InvalidArgument(
        fmt::format("'{}' is not a known device runtime (known: {})", std::string(name), RuntimeRowNames()));
  RuntimeRow row = *r;
  const std::string path = dl::FileFrom(row.env_var, row.soname);
  row.soname = path.c_str();
  // One object per row and file: the device ranks, `tessera bench`'s memory and IsDeviceMemory of one process share
  // it (the runtime itself is process-wide; a failed load is not kept, so a fixed variable is seen on the next call).
  static std::mutex mu;
  static std::map<std::string, std::shared_ptr<DeviceRuntime>> loaded;
  std::lock_guard<std::mutex> lock(mu);
  const std::string key = std::string(row.name) + "|" + row.soname;
  if (auto it = loaded.find(key); it != loaded.end()) return it->second;
  TSR_ASSIGN_OR_RETURN(auto rt, LoadRuntime(row));
  loaded.emplace(key, rt);
  DeviceRuntime* none = nullptr;
  g_first_loaded[r - kRuntimeTable].compare_exchange_strong(none, rt.get(), std::memory_order_acq_rel);
  return rt;
}

Result<std::shared_ptr<DeviceRuntime>> OpenDevice(const DeviceName& name) {
  const DeviceFamily& f = *name.family;
  const std::string spec = name.ToString();
  auto no_device = [&](const std::string& why) {
    return Unsupported(
        fmt::format("TESSERA_DEVICE='{}' but this machine has no usable {} device ({})", spec, f.label, why));
  };
  auto rt = LoadRuntime(f.runtime);
  if (!rt.ok()) return no_device(rt.status().message());
  auto n = (*rt)->DeviceCount();
  if (!n.ok()) return no_device(n.status().message());
  const std::string visible = env::Get(f.visible_env).value_or("");
  const std::string visible_text = std::string(f.visible_env) + (visible.empty() ? " unset" : "='" + visible + "'");
  if (*n == 0) return no_device(fmt::format("the {} runtime sees 0 devices; {}", (*rt)->name(), visible_text));
  if (name.index >= *n)
    return InvalidArgument(
        fmt::format("TESSERA_DEVICE='{}': the {} runtime ('{}') sees {} device{} ({}): use an index below {} (tessera "
                    "run gives each rank its own device as {}:0)",
                    spec, (*rt)->name(), (*rt)->path(), *n, *n == 1 ? "" : "s", visible_text, *n, f.prefix));
  TSR_RETURN_IF_ERROR((*rt)->SetDevice(name.index).WithContext(fmt::format("TESSERA_DEVICE='{}'", spec)));
  return rt;
}

uint64_t internal::RuntimeLoadAttempts(std::string_view name) {
  const RuntimeRow* r = FindRuntimeRow(name);
  return r == nullptr ? 0 : g_load_attempts[r - kRuntimeTable].load();
}

namespace {
Status Stage(DeviceRuntime& rt, DeviceRuntime::Stream s, void* dst, const void* src, size_t bytes, CopyKind kind) {
  if (bytes == 0) return Status::Ok();
  TSR_RETURN_IF_ERROR(rt.MemcpyAsync(dst, bytes, src, bytes, kind, s));
  return rt.StreamSynchronize(s);
}
}  // namespace

Status StageDown(DeviceRuntime& rt, DeviceRuntime::Stream s, void* dev, const void* host_pinned, size_t bytes) {
  return Stage(rt, s, dev, host_pinned, bytes, CopyKind::kHostToDevice);
}

Status StageUp(DeviceRuntime& rt, DeviceRuntime::Stream s, void* host_pinned, const void* dev, size_t bytes) {
  return Stage(rt, s, host_pinned, dev, bytes, CopyKind::kDeviceToHost);
}

}  // namespace tessera::comm
