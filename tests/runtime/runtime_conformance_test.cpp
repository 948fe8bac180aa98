// tests/runtime/runtime_conformance_test: the rows of kRuntimeTable (src/comm/runtime/runtime.hpp) through
// DeviceRuntime, as the device ranks call them: one typed conformance suite run on each row (acl on the ACL host
// shim, musa on the MUSA host shim, both loaded through the row's variable; cuda on the real CUDA runtime where a
// GPU is, skipped elsewhere) -- device count
// and selection, device and pinned memory, pointer queries, asynchronous copies with stream synchronisation,
// events ordering two streams, memset, the pinned staging helpers on random data of odd sizes -- and the
// loader's errors (a missing file, a missing symbol, an invalid device index, an unknown row). The shims' streams
// really are asynchronous (TESSERA_SHIM_STREAM_DELAY_US): the tests show that a missing synchronisation or wait
// would be seen (on the cuda row, a real GPU's, the checks that need a delayed stream are left out). The device
// bridge's calls (mapped host memory, stream write / wait value, registration, the kernels) are tested on the rows
// that claim them (cuda, on a GPU), and refused with a clear error by the rows that do not (acl, musa).
#include <dlfcn.h>
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "comm/runtime/runtime.hpp"

namespace tessera::comm {
namespace {

// kShimmed: a test device whose device count and stream delay the test sets (kCountVar, kDelayVar): the host ABI
// shims and the emulated device; the real CUDA runtime is not. kBuiltIn: no file to load (emu).
struct AclRow {
  static constexpr bool kShimmed = true, kBuiltIn = false;
  static constexpr const char* kCountVar = "TESSERA_SHIM_DEVICE_COUNT";
  static constexpr const char* kDelayVar = "TESSERA_SHIM_STREAM_DELAY_US";
  static constexpr const char* kName = "acl";
  static constexpr const char* kShim = TESSERA_SHIM_ACL;
  static constexpr const char* kVar = "TESSERA_ACL_LIBRARY";
  static constexpr const char* kFree = "aclrtFree";
  static constexpr const char* kSecondSymbol = "aclrtGetDeviceCount";  // the first one the stub lacks
};
struct MusaRow {
  static constexpr bool kShimmed = true, kBuiltIn = false;
  static constexpr const char* kCountVar = "TESSERA_SHIM_DEVICE_COUNT";
  static constexpr const char* kDelayVar = "TESSERA_SHIM_STREAM_DELAY_US";
  static constexpr const char* kName = "musa";
  static constexpr const char* kShim = TESSERA_SHIM_MUSA;
  static constexpr const char* kVar = "TESSERA_MUSA_LIBRARY";
  static constexpr const char* kFree = "musaFree";
  static constexpr const char* kSecondSymbol = "musaGetDeviceCount";
};
// Iluvatar CoreX: CUDA's runtime API under CUDA's names, on the CoreX host shim (tests/shims/corex_abi.h).
struct CorexRow {
  static constexpr bool kShimmed = true, kBuiltIn = false;
  static constexpr const char* kCountVar = "TESSERA_SHIM_DEVICE_COUNT";
  static constexpr const char* kDelayVar = "TESSERA_SHIM_STREAM_DELAY_US";
  static constexpr const char* kName = "corex";
  static constexpr const char* kShim = TESSERA_SHIM_COREX;
  static constexpr const char* kVar = "TESSERA_COREX_LIBRARY";
  static constexpr const char* kFree = "cudaFree";
  static constexpr const char* kSecondSymbol = "cudaGetLastError";  // the stub has only cudaGetErrorString
};
// The real CUDA runtime (the row's own file), where this machine has a GPU; every test skips elsewhere.
struct CudaRow {
  static constexpr bool kShimmed = false, kBuiltIn = false;
  static constexpr const char* kCountVar = "";
  static constexpr const char* kDelayVar = "";
  static constexpr const char* kName = "cuda";
  static constexpr const char* kShim = "libcudart.so.13";
  static constexpr const char* kVar = "TESSERA_CUDA_LIBRARY";
  static constexpr const char* kFree = "cudaFree";
  static constexpr const char* kSecondSymbol = "cudaGetLastError";  // the stub has only cudaGetErrorString
};
// The emulated device (src/comm/runtime/runtime_emu.cpp): built in, in every CI run.
struct EmuRow {
  static constexpr bool kShimmed = true, kBuiltIn = true;
  static constexpr const char* kCountVar = "TESSERA_EMU_DEVICES";
  static constexpr const char* kDelayVar = "TESSERA_EMU_STREAM_DELAY_US";
  static constexpr const char* kName = "emu";
  static constexpr const char* kShim = "(built in)";
  static constexpr const char* kVar = "";
  static constexpr const char* kFree = "emuFree";
  static constexpr const char* kSecondSymbol = "";
};

// Sets a variable for the scope, restoring the previous value.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const std::string& value) : name_(name) {
    if (*name == 0) return;  // a row without such a variable
    if (const char* old = std::getenv(name)) old_ = old, had_ = true;
    setenv(name, value.c_str(), 1);
  }
  ~ScopedEnv() {
    if (*name_ == 0) return;
    if (had_)
      setenv(name_, old_.c_str(), 1);
    else
      unsetenv(name_);
  }

 private:
  const char* name_;
  std::string old_;
  bool had_ = false;
};

std::vector<unsigned char> Random(size_t n, unsigned seed) {
  std::mt19937 g(seed);
  std::vector<unsigned char> v(n);
  for (auto& b : v) b = static_cast<unsigned char>(g());
  return v;
}

template <typename R>
class RuntimeConformance : public ::testing::Test {
 protected:
  void SetUp() override {
    ScopedEnv lib(R::kVar, R::kShim);
    auto r = LoadRuntime(R::kName);
    if (!R::kShimmed) {
      if (!r.ok()) GTEST_SKIP() << "no " << R::kName << " runtime here: " << r.status().ToString();
      auto n = (*r)->DeviceCount();
      if (!n.ok() || *n == 0) GTEST_SKIP() << "no " << R::kName << " device here";
    }
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    rt_ = *r;
    ASSERT_TRUE(rt_->SetDevice(0).ok());
  }
  // A second device where the machine has one (the shims: 2 of the default count), else device 0 again.
  int Second() {
    auto n = rt_->DeviceCount();
    return n.ok() && *n > 1 ? 1 : 0;
  }
  void* Dev(size_t n) {
    auto r = rt_->Malloc(n);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return r.ok() ? *r : nullptr;
  }
  unsigned char* Pinned(size_t n) {
    auto r = rt_->MallocHost(n);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return r.ok() ? static_cast<unsigned char*>(*r) : nullptr;
  }
  DeviceRuntime::Stream NewStream() {
    auto r = rt_->StreamCreate();
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return r.ok() ? *r : nullptr;
  }
  // Device bytes, read back with a synchronous copy.
  std::vector<unsigned char> Read(const void* dev, size_t n) {
    std::vector<unsigned char> out(n);
    Status s = rt_->Memcpy(out.data(), n, dev, n, CopyKind::kDeviceToHost);
    EXPECT_TRUE(s.ok()) << s.ToString();
    return out;
  }
  std::shared_ptr<DeviceRuntime> rt_;
};

using Rows = ::testing::Types<AclRow, MusaRow, CorexRow, CudaRow, EmuRow>;
struct RowName {
  template <typename T>
  static std::string GetName(int) {
    return T::kName;
  }
};
TYPED_TEST_SUITE(RuntimeConformance, Rows, RowName);

TYPED_TEST(RuntimeConformance, RowAndPath) {
  EXPECT_STREQ(this->rt_->row().name, TypeParam::kName);
  EXPECT_EQ(this->rt_->path(), TypeParam::kShim);  // the file the row's variable named
  EXPECT_STREQ(this->rt_->row().env_var, TypeParam::kVar);
  EXPECT_TRUE(this->rt_->row().pinned_host_alloc);
}

TYPED_TEST(RuntimeConformance, DeviceCountAndInvalidIndex) {
  ScopedEnv count(TypeParam::kCountVar, "3");  // a test device's (none on a real runtime)
  auto n = this->rt_->DeviceCount();
  ASSERT_TRUE(n.ok()) << n.status().ToString();
  if (TypeParam::kShimmed) {
    EXPECT_EQ(*n, 3);
  }
  EXPECT_TRUE(this->rt_->SetDevice(*n - 1).ok());
  for (int bad : {*n, *n + 14, -1}) {
    Status s = this->rt_->SetDevice(bad);
    ASSERT_FALSE(s.ok()) << bad;
    EXPECT_EQ(s.code(), Code::kInvalidArgument);
    EXPECT_NE(s.message().find("device index " + std::to_string(bad)), std::string::npos) << s.ToString();
    EXPECT_NE(s.message().find(TypeParam::kName), std::string::npos) << s.ToString();
  }
  EXPECT_TRUE(this->rt_->SetDevice(0).ok());
}

TYPED_TEST(RuntimeConformance, MemoryAndPointerInfo) {
  auto& rt = *this->rt_;
  void* d0 = this->Dev(4096);
  const int second = this->Second();
  ASSERT_TRUE(rt.SetDevice(second).ok());
  void* d1 = this->Dev(100);
  unsigned char* h = this->Pinned(333);
  ASSERT_TRUE(d0 && d1 && h);
  auto i0 = rt.GetPointerInfo(d0), i1 = rt.GetPointerInfo(d1), ih = rt.GetPointerInfo(h);
  ASSERT_TRUE(i0.ok() && i1.ok() && ih.ok());
  EXPECT_EQ(i0->type, MemoryType::kDevice);
  EXPECT_EQ(i0->device, 0);
  EXPECT_EQ(i1->type, MemoryType::kDevice);
  EXPECT_EQ(i1->device, second);
  if (i0->extent > 0) {  // where the runtime tells the allocation (cuda): its base and size
    EXPECT_EQ(i0->base, reinterpret_cast<uintptr_t>(d0));
    EXPECT_GE(i0->extent, 4096u);
  }
  auto i_inner = rt.GetPointerInfo(static_cast<char*>(d0) + 1000);  // inside an allocation
  ASSERT_TRUE(i_inner.ok());
  EXPECT_EQ(i_inner->type, MemoryType::kDevice);
  EXPECT_EQ(ih->type, MemoryType::kPinnedHost);
  std::vector<char> pageable(64);
  auto ip = rt.GetPointerInfo(pageable.data());
  ASSERT_TRUE(ip.ok()) << ip.status().ToString();
  EXPECT_EQ(ip->type, MemoryType::kUnregistered);
  EXPECT_TRUE(rt.Free(d1).ok());
  EXPECT_TRUE(rt.FreeHost(h).ok());
  ASSERT_TRUE(rt.SetDevice(0).ok());
  EXPECT_TRUE(rt.Free(d0).ok());
  // A pointer that is not an allocation: the runtime's error, named with its call.
  Status s = rt.Free(pageable.data());
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), Code::kSystemError);
  EXPECT_NE(s.message().find(TypeParam::kFree), std::string::npos) << s.ToString();
  EXPECT_NE(s.message().find(std::string(TypeParam::kName) + " error"), std::string::npos) << s.ToString();
}

TYPED_TEST(RuntimeConformance, AsyncRoundTripNeedsTheSync) {
  auto& rt = *this->rt_;
  const size_t n = 1 << 20;
  ScopedEnv delay(TypeParam::kDelayVar, "50000");  // each queued task waits 50 ms: streams made now
  auto s = this->NewStream();
  void* d = this->Dev(n);
  unsigned char *in = this->Pinned(n), *out = this->Pinned(n);
  ASSERT_TRUE(s && d && in && out);
  const auto data = Random(n, 1);
  std::memcpy(in, data.data(), n);
  std::memset(out, 0, n);
  ASSERT_TRUE(rt.MemcpyAsync(d, n, in, n, CopyKind::kHostToDevice, s).ok());
  ASSERT_TRUE(rt.MemcpyAsync(out, n, d, n, CopyKind::kDeviceToHost, s).ok());
  // Not synchronised yet: the copies are still queued, so a test that forgot the sync would see this.
  if (TypeParam::kShimmed) {
    EXPECT_NE(std::memcmp(out, data.data(), n), 0) << "the stream finished before its delay: not asynchronous";
  }
  ASSERT_TRUE(rt.StreamSynchronize(s).ok());
  EXPECT_EQ(std::memcmp(out, data.data(), n), 0);
  // Device to device, then back.
  void* d2 = this->Dev(n);
  ASSERT_TRUE(rt.MemcpyAsync(d2, n, d, n, CopyKind::kDeviceToDevice, s).ok());
  ASSERT_TRUE(rt.StreamSynchronize(s).ok());
  EXPECT_EQ(this->Read(d2, n), data);
  // destMax: a copy larger than the destination's room is refused.
  EXPECT_FALSE(rt.Memcpy(out, n / 2, d, n, CopyKind::kDeviceToHost).ok());
  EXPECT_FALSE(rt.MemcpyAsync(out, n / 2, d, n, CopyKind::kDeviceToHost, s).ok());
  EXPECT_TRUE(rt.StreamDestroy(s).ok());
  EXPECT_TRUE(rt.Free(d).ok() && rt.Free(d2).ok() && rt.FreeHost(in).ok() && rt.FreeHost(out).ok());
}

TYPED_TEST(RuntimeConformance, EventsOrderTwoStreams) {
  auto& rt = *this->rt_;
  const size_t n = 64 << 10;
  DeviceRuntime::Stream slow = nullptr, fast = nullptr;
  {
    ScopedEnv delay(TypeParam::kDelayVar, "50000");
    slow = this->NewStream();
  }
  fast = this->NewStream();  // no delay
  void* d = this->Dev(n);
  unsigned char *in = this->Pinned(n), *out = this->Pinned(n);
  ASSERT_TRUE(slow && fast && d && in && out);
  auto ev = rt.EventCreate();
  ASSERT_TRUE(ev.ok()) << ev.status().ToString();
  const auto data = Random(n, 2);
  std::memcpy(in, data.data(), n);

  for (bool wait : {false, true}) {
    if (!TypeParam::kShimmed && !wait) continue;  // the control needs a stream that is slow on purpose
    SCOPED_TRACE(wait ? "fast waits for the event" : "no wait (the control)");
    ASSERT_TRUE(rt.Memset(d, n, 0, n).ok());
    std::memset(out, 0xEE, n);
    ASSERT_TRUE(rt.MemcpyAsync(d, n, in, n, CopyKind::kHostToDevice, slow).ok());
    ASSERT_TRUE(rt.EventRecord(*ev, slow).ok());
    auto q = rt.EventQuery(*ev);
    ASSERT_TRUE(q.ok()) << q.status().ToString();
    if (TypeParam::kShimmed) {
      EXPECT_FALSE(*q) << "the event completed before the slow stream ran";
    }
    if (wait) {
      ASSERT_TRUE(rt.StreamWaitEvent(fast, *ev).ok());
    }
    ASSERT_TRUE(rt.MemcpyAsync(out, n, d, n, CopyKind::kDeviceToHost, fast).ok());
    ASSERT_TRUE(rt.StreamSynchronize(fast).ok());  // the fast stream only
    if (wait) {
      EXPECT_EQ(std::memcmp(out, data.data(), n), 0);
      q = rt.EventQuery(*ev);
      ASSERT_TRUE(q.ok());
      EXPECT_TRUE(*q);
    } else {
      // Without the wait the fast stream read the zeros: the ordering above is the event's doing.
      EXPECT_EQ(out[0], 0);
      EXPECT_EQ(out[n - 1], 0);
    }
    ASSERT_TRUE(rt.EventSynchronize(*ev).ok());
    q = rt.EventQuery(*ev);
    ASSERT_TRUE(q.ok());
    EXPECT_TRUE(*q);
    ASSERT_TRUE(rt.StreamSynchronize(slow).ok());
  }
  EXPECT_TRUE(rt.EventDestroy(*ev).ok());
  EXPECT_TRUE(rt.StreamDestroy(slow).ok() && rt.StreamDestroy(fast).ok());
  EXPECT_TRUE(rt.Free(d).ok() && rt.FreeHost(in).ok() && rt.FreeHost(out).ok());
}

TYPED_TEST(RuntimeConformance, Memset) {
  auto& rt = *this->rt_;
  const size_t n = 4099;
  void* d = this->Dev(n);
  auto s = this->NewStream();
  ASSERT_TRUE(d && s);
  ASSERT_TRUE(rt.Memset(d, n, 0xAB, n).ok());
  EXPECT_EQ(this->Read(d, n), std::vector<unsigned char>(n, 0xAB));
  ASSERT_TRUE(rt.MemsetAsync(static_cast<char*>(d) + 100, n - 100, 0x11, 50, s).ok());
  ASSERT_TRUE(rt.StreamSynchronize(s).ok());
  auto got = this->Read(d, n);
  for (size_t i = 0; i < n; ++i) ASSERT_EQ(got[i], i >= 100 && i < 150 ? 0x11 : 0xAB) << i;
  EXPECT_FALSE(rt.Memset(d, 10, 0, 11).ok());  // more than the destination's room
  EXPECT_TRUE(rt.StreamDestroy(s).ok());
  EXPECT_TRUE(rt.Free(d).ok());
}

TYPED_TEST(RuntimeConformance, StagingRoundTripOddSizes) {
  auto& rt = *this->rt_;
  ScopedEnv delay(TypeParam::kDelayVar, "2000");  // so a helper that did not wait would be caught
  auto s = this->NewStream();
  ASSERT_TRUE(s);
  unsigned seed = 10;
  for (size_t n : {size_t{1}, size_t{4099}, size_t{3} << 20}) {
    SCOPED_TRACE(n);
    void* d = this->Dev(n);
    unsigned char *up = this->Pinned(n), *down = this->Pinned(n);
    ASSERT_TRUE(d && up && down);
    const auto data = Random(n, seed++);
    std::memcpy(down, data.data(), n);
    ASSERT_TRUE(StageDown(rt, s, d, down, n).ok());
    std::memset(down, 0, n);  // the copy has completed: overwriting the source changes nothing
    std::memset(up, 0x5A, n);
    ASSERT_TRUE(StageUp(rt, s, up, d, n).ok());
    EXPECT_EQ(std::memcmp(up, data.data(), n), 0);  // read at once: StageUp returned after the copy
    EXPECT_TRUE(rt.Free(d).ok() && rt.FreeHost(up).ok() && rt.FreeHost(down).ok());
  }
  EXPECT_TRUE(rt.StreamDestroy(s).ok());
}

TYPED_TEST(RuntimeConformance, MissingLibraryNamesFileAndVariable) {
  if (TypeParam::kBuiltIn) GTEST_SKIP() << TypeParam::kName << " is built in: no file to miss";
  ScopedEnv lib(TypeParam::kVar, "/nonexistent/dir/libnot-a-runtime.so");
  auto r = LoadRuntime(TypeParam::kName);
  ASSERT_FALSE(r.ok());
  const Status& s = r.status();
  EXPECT_EQ(s.code(), Code::kUnsupported);
  EXPECT_NE(s.message().find("/nonexistent/dir/libnot-a-runtime.so"), std::string::npos) << s.ToString();
  EXPECT_NE(s.message().find(TypeParam::kVar), std::string::npos) << s.ToString();
  EXPECT_NE(s.message().find(std::string("the ") + TypeParam::kName + " device runtime"), std::string::npos);
  EXPECT_NE(s.message().find("No such file"), std::string::npos) << s.ToString();  // dlerror()
}

TYPED_TEST(RuntimeConformance, MissingSymbolNamesSymbolAndFile) {
  if (TypeParam::kBuiltIn) GTEST_SKIP() << TypeParam::kName << " is built in: no symbols to miss";
  ScopedEnv lib(TypeParam::kVar, TESSERA_RUNTIME_STUB);
  auto r = LoadRuntime(TypeParam::kName);
  ASSERT_FALSE(r.ok());
  const Status& s = r.status();
  EXPECT_EQ(s.code(), Code::kUnsupported);
  EXPECT_NE(s.message().find(std::string("'") + TypeParam::kSecondSymbol + "'"), std::string::npos) << s.ToString();
  EXPECT_NE(s.message().find(TESSERA_RUNTIME_STUB), std::string::npos) << s.ToString();
  EXPECT_NE(s.message().find(TypeParam::kVar), std::string::npos) << s.ToString();
}

TYPED_TEST(RuntimeConformance, DeviceBridgeCallsWhereTheRowClaimsThem) {
  auto& rt = *this->rt_;
  const RuntimeRow& row = rt.row();
  auto refused = [&](const Status& s, const char* call) {
    EXPECT_EQ(s.code(), Code::kUnsupported) << s.ToString();
    EXPECT_NE(s.message().find(std::string("the ") + TypeParam::kName + " device runtime"), std::string::npos)
        << s.ToString();
    EXPECT_NE(s.message().find(call), std::string::npos) << s.ToString();
  };
  std::vector<char> plain(8192);
  if (!row.host_register) {
    refused(rt.HostAllocMapped(64).status(), "mapped host allocation");
    refused(rt.HostRegister(plain.data(), plain.size()), "host memory registration");
  }
  if (!row.stream_memops) {
    uint32_t word = 0;
    refused(rt.StreamWriteValue32(nullptr, &word, 1), "stream write-value");
    refused(rt.StreamWaitValue32(nullptr, &word, 1), "stream wait-value");
  }
  if (row.host_register && !HasDeviceBridge(row)) {
    // A row with registration but not the device bridge (acl: the copy bridge): 4 KiB-aligned ordinary memory is
    // registered and unregistered; no mapped allocation.
    void* ring = std::aligned_alloc(4096, 4 * 4096);
    ASSERT_NE(ring, nullptr);
    Status reg = rt.HostRegister(ring, 4 * 4096);
    EXPECT_TRUE(reg.ok()) << reg.ToString();
    if (reg.ok()) {
      EXPECT_TRUE(rt.HostUnregister(ring).ok());
    }
    std::free(ring);
    refused(rt.HostAllocMapped(64).status(), "mapped host allocation");
  }
  if (!HasDeviceBridge(row)) {
    EXPECT_EQ(rt.kernels(), nullptr);
    refused(rt.Fold(nullptr, nullptr, 0, DType::kFloat32, DType::kFloat32, RedOp::kSum, true, nullptr),
            "Tessera kernels");
    return;
  }
  // A row with the device bridge (cuda, on a GPU): every call it claims, on the device.
  ASSERT_NE(rt.kernels(), nullptr);
  ASSERT_TRUE(rt.PreloadKernels().ok());
  auto flag = rt.HostAllocMapped(64);
  ASSERT_TRUE(flag.ok()) << flag.status().ToString();
  auto* host_word = static_cast<volatile uint32_t*>(flag->host);
  auto* dev_word = static_cast<uint32_t*>(flag->dev);
  *host_word = 0;
  auto s = this->NewStream(), waiter = this->NewStream();
  ASSERT_TRUE(s && waiter);
  // Write: the stream's write reaches host memory (the driver's operation, or the kernel where it is refused).
  Status w = rt.StreamWriteValue32(s, dev_word, 7);
  if (!w.ok()) w = rt.WriteFlag(dev_word, 7, s);
  ASSERT_TRUE(w.ok()) << w.ToString();
  ASSERT_TRUE(rt.StreamSynchronize(s).ok());
  EXPECT_EQ(*host_word, 7u);
  // Wait: a stream held by the word until the host raises it.
  const size_t n = 1 << 16;
  void* d = this->Dev(n);
  unsigned char* out = this->Pinned(n);
  ASSERT_TRUE(d && out);
  ASSERT_TRUE(rt.Memset(d, n, 0x3C, n).ok());
  Status h = rt.StreamWaitValue32(waiter, dev_word, 9);
  if (!h.ok()) h = rt.SpinWait(dev_word, 9, waiter);
  ASSERT_TRUE(h.ok()) << h.ToString();
  std::memset(out, 0, n);
  ASSERT_TRUE(rt.MemcpyAsync(out, n, d, n, CopyKind::kDeviceToHost, waiter).ok());
  auto ev = rt.EventCreate();
  ASSERT_TRUE(ev.ok());
  ASSERT_TRUE(rt.EventRecord(*ev, waiter).ok());
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  auto q = rt.EventQuery(*ev);
  ASSERT_TRUE(q.ok());
  EXPECT_FALSE(*q) << "the stream ran past a wait whose word was not raised";
  EXPECT_EQ(out[0], 0);
  __atomic_store_n(const_cast<uint32_t*>(host_word), 9u, __ATOMIC_RELEASE);
  ASSERT_TRUE(rt.EventSynchronize(*ev).ok());
  EXPECT_EQ(out[0], 0x3C);
  EXPECT_EQ(out[n - 1], 0x3C);
  // Registration: the copy engines read registered pageable memory.
  std::vector<unsigned char> ring = Random(n, 7);
  ASSERT_TRUE(rt.HostRegister(ring.data(), n).ok());
  ASSERT_TRUE(rt.MemcpyAsync(d, n, ring.data(), n, CopyKind::kHostToDevice, s).ok());
  ASSERT_TRUE(rt.StreamSynchronize(s).ok());
  EXPECT_EQ(this->Read(d, n), ring);
  EXPECT_TRUE(rt.HostUnregister(ring.data()).ok());
  // The kernels: avg of two f32 vectors folded in f32, finalized with one division.
  const size_t m = 1000;
  std::vector<float> a(m), b(m), got(m);
  for (size_t i = 0; i < m; ++i) a[i] = 0.1f * static_cast<float>(i), b[i] = 3.0f - 0.7f * static_cast<float>(i);
  void *da = this->Dev(m * 4), *db = this->Dev(m * 4), *acc = this->Dev(m * 4);
  ASSERT_TRUE(da && db && acc);
  ASSERT_TRUE(rt.Memcpy(da, m * 4, a.data(), m * 4, CopyKind::kHostToDevice).ok());
  ASSERT_TRUE(rt.Memcpy(db, m * 4, b.data(), m * 4, CopyKind::kHostToDevice).ok());
  ASSERT_TRUE(rt.Fold(acc, da, m, DType::kFloat32, DType::kFloat32, RedOp::kAvg, true, s).ok());
  ASSERT_TRUE(rt.Fold(acc, db, m, DType::kFloat32, DType::kFloat32, RedOp::kAvg, false, s).ok());
  ASSERT_TRUE(rt.Finalize(da, acc, m, DType::kFloat32, RedOp::kAvg, 2, s).ok());
  ASSERT_TRUE(rt.StreamSynchronize(s).ok());
  ASSERT_TRUE(rt.Memcpy(got.data(), m * 4, da, m * 4, CopyKind::kDeviceToHost).ok());
  for (size_t i = 0; i < m; ++i) ASSERT_EQ(got[i], (a[i] + b[i]) / 2.0f) << i;
  EXPECT_TRUE(rt.EventDestroy(*ev).ok());
  EXPECT_TRUE(rt.StreamDestroy(s).ok() && rt.StreamDestroy(waiter).ok());
  EXPECT_TRUE(rt.Free(d).ok() && rt.Free(da).ok() && rt.Free(db).ok() && rt.Free(acc).ok());
  EXPECT_TRUE(rt.FreeHost(out).ok() && rt.FreeHost(flag->host).ok());
}

TEST(RuntimeTable, Rows) {
  const RuntimeRow* acl = FindRuntimeRow("acl");
  const RuntimeRow* musa = FindRuntimeRow("musa");
  ASSERT_TRUE(acl && musa);
  EXPECT_STREQ(acl->soname, "libascendcl.so");
  EXPECT_STREQ(musa->soname, "libmusart.so");
  EXPECT_STREQ(acl->env_var, "TESSERA_ACL_LIBRARY");
  EXPECT_STREQ(musa->env_var, "TESSERA_MUSA_LIBRARY");
  // ACL registers existing host memory (aclrtHostRegisterV2: the copy bridge) but has no stream memory operations and
  // no Tessera kernels: no device bridge; its asynchronous copies need 64-byte-aligned addresses.
  EXPECT_TRUE(acl->host_register);
  EXPECT_FALSE(HasDeviceBridge(*acl));
  EXPECT_EQ(acl->async_copy_align, 64u);
  EXPECT_FALSE(acl->stream_memops);
  EXPECT_TRUE(acl->pinned_host_alloc);
  EXPECT_TRUE(musa->pinned_host_alloc);
  // CUDA's row: CUDA 13's runtime, with the device bridge's calls; the build's kernels make it a bridge row.
  const RuntimeRow* cuda = FindRuntimeRow("cuda");
  ASSERT_NE(cuda, nullptr);
  EXPECT_STREQ(cuda->soname, "libcudart.so.13");
  EXPECT_STREQ(cuda->env_var, "TESSERA_CUDA_LIBRARY");
  EXPECT_STREQ(cuda->prefix, "cuda");
  EXPECT_STREQ(musa->prefix, "musa");
  EXPECT_EQ(cuda->shape, musa->shape);  // one binding, two prefixes
  EXPECT_TRUE(cuda->host_register && cuda->stream_memops && cuda->pinned_host_alloc);
#ifdef TESSERA_HAVE_CUDA
  EXPECT_TRUE(HasDeviceBridge(*cuda));
  ASSERT_NE(FindKernels("cuda"), nullptr);
  EXPECT_STREQ(FindKernels("cuda")->runtime, "cuda");
#else
  EXPECT_FALSE(HasDeviceBridge(*cuda));
#endif
  EXPECT_FALSE(HasDeviceBridge(*acl));
  EXPECT_FALSE(HasDeviceBridge(*musa));
  EXPECT_EQ(FindKernels("acl"), nullptr);
  // The emulated device: built in, with the bridge's calls and the host folds as its kernels (every build).
  const RuntimeRow* emu = FindRuntimeRow("emu");
  ASSERT_NE(emu, nullptr);
  EXPECT_TRUE(HasDeviceBridge(*emu));
  // CoreX: CUDA's binding under CUDA's prefix, its own file and variable; staged (no kernels built for it).
  const RuntimeRow* corex = FindRuntimeRow("corex");
  ASSERT_NE(corex, nullptr);
  EXPECT_STREQ(corex->soname, "/usr/local/corex/lib/libcudart.so");
  EXPECT_STREQ(corex->env_var, "TESSERA_COREX_LIBRARY");
  EXPECT_STREQ(corex->prefix, "cuda");
  EXPECT_EQ(corex->shape, cuda->shape);
  EXPECT_FALSE(HasDeviceBridge(*corex));
  EXPECT_TRUE(corex->pinned_host_alloc);
  EXPECT_EQ(RuntimeRowNames(), "cuda, acl, musa, corex, emu");
}

TEST(RuntimeTable, IsDeviceMemoryAsksTheStartedRuntimes) {
  // Host memory and null are never device memory; memory of a started runtime is (the emulated device's here).
  std::vector<char> host(64);
  EXPECT_FALSE(IsDeviceMemory(nullptr));
  EXPECT_FALSE(IsDeviceMemory(host.data()));
  auto emu = LoadRuntime("emu");
  ASSERT_TRUE(emu.ok()) << emu.status().ToString();
  ASSERT_TRUE((*emu)->SetDevice(0).ok());
  auto d = (*emu)->Malloc(100);
  ASSERT_TRUE(d.ok());
  EXPECT_TRUE(IsDeviceMemory(*d));
  EXPECT_TRUE(IsDeviceMemory(static_cast<char*>(*d) + 99));
  EXPECT_FALSE(IsDeviceMemory(host.data()));
  EXPECT_TRUE((*emu)->Free(*d).ok());
  EXPECT_FALSE(IsDeviceMemory(*d));
}

TEST(RuntimeTable, IsDeviceMemoryTriesARuntimeThatWillNotLoadOncePerLoadedLibrary) {
  // The acl row's started file (libascendcl.so: the shim) is mapped, but its runtime will not load (the variable
  // names a missing file), as libcuda.so.1 mapped by a torch built for another CUDA. Host collectives ask
  // IsDeviceMemory twice each: the failed load is tried once, and again only after another library is loaded.
  if (internal::RuntimeLoadAttempts("acl") > 0)  // ctest runs each test in a process of its own
    GTEST_SKIP() << "an earlier test of this process loaded the acl runtime";
  void* started = dlopen(TESSERA_SHIM_ACL, RTLD_NOW | RTLD_LOCAL);
  ASSERT_NE(started, nullptr) << dlerror();
  ScopedEnv lib("TESSERA_ACL_LIBRARY", "/nonexistent/dir/libascendcl.so");
  std::vector<char> host(64);
  const uint64_t before = 0;
  for (int i = 0; i < 100; ++i) EXPECT_FALSE(IsDeviceMemory(host.data()));
  EXPECT_EQ(internal::RuntimeLoadAttempts("acl"), before + 1);
  // Something new is mapped: worth one more try. A copy of the stub under a new name, so that it is new even where
  // an earlier test of this process loaded the stub itself.
  char dir[] = "/tmp/tessera-loadonce-XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  const std::string copy = std::string(dir) + "/libnew.so";
  {
    std::ifstream in(TESSERA_RUNTIME_STUB, std::ios::binary);
    std::ofstream out(copy, std::ios::binary);
    out << in.rdbuf();
  }
  void* other = dlopen(copy.c_str(), RTLD_NOW | RTLD_LOCAL);
  ASSERT_NE(other, nullptr) << dlerror();
  std::remove(copy.c_str());
  ::rmdir(dir);
  for (int i = 0; i < 100; ++i) EXPECT_FALSE(IsDeviceMemory(host.data()));
  EXPECT_EQ(internal::RuntimeLoadAttempts("acl"), before + 2);
  // Fixed and loaded by its user, the runtime is asked from then on, without another load.
  ScopedEnv fixed("TESSERA_ACL_LIBRARY", TESSERA_SHIM_ACL);
  auto acl = LoadRuntime("acl");
  ASSERT_TRUE(acl.ok()) << acl.status().ToString();
  EXPECT_EQ(internal::RuntimeLoadAttempts("acl"), before + 3);
  for (int i = 0; i < 10; ++i) EXPECT_FALSE(IsDeviceMemory(host.data()));
  EXPECT_EQ(internal::RuntimeLoadAttempts("acl"), before + 3);
}

TEST(RuntimeTable, UnknownRowListsTheKnownOnes) {
  auto r = LoadRuntime("rocm");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kInvalidArgument);
  EXPECT_NE(r.status().message().find("'rocm'"), std::string::npos) << r.status().ToString();
  EXPECT_NE(r.status().message().find("cuda, acl, musa, corex, emu"), std::string::npos) << r.status().ToString();
}

TEST(RuntimeTable, OpenDeviceChecksTheIndexAndMakesTheDeviceCurrent) {
  // The one place a rank's device is opened (the staged rank and the device bridge both call it).
  auto npu = [](const std::string& text) {
    auto name = ParseDeviceName(text, "TESSERA_DEVICE");
    EXPECT_TRUE(name.ok()) << name.status().ToString();
    return *name;
  };
  {
    ScopedEnv lib("TESSERA_ACL_LIBRARY", "/nonexistent/dir/libascendcl.so");
    auto r = OpenDevice(npu("npu:0"));
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), Code::kUnsupported);
    for (const char* want : {"TESSERA_DEVICE='npu:0'", "no usable Ascend NPU device", "/nonexistent/dir/libascendcl.so",
                             "TESSERA_ACL_LIBRARY"})
      EXPECT_NE(r.status().message().find(want), std::string::npos) << want << " in " << r.status().ToString();
  }
  ScopedEnv lib("TESSERA_ACL_LIBRARY", TESSERA_SHIM_ACL);
  {
    ScopedEnv none("ASCEND_RT_VISIBLE_DEVICES", "");  // as CUDA_VISIBLE_DEVICES="": no device at all
    auto r = OpenDevice(npu("npu:0"));
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), Code::kUnsupported);
    EXPECT_NE(r.status().message().find("sees 0 devices"), std::string::npos) << r.status().ToString();
  }
  ScopedEnv visible("ASCEND_RT_VISIBLE_DEVICES", "0,1");
  auto past = OpenDevice(npu("npu:2"));
  ASSERT_FALSE(past.ok());
  EXPECT_EQ(past.status().code(), Code::kInvalidArgument);
  for (const char* want : {"TESSERA_DEVICE='npu:2'", TESSERA_SHIM_ACL, "sees 2 devices",
                           "ASCEND_RT_VISIBLE_DEVICES='0,1'", "use an index below 2"})
    EXPECT_NE(past.status().message().find(want), std::string::npos) << want << " in " << past.status().ToString();
  // On a new thread (ACL binds a device per thread): opened, the device is current there and memory can be had.
  Status st;
  std::thread t([&] {
    auto rt = OpenDevice(npu("npu:1"));
    if (!rt.ok()) return (void)(st = rt.status());
    auto m = (*rt)->Malloc(64);
    if (!m.ok()) return (void)(st = m.status());
    auto info = (*rt)->GetPointerInfo(*m);
    st = !info.ok()          ? info.status()
         : info->device != 1 ? InvalidArgument(fmt::format("memory of device {} where npu:1 was opened", info->device))
                             : (*rt)->Free(*m);
  });
  t.join();
  EXPECT_TRUE(st.ok()) << st.ToString();
}

TEST(RuntimeTable, AclWithoutSetDeviceIsAnErrorWithTheRuntimesMessage) {
  // ACL binds a device per thread: a resource call on a thread that never called SetDevice fails, and the error
  // carries aclGetRecentErrMsg's text (the shim's "no device set").
  ScopedEnv lib("TESSERA_ACL_LIBRARY", TESSERA_SHIM_ACL);
  auto r = LoadRuntime("acl");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  Status st;
  std::thread t([&] {  // a new thread has set no device
    auto m = (*r)->Malloc(64);
    st = m.ok() ? Status::Ok() : m.status();
  });
  t.join();
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("aclrtMalloc"), std::string::npos) << st.ToString();
  EXPECT_NE(st.message().find("aclrtSetDevice"), std::string::npos) << st.ToString();
}

}  // namespace
}  // namespace tessera::comm
