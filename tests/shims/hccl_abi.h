/* tests/shims/hccl_abi.h: the subset of Huawei's HCCL API (libhccl.so, libhcomm.so) that the test-only host
 * shim implements, declared from the public headers: our own declarations, not copies.
 *
 * Source, unless a line says otherwise: Ascend/pytorch (github.com/Ascend/pytorch) third_party/hccl/inc/hccl/
 * hccl_types.h ("types:N") and hccl.h ("hccl:N"), identical at commit c4840e3c095952083edcaa4a92f2ae7139bd7c51
 * and at master 9e73e708. Which library exports what: torch_npu/csrc/distributed/HcclCompile.h (master)
 * registers HcclGetRootInfo, HcclCommInitRootInfo, HcclAllReduce, ... under "libhccl" and only
 * HcclGroupStart/HcclGroupEnd under "libhcomm"; FunctionLoader.cpp dlopens name + ".so". */
#ifndef TESSERA_TESTS_SHIMS_HCCL_ABI_H_
#define TESSERA_TESTS_SHIMS_HCCL_ABI_H_

#include <stdint.h>

#include "acl_abi.h" /* aclrtStream (hccl.h includes acl.h for it) */

#ifdef __cplusplus
extern "C" {
#endif

#define HCCL_ABI_EXPORT __attribute__((visibility("default")))

/* types:23-49 */
typedef enum {
  HCCL_SUCCESS = 0,
  HCCL_E_PARA = 1,
  HCCL_E_PTR = 2,
  HCCL_E_MEMORY = 3,
  HCCL_E_INTERNAL = 4,
  HCCL_E_NOT_SUPPORT = 5,
  HCCL_E_NOT_FOUND = 6,
  HCCL_E_UNAVAIL = 7,
  HCCL_E_SYSCALL = 8,
  HCCL_E_TIMEOUT = 9,
  HCCL_E_OPEN_FILE_FAILURE = 10,
  HCCL_E_TCP_CONNECT = 11,
  HCCL_E_ROCE_CONNECT = 12,
  HCCL_E_TCP_TRANSFER = 13,
  HCCL_E_ROCE_TRANSFER = 14,
  HCCL_E_RUNTIME = 15,
  HCCL_E_DRV = 16,
  HCCL_E_PROFILING = 17,
  HCCL_E_CCE = 18,
  HCCL_E_NETWORK = 19,
  HCCL_E_AGAIN = 20,
  HCCL_E_REMOTE = 21,
  HCCL_E_SUSPENDING = 22,
  HCCL_E_OPRETRY_FAIL = 23,
  HCCL_E_OOM = 24,
  HCCL_E_RESERVED /* 25 */
} HcclResult;

typedef void* HcclComm; /* types:55 */

/* types:60-66: no avg */
typedef enum {
  HCCL_REDUCE_SUM = 0,
  HCCL_REDUCE_PROD = 1,
  HCCL_REDUCE_MAX = 2,
  HCCL_REDUCE_MIN = 3,
  HCCL_REDUCE_RESERVED = 255
} HcclReduceOp;

/* types:71-90: HCCL's numbers, not NCCL's */
typedef enum {
  HCCL_DATA_TYPE_INT8 = 0,
  HCCL_DATA_TYPE_INT16 = 1,
  HCCL_DATA_TYPE_INT32 = 2,
  HCCL_DATA_TYPE_FP16 = 3,
  HCCL_DATA_TYPE_FP32 = 4,
  HCCL_DATA_TYPE_INT64 = 5,
  HCCL_DATA_TYPE_UINT64 = 6,
  HCCL_DATA_TYPE_UINT8 = 7,
  HCCL_DATA_TYPE_UINT16 = 8,
  HCCL_DATA_TYPE_UINT32 = 9,
  HCCL_DATA_TYPE_FP64 = 10,
  HCCL_DATA_TYPE_BFP16 = 11,
  HCCL_DATA_TYPE_INT128 = 12,
  HCCL_DATA_TYPE_HIF8 = 14,
  HCCL_DATA_TYPE_FP8E4M3 = 15,
  HCCL_DATA_TYPE_FP8E5M2 = 16,
  HCCL_DATA_TYPE_FP8E8M0 = 17,
  HCCL_DATA_TYPE_RESERVED = 255
} HcclDataType;

#define HCCL_ROOT_INFO_BYTES 4108 /* types:104 (a const uint32_t there) */
typedef struct HcclRootInfoDef {  /* types:114-116 */
  char internal[HCCL_ROOT_INFO_BYTES];
} HcclRootInfo;

HCCL_ABI_EXPORT HcclResult HcclGetRootInfo(HcclRootInfo* rootInfo); /* hccl:67 */
HCCL_ABI_EXPORT HcclResult HcclCommInitRootInfo(uint32_t nRanks, const HcclRootInfo* rootInfo, uint32_t rank,
                                                HcclComm* comm); /* hccl:79 */
HCCL_ABI_EXPORT HcclResult HcclAllReduce(void* sendBuf, void* recvBuf, uint64_t count, HcclDataType dataType,
                                         HcclReduceOp op, HcclComm comm, aclrtStream stream); /* hccl:131 */
HCCL_ABI_EXPORT HcclResult HcclBroadcast(void* buf, uint64_t count, HcclDataType dataType, uint32_t root, HcclComm comm,
                                         aclrtStream stream); /* hccl:146, in place */
HCCL_ABI_EXPORT HcclResult HcclReduceScatter(void* sendBuf, void* recvBuf, uint64_t recvCount, HcclDataType dataType,
                                             HcclReduceOp op, HcclComm comm, aclrtStream stream); /* hccl:162 */
HCCL_ABI_EXPORT HcclResult HcclAllGather(void* sendBuf, void* recvBuf, uint64_t sendCount, HcclDataType dataType,
                                         HcclComm comm, aclrtStream stream);   /* hccl:211 */
HCCL_ABI_EXPORT HcclResult HcclGetRankSize(HcclComm comm, uint32_t* rankSize); /* hccl:239 */
HCCL_ABI_EXPORT HcclResult HcclGetRankId(HcclComm comm, uint32_t* rank);       /* hccl:248 */
HCCL_ABI_EXPORT HcclResult HcclBarrier(HcclComm comm, aclrtStream stream);     /* hccl:256 */
HCCL_ABI_EXPORT HcclResult HcclSend(void* sendBuf, uint64_t count, HcclDataType dataType, uint32_t destRank,
                                    HcclComm comm, aclrtStream stream); /* hccl:270 */
HCCL_ABI_EXPORT HcclResult HcclRecv(void* recvBuf, uint64_t count, HcclDataType dataType, uint32_t srcRank,
                                    HcclComm comm, aclrtStream stream);                  /* hccl:284 */
HCCL_ABI_EXPORT HcclResult HcclCommDestroy(HcclComm comm);                               /* hccl:370 */
HCCL_ABI_EXPORT HcclResult HcclGetCommAsyncError(HcclComm comm, HcclResult* asyncError); /* hccl:388 */
HCCL_ABI_EXPORT const char* HcclGetErrorString(HcclResult code);                         /* hccl:394 */
HCCL_ABI_EXPORT HcclResult HcclGroupStart(void); /* hccl:511; torch_npu loads it from libhcomm.so */
HCCL_ABI_EXPORT HcclResult HcclGroupEnd(void);   /* hccl:516; likewise */

#ifdef __cplusplus
}
#endif
#endif /* TESSERA_TESTS_SHIMS_HCCL_ABI_H_ */
