/* tests/shims/aclnn_abi.h: the subset of CANN's operator API ("aclnn": libnnopbase.so for tensors and executors,
 * libopapi.so for the operators) that the test-only shims implement, declared from the public sources: our own
 * declarations, not copies. Sources ("repo@commit path"):
 *   [meta]   hicann/opbase@aa3cd74b include/nnopbase/aclnn/acl_meta.h (file commit 7ec2d375): the opaque types,
 *            `typedef int32_t aclnnStatus`, aclCreateTensor ... aclSetOutputTensorAddr, each ACL_FUNC_VISIBILITY
 *            inside extern "C"; the 2023 torch_npu copy (Ascend/pytorch third_party/acl/inc/acl/op_api/
 *            acl_op_api.h) has the same aclCreateTensor layout.
 *   [base]   hicann/opbase@aa3cd74b include/nnopbase/aclnn/aclnn_base.h: aclnnInit, aclnnFinalize.
 *   [types]  hicann/runtime@681ef761 include/external/acl/acl_base_rt.h (file commit b5fbe6e6) lines 140-169:
 *            aclDataType (also GE's DT_* numbers: hicann/ops-math math/cast/tests/assets/golden.py maps 0 float32,
 *            1 float16, 27 bfloat16) and aclFormat. Not HCCL's numbers (HCCL_DATA_TYPE_FP16 3, FP32 4, BFP16 11).
 *   [codes]  hicann/ops-math@c4193324 docs/zh/context/aclnn_return_code.md: the aclnn status codes.
 *   [cast]   hicann/ops-math@c4193324 math/cast/op_api/aclnn_cast.h (file commit 4a799b2f).
 *   [mul]    hicann/ops-math@c4193324 math/mul/op_api/aclnn_mul.h (file commit e5d374fa): aclnnInplaceMuls.
 *   [rt]     Ascend/pytorch third_party/acl/inc/acl/error_codes/rt_error_codes.h (acl_abi.h's "rtcodes"; also
 *            in its copy at commit 1cfc5886): ACL_ERROR_RT_AICORE_EXCEPTION 507015 "aicore exception", what a
 *            stream reports when an operator's task faults.
 * Libraries (hicann/opbase src/nnopbase/CMakeLists.txt: add_library(nnopbase SHARED); ops-math docs/zh/
 * op_api_list.md: libopapi.so up to CANN 8.x, libopapi_math.so in CANN 9). The documented rules the shims check
 * are cited in nnopbase_shim.cpp and opapi_shim.cpp next to the check. */
#ifndef TESSERA_TESTS_SHIMS_ACLNN_ABI_H_
#define TESSERA_TESTS_SHIMS_ACLNN_ABI_H_

#include <stddef.h>
#include <stdint.h>

#include "acl_abi.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef int32_t aclnnStatus; /* [meta] */

/* Opaque handles [meta]. */
typedef struct aclOpExecutor aclOpExecutor;
typedef struct aclTensor aclTensor;
typedef struct aclScalar aclScalar;

/* Status codes [codes]. */
static const aclnnStatus ACLNN_SUCCESS = 0;
static const aclnnStatus ACLNN_ERR_PARAM_NULLPTR = 161001;
static const aclnnStatus ACLNN_ERR_PARAM_INVALID = 161002;
static const aclnnStatus ACLNN_ERR_RUNTIME_ERROR = 361001;
static const aclnnStatus ACLNN_ERR_INNER = 561000;
static const aclnnStatus ACLNN_ERR_INNER_TILING_ERROR = 561002;
static const aclnnStatus ACLNN_ERR_INNER_FIND_KERNEL_ERROR = 561003; /* "the operator binary package may not be
                                                                        installed" */
static const aclnnStatus ACLNN_ERR_INNER_NULLPTR = 561103;
static const aclnnStatus ACLNN_ERR_INNER_OPP_KERNEL_PKG_NOT_FOUND = 561112;

/* [rt] */
static const int ACL_ERROR_RT_AICORE_EXCEPTION = 507015;

/* [types] lines 140-169 */
typedef enum {
  ACL_DT_UNDEFINED = -1,
  ACL_FLOAT = 0,
  ACL_FLOAT16 = 1,
  ACL_INT8 = 2,
  ACL_INT32 = 3,
  ACL_UINT8 = 4,
  ACL_INT16 = 6,
  ACL_UINT16 = 7,
  ACL_UINT32 = 8,
  ACL_INT64 = 9,
  ACL_UINT64 = 10,
  ACL_DOUBLE = 11,
  ACL_BOOL = 12,
  ACL_STRING = 13,
  ACL_COMPLEX64 = 16,
  ACL_COMPLEX128 = 17,
  ACL_BF16 = 27,
  ACL_INT4 = 29,
  ACL_UINT1 = 30,
  ACL_COMPLEX32 = 33,
  ACL_HIFLOAT8 = 34,
  ACL_FLOAT8_E5M2 = 35,
  ACL_FLOAT8_E4M3FN = 36,
  ACL_FLOAT8_E8M0 = 37,
  ACL_FLOAT6_E3M2 = 38,
  ACL_FLOAT6_E2M3 = 39,
  ACL_FLOAT4_E2M1 = 40,
  ACL_FLOAT4_E1M2 = 41,
} aclDataType;

/* [types]; the formats below ND are listed for completeness, the shims take ND only. */
typedef enum {
  ACL_FORMAT_UNDEFINED = -1,
  ACL_FORMAT_NCHW = 0,
  ACL_FORMAT_NHWC = 1,
  ACL_FORMAT_ND = 2,
  ACL_FORMAT_NC1HWC0 = 3,
  ACL_FORMAT_FRACTAL_Z = 4,
  ACL_FORMAT_FRACTAL_NZ = 29,
} aclFormat;

/* libnnopbase.so [meta] / [base] */
ACL_ABI_EXPORT aclTensor* aclCreateTensor(const int64_t* viewDims, uint64_t viewDimsNum, aclDataType dataType,
                                          const int64_t* stride, int64_t offset, aclFormat format,
                                          const int64_t* storageDims, uint64_t storageDimsNum, void* tensorData);
ACL_ABI_EXPORT aclScalar* aclCreateScalar(void* value, aclDataType dataType);
ACL_ABI_EXPORT aclnnStatus aclDestroyTensor(const aclTensor* tensor);
ACL_ABI_EXPORT aclnnStatus aclDestroyScalar(const aclScalar* scalar);
ACL_ABI_EXPORT aclnnStatus aclSetAclOpExecutorRepeatable(aclOpExecutor* executor);
ACL_ABI_EXPORT aclnnStatus aclDestroyAclOpExecutor(aclOpExecutor* executor);
ACL_ABI_EXPORT aclnnStatus aclSetInputTensorAddr(aclOpExecutor* executor, const size_t index, aclTensor* tensor,
                                                 void* addr);
ACL_ABI_EXPORT aclnnStatus aclSetOutputTensorAddr(aclOpExecutor* executor, const size_t index, aclTensor* tensor,
                                                  void* addr);
ACL_ABI_EXPORT aclnnStatus aclnnInit(const char* configPath);
ACL_ABI_EXPORT aclnnStatus aclnnFinalize(void);

/* libopapi.so [cast] / [mul] */
ACL_ABI_EXPORT aclnnStatus aclnnCastGetWorkspaceSize(const aclTensor* self, const aclDataType dtype, aclTensor* out,
                                                     uint64_t* workspaceSize, aclOpExecutor** executor);
ACL_ABI_EXPORT aclnnStatus aclnnCast(void* workspace, uint64_t workspaceSize, aclOpExecutor* executor,
                                     aclrtStream stream);
ACL_ABI_EXPORT aclnnStatus aclnnInplaceMulsGetWorkspaceSize(aclTensor* selfRef, const aclScalar* other,
                                                            uint64_t* workspaceSize, aclOpExecutor** executor);
ACL_ABI_EXPORT aclnnStatus aclnnInplaceMuls(void* workspace, uint64_t workspaceSize, aclOpExecutor* executor,
                                            aclrtStream stream);

#ifdef __cplusplus
}
#endif
#endif /* TESSERA_TESTS_SHIMS_ACLNN_ABI_H_ */
