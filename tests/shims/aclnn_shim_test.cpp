// tests/shims/aclnn_shim_test: the aclnn host shims (libnnopbase.so, libopapi.so over libascendcl.so) through
// dlopen and the signatures of aclnn_abi.h: CANN's values, Cast's arithmetic (16-bit -> f32 exact for every bit
// pattern, f32 -> 16-bit round to nearest even), phase 2 asynchronous on the stream, and each documented rule
// refused with its code: 32-byte alignment, device memory for data and workspace, an executor used once unless
// repeatable (then destroyed by the caller), the types and shapes Cast takes, NULL arguments, unknown streams.
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "aclnn_abi.h"
#include "common/dtype.hpp"
#include "shim_test_util.hpp"

namespace {

using shimtest::ScopedEnv;

struct Nn {
  shimtest::Lib acl{TESSERA_SHIM_ACL}, base{TESSERA_SHIM_NNOPBASE}, ops{TESSERA_SHIM_OPAPI};
  decltype(&::aclInit) aclInit;
  decltype(&::aclGetRecentErrMsg) aclGetRecentErrMsg;
  decltype(&::aclrtSetDevice) aclrtSetDevice;
  decltype(&::aclrtMalloc) aclrtMalloc;
  decltype(&::aclrtMallocHost) aclrtMallocHost;
  decltype(&::aclrtFree) aclrtFree;
  decltype(&::aclrtMemcpy) aclrtMemcpy;
  decltype(&::aclrtCreateStream) aclrtCreateStream;
  decltype(&::aclrtDestroyStream) aclrtDestroyStream;
  decltype(&::aclrtSynchronizeStream) aclrtSynchronizeStream;
  decltype(&::aclCreateTensor) aclCreateTensor;
  decltype(&::aclDestroyTensor) aclDestroyTensor;
  decltype(&::aclCreateScalar) aclCreateScalar;
  decltype(&::aclDestroyScalar) aclDestroyScalar;
  decltype(&::aclSetAclOpExecutorRepeatable) aclSetAclOpExecutorRepeatable;
  decltype(&::aclDestroyAclOpExecutor) aclDestroyAclOpExecutor;
  decltype(&::aclSetInputTensorAddr) aclSetInputTensorAddr;
  decltype(&::aclSetOutputTensorAddr) aclSetOutputTensorAddr;
  decltype(&::aclnnInit) aclnnInit;
  decltype(&::aclnnFinalize) aclnnFinalize;
  decltype(&::aclnnCastGetWorkspaceSize) aclnnCastGetWorkspaceSize;
  decltype(&::aclnnCast) aclnnCast;
  decltype(&::aclnnInplaceMulsGetWorkspaceSize) aclnnInplaceMulsGetWorkspaceSize;
  decltype(&::aclnnInplaceMuls) aclnnInplaceMuls;
  size_t (*liveExecutors)() = base.Sym<size_t (*)()>("tesseraNnopbaseShimLiveExecutors");
  Nn() {
    SHIM_SYM(acl, aclInit), SHIM_SYM(acl, aclGetRecentErrMsg), SHIM_SYM(acl, aclrtSetDevice);
    SHIM_SYM(acl, aclrtMalloc), SHIM_SYM(acl, aclrtMallocHost), SHIM_SYM(acl, aclrtFree), SHIM_SYM(acl, aclrtMemcpy);
    SHIM_SYM(acl, aclrtCreateStream), SHIM_SYM(acl, aclrtDestroyStream), SHIM_SYM(acl, aclrtSynchronizeStream);
    SHIM_SYM(base, aclCreateTensor), SHIM_SYM(base, aclDestroyTensor), SHIM_SYM(base, aclCreateScalar);
    SHIM_SYM(base, aclDestroyScalar), SHIM_SYM(base, aclSetAclOpExecutorRepeatable);
    SHIM_SYM(base, aclDestroyAclOpExecutor), SHIM_SYM(base, aclSetInputTensorAddr);
    SHIM_SYM(base, aclSetOutputTensorAddr), SHIM_SYM(base, aclnnInit), SHIM_SYM(base, aclnnFinalize);
    SHIM_SYM(ops, aclnnCastGetWorkspaceSize), SHIM_SYM(ops, aclnnCast), SHIM_SYM(ops, aclnnInplaceMulsGetWorkspaceSize);
    SHIM_SYM(ops, aclnnInplaceMuls);
  }
};
Nn& N() {
  static Nn n;
  return n;
}

class AclnnShim : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(N().acl.ok() && N().base.ok() && N().ops.ok())
        << N().acl.error() << N().base.error() << N().ops.error();
    ASSERT_EQ(N().acl.missing() + N().base.missing() + N().ops.missing(), "");
    ASSERT_EQ(N().aclInit(nullptr), ACL_SUCCESS);
    ASSERT_EQ(N().aclrtSetDevice(0), ACL_SUCCESS);
    ASSERT_EQ(N().aclrtCreateStream(&stream_), ACL_SUCCESS);
  }
  void TearDown() override {
    for (aclTensor* t : tensors_) N().aclDestroyTensor(t);
    for (void* p : dev_) N().aclrtFree(p);
    if (stream_) N().aclrtDestroyStream(stream_);
  }
  void* Dev(size_t n) {
    void* p = nullptr;
    EXPECT_EQ(N().aclrtMalloc(&p, n, ACL_MEM_MALLOC_HUGE_FIRST), ACL_SUCCESS);
    dev_.push_back(p);
    return p;
  }
  template <typename E>
  void* Upload(const std::vector<E>& v) {
    void* d = Dev(v.size() * sizeof(E) + 64);
    N().aclrtMemcpy(d, v.size() * sizeof(E), v.data(), v.size() * sizeof(E), ACL_MEMCPY_HOST_TO_DEVICE);
    return d;
  }
  template <typename E>
  std::vector<E> Download(const void* d, size_t n) {
    std::vector<E> v(n);
    N().aclrtMemcpy(v.data(), n * sizeof(E), d, n * sizeof(E), ACL_MEMCPY_DEVICE_TO_HOST);
    return v;
  }
  // A 1-D contiguous ND tensor of n elements at `data` (+ `offset` elements).
  aclTensor* Tensor(aclDataType t, int64_t n, void* data, int64_t offset = 0, aclFormat f = ACL_FORMAT_ND) {
    const int64_t dims[1] = {n}, stride[1] = {1}, storage[1] = {n + offset};
    aclTensor* x = N().aclCreateTensor(dims, 1, t, stride, offset, f, storage, 1, data);
    EXPECT_NE(x, nullptr);
    tensors_.push_back(x);
    return x;
  }
  // Phase 1 of a cast; the status.
  aclnnStatus Plan(aclTensor* self, aclDataType dtype, aclTensor* out) {
    return N().aclnnCastGetWorkspaceSize(self, dtype, out, &ws_size_, &ex_);
  }
  // Phase 2 with a device workspace of the size phase 1 asked for.
  aclnnStatus Go(aclOpExecutor* ex) {
    void* ws = ws_size_ ? Dev(ws_size_) : nullptr;
    return N().aclnnCast(ws, ws_size_, ex, stream_);
  }
  void Sync() { ASSERT_EQ(N().aclrtSynchronizeStream(stream_), ACL_SUCCESS) << N().aclGetRecentErrMsg(); }
  std::string Err() {
    const char* m = N().aclGetRecentErrMsg();
    return m ? m : "";
  }

  aclrtStream stream_ = nullptr;
  uint64_t ws_size_ = 0;
  aclOpExecutor* ex_ = nullptr;
  std::vector<aclTensor*> tensors_;
  std::vector<void*> dev_;
};

uint32_t Bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
float FromBits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

TEST(AclnnShimValues, MatchCannsHeaders) {
  // acl_base_rt.h: aclDataType and aclFormat (GE's numbers, not HCCL's FP16 3 / FP32 4 / BFP16 11).
  EXPECT_EQ(ACL_FLOAT, 0);
  EXPECT_EQ(ACL_FLOAT16, 1);
  EXPECT_EQ(ACL_BF16, 27);
  EXPECT_EQ(ACL_FORMAT_ND, 2);
  // aclnn_return_code.md
  EXPECT_EQ(ACLNN_SUCCESS, 0);
  EXPECT_EQ(ACLNN_ERR_PARAM_NULLPTR, 161001);
  EXPECT_EQ(ACLNN_ERR_PARAM_INVALID, 161002);
  EXPECT_EQ(ACLNN_ERR_RUNTIME_ERROR, 361001);
  EXPECT_EQ(ACLNN_ERR_INNER_FIND_KERNEL_ERROR, 561003);
  EXPECT_EQ(sizeof(aclnnStatus), 4u);
}

TEST_F(AclnnShim, CastWidensEveryBf16AndF16BitPatternExactly) {
  std::vector<uint16_t> all(65536);
  for (uint32_t i = 0; i < 65536; ++i) all[i] = static_cast<uint16_t>(i);
  void* src = Upload(all);
  void* dst = Dev(65536 * 4);
  for (aclDataType t : {ACL_BF16, ACL_FLOAT16}) {
    ASSERT_EQ(Plan(Tensor(t, 65536, src), ACL_FLOAT, Tensor(ACL_FLOAT, 65536, dst)), ACLNN_SUCCESS) << Err();
    ASSERT_EQ(Go(ex_), ACLNN_SUCCESS) << Err();
    Sync();
    const std::vector<float> got = Download<float>(dst, 65536);
    for (uint32_t i = 0; i < 65536; ++i) {
      const float want = t == ACL_BF16 ? FromBits(i << 16) : tessera::F16ToF32(static_cast<uint16_t>(i));
      if (std::isnan(want)) {
        ASSERT_TRUE(std::isnan(got[i])) << "type " << t << " bits " << i;
        continue;
      }
      ASSERT_EQ(Bits(got[i]), Bits(want)) << "type " << t << " bits " << i;
    }
  }
}

TEST_F(AclnnShim, CastNarrowsF32ToNearestEven) {
  // bf16 keeps 8 significant bits: 1 + 2^-8 is a tie between 1 and 1 + 2^-7 (even: 1), 1 + 3 * 2^-8 a tie between
  // 1 + 2^-7 and 1 + 2^-6 (even: the upper), 1 + 2^-8 + 2^-20 above the tie (up).
  const std::vector<float> in = {1.0f + 0x1p-8f, 1.0f + 3 * 0x1p-8f, 1.0f + 0x1p-8f + 0x1p-20f, -2.5f, 0x1p-130f};
  const std::vector<uint16_t> bf16 = {0x3f80, 0x3f82, 0x3f81, 0xc020, 0x0000};
  void* src = Upload(in);
  void* dst = Dev(64);
  ASSERT_EQ(Plan(Tensor(ACL_FLOAT, 5, src), ACL_BF16, Tensor(ACL_BF16, 5, dst)), ACLNN_SUCCESS) << Err();
  ASSERT_EQ(Go(ex_), ACLNN_SUCCESS);
  Sync();
  std::vector<uint16_t> got = Download<uint16_t>(dst, 5);
  for (size_t i = 0; i < 4; ++i) EXPECT_EQ(got[i], bf16[i]) << i;
  EXPECT_EQ(got[4], tessera::F32ToBf16(in[4])) << "subnormal: as common/dtype.hpp rounds it";
  // f16: 11 bits; 1 + 2^-11 is a tie (even: 1).
  const std::vector<float> h = {1.0f + 0x1p-11f, 1.0f + 3 * 0x1p-11f};
  void* hs = Upload(h);
  ASSERT_EQ(Plan(Tensor(ACL_FLOAT, 2, hs), ACL_FLOAT16, Tensor(ACL_FLOAT16, 2, dst)), ACLNN_SUCCESS) << Err();
  ASSERT_EQ(Go(ex_), ACLNN_SUCCESS);
  Sync();
  got = Download<uint16_t>(dst, 2);
  EXPECT_EQ(got[0], 0x3c00);
  EXPECT_EQ(got[1], 0x3c02);
}

TEST_F(AclnnShim, PhaseTwoRunsAsynchronouslyOnTheStream) {
  ScopedEnv delay("TESSERA_SHIM_STREAM_DELAY_US", "200000");
  aclrtStream slow = nullptr;
  ASSERT_EQ(N().aclrtCreateStream(&slow), ACL_SUCCESS);   // the delay is read when a stream is made
  void* src = Upload(std::vector<uint16_t>(64, 0x3f80));  // bf16 1.0
  void* dst = Upload(std::vector<float>(64, 0.0f));
  ASSERT_EQ(Plan(Tensor(ACL_BF16, 64, src), ACL_FLOAT, Tensor(ACL_FLOAT, 64, dst)), ACLNN_SUCCESS);
  void* ws = ws_size_ ? Dev(ws_size_) : nullptr;
  ASSERT_EQ(N().aclnnCast(ws, ws_size_, ex_, slow), ACLNN_SUCCESS);
  EXPECT_EQ(Download<float>(dst, 64)[0], 0.0f);  // aclrtMemcpy does not wait for the stream: not run yet
  ASSERT_EQ(N().aclrtSynchronizeStream(slow), ACL_SUCCESS);
  EXPECT_EQ(Download<float>(dst, 64)[63], 1.0f);
  N().aclrtDestroyStream(slow);
}

TEST_F(AclnnShim, TensorDataMustBe32ByteAligned) {
  char* d = static_cast<char*>(Dev(4096));
  EXPECT_EQ(Plan(Tensor(ACL_BF16, 16, d + 16), ACL_FLOAT, Tensor(ACL_FLOAT, 16, d + 1024)), ACLNN_ERR_PARAM_INVALID);
  EXPECT_NE(Err().find("32-byte aligned"), std::string::npos) << Err();
  // An offset counts: 8 bf16 elements are 16 bytes.
  EXPECT_EQ(Plan(Tensor(ACL_BF16, 16, d, 8), ACL_FLOAT, Tensor(ACL_FLOAT, 16, d + 1024)), ACLNN_ERR_PARAM_INVALID);
  EXPECT_EQ(Plan(Tensor(ACL_BF16, 16, d, 16), ACL_FLOAT, Tensor(ACL_FLOAT, 16, d + 1024)), ACLNN_SUCCESS) << Err();
  EXPECT_EQ(Go(ex_), ACLNN_SUCCESS);
  Sync();
}

TEST_F(AclnnShim, TensorDataMustBeDeviceMemory) {
  void* host = std::aligned_alloc(64, 4096);
  void* pinned = nullptr;
  ASSERT_EQ(N().aclrtMallocHost(&pinned, 4096), ACL_SUCCESS);
  void* d = Dev(4096);
  EXPECT_EQ(Plan(Tensor(ACL_BF16, 16, host), ACL_FLOAT, Tensor(ACL_FLOAT, 16, d)), ACLNN_ERR_PARAM_INVALID);
  EXPECT_NE(Err().find("not device memory"), std::string::npos) << Err();
  EXPECT_EQ(Plan(Tensor(ACL_BF16, 16, d), ACL_FLOAT, Tensor(ACL_FLOAT, 16, pinned)), ACLNN_ERR_PARAM_INVALID);
  // Past the end of its allocation (aclrtMalloc pads 4096 to 4096 + 32 bytes).
  EXPECT_EQ(Plan(Tensor(ACL_BF16, 4000, d), ACL_FLOAT, Tensor(ACL_FLOAT, 4000, Dev(16000))), ACLNN_ERR_PARAM_INVALID);
  std::free(host);
}

TEST_F(AclnnShim, WorkspaceMustBeDeviceMemoryOfTheSizeAskedFor) {
  void *src = Dev(256), *dst = Dev(256);
  ASSERT_EQ(Plan(Tensor(ACL_BF16, 16, src), ACL_FLOAT, Tensor(ACL_FLOAT, 16, dst)), ACLNN_SUCCESS);
  ASSERT_EQ(ws_size_, 512u);  // TESSERA_SHIM_ACLNN_WORKSPACE's default
  std::vector<char> host(ws_size_);
  EXPECT_EQ(N().aclnnCast(host.data(), ws_size_, ex_, stream_), ACLNN_ERR_PARAM_INVALID);
  EXPECT_NE(Err().find("workspace"), std::string::npos) << Err();
  EXPECT_EQ(N().aclnnCast(nullptr, 0, ex_, stream_), ACLNN_ERR_PARAM_INVALID);
  EXPECT_EQ(N().aclnnCast(Dev(ws_size_), ws_size_ - 1, ex_, stream_), ACLNN_ERR_PARAM_INVALID);
  EXPECT_EQ(Go(ex_), ACLNN_SUCCESS);  // a refused call leaves the executor to a correct one
  Sync();
  ScopedEnv none("TESSERA_SHIM_ACLNN_WORKSPACE", "0");
  ASSERT_EQ(Plan(Tensor(ACL_BF16, 16, src), ACL_FLOAT, Tensor(ACL_FLOAT, 16, dst)), ACLNN_SUCCESS);
  EXPECT_EQ(ws_size_, 0u);
  EXPECT_EQ(N().aclnnCast(nullptr, 0, ex_, stream_), ACLNN_SUCCESS);
  Sync();
}

TEST_F(AclnnShim, AnExecutorRunsOnceUnlessRepeatable) {
  void *src = Dev(256), *dst = Dev(256);
  const size_t live = N().liveExecutors();
  ASSERT_EQ(Plan(Tensor(ACL_BF16, 16, src), ACL_FLOAT, Tensor(ACL_FLOAT, 16, dst)), ACLNN_SUCCESS);
  EXPECT_EQ(N().liveExecutors(), live + 1);
  ASSERT_EQ(Go(ex_), ACLNN_SUCCESS);
  EXPECT_EQ(N().liveExecutors(), live);  // phase 2 freed it
  EXPECT_EQ(Go(ex_), ACLNN_ERR_PARAM_INVALID);
  EXPECT_NE(Err().find("already ran"), std::string::npos) << Err();
  EXPECT_EQ(N().aclDestroyAclOpExecutor(ex_), ACLNN_ERR_PARAM_INVALID);
  EXPECT_EQ(N().aclSetAclOpExecutorRepeatable(ex_), ACLNN_ERR_PARAM_INVALID);
  Sync();
}

TEST_F(AclnnShim, ARepeatableExecutorRunsAgainOnReboundDataUntilDestroyed) {
  void* a = Upload(std::vector<uint16_t>(16, 0x4000));  // bf16 2.0
  void* b = Upload(std::vector<uint16_t>(16, 0xc040));  // bf16 -3.0
  void *out1 = Dev(256), *out2 = Dev(256);
  const size_t live = N().liveExecutors();
  aclTensor *self = Tensor(ACL_BF16, 16, a), *out = Tensor(ACL_FLOAT, 16, out1);
  ASSERT_EQ(Plan(self, ACL_FLOAT, out), ACLNN_SUCCESS);
  ASSERT_EQ(N().aclSetAclOpExecutorRepeatable(ex_), ACLNN_SUCCESS);
  ASSERT_EQ(Go(ex_), ACLNN_SUCCESS);
  ASSERT_EQ(N().aclSetInputTensorAddr(ex_, 0, self, b), ACLNN_SUCCESS);
  ASSERT_EQ(N().aclSetOutputTensorAddr(ex_, 0, out, out2), ACLNN_SUCCESS);
  EXPECT_EQ(N().aclSetInputTensorAddr(ex_, 1, self, b), ACLNN_ERR_PARAM_INVALID);  // Cast has one input
  ASSERT_EQ(Go(ex_), ACLNN_SUCCESS) << Err();
  Sync();
  EXPECT_EQ(Download<float>(out1, 16)[15], 2.0f);
  EXPECT_EQ(Download<float>(out2, 16)[15], -3.0f);
  EXPECT_EQ(N().liveExecutors(), live + 1);  // not freed by phase 2: the caller destroys it
  ASSERT_EQ(N().aclDestroyAclOpExecutor(ex_), ACLNN_SUCCESS);
  EXPECT_EQ(N().liveExecutors(), live);
  EXPECT_EQ(Go(ex_), ACLNN_ERR_PARAM_INVALID);
  // A rebound address is checked again at phase 2.
  ASSERT_EQ(Plan(self, ACL_FLOAT, out), ACLNN_SUCCESS);
  ASSERT_EQ(N().aclSetAclOpExecutorRepeatable(ex_), ACLNN_SUCCESS);
  ASSERT_EQ(N().aclSetInputTensorAddr(ex_, 0, self, static_cast<char*>(b) + 2), ACLNN_SUCCESS);
  EXPECT_EQ(Go(ex_), ACLNN_ERR_PARAM_INVALID);
  EXPECT_NE(Err().find("32-byte aligned"), std::string::npos) << Err();
  EXPECT_EQ(N().aclDestroyAclOpExecutor(ex_), ACLNN_SUCCESS);
}

TEST_F(AclnnShim, CastTakesF32F16AndBf16OfOneShapeOnly) {
  void *src = Dev(256), *dst = Dev(256);
  const size_t live = N().liveExecutors();
  EXPECT_EQ(Plan(Tensor(ACL_INT32, 16, src), ACL_FLOAT, Tensor(ACL_FLOAT, 16, dst)), ACLNN_ERR_PARAM_INVALID);
  EXPECT_NE(Err().find("type 3"), std::string::npos) << Err();
  EXPECT_EQ(Plan(Tensor(ACL_BF16, 16, src), ACL_DOUBLE, Tensor(ACL_DOUBLE, 16, dst)), ACLNN_ERR_PARAM_INVALID);
  EXPECT_EQ(Plan(Tensor(ACL_BF16, 16, src), ACL_FLOAT16, Tensor(ACL_FLOAT, 16, dst)), ACLNN_ERR_PARAM_INVALID);
  EXPECT_NE(Err().find("dtype 1 differs from out's type 0"), std::string::npos) << Err();
  EXPECT_EQ(Plan(Tensor(ACL_BF16, 16, src), ACL_FLOAT, Tensor(ACL_FLOAT, 15, dst)), ACLNN_ERR_PARAM_INVALID);
  EXPECT_EQ(Plan(Tensor(ACL_BF16, 16, src, 0, ACL_FORMAT_NCHW), ACL_FLOAT, Tensor(ACL_FLOAT, 16, dst)),
            ACLNN_ERR_PARAM_INVALID);
  const int64_t dims[2] = {4, 4}, strided[2] = {1, 4}, storage[1] = {16};
  aclTensor* t = N().aclCreateTensor(dims, 2, ACL_BF16, strided, 0, ACL_FORMAT_ND, storage, 1, src);
  tensors_.push_back(t);
  EXPECT_EQ(Plan(t, ACL_FLOAT, Tensor(ACL_FLOAT, 16, dst)), ACLNN_ERR_PARAM_INVALID);  // shapes differ
  EXPECT_EQ(N().liveExecutors(), live);  // no refused call made an executor
}

TEST_F(AclnnShim, NullArgumentsAndUnknownHandles) {
  void *src = Dev(256), *dst = Dev(256);
  aclTensor *s = Tensor(ACL_BF16, 16, src), *o = Tensor(ACL_FLOAT, 16, dst);
  EXPECT_EQ(N().aclnnCastGetWorkspaceSize(nullptr, ACL_FLOAT, o, &ws_size_, &ex_), ACLNN_ERR_PARAM_NULLPTR);
  EXPECT_EQ(N().aclnnCastGetWorkspaceSize(s, ACL_FLOAT, o, nullptr, &ex_), ACLNN_ERR_PARAM_NULLPTR);
  EXPECT_EQ(N().aclnnCastGetWorkspaceSize(s, ACL_FLOAT, o, &ws_size_, nullptr), ACLNN_ERR_PARAM_NULLPTR);
  EXPECT_EQ(N().aclnnCast(nullptr, 0, nullptr, stream_), ACLNN_ERR_PARAM_NULLPTR);
  EXPECT_EQ(N().aclSetAclOpExecutorRepeatable(nullptr), ACLNN_ERR_PARAM_NULLPTR);
  EXPECT_EQ(N().aclDestroyTensor(nullptr), ACLNN_ERR_PARAM_NULLPTR);
  int junk = 0;
  EXPECT_EQ(Plan(reinterpret_cast<aclTensor*>(&junk), ACL_FLOAT, o), ACLNN_ERR_PARAM_INVALID);
  EXPECT_EQ(N().aclDestroyTensor(reinterpret_cast<aclTensor*>(&junk)), ACLNN_ERR_PARAM_INVALID);
  const int64_t dims[1] = {4};
  EXPECT_EQ(N().aclCreateTensor(dims, 1, ACL_FLOAT, nullptr, 0, ACL_FORMAT_ND, dims, 1, dst), nullptr);
  // An unknown stream: the runtime call fails.
  ASSERT_EQ(Plan(s, ACL_FLOAT, o), ACLNN_SUCCESS);
  EXPECT_EQ(N().aclnnCast(Dev(ws_size_), ws_size_, ex_, reinterpret_cast<aclrtStream>(&junk)), ACLNN_ERR_RUNTIME_ERROR);
  EXPECT_EQ(Go(ex_), ACLNN_SUCCESS);
  Sync();
}

TEST_F(AclnnShim, MemoryFreedBeforeTheStreamRanItFailsTheStream) {
  ScopedEnv delay("TESSERA_SHIM_STREAM_DELAY_US", "100000");
  aclrtStream slow = nullptr;
  ASSERT_EQ(N().aclrtCreateStream(&slow), ACL_SUCCESS);
  void *src = nullptr, *dst = Dev(256);
  ASSERT_EQ(N().aclrtMalloc(&src, 256, ACL_MEM_MALLOC_HUGE_FIRST), ACL_SUCCESS);
  ASSERT_EQ(Plan(Tensor(ACL_BF16, 16, src), ACL_FLOAT, Tensor(ACL_FLOAT, 16, dst)), ACLNN_SUCCESS);
  ASSERT_EQ(N().aclnnCast(Dev(ws_size_), ws_size_, ex_, slow), ACLNN_SUCCESS);
  ASSERT_EQ(N().aclrtFree(src), ACL_SUCCESS);  // before the stream reaches the operator
  EXPECT_EQ(N().aclrtSynchronizeStream(slow), ACL_ERROR_RT_AICORE_EXCEPTION);
  N().aclrtDestroyStream(slow);
}

TEST_F(AclnnShim, InplaceMulsScalesF32Only) {
  void* d = Upload(std::vector<float>{1.0f, -6.0f, 0.75f, 3.0f});
  float quarter = 0.25f;
  aclScalar* s = N().aclCreateScalar(&quarter, ACL_FLOAT);
  ASSERT_NE(s, nullptr);
  aclTensor* t = Tensor(ACL_FLOAT, 4, d);
  ASSERT_EQ(N().aclnnInplaceMulsGetWorkspaceSize(t, s, &ws_size_, &ex_), ACLNN_SUCCESS);
  EXPECT_EQ(N().aclnnCast(Dev(ws_size_), ws_size_, ex_, stream_), ACLNN_ERR_PARAM_INVALID);  // not Cast's executor
  ASSERT_EQ(N().aclnnInplaceMuls(Dev(ws_size_), ws_size_, ex_, stream_), ACLNN_SUCCESS);
  Sync();
  EXPECT_EQ(Download<float>(d, 4), (std::vector<float>{0.25f, -1.5f, 0.1875f, 0.75f}));
  EXPECT_EQ(N().aclnnInplaceMulsGetWorkspaceSize(Tensor(ACL_BF16, 4, d), s, &ws_size_, &ex_), ACLNN_ERR_PARAM_INVALID);
  EXPECT_EQ(N().aclDestroyScalar(s), ACLNN_SUCCESS);
}

TEST_F(AclnnShim, AclnnInitAndFinalizeOncePerProcess) {
  EXPECT_EQ(N().aclnnInit(nullptr), ACLNN_SUCCESS);
  EXPECT_EQ(N().aclnnInit(nullptr), ACLNN_ERR_PARAM_INVALID);
  EXPECT_EQ(N().aclnnFinalize(), ACLNN_SUCCESS);
  EXPECT_EQ(N().aclnnFinalize(), ACLNN_ERR_PARAM_INVALID);
}

}  // namespace
