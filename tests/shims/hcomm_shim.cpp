// tests/shims/hcomm_shim: libhcomm.so, the HCCL group calls as torch_npu loads them (torch_npu/csrc/distributed/
// HcclCompile.h registers HcclGroupStart and HcclGroupEnd under "libhcomm"); the state lives in libhccl.so.
#include "hccl_abi.h"

extern "C" HcclResult tesseraHcclShimGroup(int start);  // libhccl.so

extern "C" {
HCCL_ABI_EXPORT HcclResult HcclGroupStart() { return tesseraHcclShimGroup(1); }
HCCL_ABI_EXPORT HcclResult HcclGroupEnd() { return tesseraHcclShimGroup(0); }
}
