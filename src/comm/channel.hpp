// comm/channel: a one-way byte stream to one peer, driven without blocking by the exchange engine.
//
// Every collective is a fixed schedule of messages, known to both ends, so channels carry no framing:
// messages follow each other, each padded to a multiple of kChannelAlign bytes so that elements never
// straddle a ring's wrap. Two transports implement it: `shm` (a ring in shared memory, same host) and
// `tcp` (several parallel TCP streams, chunks dealt round-robin across them).
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <utility>

#include "tessera/status.hpp"

namespace tessera::comm {

inline constexpr size_t kChannelAlign = 8;
inline size_t PadToChannel(size_t bytes) { return (bytes + kChannelAlign - 1) & ~(kChannelAlign - 1); }

class SendChannel {
 public:
  virtual ~SendChannel() = default;
  // Copies up to `bytes` from src into the stream without blocking; returns how many were taken
  // (0 when the stream is full). RemoteError when the peer is gone.
  virtual Result<size_t> TrySend(const void* src, size_t bytes) = 0;
  virtual const char* transport() const = 0;
};

class RecvChannel {
 public:
  virtual ~RecvChannel() = default;
  // The readable bytes at the head of the stream (possibly none), without blocking.
  virtual Result<std::pair<const std::byte*, size_t>> Peek() = 0;
  // Releases the first `bytes` of what Peek returned.
  virtual void Consume(size_t bytes) = 0;
  virtual const char* transport() const = 0;
};

}  // namespace tessera::comm
