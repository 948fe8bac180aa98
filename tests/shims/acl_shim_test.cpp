// tests/shims/acl_shim_test: the ACL host shim (libascendcl.so) through dlopen and the signatures of acl_abi.h:
// allocation, copies of every kind, the documented copy rules refused with their codes, stream order, events,
// the stale data a missing synchronisation shows, pointer attributes and error messages.
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#include "acl_abi.h"
#include "shim_test_util.hpp"

namespace {

using shimtest::ScopedEnv;

struct Acl {
  shimtest::Lib lib{TESSERA_SHIM_ACL};
  decltype(&::aclInit) aclInit;
  decltype(&::aclFinalize) aclFinalize;
  decltype(&::aclGetRecentErrMsg) aclGetRecentErrMsg;
  decltype(&::aclrtGetSocName) aclrtGetSocName;
  decltype(&::aclrtSetDevice) aclrtSetDevice;
  decltype(&::aclrtResetDevice) aclrtResetDevice;
  decltype(&::aclrtGetDevice) aclrtGetDevice;
  decltype(&::aclrtSynchronizeDevice) aclrtSynchronizeDevice;
  decltype(&::aclrtGetDeviceCount) aclrtGetDeviceCount;
  decltype(&::aclrtCreateEvent) aclrtCreateEvent;
  decltype(&::aclrtDestroyEvent) aclrtDestroyEvent;
  decltype(&::aclrtRecordEvent) aclrtRecordEvent;
  decltype(&::aclrtQueryEvent) aclrtQueryEvent;
  decltype(&::aclrtQueryEventStatus) aclrtQueryEventStatus;
  decltype(&::aclrtSynchronizeEvent) aclrtSynchronizeEvent;
  decltype(&::aclrtMalloc) aclrtMalloc;
  decltype(&::aclrtPointerGetAttributes) aclrtPointerGetAttributes;
  decltype(&::aclrtFree) aclrtFree;
  decltype(&::aclrtMallocHost) aclrtMallocHost;
  decltype(&::aclrtFreeHost) aclrtFreeHost;
  decltype(&::aclrtMemcpy) aclrtMemcpy;
  decltype(&::aclrtMemset) aclrtMemset;
  decltype(&::aclrtMemcpyAsync) aclrtMemcpyAsync;
  decltype(&::aclrtMemsetAsync) aclrtMemsetAsync;
  decltype(&::aclrtCreateStream) aclrtCreateStream;
  decltype(&::aclrtDestroyStream) aclrtDestroyStream;
  decltype(&::aclrtSynchronizeStream) aclrtSynchronizeStream;
  decltype(&::aclrtStreamWaitEvent) aclrtStreamWaitEvent;
  decltype(&::aclrtHostRegisterV2) aclrtHostRegisterV2;
  decltype(&::aclrtHostUnregister) aclrtHostUnregister;
  Acl() {
    SHIM_SYM(lib, aclInit), SHIM_SYM(lib, aclFinalize), SHIM_SYM(lib, aclGetRecentErrMsg);
    SHIM_SYM(lib, aclrtGetSocName), SHIM_SYM(lib, aclrtSetDevice), SHIM_SYM(lib, aclrtResetDevice);
    SHIM_SYM(lib, aclrtGetDevice), SHIM_SYM(lib, aclrtSynchronizeDevice), SHIM_SYM(lib, aclrtGetDeviceCount);
    SHIM_SYM(lib, aclrtCreateEvent), SHIM_SYM(lib, aclrtDestroyEvent), SHIM_SYM(lib, aclrtRecordEvent);
    SHIM_SYM(lib, aclrtQueryEvent), SHIM_SYM(lib, aclrtQueryEventStatus), SHIM_SYM(lib, aclrtSynchronizeEvent);
    SHIM_SYM(lib, aclrtMalloc), SHIM_SYM(lib, aclrtPointerGetAttributes), SHIM_SYM(lib, aclrtFree);
    SHIM_SYM(lib, aclrtMallocHost), SHIM_SYM(lib, aclrtFreeHost), SHIM_SYM(lib, aclrtMemcpy);
    SHIM_SYM(lib, aclrtMemset), SHIM_SYM(lib, aclrtMemcpyAsync), SHIM_SYM(lib, aclrtMemsetAsync);
    SHIM_SYM(lib, aclrtCreateStream), SHIM_SYM(lib, aclrtDestroyStream), SHIM_SYM(lib, aclrtSynchronizeStream);
    SHIM_SYM(lib, aclrtStreamWaitEvent), SHIM_SYM(lib, aclrtHostRegisterV2), SHIM_SYM(lib, aclrtHostUnregister);
  }
};
Acl& A() {
  static Acl a;
  return a;
}

class AclShim : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(A().lib.ok()) << A().lib.error();
    ASSERT_EQ(A().lib.missing(), "");
    ASSERT_EQ(A().aclInit(nullptr), ACL_SUCCESS);
    ASSERT_EQ(A().aclrtSetDevice(0), ACL_SUCCESS);
  }
  void* Dev(size_t n) {
    void* p = nullptr;
    EXPECT_EQ(A().aclrtMalloc(&p, n, ACL_MEM_MALLOC_HUGE_FIRST), ACL_SUCCESS);
    return p;
  }
  void* Pinned(size_t n) {
    void* p = nullptr;
    EXPECT_EQ(A().aclrtMallocHost(&p, n), ACL_SUCCESS);
    return p;
  }
  aclrtStream Stream() {
    aclrtStream s = nullptr;
    EXPECT_EQ(A().aclrtCreateStream(&s), ACL_SUCCESS);
    return s;
  }
  std::string LastMsg() {
    const char* m = A().aclGetRecentErrMsg();
    return m ? m : "";
  }
};

TEST_F(AclShim, ExportsTheDeclaredSymbolsAndTheHookForHccl) {
  EXPECT_NE(dlsym(A().lib.handle(), "tesseraAclShimHooks"), nullptr);
  // The shared engine is hidden: nothing but the API (and the hook) is exported.
  EXPECT_EQ(dlsym(A().lib.handle(), "_ZN5tshim6EnvU64EPKcm"), nullptr);
}

TEST_F(AclShim, CallsBeforeAclInitFailWithUninitialize) {
  auto& a = A();
  ASSERT_EQ(a.aclFinalize(), ACL_SUCCESS);
  EXPECT_EQ(a.aclrtSetDevice(0), ACL_ERROR_UNINITIALIZE);
  EXPECT_NE(LastMsg().find("aclInit"), std::string::npos);
  void* p = nullptr;
  EXPECT_EQ(a.aclrtMalloc(&p, 64, ACL_MEM_MALLOC_NORMAL_ONLY), ACL_ERROR_UNINITIALIZE);
  EXPECT_EQ(a.aclFinalize(), ACL_ERROR_UNINITIALIZE);
  EXPECT_EQ(a.aclInit(nullptr), ACL_SUCCESS);
  EXPECT_EQ(a.aclInit(nullptr), ACL_SUCCESS);  // reference counted (acl_rt.h)
  EXPECT_EQ(a.aclrtSetDevice(0), ACL_SUCCESS);
}

TEST_F(AclShim, DevicesAreCountedSetPerThreadAndRequiredForResources) {
  auto& a = A();
  uint32_t n = 0;
  ASSERT_EQ(a.aclrtGetDeviceCount(&n), ACL_SUCCESS);
  EXPECT_EQ(n, 8u);
  EXPECT_EQ(a.aclrtSetDevice(8), ACL_ERROR_RT_INVALID_DEVICEID);
  EXPECT_EQ(a.aclrtSetDevice(-1), ACL_ERROR_RT_INVALID_DEVICEID);
  ASSERT_EQ(a.aclrtSetDevice(3), ACL_SUCCESS);
  int32_t d = -1;
  EXPECT_EQ(a.aclrtGetDevice(&d), ACL_SUCCESS);
  EXPECT_EQ(d, 3);
  EXPECT_STREQ(a.aclrtGetSocName(), "Ascend910B1");
  aclError get = 0, mal = 0, str = 0;
  std::thread([&] {  // a new thread has no device until it sets one
    int32_t x;
    void* p;
    aclrtStream s;
    get = a.aclrtGetDevice(&x);
    mal = a.aclrtMalloc(&p, 64, ACL_MEM_MALLOC_HUGE_FIRST);
    str = a.aclrtCreateStream(&s);
  })
      .join();
  EXPECT_EQ(get, ACL_ERROR_RT_CONTEXT_NULL);
  EXPECT_EQ(mal, ACL_ERROR_RT_CONTEXT_NULL);
  EXPECT_EQ(str, ACL_ERROR_RT_CONTEXT_NULL);
  EXPECT_EQ(a.aclrtResetDevice(3), ACL_SUCCESS);
  EXPECT_EQ(a.aclrtGetDevice(&d), ACL_ERROR_RT_CONTEXT_NULL);
}

TEST_F(AclShim, AllocationsAreTrackedAndFreedOnlyByTheirOwnCall) {
  auto& a = A();
  void* p = nullptr;
  EXPECT_EQ(a.aclrtMalloc(&p, 0, ACL_MEM_MALLOC_HUGE_FIRST), ACL_ERROR_INVALID_PARAM);
  EXPECT_EQ(a.aclrtMalloc(&p, 64, static_cast<aclrtMemMallocPolicy>(9)), ACL_ERROR_INVALID_PARAM);
  EXPECT_EQ(a.aclrtMallocHost(&p, 0), ACL_ERROR_INVALID_PARAM);
  char* d = static_cast<char*>(Dev(1000));
  char* h = static_cast<char*>(Pinned(1000));
  ASSERT_TRUE(d && h);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(h) % 64, 0u);
  EXPECT_EQ(a.aclrtFree(d + 1), ACL_ERROR_RT_MEMORY_FREE);
  EXPECT_EQ(a.aclrtFreeHost(d), ACL_ERROR_RT_MEMORY_FREE);
  EXPECT_EQ(a.aclrtFree(h), ACL_ERROR_RT_MEMORY_FREE);
  EXPECT_EQ(a.aclrtFree(d), ACL_SUCCESS);
  EXPECT_EQ(a.aclrtFree(d), ACL_ERROR_RT_MEMORY_FREE);
  EXPECT_EQ(a.aclrtFreeHost(h), ACL_SUCCESS);
}

TEST_F(AclShim, DeviceMemoryCannotBeTouchedFromTheHost) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(
      {
        A().aclInit(nullptr);
        A().aclrtSetDevice(0);
        void* d = nullptr;
        A().aclrtMalloc(&d, 64, ACL_MEM_MALLOC_HUGE_FIRST);
        *static_cast<volatile char*>(d) = 1;
      },
      "");
}

TEST_F(AclShim, SynchronousCopiesOfEveryKind) {
  auto& a = A();
  const size_t n = 4096;
  std::vector<char> host(n), back(n, 0);
  for (size_t i = 0; i < n; ++i) host[i] = static_cast<char>(i * 7 + 1);
  void *d0 = Dev(n), *d0b = Dev(n), *pin = Pinned(n);
  ASSERT_EQ(a.aclrtSetDevice(1), ACL_SUCCESS);
  void* d1 = Dev(n);
  ASSERT_EQ(a.aclrtSetDevice(0), ACL_SUCCESS);
  EXPECT_EQ(a.aclrtMemcpy(d0, n, host.data(), n, ACL_MEMCPY_HOST_TO_DEVICE), ACL_SUCCESS);
  EXPECT_EQ(a.aclrtMemcpy(d0b, n, d0, n, ACL_MEMCPY_DEVICE_TO_DEVICE), ACL_SUCCESS);
  EXPECT_EQ(a.aclrtMemcpy(d1, n, d0b, n, ACL_MEMCPY_INTER_DEVICE_TO_DEVICE), ACL_SUCCESS);
  EXPECT_EQ(a.aclrtMemcpy(d0, n, d0b, n, ACL_MEMCPY_INNER_DEVICE_TO_DEVICE), ACL_SUCCESS);
  EXPECT_EQ(a.aclrtMemcpy(pin, n, d1, n, ACL_MEMCPY_DEVICE_TO_HOST), ACL_SUCCESS);
  EXPECT_EQ(a.aclrtMemcpy(back.data(), n, pin, n, ACL_MEMCPY_HOST_TO_HOST), ACL_SUCCESS);
  EXPECT_EQ(back, host);
  std::vector<char> other(n, 9);
  EXPECT_EQ(a.aclrtMemcpy(d0, n, other.data(), n, ACL_MEMCPY_HOST_TO_BUF_TO_DEVICE), ACL_SUCCESS);
  EXPECT_EQ(a.aclrtMemcpy(back.data(), n, d0, n, ACL_MEMCPY_DEFAULT), ACL_SUCCESS);
  EXPECT_EQ(back, other);
  EXPECT_EQ(a.aclrtMemcpy(back.data(), 16, static_cast<char*>(d1) + 100, 16, ACL_MEMCPY_DEVICE_TO_HOST), ACL_SUCCESS);
  EXPECT_EQ(std::memcmp(back.data(), host.data() + 100, 16), 0);  // interior pointers are resolved too
  for (void* p : {d0, d0b, d1}) EXPECT_EQ(a.aclrtFree(p), ACL_SUCCESS);
  EXPECT_EQ(a.aclrtFreeHost(pin), ACL_SUCCESS);
}

TEST_F(AclShim, CopyRulesAreRefusedWithTheirCodes) {
  auto& a = A();
  const size_t n = 256;
  char *d = static_cast<char*>(Dev(n)), *pin = static_cast<char*>(Pinned(n));
  std::vector<char> host(n);
  aclrtStream s = Stream();
  EXPECT_EQ(a.aclrtMemcpy(d, 8, host.data(), 16, ACL_MEMCPY_HOST_TO_DEVICE), ACL_ERROR_INVALID_PARAM);
  EXPECT_NE(LastMsg().find("destMax"), std::string::npos);
  EXPECT_EQ(a.aclrtMemcpyAsync(d, 8, pin, 16, ACL_MEMCPY_HOST_TO_DEVICE, s), ACL_ERROR_INVALID_PARAM);
  EXPECT_EQ(a.aclrtMemcpy(host.data(), n, pin, n, ACL_MEMCPY_HOST_TO_DEVICE), ACL_ERROR_RT_INVALID_MEMORY_TYPE);
  EXPECT_EQ(a.aclrtMemcpyAsync(pin, n, d, n, ACL_MEMCPY_HOST_TO_DEVICE, s), ACL_ERROR_RT_INVALID_MEMORY_TYPE);
  EXPECT_EQ(a.aclrtMemcpy(d, n, pin, n, static_cast<aclrtMemcpyKind>(9)), ACL_ERROR_INVALID_PARAM);
  EXPECT_EQ(a.aclrtMemcpy(d, 2 * n, pin, 2 * n, ACL_MEMCPY_HOST_TO_DEVICE), ACL_ERROR_INVALID_PARAM);  // overrun
  EXPECT_EQ(a.aclrtMemcpy(d, n, d, n, ACL_MEMCPY_INTER_DEVICE_TO_DEVICE), ACL_ERROR_RT_INVALID_MEMORY_TYPE);
  {
    ScopedEnv lenient("TESSERA_SHIM_ACL_STRICT_KIND", "0");  // CANN: aclrtMemcpy's kind is "reserved"
    EXPECT_EQ(a.aclrtMemcpy(host.data(), n, pin, n, ACL_MEMCPY_HOST_TO_DEVICE), ACL_SUCCESS);
    EXPECT_EQ(a.aclrtMemcpyAsync(pin, n, d, n, ACL_MEMCPY_HOST_TO_DEVICE, s), ACL_ERROR_RT_INVALID_MEMORY_TYPE);
  }
  // aclrtMemcpyAsync (CANN 8.0.0): 64-byte-aligned src and dst; no host-to-host copies.
  EXPECT_EQ(a.aclrtMemcpyAsync(d + 1, n - 1, pin, 8, ACL_MEMCPY_HOST_TO_DEVICE, s), ACL_ERROR_RT_ADDR_UNALIGNED);
  EXPECT_EQ(a.aclrtMemcpyAsync(d, n, pin + 32, 8, ACL_MEMCPY_HOST_TO_DEVICE, s), ACL_ERROR_RT_ADDR_UNALIGNED);
  EXPECT_EQ(a.aclrtMemcpyAsync(d + 64, n - 64, pin + 64, 8, ACL_MEMCPY_HOST_TO_DEVICE, s), ACL_SUCCESS);
  EXPECT_EQ(a.aclrtMemcpyAsync(pin, n, pin + 128, 8, ACL_MEMCPY_HOST_TO_HOST, s), ACL_ERROR_RT_FEATURE_NOT_SUPPORT);
  EXPECT_EQ(a.aclrtSynchronizeStream(s), ACL_SUCCESS);
  int bogus = 0;
  EXPECT_EQ(a.aclrtMemcpyAsync(d, n, pin, n, ACL_MEMCPY_HOST_TO_DEVICE, &bogus), ACL_ERROR_INVALID_PARAM);
  EXPECT_EQ(a.aclrtMemcpyAsync(d, n, pin, n, ACL_MEMCPY_HOST_TO_DEVICE, nullptr), ACL_SUCCESS);  // default stream
  EXPECT_EQ(a.aclrtSynchronizeStream(nullptr), ACL_SUCCESS);
  EXPECT_EQ(a.aclrtSynchronizeStream(s), ACL_SUCCESS);
  EXPECT_EQ(a.aclrtMemset(d, 8, 0, 16), ACL_ERROR_INVALID_PARAM);
  EXPECT_EQ(a.aclrtMemsetAsync(d, 8, 0, 16, s), ACL_ERROR_INVALID_PARAM);
  EXPECT_EQ(a.aclrtDestroyStream(s), ACL_SUCCESS);
  EXPECT_EQ(a.aclrtDestroyStream(s), ACL_ERROR_INVALID_PARAM);
  EXPECT_EQ(a.aclrtMemcpyAsync(d, n, pin, n, ACL_MEMCPY_HOST_TO_DEVICE, s), ACL_ERROR_INVALID_PARAM);
  EXPECT_EQ(a.aclrtFree(d), ACL_SUCCESS);
  EXPECT_EQ(a.aclrtFreeHost(pin), ACL_SUCCESS);
}

TEST_F(AclShim, AsyncCopiesWithPageableHostMemoryFailWhenTheyRun) {
  auto& a = A();
  const size_t n = 4096;
  char* d = static_cast<char*>(Dev(n));
  char* pageable = static_cast<char*>(std::aligned_alloc(64, n));
  std::memset(pageable, 0x33, n);
  ASSERT_EQ(a.aclrtMemset(d, n, 0x11, n), ACL_SUCCESS);
  aclrtStream s = Stream();
  EXPECT_EQ(a.aclrtMemcpyAsync(d, n, pageable, n, ACL_MEMCPY_HOST_TO_DEVICE, s), ACL_SUCCESS);  // "no error"...
  EXPECT_EQ(a.aclrtSynchronizeStream(s), ACL_ERROR_RT_COPY_DATA);  // ...until the task runs
  EXPECT_NE(LastMsg().find("aclrtMallocHost"), std::string::npos);
  char back[8] = {};
  ASSERT_EQ(a.aclrtMemcpy(back, 8, d, 8, ACL_MEMCPY_DEVICE_TO_HOST), ACL_SUCCESS);
  EXPECT_EQ(back[0], 0x11);                             // nothing was copied
  EXPECT_EQ(a.aclrtSynchronizeStream(s), ACL_SUCCESS);  // the error is reported once
  {
    ScopedEnv sync("TESSERA_SHIM_ACL_PAGEABLE", "sync");  // CANN 8.5.0: pageable copies are synchronous
    EXPECT_EQ(a.aclrtMemcpyAsync(d, n, pageable, n, ACL_MEMCPY_HOST_TO_DEVICE, s), ACL_SUCCESS);
    ASSERT_EQ(a.aclrtMemcpy(back, 8, d, 8, ACL_MEMCPY_DEVICE_TO_HOST), ACL_SUCCESS);  // no synchronisation
    EXPECT_EQ(back[0], 0x33);
  }
  EXPECT_EQ(a.aclrtDestroyStream(s), ACL_SUCCESS);
  EXPECT_EQ(a.aclrtFree(d), ACL_SUCCESS);
  std::free(pageable);
}

TEST_F(AclShim, AStreamRunsItsQueueInOrderAndItsEventCompletesWhenReached) {
  auto& a = A();
  ScopedEnv delay("TESSERA_SHIM_STREAM_DELAY_US", "2000");
  aclrtStream s = Stream();
  const size_t n = 512, hops = 64;
  std::vector<void*> bufs;
  for (size_t i = 0; i <= hops; ++i) bufs.push_back(Dev(n));
  std::vector<char> data(n), back(n, 0);
  for (size_t i = 0; i < n; ++i) data[i] = static_cast<char>(i ^ 0x5a);
  char* pin = static_cast<char*>(Pinned(n));
  std::memcpy(pin, data.data(), n);
  for (void* b : bufs) ASSERT_EQ(a.aclrtMemset(b, n, 0, n), ACL_SUCCESS);
  // A chain: only in-order execution carries the data from the pinned buffer to the last device buffer.
  ASSERT_EQ(a.aclrtMemcpyAsync(bufs[0], n, pin, n, ACL_MEMCPY_HOST_TO_DEVICE, s), ACL_SUCCESS);
  for (size_t i = 0; i < hops; ++i)
    ASSERT_EQ(a.aclrtMemcpyAsync(bufs[i + 1], n, bufs[i], n, ACL_MEMCPY_DEVICE_TO_DEVICE, s), ACL_SUCCESS);
  aclrtEvent e = nullptr, never = nullptr;
  ASSERT_EQ(a.aclrtCreateEvent(&e), ACL_SUCCESS);
  ASSERT_EQ(a.aclrtCreateEvent(&never), ACL_SUCCESS);
  aclrtEventRecordedStatus st = ACL_EVENT_RECORDED_STATUS_COMPLETE;
  EXPECT_EQ(a.aclrtQueryEventStatus(never, &st), ACL_SUCCESS);
  EXPECT_EQ(st, ACL_EVENT_RECORDED_STATUS_NOT_READY);  // never recorded
  ASSERT_EQ(a.aclrtRecordEvent(e, s), ACL_SUCCESS);
  EXPECT_EQ(a.aclrtQueryEventStatus(e, &st), ACL_SUCCESS);
  EXPECT_EQ(st, ACL_EVENT_RECORDED_STATUS_NOT_READY);  // 66 tasks of 2 ms each are still queued
  aclrtEventStatus old = ACL_EVENT_STATUS_COMPLETE;
  EXPECT_EQ(a.aclrtQueryEvent(e, &old), ACL_SUCCESS);
  EXPECT_EQ(old, ACL_EVENT_STATUS_NOT_READY);
  ASSERT_EQ(a.aclrtSynchronizeEvent(e), ACL_SUCCESS);
  EXPECT_EQ(a.aclrtQueryEventStatus(e, &st), ACL_SUCCESS);
  EXPECT_EQ(st, ACL_EVENT_RECORDED_STATUS_COMPLETE);
  EXPECT_EQ(a.aclrtQueryEvent(e, &old), ACL_SUCCESS);
  EXPECT_EQ(old, ACL_EVENT_STATUS_COMPLETE);
  ASSERT_EQ(a.aclrtMemcpy(back.data(), n, bufs[hops], n, ACL_MEMCPY_DEVICE_TO_HOST), ACL_SUCCESS);
  EXPECT_EQ(back, data);
  EXPECT_EQ(a.aclrtDestroyEvent(e), ACL_SUCCESS);
  EXPECT_EQ(a.aclrtDestroyEvent(e), ACL_ERROR_INVALID_PARAM);
  EXPECT_EQ(a.aclrtDestroyEvent(never), ACL_SUCCESS);
  EXPECT_EQ(a.aclrtDestroyStream(s), ACL_SUCCESS);
  for (void* b : bufs) EXPECT_EQ(a.aclrtFree(b), ACL_SUCCESS);
  EXPECT_EQ(a.aclrtFreeHost(pin), ACL_SUCCESS);
}

TEST_F(AclShim, ReadingBeforeSynchronisingSeesStaleData) {
  auto& a = A();
  ScopedEnv delay("TESSERA_SHIM_STREAM_DELAY_US", "200000");
  aclrtStream s = Stream();
  const size_t n = 1024;
  void* d = Dev(n);
  char* pin = static_cast<char*>(Pinned(n));
  ASSERT_EQ(a.aclrtMemset(d, n, 0x55, n), ACL_SUCCESS);
  std::memset(pin, 0xAA, n);
  ASSERT_EQ(a.aclrtMemcpyAsync(pin, n, d, n, ACL_MEMCPY_DEVICE_TO_HOST, s), ACL_SUCCESS);
  EXPECT_EQ(shimtest::RacyRead(pin), 0xAAu);  // the missing synchronisation: stale
  ASSERT_EQ(a.aclrtSynchronizeStream(s), ACL_SUCCESS);
  EXPECT_EQ(static_cast<unsigned char>(pin[0]), 0x55u);
  EXPECT_EQ(static_cast<unsigned char>(pin[n - 1]), 0x55u);
  EXPECT_EQ(a.aclrtDestroyStream(s), ACL_SUCCESS);
  EXPECT_EQ(a.aclrtFree(d), ACL_SUCCESS);
  EXPECT_EQ(a.aclrtFreeHost(pin), ACL_SUCCESS);
}

TEST_F(AclShim, StreamWaitEventOrdersTwoStreams) {
  auto& a = A();
  aclrtStream slow, fast;
  {
    ScopedEnv delay("TESSERA_SHIM_STREAM_DELAY_US", "100000");
    slow = Stream();
  }
  fast = Stream();
  const size_t n = 256;
  void* d = Dev(n);
  char* pin = static_cast<char*>(Pinned(n));
  for (bool wait : {false, true}) {
    ASSERT_EQ(a.aclrtMemset(d, n, 0, n), ACL_SUCCESS);
    aclrtEvent e;
    ASSERT_EQ(a.aclrtCreateEvent(&e), ACL_SUCCESS);
    if (wait) {
      ASSERT_EQ(a.aclrtMemsetAsync(d, n, 7, n, slow), ACL_SUCCESS);
      ASSERT_EQ(a.aclrtRecordEvent(e, slow), ACL_SUCCESS);
      ASSERT_EQ(a.aclrtStreamWaitEvent(fast, e), ACL_SUCCESS);
      ASSERT_EQ(a.aclrtMemcpyAsync(pin, n, d, n, ACL_MEMCPY_DEVICE_TO_HOST, fast), ACL_SUCCESS);
    } else {  // the control: the copy does not wait, so it reads d before the slow stream writes it
      ASSERT_EQ(a.aclrtMemcpyAsync(pin, n, d, n, ACL_MEMCPY_DEVICE_TO_HOST, fast), ACL_SUCCESS);
      ASSERT_EQ(a.aclrtRecordEvent(e, fast), ACL_SUCCESS);  // (and the write waits for the read: no data race)
      ASSERT_EQ(a.aclrtStreamWaitEvent(slow, e), ACL_SUCCESS);
      ASSERT_EQ(a.aclrtMemsetAsync(d, n, 7, n, slow), ACL_SUCCESS);
    }
    ASSERT_EQ(a.aclrtSynchronizeStream(fast), ACL_SUCCESS);
    EXPECT_EQ(pin[0], wait ? 7 : 0) << (wait ? "with" : "without") << " aclrtStreamWaitEvent";
    ASSERT_EQ(a.aclrtSynchronizeStream(slow), ACL_SUCCESS);
    EXPECT_EQ(a.aclrtDestroyEvent(e), ACL_SUCCESS);
  }
  EXPECT_EQ(a.aclrtDestroyStream(slow), ACL_SUCCESS);
  EXPECT_EQ(a.aclrtDestroyStream(fast), ACL_SUCCESS);
  EXPECT_EQ(a.aclrtFree(d), ACL_SUCCESS);
  EXPECT_EQ(a.aclrtFreeHost(pin), ACL_SUCCESS);
}

TEST_F(AclShim, MemoryFreedBeforeItsCopyRanFailsTheStream) {
  auto& a = A();
  ScopedEnv delay("TESSERA_SHIM_STREAM_DELAY_US", "50000");
  aclrtStream s = Stream();
  void* d = Dev(256);
  char* pin = static_cast<char*>(Pinned(256));
  ASSERT_EQ(a.aclrtMemcpyAsync(pin, 256, d, 256, ACL_MEMCPY_DEVICE_TO_HOST, s), ACL_SUCCESS);
  ASSERT_EQ(a.aclrtFree(d), ACL_SUCCESS);
  EXPECT_EQ(a.aclrtSynchronizeStream(s), ACL_ERROR_RT_COPY_DATA);
  EXPECT_NE(LastMsg().find("freed"), std::string::npos);
  EXPECT_EQ(a.aclrtDestroyStream(s), ACL_SUCCESS);
  EXPECT_EQ(a.aclrtFreeHost(pin), ACL_SUCCESS);
}

TEST_F(AclShim, PointerAttributesNameTheMemory) {
  auto& a = A();
  ASSERT_EQ(a.aclrtSetDevice(2), ACL_SUCCESS);
  char* d = static_cast<char*>(Dev(3u << 20));
  void* small = nullptr;
  ASSERT_EQ(a.aclrtMalloc(&small, 128, ACL_MEM_MALLOC_NORMAL_ONLY), ACL_SUCCESS);
  char* pin = static_cast<char*>(Pinned(64));
  int local = 0;
  aclrtPtrAttributes at{};
  ASSERT_EQ(a.aclrtPointerGetAttributes(d + 4096, &at), ACL_SUCCESS);
  EXPECT_EQ(at.location.type, ACL_MEM_LOCATION_TYPE_DEVICE);
  EXPECT_EQ(at.location.id, 2u);
  EXPECT_EQ(at.pageSize, 2u << 20);  // HUGE_FIRST above 1 MiB
  ASSERT_EQ(a.aclrtPointerGetAttributes(small, &at), ACL_SUCCESS);
  EXPECT_EQ(at.pageSize, 4096u);
  ASSERT_EQ(a.aclrtPointerGetAttributes(pin, &at), ACL_SUCCESS);
  EXPECT_EQ(at.location.type, ACL_MEM_LOCATION_TYPE_HOST);
  ASSERT_EQ(a.aclrtPointerGetAttributes(&local, &at), ACL_SUCCESS);
  EXPECT_EQ(at.location.type, ACL_MEM_LOCATION_TYPE_UNREGISTERED);
  EXPECT_EQ(a.aclrtPointerGetAttributes(nullptr, &at), ACL_ERROR_INVALID_PARAM);
  EXPECT_EQ(a.aclrtFree(d), ACL_SUCCESS);
  EXPECT_EQ(a.aclrtPointerGetAttributes(d + 4096, &at), ACL_SUCCESS);  // freed: no longer device memory
  EXPECT_EQ(at.location.type, ACL_MEM_LOCATION_TYPE_UNREGISTERED);
  EXPECT_EQ(a.aclrtFree(small), ACL_SUCCESS);
  EXPECT_EQ(a.aclrtFreeHost(pin), ACL_SUCCESS);
}

TEST_F(AclShim, TheRecentErrorMessageIsTheLastFailureOnce) {
  auto& a = A();
  A().aclGetRecentErrMsg();  // clear
  EXPECT_EQ(A().aclGetRecentErrMsg(), nullptr);
  EXPECT_EQ(a.aclrtFree(nullptr), ACL_ERROR_INVALID_PARAM);
  const std::string m = LastMsg();
  EXPECT_NE(m.find("aclrtFree"), std::string::npos) << m;
  EXPECT_NE(m.find("100000"), std::string::npos) << m;
  EXPECT_EQ(A().aclGetRecentErrMsg(), nullptr);
}

TEST_F(AclShim, HostRegisterPageLocksExistingMemoryForAsynchronousCopies) {
  // aclrtHostRegisterV2 (CANN 9.0.0): a 4 KiB-aligned range of ordinary memory registered ACL_HOST_REG_PINNED is
  // page-locked memory for aclrtMemcpyAsync, which fails its task on the same memory unregistered.
  auto& a = A();
  const size_t n = 3 * 4096;
  char* mem = static_cast<char*>(std::aligned_alloc(4096, n));
  char* d = static_cast<char*>(Dev(n));
  aclrtStream s = Stream();
  std::memset(mem, 7, n);
  ASSERT_EQ(a.aclrtMemcpyAsync(d, n, mem, n, ACL_MEMCPY_HOST_TO_DEVICE, s), ACL_SUCCESS);
  EXPECT_EQ(a.aclrtSynchronizeStream(s), ACL_ERROR_RT_COPY_DATA);  // pageable: "unpredictable error", the shim's code
  ASSERT_EQ(a.aclrtHostRegisterV2(mem, n, ACL_HOST_REG_PINNED), ACL_SUCCESS);
  ASSERT_EQ(a.aclrtMemcpyAsync(d, n, mem, n, ACL_MEMCPY_HOST_TO_DEVICE, s), ACL_SUCCESS);
  ASSERT_EQ(a.aclrtSynchronizeStream(s), ACL_SUCCESS);
  std::memset(mem + 4096, 9, 64);
  ASSERT_EQ(a.aclrtMemcpyAsync(d, n, mem + 4096, 64, ACL_MEMCPY_HOST_TO_DEVICE, s), ACL_SUCCESS);
  ASSERT_EQ(a.aclrtMemcpyAsync(mem + 8192, 64, d, 64, ACL_MEMCPY_DEVICE_TO_HOST, s), ACL_SUCCESS);
  ASSERT_EQ(a.aclrtSynchronizeStream(s), ACL_SUCCESS);
  EXPECT_EQ(mem[8192], 9);
  EXPECT_EQ(mem[8192 + 63], 9);
  aclrtPtrAttributes at{};
  ASSERT_EQ(a.aclrtPointerGetAttributes(mem + 5, &at), ACL_SUCCESS);
  EXPECT_EQ(at.location.type, ACL_MEM_LOCATION_TYPE_HOST);
  // The documented rules: 4 KiB alignment, a flag of the ACL_HOST_REG_* set, reserved options refused, PINNED only for
  // memory that is not page-locked yet; a range registered twice and an unregister of anything else refused.
  EXPECT_EQ(a.aclrtHostRegisterV2(mem, n, ACL_HOST_REG_PINNED), ACL_ERROR_INVALID_PARAM) << LastMsg();
  char* other = static_cast<char*>(std::aligned_alloc(4096, 2 * 4096));
  EXPECT_EQ(a.aclrtHostRegisterV2(other + 64, 4096, ACL_HOST_REG_PINNED), ACL_ERROR_RT_ADDR_UNALIGNED);
  EXPECT_NE(LastMsg().find("4 KiB"), std::string::npos);
  EXPECT_EQ(a.aclrtHostRegisterV2(other, 4096, 0), ACL_ERROR_INVALID_PARAM);
  EXPECT_EQ(a.aclrtHostRegisterV2(other, 4096, 0x40), ACL_ERROR_INVALID_PARAM);
  EXPECT_EQ(a.aclrtHostRegisterV2(other, 4096, ACL_HOST_REG_READONLY), ACL_ERROR_RT_FEATURE_NOT_SUPPORT);
  EXPECT_EQ(a.aclrtHostRegisterV2(other, 0, ACL_HOST_REG_PINNED), ACL_ERROR_INVALID_PARAM);
  void* pin = Pinned(4096);
  EXPECT_EQ(a.aclrtHostRegisterV2(pin, 4096, ACL_HOST_REG_PINNED), ACL_ERROR_INVALID_PARAM);
  EXPECT_EQ(a.aclrtHostUnregister(mem + 4096), ACL_ERROR_INVALID_PARAM);
  EXPECT_EQ(a.aclrtHostUnregister(other), ACL_ERROR_INVALID_PARAM);
  EXPECT_EQ(a.aclrtFreeHost(mem), ACL_ERROR_RT_MEMORY_FREE);  // registered, not aclrtMallocHost's
  ASSERT_EQ(a.aclrtHostUnregister(mem), ACL_SUCCESS);
  ASSERT_EQ(a.aclrtPointerGetAttributes(mem + 5, &at), ACL_SUCCESS);
  EXPECT_EQ(at.location.type, ACL_MEM_LOCATION_TYPE_UNREGISTERED);
  EXPECT_EQ(a.aclrtFreeHost(pin), ACL_SUCCESS);
  EXPECT_EQ(a.aclrtFree(d), ACL_SUCCESS);
  EXPECT_EQ(a.aclrtDestroyStream(s), ACL_SUCCESS);
  std::free(other);
  std::free(mem);
}

}  // namespace
