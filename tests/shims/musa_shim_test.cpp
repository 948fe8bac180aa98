// tests/shims/musa_shim_test: the MUSA runtime host shim (libmusart.so) through dlopen and the signatures of
// musa_abi.h: allocation, copies of every kind and their checks, the last-error protocol, stream order, events,
// stale data without synchronisation (pinned memory) and CUDA's synchronous pageable copies, pointer attributes.
#include <cstring>
#include <thread>
#include <vector>

#include "musa_abi.h"
#include "shim_test_util.hpp"

namespace {

using shimtest::ScopedEnv;

struct Musa {
  shimtest::Lib lib{TESSERA_SHIM_MUSA};
  decltype(&::musaGetDeviceCount) musaGetDeviceCount;
  decltype(&::musaSetDevice) musaSetDevice;
  decltype(&::musaGetDevice) musaGetDevice;
  decltype(&::musaDeviceSynchronize) musaDeviceSynchronize;
  decltype(&::musaGetLastError) musaGetLastError;
  decltype(&::musaPeekAtLastError) musaPeekAtLastError;
  decltype(&::musaGetErrorString) musaGetErrorString;
  decltype(&::musaMalloc) musaMalloc;
  decltype(&::musaFree) musaFree;
  decltype(&::musaMallocHost) musaMallocHost;
  decltype(&::musaHostAlloc) musaHostAlloc;
  decltype(&::musaFreeHost) musaFreeHost;
  decltype(&::musaMemcpy) musaMemcpy;
  decltype(&::musaMemcpyAsync) musaMemcpyAsync;
  decltype(&::musaMemset) musaMemset;
  decltype(&::musaMemsetAsync) musaMemsetAsync;
  decltype(&::musaStreamCreate) musaStreamCreate;
  decltype(&::musaStreamCreateWithFlags) musaStreamCreateWithFlags;
  decltype(&::musaStreamDestroy) musaStreamDestroy;
  decltype(&::musaStreamSynchronize) musaStreamSynchronize;
  decltype(&::musaStreamQuery) musaStreamQuery;
  decltype(&::musaStreamWaitEvent) musaStreamWaitEvent;
  decltype(&::musaEventCreateWithFlags) musaEventCreateWithFlags;
  decltype(&::musaEventRecord) musaEventRecord;
  decltype(&::musaEventQuery) musaEventQuery;
  decltype(&::musaEventSynchronize) musaEventSynchronize;
  decltype(&::musaEventDestroy) musaEventDestroy;
  decltype(&::musaPointerGetAttributes) musaPointerGetAttributes;
  Musa() {
    SHIM_SYM(lib, musaGetDeviceCount), SHIM_SYM(lib, musaSetDevice), SHIM_SYM(lib, musaGetDevice);
    SHIM_SYM(lib, musaDeviceSynchronize), SHIM_SYM(lib, musaGetLastError), SHIM_SYM(lib, musaPeekAtLastError);
    SHIM_SYM(lib, musaGetErrorString), SHIM_SYM(lib, musaMalloc), SHIM_SYM(lib, musaFree);
    SHIM_SYM(lib, musaMallocHost), SHIM_SYM(lib, musaHostAlloc), SHIM_SYM(lib, musaFreeHost);
    SHIM_SYM(lib, musaMemcpy), SHIM_SYM(lib, musaMemcpyAsync), SHIM_SYM(lib, musaMemset);
    SHIM_SYM(lib, musaMemsetAsync), SHIM_SYM(lib, musaStreamCreate), SHIM_SYM(lib, musaStreamCreateWithFlags);
    SHIM_SYM(lib, musaStreamDestroy), SHIM_SYM(lib, musaStreamSynchronize), SHIM_SYM(lib, musaStreamQuery);
    SHIM_SYM(lib, musaStreamWaitEvent), SHIM_SYM(lib, musaEventCreateWithFlags), SHIM_SYM(lib, musaEventRecord);
    SHIM_SYM(lib, musaEventQuery), SHIM_SYM(lib, musaEventSynchronize), SHIM_SYM(lib, musaEventDestroy);
    SHIM_SYM(lib, musaPointerGetAttributes);
  }
};
Musa& M() {
  static Musa m;
  return m;
}

class MusaShim : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(M().lib.ok()) << M().lib.error();
    ASSERT_EQ(M().lib.missing(), "");
    ASSERT_EQ(M().musaSetDevice(0), musaSuccess);
    M().musaGetLastError();
  }
  void* Dev(size_t n) {
    void* p = nullptr;
    EXPECT_EQ(M().musaMalloc(&p, n), musaSuccess);
    return p;
  }
  char* Pinned(size_t n) {
    void* p = nullptr;
    EXPECT_EQ(M().musaHostAlloc(&p, n, musaHostAllocDefault), musaSuccess);
    return static_cast<char*>(p);
  }
  musaStream_t Stream() {
    musaStream_t s = nullptr;
    EXPECT_EQ(M().musaStreamCreateWithFlags(&s, musaStreamNonBlocking), musaSuccess);
    return s;
  }
};

TEST_F(MusaShim, ExportsTheDeclaredSymbolsAndTheHookForMccl) {
  EXPECT_NE(dlsym(M().lib.handle(), "tesseraMusaShimHooks"), nullptr);
  EXPECT_STREQ(M().musaGetErrorString(musaErrorNotReady), "device not ready");
  EXPECT_STREQ(M().musaGetErrorString(static_cast<musaError_t>(12345)), "unrecognized error code");
}

TEST_F(MusaShim, FailuresSetTheLastErrorUntilItIsRead) {
  auto& m = M();
  int dummy = 0;
  EXPECT_EQ(m.musaFree(&dummy), musaErrorInvalidValue);
  EXPECT_EQ(m.musaPeekAtLastError(), musaErrorInvalidValue);  // peek keeps it
  EXPECT_EQ(m.musaGetLastError(), musaErrorInvalidValue);     // get clears it
  EXPECT_EQ(m.musaGetLastError(), musaSuccess);
  EXPECT_EQ(m.musaSetDevice(8), musaErrorInvalidDevice);
  EXPECT_EQ(m.musaGetLastError(), musaErrorInvalidDevice);
  void* p = &dummy;
  EXPECT_EQ(m.musaMalloc(&p, 0), musaSuccess);  // CUDA: size 0 gives NULL
  EXPECT_EQ(p, nullptr);
  EXPECT_EQ(m.musaFree(nullptr), musaSuccess);
  EXPECT_EQ(m.musaFreeHost(nullptr), musaSuccess);
  int count = 0, dev = -1;
  EXPECT_EQ(m.musaGetDeviceCount(&count), musaSuccess);
  EXPECT_EQ(count, 8);
  ASSERT_EQ(m.musaSetDevice(5), musaSuccess);
  std::thread([&] { m.musaGetDevice(&dev); }).join();
  EXPECT_EQ(dev, 0);  // per thread, 0 by default
}

TEST_F(MusaShim, CopiesOfEveryKindAndTheirChecks) {
  auto& m = M();
  const size_t n = 3000;
  std::vector<char> host(n), back(n, 0);
  for (size_t i = 0; i < n; ++i) host[i] = static_cast<char>(i * 13 + 5);
  void *d = Dev(n), *d2 = Dev(n);
  char* pin = Pinned(n);
  EXPECT_EQ(m.musaMemcpy(d, host.data(), n, musaMemcpyHostToDevice), musaSuccess);
  EXPECT_EQ(m.musaMemcpy(d2, d, n, musaMemcpyDeviceToDevice), musaSuccess);
  EXPECT_EQ(m.musaMemcpy(pin, d2, n, musaMemcpyDeviceToHost), musaSuccess);
  EXPECT_EQ(m.musaMemcpy(back.data(), pin, n, musaMemcpyHostToHost), musaSuccess);
  EXPECT_EQ(back, host);
  std::fill(back.begin(), back.end(), 0);
  EXPECT_EQ(m.musaMemcpy(back.data(), d, n, musaMemcpyDefault), musaSuccess);
  EXPECT_EQ(back, host);
  EXPECT_EQ(m.musaMemcpy(back.data(), d, n, musaMemcpyHostToDevice), musaErrorInvalidValue);  // wrong kind
  EXPECT_EQ(m.musaMemcpy(d, host.data(), n, static_cast<musaMemcpyKind>(7)), musaErrorInvalidMemcpyDirection);
  EXPECT_EQ(m.musaMemcpy(d, host.data(), 2 * n, musaMemcpyHostToDevice), musaErrorInvalidValue);  // overrun
  EXPECT_EQ(m.musaMemset(back.data(), 0, n), musaErrorInvalidValue);                              // host memory
  EXPECT_EQ(m.musaMemset(d, 0x7f, n), musaSuccess);
  EXPECT_EQ(m.musaMemcpy(back.data(), d, 1, musaMemcpyDeviceToHost), musaSuccess);
  EXPECT_EQ(back[0], 0x7f);
  EXPECT_EQ(m.musaFree(d), musaSuccess);
  EXPECT_EQ(m.musaFree(d2), musaSuccess);
  EXPECT_EQ(m.musaFreeHost(pin), musaSuccess);
}

TEST_F(MusaShim, AStreamRunsInOrderAndEventsCompleteWhenReached) {
  auto& m = M();
  ScopedEnv delay("TESSERA_SHIM_STREAM_DELAY_US", "2000");
  musaStream_t s = Stream();
  const size_t n = 256, hops = 40;
  std::vector<void*> bufs;
  for (size_t i = 0; i <= hops; ++i) bufs.push_back(Dev(n));
  char* pin = Pinned(n);
  for (size_t i = 0; i < n; ++i) pin[i] = static_cast<char>(255 - i);
  std::vector<char> want(pin, pin + n), back(n);
  ASSERT_EQ(m.musaMemcpyAsync(bufs[0], pin, n, musaMemcpyHostToDevice, s), musaSuccess);
  for (size_t i = 0; i < hops; ++i)
    ASSERT_EQ(m.musaMemcpyAsync(bufs[i + 1], bufs[i], n, musaMemcpyDeviceToDevice, s), musaSuccess);
  musaEvent_t e, never;
  ASSERT_EQ(m.musaEventCreateWithFlags(&e, musaEventDisableTiming), musaSuccess);
  ASSERT_EQ(m.musaEventCreateWithFlags(&never, musaEventDefault), musaSuccess);
  EXPECT_EQ(m.musaEventQuery(never), musaSuccess);  // CUDA: never recorded is complete
  ASSERT_EQ(m.musaEventRecord(e, s), musaSuccess);
  EXPECT_EQ(m.musaEventQuery(e), musaErrorNotReady);
  EXPECT_EQ(m.musaStreamQuery(s), musaErrorNotReady);
  EXPECT_EQ(m.musaGetLastError(), musaSuccess);  // not-ready is not an error
  ASSERT_EQ(m.musaEventSynchronize(e), musaSuccess);
  EXPECT_EQ(m.musaEventQuery(e), musaSuccess);
  ASSERT_EQ(m.musaStreamSynchronize(s), musaSuccess);
  EXPECT_EQ(m.musaStreamQuery(s), musaSuccess);
  ASSERT_EQ(m.musaMemcpy(back.data(), bufs[hops], n, musaMemcpyDeviceToHost), musaSuccess);
  EXPECT_EQ(back, want);
  EXPECT_EQ(m.musaEventDestroy(e), musaSuccess);
  EXPECT_EQ(m.musaEventDestroy(e), musaErrorInvalidResourceHandle);
  EXPECT_EQ(m.musaEventDestroy(never), musaSuccess);
  EXPECT_EQ(m.musaStreamDestroy(s), musaSuccess);
  EXPECT_EQ(m.musaStreamDestroy(s), musaErrorInvalidResourceHandle);
  for (void* b : bufs) EXPECT_EQ(m.musaFree(b), musaSuccess);
  EXPECT_EQ(m.musaFreeHost(pin), musaSuccess);
}

TEST_F(MusaShim, PinnedCopiesAreAsynchronousAndPageableOnesAreNot) {
  auto& m = M();
  ScopedEnv delay("TESSERA_SHIM_STREAM_DELAY_US", "200000");
  musaStream_t s = Stream();
  const size_t n = 512;
  void* d = Dev(n);
  ASSERT_EQ(m.musaMemset(d, 0x42, n), musaSuccess);
  char* pin = Pinned(n);
  std::memset(pin, 0x11, n);
  ASSERT_EQ(m.musaMemcpyAsync(pin, d, n, musaMemcpyDeviceToHost, s), musaSuccess);
  EXPECT_EQ(shimtest::RacyRead(pin), 0x11);  // read before synchronising: stale
  ASSERT_EQ(m.musaStreamSynchronize(s), musaSuccess);
  EXPECT_EQ(pin[0], 0x42);
  std::vector<char> pageable(n, 0x11);
  ASSERT_EQ(m.musaMemcpyAsync(pageable.data(), d, n, musaMemcpyDeviceToHost, s), musaSuccess);
  EXPECT_EQ(pageable[n - 1], 0x42);  // CUDA's rule: device-to-pageable returns when done
  std::vector<char> src(n, 0x24);
  ASSERT_EQ(m.musaMemcpyAsync(d, src.data(), n, musaMemcpyHostToDevice, s), musaSuccess);
  std::fill(src.begin(), src.end(), 0);  // pageable-to-device took the bytes at the call
  ASSERT_EQ(m.musaStreamSynchronize(s), musaSuccess);
  ASSERT_EQ(m.musaMemcpy(pageable.data(), d, n, musaMemcpyDeviceToHost), musaSuccess);
  EXPECT_EQ(pageable[0], 0x24);
  EXPECT_EQ(m.musaStreamDestroy(s), musaSuccess);
  EXPECT_EQ(m.musaFree(d), musaSuccess);
  EXPECT_EQ(m.musaFreeHost(pin), musaSuccess);
}

TEST_F(MusaShim, StreamWaitEventOrdersTwoStreamsAndFreeWaitsForTheDevice) {
  auto& m = M();
  musaStream_t slow, fast = Stream();
  {
    ScopedEnv delay("TESSERA_SHIM_STREAM_DELAY_US", "100000");
    slow = Stream();
  }
  const size_t n = 128;
  void* d = Dev(n);
  char* pin = Pinned(n);
  for (bool wait : {false, true}) {
    ASSERT_EQ(m.musaMemset(d, 0, n), musaSuccess);
    musaEvent_t e;
    ASSERT_EQ(m.musaEventCreateWithFlags(&e, musaEventDisableTiming), musaSuccess);
    if (wait) {
      ASSERT_EQ(m.musaMemsetAsync(d, 9, n, slow), musaSuccess);
      ASSERT_EQ(m.musaEventRecord(e, slow), musaSuccess);
      ASSERT_EQ(m.musaStreamWaitEvent(fast, e, 0), musaSuccess);
      ASSERT_EQ(m.musaMemcpyAsync(pin, d, n, musaMemcpyDeviceToHost, fast), musaSuccess);
    } else {  // the control: no wait, so the copy reads d before the slow stream writes it (which waits for it)
      ASSERT_EQ(m.musaMemcpyAsync(pin, d, n, musaMemcpyDeviceToHost, fast), musaSuccess);
      ASSERT_EQ(m.musaEventRecord(e, fast), musaSuccess);
      ASSERT_EQ(m.musaStreamWaitEvent(slow, e, 0), musaSuccess);
      ASSERT_EQ(m.musaMemsetAsync(d, 9, n, slow), musaSuccess);
    }
    ASSERT_EQ(m.musaStreamSynchronize(fast), musaSuccess);
    EXPECT_EQ(pin[0], wait ? 9 : 0) << (wait ? "with" : "without") << " musaStreamWaitEvent";
    ASSERT_EQ(m.musaStreamSynchronize(slow), musaSuccess);
    EXPECT_EQ(m.musaEventDestroy(e), musaSuccess);
  }
  // musaFree synchronises the device first, so a queued copy still reads valid memory.
  std::memset(pin, 0, n);
  ASSERT_EQ(m.musaMemsetAsync(d, 3, n, slow), musaSuccess);
  ASSERT_EQ(m.musaMemcpyAsync(pin, d, n, musaMemcpyDeviceToHost, slow), musaSuccess);
  ASSERT_EQ(m.musaFree(d), musaSuccess);
  EXPECT_EQ(pin[0], 3);
  EXPECT_EQ(m.musaStreamSynchronize(slow), musaSuccess);
  EXPECT_EQ(m.musaStreamDestroy(slow), musaSuccess);
  EXPECT_EQ(m.musaStreamDestroy(fast), musaSuccess);
  EXPECT_EQ(m.musaFreeHost(pin), musaSuccess);
}

TEST_F(MusaShim, PointerAttributesNameTheMemory) {
  auto& m = M();
  ASSERT_EQ(m.musaSetDevice(3), musaSuccess);
  char* d = static_cast<char*>(Dev(1000));
  char* pin = Pinned(64);
  int local = 0;
  musaPointerAttributes at{};
  ASSERT_EQ(m.musaPointerGetAttributes(&at, d + 10), musaSuccess);
  EXPECT_EQ(at.type, musaMemoryTypeDevice);
  EXPECT_EQ(at.device, 3);
  EXPECT_EQ(at.devicePointer, d + 10);
  EXPECT_EQ(at.hostPointer, nullptr);
  ASSERT_EQ(m.musaPointerGetAttributes(&at, pin), musaSuccess);
  EXPECT_EQ(at.type, musaMemoryTypeHost);
  EXPECT_EQ(at.hostPointer, pin);
  ASSERT_EQ(m.musaPointerGetAttributes(&at, &local), musaSuccess);
  EXPECT_EQ(at.type, musaMemoryTypeUnregistered);
  EXPECT_EQ(m.musaPointerGetAttributes(nullptr, d), musaErrorInvalidValue);
  EXPECT_EQ(m.musaFree(d), musaSuccess);
  EXPECT_EQ(m.musaFreeHost(pin), musaSuccess);
}

}  // namespace
