/* tessera/ckpt.h — C API of Tessera's checkpoint library (the C++ API is tessera/ckpt.hpp).
 *
 * One writer per rank: tsrCkptWriterOpen(root, rank, world), then per step tsrCkptSave() (blocks only
 * while it copies the tensors into a host buffer; persists in the background) and tsrCkptWait() (blocks
 * until the step is committed). Restore with tsrCkptLatest() + tsrCkptRestore(), from any world size:
 * row-sharded tensors can be read back in any row range. Errors: a tsrResult_t (tessera.h) and
 * tsrCkptGetLastError() with a message naming the step and file; tsrNotFound for "no such checkpoint" and
 * tsrCorrupt for "failed verification" (TSR_CKPT_NOT_FOUND / TSR_CKPT_CORRUPT are their old names). Status
 * codes map to tsrResult_t through the one function the comm API uses. No call throws.
 */
#ifndef TESSERA_CKPT_H_
#define TESSERA_CKPT_H_

#include <stddef.h>
#include <stdint.h>

#include "tessera/tessera.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Kept for source compatibility: the codes are tsrResult_t's own now. */
#define TSR_CKPT_NOT_FOUND tsrNotFound
#define TSR_CKPT_CORRUPT tsrCorrupt

typedef struct tsrCkptWriter* tsrCkptWriter_t;

/* Int-based in C++ as tessera.h's enums are: a value outside it is refused naming it (tsrInvalidArgument). */
typedef enum TSR_INT_BASE { tsrCkptReplicated = 0, tsrCkptRowSharded = 1 } tsrCkptSharding_t;

typedef struct {
  const char* name;
  tsrDataType_t dtype;
  int ndim;
  const int64_t* shape; /* local shape */
  const void* data;     /* host or device memory */
  tsrCkptSharding_t sharding;
  int64_t row_offset;  /* row-sharded: first global row held here */
  int64_t global_rows; /* row-sharded: dim 0 of the whole tensor */
} tsrCkptTensor_t;

typedef struct {
  const char* name;
  void* data;
  size_t bytes;
  int64_t row_begin;
  int64_t rows; /* -1: all rows */
} tsrCkptSlot_t;

TESSERA_API tsrResult_t tsrCkptWriterOpen(const char* root, int rank, int world, tsrCkptWriter_t* writer);
/* Progress of the background persist (WriterOptions::progress in tessera/ckpt.hpp): bytes of this rank's
 * shard file for `step` written so far; calls are serialized, `done` only grows, and done == total comes
 * exactly once, when the step is durable (rank 0: committed). Called from the writer's threads. */
typedef void (*tsrCkptProgressFn)(int64_t step, uint64_t done, uint64_t total, void* user);
/* tsrCkptWriterOpen with a progress callback (`fn` may be NULL); `user` is passed back to it. */
TESSERA_API tsrResult_t tsrCkptWriterOpenWithProgress(const char* root, int rank, int world, tsrCkptProgressFn fn,
                                                      void* user, tsrCkptWriter_t* writer);
TESSERA_API tsrResult_t tsrCkptSave(tsrCkptWriter_t writer, int64_t step, const tsrCkptTensor_t* tensors, size_t count);
TESSERA_API tsrResult_t tsrCkptWait(tsrCkptWriter_t writer);
/* Waits for queued steps, then frees the writer. Safe on NULL. */
TESSERA_API tsrResult_t tsrCkptWriterClose(tsrCkptWriter_t writer);
/* Newest good committed step; TSR_CKPT_NOT_FOUND when there is none. */
TESSERA_API tsrResult_t tsrCkptLatest(const char* root, int64_t* step);
TESSERA_API tsrResult_t tsrCkptRestore(const char* root, int64_t step, const tsrCkptSlot_t* slots, size_t count);
/* The message of the last failed call on this thread ("" when none). */
TESSERA_API const char* tsrCkptGetLastError(void);

#ifdef __cplusplus
}
#endif
#endif /* TESSERA_CKPT_H_ */
