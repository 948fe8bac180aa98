// python/csrc/work.cpp — CommRef and Work (the contract is in work.hpp).
#include "work.hpp"

#include <c10/core/impl/VirtualGuardImpl.h>

#include <cstdio>

#include "check.hpp"

namespace tessera_torch {

std::pair<tsrResult_t, std::string> CommRef::Error() {
  std::lock_guard<std::mutex> l(mu);
  if (comm == nullptr) return {tsrSuccess, ""};
  tsrResult_t err = tsrSuccess;
  if (tsrCommGetAsyncError(comm, &err) != tsrSuccess) return {tsrInvalidArgument, "tsrCommGetAsyncError failed"};
  if (err == tsrSuccess) return {err, ""};
  std::string last = tsrGetLastError(comm);
  return {err,
          last.empty() ? "the collective failed in the background (its ranks' own messages name the cause)" : last};
}

bool CommRef::Enter() {
  std::lock_guard<std::mutex> l(mu);
  if (closing || comm == nullptr) return false;
  ++in_flight;
  return true;
}

void CommRef::Leave() {
  std::lock_guard<std::mutex> l(mu);
  if (--in_flight == 0) drained.notify_all();
}

bool CommRef::Closing() {
  std::lock_guard<std::mutex> l(mu);
  return closing;
}

void CommRef::Destroy() {
  std::unique_lock<std::mutex> l(mu);
  closing = true;
  if (comm == nullptr) return;
  if (in_flight > 0) {
    (void)tsrCommAbort(comm);  // safe beside the calls in flight; they fail promptly
    if (!drained.wait_for(l, std::chrono::seconds(60), [&] { return in_flight == 0; })) {
      std::fprintf(stderr,
                   "tessera: %d call(s) still inside the communicator 60 s after destroy_process_group aborted it; "
                   "it is left allocated\n",
                   in_flight);
      comm = nullptr;
      return;
    }
  }
  tsrCommDestroy(comm);
  comm = nullptr;
}

bool Work::isCompleted() { return !end_ || end_->query(); }

bool Work::wait(std::chrono::milliseconds /*timeout*/) {
  if (end_ && !end_->query()) {
    if (host_wait_) {
      future_->wait();  // completed on the host once the end event has happened (Completer)
      TSR_CHECK(!future_->hasError(), future_->tryRetrieveErrorMessage());
    }
    // STREAM WAIT: the caller's current stream waits (after a HOST WAIT the event has happened: no wait)
    end_->block(c10::impl::VirtualGuardImpl(device_.type()).getStream(device_));
  }
  const auto [err, message] = comm_->Error();
  TSR_CHECK(err == tsrSuccess, "tessera: ", profiling_title_, " failed: ", tsrGetErrorString(err), ": ", message);
  return true;
}

}  // namespace tessera_torch
