/* tests/shims/mccl_abi.h: the subset of Moore Threads' MCCL API (libmccl.so) that the test-only host shim
 * implements: our own declarations. MCCL is NCCL's API under the prefix "mccl" (so it fits one row of
 * src/comm/ccl/ccl.hpp's kCclTable; every CclLibrary member is declared below).
 *
 * mccl.h ships with the MUSA SDK and is not published. What IS public:
 *  - NAMES and CALL SHAPES: MooreThreads/torch_musa at commit 8b583b3f2fd0d9d3d9e7 calls every function here
 *    with NCCL's argument order ("tm:FILE:N"; FILE is under torch_musa/csrc/distributed/);
 *  - NUMBERS: liruyun-mt/vllm_musa-0.6.6 vllm/distributed/device_communicators/pymccl.py at commit 29a236fb
 *    ("pymccl:") drives libmccl through ctypes with the data-type and op numbers below and a 128-byte id.
 *    That file is a port of vLLM's pynccl that kept NCCL's numbers, so it corroborates rather than proves them;
 *  - SONAME: MooreThreads/torchada patches ctypes.CDLL("libmccl.so"); a public vLLM launch script sets
 *    VLLM_NCCL_SO_PATH=/usr/local/musa/lib/libmccl.so.2 (MUSA_HOME=/usr/local/musa), so the file is libmccl.so.2.
 * Everything else is an ASSUMPTION taken from NCCL's public nccl.h (NVIDIA's, as installed with CUDA 13.0 here:
 * NCCL 2.28.9; "nccl:N" = line N) and marked so. Beware: MetaX's MACA library is also called "MCCL" and also uses
 * the prefix "mccl" (its mccl.h: mcclUnhandledMacaError, mcclMax = 2) -- a different library, not this one. */
#ifndef TESSERA_TESTS_SHIMS_MCCL_ABI_H_
#define TESSERA_TESTS_SHIMS_MCCL_ABI_H_

#include <stddef.h>

#include "musa_abi.h" /* musaStream_t */

#ifdef __cplusplus
extern "C" {
#endif

#define MCCL_ABI_EXPORT __attribute__((visibility("default")))

typedef struct mcclComm* mcclComm_t; /* tm:MCCLUtils.h:181 (mcclComm_{nullptr}); ASSUMPTION: as nccl:34 */

#define MCCL_UNIQUE_ID_BYTES 128 /* name: tm:ProcessGroupMCCL.cpp:144; 128: pymccl (c_byte * 128), nccl:38 */
typedef struct {
  char internal[MCCL_UNIQUE_ID_BYTES];
} mcclUniqueId; /* tm:MCCLUtils.h:110 passes it by value, as NCCL does */

typedef enum {                  /* names mcclSuccess/SystemError/InvalidUsage/InProgress: tm:MCCLUtils.cpp:94-190 */
               mcclSuccess = 0, /* pymccl: `if result != 0` is an error; nccl:42 */
               mcclUnhandledMusaError = 1, /* ASSUMPTION: name and value (nccl:43 ncclUnhandledCudaError) */
               mcclSystemError = 2,        /* ASSUMPTION: value (nccl:44) */
               mcclInternalError = 3,      /* ASSUMPTION: name and value (nccl:45) */
               mcclInvalidArgument = 4,    /* ASSUMPTION: name and value (nccl:46) */
               mcclInvalidUsage = 5,       /* ASSUMPTION: value (nccl:47) */
               mcclRemoteError = 6,        /* ASSUMPTION: name and value (nccl:48) */
               mcclInProgress = 7,         /* ASSUMPTION: value (nccl:49) */
               mcclNumResults = 8          /* ASSUMPTION (nccl:50) */
} mcclResult_t;

/* names: tm:ProcessGroupMCCL.cpp:44-48; values: pymccl mcclRedOpTypeEnum (= NCCL's) */
typedef enum { mcclSum = 0, mcclProd = 1, mcclMax = 2, mcclMin = 3, mcclAvg = 4, mcclNumOps = 5 } mcclRedOp_t;

/* names: tm:ProcessGroupMCCL.cpp:26-35; values: pymccl mcclDataTypeEnum (= NCCL's) */
typedef enum {
  mcclInt8 = 0,
  mcclUint8 = 1,
  mcclInt32 = 2,
  mcclUint32 = 3,
  mcclInt64 = 4,
  mcclUint64 = 5,
  mcclFloat16 = 6,
  mcclFloat32 = 7,
  mcclFloat64 = 8,
  mcclBfloat16 = 9, /* torch_musa guards it with MCCL_BF16_SUPPORTED */
  mcclNumTypes = 10
  /* torch_musa also names mcclFp8E5M2 / mcclFp8E4M3 (under MCCL_FP8_SUPPORTED): values unpublished,
     not implemented. */
} mcclDataType_t;
#define mcclChar mcclInt8     /* pymccl */
#define mcclInt mcclInt32     /* pymccl */
#define mcclHalf mcclFloat16  /* pymccl */
#define mcclFloat mcclFloat32 /* tm:ProcessGroupMCCL.cpp:26, pymccl */
#define mcclDouble mcclFloat64

/* Signatures: NCCL's (the nccl:N of each ncclX), as torch_musa calls them at tm:FILE:N. */
MCCL_ABI_EXPORT mcclResult_t mcclGetVersion(int* version);            /* tm:MCCLUtils.cpp:213 */
MCCL_ABI_EXPORT mcclResult_t mcclGetUniqueId(mcclUniqueId* uniqueId); /* tm:ProcessGroupMCCL.cpp:2152 */
MCCL_ABI_EXPORT mcclResult_t mcclCommInitRank(mcclComm_t* comm, int nranks, mcclUniqueId commId,
                                              int rank);       /* tm:MCCLUtils.cpp:49 */
MCCL_ABI_EXPORT mcclResult_t mcclCommDestroy(mcclComm_t comm); /* tm:MCCLUtils.cpp:126 */
MCCL_ABI_EXPORT mcclResult_t mcclCommAbort(mcclComm_t comm);   /* tm:MCCLUtils.cpp:20 */
MCCL_ABI_EXPORT mcclResult_t mcclCommGetAsyncError(mcclComm_t comm,
                                                   mcclResult_t* asyncError);    /* tm:MCCLUtils.cpp:176 */
MCCL_ABI_EXPORT mcclResult_t mcclCommCount(const mcclComm_t comm, int* count);   /* tm:ProcessGroupMCCL.cpp:4030 */
MCCL_ABI_EXPORT mcclResult_t mcclCommUserRank(const mcclComm_t comm, int* rank); /* tm:ProcessGroupMCCL.cpp:4544 */
MCCL_ABI_EXPORT const char* mcclGetErrorString(mcclResult_t result);             /* tm:MCCLUtils.cpp:230 */
/* ASSUMPTION: torch_musa does not call it; NCCL has ncclGetLastError(comm) (nccl:239). */
MCCL_ABI_EXPORT const char* mcclGetLastError(mcclComm_t comm);
MCCL_ABI_EXPORT mcclResult_t mcclAllReduce(const void* sendbuff, void* recvbuff, size_t count, mcclDataType_t datatype,
                                           mcclRedOp_t op, mcclComm_t comm,
                                           musaStream_t stream); /* tm:ProcessGroupMCCL.cpp:3264 */
MCCL_ABI_EXPORT mcclResult_t mcclReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount,
                                               mcclDataType_t datatype, mcclRedOp_t op, mcclComm_t comm,
                                               musaStream_t stream); /* tm:ProcessGroupMCCL.cpp:3750 */
MCCL_ABI_EXPORT mcclResult_t mcclAllGather(const void* sendbuff, void* recvbuff, size_t sendcount,
                                           mcclDataType_t datatype, mcclComm_t comm,
                                           musaStream_t stream); /* tm:ProcessGroupMCCL.cpp:3605 */
MCCL_ABI_EXPORT mcclResult_t mcclBroadcast(const void* sendbuff, void* recvbuff, size_t count, mcclDataType_t datatype,
                                           int root, mcclComm_t comm,
                                           musaStream_t stream); /* tm:ProcessGroupMCCL.cpp:3446 */
MCCL_ABI_EXPORT mcclResult_t mcclSend(const void* sendbuff, size_t count, mcclDataType_t datatype, int peer,
                                      mcclComm_t comm, musaStream_t stream); /* tm:ProcessGroupMCCL.cpp:4037 */
MCCL_ABI_EXPORT mcclResult_t mcclRecv(void* recvbuff, size_t count, mcclDataType_t datatype, int peer, mcclComm_t comm,
                                      musaStream_t stream); /* tm:ProcessGroupMCCL.cpp:4039 */
MCCL_ABI_EXPORT mcclResult_t mcclGroupStart(void);          /* tm:ProcessGroupMCCL.cpp:2198 */
MCCL_ABI_EXPORT mcclResult_t mcclGroupEnd(void);            /* tm:ProcessGroupMCCL.cpp:2101 */

#ifdef __cplusplus
}
#endif
#endif /* TESSERA_TESTS_SHIMS_MCCL_ABI_H_ */
