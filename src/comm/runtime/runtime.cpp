// comm/runtime: the dlopen-based loader of the device-runtime rows (kRuntimeTable) and the pinned staging
// helpers every row supports; the rows' call shapes are in runtime_acl.cpp and runtime_musa.cpp. See runtime.hpp.
#include "comm/runtime/runtime.hpp"

#include <dlfcn.h>
#include <fmt/format.h>

#ifdef TESSERA_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

#include "comm/ccl/ccl.hpp"
#include "common/env.hpp"
#include "common/log.hpp"

namespace tessera::comm {

namespace {
constexpr bool SameName(const char* a, const char* b) {
  while (*a != 0 && *a == *b) ++a, ++b;
  return *a == *b;
}
// Every device family names a runtime this build has (CUDA's backend or a row of kRuntimeTable) and a row of
// kCclTable: a new vendor is a family row, a runtime row and a CCL row, and a typo in one fails the build.
constexpr bool FamiliesHaveRows() {
  for (const DeviceFamily& f : kDeviceFamilies) {
    bool runtime = SameName(f.runtime, kCudaRuntime), ccl = false;
    for (const RuntimeRow& r : kRuntimeTable) runtime |= SameName(f.runtime, r.name);
    for (const CclRow& r : kCclTable) ccl |= SameName(f.ccl, r.name);
    if (!runtime || !ccl) return false;
  }
  return true;
}
static_assert(FamiliesHaveRows(), "a DeviceFamily (common/vendor.hpp) names a runtime or CCL row that does not exist");
}  // namespace

bool HasCudaBackend(const DeviceFamily& family) { return SameName(family.runtime, kCudaRuntime); }

int VisibleDeviceCount(const DeviceFamily& family, std::string* why) {
  if (HasCudaBackend(family)) {
#ifdef TESSERA_HAVE_CUDA
    int n = 0;
    const cudaError_t err = cudaGetDeviceCount(&n);
    if (err != cudaSuccess) {
      *why = fmt::format("cudaGetDeviceCount: {}", cudaGetErrorString(err));
      return 0;
    }
    if (n == 0) *why = "cudaGetDeviceCount found 0 devices";
    return n;
#else
    *why = "this tessera was built without CUDA";
    return 0;
#endif
  }
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

const RuntimeRow* FindRuntimeRow(std::string_view name) {
  for (const auto& r : kRuntimeTable)
    if (name == r.name) return &r;
  return nullptr;
}

std::string RuntimeRowNames() {
  std::string names;
  for (const auto& r : kRuntimeTable) names += names.empty() ? r.name : std::string(", ") + r.name;
  return names;
}

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
    : row_(row), name_(row.name), path_(std::move(path)), env_var_(row.env_var ? row.env_var : "") {
  row_.name = name_.c_str();
  row_.soname = path_.c_str();
  row_.env_var = env_var_.c_str();
}

namespace internal {
Status MissingRuntimeSymbol(const RuntimeRow& row, const std::string& path, const std::string& symbol) {
  return Unsupported(
      fmt::format("'{}' ({} device runtime) has no symbol '{}': not a {} runtime of this version (set {} to a file "
                  "that has it)",
                  path, row.name, symbol, row.name, row.env_var));
}
}  // namespace internal

Result<std::shared_ptr<DeviceRuntime>> LoadRuntime(const RuntimeRow& row) {
  dlerror();
  void* handle = dlopen(row.soname, RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* e = dlerror();
    return Unsupported(fmt::format("cannot load the {} device runtime '{}': {} (install it, or set {} to its path)",
                                   row.name, row.soname, e ? e : "?", row.env_var));
  }
  // The library stays mapped, as the CCL's: vendor runtimes register atexit handlers and threads that outlive us.
  Result<std::shared_ptr<DeviceRuntime>> rt = Unsupported("no such shape");
  switch (row.shape) {
    case RuntimeShape::kAcl:
      rt = internal::BindAcl(row, row.soname, handle);
      break;
    case RuntimeShape::kMusa:
      rt = internal::BindMusa(row, row.soname, handle);
      break;
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
  const std::string path = env::Get(row.env_var).value_or("");
  if (!path.empty()) row.soname = path.c_str();
  return LoadRuntime(row);
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
