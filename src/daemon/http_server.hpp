// daemon/http_server: the API's HTTP server — cpp-httplib's server with bounds against slow, idle or greedy
// clients (docs/daemon.md "Security model"): one request per connection, read within kRequestReadS seconds
// (head and body together, each read within kReadS), at most kMaxBody bytes of body, kApiThreads connections
// served at once (more wait for a free thread).
#pragma once

#include <httplib.h>

#include <cstddef>

namespace tessera::daemon {

constexpr int kRequestReadS = 10;
constexpr int kReadS = 5;
constexpr int kWriteS = 10;
constexpr size_t kMaxBody = 1 << 20;
constexpr size_t kApiThreads = 32;

// cpp-httplib's server whose connections are read through a stream with one deadline for the whole request,
// one request per connection: neither a slow nor an idle (keep-alive) client holds a worker thread for longer
// than the read bound.
class ApiServer : public httplib::Server {
 private:
  bool process_and_close_socket(socket_t sock) override;
};

}  // namespace tessera::daemon
