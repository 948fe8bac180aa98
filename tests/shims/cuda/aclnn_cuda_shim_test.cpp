// tests/shims/cuda/aclnn_cuda_shim_test: the CUDA-backed aclnn shims (libnnopbase.so, libopapi.so over the CUDA
// libascendcl.so of this folder), linked as an application links CANN: Cast on the GPU widens every bf16 and f16
// bit pattern exactly and narrows f32 to nearest even bit for bit as common/dtype.hpp does (subnormals kept: no
// flush to zero), in stream order; and the rules the host shims keep, with the same codes. Label gpu: it skips,
// saying why, where no CUDA device is visible.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "../aclnn_abi.h"
#include "common/dtype.hpp"

namespace {

uint32_t Bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

class AclnnCudaShim : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(aclInit(nullptr), ACL_SUCCESS);
    uint32_t n = 0;
    if (aclrtGetDeviceCount(&n) != ACL_SUCCESS || n == 0) GTEST_SKIP() << "no CUDA device visible";
    ASSERT_EQ(aclrtSetDevice(0), ACL_SUCCESS);
    ASSERT_EQ(aclrtCreateStream(&stream_), ACL_SUCCESS);
  }
  void TearDown() override {
    for (aclTensor* t : tensors_) aclDestroyTensor(t);
    for (void* p : dev_) aclrtFree(p);
    if (stream_) aclrtDestroyStream(stream_);
  }
  void* Dev(size_t n) {
    void* p = nullptr;
    EXPECT_EQ(aclrtMalloc(&p, n, ACL_MEM_MALLOC_HUGE_FIRST), ACL_SUCCESS);
    dev_.push_back(p);
    return p;
  }
  aclTensor* Tensor(aclDataType t, int64_t n, void* data) {
    const int64_t dims[1] = {n}, stride[1] = {1};
    aclTensor* x = aclCreateTensor(dims, 1, t, stride, 0, ACL_FORMAT_ND, dims, 1, data);
    tensors_.push_back(x);
    return x;
  }
  // Cast n elements of `in` (host data of type `from`) to `to`, in stream order; the result's bytes.
  std::vector<char> Cast(aclDataType from, const void* in, size_t in_bytes, aclDataType to, size_t out_bytes,
                         int64_t n) {
    void *src = Dev(in_bytes), *dst = Dev(out_bytes);
    EXPECT_EQ(aclrtMemcpyAsync(src, in_bytes, in, in_bytes, ACL_MEMCPY_HOST_TO_DEVICE, stream_), ACL_SUCCESS);
    uint64_t ws_size = 0;
    aclOpExecutor* ex = nullptr;
    EXPECT_EQ(aclnnCastGetWorkspaceSize(Tensor(from, n, src), to, Tensor(to, n, dst), &ws_size, &ex), ACLNN_SUCCESS);
    EXPECT_EQ(aclnnCast(ws_size ? Dev(ws_size) : nullptr, ws_size, ex, stream_), ACLNN_SUCCESS);
    std::vector<char> out(out_bytes);
    EXPECT_EQ(aclrtSynchronizeStream(stream_), ACL_SUCCESS);  // the pageable copy back is synchronous
    EXPECT_EQ(aclrtMemcpy(out.data(), out_bytes, dst, out_bytes, ACL_MEMCPY_DEVICE_TO_HOST), ACL_SUCCESS);
    return out;
  }
  aclrtStream stream_ = nullptr;
  std::vector<aclTensor*> tensors_;
  std::vector<void*> dev_;
};

TEST_F(AclnnCudaShim, WidensEveryBf16AndF16BitPatternExactly) {
  std::vector<uint16_t> all(65536);
  for (uint32_t i = 0; i < 65536; ++i) all[i] = static_cast<uint16_t>(i);
  void* pinned = nullptr;  // an asynchronous copy needs aclrtMallocHost memory
  ASSERT_EQ(aclrtMallocHost(&pinned, all.size() * 2), ACL_SUCCESS);
  std::memcpy(pinned, all.data(), all.size() * 2);
  for (aclDataType t : {ACL_BF16, ACL_FLOAT16}) {
    const std::vector<char> got = Cast(t, pinned, all.size() * 2, ACL_FLOAT, all.size() * 4, 65536);
    for (uint32_t i = 0; i < 65536; ++i) {
      float g;
      std::memcpy(&g, got.data() + i * 4, 4);
      const auto h = static_cast<uint16_t>(i);
      const float want = t == ACL_BF16 ? tessera::Bf16ToF32(h) : tessera::F16ToF32(h);
      if (std::isnan(want)) {
        ASSERT_TRUE(std::isnan(g)) << "type " << t << " bits " << i;
        continue;
      }
      ASSERT_EQ(Bits(g), Bits(want)) << "type " << t << " bits " << i;
    }
  }
  aclrtFreeHost(pinned);
}

TEST_F(AclnnCudaShim, NarrowsF32ToNearestEvenAsTheHostDoesSubnormalsIncluded) {
  std::mt19937 rng(7);
  std::vector<float> in;
  for (int i = 0; i < (1 << 16); ++i) {  // random bit patterns (NaNs dropped), ties and subnormals
    float f;
    const uint32_t u = rng();
    std::memcpy(&f, &u, 4);
    if (!std::isnan(f)) in.push_back(f);
  }
  for (float f : {1.0f + 0x1p-8f, 1.0f + 3 * 0x1p-8f, 1.0f + 0x1p-11f, 0x1p-130f, -0x1p-149f, 65520.0f})
    in.push_back(f);
  void* pinned = nullptr;
  ASSERT_EQ(aclrtMallocHost(&pinned, in.size() * 4), ACL_SUCCESS);
  std::memcpy(pinned, in.data(), in.size() * 4);
  const auto n = static_cast<int64_t>(in.size());
  for (aclDataType t : {ACL_BF16, ACL_FLOAT16}) {
    const std::vector<char> got = Cast(ACL_FLOAT, pinned, in.size() * 4, t, in.size() * 2, n);
    for (size_t i = 0; i < in.size(); ++i) {
      uint16_t g;
      std::memcpy(&g, got.data() + i * 2, 2);
      ASSERT_EQ(g, t == ACL_BF16 ? tessera::F32ToBf16(in[i]) : tessera::F32ToF16(in[i]))
          << "type " << t << " f32 bits " << std::hex << Bits(in[i]);
    }
  }
  aclrtFreeHost(pinned);
}

TEST_F(AclnnCudaShim, TheRulesAndCodesOfTheHostShims) {
  char* d = static_cast<char*>(Dev(4096));
  uint64_t ws = 0;
  aclOpExecutor* ex = nullptr;
  // 32-byte alignment; device memory.
  EXPECT_EQ(
      aclnnCastGetWorkspaceSize(Tensor(ACL_BF16, 16, d + 16), ACL_FLOAT, Tensor(ACL_FLOAT, 16, d + 1024), &ws, &ex),
      ACLNN_ERR_PARAM_INVALID);
  alignas(64) static uint16_t host[64];
  EXPECT_EQ(aclnnCastGetWorkspaceSize(Tensor(ACL_BF16, 16, host), ACL_FLOAT, Tensor(ACL_FLOAT, 16, d), &ws, &ex),
            ACLNN_ERR_PARAM_INVALID);
  // Types.
  EXPECT_EQ(aclnnCastGetWorkspaceSize(Tensor(ACL_INT32, 16, d), ACL_FLOAT, Tensor(ACL_FLOAT, 16, d + 1024), &ws, &ex),
            ACLNN_ERR_PARAM_INVALID);
  // Once unless repeatable; workspace size; unknown stream.
  aclTensor *self = Tensor(ACL_BF16, 16, d), *out = Tensor(ACL_FLOAT, 16, d + 1024);
  ASSERT_EQ(aclnnCastGetWorkspaceSize(self, ACL_FLOAT, out, &ws, &ex), ACLNN_SUCCESS);
  void* w = ws ? Dev(ws) : nullptr;
  if (ws) {
    EXPECT_EQ(aclnnCast(w, ws - 1, ex, stream_), ACLNN_ERR_PARAM_INVALID);
  }
  int junk = 0;
  EXPECT_EQ(aclnnCast(w, ws, ex, reinterpret_cast<aclrtStream>(&junk)), ACLNN_ERR_RUNTIME_ERROR);
  EXPECT_EQ(aclnnCast(w, ws, ex, stream_), ACLNN_SUCCESS);
  EXPECT_EQ(aclnnCast(w, ws, ex, stream_), ACLNN_ERR_PARAM_INVALID);
  // Repeatable, rebound, destroyed.
  ASSERT_EQ(aclnnCastGetWorkspaceSize(self, ACL_FLOAT, out, &ws, &ex), ACLNN_SUCCESS);
  ASSERT_EQ(aclSetAclOpExecutorRepeatable(ex), ACLNN_SUCCESS);
  EXPECT_EQ(aclnnCast(w, ws, ex, stream_), ACLNN_SUCCESS);
  EXPECT_EQ(aclSetOutputTensorAddr(ex, 0, out, d + 2048), ACLNN_SUCCESS);
  EXPECT_EQ(aclnnCast(w, ws, ex, stream_), ACLNN_SUCCESS);
  EXPECT_EQ(aclDestroyAclOpExecutor(ex), ACLNN_SUCCESS);
  EXPECT_EQ(aclnnCast(w, ws, ex, stream_), ACLNN_ERR_PARAM_INVALID);
  EXPECT_EQ(aclrtSynchronizeStream(stream_), ACL_SUCCESS);
}

}  // namespace
