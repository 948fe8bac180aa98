// comm/runtime: the device-runtime table (issue #31): one row per vendor runtime (Ascend's ACL, Moore Threads'
// MUSA), loaded at run time with dlopen like the CCL table (comm/ccl/ccl.hpp), and one interface over them.
//
// A runtime is loaded with dlopen, never linked, so libtessera runs on machines without it. Each runtime is ONE
// row of kRuntimeTable (RuntimeRow): its name, file, the variable that points it at another file, its call shape
// and its capability flags, from which a rank picks the device bridge or pinned staging. DeviceRuntime is the
// interface a generic accelerator rank calls: one implementation per call shape (runtime_acl.cpp,
// runtime_musa.cpp), each declaring its own function-pointer types from the vendor's public API (sources cited
// there); no vendor header is needed to build. Errors are Status values naming the runtime, the call and the
// runtime's own error code and message (aclGetRecentErrMsg, musaGetErrorString).
//
// Threads: ACL binds a device to a thread (aclrtSetDevice "per thread before resources"), so every thread that
// calls a DeviceRuntime calls SetDevice first; MUSA (as CUDA) keeps a current device per thread too.
// Used by the generic accelerator rank (comm/device/accel_rank) and the launcher's device count.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>

#include "common/vendor.hpp"
#include "tessera/status.hpp"

namespace tessera::comm {

// The runtime name of the CUDA family (DeviceFamily::runtime), whose ranks have their own backend (CudaRank, with
// the device bridge) rather than a row of this table. Every family's runtime is this or a row (runtime.cpp checks
// the tables at compile time).
inline constexpr const char* kCudaRuntime = "cuda";
bool HasCudaBackend(const DeviceFamily& family);

// How a runtime is called.
enum class RuntimeShape {
  kAcl,   // ACL's (acl_rt.h): aclInit once per process, destMax on copies and memsets, aclrtQueryEventStatus
  kMusa,  // CUDA's runtime API under the prefix "musa" (torch_musa's 1:1 mapping), values ASSUMED to be CUDA's
};

// One device runtime.
struct RuntimeRow {
  const char* name;     // "acl", "musa"
  const char* soname;   // what dlopen loads, e.g. "libascendcl.so" (may be a path)
  const char* env_var;  // the variable that points the row at another file, e.g. "TESSERA_ACL_LIBRARY"
  RuntimeShape shape;
  // Capability flags. host_register: mapped registration of existing host memory, as cudaHostRegister with
  // cudaHostRegisterMapped has it. stream_memops: stream write / wait value (cuStreamWriteValue32 and friends).
  // pinned_host_alloc: page-locked host allocation (aclrtMallocHost / musaMallocHost), which staging needs.
  bool host_register;
  bool stream_memops;
  bool pinned_host_alloc;
};

// The runtimes this build knows. Neither has run on hardware: both are proven against the host ABI shims of
// tests/shims (tests/runtime). See docs/gpu.md, "Vendors".
inline constexpr RuntimeRow kRuntimeTable[] = {
    // ACL (Huawei Ascend): acl_base.h / acl_rt.h as vendored by Ascend/pytorch third_party/acl/inc/acl (commit
    // c4840e3c, tests/shims/acl_abi.h cites lines). Soname: torch_npu dlopens "libascendcl.so". No mapped host
    // registration in CUDA's form and no stream memory operations in acl_rt.h; aclrtMallocHost (rt:1250).
    {.name = "acl",
     .soname = "libascendcl.so",
     .env_var = "TESSERA_ACL_LIBRARY",
     .shape = RuntimeShape::kAcl,
     .host_register = false,
     .stream_memops = false,
     .pinned_host_alloc = true},
    // MUSA (Moore Threads): names from torch_musa's mapping (utils/mapping/general.json, commit 8b583b3f), soname
    // libmusart.so (torch_musa csrc/core/musart.cpp:14); signatures and values ASSUMED to be CUDA's (the headers
    // are not published; tests/shims/musa_abi.h marks each). host_register / stream_memops: false until a MUSA
    // SDK shows musaHostRegister / stream memory operations with CUDA's semantics (not used by this row).
    {.name = "musa",
     .soname = "libmusart.so",
     .env_var = "TESSERA_MUSA_LIBRARY",
     .shape = RuntimeShape::kMusa,
     .host_register = false,
     .stream_memops = false,
     .pinned_host_alloc = true},
};

// How many devices of `family` this process sees: the CUDA runtime's count, or the family's runtime row's
// DeviceCount() (loading the row); 0 with *why set when none (the runtime missing, or its error).
int VisibleDeviceCount(const DeviceFamily& family, std::string* why);

// The row named `name` ("acl", "musa"), or null.
const RuntimeRow* FindRuntimeRow(std::string_view name);
// "acl, musa": for messages.
std::string RuntimeRowNames();

// The direction of a copy (each row maps it to its own kind value).
enum class CopyKind { kHostToDevice, kDeviceToHost, kDeviceToDevice };
const char* CopyKindName(CopyKind k);  // "host-to-device", ...

// What the runtime says a pointer is.
enum class MemoryType {
  kUnregistered,  // not the runtime's (pageable host memory, or unknown)
  kPinnedHost,    // host memory the runtime allocated (or registered)
  kDevice,        // device memory of `device`
};
struct PointerInfo {
  MemoryType type = MemoryType::kUnregistered;
  int device = -1;  // for kDevice (and pinned host memory where the runtime says), else -1
};

// A loaded runtime. Streams and events are the runtime's opaque handles.
class DeviceRuntime {
 public:
  using Stream = void*;
  using Event = void*;
  virtual ~DeviceRuntime() = default;

  const RuntimeRow& row() const { return row_; }
  const std::string& name() const { return name_; }
  const std::string& path() const { return path_; }  // what was loaded

  virtual Result<int> DeviceCount() = 0;
  // Makes `device` this thread's device (call it on every thread before any resource call). An index outside
  // [0, DeviceCount()) is InvalidArgument naming the index.
  virtual Status SetDevice(int device) = 0;

  virtual Result<void*> Malloc(size_t bytes) = 0;  // device memory of this thread's device
  virtual Status Free(void* dev) = 0;
  virtual Result<void*> MallocHost(size_t bytes) = 0;  // pinned host memory (row().pinned_host_alloc)
  virtual Status FreeHost(void* host) = 0;
  virtual Result<PointerInfo> GetPointerInfo(const void* p) = 0;

  virtual Result<Stream> StreamCreate() = 0;
  virtual Status StreamDestroy(Stream s) = 0;
  virtual Status StreamSynchronize(Stream s) = 0;

  virtual Result<Event> EventCreate() = 0;
  virtual Status EventDestroy(Event e) = 0;
  virtual Status EventRecord(Event e, Stream s) = 0;
  virtual Result<bool> EventQuery(Event e) = 0;  // true: the work before its record has completed
  virtual Status EventSynchronize(Event e) = 0;
  virtual Status StreamWaitEvent(Stream s, Event e) = 0;  // `s` waits for `e`'s record, not the host

  // Copies `bytes` into `dst`, which has room for `dst_bytes` (ACL's destMax; ignored where the runtime has none).
  virtual Status Memcpy(void* dst, size_t dst_bytes, const void* src, size_t bytes, CopyKind kind) = 0;
  virtual Status MemcpyAsync(void* dst, size_t dst_bytes, const void* src, size_t bytes, CopyKind kind, Stream s) = 0;
  virtual Status Memset(void* dev, size_t dst_bytes, int value, size_t bytes) = 0;
  virtual Status MemsetAsync(void* dev, size_t dst_bytes, int value, size_t bytes, Stream s) = 0;

 protected:
  DeviceRuntime(const RuntimeRow& row, std::string path);
  RuntimeRow row_;  // its strings point into this object
  std::string name_, path_, env_var_;
};

// Loads `row` from row.soname (a name or a path). Unsupported when the file or a symbol is missing: the message
// names the runtime, the file, the row's variable and dlerror() (or the missing symbol).
Result<std::shared_ptr<DeviceRuntime>> LoadRuntime(const RuntimeRow& row);
// The row named `name`, from the file its variable (TESSERA_ACL_LIBRARY, TESSERA_MUSA_LIBRARY) names when set.
Result<std::shared_ptr<DeviceRuntime>> LoadRuntime(std::string_view name);

// Pinned staging, which every row supports: copies `bytes` from pinned host memory (MallocHost) to device memory
// on `s` and waits for it (StageDown), or device to pinned host (StageUp). Returns when the copy is complete.
Status StageDown(DeviceRuntime& rt, DeviceRuntime::Stream s, void* dev, const void* host_pinned, size_t bytes);
Status StageUp(DeviceRuntime& rt, DeviceRuntime::Stream s, void* host_pinned, const void* dev, size_t bytes);

namespace internal {
// The implementations (runtime_acl.cpp, runtime_musa.cpp): bind `handle` (dlopen'ed `path`).
Result<std::shared_ptr<DeviceRuntime>> BindAcl(const RuntimeRow& row, const std::string& path, void* handle);
Result<std::shared_ptr<DeviceRuntime>> BindMusa(const RuntimeRow& row, const std::string& path, void* handle);
// Unsupported: `path` (the `row` runtime) lacks `symbol`; names the row's variable.
Status MissingRuntimeSymbol(const RuntimeRow& row, const std::string& path, const std::string& symbol);
}  // namespace internal

}  // namespace tessera::comm
