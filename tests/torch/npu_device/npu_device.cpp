// tests/torch/npu_device/npu_device.cpp — a test-only torch device `npu` (PrivateUse1, renamed in __init__.py), on
// the ACL host shim of tests/shims (libascendcl.so): the stand-in for torch_npu that lets the tessera backend's
// generic device half (python/csrc/device.hpp) run on npu tensors here. Written on the pattern of PyTorch's
// open-registration test extension (test/cpp_extensions/open_registration_extension.cpp), on ACL calls only:
//   * memory: aclrtMalloc / aclrtFree (device memory is PROT_NONE to host code in the shim: nothing here touches
//     it but through ACL); stream-ordered as a caching allocator is: a block is freed only after the stream that
//     was current when it was made, and every stream it was recorded on (recordDataPtrOnStream), have drained;
//   * copies host<->device and device<->device: aclrtMemcpy, after the current stream has drained (the copy then
//     follows the work queued before it, as a copy on the current stream would); strided tensors go through a
//     host image of their whole storage;
//   * empty, empty_strided, views (as_strided, view, _reshape_alias), resize_, fill_, zero_, set_, .item(); every
//     other op falls back to the CPU (at::native::cpu_fallback: arguments copied to the host, results back);
//   * a DeviceGuardImpl with ACL streams (id 0: the device's default stream, NULL; others: aclrtCreateStream) and
//     ACL events, whose getStreamNativeHandle is the aclrtStream — what Tessera's C API takes as an npu rank's
//     tsrStream_t.
// Not a model of Ascend hardware or of torch_npu: nothing here is claimed about them.
#include <ATen/EmptyTensor.h>
#include <ATen/detail/PrivateUse1HooksInterface.h>
#include <ATen/native/CPUFallback.h>
#include <ATen/ops/_reshape_alias_native.h>
#include <ATen/ops/as_strided_cpu_dispatch.h>
#include <ATen/ops/set_cpu_dispatch.h>
#include <ATen/ops/view_native.h>
#include <c10/core/Allocator.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <torch/extension.h>

#include <algorithm>
#include <cstring>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "acl_abi.h"

namespace {

constexpr c10::DeviceType kNpu = c10::DeviceType::PrivateUse1;

void Acl(aclError e, const char* what) {
  if (e == ACL_SUCCESS) return;
  const char* msg = aclGetRecentErrMsg();
  TORCH_CHECK(false, "npu test device: ", what, " failed: aclError ", e, ": ", msg != nullptr ? msg : "");
}

int DeviceCount() {
  uint32_t n = 0;
  Acl(aclrtGetDeviceCount(&n), "aclrtGetDeviceCount");
  return static_cast<int>(n);
}

// ACL's current device is per thread: every thread that calls ACL for a device sets it first.
void Use(int device) {
  int32_t cur = -1;
  if (aclrtGetDevice(&cur) == ACL_SUCCESS && cur == device) return;
  Acl(aclrtSetDevice(device), "aclrtSetDevice");
}

// ---- streams: id 0 is the default stream (NULL), id k > 0 the (k-1)th stream made ----
std::mutex g_mu;
std::vector<aclrtStream> g_streams;
thread_local int t_device = 0;
thread_local std::unordered_map<int, c10::StreamId> t_current;  // device -> current stream id

aclrtStream Native(const c10::Stream& s) {
  if (s.id() == 0) return nullptr;
  std::lock_guard<std::mutex> l(g_mu);
  TORCH_CHECK(s.id() > 0 && static_cast<size_t>(s.id()) <= g_streams.size(), "npu test device: stream id ", s.id(),
              " was not made here");
  return g_streams[static_cast<size_t>(s.id() - 1)];
}

c10::Stream CurrentStream(int device) {
  auto it = t_current.find(device);
  return c10::Stream(c10::Stream::UNSAFE, c10::Device(kNpu, static_cast<c10::DeviceIndex>(device)),
                     it == t_current.end() ? 0 : it->second);
}

// Drains the current stream of `device`: a synchronous copy then follows the work queued before it.
void DrainCurrent(int device) {
  Use(device);
  Acl(aclrtSynchronizeStream(Native(CurrentStream(device))), "aclrtSynchronizeStream");
}

// ---- memory ----
std::unordered_map<void*, std::vector<aclrtStream>> g_recorded;  // block -> streams it was recorded on (g_mu)

void Free(void* p) {
  if (p == nullptr) return;
  std::vector<aclrtStream> streams;
  {
    std::lock_guard<std::mutex> l(g_mu);
    auto it = g_recorded.find(p);
    if (it != g_recorded.end()) {
      streams = std::move(it->second);
      g_recorded.erase(it);
    }
  }
  for (aclrtStream s : streams) (void)aclrtSynchronizeStream(s);  // the streams that use it are done with it
  (void)aclrtFree(p);
}

thread_local int t_alloc_device = -1;  // the device of the allocation being made (-1: the current device)

struct NpuAllocator final : c10::Allocator {
  c10::DataPtr allocate(size_t n) override {
    const int dev = t_alloc_device >= 0 ? t_alloc_device : t_device;
    void* p = nullptr;
    if (n > 0) {
      Use(dev);
      Acl(aclrtMalloc(&p, n, ACL_MEM_MALLOC_HUGE_FIRST), "aclrtMalloc");
      // Stream-ordered, as a caching allocator is: a block made while a stream of ours is current (a temporary of
      // a collective, on the communication stream) is freed only after that stream has drained.
      if (aclrtStream cur = Native(CurrentStream(dev))) {
        std::lock_guard<std::mutex> l(g_mu);
        g_recorded[p].push_back(cur);
      }
    }
    return {p, p, &Free, c10::Device(kNpu, static_cast<c10::DeviceIndex>(dev))};
  }
  c10::DeleterFnPtr raw_deleter() const override { return &Free; }
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    Acl(aclrtMemcpy(dest, count, src, count, ACL_MEMCPY_DEVICE_TO_DEVICE), "aclrtMemcpy (device to device)");
  }
};
NpuAllocator g_alloc;

void RecordOnStream(const c10::DataPtr& data, const c10::Stream& stream) {
  if (data.get() == nullptr || stream.id() == 0) return;
  const aclrtStream s = Native(stream);
  std::lock_guard<std::mutex> l(g_mu);
  auto& v = g_recorded[data.get_context()];
  if (std::find(v.begin(), v.end(), s) == v.end()) v.push_back(s);
}

// ---- the device guard ----
struct NpuGuardImpl final : c10::impl::DeviceGuardImplInterface {
  c10::DeviceType type() const override { return kNpu; }
  c10::Device exchangeDevice(c10::Device d) const override {
    const c10::Device old = getDevice();
    if (old.index() != d.index()) setDevice(d);
    return old;
  }
  c10::Device getDevice() const override { return c10::Device(kNpu, static_cast<c10::DeviceIndex>(t_device)); }
  void setDevice(c10::Device d) const override {
    TORCH_CHECK(d.type() == kNpu && d.index() >= 0 && d.index() < DeviceCount(), "npu test device: no device ", d);
    t_device = d.index();
    Use(t_device);
  }
  void uncheckedSetDevice(c10::Device d) const noexcept override { t_device = d.index(); }
  c10::Stream getStream(c10::Device d) const override { return CurrentStream(d.index()); }
  c10::Stream getDefaultStream(c10::Device d) const override { return c10::Stream(c10::Stream::UNSAFE, d, 0); }
  c10::Stream getNewStream(c10::Device d, int /*priority*/) const override {
    Use(d.index());
    aclrtStream s = nullptr;
    Acl(aclrtCreateStream(&s), "aclrtCreateStream");
    std::lock_guard<std::mutex> l(g_mu);
    g_streams.push_back(s);
    return c10::Stream(c10::Stream::UNSAFE, d, static_cast<c10::StreamId>(g_streams.size()));
  }
  c10::Stream getStreamFromGlobalPool(c10::Device d, bool /*high*/) const override { return getNewStream(d, 0); }
  c10::Stream exchangeStream(c10::Stream s) const override {
    const c10::Stream old = CurrentStream(s.device_index());
    t_current[s.device_index()] = s.id();
    return old;
  }
  void* getStreamNativeHandle(const c10::Stream s) const override { return Native(s); }
  c10::DeviceIndex deviceCount() const noexcept override {
    uint32_t n = 0;
    return aclrtGetDeviceCount(&n) == ACL_SUCCESS ? static_cast<c10::DeviceIndex>(n) : 0;
  }
  void record(void** event, const c10::Stream& stream, const c10::DeviceIndex device_index,
              const c10::EventFlag /*flag*/) const override {
    TORCH_CHECK(device_index == -1 || device_index == stream.device_index(), "npu test device: event of device ",
                device_index, " recorded on a stream of device ", stream.device_index());
    Use(stream.device_index());
    if (*event == nullptr) Acl(aclrtCreateEvent(event), "aclrtCreateEvent");
    Acl(aclrtRecordEvent(*event, Native(stream)), "aclrtRecordEvent");
  }
  void block(void* event, const c10::Stream& stream) const override {
    if (event == nullptr) return;
    Use(stream.device_index());
    Acl(aclrtStreamWaitEvent(Native(stream), event), "aclrtStreamWaitEvent");
  }
  bool queryEvent(void* event) const override {
    if (event == nullptr) return true;
    aclrtEventRecordedStatus st = ACL_EVENT_RECORDED_STATUS_NOT_READY;
    Acl(aclrtQueryEventStatus(event, &st), "aclrtQueryEventStatus");
    return st == ACL_EVENT_RECORDED_STATUS_COMPLETE;
  }
  void destroyEvent(void* event, const c10::DeviceIndex /*device_index*/) const noexcept override {
    if (event != nullptr) (void)aclrtDestroyEvent(event);
  }
  void synchronizeEvent(void* event) const override {
    if (event != nullptr) Acl(aclrtSynchronizeEvent(event), "aclrtSynchronizeEvent");
  }
  bool queryStream(const c10::Stream& stream) const override {
    void* ev = nullptr;
    record(&ev, stream, stream.device_index(), c10::EventFlag::PYTORCH_DEFAULT);
    const bool done = queryEvent(ev);
    destroyEvent(ev, stream.device_index());
    return done;
  }
  void synchronizeStream(const c10::Stream& stream) const override {
    Use(stream.device_index());
    Acl(aclrtSynchronizeStream(Native(stream)), "aclrtSynchronizeStream");
  }
  void synchronizeDevice(const c10::DeviceIndex device_index) const override {
    Use(device_index);
    Acl(aclrtSynchronizeDevice(), "aclrtSynchronizeDevice");
  }
  void recordDataPtrOnStream(const c10::DataPtr& data, const c10::Stream& stream) const override {
    RecordOnStream(data, stream);
  }
};

struct NpuHooks final : at::PrivateUse1HooksInterface {
  bool isBuilt() const override { return true; }
  bool isAvailable() const override { return DeviceCount() > 0; }
  bool hasPrimaryContext(c10::DeviceIndex) const override { return true; }
  at::Device getDeviceFromPtr(void* data) const override {
    aclrtPtrAttributes a{};
    Acl(aclrtPointerGetAttributes(data, &a), "aclrtPointerGetAttributes");
    return c10::Device(kNpu, static_cast<c10::DeviceIndex>(a.location.id));
  }
  void resizePrivateUse1Bytes(const c10::Storage& storage, size_t newsize) const override {
    c10::DataPtr fresh = g_alloc.allocate(newsize);
    const size_t keep = std::min(newsize, storage.nbytes());
    if (keep > 0) {
      DrainCurrent(t_device);
      g_alloc.copy_data(fresh.get(), storage.data(), keep);
    }
    storage.unsafeGetStorageImpl()->set_data_ptr_noswap(std::move(fresh));
    storage.unsafeGetStorageImpl()->set_nbytes(newsize);
  }
};

// ---- tensors between host and device ----
int DeviceOf(const at::Tensor& t) { return t.device().index() < 0 ? t_device : t.device().index(); }
size_t Bytes(const at::Tensor& t) { return static_cast<size_t>(t.numel()) * t.element_size(); }

// A host image of the whole storage of the npu tensor `t`, and a CPU tensor with t's sizes, strides and offset on it.
std::pair<at::Tensor, at::Tensor> HostImage(const at::Tensor& t) {
  const size_t n = t.storage().nbytes();
  at::Tensor buf = at::empty({static_cast<int64_t>(n)}, at::TensorOptions().dtype(at::kByte));
  if (n > 0) {
    DrainCurrent(DeviceOf(t));
    Acl(aclrtMemcpy(buf.data_ptr(), n, t.storage().data(), n, ACL_MEMCPY_DEVICE_TO_HOST), "aclrtMemcpy (to host)");
  }
  at::Tensor view = at::empty({0}, at::TensorOptions().dtype(t.scalar_type()))
                        .set_(buf.storage(), t.storage_offset(), t.sizes(), t.strides());
  return {buf, view};
}

void WriteImage(const at::Tensor& t, const at::Tensor& buf) {
  const size_t n = t.storage().nbytes();
  if (n > 0)
    Acl(aclrtMemcpy(t.storage().mutable_data(), n, buf.data_ptr(), n, ACL_MEMCPY_HOST_TO_DEVICE),
        "aclrtMemcpy (to device)");
}

// The values of npu tensor `t` on the host (contiguous).
at::Tensor ToHost(const at::Tensor& t) {
  if (t.is_contiguous()) {
    at::Tensor out = at::empty(t.sizes(), at::TensorOptions().dtype(t.scalar_type()));
    if (Bytes(t) > 0) {
      DrainCurrent(DeviceOf(t));
      Acl(aclrtMemcpy(out.data_ptr(), Bytes(out), t.data_ptr(), Bytes(t), ACL_MEMCPY_DEVICE_TO_HOST),
          "aclrtMemcpy (to host)");
    }
    return out;
  }
  return HostImage(t).second.clone();
}

// dst (npu) = src (host, broadcast to dst's shape, converted to dst's dtype).
void FromHost(const at::Tensor& dst, const at::Tensor& src) {
  if (dst.numel() == 0) return;
  if (dst.is_contiguous()) {
    at::Tensor c = src.to(dst.scalar_type()).expand(dst.sizes()).contiguous();
    DrainCurrent(DeviceOf(dst));
    Acl(aclrtMemcpy(dst.data_ptr(), Bytes(dst), c.data_ptr(), Bytes(c), ACL_MEMCPY_HOST_TO_DEVICE),
        "aclrtMemcpy (to device)");
    return;
  }
  auto [buf, view] = HostImage(dst);
  view.copy_(src);
  WriteImage(dst, buf);
}

// ---- the ops ----
// Allocations of one op on the device it names, without changing the thread's current device.
struct AllocOn {
  explicit AllocOn(const std::optional<at::Device>& d) : prev(t_alloc_device) {
    if (d && d->has_index()) t_alloc_device = d->index();
  }
  ~AllocOn() { t_alloc_device = prev; }
  int prev;
};

at::Tensor EmptyMemoryFormat(c10::IntArrayRef size, std::optional<at::ScalarType> dtype,
                             std::optional<at::Layout> /*layout*/, std::optional<at::Device> device,
                             std::optional<bool> /*pin*/, std::optional<at::MemoryFormat> memory_format) {
  AllocOn on(device);
  return at::detail::empty_generic(size, &g_alloc, c10::DispatchKeySet(c10::DispatchKey::PrivateUse1),
                                   c10::dtype_or_default(dtype), memory_format);
}

at::Tensor EmptyStrided(c10::IntArrayRef size, c10::IntArrayRef stride, std::optional<at::ScalarType> dtype,
                        std::optional<at::Layout> /*layout*/, std::optional<at::Device> device,
                        std::optional<bool> /*pin*/) {
  AllocOn on(device);
  return at::detail::empty_strided_generic(size, stride, &g_alloc, c10::DispatchKeySet(c10::DispatchKey::PrivateUse1),
                                           c10::dtype_or_default(dtype));
}

at::Tensor CopyFrom(const at::Tensor& self, const at::Tensor& dst, bool /*non_blocking*/) {
  if (self.is_cpu()) {
    FromHost(dst, self);
  } else if (dst.is_cpu()) {
    dst.copy_(ToHost(self));
  } else if (self.scalar_type() == dst.scalar_type() && self.sizes() == dst.sizes() && self.is_contiguous() &&
             dst.is_contiguous()) {
    if (Bytes(dst) > 0) {
      DrainCurrent(DeviceOf(dst));
      Acl(aclrtMemcpy(dst.data_ptr(), Bytes(dst), self.data_ptr(), Bytes(self), ACL_MEMCPY_DEVICE_TO_DEVICE),
          "aclrtMemcpy (device to device)");
    }
  } else {
    FromHost(dst, ToHost(self));
  }
  return dst;
}

const at::Tensor& Resize(const at::Tensor& self, c10::IntArrayRef size,
                         std::optional<at::MemoryFormat> /*memory_format*/) {
  auto* impl = self.unsafeGetTensorImpl();
  int64_t numel = 1;
  for (int64_t s : size) numel *= s;
  const size_t need = static_cast<size_t>(numel + self.storage_offset()) * self.element_size();
  if (need > self.storage().nbytes()) at::detail::getPrivateUse1Hooks().resizePrivateUse1Bytes(self.storage(), need);
  impl->set_sizes_contiguous(size);
  return self;
}

at::Tensor CopyFromAndResize(const at::Tensor& self, const at::Tensor& dst) {
  Resize(dst, self.sizes(), std::nullopt);
  return CopyFrom(self, dst, false);
}

at::Tensor& Fill(at::Tensor& self, const at::Scalar& value) {
  FromHost(self, at::empty({}, at::TensorOptions().dtype(self.scalar_type())).fill_(value));
  return self;
}

at::Tensor& Zero(at::Tensor& self) {
  if (self.is_contiguous() && Bytes(self) > 0) {
    DrainCurrent(DeviceOf(self));
    Acl(aclrtMemset(self.data_ptr(), Bytes(self), 0, Bytes(self)), "aclrtMemset");
    return self;
  }
  return Fill(self, 0);
}

at::Scalar LocalScalarDense(const at::Tensor& self) { return ToHost(self).item(); }

at::Tensor& SetStorage(at::Tensor& self, c10::Storage src) { return at::cpu::set_(self, src); }
at::Tensor& SetStorageOffset(at::Tensor& self, c10::Storage src, int64_t offset, c10::IntArrayRef size,
                             c10::IntArrayRef stride) {
  return at::cpu::set_(self, src, offset, size, stride);
}

void Fallback(const c10::OperatorHandle& op, torch::jit::Stack* stack) { at::native::cpu_fallback(op, stack); }

}  // namespace

C10_REGISTER_GUARD_IMPL(PrivateUse1, NpuGuardImpl);
REGISTER_ALLOCATOR(c10::DeviceType::PrivateUse1, &g_alloc);

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("empty.memory_format", EmptyMemoryFormat);
  m.impl("empty_strided", EmptyStrided);
  m.impl("as_strided", at::cpu::as_strided);
  m.impl("view", at::native::view);
  m.impl("_reshape_alias", at::native::_reshape_alias);
  m.impl("resize_", Resize);
  m.impl("_copy_from", CopyFrom);
  m.impl("_copy_from_and_resize", CopyFromAndResize);
  m.impl("fill_.Scalar", Fill);
  m.impl("zero_", Zero);
  m.impl("_local_scalar_dense", LocalScalarDense);
  m.impl("set_.source_Storage", SetStorage);
  m.impl("set_.source_Storage_storage_offset", SetStorageOffset);
}

TORCH_LIBRARY_IMPL(_, PrivateUse1, m) { m.fallback(torch::CppFunction::makeFromBoxedFunction<&Fallback>()); }

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.doc() = "test-only torch device npu on the ACL host shim (tests/torch/npu_device)";
  Acl(aclInit(nullptr), "aclInit");
  static NpuHooks hooks;
  at::RegisterPrivateUse1HooksInterface(&hooks);
  m.def("device_count", [] { return DeviceCount(); });
  m.def("current_device", [] { return t_device; });
  m.def("set_device", [](int d) { NpuGuardImpl().setDevice(c10::Device(kNpu, static_cast<c10::DeviceIndex>(d))); });
  m.def("synchronize", [](int d) { NpuGuardImpl().synchronizeDevice(static_cast<c10::DeviceIndex>(d)); });
}
