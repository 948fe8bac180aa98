/* tests/shims/musa_abi.h: the subset of Moore Threads' MUSA runtime API (libmusart.so) that the test-only host
 * shim implements: our own declarations.
 *
 * MUSA's headers (musa_runtime_api.h, driver_types.h) ship with the MUSA SDK and are not published in a public
 * repository we could read. What IS public:
 *  - the NAMES: MooreThreads/torch_musa torch_musa/utils/mapping/general.json at commit 8b583b3f2fd0d9d3d9e7
 *    ("map:N" = line N) maps every CUDA runtime name used here to its MUSA name (cudaMalloc -> musaMalloc,
 *    cudaMemcpyHostToDevice -> musaMemcpyHostToDevice, ...), i.e. MUSA's runtime is CUDA's under another prefix;
 *  - the SONAME libmusart.so: torch_musa/csrc/core/musart.cpp:14 ("libmusart.so bindings") and MooreThreads/
 *    torchada, which patches ctypes.CDLL("libmusart.so") to translate cuda* names to musa*.
 * The VALUES and SIGNATURES are therefore ASSUMPTIONS: each is CUDA's, from NVIDIA's public CUDA 13.0 headers
 * ("drv:N" = include/driver_types.h line N, "api:N" = include/cuda_runtime_api.h line N), which torch_musa's 1:1
 * renaming implies but does not prove. Check them against a real MUSA SDK before relying on a number. */
#ifndef TESSERA_TESTS_SHIMS_MUSA_ABI_H_
#define TESSERA_TESTS_SHIMS_MUSA_ABI_H_

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

#define MUSA_ABI_EXPORT __attribute__((visibility("default")))

typedef struct MUstream_st* musaStream_t; /* map:9745; ASSUMPTION: an opaque pointer as cudaStream_t (drv:2998) */
typedef struct MUevent_st* musaEvent_t;   /* map:8528; ASSUMPTION: as cudaEvent_t (drv:3003) */

/* musaError_t map:8487; ASSUMPTION: every value is cudaError's (drv:199-1115) */
typedef enum musaError {
  musaSuccess = 0,                      /* map:9746, drv:199 */
  musaErrorInvalidValue = 1,            /* map:8417, drv:205 */
  musaErrorMemoryAllocation = 2,        /* map:8429, drv:211 */
  musaErrorInitializationError = 3,     /* map:8394, drv:217 */
  musaErrorInvalidDevicePointer = 17,   /* map:8401, drv:289 */
  musaErrorInvalidMemcpyDirection = 21, /* map:8406, drv:313 */
  musaErrorNoDevice = 100,              /* map:8439, drv:530 */
  musaErrorInvalidDevice = 101,         /* map:8399, drv:537 */
  musaErrorInvalidResourceHandle = 400, /* map:8411, drv:738 */
  musaErrorNotReady = 600,              /* map:8445, drv:767 */
  musaErrorIllegalAddress = 700,        /* map:8390, drv:775 */
  musaErrorMisalignedAddress = 716,     /* map:8431, drv:887 */
  musaErrorUnknown = 999                /* map:8481, drv:1115 */
} musaError_t;

/* map:9373; ASSUMPTION: cudaMemcpyKind's values (drv:1247-1251) */
typedef enum musaMemcpyKind {
  musaMemcpyHostToHost = 0,     /* map:9372 */
  musaMemcpyHostToDevice = 1,   /* map:9371 */
  musaMemcpyDeviceToHost = 2,   /* map:9346 */
  musaMemcpyDeviceToDevice = 3, /* map:9345 */
  musaMemcpyDefault = 4         /* map:9344 */
} musaMemcpyKind;

/* map:9410; ASSUMPTION: cudaMemoryType's values (drv:1236-1239) */
typedef enum musaMemoryType {
  musaMemoryTypeUnregistered = 0, /* map:9414 */
  musaMemoryTypeHost = 1,         /* map:9412 */
  musaMemoryTypeDevice = 2,       /* map:9411 */
  musaMemoryTypeManaged = 3       /* map:9413 */
} musaMemoryType;

/* map:9521. ASSUMPTION: the four leading fields of cudaPointerAttributes (drv:1618-1650). CUDA 13 appends
 * `long reserved[8]` (drv:1655); the shim writes only these four, so a caller's larger struct is safe too. */
struct musaPointerAttributes {
  enum musaMemoryType type;
  int device;
  void* devicePointer;
  void* hostPointer;
};

/* Flags. ASSUMPTION: CUDA's values (drv:87-125). */
#define musaHostAllocDefault 0x00   /* map:9034, drv:87 */
#define musaHostAllocPortable 0x01  /* map:9036, drv:88 */
#define musaHostAllocMapped 0x02    /* map:9035, drv:89 */
#define musaStreamDefault 0x00      /* map:9664, drv:100 */
#define musaStreamNonBlocking 0x01  /* map:9711, drv:101 */
#define musaEventDefault 0x00       /* map:8496, drv:123 */
#define musaEventBlockingSync 0x01  /* map:8488, drv:124 */
#define musaEventDisableTiming 0x02 /* map:8500, drv:125 */

/* Functions: names from map:N, signatures ASSUMED to be the CUDA runtime's at api:N. */
MUSA_ABI_EXPORT musaError_t musaGetDeviceCount(int* count);                               /* map:8649, api:1277 */
MUSA_ABI_EXPORT musaError_t musaSetDevice(int device);                                    /* map:9582, api:1659 */
MUSA_ABI_EXPORT musaError_t musaGetDevice(int* device);                                   /* map:8648, api:1681 */
MUSA_ABI_EXPORT musaError_t musaDeviceSynchronize(void);                                  /* map:8219, api:352 */
MUSA_ABI_EXPORT musaError_t musaGetLastError(void);                                       /* map:8677, api:1165 */
MUSA_ABI_EXPORT musaError_t musaPeekAtLastError(void);                                    /* map:9518, api:1216 */
MUSA_ABI_EXPORT const char* musaGetErrorString(musaError_t error);                        /* map:8670, api:1248 */
MUSA_ABI_EXPORT musaError_t musaMalloc(void** devPtr, size_t size);                       /* map:9131, api:4581 */
MUSA_ABI_EXPORT musaError_t musaFree(void* devPtr);                                       /* map:8583, api:4752 */
MUSA_ABI_EXPORT musaError_t musaMallocHost(void** ptr, size_t size);                      /* map:9153, api:4618 */
MUSA_ABI_EXPORT musaError_t musaHostAlloc(void** pHost, size_t size, unsigned int flags); /* map:9033, api:4887 */
MUSA_ABI_EXPORT musaError_t musaFreeHost(void* ptr);                                      /* map:8593, api:4775 */
MUSA_ABI_EXPORT musaError_t musaMemcpy(void* dst, const void* src, size_t count,
                                       enum musaMemcpyKind kind); /* map:9263, api:5957 */
MUSA_ABI_EXPORT musaError_t musaMemcpyAsync(void* dst, const void* src, size_t count, enum musaMemcpyKind kind,
                                            musaStream_t stream);              /* map:9338, api:6332 */
MUSA_ABI_EXPORT musaError_t musaMemset(void* devPtr, int value, size_t count); /* map:9415, api:6807 */
MUSA_ABI_EXPORT musaError_t musaMemsetAsync(void* devPtr, int value, size_t count,
                                            musaStream_t stream);    /* map:9440, api:6923 */
MUSA_ABI_EXPORT musaError_t musaStreamCreate(musaStream_t* pStream); /* map:9655, api:1871 */
MUSA_ABI_EXPORT musaError_t musaStreamCreateWithFlags(musaStream_t* pStream, unsigned int flags); /* map:9656 */
MUSA_ABI_EXPORT musaError_t musaStreamDestroy(musaStream_t stream);     /* map:9665, api:2190 */
MUSA_ABI_EXPORT musaError_t musaStreamSynchronize(musaStream_t stream); /* map:9726, api:2320 */
MUSA_ABI_EXPORT musaError_t musaStreamQuery(musaStream_t stream);       /* map:9713, api:2345 */
MUSA_ABI_EXPORT musaError_t musaStreamWaitEvent(musaStream_t stream, musaEvent_t event,
                                                unsigned int flags);                          /* map:9739, api:2221 */
MUSA_ABI_EXPORT musaError_t musaEventCreateWithFlags(musaEvent_t* event, unsigned int flags); /* map:8491 */
MUSA_ABI_EXPORT musaError_t musaEventRecord(musaEvent_t event, musaStream_t stream);          /* map:8509, api:2839 */
MUSA_ABI_EXPORT musaError_t musaEventQuery(musaEvent_t event);                                /* map:8506, api:2920 */
MUSA_ABI_EXPORT musaError_t musaEventSynchronize(musaEvent_t event);                          /* map:8523, api:2951 */
MUSA_ABI_EXPORT musaError_t musaEventDestroy(musaEvent_t event);                              /* map:8497, api:2981 */
MUSA_ABI_EXPORT musaError_t musaPointerGetAttributes(struct musaPointerAttributes* attributes,
                                                     const void* ptr); /* map:9522, api:8446 */

#ifdef __cplusplus
}
#endif
#endif /* TESSERA_TESTS_SHIMS_MUSA_ABI_H_ */
