// tests/ccl/ccl_runtime: the device runtime a CCL conformance rank needs, per row: host memory (the fake NCCL),
// the ACL shim (HCCL) or the MUSA shim (MCCL), dlopened from the shims' directory and called through the
// declarations of tests/shims/acl_abi.h and musa_abi.h (read only). Device memory of the shims is not
// host-dereferenceable: every value travels through the runtime's copies.
#pragma once

#include <dlfcn.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <utility>

#include "shims/acl_abi.h"
#include "shims/musa_abi.h"

namespace tessera::ccltest {

class Runtime {
 public:
  virtual ~Runtime() = default;
  virtual std::string Init(int device) = 0;  // "" or why not
  virtual void* Malloc(size_t bytes) = 0;
  virtual bool ToDevice(void* dst, const void* src, size_t bytes) = 0;
  virtual bool ToHost(void* dst, const void* src, size_t bytes) = 0;
  virtual void* Stream() = 0;
  virtual bool Sync(void* stream) = 0;
  virtual void Free(void* p) = 0;
};

template <typename F>
F Sym(void* h, const char* name) {
  void* p = h ? dlsym(h, name) : nullptr;
  if (!p) std::fprintf(stderr, "runtime symbol %s missing\n", name);
  return reinterpret_cast<F>(p);
}

class HostRuntime : public Runtime {
 public:
  std::string Init(int) override { return ""; }
  void* Malloc(size_t b) override { return std::calloc(b ? b : 1, 1); }
  bool ToDevice(void* d, const void* s, size_t b) override { return std::memcpy(d, s, b), true; }
  bool ToHost(void* d, const void* s, size_t b) override { return std::memcpy(d, s, b), true; }
  void* Stream() override { return nullptr; }
  bool Sync(void*) override { return true; }
  void Free(void* p) override { std::free(p); }
};

class AclRuntime : public Runtime {
 public:
  explicit AclRuntime(const char* path) : h_(dlopen(path, RTLD_NOW | RTLD_GLOBAL)) {}
  std::string Init(int device) override {
    if (!h_) return std::string("cannot load the ACL shim: ") + dlerror();
    auto init = Sym<decltype(&aclInit)>(h_, "aclInit");
    auto set = Sym<decltype(&aclrtSetDevice)>(h_, "aclrtSetDevice");
    int e = init(nullptr);
    if (e != ACL_SUCCESS && e != ACL_ERROR_REPEAT_INITIALIZE) return "aclInit failed: " + std::to_string(e);
    e = set(device);
    return e == ACL_SUCCESS ? "" : "aclrtSetDevice failed: " + std::to_string(e);
  }
  void* Malloc(size_t b) override {
    void* p = nullptr;
    return Sym<decltype(&aclrtMalloc)>(h_, "aclrtMalloc")(&p, b ? b : 1, ACL_MEM_MALLOC_HUGE_FIRST) == 0 ? p : nullptr;
  }
  bool ToDevice(void* d, const void* s, size_t b) override {
    return Sym<decltype(&aclrtMemcpy)>(h_, "aclrtMemcpy")(d, b, s, b, ACL_MEMCPY_HOST_TO_DEVICE) == 0;
  }
  bool ToHost(void* d, const void* s, size_t b) override {
    return Sym<decltype(&aclrtMemcpy)>(h_, "aclrtMemcpy")(d, b, s, b, ACL_MEMCPY_DEVICE_TO_HOST) == 0;
  }
  void* Stream() override {
    aclrtStream s = nullptr;
    return Sym<decltype(&aclrtCreateStream)>(h_, "aclrtCreateStream")(&s) == 0 ? s : nullptr;
  }
  bool Sync(void* s) override { return Sym<decltype(&aclrtSynchronizeStream)>(h_, "aclrtSynchronizeStream")(s) == 0; }
  void Free(void* p) override { Sym<decltype(&aclrtFree)>(h_, "aclrtFree")(p); }

 private:
  void* h_;
};

// CUDA's runtime API under a prefix: the MUSA shim ("musa") and the CoreX shim ("cuda", corex_abi.h).
class MusaRuntime : public Runtime {
 public:
  explicit MusaRuntime(const char* path, std::string prefix = "musa")
      : h_(dlopen(path, RTLD_NOW | RTLD_GLOBAL)), p_(std::move(prefix)) {}
  std::string Init(int device) override {
    if (!h_) return "cannot load the " + p_ + " shim: " + dlerror();
    int e = Sym<decltype(&musaSetDevice)>(h_, S("SetDevice"))(device);
    return e == 0 ? "" : p_ + "SetDevice failed: " + std::to_string(e);
  }
  void* Malloc(size_t b) override {
    void* p = nullptr;
    return Sym<decltype(&musaMalloc)>(h_, S("Malloc"))(&p, b ? b : 1) == 0 ? p : nullptr;
  }
  bool ToDevice(void* d, const void* s, size_t b) override {
    return Sym<decltype(&musaMemcpy)>(h_, S("Memcpy"))(d, s, b, musaMemcpyHostToDevice) == 0;
  }
  bool ToHost(void* d, const void* s, size_t b) override {
    return Sym<decltype(&musaMemcpy)>(h_, S("Memcpy"))(d, s, b, musaMemcpyDeviceToHost) == 0;
  }
  void* Stream() override {
    musaStream_t s = nullptr;
    return Sym<decltype(&musaStreamCreate)>(h_, S("StreamCreate"))(&s) == 0 ? s : nullptr;
  }
  bool Sync(void* s) override {
    return Sym<decltype(&musaStreamSynchronize)>(h_, S("StreamSynchronize"))(static_cast<musaStream_t>(s)) == 0;
  }
  void Free(void* p) override { Sym<decltype(&musaFree)>(h_, S("Free"))(p); }

 private:
  const char* S(const char* suffix) {
    name_ = p_ + suffix;
    return name_.c_str();
  }
  void* h_;
  std::string p_;
  std::string name_;
};

}  // namespace tessera::ccltest
