/* tests/shims/acl_abi.h: the subset of Huawei Ascend's ACL runtime API (libascendcl.so) that the test-only
 * host shim implements, declared from the public headers: our own declarations, not copies.
 *
 * Source of every name, value and signature below, unless a line says otherwise: the headers CANN publishes
 * and Ascend/pytorch (github.com/Ascend/pytorch) vendored as third_party/acl/inc/acl/{acl_base.h,acl_rt.h,
 * error_codes/rt_error_codes.h} up to commit c4840e3c095952083edcaa4a92f2ae7139bd7c51 (2026-05-21); the next
 * commit, 121d44ed, moved them into the cann/runtime submodule. "base:N" is acl_base.h line N, "rt:N" acl_rt.h
 * line N, "rtcodes:N" error_codes/rt_error_codes.h line N, all at that commit. The documented rules the shim
 * checks are cited in acl_shim.cpp next to the check. */
#ifndef TESSERA_TESTS_SHIMS_ACL_ABI_H_
#define TESSERA_TESTS_SHIMS_ACL_ABI_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define ACL_ABI_EXPORT __attribute__((visibility("default")))

typedef void* aclrtStream; /* base:48 */
typedef void* aclrtEvent;  /* base:49 */
typedef int aclError;      /* base:55 */

/* aclError values (base:66-139). */
static const int ACL_SUCCESS = 0;                      /* base:66 */
static const int ACL_ERROR_INVALID_PARAM = 100000;     /* base:68 */
static const int ACL_ERROR_UNINITIALIZE = 100001;      /* base:69 */
static const int ACL_ERROR_REPEAT_INITIALIZE = 100002; /* base:70 */
static const int ACL_ERROR_BAD_ALLOC = 200000;         /* base:123 */
static const int ACL_ERROR_INVALID_DEVICE = 200002;    /* base:125 */
static const int ACL_ERROR_INTERNAL_ERROR = 500000;    /* base:134 */
/* Runtime pass-through codes (rtcodes:21-137; #defines there, constants here). */
static const int ACL_ERROR_RT_PARAM_INVALID = 107000;        /* rtcodes:21 */
static const int ACL_ERROR_RT_INVALID_DEVICEID = 107001;     /* rtcodes:22 */
static const int ACL_ERROR_RT_CONTEXT_NULL = 107002;         /* rtcodes:23 */
static const int ACL_ERROR_RT_ADDR_UNALIGNED = 107008;       /* rtcodes:29 */
static const int ACL_ERROR_RT_INVALID_MEMORY_TYPE = 107016;  /* rtcodes:37 */
static const int ACL_ERROR_RT_INVALID_HANDLE = 107017;       /* rtcodes:38 */
static const int ACL_ERROR_RT_TASK_TIMEOUT = 107020;         /* rtcodes:41 */
static const int ACL_ERROR_RT_FEATURE_NOT_SUPPORT = 207000;  /* rtcodes:59 */
static const int ACL_ERROR_RT_MEMORY_ALLOCATION = 207001;    /* rtcodes:60 */
static const int ACL_ERROR_RT_MEMORY_FREE = 207002;          /* rtcodes:61 */
static const int ACL_ERROR_RT_INTERNAL_ERROR = 507000;       /* rtcodes:80 */
static const int ACL_ERROR_RT_COPY_DATA = 507052;            /* rtcodes:132 */
static const int ACL_ERROR_RT_SUSPECT_REMOTE_ERROR = 507057; /* rtcodes:137 */

/* rt:87-91 (aclrtQueryEvent, deprecated there) */
typedef enum aclrtEventStatus {
  ACL_EVENT_STATUS_COMPLETE = 0,
  ACL_EVENT_STATUS_NOT_READY = 1,
  ACL_EVENT_STATUS_RESERVED = 2,
} aclrtEventStatus;

/* rt:93-96 (aclrtQueryEventStatus) */
typedef enum aclrtEventRecordedStatus {
  ACL_EVENT_RECORDED_STATUS_NOT_READY = 0,
  ACL_EVENT_RECORDED_STATUS_COMPLETE = 1,
} aclrtEventRecordedStatus;

/* rt:115-124, implicit values 0..7 */
typedef enum aclrtMemcpyKind {
  ACL_MEMCPY_HOST_TO_HOST = 0,
  ACL_MEMCPY_HOST_TO_DEVICE = 1,
  ACL_MEMCPY_DEVICE_TO_HOST = 2,
  ACL_MEMCPY_DEVICE_TO_DEVICE = 3,
  ACL_MEMCPY_DEFAULT = 4,
  ACL_MEMCPY_HOST_TO_BUF_TO_DEVICE = 5,
  ACL_MEMCPY_INNER_DEVICE_TO_DEVICE = 6,
  ACL_MEMCPY_INTER_DEVICE_TO_DEVICE = 7,
} aclrtMemcpyKind;

/* rt:126-138, implicit values 0..7 then the flag bits */
typedef enum aclrtMemMallocPolicy {
  ACL_MEM_MALLOC_HUGE_FIRST = 0,
  ACL_MEM_MALLOC_HUGE_ONLY = 1,
  ACL_MEM_MALLOC_NORMAL_ONLY = 2,
  ACL_MEM_MALLOC_HUGE_FIRST_P2P = 3,
  ACL_MEM_MALLOC_HUGE_ONLY_P2P = 4,
  ACL_MEM_MALLOC_NORMAL_ONLY_P2P = 5,
  ACL_MEM_MALLOC_HUGE1G_ONLY = 6,
  ACL_MEM_MALLOC_HUGE1G_ONLY_P2P = 7,
  ACL_MEM_TYPE_LOW_BAND_WIDTH = 0x0100,
  ACL_MEM_TYPE_HIGH_BAND_WIDTH = 0x1000,
  ACL_MEM_ACCESS_USER_SPACE_READONLY = 0x100000,
} aclrtMemMallocPolicy;

/* rt:226-230; rt:227 marks HOST "reserved, current version not support" */
typedef enum aclrtMemLocationType {
  ACL_MEM_LOCATION_TYPE_HOST = 0,
  ACL_MEM_LOCATION_TYPE_DEVICE = 1,
  ACL_MEM_LOCATION_TYPE_UNREGISTERED = 2,
} aclrtMemLocationType;

/* rt:232-235 */
typedef struct aclrtMemLocation {
  uint32_t id;
  aclrtMemLocationType type;
} aclrtMemLocation;

/* rt:237-241 */
typedef struct aclrtPtrAttributes {
  aclrtMemLocation location;
  uint32_t pageSize;
  uint32_t rsv[4];
} aclrtPtrAttributes;

/* Host memory registration (CANN 9.0.0, newer than the vendored headers above; source: CANN's runtime API reference,
 * hiascend.com/document/detail/zh/canncommercial/900/API/runtimeapi/, aclrtHostRegisterV2 = aclcppdevg_03_2128,
 * aclrtHostUnregister = aclcppdevg_03_1805; the flag values as that page and cann/runtime's docs/api_ref
 * "11-02 host memory management" define them). ACL_HOST_REG_PINNED registers non-page-locked host memory (malloc,
 * new, a default mmap) as page-locked; ACL_HOST_REG_MAPPED maps it for the device (aclrtHostGetDevicePointer). */
#define ACL_HOST_REG_MAPPED 0x2UL
#define ACL_HOST_REG_IOMEMORY 0x4UL
#define ACL_HOST_REG_READONLY 0x8UL
#define ACL_HOST_REG_PINNED 0x10000000UL

/* Functions, with the signatures of the lines named. */
ACL_ABI_EXPORT aclError aclInit(const char* configPath);      /* rt:2302 */
ACL_ABI_EXPORT aclError aclFinalize(void);                    /* rt:2316 */
ACL_ABI_EXPORT const char* aclGetRecentErrMsg(void);          /* rt:2353 (also written "aclrtGetRecentErrMsg") */
ACL_ABI_EXPORT const char* aclrtGetSocName(void);             /* base:700 */
ACL_ABI_EXPORT aclError aclrtSetDevice(int32_t deviceId);     /* rt:824 */
ACL_ABI_EXPORT aclError aclrtResetDevice(int32_t deviceId);   /* rt:851 */
ACL_ABI_EXPORT aclError aclrtGetDevice(int32_t* deviceId);    /* rt:862 */
ACL_ABI_EXPORT aclError aclrtSynchronizeDevice(void);         /* rt:894 */
ACL_ABI_EXPORT aclError aclrtGetDeviceCount(uint32_t* count); /* rt:916 */
ACL_ABI_EXPORT aclError aclrtCreateEvent(aclrtEvent* event);  /* rt:927 */
ACL_ABI_EXPORT aclError aclrtDestroyEvent(aclrtEvent event);  /* rt:971 */
ACL_ABI_EXPORT aclError aclrtRecordEvent(aclrtEvent event, aclrtStream stream);                     /* rt:983 */
ACL_ABI_EXPORT aclError aclrtQueryEvent(aclrtEvent event, aclrtEventStatus* status);                /* rt:1012 */
ACL_ABI_EXPORT aclError aclrtQueryEventStatus(aclrtEvent event, aclrtEventRecordedStatus* s);       /* rt:1024 */
ACL_ABI_EXPORT aclError aclrtSynchronizeEvent(aclrtEvent event);                                    /* rt:1071 */
ACL_ABI_EXPORT aclError aclrtMalloc(void** devPtr, size_t size, aclrtMemMallocPolicy policy);       /* rt:1112 */
ACL_ABI_EXPORT aclError aclrtPointerGetAttributes(const void* ptr, aclrtPtrAttributes* attributes); /* rt:1176 */
ACL_ABI_EXPORT aclError aclrtFree(void* devPtr);                                                    /* rt:1230 */
ACL_ABI_EXPORT aclError aclrtMallocHost(void** hostPtr, size_t size);                               /* rt:1250 */
ACL_ABI_EXPORT aclError aclrtFreeHost(void* hostPtr);                                               /* rt:1281 */
ACL_ABI_EXPORT aclError aclrtMemcpy(void* dst, size_t destMax, const void* src, size_t count,
                                    aclrtMemcpyKind kind);                                       /* rt:1296 */
ACL_ABI_EXPORT aclError aclrtMemset(void* devPtr, size_t maxCount, int32_t value, size_t count); /* rt:1319 */
ACL_ABI_EXPORT aclError aclrtMemcpyAsync(void* dst, size_t destMax, const void* src, size_t count, aclrtMemcpyKind kind,
                                         aclrtStream stream); /* rt:1346 */
ACL_ABI_EXPORT aclError aclrtMemsetAsync(void* devPtr, size_t maxCount, int32_t value, size_t count,
                                         aclrtStream stream);                       /* rt:1551 */
ACL_ABI_EXPORT aclError aclrtCreateStream(aclrtStream* stream);                     /* rt:1669 */
ACL_ABI_EXPORT aclError aclrtDestroyStream(aclrtStream stream);                     /* rt:1706 */
ACL_ABI_EXPORT aclError aclrtSynchronizeStream(aclrtStream stream);                 /* rt:1734 */
ACL_ABI_EXPORT aclError aclrtStreamWaitEvent(aclrtStream stream, aclrtEvent event); /* rt:1774 */
/* CANN 9.0.0 (see ACL_HOST_REG_PINNED above): ptr 4 KiB-aligned; paired with aclrtHostUnregister. */
ACL_ABI_EXPORT aclError aclrtHostRegisterV2(void* ptr, uint64_t size, uint32_t flag);
ACL_ABI_EXPORT aclError aclrtHostUnregister(void* ptr);

#ifdef __cplusplus
}
#endif
#endif /* TESSERA_TESTS_SHIMS_ACL_ABI_H_ */
