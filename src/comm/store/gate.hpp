// comm/store/gate: the rendezvous store's defences against hostile or stray connections (internal to
// comm; used by the server in server.cpp).
//
// The gate runs in the server's accept thread. It accepts connections and reads their handshakes
// without blocking, all at once in one poll() loop, so a connection that has not authenticated costs no
// thread: at most StoreLimits::kMaxPending of them wait at once (the oldest is dropped first), each is
// dropped and logged when it sends no valid handshake within StoreLimits::handshake_timeout, a handshake
// announcing more than kMaxHandshake bytes is refused before anything is allocated, a wrong token gets
// kRefused, and a valid one beyond StoreLimits::max_connections gets kBusy with the reason. Only a
// connection that presented the job token reaches the server (`admit`).
#pragma once

#include <functional>
#include <string>

#include "comm/store/store.hpp"

namespace tessera::comm {

struct StoreGateHooks {
  // The authenticated connections being served now (the server reaps finished ones first).
  std::function<int()> open_connections;
  // Takes over an authenticated connection (the server acknowledges it and serves it).
  std::function<void(int fd)> admit;
  // Told of each connection refused for a wrong job token (`peer`: its address), after the refusal is sent.
  std::function<void(const std::string& peer)> refused;
};

// Runs until `wake_fd` becomes readable (the server is stopping) or poll() fails; closes every connection
// still waiting for its handshake on the way out. `listen_fd` is a non-blocking listening socket.
void RunStoreGate(int listen_fd, int wake_fd, const std::string& token, const StoreLimits& limits,
                  const StoreGateHooks& hooks);

}  // namespace tessera::comm
