/* tests/shims/corex_abi.h: the host shim of Iluvatar CoreX's runtime (libcudart.so) and collective library
 * (libnccl.so), the CoreX SDK's lib directory, as the MUSA and MCCL shims' sources under CUDA's and NCCL's names.
 * Force-included (-include) before musa_shim.cpp / mccl_shim.cpp for tessera_shim_corex_cudart and
 * tessera_shim_corex_nccl (CMakeLists.txt): every exported symbol is renamed, nothing else changes.
 *
 * What is published (FlagOpen/FlagCX, the Iluvatar adaptor, commit 6e336e33):
 *  - the API is CUDA's runtime API and NCCL's, under their own names: flagcx/adaptor/iluvatar_corex_adaptor.h
 *    includes <cuda.h>, <cuda_runtime.h> and "nccl.h"; ixcuda_adaptor.cc calls cudaMalloc, cudaMemcpyAsync, ...;
 *    ixnccl_adaptor.cc calls ncclAllReduce, ncclGroupStart, ... and casts its data types and ops to ncclDataType_t /
 *    ncclRedOp_t, so their numbers are NCCL's;
 *  - the files: FlagCX's Makefile (commit 0f337f76) links -lcudart -lcuda from $(DEVICE_HOME)/lib and -lnccl from
 *    $(CCL_HOME)/lib, both /usr/local/corex by default: lib, not lib64.
 * So the values and signatures are CUDA's and NCCL's (musa_abi.h and mccl_abi.h cite NVIDIA's headers for each);
 * the MUSA/MCCL shims already model those. ASSUMED (not published): the visible-devices variable is
 * CUDA_VISIBLE_DEVICES (COREX_SHIM_VISIBLE_ENV below; common/vendor.hpp's corex row says so too). */
#ifndef TESSERA_TESTS_SHIMS_COREX_ABI_H_
#define TESSERA_TESTS_SHIMS_COREX_ABI_H_

#define TSHIM_VISIBLE_ENV "CUDA_VISIBLE_DEVICES"
#define tesseraMusaShimHooks tesseraCorexShimHooks

/* The runtime: musa_abi.h's functions under CUDA's names. */
#define musaDeviceSynchronize cudaDeviceSynchronize
#define musaEventCreateWithFlags cudaEventCreateWithFlags
#define musaEventDestroy cudaEventDestroy
#define musaEventQuery cudaEventQuery
#define musaEventRecord cudaEventRecord
#define musaEventSynchronize cudaEventSynchronize
#define musaFree cudaFree
#define musaFreeHost cudaFreeHost
#define musaGetDevice cudaGetDevice
#define musaGetDeviceCount cudaGetDeviceCount
#define musaGetErrorString cudaGetErrorString
#define musaGetLastError cudaGetLastError
#define musaHostAlloc cudaHostAlloc
#define musaMalloc cudaMalloc
#define musaMallocHost cudaMallocHost
#define musaMemcpy cudaMemcpy
#define musaMemcpyAsync cudaMemcpyAsync
#define musaMemset cudaMemset
#define musaMemsetAsync cudaMemsetAsync
#define musaPeekAtLastError cudaPeekAtLastError
#define musaPointerGetAttributes cudaPointerGetAttributes
#define musaSetDevice cudaSetDevice
#define musaStreamCreate cudaStreamCreate
#define musaStreamCreateWithFlags cudaStreamCreateWithFlags
#define musaStreamDestroy cudaStreamDestroy
#define musaStreamQuery cudaStreamQuery
#define musaStreamSynchronize cudaStreamSynchronize
#define musaStreamWaitEvent cudaStreamWaitEvent

/* The collective library: mccl_abi.h's functions under NCCL's names. */
#define mcclAllGather ncclAllGather
#define mcclAllReduce ncclAllReduce
#define mcclBroadcast ncclBroadcast
#define mcclCommAbort ncclCommAbort
#define mcclCommCount ncclCommCount
#define mcclCommDestroy ncclCommDestroy
#define mcclCommGetAsyncError ncclCommGetAsyncError
#define mcclCommInitRank ncclCommInitRank
#define mcclCommUserRank ncclCommUserRank
#define mcclGetErrorString ncclGetErrorString
#define mcclGetLastError ncclGetLastError
#define mcclGetUniqueId ncclGetUniqueId
#define mcclGetVersion ncclGetVersion
#define mcclGroupEnd ncclGroupEnd
#define mcclGroupStart ncclGroupStart
#define mcclRecv ncclRecv
#define mcclReduceScatter ncclReduceScatter
#define mcclSend ncclSend

#endif  // TESSERA_TESTS_SHIMS_COREX_ABI_H_
