// launch/failure_notice: how the launchers of one job across nodes (--nnodes, a Slurm step) tell each other that
// a rank failed, so that every node stops its ranks after the short grace (--stop-grace) instead of waiting for
// them to time out. The first launcher whose rank fails posts "node rank code what" under one key of the job's
// store; every launcher has a thread that waits for that key and wakes its poll loop (one byte on a pipe).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "comm/store/store.hpp"

namespace tessera::launch {

class FailureNotice {
 public:
  struct Notice {
    int node = 0;
    int rank = 0;
    int code = 1;      // the launcher's exit status for it (the rank's, 128+N for signal N)
    std::string what;  // "rank 3 (b) exited with status 3"
  };
  // Starts the thread that connects to the store at `address` (retrying for up to `connect_timeout`: node 0
  // may start later) and waits for a notice of another node; when one comes it writes `wake_byte` to `wake_fd`.
  // Call with the signals the poll loop handles blocked (the thread inherits the mask).
  FailureNotice(std::string address, std::string token, int node, std::chrono::milliseconds connect_timeout,
                int wake_fd, unsigned char wake_byte);
  // Stops the thread (within about kPoll), after it has delivered a post still pending (bounded by the connect
  // timeout: a node whose rank failed at once exits only once the others can hear of it), and waits at most
  // kPostWait for a post sent on a connection made earlier (a store that no longer answers is not waited for).
  ~FailureNotice();
  FailureNotice(const FailureNotice&) = delete;
  FailureNotice& operator=(const FailureNotice&) = delete;

  // This node's first failure, for the other nodes (sent once the store is reached; the first post wins).
  void Post(int rank, int code, const std::string& what);
  // The other node's notice, once the thread has woken the loop.
  std::optional<Notice> Take();

  static constexpr std::chrono::milliseconds kPoll{200};
  static constexpr const char* kKey = "tessera-run/failed";

 private:
  void Watch();

  const std::string address_, token_;
  const int node_;
  const std::chrono::milliseconds connect_timeout_;
  const int wake_fd_;
  const unsigned char wake_byte_;
  std::atomic<bool> stop_{false};
  // A post sent once connected runs on a thread of its own, detached: a store that stopped answering (this host
  // cut off) must not hold up this node's stop, and the destructor waits for it at most kPostWait.
  struct Sent {
    std::mutex mu;
    std::condition_variable cv;
    bool done = false;
  };
  static constexpr std::chrono::milliseconds kPostWait{2000};
  std::mutex mu_;
  std::shared_ptr<comm::StoreClient> poster_;  // under mu_; connected by the thread
  std::shared_ptr<Sent> sent_;                 // under mu_: the post in flight, if one was sent
  std::optional<std::string> pending_;         // under mu_: a post made before the store was reached
  bool settled_ = false;                       // under mu_: connected (pending_ sent) or given up
  std::condition_variable settled_cv_;
  std::optional<Notice> notice_;  // under mu_
  std::thread thread_;
};

}  // namespace tessera::launch
