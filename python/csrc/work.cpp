// python/csrc/work.cpp — CommRef and Work (the contract is in work.hpp).
#include "work.hpp"

#ifdef TESSERA_TORCH_CUDA
#include <ATen/cuda/CUDAContext.h>
#endif

#include "check.hpp"

namespace tessera_torch {

std::pair<tsrResult_t, std::string> CommRef::Error() {
  std::lock_guard<std::mutex> l(mu);
  if (comm == nullptr)
    return {tsrSuccess, ""};
  tsrResult_t err = tsrSuccess;
  if (tsrCommGetAsyncError(comm, &err) != tsrSuccess)
    return {tsrInvalidArgument, "tsrCommGetAsyncError failed"};
  if (err == tsrSuccess)
    return {err, ""};
  std::string last = tsrGetLastError(comm);
  return {err, last.empty() ? "the collective failed in the background (its "
                              "ranks' own messages name the cause)"
                            : last};
}

void CommRef::Destroy() {
  std::lock_guard<std::mutex> l(mu);
  if (comm != nullptr)
    tsrCommDestroy(comm);
  comm = nullptr;
}

bool Work::isCompleted() {
#ifdef TESSERA_TORCH_CUDA
  if (end_ && !end_->query())
    return false;
#endif
  return true;
}

bool Work::wait(std::chrono::milliseconds /*timeout*/) {
#ifdef TESSERA_TORCH_CUDA
  if (end_ && !end_->query()) {
    if (host_wait_) {
      future_->wait(); // completed on the host once the end event has happened
                       // (Completer)
      TSR_CHECK(!future_->hasError(), future_->tryRetrieveErrorMessage());
    }
    end_->block(at::cuda::getCurrentCUDAStream(
        device_index_)); // STREAM WAIT: the caller's stream waits
  }
#endif
  const auto [err, message] = comm_->Error();
  TSR_CHECK(err == tsrSuccess, "tessera: ", profiling_title_,
            " failed: ", tsrGetErrorString(err), ": ", message);
  return true;
}

} // namespace tessera_torch
