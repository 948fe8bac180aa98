/* tessera.h — Tessera's C API: NCCL-shaped collectives across islands of different vendors.
 *
 * A job is a world of ranks grouped into islands (one vendor library each). Every rank calls
 * tsrCommInitFromEnv() once, with the TESSERA_* variables that `tessera run` sets, then issues the same
 * collectives in the same order as every other rank. Results are lossless: float16/bfloat16 are summed
 * across islands in float32 in a fixed order and rounded once, so every rank gets the same bits.
 *
 * Memory: with stream == NULL the buffers are host memory and the call returns when it is complete.
 * With a cudaStream_t (CUDA islands) the buffers are device memory and the call is enqueued on that
 * stream, as in NCCL. In-place calls (sendbuf == recvbuf) are allowed everywhere.
 *
 * Errors: every call returns a tsrResult_t; tsrGetLastError(comm) gives a readable message naming the
 * offending value or peer. A dead peer gives tsrRemoteError or tsrTimeout within TESSERA_TIMEOUT, and
 * afterwards the communicator is unusable (destroy it). No call throws.
 */
#ifndef TESSERA_TESSERA_H_
#define TESSERA_TESSERA_H_

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

#define TESSERA_VERSION_MAJOR 0
#define TESSERA_VERSION_MINOR 1

typedef enum {
  tsrSuccess = 0,
  tsrInvalidArgument = 1,
  tsrSystemError = 2,
  tsrRemoteError = 3,
  tsrTimeout = 4,
  tsrInternalError = 5,
  tsrUnsupported = 6,
} tsrResult_t;

typedef enum {
  tsrInt8 = 0,
  tsrUint8 = 1,
  tsrInt32 = 2,
  tsrInt64 = 3,
  tsrFloat16 = 4,
  tsrBfloat16 = 5,
  tsrFloat32 = 6,
  tsrFloat64 = 7,
} tsrDataType_t;

typedef enum { tsrSum = 0, tsrProd = 1, tsrMax = 2, tsrMin = 3, tsrAvg = 4 } tsrRedOp_t;

typedef struct tsrComm* tsrComm_t;
/* NULL for host memory; a cudaStream_t for device memory. */
typedef void* tsrStream_t;

/* Joins the job described by TESSERA_RANK, TESSERA_WORLD_SIZE, TESSERA_ISLAND, TESSERA_DEVICE,
 * TESSERA_STORE, TESSERA_TOKEN and TESSERA_TIMEOUT. Collective: every rank must call it. On failure
 * *comm is NULL and tsrGetLastError(NULL) describes why. */
tsrResult_t tsrCommInitFromEnv(tsrComm_t* comm);
/* Releases the communicator. Not collective; safe on NULL. */
tsrResult_t tsrCommDestroy(tsrComm_t comm);
tsrResult_t tsrCommRank(tsrComm_t comm, int* rank);
tsrResult_t tsrCommSize(tsrComm_t comm, int* size);
/* The index of this rank's island, in the order the islands were declared (0-based). */
tsrResult_t tsrCommIsland(tsrComm_t comm, int* island);

/* recvbuf[i] = op over ranks of sendbuf[i], for i < count, on every rank. */
tsrResult_t tsrAllReduce(const void* sendbuf, void* recvbuf, size_t count, tsrDataType_t datatype,
                         tsrRedOp_t op, tsrComm_t comm, tsrStream_t stream);
/* sendbuf holds size*recvcount elements; rank r receives the reduced block r. */
tsrResult_t tsrReduceScatter(const void* sendbuf, void* recvbuf, size_t recvcount, tsrDataType_t datatype,
                             tsrRedOp_t op, tsrComm_t comm, tsrStream_t stream);
/* recvbuf (size*sendcount elements) gets every rank's sendbuf, in rank order. */
tsrResult_t tsrAllGather(const void* sendbuf, void* recvbuf, size_t sendcount, tsrDataType_t datatype,
                         tsrComm_t comm, tsrStream_t stream);
/* Every rank's recvbuf gets root's sendbuf. */
tsrResult_t tsrBroadcast(const void* sendbuf, void* recvbuf, size_t count, tsrDataType_t datatype, int root,
                         tsrComm_t comm, tsrStream_t stream);
/* Point-to-point; a send must be matched by a recv of the same count and type on peer. */
tsrResult_t tsrSend(const void* sendbuf, size_t count, tsrDataType_t datatype, int peer, tsrComm_t comm,
                    tsrStream_t stream);
tsrResult_t tsrRecv(void* recvbuf, size_t count, tsrDataType_t datatype, int peer, tsrComm_t comm,
                    tsrStream_t stream);
/* Returns when every rank has entered the barrier. */
tsrResult_t tsrBarrier(tsrComm_t comm);

/* One line for humans: the islands, their ranks and devices, and the transports in use inside the
 * islands and on the bridge. Valid until comm is destroyed; "" for NULL. */
const char* tsrCommDescribe(tsrComm_t comm);

const char* tsrGetErrorString(tsrResult_t result);
/* The message of the last failed call on comm (on this thread's last failed init when comm is NULL);
 * "" when there was none. Valid until the next call on comm. */
const char* tsrGetLastError(tsrComm_t comm);

#ifdef __cplusplus
}  /* extern "C" */
#endif

#endif  /* TESSERA_TESSERA_H_ */
