// comm/store/store: the rendezvous key-value store that the ranks of a job meet at (like c10d's TCPStore).
//
// A StoreServer listens on TCP; `tessera run` starts one per job (or rank 0 does, when TESSERA_STORE
// names this host and nothing listens yet). Every connection must present the job token
// (TESSERA_TOKEN) first; a wrong token is refused with a clear error and the server logs it. Values are
// opaque bytes. Every blocking call takes a timeout and returns Timeout naming the key(s) it waited for;
// a lost connection gives RemoteError. Thread-safe: one client may be used from several threads.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/env.hpp"
#include "tessera/status.hpp"

namespace tessera::comm {

// What a server accepts from its clients. A connection must authenticate (send the handshake with the
// job token) within `handshake_timeout`, or it is dropped and logged; connections that have not yet
// authenticated cost no thread (the accept thread multiplexes them; at most kMaxPending of them, the
// oldest dropped first). At most `max_connections` authenticated connections are served at once (one
// thread each); more are refused with a logged reason and an error naming the limit at the client. Every
// frame is at most kMaxFrame bytes (16 MiB: the store holds small records) and is allocated only as its
// bytes arrive, so a client announcing a huge frame is refused and dropped without the server allocating.
struct StoreLimits {
  static constexpr uint32_t kMaxFrame = 16u << 20;
  static constexpr int kMaxPending = 512;
  // Defaults: the declared ones of TESSERA_TIMEOUT and TESSERA_STORE_MAX_CONNS (common/env_vars.inc).
  std::chrono::milliseconds handshake_timeout = env::DeclaredDuration("TESSERA_TIMEOUT");
  int max_connections = static_cast<int>(env::DeclaredInt("TESSERA_STORE_MAX_CONNS"));
  // handshake_timeout from TESSERA_TIMEOUT, max_connections from TESSERA_STORE_MAX_CONNS (defaults on
  // bad values, with a warning).
  static StoreLimits FromEnv();
};

class StoreServer {
 public:
  // Binds `host:port` (port 0 picks a free one) and serves in background threads until destroyed.
  static Result<std::unique_ptr<StoreServer>> Start(const std::string& host, int port, const std::string& token);
  static Result<std::unique_ptr<StoreServer>> Start(const std::string& host, int port, const std::string& token,
                                                    const StoreLimits& limits);
  virtual ~StoreServer() = default;
  virtual int port() const = 0;
};

// Why the launcher's store (`tessera run`) refuses a token: the one error every store client of a job gives.
inline constexpr char kLauncherTokenMismatch[] = "TESSERA_TOKEN differs from the launcher's";

class StoreClient {
 public:
  // Connects to "host:port", retrying until `timeout` (the server may start a moment after the ranks);
  // errors name the address. Authenticates with `token`; a store that refuses it is InvalidArgument "store at
  // ADDRESS refused the job token: " + `mismatch`, which says whose token differs from whose.
  static Result<std::unique_ptr<StoreClient>> Connect(const std::string& address, const std::string& token,
                                                      std::chrono::milliseconds timeout,
                                                      const std::string& mismatch = kLauncherTokenMismatch);
  virtual ~StoreClient() = default;

  virtual Status Set(const std::string& key, const std::string& value) = 0;
  // Waits until `key` exists, then returns its value.
  virtual Result<std::string> Get(const std::string& key, std::chrono::milliseconds timeout) = 0;
  // Atomically adds `delta` to the integer at `key` (0 if absent) and returns the new value.
  virtual Result<int64_t> Add(const std::string& key, int64_t delta) = 0;
  // Waits until all `keys` exist.
  virtual Status Wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) = 0;
  // Returns once `world_size` callers have entered barrier `name` (each name is used once).
  virtual Status Barrier(const std::string& name, int world_size, std::chrono::milliseconds timeout) = 0;
};

// A view of `base` whose keys (and barrier names) all start with `prefix`: the store of one communicator
// among several of a job (Comm's key namespace). Returns `base` itself when prefix is empty.
std::unique_ptr<StoreClient> PrefixedStore(std::unique_ptr<StoreClient> base, const std::string& prefix);

// "30s", "1500ms", "120s": whole seconds when exact, else milliseconds; the form that env::ParseDuration reads back.
// Used in messages and for the TESSERA_TIMEOUT that the launcher hands to the ranks.
std::string FormatDuration(std::chrono::milliseconds d);

}  // namespace tessera::comm
