// python/csrc/completer.hpp — the completion thread of device calls in a group of several islands (HOST WAIT in
// work.hpp): it completes each call's future on the host once the call's end event has happened, and so keeps the
// caller's streams (CUDA's legacy default stream above all: torch's default stream) from ever waiting for a
// collective still running. Why, on CUDA: a copy to pageable memory on the legacy stream (`t.cpu()`, `.item()`)
// holds up every other thread's kernel launches, copies and event records for as long as it waits
// (bench/gpu/stream_lock_probe.cu, measured on the H200; copies on other streams, to pinned memory, and
// cudaStreamSynchronize/cudaDeviceSynchronize hold nothing). If that copy waited for a collective, the device
// bridge's worker, which queues the collective's copies as the peers' rings free up, would wait for the copy: a
// deadlock. This thread makes no device call but the event query (c10::Event::query: never held) and, when it
// completes a future, the future's own event record on a stream that holds no work, so those events have happened
// when they are recorded. A call that fails (the communicator's asynchronous error) completes its future with that
// error; one whose end does not come within the group's timeout (twice, plus 5 s: Tessera's own timeout raises
// first) with a timeout error. Written on torch's generic device API (c10::Event, c10::Stream, c10::DeviceGuard),
// so it serves any device type with a DeviceGuardImpl that has events.
#pragma once

#include <ATen/core/ivalue.h>
#include <c10/core/Event.h>
#include <c10/core/Stream.h>

#include <chrono>
#include <memory>
#include <string>

#include "work.hpp"

namespace tessera_torch {

class Completer {
 public:
  // `idle`: a stream of this rank's device that holds no work (the futures' events are recorded there);
  // `trace`: a file for TESSERA_DEVICE_TRACE's rows of this rank's completions (empty: none).
  Completer(c10::Stream idle, std::chrono::milliseconds timeout, std::shared_ptr<CommRef> comm,
            const std::string& trace);
  ~Completer() { Stop(); }

  void Add(std::shared_ptr<c10::Event> end, c10::intrusive_ptr<c10::ivalue::Future> fut, c10::IValue value,
           std::string title);
  // Ends the thread once it has drained what was queued (it is detached: shutdown never waits for it, since it
  // may be running a Python callback that needs the GIL the caller holds).
  void Stop();
  // At exit, before Python finalizes (module.cpp registers it with atexit; called without the GIL, which a
  // completion's Python callback or a tensor's last reference may need): stops every completer and waits up to
  // `limit` for each thread to finish what it holds, so that none is still running when Python finalizes (such a
  // thread is ended mid-call, and one ended inside a destructor aborts the process). Returns how many threads
  // were still running at the limit; what they hold is then leaked, never released.
  static int DrainAll(std::chrono::milliseconds limit);

  struct State;

 private:
  std::shared_ptr<State> state_;
};

}  // namespace tessera_torch
