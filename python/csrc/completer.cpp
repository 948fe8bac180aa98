// python/csrc/completer.cpp — the completion thread (completer.hpp).
#include "completer.hpp"

#include <c10/core/DeviceGuard.h>
#include <c10/core/StreamGuard.h>
#include <cxxabi.h>
#include <pthread.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <deque>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

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
  bool done = false;     // the thread has ended
  bool abandon = false;  // DrainAll gave up waiting for it: what it still holds is leaked, never released
  std::chrono::milliseconds timeout{0};
  std::shared_ptr<CommRef> comm;
  std::optional<c10::Stream> idle;
  FILE* trace = nullptr;  // TESSERA_DEVICE_TRACE: when each end was seen and its future completed
  ~State() {
    if (trace != nullptr) std::fclose(trace);
  }
};

namespace {

// Every completer's state while its thread may run, for DrainAll. Leaked on purpose: no static destructor may run
// under a thread that still looks it up at exit. A child made by fork() starts a registry of its own (its copy of the
// parent's has states whose threads it does not have, and a mutex another thread may have held at the fork).
struct Registry {
  std::mutex mu;
  std::vector<std::weak_ptr<Completer::State>> states;
};
std::atomic<Registry*> registry{nullptr};

Registry& Reg() {
  static std::once_flag once;
  std::call_once(once, [] {
    registry.store(new Registry);
    pthread_atfork(nullptr, nullptr, [] { registry.store(new Registry); });
  });
  return *registry.load();
}

// One call: wait for its end, then complete its future (or fail it).
void Turn(Completer::State& st, Item& it) {
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
    return;
  }
  if (!happened) {
    Fail(it, "its end on the device did not come within the process group's timeout");
    return;
  }
  const auto [err, message] = st.comm->Error();
  if (err != tsrSuccess) {
    Fail(it, std::string(tsrGetErrorString(err)) + ": " + message);
    return;
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

// The item is held by a raw pointer and released here, on the normal path only. Dropping the last reference to a
// future or to its tensors can take the GIL (a tensor keeps its Python object alive), and a thread that asks for
// the GIL while Python finalizes is ended with pthread_exit; inside those destructors (noexcept) that unwind calls
// std::terminate. An unwind leaks a raw pointer instead, and so does a thread DrainAll gave up on.
void Loop(Completer::State& st) {
  try {
    c10::DeviceGuard guard(st.idle->device());
    for (;;) {
      Item* it = nullptr;
      {
        std::unique_lock<std::mutex> l(st.mu);
        st.cv.wait(l, [&] { return st.stop || !st.queue.empty(); });
        if (st.queue.empty() || st.abandon) return;
        it = new Item(std::move(st.queue.front()));
        st.queue.pop_front();
      }
      Turn(st, *it);
      bool leak = false;
      {
        std::lock_guard<std::mutex> l(st.mu);
        leak = st.abandon;
      }
      if (!leak) delete it;  // not under st.mu: it may take the GIL, which a caller of Add may hold
    }
  } catch (abi::__forced_unwind&) {
    // Python is finalizing: a thread that asks for the GIL then (a future's Python callback, a tensor's last
    // reference) is ended with pthread_exit, whose unwind must go on; swallowing it aborts the process. DrainAll,
    // at exit before Python finalizes, keeps this thread from getting here.
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
  {
    Registry& reg = Reg();
    std::lock_guard<std::mutex> l(reg.mu);
    auto& r = reg.states;
    r.erase(std::remove_if(r.begin(), r.end(), [](const auto& w) { return w.expired(); }), r.end());
    r.push_back(state_);
  }
  // Detached, owning its state: Stop never waits for it (DrainAll does, at exit); it drains what was queued and ends.
  std::thread([st = state_] {
    struct Ended {  // also on pthread_exit's unwind
      Completer::State& st;
      ~Ended() {
        std::lock_guard<std::mutex> l(st.mu);
        st.done = true;
        st.cv.notify_all();
      }
    } ended{*st};
    Loop(*st);
  }).detach();
}

void Completer::Add(std::shared_ptr<c10::Event> end, c10::intrusive_ptr<c10::ivalue::Future> fut, c10::IValue value,
                    std::string title) {
  {
    std::lock_guard<std::mutex> l(state_->mu);
    state_->queue.push_back({std::move(end), std::move(fut), std::move(value), std::move(title),
                             std::chrono::steady_clock::now() + state_->timeout});
  }
  state_->cv.notify_all();
}

void Completer::Stop() {
  {
    std::lock_guard<std::mutex> l(state_->mu);
    state_->stop = true;
  }
  state_->cv.notify_all();
}

int Completer::DrainAll(std::chrono::milliseconds limit) {
  std::vector<std::shared_ptr<State>> live;
  {
    Registry& reg = Reg();
    std::lock_guard<std::mutex> l(reg.mu);
    for (const auto& w : reg.states)
      if (auto st = w.lock()) live.push_back(std::move(st));
    reg.states.clear();
  }
  for (const auto& st : live) {
    std::lock_guard<std::mutex> l(st->mu);
    st->stop = true;
    st->cv.notify_all();
  }
  const auto deadline = std::chrono::steady_clock::now() + limit;
  int abandoned = 0;
  for (const auto& st : live) {
    std::unique_lock<std::mutex> l(st->mu);
    if (!st->cv.wait_until(l, deadline, [&] { return st->done; })) {
      st->abandon = true;
      ++abandoned;
    }
  }
  return abandoned;
}

}  // namespace tessera_torch
