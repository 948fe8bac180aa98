/* tessera.h — Tessera's C API: NCCL-shaped collectives across islands of different vendors.
 *
 * A job is a world of ranks grouped into islands (one vendor library each). Every rank calls
 * tsrCommInitFromEnv() once, with the TESSERA_* variables that `tessera run` sets, then issues the same
 * collectives in the same order as every other rank. Results are lossless: float16/bfloat16 are summed
 * across islands in float32 in a fixed order and rounded once, so every rank gets the same bits.
 *
 * Memory: with stream == NULL the buffers are host memory and the call returns when it is complete.
 * With a stream of the rank's device runtime (cudaStream_t, aclrtStream, musaStream_t: device islands) the
 * buffers are device memory and the call is enqueued on that stream, as in NCCL. In-place calls (sendbuf == recvbuf)
 * are allowed everywhere.
 *
 * Errors: every call returns a tsrResult_t; tsrGetLastError(comm) gives a readable message naming the
 * offending value or peer. Bad arguments are found on the calling rank before anything is allocated or sent
 * (a datatype or op outside its enum, a NULL buffer with a count, a count whose byte size — count × type
 * size, × the world size where a call gathers or scatters — overflows or ends past the addresses a process
 * can map, a root or peer that is not a rank, a stream on a host rank, alltoallv's counts): the call returns
 * tsrInvalidArgument with a message that names the call, the argument and its value ("tsrBroadcast: root 5
 * is not a rank of this communicator of 2 (0 ... 1)"), and the communicator stays usable, as with NCCL's
 * ncclInvalidArgument (every rank checks the same arguments the same way). Errors that involve other ranks
 * fail the communicator for good: mismatched calls (named on the ranks that see them), or a dead peer, which
 * gives tsrRemoteError or tsrTimeout within TESSERA_TIMEOUT; destroy it then. No call throws.
 *
 * Joining without a launcher (frameworks): rank 0 calls tsrGetUniqueId, hands the id to the other ranks
 * by its own means (a framework's store, a file), and every rank calls tsrCommInitRank with it and a
 * tsrConfig_t naming its island, vendor, device and timeout. tsrCommSplit makes sub-communicators;
 * several communicators may be alive in one process at once.
 *
 * Thread safety. Each declaration below states its contract. In short: calls on one communicator must
 * not run concurrently (as with NCCL), except tsrCommAbort, tsrCommGetAsyncError, tsrCommRank,
 * tsrCommSize and tsrCommIsland, which any thread may call at any time while the communicator exists.
 * Calls on different communicators may run concurrently from different threads. tsrGetVersion,
 * tsrGetErrorString and tsrGetUniqueId are safe from any thread. Group state (tsrGroupStart/End) is
 * per thread.
 */
#ifndef TESSERA_TESSERA_H_
#define TESSERA_TESSERA_H_

#include <stddef.h>

#include "tessera/export.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The one definition of Tessera's version: CMake's project(VERSION), `tessera --version` and
 * tsrGetVersion() read these three lines. */
#define TESSERA_VERSION_MAJOR 0
#define TESSERA_VERSION_MINOR 1
#define TESSERA_VERSION_PATCH 0
#define TESSERA_VERSION_CODE (TESSERA_VERSION_MAJOR * 10000 + TESSERA_VERSION_MINOR * 100 + TESSERA_VERSION_PATCH)

typedef enum {
  tsrSuccess = 0,
  tsrInvalidArgument = 1,
  tsrSystemError = 2,
  tsrRemoteError = 3,
  tsrTimeout = 4,
  tsrInternalError = 5,
  tsrUnsupported = 6,
  tsrNotFound = 7, /* a named thing (checkpoint, key) does not exist */
  tsrCorrupt = 8,  /* stored or received data failed verification */
} tsrResult_t;

/* The enums a caller passes in. In C++ their underlying type is fixed as int, so that every int is a value of
 * the type (a C caller may pass any int anyway): a value outside the enum, e.g. (tsrDataType_t)99 or
 * (tsrRedOp_t)-1, is then defined behaviour, and every call refuses it with tsrInvalidArgument naming the
 * value. In C they are plain enums, int-sized as before (the same ABI). */
#ifdef __cplusplus
#define TSR_INT_BASE : int
#else
#define TSR_INT_BASE
#endif

typedef enum TSR_INT_BASE {
  tsrInt8 = 0,
  tsrUint8 = 1,
  tsrInt32 = 2,
  tsrInt64 = 3,
  tsrFloat16 = 4,
  tsrBfloat16 = 5,
  tsrFloat32 = 6,
  tsrFloat64 = 7,
} tsrDataType_t;

typedef enum TSR_INT_BASE { tsrSum = 0, tsrProd = 1, tsrMax = 2, tsrMin = 3, tsrAvg = 4 } tsrRedOp_t;

typedef struct tsrComm* tsrComm_t;
/* NULL for host memory; the device runtime's stream for device memory (cudaStream_t, aclrtStream, musaStream_t). */
typedef void* tsrStream_t;

/* MAJOR*10000 + MINOR*100 + PATCH (TESSERA_VERSION_CODE of the library actually loaded, which may differ
 * from the header's). Thread-safe; needs no communicator. */
TESSERA_API tsrResult_t tsrGetVersion(int* version);

/* ---- Joining a job ------------------------------------------------------------------------------ */

/* An opaque id naming one job's rendezvous: the store's address, a random job token, a magic and a
 * version. Plain bytes: copy it, send it, write it to a file. */
#define TSR_UNIQUE_ID_BYTES 128
typedef struct {
  char internal[TSR_UNIQUE_ID_BYTES];
} tsrUniqueId;

#define TSR_CONFIG_MAGIC 0x54535243u /* "TSRC" */
#define TSR_CONFIG_VERSION 2
/* Per-rank settings of tsrCommInitRank / tsrCommSplit. Versioned like ncclConfig_t: start from
 * TSR_CONFIG_INITIALIZER so that fields added later get their defaults. */
typedef struct {
  size_t size;          /* sizeof(tsrConfig_t) */
  unsigned int magic;   /* TSR_CONFIG_MAGIC */
  unsigned int version; /* TSR_CONFIG_VERSION */
  int island;           /* this rank's island index 0..k-1; -1: TESSERA_ISLAND, else 0 */
  const char* vendor;   /* island vendor name; NULL: TESSERA_ISLAND_VENDOR, else "island<N>" */
  const char* device;   /* "host" or FAMILY:N ("cuda:0", "npu:0", ...); NULL: TESSERA_DEVICE, else "host" */
  int timeout_ms;       /* bound on every wait; <= 0: TESSERA_TIMEOUT, else 60 s */
  const char* token;    /* job token; NULL: TESSERA_TOKEN for an id made in a job, else the id's (tsrGetUniqueId) */
  /* Version 2. How an island of several device ranks reduces 16-bit data inside itself: "f32" (widened on
   * the device, reduced in f32 by the island's library, rounded once after the bridge: the same bits as a
   * host reduction) or "native" (the library reduces in the data's own type, as in a job of that vendor
   * alone: half the island's bytes, the library's rounding; the fold across islands stays f32). Every rank
   * of an island must pass the same. NULL: TESSERA_ISLAND_REDUCE, else "f32". */
  const char* island_reduce;
} tsrConfig_t;
#define TSR_CONFIG_INITIALIZER \
  { sizeof(tsrConfig_t), TSR_CONFIG_MAGIC, TSR_CONFIG_VERSION, -1, NULL, NULL, 0, NULL, NULL }

/* Makes a new id (call it on one rank, normally rank 0) and starts the job's rendezvous store in the
 * calling process: it listens on TESSERA_BRIDGE_ADDR when set, else on 127.0.0.1 when TESSERA_STORE (the
 * launcher's store) is on loopback, else on the first non-loopback IPv4 address this host's name
 * resolves to, else on 127.0.0.1 (then only ranks on this host can join), on a free port. The store
 * serves until the process exits (one listener thread per id, stopped at exit), so the process that made
 * the id must outlive the job's communicators: they use the store to report failures and aborts, and
 * splits meet there. One id serves one communicator (tsrCommInitRank once per rank); make a new id, or
 * use tsrCommSplit, for another. The store demands the job token: with TESSERA_TOKEN set (at most 64
 * bytes, no spaces) the id carries no token, only a mark, and each rank needs its own TESSERA_TOKEN and
 * presents it (config->token instead when given), so a rank with another token is refused; without it the
 * id carries 128 random bits, and is then itself the credential. Thread-safe. */
TESSERA_API tsrResult_t tsrGetUniqueId(tsrUniqueId* id);
/* Joins the job of `id` as `rank` of `nranks`. Collective: every rank of the job calls it with the same
 * id and nranks. config may be NULL (all fields from TESSERA_* or their defaults, see tsrConfig_t); it is
 * not kept after the call. No other TESSERA_* variable is needed. Bounded by the timeout. On failure
 * *comm is NULL and tsrGetLastError(NULL) says why (this thread). Thread-safe (each call makes its own
 * communicator); the ranks of one job may be threads of one process only if each is on its own thread. */
TESSERA_API tsrResult_t tsrCommInitRank(tsrComm_t* comm, int nranks, tsrUniqueId id, int rank,
                                        const tsrConfig_t* config);
/* Joins the job described by TESSERA_RANK, TESSERA_WORLD_SIZE, TESSERA_ISLAND, TESSERA_ISLAND_VENDOR,
 * TESSERA_DEVICE, TESSERA_STORE, TESSERA_TOKEN and TESSERA_TIMEOUT (set by `tessera run`); the same as tsrCommInitRank
 * with those values. Collective: every rank must call it. On failure *comm is NULL and
 * tsrGetLastError(NULL) describes why. Thread-safe as tsrCommInitRank. */
TESSERA_API tsrResult_t tsrCommInitFromEnv(tsrComm_t* comm);

#define TSR_SPLIT_NOCOLOR (-1)
/* Collective over comm: every rank of comm calls it. Ranks passing the same color >= 0 form one new
 * communicator; its ranks are ordered by (key, rank in comm). A rank passing TSR_SPLIT_NOCOLOR gets
 * *newcomm = NULL (and tsrSuccess); a color below -1 fails the call on every rank, naming the rank. Each
 * member keeps its island and vendor; the new communicator's islands are those of its members,
 * renumbered 0..k-1 in their order in comm. Errors: tsrGetLastError(comm). config NULL:
 * inherit device and timeout from comm (island/vendor of a config are ignored; device and timeout_ms are
 * used when set). The new communicator is independent of comm (either may be destroyed first) and has
 * its own store keys, shared-memory segments and CCL communicators, but meets at comm's store: that store
 * must outlive it (the process that made the id; under tsrCommInitFromEnv without a launcher, rank 0's
 * first communicator, which serves it: destroy that one last). Must not run concurrently with other calls
 * on comm. */
TESSERA_API tsrResult_t tsrCommSplit(tsrComm_t comm, int color, int key, tsrComm_t* newcomm, const tsrConfig_t* config);
/* Releases the communicator. Not collective; safe on NULL. Must not run concurrently with any other call
 * on comm (call tsrCommAbort first to end a blocked call, wait for it to return, then destroy).
 * fork(): a communicator belongs to the process that made it. In a child made by fork() every other call on an
 * inherited communicator returns tsrInvalidArgument, naming both processes, before it touches anything (the
 * channels, store connection and threads are the parent's), and tsrCommDestroy only frees the handle. */
TESSERA_API tsrResult_t tsrCommDestroy(tsrComm_t comm);
/* Makes every pending and future call on comm return promptly (a blocked call notices within ~50 ms)
 * with tsrRemoteError ("... aborted (tsrCommAbort)"), tells the other ranks (their pending and next
 * calls on this communicator fail with tsrRemoteError naming this rank), and aborts its CCL communicator
 * (ncclCommAbort; HCCL, which has none, has it destroyed once its queued work ends, within the timeout). Returns within
 * about 2 s (its post to the store is bounded). Does not free: destroy it after the blocked calls have returned. Safe
 * from any thread, concurrently with any call on comm; idempotent. (A CCL call that a racing thread had already begun
 * when the CCL communicator is aborted is the library's business, as with ncclCommAbort.) */
TESSERA_API tsrResult_t tsrCommAbort(tsrComm_t comm);
/* *error = tsrSuccess while comm is healthy; else the result that failed it (an earlier call's error, a
 * peer's posted failure seen while idle, an abort, an asynchronous CCL error). Cheap enough to call after
 * every collective: it never waits, and looks at the store and the same-host peers at most once every
 * 50 ms (a failure seen only there is reported up to 50 ms later). When it reports a failure,
 * tsrGetLastError(comm) on the same thread names the cause. Safe from any thread, concurrently with any
 * call on comm. */
TESSERA_API tsrResult_t tsrCommGetAsyncError(tsrComm_t comm, tsrResult_t* error);
/* Safe from any thread while comm exists. */
TESSERA_API tsrResult_t tsrCommRank(tsrComm_t comm, int* rank);
TESSERA_API tsrResult_t tsrCommSize(tsrComm_t comm, int* size);
/* The index of this rank's island, in the order the islands were declared (0-based). */
TESSERA_API tsrResult_t tsrCommIsland(tsrComm_t comm, int* island);

/* ---- Collectives: one at a time per communicator; every rank issues the same ones in the same order. */

/* recvbuf[i] = op over ranks of sendbuf[i], for i < count, on every rank. */
TESSERA_API tsrResult_t tsrAllReduce(const void* sendbuf, void* recvbuf, size_t count, tsrDataType_t datatype,
                                     tsrRedOp_t op, tsrComm_t comm, tsrStream_t stream);
/* sendbuf holds size*recvcount elements; rank r receives the reduced block r. */
TESSERA_API tsrResult_t tsrReduceScatter(const void* sendbuf, void* recvbuf, size_t recvcount, tsrDataType_t datatype,
                                         tsrRedOp_t op, tsrComm_t comm, tsrStream_t stream);
/* recvbuf (size*sendcount elements) gets every rank's sendbuf, in rank order. */
TESSERA_API tsrResult_t tsrAllGather(const void* sendbuf, void* recvbuf, size_t sendcount, tsrDataType_t datatype,
                                     tsrComm_t comm, tsrStream_t stream);
/* Every rank's recvbuf gets root's sendbuf. */
TESSERA_API tsrResult_t tsrBroadcast(const void* sendbuf, void* recvbuf, size_t count, tsrDataType_t datatype, int root,
                                     tsrComm_t comm, tsrStream_t stream);
/* Point-to-point; a send must be matched by a recv of the same count and type on peer. Outside a group a
 * call returns when it is complete (host memory) or enqueued (device memory). */
TESSERA_API tsrResult_t tsrSend(const void* sendbuf, size_t count, tsrDataType_t datatype, int peer, tsrComm_t comm,
                                tsrStream_t stream);
TESSERA_API tsrResult_t tsrRecv(void* recvbuf, size_t count, tsrDataType_t datatype, int peer, tsrComm_t comm,
                                tsrStream_t stream);
/* Returns when every rank has entered the barrier. */
TESSERA_API tsrResult_t tsrBarrier(tsrComm_t comm);

/* Rank r sends block p of sendbuf (elements [p*count, (p+1)*count)) to rank p and receives rank p's
 * block r into block p of recvbuf, for every p (itself included). sendbuf and recvbuf must not overlap.
 * Exact: bytes are moved, never folded. Host or device memory as every collective. */
TESSERA_API tsrResult_t tsrAllToAll(const void* sendbuf, void* recvbuf, size_t count, tsrDataType_t datatype,
                                    tsrComm_t comm, tsrStream_t stream);
/* As tsrAllToAll with per-peer counts and displacements, in elements: sendcounts[p] elements from
 * sendbuf + sdispls[p] go to rank p, which must pass the same number as its recvcounts[r]; recvcounts[p]
 * elements from rank p land at recvbuf + rdispls[p]. Zero counts are allowed. A count mismatch between
 * two ranks fails the call on both, naming both sides. */
TESSERA_API tsrResult_t tsrAllToAllv(const void* sendbuf, const size_t sendcounts[], const size_t sdispls[],
                                     void* recvbuf, const size_t recvcounts[], const size_t rdispls[],
                                     tsrDataType_t datatype, tsrComm_t comm, tsrStream_t stream);

/* ---- Groups (batch_isend_irecv) ------------------------------------------------------------------ */

/* Opens a group on the calling thread; groups nest (only the outermost tsrGroupEnd runs them), as in
 * NCCL. Between tsrGroupStart and tsrGroupEnd, tsrSend and tsrRecv (on any communicators) are queued and
 * return tsrSuccess at once (argument errors come from tsrGroupEnd); the other collectives,
 * tsrCommSplit and the inits return tsrInvalidArgument; queries (rank, size, describe, errors),
 * tsrCommAbort and tsrCommDestroy (which drops the thread's queued calls on comm) are allowed. Sends to
 * this rank itself are allowed inside a group and match its receives from itself in order. Buffers must
 * stay valid until tsrGroupEnd returns (host memory) or the stream has run the group (device memory). */
TESSERA_API tsrResult_t tsrGroupStart(void);
/* Closes the innermost group; the outermost one runs all queued sends and receives: per communicator
 * (one after another, in the order of their first call in the group), all of one communicator's
 * progressing together, so any order of matching pairs completes without deadlock. A send of a group
 * matches a plain tsrRecv on the peer and vice versa. Returns the first error (its message in
 * tsrGetLastError of that communicator; tsrGetLastError(NULL) for tsrGroupEnd without tsrGroupStart).
 * Per thread. */
TESSERA_API tsrResult_t tsrGroupEnd(void);

/* Not safe concurrently with other calls on comm. One line for humans: the islands, their ranks and devices, and the
 * transports in use inside the islands and on the bridge. Valid until comm is destroyed; "" for NULL. */
TESSERA_API const char* tsrCommDescribe(tsrComm_t comm);

/* A static string for any value (thread-safe). */
TESSERA_API const char* tsrGetErrorString(tsrResult_t result);
/* The message of this thread's last failed call on comm, or of the failure its last tsrCommGetAsyncError
 * reported (this thread's last failed init or group error when comm is NULL); "" when there was none.
 * Per thread: another thread's failures never change it. Valid until this thread's next call on comm. */
TESSERA_API const char* tsrGetLastError(tsrComm_t comm);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* TESSERA_TESSERA_H_ */
