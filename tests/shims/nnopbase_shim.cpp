// tests/shims/nnopbase_shim: libnnopbase.so, a test-only shim of CANN's operator-API base library (declarations
// and their sources: aclnn_abi.h): tensors, scalars and executors as handles, for the operators of libopapi.so
// (opapi_shim.cpp on the host shims, cuda/opapi_cuda_shim.cu on CUDA; this one source serves both, it touches no
// device memory). Documented rules it keeps:
//   [create]     aclCreateTensor (hicann/opbase docs/zh/api/nnopbase/aclnn/aclCreateTensor.md): returns the tensor
//                or NULL; the shim returns NULL for NULL dims / strides with a non-zero count and negative dims.
//                The data's 32-byte alignment is checked by the operators, where a code can be returned.
//   [repeat]     aclSetAclOpExecutorRepeatable (.../aclSetAclOpExecutorRepeatable.md): called right after phase 1,
//                it lets phase 2 run the executor many times, and the caller must then free it with
//                aclDestroyAclOpExecutor (.../aclDestroyAclOpExecutor.md). Without it the phase-2 call frees the
//                executor, and "the phase-2 call must not be called repeatedly" (ops-math docs/zh/context/
//                two_phase_api.md): the shim refuses a second use with ACLNN_ERR_PARAM_INVALID.
//   [rebind]     aclSetInputTensorAddr / aclSetOutputTensorAddr: a repeatable executor's tensor `index` (Cast: 0 =
//                self / 0 = out; InplaceMuls: 0 = selfRef both ways) reads / writes `addr` from the next run on.
//   [init]       aclnnInit / aclnnFinalize (.../aclnnInit.md, aclnnFinalize.md): each once per process ("repeated
//                calls are not supported"); optional when aclInit is called. A second call: ACLNN_ERR_PARAM_INVALID.
// Codes the docs do not number are the shim's: ACLNN_ERR_PARAM_NULLPTR for NULL handles, ACLNN_ERR_PARAM_INVALID
// for handles that are not live objects. Messages go where aclGetRecentErrMsg finds them (the ACL shim beside it:
// tesseraAclShimSetError) and, with TESSERA_SHIM_VERBOSE=1, to stderr.
#include <cstdio>
#include <cstring>
#include <mutex>
#include <unordered_set>

#include "aclnn_abi.h"
#include "aclnn_shim.hpp"
#include "shim_runtime.hpp"

using tshim::Fmt;
using tshim::aclnn::Executor;
using tshim::aclnn::Scalar;
using tshim::aclnn::Tensor;

extern "C" void tesseraAclShimSetError(const char* msg);  // libascendcl.so (either set)

namespace {

tshim::Handles<Tensor> g_tensors;
tshim::Handles<Scalar> g_scalars;
tshim::Handles<Executor> g_executors;
std::mutex g_mu;
std::unordered_set<const void*> g_spent;  // non-repeatable executors that ran (freed)
bool g_inited = false, g_finalized = false;

aclnnStatus Fail(aclnnStatus code, const std::string& msg) {
  const std::string m = Fmt("%s (aclnnStatus %d)", msg.c_str(), code);
  tesseraAclShimSetError(m.c_str());
  if (tshim::EnvU64("TESSERA_SHIM_VERBOSE", 0)) std::fprintf(stderr, "[nnopbase shim] %s\n", m.c_str());
  return code;
}
void* Fail(const std::string& msg) {
  Fail(ACLNN_ERR_PARAM_INVALID, msg);
  return nullptr;
}

std::shared_ptr<Executor> Live(aclOpExecutor* h, const char* fn, aclnnStatus* code, std::string* why) {
  auto e = h ? g_executors.Get(h) : nullptr;
  if (e) return e;
  *code = h ? ACLNN_ERR_PARAM_INVALID : ACLNN_ERR_PARAM_NULLPTR;
  std::lock_guard<std::mutex> l(g_mu);
  *why = !h                 ? Fmt("%s: executor is NULL", fn)
         : g_spent.count(h) ? Fmt("%s: executor %p already ran and was freed: an executor runs once unless "
                                  "aclSetAclOpExecutorRepeatable is called after phase 1",
                                  fn, static_cast<void*>(h))
                            : Fmt("%s: %p is not a live executor", fn, static_cast<void*>(h));
  return nullptr;
}

aclnnStatus Rebind(aclOpExecutor* executor, size_t index, aclTensor* tensor, void* addr, bool input) {
  const char* fn = input ? "aclSetInputTensorAddr" : "aclSetOutputTensorAddr";
  aclnnStatus code = 0;
  std::string why;
  auto e = Live(executor, fn, &code, &why);
  if (!e) return Fail(code, why);
  std::vector<Tensor>& v = input ? e->in : e->out;
  if (index >= v.size())
    return Fail(ACLNN_ERR_PARAM_INVALID, Fmt("%s: index %zu, %s has %zu %s tensor(s)", fn, index, e->name(), v.size(),
                                             input ? "input" : "output"));
  v[index].data = addr;
  if (e->op == Executor::Op::kInplaceMuls) e->in[0].data = e->out[0].data = addr;  // one tensor, both ways
  if (auto t = tensor ? g_tensors.Get(tensor) : nullptr) t->data = addr;
  return ACLNN_SUCCESS;
}

}  // namespace

extern "C" {

ACL_ABI_EXPORT aclTensor* aclCreateTensor(const int64_t* viewDims, uint64_t viewDimsNum, aclDataType dataType,
                                          const int64_t* stride, int64_t offset, aclFormat format,
                                          const int64_t* storageDims, uint64_t storageDimsNum, void* tensorData) {
  if ((viewDimsNum && (!viewDims || !stride)) || (storageDimsNum && !storageDims))  // [create]
    return static_cast<aclTensor*>(Fail(Fmt("aclCreateTensor: viewDims %p / stride %p / storageDims %p is NULL",
                                            static_cast<const void*>(viewDims), static_cast<const void*>(stride),
                                            static_cast<const void*>(storageDims))));
  auto t = std::make_shared<Tensor>();
  t->view.assign(viewDims, viewDims + viewDimsNum);
  t->stride.assign(stride, stride + viewDimsNum);
  t->storage.assign(storageDims, storageDims + storageDimsNum);
  for (int64_t d : t->view)
    if (d < 0) return static_cast<aclTensor*>(Fail(Fmt("aclCreateTensor: dimension %lld", static_cast<long long>(d))));
  t->offset = offset;
  t->dtype = dataType;
  t->format = format;
  t->data = tensorData;
  return static_cast<aclTensor*>(g_tensors.Add(std::move(t)));
}

ACL_ABI_EXPORT aclnnStatus aclDestroyTensor(const aclTensor* tensor) {
  if (!tensor) return Fail(ACLNN_ERR_PARAM_NULLPTR, "aclDestroyTensor: tensor is NULL");
  if (!g_tensors.Remove(const_cast<aclTensor*>(tensor)))
    return Fail(ACLNN_ERR_PARAM_INVALID,
                Fmt("aclDestroyTensor: %p is not a live tensor", static_cast<const void*>(tensor)));
  return ACLNN_SUCCESS;
}

ACL_ABI_EXPORT aclScalar* aclCreateScalar(void* value, aclDataType dataType) {
  if (!value) return static_cast<aclScalar*>(Fail("aclCreateScalar: value is NULL"));
  auto s = std::make_shared<Scalar>();
  s->dtype = dataType;
  auto get = [value](auto x) {
    std::memcpy(&x, value, sizeof x);
    return static_cast<double>(x);
  };
  switch (dataType) {
    case ACL_FLOAT:
      s->value = get(float{});
      break;
    case ACL_DOUBLE:
      s->value = get(double{});
      break;
    case ACL_INT32:
      s->value = get(int32_t{});
      break;
    case ACL_INT64:
      s->value = get(int64_t{});
      break;
    default:
      return static_cast<aclScalar*>(
          Fail(Fmt("aclCreateScalar: type %d (the shim takes ACL_FLOAT, ACL_DOUBLE, ACL_INT32, ACL_INT64)",
                   static_cast<int>(dataType))));
  }
  return static_cast<aclScalar*>(g_scalars.Add(std::move(s)));
}

ACL_ABI_EXPORT aclnnStatus aclDestroyScalar(const aclScalar* scalar) {
  if (!scalar) return Fail(ACLNN_ERR_PARAM_NULLPTR, "aclDestroyScalar: scalar is NULL");
  if (!g_scalars.Remove(const_cast<aclScalar*>(scalar)))
    return Fail(ACLNN_ERR_PARAM_INVALID,
                Fmt("aclDestroyScalar: %p is not a live scalar", static_cast<const void*>(scalar)));
  return ACLNN_SUCCESS;
}

ACL_ABI_EXPORT aclnnStatus aclSetAclOpExecutorRepeatable(aclOpExecutor* executor) {
  aclnnStatus code = 0;
  std::string why;
  auto e = Live(executor, "aclSetAclOpExecutorRepeatable", &code, &why);
  if (!e) return Fail(code, why);
  e->repeatable = true;  // [repeat]
  return ACLNN_SUCCESS;
}

ACL_ABI_EXPORT aclnnStatus aclDestroyAclOpExecutor(aclOpExecutor* executor) {
  aclnnStatus code = 0;
  std::string why;
  auto e = Live(executor, "aclDestroyAclOpExecutor", &code, &why);
  if (!e) return Fail(code, why);
  g_executors.Remove(executor);  // [repeat]; a queued run holds its own reference
  return ACLNN_SUCCESS;
}

ACL_ABI_EXPORT aclnnStatus aclSetInputTensorAddr(aclOpExecutor* executor, const size_t index, aclTensor* tensor,
                                                 void* addr) {
  return Rebind(executor, index, tensor, addr, true);
}

ACL_ABI_EXPORT aclnnStatus aclSetOutputTensorAddr(aclOpExecutor* executor, const size_t index, aclTensor* tensor,
                                                  void* addr) {
  return Rebind(executor, index, tensor, addr, false);
}

ACL_ABI_EXPORT aclnnStatus aclnnInit(const char*) {
  std::lock_guard<std::mutex> l(g_mu);
  if (g_inited) return Fail(ACLNN_ERR_PARAM_INVALID, "aclnnInit: called twice in one process [init]");
  g_inited = true;
  return ACLNN_SUCCESS;
}

ACL_ABI_EXPORT aclnnStatus aclnnFinalize() {
  std::lock_guard<std::mutex> l(g_mu);
  if (g_finalized) return Fail(ACLNN_ERR_PARAM_INVALID, "aclnnFinalize: called twice in one process [init]");
  g_finalized = true;
  return ACLNN_SUCCESS;
}

// Not CANN APIs: the registry for libopapi.so, and the number of live executors (a leak check for tests).
ACL_ABI_EXPORT const tshim::aclnn::NnopbaseHooks* tesseraNnopbaseShimHooks() {
  static const tshim::aclnn::NnopbaseHooks hooks = {
      tshim::aclnn::kNnopbaseHooksVersion,
      [](const aclTensor* t) { return t ? g_tensors.Get(const_cast<aclTensor*>(t)) : nullptr; },
      [](const aclScalar* s) { return s ? g_scalars.Get(const_cast<aclScalar*>(s)) : nullptr; },
      [](std::shared_ptr<Executor> e) {
        void* h = g_executors.Add(std::move(e));
        std::lock_guard<std::mutex> l(g_mu);
        g_spent.erase(h);  // the address is live again
        return static_cast<aclOpExecutor*>(h);
      },
      [](aclOpExecutor* h, const char* fn, aclnnStatus* code, std::string* why) { return Live(h, fn, code, why); },
      [](aclOpExecutor* h) {
        auto e = g_executors.Get(h);
        if (!e || e->repeatable) return;
        g_executors.Remove(h);
        std::lock_guard<std::mutex> l(g_mu);
        g_spent.insert(h);
      },
  };
  return &hooks;
}

ACL_ABI_EXPORT size_t tesseraNnopbaseShimLiveExecutors() { return g_executors.All().size(); }

}  // extern "C"
