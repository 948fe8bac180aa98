// comm/transport/tcp: channels over several parallel TCP connections to one peer, for any two hosts.
//
// A pair of ranks shares `streams` connections (both directions use them). The byte stream is cut into
// chunks of `chunk` bytes dealt round-robin over the connections, so a large message moves on all of
// them at once; the kernel's socket buffers pipeline the chunks. The sender writes whichever stream has
// room, each stream's chunks in order, up to one chunk per stream ahead of the first unsent byte (a full
// socket does not hold up the others); the receiver reads whichever stream has data (one poll() over
// them) into that stream's place in a read-ahead window of about `streams` chunks, so a late stream does
// not hold the others' data in the kernel, and hands the bytes out in stream order. Connections open
// with a hello carrying the job token, so a stray process cannot join.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "comm/channel.hpp"

namespace tessera::comm {

struct TcpConnections {
  std::vector<int> fds;  // one per stream, in stream order
  ~TcpConnections();
};

class TcpListener {
 public:
  // Listens on `host` (an address or a name; "0.0.0.0" for all interfaces), on a free port.
  static Result<std::unique_ptr<TcpListener>> Listen(const std::string& host);
  ~TcpListener();
  int port() const { return port_; }
  // Accepts `count` connections with a valid hello; returns them as (from_rank, stream, fd). Hellos are
  // read from all connections at once, without blocking on one: a connection that sends no valid hello
  // within kHelloTimeout (or `timeout`, if shorter), or a wrong token, is dropped and logged and does not
  // count (a stray, a port scanner); at most kMaxPending connections wait for their hello at once.
  struct Incoming {
    int from_rank;
    int stream;
    int fd;
  };
  Result<std::vector<Incoming>> AcceptHellos(int count, const std::string& token, std::chrono::milliseconds timeout);
  static constexpr std::chrono::milliseconds kHelloTimeout{5000};
  static constexpr int kMaxPending = 256;

 private:
  explicit TcpListener(int fd, int port) : fd_(fd), port_(port) {}
  int fd_;
  int port_;
};

// True when `host` resolves (IPv4) to a loopback address (127.0.0.0/8).
bool ResolvesToLoopback(const std::string& host);

// Opens connection `stream` to "host:port" and sends the hello (rank, stream, token).
Result<int> TcpConnect(const std::string& address, int my_rank, int stream, const std::string& token,
                       std::chrono::milliseconds timeout);
// Waits for the acceptor's one-byte acknowledgement of a hello; RemoteError if refused.
Status TcpAwaitAck(int fd, const std::string& address, std::chrono::milliseconds timeout);
Status TcpSendAck(int fd);
// Makes the sockets non-blocking with large buffers and no Nagle delay.
Status TcpTune(int fd);

std::unique_ptr<SendChannel> MakeTcpSender(std::shared_ptr<TcpConnections> conns, size_t chunk);
std::unique_ptr<RecvChannel> MakeTcpReceiver(std::shared_ptr<TcpConnections> conns, size_t chunk);

}  // namespace tessera::comm
