// common/net: the TCP socket helpers that the rendezvous store (comm/store) and the TCP transport
// (comm/transport/tcp) share — address parsing, listening, connecting with retries, reading and writing
// exactly N bytes before a deadline on non-blocking sockets, and small socket options.
//
// Nothing here logs or formats a user-facing message: results carry the raw errno / getaddrinfo code
// (SocketError) so that each caller words its own errors, naming what it was doing.
#pragma once

#include <netdb.h>
#include <sys/socket.h>

#include <chrono>
#include <cstddef>
#include <optional>
#include <string>

#include "tessera/status.hpp"

namespace tessera::net {

using Clock = std::chrono::steady_clock;

// now + d, saturating: a timeout of 100 years or more means "no deadline" (Clock::time_point::max()), so
// huge timeouts never overflow. Negative d counts as zero.
Clock::time_point DeadlineAfter(std::chrono::milliseconds d);
// Milliseconds left until `deadline`, for poll(): rounded up, 0 once it has passed, -1 for no deadline.
int PollMs(Clock::time_point deadline);

// "host:port" or "[v6-address]:port": the host (brackets removed; not empty) and the port (an integer in
// 1..65535, as decimal text). nullopt when the text is not of that form.
struct HostPort {
  std::string host;
  std::string port;
};
std::optional<HostPort> SplitHostPort(const std::string& address);

// An error of a socket call: the getaddrinfo code when a name did not resolve (gai != 0), else errno.
struct SocketError {
  int gai = 0;
  int err = 0;
  // gai_strerror or strerror of the error.
  std::string Describe() const;
};

// The outcome of a blocking read/write/wait on a socket.
enum class Io {
  kOk,
  kClosed,   // the peer closed (EOF), or reset the connection (ECONNRESET/EPIPE: *err says which)
  kTimeout,  // the deadline passed
  kWoken,    // `wake_fd` became readable
  kError,    // another error, in *err
};

// Waits until `fd` is ready for `events` (POLLIN/POLLOUT; an error or hang-up counts as ready), the
// deadline passes, or `wake_fd` (if >= 0) becomes readable.
Io WaitReady(int fd, short events, Clock::time_point deadline, int wake_fd, int* err);
// Reads exactly `n` bytes into buf / writes exactly `n` bytes from buf, on a blocking or non-blocking
// socket, before `deadline` (see Io). *err: errno for kError, and for kClosed by a reset (0 for an EOF).
// Writes use MSG_NOSIGNAL: a closed peer is kClosed, never SIGPIPE.
Io ReadFull(int fd, void* buf, size_t n, Clock::time_point deadline, int wake_fd, int* err);
Io WriteFull(int fd, const void* buf, size_t n, Clock::time_point deadline, int wake_fd, int* err);
// An Io outcome other than kOk as a Status about `what`: RemoteError "WHAT: connection closed by the
// peer" for an EOF, Timeout "WHAT: timed out", ErrnoError(what, err) for a reset or another error.
Status IoStatus(Io io, int err, const std::string& what);

// Binds `host`:`port` and listens (backlog 1024), non-blocking and close-on-exec, with SO_REUSEADDR.
// host "" is every interface; port 0 picks a free one. `family` AF_INET, AF_INET6 or AF_UNSPEC (every
// address the name resolves to is tried in turn). Returns the socket and sets *bound_port, or -1 with *e.
int Listen(const std::string& host, int port, int family, int* bound_port, SocketError* e);

// One connection attempt to `ai` that gives up at `deadline`: a connected non-blocking, close-on-exec
// socket, or -1 with *err (ETIMEDOUT when the deadline passed).
int ConnectOnce(const addrinfo* ai, Clock::time_point deadline, int* err);

// How ConnectWithRetry retries: after a failed round over every address `host` resolves to, it sleeps
// `backoff` (doubling each time, up to `max_backoff`) and tries again until the deadline.
struct ConnectRetry {
  int family = AF_UNSPEC;
  std::chrono::milliseconds backoff{10};
  std::chrono::milliseconds max_backoff{500};
  // A name that does not resolve: retried like a refused connection (true), or returned at once (false).
  bool retry_unresolved = true;
};
// Connects to host:port (numeric port), retrying as `r` says until `deadline`: a connected non-blocking,
// close-on-exec socket, or -1 with the last attempt's error in *last (last->gai when the name did not
// resolve). At least one attempt is made even when the deadline has passed.
int ConnectWithRetry(const std::string& host, const std::string& port, const ConnectRetry& r,
                     Clock::time_point deadline, SocketError* last);

// TCP_NODELAY on (no Nagle delay).
void SetNoDelay(int fd);
// O_NONBLOCK on or off; false when fcntl fails (errno set).
bool SetNonBlocking(int fd, bool on);
// "address:port" of the connected peer (numeric, IPv4 or IPv6), "?" when unknown.
std::string PeerName(int fd);

}  // namespace tessera::net
