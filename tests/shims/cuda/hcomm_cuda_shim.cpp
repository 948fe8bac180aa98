// tests/shims/cuda/hcomm_cuda_shim: libhcomm.so beside the NCCL-backed libhccl.so, the HCCL group calls as torch_npu
// loads them (torch_npu/csrc/distributed/HcclCompile.h registers HcclGroupStart and HcclGroupEnd under "libhcomm";
// declarations: ../hccl_abi.h, hccl:511, 516). As ../hcomm_shim.cpp, the state lives in libhccl.so: these forward to
// its HcclGroupStart / HcclGroupEnd (ncclGroupStart / ncclGroupEnd there, which also launch the group's operations
// and remember them for HcclCommDestroy). The libhccl.so meant is the one that defines HcclGetErrorString for this
// library (its dependency); its own group symbols are asked for, since calling the names directly would call these
// functions again. Exports nothing but the two calls.
#include <dlfcn.h>

#include "../hccl_abi.h"

namespace {
HcclResult Forward(const char* name) {
  static void* const hccl = [] {
    Dl_info info{};
    const bool found = dladdr(reinterpret_cast<void*>(&HcclGetErrorString), &info) && info.dli_fname;
    return found ? dlopen(info.dli_fname, RTLD_LAZY | RTLD_NOLOAD) : nullptr;
  }();
  const auto fn = hccl ? reinterpret_cast<HcclResult (*)()>(dlsym(hccl, name)) : nullptr;
  return fn ? fn() : HCCL_E_NOT_FOUND;  // code: shim's choice (libhccl.so is linked, so not expected)
}
}  // namespace

extern "C" {
HCCL_ABI_EXPORT HcclResult HcclGroupStart() { return Forward("HcclGroupStart"); }
HCCL_ABI_EXPORT HcclResult HcclGroupEnd() { return Forward("HcclGroupEnd"); }
}
