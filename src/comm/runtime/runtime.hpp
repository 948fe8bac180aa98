// comm/runtime: the device-runtime table: one row per vendor runtime (NVIDIA's CUDA runtime, Ascend's
// ACL, Moore Threads' MUSA), loaded at run time with dlopen like the CCL table (comm/ccl/ccl.hpp), and one
// interface over them.
//
// A runtime is loaded with dlopen (a CUDA build also links cudart into libtessera for its kernels), so
// libtessera runs on machines without it. Each runtime is ONE
// row of kRuntimeTable (RuntimeRow): its name, file, the variable that points it at another file, its call shape
// and its capability flags, from which a rank picks the device bridge or pinned staging. DeviceRuntime is the
// interface the device ranks call: one implementation per call shape (runtime_acl.cpp, runtime_cuda_api.cpp: CUDA's
// runtime API under the row's prefix, "cuda" or "musa"), each declaring its own function-pointer types from the
// vendor's public API (sources cited there); no vendor header is needed to build. Errors are Status values naming the
// runtime, the call and the runtime's own error code and message (aclGetRecentErrMsg, cudaGetErrorString,
// musaGetErrorString).
//
// Beyond the calls every row has, a row may have the device bridge's calls (mapped host memory, registration of
// existing host memory, stream write / wait value) and Tessera's fold/finalize kernels (DeviceKernels, built for
// the runtime in comm/kernels). The capability flags say which; a rank with all of them runs the device bridge
// (comm/device/device_bridge_rank), every other row stages through pinned memory (comm/device/staged_rank), and a row
// that registers host memory can run the copy bridge there (HasCopyBridge, TESSERA_COPY_BRIDGE=on).
//
// Threads: ACL binds a device to a thread (aclrtSetDevice "per thread before resources"), so every thread that
// calls a DeviceRuntime calls SetDevice first; MUSA (as CUDA) keeps a current device per thread too.
// Used by the device ranks (comm/device), ckpt's device copies and the launcher's device count.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "common/dl.hpp"
#include "common/dtype.hpp"
#include "common/vendor.hpp"
#include "tessera/status.hpp"

namespace tessera::comm {

// How a runtime is called.
enum class RuntimeShape {
  kAcl,      // ACL's (acl_rt.h): aclInit once per process, destMax on copies and memsets, aclrtQueryEventStatus
  kEmu,      // the emulated device (runtime_emu.cpp): built in, nothing to load
  kCudaApi,  // CUDA's runtime API (cuda_runtime_api.h) under the row's prefix: "cuda" itself, or "musa" (torch_musa's
             // 1:1 mapping; MUSA's values are ASSUMED to be CUDA's, see runtime_cuda_api.cpp)
};

// One device runtime.
struct RuntimeRow {
  const char* name;     // "cuda", "acl", "musa"
  const char* soname;   // what dlopen loads, e.g. "libascendcl.so" (may be a path)
  const char* env_var;  // the variable that points the row at another file, e.g. "TESSERA_ACL_LIBRARY"
  RuntimeShape shape;
  const char* prefix;  // kCudaApi: the symbols' prefix ("cuda" -> cudaMalloc, "musa" -> musaMalloc); else ""
  // A file mapped in a process once the runtime has started there (CUDA: the driver, libcuda.so.1, which libcudart
  // maps on its first call; the others: the runtime itself; null for a built-in row: started once LoadRuntime made it).
  // IsDeviceMemory asks only started runtimes, so a host rank never starts one (a CUDA context costs GPU memory).
  const char* started;
  // Capability flags. host_register: registration of existing host memory (a shared-memory ring) so that the copies
  // read and write it directly: cudaHostRegister (mapped, as the device bridge's flags need), aclrtHostRegisterV2
  // (page-locked; the copy bridge). stream_memops: stream write / wait value (cuStreamWriteValue32 and friends).
  // pinned_host_alloc: page-locked host allocation (aclrtMallocHost / musaMallocHost), which staging needs.
  // (Whether the row has Tessera's kernels is not a flag: it is whether the build has them, FindKernels.)
  bool host_register;
  bool stream_memops;
  bool pinned_host_alloc;
  // The alignment an asynchronous copy's addresses need (1: none); a copy that misses it is made synchronously.
  size_t async_copy_align = 1;
};

// The runtimes this build knows. cuda runs on NVIDIA GPUs (the H200 of scripts/device-check.sh); acl and musa have
// not run on hardware: they are proven against the host ABI shims of tests/shims (tests/runtime). See docs/devices.md,
// "Vendors".
inline constexpr RuntimeRow kRuntimeTable[] = {
    // CUDA (NVIDIA): cuda_runtime_api.h / driver_types.h of CUDA 13.0 (runtime_cuda_api.cpp cites each value).
    // Soname: CUDA 13's runtime, "libcudart.so.13", the file libtessera links and torch's cu130 wheels bring, so
    // dlopen finds the copy already mapped. Mapped registration (cudaHostRegister, cudaHostGetDevicePointer) and
    // stream memory operations (cuStreamWriteValue32 / cuStreamWaitValue32 through cudaGetDriverEntryPointByVersion;
    // the kernels' spin-wait where a driver refuses them) are CUDA's.
    {.name = "cuda",
     .soname = "libcudart.so.13",
     .env_var = "TESSERA_CUDA_LIBRARY",
     .shape = RuntimeShape::kCudaApi,
     .prefix = "cuda",
     .started = "libcuda.so.1",
     .host_register = true,
     .stream_memops = true,
     .pinned_host_alloc = true},
    // ACL (Huawei Ascend): acl_base.h / acl_rt.h as vendored by Ascend/pytorch third_party/acl/inc/acl (commit
    // c4840e3c, tests/shims/acl_abi.h cites lines). Soname: torch_npu dlopens "libascendcl.so". Registration of
    // existing host memory as page-locked: aclrtHostRegisterV2 (CANN 9.0.0; bound where the file has it, the copy
    // bridge's only call beyond staging's); no stream memory operations in acl_rt.h; aclrtMallocHost (rt:1250).
    // aclrtMemcpyAsync's src and dst must be 64-byte aligned (CANN 8.0.0's reference, aclcppdevg_03_0106).
    {.name = "acl",
     .soname = "libascendcl.so",
     .env_var = "TESSERA_ACL_LIBRARY",
     .shape = RuntimeShape::kAcl,
     .prefix = "",
     .started = "libascendcl.so",
     .host_register = true,
     .stream_memops = false,
     .pinned_host_alloc = true,
     .async_copy_align = 64},
    // MUSA (Moore Threads): names from torch_musa's mapping (utils/mapping/general.json, commit 8b583b3f), soname
    // libmusart.so (torch_musa csrc/core/musart.cpp:14); signatures and values ASSUMED to be CUDA's (the headers
    // are not published; tests/shims/musa_abi.h marks each). host_register / stream_memops: false until a MUSA
    // SDK shows musaHostRegister / stream memory operations with CUDA's semantics (not used by this row).
    {.name = "musa",
     .soname = "libmusart.so",
     .env_var = "TESSERA_MUSA_LIBRARY",
     .shape = RuntimeShape::kCudaApi,
     .prefix = "musa",
     .started = "libmusart.so",
     .host_register = false,
     .stream_memops = false,
     .pinned_host_alloc = true,
     .async_copy_align = 64},  // no rule published: ACL's, kept for every staged row
    // CoreX (Iluvatar): CUDA's runtime API under CUDA's own names (FlagOpen/FlagCX commit 6e336e33:
    // flagcx/adaptor/ixcuda_adaptor.cc calls cudaMalloc, cudaMemcpyAsync, ... through <cuda_runtime.h>), so its values
    // are CUDA's. File: FlagCX's Makefile (commit 0f337f76) links -lcudart from $(DEVICE_HOME)/lib, DEVICE_HOME
    // /usr/local/corex (lib, not lib64); the unversioned name is what -lcudart resolves. No kernels are built for it,
    // so no device bridge: host_register / stream_memops false; cudaMallocHost for staging. Started: the runtime
    // itself (its libcuda is not asked: an NVIDIA driver's has the same name).
    {.name = "corex",
     .soname = "/usr/local/corex/lib/libcudart.so",
     .env_var = "TESSERA_COREX_LIBRARY",
     .shape = RuntimeShape::kCudaApi,
     .prefix = "cuda",
     .started = "libcudart.so",
     .host_register = false,
     .stream_memops = false,
     .pinned_host_alloc = true,
     .async_copy_align = 64},  // no rule published: ACL's, kept for every staged row
    // The emulated device (runtime_emu.cpp): "device memory" in host memory, a worker thread per stream, the host
    // folds as its kernels. A test device with a runtime's contract (TESSERA_DEVICE=emu:N), so the device ranks'
    // code runs on every machine; no vendor's values.
    {.name = "emu",
     .soname = "",
     .env_var = "",
     .shape = RuntimeShape::kEmu,
     .prefix = "",
     .started = nullptr,
     .host_register = true,
     .stream_memops = true,
     .pinned_host_alloc = true},
};

// Whether a rank of this row (family) runs the device bridge: the row has mapped registration and stream memory
// operations, and the build has Tessera's kernels for it. Otherwise its ranks stage through pinned memory.
bool HasDeviceBridge(const RuntimeRow& row);
bool HasDeviceBridge(const DeviceFamily& family);
// Whether a rank of this family can run the copy bridge instead (TESSERA_COPY_BRIDGE=on): its row registers host
// memory for its copies but lacks the device bridge; it copies between device memory and the rings and folds nothing.
bool HasCopyBridge(const DeviceFamily& family);

// True when `p` is device (or managed) memory of a runtime row this process has started (see RuntimeRow::started):
// a host rank must not get such a pointer.
bool IsDeviceMemory(const void* p);

// How many devices of `family` this process sees: its runtime row's DeviceCount() (loading the row); 0 with *why
// set when none (the runtime missing, or its error).
int VisibleDeviceCount(const DeviceFamily& family, std::string* why);

// The row named `name` ("cuda", "acl", "musa", "corex", "emu"), or null.
const RuntimeRow* FindRuntimeRow(std::string_view name);
// "cuda, acl, musa, corex, emu": for messages.
std::string RuntimeRowNames();

// The direction of a copy (each row maps it to its own kind value).
enum class CopyKind { kHostToDevice, kDeviceToHost, kDeviceToDevice };
const char* CopyKindName(CopyKind k);  // "host-to-device", ...

// What the runtime says a pointer is.
enum class MemoryType {
  kUnregistered,  // not the runtime's (pageable host memory, or unknown)
  kPinnedHost,    // host memory the runtime allocated (or registered)
  kDevice,        // device memory of `device`
  kManaged,       // managed (unified) memory: the device may use it (CUDA's cudaMemoryTypeManaged)
};
struct PointerInfo {
  MemoryType type = MemoryType::kUnregistered;
  int device = -1;  // for kDevice (and pinned host memory where the runtime says), else -1
  // The allocation that holds the pointer, where the runtime tells it (CUDA: cuMemGetAddressRange), else 0/0.
  uintptr_t base = 0;
  size_t extent = 0;
};

// Tessera's device kernels for one runtime (comm/kernels has CUDA's), with the same element rules as the host folds
// (comm/reduce), so a device rank and a host rank that fold the same contributions in the same order get the same
// bits. Each returns the runtime's error code (0: launched); all run asynchronously on `stream`.
struct DeviceKernels {
  const char* runtime;  // the row they run on: "cuda"
  // Loads every kernel now (a lazily loaded kernel's first launch can wait behind an application's synchronizing
  // call on a stream that waits for the collective: see comm/kernels).
  int (*preload)();
  // acc (AccumType(dtype)) = first ? convert(src) : op(acc, convert(src)); src is dtype or AccumType(dtype).
  int (*fold)(void* acc, const void* src, size_t n, DType dtype, DType src_type, RedOp op, bool first, void* stream);
  // out (dtype) = narrow(acc [/ divisor for avg]), rounded once.
  int (*finalize)(void* out, const void* acc, size_t n, DType dtype, RedOp op, int divisor, void* stream);
  // The stream waits until the mapped word reaches `value` (wrap-around >=); the stream writes `value` after a
  // system-wide fence. The fallbacks of the runtime's stream memory operations.
  int (*spin_wait)(const volatile uint32_t* flag_dev, uint32_t value, void* stream);
  int (*write_flag)(uint32_t* flag_dev, uint32_t value, void* stream);
};
// The kernels this build has for the runtime row `runtime`, or null (comm/kernels registers CUDA's when the build
// has CUDA; a new vendor's kernels are one more entry there).
const DeviceKernels* FindKernels(std::string_view runtime);

// Host memory the device can address: `host` for the CPU, `dev` the same bytes seen from the device.
struct MappedHost {
  void* host = nullptr;
  void* dev = nullptr;
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
  // "NVIDIA H200"; the runtime's name and the index where the runtime cannot tell.
  virtual Result<std::string> DeviceName(int device);

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
  // Whether a copy between `dst` and `src` may be queued asynchronously: both meet row().async_copy_align. A copy that
  // may not is made with Memcpy once its stream has drained.
  bool AsyncCopyAligned(const void* dst, const void* src) const {
    return reinterpret_cast<uintptr_t>(dst) % row_.async_copy_align == 0 &&
           reinterpret_cast<uintptr_t>(src) % row_.async_copy_align == 0;
  }

  // --- The device bridge's calls (row().host_register, row().stream_memops); Unsupported, naming the runtime and
  // the call, where the row lacks them.
  // Page-locked host memory mapped into the device's address space (cudaHostAlloc with cudaHostAllocMapped).
  virtual Result<MappedHost> HostAllocMapped(size_t bytes);
  // Registers existing host memory so the device's copy engines read and write it directly (cudaHostRegister).
  virtual Status HostRegister(void* host, size_t bytes);
  virtual Status HostUnregister(void* host);
  // The stream writes `value` to the mapped word `dev_addr` after its earlier work and that work's memory writes
  // are visible; the stream waits until the mapped word reaches `value` (wrap-around >=). Unsupported where the
  // runtime or its driver lacks them: the caller falls back to the kernels' spin_wait / write_flag.
  virtual Status StreamWriteValue32(Stream s, uint32_t* dev_addr, uint32_t value);
  virtual Status StreamWaitValue32(Stream s, uint32_t* dev_addr, uint32_t value);

  // --- Tessera's kernels for this runtime (FindKernels), null where the build has none.
  const DeviceKernels* kernels() const { return kernels_; }
  // The kernels' calls, their launch errors checked as this runtime's errors ("the fold kernel").
  Status PreloadKernels();
  Status Fold(void* acc, const void* src, size_t n, DType dtype, DType src_type, RedOp op, bool first, Stream s);
  Status Finalize(void* out, const void* acc, size_t n, DType dtype, RedOp op, int divisor, Stream s);
  Status SpinWait(uint32_t* dev_addr, uint32_t value, Stream s);
  Status WriteFlag(uint32_t* dev_addr, uint32_t value, Stream s);

  // --- Widening 16-bit floats to f32 on the device, exactly (an island's 16-bit reduction runs in f32 on its
  // library): Tessera's fold kernel where the build has kernels for the row, else the runtime's own operator library
  // where it has one (ACL: CANN's aclnnCast, comm/runtime/aclnn). WidenSupport: OK, or Unsupported saying why (the
  // files tried and the variables that point at others). Narrowing is never done on the device.
  virtual Status WidenSupport();
  // dst (f32) = src (f16 or bf16), n elements, queued on `s`.
  virtual Status Widen(void* dst, const void* src, size_t n, DType src_type, Stream s);

 protected:
  DeviceRuntime(const RuntimeRow& row, std::string path);
  // A failed kernel launch's code as this runtime's error ("cuda error 'invalid argument' (1) in the fold kernel").
  virtual Status CheckCode(int code, const std::string& what) const = 0;
  Status Lacks(const char* call) const;  // Unsupported: this runtime has no `call`
  RuntimeRow row_;                       // its strings point into this object
  std::string name_, path_, env_var_, prefix_;
  const DeviceKernels* kernels_ = nullptr;
};

// Loads `row` from row.soname (a name or a path) through common/dl's binder. Unsupported when the file or a symbol
// is missing: the message names the runtime, the file, the row's variable and dlerror() (or the missing symbol).
Result<std::shared_ptr<DeviceRuntime>> LoadRuntime(const RuntimeRow& row);
// The row named `name`, from the file its variable (TESSERA_CUDA_LIBRARY, TESSERA_ACL_LIBRARY,
// TESSERA_MUSA_LIBRARY) names when set. Loaded once per process and row: every later call returns the same object.
Result<std::shared_ptr<DeviceRuntime>> LoadRuntime(std::string_view name);

// Opens the device a rank drives (its TESSERA_DEVICE, `name`, not host): the family's runtime row, the index
// checked against the devices that runtime sees, the device made current on the calling thread. Unsupported when
// the runtime will not load or sees no device; InvalidArgument for an index past the last visible device. Each
// message starts with TESSERA_DEVICE='<name>' and says why (the library and its variable, the visible-devices
// variable).
Result<std::shared_ptr<DeviceRuntime>> OpenDevice(const DeviceName& name);

// The started runtime whose device (or managed) memory `p` is, with what it says of `p` (its device); rt is null
// for any other pointer. IsDeviceMemory(p) is DeviceMemoryOwner(p).rt != nullptr. The runtime lives as long as
// the process.
struct DeviceMemoryOwnerInfo {
  DeviceRuntime* rt = nullptr;
  PointerInfo info;
};
DeviceMemoryOwnerInfo DeviceMemoryOwner(const void* p);

// Pinned staging, which every row supports: copies `bytes` from pinned host memory (MallocHost) to device memory
// on `s` and waits for it (StageDown), or device to pinned host (StageUp). Returns when the copy is complete.
Status StageDown(DeviceRuntime& rt, DeviceRuntime::Stream s, void* dev, const void* host_pinned, size_t bytes);
Status StageUp(DeviceRuntime& rt, DeviceRuntime::Stream s, void* host_pinned, const void* dev, size_t bytes);

namespace internal {
// The implementations (runtime_acl.cpp, runtime_cuda_api.cpp): bind the row's calls from `lib`, its opened file.
Result<std::shared_ptr<DeviceRuntime>> BindAcl(const RuntimeRow& row, const dl::Library& lib);
Result<std::shared_ptr<DeviceRuntime>> BindCudaApi(const RuntimeRow& row, const dl::Library& lib);
Result<std::shared_ptr<DeviceRuntime>> MakeEmu(const RuntimeRow& row);  // runtime_emu.cpp
// How many times this process has tried to load row `name`'s runtime (LoadRuntime of a row), for tests.
uint64_t RuntimeLoadAttempts(std::string_view name);
}  // namespace internal

}  // namespace tessera::comm
