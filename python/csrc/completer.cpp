// python/csrc/completer.cpp — the completion thread (completer.hpp).
#include "completer.hpp"

#include <c10/core/DeviceGuard.h>
#include <c10/core/StreamGuard.h>
#include <cxxabi.h>

#include <condition_variable>
#include <cstdio>
#include <deque>
#include <mutex>
#include <optional>
#include <thread>

namespace tessera_torch {

namespace {

struct Item {
  std::shared_ptr<c10::Event> end;
  c10::intrusive_ptr<c10::ivalue::Future> fut;
  c10::IValue value;
  std::string title;
  std::chrono::steady_clock::time_point deadline;
};

double MonotonicUs() {  // the clock of the bridge's own trace rows and of Python's perf_counter
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

void Fail(Item& it, const std::string& why) {
  try {
    it.fut->setError(std::make_exception_ptr(std::runtime_error("tessera: " + it.title + " failed: " + why)));
  } catch (abi::__forced_unwind&) {
    throw;  // the thread is being ended (below): swallowing that unwind would terminate the process
  } catch (...) {
  }
}

}  // namespace

struct Completer::State {
  std::mutex mu;
  std::condition_variable cv;
  std::deque<Item> queue;
  bool stop = false;
  std::chrono::milliseconds timeout{0};
  std::shared_ptr<CommRef> comm;
  std::optional<c10::Stream> idle;
  FILE* trace = nullptr;  // TESSERA_DEVICE_TRACE: when each end was seen and its future completed
  ~State() {
    if (trace != nullptr) std::fclose(trace);
  }
};

namespace {

void Loop(Completer::State& st) {
  try {
    c10::DeviceGuard guard(st.idle->device());
    for (;;) {
      Item it;
      {
        std::unique_lock<std::mutex> l(st.mu);
        st.cv.wait(l, [&] { return st.stop || !st.queue.empty(); });
        if (st.queue.empty()) return;
        it = std::move(st.queue.front());
        st.queue.pop_front();
      }
      bool happened = false;
      try {
        for (int spins = 0; !(happened = it.end->query()); ++spins) {
          if (std::chrono::steady_clock::now() > it.deadline) break;
          if (spins < 200)
            std::this_thread::yield();
          else
            std::this_thread::sleep_for(std::chrono::microseconds(50));
        }
      } catch (const std::exception& e) {
        Fail(it, e.what());
        continue;
      }
      if (!happened) {
        Fail(it, "its end on the device did not come within the process group's timeout");
        continue;
      }
      const auto [err, message] = st.comm->Error();
      if (err != tsrSuccess) {
        Fail(it, std::string(tsrGetErrorString(err)) + ": " + message);
        continue;
      }
      const double seen_us = st.trace != nullptr ? MonotonicUs() : 0;
      try {
        c10::StreamGuard on_idle(*st.idle);
        it.fut->markCompleted(std::move(it.value));
      } catch (const std::exception& e) {
        Fail(it, e.what());
      }
      if (st.trace != nullptr) {
        std::fprintf(st.trace, "%s %.1f %.1f\n", it.title.c_str(), seen_us, MonotonicUs());
        std::fflush(st.trace);
      }
    }
  } catch (abi::__forced_unwind&) {
    // Python is finalizing: a thread that asks for the GIL then (dropping the last reference to a future's tensors
    // does) is ended with pthread_exit, whose unwind must go on; swallowing it aborts the process
    // ("terminate called without an active exception", seen at the exit of an npu DDP job).
    throw;
  } catch (...) {
    // the process is going down (the device context with it)
  }
}

}  // namespace

Completer::Completer(c10::Stream idle, std::chrono::milliseconds timeout, std::shared_ptr<CommRef> comm,
                     const std::string& trace)
    : state_(std::make_shared<State>()) {
  if (!trace.empty() && (state_->trace = std::fopen(trace.c_str(), "a")) != nullptr)
    std::fprintf(state_->trace, "call end_seen_us completed_us\n");
  state_->timeout = timeout * 2 + std::chrono::seconds(5);
  state_->comm = std::move(comm);
  state_->idle = idle;
  // Detached, owning its state: shutdown never waits for it; it drains what was queued and ends.
  std::thread([st = state_] { Loop(*st); }).detach();
}

void Completer::Add(std::shared_ptr<c10::Event> end, c10::intrusive_ptr<c10::ivalue::Future> fut, c10::IValue value,
                    std::string title) {
  {
    std::lock_guard<std::mutex> l(state_->mu);
    state_->queue.push_back({std::move(end), std::move(fut), std::move(value), std::move(title),
                             std::chrono::steady_clock::now() + state_->timeout});
  }
  state_->cv.notify_one();
}

void Completer::Stop() {
  {
    std::lock_guard<std::mutex> l(state_->mu);
    state_->stop = true;
  }
  state_->cv.notify_one();
}

}  // namespace tessera_torch
